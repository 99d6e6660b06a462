"""The SASL settings of one listener, resolved from the broker keys and their per-listener forms,
and the start-up check of every SASL listener.

Kafka resolves these per listener (`ListenerName.configPrefix`, `JaasContext.loadServerContext`,
`SaslChannelBuilder`): `listener.name.<listener>.sasl.enabled.mechanisms` wins over
`sasl.enabled.mechanisms`; the JAAS entry of a mechanism is
`listener.name.<listener>.<mechanism>.sasl.jaas.config`; `connections.max.reauth.ms` may be set
per listener. quafka also takes an unprefixed `sasl.jaas.config` (broker-wide, or under a listener
without a mechanism) as the default of every mechanism whose login module it names, where Kafka
ignores it with a warning; and a SCRAM mechanism needs no JAAS entry (quafka's broker has no
inter-broker client, and SCRAM credentials live in the metadata journal), where Kafka needs one.
A listener that enables PLAIN must have a PlainLoginModule entry (its users), as Kafka fails to
start without one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from quafka.broker._config_defs import BROKER_KEYS
from quafka.broker._config_types import invalid
from quafka.broker.core.jaas import LOGIN_MODULE_OF_MECHANISM, JaasError, server_login_module


@dataclass(frozen=True)
class SaslListenerSettings:
    mechanisms: tuple[str, ...]
    plain_users: dict[str, str] = field(default_factory=dict, repr=False)
    connections_max_reauth_ms: int = 0


def _jaas_text(config: Any, listener: str, mechanism: str) -> tuple[str, str] | None:
    """(the key it came from, the JAAS text) for one listener and mechanism, or None."""
    prefixed = config.listener_prop(listener, f"{mechanism.lower()}.sasl.jaas.config")
    if prefixed is not None:
        return f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config", prefixed
    expected = LOGIN_MODULE_OF_MECHANISM[mechanism]
    for key, text in ((f"listener.name.{listener.lower()}.sasl.jaas.config",
                       config.listener_prop(listener, "sasl.jaas.config")),
                      ("sasl.jaas.config", config.get("sasl.jaas.config"))):
        if text is not None:
            try:
                if server_login_module(text).class_name == expected:
                    return key, text
            except JaasError:
                return key, text  # reported by sasl_settings
    return None


def sasl_settings(config: Any, listener: str) -> SaslListenerSettings:
    """The SASL settings of a SASL_PLAINTEXT / SASL_SSL listener; a ConfigError naming the key
    (never a secret) when they do not work."""
    raw = config.listener_prop(listener, "sasl.enabled.mechanisms")
    if raw is not None:
        mechanisms = tuple(BROKER_KEYS["sasl.enabled.mechanisms"].parse(raw))
    else:
        mechanisms = tuple(config.get("sasl.enabled.mechanisms"))
    if not mechanisms:
        raise invalid("sasl.enabled.mechanisms", "", f"No SASL mechanisms are enabled for listener {listener}")
    plain_users: dict[str, str] = {}
    for mechanism in mechanisms:
        found = _jaas_text(config, listener, mechanism)
        if found is None:
            if mechanism == "PLAIN":
                raise invalid(f"listener.name.{listener.lower()}.plain.sasl.jaas.config", "[hidden]",
                              f"listener {listener} enables PLAIN but has no JAAS config with "
                              f"{LOGIN_MODULE_OF_MECHANISM['PLAIN']} (its user_<name> options are the users)")
            continue
        key, text = found
        try:
            module = server_login_module(text, mechanism)
        except JaasError as exc:
            raise invalid(key, "[hidden]", f"not a valid JAAS configuration for {mechanism}: {exc}") from None
        if mechanism == "PLAIN":
            plain_users = module.plain_users
    reauth = config.listener_prop(listener, "connections.max.reauth.ms")
    reauth_ms = int(BROKER_KEYS["connections.max.reauth.ms"].parse(reauth)) if reauth is not None \
        else int(config.get("connections.max.reauth.ms"))
    return SaslListenerSettings(mechanisms, plain_users, reauth_ms)


def check_sasl_listeners(config: Any, listeners: list[Any]) -> list[str]:
    """Check every SASL listener's settings at start-up; returns warnings (a JAAS entry for a
    mechanism that no listener enables)."""
    warnings: list[str] = []
    for lst in listeners:
        if not lst.security_protocol.startswith("SASL_"):
            continue
        settings = sasl_settings(config, lst.name)
        for rest in config.listener_props(lst.name):
            mechanism = rest[:-len(".sasl.jaas.config")].upper() if rest.endswith(".sasl.jaas.config") else None
            if mechanism and mechanism in LOGIN_MODULE_OF_MECHANISM and mechanism not in settings.mechanisms:
                warnings.append(f"listener.name.{lst.name.lower()}.{rest} is set but listener {lst.name} does not "
                                f"enable {mechanism} (sasl.enabled.mechanisms: {','.join(settings.mechanisms)})")
    return warnings
