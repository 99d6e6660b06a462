"""Security settings of a client: the keys Kafka's clients take for TLS and SASL, checked and
resolved into one `SecuritySettings` (what `_transport` needs to open a connection).

Both spellings are accepted, so that a librdkafka (confluent-kafka) config and a Java client
properties file work unchanged:

- ``security.protocol``: PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL (case-insensitive, as
  Kafka's ``SecurityProtocol.forName``).
- TLS, librdkafka's names: ``ssl.ca.location`` / ``ssl.ca.pem``, ``ssl.certificate.location`` /
  ``ssl.certificate.pem``, ``ssl.key.location`` / ``ssl.key.pem``, ``ssl.key.password``,
  ``ssl.endpoint.identification.algorithm`` (``https``, the default of both Kafka and librdkafka
  2.x: the broker's certificate must name the host connected to; ``none``, or empty as Java
  spells it, turns the check off), ``enable.ssl.certificate.verification`` (default true).
- TLS, the Java client's names: ``ssl.truststore.location`` with ``ssl.truststore.type=PEM``
  (JKS and PKCS12 truststores are refused: export the CA as PEM), ``ssl.keystore.location`` with
  ``ssl.keystore.type`` PEM (key and certificate chain in one file, ``ssl.key.password`` for an
  encrypted key) or PKCS12 (``ssl.keystore.password``; needs the ``cryptography`` package).
- SASL: ``sasl.mechanism`` (Java) or ``sasl.mechanisms`` (librdkafka): PLAIN, SCRAM-SHA-256,
  SCRAM-SHA-512. GSSAPI (Kafka's default mechanism) and OAUTHBEARER are refused by name.
  Credentials as ``sasl.username`` / ``sasl.password`` or as ``sasl.jaas.config`` with
  ``PlainLoginModule`` or ``ScramLoginModule`` and ``username=... password=...`` (Kafka's
  ``JaasContext.loadClientContext`` reads the same one-module entry).

ssl.* keys under a protocol without TLS, and sasl.* keys under one without SASL, are ignored as
Kafka ignores them, with one warning naming the keys (once per process for a given set of keys:
a tool that opens several clients from one config warns once). A secret (passwords, the JAAS entry, an
inline private key) never appears in a message, a log line or a repr.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quafka.protocol import jaas

from ._config import Key
from .errors import ConfigException

__all__ = ["SASL_MECHANISMS", "SECRET_KEYS", "SECURITY_CONFIG", "SECURITY_PROTOCOLS", "SaslSettings",
           "SecuritySettings", "TlsSettings", "librdkafka_security_config", "parse_jaas_config",
           "security_settings", "without_secrets"]

log = logging.getLogger(__name__)

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_REFUSED_MECHANISMS = {
    "GSSAPI": "Kerberos is not supported by quafka's client",
    "OAUTHBEARER": "OAuth bearer tokens are not supported by quafka's client",
}
_LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule",
    "org.apache.kafka.common.security.scram.ScramLoginModule",
}

SECURITY_CONFIG: dict[str, Key] = {
    "security.protocol": Key(str, "PLAINTEXT"),
    # librdkafka's TLS names
    "ssl.ca.location": Key(str, None),
    "ssl.ca.pem": Key(str, None),
    "ssl.certificate.location": Key(str, None),
    "ssl.certificate.pem": Key(str, None),
    "ssl.key.location": Key(str, None),
    "ssl.key.pem": Key(str, None),
    "ssl.key.password": Key(str, None),
    "ssl.endpoint.identification.algorithm": Key(str, "https"),
    "enable.ssl.certificate.verification": Key(bool, True),
    # the Java client's TLS names
    "ssl.truststore.location": Key(str, None),
    "ssl.truststore.type": Key(str, "PEM"),
    "ssl.keystore.location": Key(str, None),
    "ssl.keystore.type": Key(str, None),
    "ssl.keystore.password": Key(str, None),
    # SASL (both spellings of the mechanism)
    "sasl.mechanism": Key(str, None),
    "sasl.mechanisms": Key(str, None),
    "sasl.username": Key(str, None),
    "sasl.password": Key(str, None),
    "sasl.jaas.config": Key(str, None),
}

#: keys whose value is a secret: never echoed
SECRET_KEYS = frozenset({"ssl.key.password", "ssl.keystore.password", "ssl.key.pem", "sasl.password",
                         "sasl.jaas.config", "ssl.truststore.password"})


def without_secrets(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` with every secret value replaced by ``[hidden]`` (for logs and reprs)."""
    return {k: ("[hidden]" if k in SECRET_KEYS and v is not None else v) for k, v in config.items()}


