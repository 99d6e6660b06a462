"""The share coordinator shard (kafka-reference §2.7, §3.1, §3.2, §7), on virtual time.

`Shard` plays the shell: it appends the records an operation returns to the state partition's log
(offsets 0, 1, ...) and replays them before the next operation, and prunes the logs as the shell
would. A Hypothesis state machine drives random operations against a naive per-offset model and
restarts from the (pruned) logs: the rebuilt coordinator must equal the running one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from quafka.broker.core.share_coordinator import (
    ReadResult,
    ReadSummaryResult,
    ShareCoordinator,
    combine_batches,
)
from quafka.protocol.share_state_records import (
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    STATE_ACKNOWLEDGED,
    STATE_ARCHIVED,
    STATE_ARCHIVING,
    STATE_AVAILABLE,
    ShareSnapshotValue,
    ShareStateKey,
    ShareStateRecord,
    ShareUpdateValue,
    StateBatch,
)
from quafka.protocol.errors import ErrorCode

AV, ACK, ARCH = STATE_AVAILABLE, STATE_ACKNOWLEDGED, STATE_ARCHIVED
E = ErrorCode
PARTITIONS = 3
K1 = ShareStateKey("g1", uuid.UUID(int=1), 0)
K2 = ShareStateKey("g1", uuid.UUID(int=1), 1)
K3 = ShareStateKey("g2", uuid.UUID(int=2), 0)
KEYS = (K1, K2, K3)


def B(first, last, state, count):  # noqa: N802 - reads like the record it builds
    return StateBatch(first, last, state, count)


class Shard:
    """A coordinator with all partitions loaded, plus the logs the shell would keep."""

    def __init__(self, per_snapshot: int = 500, num_partitions: int = PARTITIONS) -> None:
        self.c = ShareCoordinator(num_partitions, per_snapshot)
        self.logs: dict[int, list[ShareStateRecord]] = {p: [] for p in range(num_partitions)}
        self.log_start = dict.fromkeys(self.logs, 0)  # the first offset not pruned
        self.now = 1_000
        for p in range(num_partitions):
            self.c.begin_loading(p)
            self.c.finish_loading(p)

    def apply(self, records):
        for record in records:
            p = self.c.partition_for(record.key)
            self.logs[p].append(record)
            self.c.replay(p, len(self.logs[p]) - 1, record)
        return records

    def init(self, key=K1, state_epoch=0, start_offset=0):
        error, records = self.c.initialize(key, state_epoch=state_epoch, start_offset=start_offset, now_ms=self.now)
        self.apply(records)
        return error, records

    def read(self, key=K1, leader_epoch=0):
        result, records = self.c.read(key, leader_epoch=leader_epoch, now_ms=self.now)
        self.apply(records)
        return result, records

    def write(self, key=K1, batches=(), start_offset=-1, dcc=-1, state_epoch=0, leader_epoch=0):
        error, records = self.c.write(key, state_epoch=state_epoch, leader_epoch=leader_epoch,
                                      start_offset=start_offset, delivery_complete_count=dcc,
                                      state_batches=batches, now_ms=self.now)
        self.apply(records)
        return error, records

    def delete(self, key=K1):
        error, records = self.c.delete(key, now_ms=self.now)
        self.apply(records)
        return error, records

    def cold(self, partition, interval_ms):
        return self.apply(self.c.cold_snapshots(partition, now_ms=self.now, interval_ms=interval_ms))

    def log_of(self, key):
        return self.logs[self.c.partition_for(key)]

    def prune(self) -> None:
        """Delete each partition's records below its prune offset, as the shell does."""
        for p in self.logs:
            offset = self.c.prune_offset(p)
            if offset is not None:
                assert offset >= self.log_start[p]  # the prune point never moves back
                self.log_start[p] = offset

    def replayed(self, pruned: bool = False) -> ShareCoordinator:
        """A fresh coordinator loaded from the logs (from each prune offset on when `pruned`)."""
        fresh = ShareCoordinator(self.c.num_partitions, self.c.snapshot_update_records_per_snapshot)
        for p, log in self.logs.items():
            fresh.begin_loading(p)
            start = max(self.c.prune_offset(p) or 0, self.log_start[p]) if pruned else self.log_start[p]
            for offset in range(start, len(log)):
                fresh.replay(p, offset, log[offset])
            fresh.finish_loading(p)
        return fresh


def kinds(records):
    return [("tombstone" if r.value is None else "snapshot" if r.record_type == SHARE_SNAPSHOT else "update")
            for r in records]


# ----------------------------------------------------------------------------- loading


