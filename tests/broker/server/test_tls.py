"""Clients over a TLS listener (issue 29): confluent-kafka, kafka-python and aiokafka produce and
consume over SSL; ssl.client.auth=required refuses a client without a certificate while one with a
certificate keeps working; clients refuse an expired or untrusted broker certificate; the broker's
principal is the client certificate's DN (DefaultKafkaPrincipalBuilder), through
ssl.principal.mapping.rules; Metadata and FindCoordinator advertise the listener the request came
in on. Certificates come from trustme (tests/support/tls_certs.py)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import confluent_kafka
from confluent_kafka.admin import AdminClient
import kafka
import pytest
import trustme
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context

from quafka.broker.server.embedded import EmbeddedBroker
from support.tls_certs import broker_ssl_config, expired_kwargs, make_certs


def _topic() -> str:
    return f"tls-{uuid.uuid4().hex[:8]}"


def _ssl_conf(addr: str, certs, client_pem: str | None = None, **extra) -> dict:
    conf = {"bootstrap.servers": addr, "security.protocol": "SSL", "ssl.ca.location": certs.ca_pem}
    if client_pem is not None:
        conf.update({"ssl.certificate.location": client_pem, "ssl.key.location": client_pem})
    conf.update(extra)
    return conf


def _confluent_round_trip(addr: str, certs, client_pem: str | None = None) -> list[bytes]:
    topic = _topic()
    producer = confluent_kafka.Producer(_ssl_conf(addr, certs, client_pem))
    for i in range(5):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(15) == 0
    consumer = confluent_kafka.Consumer(_ssl_conf(addr, certs, client_pem, **{
        "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < 5 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    return got


def _metric(broker, reason: str) -> int:
    return sum(n for (_, r), n in broker.server.metrics.tls_handshake_failures.items() if r == reason)


def _wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_confluent_kafka_produces_and_consumes_over_ssl(tmp_path):
    certs = make_certs(tmp_path)
    with EmbeddedBroker(config=broker_ssl_config(certs)) as broker:
        ssl_addr = broker.listener_address("SSL")
        assert _confluent_round_trip(ssl_addr, certs) == [f"m{i}".encode() for i in range(5)]
        # Metadata over SSL names the SSL port; over PLAINTEXT the PLAINTEXT port (Kafka answers with
        # the endpoints of the request's listener)
        over_ssl = AdminClient(_ssl_conf(ssl_addr, certs)).list_topics(timeout=10)
        assert [f"{b.host}:{b.port}" for b in over_ssl.brokers.values()] == [ssl_addr]
        plain = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        assert [f"{b.host}:{b.port}" for b in plain.list_topics(timeout=10).brokers.values()] == \
            [broker.bootstrap_servers]
        assert ssl_addr != broker.bootstrap_servers
        assert broker.server.metrics.tls_handshakes["SSL"] >= 2


def test_kafka_python_produces_and_consumes_over_ssl(tmp_path):
    certs = make_certs(tmp_path)
    with EmbeddedBroker(config=broker_ssl_config(certs)) as broker:
        addr, topic = broker.listener_address("SSL"), _topic()
        common = {"bootstrap_servers": addr, "security_protocol": "SSL", "ssl_cafile": certs.ca_pem}
        producer = kafka.KafkaProducer(**common)
        for i in range(3):
            producer.send(topic, f"kp{i}".encode()).get(timeout=15)
        producer.close()
        consumer = kafka.KafkaConsumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest",
                                       consumer_timeout_ms=15000, **common)
        got = []
        for msg in consumer:
            got.append(msg.value)
            if len(got) == 3:
                break
        consumer.close()
        assert got == [b"kp0", b"kp1", b"kp2"]


def test_aiokafka_produces_and_consumes_over_ssl_with_a_client_certificate(tmp_path):
    certs = make_certs(tmp_path)
    client_pem = certs.pem("client", certs.client_leaf())

    async def run(addr: str) -> list[bytes]:
        topic = _topic()
        ctx = create_ssl_context(cafile=certs.ca_pem, certfile=client_pem, keyfile=client_pem)
        producer = AIOKafkaProducer(bootstrap_servers=addr, security_protocol="SSL", ssl_context=ctx)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, f"ak{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=addr, security_protocol="SSL", ssl_context=ctx,
                                    group_id=f"g-{topic}", auto_offset_reset="earliest")
        await consumer.start()
        got = []
        try:
            while len(got) < 3:
                msg = await asyncio.wait_for(consumer.getone(), 20)
                got.append(msg.value)
        finally:
            await consumer.stop()
        return got

    with EmbeddedBroker(config=broker_ssl_config(certs, client_auth="required")) as broker:
        assert asyncio.run(run(broker.listener_address("SSL"))) == [b"ak0", b"ak1", b"ak2"]


@pytest.mark.parametrize("protocol", ["TLSv1.2", "TLSv1.3"])
def test_client_auth_required_refuses_a_client_without_a_certificate_and_serves_one_with(tmp_path, protocol):
    """Under TLS 1.2 the client's handshake itself fails; under TLS 1.3 the client finishes its
    side first and is told by the broker's alert on its first read (as with a Java broker)."""
    certs = make_certs(tmp_path)
    client_pem = certs.pem("client", certs.client_leaf())
    cfg = broker_ssl_config(certs, client_auth="required", **{"listener.name.ssl.ssl.enabled.protocols": protocol})
    with EmbeddedBroker(config=cfg) as broker:
        addr = broker.listener_address("SSL")
        rdkafka_log = logging.getLogger(f"test.rdkafka.nocert.{protocol}")
        records: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: records.append(record.getMessage())
        rdkafka_log.addHandler(handler)
        no_cert = confluent_kafka.Producer(_ssl_conf(addr, certs, logger=rdkafka_log, **{"reconnect.backoff.ms": 500}))
        with pytest.raises(confluent_kafka.KafkaException):
            no_cert.list_topics(timeout=3)
        _wait_for(lambda: _metric(broker, "no_client_certificate") >= 1)
        expected = "SSL handshake failed" if protocol == "TLSv1.2" else "SSL connection closed by peer"
        _wait_for(lambda: no_cert.poll(0.05) is not None or any(expected in r for r in records))
        no_cert = None  # closes it
        # a client with a certificate is served all the while
        assert _confluent_round_trip(addr, certs, client_pem) == [f"m{i}".encode() for i in range(5)]


