"""Broker and topic configuration: Kafka's dotted names, typed, with Kafka's ranges, validated as a
whole before the broker starts (architecture rule 7: declare, validate, then run).

Layers of a broker value, highest first: a per-broker dynamic override (AlterConfigs on resource
name "<node.id>"), a cluster-wide dynamic default (resource name ""), the static properties the
broker started with, the key's default. A topic value is the topic's own override, else the broker
default resolved through Kafka's synonyms (segment.ms <- log.roll.ms <- log.roll.hours, and so on).

Share groups have their own configs (GROUP resources, `kafka-configs.sh --entity-type groups`):
`resolve_group_config` and `validate_group_configs` (from `_group_config`), `describe_group_configs`,
bounded by the broker's `group.share.min.*` / `group.share.max.*` keys.

The key tables live in `_config_defs`; docs/configuration.md is generated from them with
``python -m quafka.broker.config --write-docs docs/configuration.md``.
"""

from __future__ import annotations

import enum
import re
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping, NamedTuple

from quafka.broker._config_defs import (
    BROKER_KEYS,
    CLUSTER_WIDE,
    GROUP_KEYS,
    IGNORED_KEYS,
    IGNORED_PREFIXES,
    LISTENER_RE,
    MAX_LONG,
    PER_BROKER,
    PER_GROUP,
    PER_TOPIC,
    READ_ONLY,
    STANDARD_AUTHORIZER,
    TOPIC_KEYS,
    ConfigError,
    ConfigKey,
    ignored_reason,
    invalid,
    iso_duration_ms,
    markdown_tables,
    rejected_reason,
    render_docs,
)
from quafka.broker._group_config import (
    GROUP_BOUNDS,
    ShareGroupConfig,
    auto_offset_reset_duration_ms,
    broker_default,
    check_share_group_bounds,
    parsed_overrides,
    resolve_group_config,
    validate_group_configs,
)
from quafka.broker._ssl_config import HIDDEN, check_listener_ssl
from quafka.broker._sasl_config import SaslListenerSettings, check_sasl_listeners, sasl_settings  # noqa: F401
from quafka.broker.core.log_cleaner import CompactionConfig
from quafka.broker.storage.base import LogConfig
from quafka.protocol import properties

__all__ = [
    "BROKER_KEYS", "CLUSTER_WIDE", "CONFIG_TYPE_IDS", "DEFAULT_CONFIG", "DYNAMIC_BROKER_CONFIG",
    "DYNAMIC_DEFAULT_BROKER_CONFIG", "DYNAMIC_TOPIC_CONFIG", "GROUP_BOUNDS", "GROUP_CONFIG", "GROUP_KEYS",
    "IGNORED_KEYS", "IGNORED_PREFIXES", "MAX_LONG", "PER_BROKER", "PER_GROUP", "PER_TOPIC", "READ_ONLY",
    "STANDARD_AUTHORIZER", "STATIC_BROKER_CONFIG", "TOPIC_KEYS", "BrokerConfig", "ConfigEntry", "ConfigError", "ConfigKey", "ConfigSource",
    "ConfigSynonym", "Listener", "ShareGroupConfig", "auto_offset_reset_duration_ms", "config_type_id", "invalid",
    "describe_broker_configs", "describe_group_configs", "describe_topic_configs", "iso_duration_ms",
    "load_properties_file", "log_config", "parse_properties", "render_docs", "resolve_group_config",
    "resolve_topic_configs", "validate_group_configs", "validate_topic_configs",
]


class ConfigSource(enum.IntEnum):
    """DescribeConfigs ConfigSource ids, as on the wire."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


DYNAMIC_TOPIC_CONFIG = ConfigSource.DYNAMIC_TOPIC_CONFIG
DYNAMIC_BROKER_CONFIG = ConfigSource.DYNAMIC_BROKER_CONFIG
DYNAMIC_DEFAULT_BROKER_CONFIG = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
STATIC_BROKER_CONFIG = ConfigSource.STATIC_BROKER_CONFIG
DEFAULT_CONFIG = ConfigSource.DEFAULT_CONFIG
GROUP_CONFIG = ConfigSource.GROUP_CONFIG

# DescribeConfigs ConfigType ids (UNKNOWN = 0 for anything else).
CONFIG_TYPE_IDS: Mapping[str, int] = MappingProxyType({
    "boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7, "class": 8, "password": 9,
})


def config_type_id(type_: str) -> int:
    return CONFIG_TYPE_IDS.get(type_, 0)


# --------------------------------------------------------------------------- .properties files


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties text (`quafka.protocol.properties`); a malformed escape is a ConfigError."""
    try:
        return properties.parse_properties(text)
    except properties.PropertiesError as exc:
        raise invalid(exc.key, exc.text, str(exc)) from None


