"""An authentication failure after bootstrap, in the ShareConsumer's fetch path: the user's SCRAM
credential is deleted while the consumer runs on a listener with connections.max.reauth.ms=1500,
so the KIP-368 re-authentication of the fetch connection fails. The consumer must stop and raise
the non-retriable SaslAuthenticationException from poll(), as Kafka's consumer does (an
AuthenticationException on any connection is fatal: NetworkClient.DefaultMetadataUpdater
.handleServerDisconnect hands it to Metadata.fatalError, and NetworkClientDelegate
.maybePropagateMetadataError raises it to the application's poll) — not retry the fetch forever.

The group heartbeat interval is 15 s here, so that the heartbeat (which already treats a
non-retriable error as fatal) cannot be what ends the consumer within the test's deadline."""

from __future__ import annotations

import time

from support.secure_broker import client_config, secure_broker

from quafka.client import (
    Admin,
    AuthenticationException,
    ScramCredentialInfo,
    ScramMechanism,
    ShareConsumer,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
    librdkafka_security_config,
)

USER, PASSWORD = "gus", "gus-Pa55"


def test_a_failed_re_authentication_of_the_fetch_connection_stops_the_consumer(tmp_path):
    from confluent_kafka import Producer

    with secure_broker(tmp_path, **{"group.share.heartbeat.interval.ms": 15000}) as broker:
        admin = Admin({"bootstrap.servers": broker.listener_address("PLAINTEXT")})
        with admin:
            admin.create_topics({"reauth-fail": (1, 1)})
            admin.alter_configs("group", "g-reauth-fail", {"share.auto.offset.reset": "earliest"})
            upsert = UserScramCredentialUpsertion(USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                                  PASSWORD)
            assert admin.alter_user_scram_credentials([upsert]) == {USER: None}
            producer = Producer(librdkafka_security_config({"bootstrap.servers": broker.listener_address("PLAINTEXT")}))
            for i in range(5):
                producer.produce("reauth-fail", b"%d" % i)
            assert producer.flush(30) == 0
            config = client_config(broker, "SASL_PLAINTEXT", "SCRAM-SHA-256",
                                   **{"sasl.username": USER, "sasl.password": PASSWORD, "group.id": "g-reauth-fail"})
            with ShareConsumer(config) as consumer:
                consumer.subscribe(["reauth-fail"])
                got: list[bytes] = []
                deadline = time.monotonic() + 20
                while len(got) < 5 and time.monotonic() < deadline:
                    got += [r.value for r in consumer.poll(0.5)]
                assert len(got) == 5
                deleted = UserScramCredentialDeletion(USER, ScramMechanism.SCRAM_SHA_256)
                assert admin.alter_user_scram_credentials([deleted]) == {USER: None}
                started = time.monotonic()
                error = None
                while error is None and time.monotonic() - started < 8:
                    try:
                        consumer.poll(0.5)
                    except AuthenticationException as exc:
                        error = exc
                assert error is not None, "the consumer kept retrying after its re-authentication failed"
                assert not error.retriable and f"user {USER!r}" in error.message, error
                assert PASSWORD not in error.message
                # the consumer stays stopped: the next poll raises the same error again
                try:
                    consumer.poll(0.1)
                    raise AssertionError("poll() returned after the authentication failure")
                except AuthenticationException as again:
                    assert again.message == error.message
        assert broker.server.metrics.sasl.get(("SASL_PLAINTEXT", "failed-reauthentication"), 0) >= 1
