"""The configuration keys quafka knows: their Kafka names, types, defaults, valid ranges and
update modes (Apache Kafka 4.2-4.4), the broker keys it accepts but ignores, and the typed parsing
that turns a property string into a value.

`quafka.broker.config` builds the broker configuration on top of these tables; this module holds
data and the small functions that check one value at a time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable

__all__ = [
    "BROKER_KEYS",
    "CLUSTER_WIDE",
    "ConfigError",
    "ConfigKey",
    "IGNORED_KEYS",
    "IGNORED_PREFIXES",
    "LISTENER_RE",
    "MAX_LONG",
    "PER_BROKER",
    "PER_TOPIC",
    "READ_ONLY",
    "TOPIC_KEYS",
    "TOPIC_SYNONYMS",
    "ignored_reason",
    "invalid",
    "markdown_tables",
    "rejected_reason",
    "render_docs",
    "render_value",
]

MAX_LONG = 2**63 - 1
_MIN_LONG = -(2**63)
_MAX_INT = 2**31 - 1
_MIN_INT = -(2**31)
_MAX_SHORT = 2**15 - 1
_MIN_SHORT = -(2**15)

READ_ONLY = "read-only"
PER_BROKER = "per-broker"
CLUSTER_WIDE = "cluster-wide"
PER_TOPIC = "per-topic"  # the update mode given to TOPIC_KEYS (every topic config can be altered)

TYPES = ("int", "long", "short", "double", "boolean", "string", "list", "password", "class")


class ConfigError(Exception):
    """A configuration value (or key) that quafka refuses, naming the key, the value and what is allowed.

    `str(error)` is `message` when given, else reads like Kafka's ConfigException:
    ``Invalid value 1000 for configuration log.segment.bytes: Value must be at least 1048576``
    (`reason` is the part after the colon; `allowed` the validator, e.g. "[1048576,...]").
    """

    def __init__(self, key: str, value: Any, allowed: str = "", message: str | None = None, *, reason: str = ""):
        self.key = key
        self.value = value
        self.allowed = allowed
        self.reason = reason
        if message is None:
            message = f"Invalid value {value} for configuration {key}" + (f": {reason}" if reason else "")
        self.message = message
        super().__init__(message)


def invalid(key: str, value: Any, reason: str, allowed: str = "") -> ConfigError:
    """The ConfigError for a refused value, in Kafka's wording."""
    return ConfigError(key, value, allowed, reason=reason)


Check = Callable[[Any], "str | None"]  # returns why the value is refused, or None


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One configuration key as Kafka defines it, plus quafka's own remarks.

    - `validator`: what is allowed, as Kafka prints it ("[1048576,...]", "[CreateTime, LogAppendTime]");
      empty when every value of the type is accepted.
    - `validate`: returns the reason a typed value is refused, or None.
    - `dynamic`: Kafka's update mode: "read-only", "per-broker" or "cluster-wide" for broker keys;
      "per-topic" for topic keys.
    - `topic_synonym`: for a broker key that is the default of a topic config, that topic config.
    - `broker_synonyms`: for a topic key, the broker keys that give its default, first one wins.
    - `note`: how quafka differs from Kafka for this key ("" when it does not).
    """

    name: str
    type: str
    default: Any
    validator: str
    validate: Check
    doc: str
    dynamic: str = READ_ONLY
    topic_synonym: str | None = None
    broker_synonyms: tuple[str, ...] = ()
    note: str = ""

    def parse(self, raw: Any) -> Any:
        """Turn a property value (a string, or a typed Python value) into this key's typed value."""
        value = _parse_type(self, raw)
        reason = self.validate(value)
        if reason is not None:
            raise invalid(self.name, _shown(raw), reason, self.validator)
        return value

    def render(self, value: Any) -> str | None:
        return render_value(self.type, value)


# --------------------------------------------------------------------------- typed parsing

_INT_RE = re.compile(r"[+-]?[0-9]+")
_DOUBLE_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[dDfF]?|[+-]?(?:NaN|Infinity)")
_COMMA_RE = re.compile(r"\s*,\s*")


