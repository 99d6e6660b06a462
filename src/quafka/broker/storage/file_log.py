"""Durable partition logs in files, laid out like Kafka's.

A partition is the directory ``<log_dir>/<topic>-<partition>/``:

- ``<20-digit base offset>.log``: a *segment*, record batches back to back exactly as produced
  (base offsets stamped). The base offset is the offset of the segment's first record. Only the
  last segment, the *active* one, is written; a new one is *rolled* when the active segment would
  grow past segment.bytes or has been open longer than segment.ms.
- ``.index``: the sparse offset index, 8-byte entries (offset relative to the base u32, file
  position u32); ``.timeindex``: 12-byte entries (largest timestamp so far i64, relative offset
  u32). An entry is added for the batch that starts after index.interval.bytes of data since the
  previous entry; entry i of both files describes the same batch.
- ``partition.metadata``: ``version: 0`` / ``topic_id: <id>``, as Kafka writes it (KIP-516).
- ``log-start-offset``: a checkpoint of the log start offset, written when DeleteRecords moves it
  past the first segment's base offset (otherwise the first segment's base offset is the start).

Index persistence: indexes live in memory (arrays) and are written when a segment is rolled and
on close(). The ``.index`` file ends with a trailer (magic ``QIX1``, entry count, size of the
``.log`` it covers, the segment's next offset, largest timestamp and offset of the batch holding
it, then a CRC32 of both files' entries and the trailer). On open, a non-active segment's indexes
are loaded when the trailer is intact and its covered size equals the ``.log`` size; otherwise
the segment's batch headers are scanned to rebuild them (and the files are rewritten). The active
segment likewise: close() fsyncs it and then writes its indexes, so index files that cover its
exact size mean a clean shutdown and it is not scanned (Kafka recovers nothing after a clean
shutdown). Otherwise (a crash: appends since, no index files, a torn tail) it is recovered: every
batch's CRC is checked, and the file is truncated at the first incomplete, corrupt or
out-of-sequence batch; its index files are removed and rewritten at the next roll or close. A
rebuilt non-active segment is not CRC-checked (Kafka likewise recovers only what follows its
recovery point). segment.ms of an active segment counts from its first batch's max timestamp, as
Kafka's does.

Aborted-transaction indexes (``<base>.txnindex``, txn_index.py) go with their segments: loaded on
open (entries whose ABORT marker a tail recovery cut off are dropped), reset when their segment is
recovered by a scan (a crash, or missing or stale offset indexes) so that the broker's
producer-state replay rebuilds them (``txn_index_rebuild_from``), deleted with the segment.

Producer-state snapshots (``<20-digit offset>.snapshot``, producer_snapshot.py) live in the same
directory: the broker writes one when a segment is rolled (``roll_listener``) and on clean
shutdown; a segment's deletion deletes the snapshot at its base offset, and strays are removed
on open.

Retention deletes whole segments from the oldest (retention.ms by each segment's largest
timestamp, retention.bytes while the rest still holds that many bytes); an expired non-empty
active segment is rolled first. The log start offset then becomes the first remaining segment's
base offset, unless DeleteRecords already put it higher.

Reads: read() returns the batch holding the offset and following whole batches up to max_bytes,
continuing into the next segments when a segment's remainder fits (Kafka stops at the end of a
segment; continuing saves round trips when segments are small). A hint (next offset -> segment,
position) is kept after each read, so a consumer reading sequentially does not rescan.
read_batches() (ShareFetch) reads only what it returns: from the located batch, a 4 KiB chunk,
then chunks doubling up to 1 MiB (bounded by max_bytes and the segment) while the batches wanted
go on, parsing only their headers (see _segment._read_batches).

Durability: append() writes with one os.write on an O_APPEND descriptor, so the bytes are in the
kernel's page cache when it returns and survive SIGKILL of the process. fdatasync is split in three
so that it never runs on the broker's event loop: begin_flush() (on the appending thread) takes
duplicated descriptors of the segments written since the last flush and the directory if files
were created, and resets the unflushed count; the ticket's run() syncs them on any thread; and
complete_flush() moves `flushed_offset`. The broker flushes when flush.messages unflushed records
have accumulated (before the produce response), once flush.ms has elapsed since the oldest
unflushed append (its flush scheduler), and on close(). With the defaults (both MAX_LONG, as
Kafka's log.flush.interval.*) flushing is left to the OS and a power loss may lose recent data.

Faults: every method that touches the disk is guarded (base.guard_storage_calls): its OSError
takes the log directory offline (LogDirHealth) and every later call is refused before any I/O.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from bisect import bisect_right
from typing import Iterator, Sequence

from quafka.protocol.record_batch import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, read_header, stamp_base_offset

from ._segment import (
    _DELETED_DIR_NAME,
    _DIR_NAME,
    _INT32,
    _INT64,
    _MAX_RELATIVE_OFFSET,
    _MAX_SEGMENT_BYTES,
    _MAX_TIMESTAMP_POS,
    _SCAN_CHUNK_BYTES,
    _SEEK_CHUNK_BYTES,
    LOG_START_FILE,
    LOG_SUFFIX,
    InconsistentTopicIdError,
    _first_record_at_or_after,
    _fsync_dir,
    _read_batches,
    _Segment,
    _sync_data,
    _walk,
    _write_all,
    _write_file,
    read_partition_metadata,
    write_partition_metadata,
)
from .base import (
    EMPTY_BATCH_READ,
    AppendInfo,
    AbortedTxn,
    BatchExtent,
    BatchRead,
    CleanedSegment,
    CleaningSource,
    FlushTicket,
    Log,
    LogConfig,
    LogDirHealth,
    LogStore,
    SegmentInfo,
    guard_storage_calls,
)
from ._cleaned_segment import SWAP_SUFFIX, FileCleanedSegment, FileCleaningSource, recover_swaps
from .producer_snapshot import ProducerSnapshots
from .txn_index import TXN_INDEX_SUFFIX, TransactionIndex, collect_aborted

_log = logging.getLogger("quafka.storage")

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"

# ----------------------------------------------------------------------------- the log

class FileLog(Log):
    """A partition log in a directory of segment files (see the module docstring)."""

    def __init__(self, dir_path: str, topic: str, partition: int, config: LogConfig, now_ms: int,
                 health: LogDirHealth | None = None) -> None:
        super().__init__()
        if health is not None:
            self.health = health
        self.topic = topic
        self.partition = partition
        self.dir_path = dir_path
        self._config = config
        self._segments: list[_Segment] = []
        self._bases: list[int] = []  # segment base offsets, for bisect
        self._size_bytes = 0
        self._log_start_offset = 0
        self._dirty_segments: list[_Segment] = []  # rolled while holding unflushed records
        self._dir_dirty = False  # segment files created since the directory was last fsynced
        self._read_hint: tuple[int, _Segment, int] | None = None  # (next offset, segment, position)
        self._txn_indexes: list[TransactionIndex] = []  # one per segment, parallel to _segments
        self.closed = False
        self.producer_snapshots = ProducerSnapshots(dir_path, ())  # its files are listed by _open
        self._open(now_ms)
        self.producer_snapshots.remove_stray(self._bases, self.log_end_offset)
        self.flushed_offset = self.log_end_offset  # what recovery found is on disk

    # -- opening and recovery
    def _open(self, now_ms: int) -> None:
        names = os.listdir(self.dir_path)
        if recover_swaps(self.dir_path, names):  # an interrupted compaction swap (_cleaned_segment.py)
            names = os.listdir(self.dir_path)
        self.producer_snapshots = ProducerSnapshots(self.dir_path, names)
        bases = sorted(int(n[:-4]) for n in names if n.endswith(LOG_SUFFIX) and n[:-4].isdigit())
        base_set = set(bases)
        for name in names:  # leftovers: temporary files, indexes of deleted segments
            stem, _, suffix = name.partition(".")
            orphan_index = suffix in ("index", "timeindex", "txnindex") and stem.isdigit() and int(stem) not in base_set
            if name.endswith(".tmp") or orphan_index:
                os.unlink(os.path.join(self.dir_path, name))
        checkpoint = self._read_log_start_checkpoint()
        if not bases:
            bases = [checkpoint or 0]
            self._dir_dirty = True
        interval = self._config.index_interval_bytes
        name_set = set(names)
        rebuild_from = None
        for i, base in enumerate(bases):
            seg = _Segment(self.dir_path, base)
            if i == len(bases) - 1:
                recovered = self._recover_active(seg, now_ms)
            else:
                log_stat = os.stat(seg.path + LOG_SUFFIX)
                recovered = not seg.load_index_files(log_stat.st_size)
                if recovered:
                    seg.scan(interval, verify_crc=False)
                    seg.write_index_files()
                seg.last_append_ms = int(log_stat.st_mtime * 1000)
            txn_index = TransactionIndex(seg.path)
            # LogSegment.recover rebuilds the txn index; here the broker's producer-state replay does,
            # from this segment on, if the scan met a marker (without one the index is empty anyway,
            # and an unclean start of a log without transactions replays no more than before)
            rebuild = recovered and seg.scanned_control
            if not recovered and os.path.basename(seg.path) + TXN_INDEX_SUFFIX in name_set:
                try:
                    txn_index.load(seg.next_offset)
                except ValueError as exc:  # an entry of an unknown version: rebuilt like a recovered one
                    _log.warning("rebuilding the aborted-transaction index %s: %s", txn_index.path, exc)
                    rebuild = True
            if recovered or rebuild:
                txn_index.reset()
            if rebuild and rebuild_from is None:
                rebuild_from = base
            self._txn_indexes.append(txn_index)
            self._segments.append(seg)
            self._bases.append(base)
            self._size_bytes += seg.size_bytes
        start = self._segments[0].base_offset
        if checkpoint is not None:
            if checkpoint > self.log_end_offset:  # the tail it pointed into was lost
                checkpoint = self.log_end_offset
                self._write_log_start_checkpoint(checkpoint)
            start = max(start, checkpoint)
        self._log_start_offset = start
        self.txn_index_rebuild_from = rebuild_from
        self._delete_below_log_start()

    def _recover_active(self, seg: _Segment, now_ms: int) -> bool:
        """Recover the active segment: after a clean close its index files cover exactly its
        bytes (close() fsyncs the log, then writes them), so they are loaded and nothing is
        scanned, as Kafka skips recovery after a clean shutdown (LogLoader, hadCleanShutdown);
        otherwise every batch's CRC is checked and a torn or corrupt tail is cut off. True if it
        was recovered (scanned), False after a clean shutdown."""
        fd = seg.open_for_append()
        file_size = os.fstat(fd).st_size
        if file_size and seg.load_index_files(file_size):
            positions = seg.index_positions  # still on disk, for these bytes: not rewritten at close
            seg.bytes_since_index = file_size - (positions[-1] if positions else 0)
            valid_bytes, first_timestamp = file_size, read_header(os.pread(fd, HEADER_SIZE, 0), 0).max_timestamp
            recovered = False
        else:
            seg.remove_index_files()
            valid_bytes, first_timestamp = seg.scan(self._config.index_interval_bytes, verify_crc=True)
            recovered = bool(file_size)
        if valid_bytes < file_size:
            os.ftruncate(fd, valid_bytes)
            os.fsync(fd)
        seg.last_append_ms = now_ms
        if valid_bytes:  # as Kafka, segment.ms counts from the first batch's timestamp
            has_timestamp = first_timestamp is not None and first_timestamp >= 0
            seg.roll_base_ms = min(first_timestamp, now_ms) if has_timestamp else now_ms
        return recovered

    def _write_log_start_checkpoint(self, offset: int) -> None:
        _write_file(os.path.join(self.dir_path, LOG_START_FILE), f"{offset}\n".encode(), durable=True)

    def _read_log_start_checkpoint(self) -> int | None:
        try:
            with open(os.path.join(self.dir_path, LOG_START_FILE), encoding="ascii") as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    # -- state
    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        self._config = config

    @property
    def segment_base_offsets(self) -> list[int]:
        """Base offsets of the segments, oldest first (introspection for tests and tools)."""
        return list(self._bases)

    # -- writes
    def append(self, buf: bytearray, batches: Sequence[tuple[int, BatchHeader]], now_ms: int, *,
               defer_flush: bool = False) -> AppendInfo:
        seg = self._segments[-1]
        first_offset = seg.next_offset
        if not batches:
            return AppendInfo(first_offset, first_offset - 1, self._log_start_offset)
        config = self._config
        total_bytes = len(buf)
        if seg.size_bytes and (
            seg.size_bytes + total_bytes > min(config.segment_bytes, _MAX_SEGMENT_BYTES)
            or now_ms - seg.roll_base_ms >= config.segment_ms
            or first_offset + total_bytes - seg.base_offset > _MAX_RELATIVE_OFFSET  # records >= 1 byte
        ):
            seg = self._roll(now_ms)
        offset = first_offset
        for pos, header in batches:
            stamp_base_offset(buf, pos, offset)
            offset += header.last_offset_delta + 1
        fd = seg.fd
        try:
            written = os.write(fd, buf)
            if written != total_bytes:
                _write_all(fd, memoryview(buf)[written:])
        except BaseException:
            try:  # keep the segment made of whole batches
                os.ftruncate(fd, seg.size_bytes)
            except OSError:
                pass
            raise
        base_position = seg.size_bytes
        interval = config.index_interval_bytes
        offset = first_offset
        unpack_int64 = _INT64.unpack_from
        for pos, header in batches:  # timestamps read from buf: LogAppendTime may have rewritten them
            seg.track(base_position + pos, offset, header.batch_length + LOG_OVERHEAD,
                      unpack_int64(buf, pos + _MAX_TIMESTAMP_POS)[0], interval)
            offset += header.last_offset_delta + 1
        seg.size_bytes += total_bytes
        seg.next_offset = offset
        self._size_bytes += total_bytes
        if seg.roll_base_ms is None:
            seg.roll_base_ms = now_ms
        seg.last_append_ms = now_ms
        seg.index_on_disk = False  # the index files (a clean close's) no longer cover it
        self._count_unflushed(offset - first_offset, now_ms)
        if self._unflushed_records >= config.flush_messages and not defer_flush:
            self.flush()
        self._notify("append")
        return AppendInfo(first_offset, offset - 1, self._log_start_offset)

    def _roll(self, now_ms: int) -> _Segment:
        """Seal the active segment (write its indexes) and start a new one at the log end."""
        old = self._segments[-1]
        old.write_index_files()
        if self._unflushed_records:
            self._dirty_segments.append(old)
        seg = _Segment(self.dir_path, old.next_offset)
        seg.open_for_append(truncate=True)
        seg.last_append_ms = now_ms
        txn_index = TransactionIndex(seg.path)
        txn_index.reset()  # a leftover of a segment once at this offset (truncated away) must not count
        self._txn_indexes.append(txn_index)
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._dir_dirty = True
        if self.roll_listener is not None:  # Kafka's UnifiedLog.roll takes a producer snapshot here
            self.roll_listener(seg.base_offset)
        return seg

    def delete_records_before(self, offset: int) -> int:
        new_start = min(max(offset, self._log_start_offset), self.log_end_offset)
        if new_start == self._log_start_offset:
            return new_start
        if new_start > self._segments[0].base_offset:  # durable before any segment goes
            self._write_log_start_checkpoint(new_start)
        self._log_start_offset = new_start
        self._delete_below_log_start()
        self._notify("log_start_offset")
        return new_start

    def enforce_retention(self, now_ms: int) -> bool:
        retention_ms, retention_bytes = self._config.retention_ms, self._config.retention_bytes
        if retention_ms >= 0:
            self._delete_oldest_while(lambda seg, _: seg.largest_timestamp_ms() < now_ms - retention_ms, now_ms)
        if retention_bytes >= 0:  # as Kafka: while the rest would still hold retention.bytes
            self._delete_oldest_while(
                lambda seg, deleted: self._size_bytes - deleted - seg.size_bytes >= retention_bytes, now_ms
            )
        self._delete_below_log_start()
        new_start = max(self._log_start_offset, self._segments[0].base_offset)
        if new_start == self._log_start_offset:
            return False
        self._log_start_offset = new_start
        self._notify("log_start_offset")
        return True

    def _delete_oldest_while(self, deletable, now_ms: int) -> None:
        """Delete the oldest segments while deletable(segment, bytes deleted before it) holds; if
        that takes in the (non-empty) active segment, roll first so an empty one remains."""
        count = deleted_bytes = 0
        for seg in self._segments:
            if not seg.size_bytes or not deletable(seg, deleted_bytes):
                break
            count += 1
            deleted_bytes += seg.size_bytes
        if count == len(self._segments):
            self._roll(now_ms)
        self._delete_segments(count)

    def _delete_below_log_start(self) -> None:
        """Delete segments whose successor starts at or below the log start offset."""
        count = 0
        while count + 1 < len(self._segments) and self._bases[count + 1] <= self._log_start_offset:
            count += 1
        self._delete_segments(count)

    def _delete_segments(self, count: int) -> None:
        for seg, txn_index in zip(self._segments[:count], self._txn_indexes[:count]):
            seg.delete()
            txn_index.delete()  # as its offset and time indexes
            self.producer_snapshots.delete(seg.base_offset)  # a snapshot goes with its segment
            self._size_bytes -= seg.size_bytes
        del self._segments[:count]
        del self._txn_indexes[:count]
        del self._bases[:count]

    # -- compaction (_cleaned_segment.py has the files and the swap's recovery)
    def segment_infos(self) -> list[SegmentInfo]:
        out = []
        for seg in self._segments:
            if seg.first_batch_timestamp is None and seg.size_bytes >= HEADER_SIZE and seg is not self._segments[-1]:
                seg.first_batch_timestamp = read_header(os.pread(seg.read_fd(), HEADER_SIZE, 0), 0).max_timestamp
            first = seg.first_batch_timestamp if seg.first_batch_timestamp is not None else -1
            out.append(SegmentInfo(seg.base_offset, seg.next_offset, seg.size_bytes, seg.largest_timestamp_ms(), first))
        return out

    def open_for_cleaning(self, base_offsets: Sequence[int]) -> list[CleaningSource]:
        wanted = set(base_offsets)
        sources: list[CleaningSource] = []
        try:
            for seg in self._segments[:-1]:
                if seg.base_offset in wanted:
                    sources.append(FileCleaningSource(seg))
        except OSError:
            for source in sources:
                source.close()
            raise
        return sources

    def create_cleaned_segment(self, base_offset: int) -> CleanedSegment:
        return FileCleanedSegment(self.dir_path, base_offset, self._config.index_interval_bytes)

    def replace_segments(self, cleaned: CleanedSegment, base_offsets: Sequence[int]) -> bool:
        assert isinstance(cleaned, FileCleanedSegment) and cleaned.finished
        first = bisect_right(self._bases, cleaned.base_offset) - 1
        olds = self._segments[first:first + len(base_offsets)] if first >= 0 else []
        if (self.closed or len(olds) != len(base_offsets) or first + len(olds) >= len(self._segments)
                or [s.base_offset for s in olds] != list(base_offsets) or olds[0].base_offset != cleaned.base_offset):
            cleaned.discard()
            return False
        new = cleaned.segment
        swap_path = new.path + LOG_SUFFIX + SWAP_SUFFIX
        os.rename(cleaned.path, swap_path)  # from here on, start-up recovery completes the swap
        old_txn_indexes = self._txn_indexes[first:first + len(olds)]
        for seg, old_txn_index in zip(olds, old_txn_indexes):
            seg.delete()  # closes its descriptor; a flush ticket holds its own duplicate
            old_txn_index.delete()
        txn_index = TransactionIndex(new.path)
        if cleaned.aborted_txns:  # the cleaned segment's own .txnindex (_cleaned_segment.py)
            os.rename(cleaned.txn_index_path, txn_index.path)
            txn_index.entries = list(cleaned.aborted_txns)
        os.rename(swap_path, new.path + LOG_SUFFIX)
        new.last_append_ms = max(s.last_append_ms for s in olds)
        new.roll_base_ms = olds[0].roll_base_ms
        new.write_index_files()
        self._segments[first:first + len(olds)] = [new]
        self._txn_indexes[first:first + len(olds)] = [txn_index]
        self._bases[first:first + len(olds)] = [new.base_offset]
        self._size_bytes += new.size_bytes - sum(s.size_bytes for s in olds)
        self._dirty_segments = [s for s in self._dirty_segments if not s.deleted]
        self._dir_dirty = True  # the renames reach the disk with the next flush's directory fsync
        self._read_hint = None
        return True

    # -- aborted transactions
    def append_aborted_txn(self, txn: AbortedTxn) -> bool:
        index = max(bisect_right(self._bases, txn.last_offset) - 1, 0)
        return self._txn_indexes[index].append(txn)

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        first = max(bisect_right(self._bases, start_offset) - 1, 0)
        return collect_aborted((t.entries for t in self._txn_indexes[first:]), start_offset, end_offset)

    def begin_flush(self) -> FlushTicket | None:
        if self.closed or not (self._unflushed_records or self._dirty_segments or self._dir_dirty):
            return None
        fds: list[int] = []
        try:
            for seg in (*self._dirty_segments, self._segments[-1]):
                if not seg.deleted and seg.fd is not None:
                    fds.append(os.dup(seg.fd))
        except OSError:
            FlushTicket(0, 0, fds).discard()
            raise
        ticket = FlushTicket(self.log_end_offset, self._unflushed_records, fds,
                             self.dir_path if self._dir_dirty else None, _sync_data, _fsync_dir)
        self._dirty_segments = []
        self._dir_dirty = False
        self._unflushed_records = 0
        self._first_unflushed_ms = None
        return ticket

    def close(self) -> None:
        if self.closed:
            return
        if not self.health.online:  # nothing more is written to a failed directory
            self.release()
            return
        self.flush()
        for seg in self._segments:
            if not seg.index_on_disk and seg.size_bytes:  # an empty segment is scanned at start-up:
                seg.write_index_files()                    # nothing to scan, and no index is read for it
        self.release()

    def release(self) -> None:
        """Close the files without flushing or writing indexes (a crash, or a deleted log)."""
        for seg in self._segments:
            seg.close_fd()
        self.closed = True

    # -- reads
    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True) -> bytes:
        if offset >= self.log_end_offset:
            return b""
        index, position = self._locate(offset)
        segments = self._segments
        parts: list[bytes] = []
        remaining = max_bytes
        while index < len(segments):
            seg = segments[index]
            available = seg.size_bytes - position
            if available <= 0:
                index += 1
                position = 0
                continue
            if available <= remaining:  # the rest of this segment fits
                parts.append(os.pread(seg.read_fd(), available, position))
                remaining -= available
                self._read_hint = (seg.next_offset, seg, seg.size_bytes)
                index += 1
                position = 0
                continue
            data = os.pread(seg.read_fd(), remaining, position) if remaining > 0 else b""
            cut = self._whole_batches_bytes(seg, position, data)
            if not cut:
                if parts or not min_one_batch:
                    break
                size = _INT32.unpack(os.pread(seg.read_fd(), 12, position)[8:12])[0] + LOG_OVERHEAD
                data = os.pread(seg.read_fd(), size, position)
                cut = size
            parts.append(data if cut == len(data) else data[:cut])
            if len(data) >= cut + 8:
                self._read_hint = (_INT64.unpack_from(data, cut)[0], seg, position + cut)
            break
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read_batches(self, offset: int, max_bytes: int, stop_offset: int) -> BatchRead:
        if offset >= self.log_end_offset:
            return EMPTY_BATCH_READ
        index, position = self._locate(offset)
        segments = self._segments
        parts: list[bytes] = []
        extents: list[BatchExtent] = []
        total = 0
        while index < len(segments):
            seg = segments[index]
            data, done = _read_batches(seg, position, max_bytes - total, stop_offset, total, extents)
            if data:
                parts.append(data)
                total += len(data)
                self._read_hint = (extents[-1].last_offset + 1, seg, position + len(data))
            if done:
                break
            index += 1
            position = 0
        return BatchRead(parts[0] if len(parts) == 1 else b"".join(parts), tuple(extents))

    def _locate(self, offset: int) -> tuple[int, int]:
        """(segment index, position) of the batch holding `offset` (< log end offset)."""
        hint = self._read_hint
        if hint is not None and hint[0] == offset and not hint[1].deleted:
            return bisect_right(self._bases, hint[1].base_offset) - 1, hint[2]
        index = bisect_right(self._bases, offset) - 1
        if index < 0:  # below the log start: the caller's range check; serve from the start
            return 0, 0
        seg = self._segments[index]
        for pos, header in _walk(seg, seg.position_for(offset), _SEEK_CHUNK_BYTES):
            if header.base_offset + header.last_offset_delta >= offset:
                return index, pos
        return index, seg.size_bytes

    @staticmethod
    def _whole_batches_bytes(seg: _Segment, position: int, data: bytes) -> int:
        """Length of the whole batches at the start of `data` (read at `position`); walks from
        the last index entry inside `data` rather than from its start."""
        n = len(data)
        positions = seg.index_positions
        j = bisect_right(positions, position + n) - 1
        p = positions[j] - position if j >= 0 and positions[j] > position else 0
        unpack_int32 = _INT32.unpack_from
        while p + LOG_OVERHEAD <= n:
            size = unpack_int32(data, p + 8)[0] + LOG_OVERHEAD
            if p + size > n:
                break
            p += size
        return p

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        start = self._log_start_offset
        for seg in self._segments:
            if seg.max_timestamp < timestamp_ms or seg.next_offset <= start:
                continue
            pos = seg.position_for_timestamp(timestamp_ms)
            if start > seg.base_offset:
                pos = max(pos, seg.position_for(start))
            for p, h in _walk(seg, pos, _SEEK_CHUNK_BYTES):
                if h.max_timestamp >= timestamp_ms and h.next_offset > start:
                    found = _first_record_at_or_after(os.pread(seg.read_fd(), h.size_bytes, p), timestamp_ms, start)
                    if found is not None:
                        return found
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        best = None
        for seg in self._segments:
            if seg.max_timestamp_offset >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return None
        target = best.max_timestamp_offset
        for p, h in _walk(best, best.position_for(target), _SEEK_CHUNK_BYTES):
            if h.base_offset >= target:
                found = _first_record_at_or_after(os.pread(best.read_fd(), h.size_bytes, p), best.max_timestamp, 0)
                return found if found is not None else (h.base_offset, best.max_timestamp)
        return None

    def iter_batch_headers(self, start_offset: int = 0) -> Iterator[BatchHeader]:
        segments = list(self._segments)
        first = max(bisect_right(self._bases, start_offset) - 1, 0)
        for i in range(first, len(segments)):
            seg = segments[i]
            if seg.deleted:
                continue
            opened_here = seg.fd is None  # a sealed segment nobody reads: close it again after
            pos = seg.position_for(start_offset) if i == first else 0
            try:
                for _, header in _walk(seg, pos, _SCAN_CHUNK_BYTES):
                    if header.next_offset > start_offset:
                        yield header
            finally:  # a scan of 100k segments must not hold 100k descriptors
                if opened_here and seg is not self._segments[-1]:
                    seg.close_fd()


# ----------------------------------------------------------------------------- the store

class FileLogStore(LogStore):
    """All partition logs under one log directory (Kafka's log.dirs, a single directory)."""

    def __init__(self, log_dir: str | os.PathLike) -> None:
        self.log_dir = os.fspath(log_dir)
        self.health = LogDirHealth(self.log_dir)
        os.makedirs(self.log_dir, exist_ok=True)
        self._logs: dict[tuple[str, int], FileLog] = {}

    def _dir_for(self, topic: str, partition: int) -> str:
        return os.path.join(self.log_dir, f"{topic}-{partition}")

    def open_log(self, topic: str, partition: int, topic_id_hex: str, config: LogConfig, now_ms: int) -> FileLog:
        log = self._logs.get((topic, partition))
        if log is not None and not log.closed:
            log.update_config(config)
            return log
        path = self._dir_for(topic, partition)
        created = not os.path.isdir(path)
        os.makedirs(path, exist_ok=True)
        recorded_id = read_partition_metadata(path)
        if recorded_id is None:
            write_partition_metadata(path, topic_id_hex)
            if created:
                _fsync_dir(self.log_dir)
        elif topic_id_hex and recorded_id != topic_id_hex:
            raise InconsistentTopicIdError(
                f"log directory {path} holds topic id {recorded_id}, not {topic_id_hex}: "
                f"a topic named {topic!r} was deleted and recreated; delete the directory to start afresh"
            )
        log = FileLog(path, topic, partition, config, now_ms, self.health)
        self._logs[(topic, partition)] = log
        return log

    def delete_log(self, topic: str, partition: int) -> None:
        log = self._logs.pop((topic, partition), None)
        if log is not None:
            log.release()
        path = self._dir_for(topic, partition)
        if not os.path.isdir(path):
            return
        doomed = f"{path}.{uuid.uuid4().hex}-delete"  # rename first: a crash leaves no half log
        os.rename(path, doomed)
        _fsync_dir(self.log_dir)
        shutil.rmtree(doomed, ignore_errors=True)

    def existing_logs(self) -> list[tuple[str, int, str | None]]:
        found = []
        for name in sorted(os.listdir(self.log_dir)):
            path = os.path.join(self.log_dir, name)
            if not os.path.isdir(path):
                continue
            if _DELETED_DIR_NAME.match(name):
                shutil.rmtree(path, ignore_errors=True)
                continue
            match = _DIR_NAME.match(name)
            if match:
                found.append((match["topic"], int(match["partition"]), read_partition_metadata(path)))
        return found

    # The log cleaner's checkpoint, in Kafka's format (OffsetCheckpointFile: a version line "0", a
    # count line, then "<topic> <partition> <offset>" lines), at the top of the log directory.
    def read_cleaner_checkpoints(self) -> dict[tuple[str, int], int]:
        path = os.path.join(self.log_dir, CLEANER_CHECKPOINT_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return {}
        out: dict[tuple[str, int], int] = {}
        try:
            if lines[0].strip() != "0":
                raise ValueError(f"unknown version {lines[0]!r}")
            for line in lines[2:2 + int(lines[1])]:
                topic, partition, offset = line.split()
                out[(topic, int(partition))] = int(offset)
        except (IndexError, ValueError) as exc:  # cleaning restarts from each log's start: only work is lost
            _log.warning("%s is unreadable (%s); compacted logs are cleaned again from their start", path, exc)
            return {}
        return out

    def write_cleaner_checkpoints(self, offsets: dict[tuple[str, int], int]) -> None:
        lines = ["0", str(len(offsets))] + [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
        _write_file(os.path.join(self.log_dir, CLEANER_CHECKPOINT_FILE), ("\n".join(lines) + "\n").encode(),
                    durable=True)

    def close(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()


# Every call that touches the disk: its OSError takes the log directory offline (Kafka's
# LogDirFailureChannel.maybeAddOfflineLogDir), and once offline it is refused before any I/O.
guard_storage_calls(FileLog, ("append", "append_aborted_txn", "delete_records_before", "enforce_retention",
                              "begin_flush", "read", "read_batches", "offset_for_timestamp", "max_timestamp_offset",
                              "segment_infos", "open_for_cleaning", "replace_segments"))
guard_storage_calls(FileLogStore, ("open_log", "delete_log", "existing_logs"))
