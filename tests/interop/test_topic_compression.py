"""Topic and broker `compression.type` (gzip/snappy/lz4/zstd/uncompressed/producer) with the
KIP-390 levels: confluent-kafka's AdminClient creates and alters such topics; batches a producer
sends with another codec are stored with the topic's (read back from the segment file) and every
client reads the exact records: confluent-kafka, kafka-python, aiokafka, and share consumers
(confluent-kafka's and quafka's). Kafka: LogValidator.validateMessagesAndAssignOffsetsCompressed."""

from __future__ import annotations

import asyncio
import glob
import os
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType,
)

from support import set_group_configs
from quafka import EmbeddedBroker
from quafka.client import ShareConsumer as QuafkaShareConsumer
from quafka.protocol import record_batch as rb

TYPES = ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]
CODEC_ID = {"uncompressed": 0, "none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
BASE_TS = 1_700_000_000_000
DEADLINE_S = 10.0


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b


def admin_for(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def create(broker, topic: str, configs: dict[str, str]) -> None:
    admin = admin_for(broker)  # kept alive until the result is in
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)], operation_timeout=10)[topic].result(10)


def describe(broker, topic: str) -> dict[str, str]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = admin_for(broker)
    return {k: v.value for k, v in admin.describe_configs([resource])[resource].result(10).items()}


def stored_batches(broker, topic: str, partition: int = 0) -> list[rb.BatchHeader]:
    """The batch headers in the partition's segment files, as written to disk."""
    headers = []
    for path in sorted(glob.glob(os.path.join(broker.data_dir, f"{topic}-{partition}", "*.log"))):
        with open(path, "rb") as f:
            data = f.read()
        for pos, header in rb.iter_headers(data):
            assert rb.batch_crc_ok(data, pos, header)
            headers.append(header)
    return headers


def records(tag: str, count: int) -> list[tuple]:
    """(key, value, headers, timestamp): compressible text, a null key, a tombstone, headers."""
    return [(None if i % 11 == 0 else b"%s-key-%d" % (tag.encode(), i),
             None if i % 13 == 5 else b"%s-value-%06d-" % (tag.encode(), i) * (1 + i % 9),
             [("n", b"%d" % i), ("tag", tag.encode())] if i % 2 else [], BASE_TS + 3 * i) for i in range(count)]


def produce(broker, topic: str, recs: list[tuple], codec: str, **config) -> list:
    """confluent-kafka's producer with `codec` (idempotent only when asked: librdkafka spends half
    a second acquiring a producer id); the delivery errors."""
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "compression.type": codec,
                         "linger.ms": 20, "log_level": 3, **config})
    errors = []
    for key, value, headers, ts in recs:
        producer.produce(topic, key=key, value=value, headers=headers or None, timestamp=ts, partition=0,
                         on_delivery=lambda err, _msg: err is not None and errors.append(err))
    assert producer.flush(DEADLINE_S) == 0
    return errors


def expected(recs: list[tuple]) -> list[tuple]:
    return [(offset, key, value, headers, ts) for offset, (key, value, headers, ts) in enumerate(recs)]


def confluent_read(broker, topic: str, count: int) -> list[tuple]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": f"read-{topic}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 20, "log_level": 3})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count and time.monotonic() < deadline:
        for m in consumer.consume(num_messages=count, timeout=0.5):
            assert m.error() is None, m.error()
            got.append((m.offset(), m.key(), m.value(), [(k, bytes(v)) for k, v in m.headers() or []],
                        m.timestamp()[1]))
    consumer.close()
    return got


def kafka_python_read(broker, topic: str, count: int) -> list[tuple]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, group_id=None, enable_auto_commit=False,
                             fetch_max_wait_ms=100, request_timeout_ms=20_000)
    tp = KTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=500, max_records=count).values():
                got.extend((m.offset, m.key, m.value, [(k, bytes(v)) for k, v in m.headers], m.timestamp)
                           for m in msgs)
    finally:
        consumer.close()
    return got


