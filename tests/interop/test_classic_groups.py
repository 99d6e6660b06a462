"""Classic consumer groups (issue 16, acceptance 1-3 and 6 for the classic protocol) with real
clients over loopback: confluent-kafka (eager `range` and incremental `cooperative-sticky`),
kafka-python and aiokafka. Three members on a 6-partition topic get two partitions each; a fourth
joins and one leaves (with each of the three clients); with a commit after every batch, every record
is consumed exactly once by the group. A member that stops heartbeating is removed after its session timeout; a static member that
restarts within it keeps its partitions without a rebalance; groups and committed offsets survive a
SIGKILL of the broker; a share group and a consumer group cannot share a name."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer

from kio.schema.share_group_heartbeat.v1 import request as sgh1
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32

from quafka.client import Admin, ShareConsumer
from support import RawClient, wait_until
from support.group_member import GroupMember, drain

TOPIC = "jobs"
FAST = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 500}

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
    config = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 200}
    config.update(extra)
    return Consumer(config)


class Member(GroupMember):
    """A confluent-kafka member of the group on TOPIC (tests/support/group_member.py)."""

    def __init__(self, consumer: Consumer, seen: list[int]) -> None:
        super().__init__(consumer, seen, TOPIC)


_drain = drain


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_confluent_group_spreads_partitions_and_consumes_every_record_once_across_rebalances(make_broker, strategy):
    broker = make_broker(config=FAST)
    bootstrap = broker.bootstrap_servers
    _topic(bootstrap)
    group = f"g-{strategy}"
    seen: list[int] = []
    members = [Member(_consumer(bootstrap, group, **{"partition.assignment.strategy": strategy}), seen)
               for _ in range(3)]
    try:
        _produce(bootstrap, 0, 60)
        _drain(members, seen, 60)

        def assigned() -> list[int]:
            return sorted(len(m.assignment()) for m in members)

        wait_until(lambda: assigned() == [2, 2, 2], 20, message="two partitions each")
        members.append(Member(_consumer(bootstrap, group, **{"partition.assignment.strategy": strategy}), seen))
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
    refused = sum(m.refused_on_revoke for m in members) + left.refused_on_revoke
    assert set(seen) == set(range(180))  # every record consumed
    if refused == 0:  # every revocation's commit went through: nothing twice
        assert sorted(seen) == list(range(180))


def test_kafka_python_and_aiokafka_groups(make_broker):
    from kafka import KafkaConsumer

    broker = make_broker(config=FAST)
    bootstrap = broker.bootstrap_servers
    _topic(bootstrap)
    _produce(bootstrap, 0, 60)
    # each member learns the topic's partitions before it subscribes: a kafka-python 3.0.12 leader
    # that joins before its metadata has them assigns nothing ("No partition metadata"), rejoins at
    # once, and now and then never applies the second SyncGroup answer it received (seen with
    # kafka-python's debug log: the response with all six partitions arrives, the member stays
    # "rebalancing" and stops heartbeating) — a client-side race, not the broker's
    kp = []
    for _ in range(3):
        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id="kp", auto_offset_reset="earliest",
                          enable_auto_commit=False, heartbeat_interval_ms=200)
        assert c.partitions_for_topic(TOPIC) == set(range(6))
        c.subscribe([TOPIC])
        kp.append(c)
    seen = []

    def poll_all() -> None:
        for c in kp:
            for records in c.poll(timeout_ms=50).values():
                seen.extend(int(r.value) for r in records)
                c.commit()

    wait_until(lambda: poll_all() or len(seen) >= 60, 40, message="the 60 records")
    assert sorted(seen) == list(range(60))
    wait_until(lambda: poll_all() or sorted(len(c.assignment()) for c in kp) == [2, 2, 2],
               20, message="two partitions each (kafka-python)")
    for c in kp:
        c.close()

    async def aio() -> list[int]:
        from aiokafka import AIOKafkaConsumer

        _produce(bootstrap, 60, 30)
        consumers = [AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id="kp", enable_auto_commit=False,
                                      auto_offset_reset="earliest", heartbeat_interval_ms=200) for _ in range(3)]
        for c in consumers:
            await c.start()
        got: list[int] = []
        try:
            end = time.monotonic() + 40
            while len(got) < 30:
                assert time.monotonic() < end, len(got)
                for c in consumers:
                    batch = await c.getmany(timeout_ms=50)
                    for records in batch.values():
                        got += [int(r.value) for r in records]
                    if batch:
                        await c.commit()
        finally:
            for c in consumers:
                await c.stop()
        return got

    # the group resumes from kafka-python's commits: only the 30 new records
    assert sorted(asyncio.run(aio())) == list(range(60, 90))


class KafkaPythonMember:
    """A kafka-python group member on its own thread: polls, commits after every batch (a commit
    refused by a rebalance, CommitFailedError, is counted), and keeps its assignment as of its last
    poll. It learns the topic's partitions before subscribing (see test_kafka_python_and_aiokafka_groups)."""

    def __init__(self, bootstrap: str, group: str, seen: list[int]) -> None:
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                      enable_auto_commit=False, heartbeat_interval_ms=200)
        assert self.consumer.partitions_for_topic(TOPIC) == set(range(6))
        self.consumer.subscribe([TOPIC])
        self.seen, self.refused, self.assigned, self.error = seen, 0, 0, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from kafka.errors import CommitFailedError

        try:
            while not self._stop.is_set():
                batch = self.consumer.poll(timeout_ms=50)
                for records in batch.values():
                    self.seen.extend(int(r.value) for r in records)
                if batch:
                    try:
                        self.consumer.commit()
                    except CommitFailedError:
                        self.refused += 1
                self.assigned = len(self.consumer.assignment())
        except BaseException as exc:  # noqa: BLE001 - re-raised by check()
            self.error = exc
        finally:
            self.consumer.close()  # LeaveGroup

    def check(self) -> int:
        assert self.error is None, f"a kafka-python member failed: {self.error!r}"
        return self.assigned

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()
        self.check()


