"""Third-party clients against quafka's StandardAuthorizer (issue 29, acceptance 2): confluent-kafka's
Producer, Consumer (a classic group) and ShareConsumer (KIP-932's rows: ShareGroupHeartbeat,
ShareFetch, ShareAcknowledge need READ on the GROUP and READ on the TOPIC), kafka-python's producer
and consumer. Each is refused with the error as that client surfaces it
(TOPIC_/GROUP_AUTHORIZATION_FAILED), then served once the administrator grants the permission.

These clients cannot bind a source address, so they connect from 127.0.0.1 — the clients' host of
support/acl_fixtures.py — and the administrator (from 127.0.0.3) grants User:ANONYMOUS at 127.0.0.1
exactly what each step needs, with CreateAcls over the wire.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, ShareConsumer

from support.acl_fixtures import AUTHORIZER_CONFIG, Acl, AclEnv, kreq

from quafka.broker.core.acl_types import AclOperation as Op
from quafka.broker.core.acl_types import ResourceType as Rt
from quafka.broker.server.embedded import EmbeddedBroker
from quafka.protocol.errors import ErrorCode as E
from quafka.protocol.record_batch import build_batch

CONFIG = {**AUTHORIZER_CONFIG, "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1,
          "share.coordinator.state.topic.num.partitions": 1}
QUIET = {"log_level": 3}
DEADLINE_S = 15


class Env:
    def __init__(self, broker: EmbeddedBroker, acl: AclEnv) -> None:
        self.broker, self.acl = broker, acl
        self.bootstrap = broker.bootstrap_servers

    def topic(self, name: str, records: int = 0) -> None:
        """A topic with `records` records (produced by the administrator)."""
        state = self.broker.server.state
        self.broker.call(lambda: state.create_topic(name, 1, 1, {}))
        if records:
            resp = self.acl.admin.request(kreq(0, 9, acks=-1, timeout=10000, topic_data=[{
                "name": name, "partition_data": [
                    {"index": 0, "records": build_batch([(None, b"r%d" % i) for i in range(records)])}]}]))
            assert resp.responses[0].partition_responses[0].error_code == E.none

    def group_config(self, group: str, key: str, value: str) -> None:
        """A group config, set by the administrator (IncrementalAlterConfigs)."""
        resp = self.acl.admin.request(kreq(44, 1, validate_only=False, resources=[{
            "resource_type": 32, "resource_name": group,
            "configs": [{"name": key, "config_operation": 0, "value": value}]}]))
        assert resp.responses[0].error_code == E.none, resp

    def committed(self, group: str, topic: str) -> int:
        """The group's committed offset of partition 0 (OffsetFetch by the administrator)."""
        resp = self.acl.admin.request(kreq(9, 8, groups=[{"group_id": group, "topics": [
            {"name": topic, "partition_indexes": [0]}]}]))
        return resp.groups[0].topics[0].partitions[0].committed_offset

    def log_end(self, topic: str) -> int:
        return self.broker.server.state.topics[topic].partitions[0].log.log_end_offset


@pytest.fixture(scope="module")
def module_env():
    with EmbeddedBroker(config=CONFIG) as broker:
        acl = AclEnv(broker)
        yield Env(broker, acl)
        acl.close()


@pytest.fixture
def env(module_env):
    module_env.acl.deny_all()
    return module_env


def code_of(error) -> int:
    return (error.args[0] if isinstance(error, KafkaException) else error).code()


# ----------------------------------------------------------------------------- confluent-kafka

def confluent_produce(env: Env, topic: str, idempotent: bool = False):
    """The delivery report's error (None when delivered) of one record from a fresh Producer."""
    reports = []
    producer = Producer({"bootstrap.servers": env.bootstrap, "message.timeout.ms": DEADLINE_S * 1000,
                         "enable.idempotence": idempotent, **QUIET})
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: reports.append(err))
    assert producer.flush(DEADLINE_S) == 0
    return reports[0]


def test_confluent_producer_refused_then_allowed_after_write_is_granted(env):
    env.topic("cf-produce")
    assert code_of(confluent_produce(env, "cf-produce")) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert env.log_end("cf-produce") == 0
    env.acl.grant(Op.WRITE, Rt.TOPIC, "cf-produce")  # WRITE implies the DESCRIBE its Metadata needs
    assert confluent_produce(env, "cf-produce") is None
    assert env.log_end("cf-produce") == 1


def confluent_consume(env: Env, topic: str, group: str, count: int):
    """(error, values): a fresh group consumer's first error event, or the `count` values it read
    and committed."""
    consumer = Consumer({"bootstrap.servers": env.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **QUIET})
    values = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                return msg.error(), values
            values.append(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return None, values


def test_confluent_consumer_group_refused_then_allowed_step_by_step(env):
    env.topic("cf-consume", 3)
    error, _ = confluent_consume(env, "cf-consume", "cf-consume-g", 3)
    assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED  # FindCoordinator: DESCRIBE on the group
    env.acl.grant(Op.READ, Rt.GROUP, "cf-consume-g")
    error, _ = confluent_consume(env, "cf-consume", "cf-consume-g", 3)
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED  # Metadata of the subscribed topic
    env.acl.grant(Op.READ, Rt.TOPIC, "cf-consume")
    assert confluent_consume(env, "cf-consume", "cf-consume-g", 3) == (None, [b"r0", b"r1", b"r2"])
    assert env.committed("cf-consume-g", "cf-consume") == 3  # OffsetCommit allowed too


def share_consumer(env: Env, group: str, topic: str) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": env.bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit", **QUIET})
    consumer.subscribe([topic])
    return consumer


