"""The share partition machine with virtual time (kafka-reference §4, §11)."""

from quafka.broker.core.record_state import RecordState
from quafka.broker.core.share_partition import (
    AcquiredRange,
    Acquisition,
    Acknowledgement,
    LockTimer,
    PersistWrite,
    SharePartition,
    StateBatch,
    WakeFetches,
)
from quafka.protocol.errors import ErrorCode

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVING, ARCHIVED = (RecordState.AVAILABLE, RecordState.ACQUIRED,
                                                         RecordState.ACKNOWLEDGED, RecordState.ARCHIVING,
                                                         RecordState.ARCHIVED)
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
LOCK_MS = 30_000
LIMIT = 5


def acquisition(sp, member, log_batches, *, now=0, max_records=500, record_limit=False, limit=LIMIT,
                max_in_flight=2000, lock_ms=LOCK_MS) -> Acquisition:
    """The whole result of an acquisition: ranges, throttled, effects."""
    got = sp.acquire(member, log_batches, max_records=max_records, record_limit=record_limit,
                     lock_duration_ms=lock_ms, delivery_limit=limit, max_in_flight=max_in_flight, now_ms=now)
    assert isinstance(got, Acquisition)
    return got


def acquire(sp, member, log_batches, **kwargs) -> list[AcquiredRange]:
    return acquisition(sp, member, log_batches, **kwargs).ranges


def writes(effects) -> list[PersistWrite]:
    return [e for e in effects if isinstance(e, PersistWrite)]


def the_write(effects) -> PersistWrite | None:
    """The one PersistWrite among `effects`, or None when there is none."""
    found = writes(effects)
    assert len(found) <= 1, f"more than one write in {effects}"
    return found[0] if found else None


def ack(sp, member, batches, *, now=0, limit=LIMIT, lock_ms=LOCK_MS, renew=True) -> Acknowledgement:
    got = sp.acknowledge(member, [(f, l, tuple(t)) for f, l, t in batches], delivery_limit=limit,
                         lock_duration_ms=lock_ms, renew_enabled=renew, now_ms=now)
    assert isinstance(got, Acknowledgement)
    if got.error != ErrorCode.none:
        assert got.write is None and got.effects == [], "a refused acknowledgement changes nothing"
    return got


def refused(result: Acknowledgement, error=ErrorCode.invalid_record_state) -> bool:
    return result.error == error and result.write is None


def applied(result: Acknowledgement) -> PersistWrite | None:
    """The write of an acknowledgement that was applied (None when nothing is to be persisted)."""
    assert result.error == ErrorCode.none, f"acknowledgement refused: {result.error!r}"
    return result.write


def complete(sp, write, ok=True, *, now=0, limit=LIMIT):
    assert isinstance(write, PersistWrite)
    return sp.on_write_complete(write.write_id, ok, delivery_limit=limit, now_ms=now)


def ack_and_commit(sp, member, batches, *, now=0, limit=LIMIT):
    result = ack(sp, member, batches, now=now, limit=limit)
    assert result.error == ErrorCode.none
    if result.write is not None:
        complete(sp, result.write, now=now, limit=limit)


def expire(sp, *, now, limit=LIMIT):
    write = the_write(sp.expire_locks(delivery_limit=limit, now_ms=now))
    if write is not None:
        complete(sp, write, now=now, limit=limit)
    return write


def release(sp, member, *, now=0, limit=LIMIT):
    write = the_write(sp.release_member(member, delivery_limit=limit, now_ms=now))
    if write is not None:
        complete(sp, write, now=now, limit=limit)
    return write


def states(sp, first, last):
    return [sp.record(o) for o in range(first, last + 1)]


def offsets(ranges):
    return [o for r in ranges for o in range(r.first_offset, r.last_offset + 1)]


def deliver_again(sp, member, first, last, times, *, now=0, limit=LIMIT):
    """Release [first, last] and acquire it again, `times` times; returns the last acquisition."""
    got = None
    for _ in range(times):
        ack_and_commit(sp, member, [(first, last, [RELEASE])], now=now, limit=limit)
        got = acquire(sp, member, [(first, last)], now=now, limit=limit)
    return got


# ---------------------------------------------------------------- acquire


def test_new_batches_are_acquired_whole_with_delivery_count_one():
    sp = SharePartition(0)
    got = acquire(sp, "m1", [(0, 4), (5, 9)], now=100)
    assert got == [AcquiredRange(0, 9, 1)]
    assert states(sp, 0, 9) == [(ACQUIRED, 1, "m1")] * 10
    assert (sp.start_offset, sp.end_offset, sp.in_flight_count) == (0, 9, 10)
    assert sp.next_deadline_ms() == 100 + LOCK_MS
    assert sp.record(10) is None and sp.record(-1) is None


def test_records_are_never_handed_out_twice():
    sp = SharePartition(0)
    assert acquire(sp, "m1", [(0, 4)]) == [AcquiredRange(0, 4, 1)]
    assert acquire(sp, "m2", [(0, 4)]) == []
    assert acquire(sp, "m2", [(0, 4), (5, 7)]) == [AcquiredRange(5, 7, 1)]
    assert states(sp, 0, 7) == [(ACQUIRED, 1, "m1")] * 5 + [(ACQUIRED, 1, "m2")] * 3


def test_fetch_offset_is_the_first_available_record_else_the_end_of_the_window():
    sp = SharePartition(10)
    assert sp.fetch_offset(100) == 10
    acquire(sp, "m1", [(10, 19)])
    assert sp.fetch_offset(100) == 20
    ack_and_commit(sp, "m1", [(13, 14, [RELEASE])])
    assert sp.fetch_offset(100) == 13


def test_fetch_before_the_start_offset_is_trimmed():
    sp = SharePartition(7)
    got = acquire(sp, "m1", [(0, 4), (5, 9), (10, 12)])
    assert got == [AcquiredRange(7, 12, 1)]
    assert sp.record(6) is None and sp.start_offset == 7


