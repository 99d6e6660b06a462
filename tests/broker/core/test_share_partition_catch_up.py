"""Overlapping persist writes and the stored start offset: a write never carries a start offset
past another write's records still in flight, so once both are durable the share partition writes
the start offset once more, and the stored state catches up with memory."""

from __future__ import annotations

from quafka.broker.core.share_partition import PersistWrite, SharePartition, WakeFetches

KW = dict(record_limit=True, lock_duration_ms=15000, delivery_limit=4, max_in_flight=2000)
ACK = dict(delivery_limit=4, lock_duration_ms=15000, renew_enabled=False)


def writes(effects) -> list[PersistWrite]:
    return [e for e in effects if isinstance(e, PersistWrite)]


def _two_overlapping_accepts():
    sp = SharePartition(0)
    sp.acquire("m1", [(0, 9)], max_records=5, now_ms=0, **KW)  # 0..4
    sp.acquire("m2", [(0, 9)], max_records=5, now_ms=0, **KW)  # 5..9
    first = sp.acknowledge("m1", [(0, 4, [1])], now_ms=1, **ACK).write
    second = sp.acknowledge("m2", [(5, 9, [1])], now_ms=1, **ACK).write
    return sp, first, second


def test_a_catch_up_write_follows_when_overlapping_writes_left_the_stored_start_offset_behind():
    sp, first, second = _two_overlapping_accepts()
    assert (first.start_offset, second.start_offset) == (5, 0)  # 0..4 were still in flight for the second
    effects = sp.on_write_complete(first.write_id, True, delivery_limit=4, now_ms=2)
    assert writes(effects) == []  # one still in flight
    assert WakeFetches() in effects  # the start offset moved to 5: room in the window
    effects = sp.on_write_complete(second.write_id, True, delivery_limit=4, now_ms=2)
    assert sp.start_offset == 10
    [catch_up] = writes(effects)
    assert (catch_up.start_offset, catch_up.state_batches) == (10, ())
    assert sp.on_write_complete(catch_up.write_id, True, delivery_limit=4, now_ms=3) == []
    assert sp.pending_writes() == 0


def test_no_catch_up_write_when_the_last_write_already_carried_the_start_offset():
    sp = SharePartition(0)
    sp.acquire("m1", [(0, 9)], max_records=10, now_ms=0, **KW)
    write = sp.acknowledge("m1", [(0, 9, [1])], now_ms=1, **ACK).write
    assert write.start_offset == 10
    assert writes(sp.on_write_complete(write.write_id, True, delivery_limit=4, now_ms=2)) == []


def test_a_failed_write_rolls_back_and_asks_for_no_catch_up():
    sp, first, second = _two_overlapping_accepts()
    assert writes(sp.on_write_complete(first.write_id, False, delivery_limit=4, now_ms=2)) == []
    assert writes(sp.on_write_complete(second.write_id, True, delivery_limit=4, now_ms=2)) == []
    assert sp.start_offset == 0  # 0..4 are held by m1 again; nothing to catch up
