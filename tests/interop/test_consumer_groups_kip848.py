"""KIP-848 consumer groups (`group.protocol=consumer`: ConsumerGroupHeartbeat, ConsumerGroupDescribe)
with confluent-kafka / librdkafka over loopback, and raw requests where a client would hide the
broker's answer. Three members on a 6-partition topic get two partitions each, a fourth joins and one
leaves, every record is consumed once; the admin APIs list and describe the group; the member epoch
is checked on heartbeats and on offset commits; an empty classic group converts to a consumer group
and keeps its offsets (online migration of groups with members: test_group_migration.py); groups and
offsets survive a SIGKILL of the broker; a member that stops heartbeating is removed after its session
timeout."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from kio.schema.consumer_group_describe.v1 import request as cgd1
from kio.schema.consumer_group_heartbeat.v1 import request as cgh1
from kio.schema.offset_commit.v8 import request as oc8
from kio.schema.offset_commit.v9 import request as oc9
from kio.schema.share_group_heartbeat.v1 import request as sgh1
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i32Timedelta, i64

from quafka.client import Admin
from support import RawClient, wait_until
from support.group_member import GroupMember, drain

TOPIC = "jobs848"
# fast sessions: a member is removed 3 s after its last heartbeat, heartbeats every 300 ms
FAST = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 500,
        "group.consumer.min.session.timeout.ms": 1000, "group.consumer.session.timeout.ms": 3000,
        "group.consumer.min.heartbeat.interval.ms": 100, "group.consumer.heartbeat.interval.ms": 300}
SESSION_S = 3.0

pytestmark = pytest.mark.timeout(240)


def _topic(bootstrap: str, partitions: int = 6) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({TOPIC: (partitions, 1)})


def _produce(bootstrap: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + count):
        producer.produce(TOPIC, str(i).encode(), partition=i % 6)
    assert producer.flush(10) == 0


def _consumer(bootstrap: str, group: str, **extra) -> Consumer:
    """A KIP-848 member (session timeout and heartbeat interval are the broker's)."""
    config = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
              "auto.offset.reset": "earliest", "enable.auto.commit": False}
    config.update(extra)
    return Consumer(config)


def _classic_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 200})


class Member(GroupMember):
    """A confluent-kafka member of the group on TOPIC (tests/support/group_member.py)."""

    def __init__(self, consumer: Consumer, seen: list[int]) -> None:
        super().__init__(consumer, seen, TOPIC)


_drain = drain


# ----------------------------------------------------------------------------- raw requests

