"""The free-space watermark's shell (`broker.server.disk_space`): how often it measures and what the
produce path gets; and, on a real broker, the dynamic configs (a watermark above any disk's free
space, set with IncrementalAlterConfigs, refuses produces with KAFKA_STORAGE_ERROR and its message
while Fetch and CreateTopics go on; removing it resumes produces without a restart).

The monitor tests replace `os.statvfs` (the operating system's, not ours) by a file system whose
free space the test sets, and count the calls: the produce path measures only when its running
estimate reaches the threshold, never per produce."""

from __future__ import annotations

import datetime
import errno
import logging
import os

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from prometheus_client.parser import text_string_to_metric_families

from quafka.broker.server.disk_space import DiskSpaceMonitor
from quafka.broker.server.metrics import render
from quafka.protocol.record_batch import build_batch
from support import RawClient
from support.share_client import create_topic

pytestmark = pytest.mark.timeout(60)

MIB = 1 << 20


class FileSystem:
    """What `os.statvfs` reports for a file system of `total` bytes with `free` available."""

    def __init__(self, total: int, free: int) -> None:
        self.total, self.free = total, free
        self.calls = 0
        self.error: OSError | None = None

    def statvfs(self, path: str) -> os.statvfs_result:
        self.calls += 1
        if self.error is not None:
            raise self.error
        # (bsize, frsize, blocks, bfree, bavail, files, ffree, favail, flag, namemax)
        return os.statvfs_result((4096, 1, self.total, self.free, self.free, 0, 0, 0, 0, 255))


class Settings:
    """The two keys of a broker configuration."""

    def __init__(self, min_bytes: int, percent: float) -> None:
        self.values = {"quafka.log.dir.min.free.bytes": min_bytes, "quafka.log.dir.min.free.percent": percent}

    def get(self, name: str):
        return self.values[name]


def monitor(fs: FileSystem, min_bytes: int = 10 * MIB, percent: float = 0.0) -> DiskSpaceMonitor:
    settings = Settings(min_bytes, percent)
    m = DiskSpaceMonitor("/data", lambda: settings, statvfs=fs.statvfs)
    m.check()
    return m


def test_produces_are_admitted_without_measuring_until_the_estimate_reaches_the_threshold():
    fs = FileSystem(100 * MIB, 30 * MIB)
    m = monitor(fs)
    assert fs.calls == 1
    for _ in range(20):  # 20 MiB appended: the estimate comes down to the threshold, no system call
        assert m.admit(MIB) is None
        fs.free -= MIB
    assert fs.calls == 1 and m.estimated_free_bytes == 10 * MIB
    assert m.admit(MIB) is None  # the estimate is at the threshold, not under it
    fs.free -= MIB
    refusal = m.admit(MIB)  # under it: measured, below, refused
    assert fs.calls == 2 and m.below and m.refusals == 1
    assert refusal == ("Log directory /data is below its free-space watermark (9437184 bytes free, "
                       "quafka.log.dir.min.free.bytes/quafka.log.dir.min.free.percent ask for 10485760): produces "
                       "are refused until 11010048 bytes are free; retry later")
    for _ in range(100):  # below: refused from memory, no system call per produce
        assert m.admit(MIB) == refusal
    assert fs.calls == 2 and m.refusals == 101


def test_space_freed_elsewhere_is_seen_when_the_estimate_asks():
    fs = FileSystem(100 * MIB, 11 * MIB)
    m = monitor(fs)
    assert m.admit(2 * MIB) is None  # the estimate is now 9 MiB
    fs.free = 50 * MIB  # meanwhile retention deleted a segment: the measurement finds it
    assert m.admit(MIB) is None and fs.calls == 2 and not m.below
    assert m.estimated_free_bytes == 49 * MIB