@dataclass(frozen=True)
class TlsSettings:
    """What the TLS context is built from (`_ssl_context.build_ssl_context`)."""

    ca_location: str | None = None
    ca_pem: str | None = None
    certificate_location: str | None = None
    certificate_pem: str | None = None
    key_location: str | None = None
    key_pem: str | None = field(default=None, repr=False)
    key_password: str | None = field(default=None, repr=False)
    pkcs12_location: str | None = None
    pkcs12_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True
    verify_certificates: bool = True


@dataclass(frozen=True)
class SaslSettings:
    """The SASL mechanism and the credentials to authenticate with."""

    mechanism: str
    username: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class SecuritySettings:
    """security.protocol resolved: ``tls`` set for SSL/SASL_SSL, ``sasl`` for SASL_*."""

    protocol: str = "PLAINTEXT"
    tls: TlsSettings | None = None
    sasl: SaslSettings | None = None


PLAINTEXT = SecuritySettings()


def _given(config: Mapping[str, Any], key: str) -> Any:
    """The value of ``key``, None when unset or blank."""
    value = config.get(key)
    return None if value is None or (isinstance(value, str) and not value.strip()) else value


#: (protocol, ignored keys) already warned about in this process (no lock: this module stays pure;
#: two clients made at the same moment on two threads might both warn, which is harmless)
_warned_ignored: set[tuple[str, tuple[str, ...]]] = set()


def _warn_ignored_once(protocol: str, ignored: list[str]) -> None:
    """One warning per process for each (protocol, ignored keys): a tool that opens several
    clients from one config (a probe Admin, then its consumer) says it once."""
    key = (protocol, tuple(sorted(ignored)))
    if key in _warned_ignored:
        return
    _warned_ignored.add(key)
    ssl_keys = [k for k in ignored if not k.startswith("sasl.")]
    sasl_keys = [k for k in ignored if k.startswith("sasl.")]
    parts = ([f"{', '.join(ssl_keys)} (SSL and SASL_SSL only)"] if ssl_keys else []) + \
        ([f"{', '.join(sasl_keys)} (SASL_PLAINTEXT and SASL_SSL only)"] if sasl_keys else [])
    log.warning("security.protocol=%s: ignoring %s", protocol, "; ".join(parts))


def security_settings(config: Mapping[str, Any]) -> SecuritySettings:
    """Resolve a parsed client config's security keys; ConfigException naming the key (and never a
    secret value) for anything unknown, unsupported or inconsistent."""
    protocol = str(config.get("security.protocol") or "PLAINTEXT").strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigException("security.protocol", f"security.protocol={config.get('security.protocol')!r} is not "
                                                   f"one of {', '.join(SECURITY_PROTOCOLS)}")
    uses_tls = protocol in ("SSL", "SASL_SSL")
    uses_sasl = protocol.startswith("SASL_")
    ignored = [k for k in SECURITY_CONFIG if k != "security.protocol" and _given(config, k) is not None
               and config.get(k) != SECURITY_CONFIG[k].default
               and ((k.startswith("ssl.") or k == "enable.ssl.certificate.verification") and not uses_tls
                    or k.startswith("sasl.") and not uses_sasl)]
    if ignored:
        _warn_ignored_once(protocol, ignored)
    return SecuritySettings(protocol, _tls_settings(config) if uses_tls else None,
                            _sasl_settings(config) if uses_sasl else None)


