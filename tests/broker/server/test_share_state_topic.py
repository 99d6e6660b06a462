"""Durable share state on `__share_group_state`, read back the way anyone outside the broker can:
a plain confluent-kafka `Consumer` reads the state partition, the records are decoded with
`decode_share_state_record` and replayed into a fresh `ShareCoordinator` (records are the truth).

- The KIP-932 "Examples with share-group state" table, driven on the wire by three share-group
  members (kio `ShareClient`s): after every step the replayed state equals the durable part of the
  KIP's cumulative state (acquisitions are never persisted), and every write is the one the KIP
  shows (the one deliberate difference is commented at its step).
- Snapshots every `share.coordinator.snapshot.update.records.per.snapshot` updates, cold
  snapshots, pruning of the state partition, and a restart that rebuilds the same state.
- Group commit: with flush on, one fsync per round of waiting writes; with flush off, none.
- A torn or garbage tail of the state partition's segment file is cut on restart and the state is
  the one of the last whole records.

No wall-clock assertions: waiting for a lock expiry, a prune or a cold snapshot is polling with a
deadline.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from kio.schema.errors import ErrorCode

from quafka.broker.core.record_state import RecordState
from quafka.broker.core.share_coordinator import ShareCoordinator
from quafka.protocol.partition_placement import share_state_partition
from quafka.protocol.share_state_records import (
    SHARE_GROUP_STATE_TOPIC,
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    STATE_ACKNOWLEDGED,
    STATE_ARCHIVED,
    STATE_AVAILABLE,
    ShareStateKey,
    StateBatch,
    decode_share_state_record,
)
from support import RawClient, produce_batch, set_group_configs, wait_until
from support.share_client import (
    ACCEPT,
    REJECT,
    RELEASE,
    RENEW,
    ShareClient,
    acquired_offsets,
    create_topic,
    partition_errors,
)

pytestmark = pytest.mark.timeout(120)

NONE = ErrorCode.none
AV, ACK, ARCH = STATE_AVAILABLE, STATE_ACKNOWLEDGED, STATE_ARCHIVED
STATE_PARTITIONS = 3  # share.coordinator.state.topic.num.partitions in these tests
LOCK_1S_BROKER = {"group.share.min.record.lock.duration.ms": 1000}


# ----------------------------------------------------------------------------- helpers

def open_session(client: ShareClient, tp) -> None:
    """An epoch-0 ShareFetch for `tp` that acquires nothing (the share partition starts at the log end)."""
    resp = client.fetch([tp], epoch=0, max_wait_ms=0)
    assert resp.error_code == NONE and acquired_offsets(resp) == {}, resp


def fetch(client: ShareClient, tp, **kw) -> list[tuple[int, int]]:
    """A ShareFetch; the (offset, delivery count) pairs it acquired on `tp`."""
    resp = client.fetch(max_wait_ms=5000, **kw)
    assert resp.error_code == NONE, resp
    return acquired_offsets(resp).get(tp, [])


def ack(client: ShareClient, tp, *batches, version: int = 1, is_renew_ack: bool = False) -> None:
    """A ShareAcknowledge of `batches` ((first, last, type)); the partition must answer NONE."""
    resp = client.acknowledge({tp: [(first, last, [t]) for first, last, t in batches]}, version=version,
                              is_renew_ack=is_renew_ack)
    assert resp.error_code == NONE, resp
    assert partition_errors(resp)[tp] == (NONE, None), resp


def renew(client: ShareClient, tp, *ranges) -> None:
    """Extend the member's locks on `ranges` (ShareAcknowledge v2 RENEW; never persisted)."""
    ack(client, tp, *((first, last, RENEW) for first, last in ranges), version=2, is_renew_ack=True)