def test_kafka_python_group_across_a_join_and_a_leave(make_broker):
    """Acceptance 1 for kafka-python: three members get two partitions each, a fourth joins
    ([1, 1, 2, 2]) and one leaves ([2, 2, 2]); with a commit after every batch every record is
    consumed, exactly once when no commit was refused by a rebalance."""
    broker = make_broker(config=FAST)
    bootstrap = broker.bootstrap_servers
    _topic(bootstrap)
    seen: list[int] = []
    members = [KafkaPythonMember(bootstrap, "kp-rebalance", seen) for _ in range(3)]
    try:
        _produce(bootstrap, 0, 60)
        wait_until(lambda: len(seen) >= 60 and sorted(m.check() for m in members) == [2, 2, 2], 40,
                   message="60 records, two partitions each")
        members.append(KafkaPythonMember(bootstrap, "kp-rebalance", seen))
        _produce(bootstrap, 60, 60)
        wait_until(lambda: len(seen) >= 120 and sorted(m.check() for m in members) == [1, 1, 2, 2], 40,
                   message="120 records, the fourth member assigned")
        left = members.pop(0)
        left.close()
        _produce(bootstrap, 120, 60)
        wait_until(lambda: len(seen) >= 180 and sorted(m.check() for m in members) == [2, 2, 2], 40,
                   message="180 records, spread over the three left")
    finally:
        for m in members:
            m.close()
    assert set(seen) == set(range(180))
    if sum(m.refused for m in members) + left.refused == 0:
        assert sorted(seen) == list(range(180))


