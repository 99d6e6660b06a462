"""Child process for test_share_membership.py: one confluent-kafka ShareConsumer that subscribes and
polls in a loop until it is killed (librdkafka heartbeats at the interval the broker returns). The
test finds it in ShareGroupDescribe by its client id, then SIGSTOPs it.

    python _share_member_child.py BOOTSTRAP GROUP TOPIC CLIENT_ID
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import ShareConsumer


def main() -> None:
    bootstrap, group, topic, client_id = sys.argv[1:5]
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                              "log_level": 3})
    consumer.subscribe([topic])
    while True:
        try:
            consumer.poll(0.1)
        except Exception as exc:  # noqa: BLE001 - keep heartbeating; the test reads the group, not this
            print(f"poll: {exc!r}", file=sys.stderr, flush=True)
            time.sleep(0.1)


if __name__ == "__main__":
    main()