def load_properties_file(path: str | Path) -> dict[str, str]:
    """Read a .properties file (UTF-8) with `parse_properties`."""
    return parse_properties(Path(path).read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- listeners


class Listener(NamedTuple):
    """A parsed listener: NAME://host:port. An empty host binds every interface (Kafka's meaning);
    port 0 asks the operating system for a free port."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"  # from listener.security.protocol.map

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


_KNOWN_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _protocol_map(raw: str | None, controller_names: list[str]) -> dict[str, str]:
    if raw is None or not raw.strip():
        # Kafka's default: each security protocol names itself; controller listeners are PLAINTEXT.
        mapping = {p: p for p in _KNOWN_PROTOCOLS}
        mapping.update({name: "PLAINTEXT" for name in controller_names if name not in mapping})
        return mapping
    mapping = {}
    for item in raw.split(","):
        name, sep, proto = item.strip().partition(":")
        proto = proto.strip().upper()
        if not sep or not name.strip() or proto not in _KNOWN_PROTOCOLS:
            raise invalid("listener.security.protocol.map", raw.strip(),
                          f"Expected NAME:PROTOCOL pairs with a protocol in {list(_KNOWN_PROTOCOLS)}, got {item!r}")
        mapping[name.strip().upper()] = proto
    return mapping


def _parse_listeners(key: str, items: list[str], protocols: dict[str, str], controller_names: list[str],
                     warnings: list[str]) -> list[Listener]:
    shown = ",".join(items)
    served: list[Listener] = []
    for item in items:
        m = LISTENER_RE.match(item)
        if m is None:  # already refused by the key's validator; kept for safety
            raise invalid(key, shown, f"Unable to parse {item!r} to a broker endpoint")
        name, host, port = m.group(1).upper(), m.group(2), int(m.group(3))
        if not 0 <= port <= 65535:
            raise invalid(key, shown, f"Port {port} of listener {name} is out of range [0,...,65535]")
        if name in controller_names:
            warnings.append(f"ignoring listener {item} in {key}: quafka runs no KRaft controller "
                            f"({name} is in controller.listener.names)")
            continue
        protocol = protocols.get(name)
        if protocol is None:
            raise invalid(key, shown, f"No security protocol defined for listener {name} "
                          "(set listener.security.protocol.map, or name the listener PLAINTEXT)")
        served.append(Listener(name, host, port, protocol))
    return served


# --------------------------------------------------------------------------- the broker configuration

_UNIT_MS = {"log.roll.hours": 3_600_000, "log.roll.jitter.hours": 3_600_000,
            "log.retention.minutes": 60_000, "log.retention.hours": 3_600_000}

# Kafka's brokerConfigSynonyms: keys that describe one setting in several units, in precedence order.
_BROKER_SYNONYM_GROUPS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def _broker_synonyms(name: str) -> tuple[str, ...]:
    if name == "log.flush.interval.ms":
        return ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")
    for group in _BROKER_SYNONYM_GROUPS:
        if name in group:
            return group
    return (name,)


def _prop_string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


_DEFAULTS: Mapping[str, Any] = MappingProxyType({n: k.default for n, k in BROKER_KEYS.items() if k.default is not None})
_AUX_KEYS = ("listener.security.protocol.map", "controller.listener.names", "inter.broker.listener.name")
LISTENER_PREFIX = "listener.name."  # listener.name.<listener, lower case>.<key>: one listener's setting


class BrokerConfig:
    """A validated, immutable broker configuration. Build it with `from_props`; `with_dynamic`
    returns a new one with dynamic overrides applied."""

    __slots__ = ("_static", "_dyn_broker", "_dyn_default", "_aux", "warnings", "_listeners", "_advertised", "_log_dir")

    def __init__(self, static: dict[str, Any], dyn_broker: dict[str, Any], dyn_default: dict[str, Any],
                 aux: dict[str, str], warnings: list[str]) -> None:
        self._static = MappingProxyType(static)
        self._dyn_broker = MappingProxyType(dyn_broker)
        self._dyn_default = MappingProxyType(dyn_default)
        self._aux = MappingProxyType(aux)
        self.warnings: list[str] = warnings
        self._validate_whole()

    # -- construction
    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> BrokerConfig:
        """Validate static properties as a whole; raise the first ConfigError. Ignored Kafka keys
        add one line each to `warnings`. Values may be strings or (embedded use) typed values."""
        static: dict[str, Any] = {}
        aux: dict[str, str] = {}
        warnings: list[str] = []
        for name, raw in props.items():
            if raw is None:
                continue
            text = _prop_string(raw)
            key = BROKER_KEYS.get(name)
            if key is not None:
                static[name] = key.parse(raw)
            elif name in _AUX_KEYS:
                aux[name] = text
                if (reason := ignored_reason(name)) is not None:
                    warnings.append(f"ignoring {name}={text}: {reason}")
            elif name.startswith(LISTENER_PREFIX):
                aux[name] = text  # validated as a whole (_validate_whole), per listener
            elif (reason := ignored_reason(name)) is not None:
                warnings.append(f"ignoring {name}={text}: {reason}")
            else:
                raise _unknown(name, text)
        _resolve_node_id(static)
        return cls(static, {}, {}, aux, warnings)

    def with_dynamic(self, per_broker: Mapping[str, str | None] | None = None,
                     cluster_default: Mapping[str, str | None] | None = None) -> BrokerConfig:
        """A new config with dynamic broker configs changed on top of this one's: `per_broker` for
        this broker (resource name = node.id), `cluster_default` for the cluster-wide default
        (resource name ""). A None value removes that override. Read-only keys are refused, per-broker
        keys are refused as cluster defaults, ignored Kafka keys add a warning, and the result is
        validated as a whole."""
        dyn_broker, dyn_default = dict(self._dyn_broker), dict(self._dyn_default)
        warnings = list(self.warnings)
        for is_per_broker, changes, target in ((True, per_broker, dyn_broker), (False, cluster_default, dyn_default)):
            if not changes:
                continue
            served = [n for n in changes if n in BROKER_KEYS]
            read_only = [n for n in served if BROKER_KEYS[n].dynamic == READ_ONLY]
            if read_only:
                raise ConfigError(read_only[0], changes[read_only[0]], READ_ONLY, reason="read-only",
                                  message=f"Cannot update these configs dynamically: [{', '.join(read_only)}]")
            per_broker_only = [n for n in served if BROKER_KEYS[n].dynamic == PER_BROKER]
            if not is_per_broker and per_broker_only:
                raise ConfigError(per_broker_only[0], changes[per_broker_only[0]], PER_BROKER, reason="per-broker",
                                  message="Cannot update these configs at default cluster level, broker id must be "
                                  f"specified: [{', '.join(per_broker_only)}]")
            for name, raw in changes.items():
                if name in BROKER_KEYS:
                    if raw is None:
                        target.pop(name, None)
                    else:
                        target[name] = BROKER_KEYS[name].parse(raw)
                elif (reason := ignored_reason(name)) is not None:
                    if raw is not None:
                        warnings.append(f"ignoring {name}={_prop_string(raw)}: {reason}")
                else:
                    raise _unknown(name, raw)
        return BrokerConfig(dict(self._static), dyn_broker, dyn_default, dict(self._aux), warnings)

    # -- values
    def get(self, name: str) -> Any:
        """The typed value of a served broker key: per-broker dynamic > cluster default > static >
        default. Keys with several units (log.retention.*, log.roll.*) are resolved by the helpers."""
        key = BROKER_KEYS.get(name)
        if key is None:
            raise KeyError(f"{name} is not a broker config served by quafka")
        for layer in (self._dyn_broker, self._dyn_default, self._static):
            if name in layer:
                return _copy(layer[name])
        return _copy(key.default)

    def source_of(self, name: str) -> ConfigSource:
        if name not in BROKER_KEYS:
            raise KeyError(f"{name} is not a broker config served by quafka")
        for source, layer in self._layers()[:3]:
            if name in layer:
                return source
        return DEFAULT_CONFIG

    def topic_default(self, topic_key: str) -> Any:
        """The broker's default for a topic config, through Kafka's synonyms and units."""
        key = TOPIC_KEYS[topic_key]
        for name in key.broker_synonyms:
            value = self.get(name)
            if value is not None:
                if name in _UNIT_MS:
                    value *= _UNIT_MS[name]
                if topic_key == "retention.ms" and value < 0:
                    return -1
                return value
        return _copy(key.default)

    def log_retention_ms(self) -> int:
        """log.retention.ms, else .minutes, else .hours, in ms; -1 (unlimited) for any negative value."""
        return self.topic_default("retention.ms")

    def log_roll_ms(self) -> int:
        """log.roll.ms, else log.roll.hours in ms."""
        return self.topic_default("segment.ms")

    def log_roll_jitter_ms(self) -> int:
        return self.topic_default("segment.jitter.ms")

    def log_flush_interval_ms(self) -> int:
        """log.flush.interval.ms, else log.flush.scheduler.interval.ms (Long.MAX = never by time)."""
        return self.topic_default("flush.ms")

    @property
    def listeners(self) -> list[Listener]:
        """The listeners to bind (controller listeners removed), each with its security protocol."""
        return list(self._listeners)

    def _check_listener_props(self, listener_names: list[str]) -> None:
        for name, text in self._aux.items():
            if name.startswith(LISTENER_PREFIX):
                _check_listener_prop(self, name, text, listener_names)
        inter = self._aux.get("inter.broker.listener.name")
        if inter is not None and inter.strip().upper() not in listener_names:
            raise invalid("inter.broker.listener.name", inter, f"inter.broker.listener.name must be a listener name "
                          f"defined in listeners ({listener_names})")

    def listener_prop(self, listener_name: str, key: str) -> str | None:
        """A per-listener setting as given (`listener.name.<listener>.<key>`, the listener name in
        lower case as Kafka's ListenerName.configPrefix writes it), or None."""
        return self._aux.get(f"{LISTENER_PREFIX}{listener_name.lower()}.{key}")

    def listener_props(self, listener_name: str) -> dict[str, str]:
        """Every `listener.name.<listener>.*` setting of one listener, by the key after the prefix."""
        prefix = f"{LISTENER_PREFIX}{listener_name.lower()}."
        return {k[len(prefix):]: v for k, v in self._aux.items() if k.startswith(prefix)}

    @property
    def advertised_listeners(self) -> list[Listener]:
        """What Metadata advertises: advertised.listeners, else the listeners. A host of "" (or the
        bound port 0) is for the server to fill in."""
        return list(self._advertised)

    @property
    def log_dir(self) -> str:
        """The one data directory: log.dirs if set, else log.dir."""
        return self._log_dir

    @property
    def node_id(self) -> int:
        return self.get("node.id")

    num_partitions = property(lambda self: self.get("num.partitions"))
    auto_create_topics_enable = property(lambda self: self.get("auto.create.topics.enable"))
    delete_topic_enable = property(lambda self: self.get("delete.topic.enable"))
    message_max_bytes = property(lambda self: self.get("message.max.bytes"))
    socket_request_max_bytes = property(lambda self: self.get("socket.request.max.bytes"))
    offsets_topic_num_partitions = property(lambda self: self.get("offsets.topic.num.partitions"))
    log_retention_check_interval_ms = property(lambda self: self.get("log.retention.check.interval.ms"))
    log_flush_scheduler_interval_ms = property(lambda self: self.get("log.flush.scheduler.interval.ms"))

    # -- the layers as strings (what to persist, what was given)
    @property
    def static_configs(self) -> dict[str, str]:
        return _rendered(self._static)

    @property
    def dynamic_broker_configs(self) -> dict[str, str]:
        return _rendered(self._dyn_broker)

    @property
    def dynamic_default_configs(self) -> dict[str, str]:
        return _rendered(self._dyn_default)

    def __repr__(self) -> str:
        return (f"BrokerConfig(static={_shown_layer(self._static)}, dynamic_broker={_shown_layer(self._dyn_broker)}, "
                f"dynamic_default={_shown_layer(self._dyn_default)})")

    # -- internals
    def _layers(self) -> list[tuple[ConfigSource, Mapping[str, Any]]]:
        return [(DYNAMIC_BROKER_CONFIG, self._dyn_broker), (DYNAMIC_DEFAULT_BROKER_CONFIG, self._dyn_default),
                (STATIC_BROKER_CONFIG, self._static), (DEFAULT_CONFIG, _DEFAULTS)]

    def _first_set(self, names: Iterable[str]) -> tuple[str, Any]:
        name = ""
        for name in names:
            value = self.get(name)
            if value is not None:
                return name, value
        return name, None

    def _validate_whole(self) -> None:
        """Checks that involve more than one key; fills the derived listeners and log dir."""
        warnings: list[str] = []
        controller_names = [n.strip().upper() for n in self._aux.get("controller.listener.names", "").split(",")
                            if n.strip()]
        protocols = _protocol_map(self._aux.get("listener.security.protocol.map"), controller_names)
        listeners = _parse_listeners("listeners", self.get("listeners"), protocols, controller_names, warnings)
        if not listeners:
            raise invalid("listeners", ",".join(self.get("listeners")), "no broker listener is left "
                          "once the controller listeners are removed")
        names = [lst.name for lst in listeners]
        ports = [lst.port for lst in listeners if lst.port != 0]
        if len(set(names)) != len(names) or len(set(ports)) != len(ports):
            raise invalid("listeners", ",".join(self.get("listeners")),
                          "each listener must have a different name and a different port")
        advertised = listeners
        raw_advertised = self.get("advertised.listeners")
        if raw_advertised is not None:
            advertised = _parse_listeners("advertised.listeners", raw_advertised, protocols, controller_names, [])
            shown = ",".join(raw_advertised)
            for lst in advertised:
                if lst.host == "0.0.0.0":
                    raise invalid("advertised.listeners", shown, "cannot advertise the nonroutable meta-address "
                                  "0.0.0.0; use a routable address")
                if lst.name not in names:
                    raise invalid("advertised.listeners", shown, f"listener name {lst.name} is not one of the "
                                  f"listeners {names}")
            if not advertised:
                raise invalid("advertised.listeners", shown, "there must be at least one broker advertised listener")
        # one log directory
        dirs_key = "log.dirs" if self.get("log.dirs") is not None else "log.dir"
        dirs = self.get(dirs_key)
        if len(dirs) != 1:
            raise invalid(dirs_key, ",".join(dirs), "quafka supports exactly one log directory",
                          "exactly one directory")
        # retention, roll and flush resolved across their synonyms
        name, value = self._first_set(_broker_synonyms("log.retention.ms"))
        if value * _UNIT_MS.get(name, 1) == 0:
            raise invalid(name, value, "retention must be unlimited (-1) or at least 1 ms")
        name, value = self._first_set(_broker_synonyms("log.flush.interval.ms"))
        if value < 0:
            raise invalid(name, value, "Value must be at least 0 (it is the default of flush.ms)", "[0,...]")
        self._check_listener_props(names)
        for lst in listeners:  # an SSL/SASL_SSL listener's key and trust stores, as a whole
            check_listener_ssl(self, lst)
        warnings += check_sasl_listeners(self, listeners)
        check_share_group_bounds(self)
        dashboard = self.get("quafka.dashboard.listener")
        if dashboard and not self.get("quafka.dashboard.client.config") and not any(
                lst.security_protocol == "PLAINTEXT" for lst in listeners):
            raise invalid("quafka.dashboard.listener", dashboard, "the dashboard connects to the broker's first "
                          "PLAINTEXT listener and there is none: set quafka.dashboard.client.config to a client "
                          "properties file that logs in to one of the listeners")
        self._listeners = tuple(listeners)
        self._advertised = tuple(advertised)
        self._log_dir = dirs[0]
        self.warnings = self.warnings + [w for w in warnings if w not in self.warnings]


_PER_LISTENER_KEYS = ("max.connections", "connections.max.reauth.ms")
_MECHANISM_PREFIX_RE = re.compile(r"^[a-z0-9-]+\.(?=sasl\.)")


def per_listener_base_key(rest: str) -> tuple[str | None, str]:
    """For `listener.name.<listener>.<rest>`: (the SASL mechanism prefix or None, the broker key).
    `scram-sha-256.sasl.jaas.config` -> ("SCRAM-SHA-256", "sasl.jaas.config")."""
    m = _MECHANISM_PREFIX_RE.match(rest)
    if m is None:
        return None, rest
    return m.group(0)[:-1].upper(), rest[m.end():]


def _check_listener_prop(config: "BrokerConfig", name: str, text: str, listener_names: list[str]) -> None:
    rest = name[len(LISTENER_PREFIX):]
    if "jaas" in rest or "password" in rest:
        text = HIDDEN  # never shown in an error
    listener, dot, rest = rest.partition(".")
    secret = BROKER_KEYS.get(per_listener_base_key(rest)[1])
    shown = HIDDEN if secret is not None and secret.type == "password" else text  # never a password in a message
    if not dot or listener.upper() not in listener_names:
        raise invalid(name, shown, f"{name} names no listener of this broker (listeners: {listener_names}); "
                      "per-listener settings are listener.name.<listener in lower case>.<key>")
    _mechanism, base = per_listener_base_key(rest)
    key = BROKER_KEYS.get(base)
    if key is None or not (base.startswith(("ssl.", "sasl.")) or base in _PER_LISTENER_KEYS):
        raise invalid(name, shown, f"{base} is not a setting quafka serves per listener "
                      "(the ssl.* and sasl.* keys it serves, max.connections, connections.max.reauth.ms)")
    try:
        key.parse(config._aux[name])
    except ConfigError as exc:  # name the per-listener key that holds the value
        raise invalid(name, exc.value, exc.reason, exc.allowed) from None


def _resolve_node_id(static: dict[str, Any]) -> None:
    """Kafka treats broker.id as a synonym of node.id: either fills the other; both must agree."""
    node_id, broker_id = static.get("node.id"), static.get("broker.id")
    if broker_id is not None and node_id is None:
        reason = BROKER_KEYS["node.id"].validate(broker_id)
        if reason:
            raise invalid("broker.id", broker_id, reason, BROKER_KEYS["node.id"].validator)
        static["node.id"] = broker_id
    elif node_id is not None and broker_id is None:
        static["broker.id"] = node_id
    elif node_id is not None and node_id != broker_id:
        raise invalid("broker.id", broker_id, f"You must set node.id to the same value as broker.id "
                      f"(node.id is {node_id})")


def _unknown(name: str, value: Any) -> ConfigError:
    if "jaas" in name or "password" in name:
        value = HIDDEN
    reason = rejected_reason(name)
    if reason is None:
        reason = "not a Kafka broker config that quafka serves or ignores (see docs/configuration.md)"
    return ConfigError(name, value, reason=reason, message=f"Unknown configuration {name} (value {value}): {reason}")


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


def _rendered(layer: Mapping[str, Any]) -> dict[str, str]:
    return {name: BROKER_KEYS[name].render(value) for name, value in layer.items()}


def _shown_layer(layer: Mapping[str, Any]) -> dict[str, str]:
    """A layer as repr() shows it: passwords (key store passwords, PEM keys) hidden."""
    return {name: HIDDEN if BROKER_KEYS[name].type == "password" else BROKER_KEYS[name].render(value)
            for name, value in layer.items()}


# --------------------------------------------------------------------------- topics


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check a topic's configs (CreateTopics, or the full set after an AlterConfigs): an unknown
    name, a null value or a bad value raises ConfigError (the server answers INVALID_CONFIG).
    Returns the values normalised as Kafka renders them ("TRUE " -> "true")."""
    out: dict[str, str] = {}
    typed: dict[str, Any] = {}
    for name, raw in configs.items():
        key = TOPIC_KEYS.get(name)
        if key is None:
            reason = rejected_reason(name) or "not a Kafka topic config that quafka serves (see docs/configuration.md)"
            raise ConfigError(name, raw, reason=reason, message=f"Unknown topic config name: {name} ({reason})")
        if raw is None:
            raise ConfigError(name, raw, reason="null", message=f"Null value not supported for topic configs: {name}")
        typed[name] = key.parse(raw)
        out[name] = key.render(typed[name])
    lo = typed.get("min.compaction.lag.ms", TOPIC_KEYS["min.compaction.lag.ms"].default)
    hi = typed.get("max.compaction.lag.ms", TOPIC_KEYS["max.compaction.lag.ms"].default)
    if lo > hi:
        raise invalid("min.compaction.lag.ms", lo, f"conflicting topic configs: min.compaction.lag.ms ({lo}) > "
                      f"max.compaction.lag.ms ({hi})")
    return out


def _topic_values(topic_overrides: Mapping[str, str]) -> dict[str, Any]:
    validate_topic_configs(topic_overrides)
    return {n: TOPIC_KEYS[n].parse(v) for n, v in topic_overrides.items()}


def resolve_topic_configs(broker: BrokerConfig, topic_overrides: Mapping[str, str] = MappingProxyType({})
                          ) -> dict[str, str | None]:
    """Every topic config's effective value, rendered as Kafka renders it: the topic's override,
    else the broker default through Kafka's synonyms."""
    overrides = _topic_values(topic_overrides)
    return {name: key.render(overrides[name] if name in overrides else broker.topic_default(name))
            for name, key in sorted(TOPIC_KEYS.items())}


def log_config(broker: BrokerConfig, topic_overrides: Mapping[str, str] = MappingProxyType({})) -> LogConfig:
    """The storage settings of a topic's partitions: each topic override, else the broker default.
    With no "delete" in cleanup.policy (an empty policy) nothing is deleted by retention."""
    overrides = _topic_values(topic_overrides)

    def value(name: str) -> Any:
        return overrides[name] if name in overrides else broker.topic_default(name)

    retention_ms, retention_bytes = value("retention.ms"), value("retention.bytes")
    if "delete" not in value("cleanup.policy"):
        retention_ms = retention_bytes = -1
    return LogConfig(
        segment_bytes=value("segment.bytes"),
        segment_ms=value("segment.ms"),
        retention_ms=-1 if retention_ms < 0 else retention_ms,
        retention_bytes=-1 if retention_bytes < 0 else retention_bytes,
        flush_messages=value("flush.messages"),
        flush_ms=value("flush.ms"),
        index_interval_bytes=value("index.interval.bytes"),
    )


def compaction_config(broker: BrokerConfig, topic_overrides: Mapping[str, str] = MappingProxyType({})
                      ) -> CompactionConfig:
    """The log cleaner's settings for a topic's partitions (topic overrides, else the broker's
    log.cleaner.* defaults)."""
    overrides = _topic_values(topic_overrides)

    def value(name: str) -> Any:
        return overrides[name] if name in overrides else broker.topic_default(name)

    return CompactionConfig(
        compact="compact" in value("cleanup.policy"),
        delete_retention_ms=value("delete.retention.ms"),
        min_compaction_lag_ms=value("min.compaction.lag.ms"),
        max_compaction_lag_ms=value("max.compaction.lag.ms"),
        min_cleanable_ratio=float(value("min.cleanable.dirty.ratio")),
        segment_bytes=value("segment.bytes"),
    )


# --------------------------------------------------------------------------- DescribeConfigs


class ConfigSynonym(NamedTuple):
    name: str
    value: str | None
    source: int


class ConfigEntry(NamedTuple):
    name: str
    value: str | None
    source: int
    read_only: bool
    sensitive: bool
    type: str  # ConfigKey.type; config_type_id(type) gives the wire id
    documentation: str
    synonyms: list[ConfigSynonym]


def _synonym_chain(broker: BrokerConfig, name: str, synonyms: Iterable[str], sensitive: bool) -> list[ConfigSynonym]:
    """Kafka's order: every source from dynamic per-broker down to default, each source listing the
    synonyms in precedence order; entries before the first one named `name` are dropped (as Kafka
    does, so e.g. retention.ms lists nothing until log.retention.ms itself is set)."""
    chain = [
        ConfigSynonym(s, None if sensitive else BROKER_KEYS[s].render(layer[s]), int(source))
        for source, layer in broker._layers()
        for s in synonyms
        if s in layer
    ]
    while chain and chain[0].name != name:
        chain.pop(0)
    return chain


def describe_broker_configs(broker: BrokerConfig, names: Iterable[str] | None = None, *,
                            default_resource: bool = False) -> list[ConfigEntry]:
    """DescribeConfigs of the BROKER resource "<node.id>" (every served key), or with
    `default_resource` of resource "" (only the cluster-wide dynamic defaults). Sorted by name;
    unknown requested names are left out."""
    wanted = None if names is None else set(names)
    layer = broker._dyn_default if default_resource else BROKER_KEYS
    entries = []
    for name in sorted(layer):
        if wanted is not None and name not in wanted:
            continue
        key = BROKER_KEYS[name]
        sensitive = key.type == "password"
        synonyms = _synonym_chain(broker, name, _broker_synonyms(name), sensitive)
        if default_resource:
            synonyms = [s for s in synonyms if s.source == DYNAMIC_DEFAULT_BROKER_CONFIG]
            value = broker._dyn_default[name]
        else:
            value = broker.get(name)
        entries.append(ConfigEntry(
            name, None if sensitive else key.render(value), synonyms[0].source if synonyms else int(DEFAULT_CONFIG),
            key.dynamic == READ_ONLY, sensitive, key.type, key.doc, synonyms))
    return entries

def describe_group_configs(broker: BrokerConfig, overrides: Mapping[str, str] | None = None,
                           names: Iterable[str] | None = None) -> list[ConfigEntry]:
    """DescribeConfigs of a GROUP resource, as Kafka answers it for any group id: every group config,
    sorted by name. An overridden key has source GROUP_CONFIG (8) and lists itself first among its
    synonyms; otherwise the source is that of its broker synonym (e.g. share.record.lock.duration.ms
    <- group.share.record.lock.duration.ms: STATIC_BROKER_CONFIG when set in the properties,
    DEFAULT_CONFIG when not), or DEFAULT_CONFIG for a key without one."""
    wanted = None if names is None else set(names)
    values = parsed_overrides(overrides or {})
    entries = []
    for name in sorted(GROUP_KEYS):
        if wanted is not None and name not in wanted:
            continue
        key = GROUP_KEYS[name]
        rendered = key.render(values[name] if name in values else broker_default(broker, name))
        synonyms = [ConfigSynonym(name, rendered, int(ConfigSource.GROUP_CONFIG))] if name in values else []
        if key.broker_synonyms:
            broker_key = key.broker_synonyms[0]
            synonyms += _synonym_chain(broker, broker_key, (broker_key,), False)
        source = synonyms[0].source if synonyms else int(DEFAULT_CONFIG)
        entries.append(ConfigEntry(name, rendered, source, False, False, key.type, key.doc, synonyms))
    return entries


def describe_topic_configs(broker: BrokerConfig, topic_overrides: Mapping[str, str] = MappingProxyType({}),
                           names: Iterable[str] | None = None) -> list[ConfigEntry]:
    """DescribeConfigs of a TOPIC resource: every topic config, sorted by name. Source is
    DYNAMIC_TOPIC_CONFIG when the topic overrides it, else the source of its broker synonym."""
    wanted = None if names is None else set(names)
    overrides = _topic_values(topic_overrides)
    entries = []
    for name in sorted(TOPIC_KEYS):
        if wanted is not None and name not in wanted:
            continue
        key = TOPIC_KEYS[name]
        sensitive = key.type == "password"
        value = overrides[name] if name in overrides else broker.topic_default(name)
        rendered = None if sensitive else key.render(value)
        synonyms = [ConfigSynonym(name, rendered, int(DYNAMIC_TOPIC_CONFIG))] if name in overrides else []
        if key.broker_synonyms:
            synonyms += _synonym_chain(broker, key.broker_synonyms[0], key.broker_synonyms, sensitive)
        entries.append(ConfigEntry(name, rendered, synonyms[0].source if synonyms else int(DEFAULT_CONFIG),
                                   False, sensitive, key.type, key.doc, synonyms))
    return entries


if __name__ == "__main__":  # python -m quafka.broker.config --write-docs docs/configuration.md
    if len(sys.argv) == 3 and sys.argv[1] == "--write-docs":
        doc = Path(sys.argv[2])
        doc.write_text(render_docs(doc.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        for section in markdown_tables().values():
            print(section, end="\n\n")

