"""The compaction swap of a FileLog (storage/_cleaned_segment.py), after Kafka's
UnifiedLog.replaceSegments and its recovery in LogLoader: a crash at any step leaves either the
old segments or the cleaned one, never a mix; reads and recovery scans cross offset gaps."""

from __future__ import annotations

import os

import pytest

from quafka.broker.storage import FileLog, LogConfig, MemoryLog
from quafka.broker.storage.base import AbortedTxn
from quafka.protocol.record_batch import build_batch, iter_headers, iter_records, read_header

from .conftest import append

CONFIG = LogConfig(segment_bytes=400, index_interval_bytes=100)


def keyed(i: int) -> bytes:
    return build_batch([(b"k%d" % (i % 3), b"v%03d" % i)], base_timestamp=1000 + i)


def contents(log) -> list[tuple[int, bytes, bytes]]:
    data = log.read(log.log_start_offset, 1 << 20)
    out = []
    for pos, header in iter_headers(data):
        out += [(r.offset, r.key, r.value) for r in iter_records(data[pos:pos + header.size_bytes])]
    return out


def filled(path) -> FileLog:
    log = FileLog(str(path), "t", 0, CONFIG, 0)
    for i in range(12):
        append(log, [keyed(i)], now_ms=i)
    assert len(log.segment_base_offsets) >= 3
    return log


def write_cleaned(log, bases: list[int], aborted_txns=()):
    """The cleaned copy of the segments at `bases`: the last batch of each key, plus the last
    batch of the range (as the cleaner keeps it)."""
    sources = log.open_for_cleaning(bases)
    batches = [(h, b) for src in sources for h, b in src.iter_batches(4096)]
    for src in sources:
        src.close()
    latest = {}
    for h, b in batches:
        for r in iter_records(b):
            latest[r.key] = r.offset
    end = log.segment_base_offsets[log.segment_base_offsets.index(bases[-1]) + 1]
    cleaned = log.create_cleaned_segment(bases[0])
    for h, b in batches:
        if any(latest[r.key] == r.offset for r in iter_records(b)) or h.next_offset == end:
            cleaned.append(h, b)
    cleaned.finish(end, aborted_txns)
    return cleaned


@pytest.mark.parametrize("engine", ["file", "memory"])
def test_a_swapped_in_segment_serves_reads_across_offset_gaps(tmp_path, engine):
    log = filled(tmp_path) if engine == "file" else MemoryLog("t", 0, CONFIG)
    if engine == "memory":
        for i in range(12):
            append(log, [keyed(i)], now_ms=i)
    before = contents(log)
    bases = log.segment_base_offsets[:-1]
    assert log.replace_segments(write_cleaned(log, bases), bases)
    after = contents(log)
    latest = {k: (o, v) for o, k, v in before}
    assert {k: (o, v) for o, k, v in after} == latest  # every key's latest value is still there
    assert len(after) < len(before) and log.log_end_offset == 12
    gap = next(o for o, _, _ in before if o not in {a for a, _, _ in after})
    assert read_header(log.read(gap, 1 << 20)).base_offset > gap  # a removed offset reads from the next batch
    if engine == "file":
        log.close()
        assert contents(FileLog(str(tmp_path), "t", 0, CONFIG, 0)) == after


def test_a_changed_log_refuses_the_swap(tmp_path):
    log = filled(tmp_path)
    bases = log.segment_base_offsets[:-1]
    cleaned = write_cleaned(log, bases)
    log.delete_records_before(bases[1])  # retention or DeleteRecords took the first segment meanwhile
    assert not log.replace_segments(cleaned, bases)
    assert not [n for n in os.listdir(tmp_path) if n.endswith((".cleaned", ".swap"))]


def test_a_crash_while_copying_leaves_the_old_segments(tmp_path):
    log = filled(tmp_path)
    before = contents(log)
    bases = log.segment_base_offsets[:-1]
    cleaned = write_cleaned(log, bases)  # written and fsynced, never swapped: the process died here
    assert os.path.exists(cleaned.path)
    log.release()
    reopened = FileLog(str(tmp_path), "t", 0, CONFIG, 0)
    assert contents(reopened) == before
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".cleaned")]


