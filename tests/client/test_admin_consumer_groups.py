"""Admin's consumer-group offsets (OffsetFetch, OffsetCommit, OffsetDelete) against an embedded
broker, cross-checked with confluent-kafka's Consumer: what one commits the other reads."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from quafka.client import Admin, AsyncAdmin, KafkaException
from quafka.client._transport import BrokerConnection
from quafka.protocol.errors import ErrorCode

TOPIC = "orders"


@pytest.fixture
def admin(broker):
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as a:
        a.create_topics({TOPIC: (2, 1)})
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        for i in range(10):
            producer.produce(TOPIC, f"r{i}".encode(), partition=i % 2, timestamp=1_700_000_000_000 + i * 1000)
        assert producer.flush(10) == 0
        yield a


def _commit(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def _committed(bootstrap: str, group: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return {tp.partition: tp.offset for tp in consumer.committed([TopicPartition(TOPIC, p) for p in (0, 1)],
                                                                      timeout=10)}
    finally:
        consumer.close()


def test_list_reads_what_a_consumer_committed(broker, admin):
    _commit(broker.bootstrap_servers, "billing", {0: 3, 1: 4})
    assert admin.list_consumer_group_offsets("billing") == {(TOPIC, 0): (3, ""), (TOPIC, 1): (4, "")}
    assert admin.list_consumer_group_offsets("billing", [(TOPIC, 1)]) == {(TOPIC, 1): (4, "")}
    assert admin.list_consumer_group_offsets("nobody") == {}
    assert admin.list_consumer_group_offsets("nobody", [(TOPIC, 0)]) == {}  # no offset: left out
    [listed] = [g for g in admin.list_groups(types=["classic", "consumer"]) if g.group_id == "billing"]
    assert (listed.type, listed.state) == ("classic", "Empty")


def test_alter_with_offsets_and_specs(broker, admin):
    admin.alter_consumer_group_offsets("audit", {(TOPIC, 0): 2, (TOPIC, 1): (1, "why")})
    assert _committed(broker.bootstrap_servers, "audit") == {0: 2, 1: 1}
    assert admin.list_consumer_group_offsets("audit") == {(TOPIC, 0): (2, ""), (TOPIC, 1): (1, "why")}
    admin.alter_consumer_group_offsets("audit", {(TOPIC, 0): "latest", (TOPIC, 1): "earliest"})
    assert _committed(broker.bootstrap_servers, "audit") == {0: 5, 1: 0}
    # partition 1 holds records i = 1, 3, 5, 7, 9 at 1_700_000_000_000 + i s: offset 2 is i = 5
    admin.alter_consumer_group_offsets("audit", {(TOPIC, 1): ("timestamp", 1_700_000_004_500),
                                                 (TOPIC, 0): ("timestamp", 1_800_000_000_000)})
    assert _committed(broker.bootstrap_servers, "audit") == {0: 5, 1: 2}  # past every record: the log end


def test_alter_errors_name_the_partition(admin):
    with pytest.raises(KafkaException) as info:
        admin.alter_consumer_group_offsets("audit", {(TOPIC, 7): 1})
    assert info.value.code == ErrorCode.unknown_topic_or_partition or "orders-7" in info.value.message
    with pytest.raises(KafkaException) as info:
        admin.alter_consumer_group_offsets("audit", {("missing", 0): 1})
    assert "missing-0" in info.value.message
    with pytest.raises(KafkaException) as info:
        admin.alter_consumer_group_offsets("audit", {(TOPIC, 0): "soon"})
    assert "orders-0" in info.value.message and "'soon'" in info.value.message


def test_delete_offsets(broker, admin):
    _commit(broker.bootstrap_servers, "audit", {0: 3, 1: 4})
    result = admin.delete_consumer_group_offsets("audit", [(TOPIC, 0), ("missing", 0)])
    assert result[(TOPIC, 0)] is None
    assert result[("missing", 0)].code == ErrorCode.unknown_topic_or_partition
    assert _committed(broker.bootstrap_servers, "audit") == {0: -1001, 1: 4}
    assert admin.list_consumer_group_offsets("audit") == {(TOPIC, 1): (4, "")}
    with pytest.raises(KafkaException) as info:
        admin.delete_consumer_group_offsets("nobody", [(TOPIC, 0)])
    assert info.value.code == ErrorCode.group_id_not_found
    assert admin.delete_groups(["audit"]) == {"audit": None}
    assert admin.list_consumer_group_offsets("audit") == {}


@pytest.mark.parametrize(("commit", "fetch"), [(10, 10), (9, 9), (8, 8), (2, 7), (2, 1)])
def test_every_version_round_trips(broker, monkeypatch, commit, fetch):
    """Topics by id (v10) and by name, OffsetFetch's groups array (v8+) and its single group (v1-7)."""
    caps = {8: commit, 9: fetch}
    original = BrokerConnection.version_for

    def capped(self, api_key, min_version=None, max_version=None):
        if api_key in caps:
            max_version = caps[api_key]
        return original(self, api_key, min_version, max_version)

    monkeypatch.setattr(BrokerConnection, "version_for", capped)

    async def body():
        async with AsyncAdmin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
            await admin.create_topics({TOPIC: (2, 1)})
            await admin.alter_consumer_group_offsets("v", {(TOPIC, 0): 0, (TOPIC, 1): (0, "m")})
            every = await admin.list_consumer_group_offsets("v") if fetch >= 2 else None  # v1: no "every topic"
            some = await admin.list_consumer_group_offsets("v", [(TOPIC, 1)])
            return every, some

    every, some = asyncio.run(body())
    assert every == (None if fetch < 2 else {(TOPIC, 0): (0, ""), (TOPIC, 1): (0, "m")})
    assert some == {(TOPIC, 1): (0, "m")}
