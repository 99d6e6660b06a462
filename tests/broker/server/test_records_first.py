"""Records first (issue 14, acceptance 3): a coordinator changes its memory only by what it
appended; when the append fails, its memory is as before and the request gets an error.

The failure is injected into one internal partition's `append` (an instance attribute over the
guarded method, so the log directory stays online and the broker keeps serving): the point is
what each coordinator keeps in memory, seen through its own read paths.

- Share coordinator (`__share_group_state`, share_state.ShareCoordinatorService): a Write or Initialize
  whose append fails raises in its future, and the key's replayed state and its
  ReadShareGroupStateSummary answer are unchanged — on the synchronous round (flush off) and on
  the queued round (flush on).
- Share-group coordinator (`__consumer_offsets`, share_groups.ShareGroupService): a heartbeat
  whose records cannot be appended gets NOT_COORDINATOR (Kafka's
  CoordinatorOperationExceptionHelper maps KAFKA_STORAGE_ERROR to it), the group is as before
  (members, epochs, the image last written) and no session timer is left for the member that
  did not join; AlterShareGroupOffsets likewise leaves the group epoch where it was.
"""

from __future__ import annotations

import asyncio
import errno
import uuid

import pytest

from quafka.broker.core.group_records import image_of
from quafka.protocol.coordinator_record_codec import CONSUMER_OFFSETS_TOPIC
from quafka.protocol.share_state_records import SHARE_GROUP_STATE_TOPIC, ShareStateKey, StateBatch
from quafka.protocol.errors import ErrorCode
from support.share_client import ShareClient, create_topic

pytestmark = pytest.mark.timeout(60)


def _failing_append(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device (injected)")


class AppendFault:
    """Make every partition of an internal topic refuse appends (on the broker's loop)."""

    def __init__(self, broker, topic: str) -> None:
        self.broker, self.topic = broker, topic

    def __enter__(self):
        def install():
            for part in self.broker.server.state.topics[self.topic].partitions:
                part.log.append = _failing_append
        self.broker.call(install)
        return self

    def __exit__(self, *exc):
        def remove():
            for part in self.broker.server.state.topics[self.topic].partitions:
                part.log.__dict__.pop("append", None)
        self.broker.call(remove)


def _run(broker, make_future):
    """Start a share-state operation on the loop; (result or exception) once it is done."""
    async def run():
        try:
            return await make_future()
        except OSError as exc:
            return exc
    return broker.call(lambda: asyncio.ensure_future(run())), run


def _await(broker, fut):
    import time

    deadline = time.monotonic() + 10
    while not broker.call(fut.done):
        assert time.monotonic() < deadline, "the operation did not finish"
        time.sleep(0.01)
    return broker.call(fut.result)


@pytest.mark.parametrize("flush", [False, True], ids=["flush-off", "flush-on"])
def test_share_coordinator_keeps_its_state_when_the_append_fails(make_broker, flush):
    broker = make_broker(config={"log.flush.interval.messages": 1} if flush else None)
    service = broker.server.share_coordinator
    key = ShareStateKey("records-first", uuid.uuid4(), 0)

    fut, _ = _run(broker, lambda: service.initialize(key, state_epoch=0, start_offset=5))
    assert _await(broker, fut) == ErrorCode.none
    fut, _ = _run(broker, lambda: service.write(key, state_epoch=0, start_offset=7, delivery_complete_count=1,
                                                state_batches=[StateBatch(8, 9, 2, 1)]))
    assert _await(broker, fut) == ErrorCode.none
    before = broker.call(lambda: (service.coordinator.state(key), service.coordinator.read_summary(key, leader_epoch=0)))
    end_before = broker.call(lambda: broker.server.state.topics[SHARE_GROUP_STATE_TOPIC]
                             .partitions[service.coordinator.partition_for(key)].log.log_end_offset)

    with AppendFault(broker, SHARE_GROUP_STATE_TOPIC):
        fut, _ = _run(broker, lambda: service.write(key, state_epoch=0, start_offset=20, delivery_complete_count=0))
        outcome = _await(broker, fut)
        assert isinstance(outcome, OSError) and outcome.errno == errno.ENOSPC
        fut, _ = _run(broker, lambda: service.initialize(key, state_epoch=3, start_offset=100))
        assert isinstance(_await(broker, fut), OSError)
        after = broker.call(lambda: (service.coordinator.state(key), service.coordinator.read_summary(key, leader_epoch=0)))
        assert after == before
        assert broker.call(lambda: service.coordinator.state(key).start_offset) == 7

    # the log is as it was, and the next write goes on from the stored state
    assert broker.call(lambda: broker.server.state.topics[SHARE_GROUP_STATE_TOPIC]
                       .partitions[service.coordinator.partition_for(key)].log.log_end_offset) == end_before
    fut, _ = _run(broker, lambda: service.write(key, state_epoch=0, start_offset=10, delivery_complete_count=0))
    assert _await(broker, fut) == ErrorCode.none
    assert broker.call(lambda: service.coordinator.state(key).start_offset) == 10
    assert broker.server.halted is False


def _group_view(broker, group_id: str):
    service = broker.server.share_groups

    def read():
        group = service.coordinator.group(group_id)
        timers = sorted(k for k in broker.server.timers._deadlines if isinstance(k, tuple) and k[1] == group_id)
        return (image_of(group, service.state_metadata.get(group_id)), service._images.get(group_id),
                sorted(group.members) if group else None, group.group_epoch if group else None, timers)
    return broker.call(read)


def test_share_group_coordinator_keeps_the_group_when_a_heartbeat_cannot_be_stored(make_broker):
    broker = make_broker()
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "rf-topic")
    group = "rf-group"
    first = ShareClient(bootstrap, group)
    second = ShareClient(bootstrap, group)
    try:
        assert first.join(["rf-topic"]).error_code == ErrorCode.none
        before = _group_view(broker, group)
        assert before[2] == [first.member_id]
        with AppendFault(broker, CONSUMER_OFFSETS_TOPIC):
            resp = second.join(["rf-topic"])
            assert resp.error_code == ErrorCode.not_coordinator, resp
            assert _group_view(broker, group) == before
            resp = first.leave()
            assert resp.error_code == ErrorCode.not_coordinator, resp
            assert _group_view(broker, group) == before
        assert second.join(["rf-topic"]).error_code == ErrorCode.none
        after = _group_view(broker, group)
        assert sorted(after[2]) == sorted([first.member_id, second.member_id])
        assert after[0] == after[1]  # memory is what was written
    finally:
        first.close()
        second.close()
    assert broker.server.halted is False


