"""A broker with every security protocol, for the client and tool tests of TLS and SASL: PLAINTEXT,
SASL_PLAINTEXT, SSL and SASL_SSL listeners on loopback (a trustme certificate for 127.0.0.1 only),
PLAIN user alice (in the JAAS config), SCRAM-SHA-256/512 user bob (AlterUserScramCredentials over
the PLAINTEXT listener, where Kafka's first credentials are made too), and SASL sessions of
REAUTH_MS on SASL_PLAINTEXT (connections.max.reauth.ms, KIP-368)."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Iterator
from contextlib import contextmanager

import trustme

from quafka.broker.server.embedded import EmbeddedBroker
from quafka.client import AsyncAdmin, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

PLAIN_USER, PLAIN_PASSWORD = "alice", "alice-Pa55"
SCRAM_USER, SCRAM_PASSWORD = "bob", "bob-Pa55,=x"  # ',' and '=' are escaped in SCRAM's saslname only
REAUTH_MS = 1500


async def add_scram_user(bootstrap: str, user: str, password: str, iterations: int = 4096, **security) -> None:
    """Both SCRAM credentials of ``user`` through quafka's Admin (one call per mechanism: Kafka
    alters a user once per request)."""
    async with AsyncAdmin({"bootstrap.servers": bootstrap, **security}) as admin:
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            result = await admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password)])
            assert result == {user: None}, result


@contextmanager
def secure_broker(directory: pathlib.Path, **extra_config) -> Iterator[EmbeddedBroker]:
    """The broker of the module docstring; ``broker.ca_file`` trusts it, ``broker.other_ca_file`` not."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(directory / "broker.pem"))
    trustme.CA().cert_pem.write_to_path(str(directory / "other-ca.pem"))
    config = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            f'user_{PLAIN_USER}="{PLAIN_PASSWORD}";',
        "listener.name.sasl_plaintext.connections.max.reauth.ms": REAUTH_MS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(directory / "broker.pem"),
        **extra_config,
    }
    with EmbeddedBroker(config=config) as broker:
        asyncio.run(add_scram_user(broker.listener_address("PLAINTEXT"), SCRAM_USER, SCRAM_PASSWORD))
        broker.ca_file = str(directory / "ca.pem")
        broker.other_ca_file = str(directory / "other-ca.pem")
        yield broker


def client_config(broker: EmbeddedBroker, protocol: str, mechanism: str | None = None, **extra) -> dict:
    """A client config (librdkafka names) for ``protocol`` on its listener, as alice (PLAIN) or bob (SCRAM)."""
    config = {"bootstrap.servers": broker.listener_address(protocol), "security.protocol": protocol}
    if protocol.endswith("SSL"):
        config["ssl.ca.location"] = broker.ca_file
    if mechanism is not None:
        user, password = (PLAIN_USER, PLAIN_PASSWORD) if mechanism == "PLAIN" else (SCRAM_USER, SCRAM_PASSWORD)
        config.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    config.update(extra)
    return config