def _ms(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def _heartbeat(raw: RawClient, group: str, member_id: str, epoch: int, *, owned=None, join: bool = False,
               rebalance_timeout_ms: int = 60000):
    """ConsumerGroupHeartbeat v1; `owned` is {topic_id: [partitions]} (None: unchanged)."""
    topic_partitions = None if owned is None else tuple(
        cgh1.TopicPartitions(topic_id=t, partitions=tuple(i32(p) for p in ps)) for t, ps in owned.items())
    return raw.request(cgh1.ConsumerGroupHeartbeatRequest(
        group_id=GroupId(group), member_id=member_id, member_epoch=i32(epoch),
        rebalance_timeout=_ms(rebalance_timeout_ms if join else -1),
        subscribed_topic_names=(TopicName(TOPIC),) if join else None,
        topic_partitions=() if join else topic_partitions))


def _assigned(resp) -> dict:
    if resp.assignment is None:
        return {}
    return {tp.topic_id: sorted(int(p) for p in tp.partitions) for tp in resp.assignment.topic_partitions}


def _commit_raw(raw: RawClient, schema, group: str, member_id: str, epoch: int, offset: int = 1):
    resp = raw.request(schema.OffsetCommitRequest(
        group_id=GroupId(group), generation_id_or_member_epoch=i32(epoch), member_id=member_id,
        topics=(schema.OffsetCommitRequestTopic(name=TopicName(TOPIC), partitions=(
            schema.OffsetCommitRequestPartition(partition_index=i32(0), committed_offset=i64(offset),
                                                committed_metadata=None),)),)))
    return resp.topics[0].partitions[0].error_code.name


# ----------------------------------------------------------------------------- 1. spread and rebalances

@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_group_spreads_partitions_and_consumes_every_record_once_across_rebalances(make_broker, assignor):
    broker = make_broker(config=FAST)
    bootstrap = broker.bootstrap_servers
    _topic(bootstrap)
    group = f"g848-{assignor}"
    extra = {"group.remote.assignor": assignor}
    seen: list[int] = []
    members = [Member(_consumer(bootstrap, group, **extra), seen) for _ in range(3)]
    left = None
    try:
        _produce(bootstrap, 0, 60)
        _drain(members, seen, 60)

        def assigned() -> list[int]:
            return sorted(len(m.assignment()) for m in members)

        wait_until(lambda: assigned() == [2, 2, 2], 20, message="two partitions each")
        [described] = broker.call(lambda: broker.server.consumer_groups.describe([group]))
        assert described.assignor_name == assignor
        members.append(Member(_consumer(bootstrap, group, **extra), seen))
        _produce(bootstrap, 60, 60)
        _drain(members, seen, 120)
        wait_until(lambda: assigned() == [1, 1, 2, 2], 20, message="the fourth member assigned")
        left = members.pop(0)
        left.close()
        _produce(bootstrap, 120, 60)
        _drain(members, seen, 180)
        wait_until(lambda: assigned() == [2, 2, 2], 20, message="the partitions spread over the three left")
    finally:
        for m in members:
            m.close()
    everyone = members + ([left] if left is not None else [])
    refusals = [r for m in everyone for r in m.refusals]
    assert set(seen) == set(range(180))  # every record consumed
    if not refusals:  # every commit went through at its first attempt: nothing twice
        assert sorted(seen) == list(range(180))


# ----------------------------------------------------------------------------- 2. admin

def test_admin_lists_and_describes_a_consumer_group(make_broker):
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType

    broker = make_broker(config=FAST)
    bootstrap = broker.bootstrap_servers
    _topic(bootstrap)
    seen: list[int] = []
    members = [Member(_consumer(bootstrap, "admin848"), seen) for _ in range(2)]
    try:
        wait_until(lambda: sorted(len(m.assignment()) for m in members) == [3, 3], 20, message="three partitions each")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        listed = admin.list_consumer_groups(request_timeout=10).result(timeout=15)
        assert not listed.errors, listed.errors
        by_id = {g.group_id: g for g in listed.valid}
        assert "admin848" in by_id, by_id
        assert by_id["admin848"].type == ConsumerGroupType.CONSUMER
        assert by_id["admin848"].state == ConsumerGroupState.STABLE
        only_consumer = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}, request_timeout=10)
        assert [g.group_id for g in only_consumer.result(timeout=15).valid] == ["admin848"]

        with Admin({"bootstrap.servers": bootstrap}) as qadmin:
            assert ("admin848", "consumer", "Stable") in [tuple(g) for g in qadmin.list_groups()]

        description = admin.describe_consumer_groups(["admin848"], request_timeout=10)["admin848"].result(timeout=15)
        assert description.type == ConsumerGroupType.CONSUMER
        assert description.state == ConsumerGroupState.STABLE
        assert len(description.members) == 2
        parts = sorted((tp.topic, tp.partition) for m in description.members for tp in m.assignment.topic_partitions)
        assert parts == [(TOPIC, p) for p in range(6)]
        assert sorted(len(m.assignment.topic_partitions) for m in description.members) == [3, 3]
        assert description.partition_assignor == "uniform"  # the broker's first group.consumer.assignors
        for m in description.members:  # Stable: every member has reached its target assignment
            assert sorted(tp.partition for tp in m.target_assignment.topic_partitions) == \
                sorted(tp.partition for tp in m.assignment.topic_partitions)
        del admin
    finally:
        for m in members:
            m.close()