def test_a_new_coordinator_answers_load_in_progress_until_the_partition_is_loaded():
    c = ShareCoordinator(PARTITIONS)
    p = c.partition_for(K1)
    assert not c.is_loaded(p)
    assert c.initialize(K1, state_epoch=0, start_offset=0, now_ms=0) == (E.coordinator_load_in_progress, [])
    assert c.read(K1, leader_epoch=0, now_ms=0)[0].error == E.coordinator_load_in_progress
    assert c.read_summary(K1, leader_epoch=0).error == E.coordinator_load_in_progress
    assert c.write(K1, state_epoch=0, leader_epoch=0, start_offset=0, delivery_complete_count=-1,
                   state_batches=(), now_ms=0) == (E.coordinator_load_in_progress, [])
    assert c.delete(K1, now_ms=0) == (E.coordinator_load_in_progress, [])
    assert c.cold_snapshots(p, now_ms=10**9, interval_ms=1) == []
    assert c.prune_offset(p) is None
    c.begin_loading(p)
    assert not c.is_loaded(p)
    assert c.read(K1, leader_epoch=0, now_ms=0)[0].error == E.coordinator_load_in_progress
    c.finish_loading(p)
    assert c.is_loaded(p)
    assert c.read(K1, leader_epoch=0, now_ms=0)[0].error == E.unknown_topic_or_partition


def test_replay_during_loading_builds_the_state_and_begin_loading_forgets_it():
    s = Shard()
    s.init(K1, start_offset=5)
    p = s.c.partition_for(K1)
    s.c.begin_loading(p)
    assert s.c.state(K1) is None and s.read(K1)[0].error == E.coordinator_load_in_progress
    for offset, record in enumerate(s.logs[p]):
        s.c.replay(p, offset, record)
    assert s.c.state(K1).start_offset == 5 and s.c.keys() == []  # still loading
    s.c.finish_loading(p)
    assert s.c.keys() == [K1] and s.read(K1)[0].start_offset == 5


def test_a_record_replayed_into_the_wrong_state_partition_is_refused():
    c = ShareCoordinator(PARTITIONS)
    wrong = (c.partition_for(K1) + 1) % PARTITIONS
    with pytest.raises(ValueError):
        c.replay(wrong, 0, ShareStateRecord(SHARE_SNAPSHOT, K1, None))
    with pytest.raises(ValueError):
        c.begin_loading(PARTITIONS)


# ----------------------------------------------------------------------------- initialize


def test_initialize_writes_one_snapshot_and_is_idempotent_for_an_equal_epoch_and_start_offset():
    s = Shard()
    s.now = 7
    error, records = s.init(K1, state_epoch=3, start_offset=10)
    assert error == E.none and kinds(records) == ["snapshot"]
    assert records[0].value == ShareSnapshotValue(snapshot_epoch=0, state_epoch=3, leader_epoch=-1, start_offset=10,
                                                  create_timestamp_ms=7, write_timestamp_ms=7, state_batches=(),
                                                  delivery_complete_count=0)
    assert s.init(K1, state_epoch=3, start_offset=10) == (E.none, [])
    assert s.init(K1, state_epoch=3, start_offset=-1) == (E.none, [])  # -1 keeps the stored 10
    st = s.c.state(K1)
    assert (st.snapshot_epoch, st.state_epoch, st.start_offset, st.snapshot_offset, st.last_offset) == (0, 3, 10, 0, 0)


def test_initialize_with_an_older_state_epoch_is_fenced_and_a_newer_one_resets_the_batches():
    s = Shard()
    s.init(K1, state_epoch=2, start_offset=0)
    s.read(K1, leader_epoch=4)
    s.write(K1, [B(0, 4, ACK, 1)], start_offset=0, dcc=5, state_epoch=2, leader_epoch=4)
    assert s.init(K1, state_epoch=1, start_offset=0) == (E.fenced_state_epoch, [])
    error, records = s.init(K1, state_epoch=3, start_offset=50)
    value = records[0].value
    assert error == E.none and (value.snapshot_epoch, value.leader_epoch, value.state_batches) == (1, 4, ())
    st = s.c.state(K1)
    assert (st.state_epoch, st.start_offset, st.state_batches, st.delivery_complete_count) == (3, 50, (), 0)
    # The old state epoch is now fenced for writes.
    assert s.write(K1, [B(50, 50, ACK, 1)], state_epoch=2, leader_epoch=4) == (E.fenced_state_epoch, [])


def test_initialize_with_minus_one_leaves_the_start_offset_unset_or_keeps_the_stored_one():
    s = Shard()
    s.init(K1, state_epoch=0, start_offset=-1)
    st = s.c.state(K1)
    assert (st.start_offset, st.delivery_complete_count) == (-1, -1)
    assert s.c.read(K1, leader_epoch=0, now_ms=0)[0].start_offset == -1  # uninitialised
    s.write(K1, start_offset=30, dcc=0)
    error, records = s.init(K1, state_epoch=1, start_offset=-1)
    assert error == E.none and records[0].value.start_offset == 30 and records[0].value.delivery_complete_count == 0
    assert s.c.initialize(K1, state_epoch=1, start_offset=-2, now_ms=0) == (E.invalid_request, [])


