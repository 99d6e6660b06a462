"""`share.isolation.level=read_committed` in the share partition machine: batches of aborted
transactions are archived, never delivered (Kafka's `SharePartition.acquire` ->
`filterAbortedTransactionalAcquiredRecords`)."""

from quafka.broker.core.record_state import RecordState
from quafka.broker.core.share_partition import AcquiredRange, PersistWrite, SharePartition

from .test_share_partition import ACCEPT, LIMIT, LOCK_MS, RELEASE, ack_and_commit, states

AVAILABLE, ACQUIRED, ARCHIVED = RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ARCHIVED


def acquire(sp, member, log_batches, aborted=(), *, max_records=500, record_limit=False, max_in_flight=2000):
    got = sp.acquire(member, log_batches, max_records=max_records, record_limit=record_limit,
                     lock_duration_ms=LOCK_MS, delivery_limit=LIMIT, max_in_flight=max_in_flight, now_ms=0,
                     never_delivered=aborted)
    return got


def test_aborted_batches_enter_the_window_archived_and_committed_ones_are_acquired():
    sp = SharePartition(0)
    # 0-2 committed, 3-5 aborted, 6 committed (the shell names markers too: see test_share_read_committed)
    got = acquire(sp, "m1", [(0, 2), (3, 5), (6, 6)], aborted=[(3, 5)])
    assert got.ranges == [AcquiredRange(0, 2, 1), AcquiredRange(6, 6, 1)]
    assert states(sp, 3, 5) == [(ARCHIVED, 0, None)] * 3
    assert not [e for e in got.effects if isinstance(e, PersistWrite)], "an aborted batch needs no write"
    assert sp.next_offset == 7


def test_a_window_of_aborted_records_only_moves_the_start_offset_and_holds_no_lock():
    sp = SharePartition(0)
    got = acquire(sp, "m1", [(0, 9), (10, 10)], aborted=[(0, 9)], max_in_flight=5)
    # the aborted batch does not count against the five locks: the marker after it is acquired
    assert got.ranges == [AcquiredRange(10, 10, 1)]
    assert sp.start_offset == 10 and sp.in_flight_count == 1


def test_only_the_aborted_batch_is_skipped_when_it_sits_between_committed_ones():
    sp = SharePartition(0)
    got = acquire(sp, "m1", [(0, 0), (1, 1), (2, 2)], aborted=[(1, 1)], max_records=2, record_limit=True)
    assert got.ranges == [AcquiredRange(0, 0, 1), AcquiredRange(2, 2, 1)]


def test_available_records_of_an_aborted_transaction_are_archived_by_a_write():
    # delivered while the group was read_uncommitted, released, then the group turned read_committed
    sp = SharePartition(0)
    assert acquire(sp, "m1", [(0, 5)]).ranges == [AcquiredRange(0, 5, 1)]
    ack_and_commit(sp, "m1", [(0, 5, [RELEASE])])
    got = acquire(sp, "m1", [(0, 5)], aborted=[(2, 3)])
    assert got.ranges == [AcquiredRange(0, 1, 2), AcquiredRange(4, 5, 2)]
    assert [s[0] for s in states(sp, 2, 3)] == [ARCHIVED, ARCHIVED]
    written = [e for e in got.effects if isinstance(e, PersistWrite)]
    assert len(written) == 1 and [(b.first_offset, b.last_offset) for b in written[0].state_batches] == [(2, 3)]


def test_read_uncommitted_delivers_every_batch():
    sp = SharePartition(0)
    got = acquire(sp, "m1", [(0, 2), (3, 5), (6, 6)])
    assert got.ranges == [AcquiredRange(0, 6, 1)]
    ack_and_commit(sp, "m1", [(0, 6, [ACCEPT])])
    assert sp.start_offset == 7
