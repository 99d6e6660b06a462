"""Online migration between classic and consumer groups (`group.consumer.migration.policy`), as
Kafka 4.x's GroupMetadataManager does it (convertToConsumerGroup / ConsumerGroup.fromClassicGroup,
classicGroup{Join,Sync,Heartbeat,Leave}ToConsumerGroup, convertToClassicGroup /
ClassicGroup.fromConsumerGroup), with real clients over loopback:

- a confluent-kafka classic member (eager and cooperative), then a KIP-848 member joining the same
  group: the group becomes a consumer group in place, the classic member keeps working through
  JoinGroup / SyncGroup / Heartbeat, every partition is held by exactly one member, the committed
  offsets carry over, and when the KIP-848 member leaves the group goes back to classic with the
  classic member holding everything; kafka-python and aiokafka as classic members too;
- each policy value's acceptance or refusal of the upgrade and of the downgrade;
- a SIGKILL of the broker replays the converted group, and a restarted broker replays a downgraded
  one from its records."""

from __future__ import annotations

import asyncio
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


def _classic(bootstrap: str, group: str, session_timeout_ms: int = 6000, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "classic",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "session.timeout.ms": session_timeout_ms, "heartbeat.interval.ms": 100, **extra})


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

@pytest.mark.parametrize("strategy", ["range,roundrobin", "cooperative-sticky"])
def test_a_kip848_member_converts_a_classic_group_and_its_leaving_converts_it_back(make_broker, strategy):
    """Eager classic members give up everything when they rejoin; cooperative ones report what they
    own in their subscription and revoke only what the target takes away."""
    broker = make_broker(config=FAST)
    bootstrap = broker.bootstrap_servers
    _setup(bootstrap, 30)
    group = "migrate-confluent"
    seen: list[int] = []
    classic = GroupMember(_classic(bootstrap, group, **{"partition.assignment.strategy": strategy}), seen, TOPIC)
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


# ----------------------------------------------------------------------------- each policy

def _beating(raw: RawClient, group: str, member_id: str, epoch: int, condition, timeout_s: float, message: str):
    """Wait for `condition` while the raw KIP-848 member keeps heartbeating (epoch as it moves)."""
    state = {"epoch": epoch}

    def check():
        resp = _heartbeat(raw, group, member_id, state["epoch"])
        assert resp.error_code.name == "none", resp
        state["epoch"] = int(resp.member_epoch)
        return condition()
    wait_until(check, timeout_s, message=message)
    return state["epoch"]


@pytest.mark.parametrize("policy", ["bidirectional", "upgrade", "downgrade", "disabled"])
def test_each_migration_policy_allows_or_refuses_the_upgrade_and_the_downgrade(make_broker, policy):
    """ConsumerGroupMigrationPolicy.isUpgradeEnabled / isDowngradeEnabled, as validateOnlineUpgrade and
    validateOnlineDowngradeWithFencedMember read them. A classic member joins a non-empty consumer
    group under every policy (GroupMetadataManager.classicGroupJoin does not ask the policy)."""
    broker = make_broker(config={**FAST, "group.consumer.migration.policy": policy.upper()})
    bootstrap = broker.bootstrap_servers
    _setup(bootstrap, 0)
    upgrade = policy in ("upgrade", "bidirectional")
    downgrade = policy in ("downgrade", "bidirectional")
    seen: list[int] = []
    group = f"policy-{policy}"
    classic = GroupMember(_classic(bootstrap, group), seen, TOPIC)
    try:
        wait_until(lambda: _partitions(classic) == set(range(PARTITIONS)), 10, message="the classic group formed")
        member_id = str(uuid.uuid4())
        with RawClient(bootstrap) as raw:
            joined = _heartbeat(raw, group, member_id, 0, join=True)
            if not upgrade:
                assert joined.error_code.name == "group_id_not_found", joined
                assert "online upgrade is disabled" in joined.error_message, joined
                assert _kind(bootstrap, group) == [("classic", "Stable")]
                group = f"policy-{policy}-mixed"  # the downgrade is tried on a group born a consumer group
                joined = _heartbeat(raw, group, member_id, 0, join=True)
                assert joined.error_code.name == "none", joined
                classic.close()
                classic = GroupMember(_classic(bootstrap, group), seen, TOPIC)
            assert joined.error_code.name == "none", joined
            _beating(raw, group, member_id, int(joined.member_epoch),
                     lambda: len(_describe(bootstrap, group).members) == 2, 10, "a mixed consumer group of two")
            assert _kind(bootstrap, group)[0][0] == "consumer"
            left = _heartbeat(raw, group, member_id, -1)
            assert left.error_code.name == "none", left
        wait_until(lambda: _partitions(classic) == set(range(PARTITIONS)), 15,
                   message="the classic member holding every partition")
        assert _kind(bootstrap, group)[0][0] == ("classic" if downgrade else "consumer")
    finally:
        classic.close()