# ----------------------------------------------------------------------------- read


def test_reading_an_uninitialized_key_answers_unknown_topic_or_partition():
    s = Shard()
    result, records = s.read(K1, leader_epoch=0)
    assert result.error == E.unknown_topic_or_partition and "not initialized" in result.message and records == []
    summary = s.c.read_summary(K1, leader_epoch=0)
    assert summary.error == E.unknown_topic_or_partition and "not initialized" in summary.message


def test_a_read_with_a_negative_leader_epoch_is_refused():
    s = Shard()
    s.init(K1)
    result, records = s.read(K1, leader_epoch=-1)
    assert result.error == E.invalid_request and records == []


def test_a_read_records_a_newer_leader_epoch_with_an_update():
    s = Shard()
    s.init(K1, state_epoch=2, start_offset=10)
    result, records = s.read(K1, leader_epoch=5)
    assert result == ReadResult(E.none, None, 2, 10, (), 0, 5)
    assert kinds(records) == ["update"]
    assert records[0].value == ShareUpdateValue(snapshot_epoch=0, leader_epoch=5, start_offset=-1, state_batches=(),
                                                delivery_complete_count=-1)
    assert s.c.state(K1).leader_epoch == 5 and s.replayed().state(K1) == s.c.state(K1)
    assert s.read(K1, leader_epoch=5)[1] == []  # the same leader: nothing to record
    result, records = s.read(K1, leader_epoch=4)
    assert result.error == E.fenced_leader_epoch and records == []


def test_the_read_summary_reports_epochs_start_offset_and_delivery_complete_count_without_records():
    s = Shard()
    s.init(K1, state_epoch=1, start_offset=10)
    s.read(K1, leader_epoch=3)
    s.write(K1, [B(10, 12, ACK, 1)], start_offset=10, dcc=3, state_epoch=1, leader_epoch=3)
    n = sum(len(log) for log in s.logs.values())
    assert s.c.read_summary(K1, leader_epoch=0) == ReadSummaryResult(E.none, None, 1, 3, 10, 3)
    assert sum(len(log) for log in s.logs.values()) == n


# ----------------------------------------------------------------------------- write


def test_a_write_to_an_uninitialized_or_deleted_key_is_refused():
    s = Shard()
    assert s.write(K1, [B(0, 0, ACK, 1)], start_offset=0) == (E.unknown_topic_or_partition, [])
    s.init(K1)
    s.delete(K1)
    assert s.write(K1, [B(0, 0, ACK, 1)], start_offset=0) == (E.unknown_topic_or_partition, [])


def test_writes_from_an_older_leader_epoch_or_another_state_epoch_are_fenced():
    s = Shard()
    s.init(K1, state_epoch=4, start_offset=0)
    s.read(K1, leader_epoch=7)
    assert s.write(K1, [B(0, 0, ACK, 1)], state_epoch=4, leader_epoch=6) == (E.fenced_leader_epoch, [])
    assert s.write(K1, [B(0, 0, ACK, 1)], state_epoch=4, leader_epoch=-1) == (E.fenced_leader_epoch, [])
    assert s.write(K1, [B(0, 0, ACK, 1)], state_epoch=3, leader_epoch=7) == (E.fenced_state_epoch, [])
    assert s.write(K1, [B(0, 0, ACK, 1)], state_epoch=5, leader_epoch=7) == (E.fenced_state_epoch, [])
    error, records = s.write(K1, [B(0, 0, ACK, 1)], state_epoch=4, leader_epoch=8)
    assert error == E.none and records[0].value.leader_epoch == 8 and s.c.state(K1).leader_epoch == 8
    assert s.write(K1, [B(1, 1, ACK, 1)], state_epoch=4, leader_epoch=7) == (E.fenced_leader_epoch, [])


def test_malformed_writes_are_invalid_requests():
    s = Shard()
    s.init(K1)
    assert s.write(K1, [B(5, 4, ACK, 1)]) == (E.invalid_request, [])
    assert s.write(K1, [B(-1, 4, ACK, 1)]) == (E.invalid_request, [])
    assert s.write(K1, start_offset=-2) == (E.invalid_request, [])


