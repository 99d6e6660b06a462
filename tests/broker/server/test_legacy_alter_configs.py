"""The legacy AlterConfigs (key 33) is served: it replaces a resource's whole set of dynamic
configs, as Kafka 4.x still does for older tools (kafka-python's KafkaAdminClient uses it)."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, ConfigResource as CkConfigResource, NewTopic, ResourceType
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from kio.schema.alter_configs.v2.request import AlterableConfig, AlterConfigsRequest, AlterConfigsResource

from support import RawClient


def describe(admin: AdminClient, topic: str):
    res = CkConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([res])[res].result(10)


def test_kafka_python_alter_configs_replaces_topic_configs(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("legacy", 1, 1, config={"retention.ms": "1000000", "segment.ms": "2000000"})])[
        "legacy"].result(10)
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        # incremental=False forces the legacy AlterConfigs; kafka-python then fills in the other
        # dynamic configs itself, because AlterConfigs replaces the whole set
        kp.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "legacy", configs={"retention.ms": "5000000"})],
                         incremental=False)
    finally:
        kp.close()
    configs = describe(admin, "legacy")
    assert configs["retention.ms"].value == "5000000"
    assert configs["segment.ms"].value == "2000000"


def test_alter_configs_replaces_the_whole_set(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("legacy3", 1, 1, config={"retention.ms": "1000000", "segment.ms": "2000000"})])[
        "legacy3"].result(10)
    with RawClient(broker.bootstrap_servers) as raw:
        resp = raw.request(AlterConfigsRequest(resources=(AlterConfigsResource(
            resource_type=2, resource_name="legacy3",
            configs=(AlterableConfig(name="retention.ms", value="5000000"),)),), validate_only=False))
    assert resp.responses[0].error_code == 0
    configs = describe(admin, "legacy3")
    assert configs["retention.ms"].value == "5000000"
    assert configs["segment.ms"].is_default  # not in the new set: back to the default


def test_alter_configs_refuses_bad_values_and_keeps_the_old_ones(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("legacy2", 1, 1, config={"retention.ms": "1000000"})])["legacy2"].result(10)
    with RawClient(broker.bootstrap_servers) as raw:
        resp = raw.request(AlterConfigsRequest(resources=(AlterConfigsResource(
            resource_type=2, resource_name="legacy2",
            configs=(AlterableConfig(name="retention.ms", value="not-a-number"),)),), validate_only=False))
        assert resp.responses[0].error_code == 40  # INVALID_CONFIG
        assert "retention.ms" in resp.responses[0].error_message
        unknown = raw.request(AlterConfigsRequest(resources=(AlterConfigsResource(
            resource_type=2, resource_name="legacy2",
            configs=(AlterableConfig(name="no.such.config", value="1"),)),), validate_only=False))
        assert unknown.responses[0].error_code == 40
        missing = raw.request(AlterConfigsRequest(resources=(AlterConfigsResource(
            resource_type=2, resource_name="nope", configs=()),), validate_only=False))
        assert missing.responses[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert describe(admin, "legacy2")["retention.ms"].value == "1000000"


def test_replacing_the_cluster_level_set_without_min_insync_replicas_is_refused(broker):
    """ConfigurationControlManager.legacyAlterConfigResource: a key the new set leaves out is deleted
    implicitly, and deleting the cluster-level min.insync.replicas is refused while ELR is on."""
    def alter_default(*configs):
        return raw.request(AlterConfigsRequest(resources=(AlterConfigsResource(
            resource_type=4, resource_name="", configs=tuple(AlterableConfig(name=k, value=v) for k, v in configs)),),
            validate_only=False)).responses[0]

    with RawClient(broker.bootstrap_servers) as raw:
        refused = alter_default(("log.retention.ms", "1000"))
        assert (refused.error_code, refused.error_message) == (
            40, "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.")  # INVALID_CONFIG
        assert alter_default(("log.retention.ms", "1000"), ("min.insync.replicas", "1")).error_code == 0
