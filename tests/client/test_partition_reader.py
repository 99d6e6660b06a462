"""PartitionReader and AsyncPartitionReader against a real broker, on records produced by
confluent-kafka's Producer in every codec."""

from __future__ import annotations

import asyncio
import functools

import pytest
from support import wait_until

from quafka import EmbeddedBroker
from quafka.client import (
    TIMESTAMP_CREATE_TIME,
    AsyncPartitionReader,
    ConfigException,
    IllegalStateException,
    KafkaException,
    PartitionReader,
    Record,
)
from quafka.protocol.errors import ErrorCode

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3
PER_PARTITION = 40
BASE_TIMESTAMP_MS = 1_700_000_000_000


def _produce(bootstrap: str, topic: str, codec: str, messages: list[tuple[int, bytes | None, bytes | None, list, int]],
             ) -> list[tuple[int, int, bytes | None, bytes | None, list, int]]:
    """Produce (partition, key, value, headers, timestamp) messages; return what was delivered as
    (partition, offset, key, value, headers, timestamp)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20,
                         "enable.idempotence": True})
    delivered = []

    def on_delivery(headers, err, msg):
        assert err is None, err
        kind, ts = msg.timestamp()
        assert kind == 1  # TIMESTAMP_CREATE_TIME in confluent-kafka's numbering
        # delivery reports carry no headers: keep the ones that were produced
        delivered.append((msg.partition(), msg.offset(), msg.key(), msg.value(), headers, ts))

    for partition, key, value, headers, timestamp in messages:
        producer.produce(topic, value=value, key=key, partition=partition, headers=headers, timestamp=timestamp,
                         on_delivery=functools.partial(on_delivery, headers))
    assert producer.flush(10) == 0
    return delivered


def _messages(tag: str, partitions: int = PARTITIONS, count: int = PER_PARTITION) -> list:
    out = []
    for partition in range(partitions):
        for i in range(count):
            key = None if i % 7 == 3 else f"{tag}-key-{partition}-{i}".encode()
            value = None if i % 11 == 5 else (f"{tag}-value-{partition}-{i}-".encode() * (1 + i % 5))
            headers = [] if i % 3 == 0 else [("trace", f"t{i}".encode()), ("empty", None), ("trace", b"\x00\xff")]
            out.append((partition, key, value, headers, BASE_TIMESTAMP_MS + partition * 1000 + i))
    return out


@pytest.fixture(scope="module")
def produced():
    """One broker; a 3-partition topic per codec, produced with confluent-kafka. Yields
    (broker, {codec: {partition: [(offset, key, value, headers, timestamp)]}})."""
    from confluent_kafka.admin import AdminClient, NewTopic

    with EmbeddedBroker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        for future in admin.create_topics([NewTopic(f"codec-{c}", PARTITIONS, 1) for c in CODECS]).values():
            future.result(10)
        del admin
        expected = {}
        for codec in CODECS:
            delivered = _produce(broker.bootstrap_servers, f"codec-{codec}", codec, _messages(codec))
            by_partition = {p: [] for p in range(PARTITIONS)}
            for partition, offset, key, value, headers, ts in sorted(delivered, key=lambda d: (d[0], d[1])):
                by_partition[partition].append((offset, key, value, headers, ts))
            expected[codec] = by_partition
        yield broker, expected


def _as_tuples(records: list[Record]) -> list[tuple]:
    return [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in records]


@pytest.mark.parametrize("codec", CODECS)
def test_reader_returns_exactly_what_confluent_kafka_produced_in_every_codec(produced, codec):
    broker, expected = produced
    with PartitionReader({"bootstrap.servers": broker.bootstrap_servers, "client.id": "reader-test"}) as reader:
        for partition in range(PARTITIONS):
            records = list(reader.read(f"codec-{codec}", partition, 0))
            assert _as_tuples(records) == expected[codec][partition]
            assert [r.offset for r in records] == list(range(PER_PARTITION))
            assert all(r.topic == f"codec-{codec}" and r.partition == partition for r in records)
            assert all(r.timestamp_type == TIMESTAMP_CREATE_TIME and r.leader_epoch >= 0 for r in records)


def test_end_offset_is_exclusive_and_start_offset_may_fall_inside_a_batch(produced):
    broker, expected = produced
    with PartitionReader({"bootstrap.servers": broker.bootstrap_servers}) as reader:
        records = list(reader.read("codec-lz4", 1, 5, 12))
        assert _as_tuples(records) == expected["lz4"][1][5:12]
        assert list(reader.read("codec-lz4", 1, 12, 12)) == []
        assert list(reader.read("codec-lz4", 1, PER_PARTITION)) == []  # start at the high watermark


@pytest.mark.parametrize("codec", CODECS)
def test_read_raw_hands_the_record_batches_and_the_offsets_they_cover(produced, codec):
    """read_raw (the Spark readers decode in bulk from it): per Fetch response the complete batches
    as sent and (first, last) of the read they cover; decoded within those offsets they are the
    records read() gives — a start inside a batch and an exclusive end alike."""
    from quafka.client import AcquiredBatches

    broker, expected = produced
    topic = f"codec-{codec}"
    with PartitionReader({"bootstrap.servers": broker.bootstrap_servers, "max.partition.fetch.bytes": 300}) as reader:
        for start, end in ((0, None), (5, 12), (3, PER_PARTITION)):
            chunks = list(reader.read_raw(topic, 1, start, end))
            spans = [(first, last) for _, first, last in chunks]
            stop = PER_PARTITION if end is None else end
            assert spans[0][0] == start and spans[-1][1] == stop - 1
            assert all(a[1] + 1 == b[0] for a, b in zip(spans, spans[1:]))  # contiguous, no offset twice
            records = [r for data, first, last in chunks for r in AcquiredBatches(topic, 1, data, [(first, last, 1)]).records()]
            assert _as_tuples(records) == expected[codec][1][start:stop]
        assert list(reader.read_raw(topic, 1, 12, 12)) == []


def test_small_max_bytes_reads_everything_in_several_fetches(produced):
    broker, expected = produced
    with PartitionReader({"bootstrap.servers": broker.bootstrap_servers, "max.partition.fetch.bytes": 64}) as reader:
        assert _as_tuples(list(reader.read("codec-none", 2, 0))) == expected["none"][2]
        assert _as_tuples(list(reader.read("codec-zstd", 2, 3, max_bytes=200))) == expected["zstd"][2][3:]


def test_a_sync_read_may_be_abandoned_midway_and_the_reader_reused(produced):
    broker, expected = produced
    with PartitionReader({"bootstrap.servers": broker.bootstrap_servers}) as reader:
        iterator = reader.read("codec-gzip", 0, 0)
        assert next(iterator).offset == 0
        iterator.close()
        assert len(list(reader.read("codec-gzip", 0, 0))) == PER_PARTITION
    with pytest.raises(IllegalStateException, match="closed"):
        reader.read("codec-gzip", 0, 0)


def test_an_offset_beyond_the_log_raises_offset_out_of_range(produced):
    broker, _ = produced
    with PartitionReader({"bootstrap.servers": broker.bootstrap_servers}) as reader:
        with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE") as info:
            list(reader.read("codec-none", 0, PER_PARTITION + 5))
        assert info.value.code == ErrorCode.offset_out_of_range and not info.value.retriable


def test_an_offset_below_the_log_start_raises_offset_out_of_range(broker, create_topic):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    create_topic(broker.bootstrap_servers, "trimmed")
    _produce(broker.bootstrap_servers, "trimmed", "none", _messages("t", 1, 10))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    [future] = admin.delete_records([TopicPartition("trimmed", 0, 4)]).values()
    assert future.result(10).low_watermark == 4
    del admin
    with PartitionReader({"bootstrap.servers": broker.bootstrap_servers}) as reader:
        with pytest.raises(KafkaException, match="trimmed-0 at offset 2: OFFSET_OUT_OF_RANGE") as info:
            list(reader.read("trimmed", 0, 2))
        assert info.value.code == ErrorCode.offset_out_of_range
        assert [r.offset for r in reader.read("trimmed", 0, 4)] == list(range(4, 10))


def test_a_missing_topic_or_partition_is_named(produced):
    broker, _ = produced
    with PartitionReader({"bootstrap.servers": broker.bootstrap_servers}) as reader:
        with pytest.raises(KafkaException, match="'no-such-topic' does not exist"):
            list(reader.read("no-such-topic", 0, 0))
        with pytest.raises(KafkaException, match="no partition 7"):
            list(reader.read("codec-none", 7, 0))


@pytest.mark.parametrize("codec", ["snappy", "zstd"])
def test_async_reader_returns_the_same_records(produced, codec):
    broker, expected = produced

    async def main():
        async with AsyncPartitionReader({"bootstrap.servers": broker.bootstrap_servers}) as reader:
            for partition in range(PARTITIONS):
                records = [r async for r in reader.read(f"codec-{codec}", partition, 0)]
                assert _as_tuples(records) == expected[codec][partition]
            bounded = [r async for r in reader.read(f"codec-{codec}", 0, 10, 20)]
            assert _as_tuples(bounded) == expected[codec][0][10:20]

    asyncio.run(main())


def test_async_reader_waits_for_an_end_offset_beyond_the_high_watermark(broker, create_topic):
    create_topic(broker.bootstrap_servers, "growing")
    _produce(broker.bootstrap_servers, "growing", "none", _messages("a", 1, 3))

    async def main():
        async with AsyncPartitionReader({"bootstrap.servers": broker.bootstrap_servers}) as reader:
            reading = asyncio.ensure_future(_collect(reader.read("growing", 0, 1, 5)))
            await asyncio.to_thread(_produce, broker.bootstrap_servers, "growing", "gzip", _messages("b", 1, 4))
            return await asyncio.wait_for(reading, 10)

    async def _collect(agen):
        return [r async for r in agen]

    assert [r.offset for r in asyncio.run(main())] == [1, 2, 3, 4]


def test_unknown_config_key_is_named_with_the_allowed_keys():
    with pytest.raises(ConfigException, match=r"unknown PartitionReader configuration key 'group.id'.*"
                                              r"allowed keys: bootstrap.servers, check.crcs") as info:
        PartitionReader({"bootstrap.servers": "127.0.0.1:9092", "group.id": "g"})
    assert info.value.key == "group.id"


def test_bad_config_values_and_a_missing_bootstrap_are_named():
    with pytest.raises(ConfigException, match="check.crcs='maybe' is not a boolean") as info:
        AsyncPartitionReader({"bootstrap.servers": "h:1", "check.crcs": "maybe"})
    assert info.value.key == "check.crcs"
    with pytest.raises(ConfigException, match="fetch.max.bytes=0 is below the minimum of 1"):
        AsyncPartitionReader({"bootstrap.servers": "h:1", "fetch.max.bytes": 0})
    with pytest.raises(ConfigException, match="needs 'bootstrap.servers'"):
        AsyncPartitionReader({})


def test_a_recreated_topic_is_found_again_through_a_metadata_refresh(broker, create_topic):
    from confluent_kafka.admin import AdminClient

    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "recreated")
    _produce(bootstrap, "recreated", "none", _messages("old", 1, 2))
    with PartitionReader({"bootstrap.servers": bootstrap}) as reader:
        assert [r.value for r in reader.read("recreated", 0, 0)][0].startswith(b"old")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics(["recreated"])["recreated"].result(10)
        del admin
        wait_until(lambda: _try_create(create_topic, bootstrap, "recreated"), message="topic recreated")
        _produce(bootstrap, "recreated", "none", _messages("new", 1, 3))
        # the reader still holds the old topic id: UNKNOWN_TOPIC_ID, refresh, retry
        assert [r.value[:3] for r in reader.read("recreated", 0, 0)] == [b"new"] * 3


def _try_create(create_topic, bootstrap: str, name: str) -> bool:
    try:
        create_topic(bootstrap, name)
        return True
    except Exception:
        return False
