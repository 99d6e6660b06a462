"""Committed offsets of consumer groups (issue 16, first part): OffsetCommit, OffsetFetch and
OffsetDelete with real clients — confluent-kafka's Consumer and AdminClient, kafka-python and
aiokafka consumers that `assign()` and commit (simple groups, generation -1) — Kafka 4.2's error
codes for refused commits (OffsetMetadataManager.validateOffsetCommit, ShareGroup.validateOffset*),
and durability across SIGKILL (the records on `__consumer_offsets` are replayed)."""

from __future__ import annotations

import asyncio

from confluent_kafka import (OFFSET_BEGINNING, Consumer, ConsumerGroupTopicPartitions, Producer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient
from kio.schema.offset_commit.v8 import request as oc8
from kio.schema.offset_commit.v9 import request as oc9
from kio.schema.offset_delete.v0 import request as od0
from kio.schema.offset_fetch.v9 import request as of9
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64

from quafka.client import Admin
from support import RawClient, wait_until

TOPIC = "orders"


def _produce(bootstrap: str, count: int, topic: str = TOPIC) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, f"r{i}".encode(), partition=i % 2)
    assert producer.flush(10) == 0


def _topic(bootstrap: str, partitions: int = 2, topic: str = TOPIC) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({topic: (partitions, 1)})


def _committed(bootstrap: str, group: str, partitions=(0, 1)) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(TOPIC, p) for p in partitions], timeout=10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def test_confluent_consumer_commits_and_a_new_consumer_resumes(broker):
    bootstrap = broker.bootstrap_servers
    _topic(bootstrap)
    _produce(bootstrap, 10)
    first = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing", "enable.auto.commit": False})
    first.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING), TopicPartition(TOPIC, 1, OFFSET_BEGINNING)])
    seen = []
    while len(seen) < 6:
        msg = first.poll(5)
        assert msg is not None and msg.error() is None
        seen.append((msg.partition(), msg.offset()))
        if len(seen) == 6:
            result = first.commit(asynchronous=False)  # the positions of both partitions
            assert all(tp.error is None for tp in result), result
    first.close()
    positions = {p: max(o for q, o in seen if q == p) + 1 for p in (0, 1) if any(q == p for q, _ in seen)}
    assert _committed(bootstrap, "billing") == {0: positions.get(0, -1001), 1: positions.get(1, -1001)}

    second = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing", "enable.auto.commit": False,
                       "auto.offset.reset": "earliest"})
    second.assign([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])  # from the committed offsets
    rest = []
    while len(rest) < 10 - len(seen):
        msg = second.poll(5)
        assert msg is not None and msg.error() is None
        rest.append((msg.partition(), msg.offset()))
    second.close()
    assert sorted(seen + rest) == sorted((i % 2, i // 2) for i in range(10))  # every record once


def test_admin_client_lists_alters_deletes_offsets_and_groups(broker):
    bootstrap = broker.bootstrap_servers
    _topic(bootstrap)
    _produce(bootstrap, 10)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        "audit", [TopicPartition(TOPIC, 0, 3), TopicPartition(TOPIC, 1, 4)])])["audit"].result()
    assert all(tp.error is None for tp in altered.topic_partitions)
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("audit")])["audit"].result()
    assert {(tp.partition, tp.offset) for tp in listed.topic_partitions} == {(0, 3), (1, 4)}

    groups = admin.list_consumer_groups().result(10)
    [audit] = [g for g in groups.valid if g.group_id == "audit"]
    assert audit.state.name == "EMPTY" and audit.type.name == "CLASSIC" and audit.is_simple_consumer_group

    with RawClient(bootstrap) as raw:  # OffsetDelete (confluent-kafka's Python AdminClient has no call for it)
        deleted = raw.request(od0.OffsetDeleteRequest(group_id=GroupId("audit"), topics=(
            od0.OffsetDeleteRequestTopic(name=TopicName(TOPIC), partitions=(
                od0.OffsetDeleteRequestPartition(partition_index=i32(0)),)),)))
    assert deleted.error_code.name == "none"
    assert [p.error_code.name for p in deleted.topics[0].partitions] == ["none"]
    assert _committed(bootstrap, "audit") == {0: -1001, 1: 4}

    admin.delete_consumer_groups(["audit"])["audit"].result()
    assert _committed(bootstrap, "audit") == {0: -1001, 1: -1001}
    assert "audit" not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}