def test_released_record_comes_back_with_count_plus_one():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)])
    write = applied(ack(sp, "m1", [(0, 4, [RELEASE])]))
    assert write is not None
    complete(sp, write)
    assert states(sp, 0, 4) == [(AVAILABLE, 1, None)] * 5
    assert acquire(sp, "m2", [(0, 4)]) == [AcquiredRange(0, 4, 2)]
    assert states(sp, 0, 4) == [(ACQUIRED, 2, "m2")] * 5


def test_lock_expiry_returns_records_to_available_with_their_count():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)], now=1000)
    assert writes(sp.expire_locks(delivery_limit=LIMIT, now_ms=1000 + LOCK_MS - 1)) == []
    assert states(sp, 0, 4) == [(ACQUIRED, 1, "m1")] * 5
    write = expire(sp, now=1000 + LOCK_MS)
    assert write is not None
    assert states(sp, 0, 4) == [(AVAILABLE, 1, None)] * 5
    assert sp.next_deadline_ms() is None
    assert acquire(sp, "m2", [(0, 4)], now=1000 + LOCK_MS) == [AcquiredRange(0, 4, 2)]


def test_lock_expiry_at_delivery_limit_archives_record():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 0)], limit=2)
    expire(sp, now=LOCK_MS, limit=2)
    assert acquire(sp, "m1", [(0, 0)], now=LOCK_MS, limit=2) == [AcquiredRange(0, 0, 2)]
    expire(sp, now=2 * LOCK_MS, limit=2)
    assert sp.record(0) is None  # archived and passed by the start offset
    assert sp.start_offset == 1 and sp.in_flight_count == 0
    assert acquire(sp, "m1", [(0, 0)], now=2 * LOCK_MS, limit=2) == []


def test_release_at_delivery_limit_archives_record():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 0), (1, 1)], limit=2)
    ack_and_commit(sp, "m1", [(0, 0, [RELEASE])], limit=2)
    assert acquire(sp, "m1", [(0, 0)], limit=2) == [AcquiredRange(0, 0, 2)]
    write = applied(ack(sp, "m1", [(0, 0, [RELEASE])], limit=2))
    assert write.start_offset == 1  # archived at the head: the write moves the start past it
    assert sp.record(0) == (ARCHIVED, 2, None)
    complete(sp, write, limit=2)
    assert sp.start_offset == 1
    assert sp.record(1) == (ACQUIRED, 1, "m1")


def test_session_release_keeps_counts_and_archives_at_the_limit():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 1)], limit=2)
    ack_and_commit(sp, "m1", [(1, 1, [RELEASE])], limit=2)
    acquire(sp, "m1", [(1, 1)], limit=2)
    acquire(sp, "m2", [(2, 3)], limit=2)
    assert release(sp, "m1", limit=2) is not None
    assert sp.record(0) == (AVAILABLE, 1, None)
    assert sp.record(1) == (ARCHIVED, 2, None)
    assert states(sp, 2, 3) == [(ACQUIRED, 1, "m2")] * 2


def test_releasing_a_member_without_records_writes_nothing():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)])
    assert sp.release_member("m2", delivery_limit=LIMIT, now_ms=0) == []  # no write and the lock timer unchanged
    assert sp.expire_locks(delivery_limit=LIMIT, now_ms=LOCK_MS - 1) == []
    assert sp.pending_writes() == 0


def test_accept_acknowledges_and_reject_and_gap_archive():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 5)])
    write = applied(ack(sp, "m1", [(0, 5, [ACCEPT, ACCEPT, REJECT, GAP, ACCEPT, REJECT])]))
    assert [s for s, _c, _m in states(sp, 0, 5)] == [ACKNOWLEDGED, ACKNOWLEDGED, ARCHIVED, ARCHIVED, ACKNOWLEDGED,
                                                     ARCHIVED]
    assert all(m is None and c == 1 for _s, c, m in states(sp, 0, 5))
    complete(sp, write)
    assert sp.start_offset == 6 and sp.in_flight_count == 0


def test_ack_by_non_owner_is_invalid_record_state():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)])
    before = states(sp, 0, 4)
    assert refused(ack(sp, "m2", [(0, 4, [ACCEPT])]), ErrorCode.invalid_record_state)
    assert refused(ack(sp, "m2", [(2, 2, [RELEASE])]), ErrorCode.invalid_record_state)
    assert states(sp, 0, 4) == before
    assert sp.pending_writes() == 0


def test_ack_of_records_not_acquired_fails():
    sp = SharePartition(5)
    acquire(sp, "m1", [(5, 9)])
    ack_and_commit(sp, "m1", [(7, 7, [RELEASE])])
    assert refused(ack(sp, "m1", [(7, 7, [ACCEPT])]), ErrorCode.invalid_record_state)  # AVAILABLE, not acquired
    ack_and_commit(sp, "m1", [(8, 8, [ACCEPT])])
    assert refused(ack(sp, "m1", [(8, 8, [ACCEPT])]), ErrorCode.invalid_record_state)  # already acknowledged
    assert refused(ack(sp, "m1", [(9, 10, [ACCEPT])]), ErrorCode.invalid_request)  # past the end: never acquired
    assert sp.record(9) == (ACQUIRED, 1, "m1")
    assert ack(sp, "m1", [(9, 9, [ACCEPT])]).error == ErrorCode.none


def test_ack_below_the_start_offset_is_skipped_and_the_rest_applied():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)])
    ack_and_commit(sp, "m1", [(0, 4, [ACCEPT])])
    assert sp.start_offset == 5
    # already terminal and gone: nothing to do, and no error (Kafka's `SharePartition.acknowledge`: "All offsets
    # in the acknowledgement batch are already archived")
    assert ack(sp, "m1", [(0, 2, [REJECT])]) == (ErrorCode.none, None, [])
    write = applied(ack(sp, "m1", [(3, 6, [REJECT, REJECT, ACCEPT, RELEASE])]))  # 3-4 skipped
    assert write.state_batches == (StateBatch(6, 6, int(AVAILABLE), 1),)
    assert write.start_offset == 6
    complete(sp, write)
    assert sp.start_offset == 6
    assert sp.record(6) == (AVAILABLE, 1, None)


