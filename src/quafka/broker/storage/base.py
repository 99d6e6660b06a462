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
import errno
import functools
import os
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


class AbortedTxn(NamedTuple):
    """One aborted transaction of a partition (Kafka's AbortedTxn, an entry of a segment's
    `.txnindex`): the producer, the transaction's first offset here, the ABORT marker's offset
    and the partition's last stable offset once that marker was written."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


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


class SegmentInfo(NamedTuple):
    """One segment as log compaction sees it (the last segment of a log is the active one)."""

    base_offset: int
    next_offset: int  # just past its last batch (for a segment before another: that one's base at most)
    size_bytes: int
    largest_timestamp_ms: int  # largest record timestamp, or the last append time without any
    first_batch_timestamp_ms: int  # max timestamp of its first batch; -1 if empty


class CleaningSource(abc.ABC):
    """A sealed segment opened for the log cleaner: read on the cleaner's thread while the log
    goes on serving on the event loop (a sealed segment's bytes never change)."""

    base_offset: int
    size_bytes: int

    @abc.abstractmethod
    def iter_batches(self, chunk_bytes: int) -> Iterator[tuple[BatchHeader, bytes]]:
        """Each whole batch (header, bytes), in order."""

    @abc.abstractmethod
    def close(self) -> None: ...


class CleanedSegment(abc.ABC):
    """A segment the log cleaner writes on its thread; `Log.replace_segments` swaps it in."""

    base_offset: int
    size_bytes: int

    @abc.abstractmethod
    def append(self, header: BatchHeader, batch: bytes) -> None:
        """Append one batch (offsets increasing)."""

    @abc.abstractmethod
    def finish(self, next_offset: int, aborted_txns: Sequence["AbortedTxn"] = ()) -> None:
        """Make it durable; `next_offset` is where the segments it replaces ended; `aborted_txns`:
        its aborted-transaction index (the entries of the markers it keeps that still matter:
        Kafka's Cleaner.cleanSegments writes the cleaned segment's txnIndex likewise)."""

    @abc.abstractmethod
    def discard(self) -> None:
        """Remove what was written (an aborted cleaning)."""


class Log(abc.ABC):
    """One topic partition's log. Single-threaded: called from the broker's event loop only."""

    topic: str
    partition: int
    # Producer-state snapshots (producer_snapshot.ProducerSnapshots, in the FileLog's directory);
    # a memory log has none, so taking and loading snapshots is a no-op for it.
    producer_snapshots = None
    # Called with the new active segment's base offset when a segment is rolled (the broker takes
    # a producer snapshot there, as Kafka's UnifiedLog.roll does); its OSError is the roll's.
    roll_listener: Callable[[int], None] | None = None

    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._unflushed_records = 0  # appended since the last begin_flush
        self._first_unflushed_ms: int | None = None
        self.flushed_offset = 0  # everything below is fsynced (Kafka's recovery point)
        self.flush_count = 0  # flushes completed (introspection: tests count group commits)
        self.health = LogDirHealth("memory")  # the store gives its logs the directory's

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

    # -- compaction (the log cleaner: server/log_cleaner.py)
    @abc.abstractmethod
    def segment_infos(self) -> list[SegmentInfo]:
        """Every segment, oldest first; the last is the active segment."""

    @abc.abstractmethod
    def open_for_cleaning(self, base_offsets: Sequence[int]) -> list[CleaningSource]:
        """Readers of the named sealed (non-active) segments, usable from another thread."""

    @abc.abstractmethod
    def create_cleaned_segment(self, base_offset: int) -> CleanedSegment:
        """A new segment to write the cleaned copy of segments starting at `base_offset` into
        (on another thread: it is nobody else's until `replace_segments`)."""

    @abc.abstractmethod
    def replace_segments(self, cleaned: CleanedSegment, base_offsets: Sequence[int]) -> bool:
        """Swap the finished `cleaned` segment in for the sealed segments at `base_offsets` (all
        still present, consecutive, the first at cleaned.base_offset, none the active one), as
        one step for readers and crash-safely on disk: after a crash at any point the log holds
        either the old segments or the cleaned one, never a mix. False (and `cleaned` discarded)
        if the segments changed meanwhile (retention, DeleteRecords, a deleted topic)."""

    # -- flushing: begin on the log's thread, sync anywhere, complete on the log's thread
    def _count_unflushed(self, records: int, now_ms: int) -> None:
        """Called by append(): `records` more records are written but not yet fsynced."""
        if not self._unflushed_records:
            self._first_unflushed_ms = now_ms
        self._unflushed_records += records

    @property
    def unflushed_records(self) -> int:
        return self._unflushed_records

    def flush_due(self, now_ms: int) -> bool:
        """flush.messages unflushed records have accumulated, or flush.ms has elapsed since the
        oldest unflushed append (Kafka's UnifiedLog.flush triggers, log.flush.interval.*)."""
        if not self._unflushed_records:
            return False
        config = self.config
        return (self._unflushed_records >= config.flush_messages
                or now_ms - self._first_unflushed_ms >= config.flush_ms)  # type: ignore[operator]

    def maybe_flush(self, now_ms: int) -> bool:
        """fsync now, on this thread, if `flush_due`. True if it did (tools and tests; the broker
        flushes through `begin_flush` so that no fsync runs on its event loop)."""
        if not self.flush_due(now_ms):
            return False
        self.flush()
        return True

    @abc.abstractmethod
    def begin_flush(self) -> "FlushTicket | None":
        """Take what must be synced for everything appended so far (None if nothing is) and
        count it as flushed from now on; appends after this start a new count. Called on the
        thread that appends. The ticket's `run()` does the blocking syncs on any thread, then
        `complete_flush(ticket)` on the appending thread publishes the result. If `run()`
        raises, the records it covered may not be durable: the caller must treat the log as
        failed (Kafka takes its log directory offline), never retry as if nothing happened."""

    def complete_flush(self, ticket: "FlushTicket") -> None:
        """Everything below `ticket.end_offset` is durable."""
        if ticket.end_offset > self.flushed_offset:
            self.flushed_offset = ticket.end_offset
        self.flush_count += 1

    def flush(self) -> None:
        """fsync everything written so far, on this thread."""
        ticket = self.begin_flush()
        if ticket is None:
            return
        ticket.run()
        self.complete_flush(ticket)

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

    # -- aborted transactions (Kafka's TransactionIndex, one per segment)
    # FileLog sets this on open to the base offset of the first segment whose aborted-transaction
    # index was reset (its segment was recovered): the broker replays the log from a producer
    # snapshot at or below it, appending the entries again (append_aborted_txn ignores those it has).
    txn_index_rebuild_from: int | None = None

    @abc.abstractmethod
    def append_aborted_txn(self, txn: AbortedTxn) -> bool:
        """Record that an ABORT marker at `txn.last_offset` (already appended) aborted `txn`, in
        the segment holding the marker. An entry whose marker is not after that segment's last
        one is ignored (a replay); returns True if it was added."""

    @abc.abstractmethod
    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """The aborted transactions that overlap [start_offset, end_offset): last offset (the
        marker) >= start and first offset < end, sorted by first offset then producer id (Kafka's
        UnifiedLog.collectAbortedTransactions, which walks the segments from the one holding the
        start and stops after an entry whose last stable offset reaches the end)."""

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


class LogDirOfflineError(OSError):
    """A storage call on a log directory that failed before: Kafka's KafkaStorageException
    (KAFKA_STORAGE_ERROR) for a partition whose log directory is offline."""


class LogDirHealth:
    """Whether a log directory still serves — Kafka's LogDirFailureChannel for one directory.

    The first OSError of any storage call on the directory (ENOSPC, EIO on a write, a read or an
    fsync, a read-only or vanished directory) takes it offline for good: later calls raise
    LogDirOfflineError before touching the disk, and listeners hear of it once, on the thread
    that saw it (the broker's event loop). Nothing is retried: after a failed fsync the kernel
    may have dropped the dirty pages, so a later fsync's success would prove nothing."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.failure: OSError | None = None
        self.where = ""
        self.listeners: list[Callable[["LogDirHealth"], None]] = []

    @property
    def online(self) -> bool:
        return self.failure is None

    def fail(self, exc: OSError, where: str) -> None:
        if self.failure is not None:
            return
        self.failure, self.where = exc, where
        for listener in list(self.listeners):
            listener(self)

    def offline_error(self) -> LogDirOfflineError:
        return LogDirOfflineError(errno.EIO, f"log directory {self.path} is offline since {self.where} failed: "
                                             f"{self.failure}")


def guard_storage_calls(cls: type, names: Sequence[str]) -> None:
    """Wrap the named methods of a Log or LogStore class: refused at once while `self.health`
    is offline; an OSError they raise takes it offline (and propagates)."""
    for name in names:
        method = getattr(cls, name)

        @functools.wraps(method)
        def guarded(self, *args, __method=method, __name=name, **kwargs):
            health = self.health
            if health.failure is not None:
                raise health.offline_error()
            try:
                return __method(self, *args, **kwargs)
            except LogDirOfflineError:
                raise
            except OSError as exc:
                health.fail(exc, f"{__name} on {getattr(self, 'topic', '?')}-{getattr(self, 'partition', '?')}"
                            if isinstance(self, Log) else __name)
                raise

        setattr(cls, name, guarded)


class FlushTicket:
    """One flush's work, taken by `Log.begin_flush` on the appending thread: duplicated file
    descriptors to fdatasync and a directory to fsync, so `run()` may happen on a worker thread
    while appends go on (a segment closed or deleted meanwhile still gets its sync through its
    duplicate). `blocking` is False when there is nothing to sync (memory logs): run it inline."""

    __slots__ = ("end_offset", "records", "_fds", "_dir_path", "_sync_data", "_sync_dir")

    def __init__(self, end_offset: int, records: int, fds: Sequence[int] = (), dir_path: str | None = None,
                 sync_data: Callable[[int], None] | None = None, sync_dir: Callable[[str], None] | None = None,
                 ) -> None:
        self.end_offset = end_offset
        self.records = records
        self._fds = list(fds)
        self._dir_path = dir_path
        self._sync_data = sync_data
        self._sync_dir = sync_dir

    @property
    def blocking(self) -> bool:
        return bool(self._fds) or self._dir_path is not None

    def run(self) -> None:
        """fdatasync every descriptor, then fsync the directory; the duplicates are closed
        whatever happens. Raises the first OSError."""
        fds, self._fds = self._fds, []
        try:
            for fd in fds:
                self._sync_data(fd)  # type: ignore[misc]
            if self._dir_path is not None:
                self._sync_dir(self._dir_path)  # type: ignore[misc]
        finally:
            for fd in fds:
                _close_quietly(fd)

    def discard(self) -> None:
        """Close the duplicates without syncing (the log is being abandoned)."""
        fds, self._fds = self._fds, []
        for fd in fds:
            _close_quietly(fd)


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


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

    # The log cleaner's checkpoint: per partition, the offset below which the log is clean (Kafka's
    # cleaner-offset-checkpoint). Kept in memory here; FileLogStore keeps it in a file.
    _cleaner_checkpoints: dict[tuple[str, int], int] | None = None

    def read_cleaner_checkpoints(self) -> dict[tuple[str, int], int]:
        return dict(self._cleaner_checkpoints or {})

    def write_cleaner_checkpoints(self, offsets: dict[tuple[str, int], int]) -> None:
        """Replace the checkpoint with `offsets` (durably where the store is durable; any thread)."""
        self._cleaner_checkpoints = dict(offsets)

    @abc.abstractmethod
    def close(self) -> None: ...
