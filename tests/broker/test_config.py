"""quafka.broker.config: Kafka's names, defaults and ranges; precedence; ignored keys; listeners;
dynamic overrides; topic configs; DescribeConfigs output; the generated docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from quafka.broker import config as cfg
from quafka.broker.config import (
    BROKER_KEYS,
    CONFIG_TYPE_IDS,
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    IGNORED_KEYS,
    IGNORED_PREFIXES,
    MAX_LONG,
    STATIC_BROKER_CONFIG,
    TOPIC_KEYS,
    BrokerConfig,
    ConfigEntry,
    ConfigError,
    ConfigSynonym,
    Listener,
    describe_broker_configs,
    describe_topic_configs,
    load_properties_file,
    log_config,
    parse_properties,
    resolve_topic_configs,
    validate_topic_configs,
)
from quafka.broker.storage.base import LogConfig

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"

# The single-node KRaft server.properties of Kafka 4.x's quickstart (config/server.properties).
KRAFT_QUICKSTART = """\
############################# Server Basics #############################
# The role of this server. Setting this puts us in KRaft mode
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
############################# Socket Server Settings #############################
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
############################# Log Basics #############################
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
#log.flush.interval.messages=10000
#log.flush.interval.ms=1000
log.retention.hours=168
#log.retention.bytes=1073741824
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def broker(**props: object) -> BrokerConfig:
    return BrokerConfig.from_props({k.replace("_", "."): v for k, v in props.items()})


