"""The share partition's effects (LockTimer, WakeFetches, PersistWrite), the merging of equal
neighbouring runs after a write commits, `read_stop_offset`, and the RunIndex's derived values
against a recount."""

from __future__ import annotations

import random

import pytest

from quafka.broker.core.record_state import RecordState
from quafka.broker.core.share_partition import (
    AcquiredRange,
    Acquisition,
    LockTimer,
    PersistWrite,
    SharePartition,
    StateBatch,
    WakeFetches,
)
from quafka.protocol.errors import ErrorCode

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = (RecordState.AVAILABLE, RecordState.ACQUIRED,
                                               RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
LOCK_MS = 1_000
LIMIT = 5
NO_LIMIT = 2**62


def acquisition(sp, member, log_batches, *, now=0, max_records=500, record_limit=False, limit=LIMIT,
                max_in_flight=100_000, lock_ms=LOCK_MS) -> Acquisition:
    return sp.acquire(member, log_batches, max_records=max_records, record_limit=record_limit,
                      lock_duration_ms=lock_ms, delivery_limit=limit, max_in_flight=max_in_flight, now_ms=now)


def ack(sp, member, batches, *, now=0, limit=LIMIT):
    return sp.acknowledge(member, [(f, l, tuple(t)) for f, l, t in batches], delivery_limit=limit,
                          lock_duration_ms=LOCK_MS, renew_enabled=True, now_ms=now)


def complete(sp, write, ok=True, *, now=0, limit=LIMIT):
    assert isinstance(write, PersistWrite)
    return sp.on_write_complete(write.write_id, ok, delivery_limit=limit, now_ms=now)


def ack_and_commit(sp, member, batches, *, now=0, limit=LIMIT):
    """Acknowledge and commit the write; returns the commit's effects."""
    result = ack(sp, member, batches, now=now, limit=limit)
    assert result.error == ErrorCode.none
    return complete(sp, result.write, now=now, limit=limit) if result.write is not None else []


def writes(effects) -> list[PersistWrite]:
    return [e for e in effects if isinstance(e, PersistWrite)]


def timers(effects) -> list[LockTimer]:
    return [e for e in effects if isinstance(e, LockTimer)]


def woken(effects) -> bool:
    return WakeFetches() in effects


def shape(sp):
    return [(r.first, r.last, r.state, r.delivery_count) for r in sp.runs]


# ---------------------------------------------------------------- LockTimer


def test_the_first_acquisition_arms_the_lock_timer():
    sp = SharePartition(0)
    got = acquisition(sp, "m1", [(0, 9)], now=100)
    assert got.effects == [LockTimer(100 + LOCK_MS)]


def test_the_lock_timer_is_not_re_armed_while_the_earliest_deadline_is_unchanged():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 4)], now=100)
    assert acquisition(sp, "m2", [(5, 9)], now=200).effects == []  # a later lock: the earliest is the same
    assert ack(sp, "m2", [(5, 9, [ACCEPT])], now=300).effects == []
    assert ack(sp, "m1", [(3, 4, [RENEW])], now=400).effects == []  # 0-2 still hold the earliest deadline
    assert sp.expire_locks(delivery_limit=LIMIT, now_ms=500) == []  # nothing due


def test_the_lock_timer_moves_when_the_earliest_lock_changes():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 4)], now=100)
    assert acquisition(sp, "m2", [(5, 9)], now=50, lock_ms=10).effects == [LockTimer(60)]  # an earlier lock
    assert timers(ack(sp, "m2", [(5, 9, [ACCEPT])], now=55).effects) == [LockTimer(100 + LOCK_MS)]
    assert timers(ack(sp, "m1", [(0, 4, [RENEW])], now=700).effects) == [LockTimer(700 + LOCK_MS)]