def test_kafka_python_and_aiokafka_commit_and_read_back(broker):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition
    from kafka.structs import OffsetAndMetadata

    bootstrap = broker.bootstrap_servers
    _topic(bootstrap)
    _produce(bootstrap, 4)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id="kp", enable_auto_commit=False)
    try:
        tp = KTopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.commit({tp: OffsetAndMetadata(2, "kafka-python", -1)})
        assert consumer.committed(tp) == 2
    finally:
        consumer.close()

    async def aio():
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import OffsetAndMetadata as AioOffset
        from aiokafka.structs import TopicPartition as AioTopicPartition

        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="kp", enable_auto_commit=False)
        await c.start()
        try:
            tp1 = AioTopicPartition(TOPIC, 1)
            c.assign([AioTopicPartition(TOPIC, 0), tp1])
            assert await c.committed(AioTopicPartition(TOPIC, 0)) == 2  # kafka-python's commit
            await c.commit({tp1: AioOffset(1, "aiokafka")})
            return await c.committed(tp1)
        finally:
            await c.stop()

    assert asyncio.run(aio()) == 1
    assert _committed(bootstrap, "kp") == {0: 2, 1: 1}


def _commit_v9(raw: RawClient, group: str, generation: int, member_id: str, partition: int = 0,
               metadata: str = "", version=oc9):
    req = version.OffsetCommitRequest(
        group_id=GroupId(group), generation_id_or_member_epoch=i32(generation), member_id=member_id,
        group_instance_id=None, topics=(version.OffsetCommitRequestTopic(name=TopicName(TOPIC), partitions=(
            version.OffsetCommitRequestPartition(partition_index=i32(partition), committed_offset=i64(1),
                                                 committed_leader_epoch=i32(-1), committed_metadata=metadata),)),))
    [topic] = raw.request(req).topics
    return [p.error_code for p in topic.partitions]


def test_refused_commits_use_kafkas_error_codes(broker):
    bootstrap = broker.bootstrap_servers
    _topic(bootstrap)
    with RawClient(bootstrap) as raw:
        # an unknown group with a generation: GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before
        assert [e.name for e in _commit_v9(raw, "nobody", 3, "m")] == ["group_id_not_found"]
        assert [e.name for e in _commit_v9(raw, "nobody", 3, "m", version=oc8)] == ["illegal_generation"]
        assert [e.name for e in _commit_v9(raw, "", -1, "")] == ["invalid_group_id"]
        assert [e.name for e in _commit_v9(raw, "g", -1, "", partition=7)] == ["unknown_topic_or_partition"]
        assert [e.name for e in _commit_v9(raw, "g", -1, "", metadata="x" * 4097)] == ["offset_metadata_too_large"]
        assert [e.name for e in _commit_v9(raw, "g", -1, "", metadata="x" * 4096)] == ["none"]


def test_a_share_groups_id_has_no_consumer_offsets(broker):
    from quafka.client import ShareConsumer

    bootstrap = broker.bootstrap_servers
    _topic(bootstrap)
    with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "workers"}) as share:
        share.subscribe([TOPIC])
        share.poll(0.5)  # joins: the share group exists
        with RawClient(bootstrap) as raw:
            assert [e.name for e in _commit_v9(raw, "workers", -1, "")] == ["group_id_not_found"]
            fetched = raw.request(of9.OffsetFetchRequest(groups=(of9.OffsetFetchRequestGroup(
                group_id=GroupId("workers"), member_id=None, member_epoch=i32(-1), topics=None),), require_stable=False))
            assert fetched.groups[0].error_code.name == "none" and fetched.groups[0].topics == ()
            deleted = raw.request(od0.OffsetDeleteRequest(group_id=GroupId("workers"), topics=(
                od0.OffsetDeleteRequestTopic(name=TopicName(TOPIC), partitions=(
                    od0.OffsetDeleteRequestPartition(partition_index=i32(0)),)),)))
            assert deleted.error_code.name == "group_id_not_found"


def test_committed_offsets_survive_sigkill(tmp_path, broker_process):
    data = str(tmp_path / "data")
    b = broker_process(data)
    _topic(b.bootstrap_servers)
    consumer = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "durable"})
    consumer.commit(offsets=[TopicPartition(TOPIC, 0, 7, "first"), TopicPartition(TOPIC, 1, 9)], asynchronous=False)
    consumer.commit(offsets=[TopicPartition(TOPIC, 0, 8, "second")], asynchronous=False)
    consumer.close()
    b.kill()
    b2 = broker_process(data, port=b.port)
    consumer = Consumer({"bootstrap.servers": b2.bootstrap_servers, "group.id": "durable"})
    try:
        found = wait_until(lambda: consumer.committed([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)], timeout=10),
                           20, message="committed offsets after the restart")
    finally:
        consumer.close()
    assert [(tp.partition, tp.offset, tp.metadata) for tp in found] == [(0, 8, "second"), (1, 9, None)]