def test_a_check_resumes_produces_once_space_is_back_above_the_margin(caplog):
    caplog.set_level(logging.INFO, logger="quafka.server.disk_space")
    fs = FileSystem(100 * MIB, 5 * MIB)
    m = monitor(fs)
    assert m.below and m.admit(1) is not None
    fs.free = 10 * MIB  # above the threshold, not above the margin (10.5 MiB): still refused
    m.check()
    assert m.below and m.admit(1) is not None
    fs.free = 40 * MIB
    m.recheck()
    assert not m.below and m.admit(1) is None
    messages = [r.getMessage() for r in caplog.records if r.name == "quafka.server.disk_space"]
    assert len(messages) == 2, messages  # once when it started, once when it cleared
    assert "/data has 5242880 bytes free (5.0 MiB), below the free-space watermark of 10485760 bytes" in messages[0]
    assert "quafka.log.dir.min.free.bytes=10485760, quafka.log.dir.min.free.percent=0 of 104857600" in messages[0]
    assert "/data has 41943040 bytes free (40.0 MiB) again, above the free-space watermark" in messages[1]


def test_a_failed_measurement_is_logged_once_and_keeps_the_last_state(caplog):
    fs = FileSystem(100 * MIB, 5 * MIB)
    m = monitor(fs)
    fs.error = OSError(errno.EIO, "Input/output error")
    for _ in range(3):
        assert m.check() is None
    calls = fs.calls
    for _ in range(10):
        assert m.below and m.admit(1) is not None
    assert fs.calls == calls  # the produce path does not retry the measurement: the timed check does
    warnings = [r.getMessage() for r in caplog.records if "cannot measure" in r.getMessage()]
    assert len(warnings) == 1 and "/data" in warnings[0] and "Input/output error" in warnings[0]
    fs.error, fs.free = None, 50 * MIB
    m.check()
    assert not m.below


def test_off_and_memory_brokers_never_refuse():
    fs = FileSystem(100 * MIB, 0)
    off = monitor(fs, min_bytes=0, percent=0.0)
    assert off.admit(MIB) is None and not off.below
    memory = DiskSpaceMonitor(None, lambda: Settings(10 * MIB, 1.0), statvfs=fs.statvfs)
    calls = fs.calls
    assert memory.check() is None and memory.admit(MIB) is None and fs.calls == calls


# ----------------------------------------------------------------------------- a real broker


def produce_one(bootstrap: str, topic: str):
    request = ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5), topic_data=(
        TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=0, records=build_batch(
            [(None, b"v")], base_timestamp=0)),)),))
    with RawClient(bootstrap) as raw:
        return raw.request(request).responses[0].partition_responses[0]


def fetch_from(bootstrap: str, topic: str, offset: int):
    request = FetchRequest(
        cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=1 << 20),)),), forgotten_topics_data=(), rack_id="")
    with RawClient(bootstrap) as raw:
        return raw.request(request).responses[0].partitions[0]


def alter(bootstrap: str, value: str | None) -> None:
    op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("quafka.log.dir.min.free.bytes", value or "", incremental_operation=op)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert admin.incremental_alter_configs([resource])[resource].result(10) is None


def gauge(broker, name: str) -> float:
    text = broker.call(render, broker.server)
    [value] = [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]
    return value


def test_a_dynamic_watermark_refuses_produces_and_removing_it_resumes_them(make_broker):
    broker = make_broker()
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "t", 1)
    assert produce_one(bootstrap, "t").error_code == ErrorCode.none

    alter(bootstrap, str(1 << 62))  # more than any disk has free
    refused = produce_one(bootstrap, "t")
    assert refused.error_code == ErrorCode.kafka_storage_error
    assert "below its free-space watermark" in refused.error_message
    assert f"ask for {1 << 62})" in refused.error_message
    assert gauge(broker, "quafka_log_dir_below_min_free") == 1
    assert gauge(broker, "quafka_log_dir_min_free_bytes") == 1 << 62
    assert gauge(broker, "quafka_log_dir_produce_refusals_total") == 1
    part = fetch_from(bootstrap, "t", 0)
    assert part.error_code == ErrorCode.none and part.high_watermark == 1  # reads go on
    create_topic(bootstrap, "created-below", 1)  # a metadata write: not refused
    assert produce_one(bootstrap, "created-below").error_code == ErrorCode.kafka_storage_error
    assert not broker.server.halted

    alter(bootstrap, None)  # back to the default: the next produce measures again and is taken
    accepted = produce_one(bootstrap, "t")
    assert accepted.error_code == ErrorCode.none and accepted.base_offset == 1
    assert gauge(broker, "quafka_log_dir_below_min_free") == 0