def test_multi_batch_ack_is_atomic():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)])
    acquire(sp, "m2", [(10, 14)])
    before = states(sp, 0, 14)
    assert refused(ack(sp, "m1", [(0, 3, [ACCEPT]), (4, 6, [RELEASE, REJECT, ACCEPT]), (8, 11, [ACCEPT])]))
    assert states(sp, 0, 14) == before
    write = applied(ack(sp, "m1", [(0, 3, [ACCEPT]), (4, 6, [RELEASE, REJECT, ACCEPT]), (8, 9, [ACCEPT])]))
    assert [s for s, _c, _m in states(sp, 0, 9)] == [ACKNOWLEDGED] * 4 + [AVAILABLE, ARCHIVED, ACKNOWLEDGED,
                                                                           ACQUIRED, ACKNOWLEDGED, ACKNOWLEDGED]


def test_an_ack_batch_overlapping_the_one_before_it_is_invalid_record_state():
    # Kafka 4.2 `SharePartition.acknowledge`: request validation lets a batch start at the previous batch's last
    # offset; that offset's state transition has already begun, so the request fails with INVALID_RECORD_STATE
    # and nothing is applied
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)])
    assert refused(ack(sp, "m1", [(0, 4, [ACCEPT]), (4, 6, [REJECT])]))
    assert refused(ack(sp, "m1", [(0, 4, [ACCEPT]), (2, 6, [REJECT])]))
    assert states(sp, 0, 9) == [(ACQUIRED, 1, "m1")] * 10
    assert sp.pending_writes() == 0
    # the same batches without the overlap are fine
    ack_and_commit(sp, "m1", [(0, 4, [ACCEPT]), (5, 6, [REJECT])])
    assert sp.start_offset == 7


def test_an_ack_batch_overlapping_a_renewal_before_it_applies():
    # a RENEW leaves its records ACQUIRED, so a later batch of the same request may acknowledge them
    # (Kafka applies the batches in turn); one below the start offset is skipped as always
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)])
    ack_and_commit(sp, "m1", [(0, 4, [RENEW]), (4, 6, [ACCEPT])])
    assert [s for s, _c, _m in states(sp, 0, 9)] == [ACQUIRED] * 4 + [ACKNOWLEDGED] * 3 + [ACQUIRED] * 3
    assert refused(ack(sp, "m1", [(7, 8, [RENEW, ACCEPT]), (8, 9, [ACCEPT])]))  # 8 was accepted, not renewed
    ack_and_commit(sp, "m1", [(0, 3, [ACCEPT]), (7, 9, [ACCEPT])])
    assert sp.start_offset == 10


def test_an_ack_after_another_member_completed_the_records_is_skipped_without_error():
    # m1's lock ran out, m2 acquired and accepted the records, and the start offset passed them: m1's late
    # acknowledgement is skipped ("already archived", Kafka `SharePartition.acknowledge`), not an error
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)], now=0)
    expire(sp, now=LOCK_MS)
    assert acquire(sp, "m2", [(0, 4)], now=LOCK_MS) == [AcquiredRange(0, 4, 2)]
    ack_and_commit(sp, "m2", [(0, 4, [ACCEPT])], now=LOCK_MS)
    assert sp.start_offset == 5
    assert ack(sp, "m1", [(0, 4, [RELEASE])], now=LOCK_MS) == (ErrorCode.none, None, [])
    # still in the window: the late acknowledgement is refused
    acquire(sp, "m1", [(5, 9)], now=LOCK_MS)
    expire(sp, now=2 * LOCK_MS)
    assert refused(ack(sp, "m1", [(5, 9, [ACCEPT])], now=2 * LOCK_MS))


def test_ack_after_lock_expiry_fails():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)], now=0)
    # the lock has run out even though the timer has not fired yet
    assert refused(ack(sp, "m1", [(0, 4, [ACCEPT])], now=LOCK_MS))
    assert states(sp, 0, 4) == [(ACQUIRED, 1, "m1")] * 5
    expire(sp, now=LOCK_MS)
    assert refused(ack(sp, "m1", [(0, 4, [ACCEPT])], now=LOCK_MS))
    assert states(sp, 0, 4) == [(AVAILABLE, 1, None)] * 5


def test_renew_extends_lock():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)], now=0)
    write = applied(ack(sp, "m1", [(0, 1, [RENEW])], now=LOCK_MS - 10))
    assert write is None  # renewals are not persisted
    assert states(sp, 0, 4) == [(ACQUIRED, 1, "m1")] * 5
    expire(sp, now=LOCK_MS)
    assert states(sp, 0, 1) == [(ACQUIRED, 1, "m1")] * 2
    assert states(sp, 2, 4) == [(AVAILABLE, 1, None)] * 3
    assert sp.next_deadline_ms() == 2 * LOCK_MS - 10
    ack_and_commit(sp, "m1", [(0, 1, [ACCEPT])], now=2 * LOCK_MS - 11)
    assert sp.start_offset == 2


def test_renew_per_offset_mixed_with_other_types():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 3)], now=0)
    write = applied(ack(sp, "m1", [(0, 3, [RENEW, ACCEPT, RENEW, RELEASE])], now=100))
    assert [b[:3] for b in write.state_batches] == [(1, 1, int(ACKNOWLEDGED)), (3, 3, int(AVAILABLE))]
    assert sp.record(0) == (ACQUIRED, 1, "m1") and sp.record(2) == (ACQUIRED, 1, "m1")
    complete(sp, write, now=100)
    expire(sp, now=LOCK_MS + 99)
    assert sp.record(0) == (ACQUIRED, 1, "m1")


