"""TLS on SSL and SASL_SSL listeners: one `ssl.SSLContext` per listener, built from the listener's
`ssl.*` settings as Kafka's `DefaultSslEngineFactory` builds its SSLEngine (key store, trust store,
`ssl.client.auth`, protocols, cipher suites), and the handshake of each accepted connection with
the client certificate's principal (Kafka's `DefaultKafkaPrincipalBuilder`).

Stores. PKCS12 files are read with the `cryptography` package (with ssl.keystore.password); a file
given with the type JKS is read when it is PKCS12 (Java 9+ reads PKCS12 under the JKS type too),
and refused when it is a real JKS file, which Python cannot read. PEM comes from a file or inline
(`ssl.keystore.certificate.chain` + `ssl.keystore.key`, `ssl.truststore.certificates`, Kafka
2.7+); an encrypted PEM key is opened with ssl.key.password. The key and chain reach OpenSSL
through an in-memory file (`memfd`, else a private temporary file removed at once), the key
encrypted with a one-time password. A store that does not load refuses the start naming the key
that gave it — never a password or key material.

Handshakes. A listener accepts TCP connections and runs the handshake with `loop.start_tls`
(bounded by `quafka.ssl.handshake.timeout.ms`), rather than `create_server(ssl=...)`, whose
failures asyncio swallows: here each failure (an untrusted or expired certificate, no client
certificate under `ssl.client.auth=required`, bytes that are not TLS, a client that stalls) is
logged at INFO with the peer, the listener and the reason — Kafka logs "Failed authentication" at
INFO — and counted in `quafka_tls_handshake_failures_total{listener,reason}`. Only that connection
closes. On success the connection's principal is `User:<DN>` — the certificate subject in RFC 2253
form as Java's `X500Principal.getName()` prints it, through `ssl.principal.mapping.rules`
(`SslPrincipalMapper`) — or `User:ANONYMOUS` when the client sent no certificate.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import secrets
import ssl
import tempfile
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from quafka.broker._ssl_config import PEM, SslSettings, check_listener_ssl
from quafka.broker.config import ConfigError
from quafka.broker.core.ssl_principal import NoMatchingRule, parse_rules, principal_name

from .session import ANONYMOUS

if TYPE_CHECKING:
    from quafka.broker.config import BrokerConfig

log = logging.getLogger("quafka.tls")

_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


# --------------------------------------------------------------------------- loading the stores


def _refuse(s: SslSettings, key: str, reason: str) -> ConfigError:
    name = s.name_of(key)
    return ConfigError(name, None, reason=reason,
                       message=f"Invalid configuration {name}: {reason} (listener {s.listener_name})")


def _pem_blocks(text: str, kind: str) -> list[bytes]:
    """The PEM blocks of `kind` ("CERTIFICATE", "PRIVATE KEY", "ENCRYPTED PRIVATE KEY", ...) in
    `text`, re-wrapped: a value given inline in a .properties file often arrives on one line
    (continuation lines joined), which Kafka's PemParser accepts, and so does this."""
    out = []
    for m in _PEM_BLOCK.finditer(text):
        if m.group(1) != kind:
            continue
        body = "".join(m.group(2).split())
        lines = [body[i:i + 64] for i in range(0, len(body), 64)]
        out.append(("-----BEGIN %s-----\n%s\n-----END %s-----\n" % (kind, "\n".join(lines), kind)).encode())
    return out


def _read(s: SslSettings, key: str) -> bytes:
    path = s.get(key)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise _refuse(s, key, f"cannot read {path}: {exc.strerror or exc}") from None


def _pkcs12(s: SslSettings, location_key: str, password_key: str):
    data = _read(s, location_key)
    if data.startswith(_JKS_MAGIC):
        raise _refuse(s, location_key, f"{s.get(location_key)} is a JKS store, which Python cannot read: convert it "
                      "with keytool -importkeystore -deststoretype PKCS12, or use PEM")
    password = s.get(password_key)
    try:
        return pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError:
        raise _refuse(s, location_key, f"{s.get(location_key)} does not load as a PKCS12 store with the given "
                      f"{s.name_of(password_key)} (a wrong password, or not a PKCS12 file)") from None


