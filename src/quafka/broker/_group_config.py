"""Group configuration: the broker's `group.share.*` and `group.consumer.*` start-up checks, and the per-group
configs of Kafka's GroupConfig (`kafka-configs.sh --entity-type groups`, resource type GROUP = 32).

A group config with a broker synonym (share.session.timeout.ms <- group.share.session.timeout.ms,
and so on) takes its default from that broker key, and a group may only set it within the broker's
bounds (group.share.min.* / group.share.max.*). As in Kafka 4.4, a stored override that later falls
outside bounds changed on the broker is clamped to them when the group's configuration is resolved.

Re-exported by `quafka.broker.config`, which is what callers import (and which describes the
group configs, next to the broker's and topics'). This module imports only the config tables and
types below it: a broker configuration is anything with `get(name)` (`_config_types.BrokerSettings`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from quafka.broker._config_defs import GROUP_KEYS
from quafka.broker._config_types import BrokerSettings as BrokerConfig
from quafka.broker._config_types import ConfigError, invalid, iso_duration_ms

__all__ = [
    "GROUP_BOUNDS",
    "ShareGroupConfig",
    "auto_offset_reset_duration_ms",
    "check_share_group_bounds",
    "broker_default",
    "parsed_overrides",
    "resolve_group_config",
    "validate_group_configs",
]

# Group config -> (broker key with its lower bound, broker key with its upper bound).
GROUP_BOUNDS: Mapping[str, tuple[str, str]] = {
    "consumer.session.timeout.ms": ("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    "consumer.heartbeat.interval.ms": ("group.consumer.min.heartbeat.interval.ms",
                                       "group.consumer.max.heartbeat.interval.ms"),
    "share.session.timeout.ms": ("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    "share.heartbeat.interval.ms": ("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    "share.record.lock.duration.ms": ("group.share.min.record.lock.duration.ms",
                                      "group.share.max.record.lock.duration.ms"),
    "share.delivery.count.limit": ("group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit"),
    "share.partition.max.record.locks": ("group.share.min.partition.max.record.locks",
                                         "group.share.max.partition.max.record.locks"),
    "share.assignment.interval.ms": ("group.share.min.assignment.interval.ms",
                                     "group.share.max.assignment.interval.ms"),
}

_SESSION, _HEARTBEAT = "share.session.timeout.ms", "share.heartbeat.interval.ms"
_SESSION_HEARTBEAT_PAIRS = ((_SESSION, _HEARTBEAT, "group.share"),
                            ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms", "group.consumer"))
_DLQ_TOPIC = "errors.deadletterqueue.topic.name"
_BACKOFF, _BACKOFF_MAX = "quafka.share.redelivery.backoff.ms", "quafka.share.redelivery.backoff.max.ms"
_KEY_ORDERING, _ON_FAILURE = "quafka.share.key.ordering", "quafka.share.key.ordering.on.failure"


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    """A share group's effective configuration: its overrides, else the broker's defaults."""

    session_timeout_ms: int
    heartbeat_interval_ms: int
    record_lock_duration_ms: int
    auto_offset_reset: str  # "latest", "earliest" or "by_duration:<ISO-8601 duration>"
    isolation_level: str  # "read_uncommitted" or "read_committed"
    delivery_count_limit: int
    partition_max_record_locks: int
    renew_acknowledge_enable: bool
    assignment_interval_ms: int
    assignor_offload_enable: bool
    dlq_topic_name: str  # "" = no dead-letter queue
    dlq_copy_record_enable: bool
    consumer_session_timeout_ms: int = 45000
    consumer_heartbeat_interval_ms: int = 5000
    # quafka's delivery controls (off: Kafka's behaviour); broker/core/delivery_policy.py
    redelivery_backoff_ms: int = 0
    redelivery_backoff_max_ms: int = 3_600_000
    redelivery_backoff_multiplier: float = 2.0
    redelivery_backoff_jitter: float = 0.0
    delivery_delay_enable: bool = False
    delivery_delay_max_ms: int = 7 * 86_400_000
    key_ordering: bool = False
    key_ordering_on_failure: str = "continue"

    @property
    def auto_offset_reset_duration_ms(self) -> int | None:
        """For by_duration:<d>, d in milliseconds; None for latest and earliest."""
        return auto_offset_reset_duration_ms(self.auto_offset_reset)


def auto_offset_reset_duration_ms(value: str) -> int | None:
    """The duration of a `by_duration:<ISO-8601>` share.auto.offset.reset in milliseconds ("by_duration:PT1M"
    -> 60000); None for "latest" and "earliest". A malformed or negative duration raises ConfigError."""
    if value in ("latest", "earliest"):
        return None
    reason = GROUP_KEYS["share.auto.offset.reset"].validate(value)
    if reason is not None:
        raise invalid("share.auto.offset.reset", value, reason, GROUP_KEYS["share.auto.offset.reset"].validator)
    ms = iso_duration_ms(value.partition(":")[2])
    assert ms is not None
    return ms


# --------------------------------------------------------------------------- broker start-up checks

_BROKER_BOUNDED = (
    ("group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms",
     "group.consumer.max.session.timeout.ms"),
    ("group.consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
     "group.consumer.max.heartbeat.interval.ms"),
    ("group.share.session.timeout.ms", "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    ("group.share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms",
     "group.share.max.heartbeat.interval.ms"),
    ("group.share.assignment.interval.ms", "group.share.min.assignment.interval.ms",
     "group.share.max.assignment.interval.ms"),
    ("group.share.delivery.count.limit", "group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit"),
    ("group.share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
     "group.share.max.record.lock.duration.ms"),
    ("group.share.partition.max.record.locks", "group.share.min.partition.max.record.locks",
     "group.share.max.partition.max.record.locks"),
)


def check_share_group_bounds(broker: BrokerConfig) -> None:
    """Kafka's start-up checks of GroupCoordinatorConfig and ShareGroupConfig: max >= default >= min
    for every bounded share setting, heartbeat interval < session timeout, and at least as many share
    sessions as members of one group. Raises ConfigError in Kafka's wording."""
    for name, min_name, max_name in _BROKER_BOUNDED:
        value, lo, hi = broker.get(name), broker.get(min_name), broker.get(max_name)
        if hi < lo:
            raise invalid(max_name, hi, f"{max_name} must be greater than or equal to {min_name} ({lo})")
        if value < lo:
            raise invalid(name, value, f"{name} must be greater than or equal to {min_name} ({lo})")
        if value > hi:
            raise invalid(name, value, f"{name} must be less than or equal to {max_name} ({hi})")
    for prefix in ("group.share", "group.consumer"):
        heartbeat, session = broker.get(f"{prefix}.heartbeat.interval.ms"), broker.get(f"{prefix}.session.timeout.ms")
        if heartbeat >= session:
            raise invalid(f"{prefix}.heartbeat.interval.ms", heartbeat, f"{prefix}.heartbeat.interval.ms must be less "
                          f"than {prefix}.session.timeout.ms ({session})")
    sessions, size = broker.get("group.share.max.share.sessions"), broker.get("group.share.max.size")
    if sessions < size:
        raise invalid("group.share.max.share.sessions", sessions,
                      f"group.share.max.share.sessions must be greater than or equal to group.share.max.size ({size})")