def test_aiokafka_group_across_a_join_and_a_leave(make_broker):
    """Acceptance 1 for aiokafka: the same three members, fourth joins, one leaves; every member a
    task on one event loop, committing after every batch."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import CommitFailedError, RebalanceInProgressError

    broker = make_broker(config=FAST)
    bootstrap = broker.bootstrap_servers
    _topic(bootstrap)

    async def main() -> tuple[list[int], int]:
        seen: list[int] = []
        refused = 0
        members: list[tuple[AIOKafkaConsumer, asyncio.Task]] = []

        async def run(c: AIOKafkaConsumer) -> None:
            nonlocal refused
            while True:
                batch = await c.getmany(timeout_ms=50)
                for records in batch.values():
                    seen.extend(int(r.value) for r in records)
                if batch:
                    try:
                        await c.commit()
                    except (CommitFailedError, RebalanceInProgressError):
                        refused += 1

        async def add() -> None:
            c = AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id="aio-rebalance",
                                 enable_auto_commit=False, auto_offset_reset="earliest", heartbeat_interval_ms=200)
            await c.start()
            members.append((c, asyncio.ensure_future(run(c))))

        async def until(condition, timeout_s: float, what: str) -> None:
            deadline = time.monotonic() + timeout_s
            while not condition():
                for _, task in members:
                    if task.done():
                        task.result()  # a member's error surfaces here
                assert time.monotonic() < deadline, f"{what}: {len(seen)} records, " \
                    f"{sorted(len(c.assignment()) for c, _ in members)}"
                await asyncio.sleep(0.02)

        def spread() -> list[int]:
            return sorted(len(c.assignment()) for c, _ in members)

        try:
            for _ in range(3):
                await add()
            await asyncio.to_thread(_produce, bootstrap, 0, 60)
            await until(lambda: len(seen) >= 60 and spread() == [2, 2, 2], 40, "two partitions each")
            await add()
            await asyncio.to_thread(_produce, bootstrap, 60, 60)
            await until(lambda: len(seen) >= 120 and spread() == [1, 1, 2, 2], 40, "the fourth member assigned")
            c, task = members.pop(0)
            task.cancel()
            await c.stop()  # LeaveGroup
            await asyncio.to_thread(_produce, bootstrap, 120, 60)
            await until(lambda: len(seen) >= 180 and spread() == [2, 2, 2], 40, "the three left")
        finally:
            for c, task in members:
                task.cancel()
                await c.stop()
        return seen, refused

    seen, refused = asyncio.run(main())
    assert set(seen) == set(range(180))
    if refused == 0:
        assert sorted(seen) == list(range(180))


_MEMBER_CHILD = textwrap.dedent("""
    import sys, time
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "session.timeout.ms": 1500,
                  "heartbeat.interval.ms": 200, "auto.offset.reset": "earliest"})
    c.subscribe(["jobs"])
    while True:
        c.poll(0.1)
        if c.assignment():
            print("assigned", len(c.assignment()), flush=True)
            break
    while True:
        c.poll(0.1)