# ----------------------------------------------------------------------------- restart

def test_a_converted_group_survives_sigkill_and_downgrades_after_the_restart(tmp_path, broker_process):
    """The conversion is records (the classic group's tombstone, then the consumer group's records):
    a restart replays the converted group, member by member with their types, and the classic
    member carries on through it; its downgrade after the restart works from the replayed state."""
    data = str(tmp_path / "data")
    overrides = {k: str(v) for k, v in FAST.items()}
    b = broker_process(data, overrides=overrides)
    _setup(b.bootstrap_servers, 0)
    group = "migrate-restart"
    classic = GroupMember(_classic(b.bootstrap_servers, group, session_timeout_ms=30000, log_level=0), [], TOPIC)
    try:
        wait_until(lambda: _partitions(classic) == set(range(PARTITIONS)), 20, message="the classic group formed")
        member_id = str(uuid.uuid4())
        with RawClient(b.bootstrap_servers) as raw:
            joined = _heartbeat(raw, group, member_id, 0, join=True)
            assert joined.error_code.name == "none", joined
        before = _describe(b.bootstrap_servers, group)
        types = sorted((m.member_id, int(m.member_type)) for m in before.members)
        assert len(types) == 2 and (member_id, 1) in types and [t for _m, t in types].count(0) == 1, types
        b.kill()
        b = broker_process(data, port=b.port, overrides=overrides)
        after = wait_until(lambda: (d := _describe(b.bootstrap_servers, group)).error_code.name == "none" and d,
                           20, message="the consumer group replayed")
        assert sorted((m.member_id, int(m.member_type)) for m in after.members) == types
        assert int(after.group_epoch) == int(before.group_epoch)
        with RawClient(b.bootstrap_servers) as raw:
            assert _heartbeat(raw, group, member_id, -1).error_code.name == "none"
        wait_until(lambda: _kind(b.bootstrap_servers, group) == [("classic", "Stable")]
                   and _partitions(classic) == set(range(PARTITIONS)), 20,
                   message="downgraded, the classic member holding every partition")
    finally:
        classic.close()


def test_a_downgraded_group_is_replayed_as_a_classic_group(tmp_path, make_broker):
    """The downgrade's records (the consumer group's tombstones, then the GroupMetadata record) replay
    into the classic group: a broker started again on the same data lists it Stable with its member."""
    data = str(tmp_path / "data")
    broker = make_broker(data_dir=data, config=FAST)
    bootstrap = broker.bootstrap_servers
    _setup(bootstrap, 0)
    group = "migrate-replay"
    classic = GroupMember(_classic(bootstrap, group), [], TOPIC)
    try:
        wait_until(lambda: _partitions(classic) == set(range(PARTITIONS)), 10, message="the classic group formed")
        member_id = str(uuid.uuid4())
        with RawClient(bootstrap) as raw:
            assert _heartbeat(raw, group, member_id, 0, join=True).error_code.name == "none"
            assert _kind(bootstrap, group)[0][0] == "consumer"
            assert _heartbeat(raw, group, member_id, -1).error_code.name == "none"
        wait_until(lambda: _kind(bootstrap, group) == [("classic", "Stable")]
                   and _partitions(classic) == set(range(PARTITIONS)), 15, message="downgraded")
        broker.stop()
    finally:
        classic.close()
    again = make_broker(data_dir=data, config=FAST)
    assert _kind(again.bootstrap_servers, group) == [("classic", "Stable")]
    with RawClient(again.bootstrap_servers) as raw:  # the classic group's id: not a consumer group
        refused = _heartbeat(raw, group, str(uuid.uuid4()), 1)
    assert refused.error_code.name == "group_id_not_found", refused


# ----------------------------------------------------------------------------- kafka-python

