"""Segment files of a FileLog: one `.log` file with its sparse offset and time indexes.

See file_log.py for the layout, the index trailer and recovery. This module holds the per-segment
mechanics (index arrays, index files, scanning, reading headers in big chunks) and the small file
helpers the log and the store share.
"""

from __future__ import annotations

import os
import re
import struct
import sys
import zlib
from array import array
from bisect import bisect_left, bisect_right
from typing import Iterator

from quafka.protocol.record_batch import (
    CONTROL_FLAG,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    batch_crc_ok,
    iter_records,
    read_header,
)

from .base import BatchExtent

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
METADATA_FILE = "partition.metadata"
LOG_START_FILE = "log-start-offset"
NO_TIMESTAMP = -1

_INDEX_ENTRY = struct.Struct(">II")
_TIME_INDEX_ENTRY = struct.Struct(">qI")
_TRAILER = struct.Struct(">4sIQqqq")
_TRAILER_MAGIC = b"QIX1"
_CRC = struct.Struct(">I")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_MAX_TIMESTAMP_POS = 35  # maxTimestamp within a batch header
_MAX_RELATIVE_OFFSET = 0x7FFFFFFF  # index entries hold offsets relative to the base (Kafka: Int)
_MAX_SEGMENT_BYTES = 0x7FFFFFFF  # positions are u32; Kafka caps segment.bytes at Int.MaxValue
_SCAN_CHUNK_BYTES = 1 << 20  # reads when scanning whole segments
_SEEK_CHUNK_BYTES = 8 << 10  # reads when walking from an index entry (every index.interval.bytes, 4 KiB by default) to a batch
_FIRST_CHUNK_BYTES = 4 << 10  # read_batches: first read at a batch, then doubling ...
_MAX_CHUNK_BYTES = 1 << 20  # ... up to this

_DIR_NAME = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_DELETED_DIR_NAME = re.compile(r"^.+-\d+\.[0-9a-f]+-delete$")


class InconsistentTopicIdError(ValueError):
    """The directory of a topic partition belongs to another topic of the same name."""


# ----------------------------------------------------------------------------- file helpers

def _sync_data(fd: int) -> None:
    """fdatasync (data and file size, not timestamps) where available, else fsync."""
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:
        os.fsync(fd)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write_file(path: str, data: bytes, durable: bool = False) -> None:
    """Write `path`; `durable`: atomically and durably (temporary file, fsync, rename, fsync dir)."""
    target = path + ".tmp" if durable else path
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    if durable:
        os.replace(target, path)
        _fsync_dir(os.path.dirname(path) or ".")


def _read_file(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks) if len(chunks) != 1 else chunks[0]
            chunks.append(chunk)
    finally:
        os.close(fd)