""")


def test_a_member_that_stops_heartbeating_is_removed_after_its_session_timeout(make_broker):
    broker = make_broker(config=FAST)
    bootstrap = broker.bootstrap_servers
    _topic(bootstrap)
    child = subprocess.Popen([sys.executable, "-c", _MEMBER_CHILD, bootstrap, "expiry"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().startswith("assigned 6")
        survivor = _consumer(bootstrap, "expiry", **{"session.timeout.ms": 6000})
        survivor.subscribe([TOPIC])
        wait_until(lambda: survivor.poll(0.05) is None and len(survivor.assignment()) == 3, 20,
                   message="the partitions shared by the two members")
        killed_at = time.monotonic()
        os.kill(child.pid, signal.SIGKILL)  # no LeaveGroup, no more heartbeats
        wait_until(lambda: survivor.poll(0.05) is None and len(survivor.assignment()) == 6, 20,
                   message="the dead member's partitions moving to the survivor")
        assert time.monotonic() - killed_at >= 1.0  # not before the 1.5 s session timeout
        survivor.close()
    finally:
        child.kill()
        child.wait(10)


def test_a_static_member_restarting_within_its_session_keeps_its_partitions(make_broker):
    broker = make_broker(config=FAST)
    bootstrap = broker.bootstrap_servers
    _topic(bootstrap)
    static = {"group.instance.id": "worker-a", "session.timeout.ms": 10000}
    a = _consumer(bootstrap, "static", **static)
    b = _consumer(bootstrap, "static", **{"group.instance.id": "worker-b", "session.timeout.ms": 10000})
    a.subscribe([TOPIC])
    b.subscribe([TOPIC])
    wait_until(lambda: [a.poll(0.05), b.poll(0.05)] and len(a.assignment()) == 3 and len(b.assignment()) == 3, 20,
               message="both static members assigned")
    before = sorted(tp.partition for tp in a.assignment())
    generation = broker.call(lambda: broker.server.classic_groups.coordinator.group("static").generation_id)
    a.close()  # a static member sends no LeaveGroup: its partitions wait for it
    a = _consumer(bootstrap, "static", **static)
    a.subscribe([TOPIC])
    wait_until(lambda: a.poll(0.05) is None and a.assignment(), 20, message="the restarted static member assigned")
    assert sorted(tp.partition for tp in a.assignment()) == before
    assert broker.call(lambda: broker.server.classic_groups.coordinator.group("static").generation_id) == generation
    for c in (a, b):
        c.close()


def test_groups_and_committed_offsets_survive_sigkill(tmp_path, broker_process):
    data = str(tmp_path / "data")
    b = broker_process(data, overrides={"group.initial.rebalance.delay.ms": "0"})
    _topic(b.bootstrap_servers)
    _produce(b.bootstrap_servers, 0, 30)
    seen: list[int] = []
    c = Member(_consumer(b.bootstrap_servers, "durable"), seen)
    _drain([c], seen, 12)
    c.close()
    with Admin({"bootstrap.servers": b.bootstrap_servers}) as admin:
        before = {g.group_id: g.state for g in admin.list_groups()}
    assert before.get("durable") == "Empty"
    b.kill()
    b2 = broker_process(data, port=b.port, overrides={"group.initial.rebalance.delay.ms": "0"})
    with Admin({"bootstrap.servers": b2.bootstrap_servers}) as admin:
        assert {g.group_id: g.state for g in admin.list_groups()}.get("durable") == "Empty"
    c = Member(_consumer(b2.bootstrap_servers, "durable"), seen)
    _drain([c], seen, 30)
    c.close()
    assert sorted(seen) == list(range(30))  # resumed from the commits: nothing twice


def test_a_share_group_and_a_consumer_group_cannot_share_a_name(make_broker):
    broker = make_broker(config=FAST)
    bootstrap = broker.bootstrap_servers
    _topic(bootstrap)
    with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "shared-name"}) as share:
        share.subscribe([TOPIC])
        share.poll(0.5)
        consumer = _consumer(bootstrap, "shared-name")
        consumer.subscribe([TOPIC])
        errors = []
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is not None:
                errors.append(msg.error())
        consumer.close()
    assert errors and "INCONSISTENT_GROUP_PROTOCOL" in errors[0].name(), errors

    c = _consumer(bootstrap, "classic-name")
    c.subscribe([TOPIC])
    wait_until(lambda: c.poll(0.05) is None and c.assignment(), 20, message="the classic group formed")
    with RawClient(bootstrap) as raw:  # ShareGroupHeartbeat for the consumer group's id
        resp = raw.request(sgh1.ShareGroupHeartbeatRequest(
            group_id=GroupId("classic-name"), member_id="m-" + "0" * 20, member_epoch=i32(0), rack_id=None,
            subscribed_topic_names=(TopicName(TOPIC),)))
    assert resp.error_code.name == "group_id_not_found" and "not a share group" in resp.error_message
    c.close()