def _shown(raw: Any) -> str:
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, (list, tuple)):
        return ",".join(str(x) for x in raw)
    return str(raw).strip() if isinstance(raw, str) else str(raw)


def _parse_type(key: ConfigKey, raw: Any) -> Any:
    t = key.type
    if raw is None:
        return None
    if t in ("int", "long", "short"):
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise invalid(key.name, _shown(raw), f"Not a number of type {t.upper()}", key.validator)
        if isinstance(raw, str):
            text = raw.strip()
            if not _INT_RE.fullmatch(text):
                raise invalid(key.name, text, f"Not a number of type {t.upper()}", key.validator)
            raw = int(text)
        lo, hi = {"int": (_MIN_INT, _MAX_INT), "long": (_MIN_LONG, MAX_LONG), "short": (_MIN_SHORT, _MAX_SHORT)}[t]
        if not lo <= raw <= hi:
            raise invalid(key.name, raw, f"Not a number of type {t.upper()}", key.validator)
        return raw
    if t == "double":
        if isinstance(raw, bool):
            raise invalid(key.name, _shown(raw), "Not a number of type DOUBLE", key.validator)
        if isinstance(raw, (int, float)):
            return float(raw)
        text = str(raw).strip()
        if not _DOUBLE_RE.fullmatch(text):
            raise invalid(key.name, text, "Not a number of type DOUBLE", key.validator)
        return float(text.rstrip("dDfF").replace("Infinity", "inf"))
    if t == "boolean":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "false"):
            return text == "true"
        raise invalid(key.name, str(raw).strip(), "Expected value to be either true or false", key.validator)
    if t == "list":
        if isinstance(raw, (list, tuple)):
            return [str(x).strip() for x in raw]
        text = str(raw).strip()
        return [] if not text else _COMMA_RE.split(text)
    # string, password, class
    return str(raw).strip()


def render_value(type_: str, value: Any) -> str | None:
    """A typed value as Kafka renders it in DescribeConfigs (None stays None)."""
    if value is None:
        return None
    if type_ == "boolean":
        return "true" if value else "false"
    if type_ == "list":
        return ",".join(value)
    if type_ == "double":
        return repr(float(value))
    return str(value)


# --------------------------------------------------------------------------- validators


def _any() -> tuple[str, Check]:
    return "", lambda v: None


def _at_least(n: int) -> tuple[str, Check]:
    return f"[{n},...]", lambda v: None if v is None or v >= n else f"Value must be at least {n}"


def _between(lo: int, hi: int) -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        if v is None:
            return None
        if v < lo:
            return f"Value must be at least {lo}"
        if v > hi:
            return f"Value must be no more than {hi}"
        return None

    return f"[{lo},...,{hi}]", check


def _one_of(*values: str) -> tuple[str, Check]:
    joined = ", ".join(values)
    return f"[{joined}]", lambda v: None if v is None or v in values else f"String must be one of: {joined}"


def _no_duplicates(items: list[str]) -> str | None:
    seen: set[str] = set()
    for item in items:
        if item in seen:
            return f"Values must not be duplicated: {item} appears more than once"
        seen.add(item)
    return None


def _cleanup_policy() -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        for policy in v:
            if policy not in ("compact", "delete"):
                return f"String must be one of: compact, delete (found {policy!r})"
        dup = _no_duplicates(v)
        if dup:
            return dup
        if "compact" in v:
            return "quafka has no log compaction; use delete, or an empty value to keep data forever"
        return None

    return "[delete] or empty (Kafka also accepts compact)", check


def _compression_type() -> tuple[str, Check]:
    kafka_values = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

    def check(v: Any) -> str | None:
        if v not in kafka_values:
            return f"String must be one of: {', '.join(kafka_values)}"
        if v != "producer":
            return "quafka stores record batches exactly as the producer sent them; only producer is supported"
        return None

    return "[producer] (Kafka also accepts uncompressed, zstd, lz4, snappy, gzip)", check