@pytest.mark.parametrize("deleted_before_crash", [0, 1, 2])
def test_a_crash_during_the_swap_completes_it_at_start_up(tmp_path, deleted_before_crash):
    log = filled(tmp_path)
    bases = log.segment_base_offsets[:-1]
    cleaned = write_cleaned(log, bases)
    # the swap's first step, then the process dies after removing some of the old segments
    swap = cleaned.segment.path + ".log.swap"
    os.rename(cleaned.path, swap)
    for base in bases[:deleted_before_crash]:
        os.unlink(os.path.join(tmp_path, f"{base:020d}.log"))
    log.release()
    reopened = FileLog(str(tmp_path), "t", 0, CONFIG, 0)
    kept = contents(reopened)
    latest = {}
    for o, k, v in kept:
        latest[k] = (o, v)
    assert latest == {b"k0": (9, b"v009"), b"k1": (10, b"v010"), b"k2": (11, b"v011")}
    assert reopened.segment_base_offsets[0] == bases[0] and reopened.log_end_offset == 12
    offsets = [o for o, _, _ in kept]
    assert offsets == sorted(offsets) and len(offsets) < 12  # compacted, in order, no old segment mixed in
    assert not [n for n in os.listdir(tmp_path) if n.endswith((".swap", ".cleaned"))]


def with_aborted(log) -> tuple[AbortedTxn, AbortedTxn, AbortedTxn]:
    """Aborted-transaction entries (as ABORT markers would add them) in the first two segments and
    the active one."""
    bases = log.segment_base_offsets
    first = AbortedTxn(7, bases[0], bases[0] + 1, bases[0] + 2)
    second = AbortedTxn(8, bases[1], bases[1] + 1, bases[1] + 2)
    active = AbortedTxn(9, bases[-1], bases[-1], bases[-1] + 1)
    for txn in (first, second, active):
        assert log.append_aborted_txn(txn)
    return first, second, active


@pytest.mark.parametrize("engine", ["file", "memory"])
def test_the_cleaned_segment_carries_the_aborted_transactions_it_keeps(tmp_path, engine):
    """Cleaner.cleanSegments: the cleaned segment's txnIndex holds the entries whose markers it
    keeps with a batch of their transaction; the replaced segments' indexes go with them, and the
    segments and their indexes stay aligned (an ABORT in the active segment still lands there)."""
    if engine == "file":
        log = filled(tmp_path)
    else:
        log = MemoryLog("t", 0, CONFIG)
        for i in range(12):
            append(log, [keyed(i)], now_ms=i)
    first, second, active = with_aborted(log)
    bases = log.segment_base_offsets[:-1]
    assert log.replace_segments(write_cleaned(log, bases, [second]), bases)  # `first` no longer needed
    end = log.log_end_offset
    assert log.aborted_transactions(0, end) == [second, active]
    late = AbortedTxn(10, end - 1, end - 1, end)
    assert log.append_aborted_txn(late)
    assert log.aborted_transactions(0, end) == [second, active, late]
    if engine == "file":
        assert len(log._txn_indexes) == len(log.segment_base_offsets)
        names = sorted(n for n in os.listdir(tmp_path) if n.endswith(".txnindex"))
        assert names == [f"{bases[0]:020d}.txnindex", f"{log.segment_base_offsets[-1]:020d}.txnindex"]
        log.close()
        assert FileLog(str(tmp_path), "t", 0, CONFIG, 0).aborted_transactions(0, end) == [second, active, late]


@pytest.mark.parametrize("swapped", [False, True])
def test_a_crash_in_a_cleaning_leaves_no_cleaned_txnindex_nor_a_replaced_segments_one(tmp_path, swapped):
    """Killed while copying (a .log.cleaned and a .txnindex.cleaned): the old segments keep their
    indexes. Killed after the swap began (.log.swap): the swapped-in segment is recovered, so its
    index is reset for the producer-state replay to rebuild (file_log.py; these batches hold no
    marker, so there is nothing to rebuild), and the replaced segments' indexes are removed. (The
    active segment is recovered too after a crash: its entry is the replay's to rebuild as well.)"""
    log = filled(tmp_path)
    first, second, active = with_aborted(log)
    bases = log.segment_base_offsets[:-1]
    cleaned = write_cleaned(log, bases, [second])
    assert os.path.exists(cleaned.txn_index_path)
    if swapped:
        os.rename(cleaned.path, cleaned.segment.path + ".log.swap")
    log.release()
    reopened = FileLog(str(tmp_path), "t", 0, CONFIG, 0)
    assert not [n for n in os.listdir(tmp_path) if n.endswith((".swap", ".cleaned"))]
    assert len(reopened._txn_indexes) == len(reopened.segment_base_offsets)
    if swapped:
        assert reopened.segment_base_offsets == [bases[0], log.segment_base_offsets[-1]]
        assert reopened.aborted_transactions(0, reopened.log_end_offset) == []
        assert not [n for n in os.listdir(tmp_path) if ".txnindex" in n]
    else:
        assert reopened.segment_base_offsets == log.segment_base_offsets
        assert reopened.aborted_transactions(0, reopened.log_end_offset) == [first, second]
