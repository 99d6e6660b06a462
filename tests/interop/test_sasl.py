"""SASL_PLAINTEXT with real clients: confluent-kafka (librdkafka), kafka-python and aiokafka connect
with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, produce and consume; wrong passwords and unknown
users are refused with Kafka's error (SaslServerAuthenticator's SASL_AUTHENTICATION_FAILED) as each
client reports it, while an authenticated client keeps working; librdkafka re-authenticates
(KIP-368) under connections.max.reauth.ms; SCRAM credentials survive SIGKILL of `quafka broker`."""

from __future__ import annotations

import logging
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from quafka.broker.server.embedded import EmbeddedBroker
from tests.support import RawClient, wait_until
from tests.support.sasl import authenticate
from tests.support.sasl_clients import (CLIENTS, MECHANISMS, PASSWORDS, PLAIN_JAAS, add_scram_users, aiokafka_roundtrip,
                                        confluent_conf, expected_failure)


def sasl_config(**extra):
    config = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": ",".join(MECHANISMS),
              "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS}
    config.update(extra)
    return config


@pytest.fixture(scope="module")
def sasl_broker():
    with EmbeddedBroker(config=sasl_config()) as broker:
        add_scram_users(broker.bootstrap_servers)
        yield broker


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_client_produces_and_consumes_over_sasl(sasl_broker, client, mechanism):
    roundtrip, payload = CLIENTS[client]
    user, password = PASSWORDS[mechanism]
    topic = f"sasl-{client}-{mechanism}".lower()
    assert roundtrip(sasl_broker.bootstrap_servers, mechanism, user, password, topic) == [payload]
    outcomes = sasl_broker.server.metrics.sasl
    assert outcomes[("SASL_PLAINTEXT", "successful-authentication")] > 0


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("who", ["wrong-password", "unknown-user"])
def test_confluent_is_refused_with_kafkas_error_while_others_keep_working(sasl_broker, mechanism, who):
    user, password = PASSWORDS[mechanism]
    if who == "wrong-password":
        password = "not-" + password
    else:
        user = "nobody"
    good = confluent_kafka.Producer(confluent_conf(sasl_broker.bootstrap_servers, "SCRAM-SHA-256", "bob", "bob-secret"))
    errors = []
    bad = confluent_kafka.Producer(confluent_conf(sasl_broker.bootstrap_servers, mechanism, user, password,
                                                  error_cb=errors.append))
    deadline = time.monotonic() + 15
    while not any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        bad.poll(0.2)
        good.produce("sasl-others", b"still served")
        good.poll(0)
    auth = [e.str() for e in errors if e.code() == confluent_kafka.KafkaError._AUTHENTICATION]
    assert auth and expected_failure(mechanism) in auth[0]
    assert good.flush(15) == 0


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_python_clients_report_kafkas_error(sasl_broker, client, mechanism, caplog):
    user, _password = PASSWORDS[mechanism]
    caplog.set_level(logging.DEBUG, logger="kafka")
    caplog.set_level(logging.DEBUG, logger="aiokafka")
    with pytest.raises(Exception):
        if client == "kafka-python":
            import kafka
            consumer = kafka.KafkaConsumer(bootstrap_servers=sasl_broker.bootstrap_servers,
                                           security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                                           sasl_plain_username=user, sasl_plain_password="wrong",
                                           request_timeout_ms=1500, bootstrap_timeout_ms=1500)
            try:
                consumer.topics()
            finally:
                consumer.close()
        else:
            aiokafka_roundtrip(sasl_broker.bootstrap_servers, mechanism, user, "wrong", "never")
    if client == "aiokafka":
        assert expected_failure(mechanism) in caplog.text
    else:
        # kafka-python 3.0 reports the SaslAuthenticate error in some runs and only "socket disconnected" in
        # others (the answer and the close arrive together); the broker's side is checked instead
        refusals = [r for r in caplog.records if r.name == "quafka.sasl" and "authentication failed" in r.getMessage()]
        assert refusals and all(f"user {user!r}" in r.getMessage() for r in refusals)


def test_librdkafka_reauthenticates_and_keeps_producing():
    with EmbeddedBroker(config=sasl_config(**{"connections.max.reauth.ms": "1500"})) as broker:
        add_scram_users(broker.bootstrap_servers)
        errors = []
        producer = confluent_kafka.Producer(confluent_conf(broker.bootstrap_servers, "SCRAM-SHA-256", "bob",
                                                           "bob-secret", error_cb=errors.append))
        outcomes = broker.server.metrics.sasl
        deadline = time.monotonic() + 30
        sent = 0
        while outcomes.get(("SASL_PLAINTEXT", "successful-reauthentication"), 0) < 2 and time.monotonic() < deadline:
            producer.produce("reauth", b"%d" % sent)
            sent += 1
            assert producer.flush(10) == 0
            time.sleep(0.2)  # a steady trickle of produces across session lifetimes
        assert outcomes.get(("SASL_PLAINTEXT", "successful-reauthentication"), 0) >= 2
        assert ("SASL_PLAINTEXT", "expired-connections-killed") not in outcomes
        assert [e for e in errors if e.code() == confluent_kafka.KafkaError._AUTHENTICATION] == []


def test_scram_credentials_survive_sigkill(tmp_path, broker_process):
    from tests.support import free_port

    sasl_port = free_port()
    overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{{port}},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
                 "sasl.enabled.mechanisms": ",".join(MECHANISMS),
                 "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS}
    port = free_port()
    overrides["listeners"] = overrides["listeners"].format(port=port)
    broker = broker_process(str(tmp_path / "data"), port=port, overrides=overrides)
    sasl = f"127.0.0.1:{sasl_port}"
    wait_until(lambda: _port_open(sasl_port), 10, message="SASL listener")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    upsert = UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"dave-pw")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(10)  # answered once the record is durable in the metadata journal
    broker.kill()
    broker = broker_process(str(tmp_path / "data"), port=port, overrides=overrides)
    wait_until(lambda: _port_open(sasl_port), 10, message="SASL listener")
    assert "dave-pw" not in (tmp_path / "data" / "__quafka_metadata" / "journal.log").read_text()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    described = admin.describe_user_scram_credentials(["dave"])
    info = described["dave"].result(10).scram_credential_infos[0]
    assert (info.mechanism, info.iterations) == (ScramMechanism.SCRAM_SHA_512, 4096)
    # and the credential authenticates on the SASL listener
    with RawClient(sasl) as raw:
        assert int(authenticate(raw, "SCRAM-SHA-512", "dave", "dave-pw")[-1].error_code) == 0


def _port_open(port: int) -> bool:
    import socket
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False