class StateTopicReader:
    """A plain confluent-kafka Consumer on one partition of `__share_group_state` (assign, no group
    membership, no commits), reading to the high watermark and decoding what it reads."""

    def __init__(self, bootstrap: str, partition: int) -> None:
        self.partition = partition
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "state-topic-reader",
                                  "enable.auto.commit": False, "auto.offset.reset": "error",
                                  "fetch.wait.max.ms": 50, "log_level": 3})
        self.tp = TopicPartition(SHARE_GROUP_STATE_TOPIC, partition)
        self.records: list[tuple[int, object]] = []  # (offset, ShareStateRecord) read by read_new()
        self._assigned = False

    def close(self) -> None:
        self.consumer.close()

    def watermarks(self) -> tuple[int, int]:
        return self.consumer.get_watermark_offsets(self.tp, timeout=10, cached=False)

    def _read_to(self, high: int, out: list) -> None:
        """Poll, appending (offset, decoded record) to `out`, until the record before `high` is in."""
        def caught_up():
            if out and out[-1][0] >= high - 1:
                return True
            msg = self.consumer.poll(0.1)
            if msg is None:
                return False
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return False
                raise AssertionError(f"reading {SHARE_GROUP_STATE_TOPIC}-{self.partition}: {msg.error()}")
            out.append((msg.offset(), decode_share_state_record(msg.key(), msg.value())))
            return out[-1][0] >= high - 1

        wait_until(caught_up, 15, interval_s=0, message=f"the state partition up to offset {high}")

    def read_all(self) -> list[tuple[int, object]]:
        """Every record from the beginning (the log start offset) to the high watermark."""
        self.consumer.assign([TopicPartition(SHARE_GROUP_STATE_TOPIC, self.partition, OFFSET_BEGINNING)])
        self._assigned = False  # read_new() starts over
        out: list[tuple[int, object]] = []
        low, high = self.watermarks()
        if high > low:
            self._read_to(high, out)
        return out

    def read_new(self) -> list[tuple[int, object]]:
        """The records written since the last read_new() (the first one reads from the beginning)."""
        if not self._assigned:
            self.consumer.assign([TopicPartition(SHARE_GROUP_STATE_TOPIC, self.partition, OFFSET_BEGINNING)])
            self._assigned = True
            self.records = []
        before = len(self.records)
        low, high = self.watermarks()
        if high > max(low, self.records[-1][0] + 1 if self.records else 0):
            self._read_to(high, self.records)
        return self.records[before:]


def replay(records, partition: int, num_partitions: int = STATE_PARTITIONS) -> ShareCoordinator:
    """A fresh share coordinator with `records` ((offset, ShareStateRecord)) replayed into `partition`."""
    machine = ShareCoordinator(num_partitions)
    machine.begin_loading(partition)
    for offset, record in records:
        machine.replay(partition, offset, record)
    machine.finish_loading(partition)
    return machine


def durable(state) -> tuple[int, dict[int, tuple[int, int]]]:
    """(start offset, {offset: (delivery state, delivery count)}) of a replayed ShareState."""
    by_offset = {}
    for b in state.state_batches:
        for o in range(b.first_offset, b.last_offset + 1):
            by_offset[o] = (b.delivery_state, b.delivery_count)
    return state.start_offset, by_offset


def terminal_past_start(state) -> int:
    """The offsets at or past the start offset that the durable state holds as ACKNOWLEDGED or
    ARCHIVED: what its DeliveryCompleteCount must be (KIP-1226)."""
    start, done = durable(state)
    return sum(1 for o, (s, _count) in done.items() if o >= start and s in (ACK, ARCH))


def offsets(first: int, last: int, state: int, count: int) -> dict[int, tuple[int, int]]:
    return {o: (state, count) for o in range(first, last + 1)}


def state_key(group: str, topic_id: uuid.UUID) -> ShareStateKey:
    return ShareStateKey(group, topic_id, 0)


def live_state(broker, key: ShareStateKey):
    """The broker's share coordinator state of `key` (a copy), read on the broker's loop."""
    return broker.call(lambda: broker.server.share_coordinator.coordinator.state(key))


def state_log(broker, partition: int):
    return broker.server.state.topics[SHARE_GROUP_STATE_TOPIC].partitions[partition].log


# ----------------------------------------------------------------------------- KIP-932 examples

