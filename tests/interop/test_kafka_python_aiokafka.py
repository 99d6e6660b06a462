"""Acceptance: kafka-python 3.x and aiokafka 0.14 each produce and consume (assign, no group)
10,000 records with keys, headers and timestamps per codec over 3 partitions, byte-identical and
in order; each library also reads what confluent-kafka wrote."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient, NewTopic

RECORDS = 10_000
CROSS_RECORDS_PER_CODEC = 600  # x 5 codecs = 3,000 records written by confluent-kafka
PARTITIONS = 3
BASE_TS = 1_700_000_000_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
DEADLINE_S = 45.0

# (partition, key, value, headers, timestamp_ms); headers are [(str, bytes)]
Record = tuple[int, "bytes | None", "bytes | None", list, int]


def make_records(tag: str, count: int, seed: int = 0) -> list[Record]:
    """Deterministic records: mostly compressible text, some arbitrary binary, an occasional
    null key, tombstone, empty value, repeated/empty/non-ASCII header keys and empty header
    values; timestamps spread out and not monotonic across partitions."""
    rng = random.Random(f"{tag}/{seed}")
    out: list[Record] = []
    for i in range(count):
        partition = i % PARTITIONS
        key = None if i % 97 == 0 else b"key-%s-%d" % (tag.encode(), i)
        if i % 101 == 0 and key is not None:
            value = None  # tombstone
        elif i % 103 == 0:
            value = b""
        elif i % 4 == 0:
            value = rng.randbytes(rng.randrange(1, 600))  # incompressible, every byte value
        else:
            value = (b"%s-value-%08d-" % (tag.encode(), i)) * (1 + i % 7)
        if i % 5 == 0:
            headers = []
        elif i % 5 == 1:
            headers = [("h", b"%d" % i)]
        else:
            headers = [("h", b"%d" % i), ("tag", tag.encode()), ("h", b""),
                       ("\u00fcml\u00e4ut", rng.randbytes(i % 17))]
        ts = BASE_TS + i * 37 - (i % PARTITIONS) * 1_000_000
        out.append((partition, key, value, headers, ts))
    return out


def by_partition(records: list[Record]) -> dict[int, list[tuple]]:
    expected: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
    for partition, key, value, headers, ts in records:
        expected[partition].append((key, value, [(k, bytes(v)) for k, v in headers], ts))
    return expected


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1)])
    futures[name].result(10)


def assert_consumed(got: dict[int, list[tuple]], records: list[Record]) -> None:
    """`got[p]` holds (offset, key, value, headers, timestamp, timestamp_type) in consumption
    order; check offsets 0..n-1 contiguous and every field byte-identical and in order."""
    expected = by_partition(records)
    for p in range(PARTITIONS):
        offsets = [r[0] for r in got[p]]
        assert offsets == list(range(len(expected[p]))), f"partition {p}: offsets not contiguous from 0"
        assert {r[5] for r in got[p]} <= {0}, f"partition {p}: expected CreateTime timestamps"
        actual = [(r[1], r[2], r[3], r[4]) for r in got[p]]
        for i, (a, e) in enumerate(zip(actual, expected[p])):
            assert a == e, f"partition {p} offset {i}: got {a!r}, expected {e!r}"
        assert len(actual) == len(expected[p])


def norm_headers(headers) -> list[tuple[str, bytes]]:
    return [(k, bytes(v) if v is not None else None) for k, v in (headers or [])]


# ----------------------------------------------------------------------------- kafka-python

def kafka_python_produce(bootstrap: str, topic: str, records: list[Record], codec: str) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        linger_ms=5,
        batch_size=64 * 1024,
        acks="all",
        request_timeout_ms=20_000,
    )
    try:
        futures = [
            producer.send(topic, value=value, key=key, headers=headers, partition=partition,
                          timestamp_ms=ts)
            for partition, key, value, headers, ts in records
        ]
        producer.flush(timeout=DEADLINE_S)
        next_offset = {p: 0 for p in range(PARTITIONS)}
        for (partition, *_), fut in zip(records, futures):
            meta = fut.get(timeout=1)  # raises the produce error, if any
            assert (meta.partition, meta.offset) == (partition, next_offset[partition])
            next_offset[partition] += 1
    finally:
        producer.close(timeout=5)


def kafka_python_consume(bootstrap: str, topic: str, count: int) -> dict[int, list[tuple]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        max_poll_records=count,
        fetch_max_wait_ms=100,
        request_timeout_ms=20_000,
    )
    got: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
    received = 0
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + DEADLINE_S
        while received < count and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=500, max_records=count).items():
                assert tp.topic == topic
                for m in msgs:
                    got[tp.partition].append((m.offset, m.key, m.value, norm_headers(m.headers),
                                              m.timestamp, m.timestamp_type))
                    received += 1
    finally:
        consumer.close()
    assert received == count, f"kafka-python consumed {received} of {count} records before the deadline"
    return got


# ----------------------------------------------------------------------------- aiokafka

async def aiokafka_produce(bootstrap: str, topic: str, records: list[Record], codec: str) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        linger_ms=5,
        max_batch_size=64 * 1024,
        acks="all",
        request_timeout_ms=20_000,
    )
    await producer.start()
    try:
        futures = []
        for partition, key, value, headers, ts in records:
            futures.append(await producer.send(topic, value=value, key=key, partition=partition,
                                               timestamp_ms=ts, headers=headers))
        await asyncio.wait_for(producer.flush(), DEADLINE_S)
        metas = await asyncio.wait_for(asyncio.gather(*futures), DEADLINE_S)
        next_offset = {p: 0 for p in range(PARTITIONS)}
        for (partition, *_), meta in zip(records, metas):
            assert (meta.partition, meta.offset) == (partition, next_offset[partition])
            next_offset[partition] += 1
    finally:
        await producer.stop()


async def aiokafka_consume(bootstrap: str, topic: str, count: int) -> dict[int, list[tuple]]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        fetch_max_wait_ms=100,
        request_timeout_ms=20_000,
    )
    await consumer.start()
    got: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
    received = 0
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + DEADLINE_S
        while received < count and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500, max_records=count)
            for tp, msgs in batches.items():
                assert tp.topic == topic
                for m in msgs:
                    got[tp.partition].append((m.offset, m.key, m.value, norm_headers(m.headers),
                                              m.timestamp, m.timestamp_type))
                    received += 1
    finally:
        await consumer.stop()
    assert received == count, f"aiokafka consumed {received} of {count} records before the deadline"
    return got


# ----------------------------------------------------------------------------- round trips

@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip(broker, codec):
    topic = f"kafka-python-{codec}"
    create_topic(broker.bootstrap_servers, topic)
    records = make_records(f"kp-{codec}", RECORDS)
    kafka_python_produce(broker.bootstrap_servers, topic, records, codec)
    got = kafka_python_consume(broker.bootstrap_servers, topic, RECORDS)
    assert_consumed(got, records)


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_round_trip(broker, codec):
    topic = f"aiokafka-{codec}"
    create_topic(broker.bootstrap_servers, topic)
    records = make_records(f"aio-{codec}", RECORDS)

    async def main():
        await aiokafka_produce(broker.bootstrap_servers, topic, records, codec)
        return await aiokafka_consume(broker.bootstrap_servers, topic, RECORDS)

    got = asyncio.run(main())
    assert_consumed(got, records)


# ----------------------------------------------------------------------------- cross-reads

def confluent_write_all_codecs(bootstrap: str, topic: str) -> list[Record]:
    """One idempotent confluent-kafka producer per codec, in turn, so the topic holds batches of
    every codec (and several producer ids) interleaved on each partition."""
    create_topic(bootstrap, topic)
    written: list[Record] = []
    for n, codec in enumerate(CODECS):
        records = make_records(f"cf-{codec}", CROSS_RECORDS_PER_CODEC, seed=n)
        producer = ConfluentProducer({
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": 5,
        })
        errors = []

        def on_delivery(err, msg, errors=errors):
            if err is not None:
                errors.append(err)

        for partition, key, value, headers, ts in records:
            producer.produce(topic, value=value, key=key, partition=partition, headers=headers or None,
                             timestamp=ts, on_delivery=on_delivery)
        assert producer.flush(30) == 0
        assert errors == []
        written.extend(records)
    return written


def test_kafka_python_reads_confluent_written_topic(broker):
    topic = "from-confluent-to-kafka-python"
    records = confluent_write_all_codecs(broker.bootstrap_servers, topic)
    got = kafka_python_consume(broker.bootstrap_servers, topic, len(records))
    assert_consumed(got, records)


def test_aiokafka_reads_confluent_written_topic(broker):
    topic = "from-confluent-to-aiokafka"
    records = confluent_write_all_codecs(broker.bootstrap_servers, topic)
    got = asyncio.run(aiokafka_consume(broker.bootstrap_servers, topic, len(records)))
    assert_consumed(got, records)
