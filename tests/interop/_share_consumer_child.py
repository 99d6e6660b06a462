"""Child process for test_share_consumer.py: a confluent-kafka ShareConsumer in explicit mode that
polls until one poll returns records, prints their offsets and delivery counts as one JSON line,
then blocks forever without acknowledging anything (the test SIGKILLs it).

    python _share_consumer_child.py BOOTSTRAP GROUP TOPIC
"""

from __future__ import annotations

import json
import sys
import threading
import time

from confluent_kafka import ShareConsumer


def main() -> None:
    bootstrap, group, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit", "log_level": 3})
    consumer.subscribe([topic])
    held: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    while not held and time.monotonic() < deadline:
        for msg in consumer.poll(0.2):
            if msg.error() is None:
                held.append((msg.offset(), msg.delivery_count()))
    print(json.dumps({"held": held}), flush=True)
    threading.Event().wait()  # hold the records (and the connection) until killed


if __name__ == "__main__":
    main()