@pytest.mark.parametrize("which", ["expired", "untrusted"])
def test_clients_refuse_an_expired_or_untrusted_broker_certificate(tmp_path, which):
    certs = make_certs(tmp_path)
    if which == "expired":
        leaf = certs.broker_leaf(**expired_kwargs())
    else:
        leaf = trustme.CA().issue_cert("127.0.0.1", "localhost")  # a CA the clients do not trust
    with EmbeddedBroker(config=broker_ssl_config(certs, leaf=leaf)) as broker:
        addr = broker.listener_address("SSL")
        with pytest.raises(confluent_kafka.KafkaException):
            confluent_kafka.Producer(_ssl_conf(addr, certs, **{"reconnect.backoff.ms": 500})).list_topics(timeout=3)
        with pytest.raises(kafka.errors.KafkaError):  # kafka-python: unable to bootstrap
            kafka.KafkaProducer(bootstrap_servers=addr, security_protocol="SSL", ssl_cafile=certs.ca_pem,
                                request_timeout_ms=3000, max_block_ms=3000, bootstrap_timeout_ms=3000)
        # the broker saw each refusal (the client's alert), logged and counted it
        expected = "certificate_expired" if which == "expired" else "unknown_ca"
        _wait_for(lambda: any(expected in reason for (_, reason) in broker.server.metrics.tls_handshake_failures))
        # and its PLAINTEXT listener is unaffected
        meta = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(
            timeout=10)
        assert meta.brokers