def test_renew_disabled_fails():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)], now=0)
    assert refused(ack(sp, "m1", [(0, 4, [RENEW])], now=10, renew=False))
    # nothing else in the request is applied either
    assert refused(ack(sp, "m1", [(0, 1, [ACCEPT]), (2, 4, [ACCEPT, RENEW, ACCEPT])], now=10, renew=False))
    assert states(sp, 0, 4) == [(ACQUIRED, 1, "m1")] * 5
    assert sp.next_deadline_ms() == LOCK_MS


def test_renew_of_expired_record_fails():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)], now=0)
    assert refused(ack(sp, "m1", [(0, 4, [RENEW])], now=LOCK_MS))
    assert sp.next_deadline_ms() == LOCK_MS


def test_start_offset_advances_over_contiguous_terminal_records():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4), (5, 9), (10, 14)])
    ack_and_commit(sp, "m1", [(5, 9, [ACCEPT])])
    assert sp.start_offset == 0
    ack_and_commit(sp, "m1", [(0, 2, [REJECT])])
    assert sp.start_offset == 3
    assert sp.delivery_complete_count() == 5
    ack_and_commit(sp, "m1", [(3, 4, [ACCEPT])])
    assert sp.start_offset == 10
    assert sp.delivery_complete_count() == 0
    assert sp.in_flight_count == 5


def test_start_offset_moves_only_on_commit():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)])
    write = applied(ack(sp, "m1", [(0, 4, [ACCEPT])]))
    assert write.start_offset == 5 and write.delivery_complete_count == 0
    assert sp.start_offset == 0
    assert states(sp, 0, 4) == [(ACKNOWLEDGED, 1, None)] * 5
    complete(sp, write)
    assert sp.start_offset == 5


def test_all_acknowledged_empties_window():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4), (5, 9)])
    ack_and_commit(sp, "m1", [(0, 9, [ACCEPT])])
    assert len(sp.runs) == 0
    assert (sp.start_offset, sp.end_offset, sp.in_flight_count) == (10, 9, 0)
    assert sp.delivery_complete_count() == 0
    assert sp.fetch_offset(1) == 10
    assert sp.state_batches() == []
    assert acquire(sp, "m1", [(10, 12)]) == [AcquiredRange(10, 12, 1)]


def test_delivery_complete_count_counts_terminal_records_in_the_window():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)])
    ack_and_commit(sp, "m1", [(2, 3, [ACCEPT]), (5, 5, [REJECT]), (7, 7, [RELEASE])])
    assert sp.delivery_complete_count() == 3


# ---------------------------------------------------------------- acquire modes and limits


def test_record_limit_splits_a_batch():
    sp = SharePartition(0)
    assert acquire(sp, "m1", [(0, 9)], max_records=3, record_limit=True) == [AcquiredRange(0, 2, 1)]
    assert sp.end_offset == 2
    assert acquire(sp, "m2", [(0, 9)], max_records=4, record_limit=True) == [AcquiredRange(3, 6, 1)]
    assert acquire(sp, "m1", [(0, 9), (10, 19)], max_records=5, record_limit=True) == [AcquiredRange(7, 11, 1)]
    assert states(sp, 3, 6) == [(ACQUIRED, 1, "m2")] * 4


def test_record_limit_splits_released_records_too():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)])
    ack_and_commit(sp, "m1", [(0, 9, [RELEASE])])
    assert acquire(sp, "m2", [(0, 9)], max_records=4, record_limit=True) == [AcquiredRange(0, 3, 2)]
    assert states(sp, 4, 9) == [(AVAILABLE, 1, None)] * 6


def test_batch_optimized_takes_whole_batches_as_soft_cap():
    sp = SharePartition(0)
    got = acquire(sp, "m1", [(0, 9), (10, 19), (20, 29)], max_records=12)
    assert got == [AcquiredRange(0, 19, 1)]  # 12 reached inside the second batch: it is taken whole
    assert acquire(sp, "m1", [(20, 29)], max_records=1) == [AcquiredRange(20, 29, 1)]
    assert acquire(sp, "m1", [(30, 34), (35, 39)], max_records=5) == [AcquiredRange(30, 34, 1)]


def test_mixed_mode_members_share_a_partition():
    sp = SharePartition(0)
    assert acquire(sp, "limit", [(0, 9)], max_records=3, record_limit=True) == [AcquiredRange(0, 2, 1)]
    assert acquire(sp, "batch", [(0, 9), (10, 14)], max_records=3) == [AcquiredRange(3, 9, 1)]
    assert states(sp, 0, 2) == [(ACQUIRED, 1, "limit")] * 3
    assert states(sp, 3, 9) == [(ACQUIRED, 1, "batch")] * 7


def test_throttling_halves_near_the_limit_and_last_attempt_alone():
    # limit 5: throttled once records have been delivered max(2, ceil(5 / 2)) = 3 times (KAFKA-17541)
    sp = SharePartition(0)
    assert acquire(sp, "m1", [(0, 15)]) == [AcquiredRange(0, 15, 1)]
    ack_and_commit(sp, "m1", [(0, 15, [RELEASE])])
    assert acquisition(sp, "m1", [(0, 15)]) == ([AcquiredRange(0, 15, 2)], False, [LockTimer(LOCK_MS)])
    ack_and_commit(sp, "m1", [(0, 15, [RELEASE])])
    assert acquisition(sp, "m1", [(0, 15)]).ranges == [AcquiredRange(0, 15, 3)]  # deliveries 2 and 3: whole
    ack_and_commit(sp, "m1", [(0, 15, [RELEASE])])
    got = acquisition(sp, "m1", [(0, 15)])
    assert got.ranges == [AcquiredRange(0, 7, 4)]  # delivery 4: half the batch
    assert got.throttled
    ack_and_commit(sp, "m1", [(0, 7, [RELEASE])])
    got = acquisition(sp, "m1", [(0, 15)])
    assert got.ranges == [AcquiredRange(0, 0, 5)]  # delivery 5, the last: alone
    assert got.throttled
    assert acquire(sp, "m1", [(0, 15)]) == [AcquiredRange(1, 1, 5)]
    assert all(sp.record(o)[1] <= LIMIT for o in range(16))


