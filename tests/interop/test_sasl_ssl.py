"""SASL_SSL with real clients (issue 29, acceptance 1): confluent-kafka (librdkafka), kafka-python
and aiokafka connect with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 over TLS (certificates made by
trustme, tests/support/tls_certs.py), produce and consume; a wrong password and an unknown user are
refused with SaslServerAuthenticator's error as each client reports it; a broker certificate the
client does not trust is refused before any SASL exchange; a client with the right credentials is
served all the while by the same broker.

On a SASL_SSL listener the principal is the SASL authorization id, never the client certificate's
DN: Kafka's SaslServerAuthenticator builds it with DefaultKafkaPrincipalBuilder.build from a
SaslAuthenticationContext, and ssl.principal.mapping.rules are not consulted. And, as Kafka's
ChannelBuilders.create, the broker-wide `ssl.client.auth` is for SSL listeners only: a SASL_SSL
listener asks for a client certificate only under `listener.name.<listener>.ssl.client.auth`.

One broker serves the module's client tests; each test has its own topics, and the refusal tests
their own bad credentials."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import confluent_kafka
import kafka
import pytest
import trustme
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

from quafka.broker.config import STANDARD_AUTHORIZER
from quafka.broker.server.embedded import EmbeddedBroker
from tests.support.sasl_clients import (CLIENTS, MECHANISMS, PASSWORDS, PLAIN_JAAS, add_scram_users, aiokafka_kwargs,
                                        confluent_conf, expected_failure, kafka_python_kwargs)
from tests.support.tls_certs import make_certs

SASL_SSL = "SASL_SSL"
# kafka-python retries a refused bootstrap until bootstrap_timeout_ms (30 s by default)
KP_FAST = {"bootstrap_timeout_ms": 1500, "request_timeout_ms": 1500, "max_block_ms": 1500}


def _sasl_ssl_config(certs, **extra) -> dict:
    config = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
              "sasl.enabled.mechanisms": ",".join(MECHANISMS),
              "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
              "ssl.keystore.type": "PEM", "ssl.keystore.location": certs.pem("broker", certs.broker_leaf())}
    config.update(extra)
    return config


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    made = make_certs(tmp_path_factory.mktemp("sasl-ssl-certs"))
    trustme.CA().cert_pem.write_to_path(str(made.dir / "other-ca.pem"))  # a CA no broker here uses
    return made


@pytest.fixture(scope="module")
def broker(certs):
    with EmbeddedBroker(config=_sasl_ssl_config(certs)) as running:
        add_scram_users(running.listener_address(SASL_SSL), protocol=SASL_SSL, ca_file=certs.ca_pem)
        yield running


def _tls(certs) -> dict:
    return {"protocol": SASL_SSL, "ca_file": certs.ca_pem}


def _counts(broker) -> tuple[int, int]:
    """(TLS handshakes, successful SASL authentications) on the SASL_SSL listener so far."""
    metrics = broker.server.metrics
    return broker.call(lambda: (metrics.tls_handshakes.get(SASL_SSL, 0),
                                metrics.sasl.get((SASL_SSL, "successful-authentication"), 0)))


def _wait_for(predicate, timeout_s: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not met within {timeout_s} s"
        time.sleep(0.02)


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_client_produces_and_consumes_over_sasl_ssl(broker, certs, client, mechanism):
    roundtrip, payload = CLIENTS[client]
    user, password = PASSWORDS[mechanism]
    address = broker.listener_address(SASL_SSL)
    assert address != broker.bootstrap_servers
    handshakes, successes = _counts(broker)
    got = roundtrip(address, mechanism, user, password, _topic(f"sasl-ssl-{client}"), **_tls(certs))
    assert got == [payload]
    after = _counts(broker)
    assert after[0] > handshakes and after[1] > successes  # over TLS, and authenticated by SASL


class _Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _bad_credentials(mechanism: str, who: str, client: str) -> tuple[str, str]:
    user, password = PASSWORDS[mechanism]
    if who == "wrong-password":
        return user, f"not-{password}"
    return f"nobody-{client}-{mechanism.lower()}", password


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("who", ["wrong-password", "unknown-user"])
def test_confluent_is_refused_with_kafkas_error_while_others_keep_working(broker, certs, mechanism, who):
    address = broker.listener_address(SASL_SSL)
    user, password = _bad_credentials(mechanism, who, "confluent")
    good = confluent_kafka.Producer(confluent_conf(address, "SCRAM-SHA-512", "carol", "carol-secret", **_tls(certs)))
    errors: list[confluent_kafka.KafkaError] = []
    bad = confluent_kafka.Producer(confluent_conf(address, mechanism, user, password, error_cb=errors.append,
                                                  **_tls(certs)))
    topic = _topic("sasl-ssl-others")
    deadline = time.monotonic() + 15
    sent = 0
    while not any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        bad.poll(0.2)
        good.produce(topic, b"still served")
        sent += 1
        good.poll(0)
    auth = [e.str() for e in errors if e.code() == confluent_kafka.KafkaError._AUTHENTICATION]
    assert auth and expected_failure(mechanism) in auth[0], [e.str() for e in errors]
    assert good.flush(15) == 0 and sent > 0


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("who", ["wrong-password", "unknown-user"])
@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_python_clients_are_refused_with_kafkas_error(broker, certs, client, mechanism, who, caplog):
    """aiokafka logs the broker's SaslAuthenticate error message; kafka-python 3.0 reports it in
    some runs and only a disconnect in others (tests/interop/test_sasl.py), so for it the broker's
    refusal line is checked: the user, the mechanism and the SASL_SSL listener."""
    address = broker.listener_address(SASL_SSL)
    user, password = _bad_credentials(mechanism, who, client)
    caplog.set_level(logging.DEBUG, logger="aiokafka")
    caplog.set_level(logging.INFO, logger="quafka.sasl")
    if client == "kafka-python":
        with pytest.raises(kafka.errors.KafkaError):  # "Unable to bootstrap" or the SASL error
            kafka.KafkaProducer(**KP_FAST, **kafka_python_kwargs(address, mechanism, user, password, **_tls(certs)))
        refusals = [r.getMessage() for r in caplog.records
                    if r.name == "quafka.sasl" and "authentication failed" in r.getMessage()]
        assert refusals
        assert all(f"listener SASL_SSL (mechanism {mechanism}, user {user!r})" in line for line in refusals), refusals
    else:
        import aiokafka
        from aiokafka.errors import KafkaError

        async def start() -> None:
            producer = aiokafka.AIOKafkaProducer(**aiokafka_kwargs(address, mechanism, user, password, **_tls(certs)))
            try:
                await producer.start()
            finally:
                await producer.stop()

        with pytest.raises(KafkaError):
            asyncio.run(start())
        assert expected_failure(mechanism) in caplog.text


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_an_untrusted_broker_certificate_is_refused_before_any_sasl_exchange(broker, certs, client, caplog):
    """The client trusts another CA: its TLS handshake fails (the broker counts the failed
    handshake) and it never authenticates, though its credentials are right."""
    address = broker.listener_address(SASL_SSL)
    user, password = PASSWORDS["SCRAM-SHA-256"]
    untrusted = {"protocol": SASL_SSL, "ca_file": str(certs.dir / "other-ca.pem")}

    def failures() -> int:
        return broker.call(lambda: sum(n for (lst, _reason), n in broker.server.metrics.tls_handshake_failures.items()
                                       if lst == SASL_SSL))

    failures_before = failures()
    successes_before = _counts(broker)[1]
    if client == "confluent":
        errors: list[confluent_kafka.KafkaError] = []
        producer = confluent_kafka.Producer(confluent_conf(address, "SCRAM-SHA-256", user, password,
                                                           error_cb=errors.append, **untrusted))
        with pytest.raises(confluent_kafka.KafkaException):
            producer.list_topics(timeout=1.5)
        _wait_for(lambda: producer.poll(0.05) is not None or any(
            "certificate verify failed" in e.str() for e in errors), what="librdkafka's SSL error")
        assert all(e.code() != confluent_kafka.KafkaError._AUTHENTICATION for e in errors)
        del producer  # no more reconnects
    elif client == "kafka-python":
        with pytest.raises(kafka.errors.KafkaTimeoutError, match="Unable to bootstrap"):
            kafka.KafkaProducer(**KP_FAST, **kafka_python_kwargs(
                address, "SCRAM-SHA-256", user, password, **untrusted))
    else:
        import aiokafka
        from aiokafka.errors import KafkaConnectionError

        async def start() -> None:
            producer = aiokafka.AIOKafkaProducer(request_timeout_ms=3000, **aiokafka_kwargs(
                address, "SCRAM-SHA-256", user, password, **untrusted))
            try:
                await producer.start()
            finally:
                await producer.stop()

        with pytest.raises(KafkaConnectionError, match="Unable to bootstrap"):
            asyncio.run(start())
        assert "CERTIFICATE_VERIFY_FAILED" in caplog.text  # aiokafka's log of the failed connection

    # librdkafka and kafka-python end their handshake with an unknown_ca alert, aiokafka (asyncio)
    # just closes the connection: the broker counts a failed handshake either way
    _wait_for(lambda: failures() > failures_before, what="the broker's count of the failed handshake")
    assert _counts(broker)[1] == successes_before  # no SASL exchange happened on those connections


def test_an_authenticated_client_is_served_throughout(broker, certs):
    """One producer with the right credentials keeps producing on its connections while other
    clients fail every way a SASL_SSL client can: wrong passwords (all three clients), an unknown
    user, an untrusted broker certificate, a client speaking PLAINTEXT to the TLS port, and one
    speaking SASL_PLAINTEXT (SASL without TLS)."""
    address = broker.listener_address(SASL_SSL)
    topic = _topic("sasl-ssl-throughout")
    good_errors: list[confluent_kafka.KafkaError] = []
    good = confluent_kafka.Producer(confluent_conf(address, "PLAIN", "alice", "alice-secret",
                                                   error_cb=good_errors.append, **_tls(certs)))
    delivered: list[bytes] = []

    def produce_one(i: int) -> None:
        good.produce(topic, b"%d" % i, on_delivery=lambda err, msg: err is None and delivered.append(msg.value()))
        assert good.flush(10) == 0

    produce_one(0)
    handshakes, _ = _counts(broker)
    other_ca = {"protocol": SASL_SSL, "ca_file": str(certs.dir / "other-ca.pem")}
    attempts = [
        lambda: confluent_kafka.Producer(confluent_conf(address, "SCRAM-SHA-256", "bob", "wrong", **_tls(certs),
                                                        **{"reconnect.backoff.ms": 500})).list_topics(timeout=2),
        lambda: kafka.KafkaProducer(**KP_FAST, **kafka_python_kwargs(
            address, "SCRAM-SHA-512", "carol", "wrong", **_tls(certs))),
        lambda: asyncio.run(_aiokafka_start(address, "PLAIN", "nobody", "x", **_tls(certs))),
        lambda: kafka.KafkaProducer(**KP_FAST, **kafka_python_kwargs(
            address, "PLAIN", "alice", "alice-secret", **other_ca)),
        lambda: kafka.KafkaProducer(bootstrap_servers=address, **KP_FAST),
        lambda: kafka.KafkaProducer(**KP_FAST, **kafka_python_kwargs(
            address, "PLAIN", "alice", "alice-secret")),
    ]
    for i, attempt in enumerate(attempts, start=1):
        with pytest.raises(Exception):
            attempt()
        produce_one(i)
    assert delivered == [b"%d" % i for i in range(len(attempts) + 1)]
    assert [e for e in good_errors if e.code() == confluent_kafka.KafkaError._AUTHENTICATION] == []
    assert _counts(broker)[0] > handshakes  # the failing clients did reach the TLS listener


async def _aiokafka_start(address: str, mechanism: str, user: str, password: str, **security) -> None:
    import aiokafka

    producer = aiokafka.AIOKafkaProducer(request_timeout_ms=3000, **aiokafka_kwargs(
        address, mechanism, user, password, **security))
    try:
        await producer.start()
    finally:
        await producer.stop()


# ---------------------------------------------------------------------------- the principal on SASL_SSL

DN_RULES = "RULE:^CN=([^,]*),OU=ops,.*$/$1/"  # no DEFAULT: no certificate the tests make maps to a name


@pytest.fixture(scope="module")
def mtls_broker(certs):
    """SASL_SSL twice: MTLS requires a client certificate (listener-prefixed ssl.client.auth, as
    Kafka wants it for SASL_SSL) and SASL_SSL does not, though the broker-wide ssl.client.auth is
    `required` (for SSL listeners only, in Kafka). ACLs are on: admin (PLAIN) is a super user;
    bob and carol (SCRAM) get WRITE on their own topic only."""
    config = _sasl_ssl_config(certs, **{
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SASL_SSL",
        "listener.name.mtls.plain.sasl.jaas.config": PLAIN_JAAS,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": certs.ca_pem,
        "ssl.client.auth": "required", "listener.name.mtls.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": DN_RULES,
        "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": False})
    with EmbeddedBroker(config=config) as running:
        admin_address = running.listener_address(SASL_SSL)  # no client certificate
        add_scram_users(admin_address, protocol=SASL_SSL, ca_file=certs.ca_pem)
        admin = AdminClient(confluent_conf(admin_address, "PLAIN", "admin", "admin-secret", **_tls(certs)))
        for future in admin.create_topics([NewTopic(f"{u}-topic", 1, 1) for u in ("alice", "bob", "carol")]).values():
            future.result(10)
        acls = [AclBinding(ResourceType.TOPIC, f"{u}-topic", ResourcePatternType.LITERAL, f"User:{u}", "*",
                           AclOperation.WRITE, AclPermissionType.ALLOW) for u in ("alice", "bob", "carol")]
        for future in admin.create_acls(acls).values():
            future.result(10)
        yield running


def _mtls_conf(broker, certs, mechanism: str, client_pem: str | None, **extra) -> dict:
    user, password = PASSWORDS[mechanism]
    conf = confluent_conf(broker.listener_address("MTLS"), mechanism, user, password, **_tls(certs), **extra)
    if client_pem is not None:
        conf.update({"ssl.certificate.location": client_pem, "ssl.key.location": client_pem})
    return conf


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_principal_on_sasl_ssl_is_the_sasl_user_not_the_certificate_dn(mtls_broker, certs, mechanism, caplog):
    """A client presenting the certificate of CN=mallory (which no mapping rule matches) and
    authenticating as bob is User:bob: its connections carry that principal, the request log names
    it, and ACLs granting User:bob let it write to bob's topic but not to another user's."""
    user, _password = PASSWORDS[mechanism]
    mallory = certs.pem("mallory", certs.client_leaf("mallory"))
    caplog.set_level(logging.DEBUG, logger="quafka.request")
    errors: list[confluent_kafka.KafkaError] = []
    producer = confluent_kafka.Producer(_mtls_conf(mtls_broker, certs, mechanism, mallory, error_cb=errors.append))
    producer.produce(f"{user}-topic", b"as the SASL user")
    assert producer.flush(15) == 0, [e.str() for e in errors]

    def mtls_principals() -> set[str]:
        return mtls_broker.call(lambda: {c.session.principal for c in mtls_broker.server.connections
                                         if c.session.listener_name == "MTLS" and c.session.authenticated})

    assert mtls_principals() == {f"User:{user}"}
    request_log = [r.getMessage() for r in caplog.records if r.name == "quafka.request"]
    assert any(f"principal=User:{user} listener=MTLS (SASL_SSL)" in line for line in request_log)
    assert not [line for line in request_log if "mallory" in line]
    refused: list[confluent_kafka.KafkaError] = []
    other = "carol" if user != "carol" else "bob"
    producer.produce(f"{other}-topic", b"not mine", on_delivery=lambda err, _msg: refused.append(err))
    producer.flush(15)
    assert [e.code() for e in refused] == [confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_listener_prefixed_client_auth_required_refuses_a_client_without_a_certificate(mtls_broker, certs):
    """MTLS has listener.name.mtls.ssl.client.auth=required: right SASL credentials without a
    certificate are not enough, the TLS handshake fails (counted by the broker)."""
    def missing() -> int:
        return mtls_broker.call(lambda: mtls_broker.server.metrics.tls_handshake_failures.get(
            ("MTLS", "no_client_certificate"), 0))

    before = missing()
    producer = confluent_kafka.Producer(_mtls_conf(mtls_broker, certs, "SCRAM-SHA-256", None,
                                                   **{"reconnect.backoff.ms": 500}))
    with pytest.raises(confluent_kafka.KafkaException):
        producer.list_topics(timeout=1.5)
    _wait_for(lambda: missing() > before, what="the broker's count of a client without a certificate")


def test_broker_wide_client_auth_does_not_apply_to_sasl_ssl(mtls_broker, certs):
    """ssl.client.auth=required broker-wide, nothing for the SASL_SSL listener: as in Kafka
    (ChannelBuilders.create), that listener does not ask for a certificate, and a SASL client
    without one is served."""
    user, password = PASSWORDS["SCRAM-SHA-512"]
    producer = confluent_kafka.Producer(confluent_conf(mtls_broker.listener_address(SASL_SSL), "SCRAM-SHA-512", user,
                                                       password, **_tls(certs)))
    producer.produce(f"{user}-topic", b"no certificate")
    assert producer.flush(15) == 0
