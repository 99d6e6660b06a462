"""The storage contract: every test runs against both engines (FileLog and MemoryLog).

Time is virtual: `now_ms` is passed in, nothing sleeps.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quafka.broker.storage import BatchExtent, BatchRead, LogConfig, LogEvent
from quafka.protocol.record_batch import batch_crc_ok, iter_records, read_header

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


# ----------------------------------------------------------------------------- read_batches

def expected_batch_read(model, offset: int, max_bytes: int, stop_offset: int) -> BatchRead:
    """read_batches by its definition, over `model`: (base offset, next offset, stamped bytes)."""
    taken: list[bytes] = []
    extents: list[BatchExtent] = []
    end = 0
    for base, nxt, b in model:
        if nxt <= offset:
            continue
        if taken and end + len(b) > max_bytes:
            break
        taken.append(b)
        end += len(b)
        extents.append(BatchExtent(base, nxt - 1, end))
        if nxt - 1 >= stop_offset:
            break
    return BatchRead(b"".join(taken), tuple(extents))


def assert_extents_match_data(got: BatchRead) -> None:
    """The extents cut `data` into whole, intact batches whose headers agree with them."""
    pos = 0
    for extent in got.extents:
        header = read_header(got.data, pos)
        assert (header.base_offset, header.last_offset, pos + header.size_bytes) == extent
        assert batch_crc_ok(got.data, pos, header)
        pos = extent.end
    assert pos == len(got.data)


def append_model(log, kit, batches, now_ms: int = 0):
    """Append `batches` one call each; the model (base offset, next offset, stamped bytes)."""
    model = []
    for b in batches:
        info = kit.append(log, [b], now_ms)
        model.append((info.first_offset, info.last_offset + 1, kit.stamped(b, info.first_offset)))
    return model


def test_read_batches_stops_after_the_batch_holding_stop_offset(open_log, kit):
    log = open_log(SMALL)
    model = append_model(log, kit, [kit.batch(4, tag=i) for i in range(4)])  # offsets 0-3, 4-7, ...
    whole = b"".join(m[2] for m in model)
    got = log.read_batches(0, 1 << 20, 5)
    assert isinstance(got, BatchRead)
    assert got.data == whole[: 2 * len(model[0][2])]
    assert got.extents == (BatchExtent(0, 3, len(model[0][2])), BatchExtent(4, 7, 2 * len(model[0][2])))
    for offset in range(16):
        for stop in range(offset, 18):
            got = log.read_batches(offset, 1 << 20, stop)
            assert got == expected_batch_read(model, offset, 1 << 20, stop), (offset, stop)
            assert [e.base_offset for e in got.extents] == list(range(offset // 4 * 4, min(stop, 15) // 4 * 4 + 1, 4))
    # an offset inside a batch returns that whole batch, even with stop_offset = offset
    assert log.read_batches(6, 1 << 20, 6) == BatchRead(model[1][2], (BatchExtent(4, 7, len(model[1][2])),))
    # stop_offset beyond the log end: through the last batch
    assert log.read_batches(9, 1 << 20, 1_000) == BatchRead(whole[2 * len(model[0][2]) :], expected_batch_read(
        model, 9, 1 << 20, 1_000).extents)


def test_read_batches_max_bytes_cut_keeps_the_first_batch_whole(open_log, kit):
    log = open_log(SMALL)
    model = append_model(log, kit, [kit.batch(2, tag=i) for i in range(4)])
    size = len(model[0][2])
    assert len(log.read_batches(0, 2 * size, 100).data) == 2 * size
    assert len(log.read_batches(0, 2 * size - 1, 100).data) == size
    assert len(log.read_batches(0, 3 * size + size // 2, 100).extents) == 3
    assert log.read_batches(2, 2 * size, 100).extents == (BatchExtent(2, 3, size), BatchExtent(4, 5, 2 * size))
    for max_bytes in (0, 1, 60, size - 1):  # the first batch whole even if too big
        assert log.read_batches(0, max_bytes, 100) == BatchRead(model[0][2], (BatchExtent(0, 1, size),))
        assert log.read_batches(7, max_bytes, 7) == BatchRead(model[3][2], (BatchExtent(6, 7, size),))
    for offset in range(8):
        for max_bytes in range(0, 5 * size, 37):
            assert log.read_batches(offset, max_bytes, 7) == expected_batch_read(model, offset, max_bytes, 7)
            # without a stop inside the log it is read(): greedy whole batches, the first always
            assert log.read_batches(offset, max_bytes, 100).data == log.read(offset, max_bytes)


def test_read_batches_at_or_after_the_log_end_is_empty(open_log, kit):
    log = open_log()
    assert log.read_batches(0, 1 << 20, 0) == BatchRead(b"", ())
    kit.append(log, [kit.batch(3)])
    assert log.read_batches(3, 1 << 20, 10) == BatchRead(b"", ())
    assert log.read_batches(4, 1 << 20, 4) == BatchRead(b"", ())
    assert log.read_batches(2, 1 << 20, 2).extents == (BatchExtent(0, 2, len(kit.batch(3))),)


def test_read_batches_across_segments(open_log, kit):
    batches = [kit.batch(2, tag=i) for i in range(7)]
    size = len(batches[0])
    log = open_log(LogConfig(segment_bytes=3 * size, index_interval_bytes=1))
    model = append_model(log, kit, batches)
    assert log.segment_base_offsets == [0, 6, 12]
    whole = b"".join(m[2] for m in model)
    assert log.read_batches(0, 1 << 20, 13).data == whole
    assert log.read_batches(4, 1 << 20, 7).data == whole[2 * size : 4 * size]  # crosses a boundary
    assert log.read_batches(4, 3 * size, 100).data == whole[2 * size : 5 * size]
    assert log.read_batches(5, 1 << 20, 12).extents == tuple(
        BatchExtent(b, b + 1, (i + 1) * size) for i, b in enumerate(range(4, 14, 2))
    )
    for offset in range(14):
        for stop in range(offset, 15):
            for max_bytes in (0, size, 2 * size + 1, 4 * size, 1 << 20):
                got = log.read_batches(offset, max_bytes, stop)
                assert got == expected_batch_read(model, offset, max_bytes, stop), (offset, stop, max_bytes)
                assert_extents_match_data(got)


def test_read_batches_of_batches_larger_than_a_read_chunk(open_log, kit):
    rng = random.Random(11)
    shapes = [(rng.randint(1, 4), rng.choice([0, 10, 200, 1_500, 3_000, 9_000])) for _ in range(40)]
    log = open_log(LogConfig(segment_bytes=60_000, index_interval_bytes=5_000))
    model = append_model(log, kit, [kit.batch(n, value_bytes=v, tag=i) for i, (n, v) in enumerate(shapes)])
    assert max(len(m[2]) for m in model) > 4096 * 4
    end = model[-1][1]
    for _ in range(300):
        offset = rng.randrange(end + 1)
        stop = offset + rng.choice([0, 1, 5, 20, 1_000])
        max_bytes = rng.choice([0, 100, 4_000, 5_000, 20_000, 70_000, 1 << 20])
        got = log.read_batches(offset, max_bytes, stop)
        assert got == expected_batch_read(model, offset, max_bytes, stop), (offset, stop, max_bytes)
        assert_extents_match_data(got)


def test_read_batches_extents_slice_data_into_its_batches(open_log, kit):
    log = open_log(LogConfig(segment_bytes=2_000, index_interval_bytes=300))
    rng = random.Random(5)
    append_model(log, kit, [kit.batch(rng.randint(1, 5), value_bytes=rng.randint(0, 300), tag=i) for i in range(30)])
    got = log.read_batches(0, 1 << 20, log.log_end_offset)
    assert got.data == log.read(0, 1 << 20)
    assert len(got.extents) == 30
    assert_extents_match_data(got)
    assert [e.base_offset for e in got.extents] == [h.base_offset for h in log.iter_batch_headers()]
    assert [e.last_offset for e in got.extents] == [h.last_offset for h in log.iter_batch_headers()]


def test_sequential_read_batches_interleaved_with_appends_and_reads(open_log, kit):
    log = open_log(LogConfig(segment_bytes=1500, index_interval_bytes=300))
    rng = random.Random(9)
    model = []
    position = 0
    consumed = b""
    for round_ in range(40):
        model += append_model(log, kit, [kit.batch(rng.randint(1, 4), value_bytes=rng.randint(10, 120), tag=round_)
                                         for _ in range(rng.randint(1, 3))], now_ms=round_)
        while position < log.log_end_offset:
            max_bytes, stop = rng.randint(0, 700), position + rng.randint(0, 6)
            got = log.read_batches(position, max_bytes, stop)
            assert got == expected_batch_read(model, position, max_bytes, stop)
            consumed += got.data
            position = got.extents[-1].last_offset + 1
            if rng.random() < 0.3:  # a regular consumer moves the read hint elsewhere
                log.read(rng.randrange(log.log_end_offset), rng.randint(1, 700))
    assert consumed == b"".join(m[2] for m in model)


def test_read_batches_after_the_log_start_moved(open_log, kit):
    size = len(kit.batch(2))
    log = open_log(LogConfig(segment_bytes=2 * size, index_interval_bytes=1, retention_bytes=3 * size))
    model = append_model(log, kit, [kit.batch(2, timestamp_ms=1_000 + i, tag=i) for i in range(6)])
    assert log.segment_base_offsets == [0, 4, 8]
    log.delete_records_before(5)
    assert log.segment_base_offsets == [4, 8]
    # the range check is the caller's, as for read: the batch holding 5 starts at 4
    assert log.read_batches(5, 1 << 20, 5) == BatchRead(model[2][2], (BatchExtent(4, 5, size),))
    assert log.read_batches(5, 1 << 20, 9) == expected_batch_read(model, 5, 1 << 20, 9)
    # below the first remaining segment: served from the start, as read does
    assert log.read_batches(1, 1 << 20, 100).data == log.read(1, 1 << 20) == b"".join(m[2] for m in model[2:])
    model += append_model(log, kit, [kit.batch(2, timestamp_ms=2_000, tag=9)])
    assert log.enforce_retention(now_ms=0)  # retention.bytes: the segment of 4-7 goes
    assert log.log_start_offset == 8
    assert log.read_batches(8, 1 << 20, 9) == BatchRead(model[4][2], (BatchExtent(8, 9, size),))
    assert log.read_batches(8, 1 << 20, 100) == expected_batch_read(model, 8, 1 << 20, 100)
    assert log.read_batches(14, 1 << 20, 100) == BatchRead(b"", ())


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
            stop = target + data.draw(st.integers(0, 12))
            got = log.read_batches(target, max_bytes, stop)
            assert got == expected_batch_read(model, target, max_bytes, stop)
            assert_extents_match_data(got)
    assert [h.base_offset for h in log.iter_batch_headers()] == [m[0] for m in model]
    store.close()
