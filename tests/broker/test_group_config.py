"""Share group configs (GROUP resources) and the broker's group.share.* keys: Kafka's defaults,
ranges, start-up checks, validation against the broker's bounds, resolution and DescribeConfigs."""

from __future__ import annotations

import pytest

from quafka.broker import config as cfg
from quafka.broker.config import (
    BROKER_KEYS,
    GROUP_KEYS,
    BrokerConfig,
    ConfigError,
    ShareGroupConfig,
    auto_offset_reset_duration_ms,
    describe_group_configs,
    resolve_group_config,
    validate_group_configs,
)

DEFAULT = BrokerConfig.from_props({})


# --------------------------------------------------------------------------- broker keys


@pytest.mark.parametrize("name, default", [
    ("group.share.max.size", 200),
    ("group.share.session.timeout.ms", 45000), ("group.share.min.session.timeout.ms", 45000),
    ("group.share.max.session.timeout.ms", 60000),
    ("group.share.heartbeat.interval.ms", 5000), ("group.share.min.heartbeat.interval.ms", 5000),
    ("group.share.max.heartbeat.interval.ms", 15000),
    ("group.share.assignors", ["simple"]),
    ("group.share.assignment.interval.ms", 1000), ("group.share.min.assignment.interval.ms", 0),
    ("group.share.max.assignment.interval.ms", 15000),
    ("group.share.assignor.offload.enable", True),
    ("group.share.initialize.retry.interval.ms", 30000),
    ("group.share.delivery.count.limit", 5), ("group.share.min.delivery.count.limit", 2),
    ("group.share.max.delivery.count.limit", 10),
    ("group.share.record.lock.duration.ms", 30000), ("group.share.min.record.lock.duration.ms", 15000),
    ("group.share.max.record.lock.duration.ms", 60000),
    ("group.share.partition.max.record.locks", 2000), ("group.share.min.partition.max.record.locks", 100),
    ("group.share.max.partition.max.record.locks", 4000),
    ("group.share.max.share.sessions", 2000),
    ("share.fetch.purgatory.purge.interval.requests", 1000),
    ("group.share.persister.class.name", "org.apache.kafka.server.share.persister.DefaultStatePersister"),
    ("errors.deadletterqueue.auto.create.topics.enable", False),
    ("errors.deadletterqueue.topic.name.prefix", "dlq."),
])
def test_share_broker_defaults_match_kafka(name, default):
    assert DEFAULT.get(name) == default


@pytest.mark.parametrize("name, value, fragment", [
    ("group.share.max.size", "1001", "Value must be no more than 1000"),
    ("group.share.max.size", "0", "Value must be at least 1"),
    ("group.share.delivery.count.limit", "11", "Value must be no more than 10"),
    ("group.share.min.delivery.count.limit", "1", "Value must be at least 2"),
    ("group.share.max.delivery.count.limit", "26", "Value must be no more than 25"),
    ("group.share.record.lock.duration.ms", "999", "Value must be at least 1000"),
    ("group.share.min.record.lock.duration.ms", "30001", "Value must be no more than 30000"),
    ("group.share.max.record.lock.duration.ms", "29999", "Value must be at least 30000"),
    ("group.share.partition.max.record.locks", "10001", "Value must be no more than 10000"),
    ("group.share.min.partition.max.record.locks", "2001", "Value must be no more than 2000"),
    ("group.share.max.partition.max.record.locks", "1999", "Value must be at least 2000"),
    ("group.share.session.timeout.ms", "0", "Value must be at least 1"),
    ("group.share.min.assignment.interval.ms", "-1", "Value must be at least 0"),
    ("group.share.max.share.sessions", "0", "Value must be at least 1"),
    ("group.share.assignors", "simple,simple", "Exactly one"),
    ("group.share.assignors", "uniform", "simple assignor only"),
])
def test_share_broker_ranges_are_enforced(name, value, fragment):
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_props({name: value})
    assert info.value.key == name and fragment in str(info.value)