def test_kip_share_state_examples_replay_from_the_state_topic(make_broker):
    """KIP-932 "Examples with share-group state": topic partition with latest offset 100, then the
    batched case (100-109) and the messier sequence of releases, acknowledgements and a lock
    timeout over 110-120, with three consumers and a 1 s acquisition lock."""
    group, topic = "kip-g1", "kip-topic"
    broker = make_broker(config={**LOCK_1S_BROKER, "share.coordinator.state.topic.num.partitions": STATE_PARTITIONS})
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, topic)
    tp = (topic_id, 0)
    key = state_key(group, topic_id)
    set_group_configs(bootstrap, group, {"share.record.lock.duration.ms": "1000", "share.auto.offset.reset": "latest"})
    assert produce_batch(bootstrap, topic, 100, tag="filler") == 0  # latest offset 100

    c1, c2, c3 = clients = [ShareClient(bootstrap, group) for _ in range(3)]
    for c in clients:
        assert c.join([topic]).error_code == NONE
    for c in clients:
        c.wait_for_assignment(lambda a: a.get(topic_id) == [0])
    for c in clients:
        open_session(c, tp)

    reader = StateTopicReader(bootstrap, share_state_partition(group, topic_id, 0, STATE_PARTITIONS))
    seen = 0
    # the share partition's first read records the leader epoch in the background: let it land
    wait_until(lambda: _state_writes_settled(broker, reader.partition), 10, message="the state partition to be quiet")

    def step(expected_start: int, expected_offsets: dict[int, tuple[int, int]]):
        """Read the state partition from the beginning, replay it and compare the durable state;
        returns the records written since the previous step."""
        nonlocal seen
        records = reader.read_all()
        assert all(r.key == key for _o, r in records), records
        replayed = replay(records, reader.partition).state(key)
        assert durable(replayed) == (expected_start, expected_offsets)
        assert replayed.delivery_complete_count == terminal_past_start(replayed)
        new, seen = records[seen:], len(records)
        return [r for _o, r in new]

    def only_update(new):
        assert len(new) == 1 and new[0].record_type == SHARE_UPDATE, new
        return new[0].value

    try:
        # Starting state of topic-partition with latest offset 100: SPSO=100 (the group
        # coordinator's initialize wrote start -1; the share partition resolved "latest" and wrote 100).
        new = step(100, {})
        assert new[0].record_type == SHARE_SNAPSHOT and new[0].value.start_offset == -1, new
        assert [(r.value.start_offset, r.value.state_batches) for r in new[1:] if r.value.start_offset != -1] \
            == [(100, ())], new

        # Fetch records 100-109: nothing persisted
        assert produce_batch(bootstrap, topic, 10) == 100
        assert fetch(c1, tp) == [(o, 1) for o in range(100, 110)]
        assert step(100, {}) == []

        # Acknowledge 100-109: SPSO=110; the write has no state batches, only the start offset
        ack(c1, tp, (100, 109, ACCEPT))
        value = only_update(step(110, {}))
        assert (value.start_offset, value.state_batches) == (110, ())

        # Fetch records 110-119: consumer 1 gets 110-112, consumer 2 113-118, consumer 3 119
        # (whole producer batches; nothing persisted)
        assert [produce_batch(bootstrap, topic, n) for n in (3, 6, 1)] == [110, 113, 119]
        assert fetch(c1, tp, max_records=3) == [(o, 1) for o in range(110, 113)]
        assert fetch(c2, tp, max_records=6) == [(o, 1) for o in range(113, 119)]
        assert fetch(c3, tp, max_records=1) == [(119, 1)]
        held = {c1: [(110, 112)], c2: [(113, 118)], c3: [(119, 119)]}
        assert step(110, {}) == []

        def keep_locks():
            """Renew every lock the members hold (renewals are not persisted), so that no step
            depends on how long the ones before it took; only the expiry below lets locks run out."""
            for c, ranges in held.items():
                if ranges:
                    renew(c, tp, *ranges)

        # Release 110 (consumer 1)
        keep_locks()
        ack(c1, tp, (110, 110, RELEASE))
        held[c1] = [(111, 112)]
        value = only_update(step(110, offsets(110, 110, AV, 1)))
        assert (value.start_offset, value.state_batches) == (-1, (StateBatch(110, 110, AV, 1),))

        # Acknowledge 119 (consumer 3)
        keep_locks()
        ack(c3, tp, (119, 119, ACCEPT))
        held[c3] = []
        value = only_update(step(110, {**offsets(110, 110, AV, 1), **offsets(119, 119, ACK, 1)}))
        assert (value.start_offset, value.state_batches) == (-1, (StateBatch(119, 119, ACK, 1),))

        # Fetch records 110, 120 (consumer 1): 110 redelivered (count 2), 120 new; consumer 1 still
        # holds 111-112, so only 110 comes back of them. Acquisitions are not persisted: 110 is still
        # durably AVAILABLE with delivery count 1.
        keep_locks()
        assert produce_batch(bootstrap, topic, 1) == 120
        assert fetch(c1, tp) == [(110, 2), (120, 1)]
        assert step(110, {**offsets(110, 110, AV, 1), **offsets(119, 119, ACK, 1)}) == []

        # Lock timeout elapsed 111, 112 (consumer 1's records): every other lock is still renewed
        # while waiting, so only 111-112 expire.
        held[c1] = [(110, 110), (120, 120)]

        def share_partition():
            return broker.server.share_partitions.contexts[(group, topic_id, 0)].share_partition

        def expired():
            keep_locks()
            return all(broker.call(lambda: share_partition().record(o)) == (RecordState.AVAILABLE, 1, None)
                       for o in (111, 112))

        wait_until(expired, 10, interval_s=0.05, message="consumer 1's locks on 111-112 to expire")
        expected = {**offsets(110, 112, AV, 1), **offsets(119, 119, ACK, 1)}
        wait_until(lambda: durable(live_state(broker, key)) == (110, expected), 10,
                   message="the lock expiry to be written")
        value = only_update(step(110, expected))
        assert (value.start_offset, value.state_batches) == (-1, (StateBatch(111, 112, AV, 1),))

        # Acknowledge 113-118 (consumer 2)
        keep_locks()
        ack(c2, tp, (113, 118, ACCEPT))
        held[c2] = []
        value = only_update(step(110, {**offsets(110, 112, AV, 1), **offsets(113, 119, ACK, 1)}))
        assert (value.start_offset, value.state_batches) == (-1, (StateBatch(113, 118, ACK, 1),))

        # Fetch records 111, 112 (consumer 3): delivery count 2, not persisted
        keep_locks()
        assert fetch(c3, tp) == [(111, 2), (112, 2)]
        held[c3] = [(111, 112)]
        assert step(110, {**offsets(110, 112, AV, 1), **offsets(113, 119, ACK, 1)}) == []

        # Acknowledge 110 (consumer 1): SPSO=111. The KIP's table shows StartOffset -1 with the
        # batch 110 ACKNOWLEDGED/2 here; quafka's write carries the moved start offset instead (111,
        # docs/durability.md "What a write holds"), so the durable start offset keeps up with the
        # SPSO. A batch it carried below that start would be dropped on replay anyway.
        keep_locks()
        ack(c1, tp, (110, 110, ACCEPT))
        held[c1] = [(120, 120)]
        value = only_update(step(111, {**offsets(111, 112, AV, 1), **offsets(113, 119, ACK, 1)}))
        assert value.start_offset == 111
        assert all(b.last_offset < 111 for b in value.state_batches), value

        # Acknowledge 111, 112 (consumer 3): SPSO=120 (120 is still acquired by consumer 1)
        keep_locks()
        ack(c3, tp, (111, 112, ACCEPT))
        value = only_update(step(120, {}))
        assert (value.start_offset, value.state_batches) == (120, ())
        assert broker.call(lambda: share_partition().record(120)) == (RecordState.ACQUIRED, 1, c1.member_id)
    finally:
        reader.close()
        for c in clients:
            c.close()