def _gzip_level() -> tuple[str, Check]:
    return "[1,...,9] or -1", lambda v: None if v == -1 or 1 <= v <= 9 else "Value must be between 1 and 9, or -1"


LISTENER_RE = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


def _listener_list(*, allow_null: bool) -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        if v is None:
            return None if allow_null else "Value must not be null"
        if not v:
            return "Value must not be empty"
        for item in v:
            if not LISTENER_RE.match(item):
                return f"Unable to parse {item!r} to a broker endpoint (expected NAME://host:port)"
        return None if allow_null else _no_duplicates(v)

    return "non-empty list of NAME://host:port", check


def _dir_list(*, allow_null: bool) -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        if v is None:
            return None if allow_null else "Value must not be null"
        if not v or any(not d for d in v):
            return "Value must not be empty"
        return _no_duplicates(v)

    return "exactly one directory", check


def _throttled_replicas() -> tuple[str, Check]:
    pair = re.compile(r"[0-9]+:[0-9]+")

    def check(v: Any) -> str | None:
        if v == ["*"] or all(pair.fullmatch(item) for item in v):
            return None
        return "Value must be * or a list of partitionId:brokerId pairs"

    return "[partitionId]:[brokerId],[partitionId]:[brokerId],... or *", check


def _false_only(reason: str) -> tuple[str, Check]:
    return "[false]", lambda v: None if not v else reason


def _key(
    name: str,
    type_: str,
    default: Any,
    check: tuple[str, Check],
    doc: str,
    dynamic: str = READ_ONLY,
    topic_synonym: str | None = None,
    note: str = "",
    broker_synonyms: Iterable[str] = (),
) -> ConfigKey:
    assert type_ in TYPES, type_
    desc, fn = check
    return ConfigKey(name, type_, default, desc, fn, doc, dynamic, topic_synonym, tuple(broker_synonyms), note)


_NO_EFFECT = "accepted and validated; quafka does not act on it"

# --------------------------------------------------------------------------- broker keys