@pytest.mark.parametrize("props, key, fragment", [
    ({"group.share.delivery.count.limit": "10", "group.share.max.delivery.count.limit": "8"},
     "group.share.delivery.count.limit", "must be less than or equal to group.share.max.delivery.count.limit"),
    ({"group.share.delivery.count.limit": "3", "group.share.min.delivery.count.limit": "4"},
     "group.share.delivery.count.limit", "must be greater than or equal to group.share.min.delivery.count.limit"),
    ({"group.share.record.lock.duration.ms": "10000"}, "group.share.record.lock.duration.ms",
     "greater than or equal to group.share.min.record.lock.duration.ms"),
    ({"group.share.partition.max.record.locks": "5000"}, "group.share.partition.max.record.locks",
     "less than or equal to group.share.max.partition.max.record.locks"),
    ({"group.share.session.timeout.ms": "70000"}, "group.share.session.timeout.ms",
     "less than or equal to group.share.max.session.timeout.ms"),
    ({"group.share.min.heartbeat.interval.ms": "20000"}, "group.share.max.heartbeat.interval.ms",
     "must be greater than or equal to group.share.min.heartbeat.interval.ms"),
    ({"group.share.heartbeat.interval.ms": "45000", "group.share.max.heartbeat.interval.ms": "50000"},
     "group.share.heartbeat.interval.ms", "must be less than group.share.session.timeout.ms"),
    ({"group.share.max.share.sessions": "100"}, "group.share.max.share.sessions",
     "greater than or equal to group.share.max.size"),
])
def test_share_broker_bounds_are_checked_at_start_up(props, key, fragment):
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_props(props)
    assert info.value.key == key and fragment in str(info.value)


def test_share_bounds_are_checked_for_dynamic_changes_too():
    with pytest.raises(ConfigError):
        DEFAULT.with_dynamic(cluster_default={"group.share.assignment.interval.ms": "20000"})
    changed = DEFAULT.with_dynamic(cluster_default={"group.share.assignment.interval.ms": "0"})
    assert changed.get("group.share.assignment.interval.ms") == 0


@pytest.mark.parametrize("name, mode", [
    ("group.share.assignment.interval.ms", "cluster-wide"), ("group.share.assignor.offload.enable", "cluster-wide"),
    ("errors.deadletterqueue.auto.create.topics.enable", "cluster-wide"),
    ("errors.deadletterqueue.topic.name.prefix", "cluster-wide"),
    ("group.share.max.size", "read-only"), ("group.share.record.lock.duration.ms", "read-only"),
])
def test_share_update_modes_are_kafka_s(name, mode):
    assert BROKER_KEYS[name].dynamic == mode


# --------------------------------------------------------------------------- group configs


def test_every_group_key_is_well_formed():
    for key in GROUP_KEYS.values():
        assert key.dynamic == "per-group" and key.doc, key.name
        assert key.validate(key.default) is None, key.name
        assert all(s in BROKER_KEYS for s in key.broker_synonyms), key.name


def test_an_empty_group_resolves_to_the_broker_defaults():
    assert resolve_group_config(DEFAULT, {}) == ShareGroupConfig(
        session_timeout_ms=45000, heartbeat_interval_ms=5000, record_lock_duration_ms=30000,
        auto_offset_reset="latest", isolation_level="read_uncommitted", delivery_count_limit=5,
        partition_max_record_locks=2000, renew_acknowledge_enable=True, assignment_interval_ms=1000,
        assignor_offload_enable=True, dlq_topic_name="", dlq_copy_record_enable=False)


def test_broker_values_are_the_group_defaults():
    broker = BrokerConfig.from_props({"group.share.record.lock.duration.ms": "20000",
                                      "group.share.min.record.lock.duration.ms": "10000",
                                      "group.share.delivery.count.limit": "3"})
    resolved = resolve_group_config(broker, {})
    assert resolved.record_lock_duration_ms == 20000 and resolved.delivery_count_limit == 3