def test_throttled_records_come_last_and_stop_the_acquisition():
    sp = SharePartition(0, [StateBatch(0, 3, int(AVAILABLE), 3), StateBatch(4, 7, int(AVAILABLE), 1)])
    got = acquire(sp, "m1", [(0, 7), (8, 9)])
    assert got == [AcquiredRange(0, 1, 4)]  # nothing after throttled records, not even new ones
    assert sp.end_offset == 7


def test_a_throttled_run_is_never_taken_after_other_records():
    # Kafka 4.2 `SharePartition.acquire`: when an in-flight batch must be throttled and records were already
    # acquired in this fetch (`throttleRecordsDelivery && acquiredCount > 0`), acquisition stops before it; the
    # throttled records come alone in a later fetch. (Before, quafka took half of them after the others.)
    sp = SharePartition(0, [StateBatch(0, 3, int(AVAILABLE), 1), StateBatch(4, 7, int(AVAILABLE), 3)])
    first = acquisition(sp, "m1", [(0, 7), (8, 9)])
    assert first.ranges == [AcquiredRange(0, 3, 2)]  # not 4-5 at delivery 4, and no new records either
    assert first.throttled
    assert sp.end_offset == 7 and states(sp, 4, 7) == [(AVAILABLE, 3, None)] * 4
    second = acquisition(sp, "m2", [(4, 7), (8, 9)])
    assert second.ranges == [AcquiredRange(4, 5, 4)] and second.throttled  # alone, half the batch
    assert sp.end_offset == 7


def test_with_a_delivery_limit_of_two_the_last_attempt_is_not_delivered_alone():
    # Kafka `SharePartition.acquireSubsetBatchRecords` isolates the last attempt only when maxDeliveryCount > 2,
    # and throttling starts at max(2, ceil(2 / 2)) = 2 deliveries, which is already the limit: a released batch
    # is redelivered whole. (Before, quafka delivered it a record at a time.)
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)], limit=2)
    got = deliver_again(sp, "m1", 0, 9, 1, limit=2)
    assert got == [AcquiredRange(0, 9, 2)]
    ack_and_commit(sp, "m1", [(0, 9, [RELEASE])], limit=2)  # at the limit: archived
    assert len(sp.runs) == 0 and sp.start_offset == 10


def test_throttled_halving_is_per_attempt_from_the_batch_size():
    # Kafka halves from the in-flight batch's size for every fetch at the same delivery attempt
    sp = SharePartition(0, [StateBatch(0, 15, int(AVAILABLE), 3)])
    assert acquire(sp, "m1", [(0, 15)]) == [AcquiredRange(0, 7, 4)]
    assert acquire(sp, "m2", [(0, 15)]) == [AcquiredRange(8, 15, 4)]


def test_last_attempt_is_delivered_alone_even_after_other_available_records():
    sp = SharePartition(0, [StateBatch(0, 4, int(AVAILABLE), 1), StateBatch(5, 9, int(AVAILABLE), 4)])
    first = acquisition(sp, "m2", [(0, 4), (5, 9)])
    assert first.ranges == [AcquiredRange(0, 4, 2)]  # the last attempt does not ride along
    assert first.throttled  # stopped at the throttled run: the shell reads no further for this fetch
    assert acquire(sp, "m2", [(5, 9)]) == [AcquiredRange(5, 5, 5)]


def test_max_in_flight_stops_new_acquisition_but_finishes_the_batch():
    sp = SharePartition(0)
    got = acquire(sp, "m1", [(0, 5), (6, 11), (12, 17)], max_in_flight=8)
    assert got == [AcquiredRange(0, 11, 1)]  # 6 < 8 in flight: the second batch is taken whole
    assert sp.in_flight_count == 12
    assert sp.fetch_offset(8) is None
    assert acquire(sp, "m2", [(12, 17)], max_in_flight=8) == []
    ack_and_commit(sp, "m1", [(0, 5, [ACCEPT])])
    assert sp.fetch_offset(8) == 12
    assert acquire(sp, "m2", [(12, 17)], max_in_flight=8) == [AcquiredRange(12, 17, 1)]


def test_at_the_in_flight_cap_released_records_are_still_redelivered():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)], max_in_flight=10)
    ack_and_commit(sp, "m1", [(4, 5, [RELEASE])])
    assert sp.fetch_offset(10) == 4
    assert acquire(sp, "m2", [(4, 9), (10, 14)], max_in_flight=10) == [AcquiredRange(4, 5, 2)]


def test_next_deadline_is_the_earliest_lock():
    sp = SharePartition(0)
    assert sp.next_deadline_ms() is None
    acquire(sp, "m1", [(0, 4)], now=100)
    acquire(sp, "m2", [(5, 9)], now=50, lock_ms=1000)
    assert sp.next_deadline_ms() == 1050
    ack_and_commit(sp, "m2", [(5, 9, [ACCEPT])], now=60)
    assert sp.next_deadline_ms() == 100 + LOCK_MS


def test_released_records_compacted_away_are_archived_so_the_start_offset_can_move():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)])
    ack_and_commit(sp, "m1", [(0, 4, [RELEASE])])
    assert sp.fetch_offset(12) == 0
    # compaction removed the batch 0-4: a read from offset 0 returns the batch at 5 first
    got = acquisition(sp, "m2", [(5, 9)], max_in_flight=12)
    assert got.ranges == [AcquiredRange(5, 9, 1)]
    assert sp.record(0) is None or sp.record(0)[0] == ARCHIVED  # stale: never to be delivered
    assert sp.fetch_offset(12) == 10
    archived = writes(got.effects)  # the archiving is persisted like any other change, as an effect
    # 0-4 archived: the persisted start moves past them (no state batch needed below it)
    assert [(w.start_offset, w.state_batches) for w in archived] == [(5, ())]
    for write in archived:
        complete(sp, write)
    ack_and_commit(sp, "m2", [(5, 9, [ACCEPT])])
    assert sp.start_offset == 10
    assert acquire(sp, "m2", [(10, 14)], max_in_flight=12) == [AcquiredRange(10, 14, 1)]