def test_the_lock_timer_is_re_armed_after_it_fired_even_at_the_same_deadline():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 4)], now=0)
    # the timer fired early (nothing is due yet): the shell has nothing armed any more, so it is armed again
    assert sp.on_lock_timer(delivery_limit=LIMIT, now_ms=LOCK_MS - 1) == [LockTimer(LOCK_MS)]
    assert [sp.record(o) for o in range(5)] == [(ACQUIRED, 1, "m1")] * 5
    # calling expire_locks directly does not re-arm an unchanged deadline
    assert sp.expire_locks(delivery_limit=LIMIT, now_ms=LOCK_MS - 1) == []


def test_the_lock_timer_fires_expires_what_is_due_and_arms_the_next_deadline():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 4)], now=0)
    acquisition(sp, "m2", [(5, 9)], now=300)
    effects = sp.on_lock_timer(delivery_limit=LIMIT, now_ms=LOCK_MS)
    [write] = writes(effects)
    assert write.state_batches == (StateBatch(0, 4, int(AVAILABLE), 1),)
    assert timers(effects) == [LockTimer(300 + LOCK_MS)]
    assert not woken(effects)  # the expired records are AVAILABLE only once the write commits
    assert woken(complete(sp, write, now=LOCK_MS))
    assert sp.lock_timeout_count == 5


def test_the_lock_timer_is_disarmed_when_the_last_lock_goes():
    # by an acknowledgement
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 4)])
    assert ack(sp, "m1", [(0, 4, [ACCEPT])]).effects == [LockTimer(None)]
    # by a session release
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 4)])
    effects = sp.release_member("m1", delivery_limit=LIMIT, now_ms=1)
    assert len(writes(effects)) == 1 and timers(effects) == [LockTimer(None)]
    # by an explicit expiry
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 4)])
    assert timers(sp.expire_locks(delivery_limit=LIMIT, now_ms=LOCK_MS)) == [LockTimer(None)]
    # by the log start offset passing the locked records
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 4)])
    assert timers(sp.move_start_offset(5)) == [LockTimer(None)]
    # the timer that fired on the last lock leaves nothing armed: no LockTimer(None) needed
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 4)])
    assert timers(sp.on_lock_timer(delivery_limit=LIMIT, now_ms=LOCK_MS)) == []


def test_a_failed_write_re_arms_the_lock_timer_for_the_restored_locks():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 4)], now=0)
    result = ack(sp, "m1", [(0, 4, [ACCEPT])], now=10)
    assert result.effects == [LockTimer(None)]  # pending: no lock to expire
    assert complete(sp, result.write, ok=False, now=20) == [LockTimer(LOCK_MS)]  # back to ACQUIRED


# ---------------------------------------------------------------- WakeFetches


def test_a_committed_release_wakes_fetches():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 9)])
    result = ack(sp, "m1", [(3, 4, [RELEASE])])
    assert not woken(result.effects)  # AVAILABLE, but not acquirable while the write is in flight
    assert sp.fetch_offset(100) == 10
    assert woken(complete(sp, result.write))
    assert sp.fetch_offset(100) == 3


def test_a_failed_release_rolls_back_to_acquired_and_wakes_nothing():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 9)])
    result = ack(sp, "m1", [(3, 4, [RELEASE])], now=1)
    assert not woken(complete(sp, result.write, ok=False, now=2))
    assert sp.record(3) == (ACQUIRED, 1, "m1")


def test_a_rollback_to_available_wakes_fetches():
    # the lock ran out while an acceptance was being written, and the write failed: AVAILABLE
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 4)], now=0)
    result = ack(sp, "m1", [(0, 4, [ACCEPT])], now=LOCK_MS - 1)
    effects = complete(sp, result.write, ok=False, now=LOCK_MS)
    assert woken(effects)
    assert sp.record(0) == (AVAILABLE, 1, None) and sp.fetch_offset(100) == 0
    # records archived by an acquisition (compacted away) whose write fails are AVAILABLE again
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 4)])
    ack_and_commit(sp, "m1", [(0, 4, [RELEASE])])
    got = acquisition(sp, "m2", [(5, 9)])
    [archive] = writes(got.effects)
    assert not woken(got.effects)
    assert woken(complete(sp, archive, ok=False))
    assert sp.record(0) == (AVAILABLE, 1, None)


