"""The storage interface: a partition's log of opaque v2 record batches.

Two engines implement it: `FileLog` (segment files, durable) and `MemoryLog` (tests, simulator).
One contract test suite (tests/broker/storage/test_log_contract.py) runs against both.

Vocabulary:
- log start offset: the first offset still readable (moves by retention and DeleteRecords);
- log end offset: the offset the next appended record gets (also the high watermark on one node).

All offsets are ints; time comes in as `now_ms` from the caller.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple, Sequence

from quafka.protocol.record_batch import BatchHeader

MAX_LONG = 2**63 - 1


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Per-partition storage settings (topic configs with broker defaults already resolved)."""

    segment_bytes: int = 1073741824  # segment.bytes
    segment_ms: int = 604800000  # segment.ms (roll a non-empty segment older than this)
    retention_ms: int = 604800000  # retention.ms; -1 = unlimited
    retention_bytes: int = -1  # retention.bytes; -1 = unlimited
    flush_messages: int = MAX_LONG  # flush.messages: fsync after this many unflushed records
    flush_ms: int = MAX_LONG  # flush.ms: fsync when the oldest unflushed append is this old
    index_interval_bytes: int = 4096  # index.interval.bytes: sparse index density


class AppendInfo(NamedTuple):
    first_offset: int  # base offset of the first appended batch
    last_offset: int  # last offset of the last appended batch
    log_start_offset: int


class LogEvent(NamedTuple):
    """Delivered to listeners after the change is visible in the log."""

    kind: str  # "append" or "log_start_offset"
    log: "Log"


Listener = Callable[[LogEvent], None]


class BatchExtent(NamedTuple):
    """One batch of a `BatchRead`: its offsets and where it ends in the read's data."""

    base_offset: int
    last_offset: int
    end: int  # position in the returned bytes just past this batch (the next one starts here)


class BatchRead(NamedTuple):
    """The result of `Log.read_batches`."""

    data: bytes  # whole batches, back to back
    extents: tuple[BatchExtent, ...]  # one per batch in data, in order


EMPTY_BATCH_READ = BatchRead(b"", ())


class Log(abc.ABC):
    """One topic partition's log. Single-threaded: called from the broker's event loop only."""

    topic: str
    partition: int

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    # -- state
    @property
    @abc.abstractmethod
    def log_start_offset(self) -> int: ...

    @property
    @abc.abstractmethod
    def log_end_offset(self) -> int: ...

    @property
    @abc.abstractmethod
    def size_bytes(self) -> int:
        """Bytes held by the log (all segments)."""

    @property
    @abc.abstractmethod
    def config(self) -> LogConfig: ...

    @abc.abstractmethod
    def update_config(self, config: LogConfig) -> None:
        """Apply new settings (an altered topic or broker config) from now on."""

    # -- writes
    @abc.abstractmethod
    def append(self, buf: bytearray, batches: Sequence[tuple[int, BatchHeader]], now_ms: int, *,
               defer_flush: bool = False) -> AppendInfo:
        """Append validated batches that lie back to back in `buf`.

        `batches` lists (position in buf, header) for each batch, in order and covering all of
        buf. The log stamps consecutive base offsets into `buf` (bytes 0-7 of each batch, outside
        the CRC) starting at `log_end_offset`, rolls a segment first when size or time requires,
        and writes the bytes. On return the bytes are in the segment file (they survive SIGKILL of
        the process); an fsync has happened too if `flush_messages` was reached (unless `defer_flush`: the
        caller fsyncs itself, as the share coordinator's group commit does). Listeners get an
        "append" event before this returns.
        """

    @abc.abstractmethod
    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset up to `offset` (never down, never past the end), durably;
        delete segments wholly below it. Returns the new log start offset."""

    @abc.abstractmethod
    def enforce_retention(self, now_ms: int) -> bool:
        """Delete whole old segments by retention.ms (segment max timestamp older than now - ms)
        and retention.bytes (while the log minus its oldest segment is still over the limit).
        The active segment is never deleted by retention unless it is rolled first (as Kafka,
        a non-empty active segment whose data expired is rolled, then deleted). Returns True if
        the log start offset moved."""

    @abc.abstractmethod
    def maybe_flush(self, now_ms: int) -> bool:
        """fsync if flush_ms has elapsed since the oldest unflushed append. True if it did."""

    @abc.abstractmethod
    def flush(self) -> None:
        """fsync everything written so far."""

    @abc.abstractmethod
    def close(self) -> None:
        """Flush and release files; write what makes the next start fast (indexes)."""

    # -- reads
    @abc.abstractmethod
    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True) -> bytes:
        """Whole batches starting with the batch that contains `offset`, at most `max_bytes`
        in total, except that with `min_one_batch` the first batch is returned even if it is
        larger than `max_bytes`. Empty if offset >= log end offset. The caller checks the range
        (offset < log start offset is the caller's OFFSET_OUT_OF_RANGE)."""

    @abc.abstractmethod
    def read_batches(self, offset: int, max_bytes: int, stop_offset: int) -> BatchRead:
        """Whole batches starting with the batch that contains `offset`, stopping after the batch
        that contains `stop_offset` (the first batch whose last offset is >= stop_offset) or at
        the log end, and before `max_bytes` would be exceeded, except that the first batch is
        always returned whole even when it is larger than max_bytes. Empty (b"", ()) if offset >=
        log end offset. Crosses segment boundaries. Work (bytes read, headers parsed) is
        proportional to the batches returned plus locating the first batch (at most one index
        interval of header walking, as `read` does), never to the data beyond stop_offset. The
        caller checks the range, as for `read`. For ShareFetch: sized to what will be sent."""

    @abc.abstractmethod
    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp >= timestamp_ms, or None."""

    @abc.abstractmethod
    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (first such), or None."""

    @abc.abstractmethod
    def iter_batch_headers(self, start_offset: int = 0) -> Iterator[BatchHeader]:
        """Headers of every batch from the one containing `start_offset` to the end (no CRC
        check; for rebuilding producer state on start-up)."""

    # -- notifications
    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        try:
            self._listeners.remove(listener)
        except ValueError:
            pass

    def _notify(self, kind: str) -> None:
        event = LogEvent(kind, self)
        for listener in list(self._listeners):
            listener(event)


class LogStore(abc.ABC):
    """All partition logs of a broker."""

    @abc.abstractmethod
    def open_log(self, topic: str, partition: int, topic_id_hex: str, config: LogConfig, now_ms: int) -> Log:
        """Open (recovering a torn tail) or create the log of topic-partition."""

    @abc.abstractmethod
    def delete_log(self, topic: str, partition: int) -> None:
        """Close and remove the log's data."""

    @abc.abstractmethod
    def existing_logs(self) -> list[tuple[str, int, str | None]]:
        """(topic, partition, topic_id_hex or None) of every log found in storage."""

    @abc.abstractmethod
    def close(self) -> None: ...