def test_a_hole_in_the_log_before_the_first_batch_does_not_hold_back_the_start_offset():
    sp = SharePartition(0)
    assert acquire(sp, "m1", [(5, 9)]) == [AcquiredRange(5, 9, 1)]
    assert (sp.start_offset, sp.end_offset, sp.in_flight_count) == (5, 9, 5)
    assert sp.delivery_complete_count() == 0
    assert sp.record(0) is None


# ---------------------------------------------------------------- the log start offset


def test_move_start_offset_archives_in_flight_records():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)])
    ack_and_commit(sp, "m1", [(8, 8, [ACCEPT])])
    ack_and_commit(sp, "m1", [(2, 3, [RELEASE])])
    effects = sp.move_start_offset(6)
    write = the_write(effects)
    assert write is not None and write.start_offset == 6 and write.state_batches == ()
    assert WakeFetches() in effects
    assert sp.start_offset == 6
    assert [sp.record(o) for o in range(0, 6)] == [None] * 6
    assert states(sp, 6, 9) == [(ACQUIRED, 1, "m1"), (ACQUIRED, 1, "m1"), (ACKNOWLEDGED, 1, None),
                                (ACQUIRED, 1, "m1")]
    assert sp.delivery_complete_count() == 1  # the passed records do not count as complete
    assert acquire(sp, "m2", [(0, 9)]) == []  # released 2-3 are gone, not redelivered
    complete(sp, write)
    assert sp.start_offset == 6
    ack_write = applied(ack(sp, "m1", [(4, 6, [ACCEPT])]))  # the holder's ack of passed records is skipped
    assert ack_write.start_offset == 7
    assert sp.record(6) == (ACKNOWLEDGED, 1, None)


def test_move_start_offset_backwards_is_ignored():
    sp = SharePartition(10)
    assert sp.move_start_offset(5) == []
    assert sp.move_start_offset(10) == []
    assert sp.start_offset == 10


def test_move_start_offset_past_all_cached_data_clears_the_window():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)])
    effects = sp.move_start_offset(25)
    write = the_write(effects)
    assert LockTimer(None) in effects  # the last lock is gone
    assert len(sp.runs) == 0
    assert (sp.start_offset, sp.next_offset, sp.in_flight_count) == (25, 25, 0)
    assert sp.fetch_offset(100) == 25
    assert sp.next_deadline_ms() is None
    complete(sp, write)
    assert acquire(sp, "m1", [(20, 29)]) == [AcquiredRange(25, 29, 1)]


def test_move_start_offset_inside_a_pending_run_leaves_the_rest_consistent():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)])
    write = applied(ack(sp, "m1", [(0, 9, [RELEASE])]))
    move = the_write(sp.move_start_offset(4))
    complete(sp, write, ok=True)
    complete(sp, move)
    # 4-9 were released (durably): they are available again, with nothing left in flight
    assert sp.pending_writes() == 0
    assert states(sp, 4, 9) == [(AVAILABLE, 1, None)] * 6
    assert sp.fetch_offset(100) == 4
    assert acquire(sp, "m2", [(4, 9)]) == [AcquiredRange(4, 9, 2)]


def test_move_start_offset_inside_a_pending_run_then_failed_write_rolls_back_the_rest():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)])
    write = applied(ack(sp, "m1", [(0, 9, [ACCEPT])]))
    sp.move_start_offset(4)
    complete(sp, write, ok=False, now=1)
    assert states(sp, 4, 9) == [(ACQUIRED, 1, "m1")] * 6
    write = applied(ack(sp, "m1", [(4, 9, [ACCEPT])], now=2))
    complete(sp, write, now=2)
    assert sp.start_offset == 10 and len(sp.runs) == 0


# ---------------------------------------------------------------- two-phase writes


def test_persist_write_carries_the_changed_batches():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)])
    write = applied(ack(sp, "m1", [(2, 4, [RELEASE]), (6, 6, [REJECT])]))
    assert write.start_offset == 0
    assert write.state_batches == (StateBatch(2, 4, int(AVAILABLE), 1), StateBatch(6, 6, int(ARCHIVED), 1))
    assert write.delivery_complete_count == 1
    assert sp.pending_writes() == 1
    complete(sp, write)
    assert sp.pending_writes() == 0


def test_failed_write_rolls_back():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)], now=0)
    write = applied(ack(sp, "m1", [(0, 1, [ACCEPT]), (2, 4, [RELEASE, REJECT, GAP])], now=10))
    complete(sp, write, ok=False, now=20)
    assert states(sp, 0, 4) == [(ACQUIRED, 1, "m1")] * 5
    assert sp.start_offset == 0
    assert sp.next_deadline_ms() == LOCK_MS
    ack_and_commit(sp, "m1", [(0, 4, [ACCEPT])], now=30)  # the owner may ack again
    assert sp.start_offset == 5


def test_failed_release_write_rolls_back_to_acquired():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)], now=0)
    write = the_write(sp.release_member("m1", delivery_limit=LIMIT, now_ms=5))
    complete(sp, write, ok=False, now=6)
    assert states(sp, 0, 4) == [(ACQUIRED, 1, "m1")] * 5


def test_rollback_after_lock_expiry_gives_available():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)], now=0)
    write = applied(ack(sp, "m1", [(0, 4, [ACCEPT])], now=LOCK_MS - 1))
    assert writes(sp.expire_locks(delivery_limit=LIMIT, now_ms=LOCK_MS)) == []  # pending: not expired twice
    complete(sp, write, ok=False, now=LOCK_MS + 5)
    assert states(sp, 0, 4) == [(AVAILABLE, 1, None)] * 5
    assert sp.next_deadline_ms() is None
    assert acquire(sp, "m2", [(0, 4)], now=LOCK_MS + 5) == [AcquiredRange(0, 4, 2)]


