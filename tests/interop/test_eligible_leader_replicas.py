"""Eligible leader replicas (KIP-966) as confluent-kafka's AdminClient sees a new Kafka 4.2 cluster:
`eligible.leader.replicas.version` is finalized at 1, so the controller wrote a cluster-level
`min.insync.replicas` (ActivationRecordsGenerator.recordsForEmptyLog) that every topic reports as a
dynamic cluster default, and that cannot be removed while ELR is on
(ConfigurationControlManager.validateAlterConfig). This is what confluent-kafka-python's
integration test `admin/test_incremental_alter_configs.py` expects of a topic's non-default
configs. confluent-kafka refuses a BROKER resource with an empty name (the cluster level), so that one
is described and altered with raw kio requests, as kafka-configs.sh --entity-default sends them."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)

from quafka import EmbeddedBroker
from quafka.protocol.errors import ErrorCode
from support import RawClient

CLUSTER_REMOVAL = "Cluster-level min.insync.replicas cannot be removed while ELR is enabled."
BROKER_ALTER = "Broker-level min.insync.replicas cannot be altered while ELR is enabled."


def admin_for(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def describe(admin: AdminClient, resource_type: ResourceType, name: str) -> dict:
    resource = ConfigResource(resource_type, name)
    return admin.describe_configs([resource])[resource].result(10)


def cluster_level(broker) -> dict[str, tuple[str, int, list]]:
    """The cluster-level dynamic broker configs: name -> (value, source, synonyms)."""
    with RawClient(broker.bootstrap_servers) as raw:
        result = raw.request(DescribeConfigsRequest(resources=(DescribeConfigsResource(
            resource_type=4, resource_name="", configuration_keys=None),), include_synonyms=True,
            include_documentation=False)).results[0]
    assert result.error_code == ErrorCode.none
    return {c.name: (c.value, c.config_source, [(s.name, s.value, s.source) for s in c.synonyms])
            for c in result.configs}


def alter_cluster_level(broker, op: int, key: str, value: str | None = None):
    with RawClient(broker.bootstrap_servers) as raw:
        return raw.request(IncrementalAlterConfigsRequest(resources=(AlterConfigsResource(
            resource_type=4, resource_name="", configs=(AlterableConfig(name=key, config_operation=op, value=value),)),),
            validate_only=False)).responses[0]


def alter(admin: AdminClient, resource_type: ResourceType, name: str, op: AlterConfigOpType, key: str,
          value: str | None = None):
    resource = ConfigResource(resource_type, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op)])
    return admin.incremental_alter_configs([resource])[resource]


def test_a_topic_reports_min_insync_replicas_as_a_dynamic_cluster_default(broker):
    admin = admin_for(broker)
    admin.create_topics([NewTopic("elr", 1, 1, config={"cleanup.policy": "compact", "retention.ms": "60000",
                                                       "compression.type": "gzip"})])["elr"].result(10)
    configs = describe(admin, ResourceType.TOPIC, "elr")
    non_default = {name: entry.value for name, entry in configs.items() if not entry.is_default}
    assert non_default == {"cleanup.policy": "compact", "compression.type": "gzip", "retention.ms": "60000",
                           "min.insync.replicas": "1"}
    entry = configs["min.insync.replicas"]
    assert entry.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    dynamic_default = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert cluster_level(broker) == {
        "min.insync.replicas": ("1", dynamic_default, [("min.insync.replicas", "1", dynamic_default)])}
    node = describe(admin, ResourceType.BROKER, "1")["min.insync.replicas"]
    assert (node.value, node.source, node.is_default) == ("1", dynamic_default, False)


def test_the_cluster_level_value_is_the_static_one():
    with EmbeddedBroker(config={"min.insync.replicas": 2}) as broker:
        admin = admin_for(broker)
        assert cluster_level(broker)["min.insync.replicas"][0] == "2"
        admin.create_topics([NewTopic("two", 1, 1)])["two"].result(10)
        entry = describe(admin, ResourceType.TOPIC, "two")["min.insync.replicas"]
        assert (entry.value, entry.source) == ("2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)


def test_deleting_the_cluster_level_min_insync_replicas_is_refused(broker):
    admin = admin_for(broker)
    refused = alter_cluster_level(broker, 1, "min.insync.replicas")  # DELETE
    assert (refused.error_code, refused.error_message) == (ErrorCode.invalid_config, CLUSTER_REMOVAL)
    assert cluster_level(broker)["min.insync.replicas"][0] == "1"
    with pytest.raises(KafkaException) as per_broker:
        alter(admin, ResourceType.BROKER, "1", AlterConfigOpType.SET, "min.insync.replicas", "2").result(10)
    assert (per_broker.value.args[0].code(), per_broker.value.args[0].str()) == (KafkaError.INVALID_CONFIG, BROKER_ALTER)
    # changing the cluster-level value is allowed (on Kafka it clears every partition's ELR)
    assert alter_cluster_level(broker, 0, "min.insync.replicas", "2").error_code == ErrorCode.none  # SET
    entry = describe(admin, ResourceType.BROKER, "1")["min.insync.replicas"]
    assert (entry.value, entry.source) == ("2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
