"""What a per-record acknowledgement costs as the in-flight window grows (issue 13).

Cost is counted, not timed: the Python lines executed (a `sys.settrace` line counter over every
module, so the sorted container and the heaps count too) for one acknowledgement, the completion
of its write, the next lock deadline and the next fetch offset — what the broker runs per
acknowledged record. Over a 10,000-record window it must cost at most twice what it costs over a
100-record window: every operation of the share partition is O(log n) in the window.
"""

from __future__ import annotations

import random
import sys

import pytest

from quafka.broker.core.share_partition import PersistWrite, SharePartition

ACCEPT, RELEASE = 1, 2
LIMIT = 5
LOCK_MS = 30_000


class LineCounter:
    def __init__(self) -> None:
        self.lines = 0

    def _trace(self, frame, event, arg):
        if event == "line":
            self.lines += 1
        return self._trace

    def __enter__(self) -> "LineCounter":
        sys.settrace(self._trace)
        return self

    def __exit__(self, *exc) -> None:
        sys.settrace(None)


def window_of(records: int, batch_records: int) -> SharePartition:
    sp = SharePartition(0)
    batches = [(b, min(b + batch_records, records) - 1) for b in range(0, records, batch_records)]
    got = sp.acquire("m1", batches, max_records=0, record_limit=False, lock_duration_ms=LOCK_MS,
                     delivery_limit=LIMIT, max_in_flight=records, now_ms=0)
    assert sum(r.last_offset - r.first_offset + 1 for r in got.ranges) == records
    return sp


def acknowledge_one(sp: SharePartition, offset: int, ack_type: int, now_ms: int) -> None:
    """One record's acknowledgement as the broker runs it: apply, complete the write, then ask
    for the lock deadline and the next fetch offset."""
    result = sp.acknowledge("m1", [(offset, offset, (ack_type,))], delivery_limit=LIMIT,
                            lock_duration_ms=LOCK_MS, renew_enabled=True, now_ms=now_ms)
    assert isinstance(result.write, PersistWrite), result
    sp.on_write_complete(result.write.write_id, True, delivery_limit=LIMIT, now_ms=now_ms)
    sp.next_deadline_ms()
    sp.fetch_offset(20_000)


def lines_per_ack(records: int, order: list[int], batch_records: int, ack_type: int = ACCEPT,
                  sample: int = 500) -> float:
    """Lines per acknowledgement, counted over `sample` acknowledgements from the middle of
    `order` (the ones before run untraced: by then a fragmenting order has split the window)."""
    sp = window_of(records, batch_records)
    start = max(0, len(order) // 2 - sample // 2)
    traced = order[start:start + sample]
    for offset in order[:start]:
        acknowledge_one(sp, offset, ack_type, now_ms=1)
    with LineCounter() as counter:
        for offset in traced:
            acknowledge_one(sp, offset, ack_type, now_ms=1)
    return counter.lines / len(traced)


def orders(records: int, seed: int) -> dict[str, list[int]]:
    shuffled = list(range(records))
    random.Random(seed).shuffle(shuffled)
    return {
        "in order": list(range(records)),
        "every other, then the rest": list(range(1, records, 2)) + list(range(0, records, 2)),
        "random": shuffled,
        "backwards": list(range(records - 1, -1, -1)),
    }


@pytest.mark.parametrize("batch_records", [1, 100, 10_000])
@pytest.mark.parametrize("pattern", ["in order", "every other, then the rest", "random", "backwards"])
def test_per_record_acknowledgement_cost_grows_at_most_twofold_from_100_to_10000_records(pattern, batch_records):
    seed = 1313
    small = lines_per_ack(100, orders(100, seed)[pattern], min(batch_records, 100))
    large = lines_per_ack(10_000, orders(10_000, seed)[pattern], batch_records)
    assert large <= 2 * small, (f"seed {seed}: {pattern}, batches of {batch_records}: {large:.0f} lines per "
                                f"acknowledgement over 10,000 records against {small:.0f} over 100")


def test_releases_across_a_large_window_stay_cheap():
    """RELEASE keeps records in the window (AVAILABLE): the window never shrinks, and each release
    adds an available run the next fetch offset must find."""
    seed = 1314
    small = lines_per_ack(100, orders(100, seed)["random"], 100, RELEASE)
    large = lines_per_ack(10_000, orders(10_000, seed)["random"], 10_000, RELEASE)
    assert large <= 2 * small, f"seed {seed}: {large:.0f} lines per release over 10,000 against {small:.0f} over 100"


def test_a_lock_expiry_sweep_costs_per_expired_run_not_per_window():
    sp = window_of(10_000, 1)  # 10,000 runs, all locked until LOCK_MS
    for offset in range(0, 10_000, 2):
        acknowledge_one(sp, offset, ACCEPT, now_ms=1)
    with LineCounter() as one:
        effects = sp.expire_locks(delivery_limit=LIMIT, now_ms=LOCK_MS - 1)  # nothing due yet
    assert effects == [] and one.lines < 50, one.lines