def test_rollback_after_lock_expiry_at_the_limit_archives():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 0)], limit=2)
    ack_and_commit(sp, "m1", [(0, 0, [RELEASE])], limit=2)
    acquire(sp, "m1", [(0, 0)], limit=2, now=100)
    write = applied(ack(sp, "m1", [(0, 0, [ACCEPT])], now=101, limit=2))
    complete(sp, write, ok=False, now=100 + LOCK_MS, limit=2)
    assert sp.record(0) == (ARCHIVED, 2, None)


def test_commit_after_lock_expiry_keeps_the_acknowledgement():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)], now=0)
    write = applied(ack(sp, "m1", [(0, 4, [ACCEPT])], now=1))
    complete(sp, write, ok=True, now=LOCK_MS + 1)
    assert sp.start_offset == 5 and len(sp.runs) == 0


def test_pending_runs_take_no_second_transition():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)], now=0)
    release_write = applied(ack(sp, "m1", [(0, 4, [RELEASE])], now=1))
    accept_write = applied(ack(sp, "m1", [(5, 9, [ACCEPT])], now=1))
    # the released records are AVAILABLE but their write is in flight: not handed out again
    assert sp.fetch_offset(100) == 10
    assert acquire(sp, "m2", [(0, 9)], now=2) == []
    # the accepted records cannot be acked again, expired or released
    assert refused(ack(sp, "m1", [(5, 9, [REJECT])], now=2))
    assert writes(sp.expire_locks(delivery_limit=LIMIT, now_ms=2 * LOCK_MS)) == []
    assert writes(sp.release_member("m1", delivery_limit=LIMIT, now_ms=2)) == []
    assert states(sp, 0, 4) == [(AVAILABLE, 1, None)] * 5
    assert states(sp, 5, 9) == [(ACKNOWLEDGED, 1, None)] * 5
    complete(sp, release_write, now=3)
    assert acquire(sp, "m2", [(0, 9)], now=3) == [AcquiredRange(0, 4, 2)]


def test_an_unknown_or_repeated_write_completion_is_harmless():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)])
    write = applied(ack(sp, "m1", [(0, 4, [ACCEPT])]))
    complete(sp, write)
    complete(sp, write, ok=False)
    sp.on_write_complete(999, False, delivery_limit=LIMIT, now_ms=0)
    assert sp.start_offset == 5 and len(sp.runs) == 0


def test_write_start_offset_ignores_other_uncommitted_writes():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)])
    acquire(sp, "m2", [(5, 9)])
    first = applied(ack(sp, "m1", [(0, 4, [ACCEPT])]))
    second = applied(ack(sp, "m2", [(5, 9, [ACCEPT])]))
    # 0-4 are not durable yet: the second write must not move the start offset past them; its
    # delivery-complete count includes them (writes reach the coordinator in the order they start,
    # so the count never goes back there)
    assert second.start_offset == 0
    assert first.delivery_complete_count == 0 and second.delivery_complete_count == 10
    complete(sp, second)
    complete(sp, first, ok=False)
    assert states(sp, 0, 4) == [(ACQUIRED, 1, "m1")] * 5
    assert sp.start_offset == 0


def test_a_write_whose_records_the_log_start_passed_holds_no_start_offset_back():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)])
    applied(ack(sp, "m1", [(0, 4, [RELEASE])]))  # its write stays in flight
    sp.move_start_offset(5)  # the log start passes every record of the release write
    acquire(sp, "m1", [(5, 5)])
    accept = applied(ack(sp, "m1", [(5, 5, [ACCEPT])]))
    assert sp.pending_writes() == 3  # the release, the start offset move and the acceptance
    assert accept.start_offset == 6  # no record of another write in flight is at or past 5


# ---------------------------------------------------------------- persisted state


def test_persisted_state_is_restored():
    batches = [
        StateBatch(0, 4, int(ACKNOWLEDGED), 1),  # below the start offset: dropped
        StateBatch(8, 11, int(ARCHIVED), 2),  # straddles the start offset: trimmed
        StateBatch(12, 14, int(AVAILABLE), 3),
        StateBatch(15, 15, int(ACQUIRED), 2),  # never durable as ACQUIRED: comes back AVAILABLE
        StateBatch(18, 19, int(ACKNOWLEDGED), 1),  # 16-17 is a gap: acquirable, never delivered
        StateBatch(20, 20, int(ARCHIVING), 4),  # its DLQ write may not have happened: resumed
    ]
    sp = SharePartition(10, reversed(batches))
    assert sp.start_offset == 12  # 10-11 archived at the head
    assert sp.end_offset == 20
    assert states(sp, 12, 20) == ([(AVAILABLE, 3, None)] * 3 + [(AVAILABLE, 2, None)] + [(AVAILABLE, 0, None)] * 2
                                  + [(ACKNOWLEDGED, 1, None)] * 2 + [(ARCHIVING, 4, None)])
    assert sp.delivery_complete_count() == 2
    assert acquire(sp, "m1", [(12, 20)], limit=10) == [
        AcquiredRange(12, 14, 4), AcquiredRange(15, 15, 3), AcquiredRange(16, 17, 1)]
    assert acquire(sp, "m1", [(12, 25)], limit=10) == [AcquiredRange(21, 25, 1)]


def test_persisted_state_with_every_record_terminal_restores_an_empty_window():
    sp = SharePartition(0, [StateBatch(0, 9, int(ACKNOWLEDGED), 1), StateBatch(10, 12, int(ARCHIVED), 5)])
    assert (sp.start_offset, sp.end_offset, list(sp.runs)) == (13, 12, [])


