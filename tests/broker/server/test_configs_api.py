"""DescribeConfigs / IncrementalAlterConfigs edge cases with raw kio requests."""

from __future__ import annotations

from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)

from support import RawClient

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def alter(raw, resource_type, name, *configs, validate_only=False):
    req = IncrementalAlterConfigsRequest(resources=(AlterConfigsResource(
        resource_type=resource_type, resource_name=name,
        configs=tuple(AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in configs)),),
        validate_only=validate_only)
    return raw.request(req).responses[0]


def describe(raw, resource_type, name, keys=None):
    req = DescribeConfigsRequest(resources=(DescribeConfigsResource(
        resource_type=resource_type, resource_name=name, configuration_keys=keys),),
        include_synonyms=True, include_documentation=True)
    return raw.request(req).results[0]


def value_of(result, key):
    return next(c for c in result.configs if c.name == key)


def test_read_only_broker_config_cannot_change_dynamically(broker):
    with RawClient(broker.bootstrap_servers) as raw:
        resp = alter(raw, BROKER, "1", ("log.dirs", SET, "/elsewhere"))
        assert resp.error_code == 42  # INVALID_REQUEST
        assert "log.dirs" in resp.error_message


def test_cluster_default_broker_config_applies_and_is_described(broker):
    with RawClient(broker.bootstrap_servers) as raw:
        assert alter(raw, BROKER, "", ("log.retention.ms", SET, "86400000")).error_code == 0
        default = describe(raw, BROKER, "")
        # min.insync.replicas: written when the cluster was formatted with ELR on (core/elr.py)
        assert [c.name for c in default.configs] == ["log.retention.ms", "min.insync.replicas"]
        entry = value_of(describe(raw, BROKER, "1", ("log.retention.ms",)), "log.retention.ms")
        assert entry.value == "86400000" and entry.config_source == 3  # DYNAMIC_DEFAULT_BROKER_CONFIG
        assert entry.documentation


def test_validate_only_changes_nothing(broker):
    with RawClient(broker.bootstrap_servers) as raw:
        assert alter(raw, BROKER, "1", ("log.retention.bytes", SET, "1000"), validate_only=True).error_code == 0
        assert value_of(describe(raw, BROKER, "1"), "log.retention.bytes").value == "-1"


def test_topic_config_operations_and_errors(broker):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("cfg", 1, 1)])["cfg"].result(10)
    with RawClient(broker.bootstrap_servers) as raw:
        assert alter(raw, TOPIC, "cfg", ("retention.ms", SET, "1000")).error_code == 0
        entry = value_of(describe(raw, TOPIC, "cfg"), "retention.ms")
        assert entry.value == "1000" and entry.config_source == 1  # DYNAMIC_TOPIC_CONFIG
        assert alter(raw, TOPIC, "cfg", ("retention.ms", DELETE, None)).error_code == 0
        assert value_of(describe(raw, TOPIC, "cfg"), "retention.ms").config_source == 5  # DEFAULT_CONFIG
        bad = alter(raw, TOPIC, "cfg", ("retention.ms", SET, "soon"))
        assert bad.error_code == 40 and "retention.ms" in bad.error_message
        not_list = alter(raw, TOPIC, "cfg", ("retention.ms", APPEND, "5"))
        assert not_list.error_code == 40
        compact = alter(raw, TOPIC, "cfg", ("cleanup.policy", SET, "compact,forever"))
        assert compact.error_code == 40 and "forever" in compact.error_message
        duplicate = alter(raw, TOPIC, "cfg", ("retention.ms", SET, "1"), ("retention.ms", SET, "2"))
        assert duplicate.error_code == 42
        missing = alter(raw, TOPIC, "nope", ("retention.ms", SET, "1"))
        assert missing.error_code == 3
        assert describe(raw, TOPIC, "nope").error_code == 3
        assert describe(raw, 99, "x").error_code == 42


GROUP = 32


def test_quafkas_group_keys_over_the_wire_bad_values_get_invalid_config_and_nothing_is_stored(broker):
    """quafka's delivery-control keys (docs/share-groups.md, "Extensions") through
    IncrementalAlterConfigs and DescribeConfigs on a GROUP resource."""
    with RawClient(broker.bootstrap_servers) as raw:
        bad = alter(raw, GROUP, "g", ("quafka.share.redelivery.backoff.jitter", SET, "2"))
        assert bad.error_code == 40  # INVALID_CONFIG
        assert "Value must be in the range 0.0 to 1.0 inclusive" in bad.error_message
        unknown = alter(raw, GROUP, "g", ("quafka.share.redelivery.delay.ms", SET, "5"))
        assert unknown.error_code == 40 and "Unknown group config name" in unknown.error_message
        described = describe(raw, GROUP, "g")
        jitter = value_of(described, "quafka.share.redelivery.backoff.jitter")
        assert (jitter.value, jitter.config_source) == ("0.0", 5)  # still the default
        assert "quafka.share.redelivery.delay.ms" not in {c.name for c in described.configs}
        assert "± this fraction" in jitter.documentation
        good = alter(raw, GROUP, "g", ("quafka.share.redelivery.backoff.ms", SET, "250"))
        assert good.error_code == 0
        backoff = value_of(describe(raw, GROUP, "g"), "quafka.share.redelivery.backoff.ms")
        assert (backoff.value, backoff.config_source) == ("250", 8)  # DYNAMIC_GROUP_CONFIG
        assert "redelivery delay" in backoff.documentation
