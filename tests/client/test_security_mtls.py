"""quafka's client with its own certificate against a broker listener with ssl.client.auth=required:
Admin, the confluent-kafka producer (the config turned into librdkafka's names) and ShareConsumer
connect with ssl.certificate.location/ssl.key.location and with a PKCS12 keystore
(ssl.keystore.location, ssl.keystore.password); without a certificate the client stops at once
with SslAuthenticationException, under TLS 1.2 (the handshake fails) and TLS 1.3 (the client's
side of the handshake completes and the broker's refusal arrives on the first read: Kafka's
SslTransportLayer reports that as an SslAuthenticationException too, not as a lost connection)."""

from __future__ import annotations

import time

import pytest
from support.tls_certs import STORE_PASSWORD, broker_ssl_config, make_certs

from quafka.broker.server.embedded import EmbeddedBroker
from quafka.client import Admin, ShareConsumer, SslAuthenticationException, librdkafka_security_config


@pytest.fixture(scope="module", params=["TLSv1.2", "TLSv1.3"])
def mtls(request, tmp_path_factory):
    certs = make_certs(tmp_path_factory.mktemp("mtls"))
    cfg = broker_ssl_config(certs, client_auth="required",
                            **{"listener.name.ssl.ssl.enabled.protocols": request.param})
    with EmbeddedBroker(config=cfg) as broker:
        broker.certs = certs
        broker.tls_version = request.param
        yield broker


def _config(broker, **extra) -> dict:
    return {"bootstrap.servers": broker.listener_address("SSL"), "security.protocol": "SSL",
            "ssl.ca.location": broker.certs.ca_pem, **extra}


def _pem_identity(broker) -> dict:
    leaf = broker.certs.client_leaf("alice")
    cert, key = broker.certs.dir / "alice-cert.pem", broker.certs.dir / "alice-key.pem"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    return {"ssl.certificate.location": str(cert), "ssl.key.location": str(key)}


def _pkcs12_identity(broker) -> dict:
    return {"ssl.keystore.location": broker.certs.pkcs12("carol", broker.certs.client_leaf("carol")),
            "ssl.keystore.password": STORE_PASSWORD}


@pytest.mark.parametrize("identity", [_pem_identity, _pkcs12_identity], ids=["pem", "pkcs12"])
def test_admin_producer_and_share_consumer_with_a_client_certificate(mtls, identity):
    from confluent_kafka import Producer

    config = _config(mtls, **identity(mtls))
    topic = f"mtls-{identity.__name__}-{mtls.tls_version}".replace("_", "").replace(".", "")
    with Admin(config) as admin:
        admin.create_topics({topic: (1, 1)})
        admin.alter_configs("group", f"g-{topic}", {"share.auto.offset.reset": "earliest"})
    producer = Producer(librdkafka_security_config(config))
    for i in range(10):
        producer.produce(topic, b"%d" % i)
    assert producer.flush(30) == 0
    got: list[bytes] = []
    with ShareConsumer(dict(config, **{"group.id": f"g-{topic}"})) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(0.5)]
    assert sorted(got) == sorted(b"%d" % i for i in range(10))


def test_without_a_certificate_the_client_stops_at_once_with_an_ssl_authentication_error(mtls):
    for call in (_describe(_config(mtls)), _poll_once(_config(mtls, **{"group.id": "g-nocert"}))):
        started = time.monotonic()
        with pytest.raises(SslAuthenticationException) as info:
            call()
        assert time.monotonic() - started < 5, "an authentication failure must not be retried"
        assert not info.value.retriable
        assert "TLS handshake with broker" in info.value.message
        assert mtls.listener_address("SSL") in info.value.message


def _describe(config: dict):
    def describe():
        with Admin(config) as admin:
            admin.describe_cluster()
    return describe


def _poll_once(config: dict):
    def poll():
        with ShareConsumer(config) as consumer:
            consumer.subscribe(["anything"])
            consumer.poll(10)
    return poll