def test_the_start_offset_advancing_wakes_fetches():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 9)], max_in_flight=10)
    assert sp.fetch_offset(10) is None  # the window is full
    effects = ack_and_commit(sp, "m1", [(0, 4, [ACCEPT])])
    assert woken(effects)  # room in the window
    assert sp.start_offset == 5 and sp.fetch_offset(10) == 10


def test_moving_the_log_start_offset_wakes_fetches():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 9)])
    effects = sp.move_start_offset(4)
    assert woken(effects) and len(writes(effects)) == 1
    assert woken(SharePartition(0).move_start_offset(10))  # an empty window too
    assert sp.move_start_offset(4) == []  # not moved: nothing


def test_an_accept_that_does_not_move_the_start_offset_wakes_nothing():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 9)])
    result = ack(sp, "m1", [(5, 9, [ACCEPT])])
    assert not woken(result.effects)
    assert not woken(complete(sp, result.write))
    assert sp.start_offset == 0


def test_no_acknowledgement_expiry_or_release_wakes_fetches_before_its_write_commits():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 9)], now=0)
    assert not woken(ack(sp, "m1", [(0, 2, [RELEASE])]).effects)
    assert not woken(sp.release_member("m1", delivery_limit=LIMIT, now_ms=1))
    acquisition(sp, "m2", [(10, 19)], now=0)
    assert not woken(sp.expire_locks(delivery_limit=LIMIT, now_ms=LOCK_MS))


# ---------------------------------------------------------------- merging equal neighbours


def test_a_batch_accepted_one_offset_at_a_time_in_order_empties_the_window():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 99)])
    for o in range(100):
        ack_and_commit(sp, "m1", [(o, o, [ACCEPT])])
        assert len(sp.runs) <= 1  # the accepted head leaves the window at once
    assert len(sp.runs) == 0 and (sp.start_offset, sp.in_flight_count) == (100, 0)


def test_accepting_every_other_record_then_the_rest_leaves_one_run():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 0), (1, 100)])  # offset 0 stays ACQUIRED: the start offset cannot move
    for o in range(1, 101, 2):
        ack_and_commit(sp, "m1", [(o, o, [ACCEPT])])
    assert len(sp.runs) == 101  # acquired and acknowledged offsets alternate: nothing to merge
    for o in range(2, 101, 2):
        ack_and_commit(sp, "m1", [(o, o, [ACCEPT])])
    assert shape(sp) == [(0, 0, ACQUIRED, 1), (1, 100, ACKNOWLEDGED, 1)]
    assert sp.delivery_complete_count() == 100


def test_per_offset_acknowledgements_of_one_type_are_merged_when_they_commit():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 0), (1, 20)])
    result = ack(sp, "m1", [(o, o, [RELEASE]) for o in range(1, 21)])
    assert len(sp.runs) == 21  # one run per acknowledged offset while the write is in flight
    assert len(result.write.state_batches) == 20
    complete(sp, result.write)
    assert shape(sp) == [(0, 0, ACQUIRED, 1), (1, 20, AVAILABLE, 1)]
    # batch_optimized redelivers the merged run whole
    assert acquisition(sp, "m2", [(1, 20)], max_records=1).ranges == [AcquiredRange(1, 20, 2)]


def test_only_equal_runs_are_merged():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 0), (1, 10)])
    ack_and_commit(sp, "m1", [(1, 5, [RELEASE])])
    acquisition(sp, "m2", [(1, 5)], max_records=2, record_limit=True)  # 1-2 at delivery 2
    ack_and_commit(sp, "m2", [(1, 2, [RELEASE])])  # 1-2 AVAILABLE after 2 deliveries, 3-5 after 1
    assert shape(sp) == [(0, 0, ACQUIRED, 1), (1, 2, AVAILABLE, 2), (3, 5, AVAILABLE, 1), (6, 10, ACQUIRED, 1)]
    ack_and_commit(sp, "m1", [(6, 10, [REJECT])])  # ARCHIVED next to AVAILABLE: not merged
    assert shape(sp)[-1] == (6, 10, ARCHIVED, 1)
    # a producer batch of another size does not merge with it (its records are throttled by their own batch)
    acquisition(sp, "m1", [(11, 13)])
    ack_and_commit(sp, "m1", [(11, 13, [REJECT])])
    assert shape(sp)[-2:] == [(6, 10, ARCHIVED, 1), (11, 13, ARCHIVED, 1)]