def _unlink(*paths: str) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def read_partition_metadata(dir_path: str) -> str | None:
    """The topic id recorded in `partition.metadata`, or None."""
    try:
        with open(os.path.join(dir_path, METADATA_FILE), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    topic_id = fields.get("topic_id", "").strip()
    return topic_id or None


def write_partition_metadata(dir_path: str, topic_id: str) -> None:
    _write_file(os.path.join(dir_path, METADATA_FILE), f"version: 0\ntopic_id: {topic_id}\n".encode(), durable=True)


# ----------------------------------------------------------------------------- segments

class _Segment:
    """One ``.log`` file with its in-memory sparse indexes and summary."""

    __slots__ = (
        "base_offset", "path", "fd", "size_bytes", "next_offset", "index_relative_offsets",
        "index_positions", "index_max_timestamps", "bytes_since_index", "max_timestamp",
        "max_timestamp_offset", "roll_base_ms", "last_append_ms", "index_on_disk", "deleted", "scanned_control",
        "first_batch_timestamp",
    )

    def __init__(self, dir_path: str, base_offset: int) -> None:
        self.base_offset = base_offset
        self.path = os.path.join(dir_path, f"{base_offset:020d}")  # + suffix
        self.fd: int | None = None
        self.size_bytes = 0
        self.next_offset = base_offset
        self.reset_index()
        self.roll_base_ms: int | None = None  # segment.ms counts from here
        self.last_append_ms = 0  # retention.ms fallback for batches without timestamps
        self.index_on_disk = False
        self.deleted = False
        self.first_batch_timestamp: int | None = None  # read once, for max.compaction.lag.ms
        self.scanned_control = False  # the last scan() met a control batch (a transaction marker)

    def reset_index(self) -> None:
        self.index_relative_offsets = array("q")
        self.index_positions = array("q")
        self.index_max_timestamps = array("q")  # largest timestamp up to and including the batch
        self.bytes_since_index = 0
        self.max_timestamp = NO_TIMESTAMP
        self.max_timestamp_offset = -1  # base offset of the first batch holding max_timestamp

    def open_for_append(self, truncate: bool = False) -> int:
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | (os.O_TRUNC if truncate else 0)
        self.fd = os.open(self.path + LOG_SUFFIX, flags, 0o644)
        return self.fd

    def read_fd(self) -> int:
        if self.fd is None:
            self.fd = os.open(self.path + LOG_SUFFIX, os.O_RDONLY)
        return self.fd

    def close_fd(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def delete(self) -> None:
        self.close_fd()
        self.deleted = True
        _unlink(self.path + LOG_SUFFIX, self.path + INDEX_SUFFIX, self.path + TIME_INDEX_SUFFIX)

    def track(self, position: int, base_offset: int, size_bytes: int, max_timestamp: int, interval_bytes: int) -> None:
        """Account for a batch written at `position` (O(1): summary and maybe one index entry)."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.max_timestamp_offset = base_offset
        if self.bytes_since_index >= interval_bytes:
            self.index_relative_offsets.append(base_offset - self.base_offset)
            self.index_positions.append(position)
            self.index_max_timestamps.append(self.max_timestamp)
            self.bytes_since_index = 0
        self.bytes_since_index += size_bytes

    def position_for(self, offset: int) -> int:
        """Position of an indexed batch at or before the one holding `offset` (0 if none)."""
        i = bisect_right(self.index_relative_offsets, offset - self.base_offset) - 1
        return self.index_positions[i] if i >= 0 else 0

    def position_for_timestamp(self, timestamp_ms: int) -> int:
        """Position from which the first batch with max timestamp >= timestamp_ms is found:
        every batch up to the last entry whose timestamp so far is below the target is older."""
        i = bisect_left(self.index_max_timestamps, timestamp_ms) - 1
        return self.index_positions[i] if i >= 0 else 0

    def largest_timestamp_ms(self) -> int:
        return self.max_timestamp if self.max_timestamp >= 0 else self.last_append_ms

    # -- index files
    def write_index_files(self) -> None:
        index = b"".join(map(_INDEX_ENTRY.pack, self.index_relative_offsets, self.index_positions))
        time_index = b"".join(map(_TIME_INDEX_ENTRY.pack, self.index_max_timestamps, self.index_relative_offsets))
        trailer = _TRAILER.pack(
            _TRAILER_MAGIC, len(self.index_positions), self.size_bytes, self.next_offset,
            self.max_timestamp, self.max_timestamp_offset,
        )
        crc = zlib.crc32(trailer, zlib.crc32(time_index, zlib.crc32(index)))
        _write_file(self.path + TIME_INDEX_SUFFIX, time_index)
        _write_file(self.path + INDEX_SUFFIX, index + trailer + _CRC.pack(crc))
        self.index_on_disk = True

    def load_index_files(self, log_size_bytes: int) -> bool:
        """Load the indexes if present and consistent with a ``.log`` of `log_size_bytes`."""
        try:  # os-level reads: start-up opens these for every segment (100k segments: 200k files)
            index = _read_file(self.path + INDEX_SUFFIX)
            time_index = _read_file(self.path + TIME_INDEX_SUFFIX)
        except OSError:
            return False
        tail_bytes = _TRAILER.size + _CRC.size
        if len(index) < tail_bytes:
            return False
        entries_bytes = len(index) - tail_bytes
        trailer = index[entries_bytes:-_CRC.size]
        magic, count, covered_bytes, next_offset, max_timestamp, max_timestamp_offset = _TRAILER.unpack(trailer)
        if (
            magic != _TRAILER_MAGIC or covered_bytes != log_size_bytes or entries_bytes != count * 8
            or len(time_index) != count * 12 or next_offset < self.base_offset
        ):
            return False
        crc = zlib.crc32(trailer, zlib.crc32(time_index, zlib.crc32(index[:entries_bytes])))
        if _CRC.unpack_from(index, len(index) - _CRC.size)[0] != crc:
            return False
        pairs = array("I")
        pairs.frombytes(index[:entries_bytes])
        if sys.byteorder == "little":
            pairs.byteswap()
        self.index_relative_offsets = array("q", pairs[0::2])
        self.index_positions = array("q", pairs[1::2])
        self.index_max_timestamps = array("q", struct.unpack(">" + "qI" * count, time_index)[0::2] if count else ())
        self.size_bytes = covered_bytes
        self.next_offset = next_offset
        self.max_timestamp = max_timestamp
        self.max_timestamp_offset = max_timestamp_offset
        self.index_on_disk = True
        return True

    def remove_index_files(self) -> None:
        _unlink(self.path + INDEX_SUFFIX, self.path + TIME_INDEX_SUFFIX)
        self.index_on_disk = False

    def scan(self, interval_bytes: int, verify_crc: bool) -> tuple[int, int | None]:
        """Rebuild the indexes from the file's batch headers, stopping at the first incomplete,
        malformed or out-of-sequence batch (and, with `verify_crc`, corrupt one). Returns
        (bytes of whole valid batches, max timestamp of the first batch or None)."""
        self.reset_index()
        fd = self.read_fd()
        file_size = os.fstat(fd).st_size
        pos = 0
        expected_offset = self.base_offset
        first_timestamp = None
        control = 0
        want = _SCAN_CHUNK_BYTES
        while pos < file_size:
            data = os.pread(fd, min(want, file_size - pos), pos)
            n = len(data)
            p = 0
            want = _SCAN_CHUNK_BYTES
            stop = False
            while n - p >= HEADER_SIZE:
                h = read_header(data, p)
                size = h.batch_length + LOG_OVERHEAD
                # offsets only grow: a compacted segment has gaps between batches (file_log.py)
                if h.batch_length < MIN_BATCH_LENGTH or h.magic != 2 or h.base_offset < expected_offset:
                    stop = True
                    break
                if p + size > n:
                    if pos + p + size > file_size:
                        stop = True  # torn tail
                    else:
                        want = max(want, size)
                    break
                if verify_crc and not batch_crc_ok(data, p, h):
                    stop = True
                    break
                if first_timestamp is None:
                    first_timestamp = h.max_timestamp
                self.track(pos + p, h.base_offset, size, h.max_timestamp, interval_bytes)
                control |= h.attributes & CONTROL_FLAG
                expected_offset = h.next_offset
                p += size
            if not stop and p == 0 and n < HEADER_SIZE:
                stop = True  # fewer bytes than a header at the end of the file
            pos += p
            if stop:
                break
        self.size_bytes = pos
        self.next_offset = expected_offset
        self.scanned_control = bool(control)
        return pos, first_timestamp


def _walk(seg: _Segment, pos: int, chunk_bytes: int) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch of `seg` from `pos` (a batch start), in big reads."""
    fd = seg.read_fd()
    end = seg.size_bytes
    while end - pos >= HEADER_SIZE:
        data = os.pread(fd, min(chunk_bytes, end - pos), pos)
        n = len(data)
        p = 0
        while n - p >= HEADER_SIZE:
            h = read_header(data, p)
            yield pos + p, h
            size = h.batch_length + LOG_OVERHEAD
            if size < HEADER_SIZE:
                return
            p += size
        if p == 0:
            return
        pos += p


def _read_batches(seg: _Segment, position: int, budget: int, stop_offset: int, out_pos: int,
                  extents: list[BatchExtent]) -> tuple[bytes, bool]:
    """Whole batches of `seg` from `position` (a batch start) for FileLog.read_batches: up to and
    including the one holding `stop_offset`, within `budget` bytes, except that the first batch
    is taken whole when nothing precedes it in the result (`out_pos`, its length so far, is 0).

    Reads a small chunk, then chunks doubling in size (bounded by the budget and the segment),
    each starting where the previous one ended (or at a header it cut), and parses only the
    headers of the batches taken and of the one after them. Appends one extent per batch (ends
    counted from `out_pos`) to `extents`. Returns (the batches' bytes, done): done is False only
    when the segment ended with the read still wanting more.
    """
    fd = seg.read_fd()
    limit = seg.size_bytes - position  # relative positions from here on
    starts: list[int] = []
    chunks: list[bytes] = []
    chunk = b""
    start = read_end = p = 0  # the last chunk's start and end; the next batch's start
    want = _FIRST_CHUNK_BYTES
    done = False
    while limit - p >= HEADER_SIZE:
        if p + HEADER_SIZE > budget and (p or out_pos):
            done = True  # not even the next header fits
            break
        if p + HEADER_SIZE > read_end:
            start = min(p, read_end)  # the body of the last batch taken, or a header cut in two
            need = p + HEADER_SIZE - start
            chunk = os.pread(fd, max(need, min(want, budget - start, limit - start)), position + start)
            if len(chunk) < need:
                done = True  # the file is shorter than the segment's size says
                break
            starts.append(start)
            chunks.append(chunk)
            read_end = start + len(chunk)
            want = min(2 * want, _MAX_CHUNK_BYTES)
        h = read_header(chunk, p - start)
        size = h.batch_length + LOG_OVERHEAD
        if size < HEADER_SIZE or p + size > limit or (p + size > budget and (p or out_pos)):
            done = True  # corrupt length, or over budget
            break
        p += size
        last_offset = h.base_offset + h.last_offset_delta
        extents.append(BatchExtent(h.base_offset, last_offset, out_pos + p))
        if last_offset >= stop_offset:
            done = True
            break
    done = done or p != limit
    if p > read_end:  # the last batch taken ends beyond what was read
        if len(chunks) == 1:
            return os.pread(fd, p, position), done  # one exact read rather than read and join
        starts.append(read_end)
        chunks.append(os.pread(fd, p - read_end, position + read_end))
    if len(chunks) == 1:
        return (chunk if len(chunk) == p else chunk[:p]), done
    if not p:
        return b"", done
    starts.append(p)
    return b"".join([memoryview(c)[: starts[i + 1] - starts[i]] for i, c in enumerate(chunks)]), done


def _first_record_at_or_after(batch: bytes, timestamp_ms: int, min_offset: int) -> tuple[int, int] | None:
    for record in iter_records(batch):
        if record.timestamp >= timestamp_ms and record.offset >= min_offset:
            return record.offset, record.timestamp
    return None
