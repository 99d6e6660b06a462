"""Flushing while appending (issue 14, acceptance 1): `begin_flush` on the appending thread, the
fsync of its ticket on another thread, `complete_flush` back on the appending thread.

Before, `FileLog.flush` ran on an executor thread while the event loop appended to the same log:
a segment rolled during the flush could be cleared from the dirty list without its fsync, and
`_first_unflushed_ms` could be reset to None with records pending (then `maybe_flush` raised in
the flush loop). Here a worker thread syncs tickets while the main thread appends and rolls tiny
segments; every sync is recorded by inode, and the test checks, for every completed flush, that
every segment file holding records below the ticket's end offset was synced by that flush or an
earlier one, and that the bookkeeping never breaks. Seeded: each run draws a fresh seed and prints
it; rerun one with QUAFKA_SEED=<seed>.
"""

from __future__ import annotations

import os
import queue
import random
import threading

import pytest

from quafka.broker.storage import FileLog, LogConfig
from quafka.broker.storage import file_log as file_log_module
from quafka.protocol.record_batch import build_batch, read_header

SEED = int(os.environ.get("QUAFKA_SEED", random.randrange(1 << 30)))


def _batch(i: int) -> bytearray:
    return bytearray(build_batch([(f"k{i}".encode(), b"v" * 40)], base_timestamp=1_000 + i))


def _append(log: FileLog, i: int) -> None:
    buf = _batch(i)
    log.append(buf, [(0, read_header(buf))], now_ms=1_000 + i, defer_flush=True)


class SyncRecorder:
    """Stands in for fdatasync: records (inode, file size at sync) and really syncs."""

    def __init__(self) -> None:
        self.synced: list[tuple[int, int]] = []
        self.lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        st = os.fstat(fd)
        os.fdatasync(fd)
        with self.lock:
            self.synced.append((st.st_ino, st.st_size))


@pytest.mark.parametrize("round_", range(3))
def test_no_segment_is_marked_clean_without_its_fsync(tmp_path, monkeypatch, round_):
    print(f"seed {SEED} (replay with QUAFKA_SEED={SEED})")
    rng = random.Random(SEED + round_)
    recorder = SyncRecorder()
    monkeypatch.setattr(file_log_module, "_sync_data", recorder)
    log = FileLog(str(tmp_path), "t", 0, LogConfig(segment_bytes=600, index_interval_bytes=64), now_ms=0)
    tickets: queue.Queue = queue.Queue()
    done: queue.Queue = queue.Queue()

    def worker() -> None:
        while True:
            ticket = tickets.get()
            if ticket is None:
                return
            ticket.run()
            done.put(ticket)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    # what each segment (by inode) holds: inode -> (first offset, end offset, size) as appended
    completed = []
    in_flight = 0
    try:
        for i in range(600):
            _append(log, i)
            assert log.unflushed_records == 0 or log._first_unflushed_ms is not None, f"seed {SEED}"
            if rng.random() < 0.2 and in_flight < 3:
                ticket = log.begin_flush()
                if ticket is not None:
                    segments = [(os.fstat(seg.fd).st_ino, seg.base_offset, seg.next_offset, seg.size_bytes)
                                for seg in log._segments if seg.fd is not None]
                    tickets.put(ticket)
                    in_flight += 1
                    completed.append((ticket, segments))
            while not done.empty():
                log.complete_flush(done.get())
                in_flight -= 1
            log.flush_due(now_ms=10**12)  # never raises, whatever the interleaving
        tickets.put(None)
        thread.join(10)
        while not done.empty():
            log.complete_flush(done.get())
    finally:
        tickets.put(None)
    assert completed, f"seed {SEED}: no flush was taken"
    synced_sizes: dict[int, int] = {}
    for ino, size in recorder.synced:
        synced_sizes[ino] = max(synced_sizes.get(ino, 0), size)
    for ticket, segments in completed:
        for ino, base, next_offset, size in segments:
            if base < ticket.end_offset:  # holds records the ticket promised durable
                assert synced_sizes.get(ino, 0) >= size, (
                    f"seed {SEED}: segment {base} (inode {ino}, {size} bytes) was counted flushed up to "
                    f"{ticket.end_offset} but synced only {synced_sizes.get(ino, 0)} bytes")
    assert log.flushed_offset == max(t.end_offset for t, _ in completed), f"seed {SEED}"
    log.close()


def test_a_ticket_syncs_a_segment_deleted_after_it_was_taken(tmp_path, monkeypatch):
    """Retention may delete (and close) a rolled segment while its fsync is queued: the ticket
    holds its own descriptor, so the sync neither fails nor syncs another file."""
    recorder = SyncRecorder()
    monkeypatch.setattr(file_log_module, "_sync_data", recorder)
    log = FileLog(str(tmp_path), "t", 0, LogConfig(segment_bytes=300, retention_bytes=0), now_ms=0)
    for i in range(10):
        _append(log, i)
    inodes = {os.fstat(seg.fd).st_ino for seg in log._segments if seg.fd is not None}
    ticket = log.begin_flush()
    assert ticket is not None and ticket.blocking
    log.enforce_retention(now_ms=10**6)  # deletes every rolled segment
    assert len(log._segments) == 1
    ticket.run()
    log.complete_flush(ticket)
    assert len(inodes) > 1 and {ino for ino, _ in recorder.synced} >= inodes
    assert log.flushed_offset == 10
    log.close()


def test_a_failed_sync_is_raised_and_the_duplicates_are_closed(tmp_path, monkeypatch):
    log = FileLog(str(tmp_path), "t", 0, LogConfig(), now_ms=0)
    _append(log, 0)
    ticket = log.begin_flush()
    before = set(os.listdir("/proc/self/fd"))

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    ticket._sync_data = failing
    with pytest.raises(OSError):
        ticket.run()
    after = set(os.listdir("/proc/self/fd"))
    assert len(after) < len(before), "the ticket's duplicated descriptors stay open"
    assert log.flushed_offset == 0  # not published
    log.release()