# ----------------------------------------------------------------------------- 3. raw protocol

def test_member_epochs_on_heartbeats_and_offset_commits(make_broker):
    broker = make_broker(config=FAST)
    bootstrap = broker.bootstrap_servers
    _topic(bootstrap)
    group = "raw848"
    member_id = str(uuid.uuid4())
    with RawClient(bootstrap) as raw:
        joined = _heartbeat(raw, group, member_id, 0, join=True)
        assert joined.error_code.name == "none", joined
        assert joined.member_id == member_id
        assert joined.member_epoch >= 1
        assert joined.heartbeat_interval == datetime.timedelta(milliseconds=300)
        [(topic_id, partitions)] = _assigned(joined).items()
        assert partitions == list(range(6))
        epoch = int(joined.member_epoch)

        fenced = _heartbeat(raw, group, member_id, epoch + 5, owned={topic_id: partitions})
        assert fenced.error_code.name == "fenced_member_epoch", fenced
        # the refused heartbeat changed nothing: the member goes on with its epoch
        again = _heartbeat(raw, group, member_id, epoch, owned={topic_id: partitions})
        assert again.error_code.name == "none" and again.member_epoch == epoch, again

        assert _commit_raw(raw, oc9, group, member_id, epoch) == "none"
        assert _commit_raw(raw, oc9, group, member_id, epoch - 1) == "stale_member_epoch"
        assert _commit_raw(raw, oc9, group, "not-a-member", epoch) == "unknown_member_id"
        assert _commit_raw(raw, oc8, group, member_id, epoch) == "unsupported_version"

        # a share group's id is not a consumer group's
        share = raw.request(sgh1.ShareGroupHeartbeatRequest(
            group_id=GroupId("share848"), member_id=str(uuid.uuid4()), member_epoch=i32(0), rack_id=None,
            subscribed_topic_names=(TopicName(TOPIC),)))
        assert share.error_code.name == "none", share
        described = raw.request(cgd1.ConsumerGroupDescribeRequest(
            group_ids=(GroupId("share848"), GroupId(group)), include_authorized_operations=False))
        share_d, ours = described.groups
        assert share_d.error_code.name == "group_id_not_found"
        assert "is not a consumer group" in share_d.error_message
        assert ours.error_code.name == "none"
        assert [m.member_id for m in ours.members] == [member_id]
        assert ours.members[0].member_epoch == epoch
        joined_share = _heartbeat(raw, "share848", str(uuid.uuid4()), 0, join=True)
        assert joined_share.error_code.name == "group_id_not_found", joined_share

        left = _heartbeat(raw, group, member_id, -1)
        assert left.error_code.name == "none" and left.member_epoch == -1, left


# ----------------------------------------------------------------------------- 4. conversion

def test_an_empty_classic_group_converts_and_keeps_its_offsets(make_broker):
    broker = make_broker(config=FAST)
    bootstrap = broker.bootstrap_servers
    _topic(bootstrap)
    group = "convert848"
    _produce(bootstrap, 0, 30)
    seen: list[int] = []
    classic = Member(_classic_consumer(bootstrap, group), seen)
    _drain([classic], seen, 30)
    classic.close()
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        assert ("classic", "Empty") in [(g.type, g.state) for g in admin.list_groups() if g.group_id == group]

    _produce(bootstrap, 30, 30)
    member = Member(_consumer(bootstrap, group), seen)
    try:
        _drain([member], seen, 60)
        wait_until(lambda: len(member.assignment()) == 6, 20, message="the consumer-protocol member assigned")
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            assert [(g.type, g.state) for g in admin.list_groups() if g.group_id == group] == [("consumer", "Stable")]

        assert len(member.assignment()) == 6
    finally:
        member.close()
    assert sorted(seen) == list(range(60))  # resumed from the classic group's commits: nothing twice


# ----------------------------------------------------------------------------- 5. durability

