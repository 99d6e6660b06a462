"""ARCHIVING and the dead-letter queue in the share partition machine (KIP-1191, Kafka 4.4), with
virtual time. Kafka's behaviour followed here is `SharePartition` in Kafka 4.4:
`recordStateWithDlq` (REJECT), `InFlightState.tryUpdateState` with `dlqSupportEnabled` (RELEASE,
session release and lock expiry at the delivery limit), `initiateDLQAndArchive` (phase 2: archived
whether the DLQ write succeeded or not) and `maybeResumeDlqArchiving` (start-up)."""

import random

import pytest

from quafka.broker.core.record_state import RecordState
from quafka.broker.core.share_partition import DeadLetterWrite, PersistWrite, SharePartition, StateBatch
from quafka.protocol.dead_letter_headers import (
    REASON_LOCK_EXPIRED_AT_LIMIT,
    REASON_RECOVERED,
    REASON_REJECTED,
    REASON_RELEASED_AT_LIMIT,
)
from quafka.protocol.errors import ErrorCode

from .test_share_partition import LIMIT, LOCK_MS, acquire, complete, the_write

AVAILABLE, ACQUIRED, ARCHIVING, ARCHIVED = (RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ARCHIVING,
                                            RecordState.ARCHIVED)
ACCEPT, RELEASE, REJECT = 1, 2, 3


def ack(sp, member, batches, *, now=0, limit=LIMIT, dlq=True):
    return sp.acknowledge(member, [(f, l, tuple(t)) for f, l, t in batches], delivery_limit=limit,
                          lock_duration_ms=LOCK_MS, renew_enabled=True, now_ms=now, dlq_enabled=dlq)


def dead_letters(effects) -> list[DeadLetterWrite]:
    return [e for e in effects if isinstance(e, DeadLetterWrite)]


def state_of(sp, offset):
    return sp.record(offset)[:2]


def test_reject_with_a_dlq_persists_archiving_then_asks_for_the_dead_letter_write():
    sp = SharePartition(0)
    acquire(sp, "m", [(0, 4)])
    result = ack(sp, "m", [(1, 2, [REJECT])])
    assert result.error == ErrorCode.none
    assert result.write.state_batches == (StateBatch(1, 2, int(ARCHIVING), 1),)
    assert state_of(sp, 1) == (ARCHIVING, 1)
    assert dead_letters(result.effects) == []  # not before ARCHIVING is durable
    effects = complete(sp, result.write)
    assert dead_letters(effects) == [DeadLetterWrite(1, 2, 1, REASON_REJECTED)]


def test_archiving_holds_the_start_offset_until_the_dead_letter_is_done():
    sp = SharePartition(0)
    acquire(sp, "m", [(0, 4)])
    complete(sp, ack(sp, "m", [(0, 0, [REJECT])]).write)
    complete(sp, ack(sp, "m", [(1, 4, [ACCEPT])]).write)
    assert sp.start_offset == 0 and sp.delivery_complete_count() == 4
    effects = sp.on_dead_letters_done([(0, 0)])
    write = the_write(effects)
    assert (write.start_offset, write.state_batches) == (5, ())  # the start offset now covers it
    assert state_of(sp, 0) == (ARCHIVED, 1)
    complete(sp, write)
    assert sp.start_offset == 5 and sp.in_flight_count == 0


def test_without_a_dlq_reject_archives_at_once():
    sp = SharePartition(0)
    acquire(sp, "m", [(0, 1)])
    result = ack(sp, "m", [(0, 1, [REJECT])], dlq=False)
    assert (result.write.start_offset, result.write.state_batches) == (2, ())  # archived: the start offset passes
    assert dead_letters(complete(sp, result.write)) == []
    assert sp.start_offset == 2


