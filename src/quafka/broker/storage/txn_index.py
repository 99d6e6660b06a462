"""The aborted-transaction index of a segment: `<20-digit base offset>.txnindex`.

Kafka keeps, next to each segment, the transactions that were aborted by a marker in that segment
(`TransactionIndex`, `AbortedTxn`, storage module `org.apache.kafka.storage.internals.log`), so a
`read_committed` fetch can tell the consumer which producers' records to drop without reading them.
An entry is appended when an ABORT marker closes a transaction that wrote to the partition; it
lives in the segment that holds the marker. The file is 34-byte entries back to back, big-endian:

    version             int16   0 (AbortedTxn.CURRENT_VERSION)
    producer_id         int64
    first_offset        int64   the transaction's first offset in this partition
    last_offset         int64   the ABORT marker's offset
    last_stable_offset  int64   the partition's LSO once the marker was written

The file exists only once a segment has an entry (Kafka creates it lazily too). Entries are
written with one `os.write` on an O_APPEND descriptor when the marker is appended, so they survive
a SIGKILL like the segment's bytes; they are fsynced with nothing (Kafka flushes them with the
segment): after a crash the active segment's index is rebuilt from the log (`reset`, then the
broker's producer-state replay appends the entries again), as Kafka's `LogSegment.recover`
rebuilds it. A trailing partial entry (a torn write) is ignored when read. The index is deleted
with its segment (retention, DeleteRecords).
"""

from __future__ import annotations

import os
import struct

from ._segment import _unlink, _write_all, _write_file
from .base import AbortedTxn

TXN_INDEX_SUFFIX = ".txnindex"
ABORTED_TXN_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


def collect_aborted(entry_lists, start_offset: int, end_offset: int) -> list[AbortedTxn]:
    """The entries of `entry_lists` (each segment's, from the segment holding `start_offset` on)
    that overlap [start, end), sorted by first offset then producer id; the walk stops after an
    entry whose last stable offset reaches `end_offset` (Kafka's TxnIndexSearchResult.isComplete:
    no later marker can close a transaction that began before it)."""
    out: list[AbortedTxn] = []
    for entries in entry_lists:
        for e in entries:
            if e.last_offset >= start_offset and e.first_offset < end_offset:
                out.append(e)
            if e.last_stable_offset >= end_offset:
                out.sort(key=lambda t: (t.first_offset, t.producer_id))
                return out
    out.sort(key=lambda t: (t.first_offset, t.producer_id))
    return out


def encode_entries(entries) -> bytes:
    return b"".join(_ENTRY.pack(ABORTED_TXN_VERSION, *e) for e in entries)


def decode_entries(data: bytes) -> list[AbortedTxn]:
    """The whole entries of a file's bytes (a torn trailing entry is dropped). Raises ValueError
    for an entry of an unknown version (Kafka's TransactionIndex refuses it too)."""
    out = []
    whole = len(data) - len(data) % ENTRY_SIZE
    for version, producer_id, first, last, lso in _ENTRY.iter_unpack(memoryview(data)[:whole]):
        if version != ABORTED_TXN_VERSION:
            raise ValueError(f"aborted transaction entry of unknown version {version}")
        out.append(AbortedTxn(producer_id, first, last, lso))
    return out


class TransactionIndex:
    """The aborted transactions of one segment, in memory and in its file (see the module)."""

    __slots__ = ("path", "entries")

    def __init__(self, segment_path: str) -> None:
        self.path = segment_path + TXN_INDEX_SUFFIX  # segment_path: directory + 20-digit base offset
        self.entries: list[AbortedTxn] = []

    def load(self, log_end_offset: int) -> None:
        """Read the file if there is one; entries whose marker lies at or past `log_end_offset`
        (a tail recovery cut off) are dropped and the file rewritten without them."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            self.entries = []
            return
        entries = decode_entries(data)
        kept = [e for e in entries if e.last_offset < log_end_offset]
        self.entries = kept
        if len(kept) != len(entries) or len(data) != len(entries) * ENTRY_SIZE:
            self._rewrite()

    @property
    def last_offset(self) -> int:
        """The last entry's marker offset (-1: none)."""
        return self.entries[-1].last_offset if self.entries else -1

    def append(self, entry: AbortedTxn) -> bool:
        """Add `entry` unless its marker is not after the last one (a replay adding it again).
        True if it was added."""
        if entry.last_offset <= self.last_offset:
            return False
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            _write_all(fd, encode_entries((entry,)))
        finally:
            os.close(fd)
        self.entries.append(entry)
        return True

    def reset(self) -> None:
        """Forget every entry and remove the file (the segment's index is being rebuilt)."""
        self.entries = []
        _unlink(self.path)

    def _rewrite(self) -> None:
        if self.entries:
            _write_file(self.path, encode_entries(self.entries))
        else:
            _unlink(self.path)

    def delete(self) -> None:
        self.entries = []
        _unlink(self.path)