# ----------------------------------------------------------------------------- snapshots, pruning, restart

def test_snapshots_appear_and_pruning_moves_the_log_start_offset(make_broker, tmp_path):
    """With a snapshot every 10 updates: 36 acknowledged writes on one share partition come out as
    snapshot, 10 updates, snapshot, ... (each snapshot holding the fully combined state); the cold
    snapshot then folds the trailing updates, pruning moves the state partition's log start offset
    up to the latest snapshot so nothing before it can be read, and a restart rebuilds the same state
    from what is left."""
    group, topic = "snap-g", "snap-topic"
    config = {"share.coordinator.state.topic.num.partitions": STATE_PARTITIONS,
              "share.coordinator.snapshot.update.records.per.snapshot": 10,
              "share.coordinator.state.topic.prune.interval.ms": 200,
              "share.coordinator.cold.partition.snapshot.interval.ms": 2000}
    data_dir = str(tmp_path / "data")
    broker = make_broker(data_dir=data_dir, config=config)
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, topic)
    tp = (topic_id, 0)
    key = state_key(group, topic_id)
    p = share_state_partition(group, topic_id, 0, STATE_PARTITIONS)
    client = ShareClient(bootstrap, group)
    open_session(client, tp)  # initialises the share partition at the log end: a snapshot, start 0
    assert produce_batch(bootstrap, topic, 80) == 0
    assert fetch(client, tp) == [(o, 1) for o in range(80)]

    # 36 writes, each read back before the next one (pruning runs every 200 ms and would otherwise
    # take the early records away before they are read): odd offsets 1..69 accepted / rejected one
    # by one, then everything still held released in one request. (Should the writes be slow, a
    # cold snapshot may come in between: read_new() then returns it too.)
    reader = StateTopicReader(bootstrap, p)
    try:
        assert [r.record_type for _o, r in reader.read_new()] == [SHARE_SNAPSHOT]
        for i, o in enumerate(range(1, 70, 2)):
            ack(client, tp, (o, o, ACCEPT if i % 2 == 0 else REJECT))
            assert reader.read_new()
        held = [(o, o, RELEASE) for o in range(0, 70, 2)] + [(70, 79, RELEASE)]
        ack(client, tp, *held)
        assert reader.read_new()
        records = list(reader.records)
    finally:
        reader.close()

    expected = (0, {**{o: (AV, 1) for o in range(0, 70, 2)},
                    **{o: (ACK if (o // 2) % 2 == 0 else ARCH, 1) for o in range(1, 70, 2)},
                    **offsets(70, 79, AV, 1)})
    assert all(r.key == key for _o, r in records)
    assert durable(replay(records, p).state(key)) == expected
    assert replay(records, p).state(key).delivery_complete_count == 35

    # A snapshot after each 10 updates. The broker may interleave a cold snapshot (one that changes
    # nothing) only if the writes above were slow; each snapshot holds the whole combined state.
    types = [r.record_type for _o, r in records]
    assert types[0] == SHARE_SNAPSHOT, types
    updates_in_a_row = 0
    write_snapshots = cold_snapshots = 0
    for i, (_offset, record) in enumerate(records):
        if record.record_type == SHARE_UPDATE:
            updates_in_a_row += 1
            assert updates_in_a_row <= 10, types
            continue
        if i:
            before, after = replay(records[:i], p).state(key), replay(records[:i + 1], p).state(key)
            changed = (durable(after), after.delivery_complete_count) != \
                (durable(before), before.delivery_complete_count)
            if changed:  # every write above changes the state: the 11th record after a snapshot
                assert updates_in_a_row == 10, (i, types)
                write_snapshots += 1
            else:  # a cold snapshot: folds the updates, changes nothing
                cold_snapshots += 1
            assert after.snapshot_epoch == before.snapshot_epoch + 1
            alone = replay(records[i:i + 1], p).state(key)
            assert (durable(alone), alone.delivery_complete_count) == (durable(after), after.delivery_complete_count)
        updates_in_a_row = 0
    assert len(records) - cold_snapshots == 37, types  # the initial snapshot and one record per write
    if not cold_snapshots:
        assert write_snapshots == 3 and [i for i, t in enumerate(types) if t == SHARE_SNAPSHOT] == [0, 11, 22, 33]

    # The cold snapshot folds the trailing updates; pruning then moves the log start up to it.
    plog = state_log(broker, p)
    wait_until(lambda: live_state(broker, key).updates_since_snapshot == 0, 15,
               message="a cold snapshot of the share partition")
    snapshot_offset = live_state(broker, key).snapshot_offset
    assert snapshot_offset >= records[-1][0]
    wait_until(lambda: broker.call(lambda: plog.log_start_offset) == snapshot_offset, 15,
               message=f"pruning to move the log start offset to {snapshot_offset}")

    reader = StateTopicReader(bootstrap, p)
    try:
        assert reader.watermarks() == (snapshot_offset, snapshot_offset + 1)
        left = reader.read_all()
    finally:
        reader.close()
    assert [(o, r.record_type) for o, r in left] == [(snapshot_offset, SHARE_SNAPSHOT)]
    assert durable(replay(left, p).state(key)) == expected

    # Restart: the state replayed from the pruned log equals the state before.
    before = live_state(broker, key)
    assert durable(before) == expected and before.delivery_complete_count == 35
    client.close()
    broker.stop()
    broker = make_broker(data_dir=data_dir, config=config)
    after = live_state(broker, key)
    assert (after.start_offset, after.state_batches, after.delivery_complete_count) == \
        (before.start_offset, before.state_batches, before.delivery_complete_count)
    assert after == before
    assert broker.call(lambda: state_log(broker, p).log_start_offset) == snapshot_offset

    # ... and serves it: the released records come back with delivery count 2.
    client = ShareClient(broker.bootstrap_servers, group)
    try:
        got = fetch(client, tp, partitions=[tp], epoch=0)
        assert got == [(o, 2) for o in sorted({*range(0, 70, 2), *range(70, 80)})]
    finally:
        client.close()


# ----------------------------------------------------------------------------- group commit

def _members_holding_one_record_each(broker, group: str, topic: str, n: int, *, join: bool = False):
    """`n` members of `group` (joined through the heartbeat if `join`), each holding one record (its
    own producer batch) of `topic`: {client: offset}."""
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, topic)
    tp = (topic_id, 0)
    clients = [ShareClient(bootstrap, group) for _ in range(n)]
    if join:
        for c in clients:
            assert c.join([topic]).error_code == NONE
        for c in clients:
            c.wait_for_assignment(lambda a: a.get(topic_id) == [0])
    for c in clients:
        open_session(c, tp)
    for i in range(n):
        assert produce_batch(bootstrap, topic, 1) == i
    held = {}
    for c in clients:
        got = fetch(c, tp, max_records=1)
        assert len(got) == 1 and got[0][1] == 1, got
        held[c] = got[0][0]
    assert sorted(held.values()) == list(range(n))
    return tp, held


def _state_writes_settled(broker, p: int) -> bool:
    """No write round queued or running on state partition `p`, and (with flush on) everything in
    its log fsynced: the white-box quiet point before counting."""
    def read():
        service = broker.server.share_coordinator
        plog = state_log(broker, p)
        flushed = not service.flush_enabled(plog) or plog.flushed_offset >= plog.log_end_offset
        return (not service._queues.get(p) and p not in service._draining
                and plog not in broker.server.flusher._in_flight and flushed)
    return broker.call(read)


def _acknowledge_all_at_once(tp, held: dict) -> dict:
    """Every member acknowledges its record from its own thread, released together by a barrier;
    {member id: (top-level error, partition errors)}."""
    barrier = threading.Barrier(len(held))
    results: dict = {}

    def run(client: ShareClient, offset: int) -> None:
        barrier.wait(10)
        try:
            resp = client.acknowledge({tp: [(offset, offset, [ACCEPT])]})
            results[client.member_id] = (resp.error_code, partition_errors(resp))
        except Exception as exc:  # noqa: BLE001 - reported below
            results[client.member_id] = exc

    threads = [threading.Thread(target=run, args=(c, o)) for c, o in held.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    return results


def assert_all_acknowledged(state, n: int) -> None:
    """Durably, every offset below `n` is done: below the start offset or ACKNOWLEDGED.

    With writes in flight at the same time the durable start offset may stay below `n` for a while:
    a write carries the start offset as of its start, which does not pass records whose write is
    still in flight; those records sit in ACKNOWLEDGED batches past the durable start offset until
    the share partition's catch-up write once the writes are done. (The
    DeliveryCompleteCount is checked by
    test_delivery_complete_count_counts_acknowledgements_whose_writes_overlap.)"""
    start, done = durable(state)
    assert all(o < start or done.get(o) == (ACK, 1) for o in range(n)), (start, done)
    assert set(done) <= set(range(start, n)), (start, done)


def _counters(broker, p: int) -> tuple[int, int]:
    """(fsyncs of state partition `p`'s log, write rounds of the share coordinator)."""
    return broker.call(lambda: (state_log(broker, p).flush_count, broker.server.share_coordinator.rounds))


def test_flush_fsyncs_once_per_round_of_waiters(make_broker):
    """With flush on for the state topic, 32 members acknowledging at the same moment are answered
    after fsyncs that each cover a whole round of waiting writes: fsyncs <= rounds < acknowledgements."""
    group, topic, n = "commit-g", "commit-topic", 32
    broker = make_broker(config={"log.flush.interval.messages": 1,
                                 "share.coordinator.state.topic.num.partitions": STATE_PARTITIONS})
    tp, held = _members_holding_one_record_each(broker, group, topic, n)
    key = state_key(group, tp[0])
    p = share_state_partition(group, tp[0], 0, STATE_PARTITIONS)
    try:
        wait_until(lambda: _state_writes_settled(broker, p), 10, message="the state partition to be quiet")
        flushes_before, rounds_before = _counters(broker, p)
        end_before = broker.call(lambda: state_log(broker, p).log_end_offset)

        results = _acknowledge_all_at_once(tp, held)

        assert results == {c.member_id: (NONE, {tp: (NONE, None)}) for c in held}
        # the overlapping writes may be followed by one write that catches the stored start offset up
        wait_until(lambda: _state_writes_settled(broker, p), 10, message="the state partition to be quiet")
        flushes_after, rounds_after = _counters(broker, p)
        fsyncs, rounds = flushes_after - flushes_before, rounds_after - rounds_before
        assert 1 <= fsyncs <= rounds < n, (fsyncs, rounds)
        # every acknowledgement was written (one record each) and is in the durable state
        assert n <= broker.call(lambda: state_log(broker, p).log_end_offset) - end_before <= n + 1
        assert_all_acknowledged(live_state(broker, key), n)
        assert durable(live_state(broker, key))[0] == n  # the stored start offset caught up
    finally:
        for c in held:
            c.close()


def test_acknowledgements_do_not_fsync_the_state_topic_when_flush_is_off(make_broker):
    """With the default flush settings (flush.messages = Long.MAX_VALUE) the state topic is never
    fsynced for acknowledgements: the writes are in the segment file when answered, nothing more."""
    group, topic, n = "noflush-g", "noflush-topic", 8
    broker = make_broker(config={"share.coordinator.state.topic.num.partitions": STATE_PARTITIONS})
    tp, held = _members_holding_one_record_each(broker, group, topic, n)
    key = state_key(group, tp[0])
    p = share_state_partition(group, tp[0], 0, STATE_PARTITIONS)
    try:
        wait_until(lambda: _state_writes_settled(broker, p), 10, message="the state partition to be quiet")
        flushes_before, rounds_before = _counters(broker, p)

        results = _acknowledge_all_at_once(tp, held)

        assert results == {c.member_id: (NONE, {tp: (NONE, None)}) for c in held}
        flushes_after, rounds_after = _counters(broker, p)
        assert rounds_after > rounds_before
        assert flushes_after == flushes_before
        assert_all_acknowledged(live_state(broker, key), n)
    finally:
        for c in held:
            c.close()


def test_delivery_complete_count_counts_acknowledgements_whose_writes_overlap(make_broker):
    """Two members accept records 0 and 1 while the other's write is still in flight (two
    ShareAcknowledge requests served at the same time; here made deterministic by starting both
    acknowledgements on the broker's loop in one go, the call the handler makes). Durably, the
    DeliveryCompleteCount must count every ACKNOWLEDGED record at or past the start offset, so that
    DescribeShareGroupOffsets v1 reports lag 1 (record 2 is still unacknowledged)."""
    from kio.schema.describe_share_group_offsets.v1.request import (
        DescribeShareGroupOffsetsRequest,
        DescribeShareGroupOffsetsRequestGroup,
        DescribeShareGroupOffsetsRequestTopic,
    )

    group, topic, n = "overlap-g", "overlap-topic", 3
    broker = make_broker(config={"share.coordinator.state.topic.num.partitions": STATE_PARTITIONS})
    bootstrap = broker.bootstrap_servers
    tp, held = _members_holding_one_record_each(broker, group, topic, n, join=True)
    key = state_key(group, tp[0])
    try:
        manager = broker.server.share_partitions

        def start_both():
            ctx = manager.loaded(group, tp[0], 0)
            group_config = broker.server.state.group_config(group)
            return [asyncio.ensure_future(manager.acknowledge(ctx, c.member_id, [(o, o, [ACCEPT])], group_config))
                    for c, o in held.items() if o in (0, 1)]

        tasks = broker.call(start_both)
        wait_until(lambda: broker.call(lambda: all(t.done() for t in tasks)), 10, message="both acknowledgements")
        assert broker.call(lambda: [t.result() for t in tasks]) == [NONE, NONE]
        assert broker.call(lambda: manager.contexts[(group, tp[0], 0)].share_partition.start_offset) == 2

        reader = StateTopicReader(bootstrap, share_state_partition(group, tp[0], 0, STATE_PARTITIONS))
        try:
            replayed = replay(reader.read_all(), reader.partition).state(key)
        finally:
            reader.close()
        start, done = durable(replayed)
        assert all(o < start or done.get(o) == (ACK, 1) for o in (0, 1)), (start, done)
        with RawClient(bootstrap) as raw:
            resp = raw.request(DescribeShareGroupOffsetsRequest(groups=(DescribeShareGroupOffsetsRequestGroup(
                group_id=group, topics=(DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=(0,)),)),)))
        part = resp.groups[0].topics[0].partitions[0]
        assert part.error_code == NONE, part
        # (DeliveryCompleteCount, lag) as written and as reported; the state is shown on failure
        assert (replayed.delivery_complete_count, part.lag) == (terminal_past_start(replayed), 1), \
            f"durable start offset {start}, batches {replayed.state_batches}, DescribeShareGroupOffsets {part}"
    finally:
        for c in held:
            c.close()


# ----------------------------------------------------------------------------- torn tail

def _active_segment(data_dir: str, partition: int) -> str:
    """The segment file with the highest base offset of `__share_group_state-<partition>`."""
    directory = os.path.join(data_dir, f"{SHARE_GROUP_STATE_TOPIC}-{partition}")
    segments = sorted(n for n in os.listdir(directory) if n.endswith(".log") and len(n) == 24 and n[:20].isdigit())
    assert segments, os.listdir(directory)
    return os.path.join(directory, segments[-1])


@pytest.mark.parametrize("damage", ["cut_inside_the_last_batch", "garbage_after_the_last_batch"])
def test_torn_tail_of_the_state_topic_is_dropped_on_restart(make_broker, tmp_path, caplog, damage):
    """Four writes, then the broker stops and the state partition's active segment is damaged: its
    last bytes cut (a write torn by a crash) or junk appended. On restart the broker starts, the
    state is the one of the last whole records (before the last write when it was cut, all of it
    otherwise), the share partition serves that state, new writes land after the whole records, and
    nothing is logged as an error."""
    caplog.set_level(logging.INFO, logger="quafka")
    group, topic = "torn-g", "torn-topic"
    config = {"share.coordinator.state.topic.num.partitions": STATE_PARTITIONS}
    data_dir = str(tmp_path / "data")
    broker = make_broker(data_dir=data_dir, config=config)
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, topic)
    tp = (topic_id, 0)
    key = state_key(group, topic_id)
    p = share_state_partition(group, topic_id, 0, STATE_PARTITIONS)
    client = ShareClient(bootstrap, group)
    open_session(client, tp)
    assert produce_batch(bootstrap, topic, 5) == 0
    assert fetch(client, tp) == [(o, 1) for o in range(5)]
    ack(client, tp, (0, 0, ACCEPT))
    ack(client, tp, (2, 2, REJECT))
    ack(client, tp, (1, 1, ACCEPT))  # start offset 3
    before_last = live_state(broker, key)
    end_before_last = broker.call(lambda: state_log(broker, p).log_end_offset)
    assert durable(before_last) == (3, {})
    ack(client, tp, (3, 4, RELEASE))  # the last write: 3-4 AVAILABLE, delivery count 1
    last = live_state(broker, key)
    end_last = broker.call(lambda: state_log(broker, p).log_end_offset)
    assert durable(last) == (3, offsets(3, 4, AV, 1)) and end_last == end_before_last + 1
    client.close_session()
    client.close()
    broker.stop()

    segment = _active_segment(data_dir, p)
    size = os.path.getsize(segment)
    if damage == "cut_inside_the_last_batch":
        os.truncate(segment, size - 7)
        expected, expected_end, redelivery_count = before_last, end_before_last, 1
    else:
        with open(segment, "ab") as f:
            f.write(b"\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x01\x00" + b"\xde\xad\xbe\xef" * 16)
        expected, expected_end, redelivery_count = last, end_last, 2
    caplog.clear()

    broker = make_broker(data_dir=data_dir, config=config)
    bootstrap = broker.bootstrap_servers
    assert live_state(broker, key) == expected
    assert broker.call(lambda: state_log(broker, p).log_end_offset) == expected_end
    if damage == "cut_inside_the_last_batch":  # the torn batch is cut whole
        assert os.path.getsize(segment) < size - 7
    else:  # the junk is cut, the whole batches stay
        assert os.path.getsize(segment) == size

    # the share partition serves the recovered state: 3-4 come back (count 2 only if the release
    # survived), and accepting them writes right after the last whole record
    client = ShareClient(bootstrap, group)
    try:
        assert fetch(client, tp, partitions=[tp], epoch=0) == [(3, redelivery_count), (4, redelivery_count)]
        ack(client, tp, (3, 4, ACCEPT))
    finally:
        client.close()
    reader = StateTopicReader(bootstrap, p)
    try:
        records = reader.read_all()
    finally:
        reader.close()
    assert records[-1][0] == expected_end
    assert [o for o, _r in records] == list(range(records[0][0], expected_end + 1))
    replayed = replay(records, p).state(key)
    assert durable(replayed) == durable(live_state(broker, key)) == (5, {})

    logged = [(r.name, r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith("quafka")]
    assert any(name == "quafka.server" for name, _level, _msg in logged), logged  # the broker's log is seen
    assert [entry for entry in logged if entry[1] >= logging.ERROR] == []
