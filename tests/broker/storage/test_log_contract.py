"""The storage contract: every test runs against both engines (FileLog and MemoryLog).

Time is virtual: `now_ms` is passed in, nothing sleeps.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quafka.broker.storage import LogConfig, LogEvent
from quafka.protocol.record_batch import iter_records

SMALL = LogConfig(index_interval_bytes=200)


def record_events(log):
    events: list[str] = []
    log.add_listener(lambda event: events.append(event.kind))
    return events


# ----------------------------------------------------------------------------- append and read

def test_append_stamps_offsets_and_reads_back_byte_identical(open_log, kit):
    log = open_log(SMALL)
    batches = [kit.batch(3, tag=1), kit.batch(1, tag=2), kit.batch(5, tag=3)]
    info = kit.append(log, batches)
    assert (info.first_offset, info.last_offset, info.log_start_offset) == (0, 8, 0)
    info = kit.append(log, [kit.batch(2, tag=4)])
    assert (info.first_offset, info.last_offset) == (9, 10)
    assert log.log_end_offset == 11
    assert log.log_start_offset == 0
    expected = b"".join(
        kit.stamped(b, base) for b, base in zip(batches + [kit.batch(2, tag=4)], [0, 3, 4, 9])
    )
    assert log.size_bytes == len(expected)
    assert log.read(0, 1 << 20) == expected
    assert log.read(11, 1 << 20) == b""
    assert log.read(12, 1 << 20) == b""


def test_empty_log(open_log):
    log = open_log()
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    assert log.read(0, 1000) == b""
    assert log.offset_for_timestamp(0) is None
    assert log.max_timestamp_offset() is None
    assert list(log.iter_batch_headers()) == []


def test_read_from_the_middle_of_a_batch_returns_that_whole_batch(open_log, kit):
    log = open_log(SMALL)
    kit.append(log, [kit.batch(4, tag=1), kit.batch(4, tag=2), kit.batch(4, tag=3)])
    for offset in range(12):
        got = kit.split(log.read(offset, 1 << 20))
        assert got[0][0] == offset // 4 * 4
        assert got[-1][1] == 12


def test_max_bytes_cuts_at_whole_batches_and_min_one_batch(open_log, kit):
    log = open_log(SMALL)
    batches = [kit.batch(2, tag=i) for i in range(4)]
    size = len(batches[0])
    kit.append(log, batches)
    assert len(log.read(0, 2 * size)) == 2 * size
    assert len(log.read(0, 2 * size - 1)) == size
    assert len(log.read(0, 3 * size + size // 2)) == 3 * size
    assert len(log.read(2, 2 * size)) == 2 * size  # from the batch holding offset 2
    assert log.read(0, size - 1) == kit.stamped(batches[0], 0)  # first batch even if too big
    assert log.read(0, 0) == kit.stamped(batches[0], 0)
    assert log.read(0, size - 1, min_one_batch=False) == b""
    assert log.read(6, size - 1, min_one_batch=False) == b""
    assert log.read(6, size, min_one_batch=False) == kit.stamped(batches[3], 6)


def test_sequential_consumer_interleaved_with_appends(open_log, kit):
    log = open_log(LogConfig(segment_bytes=1500, index_interval_bytes=300))
    expected = b""
    consumed = b""
    position = 0
    rng = random.Random(7)
    for round_ in range(40):
        batches = [
            kit.batch(rng.randint(1, 4), value_bytes=rng.randint(10, 120), tag=round_) for _ in range(rng.randint(1, 3))
        ]
        info = kit.append(log, batches, now_ms=round_)
        offset = info.first_offset
        for b in batches:
            expected += kit.stamped(b, offset)
            offset += len(list(iter_records(b)))
        while position < log.log_end_offset:
            data = log.read(position, rng.randint(1, 700))
            consumed += data
            position = kit.split(data)[-1][1]
    assert consumed == expected
    assert log.read(0, 1 << 30) == expected


# ----------------------------------------------------------------------------- rolling

def test_roll_by_size_and_read_across_segments(open_log, kit):
    batches = [kit.batch(2, tag=i) for i in range(7)]
    size = len(batches[0])
    log = open_log(LogConfig(segment_bytes=3 * size, index_interval_bytes=1))
    for b in batches:
        kit.append(log, [b])
    assert log.segment_base_offsets == [0, 6, 12]
    whole = b"".join(kit.stamped(b, 2 * i) for i, b in enumerate(batches))
    assert log.read(0, 1 << 20) == whole
    assert log.read(5, 1 << 20) == whole[2 * size :]
    assert log.read(6, 1 << 20) == whole[3 * size :]
    assert log.read(4, 2 * size) == whole[2 * size : 4 * size]  # crosses a segment boundary
    assert log.read(13, 1 << 20) == whole[6 * size :]
    # a batch larger than a whole segment still goes in (into a fresh segment)
    kit.append(log, [kit.batch(10, tag=9)])
    assert log.segment_base_offsets == [0, 6, 12, 14]


def test_roll_by_time(open_log, kit):
    log = open_log(LogConfig(segment_ms=1000))
    kit.append(log, [kit.batch()], now_ms=5_000)
    kit.append(log, [kit.batch()], now_ms=5_999)
    assert log.segment_base_offsets == [0]
    kit.append(log, [kit.batch()], now_ms=6_000)
    assert log.segment_base_offsets == [0, 2]
    kit.append(log, [kit.batch()], now_ms=6_500)
    kit.append(log, [kit.batch()], now_ms=7_000)
    assert log.segment_base_offsets == [0, 2, 4]
    assert [h.base_offset for h in log.iter_batch_headers()] == [0, 1, 2, 3, 4]


# ----------------------------------------------------------------------------- retention

def test_retention_by_time_deletes_expired_segments_and_rolls_the_active_one(open_log, kit):
    size = len(kit.batch())
    log = open_log(LogConfig(segment_bytes=size, retention_ms=1_500))
    events = record_events(log)
    for i, ts in enumerate([1_000, 2_000, 3_000, 4_000]):
        kit.append(log, [kit.batch(timestamp_ms=ts, tag=i)], now_ms=ts)
    assert log.segment_base_offsets == [0, 1, 2, 3]
    assert not log.enforce_retention(now_ms=2_500)  # limit 1000: nothing older
    events.clear()
    assert log.enforce_retention(now_ms=4_000)  # limit 2500: segments of ts 1000 and 2000 go
    assert events == ["log_start_offset"]
    assert log.log_start_offset == 2
    assert log.segment_base_offsets == [2, 3]
    assert log.size_bytes == 2 * size
    assert [b[0] for b in kit.split(log.read(2, 1 << 20))] == [2, 3]
    assert not log.enforce_retention(now_ms=4_000)
    # everything expired: the active segment is rolled, then deleted
    assert log.enforce_retention(now_ms=10_000)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (4, 4, 0)
    assert log.segment_base_offsets == [4]
    assert log.read(4, 1 << 20) == b""
    assert log.offset_for_timestamp(0) is None
    assert kit.append(log, [kit.batch(timestamp_ms=10_000)], now_ms=10_000).first_offset == 4
    assert not log.enforce_retention(now_ms=10_000)


def test_unlimited_retention_keeps_everything(open_log, kit):
    log = open_log(LogConfig(segment_bytes=1, retention_ms=-1, retention_bytes=-1))
    for i in range(3):
        kit.append(log, [kit.batch(timestamp_ms=0)])
    assert not log.enforce_retention(now_ms=10**12)
    assert log.segment_base_offsets == [0, 1, 2]


def test_retention_by_bytes(open_log, kit):
    size = len(kit.batch())
    log = open_log(LogConfig(segment_bytes=size, retention_bytes=2 * size + 1))
    events = record_events(log)
    for i in range(5):
        kit.append(log, [kit.batch(tag=i)])
    assert log.enforce_retention(now_ms=0)
    assert events[-1] == "log_start_offset"
    # as Kafka: delete the oldest while the rest still holds at least retention.bytes
    assert log.segment_base_offsets == [2, 3, 4]
    assert (log.log_start_offset, log.size_bytes) == (2, 3 * size)
    assert not log.enforce_retention(now_ms=0)
    log.update_config(LogConfig(segment_bytes=size, retention_bytes=0))
    assert log.enforce_retention(now_ms=0)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (5, 5, 0)
    assert log.read(5, 1000) == b""


def test_delete_records_before(open_log, kit):
    size = len(kit.batch(2))
    log = open_log(LogConfig(segment_bytes=2 * size, index_interval_bytes=1))
    events = record_events(log)
    for i in range(6):
        kit.append(log, [kit.batch(2, timestamp_ms=1_000 + i, tag=i)])
    assert log.segment_base_offsets == [0, 4, 8]
    events.clear()
    assert log.delete_records_before(5) == 5
    assert events == ["log_start_offset"]
    assert log.log_start_offset == 5
    assert log.segment_base_offsets == [4, 8]  # the segment wholly below 5 is gone
    assert kit.split(log.read(5, 1 << 20))[0][0] == 4  # the batch holding 5
    assert log.offset_for_timestamp(0) == (5, 1_002)  # records below the start are not found
    assert log.delete_records_before(3) == 5  # never moves down
    assert log.delete_records_before(5) == 5
    assert events == ["log_start_offset"]
    assert log.delete_records_before(100) == 12  # clamped to the log end
    assert log.segment_base_offsets == [8]  # the active segment stays
    assert log.read(12, 1000) == b""
    assert log.offset_for_timestamp(0) is None
    assert kit.append(log, [kit.batch()]).log_start_offset == 12
    assert log.offset_for_timestamp(0) == (12, 1_000)


def test_retention_never_moves_start_below_delete_records(open_log, kit):
    size = len(kit.batch(2))
    log = open_log(LogConfig(segment_bytes=2 * size, retention_bytes=4 * size))
    for i in range(6):
        kit.append(log, [kit.batch(2, tag=i)])
    log.delete_records_before(9)
    assert not log.enforce_retention(now_ms=0)
    assert log.log_start_offset == 9


# ----------------------------------------------------------------------------- timestamps

def test_offset_for_timestamp_within_batches(open_log, kit):
    log = open_log(SMALL)
    kit.append(log, [kit.timed_batch([100, 300, 200]), kit.timed_batch([150, 400])])
    assert log.offset_for_timestamp(50) == (0, 100)
    assert log.offset_for_timestamp(100) == (0, 100)
    assert log.offset_for_timestamp(101) == (1, 300)
    assert log.offset_for_timestamp(200) == (1, 300)  # first in offset order, not by timestamp
    assert log.offset_for_timestamp(300) == (1, 300)
    assert log.offset_for_timestamp(301) == (4, 400)
    assert log.offset_for_timestamp(400) == (4, 400)
    assert log.offset_for_timestamp(401) is None


def test_offset_for_timestamp_matches_a_scan_of_all_records(open_log, kit):
    rng = random.Random(3)
    batches = []
    for i in range(60):
        start = 1_000 + 10 * i
        batches.append(kit.timed_batch([start + rng.randint(-15, 15) for _ in range(rng.randint(1, 4))]))
    log = open_log(LogConfig(segment_bytes=1_000, index_interval_bytes=150))
    for b in batches:
        kit.append(log, [b])
    records = [(r.offset, r.timestamp) for r in iter_records_of(log.read(0, 1 << 30))]
    for target in range(950, 1_650, 7):
        expected = next(((o, t) for o, t in records if t >= target), None)
        assert log.offset_for_timestamp(target) == expected, target


def iter_records_of(data: bytes):
    pos = 0
    while pos < len(data):
        length = int.from_bytes(data[pos + 8 : pos + 12], "big")
        yield from iter_records(data[pos : pos + 12 + length])
        pos += 12 + length


def test_max_timestamp_offset(open_log, kit):
    size = len(kit.timed_batch([0, 0, 0]))
    log = open_log(LogConfig(segment_bytes=size, index_interval_bytes=1))
    kit.append(log, [kit.timed_batch([100, 300, 200])])
    assert log.max_timestamp_offset() == (1, 300)
    kit.append(log, [kit.timed_batch([250, 300, 100])])  # a tie: the first one wins
    kit.append(log, [kit.timed_batch([10, 20, 30])])
    assert log.max_timestamp_offset() == (1, 300)
    kit.append(log, [kit.timed_batch([500, 100, 501])])
    assert log.segment_base_offsets == [0, 3, 6, 9]
    assert log.max_timestamp_offset() == (11, 501)


# ----------------------------------------------------------------------------- headers, listeners, flush

def test_iter_batch_headers(open_log, kit):
    size = len(kit.batch(3))
    log = open_log(LogConfig(segment_bytes=2 * size, index_interval_bytes=1))
    for i in range(5):
        kit.append(log, [kit.batch(3, timestamp_ms=i)])
    assert [h.base_offset for h in log.iter_batch_headers()] == [0, 3, 6, 9, 12]
    assert [h.base_offset for h in log.iter_batch_headers(7)] == [6, 9, 12]
    assert [h.base_offset for h in log.iter_batch_headers(9)] == [9, 12]
    assert [h.max_timestamp for h in log.iter_batch_headers(14)] == [4]
    assert list(log.iter_batch_headers(15)) == []


def test_listeners_see_appends_after_they_are_readable(open_log, kit):
    log = open_log()
    seen = []

    def listener(event: LogEvent) -> None:
        assert event.log is log
        seen.append((event.kind, event.log.log_end_offset, len(event.log.read(0, 1 << 20))))

    log.add_listener(listener)
    b = kit.batch(2)
    kit.append(log, [b])
    assert seen == [("append", 2, len(b))]
    log.remove_listener(listener)
    log.remove_listener(listener)  # unknown listeners are ignored
    kit.append(log, [b])
    assert len(seen) == 1


def test_maybe_flush_by_time(open_log, kit):
    log = open_log(LogConfig(flush_ms=100))
    assert not log.maybe_flush(now_ms=1_000)
    kit.append(log, [kit.batch()], now_ms=1_000)
    kit.append(log, [kit.batch()], now_ms=1_050)
    assert not log.maybe_flush(now_ms=1_099)
    assert log.maybe_flush(now_ms=1_100)  # counted from the oldest unflushed append
    assert not log.maybe_flush(now_ms=2_000)
    log.flush()


def test_update_config_applies_to_later_appends(open_log, kit):
    size = len(kit.batch())
    log = open_log()
    kit.append(log, [kit.batch()])
    log.update_config(LogConfig(segment_bytes=size))
    assert log.config.segment_bytes == size
    kit.append(log, [kit.batch()])
    assert log.segment_base_offsets == [0, 1]


# ----------------------------------------------------------------------------- property test

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), segment_bytes=st.integers(200, 3_000), interval=st.integers(0, 600))
def test_random_appends_and_reads_match_a_model(new_store, kit, data, segment_bytes, interval):
    store = new_store()
    log = store.open_log("p", 0, kit.topic_id, LogConfig(segment_bytes=segment_bytes, index_interval_bytes=interval), 0)
    model: list[tuple[int, int, bytes]] = []  # (base offset, next offset, stamped bytes)
    for step in range(data.draw(st.integers(1, 12), label="appends")):
        shapes = data.draw(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 150)), min_size=1, max_size=4))
        batches = [kit.batch(n, timestamp_ms=step, value_bytes=v, tag=step) for n, v in shapes]
        offset = kit.append(log, batches, now_ms=step).first_offset
        for b, (n, _) in zip(batches, shapes):
            model.append((offset, offset + n, kit.stamped(b, offset)))
            offset += n
        for _ in range(3):
            target = data.draw(st.integers(0, offset + 2))
            max_bytes = data.draw(st.integers(0, 2_500))
            one = data.draw(st.booleans())
            expected = b""
            for base, nxt, b in model:
                if nxt <= target:
                    continue
                if len(expected) + len(b) > max_bytes and (expected or not one):
                    break
                expected += b
            assert log.read(target, max_bytes, min_one_batch=one) == expected
    assert [h.base_offset for h in log.iter_batch_headers()] == [m[0] for m in model]
    store.close()