def share_poll(consumer: ShareConsumer, count: int):
    """(error, messages): the first error poll raises or returns, or the first `count` messages."""
    msgs = []
    deadline = time.monotonic() + DEADLINE_S
    while len(msgs) < count and time.monotonic() < deadline:
        try:
            got = consumer.poll(0.2)
        except KafkaException as exc:
            return exc.args[0], msgs
        for msg in got:
            if msg.error() is not None:
                return msg.error(), msgs
            msgs.append(msg)
    return None, msgs


def share_error(env: Env, group: str, topic: str):
    consumer = share_consumer(env, group, topic)
    try:
        return share_poll(consumer, 1)[0]
    finally:
        consumer.close()


def test_confluent_share_consumer_kip_932_rows(env):
    """KIP-932's table with confluent-kafka's ShareConsumer: ShareGroupHeartbeat needs READ on the
    GROUP and DESCRIBE on the topic subscribed; ShareFetch and ShareAcknowledge READ on the GROUP and
    READ on the TOPIC."""
    env.topic("cf-share", 3)
    env.group_config("cf-share-g", "share.auto.offset.reset", "earliest")
    assert share_error(env, "cf-share-g", "cf-share").code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    env.acl.grant(Op.DESCRIBE, Rt.GROUP, "cf-share-g")  # FindCoordinator passes, ShareGroupHeartbeat not
    assert share_error(env, "cf-share-g", "cf-share").code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    env.acl.grant(Op.READ, Rt.GROUP, "cf-share-g")
    assert share_error(env, "cf-share-g", "cf-share").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    env.acl.grant(Op.DESCRIBE, Rt.TOPIC, "cf-share")  # the heartbeat passes, ShareFetch not
    assert share_error(env, "cf-share-g", "cf-share").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    env.acl.grant(Op.READ, Rt.TOPIC, "cf-share")
    consumer = share_consumer(env, "cf-share-g", "cf-share")
    try:
        error, msgs = share_poll(consumer, 3)
        assert error is None and sorted(m.value() for m in msgs) == [b"r0", b"r1", b"r2"]
        assert {m.delivery_count() for m in msgs} == {1}
        # READ on the topic taken away between the fetch and the acknowledgement: ShareAcknowledge refused
        env.acl.delete(Acl(Op.READ, Rt.TOPIC, "cf-share").filter())
        for m in msgs:
            consumer.acknowledge(m)
        [(tp, error)] = consumer.commit_sync().items()
        assert tp.topic == "cf-share" and code_of(error) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()  # leaves the group: the unacknowledged records are released
    env.acl.grant(Op.READ, Rt.TOPIC, "cf-share")
    consumer = share_consumer(env, "cf-share-g", "cf-share")
    try:
        error, msgs = share_poll(consumer, 3)
        assert error is None and sorted(m.value() for m in msgs) == [b"r0", b"r1", b"r2"]
        assert {m.delivery_count() for m in msgs} == {2}  # not acknowledged the first time
        for m in msgs:
            consumer.acknowledge(m)
        assert list(consumer.commit_sync().values()) == [None]
    finally:
        consumer.close()


# ----------------------------------------------------------------------------- kafka-python

def test_kafka_python_producer_refused_then_allowed(env):
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    env.topic("kp-produce")
    producer = KafkaProducer(bootstrap_servers=env.bootstrap, max_block_ms=DEADLINE_S * 1000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("kp-produce", b"v").get(DEADLINE_S)
    finally:
        producer.close(timeout=5)
    env.acl.grant(Op.WRITE, Rt.TOPIC, "kp-produce")
    producer = KafkaProducer(bootstrap_servers=env.bootstrap, max_block_ms=DEADLINE_S * 1000)
    try:
        assert producer.send("kp-produce", b"v").get(DEADLINE_S).offset == 0
    finally:
        producer.close(timeout=5)


def kafka_python_consume(env: Env, topic: str, group: str, count: int) -> list:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=env.bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, fetch_max_wait_ms=100)
    values = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(values) < count and time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=200).values():
                values += [m.value for m in msgs]
        consumer.commit()
    finally:
        consumer.close()
    return values


def test_kafka_python_consumer_group_refused_then_allowed(env):
    from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

    env.topic("kp-consume", 2)
    with pytest.raises(GroupAuthorizationFailedError):
        kafka_python_consume(env, "kp-consume", "kp-consume-g", 2)
    env.acl.grant(Op.READ, Rt.GROUP, "kp-consume-g")
    # kafka-python only logs a subscribed topic its Metadata is refused; with DESCRIBE (metadata, the
    # committed offsets, ListOffsets) but not READ, its Fetch is refused and poll raises
    env.acl.grant(Op.DESCRIBE, Rt.TOPIC, "kp-consume")
    with pytest.raises(TopicAuthorizationFailedError):
        kafka_python_consume(env, "kp-consume", "kp-consume-g", 2)
    env.acl.grant(Op.READ, Rt.TOPIC, "kp-consume")
    assert kafka_python_consume(env, "kp-consume", "kp-consume-g", 2) == [b"r0", b"r1"]
    assert env.committed("kp-consume-g", "kp-consume") == 2


def test_confluent_idempotent_producer_gets_its_producer_id_from_write_on_the_topic(env):
    """InitProducerId without IDEMPOTENT_WRITE on the cluster: WRITE on any topic suffices (Kafka's
    Authorizer.authorizeByResourceType)."""
    env.topic("cf-idem")
    assert code_of(confluent_produce(env, "cf-idem")) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    env.acl.grant(Op.WRITE, Rt.TOPIC, "cf-idem")
    assert confluent_produce(env, "cf-idem", idempotent=True) is None
    assert env.log_end("cf-idem") == 1