def test_the_first_write_after_initialize_is_an_update_of_the_initial_snapshot():
    s = Shard()
    s.init(K1, start_offset=0)
    error, records = s.write(K1, [B(0, 3, ACK, 1), B(2, 5, AV, 1)], start_offset=0, dcc=2)
    assert error == E.none and kinds(records) == ["update"]
    # The request's own batches are combined (a later one wins) before they are recorded.
    assert records[0].value == ShareUpdateValue(snapshot_epoch=0, leader_epoch=0, start_offset=-1,
                                                state_batches=(B(0, 1, ACK, 1), B(2, 5, AV, 1)),
                                                delivery_complete_count=2)


def test_the_start_offset_only_moves_forward_and_an_older_one_is_counted_from_the_stored_start():
    s = Shard()
    s.init(K1, start_offset=10)
    _, records = s.write(K1, [B(10, 14, ACK, 1)], start_offset=12, dcc=3)
    assert records[0].value.start_offset == 12 and records[0].value.state_batches == (B(12, 14, ACK, 1),)
    # a write that started before the previous one moved the start on counts from its older start
    # (8): its count is taken again from the stored start and batches: 12-15 are acknowledged
    _, records = s.write(K1, [B(8, 15, ACK, 1)], start_offset=8, dcc=1)
    assert records[0].value.start_offset == -1 and records[0].value.delivery_complete_count == 4
    st = s.c.state(K1)
    assert (st.start_offset, st.delivery_complete_count, st.state_batches) == (12, 4, (B(12, 15, ACK, 1),))


def test_overlapping_writes_of_one_share_partition_keep_the_count_of_what_is_stored():
    """Two acknowledgements in flight together: the first (offset 0) carries start 1; the second
    (offset 1), started while 0 was still pending, carries start 0 and counts both."""
    s = Shard()
    s.init(K1, start_offset=0)
    s.write(K1, [B(0, 0, ACK, 1)], start_offset=1, dcc=0)
    s.write(K1, [B(1, 1, ACK, 1)], start_offset=0, dcc=2)
    st = s.c.state(K1)
    assert (st.start_offset, st.delivery_complete_count, st.state_batches) == (1, 1, (B(1, 1, ACK, 1),))


def test_a_delivery_complete_count_regression_at_the_same_start_offset_is_refused():
    s = Shard()
    s.init(K1, start_offset=0)
    s.write(K1, [B(0, 4, ACK, 1)], start_offset=0, dcc=5)
    assert s.write(K1, [B(5, 5, AV, 1)], start_offset=0, dcc=4) == (E.invalid_request, [])
    assert s.write(K1, [B(5, 5, AV, 1)], start_offset=-1, dcc=4) == (E.invalid_request, [])
    assert s.write(K1, [B(5, 5, AV, 1)], start_offset=0, dcc=5)[0] == E.none
    assert s.write(K1, [B(5, 5, AV, 1)], start_offset=0, dcc=-1)[0] == E.none  # unknown: not a regression
    assert s.c.state(K1).delivery_complete_count == 5
    assert s.write(K1, start_offset=5, dcc=0)[0] == E.none  # the start moved: the count restarts
    assert s.c.state(K1).delivery_complete_count == 0


def test_after_ten_updates_the_eleventh_write_is_a_snapshot_of_the_merged_state():
    s = Shard(per_snapshot=10)
    s.now = 100
    s.init(K1, start_offset=0)
    for i in range(10):
        s.now += 1
        error, records = s.write(K1, [B(i, i, ACK, 1)], dcc=i + 1)
        assert error == E.none and kinds(records) == ["update"]
    assert s.c.state(K1).updates_since_snapshot == 10
    s.now = 500
    error, records = s.write(K1, [B(10, 10, AV, 1)], dcc=10)
    assert kinds(records) == ["snapshot"]
    assert records[0].value == ShareSnapshotValue(snapshot_epoch=1, state_epoch=0, leader_epoch=0, start_offset=0,
                                                  create_timestamp_ms=100, write_timestamp_ms=500,
                                                  state_batches=(B(0, 9, ACK, 1), B(10, 10, AV, 1)),
                                                  delivery_complete_count=10)
    st = s.c.state(K1)
    assert (st.updates_since_snapshot, st.snapshot_offset, st.last_offset) == (0, 11, 11)
    assert kinds(s.write(K1, [B(11, 11, AV, 1)])[1]) == ["update"]


def test_with_zero_updates_per_snapshot_every_write_is_a_snapshot_and_the_setting_is_dynamic():
    s = Shard(per_snapshot=0)
    s.init(K1, start_offset=0)
    for i in range(3):
        _, records = s.write(K1, [B(i, i, ACK, 1)])
        assert kinds(records) == ["snapshot"] and records[0].value.snapshot_epoch == i + 1
    assert kinds(s.read(K1, leader_epoch=1)[1]) == ["snapshot"]
    s.c.snapshot_update_records_per_snapshot = 2
    assert [kinds(s.write(K1, [B(9, 9, AV, 1)], leader_epoch=1)[1])[0] for _ in range(4)] == \
        ["update", "update", "snapshot", "update"]