def test_group_overrides_win_over_the_broker_defaults():
    resolved = resolve_group_config(DEFAULT, {
        "share.session.timeout.ms": "50000", "share.heartbeat.interval.ms": "6000",
        "share.record.lock.duration.ms": "15000", "share.auto.offset.reset": "earliest",
        "share.isolation.level": "read_committed", "share.delivery.count.limit": "2",
        "share.partition.max.record.locks": "100", "share.renew.acknowledge.enable": "false",
        "share.assignment.interval.ms": "0", "share.assignor.offload.enable": "false",
        "errors.deadletterqueue.topic.name": "dlq.g", "errors.deadletterqueue.copy.record.enable": "true"})
    assert resolved == ShareGroupConfig(50000, 6000, 15000, "earliest", "read_committed", 2, 100, False, 0, False,
                                        "dlq.g", True)


def test_validate_returns_normalised_values():
    assert validate_group_configs(DEFAULT, {"share.renew.acknowledge.enable": " TRUE ",
                                            "share.delivery.count.limit": "7"}) == {
        "share.renew.acknowledge.enable": "true", "share.delivery.count.limit": "7"}


@pytest.mark.parametrize("configs, key, fragment", [
    ({"share.session.timeout.ms": "1000"}, "share.session.timeout.ms",
     "must be in the range 45000 to 60000 inclusive (the broker's group.share.min.session.timeout.ms and "
     "group.share.max.session.timeout.ms)"),
    ({"share.heartbeat.interval.ms": "20000"}, "share.heartbeat.interval.ms", "range 5000 to 15000"),
    ({"share.record.lock.duration.ms": "999"}, "share.record.lock.duration.ms", "Value must be at least 1000"),
    ({"share.record.lock.duration.ms": "70000"}, "share.record.lock.duration.ms", "range 15000 to 60000"),
    ({"share.delivery.count.limit": "1"}, "share.delivery.count.limit", "Value must be at least 2"),
    ({"share.delivery.count.limit": "11"}, "share.delivery.count.limit", "range 2 to 10"),
    ({"share.partition.max.record.locks": "5000"}, "share.partition.max.record.locks", "range 100 to 4000"),
    ({"share.assignment.interval.ms": "-1"}, "share.assignment.interval.ms", "Value must be at least 0"),
    ({"share.assignment.interval.ms": "16000"}, "share.assignment.interval.ms", "range 0 to 15000"),
    ({"share.isolation.level": "dirty"}, "share.isolation.level",
     "String must be one of: read_committed, read_uncommitted"),
    ({"share.renew.acknowledge.enable": "yes"}, "share.renew.acknowledge.enable", "either true or false"),
    ({"share.auto.offset.reset": "none"}, "share.auto.offset.reset", "'by_duration:<PnDTnHnMn.nS>'"),
    ({"share.auto.offset.reset": "by_duration:1h"}, "share.auto.offset.reset", "by_duration"),
    ({"share.auto.offset.reset": "by_duration:PT-1M"}, "share.auto.offset.reset", "Negative duration"),
    ({"share.session.timeout.ms": "abc"}, "share.session.timeout.ms", "Not a number of type INT"),
    ({"errors.deadletterqueue.topic.name": "__dlq"}, "errors.deadletterqueue.topic.name",
     "DLQ topic name must not start with '__'"),
])
def test_bad_group_configs_are_refused_naming_key_value_and_bounds(configs, key, fragment):
    with pytest.raises(ConfigError) as info:
        validate_group_configs(DEFAULT, configs)
    assert info.value.key == key and fragment in str(info.value)
    assert str(configs[key]).strip() in str(info.value)


def test_unknown_group_config_names_are_refused():
    with pytest.raises(ConfigError, match="Unknown group config name: consumer.assignment.interval.ms"):
        validate_group_configs(DEFAULT, {"consumer.assignment.interval.ms": "45000"})


# --------------------------------------------------------------------------- KIP-848 consumer groups