class _KafkaPythonMember:
    """kafka-python's KafkaConsumer as a classic member, polling and committing on its own thread."""

    def __init__(self, bootstrap: str, group: str, seen: list[int]) -> None:
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                      enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=100)
        self.consumer.subscribe([TOPIC])
        self.seen = seen
        self.held: set[int] = set()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for records in self.consumer.poll(timeout_ms=50).values():
                    self.seen.extend(int(r.value) for r in records)
                    try:
                        self.consumer.commit()
                    except Exception as exc:  # noqa: BLE001 - a rebalance moved the generation on: again later
                        if "Rebalance" not in type(exc).__name__ and "Generation" not in type(exc).__name__:
                            raise
                self.held = {tp.partition for tp in self.consumer.assignment()}
        except BaseException as exc:  # noqa: BLE001 - re-raised by check()
            self.error = exc
        finally:
            self.consumer.close()

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"kafka-python's poll loop failed: {self.error!r}") from self.error

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.check()


class _AiokafkaMember:
    """aiokafka's AIOKafkaConsumer as a classic member, on its own event loop in a thread."""

    def __init__(self, bootstrap: str, group: str, seen: list[int]) -> None:
        self.bootstrap, self.group, self.seen = bootstrap, group, seen
        self.held: set[int] = set()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    async def _run(self) -> None:
        from aiokafka import AIOKafkaConsumer

        from aiokafka.errors import KafkaError

        def new_consumer():
            return AIOKafkaConsumer(TOPIC, bootstrap_servers=self.bootstrap, group_id=self.group,
                                    auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                                    heartbeat_interval_ms=100)

        consumer = new_consumer()
        try:
            # aiokafka's start() waits for the first assignment and gives up with RebalanceInProgress
            # when another member's join rebalances the group at that moment (a SyncGroup answered
            # REBALANCE_IN_PROGRESS, as Kafka's GroupCoordinator answers it during PreparingRebalance);
            # a worker would start again, and so does this one (at most twice more)
            for attempt in range(3):
                try:
                    await consumer.start()
                    break
                except KafkaError as exc:  # start() raises it bare, or wrapped: KafkaError(RebalanceInProgressError())
                    if "RebalanceInProgress" not in repr(exc):
                        raise
                    await consumer.stop()
                    if attempt == 2:
                        raise
                    consumer = new_consumer()
            while not self._stop.is_set():
                for records in (await consumer.getmany(timeout_ms=50)).values():
                    self.seen.extend(int(r.value) for r in records)
                    try:
                        await consumer.commit()
                    except Exception as exc:  # noqa: BLE001 - a rebalance moved the generation on: again later
                        if "Rebalance" not in type(exc).__name__ and "Generation" not in type(exc).__name__:
                            raise
                self.held = {tp.partition for tp in consumer.assignment()}
        except BaseException as exc:  # noqa: BLE001 - re-raised by check()
            self.error = exc
        finally:
            await consumer.stop()

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"aiokafka's poll loop failed: {self.error!r}") from self.error

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.check()


def test_kafka_python_and_aiokafka_as_classic_members_of_a_converted_group(make_broker):
    broker = make_broker(config=FAST)
    bootstrap = broker.bootstrap_servers
    _setup(bootstrap, 30)
    group = "migrate-python-clients"
    seen: list[int] = []
    olds = [_KafkaPythonMember(bootstrap, group, seen), _AiokafkaMember(bootstrap, group, seen)]
    modern = None
    try:
        wait_until(lambda: ([o.check() for o in olds], len(set(seen)) >= 30)[1], 20,
                   message="the classic members consumed the first 30")
        _produce(bootstrap, 30, 30)
        modern = GroupMember(_kip848(bootstrap, group), seen, TOPIC)

        def split() -> bool:
            for o in olds:
                o.check()
            held = [o.held for o in olds] + [_partitions(modern)]
            return all(held) and sum(map(len, held)) == PARTITIONS and set().union(*held) == set(range(PARTITIONS))
        wait_until(split, 20, message="the partitions split among kafka-python, aiokafka and the KIP-848 member")
        assert _kind(bootstrap, group)[0][0] == "consumer"
        assert sorted(int(m.member_type) for m in _describe(bootstrap, group).members) == [0, 0, 1]
        wait_until(lambda: ([o.check() for o in olds], len(set(seen)) >= 60)[1], 20, message="all 60 consumed")
    finally:
        if modern is not None:
            modern.close()
        for o in olds:
            o.close()
    assert set(seen) == set(range(60))