_BROKER = [
    # -- node and network
    _key("node.id", "int", 1, _at_least(0), "Id of this node, reported as the broker id and the controller id.",
         note="default 1; Kafka has no default and requires it"),
    _key("broker.id", "int", None, _any(), "Older name of node.id; when both are set they must be equal."),
    _key("listeners", "list", ["PLAINTEXT://127.0.0.1:9092"], _listener_list(allow_null=False),
         "Addresses the broker binds, as NAME://host:port; an empty host binds every interface.",
         PER_BROKER, note="default PLAINTEXT://127.0.0.1:9092 (Kafka: PLAINTEXT://:9092); PLAINTEXT only"),
    _key("advertised.listeners", "list", None, _listener_list(allow_null=True),
         "Addresses given to clients in Metadata responses; null means the listeners."),
    _key("socket.request.max.bytes", "int", 104857600, _at_least(1),
         "Largest request frame accepted; a larger one closes the connection."),
    # -- topics and groups
    _key("num.partitions", "int", 1, _at_least(1),
         "Partition count of auto-created topics and of CreateTopics with -1."),
    _key("auto.create.topics.enable", "boolean", True, _any(),
         "Create a topic on first use by a Metadata request that allows it."),
    _key("delete.topic.enable", "boolean", True, _any(), "Allow DeleteTopics; when false it fails."),
    _key("offsets.topic.num.partitions", "int", 50, _at_least(1),
         "Partition count of __consumer_offsets; fixed once the topic exists."),
    _key("message.max.bytes", "int", 1048588, _at_least(0), "Largest record batch accepted by produce.",
         CLUSTER_WIDE, "max.message.bytes"),
    _key("compression.type", "string", "producer", _compression_type(),
         "Compression applied when batches are stored.", CLUSTER_WIDE, "compression.type",
         note="only producer: batches are stored as produced, never recompressed"),
    _key("compression.gzip.level", "int", -1, _gzip_level(), "Gzip level for broker-side recompression.",
         CLUSTER_WIDE, "compression.gzip.level", note=_NO_EFFECT),
    _key("compression.lz4.level", "int", 9, _between(1, 17), "LZ4 level for broker-side recompression.",
         CLUSTER_WIDE, "compression.lz4.level", note=_NO_EFFECT),
    _key("compression.zstd.level", "int", 3, _between(-131072, 22), "Zstd level for broker-side recompression.",
         CLUSTER_WIDE, "compression.zstd.level", note=_NO_EFFECT),
    # -- log directory
    _key("log.dir", "list", ["./quafka-data"], _dir_list(allow_null=False),
         "Data directory, used when log.dirs is not set.",
         note="default ./quafka-data (Kafka: /tmp/kafka-logs); exactly one directory"),
    _key("log.dirs", "list", None, _dir_list(allow_null=True), "Data directory; wins over log.dir.",
         note="exactly one directory"),
    # -- segments
    _key("log.segment.bytes", "int", 1073741824, _at_least(1048576), "Size at which a segment is rolled.",
         CLUSTER_WIDE, "segment.bytes"),
    _key("log.roll.ms", "long", None, _at_least(1),
         "Age at which a non-empty segment is rolled; wins over log.roll.hours.",
         CLUSTER_WIDE, "segment.ms"),
    _key("log.roll.hours", "int", 168, _at_least(1), "Segment roll age in hours, used when log.roll.ms is not set.",
         READ_ONLY, "segment.ms"),
    _key("log.roll.jitter.ms", "long", None, _at_least(0), "Random jitter subtracted from the roll age.",
         CLUSTER_WIDE, "segment.jitter.ms", note=_NO_EFFECT),
    _key("log.roll.jitter.hours", "int", 0, _at_least(0),
         "Roll jitter in hours, used when log.roll.jitter.ms is not set.",
         READ_ONLY, "segment.jitter.ms", note=_NO_EFFECT),
    _key("log.index.size.max.bytes", "int", 10485760, _at_least(4), "Largest offset index of one segment.",
         CLUSTER_WIDE, "segment.index.bytes", note=_NO_EFFECT),
    _key("log.index.interval.bytes", "int", 4096, _at_least(0), "Bytes of batches between two offset index entries.",
         CLUSTER_WIDE, "index.interval.bytes"),
    _key("log.preallocate", "boolean", False, _any(), "Preallocate segment files on creation.",
         CLUSTER_WIDE, "preallocate", note=_NO_EFFECT),
    _key("log.segment.delete.delay.ms", "long", 60000, _at_least(0),
         "Wait before a deleted segment's files are removed.",
         CLUSTER_WIDE, "file.delete.delay.ms", note=_NO_EFFECT + " (segments are removed at once)"),
    # -- retention
    _key("log.retention.ms", "long", None, _any(),
         "Age after which old segments are deleted; any negative value means unlimited. Wins over minutes and hours.",
         CLUSTER_WIDE, "retention.ms"),
    _key("log.retention.minutes", "int", None, _any(),
         "Retention in minutes, used when log.retention.ms is not set.", READ_ONLY, "retention.ms"),
    _key("log.retention.hours", "int", 168, _any(),
         "Retention in hours, used when neither log.retention.ms nor log.retention.minutes is set.",
         READ_ONLY, "retention.ms"),
    _key("log.retention.bytes", "long", -1, _any(),
         "Partition size above which old segments are deleted; -1 = unlimited.",
         CLUSTER_WIDE, "retention.bytes"),
    _key("log.retention.check.interval.ms", "long", 300000, _at_least(1), "How often retention is enforced."),
    _key("log.cleanup.policy", "list", ["delete"], _cleanup_policy(),
         "What happens to old segments: delete, or nothing (empty value).", CLUSTER_WIDE, "cleanup.policy",
         note="compact is refused: quafka has no log compaction"),
    # -- flushing
    _key("log.flush.interval.messages", "long", MAX_LONG, _at_least(1),
         "fsync a partition after this many unflushed records.",
         CLUSTER_WIDE, "flush.messages"),
    _key("log.flush.interval.ms", "long", None, _at_least(0),
         "fsync a partition whose oldest unflushed append is this old; null means log.flush.scheduler.interval.ms.",
         CLUSTER_WIDE, "flush.ms"),
    _key("log.flush.scheduler.interval.ms", "long", MAX_LONG, _any(),
         "Longest wait between checks for partitions due an fsync by flush.ms; the default of log.flush.interval.ms.",
         READ_ONLY, "flush.ms"),
    # -- timestamps
    _key("log.message.timestamp.type", "string", "CreateTime", _one_of("CreateTime", "LogAppendTime"),
         "Keep the producer's timestamps (CreateTime) or stamp the append time (LogAppendTime).",
         CLUSTER_WIDE, "message.timestamp.type"),
    _key("log.message.timestamp.before.max.ms", "long", MAX_LONG, _at_least(0),
         "How far in the past a CreateTime timestamp may be.", CLUSTER_WIDE, "message.timestamp.before.max.ms"),
    _key("log.message.timestamp.after.max.ms", "long", 3600000, _at_least(0),
         "How far in the future a CreateTime timestamp may be.", CLUSTER_WIDE, "message.timestamp.after.max.ms"),
]

