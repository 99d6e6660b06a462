"""Each given-up record reaches the DLQ exactly once, also when its share partition is dropped and
read again while a DLQ write is in flight (issue 28, item 3).

Records found ARCHIVING when a share partition is loaded are written to the DLQ again
(`SharePartition.maybeResumeDlqArchiving`), and the writer first looks through the DLQ partition for
the dead letters already there. A share partition dropped (AlterShareGroupOffsets, a fenced state
epoch, DeleteShareGroupOffsets) and read again while the first load's write was still looking
started a second write that looked at the same time: neither found the other's dead letters, and
both wrote them. The writes of one share partition now run one after the other, across loads.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from support import set_group_configs, wait_until
from support.dlq import DLQ_TOPIC_CONFIGS, produce
from support.share_client import create_topic

from quafka.broker.core.record_state import RecordState
from quafka.protocol.share_state_records import ShareStateKey, StateBatch
from quafka.protocol.dead_letter_headers import HEADER_GROUP, HEADER_OFFSET

pytestmark = pytest.mark.timeout(90)

GROUP = "g"
TOPIC = "jobs"
DLQ = "dlq.jobs"
FILLER = 30_000  # dead letters of another group already in the DLQ partition: the look-through yields


def on_loop(broker, make_coroutine):
    fut = broker.call(lambda: asyncio.ensure_future(make_coroutine()))
    deadline = time.monotonic() + 20
    while not broker.call(fut.done):
        assert time.monotonic() < deadline, "the operation did not finish"
        time.sleep(0.01)
    return broker.call(fut.result)


def dead_letters_of(broker, group: str) -> list[int]:
    """Source offsets of the group's dead letters in the DLQ partition (read from its log)."""
    from quafka.broker.server.dead_letter_writer import _records

    def read():
        plog = broker.server.state.topics[DLQ].partitions[0].log
        return [int(dict(r.headers)[HEADER_OFFSET]) for r in _records(plog, 0, plog.log_end_offset - 1)
                if dict(r.headers).get(HEADER_GROUP) == group.encode()]
    return broker.call(read)


def test_a_share_partition_dropped_and_read_again_during_its_dlq_recovery_writes_each_dead_letter_once(
        make_broker):
    broker = make_broker()
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC, 1)
    create_topic(bootstrap, DLQ, 1, DLQ_TOPIC_CONFIGS)
    set_group_configs(bootstrap, GROUP, {"share.auto.offset.reset": "earliest",
                                         "errors.deadletterqueue.topic.name": DLQ})
    produce(bootstrap, TOPIC, [(None, b"poison-%d" % i, None) for i in range(3)])
    produce(bootstrap, DLQ, [(None, b"filler", [(HEADER_GROUP, b"other")]) for _ in range(FILLER)])
    key = ShareStateKey(GROUP, topic_id, 0)

    async def as_a_crash_left_it():  # offsets 0..2 stored ARCHIVING: their dead letters are due
        share_coordinator = broker.server.share_coordinator
        assert await share_coordinator.initialize(key, state_epoch=0, start_offset=0) == 0
        return await share_coordinator.write(key, state_epoch=0, start_offset=0, delivery_complete_count=0,
                                             state_batches=(StateBatch(0, 2, int(RecordState.ARCHIVING), 1),))

    assert on_loop(broker, as_a_crash_left_it) == 0

    async def load_drop_load():
        manager = broker.server.share_partitions
        first = await manager.get(GROUP, topic_id, 0)  # resumes the dead letters: one write, looking
        manager.drop_partitions(GROUP, topic_id, [0])  # as AlterShareGroupOffsets' first drop does
        second = await manager.get(GROUP, topic_id, 0)  # read again, still ARCHIVING: resumes again
        return first is not second

    assert on_loop(broker, load_drop_load)

    def archived():
        ctx = broker.server.share_partitions.loaded(GROUP, topic_id, 0)
        return ctx is not None and ctx.share_partition.start_offset == 3

    wait_until(lambda: broker.call(archived), 20, message="the records dead-lettered and archived")
    assert sorted(dead_letters_of(broker, GROUP)) == [0, 1, 2]  # before the fix: each twice