def test_runs_with_a_write_in_flight_are_not_merged():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 0), (1, 10)])
    first = ack(sp, "m1", [(1, 5, [RELEASE])]).write
    second = ack(sp, "m1", [(6, 10, [RELEASE])]).write
    complete(sp, first)  # 6-10 are still being written
    assert shape(sp) == [(0, 0, ACQUIRED, 1), (1, 5, AVAILABLE, 1), (6, 10, AVAILABLE, 1)]
    complete(sp, second)
    assert shape(sp) == [(0, 0, ACQUIRED, 1), (1, 10, AVAILABLE, 1)]


def test_equal_neighbours_are_merged_across_every_run_the_write_touched():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 0), (1, 15)])
    ack_and_commit(sp, "m1", [(11, 15, [RELEASE])])
    ack_and_commit(sp, "m1", [(1, 5, [RELEASE]), (6, 10, [RELEASE])])  # two runs in one write
    assert shape(sp) == [(0, 0, ACQUIRED, 1), (1, 15, AVAILABLE, 1)]


# ---------------------------------------------------------------- read_stop_offset


def test_read_stop_offset_past_the_window_is_max_records_on():
    sp = SharePartition(10)
    assert sp.read_stop_offset(10, 5) == 14
    assert sp.read_stop_offset(10, 0) == 10 + NO_LIMIT - 1  # no MaxRecords: no limit
    acquisition(sp, "m1", [(10, 19)])
    assert sp.read_stop_offset(20, 100) == 119


def test_read_stop_offset_inside_the_window_stops_at_the_end_of_the_available_run():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 29)])
    ack_and_commit(sp, "m1", [(5, 9, [RELEASE]), (20, 24, [RELEASE])])
    assert sp.fetch_offset(100) == 5
    assert sp.read_stop_offset(5, 100) == 9  # the next available run (20-24) is another read
    assert sp.read_stop_offset(5, 3) == 7  # MaxRecords ends inside the run
    assert sp.read_stop_offset(7, 3) == 9
    assert sp.read_stop_offset(5, 5) == 9


def test_read_stop_offset_reads_on_into_new_records_when_the_run_ends_the_window():
    sp = SharePartition(0)
    acquisition(sp, "m1", [(0, 9)])
    ack_and_commit(sp, "m1", [(5, 9, [RELEASE])])
    assert sp.read_stop_offset(5, 100) == 104  # 5-9, then new records from 10 on
    assert sp.read_stop_offset(5, 3) == 7
    assert sp.read_stop_offset(5, 0) == 5 + NO_LIMIT - 1


def test_a_read_up_to_read_stop_offset_is_enough_for_the_acquisition():
    sp = SharePartition(0)
    log = [(0, 9), (10, 19), (20, 29), (30, 39)]
    acquisition(sp, "m1", log[:3])
    ack_and_commit(sp, "m1", [(12, 14, [RELEASE])])
    offset = sp.fetch_offset(100)
    stop = sp.read_stop_offset(offset, 100)
    assert (offset, stop) == (12, 14)
    read = [b for b in log if b[1] >= offset and b[0] <= stop]
    assert acquisition(sp, "m2", read).ranges == [AcquiredRange(12, 14, 2)]
    offset = sp.fetch_offset(100)
    stop = sp.read_stop_offset(offset, 5)
    assert (offset, stop) == (30, 34)
    read = [b for b in log if b[1] >= offset and b[0] <= stop]
    assert acquisition(sp, "m2", read, max_records=5, record_limit=True).ranges == [AcquiredRange(30, 34, 1)]