BROKER_KEYS: dict[str, ConfigKey] = {k.name: k for k in _BROKER}

# --------------------------------------------------------------------------- topic keys

# Topic config -> the broker keys that give its default, in Kafka's order of precedence
# (ServerTopicConfigSynonyms); only broker keys that quafka serves are listed.
TOPIC_SYNONYMS: dict[str, tuple[str, ...]] = {k.topic_synonym: (k.name,) for k in _BROKER if k.topic_synonym}
TOPIC_SYNONYMS.update({
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
})


def _t(name: str, type_: str, default: Any, check: tuple[str, Check], doc: str, note: str = "") -> ConfigKey:
    return _key(name, type_, default, check, doc, PER_TOPIC, note=note, broker_synonyms=TOPIC_SYNONYMS.get(name, ()))


_NO_COMPACTION = "accepted and validated; has no effect because quafka has no log compaction"
_NO_REMOTE = "quafka has no tiered storage"

_TOPIC = [
    _t("cleanup.policy", "list", ["delete"], _cleanup_policy(),
       "delete removes old segments by retention; an empty value keeps data forever.",
       note="compact is refused: quafka has no log compaction"),
    _t("compression.type", "string", "producer", _compression_type(), "Compression applied when batches are stored.",
       note="only producer"),
    _t("compression.gzip.level", "int", -1, _gzip_level(), "Gzip level for broker-side recompression.",
       note=_NO_EFFECT),
    _t("compression.lz4.level", "int", 9, _between(1, 17), "LZ4 level for broker-side recompression.", note=_NO_EFFECT),
    _t("compression.zstd.level", "int", 3, _between(-131072, 22), "Zstd level for broker-side recompression.",
       note=_NO_EFFECT),
    _t("delete.retention.ms", "long", 86400000, _at_least(0), "How long tombstones survive compaction.",
       note=_NO_COMPACTION),
    _t("file.delete.delay.ms", "long", 60000, _at_least(0), "Wait before a deleted segment's files are removed.",
       note=_NO_EFFECT + " (segments are removed at once)"),
    _t("flush.messages", "long", MAX_LONG, _at_least(1), "fsync after this many unflushed records."),
    _t("flush.ms", "long", MAX_LONG, _at_least(0), "fsync when the oldest unflushed append is this old."),
    _t("follower.replication.throttled.replicas", "list", [], _throttled_replicas(),
       "Replicas whose follower fetching is throttled.", note=_NO_EFFECT + " (there are no followers)"),
    _t("index.interval.bytes", "int", 4096, _at_least(0), "Bytes of batches between two offset index entries."),
    _t("leader.replication.throttled.replicas", "list", [], _throttled_replicas(),
       "Replicas whose leader-side replication is throttled.", note=_NO_EFFECT + " (there are no followers)"),
    _t("local.retention.bytes", "long", -2, _at_least(-2),
       "Local size limit when tiered storage is on; -2 = retention.bytes.",
       note=_NO_EFFECT + " (no tiered storage)"),
    _t("local.retention.ms", "long", -2, _at_least(-2), "Local age limit when tiered storage is on; -2 = retention.ms.",
       note=_NO_EFFECT + " (no tiered storage)"),
    _t("max.compaction.lag.ms", "long", MAX_LONG, _at_least(1), "Longest a record may stay uncompacted.",
       note=_NO_COMPACTION),
    _t("max.message.bytes", "int", 1048588, _at_least(0), "Largest record batch accepted by produce."),
    _t("message.timestamp.after.max.ms", "long", 3600000, _at_least(0),
       "How far in the future a CreateTime timestamp may be."),
    _t("message.timestamp.before.max.ms", "long", MAX_LONG, _at_least(0),
       "How far in the past a CreateTime timestamp may be."),
    _t("message.timestamp.type", "string", "CreateTime", _one_of("CreateTime", "LogAppendTime"),
       "Keep the producer's timestamps (CreateTime) or stamp the append time (LogAppendTime)."),
    _t("min.cleanable.dirty.ratio", "double", 0.5, _between(0, 1), "Dirty share of the log that triggers compaction.",
       note=_NO_COMPACTION),
    _t("min.compaction.lag.ms", "long", 0, _at_least(0), "Shortest a record stays uncompacted.", note=_NO_COMPACTION),
    _t("min.insync.replicas", "int", 1, _at_least(1), "Replicas that must hold a write acknowledged with acks=all.",
       note="one node: the ISR is always this broker alone, so acks=all waits for nothing more"),
    _t("preallocate", "boolean", False, _any(), "Preallocate segment files on creation.", note=_NO_EFFECT),
    _t("remote.log.copy.disable", "boolean", False, _any(), "Stop copying segments to tiered storage.",
       note=_NO_EFFECT + " (no tiered storage)"),
    _t("remote.log.delete.on.disable", "boolean", False, _any(),
       "Delete tiered data when tiered storage is turned off.",
       note=_NO_EFFECT + " (no tiered storage)"),
    _t("remote.storage.enable", "boolean", False, _false_only(_NO_REMOTE), "Keep older segments in tiered storage.",
       note="only false: " + _NO_REMOTE),
    _t("retention.bytes", "long", -1, _any(), "Partition size above which old segments are deleted; -1 = unlimited."),
    _t("retention.ms", "long", 604800000, _at_least(-1), "Age after which old segments are deleted; -1 = unlimited."),
    _t("segment.bytes", "int", 1073741824, _at_least(1048576), "Size at which a segment is rolled."),
    _t("segment.index.bytes", "int", 10485760, _at_least(4), "Largest offset index of one segment.", note=_NO_EFFECT),
    _t("segment.jitter.ms", "long", 0, _at_least(0), "Random jitter subtracted from the roll age.", note=_NO_EFFECT),
    _t("segment.ms", "long", 604800000, _at_least(1), "Age at which a non-empty segment is rolled."),
    _t("unclean.leader.election.enable", "boolean", False, _any(), "Let an out-of-sync replica become leader.",
       note=_NO_EFFECT + " (one replica, always in sync)"),
]