# --------------------------------------------------------------------------- group configs


def broker_default(broker: BrokerConfig, name: str) -> Any:
    """A group config's default: its broker synonym's value, else its own default."""
    key = GROUP_KEYS[name]
    return broker.get(key.broker_synonyms[0]) if key.broker_synonyms else key.default


def validate_group_configs(broker: BrokerConfig, configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check a group's whole set of overrides as Kafka's GroupConfig.validate does: unknown names,
    null or unparseable values, values outside the broker's bounds, a session timeout not above the
    heartbeat interval, a DLQ topic name starting with "__". Raises ConfigError (the server answers
    INVALID_CONFIG); returns the values normalised as Kafka renders them."""
    typed: dict[str, Any] = {}
    out: dict[str, str] = {}
    for name, raw in configs.items():
        key = GROUP_KEYS.get(name)
        if key is None:
            raise ConfigError(name, raw, reason="unknown", message=f"Unknown group config name: {name}")
        if raw is None:
            raise ConfigError(name, raw, reason="null", message=f"Null value not supported for group configs: {name}")
        typed[name] = key.parse(raw)
        out[name] = key.render(typed[name]) or ""
    for name, (min_name, max_name) in GROUP_BOUNDS.items():
        if name in typed:
            lo, hi, value = broker.get(min_name), broker.get(max_name), typed[name]
            if not lo <= value <= hi:
                raise invalid(name, value, f"{name} must be in the range {lo} to {hi} inclusive "
                              f"(the broker's {min_name} and {max_name})", f"[{lo},...,{hi}]")
    for session_key, heartbeat_key, prefix in _SESSION_HEARTBEAT_PAIRS:
        if session_key in typed or heartbeat_key in typed:
            session = typed.get(session_key, broker.get(f"{prefix}.session.timeout.ms"))
            heartbeat = typed.get(heartbeat_key, broker.get(f"{prefix}.heartbeat.interval.ms"))
            if session <= heartbeat:
                shown = session_key if session_key in typed else heartbeat_key
                raise invalid(shown, typed[shown],
                              f"{session_key} ({session}) must be greater than {heartbeat_key} ({heartbeat})")
    if typed.get(_DLQ_TOPIC, "").startswith("__"):
        raise invalid(_DLQ_TOPIC, typed[_DLQ_TOPIC], "DLQ topic name must not start with '__'")
    _check_extensions(typed)
    return out


def _check_extensions(typed: Mapping[str, Any]) -> None:
    """quafka's own keys, checked as a set: what would make no sense is refused."""
    first, cap = typed.get(_BACKOFF, 0), typed.get(_BACKOFF_MAX, GROUP_KEYS[_BACKOFF_MAX].default)
    if first > cap:
        shown = _BACKOFF_MAX if _BACKOFF_MAX in typed else _BACKOFF
        raise invalid(shown, typed[shown], f"{_BACKOFF_MAX} ({cap}) must be at least {_BACKOFF} ({first}); "
                      f"raise {_BACKOFF_MAX} too")
    mode = typed.get(_ON_FAILURE, "continue")
    if mode != "continue" and not typed.get(_KEY_ORDERING, False):
        raise invalid(_ON_FAILURE, mode, f"{_ON_FAILURE}={mode} needs {_KEY_ORDERING}=true (set both, or delete both)")


def parsed_overrides(overrides: Mapping[str, str]) -> dict[str, Any]:
    """A group's stored overrides, typed; one that no longer parses is left out (its default applies)."""
    values: dict[str, Any] = {}
    for name, raw in overrides.items():
        key = GROUP_KEYS.get(name)
        if key is None or raw is None:
            continue
        try:
            values[name] = key.parse(raw)
        except ConfigError:
            continue  # stored before a change of the rules: the default applies
    return values


def resolve_group_config(broker: BrokerConfig, overrides: Mapping[str, str]) -> ShareGroupConfig:
    """The group's effective share configuration: each override (clamped to the broker's current
    bounds), else the broker's default for it."""
    values = parsed_overrides(overrides)

    def value(name: str) -> Any:
        if name not in values:
            return broker_default(broker, name)
        v = values[name]
        if name in GROUP_BOUNDS:
            min_name, max_name = GROUP_BOUNDS[name]
            v = min(max(v, broker.get(min_name)), broker.get(max_name))
        return v

    return ShareGroupConfig(
        session_timeout_ms=value("share.session.timeout.ms"),
        heartbeat_interval_ms=value("share.heartbeat.interval.ms"),
        record_lock_duration_ms=value("share.record.lock.duration.ms"),
        auto_offset_reset=value("share.auto.offset.reset"),
        isolation_level=value("share.isolation.level"),
        delivery_count_limit=value("share.delivery.count.limit"),
        partition_max_record_locks=value("share.partition.max.record.locks"),
        renew_acknowledge_enable=value("share.renew.acknowledge.enable"),
        assignment_interval_ms=value("share.assignment.interval.ms"),
        assignor_offload_enable=value("share.assignor.offload.enable"),
        dlq_topic_name=value(_DLQ_TOPIC),
        dlq_copy_record_enable=value("errors.deadletterqueue.copy.record.enable"),
        consumer_session_timeout_ms=value("consumer.session.timeout.ms"),
        consumer_heartbeat_interval_ms=value("consumer.heartbeat.interval.ms"),
        redelivery_backoff_ms=value(_BACKOFF),
        redelivery_backoff_max_ms=value(_BACKOFF_MAX),
        redelivery_backoff_multiplier=value("quafka.share.redelivery.backoff.multiplier"),
        redelivery_backoff_jitter=value("quafka.share.redelivery.backoff.jitter"),
        delivery_delay_enable=value("quafka.share.delivery.delay.enable"),
        delivery_delay_max_ms=value("quafka.share.delivery.delay.max.ms"),
        key_ordering=value(_KEY_ORDERING),
        key_ordering_on_failure=value(_ON_FAILURE),
    )