def aiokafka_read(broker, topic: str, count: int) -> list[tuple]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def main():
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap_servers, group_id=None,
                                    enable_auto_commit=False, fetch_max_wait_ms=100)
        await consumer.start()
        got = []
        try:
            tp = ATopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            deadline = time.monotonic() + DEADLINE_S
            while len(got) < count and time.monotonic() < deadline:
                for msgs in (await consumer.getmany(timeout_ms=500, max_records=count)).values():
                    got.extend((m.offset, m.key, m.value, [(k, bytes(v)) for k, v in m.headers], m.timestamp)
                               for m in msgs)
        finally:
            await consumer.stop()
        return got

    return asyncio.run(main())


# ----------------------------------------------------------------------------- admin

def test_admin_client_creates_and_alters_topics_with_every_compression_type(broker):
    """What confluent-kafka-python's own admin integration test does at its first line."""
    for value in TYPES:
        create(broker, f"admin-{value}", {"compression.type": value})
        assert describe(broker, f"admin-{value}")["compression.type"] == value
    create(broker, "admin-levels", {"compression.type": "zstd", "compression.zstd.level": "-5",
                                    "compression.gzip.level": "9", "compression.lz4.level": "17"})
    described = describe(broker, "admin-levels")
    assert [described[f"compression.{c}.level"] for c in ("zstd", "gzip", "lz4")] == ["-5", "9", "17"]
    with pytest.raises(Exception) as info:
        create(broker, "admin-brotli", {"compression.type": "brotli"})
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG and "String must be one of" in str(info.value)
    resource = ConfigResource(ResourceType.TOPIC, "admin-producer", incremental_configs=[
        ConfigEntry("compression.type", "lz4", incremental_operation=AlterConfigOpType.SET)])
    admin = admin_for(broker)
    admin.incremental_alter_configs([resource])[resource].result(10)
    assert describe(broker, "admin-producer")["compression.type"] == "lz4"


# ----------------------------------------------------------------------------- produce and consume

def test_uncompressed_and_gzip_batches_sent_to_a_zstd_topic_are_stored_zstd_and_read_back_exactly(broker):
    topic = "zstd-topic"
    create(broker, topic, {"compression.type": "zstd", "compression.zstd.level": "10"})
    sent = records("plain", 400) + records("gz", 400)
    assert produce(broker, topic, sent[:400], "none", **{"enable.idempotence": True}) == []
    assert produce(broker, topic, sent[400:], "gzip", **{"enable.idempotence": True}) == []
    stored = stored_batches(broker, topic)
    assert stored and {h.compression for h in stored} == {rb.COMPRESSION_ZSTD}
    assert sum(h.records_count for h in stored) == 800
    assert all(h.producer_id >= 0 and h.base_sequence >= 0 for h in stored)  # idempotent producer fields kept
    assert len({h.producer_id for h in stored}) == 2
    want = expected(sent)
    assert confluent_read(broker, topic, 800) == want
    assert kafka_python_read(broker, topic, 800) == want
    assert aiokafka_read(broker, topic, 800) == want


@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4"])
def test_every_codec_is_stored_as_the_topic_says(broker, target):
    topic = f"stored-{target}"
    create(broker, topic, {"compression.type": target})
    sent = records(target, 150)
    source = "zstd" if target != "uncompressed" else "lz4"
    assert produce(broker, topic, sent, source) == []
    assert {h.compression for h in stored_batches(broker, topic)} == {CODEC_ID[target]}
    assert confluent_read(broker, topic, 150) == expected(sent)
    assert kafka_python_read(broker, topic, 150) == expected(sent)


def test_a_producer_topic_keeps_each_batch_as_it_came(broker):
    topic = "as-produced"
    create(broker, topic, {})
    for codec in ("gzip", "none", "lz4"):
        assert produce(broker, topic, records(codec, 20), codec) == []
    assert [h.compression for h in stored_batches(broker, topic)] == [1, 0, 3]


def test_a_batch_too_large_once_rewritten_is_refused_with_message_too_large(broker):
    """UnifiedLog.append checks max.message.bytes again after the validator rebuilt the batch."""
    topic = "small-uncompressed"
    create(broker, topic, {"compression.type": "uncompressed", "max.message.bytes": "4096"})
    errors = produce(broker, topic, [(None, b"\x00" * 20_000, [], BASE_TS)], "gzip", retries=0)
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
    assert stored_batches(broker, topic) == []