# ----------------------------------------------------------------------------- combiner


def test_an_overlapping_newer_batch_wins_and_cuts_the_older_into_three_pieces():
    assert combine_batches([B(10, 20, AV, 1)], [B(13, 15, ACK, 2)], -1) == (
        B(10, 12, AV, 1), B(13, 15, ACK, 2), B(16, 20, AV, 1))
    # Across several older batches: only the outer ones keep their outer pieces.
    assert combine_batches([B(0, 4, AV, 1), B(5, 9, ARCH, 5), B(10, 14, AV, 2)], [B(3, 11, ACK, 3)], 0) == (
        B(0, 2, AV, 1), B(3, 11, ACK, 3), B(12, 14, AV, 2))
    # A newer batch covering an older one replaces it entirely.
    assert combine_batches([B(5, 6, AV, 1)], [B(0, 9, STATE_ARCHIVING, 1)], -1) == (B(0, 9, STATE_ARCHIVING, 1),)


def test_overlapping_batches_in_the_same_state_and_count_are_unioned():
    assert combine_batches([B(0, 10, ACK, 1)], [B(5, 15, ACK, 1)], -1) == (B(0, 15, ACK, 1),)
    assert combine_batches([B(0, 10, ACK, 1), B(20, 30, ACK, 1)], [B(5, 25, ACK, 1)], -1) == (B(0, 30, ACK, 1),)


def test_batches_below_the_start_offset_are_dropped_and_one_straddling_it_is_trimmed():
    assert combine_batches([B(0, 4, ACK, 1), B(5, 9, AV, 1)], [B(10, 12, ARCH, 1)], 7) == (
        B(7, 9, AV, 1), B(10, 12, ARCH, 1))
    assert combine_batches([B(0, 4, ACK, 1)], [], 5) == ()
    assert combine_batches([B(0, 4, ACK, 1)], [], 4) == (B(4, 4, ACK, 1),)


def test_adjacent_batches_in_the_same_state_and_count_merge_and_others_stay_apart():
    assert combine_batches([B(0, 4, AV, 1)], [B(5, 9, AV, 1)], -1) == (B(0, 9, AV, 1),)
    assert combine_batches([B(0, 4, AV, 1)], [B(5, 9, AV, 2)], -1) == (B(0, 4, AV, 1), B(5, 9, AV, 2))
    assert combine_batches([], [B(6, 9, ACK, 1), B(0, 2, ACK, 1), B(3, 5, ACK, 1)], -1) == (B(0, 9, ACK, 1),)


def expand(batches):
    return {o: (b.delivery_state, b.delivery_count) for b in batches for o in range(b.first_offset, b.last_offset + 1)}


BATCHES = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 6), st.sampled_from([AV, ACK, STATE_ARCHIVING, ARCH]),
                             st.integers(1, 3)).map(lambda t: B(t[0], t[0] + t[1], t[2], t[3])), max_size=6)


def overlay_model(model: dict, batches, start: int) -> dict:
    model = dict(model)
    for b in batches:
        model.update(expand([b]))
    return {o: v for o, v in model.items() if start < 0 or o >= start}


def check_canonical(batches):
    for prev, cur in zip(batches, batches[1:]):
        assert prev.last_offset < cur.first_offset
        assert not (prev.last_offset + 1 == cur.first_offset and prev[2:] == cur[2:])


@settings(max_examples=300, deadline=None, database=None)
@given(older=BATCHES, newer=BATCHES, start=st.integers(-1, 45))
def test_the_combiner_matches_a_per_offset_model_and_leaves_canonical_batches(older, newer, start):
    base = combine_batches([], older, -1)
    check_canonical(base)
    assert expand(base) == overlay_model({}, older, -1)
    out = combine_batches(base, newer, start)
    check_canonical(out)
    assert all(b.first_offset >= start for b in out)
    assert expand(out) == overlay_model(expand(base), newer, start)


# ----------------------------------------------------------------------------- KIP-932 example


