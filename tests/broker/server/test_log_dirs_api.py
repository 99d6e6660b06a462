"""DescribeLogDirs (key 35) over loopback TCP: quafka's Admin.describe_log_dirs and kafka-python's
KafkaAdminClient.describe_log_dirs (confluent-kafka 2.16 has no describe_log_dirs) against a real
broker; the sizes are the partitions' segment files on disk, the totals the file system's."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import Producer
from kafka.admin import KafkaAdminClient

from quafka.client import Admin, LogDirPartition
from support import RawClient
from support.acl_fixtures import kreq

pytestmark = pytest.mark.timeout(60)


def produce(bootstrap: str, topic: str, partition: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, b"v" * 100 + str(i).encode(), partition=partition)
    assert producer.flush(10) == 0


def on_disk(data_dir: str, topic: str, partition: int) -> int:
    """The bytes of a partition's segment files (what Kafka's UnifiedLog.size counts)."""
    d = os.path.join(data_dir, f"{topic}-{partition}")
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".log"))


@pytest.fixture
def filled(broker):
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        admin.create_topics({"sizes": (2, 1), "other": (1, 1)})
    produce(broker.bootstrap_servers, "sizes", 0, 20)
    produce(broker.bootstrap_servers, "sizes", 1, 3)
    return broker


def test_admin_describes_the_log_dir_with_partition_sizes_and_file_system_bytes(filled):
    data_dir = filled.data_dir
    with Admin({"bootstrap.servers": filled.bootstrap_servers}) as admin:
        [d] = admin.describe_log_dirs()
        st = os.statvfs(data_dir)
        assert (d.broker_id, d.path, d.error_code) == (1, os.path.abspath(data_dir), 0)
        assert d.total_bytes == st.f_blocks * st.f_frsize
        assert 0 < d.usable_bytes <= d.total_bytes
        sizes = {(p.topic, p.partition): p.size_bytes for p in d.partitions}
        assert sizes[("sizes", 0)] == on_disk(data_dir, "sizes", 0) > sizes[("sizes", 1)] == \
            on_disk(data_dir, "sizes", 1) > 0
        assert sizes[("other", 0)] == 0
        assert all(p.offset_lag == 0 and not p.is_future for p in d.partitions)
        assert d.size_bytes == sum(sizes.values())

        [only] = admin.describe_log_dirs(["sizes"])
        assert [(p.topic, p.partition) for p in only.partitions] == [("sizes", 0), ("sizes", 1)]
        # partitions the broker does not have are left out, as Kafka's ReplicaManager.describeLogDirs does
        [one] = admin.describe_log_dirs({"sizes": [1, 7], "missing": [0]})
        assert one.partitions == (LogDirPartition("sizes", 1, sizes[("sizes", 1)], 0, False),)


def test_kafka_python_describe_log_dirs_sees_the_same(filled):
    client = KafkaAdminClient(bootstrap_servers=filled.bootstrap_servers)
    try:
        [answer] = client.describe_log_dirs()
    finally:
        client.close()
    [log_dir] = answer["log_dirs"]
    assert log_dir["error_code"] == 0 and log_dir["log_dir"] == os.path.abspath(filled.data_dir)
    assert log_dir["total_bytes"] > 0 and 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    got = {(t["name"], p["partition_index"]): p["partition_size"] for t in log_dir["topics"] for p in t["partitions"]}
    assert got[("sizes", 0)] == on_disk(filled.data_dir, "sizes", 0) > 0
    assert got[("sizes", 1)] == on_disk(filled.data_dir, "sizes", 1) > 0


def test_versions_before_4_carry_no_file_system_bytes(filled):
    """v1 (the oldest Kafka 4 serves) has no TotalBytes/UsableBytes and no top-level error code."""
    with RawClient(filled.bootstrap_servers) as raw:
        resp = raw.request(kreq(35, 1, topics=[{"topic": "sizes", "partitions": [0]}]))
    [result] = resp.results
    assert result.error_code == 0 and not hasattr(result, "total_bytes")
    [topic] = result.topics
    assert [(p.partition_index, p.partition_size) for p in topic.partitions] == \
        [(0, on_disk(filled.data_dir, "sizes", 0))]
