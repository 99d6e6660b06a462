"""The committed-offsets shell (broker/server/consumer_offsets.py): records first — a commit whose
append fails answers NOT_COORDINATOR and leaves the offsets in memory as they were — and expiry of
a simple group's offsets after `offsets.retention.minutes`, which also ends the group."""

from __future__ import annotations

import errno

from confluent_kafka import Consumer, TopicPartition

from quafka.client import Admin
from quafka.protocol.coordinator_record_codec import CONSUMER_OFFSETS_TOPIC


def _commit(bootstrap: str, group: str, offset: int):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return consumer.commit(offsets=[TopicPartition("t", 0, offset)], asynchronous=False)
    except Exception as exc:  # noqa: BLE001 - the commit's failure is what the test looks at
        return exc
    finally:
        consumer.close()


def _failing_append(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device (injected)")


def test_a_commit_that_cannot_be_stored_changes_nothing(make_broker):
    broker = make_broker()
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        admin.create_topics({"t": (1, 1)})
    assert _commit(broker.bootstrap_servers, "g", 5)[0].error is None
    service = broker.server.consumer_offsets

    def install():
        for part in broker.server.state.topics[CONSUMER_OFFSETS_TOPIC].partitions:
            part.log.append = _failing_append

    def remove():
        for part in broker.server.state.topics[CONSUMER_OFFSETS_TOPIC].partitions:
            part.log.__dict__.pop("append", None)

    broker.call(install)
    try:
        failed = _commit(broker.bootstrap_servers, "g", 9)
        assert "NOT_COORDINATOR" in str(failed), failed  # KAFKA_STORAGE_ERROR as Kafka's coordinators map it
        assert broker.call(lambda: service.offsets.committed("g")[("t", 0)].offset) == 5
    finally:
        broker.call(remove)
    assert _commit(broker.bootstrap_servers, "g", 9)[0].error is None
    assert broker.call(lambda: service.offsets.committed("g")[("t", 0)].offset) == 9
    assert broker.server.halted is False


def test_simple_group_offsets_expire_after_the_retention(make_broker):
    broker = make_broker(config={"offsets.retention.minutes": 1})
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        admin.create_topics({"t": (1, 1)})
    assert _commit(broker.bootstrap_servers, "old", 3)[0].error is None
    service = broker.server.consumer_offsets
    state = broker.server.state
    real_clock = state.clock_ms
    assert broker.call(service.expire_now) == 0  # not yet
    broker.call(lambda: setattr(state, "clock_ms", lambda: real_clock() + 61_000))
    try:
        assert broker.call(service.expire_now) == 1
    finally:
        broker.call(lambda: setattr(state, "clock_ms", real_clock))
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        assert "old" not in {g.group_id for g in admin.list_groups()}
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "old"})
    try:
        assert consumer.committed([TopicPartition("t", 0)], timeout=10)[0].offset == -1001
    finally:
        consumer.close()


def test_an_empty_classic_groups_offsets_expire_and_the_group_goes(make_broker):
    """A classic group (it had members, then they left) keeps its offsets while it has members and
    loses them `offsets.retention.minutes` after it became Empty; then the group itself is deleted."""
    broker = make_broker(config={"offsets.retention.minutes": 1, "group.initial.rebalance.delay.ms": 0})
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        admin.create_topics({"t": (1, 1)})
    member = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "gone", "enable.auto.commit": False})
    member.subscribe(["t"])
    deadline = 200
    while not member.assignment() and deadline:
        member.poll(0.05)
        deadline -= 1
    assert member.assignment()
    member.commit(offsets=[TopicPartition("t", 0, 4)], asynchronous=False)
    service = broker.server.consumer_offsets
    state = broker.server.state
    real_clock = state.clock_ms
    broker.call(lambda: setattr(state, "clock_ms", lambda: real_clock() + 61_000))
    try:
        assert broker.call(service.expire_now) == 0  # a group with a member keeps its offsets
    finally:
        broker.call(lambda: setattr(state, "clock_ms", real_clock))
    member.close()  # LeaveGroup: the group is Empty from now on
    assert broker.call(lambda: broker.server.classic_groups.coordinator.group("gone").state.value) == "Empty"
    broker.call(lambda: setattr(state, "clock_ms", lambda: real_clock() + 61_000))
    try:
        assert broker.call(service.expire_now) == 1
    finally:
        broker.call(lambda: setattr(state, "clock_ms", real_clock))
    assert broker.call(lambda: broker.server.classic_groups.has_group("gone")) is False
