"""The share consumer's configuration table: every key it takes with its type, default and lower
bound (Kafka's ConsumerConfig names and defaults, as a share consumer uses them), the consumer
configs Kafka refuses for a share consumer and why, and the keys only the constructor takes.
Declared here, validated by `_config.Key` when a consumer is built (plus the checks below that a
type and a lower bound cannot express), then run by the driver (`_share_driver`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._config import Key
from ._security import SECURITY_CONFIG
from .errors import ConfigException

__all__ = ["ACQUIRE_MODES", "REJECTED_CONFIGS", "SHARE_CONSUMER_CONFIG", "check_share_consumer_keys",
           "share_consumer_modes"]

#: share.acquire.mode values and their ShareAcquireMode on the wire (KIP-1206)
ACQUIRE_MODES = {"batch_optimized": 0, "record_limit": 1}

SHARE_CONSUMER_CONFIG: dict[str, Key] = {
    "bootstrap.servers": Key.required(str),
    "group.id": Key.required(str),
    "client.id": Key(str, "quafka-share-consumer"),
    "client.rack": Key(str, ""),
    "share.acknowledgement.mode": Key(str, "implicit"),
    "share.acquire.mode": Key(str, "batch_optimized"),
    "max.poll.records": Key(int, 500, 1),
    "fetch.min.bytes": Key(int, 1, 0),
    "fetch.max.wait.ms": Key(int, 500, 0),
    "fetch.max.bytes": Key(int, 52428800, 0),
    "max.partition.fetch.bytes": Key(int, 1048576, 1),
    "request.timeout.ms": Key(int, 30000, 1),
    "default.api.timeout.ms": Key(int, 60000, 1),
    "retry.backoff.ms": Key(int, 100, 0),
    "retry.backoff.max.ms": Key(int, 1000, 0),
    "metadata.max.age.ms": Key(int, 300000, 0),
    "check.crcs": Key(bool, True),
    **SECURITY_CONFIG,  # security.protocol, ssl.*, sasl.* (_security)
    # Kafka consumer keys accepted so that a Kafka properties file works unchanged; they tune
    # socket and metric details of the Java client and have no effect here (docs/client.md).
    "receive.buffer.bytes": Key(int, 65536, -1),
    "send.buffer.bytes": Key(int, 131072, -1),
    "reconnect.backoff.ms": Key(int, 50, 0),
    "reconnect.backoff.max.ms": Key(int, 1000, 0),
    "connections.max.idle.ms": Key(int, 540000, -1),
    "socket.connection.setup.timeout.ms": Key(int, 10000, 0),
    "socket.connection.setup.timeout.max.ms": Key(int, 30000, 0),
    "client.dns.lookup": Key(str, "use_all_dns_ips"),
    "metrics.num.samples": Key(int, 2, 1),
    "metrics.sample.window.ms": Key(int, 30000, 0),
    "metrics.recording.level": Key(str, "INFO"),
    "enable.metrics.push": Key(bool, True),
}

#: Consumer configs that Kafka refuses for a share consumer, and why.
REJECTED_CONFIGS = {
    "auto.offset.reset": "set the group config share.auto.offset.reset instead",
    "enable.auto.commit": "acknowledgements replace offset commits",
    "group.instance.id": "share groups have no static membership",
    "isolation.level": "set the group config share.isolation.level instead",
    "partition.assignment.strategy": "the share group's coordinator assigns partitions",
    "interceptor.classes": "share consumers take no interceptors",
    "session.timeout.ms": "set the group config share.session.timeout.ms instead",
    "heartbeat.interval.ms": "set the group config share.heartbeat.interval.ms instead",
    "group.protocol": "a share consumer always uses the share group protocol",
    "group.remote.assignor": "the share group's coordinator assigns partitions",
}
_CONSTRUCTOR_ONLY = {"key.deserializer": "key_deserializer", "value.deserializer": "value_deserializer"}


def check_share_consumer_keys(config: Mapping[str, Any]) -> None:
    """Refuse, before parsing, the keys Kafka refuses for a share consumer and the keys only the
    constructor takes (as callables)."""
    for name in config:
        if name in REJECTED_CONFIGS:
            raise ConfigException(name, f"{name} is not supported by a share consumer: {REJECTED_CONFIGS[name]}")
        if name in _CONSTRUCTOR_ONLY:
            raise ConfigException(name, f"{name} is not a configuration key here: pass a callable as "
                                        f"{_CONSTRUCTOR_ONLY[name]}= to the constructor")


def share_consumer_modes(config: dict[str, Any]) -> tuple[str, str]:
    """(share.acknowledgement.mode, share.acquire.mode) of a parsed config, lower-cased in place;
    ConfigException for a value that is not one of the allowed ones."""
    mode = config["share.acknowledgement.mode"].lower()
    if mode not in ("implicit", "explicit"):
        raise ConfigException("share.acknowledgement.mode", f"share.acknowledgement.mode={mode!r} is not one of "
                                                            "implicit, explicit")
    acquire = config["share.acquire.mode"].lower()
    if acquire not in ACQUIRE_MODES:
        raise ConfigException("share.acquire.mode", f"share.acquire.mode={acquire!r} is not one of "
                                                    f"{', '.join(ACQUIRE_MODES)}")
    config["share.acknowledgement.mode"], config["share.acquire.mode"] = mode, acquire
    return mode, acquire