def test_share_consumers_read_a_recompressed_topic(broker):
    topic, group = "share-zstd", "share-zstd-group"
    create(broker, topic, {"compression.type": "zstd"})
    set_group_configs(broker.bootstrap_servers, group, {"share.auto.offset.reset": "earliest"})
    sent = records("share", 200)
    assert produce(broker, topic, sent, "none") == []
    assert {h.compression for h in stored_batches(broker, topic)} == {rb.COMPRESSION_ZSTD}
    want = {(k, v) for _o, k, v, _h, _t in expected(sent)}

    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "log_level": 3})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < 200 and time.monotonic() < deadline:
        for m in consumer.poll(0.2):
            assert m.error() is None, m.error()
            got.append((m.offset(), m.key(), m.value(), [(k, bytes(v)) for k, v in m.headers() or []],
                        m.timestamp()[1]))
    consumer.close()
    assert sorted(got) == expected(sent)

    group2 = group + "-quafka"
    set_group_configs(broker.bootstrap_servers, group2, {"share.auto.offset.reset": "earliest"})
    with QuafkaShareConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group2,
                              "fetch.max.wait.ms": 100}) as quafka_consumer:
        quafka_consumer.subscribe([topic])
        seen = []
        deadline = time.monotonic() + DEADLINE_S
        while len(seen) < 200 and time.monotonic() < deadline:
            seen.extend((r.key, r.value) for r in quafka_consumer.poll(0.2))
    assert len(seen) == 200 and set(seen) == want


def test_broker_compression_type_is_the_default_and_changes_dynamically(make_broker):
    broker = make_broker(config={"compression.type": "gzip", "compression.gzip.level": "1"})
    create(broker, "by-default", {})
    assert describe(broker, "by-default")["compression.type"] == "gzip"
    assert produce(broker, "by-default", records("a", 50), "none") == []
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("compression.type", "snappy", incremental_operation=AlterConfigOpType.SET)])
    admin = admin_for(broker)
    admin.incremental_alter_configs([resource])[resource].result(10)
    assert produce(broker, "by-default", records("b", 50), "none") == []
    assert [h.compression for h in stored_batches(broker, "by-default")] == [1, 2]
    assert confluent_read(broker, "by-default", 100) == expected(records("a", 50) + records("b", 50))


def test_a_zstd_topic_is_not_fetched_below_fetch_v10(broker):
    """KafkaApis.handleFetchRequest: UNSUPPORTED_COMPRESSION_TYPE for a zstd topic below Fetch v10;
    v10 reads it, and a topic at another codec is read at v9."""
    import datetime
    import importlib

    from support import RawClient

    create(broker, "fetch-zstd", {"compression.type": "zstd"})
    create(broker, "fetch-gzip", {"compression.type": "gzip"})
    for topic in ("fetch-zstd", "fetch-gzip"):
        assert produce(broker, topic, records(topic, 5), "none") == []

    def fetch(version: int, topic: str):
        schema = importlib.import_module(f"kio.schema.fetch.v{version}.request")
        request = schema.FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=0, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(),
            topics=(schema.FetchTopic(topic=topic, partitions=(schema.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                partition_max_bytes=1 << 20),)),),
            **({"rack_id": ""} if version >= 11 else {}))
        with RawClient(broker.bootstrap_servers) as raw:
            part = raw.request(request).responses[0].partitions[0]
        return int(part.error_code), part.records

    code, data = fetch(9, "fetch-zstd")
    assert code == 76 and not data  # UNSUPPORTED_COMPRESSION_TYPE
    code, data = fetch(10, "fetch-zstd")
    assert code == 0 and rb.read_header(data, 0).compression == rb.COMPRESSION_ZSTD
    code, data = fetch(9, "fetch-gzip")
    assert code == 0 and rb.read_header(data, 0).compression == rb.COMPRESSION_GZIP
