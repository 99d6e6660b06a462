"""Partition logs kept in memory, for tests and the simulator.

Same semantics as `FileLog`, checked by the same contract tests: batches are kept as bytes in
simulated segments that roll by segment.bytes / segment.ms, so retention deletes whole segments and
moves the log start offset exactly as on disk. Reads continue across segments like FileLog's.
Nothing is durable; flush() only resets the flush accounting (maybe_flush still reports when
flush.ms has elapsed). A `MemoryLogStore` keeps closed logs, so reopening one simulates a restart.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from typing import Iterator, Sequence

from quafka.protocol.record_batch import LOG_OVERHEAD, BatchHeader, iter_records, read_header, stamp_base_offset

from .base import (
    EMPTY_BATCH_READ,
    AbortedTxn,
    AppendInfo,
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
)
from .txn_index import collect_aborted

NO_TIMESTAMP = -1
_MAX_TIMESTAMP_POS = 35  # maxTimestamp within a batch header
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_LAST_OFFSET_DELTA_POS = 23


def _last_offset_delta(batch: bytes) -> int:
    return _INT32.unpack_from(batch, _LAST_OFFSET_DELTA_POS)[0]


class _MemorySegment:
    __slots__ = (
        "base_offset", "batch_offsets", "batches", "size_bytes", "next_offset", "max_timestamp",
        "max_timestamp_offset", "roll_base_ms", "last_append_ms", "aborted",
    )

    def __init__(self, base_offset: int, now_ms: int) -> None:
        self.base_offset = base_offset
        self.batch_offsets: list[int] = []  # base offset of each batch
        self.batches: list[bytes] = []
        self.size_bytes = 0
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.max_timestamp_offset = -1  # base offset of the first batch holding max_timestamp
        self.roll_base_ms: int | None = None
        self.last_append_ms = now_ms
        self.aborted: list[AbortedTxn] = []  # the segment's aborted-transaction index

    def largest_timestamp_ms(self) -> int:
        return self.max_timestamp if self.max_timestamp >= 0 else self.last_append_ms


def _first_record_at_or_after(batch: bytes, timestamp_ms: int, min_offset: int) -> tuple[int, int] | None:
    for record in iter_records(batch):
        if record.timestamp >= timestamp_ms and record.offset >= min_offset:
            return record.offset, record.timestamp
    return None


def _batch_read(parts: list[bytes], extents: list[BatchExtent]) -> BatchRead:
    return BatchRead(parts[0] if len(parts) == 1 else b"".join(parts), tuple(extents))


class _MemoryCleaningSource(CleaningSource):
    def __init__(self, seg: _MemorySegment) -> None:
        self.base_offset = seg.base_offset
        self.size_bytes = seg.size_bytes
        self._batches = list(seg.batches)

    def iter_batches(self, chunk_bytes: int) -> Iterator[tuple[BatchHeader, bytes]]:
        for batch in self._batches:
            yield read_header(batch), batch

    def close(self) -> None:
        self._batches = []


class _MemoryCleanedSegment(CleanedSegment):
    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.segment = _MemorySegment(base_offset, 0)
        self.size_bytes = 0

    def append(self, header: BatchHeader, batch: bytes) -> None:
        seg = self.segment
        if header.max_timestamp > seg.max_timestamp:
            seg.max_timestamp = header.max_timestamp
            seg.max_timestamp_offset = header.base_offset
        seg.batch_offsets.append(header.base_offset)
        seg.batches.append(batch)
        seg.size_bytes += len(batch)
        seg.next_offset = header.next_offset
        self.size_bytes = seg.size_bytes

    def finish(self, next_offset: int, aborted_txns=()) -> None:
        self.segment.next_offset = max(self.segment.next_offset, next_offset)
        self.segment.aborted = list(aborted_txns)  # the cleaned segment's aborted-transaction index

    def discard(self) -> None:
        self.segment = _MemorySegment(self.base_offset, 0)


class MemoryLog(Log):
    """A partition log in memory (see the module docstring)."""

    def __init__(self, topic: str, partition: int, config: LogConfig, now_ms: int = 0) -> None:
        super().__init__()
        self.topic = topic
        self.partition = partition
        self._config = config
        self._segments = [_MemorySegment(0, now_ms)]
        self._bases = [0]
        self._size_bytes = 0
        self._log_start_offset = 0
        self.closed = False

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
        """Base offsets of the simulated segments, oldest first."""
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
            seg.size_bytes + total_bytes > config.segment_bytes or now_ms - seg.roll_base_ms >= config.segment_ms
        ):
            seg = self._roll(now_ms)
        view = memoryview(buf)
        offset = first_offset
        for pos, header in batches:
            stamp_base_offset(buf, pos, offset)
            size = header.batch_length + LOG_OVERHEAD
            max_timestamp = _INT64.unpack_from(buf, pos + _MAX_TIMESTAMP_POS)[0]
            if max_timestamp > seg.max_timestamp:
                seg.max_timestamp = max_timestamp
                seg.max_timestamp_offset = offset
            seg.batch_offsets.append(offset)
            seg.batches.append(bytes(view[pos : pos + size]))
            offset += header.last_offset_delta + 1
        seg.size_bytes += total_bytes
        seg.next_offset = offset
        self._size_bytes += total_bytes
        if seg.roll_base_ms is None:
            seg.roll_base_ms = now_ms
        seg.last_append_ms = now_ms
        self._count_unflushed(offset - first_offset, now_ms)
        if self._unflushed_records >= config.flush_messages and not defer_flush:
            self.flush()
        self._notify("append")
        return AppendInfo(first_offset, offset - 1, self._log_start_offset)

    def _roll(self, now_ms: int) -> _MemorySegment:
        seg = _MemorySegment(self._segments[-1].next_offset, now_ms)
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        return seg

    def delete_records_before(self, offset: int) -> int:
        new_start = min(max(offset, self._log_start_offset), self.log_end_offset)
        if new_start == self._log_start_offset:
            return new_start
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
        """As FileLog's: delete the oldest while deletable(segment, bytes deleted before it)."""
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
        count = 0
        while count + 1 < len(self._segments) and self._bases[count + 1] <= self._log_start_offset:
            count += 1
        self._delete_segments(count)

    def _delete_segments(self, count: int) -> None:
        for seg in self._segments[:count]:
            self._size_bytes -= seg.size_bytes
        del self._segments[:count]
        del self._bases[:count]

    # -- compaction: the same steps as FileLog's, in memory (nothing to crash)
    def segment_infos(self) -> list[SegmentInfo]:
        return [SegmentInfo(seg.base_offset, seg.next_offset, seg.size_bytes, seg.largest_timestamp_ms(),
                            read_header(seg.batches[0]).max_timestamp if seg.batches else -1)
                for seg in self._segments]

    def open_for_cleaning(self, base_offsets: Sequence[int]) -> list[CleaningSource]:
        wanted = set(base_offsets)
        return [_MemoryCleaningSource(seg) for seg in self._segments[:-1] if seg.base_offset in wanted]

    def create_cleaned_segment(self, base_offset: int) -> CleanedSegment:
        return _MemoryCleanedSegment(base_offset)

    def replace_segments(self, cleaned: CleanedSegment, base_offsets: Sequence[int]) -> bool:
        assert isinstance(cleaned, _MemoryCleanedSegment)
        first = bisect_right(self._bases, cleaned.base_offset) - 1
        olds = self._segments[first:first + len(base_offsets)] if first >= 0 else []
        if (self.closed or len(olds) != len(base_offsets) or first + len(olds) >= len(self._segments)
                or [s.base_offset for s in olds] != list(base_offsets)):
            return False
        new = cleaned.segment
        new.last_append_ms = max(s.last_append_ms for s in olds)
        new.roll_base_ms = olds[0].roll_base_ms
        self._segments[first:first + len(olds)] = [new]
        self._bases[first:first + len(olds)] = [new.base_offset]
        self._size_bytes += new.size_bytes - sum(s.size_bytes for s in olds)
        return True

    # -- aborted transactions (the segments' indexes, in memory)
    def append_aborted_txn(self, txn: AbortedTxn) -> bool:
        seg = self._segments[max(bisect_right(self._bases, txn.last_offset) - 1, 0)]
        if seg.aborted and txn.last_offset <= seg.aborted[-1].last_offset:
            return False
        seg.aborted.append(txn)
        return True

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        first = max(bisect_right(self._bases, start_offset) - 1, 0)
        return collect_aborted((seg.aborted for seg in self._segments[first:]), start_offset, end_offset)

    def begin_flush(self) -> FlushTicket | None:
        """Nothing to sync: the ticket only moves `flushed_offset` (run it inline)."""
        if self.closed or not self._unflushed_records:
            return None
        ticket = FlushTicket(self.log_end_offset, self._unflushed_records)
        self._unflushed_records = 0
        self._first_unflushed_ms = None
        return ticket

    def close(self) -> None:
        self.flush()
        self.closed = True

    # -- reads
    def _locate(self, offset: int) -> tuple[int, int]:
        """(segment index, batch index) of the batch holding `offset`, or of the first batch after
        it when compaction removed it."""
        index = max(bisect_right(self._bases, offset) - 1, 0)
        seg = self._segments[index]
        i = max(bisect_right(seg.batch_offsets, offset) - 1, 0)
        if i < len(seg.batches) and seg.batch_offsets[i] + _last_offset_delta(seg.batches[i]) < offset:
            i += 1
            if i == len(seg.batches) and index + 1 < len(self._segments):
                return index + 1, 0
        return index, i

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True) -> bytes:
        if offset >= self.log_end_offset:
            return b""
        index, batch_index = self._locate(offset)
        parts: list[bytes] = []
        total_bytes = 0
        for seg in self._segments[index:]:
            for batch in seg.batches[batch_index:]:
                if total_bytes + len(batch) > max_bytes and (parts or not min_one_batch):
                    return b"".join(parts)
                parts.append(batch)
                total_bytes += len(batch)
            batch_index = 0
        return b"".join(parts)

    def read_batches(self, offset: int, max_bytes: int, stop_offset: int) -> BatchRead:
        if offset >= self.log_end_offset:
            return EMPTY_BATCH_READ
        index, batch_index = self._locate(offset)
        segments = self._segments
        parts: list[bytes] = []
        extents: list[BatchExtent] = []
        total = 0
        while index < len(segments):  # indexes, not slices: no work for the batches not taken
            seg = segments[index]
            offsets, batches = seg.batch_offsets, seg.batches
            for i in range(batch_index, len(batches)):
                batch = batches[i]
                if parts and total + len(batch) > max_bytes:
                    return _batch_read(parts, extents)
                total += len(batch)
                last_offset = offsets[i] + _last_offset_delta(batch)
                parts.append(batch)
                extents.append(BatchExtent(offsets[i], last_offset, total))
                if last_offset >= stop_offset:
                    return _batch_read(parts, extents)
            index += 1
            batch_index = 0
        return _batch_read(parts, extents)

    def _iter_batches(self, start_offset: int) -> Iterator[bytes]:
        index, batch_index = self._locate(start_offset)
        for seg in self._segments[index:]:
            yield from seg.batches[batch_index:]
            batch_index = 0

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        start = self._log_start_offset
        for seg in self._segments:
            if seg.max_timestamp < timestamp_ms or seg.next_offset <= start:
                continue
            for batch in seg.batches[max(bisect_right(seg.batch_offsets, start) - 1, 0) :]:
                header = read_header(batch)
                if header.max_timestamp >= timestamp_ms and header.next_offset > start:
                    found = _first_record_at_or_after(batch, timestamp_ms, start)
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
        batch = best.batches[bisect_left(best.batch_offsets, best.max_timestamp_offset)]
        found = _first_record_at_or_after(batch, best.max_timestamp, 0)
        return found if found is not None else (best.max_timestamp_offset, best.max_timestamp)

    def iter_batch_headers(self, start_offset: int = 0) -> Iterator[BatchHeader]:
        for batch in self._iter_batches(start_offset):
            header = read_header(batch)
            if header.next_offset > start_offset:
                yield header


