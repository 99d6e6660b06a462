"""Acceptance 5: retention by time and by size delete old segments and advance the log start
offset, which ListOffsets earliest reports; DeleteRecords moves it to any offset."""

from __future__ import annotations

import time

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from support import wait_until

SEGMENT = 1048576
RETENTION_CONFIG = {"log.segment.bytes": SEGMENT, "log.retention.check.interval.ms": 200}


def earliest(admin: AdminClient, topic: str) -> int:
    tp = TopicPartition(topic, 0)
    return admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(10).offset


def latest(admin: AdminClient, topic: str) -> int:
    tp = TopicPartition(topic, 0)
    return admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(10).offset


def write(bootstrap: str, topic: str, count: int, timestamp_ms: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "none"})
    for i in range(start, start + count):
        while True:
            try:
                producer.produce(topic, value=b"%08d" % i + b"x" * 992, partition=0, timestamp=timestamp_ms)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0


def test_retention_by_time_deletes_old_segments(make_broker):
    broker = make_broker(config={**RETENTION_CONFIG, "log.retention.ms": 24 * 3600 * 1000})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("timed", 1, 1)])["timed"].result(10)
    now_ms = int(time.time() * 1000)
    write(broker.bootstrap_servers, "timed", 3000, now_ms - 2 * 24 * 3600 * 1000)  # ~3 MiB, 2 days old
    write(broker.bootstrap_servers, "timed", 500, now_ms, start=3000)
    start = wait_until(lambda: earliest(admin, "timed") or None, 20, message="time retention")
    assert 0 < start <= 3000
    assert latest(admin, "timed") == 3500


def test_retention_by_size_deletes_oldest_segments(make_broker):
    broker = make_broker(config={**RETENTION_CONFIG, "log.retention.bytes": 2 * SEGMENT})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("sized", 1, 1)])["sized"].result(10)
    write(broker.bootstrap_servers, "sized", 5000, int(time.time() * 1000))  # ~5 MiB
    # Kafka keeps the log within retention.bytes plus at most one segment
    start = wait_until(lambda: earliest(admin, "sized") >= 5000 - 3 * SEGMENT // 1024 and earliest(admin, "sized"),
                       20, message="size retention")
    assert start < 5000
    assert latest(admin, "sized") == 5000


def test_delete_records_moves_log_start_to_any_offset(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("trimmed", 1, 1)])["trimmed"].result(10)
    write(broker.bootstrap_servers, "trimmed", 100, int(time.time() * 1000))
    for target in (17, 18, 63, 100):
        result = admin.delete_records([TopicPartition("trimmed", 0, target)])
        assert result[TopicPartition("trimmed", 0, target)].result(10).low_watermark == target
        assert earliest(admin, "trimmed") == target
    # beyond the high watermark: OFFSET_OUT_OF_RANGE, log start unchanged
    result = admin.delete_records([TopicPartition("trimmed", 0, 1000)])
    try:
        result[TopicPartition("trimmed", 0, 1000)].result(10)
        raise AssertionError("deleting past the high watermark must fail")
    except Exception as exc:
        assert "OFFSET_OUT_OF_RANGE" in str(exc) or "out of range" in str(exc).lower()
    assert earliest(admin, "trimmed") == 100
