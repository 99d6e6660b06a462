"""quafka's client over TLS and SASL against a real broker (loopback): Admin, ShareConsumer and
the confluent-kafka producer (the Java names turned into librdkafka's) over SSL, SASL_PLAINTEXT
with PLAIN / SCRAM-SHA-256 / SCRAM-SHA-512, and SASL_SSL; failures that must stop the client at
once with a clear, non-retriable error (a wrong password, an unknown user, a mechanism the
listener does not enable, an untrusted or misnamed broker certificate, TLS against a plain
listener); KIP-368 re-authentication before the broker's connections.max.reauth.ms runs out."""

from __future__ import annotations

import asyncio
import time

import pytest
from support.secure_broker import REAUTH_MS, SCRAM_USER, client_config, secure_broker

from quafka.client import (
    Admin,
    AsyncAdmin,
    KafkaException,
    SaslAuthenticationException,
    ShareConsumer,
    SslAuthenticationException,
    librdkafka_security_config,
)

@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    with secure_broker(tmp_path_factory.mktemp("tls"), **{"group.share.min.record.lock.duration.ms": 1000}) as broker:
        yield broker


_config = client_config


def _produce(config: dict, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    producer = Producer(librdkafka_security_config(config))
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0


def _consume(config: dict, group: str, topic: str, count: int) -> list[bytes]:
    got: list[bytes] = []
    with ShareConsumer(dict(config, **{"group.id": group})) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(0.5)]
            consumer.commit_sync()
    return got


@pytest.mark.parametrize("protocol, mechanism", [
    ("SSL", None), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512"), ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "PLAIN"),
])
def test_admin_producer_and_share_consumer_over(secure, protocol, mechanism):
    config = _config(secure, protocol, mechanism)
    topic = f"sec-{protocol}-{mechanism}".lower()
    with Admin(config) as admin:
        admin.create_topics({topic: (2, 1)})
        admin.alter_configs("group", f"g-{topic}", {"share.auto.offset.reset": "earliest"})
        [broker] = admin.describe_cluster().brokers
        assert f"{broker.host}:{broker.port}" == secure.listener_address(protocol)  # the listener's own address
    values = [f"{protocol}-{i}".encode() for i in range(20)]
    _produce(config, topic, values)
    assert sorted(_consume(config, f"g-{topic}", topic, len(values))) == sorted(values)


def _fails_fast(make, error: type, *words: str) -> KafkaException:
    started = time.monotonic()
    with pytest.raises(error) as info:
        make()
    assert time.monotonic() - started < 5, "an authentication failure must not be retried"
    assert not info.value.retriable
    for word in words:
        assert word in info.value.message
    return info.value


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_a_wrong_password_is_a_clear_authentication_error_at_once(secure, protocol, mechanism):
    config = _config(secure, protocol, mechanism, **{"sasl.password": "not-the-password"})

    def describe():
        with Admin(config) as admin:
            admin.describe_cluster()

    error = _fails_fast(describe, SaslAuthenticationException, f"SASL {mechanism} authentication",
                        secure.listener_address(protocol))
    assert "not-the-password" not in error.message and "not-the-password" not in repr(error)

    def poll():
        with ShareConsumer(dict(config, **{"group.id": "g-wrong"})) as consumer:
            consumer.subscribe(["anything"])
            consumer.poll(5)

    _fails_fast(poll, SaslAuthenticationException, "authentication")


def test_an_unknown_scram_user_and_a_mechanism_the_listener_lacks_are_refused(secure):
    config = _config(secure, "SASL_PLAINTEXT", "SCRAM-SHA-256", **{"sasl.username": "nobody"})
    _fails_fast(lambda: Admin(config).describe_cluster(), SaslAuthenticationException, "'nobody'")
    # PLAIN users live in the JAAS config: bob has SCRAM credentials only
    config = _config(secure, "SASL_PLAINTEXT", "PLAIN", **{"sasl.username": SCRAM_USER})
    _fails_fast(lambda: Admin(config).describe_cluster(), SaslAuthenticationException, "PLAIN")