def refused(props: dict[str, object]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_props(props)
    return info.value


# --------------------------------------------------------------------------- defaults


@pytest.mark.parametrize("name, default", [
    ("num.partitions", 1),
    ("auto.create.topics.enable", True),
    ("delete.topic.enable", True),
    ("log.segment.bytes", 1073741824),
    ("log.roll.ms", None),
    ("log.roll.hours", 168),
    ("log.retention.ms", None),
    ("log.retention.minutes", None),
    ("log.retention.hours", 168),
    ("log.retention.bytes", -1),
    ("log.retention.check.interval.ms", 300000),
    ("log.flush.interval.messages", MAX_LONG),
    ("log.flush.interval.ms", None),
    ("log.flush.scheduler.interval.ms", MAX_LONG),
    ("log.index.interval.bytes", 4096),
    ("log.index.size.max.bytes", 10485760),
    ("log.segment.delete.delay.ms", 60000),
    ("log.cleanup.policy", ["delete"]),
    ("log.message.timestamp.type", "CreateTime"),
    ("log.message.timestamp.before.max.ms", MAX_LONG),
    ("log.message.timestamp.after.max.ms", 3600000),  # KIP-1030, Kafka 4.0
    ("message.max.bytes", 1048588),
    ("socket.request.max.bytes", 104857600),
    ("offsets.topic.num.partitions", 50),
    ("compression.type", "producer"),
    ("advertised.listeners", None),
    ("log.dirs", None),
])
def test_broker_defaults_match_kafka(name, default):
    assert BrokerConfig.from_props({}).get(name) == default
    assert BROKER_KEYS[name].default == default


def test_deviating_defaults_are_quafka_s_and_documented_as_such():
    config = BrokerConfig.from_props({})
    assert config.listeners == [Listener("PLAINTEXT", "127.0.0.1", 9092)]
    assert config.log_dir == "./quafka-data"
    assert config.node_id == 1
    for name in ("listeners", "log.dir", "node.id", "offsets.topic.segment.bytes"):
        assert BROKER_KEYS[name].note, name


@pytest.mark.parametrize("name, default", [
    ("segment.bytes", 1073741824), ("segment.ms", 604800000), ("retention.ms", 604800000),
    ("retention.bytes", -1), ("flush.messages", MAX_LONG), ("flush.ms", MAX_LONG),
    ("index.interval.bytes", 4096), ("max.message.bytes", 1048588), ("cleanup.policy", ["delete"]),
    ("delete.retention.ms", 86400000), ("min.insync.replicas", 1), ("min.cleanable.dirty.ratio", 0.5),
    ("segment.jitter.ms", 0), ("segment.index.bytes", 10485760), ("local.retention.ms", -2),
    ("message.timestamp.after.max.ms", 3600000), ("unclean.leader.election.enable", False),
])
def test_topic_defaults_match_kafka(name, default):
    assert TOPIC_KEYS[name].default == default
    assert BrokerConfig.from_props({}).topic_default(name) == default


def test_every_key_is_well_formed():
    for key in BROKER_KEYS.values():
        assert key.dynamic in ("read-only", "per-broker", "cluster-wide"), key.name
        assert key.type in CONFIG_TYPE_IDS, key.name
        assert key.doc and key.validate(key.default) is None, key.name
        if key.topic_synonym:
            assert key.name in TOPIC_KEYS[key.topic_synonym].broker_synonyms
    for key in TOPIC_KEYS.values():
        assert key.dynamic == "per-topic" and key.topic_synonym is None
        assert key.validate(key.default) is None, key.name
        assert all(s in BROKER_KEYS for s in key.broker_synonyms)


@pytest.mark.parametrize("name, mode", [
    ("listeners", "per-broker"), ("advertised.listeners", "read-only"), ("log.dirs", "read-only"),
    ("node.id", "read-only"), ("num.partitions", "read-only"), ("log.segment.bytes", "cluster-wide"),
    ("log.retention.ms", "cluster-wide"), ("log.retention.hours", "read-only"), ("log.roll.ms", "cluster-wide"),
    ("log.roll.hours", "read-only"), ("message.max.bytes", "cluster-wide"), ("compression.type", "cluster-wide"),
    ("log.flush.interval.ms", "cluster-wide"), ("log.flush.scheduler.interval.ms", "read-only"),
    ("log.retention.check.interval.ms", "read-only"), ("socket.request.max.bytes", "read-only"),
])
def test_update_modes_are_kafka_s(name, mode):
    assert BROKER_KEYS[name].dynamic == mode


# --------------------------------------------------------------------------- ranges and types


@pytest.mark.parametrize("name, value, message", [
    ("log.segment.bytes", "1000",
     "Invalid value 1000 for configuration log.segment.bytes: Value must be at least 1048576"),
    ("num.partitions", "0", "Invalid value 0 for configuration num.partitions: Value must be at least 1"),
    ("message.max.bytes", "-1", "Invalid value -1 for configuration message.max.bytes: Value must be at least 0"),
    ("socket.request.max.bytes", "0", "Value must be at least 1"),
    ("offsets.topic.num.partitions", "0", "Value must be at least 1"),
    ("log.roll.hours", "0", "Invalid value 0 for configuration log.roll.hours: Value must be at least 1"),
    ("log.roll.ms", "0", "Value must be at least 1"),
    ("log.retention.check.interval.ms", "0", "Value must be at least 1"),
    ("log.flush.interval.messages", "0", "Value must be at least 1"),
    ("log.flush.interval.ms", "-5", "Value must be at least 0"),
    ("log.index.interval.bytes", "-1", "Value must be at least 0"),
    ("node.id", "-1", "Invalid value -1 for configuration node.id: Value must be at least 0"),
    ("compression.zstd.level", "23", "Value must be no more than 22"),
    ("log.message.timestamp.type", "WallClock",
     "Invalid value WallClock for configuration log.message.timestamp.type: String must be one of: "
     "CreateTime, LogAppendTime"),
    ("num.partitions", "three", "Invalid value three for configuration num.partitions: Not a number of type INT"),
    ("log.segment.bytes", "4294967296", "Not a number of type INT"),
    ("log.retention.ms", "1.5", "Not a number of type LONG"),
    ("auto.create.topics.enable", "yes", "Expected value to be either true or false"),
])
def test_each_range_is_enforced_with_a_message_naming_key_value_and_range(name, value, message):
    error = refused({name: value})
    assert message in str(error)
    assert error.key == name and str(error.value) == value


def test_config_error_carries_the_allowed_range():
    error = refused({"log.segment.bytes": "1000"})
    assert (error.key, error.value, error.allowed) == ("log.segment.bytes", "1000", "[1048576,...]")


def test_values_are_trimmed_and_booleans_are_case_insensitive():
    config = broker(num_partitions=" 3 ", auto_create_topics_enable="FALSE")
    assert config.num_partitions == 3 and config.auto_create_topics_enable is False


def test_typed_values_from_embedded_use_are_accepted():
    config = BrokerConfig.from_props({"num.partitions": 4, "auto.create.topics.enable": False,
                                      "listeners": ["PLAINTEXT://127.0.0.1:0"]})
    assert config.num_partitions == 4 and config.auto_create_topics_enable is False
    assert config.listeners == [Listener("PLAINTEXT", "127.0.0.1", 0)]


def test_the_first_error_in_the_properties_is_raised():
    error = refused({"num.partitions": "0", "log.segment.bytes": "1"})
    assert error.key == "num.partitions"


def test_cleanup_policy_accepts_compact_delete_both_or_nothing():
    for value, parsed in (("compact", ["compact"]), ("delete,compact", ["delete", "compact"]), ("", [])):
        assert broker(log_cleanup_policy=value).get("log.cleanup.policy") == parsed
    assert "String must be one of: compact, delete" in str(refused({"log.cleanup.policy": "forever"}))
    assert "duplicated" in str(refused({"log.cleanup.policy": "compact,compact"}))


def test_log_cleaner_threads_other_than_one_is_refused_and_cleaner_keys_are_served():
    error = refused({"log.cleaner.threads": "2"})
    assert error.key == "log.cleaner.threads" and "exactly one log cleaner thread" in str(error)
    config = broker(log_cleaner_backoff_ms="50", log_cleaner_delete_retention_ms="7")
    assert config.get("log.cleaner.backoff.ms") == 50 and not config.warnings
    assert cfg.compaction_config(config, {}).delete_retention_ms == 7  # the broker default of delete.retention.ms
    assert cfg.compaction_config(config, {"delete.retention.ms": "9"}).delete_retention_ms == 9
    assert "Unknown configuration log.cleaner.nonsense" in str(refused({"log.cleaner.nonsense": "1"}))


def test_every_kafka_compression_type_is_accepted_and_others_are_refused():
    """BrokerCompressionType's names, with the KIP-390 levels in Kafka's ranges."""
    for value in ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"):
        assert broker(compression_type=value).get("compression.type") == value
        assert validate_topic_configs({"compression.type": value}) == {"compression.type": value}
    error = refused({"compression.type": "brotli"})
    assert error.key == "compression.type" and "String must be one of" in str(error)
    assert refused({"compression.gzip.level": "10"}).key == "compression.gzip.level"
    assert refused({"compression.lz4.level": "18"}).key == "compression.lz4.level"
    assert refused({"compression.zstd.level": "23"}).key == "compression.zstd.level"


# --------------------------------------------------------------------------- precedence


def test_retention_precedence_is_ms_then_minutes_then_hours():
    assert broker().log_retention_ms() == 168 * 3_600_000
    assert broker(log_retention_hours=2).log_retention_ms() == 7_200_000
    assert broker(log_retention_hours=2, log_retention_minutes=3).log_retention_ms() == 180_000
    assert broker(log_retention_hours=2, log_retention_minutes=3, log_retention_ms=42).log_retention_ms() == 42


def test_negative_retention_means_unlimited_and_zero_is_refused():
    assert broker(log_retention_ms=-1).log_retention_ms() == -1
    assert broker(log_retention_ms=-100).log_retention_ms() == -1
    assert broker(log_retention_hours=-1).log_retention_ms() == -1
    assert broker(log_retention_minutes=-5, log_retention_hours=1).log_retention_ms() == -1
    for name in ("log.retention.ms", "log.retention.minutes", "log.retention.hours"):
        error = refused({name: "0"})
        assert error.key == name and "unlimited (-1) or at least 1 ms" in str(error)


def test_roll_precedence_is_ms_then_hours():
    assert broker().log_roll_ms() == 604_800_000
    assert broker(log_roll_hours=1).log_roll_ms() == 3_600_000
    assert broker(log_roll_hours=1, log_roll_ms=5000).log_roll_ms() == 5000
    assert broker(log_roll_jitter_hours=1).log_roll_jitter_ms() == 3_600_000


def test_flush_interval_falls_back_to_the_scheduler_interval():
    assert broker().log_flush_interval_ms() == MAX_LONG
    assert broker(log_flush_scheduler_interval_ms=2000).log_flush_interval_ms() == 2000
    assert broker(log_flush_scheduler_interval_ms=2000, log_flush_interval_ms=10).log_flush_interval_ms() == 10
    assert refused({"log.flush.scheduler.interval.ms": "-1"}).key == "log.flush.scheduler.interval.ms"


def test_log_dirs_wins_over_log_dir_and_only_one_directory_is_supported():
    assert broker(log_dir="/a").log_dir == "/a"
    assert broker(log_dir="/a", log_dirs="/b").log_dir == "/b"
    error = refused({"log.dirs": "/a,/b"})
    assert error.key == "log.dirs" and "exactly one log directory" in str(error)
    assert refused({"log.dir": "/a, /b"}).key == "log.dir"
    assert "Values must not be duplicated" in str(refused({"log.dirs": "/a,/a"}))
    assert refused({"log.dirs": ""}).key == "log.dirs"


def test_broker_id_is_a_synonym_of_node_id():
    assert broker(broker_id=7).node_id == 7
    assert broker(node_id=7).get("broker.id") == 7
    assert broker(node_id=7, broker_id=7).node_id == 7
    error = refused({"node.id": "1", "broker.id": "2"})
    assert error.key == "broker.id" and "same value" in str(error)


# --------------------------------------------------------------------------- ignored and unknown keys


def test_kraft_quickstart_properties_are_accepted_with_one_warning_per_ignored_key(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text(KRAFT_QUICKSTART)
    config = BrokerConfig.from_props(load_properties_file(path))
    assert config.listeners == [Listener("PLAINTEXT", "", 9092)]
    assert config.advertised_listeners == [Listener("PLAINTEXT", "localhost", 9092)]
    assert config.log_dir == "/tmp/kraft-combined-logs"
    ignored = [line for line in config.warnings if line.startswith("ignoring ") and "=" in line.split(":")[0]]
    assert ("ignoring process.roles=broker,controller: quafka is always one combined node; "
            "there are no roles to assign") in config.warnings
    keys = {line.split("=", 1)[0].removeprefix("ignoring ") for line in ignored}
    assert keys == {
        "process.roles", "controller.quorum.bootstrap.servers", "inter.broker.listener.name",
        "controller.listener.names", "num.network.threads", "num.io.threads",
        "socket.send.buffer.bytes", "socket.receive.buffer.bytes", "num.recovery.threads.per.data.dir",
        "offsets.topic.replication.factor", "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr", "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
    }
    assert any("ignoring listener CONTROLLER://:9093 in listeners" in w for w in config.warnings)


@pytest.mark.parametrize("name", [
    "default.replication.factor", "unclean.leader.election.enable",
    "background.threads", "num.replica.fetchers", "metadata.log.dir",
    "metric.reporters", "replica.lag.time.max.ms",
    "controller.quorum.voters", "controller.quorum.election.timeout.ms",
])
def test_ignored_keys_produce_one_warning_line(name):
    config = BrokerConfig.from_props({name: "1"})
    assert config.warnings == [f"ignoring {name}=1: {cfg.ignored_reason(name)}"]
    with pytest.raises(KeyError):
        config.get(name)


def test_unknown_keys_are_refused():
    error = refused({"log.segmnet.bytes": "1048576"})
    assert error.key == "log.segmnet.bytes" and "Unknown configuration log.segmnet.bytes" in str(error)


@pytest.mark.parametrize("name, reason", [
    ("sasl.kerberos.service.name", "does not serve GSSAPI"), ("sasl.login.class", "cannot load Java classes"),
    ("principal.builder.class", "no authentication or authorization"),
    ("authorizer.class.name", "cannot load the Java class x"),
    ("super.users", "principalType:principalName"),
    ("log.message.format.version", "removed in Kafka 4.0"),
    ("message.downconversion.enable", "removed in Kafka 4.0"),
    ("group.consumer.migration.policy", "DISABLED, UPGRADE, DOWNGRADE, BIDIRECTIONAL"),
])
def test_refused_keys_say_why(name, reason):
    error = refused({name: "x"})
    assert error.key == name and reason in str(error)


def test_the_standard_authorizer_is_accepted_and_the_removed_aclauthorizer_refused_with_why():
    """Kafka 4.x: StandardAuthorizer (KRaft); kafka.security.authorizer.AclAuthorizer went with ZooKeeper."""
    config = cfg.BrokerConfig.from_props({"authorizer.class.name": cfg.STANDARD_AUTHORIZER,
                                          "super.users": "User:admin;User:ops", "allow.everyone.if.no.acl.found": "true"})
    assert config.get("super.users") == "User:admin;User:ops" and config.get("allow.everyone.if.no.acl.found") is True
    assert cfg.BrokerConfig.from_props({}).get("authorizer.class.name") == ""
    error = refused({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    assert "removed in Kafka 4.0" in str(error)


# --------------------------------------------------------------------------- listeners


def test_listeners_are_parsed_into_name_host_port():
    config = broker(listeners="PLAINTEXT://0.0.0.0:9092,  CLIENT://[::1]:0",
                    listener_security_protocol_map="CLIENT:PLAINTEXT,PLAINTEXT:PLAINTEXT")
    assert config.listeners == [Listener("PLAINTEXT", "0.0.0.0", 9092), Listener("CLIENT", "::1", 0)]
    assert str(config.listeners[1]) == "CLIENT://[::1]:0"
    assert config.advertised_listeners == config.listeners
    assert broker(listeners="plaintext://host:1").listeners == [Listener("PLAINTEXT", "host", 1)]


def test_an_empty_host_binds_every_interface():
    assert broker(listeners="PLAINTEXT://:9092").listeners == [Listener("PLAINTEXT", "", 9092)]


@pytest.mark.parametrize("listeners, map_, fragment", [
    ("CLIENT://:9093", None, "No security protocol defined for listener CLIENT"),
    ("PLAINTEXT:9092", None, "Unable to parse"),
    ("PLAINTEXT://:70000", None, "out of range"),
    ("PLAINTEXT://:9092,PLAINTEXT://:9093", None, "different name"),
    ("PLAINTEXT://:9092,PLAINTEXT://:9092", None, "must not be duplicated"),
    ("PLAINTEXT://:9092,CLIENT://:9092", "CLIENT:PLAINTEXT,PLAINTEXT:PLAINTEXT", "different port"),
    ("", None, "must not be empty"),
])
def test_bad_listeners_are_refused_naming_the_key(listeners, map_, fragment):
    props = {"listeners": listeners}
    if map_:
        props["listener.security.protocol.map"] = map_
    error = refused(props)
    assert error.key == "listeners" and fragment in str(error)


def test_only_controller_listeners_left_is_refused():
    error = refused({"listeners": "CONTROLLER://:9093", "controller.listener.names": "CONTROLLER"})
    assert error.key == "listeners" and "no broker listener is left" in str(error)


def test_advertised_listeners_are_checked():
    config = broker(listeners="PLAINTEXT://0.0.0.0:9092", advertised_listeners="PLAINTEXT://broker.example:19092")
    assert config.advertised_listeners == [Listener("PLAINTEXT", "broker.example", 19092)]
    error = refused({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "PLAINTEXT://0.0.0.0:9092"})
    assert error.key == "advertised.listeners" and "0.0.0.0" in str(error)
    error = refused({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "OTHER://h:9092",
                     "listener.security.protocol.map": "OTHER:PLAINTEXT,PLAINTEXT:PLAINTEXT"})
    assert error.key == "advertised.listeners" and "not one of the listeners" in str(error)
    assert refused({"advertised.listeners": "SSL://h:9093"}).key == "advertised.listeners"


# --------------------------------------------------------------------------- dynamic broker configs


def test_read_only_keys_cannot_be_updated_dynamically():
    with pytest.raises(ConfigError) as info:
        broker().with_dynamic({"num.partitions": "3", "log.dirs": "/x", "log.retention.ms": "1000"})
    assert str(info.value) == "Cannot update these configs dynamically: [num.partitions, log.dirs]"
    assert info.value.key == "num.partitions"


def test_per_broker_keys_cannot_be_cluster_defaults():
    with pytest.raises(ConfigError) as info:
        broker().with_dynamic(cluster_default={"listeners": "PLAINTEXT://:9093"})
    assert "broker id must be specified: [listeners]" in str(info.value)
    assert broker().with_dynamic({"listeners": "PLAINTEXT://:9093"}).listeners == [Listener("PLAINTEXT", "", 9093)]


def test_dynamic_values_are_validated():
    with pytest.raises(ConfigError, match="Value must be at least 1048576"):
        broker().with_dynamic(cluster_default={"log.segment.bytes": "10"})
    with pytest.raises(ConfigError, match="Unknown configuration"):
        broker().with_dynamic({"no.such.key": "1"})
    with pytest.raises(ConfigError, match="unlimited"):
        broker().with_dynamic({"log.retention.ms": "0"})


def test_per_broker_beats_cluster_default_beats_static_beats_default():
    static = broker(log_segment_bytes=2_000_000)
    assert (static.get("log.segment.bytes"), static.source_of("log.segment.bytes")) == (2_000_000, STATIC_BROKER_CONFIG)
    assert static.source_of("message.max.bytes") == DEFAULT_CONFIG
    both = static.with_dynamic(per_broker={"log.segment.bytes": "4000000"},
                               cluster_default={"log.segment.bytes": "3000000", "message.max.bytes": "2000"})
    assert (both.get("log.segment.bytes"), both.source_of("log.segment.bytes")) == (4_000_000, DYNAMIC_BROKER_CONFIG)
    assert (both.get("message.max.bytes"), both.source_of("message.max.bytes")) == (2000, DYNAMIC_DEFAULT_BROKER_CONFIG)
    removed = both.with_dynamic({"log.segment.bytes": None})
    assert (removed.get("log.segment.bytes"), removed.source_of("log.segment.bytes")) == (
        3_000_000, DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert static.get("log.segment.bytes") == 2_000_000  # configs are immutable
    assert both.dynamic_broker_configs == {"log.segment.bytes": "4000000"}
    assert both.dynamic_default_configs == {"log.segment.bytes": "3000000", "message.max.bytes": "2000"}
    assert both.static_configs == {"log.segment.bytes": "2000000"}


def test_dynamic_retention_ms_beats_static_hours():
    config = broker(log_retention_hours=1).with_dynamic(cluster_default={"log.retention.ms": "5000"})
    assert config.log_retention_ms() == 5000
    assert config.with_dynamic(cluster_default={"log.retention.ms": None}).log_retention_ms() == 3_600_000


def test_ignored_keys_in_dynamic_updates_only_warn():
    config = broker().with_dynamic({"num.io.threads": "16"})
    assert config.warnings[-1].startswith("ignoring num.io.threads=16: ")


# --------------------------------------------------------------------------- topic configs


def test_log_config_takes_topic_overrides_then_broker_synonyms():
    config = broker(log_segment_bytes=2_000_000, log_roll_hours=2, log_retention_minutes=10,
                    log_flush_interval_messages=1, log_index_interval_bytes=100, log_retention_bytes=5000)
    assert log_config(config) == LogConfig(segment_bytes=2_000_000, segment_ms=7_200_000, retention_ms=600_000,
                                           retention_bytes=5000, flush_messages=1, flush_ms=MAX_LONG,
                                           index_interval_bytes=100)
    overridden = log_config(config, {"segment.bytes": "1048576", "segment.ms": "1000", "retention.ms": "-1",
                                     "retention.bytes": "-7", "flush.messages": "10", "flush.ms": "500",
                                     "index.interval.bytes": "0"})
    assert overridden == LogConfig(1048576, 1000, -1, -1, 10, 500, 0)
    assert log_config(BrokerConfig.from_props({})) == LogConfig()


def test_an_empty_cleanup_policy_keeps_data_forever():
    config = broker(log_retention_ms=1000, log_retention_bytes=10)
    assert log_config(config, {"cleanup.policy": ""}).retention_ms == -1
    assert log_config(config, {"cleanup.policy": ""}).retention_bytes == -1
    assert log_config(broker(log_cleanup_policy="", log_retention_ms=1000)).retention_ms == -1


def test_validate_topic_configs_normalises_values():
    assert validate_topic_configs({"retention.ms": " 1000 ", "preallocate": "TRUE", "cleanup.policy": " delete "}) == {
        "retention.ms": "1000", "preallocate": "true", "cleanup.policy": "delete"}
    assert validate_topic_configs({"min.insync.replicas": "2"}) == {"min.insync.replicas": "2"}


@pytest.mark.parametrize("configs, key, fragment", [
    ({"retention.ms": "-2"}, "retention.ms", "Value must be at least -1"),
    ({"segment.bytes": "1048575"}, "segment.bytes", "Value must be at least 1048576"),
    ({"segment.ms": "0"}, "segment.ms", "Value must be at least 1"),
    ({"min.insync.replicas": "0"}, "min.insync.replicas", "Value must be at least 1"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio", "Value must be no more than 1"),
    ({"cleanup.policy": "compact,squash"}, "cleanup.policy", "String must be one of: compact, delete"),
    ({"compression.type": "brotli"}, "compression.type", "String must be one of"),
    ({"compression.zstd.level": "23"}, "compression.zstd.level", "Value must be no more than 22"),
    ({"remote.storage.enable": "true"}, "remote.storage.enable", "no tiered storage"),
    ({"message.timestamp.type": "Now"}, "message.timestamp.type", "String must be one of"),
    ({"leader.replication.throttled.replicas": "0:1,x"}, "leader.replication.throttled.replicas", "pairs"),
    ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, "min.compaction.lag.ms", "conflicting"),
    ({"message.downconversion.enable": "true"}, "message.downconversion.enable", "removed in Kafka 4.0"),
    ({"no.such.config": "1"}, "no.such.config", "Unknown topic config name: no.such.config"),
    ({"retention.ms": None}, "retention.ms", "Null value not supported for topic configs: retention.ms"),
])
def test_bad_topic_configs_are_refused(configs, key, fragment):
    with pytest.raises(ConfigError) as info:
        validate_topic_configs(configs)
    assert info.value.key == key and fragment in str(info.value)


def test_resolve_topic_configs_renders_every_effective_value():
    values = resolve_topic_configs(broker(message_max_bytes=2000), {"message.timestamp.type": "LogAppendTime"})
    assert set(values) == set(TOPIC_KEYS)
    assert values["max.message.bytes"] == "2000"
    assert values["message.timestamp.type"] == "LogAppendTime"
    assert values["cleanup.policy"] == "delete"


# --------------------------------------------------------------------------- DescribeConfigs


def by_name(entries: list[ConfigEntry]) -> dict[str, ConfigEntry]:
    return {e.name: e for e in entries}


def test_describe_broker_configs_shape():
    entries = describe_broker_configs(broker(log_segment_bytes=2_000_000))
    assert [e.name for e in entries] == sorted(BROKER_KEYS)
    segment = by_name(entries)["log.segment.bytes"]
    assert segment == ConfigEntry(
        "log.segment.bytes", "2000000", STATIC_BROKER_CONFIG, False, False, "int", BROKER_KEYS["log.segment.bytes"].doc,
        [ConfigSynonym("log.segment.bytes", "2000000", STATIC_BROKER_CONFIG),
         ConfigSynonym("log.segment.bytes", "1073741824", DEFAULT_CONFIG)])
    entry = by_name(entries)
    assert entry["num.partitions"].read_only and entry["num.partitions"].source == DEFAULT_CONFIG
    assert entry["auto.create.topics.enable"].value == "true"
    assert entry["log.cleanup.policy"].value == "delete"
    assert entry["listeners"].value == "PLAINTEXT://127.0.0.1:9092"
    assert entry["log.retention.ms"].value is None and entry["log.retention.ms"].synonyms == []
    assert CONFIG_TYPE_IDS[entry["log.retention.ms"].type] == 5
    assert [e.name for e in describe_broker_configs(broker(), ["num.partitions", "nope"])] == ["num.partitions"]


def test_describe_broker_lists_synonyms_in_kafka_order():
    config = broker(log_retention_ms=1000, log_retention_hours=5).with_dynamic(
        {"log.retention.ms": "3000"}, cluster_default={"log.retention.ms": "2000"})
    entry = by_name(describe_broker_configs(config))["log.retention.ms"]
    assert entry.value == "3000" and entry.source == DYNAMIC_BROKER_CONFIG
    assert entry.synonyms == [
        ConfigSynonym("log.retention.ms", "3000", DYNAMIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.ms", "2000", DYNAMIC_DEFAULT_BROKER_CONFIG),
        ConfigSynonym("log.retention.ms", "1000", STATIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "5", STATIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "168", DEFAULT_CONFIG),
    ]
    hours = by_name(describe_broker_configs(config))["log.retention.hours"]
    assert hours.source == STATIC_BROKER_CONFIG and hours.read_only


def test_describe_the_cluster_default_resource_lists_only_cluster_defaults():
    config = broker().with_dynamic({"message.max.bytes": "3000"}, cluster_default={"message.max.bytes": "2000"})
    entries = describe_broker_configs(config, default_resource=True)
    assert entries == [ConfigEntry("message.max.bytes", "2000", DYNAMIC_DEFAULT_BROKER_CONFIG, False, False, "int",
                                   BROKER_KEYS["message.max.bytes"].doc,
                                   [ConfigSynonym("message.max.bytes", "2000", DYNAMIC_DEFAULT_BROKER_CONFIG)])]


def test_describe_topic_configs_sources_and_synonyms():
    config = broker(log_segment_bytes=2_000_000).with_dynamic(cluster_default={"message.max.bytes": "5000"})
    entries = by_name(describe_topic_configs(config, {"segment.bytes": "1048576", "retention.ms": "1000"}))
    assert list(entries) == sorted(TOPIC_KEYS)
    segment = entries["segment.bytes"]
    assert (segment.value, segment.source, segment.read_only) == ("1048576", DYNAMIC_TOPIC_CONFIG, False)
    assert segment.synonyms == [ConfigSynonym("segment.bytes", "1048576", DYNAMIC_TOPIC_CONFIG),
                                ConfigSynonym("log.segment.bytes", "2000000", STATIC_BROKER_CONFIG),
                                ConfigSynonym("log.segment.bytes", "1073741824", DEFAULT_CONFIG)]
    assert entries["max.message.bytes"].value == "5000"
    assert entries["max.message.bytes"].source == DYNAMIC_DEFAULT_BROKER_CONFIG
    assert entries["flush.messages"].source == DEFAULT_CONFIG
    assert entries["retention.ms"].synonyms == [ConfigSynonym("retention.ms", "1000", DYNAMIC_TOPIC_CONFIG)]
    # min.insync.replicas is a served broker key (Kafka's cluster-wide default of the topic config,
    # set at cluster level on a new cluster: core/elr.py), so its default is listed as a synonym
    assert entries["min.insync.replicas"] == ConfigEntry(
        "min.insync.replicas", "1", DEFAULT_CONFIG, False, False, "int", TOPIC_KEYS["min.insync.replicas"].doc,
        [ConfigSynonym("min.insync.replicas", "1", DEFAULT_CONFIG)])
    assert [e.name for e in describe_topic_configs(config, {}, ["retention.ms"])] == ["retention.ms"]


def test_describe_topic_follows_kafka_in_listing_broker_synonyms_only_from_the_primary_one():
    # As Kafka does: synonyms before the first one named like the primary broker key are dropped,
    # so log.retention.hours alone does not show up (the value is still the effective one).
    entry = by_name(describe_topic_configs(broker(log_retention_hours=1)))["retention.ms"]
    assert (entry.value, entry.source, entry.synonyms) == ("3600000", DEFAULT_CONFIG, [])
    entry = by_name(describe_topic_configs(broker(log_retention_hours=1, log_retention_ms=5)))["retention.ms"]
    assert (entry.value, entry.source) == ("5", STATIC_BROKER_CONFIG)
    assert entry.synonyms == [ConfigSynonym("log.retention.ms", "5", STATIC_BROKER_CONFIG),
                              ConfigSynonym("log.retention.hours", "1", STATIC_BROKER_CONFIG),
                              ConfigSynonym("log.retention.hours", "168", DEFAULT_CONFIG)]


def test_config_type_ids_are_kafka_s():
    assert dict(CONFIG_TYPE_IDS) == {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6,
                                     "list": 7, "class": 8, "password": 9}
    assert cfg.config_type_id("unknown") == 0
    assert (DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG,
            DEFAULT_CONFIG) == (1, 2, 3, 4, 5)


# --------------------------------------------------------------------------- .properties parsing


def test_parse_properties_handles_comments_separators_and_whitespace():
    text = "# comment\n! also a comment\n\n  a=1\nb : 2 \nc 3\nd=\ne = x = y\n\tf:\t spaced value  \n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "", "e": "x = y", "f": "spaced value"}


def test_parse_properties_handles_continuations_and_escapes():
    text = "listeners=PLAINTEXT://:9092,\\\n    CONTROLLER://:9093\nkey\\=with\\:seps=v\\u00e9\\tx\nlast=a\\\\\nz=1\r\n"
    assert parse_properties(text) == {
        "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093", "key=with:seps": "v\u00e9\tx", "last": "a\\", "z": "1"}


def test_a_comment_line_does_not_continue_and_the_last_key_wins():
    assert parse_properties("# a \\\nb=1\nb=2") == {"b": "2"}


def test_malformed_unicode_escape_is_an_error():
    with pytest.raises(ConfigError, match="Malformed"):
        parse_properties("a=\\u12")


# --------------------------------------------------------------------------- documentation


def test_every_served_ignored_and_topic_key_is_in_the_docs():
    text = DOCS.read_text(encoding="utf-8")
    names = [*BROKER_KEYS, *IGNORED_KEYS, *TOPIC_KEYS, *(p + "*" for p in IGNORED_PREFIXES)]
    missing = [name for name in names if f"`{name}`" not in text]
    assert not missing, f"docs/configuration.md does not mention {missing}"


def test_generated_docs_tables_are_up_to_date():
    text = DOCS.read_text(encoding="utf-8")
    assert cfg.render_docs(text) == text, (
        "docs/configuration.md is out of date: run `python -m quafka.broker.config --write-docs docs/configuration.md`")


def test_docs_list_the_deviations():
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Deviations from Kafka"):]
    for needle in ("PLAINTEXT://127.0.0.1:9092", "./quafka-data", "Exactly one data directory", "node.id",
                   "Log compaction", "compression.type", "SIGKILL", "power"):
        assert needle in section, needle
    assert re.search(r"quafka broker --config server.properties --override", text)
    assert 'make run ARGS="--override' in text and "EmbeddedBroker(config=" in text


def test_a_state_topic_segment_size_below_the_segment_minimum_is_refused_at_start_up():
    """Kafka accepts it (atLeast(1)) but cannot then create __share_group_state (segment.bytes has a
    1 MiB minimum); quafka refuses it up front, naming the key and the minimum (found by tests/sim)."""
    with pytest.raises(cfg.ConfigError) as info:
        cfg.BrokerConfig.from_props({"share.coordinator.state.topic.segment.bytes": "1000"})
    assert "share.coordinator.state.topic.segment.bytes" in str(info.value) and "1048576" in str(info.value)


# --------------------------------------------------------------------------- the free-space watermark


def test_the_free_space_watermark_is_on_by_default():
    config = BrokerConfig.from_props({})
    assert config.get("quafka.log.dir.min.free.bytes") == 256 << 20
    assert config.get("quafka.log.dir.min.free.percent") == 1.0
    assert config.source_of("quafka.log.dir.min.free.bytes") == cfg.ConfigSource.DEFAULT_CONFIG


@pytest.mark.parametrize("key, value, message", [
    ("quafka.log.dir.min.free.bytes", "-1",
     "Invalid value -1 for configuration quafka.log.dir.min.free.bytes: Value must be at least 0"),
    ("quafka.log.dir.min.free.bytes", "lots",
     "Invalid value lots for configuration quafka.log.dir.min.free.bytes: Not a number of type LONG"),
    ("quafka.log.dir.min.free.percent", "60",
     "Invalid value 60 for configuration quafka.log.dir.min.free.percent: Value must be in the range 0.0 to 50.0 "
     "inclusive"),
    ("quafka.log.dir.min.free.percent", "-0.5",
     "Invalid value -0.5 for configuration quafka.log.dir.min.free.percent: Value must be in the range 0.0 to 50.0 "
     "inclusive"),
    ("quafka.log.dir.min.free.percent", "nan",
     "Invalid value nan for configuration quafka.log.dir.min.free.percent: Not a number of type DOUBLE"),
])
def test_free_space_watermark_values_are_validated(key, value, message):
    with pytest.raises(cfg.ConfigError) as info:
        BrokerConfig.from_props({key: value})
    assert str(info.value) == message
    with pytest.raises(cfg.ConfigError) as info:  # the same check for a dynamic change
        BrokerConfig.from_props({}).with_dynamic(cluster_default={key: value})
    assert str(info.value) == message


def test_free_space_watermark_zero_and_dynamic_values_are_taken():
    config = BrokerConfig.from_props({"quafka.log.dir.min.free.bytes": "0", "quafka.log.dir.min.free.percent": "0"})
    assert (config.get("quafka.log.dir.min.free.bytes"), config.get("quafka.log.dir.min.free.percent")) == (0, 0.0)
    changed = config.with_dynamic(cluster_default={"quafka.log.dir.min.free.percent": "2.5"},
                                  per_broker={"quafka.log.dir.min.free.bytes": str(1 << 30)})
    assert (changed.get("quafka.log.dir.min.free.bytes"), changed.get("quafka.log.dir.min.free.percent")) == (
        1 << 30, 2.5)


def test_the_regex_refresh_interval_is_accepted_from_kafka_s_minimum():
    """group.consumer.regex.refresh.interval.ms (GroupCoordinatorConfig, internal): at least 10 s; it
    times the regex resolutions of groups under an authorizer (docs/security.md)."""
    assert refused({"group.consumer.regex.refresh.interval.ms": 9999}).key == "group.consumer.regex.refresh.interval.ms"
    key = "group.consumer.regex.refresh.interval.ms"
    assert BrokerConfig.from_props({key: 10000}).get(key) == 10000
    assert BrokerConfig.from_props({}).get(key) == 600000
