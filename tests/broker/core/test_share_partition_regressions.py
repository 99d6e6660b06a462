"""Deterministic replays of failures the stateful tests (test_share_partition_stateful.py) found."""

from __future__ import annotations

from quafka.broker.core.record_state import RecordState
from quafka.broker.core.share_partition import AcquiredRange, SharePartition, StateBatch

KW = dict(max_records=0, record_limit=False, lock_duration_ms=100, delivery_limit=5, max_in_flight=100)
RELEASE = 2


def test_runs_with_the_same_batch_but_another_span_are_not_merged():
    """A restored run takes its first offset as its batch: here 10, the base of the log batch
    (10, 17) whose other records are read as new ones (span 8). Released to the same state and
    count, the two runs used to merge, and offsets 11..17 took the restored run's span (1): a
    throttled redelivery then took one record where half the batch (4) was due."""
    sp = SharePartition(10, [StateBatch(10, 10, int(RecordState.AVAILABLE), 0)])  # span 1, batch 10
    for now in range(3):  # delivered 3 times, released each time (throttling from the 4th, limit 5)
        got = sp.acquire("m1", [(10, 17)], now_ms=now, **KW)
        assert got.ranges == [AcquiredRange(10, 17, now + 1)] and not got.throttled
        write = sp.acknowledge("m1", [(10, 17, [RELEASE])], delivery_limit=5, lock_duration_ms=100,
                               renew_enabled=True, now_ms=now).write
        sp.on_write_complete(write.write_id, True, delivery_limit=5, now_ms=now)
    assert [(r.first, r.last, r.batch_records) for r in sp.runs] == [(10, 10, 1), (11, 17, 8)]
    got = sp.acquire("m1", [(10, 17)], now_ms=3, **KW)
    assert (got.ranges, got.throttled) == ([AcquiredRange(10, 10, 4)], True)  # span 1 >> 1: one record
    got = sp.acquire("m1", [(10, 17)], now_ms=3, **KW)
    assert (got.ranges, got.throttled) == ([AcquiredRange(11, 14, 4)], True)  # span 8 >> 1: four
