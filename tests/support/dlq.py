"""Helpers for the dead-letter queue tests: confluent-kafka share consumers that acknowledge by a
rule, producing with headers, reading a topic back whole, and hand-made dead letters (as a broker,
quafka's or Apache Kafka's, writes them) for the tools' tests."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition

from quafka.client import Admin, PartitionReader
from quafka.protocol import dead_letter_headers as h

DLQ = "dlq.g"  # the tools' tests' DLQ topic
DIED_AT = 1_700_000_000_123  # 2023-11-14T22:13:20.123Z: the timestamp of their dead letters

DLQ_TOPIC_CONFIGS = {"errors.deadletterqueue.group.enable": "true"}


def share_consumer(bootstrap: str, group: str, **extra) -> ShareConsumer:
    return ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit",
                          "log_level": 3, **extra})


def produce(bootstrap: str, topic: str, records, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 3})
    for key, value, headers in records:
        producer.produce(topic, key=key, value=value, headers=headers, partition=partition)
    assert producer.flush(10) == 0


def read_all(bootstrap: str, topic: str, partitions=(0,), *, expect: int, timeout_s: float = 15.0) -> list:
    """Every record of the topic's partitions once `expect` are there (and no more arrive)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "log_level": 3})
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    got = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < expect and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg)
        for _ in range(3):  # nothing more than expected
            msg = consumer.poll(0.1)
            if msg is not None and not msg.error():
                got.append(msg)
    finally:
        consumer.close()
    assert len(got) == expect, f"{len(got)} records in {topic}, expected {expect}"
    return got


def headers_of(msg) -> dict[str, str]:
    return {k: (v or b"").decode() for k, v in (msg.headers() or [])}


def consume_and_ack(consumer: ShareConsumer, count: int, ack, timeout_s: float = 15.0) -> list:
    """Poll until `count` deliveries were acknowledged by `ack(msg)`; commit each poll's acks."""
    seen = []
    deadline = time.monotonic() + timeout_s
    while len(seen) < count and time.monotonic() < deadline:
        msgs = [m for m in consumer.poll(0.5) if m.error() is None]
        for msg in msgs:
            consumer.acknowledge(msg, ack(msg))
            seen.append(msg)
        if msgs:
            consumer.commit_sync()
    assert len(seen) >= count, f"only {len(seen)} deliveries of {count}"
    return seen


def produce_messages(bootstrap: str, messages: list[tuple]) -> list[tuple[str, int, int]]:
    """Produce (topic, partition, key, value, headers[, timestamp]) in order, idempotently;
    (topic, partition, offset) of each."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    delivered: list = [None] * len(messages)

    def report(i):
        def on_delivery(err, msg):
            assert err is None, err
            delivered[i] = (msg.topic(), msg.partition(), msg.offset())
        return on_delivery

    for i, (topic, partition, key, value, headers, *ts) in enumerate(messages):
        producer.produce(topic, value=value, key=key, partition=partition, headers=headers,
                         timestamp=ts[0] if ts else 0, on_delivery=report(i))
    assert producer.flush(10) == 0
    return delivered


def letter(partition, source, group="g", count=5, message=h.MESSAGE_DELIVERY_COUNT_EXCEEDED, reason=None,
           key=None, value=None):
    """A dead letter for DLQ partition ``partition`` standing for ``source`` (topic, partition,
    offset), as a message for `produce_messages`; without ``reason`` it is as Apache Kafka writes it."""
    topic, src_partition, offset = source
    headers = [(h.HEADER_TOPIC, topic.encode()), (h.HEADER_PARTITION, str(src_partition).encode()),
               (h.HEADER_OFFSET, str(offset).encode()), (h.HEADER_GROUP, group.encode()),
               (h.HEADER_DELIVERY_COUNT, str(count).encode()), (h.HEADER_MESSAGE, message.encode())]
    if reason is not None:
        headers.append((h.HEADER_REASON, reason.encode()))
    return (DLQ, partition, key, value, headers, DIED_AT)


def read_topic(bootstrap: str, topic: str) -> list:
    """Every record of every partition of ``topic``, by partition and offset (quafka's reader)."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        partitions = sorted(admin.describe_topics([topic])[topic].partitions)
    with PartitionReader({"bootstrap.servers": bootstrap}) as reader:
        return [r for p in partitions for r in reader.read(topic, p, 0)]
