"""Child process for test_dead_letters_crash.py: an embedded quafka broker on DATA_DIR whose
dead-letter writer stops at one point, so that the test can SIGKILL the process exactly there.

    python _dlq_broker_child.py DATA_DIR MODE

MODE "before-write": the DLQ write never starts (the records are durably ARCHIVING, nothing is in
the DLQ); "after-write": the DLQ records are appended and fsynced, and the ARCHIVED state is never
written. Prints {"bootstrap": "host:port"} when serving, then {"stalled": [[first, last], ...]} each time
a DLQ write reaches the stop (flushed before the test acts on it).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading


def main() -> None:
    from quafka.broker.server import dead_letter_writer
    from quafka.broker.server.embedded import EmbeddedBroker

    data_dir, mode = sys.argv[1], sys.argv[2]
    original = dead_letter_writer.DeadLetterWriter.write

    async def stalled(self, ctx, writes):
        if mode == "after-write":
            await original(self, ctx, writes)
        ranges = [[w.first_offset, w.last_offset] for w in writes]
        sys.stdout.write(json.dumps({"stalled": ranges}) + "\n")
        sys.stdout.flush()
        await asyncio.Event().wait()  # until the SIGKILL

    dead_letter_writer.DeadLetterWriter.write = stalled
    broker = EmbeddedBroker(data_dir).start()
    sys.stdout.write(json.dumps({"bootstrap": broker.bootstrap_servers}) + "\n")
    sys.stdout.flush()
    threading.Event().wait()


if __name__ == "__main__":
    main()
