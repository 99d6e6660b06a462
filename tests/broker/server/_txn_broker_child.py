"""Child process for test_transactions_recovery.py: an embedded quafka broker on DATA_DIR that
accepts transactional batches (support.txn.AcceptingVerifier stands in for the coordinator) and
writes markers on command, so that the test can SIGKILL it with transactions in every state.

    python _txn_broker_child.py DATA_DIR [CONFIG_JSON]

Prints {"bootstrap": "host:port"} when serving; then reads one JSON command per stdin line,
{"producer_id", "epoch", "committed", "partitions": [[topic, partition], ...]}, writes the markers
(write_txn_markers) and prints {"written": {"topic-partition": error code}}.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    from support.txn import install_verifier, write_markers

    from quafka.broker.server.embedded import EmbeddedBroker

    config = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None  # broker config overrides
    broker = EmbeddedBroker(sys.argv[1], config=config).start()
    install_verifier(broker)
    sys.stdout.write(json.dumps({"bootstrap": broker.bootstrap_servers}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        cmd = json.loads(line)
        written = write_markers(broker, cmd["producer_id"], cmd["epoch"], cmd["committed"],
                                [tuple(tp) for tp in cmd["partitions"]])
        sys.stdout.write(json.dumps({"written": {f"{t}-{p}": int(e) for (t, p), e in written.items()}}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
