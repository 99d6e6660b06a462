"""The TLS settings of one listener (the `ssl.*` keys, each overridable per listener as
`listener.name.<listener>.ssl.*`), and the checks that involve several of them, with the messages
of Kafka's `DefaultSslEngineFactory.createKeystore` / `createTruststore`.

Pure: nothing here reads a file. `server/tls.py` loads the stores and builds the `ssl.SSLContext`;
a store that does not load is refused there, naming the key (never a password or a key).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from quafka.broker._config_defs import BROKER_KEYS, ConfigError


class _Config(Protocol):
    """What is read of a `config.BrokerConfig` (which imports this module)."""

    def get(self, name: str) -> Any: ...

    def listener_prop(self, listener_name: str, key: str) -> str | None: ...

    @property
    def static_configs(self) -> dict[str, str]: ...

    @property
    def dynamic_broker_configs(self) -> dict[str, str]: ...


class _Listener(Protocol):
    name: str
    security_protocol: str

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
PEM = "PEM"
HIDDEN = "[hidden]"  # what a password-type value is shown as (Kafka's Password.toString)


@dataclass(frozen=True, slots=True)
class SslSettings:
    """One listener's ssl.* values (typed), and under which name each was given."""

    listener_name: str
    values: dict[str, Any]
    given_as: dict[str, str]  # key -> the property name that set it (the listener-prefixed one, or the key)

    def get(self, key: str) -> Any:
        return self.values[key]

    def name_of(self, key: str) -> str:
        """The property to name in an error about `key`: `listener.name.ssl.ssl.keystore.location`
        when the listener's own setting gave it, else the broker key."""
        return self.given_as.get(key, key)


def ssl_settings(config: _Config, listener_name: str) -> SslSettings:
    """Every ssl.* key for `listener_name`: its listener.name.<listener>.* value when set, else the
    broker's (Kafka's `valuesWithPrefixOverride`, key by key)."""
    values: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for name, key in BROKER_KEYS.items():
        if not name.startswith("ssl."):
            continue
        raw = config.listener_prop(listener_name, name)
        if raw is not None:
            values[name] = key.parse(raw)
            given_as[name] = f"listener.name.{listener_name.lower()}.{name}"
        else:
            values[name] = config.get(name)
            if name in config.static_configs or name in config.dynamic_broker_configs:
                given_as[name] = name
    return SslSettings(listener_name, values, given_as)


def _refuse(settings: SslSettings, key: str, reason: str) -> ConfigError:
    value = settings.get(key)
    shown = HIDDEN if BROKER_KEYS[key].type == "password" and value is not None else value
    name = settings.name_of(key)
    return ConfigError(name, shown, reason=reason,
                       message=f"Invalid value {shown} for configuration {name}: {reason} "
                               f"(listener {settings.listener_name})")


def check_listener_ssl(config: _Config, listener: _Listener) -> SslSettings | None:
    """For an SSL or SASL_SSL listener: its settings, once the combinations of keys are checked
    (a key store is required; PEM-only keys only with PEM; no store password with PEM). None for
    other listeners."""
    if listener.security_protocol not in TLS_PROTOCOLS:
        return None
    s = ssl_settings(config, listener.name)
    ks_type, location = s.get("ssl.keystore.type"), s.get("ssl.keystore.location")
    password, key, chain = s.get("ssl.keystore.password"), s.get("ssl.keystore.key"), \
        s.get("ssl.keystore.certificate.chain")
    if key is not None:
        if ks_type != PEM:
            raise _refuse(s, "ssl.keystore.key", "SSL private key can be specified only for PEM, but key store type "
                          f"is {ks_type}.")
        if chain is None:
            raise _refuse(s, "ssl.keystore.key", "SSL private key is specified, but certificate chain is not "
                          "specified.")
        if location is not None:
            raise _refuse(s, "ssl.keystore.location", "Both SSL key store location and separate private key are "
                          "specified.")
        if password is not None:
            raise _refuse(s, "ssl.keystore.password", "SSL key store password cannot be specified with PEM format, "
                          "only key password may be specified.")
    elif chain is not None:
        raise _refuse(s, "ssl.keystore.certificate.chain", "SSL certificate chain is specified, but private key is "
                      "not specified")
    elif location is None:
        if password is not None:
            raise _refuse(s, "ssl.keystore.password", "SSL key store is not specified, but key store password is "
                          "specified.")
        raise _refuse(s, "ssl.keystore.location", f"a {listener.security_protocol} listener needs a key store with "
                      "the broker's certificate and private key: set ssl.keystore.location (PKCS12 or PEM), or "
                      "ssl.keystore.certificate.chain and ssl.keystore.key (PEM), for the broker or for this "
                      f"listener as listener.name.{listener.name.lower()}.ssl.*")
    elif ks_type == PEM:
        if password is not None:
            raise _refuse(s, "ssl.keystore.password", "SSL key store password cannot be specified with PEM format, "
                          "only key password may be specified")
    elif password is None:
        raise _refuse(s, "ssl.keystore.location", "SSL key store is specified, but key store password is not "
                      "specified.")
    ts_type, ts_location = s.get("ssl.truststore.type"), s.get("ssl.truststore.location")
    ts_password, ts_certs = s.get("ssl.truststore.password"), s.get("ssl.truststore.certificates")
    if ts_certs is not None:
        if ts_type != PEM:
            raise _refuse(s, "ssl.truststore.certificates", "SSL trust store certs can be specified only for PEM, "
                          f"but trust store type is {ts_type}.")
        if ts_location is not None:
            raise _refuse(s, "ssl.truststore.location", "Both SSL trust store location and separate trust "
                          "certificates are specified.")
        if ts_password is not None:
            raise _refuse(s, "ssl.truststore.password", "SSL trust store password cannot be specified for PEM "
                          "format.")
    elif ts_type == PEM and ts_location is not None and ts_password is not None:
        raise _refuse(s, "ssl.truststore.password", "SSL trust store password cannot be specified for PEM format.")
    elif ts_location is None and ts_password is not None:
        raise _refuse(s, "ssl.truststore.password", "SSL trust store is not specified, but trust store password "
                      "is specified.")
    enabled = s.get("ssl.enabled.protocols")
    suites = s.get("ssl.cipher.suites")
    if not enabled and s.get("ssl.protocol") == "TLSv1.2" and suites and all(_is_tls13(c) for c in suites):
        raise _refuse(s, "ssl.cipher.suites", "lists TLS 1.3 cipher suites only, but ssl.protocol is TLSv1.2")
    return s


def _is_tls13(suite: str) -> bool:
    return suite.startswith(("TLS_AES_", "TLS_CHACHA20_"))