def test_the_broker_sees_the_client_certificate_dn_as_the_principal(tmp_path, caplog):
    """DefaultKafkaPrincipalBuilder: User:<subject DN as X500Principal.getName() prints it> with the
    DEFAULT rule; ssl.principal.mapping.rules can map it to a short name; no certificate under
    `requested` is User:ANONYMOUS. The DEBUG line of quafka.tls shows it for each connection, and
    the request log and the per-principal request counter carry it."""
    certs = make_certs(tmp_path)
    leaf = certs.client_leaf("alice")
    client_pem = certs.pem("client", leaf)
    from cryptography import x509

    ou = x509.load_pem_x509_certificate(leaf.cert_chain_pems[0].bytes()).subject.get_attributes_for_oid(
        x509.oid.NameOID.ORGANIZATIONAL_UNIT_NAME)[0].value
    assert ou == "eng"
    caplog.set_level(logging.DEBUG, logger="quafka.tls")
    cfg = broker_ssl_config(certs, client_auth="requested")
    with EmbeddedBroker(config=cfg) as broker:
        addr = broker.listener_address("SSL")
        confluent_kafka.Producer(_ssl_conf(addr, certs, client_pem)).list_topics(timeout=10)
        _wait_for(lambda: "principal User:CN=alice,OU=eng,O=Example" in caplog.text)
        confluent_kafka.Producer(_ssl_conf(addr, certs)).list_topics(timeout=10)
        _wait_for(lambda: "principal User:ANONYMOUS" in caplog.text)
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="quafka.request")
    cfg["listener.name.ssl.ssl.principal.mapping.rules"] = "RULE:^CN=([^,]*),OU=([^,]*),.*$/$1@$2/U,DEFAULT"
    with EmbeddedBroker(config=cfg) as broker:
        addr = broker.listener_address("SSL")
        producer = confluent_kafka.Producer(_ssl_conf(addr, certs, client_pem))
        producer.produce(_topic(), b"x")
        assert producer.flush(15) == 0
        _wait_for(lambda: "principal User:ALICE@ENG" in caplog.text)

        def ssl_principals() -> set[str]:  # the session every request of a connection carries
            return broker.call(lambda: {c.session.principal for c in broker.server.connections
                                        if c.session.listener_name == "SSL"})

        _wait_for(lambda: "User:ALICE@ENG" in ssl_principals())
        del producer
        # the metrics and the request log carry the principal (quafka_requests_by_principal_total;
        # the quafka.request logger, Kafka's kafka.request.logger)
        counted = broker.call(lambda: dict(broker.server.metrics.requests_by_principal))
        assert any(t == "User" and n == "ALICE@ENG" and lst == "SSL" and k == 0 for (t, n, lst, k) in counted), counted
        assert "principal=User:ALICE@ENG listener=SSL (SSL)" in caplog.text
        assert "Produce v" in caplog.text


def test_connections_still_in_their_tls_handshake_count_against_max_connections_per_ip(tmp_path):
    """ConnectionQuotas.inc runs in Kafka's Acceptor, before a channel's TLS handshake: clients that
    open TCP connections and never finish a handshake hold their slots (until
    quafka.ssl.handshake.timeout.ms), so they cannot get past max.connections.per.ip; once they
    close, a TLS client connects."""
    import socket

    certs = make_certs(tmp_path)
    cfg = broker_ssl_config(certs, **{"max.connections.per.ip": 3})
    with EmbeddedBroker(config=cfg) as broker:
        host, port = broker.listener_address("SSL").rsplit(":", 1)
        silent = [socket.create_connection((host, int(port))) for _ in range(3)]
        try:
            limits = broker.server.connection_limits
            _wait_for(lambda: broker.call(lambda: limits.per_ip.get("127.0.0.1", 0)) == 3)
            refused = broker.call(lambda: limits.refused["max.connections.per.ip"])
            producer = confluent_kafka.Producer(_ssl_conf(f"{host}:{port}", certs, **{"socket.timeout.ms": 2000}))
            with pytest.raises(confluent_kafka.KafkaException):
                producer.list_topics(timeout=2)
            assert broker.call(lambda: limits.refused["max.connections.per.ip"]) > refused
        finally:
            for sock in silent:
                sock.close()
        _wait_for(lambda: broker.call(lambda: limits.per_ip.get("127.0.0.1", 0)) == 0)
        metadata = confluent_kafka.Producer(_ssl_conf(f"{host}:{port}", certs)).list_topics(timeout=10)
        assert metadata.brokers
