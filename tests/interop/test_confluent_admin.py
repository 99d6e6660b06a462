"""Acceptance 3: confluent-kafka AdminClient against quafka, each result checked and visible
after a restart; DescribeCluster through a raw kio request."""

from __future__ import annotations

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from confluent_kafka import TopicCollection
from kio.schema.describe_cluster.v2.request import DescribeClusterRequest

from support import RawClient, free_port, wait_until

from quafka import EmbeddedBroker


def produce(bootstrap, topic, n, partition=0, base_ts=1_000_000):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 10})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i, partition=partition, timestamp=base_ts + i * 1000)
    assert p.flush(30) == 0


def topic_configs(admin, name):
    res = ConfigResource(ResourceType.TOPIC, name)
    return admin.describe_configs([res])[res].result(10)


def test_admin_client_topics_configs_offsets_and_restart(tmp_path):
    port = free_port()
    config = {"listeners": f"PLAINTEXT://127.0.0.1:{port}"}
    data_dir = str(tmp_path / "data")
    with EmbeddedBroker(data_dir=data_dir, config=config) as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})

        fs = admin.create_topics([NewTopic("orders", 2, 1, config={"retention.ms": "3600000"}),
                                  NewTopic("audit", 1, 1), NewTopic("doomed", 1, 1)])
        for f in fs.values():
            assert f.result(10) is None
        dup = admin.create_topics([NewTopic("orders", 1, 1)])["orders"]
        try:
            dup.result(10)
            raise AssertionError("creating an existing topic must fail")
        except Exception as exc:  # KafkaException(TOPIC_ALREADY_EXISTS)
            assert "TOPIC_ALREADY_EXISTS" in str(exc) or "already exists" in str(exc)

        listed = admin.list_topics(timeout=10).topics
        assert {"orders", "audit", "doomed"} <= set(listed)
        assert len(listed["orders"].partitions) == 2

        described = admin.describe_topics(TopicCollection(["orders"]))["orders"].result(10)
        orders_id = str(described.topic_id)
        assert len(described.partitions) == 2

        assert admin.delete_topics(["doomed"])["doomed"].result(10) is None
        wait_until(lambda: "doomed" not in admin.list_topics(timeout=10).topics, message="doomed deleted")

        assert admin.create_partitions([NewPartitions("orders", 4)])["orders"].result(10) is None
        assert len(admin.list_topics(timeout=10).topics["orders"].partitions) == 4

        produce(bootstrap, "audit", 10)
        offs = admin.list_offsets({
            TopicPartition("audit", 0): OffsetSpec.earliest(),
        })
        assert offs[TopicPartition("audit", 0)].result(10).offset == 0
        latest = admin.list_offsets({TopicPartition("audit", 0): OffsetSpec.latest()})
        assert latest[TopicPartition("audit", 0)].result(10).offset == 10
        by_ts = admin.list_offsets({TopicPartition("audit", 0): OffsetSpec.for_timestamp(1_000_000 + 4500)})
        info = by_ts[TopicPartition("audit", 0)].result(10)
        assert info.offset == 5 and info.timestamp == 1_000_000 + 5000

        deleted = admin.delete_records([TopicPartition("audit", 0, 3)])
        assert deleted[TopicPartition("audit", 0, 3)].result(10).low_watermark == 3
        earliest = admin.list_offsets({TopicPartition("audit", 0): OffsetSpec.earliest()})
        assert earliest[TopicPartition("audit", 0)].result(10).offset == 3

        assert topic_configs(admin, "orders")["retention.ms"].value == "3600000"
        res = ConfigResource(ResourceType.TOPIC, "orders", incremental_configs=[
            ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("max.message.bytes", "2000000", incremental_operation=AlterConfigOpType.SET),
        ])
        assert admin.incremental_alter_configs([res])[res].result(10) is None
        configs = topic_configs(admin, "orders")
        assert configs["retention.ms"].value == "7200000"
        assert configs["max.message.bytes"].value == "2000000"
        assert not configs["max.message.bytes"].is_default

        broker_res = ConfigResource(ResourceType.BROKER, "1")
        before = admin.describe_configs([broker_res])[broker_res].result(10)
        assert before["log.retention.bytes"].value == "-1"
        alter = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry("log.retention.bytes", "123456789", incremental_operation=AlterConfigOpType.SET)])
        assert admin.incremental_alter_configs([alter])[alter].result(10) is None
        after = admin.describe_configs([broker_res])[broker_res].result(10)
        assert after["log.retention.bytes"].value == "123456789"
        bad = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry("log.segment.bytes", "12", incremental_operation=AlterConfigOpType.SET)])
        try:
            admin.incremental_alter_configs([bad])[bad].result(10)
            raise AssertionError("an out-of-range broker config must be refused")
        except Exception as exc:
            assert "log.segment.bytes" in str(exc)

        with RawClient(bootstrap) as raw:
            cluster = raw.request(DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                         endpoint_type=1, include_fenced_brokers=False))
        assert cluster.error_code == 0
        assert [b.broker_id for b in cluster.brokers] == [1]
        assert cluster.brokers[0].port == port
        cluster_id = cluster.cluster_id

    # restart on the same data directory: everything above is still there
    with EmbeddedBroker(data_dir=data_dir, config=config) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        listed = admin.list_topics(timeout=10).topics
        assert set(t for t in listed) >= {"orders", "audit"} and "doomed" not in listed
        assert len(listed["orders"].partitions) == 4
        described = admin.describe_topics(TopicCollection(["orders"]))["orders"].result(10)
        assert str(described.topic_id) == orders_id
        configs = topic_configs(admin, "orders")
        assert configs["retention.ms"].value == "7200000"
        assert configs["max.message.bytes"].value == "2000000"
        after = admin.describe_configs([broker_res])[broker_res].result(10)
        assert after["log.retention.bytes"].value == "123456789"
        earliest = admin.list_offsets({TopicPartition("audit", 0): OffsetSpec.earliest()})
        assert earliest[TopicPartition("audit", 0)].result(10).offset == 3
        latest = admin.list_offsets({TopicPartition("audit", 0): OffsetSpec.latest()})
        assert latest[TopicPartition("audit", 0)].result(10).offset == 10
        with RawClient(broker.bootstrap_servers) as raw:
            cluster = raw.request(DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                         endpoint_type=1, include_fenced_brokers=False))
        assert cluster.cluster_id == cluster_id