def test_alter_share_group_offsets_that_cannot_be_stored_changes_nothing(make_broker):
    from kio.schema.alter_share_group_offsets.v0.request import (
        AlterShareGroupOffsetsRequest,
        AlterShareGroupOffsetsRequestPartition,
        AlterShareGroupOffsetsRequestTopic,
    )
    from support import RawClient

    broker = make_broker()
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "rf-alter")
    group = "rf-alter-group"
    member = ShareClient(bootstrap, group)
    try:
        assert member.join(["rf-alter"]).error_code == ErrorCode.none
        assert member.leave().error_code == ErrorCode.none
    finally:
        member.close()
    before = _group_view(broker, group)
    request = AlterShareGroupOffsetsRequest(group_id=group, topics=(AlterShareGroupOffsetsRequestTopic(
        topic_name="rf-alter", partitions=(AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0),)),))
    with AppendFault(broker, CONSUMER_OFFSETS_TOPIC), RawClient(bootstrap) as raw:
        resp = raw.request(request)
        assert resp.error_code == ErrorCode.not_coordinator, resp
        assert _group_view(broker, group) == before
    with RawClient(bootstrap) as raw:
        assert raw.request(request).error_code == ErrorCode.none
    assert _group_view(broker, group)[3] > before[3]


def test_a_group_that_becomes_empty_is_logged_not_silently_dropped(make_broker, caplog):
    """The GroupEmptied effect used to call a hook nothing defined; now the shell logs it (Kafka
    does nothing more for a share group that becomes empty: its share partitions keep their state)."""
    import logging

    broker = make_broker()
    create_topic(broker.bootstrap_servers, "rf-empty")
    member = ShareClient(broker.bootstrap_servers, "rf-empty-group")
    caplog.set_level(logging.INFO, logger="quafka.share_groups")
    try:
        assert member.join(["rf-empty"]).error_code == ErrorCode.none
        assert not any("is empty" in r.getMessage() for r in caplog.records)
        assert member.leave().error_code == ErrorCode.none
    finally:
        member.close()
    assert any(r.getMessage() == "share group rf-empty-group is empty; its share partitions keep their state"
               for r in caplog.records)
    assert broker.call(lambda: broker.server.share_groups.coordinator.group("rf-empty-group")) is not None
