"""Log compaction's files in a FileLog directory: reading sealed segments on the cleaner's thread,
writing a cleaned segment, the swap, and its recovery at start-up.

The swap follows Kafka's (UnifiedLog.replaceSegments / LocalLog.replaceSegments, recovered by
LogLoader): the cleaner writes ``<base>.log.cleaned`` and fsyncs it; the swap renames it to
``<base>.log.swap``, removes the replaced segments' files (their ``.txnindex`` too), renames the
cleaned aborted-transaction index ``<base>.txnindex.cleaned`` (written and fsynced with the log,
only when the cleaned segment keeps entries) to ``<base>.txnindex``, then renames the ``.swap`` to
``<base>.log``. At start-up (`recover_swaps`), before any segment is opened:

- a ``.cleaned`` file (log or txnindex) is an unfinished cleaning or the leftover of a swap:
  removed;
- a ``.swap`` file is a swap that had begun: every ``.log`` whose base offset lies in the swap's
  offset range [its base, the offset after its last batch) is removed with its indexes, and the
  ``.swap`` becomes the ``.log``. The cleaner keeps the last batch of every group it cleans (as an
  empty header if need be), so that range covers exactly the segments it replaced. The swapped-in
  segment has no offset index yet, so FileLog opens it as a recovered segment: its ``.txnindex``
  (whichever a crash left) is reset and rebuilt by the broker's producer-state replay, as for any
  recovered segment holding a marker (Kafka's LogLoader recovers swap segments likewise); the
  ``.txnindex`` files of the replaced segments are orphans then and removed.

So a process killed at any point leaves the old segments or the cleaned one, never both and never
a part of either. The directory entry changes reach the disk with the log's next flush (the
directory is marked dirty), as a segment roll's do.
"""

from __future__ import annotations

import os
from typing import Iterator

from quafka.protocol.record_batch import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, read_header

from ._segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    _fsync_dir,
    _Segment,
    _unlink,
    _write_all,
)
from .base import AbortedTxn, CleanedSegment, CleaningSource
from .txn_index import TXN_INDEX_SUFFIX, encode_entries

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

__all__ = ["CLEANED_SUFFIX", "SWAP_SUFFIX", "FileCleanedSegment", "FileCleaningSource", "recover_swaps",
           "segment_end_offset"]


def _iter_file_batches(fd: int, size: int, chunk_bytes: int) -> Iterator[tuple[int, BatchHeader, bytes]]:
    """(position, header, bytes) of each whole batch in the first `size` bytes of `fd`."""
    pos = 0
    while size - pos >= HEADER_SIZE:
        data = os.pread(fd, min(max(chunk_bytes, HEADER_SIZE), size - pos), pos)
        p = 0
        n = len(data)
        while n - p >= HEADER_SIZE:
            h = read_header(data, p)
            total = h.batch_length + LOG_OVERHEAD
            if total < HEADER_SIZE or pos + p + total > size:
                return
            if p + total > n:
                if p == 0:  # one batch larger than the chunk
                    data = os.pread(fd, total, pos)
                    n = len(data)
                    if n < total:
                        return
                else:
                    break
            yield pos + p, h, bytes(data[p:p + total])
            p += total
        if p == 0:
            return
        pos += p


class FileCleaningSource(CleaningSource):
    """A sealed segment's ``.log`` opened by its own descriptor (a retention delete meanwhile
    unlinks the file; this descriptor still reads it, and the swap then refuses)."""

    def __init__(self, seg: _Segment) -> None:
        self.base_offset = seg.base_offset
        self.size_bytes = seg.size_bytes
        self._fd = os.open(seg.path + LOG_SUFFIX, os.O_RDONLY)

    def iter_batches(self, chunk_bytes: int) -> Iterator[tuple[BatchHeader, bytes]]:
        for _pos, header, data in _iter_file_batches(self._fd, self.size_bytes, chunk_bytes):
            yield header, data

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class FileCleanedSegment(CleanedSegment):
    """``<base>.log.cleaned``, written on the cleaner's thread, with its index kept in memory."""

    def __init__(self, dir_path: str, base_offset: int, index_interval_bytes: int) -> None:
        self.base_offset = base_offset
        self.segment = _Segment(dir_path, base_offset)
        self.path = self.segment.path + LOG_SUFFIX + CLEANED_SUFFIX
        self._interval = index_interval_bytes
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.size_bytes = 0
        self.finished = False
        self.txn_index_path = self.segment.path + TXN_INDEX_SUFFIX + CLEANED_SUFFIX
        self.aborted_txns: list[AbortedTxn] = []

    def append(self, header: BatchHeader, batch: bytes) -> None:
        _write_all(self._fd, batch)
        self.segment.track(self.size_bytes, header.base_offset, len(batch), header.max_timestamp, self._interval)
        self.size_bytes += len(batch)
        self.segment.next_offset = header.next_offset

    def finish(self, next_offset: int, aborted_txns=()) -> None:
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        self.aborted_txns = list(aborted_txns)
        if self.aborted_txns:
            fd = os.open(self.txn_index_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write_all(fd, encode_entries(self.aborted_txns))
                os.fsync(fd)
            finally:
                os.close(fd)
        self.segment.size_bytes = self.size_bytes
        self.segment.next_offset = max(self.segment.next_offset, next_offset)
        self.finished = True

    def discard(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        _unlink(self.path, self.txn_index_path)


def segment_end_offset(path: str) -> int | None:
    """The offset after the last whole batch of a segment file; None if it holds none."""
    fd = os.open(path, os.O_RDONLY)
    try:
        end = None
        for _pos, header, _data in _iter_file_batches(fd, os.fstat(fd).st_size, 1 << 20):
            end = header.next_offset
        return end
    finally:
        os.close(fd)


def recover_swaps(dir_path: str, names: list[str], log: object = None) -> bool:
    """Finish or undo interrupted swaps (see the module docstring); True if the directory changed."""
    changed = False
    for name in names:
        if name.endswith((LOG_SUFFIX + CLEANED_SUFFIX, TXN_INDEX_SUFFIX + CLEANED_SUFFIX)):
            _unlink(os.path.join(dir_path, name))
            changed = True
    bases = sorted(int(n[:-len(LOG_SUFFIX)]) for n in names if n.endswith(LOG_SUFFIX) and n[:-len(LOG_SUFFIX)].isdigit())
    for name in sorted(names):
        if not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            continue
        stem = name[:-len(LOG_SUFFIX + SWAP_SUFFIX)]
        if not stem.isdigit():
            continue
        swap_base = int(stem)
        swap_path = os.path.join(dir_path, name)
        end = segment_end_offset(swap_path)
        for base in bases:
            if base == swap_base or (end is not None and swap_base <= base < end):
                prefix = os.path.join(dir_path, f"{base:020d}")
                _unlink(prefix + LOG_SUFFIX, prefix + INDEX_SUFFIX, prefix + TIME_INDEX_SUFFIX)
        os.rename(swap_path, os.path.join(dir_path, f"{swap_base:020d}{LOG_SUFFIX}"))
        bases = [b for b in bases if not (b == swap_base or (end is not None and swap_base <= b < end))]
        bases.append(swap_base)
        bases.sort()
        changed = True
    if changed:
        _fsync_dir(dir_path)
    return changed