def test_release_below_the_limit_makes_records_available_even_with_a_dlq():
    sp = SharePartition(0)
    acquire(sp, "m", [(0, 1)])
    result = ack(sp, "m", [(0, 1, [RELEASE])])
    assert state_of(sp, 0) == (AVAILABLE, 1)
    assert dead_letters(complete(sp, result.write)) == []


def test_release_at_the_delivery_limit_goes_to_the_dlq():
    sp = SharePartition(0)
    for attempt in range(1, 3):
        assert acquire(sp, "m", [(0, 0)], limit=2)[0].delivery_count == attempt
        result = ack(sp, "m", [(0, 0, [RELEASE])], limit=2)
        effects = complete(sp, result.write, limit=2)
    assert state_of(sp, 0) == (ARCHIVING, 2)
    assert dead_letters(effects) == [DeadLetterWrite(0, 0, 2, REASON_RELEASED_AT_LIMIT)]


def test_a_lock_expiring_at_the_delivery_limit_goes_to_the_dlq():
    sp = SharePartition(0)
    acquire(sp, "m", [(0, 2)], limit=1)
    write = the_write(sp.expire_locks(delivery_limit=1, now_ms=LOCK_MS, dlq_enabled=True))
    assert write.state_batches == (StateBatch(0, 2, int(ARCHIVING), 1),)
    assert dead_letters(complete(sp, write, limit=1)) == [DeadLetterWrite(0, 2, 1, REASON_LOCK_EXPIRED_AT_LIMIT)]


def test_the_lock_timer_passes_the_dlq_flag_on():
    sp = SharePartition(0)
    acquire(sp, "m", [(0, 0)], limit=1)
    write = the_write(sp.on_lock_timer(delivery_limit=1, now_ms=LOCK_MS, dlq_enabled=True))
    assert write.state_batches == (StateBatch(0, 0, int(ARCHIVING), 1),)


def test_a_share_session_ending_at_the_limit_goes_to_the_dlq():
    sp = SharePartition(0)
    acquire(sp, "m", [(0, 3)], limit=1)
    write = the_write(sp.release_member("m", delivery_limit=1, now_ms=0, dlq_enabled=True))
    assert dead_letters(complete(sp, write, limit=1)) == [DeadLetterWrite(0, 3, 1, REASON_RELEASED_AT_LIMIT)]


def test_mixed_per_offset_acknowledgements_send_only_the_rejected_offsets():
    sp = SharePartition(0)
    acquire(sp, "m", [(0, 5)])
    result = ack(sp, "m", [(0, 5, [REJECT, ACCEPT, REJECT, REJECT, RELEASE, ACCEPT])])
    effects = complete(sp, result.write)
    assert sorted(dead_letters(effects)) == [DeadLetterWrite(0, 0, 1, REASON_REJECTED),
                                             DeadLetterWrite(2, 3, 1, REASON_REJECTED)]


def test_a_failed_phase_one_write_rolls_back_and_writes_no_dead_letter():
    sp = SharePartition(0)
    acquire(sp, "m", [(0, 1)])
    result = ack(sp, "m", [(0, 1, [REJECT])])
    effects = complete(sp, result.write, ok=False)
    assert dead_letters(effects) == []
    assert state_of(sp, 0) == (ACQUIRED, 1)
    assert all(r.dlq_reason is None for r in sp.runs)  # nothing left behind for a later commit
    # acknowledged again (as the client retries), it now goes through
    again = ack(sp, "m", [(0, 1, [REJECT])])
    assert dead_letters(complete(sp, again.write)) == [DeadLetterWrite(0, 1, 1, REASON_REJECTED)]


def test_a_failed_archived_write_keeps_the_archive_in_memory():
    """Kafka's phase 2 does not roll back ARCHIVED when its persist fails; the stored ARCHIVING is
    written to the DLQ again at the next load (resume)."""
    sp = SharePartition(0)
    acquire(sp, "m", [(0, 1)])
    complete(sp, ack(sp, "m", [(0, 0, [REJECT])]).write)
    write = the_write(sp.on_dead_letters_done([(0, 0)]))
    complete(sp, write, ok=False)
    assert state_of(sp, 0) == (ARCHIVED, 1)
    complete(sp, ack(sp, "m", [(1, 1, [ACCEPT])]).write)  # the next write moves the start offset past it
    assert sp.start_offset == 2


