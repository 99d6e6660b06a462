"""A failed state write whose records lost their holder meanwhile (issue 28, item 2): the lock ran
out while the write was in flight, or the holder's share session ended.

Kafka (`SharePartition.rollbackOrProcessStateUpdates` → `InFlightState.completeStateTransition(false)`):
the acquisition-lock timer skips records whose transition is in flight (the timeout handler acts only
on ACQUIRED records), and the rollback then finds the lock task expired and makes the record
AVAILABLE with the delivery count from before the write. quafka does the same below the delivery
limit; at the limit, where Kafka would deliver the record once more, it archives it (to the DLQ
when the group has one) with a new write — the rule of the event that took the holder away.
"""

from __future__ import annotations

from quafka.broker.core.record_state import RecordState
from quafka.broker.core.share_partition import DeadLetterWrite, SharePartition, WakeFetches
from quafka.protocol.dead_letter_headers import REASON_LOCK_EXPIRED_AT_LIMIT, REASON_RELEASED_AT_LIMIT
from quafka.protocol.errors import ErrorCode

from .test_share_partition import LOCK_MS, acquire, ack, complete, the_write, writes

AVAILABLE, ACQUIRED, ARCHIVING, ARCHIVED = (RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ARCHIVING,
                                            RecordState.ARCHIVED)
ACCEPT, RELEASE, REJECT = 1, 2, 3
LIMIT = 2


def woken(effects) -> bool:
    return any(isinstance(e, WakeFetches) for e in effects)


def deliver_to_the_limit(sp: SharePartition, member: str, first: int, last: int) -> int:
    """Deliver [first, last] LIMIT times (released between deliveries); the time now."""
    now = 0
    for n in range(1, LIMIT + 1):
        assert [(r.first_offset, r.last_offset, r.delivery_count) for r in
                acquire(sp, member, [(first, last)], now=now, limit=LIMIT)] == [(first, last, n)]
        if n < LIMIT:
            complete(sp, ack(sp, member, [(first, last, [RELEASE])], now=now, limit=LIMIT).write, now=now, limit=LIMIT)
        now += 1
    return now - 1


def fail(sp, write, *, now, dlq=False):
    kwargs = {"dlq_enabled": True} if dlq else {}
    return sp.on_write_complete(write.write_id, False, delivery_limit=LIMIT, now_ms=now, **kwargs)


def test_an_accept_at_the_limit_failing_after_the_lock_expired_is_archived_by_a_new_write():
    sp = SharePartition(0)
    now = deliver_to_the_limit(sp, "m", 0, 2)
    result = ack(sp, "m", [(0, 2, [ACCEPT])], now=now, limit=LIMIT)
    assert result.error == ErrorCode.none
    expired = now + LOCK_MS
    assert writes(sp.expire_locks(delivery_limit=LIMIT, now_ms=expired)) == []  # a write is deciding them
    effects = fail(sp, result.write, now=expired)
    write = the_write(effects)  # before the fix: no write, ARCHIVED in memory only
    assert write is not None and write.start_offset == 3  # stored: past the archived records
    assert sp.record(0) == (ARCHIVED, LIMIT, None) and sp.start_offset == 0  # not before it is stored
    assert sp.lock_timeout_count == 3
    effects = complete(sp, write, now=expired, limit=LIMIT)
    assert sp.start_offset == 3 and woken(effects)  # room in the window


def test_with_a_dlq_it_goes_to_the_dlq_as_a_lock_expiring_at_the_limit():
    sp = SharePartition(0)
    now = deliver_to_the_limit(sp, "m", 0, 0)
    result = ack(sp, "m", [(0, 0, [ACCEPT])], now=now, limit=LIMIT)
    effects = fail(sp, result.write, now=now + LOCK_MS, dlq=True)
    # as a lock expiry at the limit whose write failed: the DLQ write goes ahead, then the archive
    assert [e for e in effects if isinstance(e, DeadLetterWrite)] == [
        DeadLetterWrite(0, 0, LIMIT, REASON_LOCK_EXPIRED_AT_LIMIT)]
    assert the_write(effects) is None and sp.record(0) == (ARCHIVING, LIMIT, None)
    archived = the_write(sp.on_dead_letters_done([(0, 0)]))
    assert archived.start_offset == 1
    complete(sp, archived, now=now + LOCK_MS, limit=LIMIT)
    assert sp.start_offset == 1