@pytest.mark.parametrize("name, default", [
    ("group.consumer.session.timeout.ms", 45000), ("group.consumer.min.session.timeout.ms", 45000),
    ("group.consumer.max.session.timeout.ms", 60000), ("group.consumer.heartbeat.interval.ms", 5000),
    ("group.consumer.min.heartbeat.interval.ms", 5000), ("group.consumer.max.heartbeat.interval.ms", 15000),
    ("group.consumer.max.size", 2147483647), ("group.consumer.assignors", ["uniform", "range"]),
])
def test_consumer_group_broker_keys_have_kafkas_defaults(name, default):
    assert DEFAULT.get(name) == default  # GroupCoordinatorConfig.CONSUMER_GROUP_*_DEFAULT


@pytest.mark.parametrize("props, key, fragment", [
    ({"group.consumer.heartbeat.interval.ms": "45000", "group.consumer.max.heartbeat.interval.ms": "60000"},
     "group.consumer.heartbeat.interval.ms", "must be less than group.consumer.session.timeout.ms (45000)"),
    ({"group.consumer.session.timeout.ms": "1000"}, "group.consumer.session.timeout.ms",
     "must be greater than or equal to group.consumer.min.session.timeout.ms (45000)"),
    ({"group.consumer.assignors": "sticky"}, "group.consumer.assignors", "uniform and range"),
    ({"group.consumer.assignors": ""}, "group.consumer.assignors", "At least one"),
])
def test_bad_consumer_group_broker_keys_are_refused(props, key, fragment):
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_props(props)
    assert info.value.key == key and fragment in str(info.value)


def test_kafkas_assignor_class_names_are_accepted():
    config = BrokerConfig.from_props({"group.consumer.assignors":
                                      "org.apache.kafka.coordinator.group.assignor.RangeAssignor,uniform"})
    from quafka.broker._config_types import consumer_assignor_names
    assert consumer_assignor_names(config.get("group.consumer.assignors")) == ["range", "uniform"]


def test_consumer_group_configs_resolve_within_the_brokers_bounds():
    assert validate_group_configs(DEFAULT, {"consumer.session.timeout.ms": "50000",
                                            "consumer.heartbeat.interval.ms": "6000"}) == {
        "consumer.session.timeout.ms": "50000", "consumer.heartbeat.interval.ms": "6000"}
    with pytest.raises(ConfigError, match="range 45000 to 60000"):
        validate_group_configs(DEFAULT, {"consumer.session.timeout.ms": "1000"})
    resolved = resolve_group_config(DEFAULT, {"consumer.session.timeout.ms": "50000"})
    assert (resolved.consumer_session_timeout_ms, resolved.consumer_heartbeat_interval_ms) == (50000, 5000)
    broker = BrokerConfig.from_props({"group.consumer.min.heartbeat.interval.ms": "100",
                                      "group.consumer.heartbeat.interval.ms": "300"})
    assert resolve_group_config(broker, {}).consumer_heartbeat_interval_ms == 300


def test_session_timeout_must_exceed_the_heartbeat_interval_counting_the_broker_value():
    broker = BrokerConfig.from_props({"group.share.max.heartbeat.interval.ms": "60000"})
    with pytest.raises(ConfigError, match="share.session.timeout.ms .45000. must be greater than "
                                          "share.heartbeat.interval.ms .50000."):
        validate_group_configs(broker, {"share.heartbeat.interval.ms": "50000"})
    validate_group_configs(broker, {"share.heartbeat.interval.ms": "50000", "share.session.timeout.ms": "60000"})


def test_stored_values_outside_bounds_changed_later_are_clamped():
    stored = {"share.record.lock.duration.ms": "60000", "share.delivery.count.limit": "2"}
    broker = BrokerConfig.from_props({"group.share.max.record.lock.duration.ms": "40000",
                                      "group.share.min.delivery.count.limit": "3"})
    resolved = resolve_group_config(broker, stored)
    assert resolved.record_lock_duration_ms == 40000 and resolved.delivery_count_limit == 3