def _private_key(s: SslSettings, key: str, text: str):
    blocks = _pem_blocks(text, "PRIVATE KEY") + _pem_blocks(text, "ENCRYPTED PRIVATE KEY") + \
        _pem_blocks(text, "RSA PRIVATE KEY") + _pem_blocks(text, "EC PRIVATE KEY")
    if len(blocks) != 1:
        raise _refuse(s, key, f"expected one private key in PEM, found {len(blocks)}")
    password = s.get("ssl.key.password")
    try:
        return serialization.load_pem_private_key(blocks[0], password.encode() if password else None)
    except (ValueError, TypeError):
        raise _refuse(s, key, "the private key could not be loaded (a wrong or missing ssl.key.password, or not a "
                      "PEM private key)") from None


def _certificates(s: SslSettings, key: str, text: str) -> list[x509.Certificate]:
    try:
        certs = [x509.load_pem_x509_certificate(b) for b in _pem_blocks(text, "CERTIFICATE")]
    except ValueError:
        raise _refuse(s, key, "a certificate does not parse") from None
    if not certs:
        raise _refuse(s, key, "At least one certificate expected, but none found")
    return certs


def load_keystore(s: SslSettings):
    """(the private key, the certificate chain, the key that named the store) of a listener."""
    if s.get("ssl.keystore.key") is not None:
        key = _private_key(s, "ssl.keystore.key", s.get("ssl.keystore.key"))
        chain = _certificates(s, "ssl.keystore.certificate.chain", s.get("ssl.keystore.certificate.chain"))
        return key, chain, "ssl.keystore.key"
    if s.get("ssl.keystore.type") == PEM:
        text = _read(s, "ssl.keystore.location").decode("utf-8", "replace")
        return (_private_key(s, "ssl.keystore.location", text),
                _certificates(s, "ssl.keystore.location", text), "ssl.keystore.location")
    key, cert, extra = _pkcs12(s, "ssl.keystore.location", "ssl.keystore.password")
    if key is None or cert is None:
        raise _refuse(s, "ssl.keystore.location", f"{s.get('ssl.keystore.location')} holds no private key with its "
                      "certificate")
    return key, [cert, *extra], "ssl.keystore.location"


def load_truststore(s: SslSettings) -> str | None:
    """The trusted certificates of a listener as PEM text, or None (no trust store given)."""
    if s.get("ssl.truststore.certificates") is not None:
        certs = _certificates(s, "ssl.truststore.certificates", s.get("ssl.truststore.certificates"))
    elif s.get("ssl.truststore.location") is None:
        return None
    elif s.get("ssl.truststore.type") == PEM:
        text = _read(s, "ssl.truststore.location").decode("utf-8", "replace")
        certs = _certificates(s, "ssl.truststore.location", text)
    else:
        key, cert, extra = _pkcs12(s, "ssl.truststore.location", "ssl.truststore.password")
        certs = ([cert] if cert is not None else []) + list(extra)
        if not certs:
            raise _refuse(s, "ssl.truststore.location", f"{s.get('ssl.truststore.location')} holds no certificate")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


@contextmanager
def _in_memory_file(data: bytes) -> Iterator[str]:
    """A path OpenSSL can open holding `data`: a memfd where the platform has one, else a private
    temporary file, removed as soon as it has been read."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("quafka-tls", 0)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    handle, path = tempfile.mkstemp(prefix="quafka-tls-")
    try:
        os.write(handle, data)
        os.close(handle)
        yield path
    finally:
        os.unlink(path)


# --------------------------------------------------------------------------- the context


def _cipher_names() -> dict[str, str]:
    """Java's (IANA) TLS 1.2 cipher suite names -> OpenSSL's, for the suites this OpenSSL has."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.set_ciphers("ALL")
    out = {}
    for c in ctx.get_ciphers():
        if c["protocol"] == "TLSv1.3":
            continue
        iana = _iana_name(c["name"])
        if iana:
            out[iana] = c["name"]
    return out