def _tls_settings(config: Mapping[str, Any]) -> TlsSettings:
    algorithm = config.get("ssl.endpoint.identification.algorithm")
    algorithm = "https" if algorithm is None else str(algorithm).strip().lower()  # "" turns it off, as in Java
    if algorithm not in ("https", "none", ""):
        raise ConfigException("ssl.endpoint.identification.algorithm",
                              f"ssl.endpoint.identification.algorithm={algorithm!r} is not one of https, none "
                              "(or empty, the Java client's way to turn the host name check off)")
    truststore_type = str(config.get("ssl.truststore.type") or "PEM").strip().upper()
    truststore = _given(config, "ssl.truststore.location")
    if truststore is not None and truststore_type != "PEM":
        raise ConfigException("ssl.truststore.type", f"ssl.truststore.type={truststore_type} is not supported by "
                                                     "quafka's client: only PEM (export the CA certificates as PEM)")
    ca_location = _given(config, "ssl.ca.location")
    if ca_location is not None and truststore is not None and ca_location != truststore:
        raise ConfigException("ssl.truststore.location", "ssl.ca.location and ssl.truststore.location name "
                                                         "different files: set one of them")
    if ca_location is not None and ca_location.strip().lower() == "probe":
        ca_location = None  # librdkafka's "probe": the system's trust store, which is the default here too
    cert, key = _given(config, "ssl.certificate.location"), _given(config, "ssl.key.location")
    cert_pem, key_pem = _given(config, "ssl.certificate.pem"), _given(config, "ssl.key.pem")
    if cert is not None and cert_pem is not None:
        raise ConfigException("ssl.certificate.pem", "set ssl.certificate.location or ssl.certificate.pem, not both")
    if key is not None and key_pem is not None:
        raise ConfigException("ssl.key.pem", "set ssl.key.location or ssl.key.pem, not both")
    if (key is not None or key_pem is not None) and cert is None and cert_pem is None:
        raise ConfigException("ssl.key.location", "a client private key needs its certificate: set "
                                                  "ssl.certificate.location (or ssl.certificate.pem)")
    if (cert is not None or cert_pem is not None) and key is None and key_pem is None:
        raise ConfigException("ssl.certificate.location", "a client certificate needs its private key: set "
                                                          "ssl.key.location (or ssl.key.pem)")
    pkcs12 = pkcs12_password = None
    keystore = _given(config, "ssl.keystore.location")
    keystore_type = str(config.get("ssl.keystore.type") or "").strip().upper()
    if keystore is None and keystore_type and keystore_type not in ("PEM", "PKCS12"):
        raise ConfigException("ssl.keystore.type", f"ssl.keystore.type={keystore_type} is not supported: PEM or PKCS12")
    if keystore is not None:
        if cert is not None or cert_pem is not None:
            raise ConfigException("ssl.keystore.location", "set ssl.keystore.location or "
                                                           "ssl.certificate.location/ssl.key.location, not both")
        if not keystore_type:  # Java's default is JKS; librdkafka's ssl.keystore.location is PKCS#12
            keystore_type = "PKCS12"
        if keystore_type == "PEM":
            cert = key = keystore
        elif keystore_type == "PKCS12":
            pkcs12, pkcs12_password = keystore, _given(config, "ssl.keystore.password")
        else:
            raise ConfigException("ssl.keystore.type", f"ssl.keystore.type={keystore_type} is not supported by "
                                                       "quafka's client: PEM or PKCS12 (convert a JKS keystore with "
                                                       "keytool -importkeystore -deststoretype PKCS12)")
    verify = config.get("enable.ssl.certificate.verification", True)
    if isinstance(verify, str):
        verify = verify.strip().lower() != "false"
    return TlsSettings(ca_location=ca_location or truststore, ca_pem=_given(config, "ssl.ca.pem"),
                       certificate_location=cert, certificate_pem=cert_pem, key_location=key, key_pem=key_pem,
                       key_password=_given(config, "ssl.key.password"), pkcs12_location=pkcs12,
                       pkcs12_password=pkcs12_password, check_hostname=bool(verify) and algorithm == "https",
                       verify_certificates=bool(verify))