def test_the_kip_932_share_group_state_example_merges_step_by_step():
    s = Shard(per_snapshot=3)
    s.init(K1, start_offset=100)
    s.read(K1, leader_epoch=1)
    steps = [
        # (start offset, batches, delivery complete count) -> expected start offset and batches
        ((110, [], 0), (110, ())),
        ((110, [B(110, 110, AV, 1)], 0), (110, (B(110, 110, AV, 1),))),
        ((110, [B(119, 119, ACK, 1)], 1), (110, (B(110, 110, AV, 1), B(119, 119, ACK, 1)))),
        ((110, [B(111, 112, AV, 1)], 1), (110, (B(110, 112, AV, 1), B(119, 119, ACK, 1)))),
        ((110, [B(113, 118, ACK, 1)], 7), (110, (B(110, 112, AV, 1), B(113, 119, ACK, 1)))),
        ((111, [B(110, 110, ACK, 2)], 7), (111, (B(111, 112, AV, 1), B(113, 119, ACK, 1)))),
        ((120, [], 0), (120, ())),
    ]
    for (start, batches, dcc), (want_start, want_batches) in steps:
        error, _ = s.write(K1, batches, start_offset=start, dcc=dcc, leader_epoch=1)
        st = s.c.state(K1)
        assert error == E.none and (st.start_offset, st.state_batches, st.delivery_complete_count) == (
            want_start, want_batches, dcc)
        assert s.c.read(K1, leader_epoch=1, now_ms=s.now)[0].state_batches == want_batches
        assert s.replayed().state(K1) == st  # with snapshots and updates interleaved (every 3 updates)
    assert "snapshot" in kinds(s.log_of(K1)[2:]) and "update" in kinds(s.log_of(K1)[2:])


# ----------------------------------------------------------------------------- tombstones and replay


def test_delete_writes_a_tombstone_and_is_idempotent():
    s = Shard()
    s.init(K1)
    s.init(K2)
    error, records = s.delete(K1)
    assert error == E.none and records == [ShareStateRecord(SHARE_SNAPSHOT, K1, None)]
    assert s.c.state(K1) is None and s.c.keys() == [K2] and s.c.keys("g2") == []
    assert s.delete(K1) == (E.none, [])
    assert s.read(K1)[0].error == E.unknown_topic_or_partition
    error, records = s.init(K1, state_epoch=0, start_offset=3)  # a fresh start after deletion
    assert records[0].value.snapshot_epoch == 0 and s.c.keys("g1") == sorted([K1, K2])
    fresh = s.replayed()
    assert fresh.keys() == s.c.keys() and fresh.state(K1) == s.c.state(K1)


def test_an_update_of_an_older_snapshot_epoch_is_ignored_on_replay():
    c = ShareCoordinator(PARTITIONS)
    p = c.partition_for(K1)
    c.begin_loading(p)
    c.replay(p, 0, ShareStateRecord(SHARE_SNAPSHOT, K1, ShareSnapshotValue(
        snapshot_epoch=3, state_epoch=0, leader_epoch=1, start_offset=0, create_timestamp_ms=0,
        write_timestamp_ms=0, state_batches=(B(0, 4, AV, 1),))))
    before = c.state(K1)
    c.replay(p, 1, ShareStateRecord(SHARE_UPDATE, K1, ShareUpdateValue(
        snapshot_epoch=2, leader_epoch=9, start_offset=3, state_batches=(B(4, 8, ACK, 1),))))
    assert c.state(K1) == before
    c.replay(p, 2, ShareStateRecord(SHARE_UPDATE, K1, ShareUpdateValue(
        snapshot_epoch=3, leader_epoch=2, start_offset=3, state_batches=(B(4, 8, ACK, 1),),
        delivery_complete_count=5)))
    st = c.state(K1)
    assert (st.leader_epoch, st.start_offset, st.delivery_complete_count, st.state_batches) == (
        2, 3, 5, (B(3, 3, AV, 1), B(4, 8, ACK, 1)))
    assert (st.updates_since_snapshot, st.snapshot_offset, st.last_offset) == (1, 0, 2)
    # An update of a key with no state (deleted, or pruned before its snapshot) is ignored too.
    c.replay(c.partition_for(K2), 3, ShareStateRecord(SHARE_UPDATE, K2, ShareUpdateValue(0, 1, 0)))
    assert c.state(K2) is None


# ----------------------------------------------------------------------------- upkeep


def test_cold_snapshots_fold_old_updates_once_and_never_again_while_idle():
    s = Shard()
    s.now = 0
    s.init(K1, start_offset=0)
    s.init(K3, start_offset=0)  # no updates: never cold-snapshotted
    p = s.c.partition_for(K1)
    s.now = 10
    s.write(K1, [B(0, 2, ACK, 1)], dcc=3)
    s.now = 299_999
    assert s.cold(p, 300_000) == []  # its snapshot is not old enough yet
    s.now = 300_000
    records = s.cold(p, 300_000)
    assert kinds(records) == ["snapshot"] and records[0].key == K1
    assert records[0].value == ShareSnapshotValue(snapshot_epoch=1, state_epoch=0, leader_epoch=0, start_offset=0,
                                                  create_timestamp_ms=0, write_timestamp_ms=300_000,
                                                  state_batches=(B(0, 2, ACK, 1),), delivery_complete_count=3)
    for q in range(PARTITIONS):
        s.now += 10**6
        assert s.cold(q, 300_000) == []
    assert s.c.state(K1).snapshot_epoch == 1