TOPIC_KEYS: dict[str, ConfigKey] = {k.name: k for k in _TOPIC}

# --------------------------------------------------------------------------- ignored and refused keys

_ONE_NODE_RF = "one node: every partition of the internal topics has exactly one replica"
_THREADS = "quafka serves everything from one asyncio event loop; Kafka's thread pool sizes do not apply"
_NO_KRAFT = "quafka is a single node with no KRaft controller quorum"
_NO_PEERS = "one node: there are no follower replicas and no other brokers"

# Kafka broker keys that mean nothing on one quafka node: accepted, each logged as one warning line.
IGNORED_KEYS: dict[str, str] = {
    "process.roles": "quafka is always one combined node; there are no roles to assign",
    "controller.quorum.voters": _NO_KRAFT,
    "controller.quorum.bootstrap.servers": _NO_KRAFT,
    "controller.listener.names": _NO_KRAFT + " (listeners with these names are not served)",
    "listener.security.protocol.map": "quafka serves PLAINTEXT only (the map is read only to check that every served "
    "listener is PLAINTEXT)",
    "inter.broker.listener.name": "one node: there are no other brokers to talk to",
    "default.replication.factor": "one node: every partition has exactly one replica",
    "min.insync.replicas": "one node: the ISR is always this broker alone",
    "offsets.topic.replication.factor": _ONE_NODE_RF,
    "transaction.state.log.replication.factor": _ONE_NODE_RF,
    "transaction.state.log.min.isr": _ONE_NODE_RF,
    "share.coordinator.state.topic.replication.factor": _ONE_NODE_RF,
    "share.coordinator.state.topic.min.isr": _ONE_NODE_RF,
    "unclean.leader.election.enable": "one node: there is never another replica to elect",
    "num.network.threads": _THREADS,
    "num.io.threads": _THREADS,
    "num.replica.fetchers": _THREADS,
    "num.recovery.threads.per.data.dir": _THREADS,
    "num.replica.alter.log.dirs.threads": _THREADS,
    "background.threads": _THREADS,
    "socket.send.buffer.bytes": "quafka leaves socket buffer sizes to the operating system",
    "socket.receive.buffer.bytes": "quafka leaves socket buffer sizes to the operating system",
    "group.initial.rebalance.delay.ms": "quafka's group coordinator does not delay the first rebalance",
    "metadata.log.dir": _NO_KRAFT + " and keeps no metadata log",
    "metric.reporters": "quafka has no JMX metrics or metric reporter plugins",
    "auto.leader.rebalance.enable": "one node leads every partition",
    "broker.rack": "one node: there is nothing to spread across racks",
    "broker.id.generation.enable": "the node id comes from node.id",
    "reserved.broker.max.id": "the node id comes from node.id",
    "unstable.api.versions.enable": "quafka advertises exactly the API versions it implements",
    "unstable.feature.versions.enable": "quafka advertises exactly the features it implements",
    "group.share.enable": "share groups are always enabled in quafka (Kafka removed this key in 4.3)",
    "log.local.retention.ms": _NO_REMOTE,
    "log.local.retention.bytes": _NO_REMOTE,
}