def _iana_name(openssl: str) -> str | None:
    """ECDHE-RSA-AES256-GCM-SHA384 -> TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 (the families Java names)."""
    m = re.fullmatch(r"(?:(ECDHE|DHE)-(RSA|ECDSA|DSS)-)?(AES(128|256)(?:-(GCM|CCM8?))?|CHACHA20-POLY1305)"
                     r"(?:-(SHA384|SHA256|SHA))?", openssl)
    if m is None:
        return None
    kx = f"{m.group(1)}_{m.group(2)}" if m.group(1) else "RSA"
    if m.group(3) == "CHACHA20-POLY1305":
        return f"TLS_{kx}_WITH_CHACHA20_POLY1305_SHA256"
    mode = m.group(5) or "CBC"
    mode = {"CCM8": "CCM_8"}.get(mode, mode)
    mac = f"_{m.group(6)}" if m.group(6) else ""
    return f"TLS_{kx}_WITH_AES_{m.group(4)}_{mode}{mac}"


def _versions(s: SslSettings) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    enabled = s.get("ssl.enabled.protocols")
    if not enabled:  # Java's defaults for the context's protocol
        enabled = ["TLSv1.2"] if s.get("ssl.protocol") == "TLSv1.2" else ["TLSv1.2", "TLSv1.3"]
    versions = sorted(_VERSIONS[v] for v in enabled)
    return versions[0], versions[-1]


def _apply_ciphers(s: SslSettings, ctx: ssl.SSLContext) -> None:
    suites = s.get("ssl.cipher.suites")
    if not suites:
        return
    tls13 = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.3"}
    named13 = [c for c in suites if c in tls13]
    if named13 and set(named13) != tls13:
        raise _refuse(s, "ssl.cipher.suites", f"names some TLS 1.3 cipher suites ({', '.join(named13)}) but not all "
                      f"of {', '.join(sorted(tls13))}; Python's ssl module cannot narrow TLS 1.3 suites")
    names = _cipher_names()
    tls12 = []
    for suite in suites:
        if suite in tls13:
            continue
        openssl = names.get(suite) or (suite if suite in names.values() else None)
        if openssl is None:
            raise _refuse(s, "ssl.cipher.suites", f"unknown or unavailable cipher suite {suite}")
        tls12.append(openssl)
    if tls12:
        ctx.set_ciphers(":".join(tls12))
    elif ctx.minimum_version <= ssl.TLSVersion.TLSv1_2:
        if ctx.maximum_version < ssl.TLSVersion.TLSv1_3:
            raise _refuse(s, "ssl.cipher.suites", "lists TLS 1.3 cipher suites only, but TLSv1.3 is not enabled")
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3  # no TLS 1.2 suite allowed: TLS 1.2 cannot be negotiated