def test_consumer_group_and_offsets_survive_sigkill(tmp_path, broker_process):
    data = str(tmp_path / "data")
    overrides = {k: str(v) for k, v in FAST.items()}
    b = broker_process(data, overrides=overrides)
    _topic(b.bootstrap_servers)
    _produce(b.bootstrap_servers, 0, 30)
    seen: list[int] = []
    c = Member(_consumer(b.bootstrap_servers, "durable848"), seen)
    _drain([c], seen, 12)
    c.close()
    with Admin({"bootstrap.servers": b.bootstrap_servers}) as admin:
        before = [(g.type, g.state) for g in admin.list_groups() if g.group_id == "durable848"]
    assert before == [("consumer", "Empty")]
    b.kill()
    b2 = broker_process(data, port=b.port, overrides=overrides)
    with Admin({"bootstrap.servers": b2.bootstrap_servers}) as admin:
        after = wait_until(lambda: [(g.type, g.state) for g in admin.list_groups() if g.group_id == "durable848"],
                           20, message="the group listed after the restart")
    assert after == [("consumer", "Empty")]
    c = Member(_consumer(b2.bootstrap_servers, "durable848"), seen)
    try:
        _drain([c], seen, 30)
    finally:
        c.close()
    assert sorted(seen) == list(range(30))  # resumed from the commits: nothing twice


def test_a_member_survives_sigkill_and_expires_after_the_restart(tmp_path, broker_process):
    """The members are replayed with their epochs and assignments, and get fresh session timers."""
    data = str(tmp_path / "data")
    overrides = {k: str(v) for k, v in FAST.items()}
    b = broker_process(data, overrides=overrides)
    _topic(b.bootstrap_servers)
    _produce(b.bootstrap_servers, 0, 30)
    group = "replay848"
    member_id = str(uuid.uuid4())
    with RawClient(b.bootstrap_servers) as raw:
        joined = _heartbeat(raw, group, member_id, 0, join=True)
        assert joined.error_code.name == "none", joined
        epoch, owned = int(joined.member_epoch), _assigned(joined)
        assert _commit_raw(raw, oc9, group, member_id, epoch, offset=2) == "none"
    b.kill()
    b2 = broker_process(data, port=b.port, overrides=overrides)
    with RawClient(b2.bootstrap_servers) as raw:
        resp = wait_until(lambda: (r := _heartbeat(raw, group, member_id, epoch, owned=owned)).error_code.name
                          != "coordinator_load_in_progress" and r, 20, message="the coordinator loaded")
        assert resp.error_code.name == "none", resp  # the member is known again, with its epoch
        if resp.assignment is not None:
            assert _assigned(resp) == owned
        epoch = int(resp.member_epoch)
        assert _commit_raw(raw, oc9, group, member_id, epoch, offset=5) == "none"
        assert _commit_raw(raw, oc9, group, "not-a-member", epoch) == "unknown_member_id"
    # the raw member now stays silent: a new member gets its partitions after its session timeout
    seen: list[int] = []
    c = Member(_consumer(b2.bootstrap_servers, group), seen)
    try:
        wait_until(lambda: len(c.assignment()) == 6, 20, message="the silent member's partitions")
        _drain([c], seen, 25)
    finally:
        c.close()
    # partition 0 (records 0, 6, 12, 18, 24 at offsets 0-4) resumes at its committed offset 5: none again
    assert sorted(seen) == sorted(set(range(30)) - {0, 6, 12, 18, 24})


# ----------------------------------------------------------------------------- 6. session timeout

