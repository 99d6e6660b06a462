"""Online migration between classic and consumer groups (`group.consumer.migration.policy`), as
Kafka 4.x's GroupMetadataManager does it (convertToConsumerGroup / ConsumerGroup.fromClassicGroup,
classicGroup{Join,Sync,Heartbeat,Leave}ToConsumerGroup, convertToClassicGroup /
ClassicGroup.fromConsumerGroup), with real clients over loopback:

- a confluent-kafka classic member, then a KIP-848 member joining the same group: the group becomes
  a consumer group in place, the classic member keeps working through JoinGroup / SyncGroup /
  Heartbeat, every partition is held by exactly one member, the committed offsets carry over, and
  when the KIP-848 member leaves the group goes back to classic with the classic member holding
  everything; kafka-python as the classic member too;
- each policy value's acceptance or refusal of the upgrade and of the downgrade;
- a SIGKILL of the broker replays the converted group (and the downgraded one) from its records."""

from __future__ import annotations

import datetime
import threading
import uuid

import pytest
from confluent_kafka import Consumer, Producer

from kio.schema.consumer_group_describe.v1 import request as cgd1
from kio.schema.consumer_group_heartbeat.v1 import request as cgh1
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i32Timedelta

from quafka.client import Admin
from support import RawClient, wait_until
from support.group_member import GroupMember, drain

TOPIC = "migrate"
PARTITIONS = 6
FAST = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 500,
        "group.consumer.min.session.timeout.ms": 1000, "group.consumer.session.timeout.ms": 3000,
        "group.consumer.min.heartbeat.interval.ms": 100, "group.consumer.heartbeat.interval.ms": 200}

pytestmark = pytest.mark.timeout(120)


def _setup(bootstrap: str, records: int) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({TOPIC: (PARTITIONS, 1)})
    _produce(bootstrap, 0, records)


def _produce(bootstrap: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + count):
        producer.produce(TOPIC, str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(10) == 0


def _classic(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "classic",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 100})


def _kip848(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})


def _kind(bootstrap: str, group: str) -> list[tuple[str, str]]:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        return [(g.type, g.state) for g in admin.list_groups() if g.group_id == group]


def _describe(bootstrap: str, group: str):
    with RawClient(bootstrap) as raw:
        return raw.request(cgd1.ConsumerGroupDescribeRequest(group_ids=(GroupId(group),),
                                                             include_authorized_operations=False)).groups[0]


def _partitions(member: GroupMember) -> set[int]:
    return {tp.partition for tp in member.assignment()}


def _split(members: list[GroupMember]) -> bool:
    """Every partition held by exactly one member, each member holding some."""
    held = [_partitions(m) for m in members]
    return all(held) and sum(map(len, held)) == PARTITIONS and set().union(*held) == set(range(PARTITIONS))


def _heartbeat(raw: RawClient, group: str, member_id: str, epoch: int, join: bool = False):
    return raw.request(cgh1.ConsumerGroupHeartbeatRequest(
        group_id=GroupId(group), member_id=member_id, member_epoch=i32(epoch),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=5000 if join else -1)),
        subscribed_topic_names=(TopicName(TOPIC),) if join else None, topic_partitions=() if join else None))


# ----------------------------------------------------------------------------- upgrade, mixed, downgrade

def test_a_kip848_member_converts_a_classic_group_and_its_leaving_converts_it_back(make_broker):
    broker = make_broker(config=FAST)
    bootstrap = broker.bootstrap_servers
    _setup(bootstrap, 30)
    group = "migrate-confluent"
    seen: list[int] = []
    classic = GroupMember(_classic(bootstrap, group), seen, TOPIC)
    modern = None
    try:
        drain([classic], seen, 30)
        wait_until(lambda: _kind(bootstrap, group) == [("classic", "Stable")], 10, message="a classic group")
        _produce(bootstrap, 30, 30)
        modern = GroupMember(_kip848(bootstrap, group), seen, TOPIC)
        wait_until(lambda: _split([classic, modern]), 20, message="the partitions split between the two members")
        assert _kind(bootstrap, group)[0][0] == "consumer"
        described = _describe(bootstrap, group)
        assert sorted(int(m.member_type) for m in described.members) == [0, 1]  # one classic, one consumer
        drain([classic, modern], seen, 60)
        modern.close()
        modern = None
        wait_until(lambda: _kind(bootstrap, group) and _kind(bootstrap, group)[0][0] == "classic"
                   and _partitions(classic) == set(range(PARTITIONS)), 20,
                   message="back to a classic group, its member holding every partition")
        _produce(bootstrap, 60, 30)
        drain([classic], seen, 90)
    finally:
        if modern is not None:
            modern.close()
        classic.close()
    if not classic.refusals:
        assert sorted(seen) == list(range(90))  # committed offsets carried over both conversions
    assert set(seen) == set(range(90))
