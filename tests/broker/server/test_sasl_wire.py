"""SASL on the wire, raw frames against a real broker (SaslServerAuthenticator's rules as
quafka's sasl_authenticator.py follows them), and a seeded SASL fuzz: bad frames, truncated tokens,
wrong order, huge tokens and slow clients never crash or stall the broker, and a good client keeps
being served. Rerun a fuzz case with QUAFKA_SASL_FUZZ_SEED=<seed>."""

from __future__ import annotations

import os
import random
import struct
import time

import pytest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from quafka.broker.server.embedded import EmbeddedBroker
from tests.support import RawClient, wait_until
from tests.support.sasl import authenticate

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret" user_admin="admin-secret";')
DELAY_MS = 300


def _config(**extra):
    config = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
              "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
              "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
              "connection.failed.authentication.delay.ms": str(DELAY_MS), "sasl.server.max.receive.size": "4096"}
    config.update(extra)
    return config


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(config=_config(**{"connections.max.reauth.ms": "1500"})) as b:
        yield b


def _sasl(broker) -> str:
    return f"127.0.0.1:{broker.server.bound[0][1]}"


def _plaintext(broker) -> str:
    return f"127.0.0.1:{broker.server.bound[1][1]}"


def _metadata(raw):
    return raw.request(MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False))


def _closed(raw, timeout_s: float = 5.0) -> bool:
    raw.sock.settimeout(timeout_s)
    try:
        return raw.sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_plaintext_listener_answers_sasl_requests_with_illegal_sasl_state_and_stays(broker):
    with RawClient(_plaintext(broker)) as raw:
        assert int(raw.request(SaslHandshakeRequest(mechanism="PLAIN")).error_code) == 34
        resp = raw.request(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"))
        assert int(resp.error_code) == 34
        assert resp.error_message == "SaslAuthenticate request received after successful authentication"
        assert _metadata(raw).brokers


def test_request_before_authentication_closes_the_connection(broker):
    with RawClient(_sasl(broker)) as raw:
        raw.send_frame(raw.encode(MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                                  include_topic_authorized_operations=False)))
        assert _closed(raw)


def test_unsupported_mechanism_is_answered_late_with_the_enabled_list_then_closed(broker):
    with RawClient(_sasl(broker)) as raw:
        started = time.monotonic()
        resp = raw.request(SaslHandshakeRequest(mechanism="GSSAPI"))
        assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9
        assert int(resp.error_code) == 33 and list(resp.mechanisms) == ["PLAIN", "SCRAM-SHA-256"]
        assert _closed(raw)


@pytest.mark.parametrize("mechanism,user,password,message", [
    ("PLAIN", "alice", "nope", "Authentication failed: Invalid username or password"),
    ("PLAIN", "nobody", "alice-secret", "Authentication failed: Invalid username or password"),
    ("SCRAM-SHA-256", "nobody", "x", "Authentication failed during authentication due to invalid credentials "
                                     "with SASL mechanism SCRAM-SHA-256"),
])
def test_failed_authentication_is_delayed_then_closed(broker, mechanism, user, password, message, caplog):
    with RawClient(_sasl(broker)) as raw:
        started = time.monotonic()
        resp = authenticate(raw, mechanism, user, password)[-1]
        assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9
        assert int(resp.error_code) == 58 and resp.error_message == message
        assert _closed(raw)
    assert password not in caplog.text and user in caplog.text


def test_authenticated_connection_is_served_and_reauthenticates_with_the_same_principal(broker):
    with RawClient(_sasl(broker)) as raw:
        first = authenticate(raw, "PLAIN", "alice", "alice-secret")[-1]
        assert int(first.error_code) == 0 and first.session_lifetime.total_seconds() == 1.5
        assert _metadata(raw).brokers
        again = authenticate(raw, "PLAIN", "alice", "alice-secret")[-1]  # KIP-368 re-authentication
        assert int(again.error_code) == 0
        assert _metadata(raw).brokers


def test_reauthentication_as_another_user_is_refused(broker):
    with RawClient(_sasl(broker)) as raw:
        assert int(authenticate(raw, "PLAIN", "alice", "alice-secret")[-1].error_code) == 0
        resp = authenticate(raw, "PLAIN", "admin", "admin-secret")[-1]
        assert int(resp.error_code) == 58
        assert resp.error_message == "Cannot change principals during re-authentication from User.alice: User.admin"
        assert _closed(raw)