@pytest.mark.parametrize("value, ms", [
    ("by_duration:PT1M", 60000), ("by_duration:PT0S", 0), ("by_duration:P1DT2H", 93600000),
    ("by_duration:pt1.5s", 1500), ("BY_DURATION:PT10M", 600000), ("latest", None), ("earliest", None),
])
def test_by_duration_is_parsed_into_milliseconds(value, ms):
    assert auto_offset_reset_duration_ms(value) == ms
    if value.startswith("by"):
        assert validate_group_configs(DEFAULT, {"share.auto.offset.reset": value})
        assert resolve_group_config(DEFAULT, {"share.auto.offset.reset": value}).auto_offset_reset_duration_ms == ms


@pytest.mark.parametrize("text", ["P", "PT", "1M", "PT1", "P1H", "PT1M2", ""])
def test_malformed_iso_durations_do_not_parse(text):
    assert cfg.iso_duration_ms(text) is None


def test_describe_of_a_group_without_overrides_lists_every_key_with_broker_defaults():
    entries = {e.name: e for e in describe_group_configs(DEFAULT, {})}
    assert sorted(entries) == sorted(GROUP_KEYS)
    lock = entries["share.record.lock.duration.ms"]
    assert (lock.value, lock.source, lock.read_only) == ("30000", cfg.DEFAULT_CONFIG, False)
    assert lock.synonyms == [cfg.ConfigSynonym("group.share.record.lock.duration.ms", "30000", cfg.DEFAULT_CONFIG)]
    reset = entries["share.auto.offset.reset"]
    assert (reset.value, reset.source, reset.synonyms, reset.type) == ("latest", cfg.DEFAULT_CONFIG, [], "string")


def test_describe_reports_group_overrides_and_static_broker_values_with_their_sources():
    broker = BrokerConfig.from_props({"group.share.delivery.count.limit": "4"})
    entries = {e.name: e for e in describe_group_configs(broker, {"share.heartbeat.interval.ms": "6000"})}
    heartbeat = entries["share.heartbeat.interval.ms"]
    assert (heartbeat.value, heartbeat.source) == ("6000", cfg.GROUP_CONFIG) and int(cfg.GROUP_CONFIG) == 8
    assert [s.source for s in heartbeat.synonyms] == [cfg.GROUP_CONFIG, cfg.DEFAULT_CONFIG]
    limit = entries["share.delivery.count.limit"]
    assert (limit.value, limit.source) == ("4", cfg.STATIC_BROKER_CONFIG)


def test_describe_can_be_limited_to_named_keys():
    assert [e.name for e in describe_group_configs(DEFAULT, {}, ["share.isolation.level", "nope"])] == [
        "share.isolation.level"]


# --------------------------------------------------------------------------- quafka's delivery controls

QUAFKA_KEYS = {
    "quafka.share.redelivery.backoff.ms": "0", "quafka.share.redelivery.backoff.max.ms": "3600000",
    "quafka.share.redelivery.backoff.multiplier": "2.0", "quafka.share.redelivery.backoff.jitter": "0.0",
    "quafka.share.delivery.delay.enable": "false", "quafka.share.delivery.delay.max.ms": "604800000",
    "quafka.share.key.ordering": "false", "quafka.share.key.ordering.on.failure": "continue",
}


def test_quafkas_keys_are_off_by_default_and_described_as_extensions():
    assert {k for k in GROUP_KEYS if k.startswith("quafka.")} == set(QUAFKA_KEYS)
    described = {e.name: e for e in describe_group_configs(DEFAULT, {})}
    for name, default in QUAFKA_KEYS.items():
        assert described[name].value == default, name
        assert described[name].documentation == GROUP_KEYS[name].doc and GROUP_KEYS[name].doc, name
        assert "quafka extension" in GROUP_KEYS[name].note, name
    resolved = resolve_group_config(DEFAULT, {})
    assert (resolved.redelivery_backoff_ms, resolved.delivery_delay_enable, resolved.key_ordering) == (0, False, False)