def test_the_prune_offset_moves_up_to_the_oldest_latest_snapshot():
    s = Shard(per_snapshot=2)
    p = s.c.partition_for(K1)
    assert s.c.prune_offset(p) is None
    s.init(K1, start_offset=0)  # offset 0
    assert s.c.prune_offset(p) == 0
    s.write(K1, [B(0, 0, ACK, 1)])  # 1
    s.write(K1, [B(1, 1, ACK, 1)])  # 2
    assert s.c.prune_offset(p) == 0
    s.write(K1, [B(2, 2, ACK, 1)])  # 3: a snapshot
    assert s.c.prune_offset(p) == 3
    same = [k for k in (ShareStateKey("g9", uuid.UUID(int=i), 0) for i in range(50)) if s.c.partition_for(k) == p]
    s.init(same[0], start_offset=0)  # 4
    s.write(K1, [B(3, 3, ACK, 1)])  # 5
    s.write(K1, [B(4, 4, ACK, 1)])  # 6
    s.write(K1, [B(5, 5, ACK, 1)])  # 7: a snapshot, but the other key still holds 4
    assert s.c.prune_offset(p) == 4
    s.delete(same[0])  # 8
    assert s.c.prune_offset(p) == 7
    assert s.replayed(pruned=True).state(K1) == s.c.state(K1)
    s.delete(K1)  # 9
    assert s.c.prune_offset(p) == 10 and s.replayed(pruned=True).keys() == []


# ----------------------------------------------------------------------------- replay property


EPOCHS = st.sampled_from([0, 0, 0, 1, 2])  # mostly the current state epoch, so that most writes land


@dataclass
class Model:
    """What a key's state must be, kept per offset: the naive reading of kafka-reference §3.2."""

    state_epoch: int
    leader_epoch: int
    start: int
    dcc: int
    offsets: dict = field(default_factory=dict)  # offset -> (state, count)