def test_expired_session_is_closed_on_its_next_request(broker):
    killed = ("SASL_PLAINTEXT", "expired-connections-killed")
    before = broker.server.metrics.sasl.get(killed, 0)
    with RawClient(_sasl(broker)) as raw:
        assert int(authenticate(raw, "PLAIN", "alice", "alice-secret")[-1].error_code) == 0
        authenticated = time.monotonic()
        deadline = authenticated + 10
        closed_at = None
        while time.monotonic() < deadline:  # keep asking until the session's end closes the connection
            try:
                _metadata(raw)
            except (ConnectionError, OSError):
                closed_at = time.monotonic()
                break
            time.sleep(0.05)
        assert closed_at is not None and closed_at - authenticated >= 1.4
    assert broker.server.metrics.sasl.get(killed, 0) == before + 1


def test_handshake_v0_is_followed_by_raw_tokens(broker):
    with RawClient(_sasl(broker)) as raw:
        assert int(raw.request(SaslHandshakeV0(mechanism="PLAIN")).error_code) == 0
        raw.send_frame(b"\x00alice\x00alice-secret")  # a raw token: no Kafka header
        assert raw.recv_frame() == b""
        assert _metadata(raw).brokers


def test_oversized_request_before_authentication_closes(broker):
    with RawClient(_sasl(broker)) as raw:
        raw.sock.sendall(struct.pack(">i", 4097) + b"\x00" * 64)
        assert _closed(raw)


# --------------------------------------------------------------------------- fuzz


def _good_client_served(broker) -> None:
    with RawClient(_sasl(broker), timeout_s=5) as raw:
        assert int(authenticate(raw, "PLAIN", "alice", "alice-secret")[-1].error_code) == 0
        assert _metadata(raw).brokers


def _fuzz_case(rng: random.Random, raw: RawClient) -> None:
    kind = rng.choice(["garbage", "truncated", "wrong-order", "huge", "slow", "bad-token", "size-lie"])
    header = raw.encode(SaslHandshakeRequest(mechanism=rng.choice(["PLAIN", "SCRAM-SHA-256", "X" * rng.randint(0, 40)])))
    if kind == "garbage":
        raw.send_frame(bytes(rng.getrandbits(8) for _ in range(rng.randint(8, 300))))
    elif kind == "truncated":
        frame = raw.encode(SaslAuthenticateRequest(auth_bytes=b"n,,n=alice,r=abc"))
        raw.sock.sendall(struct.pack(">i", len(frame)) + frame[:rng.randint(0, len(frame) - 1)])
    elif kind == "wrong-order":
        raw.send_frame(raw.encode(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret")))
    elif kind == "huge":
        raw.sock.sendall(struct.pack(">i", rng.choice([2**31 - 1, 10**8, 4097])) + b"\x00" * 100)
    elif kind == "slow":
        frame = struct.pack(">i", len(header)) + header
        for i in range(0, len(frame), 3):
            raw.sock.sendall(frame[i:i + 3])
            time.sleep(0.005)
    elif kind == "bad-token":
        raw.send_frame(header)
        body = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200)))
        raw.send_frame(raw.encode(SaslAuthenticateRequest(auth_bytes=body)))
        raw.send_frame(raw.encode(SaslAuthenticateRequest(auth_bytes=body[::-1])))
    else:  # a size prefix that promises more than is sent, then the client goes away
        raw.sock.sendall(struct.pack(">i", rng.randint(8, 4096)) + header[:8])


def test_sasl_fuzz_never_crashes_or_stalls_the_broker():
    seed = int(os.environ.get("QUAFKA_SASL_FUZZ_SEED", random.SystemRandom().randrange(2**32)))
    print(f"SASL fuzz seed {seed} (rerun: QUAFKA_SASL_FUZZ_SEED={seed})")
    rng = random.Random(seed)
    with EmbeddedBroker(config=_config(**{"connection.failed.authentication.delay.ms": "20"})) as broker:
        open_clients = []
        for case in range(60):
            raw = RawClient(_sasl(broker), timeout_s=5)
            try:
                _fuzz_case(rng, raw)
            except OSError:
                pass  # the broker closed the connection mid-case: allowed
            if rng.random() < 0.3:
                open_clients.append(raw)  # stays open, half-sent: must not hold up anyone else
            else:
                raw.close()
            if case % 10 == 0:
                _good_client_served(broker)
        _good_client_served(broker)
        for raw in open_clients:
            raw.close()
        wait_until(lambda: len(broker.server.connections) == 0, 10, message="fuzzed connections closed")
        assert broker.server.metrics.sasl.get(("SASL_PLAINTEXT", "successful-authentication"), 0) >= 7


def test_socket_level_close_during_failure_delay_is_harmless(broker):
    raw = RawClient(_sasl(broker))
    raw.send_frame(raw.encode(SaslHandshakeRequest(mechanism="NOPE")))
    raw.close()  # gone while the broker holds the answer back
    _good_client_served(broker)
