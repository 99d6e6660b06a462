"""Reading a topic to its end with confluent-kafka's Consumer (tests only): what a reader at
`read_committed` or `read_uncommitted` gets, for tests of transactions and compaction."""

from __future__ import annotations

import time
import uuid

EOF_CODE = -191  # KafkaError._PARTITION_EOF: the end of a partition (the LSO at read_committed)


def read_to_end(bootstrap: str, topic: str, *, partitions: int = 1, isolation: str = "read_uncommitted",
                expect: int = 0, timeout_s: float = 30.0, partial_ok: bool = False) -> list:
    """The messages of every partition of `topic` from offset 0, once at least `expect` were read
    and every partition reached its end. Any other consumer error fails the test; so does the
    timeout, unless `partial_ok` (then what was read so far is returned)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": isolation,
                         "log_level": 3})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    messages: list = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if len(messages) >= expect and len(at_end) == partitions:
                return messages
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() != EOF_CODE:
                    raise AssertionError(f"reading {topic} at {isolation}: {m.error()}")
                at_end.add(m.partition())
                continue
            at_end.discard(m.partition())
            messages.append(m)
    finally:
        consumer.close()
    if partial_ok:
        return messages
    raise AssertionError(f"{topic} at {isolation}: {len(messages)} messages and {len(at_end)} of {partitions} "
                         f"partitions at their end after {timeout_s} s (expected at least {expect})")