# Key prefixes ignored the same way (each key still gets its own warning line).
IGNORED_PREFIXES: dict[str, str] = {
    "controller.": _NO_KRAFT,
    "log.cleaner.": "quafka has no log cleaner (no log compaction)",
    "replica.": _NO_PEERS,
    "leader.imbalance.": "one node leads every partition",
    "controlled.shutdown.": "one node: there is no controller to move leadership to",
    "metadata.": _NO_KRAFT + " and keeps no metadata log",
    "metrics.": "quafka has no JMX metrics or metric reporter plugins",
    "kafka.metrics.": "quafka has no JMX metrics or metric reporter plugins",
    "remote.log.": _NO_REMOTE,
    "zookeeper.": "Kafka 4 and quafka run without ZooKeeper",
}

_PLAINTEXT_ONLY = "quafka serves PLAINTEXT only, with no authentication or authorization"

# Keys refused with a specific reason (a ConfigError), rather than the generic unknown-key one.
_REFUSED_KEYS: dict[str, str] = {
    "authorizer.class.name": _PLAINTEXT_ONLY,
    "principal.builder.class": _PLAINTEXT_ONLY,
    "super.users": _PLAINTEXT_ONLY,
    "allow.everyone.if.no.acl.found": _PLAINTEXT_ONLY,
    "security.inter.broker.protocol": _PLAINTEXT_ONLY,
    "create.topic.policy.class.name": "quafka cannot load Java policy classes",
    "alter.config.policy.class.name": "quafka cannot load Java policy classes",
    "log.message.format.version": "removed in Kafka 4.0",
    "log.message.downconversion.enable": "removed in Kafka 4.0",
    "log.message.timestamp.difference.max.ms": "removed in Kafka 4.0; use log.message.timestamp.before.max.ms "
    "and log.message.timestamp.after.max.ms",
    "message.downconversion.enable": "removed in Kafka 4.0",
    "message.format.version": "removed in Kafka 4.0",
    "message.timestamp.difference.max.ms": "removed in Kafka 4.0; use message.timestamp.before.max.ms and "
    "message.timestamp.after.max.ms",
}
_REFUSED_PREFIXES: dict[str, str] = {
    "ssl.": _PLAINTEXT_ONLY,
    "sasl.": _PLAINTEXT_ONLY,
    "listener.name.": _PLAINTEXT_ONLY + " (per-listener settings are security settings)",
}