@pytest.mark.parametrize("configs, key, fragment", [
    ({"quafka.share.redelivery.backoff.ms": "-1"}, "quafka.share.redelivery.backoff.ms",
     "Value must be in the range 0 to 604800000 inclusive"),
    ({"quafka.share.redelivery.backoff.ms": "700000000"}, "quafka.share.redelivery.backoff.ms", "0 to 604800000"),
    ({"quafka.share.redelivery.backoff.ms": "soon"}, "quafka.share.redelivery.backoff.ms", "Not a number of type LONG"),
    ({"quafka.share.redelivery.backoff.max.ms": "0"}, "quafka.share.redelivery.backoff.max.ms",
     "Value must be in the range 1 to 604800000 inclusive"),
    ({"quafka.share.redelivery.backoff.ms": "7200000"}, "quafka.share.redelivery.backoff.ms",
     "quafka.share.redelivery.backoff.max.ms (3600000) must be at least quafka.share.redelivery.backoff.ms (7200000)"),
    ({"quafka.share.redelivery.backoff.ms": "5000", "quafka.share.redelivery.backoff.max.ms": "1000"},
     "quafka.share.redelivery.backoff.max.ms", "must be at least quafka.share.redelivery.backoff.ms (5000)"),
    ({"quafka.share.redelivery.backoff.multiplier": "0.5"}, "quafka.share.redelivery.backoff.multiplier",
     "Value must be in the range 1.0 to 100.0 inclusive"),
    ({"quafka.share.redelivery.backoff.multiplier": "NaN"}, "quafka.share.redelivery.backoff.multiplier",
     "1.0 to 100.0"),
    ({"quafka.share.redelivery.backoff.jitter": "1.5"}, "quafka.share.redelivery.backoff.jitter",
     "Value must be in the range 0.0 to 1.0 inclusive"),
    ({"quafka.share.delivery.delay.enable": "yes"}, "quafka.share.delivery.delay.enable", "either true or false"),
    ({"quafka.share.delivery.delay.max.ms": "0"}, "quafka.share.delivery.delay.max.ms",
     "Value must be in the range 1 to 31536000000 inclusive"),
    ({"quafka.share.key.ordering": "1"}, "quafka.share.key.ordering", "either true or false"),
    ({"quafka.share.key.ordering": "true", "quafka.share.key.ordering.on.failure": "stop"},
     "quafka.share.key.ordering.on.failure", "String must be one of: continue, park, dead-letter"),
    ({"quafka.share.key.ordering.on.failure": "park"}, "quafka.share.key.ordering.on.failure",
     "needs quafka.share.key.ordering=true"),
])
def test_bad_values_of_quafkas_keys_are_refused_naming_the_allowed_range(configs, key, fragment):
    with pytest.raises(ConfigError) as info:
        validate_group_configs(DEFAULT, configs)
    assert info.value.key == key and fragment in str(info.value), str(info.value)


def test_unknown_quafka_keys_are_refused_not_stored():
    with pytest.raises(ConfigError, match="Unknown group config name: quafka.share.redelivery.backoff"):
        validate_group_configs(DEFAULT, {"quafka.share.redelivery.backoff": "100"})


def test_good_values_of_quafkas_keys_resolve():
    resolved = resolve_group_config(DEFAULT, {
        "quafka.share.redelivery.backoff.ms": "200", "quafka.share.redelivery.backoff.max.ms": "1600",
        "quafka.share.redelivery.backoff.multiplier": "2", "quafka.share.redelivery.backoff.jitter": "0.25",
        "quafka.share.delivery.delay.enable": "true", "quafka.share.delivery.delay.max.ms": "86400000",
        "quafka.share.key.ordering": "true", "quafka.share.key.ordering.on.failure": "dead-letter"})
    assert (resolved.redelivery_backoff_ms, resolved.redelivery_backoff_max_ms, resolved.redelivery_backoff_multiplier,
            resolved.redelivery_backoff_jitter, resolved.delivery_delay_enable, resolved.delivery_delay_max_ms,
            resolved.key_ordering, resolved.key_ordering_on_failure) == (
        200, 1600, 2.0, 0.25, True, 86_400_000, True, "dead-letter")
