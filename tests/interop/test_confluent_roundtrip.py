"""Acceptance 1: confluent-kafka's idempotent Producer writes 100,000 records per codec over 3
partitions; a confluent-kafka Consumer (assign, no commits) reads every record back
byte-identical and in order per partition."""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

RECORDS = 100_000
PARTITIONS = 3
BASE_TS = 1_700_000_000_000


def expected_records(codec: str):
    for i in range(RECORDS):
        key = b"key-%d" % i if i % 7 else None
        value = (b"%s-value-%08d-" % (codec.encode(), i)) * (1 + i % 5)
        headers = [("h", b"%d" % i), ("codec", codec.encode())] if i % 3 else []
        yield i % PARTITIONS, key, value, headers, BASE_TS + i


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1)])
    futures[name].result(10)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_idempotent_producer_and_consumer_round_trip(broker, codec):
    topic = f"roundtrip-{codec}"
    create_topic(broker.bootstrap_servers, topic)
    producer = Producer({
        "bootstrap.servers": broker.bootstrap_servers,
        "enable.idempotence": True,
        "acks": "all",
        "compression.type": codec,
        "linger.ms": 5,
    })
    delivered = []
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered.append(msg.offset())

    for partition, key, value, headers, ts in expected_records(codec):
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition, headers=headers or None,
                                 timestamp=ts, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    assert errors == []
    assert len(delivered) == RECORDS

    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap_servers,
        "group.id": f"reader-{codec}",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
    })
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    received = 0
    import time
    deadline = time.monotonic() + 90
    while received < RECORDS and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=10_000, timeout=1.0):
            assert msg.error() is None, msg.error()
            got[msg.partition()].append(
                (msg.offset(), msg.key(), msg.value(), msg.headers() or [], msg.timestamp()[1])
            )
            received += 1
    consumer.close()
    assert received == RECORDS

    expected: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    for partition, key, value, headers, ts in expected_records(codec):
        expected[partition].append((key, value, headers, ts))
    for p in range(PARTITIONS):
        offsets = [r[0] for r in got[p]]
        assert offsets == list(range(len(expected[p]))), f"partition {p} offsets not contiguous from 0"
        assert [(r[1], r[2], r[3], r[4]) for r in got[p]] == expected[p]