def test_a_lock_expired_at_the_limit_whose_write_failed_is_still_dead_lettered():
    """Kafka's timeout path (SharePartition.releaseAcquisitionLockOnTimeout) writes the DLQ whether
    or not the ARCHIVING persist succeeded; the archive that follows is persisted once."""
    sp = SharePartition(0)
    acquire(sp, "m", [(0, 0)], limit=1)
    write = the_write(sp.expire_locks(delivery_limit=1, now_ms=LOCK_MS, dlq_enabled=True))
    effects = complete(sp, write, ok=False, now=LOCK_MS, limit=1)
    assert dead_letters(effects) == [DeadLetterWrite(0, 0, 1, REASON_LOCK_EXPIRED_AT_LIMIT)]
    assert the_write(effects) is None  # no second ARCHIVING write: nothing can loop
    assert state_of(sp, 0) == (ARCHIVING, 1)
    archived = the_write(sp.on_dead_letters_done([(0, 0)]))
    complete(sp, archived, ok=False, limit=1)  # even if this write fails too, the archive stays
    assert state_of(sp, 0) == (ARCHIVED, 1)


def test_many_dead_letter_writes_end_in_one_archived_write():
    sp = SharePartition(0)
    acquire(sp, "m", [(0, 99)])
    types = [REJECT if o % 2 == 0 else ACCEPT for o in range(100)]
    written = dead_letters(complete(sp, ack(sp, "m", [(0, 99, types)]).write))
    assert len(written) == 50
    effects = sp.on_dead_letters_done([(d.first_offset, d.last_offset) for d in written])
    assert len([e for e in effects if isinstance(e, PersistWrite)]) == 1
    complete(sp, the_write(effects))
    assert sp.start_offset == 100


def test_archiving_records_are_neither_acquired_nor_acknowledged_nor_expired():
    sp = SharePartition(0)
    acquire(sp, "m", [(0, 1)])
    complete(sp, ack(sp, "m", [(0, 0, [REJECT])]).write)
    assert acquire(sp, "n", [(0, 1)]) == []  # offset 1 is still held by m
    assert ack(sp, "m", [(0, 0, [ACCEPT])]).error == ErrorCode.invalid_record_state
    assert sp.expire_locks(delivery_limit=LIMIT, now_ms=10 * LOCK_MS, dlq_enabled=True) != []
    assert state_of(sp, 0) == (ARCHIVING, 1)
    assert sp.release_member("m", delivery_limit=LIMIT, now_ms=0, dlq_enabled=True) == []


def test_dead_letter_done_covers_only_archiving_runs_and_ignores_offsets_outside_the_window():
    sp = SharePartition(0)
    acquire(sp, "m", [(0, 9)])
    complete(sp, ack(sp, "m", [(2, 3, [REJECT])]).write)
    complete(sp, ack(sp, "m", [(4, 4, [REJECT])]).write)  # merged with 2-3 into one ARCHIVING run
    write = the_write(sp.on_dead_letters_done([(4, 4)]))  # one of the two DLQ writes ended
    assert write.state_batches == (StateBatch(4, 4, int(ARCHIVED), 1),)
    assert state_of(sp, 3) == (ARCHIVING, 1)
    assert sp.on_dead_letters_done([(4, 4)]) == []  # already archived
    assert sp.on_dead_letters_done([(100, 200)]) == []
    complete(sp, write)
    assert the_write(sp.on_dead_letters_done([(0, 9)])).state_batches == (StateBatch(2, 3, int(ARCHIVED), 1),)


