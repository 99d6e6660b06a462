"""Helpers for the dead-letter queue tests: confluent-kafka share consumers that acknowledge by a
rule, producing with headers, and reading a topic back whole."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition

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