def test_state_batches_round_trip_through_a_restart():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)])
    ack_and_commit(sp, "m1", [(0, 9, [ACCEPT, REJECT, RELEASE, RELEASE, ACCEPT, RENEW, GAP, ACCEPT, RELEASE,
                                      ACCEPT])])
    batches = sp.state_batches()
    assert batches[0].first_offset == sp.start_offset == 2
    assert batches[-1].last_offset == sp.end_offset == 9
    restored = SharePartition(sp.start_offset, batches)
    for o in range(2, 10):
        state, count, _member = sp.record(o)
        assert restored.record(o) == (AVAILABLE if state == ACQUIRED else state, count, None)
    assert restored.delivery_complete_count() == sp.delivery_complete_count()


def test_available_record_over_a_lowered_delivery_limit_is_not_delivered_again():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 0), (1, 1)], limit=5)
    for _ in range(2):
        ack_and_commit(sp, "m1", [(0, 0, [RELEASE])], limit=5)
        acquire(sp, "m1", [(0, 0)], limit=5)
    ack_and_commit(sp, "m1", [(0, 0, [RELEASE])], limit=5)
    assert sp.record(0) == (AVAILABLE, 3, None)
    # the group's delivery limit is lowered to 3: offset 0 has had its 3 deliveries
    got = acquire(sp, "m2", [(0, 1), (2, 2)], limit=3)
    assert all(r.delivery_count <= 3 for r in got)
    assert 0 not in offsets(got)


def test_a_restored_record_at_the_limit_is_not_delivered_again():
    sp = SharePartition(0, [StateBatch(0, 2, int(AVAILABLE), LIMIT)])
    got = acquire(sp, "m1", [(0, 2), (3, 4)])
    assert all(r.delivery_count <= LIMIT for r in got)
    assert not {0, 1, 2} & set(offsets(got))


# ---------------------------------------------------------------- batch-level state


def test_per_offset_ack_types_split_only_what_is_needed():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 0), (1, 10)])  # offset 0 stays acquired: the start offset does not move
    types = [ACCEPT] * 4 + [REJECT] * 2 + [ACCEPT] * 4
    write = applied(ack(sp, "m1", [(1, 10, types)]))
    assert [(r.first, r.last, r.state) for r in sp.runs] == [(0, 0, ACQUIRED), (1, 4, ACKNOWLEDGED),
                                                              (5, 6, ARCHIVED), (7, 10, ACKNOWLEDGED)]
    assert [b[:3] for b in write.state_batches] == [(1, 4, int(ACKNOWLEDGED)), (5, 6, int(ARCHIVED)),
                                                    (7, 10, int(ACKNOWLEDGED))]


def test_per_offset_ack_with_one_repeated_type_keeps_the_batch_whole():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)])
    write = applied(ack(sp, "m1", [(0, 9, [RELEASE] * 10)]))
    assert len(sp.runs) == 1 and write.state_batches == (StateBatch(0, 9, int(AVAILABLE), 1),)


def test_a_partial_ack_splits_the_batch_at_its_edges_only():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)])
    ack_and_commit(sp, "m1", [(3, 6, [RELEASE])])
    assert [(r.first, r.last, r.state) for r in sp.runs] == [(0, 2, ACQUIRED), (3, 6, AVAILABLE), (7, 9, ACQUIRED)]


def test_acquire_is_o1_per_batch():
    n = 200
    sp = SharePartition(0)
    log_batches = [(i * 10, i * 10 + 9) for i in range(n)]
    got = acquire(sp, "m1", log_batches, max_records=0)
    assert got == [AcquiredRange(0, n * 10 - 1, 1)]
    assert len(sp.runs) == n  # one run per producer batch, not per record
    assert [(r.first, r.last) for r in sp.runs] == log_batches
    write = applied(ack(sp, "m1", [(b, l, [ACCEPT]) for b, l in log_batches[n // 2:]]))
    assert len(sp.runs) == n  # whole-batch acks split nothing
    assert len(write.state_batches) == n // 2
    complete(sp, write)
    # runs of different producer batches never merge (Kafka keeps its in-flight batches apart, and
    # throttling halves a batch's own size): the accepted half stays one run per batch
    assert len(sp.runs) == n
    ack_and_commit(sp, "m1", [(b, l, [ACCEPT]) for b, l in log_batches[: n // 2]])
    assert len(sp.runs) == 0 and sp.start_offset == n * 10


def test_delivery_complete_count_never_goes_back_across_writes_in_flight():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 9)])
    first = applied(ack(sp, "m1", [(5, 7, [REJECT])]))
    second = applied(ack(sp, "m1", [(8, 8, [ACCEPT])]))
    assert first.start_offset == second.start_offset == 0
    assert first.delivery_complete_count == 3 and second.delivery_complete_count == 4


def test_records_never_sent_go_back_with_their_count_from_before():
    """`return_unsent` (a fetch acquired, its connection dropped before the answer was written):
    the acquisition is undone — AVAILABLE at once (no backoff), the count from before — only for
    the ranges given and only while the member still holds them."""
    sp = SharePartition(0)
    assert acquire(sp, "m1", [(0, 9)]) == [AcquiredRange(0, 9, 1)]
    effects = sp.return_unsent("m1", [(2, 4)])
    write = the_write(effects)  # the restored state is written like a release; acquirable once stored
    assert write is not None and acquire(sp, "m2", [(0, 9)]) == []
    sp.on_write_complete(write.write_id, True, delivery_limit=LIMIT, now_ms=0)
    for offset in (2, 3, 4):
        assert sp.record(offset) == (AVAILABLE, 0, None)
    assert sp.record(1) == (ACQUIRED, 1, "m1") and sp.record(5) == (ACQUIRED, 1, "m1")
    assert sp.return_unsent("m2", [(0, 1)]) == [] and sp.record(0) == (ACQUIRED, 1, "m1")  # not m2's
    assert acquire(sp, "m2", [(0, 9)]) == [AcquiredRange(2, 4, 1)]  # first delivery again, for anyone
    ack(sp, "m1", [(0, 1, [RELEASE])])
    assert acquire(sp, "m2", [(0, 9)]) == []  # released records wait for the release's write