class CoordinatorMachine(RuleBasedStateMachine):
    """Random operations on three keys in three state partitions, with pruning and restarts from the
    pruned logs. Every answer must be the one a naive model expects, after every step each key's
    state must match the model, and a restart must rebuild exactly the running coordinator's state."""

    @initialize(per_snapshot=st.integers(0, 4), starts=st.lists(st.integers(-1, 5), min_size=3, max_size=3))
    def start(self, per_snapshot, starts):
        self.s = Shard(per_snapshot=per_snapshot)
        self.model: dict[ShareStateKey, Model] = {}
        for key, start in zip(KEYS, starts):
            self.init(key, 0, start)

    @rule(key=st.sampled_from(KEYS), epoch=EPOCHS, start=st.integers(-1, 20))
    def init(self, key, epoch, start):
        m = self.model.get(key)
        error, records = self.s.init(key, state_epoch=epoch, start_offset=start)
        if m is None:
            assert error == E.none and len(records) == 1
            self.model[key] = Model(epoch, -1, start, -1 if start < 0 else 0)
            return
        start = m.start if start < 0 else start
        if epoch < m.state_epoch:
            assert (error, records) == (E.fenced_state_epoch, [])
        elif (epoch, start) == (m.state_epoch, m.start):
            assert (error, records) == (E.none, [])
        else:
            assert error == E.none and len(records) == 1
            self.model[key] = Model(epoch, m.leader_epoch, start, -1 if start < 0 else 0)

    @rule(key=st.sampled_from(KEYS), leader=st.integers(-1, 3))
    def read(self, key, leader):
        m = self.model.get(key)
        result, records = self.s.read(key, leader_epoch=leader)
        if leader < 0:
            assert result.error == E.invalid_request
        elif m is None:
            assert result.error == E.unknown_topic_or_partition
        elif leader < m.leader_epoch:
            assert result.error == E.fenced_leader_epoch
        else:
            assert result == ReadResult(E.none, None, m.state_epoch, m.start,
                                        combine_batches([], sorted(B(o, o, *v) for o, v in m.offsets.items()), -1),
                                        m.dcc, leader)
            assert len(records) == (leader > m.leader_epoch)
            m.leader_epoch = leader
            return
        assert records == []

    @rule(key=st.sampled_from(KEYS), epoch=EPOCHS, leader=st.integers(-1, 3), start=st.integers(-1, 30),
          dcc=st.integers(-1, 10), batches=BATCHES)
    def write(self, key, epoch, leader, start, dcc, batches):
        m = self.model.get(key)
        error, records = self.s.write(key, batches, start_offset=start, dcc=dcc, state_epoch=epoch,
                                      leader_epoch=leader)
        if m is None:
            expected = E.unknown_topic_or_partition
        elif leader < m.leader_epoch:
            expected = E.fenced_leader_epoch
        elif epoch != m.state_epoch:
            expected = E.fenced_state_epoch
        elif start in (-1, m.start) and 0 <= dcc < m.dcc:
            expected = E.invalid_request
        else:
            expected = E.none
        assert error == expected and len(records) == (error == E.none)
        if error == E.none:
            if dcc >= 0 and (start == -1 or start >= m.start):
                m.dcc = dcc
            m.leader_epoch = max(m.leader_epoch, leader)
            older_start = 0 <= start < m.start
            m.start = max(m.start, start)
            m.offsets = overlay_model(m.offsets, batches, m.start)
            if older_start:  # counted again from the stored start: the terminal offsets past it
                m.dcc = sum(1 for state, _count in m.offsets.values() if state in (ACK, ARCH))

    @rule(key=st.sampled_from(KEYS), start=st.integers(-1, 30), batches=BATCHES)
    def write_as_the_current_leader(self, key, start, batches):
        state = self.s.c.state(key)
        if state is not None:
            self.write(key, state.state_epoch, max(state.leader_epoch, 0), start, -1, batches)

    @rule(key=st.sampled_from(KEYS))
    def delete(self, key):
        assert self.s.delete(key)[0] == E.none
        self.model.pop(key, None)

    @rule(partition=st.integers(0, PARTITIONS - 1), interval=st.integers(1, 50))
    def cold(self, partition, interval):
        self.s.cold(partition, interval)
        assert self.s.c.cold_snapshots(partition, now_ms=self.s.now, interval_ms=interval) == []

    @rule(n=st.integers(0, 4))
    def per_snapshot(self, n):
        self.s.c.snapshot_update_records_per_snapshot = n

    @rule(ms=st.integers(1, 40))
    def tick(self, ms):
        self.s.now += ms

    @rule()
    def prune(self):
        self.s.prune()

    @rule(pruned=st.booleans())
    def restart(self, pruned):
        fresh = self.s.replayed(pruned=pruned)
        assert fresh.keys() == self.s.c.keys()
        for key in KEYS:
            assert fresh.state(key) == self.s.c.state(key), key
        self.s.c = fresh

    @invariant()
    def states_match_the_model(self):
        if not hasattr(self, "s"):
            return
        for key in KEYS:
            state, m = self.s.c.state(key), self.model.get(key)
            assert (state is None) == (m is None)
            if state is not None:
                assert (state.state_epoch, state.leader_epoch, state.start_offset, state.delivery_complete_count,
                        expand(state.state_batches)) == (m.state_epoch, m.leader_epoch, m.start, m.dcc, m.offsets)
                check_canonical(state.state_batches)
                assert self.s.log_of(key)[state.snapshot_offset].record_type == SHARE_SNAPSHOT
        for p, log in self.s.logs.items():
            assert all(self.s.c.partition_for(record.key) == p for record in log)

    def teardown(self):
        if hasattr(self, "s"):
            self.restart(pruned=False)


CoordinatorMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    database=None,
    report_multiple_bugs=False,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow],
)
test_replaying_the_returned_records_into_a_fresh_coordinator_gives_the_same_state = CoordinatorMachine.TestCase


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 6), st.sampled_from([AV, ACK, ARCH]),
                          st.integers(1, 3)), max_size=12),
       st.lists(st.tuples(st.integers(0, 60), st.integers(0, 6), st.sampled_from([AV, ACK, ARCH]),
                          st.integers(1, 3)), max_size=12),
       st.integers(-1, 30))
def test_the_one_pass_combiner_gives_what_laying_batches_one_by_one_gives(old, new, start):
    from quafka.broker.core.share_coordinator import _overlay

    older = combine_batches((), [B(f, f + n, s_, c) for f, n, s_, c in old], -1)
    newer = [B(f, f + n, s_, c) for f, n, s_, c in new]
    slow = list(older)
    for b in newer:
        slow = _overlay(slow, b)
    got = combine_batches(older, newer, start)
    # reference: lay one by one, then trim and merge as combine_batches does
    ref = []
    for b in slow:
        if start >= 0:
            if b.last_offset < start:
                continue
            if b.first_offset < start:
                b = b._replace(first_offset=start)
        if ref and ref[-1].last_offset + 1 == b.first_offset and ref[-1][2:] == b[2:]:
            ref[-1] = ref[-1]._replace(last_offset=b.last_offset)
        else:
            ref.append(b)
    assert got == tuple(ref), (older, newer, start)