def _sasl_settings(config: Mapping[str, Any]) -> SaslSettings:
    java, librdkafka = _given(config, "sasl.mechanism"), _given(config, "sasl.mechanisms")
    if java is not None and librdkafka is not None and java.strip().upper() != librdkafka.strip().upper():
        raise ConfigException("sasl.mechanism", f"sasl.mechanism={java!r} and sasl.mechanisms={librdkafka!r} "
                                                "disagree: set one of them")
    given = java or librdkafka
    mechanism = (given or "GSSAPI").strip().upper()
    key = "sasl.mechanism" if java is not None else "sasl.mechanisms"
    if mechanism in _REFUSED_MECHANISMS:
        default = "" if given else " (Kafka's default when no sasl.mechanism is set)"
        raise ConfigException(key, f"sasl.mechanism={mechanism}{default}: {_REFUSED_MECHANISMS[mechanism]}; "
                                   f"use one of {', '.join(SASL_MECHANISMS)}")
    if mechanism not in SASL_MECHANISMS:
        raise ConfigException(key, f"{key}={given!r} is not supported by quafka's client: one of "
                                   f"{', '.join(SASL_MECHANISMS)}")
    username, password = _given(config, "sasl.username"), config.get("sasl.password")
    jaas = _given(config, "sasl.jaas.config")
    if jaas is not None:
        if username is not None or password is not None:
            raise ConfigException("sasl.jaas.config", "set sasl.jaas.config or sasl.username/sasl.password, not both")
        username, password = parse_jaas_config(jaas)
    if username is None or password is None:
        missing = "sasl.username" if username is None else "sasl.password"
        raise ConfigException(missing, f"SASL {mechanism} needs sasl.username and sasl.password (or sasl.jaas.config "
                                       f"with username and password): {missing} is not set")
    return SaslSettings(mechanism, username, password)


def parse_jaas_config(text: str) -> tuple[str, str]:
    """(username, password) of ``<LoginModule> <flag> username="..." password="...";``. Exactly one
    module entry (Kafka's ``JaasContext`` refuses more), PlainLoginModule or ScramLoginModule. Error
    messages name the module or option, never a value."""
    try:
        modules = jaas.parse_jaas_config(text)
    except jaas.JaasError as exc:  # names the module or option, never a value
        raise ConfigException("sasl.jaas.config", f"sasl.jaas.config: {exc}") from None
    if len(modules) != 1:
        raise ConfigException("sasl.jaas.config", "sasl.jaas.config has more than one login module: give exactly one")
    module = modules[0]
    if module.class_name not in _LOGIN_MODULES:
        raise ConfigException("sasl.jaas.config", f"sasl.jaas.config login module {module.class_name} is not "
                                                  f"supported by quafka's client: use one of "
                                                  f"{', '.join(sorted(_LOGIN_MODULES))}")
    options = module.options
    if str(options.get("tokenauth", "false")).lower() == "true":
        raise ConfigException("sasl.jaas.config", "sasl.jaas.config tokenauth=true (delegation tokens) is not "
                                                  "supported by quafka's client")
    if "username" not in options or "password" not in options:
        raise ConfigException("sasl.jaas.config", "sasl.jaas.config needs both username and password options")
    return options["username"], options["password"]


def librdkafka_security_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A client config with the Java client's security names turned into librdkafka's, for the
    tools and the framework parts that run a confluent-kafka client: ``ssl.truststore.location``
    (PEM) → ``ssl.ca.location``, a PEM ``ssl.keystore.location`` → ``ssl.certificate.location`` +
    ``ssl.key.location``, a PKCS12 one kept (librdkafka reads PKCS#12 there), ``sasl.jaas.config`` →
    ``sasl.username``/``sasl.password``, an empty ``ssl.endpoint.identification.algorithm`` →
    ``none``. The same checks as quafka's own client (`security_settings`) run first, so both
    kinds of client refuse the same configs."""
    security_settings({k: v for k, v in config.items() if k in SECURITY_CONFIG})
    out = dict(config)
    truststore = out.pop("ssl.truststore.location", None)
    out.pop("ssl.truststore.type", None)
    if truststore:
        out.setdefault("ssl.ca.location", truststore)
    keystore_type = str(out.pop("ssl.keystore.type", "") or "").upper()
    if out.get("ssl.keystore.location") and keystore_type == "PEM":
        location = out.pop("ssl.keystore.location")
        out["ssl.certificate.location"] = out["ssl.key.location"] = location
        out.pop("ssl.keystore.password", None)
    jaas = out.pop("sasl.jaas.config", None)
    if jaas:
        out["sasl.username"], out["sasl.password"] = parse_jaas_config(jaas)
    if "ssl.endpoint.identification.algorithm" in out and \
            not str(out["ssl.endpoint.identification.algorithm"]).strip():
        out["ssl.endpoint.identification.algorithm"] = "none"
    if isinstance(out.get("enable.ssl.certificate.verification"), bool):
        out["enable.ssl.certificate.verification"] = str(out["enable.ssl.certificate.verification"]).lower()
    return out