def test_the_log_start_offset_passing_archiving_records_archives_them():
    sp = SharePartition(0)
    acquire(sp, "m", [(0, 3)])
    complete(sp, ack(sp, "m", [(0, 1, [REJECT])]).write)
    sp.move_start_offset(2)
    assert sp.start_offset == 2
    assert sp.on_dead_letters_done([(0, 1)]) == []


def test_archiving_found_at_start_up_is_resumed_with_its_delivery_count():
    batches = [StateBatch(0, 1, int(RecordState.ACKNOWLEDGED), 1), StateBatch(2, 4, int(ARCHIVING), 3),
               StateBatch(5, 5, int(AVAILABLE), 1), StateBatch(6, 6, int(ARCHIVING), 1)]
    sp = SharePartition(0, batches)
    assert sp.start_offset == 2
    assert sp.resume_dead_letters() == [DeadLetterWrite(2, 4, 3, REASON_RECOVERED),
                                        DeadLetterWrite(6, 6, 1, REASON_RECOVERED)]
    assert acquire(sp, "m", [(0, 6)]) == [(5, 5, 2)]
    write = the_write(sp.on_dead_letters_done([(2, 4)]))
    complete(sp, write)
    assert sp.start_offset == 5


def test_a_restart_after_the_archived_write_resumes_nothing():
    sp = SharePartition(0)
    acquire(sp, "m", [(0, 0)])
    complete(sp, ack(sp, "m", [(0, 0, [REJECT])]).write)
    write = the_write(sp.on_dead_letters_done([(0, 0)]))
    restarted = SharePartition(0, write.state_batches)
    assert restarted.resume_dead_letters() == []


@pytest.mark.parametrize("seed", range(20))
def test_randomized_every_rejected_or_exhausted_record_is_dead_lettered_once(seed):
    """Random acquisitions and acknowledgements over a 10,000-record window, DLQ writes completed
    in random order: every record rejected or over the limit gets exactly one DeadLetterWrite and
    ends ARCHIVED; the start offset reaches the end."""
    rng = random.Random(seed)
    size = 10_000
    sp = SharePartition(0)
    limit = 2
    dead: list[int] = []
    pending: list[DeadLetterWrite] = []
    now = 0

    def drain(effects):
        for e in effects:
            if isinstance(e, PersistWrite):
                drain(sp.on_write_complete(e.write_id, True, delivery_limit=limit, now_ms=now))
            elif isinstance(e, DeadLetterWrite):
                pending.append(e)
                dead.extend(range(e.first_offset, e.last_offset + 1))

    log = [(b, min(b + 99, size - 1)) for b in range(0, size, 100)]
    for _ in range(400):
        now += 1
        got = sp.acquire("m", log, max_records=rng.randint(1, 300), record_limit=True, lock_duration_ms=LOCK_MS,
                         delivery_limit=limit, max_in_flight=size, now_ms=now)
        drain(got.effects)
        for r in got.ranges:
            types = [rng.choice((ACCEPT, RELEASE, REJECT)) for _ in range(r.last_offset - r.first_offset + 1)]
            result = ack(sp, "m", [(r.first_offset, r.last_offset, types)], now=now, limit=limit)
            assert result.error == ErrorCode.none, f"seed {seed}"
            drain(result.effects)
            drain([result.write])
        if pending and rng.random() < 0.5:
            rng.shuffle(pending)
            done = pending.pop()
            drain(sp.on_dead_letters_done([(done.first_offset, done.last_offset)]))
    while pending:
        done = pending.pop()
        drain(sp.on_dead_letters_done([(done.first_offset, done.last_offset)]))
    assert len(dead) == len(set(dead)), f"seed {seed}: an offset dead-lettered twice"
    for offset in range(sp.start_offset, sp.next_offset):
        assert sp.record(offset)[0] != ARCHIVING, f"seed {seed}: offset {offset} left ARCHIVING"
