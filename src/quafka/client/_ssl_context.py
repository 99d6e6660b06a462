"""The client's TLS context, built once per client from its `TlsSettings` (Kafka's client builds
its ``SSLContext`` once too, in ``SslFactory.configure``, so a missing file or a wrong key password
is a configuration error at construction, not a connection error later).

- Trust: ``ssl.ca.location`` / ``ssl.truststore.location`` (a PEM file of CA certificates) and/or
  ``ssl.ca.pem``; neither: the system's default trust store (librdkafka's ``probe``, the JVM's
  cacerts for the Java client).
- Client certificate (mutual TLS): a PEM certificate chain and key (files, or inline PEM written
  to a private temporary file that is removed as soon as it is loaded: Python's ``ssl`` loads
  keys from files only), an encrypted key opened with ``ssl.key.password``; or a PKCS#12 keystore
  opened with ``ssl.keystore.password`` (through the ``cryptography`` package; the key goes to the
  temporary file encrypted under a one-time random password).
- Verification: ``enable.ssl.certificate.verification=false`` trusts any certificate (and so
  checks no host name); ``ssl.endpoint.identification.algorithm=none`` keeps the chain check and
  drops the host name check. TLS 1.2 is the lowest version offered (Kafka's default
  ``ssl.enabled.protocols`` is TLSv1.2,TLSv1.3).
"""

from __future__ import annotations

import os
import secrets
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from ._security import TlsSettings
from .errors import ConfigException

__all__ = ["build_ssl_context"]


@contextmanager
def _private_files(*contents: bytes) -> Iterator[list[str]]:
    """Write ``contents`` to files only this user can read, in a fresh directory removed on exit."""
    directory = tempfile.mkdtemp(prefix="quafka-tls-")
    paths = []
    try:
        for i, data in enumerate(contents):
            path = os.path.join(directory, f"{i}.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            paths.append(path)
        yield paths
    finally:
        for path in paths:
            try:
                os.unlink(path)
            except OSError:
                pass
        os.rmdir(directory)


def _load_pkcs12(location: str, password: str | None) -> tuple[bytes, bytes, str]:
    """(certificate chain PEM, encrypted key PEM, its one-time password) from a PKCS#12 file."""
    try:
        from cryptography.hazmat.primitives.serialization import (
            BestAvailableEncryption,
            Encoding,
            PrivateFormat,
            pkcs12,
        )
    except ImportError:
        raise ConfigException("ssl.keystore.type", "ssl.keystore.type=PKCS12 needs the 'cryptography' package "
                                                   "(pip install cryptography), or give a PEM keystore") from None
    try:
        with open(location, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ConfigException("ssl.keystore.location", f"cannot read ssl.keystore.location {location}: "
                                                       f"{exc.strerror}") from None
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except (ValueError, TypeError):
        raise ConfigException("ssl.keystore.password", f"the PKCS#12 keystore {location} cannot be opened: "
                                                       "wrong ssl.keystore.password, or not a PKCS#12 file") from None
    if key is None or cert is None:
        raise ConfigException("ssl.keystore.location", f"the PKCS#12 keystore {location} has no private key "
                                                       "and certificate")
    one_time = secrets.token_urlsafe(24)
    chain = b"".join(c.public_bytes(Encoding.PEM) for c in [cert, *(extra or [])])
    key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(one_time.encode()))
    return chain, key_pem, one_time


def _load_chain(context: ssl.SSLContext, certfile: str, keyfile: str, password: str | None, what: str,
                password_key: str) -> None:
    try:
        context.load_cert_chain(certfile, keyfile, password=password or None)
    except ssl.SSLError as exc:  # before OSError, its base class
        raise ConfigException(what, f"the client certificate and key in {what} cannot be loaded: not a PEM "
                                    f"certificate chain and private key, or a wrong or missing {password_key} "
                                    f"({getattr(exc, 'reason', None) or exc})") from None
    except FileNotFoundError as exc:
        raise ConfigException(what, f"cannot read {what} {exc.filename}: file not found") from None
    except OSError as exc:
        raise ConfigException(what, f"cannot read {what}: {exc.strerror or exc}") from None


def build_ssl_context(tls: TlsSettings) -> ssl.SSLContext:
    """An ``ssl.SSLContext`` for connections to brokers; ConfigException naming the key for a file
    that cannot be read or a key that cannot be decrypted (never the password itself)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls.verify_certificates:
        context.check_hostname = tls.check_hostname
        context.verify_mode = ssl.CERT_REQUIRED
        if tls.ca_location is None and tls.ca_pem is None:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        if tls.ca_location is not None:
            try:
                context.load_verify_locations(cafile=tls.ca_location)
            except FileNotFoundError:
                raise ConfigException("ssl.ca.location", f"cannot read the CA file {tls.ca_location} "
                                                         "(ssl.ca.location / ssl.truststore.location): file not found") \
                    from None
            except OSError as exc:  # ssl.SSLError included
                raise ConfigException("ssl.ca.location", f"the CA file {tls.ca_location} (ssl.ca.location / "
                                                         f"ssl.truststore.location) has no PEM certificate: "
                                                         f"{getattr(exc, 'reason', None) or exc}") from None
        if tls.ca_pem is not None:
            try:
                context.load_verify_locations(cadata=tls.ca_pem)
            except (ssl.SSLError, ValueError) as exc:
                raise ConfigException("ssl.ca.pem", f"ssl.ca.pem is not a PEM certificate: "
                                                    f"{getattr(exc, 'reason', None) or exc}") from None
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if tls.pkcs12_location is not None:
        chain, key, one_time = _load_pkcs12(tls.pkcs12_location, tls.pkcs12_password)
        with _private_files(chain, key) as (certfile, keyfile):
            _load_chain(context, certfile, keyfile, one_time, "ssl.keystore.location", "ssl.keystore.password")
    elif tls.certificate_location is not None or tls.certificate_pem is not None:
        if tls.certificate_pem is None and tls.key_pem is None:
            what = "ssl.keystore.location" if tls.certificate_location == tls.key_location else \
                "ssl.certificate.location"
            _load_chain(context, tls.certificate_location, tls.key_location, tls.key_password, what,
                        "ssl.key.password")
        else:
            cert_data = tls.certificate_pem.encode() if tls.certificate_pem is not None else _read(
                tls.certificate_location, "ssl.certificate.location")
            key_data = tls.key_pem.encode() if tls.key_pem is not None else _read(tls.key_location, "ssl.key.location")
            with _private_files(cert_data, key_data) as (certfile, keyfile):
                _load_chain(context, certfile, keyfile, tls.key_password,
                            "ssl.certificate.pem" if tls.certificate_pem is not None else "ssl.key.pem",
                            "ssl.key.password")
    return context


def _read(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise ConfigException(key, f"cannot read {key} {path}: {exc.strerror}") from None