class MemoryLogStore(LogStore):
    """Logs in memory; closed logs are kept, so reopening one is like restarting a broker."""

    def __init__(self) -> None:
        self._logs: dict[tuple[str, int], tuple[MemoryLog, str]] = {}
        self.health = LogDirHealth("memory")

    def open_log(self, topic: str, partition: int, topic_id_hex: str, config: LogConfig, now_ms: int) -> MemoryLog:
        entry = self._logs.get((topic, partition))
        if entry is None:
            log = MemoryLog(topic, partition, config, now_ms)
            log.health = self.health
            self._logs[(topic, partition)] = (log, topic_id_hex)
            return log
        log, recorded_id = entry
        if topic_id_hex and recorded_id and recorded_id != topic_id_hex:
            raise ValueError(f"log of {topic}-{partition} holds topic id {recorded_id}, not {topic_id_hex}")
        log.update_config(config)
        log.closed = False
        return log

    def delete_log(self, topic: str, partition: int) -> None:
        entry = self._logs.pop((topic, partition), None)
        if entry is not None:
            entry[0].close()

    def existing_logs(self) -> list[tuple[str, int, str | None]]:
        return sorted((topic, partition, topic_id) for (topic, partition), (_, topic_id) in self._logs.items())

    def close(self) -> None:
        for log, _ in self._logs.values():
            log.close()
