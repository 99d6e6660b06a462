"""Certificates for the TLS tests, made by `trustme` at test time (no key is ever checked in): a
CA, a broker certificate for 127.0.0.1/localhost, client certificates, an expired certificate and
one from a CA nobody trusts; written as PEM and PKCS12 files under a test's tmp_path."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

import trustme
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

STORE_PASSWORD = "s3cret-store-pw"


@dataclass
class Certs:
    dir: Path
    ca: trustme.CA

    @property
    def ca_pem(self) -> str:
        return str(self.dir / "ca.pem")

    def pem(self, name: str, leaf: trustme.LeafCert) -> str:
        """A PEM file with the leaf's key and chain (librdkafka, aiokafka and the broker read it)."""
        path = self.dir / f"{name}.pem"
        leaf.private_key_and_cert_chain_pem.write_to_path(str(path))
        return str(path)

    def pkcs12(self, name: str, leaf: trustme.LeafCert, password: str = STORE_PASSWORD) -> str:
        key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
        from cryptography import x509

        certs = [x509.load_pem_x509_certificate(b.bytes()) for b in leaf.cert_chain_pems]
        data = pkcs12.serialize_key_and_certificates(name.encode(), key, certs[0], certs[1:] or None,
                                                     serialization.BestAvailableEncryption(password.encode()))
        path = self.dir / f"{name}.p12"
        path.write_bytes(data)
        return str(path)

    def broker_leaf(self, **kwargs) -> trustme.LeafCert:
        return self.ca.issue_cert("127.0.0.1", "localhost", common_name="broker", **kwargs)

    def client_leaf(self, cn: str = "alice") -> trustme.LeafCert:
        return self.ca.issue_cert(f"{cn}@example.com", common_name=cn, organization_unit_name="eng",
                                  organization_name="Example")


def make_certs(tmp_path: Path) -> Certs:
    certs = Certs(tmp_path, trustme.CA())
    certs.ca.cert_pem.write_to_path(certs.ca_pem)
    return certs


def expired_kwargs() -> dict:
    now = datetime.datetime.now(datetime.timezone.utc)
    return {"not_before": now - datetime.timedelta(days=30), "not_after": now - datetime.timedelta(days=1)}


def broker_ssl_config(certs: Certs, *, client_auth: str = "none", leaf: trustme.LeafCert | None = None,
                      **extra) -> dict:
    """PLAINTEXT and SSL listeners on free ports, the SSL one with a PEM key store and the CA as trust store."""
    cfg = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": certs.pem("broker", leaf or certs.broker_leaf()),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": certs.ca_pem,
        "ssl.client.auth": client_auth,
    }
    cfg.update(extra)
    return cfg
