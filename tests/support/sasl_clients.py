"""confluent-kafka (librdkafka), kafka-python and aiokafka as SASL clients, over SASL_PLAINTEXT or
SASL_SSL (then trusting the CA file given): each client's configuration, a produce-then-consume
round trip, the PLAIN users of a JAAS config and the SCRAM users made with
AlterUserScramCredentials, and the errors Kafka's SaslServerAuthenticator answers a refused
client with. Shared by tests/interop/test_sasl.py and test_sasl_ssl.py."""

from __future__ import annotations

import asyncio
import time
import uuid

import confluent_kafka
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret" user_alice="alice-secret";')
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
PASSWORDS = {"PLAIN": ("alice", "alice-secret"), "SCRAM-SHA-256": ("bob", "bob-secret"),
             "SCRAM-SHA-512": ("carol", "carol-secret")}
SCRAM_FAILED = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"
PLAIN_FAILED = "Authentication failed: Invalid username or password"


def expected_failure(mechanism: str) -> str:
    """What SaslServerAuthenticator tells a client whose credentials are refused."""
    return PLAIN_FAILED if mechanism == "PLAIN" else SCRAM_FAILED.format(mechanism)


def confluent_conf(bootstrap: str, mechanism: str, user: str, password: str, *, protocol: str = "SASL_PLAINTEXT",
                   ca_file: str | None = None, **extra) -> dict:
    conf = {"bootstrap.servers": bootstrap, "security.protocol": protocol, "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}
    if ca_file is not None:
        conf["ssl.ca.location"] = ca_file
    conf.update(extra)
    return conf


def kafka_python_kwargs(bootstrap: str, mechanism: str, user: str, password: str, *,
                        protocol: str = "SASL_PLAINTEXT", ca_file: str | None = None) -> dict:
    kw = dict(bootstrap_servers=bootstrap, security_protocol=protocol, sasl_mechanism=mechanism,
              sasl_plain_username=user, sasl_plain_password=password)
    if ca_file is not None:
        kw["ssl_cafile"] = ca_file
    return kw


def aiokafka_kwargs(bootstrap: str, mechanism: str, user: str, password: str, *,
                    protocol: str = "SASL_PLAINTEXT", ca_file: str | None = None) -> dict:
    kw = dict(bootstrap_servers=bootstrap, security_protocol=protocol, sasl_mechanism=mechanism,
              sasl_plain_username=user, sasl_plain_password=password)
    if ca_file is not None:
        from aiokafka.helpers import create_ssl_context

        kw["ssl_context"] = create_ssl_context(cafile=ca_file)
    return kw


def add_scram_users(bootstrap: str, **security) -> None:
    """bob (SCRAM-SHA-256) and carol (SCRAM-SHA-512), made by the PLAIN user admin."""
    admin = AdminClient(confluent_conf(bootstrap, "PLAIN", "admin", "admin-secret", **security))
    upserts = [UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"bob-secret"),
               UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                            b"carol-secret")]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(10)


def confluent_roundtrip(bootstrap: str, mechanism: str, user: str, password: str, topic: str,
                        **security) -> list[bytes]:
    producer = confluent_kafka.Producer(confluent_conf(bootstrap, mechanism, user, password, **security))
    producer.produce(topic, b"from-confluent")
    assert producer.flush(15) == 0
    consumer = confluent_kafka.Consumer(confluent_conf(bootstrap, mechanism, user, password, **security, **{
        "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    return got


def kafka_python_roundtrip(bootstrap: str, mechanism: str, user: str, password: str, topic: str,
                           **security) -> list[bytes]:
    import kafka

    kw = kafka_python_kwargs(bootstrap, mechanism, user, password, **security)
    producer = kafka.KafkaProducer(**kw)
    producer.send(topic, b"from-kafka-python").get(timeout=15)
    producer.close()
    consumer = kafka.KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **kw)
    got = []
    for message in consumer:
        got.append(message.value)
        break  # one record was produced: no need to wait out consumer_timeout_ms
    consumer.close()
    return got


def aiokafka_roundtrip(bootstrap: str, mechanism: str, user: str, password: str, topic: str,
                       **security) -> list[bytes]:
    import aiokafka

    async def run() -> list[bytes]:
        kw = aiokafka_kwargs(bootstrap, mechanism, user, password, **security)
        producer = aiokafka.AIOKafkaProducer(**kw)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"from-aiokafka")
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(topic, auto_offset_reset="earliest", **kw)
        await consumer.start()
        try:
            batch = await consumer.getmany(timeout_ms=10000)
            return [m.value for msgs in batch.values() for m in msgs]
        finally:
            await consumer.stop()

    return asyncio.run(run())


CLIENTS = {"confluent": (confluent_roundtrip, b"from-confluent"),
           "kafka-python": (kafka_python_roundtrip, b"from-kafka-python"),
           "aiokafka": (aiokafka_roundtrip, b"from-aiokafka")}