def test_below_the_limit_it_is_available_at_once_with_the_count_from_before_as_kafka():
    sp = SharePartition(0)
    acquire(sp, "m", [(0, 4)], now=0, limit=LIMIT)
    result = ack(sp, "m", [(0, 4, [ACCEPT])], now=1, limit=LIMIT)
    effects = fail(sp, result.write, now=LOCK_MS)
    assert writes(effects) == [] and woken(effects)  # Kafka persists nothing for the rollback
    assert sp.record(0) == (AVAILABLE, 1, None)
    assert acquire(sp, "m2", [(0, 4)], now=LOCK_MS, limit=LIMIT)[0].delivery_count == 2


def test_a_release_failing_after_the_member_left_is_not_handed_back_to_it():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)], now=0, limit=LIMIT)
    result = ack(sp, "m1", [(0, 4, [RELEASE])], now=1, limit=LIMIT)
    assert sp.release_member("m1", delivery_limit=LIMIT, now_ms=2) == []  # nothing held: its release is in flight
    effects = fail(sp, result.write, now=3)  # the lock (30 s) has not expired
    assert sp.record(0) == (AVAILABLE, 1, None)  # before the fix: (ACQUIRED, 1, "m1") until the lock expires
    assert woken(effects) and writes(effects) == []
    got = acquire(sp, "m2", [(0, 4)], now=4, limit=LIMIT)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in got] == [(0, 4, 2)]


def test_an_accept_failing_after_the_member_left_at_the_limit_is_dead_lettered_as_released_at_the_limit():
    sp = SharePartition(0)
    now = deliver_to_the_limit(sp, "m1", 0, 1)
    result = ack(sp, "m1", [(0, 1, [ACCEPT])], now=now, limit=LIMIT)
    sp.release_member("m1", delivery_limit=LIMIT, now_ms=now, dlq_enabled=True)
    effects = fail(sp, result.write, now=now + 1, dlq=True)
    assert [e for e in effects if isinstance(e, DeadLetterWrite)] == [
        DeadLetterWrite(0, 1, LIMIT, REASON_RELEASED_AT_LIMIT)]
    assert sp.lock_timeout_count == 0


def test_a_member_still_holding_its_lock_gets_its_records_back():
    sp = SharePartition(0)
    acquire(sp, "m1", [(0, 4)], now=0, limit=LIMIT)
    sp.release_member("m2", delivery_limit=LIMIT, now_ms=1)  # another member leaving changes nothing
    result = ack(sp, "m1", [(0, 4, [RELEASE])], now=1, limit=LIMIT)
    effects = fail(sp, result.write, now=2)
    assert sp.record(0) == (ACQUIRED, 1, "m1") and not woken(effects)


def test_if_the_archiving_write_fails_too_the_archive_stays_and_nothing_loops():
    sp = SharePartition(0)
    now = deliver_to_the_limit(sp, "m", 0, 0)
    result = ack(sp, "m", [(0, 0, [ACCEPT])], now=now, limit=LIMIT)
    write = the_write(fail(sp, result.write, now=now + LOCK_MS))
    assert writes(fail(sp, write, now=now + LOCK_MS)) == []  # no write loop on a failing disk
    assert sp.record(0) == (ARCHIVED, LIMIT, None)  # as Kafka's timeout path keeps its transition
    later = now + LOCK_MS
    acquire(sp, "m", [(1, 1)], now=later, limit=LIMIT)
    complete(sp, ack(sp, "m", [(1, 1, [ACCEPT])], now=later, limit=LIMIT).write, now=later, limit=LIMIT)
    assert sp.start_offset == 2  # the next write that commits moves the start offset past it