def test_a_member_that_stops_heartbeating_is_removed_after_its_session_timeout(make_broker):
    broker = make_broker(config=FAST)
    bootstrap = broker.bootstrap_servers
    _topic(bootstrap)
    group = "expiry848"
    raw_id = str(uuid.uuid4())
    seen: list[int] = []
    with RawClient(bootstrap) as raw:
        joined = _heartbeat(raw, group, raw_id, 0, join=True)
        assert joined.error_code.name == "none", joined
        state = {"epoch": int(joined.member_epoch), "owned": _assigned(joined)}
        assert sum(len(ps) for ps in state["owned"].values()) == 6

        survivor = Member(_consumer(bootstrap, group), seen)
        try:
            def beat() -> bool:
                """One heartbeat of the raw member, which revokes at once what it is no longer assigned."""
                resp = _heartbeat(raw, group, raw_id, state["epoch"], owned=state["owned"])
                assert resp.error_code.name == "none", resp
                state["epoch"] = int(resp.member_epoch)
                if resp.assignment is not None:
                    state["owned"] = _assigned(resp)
                return (sum(len(ps) for ps in state["owned"].values()) == 3
                        and len(survivor.assignment()) == 3)

            wait_until(beat, 20, interval_s=0.1, message="the partitions shared by the two members")
            stopped_at = time.monotonic()  # no more heartbeats from the raw member, no leave
            wait_until(lambda: len(survivor.assignment()) == 6, 20,
                       message="the silent member's partitions moving to the survivor")
            waited = time.monotonic() - stopped_at
            assert waited >= SESSION_S - 0.5, waited  # not before the 3 s session timeout
            [described] = broker.call(lambda: broker.server.consumer_groups.describe([group]))
            ids = [m.member_id for m in described.members]
            assert len(ids) == 1 and raw_id not in ids, ids  # only the survivor is left
            late = _heartbeat(raw, group, raw_id, state["epoch"], owned=state["owned"])
            assert late.error_code.name == "unknown_member_id", late
        finally:
            survivor.close()


def test_a_regex_subscription_follows_matching_topics_as_they_are_created(make_broker):
    """confluent-kafka's subscribe(["^rx-.*"]) sends SubscribedTopicRegex with group.protocol=consumer:
    the coordinator resolves it against the topics (whole names), so the member reads every matching
    topic and not the others, and a matching topic created later is assigned at the next heartbeat.
    An invalid pattern is refused with INVALID_REGULAR_EXPRESSION."""
    broker = make_broker(config=FAST)
    bootstrap = broker.bootstrap_servers
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({"rx-a": (2, 1), "rx-b": (2, 1), "other": (1, 1), "xrx-a": (1, 1)})
    producer = Producer({"bootstrap.servers": bootstrap})
    for topic in ("rx-a", "rx-b", "other", "xrx-a"):
        producer.produce(topic, topic.encode())
    assert producer.flush(10) == 0
    consumer = _consumer(bootstrap, "regex-group")
    consumer.subscribe(["^rx-.*"])
    got: list[str] = []

    def read(expected: set[str]) -> bool:
        msg = consumer.poll(0.05)
        if msg is not None and msg.error() is None:
            got.append(msg.topic())
        return set(got) >= expected

    try:
        wait_until(lambda: read({"rx-a", "rx-b"}), 30, message="the two matching topics")
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            admin.create_topics({"rx-c": (1, 1)})
        producer.produce("rx-c", b"rx-c")
        assert producer.flush(10) == 0
        wait_until(lambda: read({"rx-a", "rx-b", "rx-c"}), 30, message="the topic created later")
        assert sorted(got) == ["rx-a", "rx-b", "rx-c"]  # not "other", nor "xrx-a" (a whole-name match)
        [described] = broker.call(broker.server.consumer_groups.describe, ["regex-group"])
        assert described.members[0].subscribed_topic_regex == "(^rx-.*)"  # librdkafka joins its patterns so
    finally:
        consumer.close()
    with RawClient(bootstrap) as raw:
        resp = raw.request(cgh1.ConsumerGroupHeartbeatRequest(
            group_id=GroupId("regex-bad"), member_id=str(uuid.uuid4()), member_epoch=i32(0), instance_id=None,
            rack_id=None, rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
            subscribed_topic_names=None, subscribed_topic_regex="rx-[", server_assignor=None,
            topic_partitions=()))
    assert resp.error_code.name == "invalid_regular_expression" and "rx-[" in resp.error_message