def ignored_reason(name: str) -> str | None:
    """Why quafka ignores this broker key, or None if it is not an ignored key."""
    if name in IGNORED_KEYS:
        return IGNORED_KEYS[name]
    for prefix, reason in IGNORED_PREFIXES.items():
        if name.startswith(prefix):
            return reason
    return None


def rejected_reason(name: str) -> str | None:
    """A specific reason to refuse a key that is neither served nor ignored, or None."""
    if name in _REFUSED_KEYS:
        return _REFUSED_KEYS[name]
    for prefix, reason in _REFUSED_PREFIXES.items():
        if name.startswith(prefix):
            return reason
    return None


# --------------------------------------------------------------------------- generated documentation


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|")


def _default_text(key: ConfigKey) -> str:
    rendered = key.render(key.default)
    return "null" if rendered is None else (f"`{rendered}`" if rendered else '`""`')


def markdown_tables() -> dict[str, str]:
    """The generated sections of docs/configuration.md, by marker name."""
    broker = ["| Key | Type | Default | Valid values | Dynamic | Meaning |", "|---|---|---|---|---|---|"]
    for key in sorted(BROKER_KEYS.values(), key=lambda k: k.name):
        meaning = key.doc + (f" *quafka: {key.note}.*" if key.note else "")
        broker.append(f"| `{key.name}` | {key.type} | {_cell(_default_text(key))} | {_cell(key.validator or 'any')} | "
                      f"{key.dynamic} | {_cell(meaning)} |")
    ignored = ["| Key | Why quafka ignores it |", "|---|---|"]
    ignored += [f"| `{name}` | {_cell(reason)} |" for name, reason in sorted(IGNORED_KEYS.items())]
    ignored += [f"| `{prefix}*` (any key) | {_cell(reason)} |" for prefix, reason in sorted(IGNORED_PREFIXES.items())]
    topic = ["| Key | Type | Default | Valid values | Broker default from | Meaning |", "|---|---|---|---|---|---|"]
    for key in sorted(TOPIC_KEYS.values(), key=lambda k: k.name):
        meaning = key.doc + (f" *quafka: {key.note}.*" if key.note else "")
        origin = ", ".join(f"`{s}`" for s in key.broker_synonyms) or "-"
        topic.append(f"| `{key.name}` | {key.type} | {_cell(_default_text(key))} | {_cell(key.validator or 'any')} | "
                     f"{origin} | {_cell(meaning)} |")
    return {"broker-keys": "\n".join(broker), "ignored-keys": "\n".join(ignored), "topic-keys": "\n".join(topic)}


def render_docs(text: str) -> str:
    """`text` with every `<!-- BEGIN generated:NAME -->` ... `<!-- END generated:NAME -->` section replaced."""
    for name, table in markdown_tables().items():
        begin, end = f"<!-- BEGIN generated:{name} -->", f"<!-- END generated:{name} -->"
        head, sep, rest = text.partition(begin)
        _, sep2, tail = rest.partition(end)
        if not sep or not sep2:
            raise ValueError(f"markers for {name} not found")
        text = f"{head}{begin}\n{table}\n{end}{tail}"
    return text