def server_context(s: SslSettings) -> ssl.SSLContext:
    """The SSLContext of one listener (DefaultSslEngineFactory.createSSLContext + createSslEngine
    in server mode). Raises ConfigError naming the key of a store that does not load."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version, ctx.maximum_version = _versions(s)
    _apply_ciphers(s, ctx)
    key, chain, store_key = load_keystore(s)
    once = secrets.token_hex(16).encode()
    blob = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.BestAvailableEncryption(once))
    blob += b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)
    try:
        with _in_memory_file(blob) as path:
            ctx.load_cert_chain(path, password=once)
    except ssl.SSLError as exc:
        raise _refuse(s, store_key, f"the private key does not match the certificate ({exc.reason})") from None
    _warn_if_not_valid(s, chain[0])
    trusted = load_truststore(s)
    ctx.verify_mode = _CLIENT_AUTH[s.get("ssl.client.auth")]
    if trusted is not None:
        ctx.load_verify_locations(cadata=trusted)
    elif ctx.verify_mode != ssl.CERT_NONE:
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)  # the JVM's default trust store, in Kafka
    return ctx


def _warn_if_not_valid(s: SslSettings, cert: x509.Certificate) -> None:
    import datetime

    now = datetime.datetime.now(datetime.timezone.utc)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        log.warning("listener %s: the broker's certificate (%s) is valid from %s to %s only: clients will refuse it",
                    s.listener_name, java_dn(cert.subject), cert.not_valid_before_utc, cert.not_valid_after_utc)


def listener_contexts(config: "BrokerConfig") -> dict[str, tuple[ssl.SSLContext, tuple]]:
    """For each SSL and SASL_SSL listener: its SSLContext and its principal mapping rules.

    A SASL_SSL listener asks clients for a certificate only when its own
    `listener.name.<listener>.ssl.client.auth` says so: the broker-wide `ssl.client.auth` is for SSL
    listeners (Kafka's ChannelBuilders.create overrides it with `none` for SASL_SSL, with a warning)."""
    out = {}
    for listener in config.listeners:
        s = check_listener_ssl(config, listener)
        if s is not None:
            if listener.security_protocol == "SASL_SSL" and s.get("ssl.client.auth") != "none" and \
                    not s.name_of("ssl.client.auth").startswith("listener.name."):
                log.warning("listener %s: the broker-wide ssl.client.auth=%s applies to SSL listeners only; set "
                            "listener.name.%s.ssl.client.auth to ask SASL_SSL clients for a certificate",
                            listener.name, s.get("ssl.client.auth"), listener.name.lower())
                s = dataclasses.replace(s, values={**s.values, "ssl.client.auth": "none"})
            out[listener.name] = (server_context(s), parse_rules(s.get("ssl.principal.mapping.rules")))
    return out


# --------------------------------------------------------------------------- principals

# The attribute keywords Java's X500Principal.getName() (RFC 2253) prints; others print as OID=#hex.
_JAVA_KEYWORDS = {NameOID.COMMON_NAME: "CN", NameOID.COUNTRY_NAME: "C", NameOID.LOCALITY_NAME: "L",
                  NameOID.STATE_OR_PROVINCE_NAME: "ST", NameOID.ORGANIZATION_NAME: "O",
                  NameOID.ORGANIZATIONAL_UNIT_NAME: "OU", NameOID.STREET_ADDRESS: "STREET",
                  NameOID.DOMAIN_COMPONENT: "DC", NameOID.USER_ID: "UID"}
_ESCAPED = set(',=+<>#;"\\')
_STRING_CODECS = {12: "utf-8", 19: "ascii", 22: "ascii", 20: "latin-1", 26: "ascii", 30: "utf-16-be",
                  28: "utf-32-be"}


def _escape(value: str) -> str:
    out = []
    lead = len(value) - len(value.lstrip(" "))
    trail = len(value.rstrip(" "))
    for i, c in enumerate(value):
        if c in _ESCAPED or i < lead or i >= trail:
            out.append("\\" + c)
        elif c == "\x00":
            out.append("\\00")
        else:
            out.append(c)
    return "".join(out)


def _der_hex(attr: x509.NameAttribute) -> str:
    tag = getattr(attr, "_type", None)
    tag = int(getattr(tag, "value", 12)) if tag is not None else 12
    data = str(attr.value).encode(_STRING_CODECS.get(tag, "utf-8"))
    n = len(data)
    length = bytes([n]) if n < 128 else (lambda b: bytes([0x80 | len(b)]) + b)(n.to_bytes((n.bit_length() + 7) // 8,
                                                                                           "big"))
    return "#" + (bytes([tag]) + length + data).hex()


def java_dn(name: x509.Name) -> str:
    """A distinguished name as Java's `X500Principal.getName()` (RFC 2253) prints it: the RDNs
    last-to-first, the nine RFC 2253 keywords, other attributes as `OID=#<DER hex>`, and
    `,=+<>#;"\\` and leading/trailing spaces escaped with a backslash."""
    rdns = []
    for rdn in reversed(list(name.rdns)):
        parts = []
        for attr in rdn:
            keyword = _JAVA_KEYWORDS.get(attr.oid)
            if keyword is None:
                parts.append(f"{attr.oid.dotted_string}={_der_hex(attr)}")
            else:
                parts.append(f"{keyword}={_escape(str(attr.value))}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def peer_principal_name(ssl_object: ssl.SSLObject | None, rules: tuple) -> str:
    """The principal name of a TLS connection's client (DefaultKafkaPrincipalBuilder.build for
    SSL): the mapped subject DN of its certificate, or ANONYMOUS when it sent none. Raises
    NoMatchingRule when no mapping rule applies."""
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        return ANONYMOUS
    return principal_name(rules, java_dn(x509.load_der_x509_certificate(der).subject))


__all__ = ["NoMatchingRule", "java_dn", "listener_contexts", "peer_principal_name", "server_context"]
