"""Admin.describe_user_scram_credentials / alter_user_scram_credentials (sync and async) against a
broker over loopback, as Kafka's KafkaAdminClient.describeUserScramCredentials /
alterUserScramCredentials and confluent-kafka's AdminClient methods of the same names: the
client derives the salted password (the password never reaches the broker), a user so created
authenticates over SASL, refusals come back per user with Kafka's errors, and the checks the
Java client makes before sending fail the user without a request."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time

import pytest
from support.secure_broker import client_config, secure_broker

from quafka.client import (
    Admin,
    AsyncAdmin,
    KafkaException,
    SaslAuthenticationException,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialsDescription,
    UserScramCredentialUpsertion,
)
from quafka.protocol.errors import ErrorCode

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    with secure_broker(tmp_path_factory.mktemp("tls")) as broker:
        yield broker


def _upsert(user: str, mechanism: ScramMechanism, password, iterations: int = 4096, salt=None):
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password, salt)


def test_created_over_sasl_ssl_described_and_used_to_authenticate(secure):
    admin_config = client_config(secure, "SASL_SSL", "SCRAM-SHA-512")  # bob administers
    with Admin(admin_config) as admin:
        assert admin.alter_user_scram_credentials([_upsert("carol", SHA256, "carol-Pa55", 8192)]) == {"carol": None}
        assert admin.alter_user_scram_credentials([_upsert("carol", SHA512, b"carol-Pa55")]) == {"carol": None}
        described = admin.describe_user_scram_credentials(["carol"])
        assert described == {"carol": UserScramCredentialsDescription("carol", (
            ScramCredentialInfo(SHA256, 8192), ScramCredentialInfo(SHA512, 4096)))}
        every = admin.describe_user_scram_credentials()
        assert set(every) == {"bob", "carol"} and every["carol"] == described["carol"]
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        carol = client_config(secure, "SASL_PLAINTEXT", mechanism, **{"sasl.username": "carol",
                                                                       "sasl.password": "carol-Pa55"})
        with Admin(carol) as admin:
            assert admin.describe_cluster().brokers  # authenticated with the credential just made
    wrong = client_config(secure, "SASL_PLAINTEXT", "SCRAM-SHA-256", **{"sasl.username": "carol",
                                                                        "sasl.password": "nope"})
    with Admin(wrong) as admin, pytest.raises(SaslAuthenticationException):
        admin.describe_cluster()


def test_the_client_sends_the_salted_password_only(secure):
    """The broker stores StoredKey = H(HMAC(Hi(password, salt, i), "Client Key")) for the salt the
    client chose: the client did the derivation; no stored byte string holds the password. A
    salt left to the client is Kafka's shape (130 random bits in base 36) and differs per call."""
    password, salt = "dave-Pa55", b"a-fixed-salt"
    with Admin({"bootstrap.servers": secure.listener_address("PLAINTEXT")}) as admin:
        assert admin.alter_user_scram_credentials([_upsert("dave", SHA256, password, 4096, salt)]) == {"dave": None}
        stored = secure.server.state.metadata.scram_credential("dave", "SCRAM-SHA-256")
        salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, 4096)
        client_key = hmac.new(salted, b"Client Key", "sha256").digest()
        assert (stored.salt, stored.stored_key) == (salt, hashlib.sha256(client_key).digest())
        assert password.encode() not in stored.salt + stored.stored_key + stored.server_key
        salts = set()
        for _ in range(2):
            assert admin.alter_user_scram_credentials([_upsert("dave", SHA512, password)]) == {"dave": None}
            salts.add(secure.server.state.metadata.scram_credential("dave", "SCRAM-SHA-512").salt)
        assert len(salts) == 2 and all(20 <= len(s) <= 26 and s.isalnum() and s == s.lower() for s in salts), salts


def test_async_admin_deletes_and_describes_per_user(secure):
    async def run():
        async with AsyncAdmin({"bootstrap.servers": secure.listener_address("PLAINTEXT")}) as admin:
            assert await admin.alter_user_scram_credentials([_upsert("erin", SHA256, "erin-Pa55"),
                                                             _upsert("frank", SHA512, "frank-Pa55")]) == \
                {"erin": None, "frank": None}
            assert await admin.alter_user_scram_credentials([UserScramCredentialDeletion("erin", SHA256)]) == \
                {"erin": None}
            return await admin.describe_user_scram_credentials(["erin", "frank"])

    described = asyncio.run(run())
    assert described["frank"] == UserScramCredentialsDescription("frank", (ScramCredentialInfo(SHA512, 4096),))
    missing = described["erin"]
    assert isinstance(missing, KafkaException) and missing.code == ErrorCode.resource_not_found
    assert "erin" in missing.message


def test_refusals_per_user_with_kafkas_errors(secure):
    with Admin({"bootstrap.servers": secure.listener_address("PLAINTEXT")}) as admin:
        result = admin.alter_user_scram_credentials([
            _upsert("gina", SHA256, "x", iterations=1000),                   # broker: too few
            _upsert("hank", SHA256, "x"), _upsert("hank", SHA512, "x"),      # broker: twice in one request
            UserScramCredentialDeletion("ivan", SHA256),                     # broker: nothing to delete
            _upsert("judy", SHA256, ""),                                     # client: empty password
            _upsert("", SHA256, "x"),                                        # client: empty user
            UserScramCredentialDeletion("kim", ScramMechanism.UNKNOWN),     # client: unknown mechanism
        ])
        codes = {user: (error.code if error is not None else None) for user, error in result.items()}
        assert codes == {"gina": ErrorCode.unacceptable_credential, "hank": ErrorCode.duplicate_resource,
                         "ivan": ErrorCode.resource_not_found, "judy": ErrorCode.unacceptable_credential,
                         "": ErrorCode.unacceptable_credential, "kim": ErrorCode.unsupported_sasl_mechanism}
        assert "Too few iterations" in result["gina"].message
        assert "Password must not be empty" in result["judy"].message and not result["judy"].retriable
        # an absurd iteration count is refused by the broker at once (the client does not compute Hi() for it)
        started = time.monotonic()
        [error] = admin.alter_user_scram_credentials([_upsert("gina", SHA256, "x", iterations=2**31 - 1)]).values()
        assert "Too many iterations" in error.message and time.monotonic() - started < 5
        described = admin.describe_user_scram_credentials(["gina", "hank", "judy"])
        assert {u: e.code for u, e in described.items()} == {u: ErrorCode.resource_not_found
                                                             for u in ("gina", "hank", "judy")}
        with pytest.raises(TypeError):
            admin.alter_user_scram_credentials(["alice"])
