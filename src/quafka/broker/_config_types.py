"""The building blocks of quafka's configuration tables: the ConfigError raised for a refused key or
value, ConfigKey (one key as Kafka defines it), typed parsing of property strings, and the
validators that check one value at a time, each printing what is allowed as Kafka does.

`_config_defs` holds the tables built from these; `quafka.broker.config` the configuration objects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol

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
PER_GROUP = "per-group"  # the update mode given to GROUP_KEYS (every group config can be altered)

HIDDEN = "[hidden]"  # how a password value is shown in an error (Kafka's Password.toString)
TYPES = ("int", "long", "short", "double", "boolean", "string", "list", "password", "class")


class BrokerSettings(Protocol):
    """What the group-config rules need of a broker configuration (`config.BrokerConfig`): a
    key's effective value."""

    def get(self, name: str) -> Any: ...


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
        if reason is not None:  # a password's value is never shown (Kafka's Password prints [hidden])
            raise invalid(self.name, HIDDEN if self.type == "password" else _shown(raw), reason, self.validator)
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


def _in_range(lo: Any, hi: Any) -> tuple[str, Check]:
    """Like `_between`, with a message that names the whole allowed range (quafka's own keys)."""
    def check(v: Any) -> str | None:
        if v is None or lo <= v <= hi:
            return None
        return f"Value must be in the range {lo} to {hi} inclusive"

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
        return _no_duplicates(v)

    return "[compact, delete]", check


def _one_cleaner_thread() -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        if v != 1:
            return ("quafka runs exactly one log cleaner thread (it copies on a thread off the event loop; "
                    "a second would only compete for the same disk)")
        return None

    return "[1]", check


def _compression_type() -> tuple[str, Check]:
    kafka_values = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")  # BrokerCompressionType

    def check(v: Any) -> str | None:
        return None if v in kafka_values else f"String must be one of: {', '.join(kafka_values)}"

    return f"[{', '.join(kafka_values)}]", check


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


_SIMPLE_ASSIGNOR = ("simple", "org.apache.kafka.coordinator.group.assignor.SimpleAssignor")


def _share_assignors() -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        if len(v) != 1:
            return "Exactly one share group assignor must be given"
        if v[0] not in _SIMPLE_ASSIGNOR:
            return "quafka implements the simple assignor only (simple, or Kafka's SimpleAssignor class name)"
        return None

    return "[simple]", check


CONSUMER_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def consumer_assignor_names(value: Any) -> list[str]:
    """group.consumer.assignors as assignor names (Kafka's class names mapped to theirs)."""
    return [CONSUMER_ASSIGNOR_CLASSES.get(v, v) for v in value]


def _consumer_assignors() -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        if not v:
            return "At least one consumer group assignor must be given"
        unknown = [a for a in consumer_assignor_names(v) if a not in ("uniform", "range")]
        if unknown:
            return (f"quafka implements the uniform and range assignors (or Kafka's UniformAssignor and "
                    f"RangeAssignor class names); not {', '.join(unknown)}")
        return None

    return "[uniform, range]", check


# java.time.Duration.parse: PnDTnHnMn.nS, case-insensitive, signed parts.
_ISO_DURATION_RE = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE)


def iso_duration_ms(text: str) -> int | None:
    """An ISO-8601 duration as java.time.Duration.parse reads it ("PT1M", "P1DT2H", "PT0.5S"), in
    milliseconds (fractions below a millisecond dropped); None when it does not parse."""
    m = _ISO_DURATION_RE.fullmatch(text)
    if m is None or m.group(3) == "T" or not any(m.group(i) for i in (2, 4, 5, 6)):
        return None
    sign, days, _t, hours, minutes, seconds, fraction = m.groups()
    seconds_int = int(seconds or 0)
    nanos = int((fraction or "").ljust(9, "0")) if fraction else 0
    if seconds_int < 0 or (seconds or "").startswith("-"):
        nanos = -nanos
    total_ms = (int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000 + int(minutes or 0) * 60_000
                + seconds_int * 1000 + int(nanos / 1_000_000))
    return -total_ms if sign == "-" else total_ms


_AUTO_OFFSET_RESET_FORMAT = ("The value must be either 'earliest', 'latest' or of the format "
                             "'by_duration:<PnDTnHnMn.nS>'")


def _auto_offset_reset() -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        if v in ("earliest", "latest"):
            return None
        prefix, sep, duration = v.partition(":")
        if sep and prefix.lower() == "by_duration":
            ms = iso_duration_ms(duration)
            if ms is not None and ms >= 0:
                return None
            if ms is not None:
                return "Negative duration is not supported"
        return _AUTO_OFFSET_RESET_FORMAT

    return "[latest, earliest, by_duration:PnDTnHnMn.nS]", check


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


# --------------------------------------------------------------------------- TLS (ssl.*) validators


def _one_of_reason(values: Iterable[str], reason: str) -> tuple[str, Check]:
    """Like `_one_of`, adding why the other values Kafka might accept are not served."""
    values = tuple(values)
    joined = ", ".join(values)
    return f"[{joined}]", lambda v: None if v is None or v in values else f"String must be one of: {joined} ({reason})"


def _null_only(reason: str) -> tuple[str, Check]:
    return "null", lambda v: None if v is None or v == "" else reason


_JKS_NOTE = ("JKS is Java's own format, which Python cannot read: convert the store with keytool "
             "-importkeystore -deststoretype PKCS12, or use PEM")


def _store_type() -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        if v in ("PKCS12", "PEM", "JKS"):
            return None
        return "String must be one of: PKCS12, PEM, JKS (" + _JKS_NOTE + ")"

    return "[PKCS12, PEM, JKS (a JKS file is refused at start-up)]", check


_TLS_VERSIONS = ("TLSv1.2", "TLSv1.3")
_OLD_TLS = ("SSLv2Hello", "SSLv3", "TLSv1", "TLSv1.1")


def _tls_versions() -> tuple[str, Check]:
    def check(v: Any) -> str | None:
        for item in v:
            if item in _OLD_TLS:
                return (f"{item} is not served: it is disabled in current JDKs and in OpenSSL's default security "
                        "level; use TLSv1.2 and TLSv1.3")
            if item not in _TLS_VERSIONS:
                return f"Unknown TLS protocol {item!r}; String must be one of: TLSv1.2, TLSv1.3"
        return _no_duplicates(v)

    return "[TLSv1.2, TLSv1.3]", check


def _principal_rules() -> tuple[str, Check]:
    from quafka.broker.core.ssl_principal import parse_rules

    def check(v: Any) -> str | None:
        try:
            parse_rules(v)
        except ValueError as exc:
            return str(exc)
        return None

    return "DEFAULT or RULE:pattern/replacement/[LU], comma-separated", check