def test_sasl_against_a_plaintext_listener_says_so(secure):
    config = _config(secure, "SASL_PLAINTEXT", "PLAIN", **{"bootstrap.servers": secure.listener_address("PLAINTEXT")})
    with Admin(config) as admin:
        _fails_fast(admin.describe_cluster, SaslAuthenticationException, "is its listener SASL_PLAINTEXT or SASL_SSL")


@pytest.mark.parametrize("change, words", [
    ({"ssl.ca.location": "other"}, ("broker's certificate was refused", "unable to get local issuer certificate")),
    ({"bootstrap.servers": "localhost"}, ("Hostname mismatch", "localhost")),
    ({"bootstrap.servers": "PLAINTEXT"}, ("TLS handshake with broker",)),
])
def test_tls_failures_are_ssl_authentication_errors_at_once(secure, change, words):
    config = _config(secure, "SSL")
    if change.get("ssl.ca.location") == "other":
        config["ssl.ca.location"] = secure.other_ca_file
    if change.get("bootstrap.servers") == "localhost":
        config["bootstrap.servers"] = "localhost:" + secure.listener_address("SSL").rsplit(":", 1)[1]
    if change.get("bootstrap.servers") == "PLAINTEXT":
        config["bootstrap.servers"] = secure.listener_address("PLAINTEXT")
    with Admin(config) as admin:
        _fails_fast(admin.describe_cluster, SslAuthenticationException, *words)


def test_the_host_name_check_can_be_turned_off_as_in_kafka(secure):
    port = secure.listener_address("SSL").rsplit(":", 1)[1]
    config = _config(secure, "SSL", **{"bootstrap.servers": f"localhost:{port}",
                                       "ssl.endpoint.identification.algorithm": ""})
    with Admin(config) as admin:
        admin.describe_cluster()  # the metadata then names 127.0.0.1, which the certificate names
        assert admin.list_topics() is not None


def test_the_client_re_authenticates_before_the_session_expires(secure):
    """connections.max.reauth.ms=1500 on SASL_PLAINTEXT: the broker closes a connection whose
    session expired; the client re-authenticates after 85-95% of it (KIP-368) and keeps working."""
    config = _config(secure, "SASL_PLAINTEXT", "SCRAM-SHA-256")

    async def run() -> tuple[int, float]:
        async with AsyncAdmin(config) as admin:
            cluster = await admin._get_cluster()
            conn = await cluster.any_connection()
            started = time.monotonic()
            while time.monotonic() - started < 4 * REAUTH_MS / 1000:
                await admin.describe_cluster()
                await asyncio.sleep(0.05)
            assert conn.connected, "the broker closed the connection: its session expired"
            return conn.authentications, time.monotonic() - started

    authentications, elapsed = asyncio.run(run())
    # one authentication, then one per 85-95% of the lifetime
    assert authentications >= 1 + int(elapsed * 1000 / (0.95 * REAUTH_MS)), (authentications, elapsed)
    metrics = secure.server.metrics.sasl
    assert metrics.get(("SASL_PLAINTEXT", "successful-reauthentication"), 0) >= authentications - 1


def test_dead_letters_are_listed_and_redriven_over_sasl_ssl(secure):
    """Admin.list_dead_letters reads the DLQ, and redrive_dead_letters produces, with the Admin's
    own security settings (they connected as PLAINTEXT before: the SASL_SSL listener refused them)."""
    from support.dlq import DLQ, letter, produce_messages, read_topic

    plain = secure.listener_address("PLAINTEXT")
    dlq, source, retry = DLQ, "sec-orders", "sec-retry"  # letter() writes to support.dlq's DLQ
    with Admin({"bootstrap.servers": plain}) as admin:
        admin.create_topics({dlq: (1, 1), source: (1, 1), retry: (1, 1)})
    produce_messages(plain, [(source, 0, b"k", b"job", [])])
    produce_messages(plain, [letter(0, (source, 0, 0), group="sec")])
    with Admin(_config(secure, "SASL_SSL", "SCRAM-SHA-512")) as admin:
        letters = admin.list_dead_letters("sec", dlq)
        assert [(x.topic, x.partition, x.offset) for x in letters] == [(source, 0, 0)]
        result = admin.redrive_dead_letters("sec", dlq, to_topic=retry)
        assert len(result.sent) == 1
    assert [r.value for r in read_topic(plain, retry)] == [b"job"]