# ---------------------------------------------------------------- the RunIndex against a recount


def recount_check(sp, where):
    runs = list(sp.runs)
    assert len(runs) == len(sp.runs)
    assert all(a.last + 1 == b.first for a, b in zip(runs, runs[1:])), where
    assert not runs or (runs[0].first, runs[-1].last) == (sp.start_offset, sp.end_offset), where
    terminal = sum(r.size for r in runs if r.state.terminal)
    assert sp.runs.terminal_count == terminal == sp.delivery_complete_count(), where
    available = [r for r in runs if r.state == AVAILABLE and not r.pending]
    assert sp.runs.first_available() is (available[0] if available else None), where
    deadlines = [r.deadline_ms for r in runs if r.state == ACQUIRED and not r.pending]
    assert sp.runs.earliest_deadline_ms() == (min(deadlines) if deadlines else None), where
    open_runs = [r for r in runs if not r.state.terminal]
    assert sp.runs.first_open_offset() == (open_runs[0].first if open_runs else None), where
    for member in ("m1", "m2", "m3"):
        held = [r for r in runs if r.state == ACQUIRED and r.member_id == member]
        assert sp.runs.held_by(member) == held, where
    for r in runs:
        assert sp.runs.find(r.first) is r and sp.runs.find(r.last) is r, where


@pytest.mark.parametrize("seed", range(20))
def test_the_run_index_agrees_with_a_recount_after_random_operations(seed):
    rng = random.Random(seed)
    sp = SharePartition(0)
    log_end, now = 0, 0
    in_flight: list[PersistWrite] = []
    for step in range(400):
        where = f"seed {seed} step {step}"
        op = rng.choice(["produce", "acquire", "acquire", "ack", "ack", "complete", "complete", "expire",
                         "release", "move", "tick"])
        if op == "produce" or log_end == 0:
            size = rng.choice([1, 3, 10, 50, 200])
            log_end += size
        elif op == "tick":
            now += rng.choice([10, 300, 1500])
        elif op == "acquire":
            offset = sp.fetch_offset(1000)
            if offset is not None and offset < log_end:
                first = offset - offset % 10
                batches = [(b, min(b + 9, log_end - 1)) for b in range(first, log_end, 10)][:rng.randint(1, 20)]
                got = acquisition(sp, rng.choice(["m1", "m2", "m3"]), batches, now=now,
                                  max_records=rng.choice([0, 1, 7, 100]), record_limit=rng.random() < 0.5,
                                  max_in_flight=1000)
                in_flight += writes(got.effects)
        elif op == "ack":
            held = [r for r in sp.runs if r.state == ACQUIRED and not r.pending and r.deadline_ms > now]
            if held:
                run = rng.choice(held)
                lo = rng.randint(run.first, run.last)
                hi = rng.randint(lo, run.last)
                types = ([rng.choice([ACCEPT, RELEASE, REJECT, GAP, RENEW])] if rng.random() < 0.5
                         else [rng.choice([ACCEPT, RELEASE, REJECT, RENEW]) for _ in range(hi - lo + 1)])
                result = ack(sp, run.member_id, [(lo, hi, types)], now=now)
                assert result.error == ErrorCode.none, where
                if result.write is not None:
                    in_flight.append(result.write)
        elif op == "complete" and in_flight:
            write = in_flight.pop(rng.randrange(len(in_flight)))
            in_flight += writes(complete(sp, write, ok=rng.random() < 0.8, now=now))
        elif op == "expire":
            in_flight += writes(sp.on_lock_timer(delivery_limit=LIMIT, now_ms=now))
        elif op == "release":
            in_flight += writes(sp.release_member(rng.choice(["m1", "m2", "m3"]), delivery_limit=LIMIT, now_ms=now))
        elif op == "move" and rng.random() < 0.3:
            in_flight += writes(sp.move_start_offset(sp.start_offset + rng.randint(0, 30)))
        recount_check(sp, where)
