"""Log compaction's decisions: which log to clean, which offsets, which records survive.

Pure, as Kafka's cleaner would be with its I/O taken out: the shell (server/log_cleaner.py) reads
segments, asks these functions, and writes through the storage layer. Facts from Kafka's
`org.apache.kafka.storage.internals.log` package:

- `cleanable_offsets` — LogCleanerManager.cleanableOffsets: the *first dirty offset* is the
  cleaner checkpoint (`cleaner-offset-checkpoint`), reset to the log start offset when it lies
  outside [log start, log end]; the *first uncleanable offset* is the active segment's base
  offset, or earlier: the base of the first dirty segment holding a record newer than
  `min.compaction.lag.ms`, or earlier still: the last stable offset (the first offset of the
  earliest open transaction), so nothing an open transaction wrote, nor anything after it, is
  mapped or rewritten.
- `max_compaction_delay_ms` — LogCleanerManager.maxCompactionDelay: how far past
  `max.compaction.lag.ms` the oldest dirty segment's first batch is; > 0 forces cleaning.
- `LogToClean` — its dirty ratio: cleanable bytes / (clean + cleanable bytes).
- `grab_filthiest` — LogCleanerManager.grabFilthiestCompactedLog: among compacted logs with bytes,
  those over `min.cleanable.dirty.ratio` or due by max lag (with cleanable bytes), the highest
  ratio.
- `group_segments_by_size` — Cleaner.groupSegmentsBySize: consecutive segments merged into one
  cleaned segment while their sizes add up to at most segment.bytes and their offsets to at most
  2^31 - 1 past the group's base.
- `OffsetMap` — OffsetMap/SkimpyOffsetMap: key -> latest offset over the dirty range, bounded by
  `log.cleaner.dedupe.buffer.size` at 24 bytes a slot (a 16-byte MD5 and an 8-byte offset) times
  `log.cleaner.io.buffer.load.factor`; when full, the round ends at the last offset put and the
  rest waits for the next round. quafka keeps the key bytes themselves rather than their digest
  (no collisions), and counts slots as Kafka does.
- `batch_retention`, `retain_record` — Cleaner.cleanInto's filter (its checkBatchRetention) and
  Cleaner.shouldRetainRecord: a record survives when it is the latest of its key (or past the
  map's last offset), and a tombstone only until its batch's delete horizon; keyless records are
  dropped. A batch whose records all go is still written as an empty header when it holds the
  last data of a producer that still has state (`lastRecordsOfActiveProducers`, so its sequence
  and epoch survive; for a producer with no data batch left, its marker of the current epoch),
  or ends the cleaned range.
- `CleanedTransactionMetadata` — Kafka's class of that name, fed every batch in log order:
  the records of an aborted transaction (known from the aborted-transaction index, not from the
  marker) are discarded, from the offset map and from the cleaned segment; a COMMIT marker may go
  once no batch of its transaction was met in the round, an ABORT marker once no batch of its
  transaction was met (until then its index entry is carried into the cleaned segment's
  `.txnindex`: `cleaned_index`); a marker that may go is first given a delete horizon like a
  tombstone (`delete.retention.ms`), and goes at the first cleaning past it (Kafka's
  `containsMarkerForEmptyTxn` / `isControlBatchEmpty`); an empty control batch was cleaned
  already and goes. Committed transactional batches are cleaned like any other. One instance
  serves a whole round, every group in log order (Cleaner.doClean passes one to each
  cleanSegments), so a marker is never removed while its transaction has a batch in an earlier
  group, and the log never holds a transaction's batch without its marker.

Departures, each for a reason:
- Batches at or past the first uncleanable offset in a segment that is cleaned (the segment
  holding the last stable offset) are copied whole, byte for byte: Kafka filters them too (it
  keeps their records, as they are past the offset map, but may set a delete horizon or drop an
  aborted transaction's records there); quafka rewrites nothing at or above the LSO.
- The last batch of *every* cleaned segment is kept (empty if need be), not only the last of the
  round: a cleaned segment then always ends where the segments it replaces ended, which is what
  start-up recovery of an interrupted swap relies on (file_log.py) and keeps segment boundaries
  exact.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Iterable, NamedTuple, Sequence

from quafka.protocol.control_batches import ControlType

__all__ = [
    "BatchRetention",
    "CleanedTransactionMetadata",
    "CompactionConfig",
    "LastRecord",
    "LogToClean",
    "OffsetMap",
    "SegmentSummary",
    "batch_retention",
    "cleanable_offsets",
    "group_segments_by_size",
    "grab_filthiest",
    "max_compaction_delay_ms",
    "offset_map_slots",
    "retain_record",
]

MAX_LONG = 2**63 - 1
MAX_RELATIVE_OFFSET = 2**31 - 1
OFFSET_MAP_SLOT_BYTES = 24  # SkimpyOffsetMap: MD5 (16) + offset (8)


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    """A log's compaction settings (topic configs over broker defaults)."""

    compact: bool = False  # "compact" in cleanup.policy
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = MAX_LONG
    min_cleanable_ratio: float = 0.5
    segment_bytes: int = 1 << 30


class SegmentSummary(NamedTuple):
    """What the cleaner needs of one segment (the last one of a log is its active segment)."""

    base_offset: int
    size_bytes: int
    largest_timestamp_ms: int  # its largest record timestamp (or last modification without any)
    first_batch_timestamp_ms: int  # the first batch's max timestamp; -1 if empty or none


class LogToClean(NamedTuple):
    """A compacted log's dirtiness at one moment (Kafka's LogToClean)."""

    key: tuple[str, int]  # (topic, partition)
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool
    min_cleanable_ratio: float

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        total = self.total_bytes
        return self.cleanable_bytes / total if total else 0.0


def _sizes_between(segments: Sequence[SegmentSummary], start: int, end: int) -> int:
    """Bytes of the segments that hold offsets in [start, end) (Kafka's logSegments(from, to))."""
    total = 0
    for i, seg in enumerate(segments):
        seg_end = segments[i + 1].base_offset if i + 1 < len(segments) else MAX_LONG
        if seg.base_offset < end and seg_end > start:
            total += seg.size_bytes
    return total


def cleanable_offsets(segments: Sequence[SegmentSummary], log_start_offset: int, log_end_offset: int,
                      checkpoint: int | None, config: CompactionConfig, now_ms: int,
                      last_stable_offset: int | None = None) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, whether the checkpoint had to be reset).
    `last_stable_offset`: the partition's LSO (None: no open transaction, the log end)."""
    if checkpoint is None or checkpoint < log_start_offset or checkpoint > log_end_offset:
        first_dirty, reset = log_start_offset, checkpoint is not None
    else:
        first_dirty, reset = checkpoint, False
    active_base = segments[-1].base_offset
    first_uncleanable = active_base
    if last_stable_offset is not None:  # LogCleanerManager.cleanableOffsets: never past the LSO
        first_uncleanable = min(first_uncleanable, last_stable_offset)
    lag = max(config.min_compaction_lag_ms, 0)
    if lag > 0:
        for i, seg in enumerate(segments[:-1]):
            if segments[i + 1].base_offset <= first_dirty:
                continue  # wholly clean
            if seg.largest_timestamp_ms > now_ms - lag:
                first_uncleanable = seg.base_offset
                break
    return first_dirty, max(first_dirty, first_uncleanable), reset


def max_compaction_delay_ms(segments: Sequence[SegmentSummary], first_dirty_offset: int,
                            config: CompactionConfig, now_ms: int) -> int:
    """How long ago the oldest dirty non-active segment's first batch passed max.compaction.lag.ms
    (<= 0: not yet)."""
    if config.max_compaction_lag_ms >= MAX_LONG:
        return 0
    earliest = MAX_LONG
    for i, seg in enumerate(segments[:-1]):
        if segments[i + 1].base_offset <= first_dirty_offset:
            continue
        if seg.first_batch_timestamp_ms > 0:
            earliest = min(earliest, seg.first_batch_timestamp_ms)
    if earliest == MAX_LONG:
        return 0
    return now_ms - earliest - config.max_compaction_lag_ms


def log_to_clean(key: tuple[str, int], segments: Sequence[SegmentSummary], log_start_offset: int,
                 log_end_offset: int, checkpoint: int | None, config: CompactionConfig, now_ms: int,
                 last_stable_offset: int | None = None) -> tuple[LogToClean, bool]:
    """The log's LogToClean, and whether its checkpoint must be rewritten (it was out of range)."""
    first_dirty, first_uncleanable, reset = cleanable_offsets(
        segments, log_start_offset, log_end_offset, checkpoint, config, now_ms, last_stable_offset)
    clean_bytes = _sizes_between(segments, -1, first_dirty)
    cleanable_bytes = _sizes_between(segments, first_dirty, first_uncleanable) if first_uncleanable > first_dirty else 0
    delay = max_compaction_delay_ms(segments, first_dirty, config, now_ms)
    return LogToClean(key, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, delay > 0,
                      config.min_cleanable_ratio), reset


def grab_filthiest(candidates: Iterable[LogToClean]) -> LogToClean | None:
    """The log to clean next, or None."""
    best = None
    for ltc in candidates:
        if ltc.total_bytes <= 0:
            continue
        due = (ltc.need_compaction_now and ltc.cleanable_bytes > 0) or ltc.cleanable_ratio > ltc.min_cleanable_ratio
        if due and (best is None or ltc.cleanable_ratio > best.cleanable_ratio):
            best = ltc
    return best


def group_segments_by_size(segments: Sequence[SegmentSummary], max_size: int, first_uncleanable_offset: int
                           ) -> list[list[SegmentSummary]]:
    """Consecutive runs of `segments` (all to be cleaned, oldest first), each to become one
    cleaned segment."""
    groups: list[list[SegmentSummary]] = []
    i = 0
    n = len(segments)
    while i < n:
        group = [segments[i]]
        size = segments[i].size_bytes
        i += 1
        while i < n and size + segments[i].size_bytes <= max_size:
            last_offset = segments[i + 1].base_offset - 1 if i + 1 < n else first_uncleanable_offset - 1
            if segments[i].size_bytes and last_offset - group[0].base_offset > MAX_RELATIVE_OFFSET:
                break
            group.append(segments[i])
            size += segments[i].size_bytes
            i += 1
        groups.append(group)
    return groups


def offset_map_slots(dedupe_buffer_bytes: int, load_factor: float) -> int:
    """How many keys one cleaning round may map (the dedupe buffer at 24 bytes a slot, filled to
    the load factor)."""
    return max(1, int(dedupe_buffer_bytes // OFFSET_MAP_SLOT_BYTES * load_factor))


class OffsetMap:
    """Key -> the latest offset of that key in the range mapped so far."""

    __slots__ = ("capacity", "_map", "latest_offset")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1  # the last offset put (Kafka's OffsetMap.latestOffset)

    def __len__(self) -> int:
        return len(self._map)

    @property
    def full(self) -> bool:
        return len(self._map) >= self.capacity

    def can_put(self, key: bytes) -> bool:
        """False when `key` is new and the map is full: the round must stop before its batch."""
        return key in self._map or len(self._map) < self.capacity

    def put(self, key: bytes, offset: int) -> None:
        self._map[key] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        return self._map.get(key, -1)

    def utilization(self) -> float:
        return len(self._map) / self.capacity


class BatchRetention(enum.Enum):
    """What happens to a batch once its records are filtered (Kafka's BatchRetention)."""

    KEEP_WHOLE = "keep whole"  # not filtered at all: at or past the first uncleanable offset (the LSO)
    RETAIN_EMPTY = "retain empty"  # written even if no record survives (as an empty header)
    DELETE_EMPTY = "delete empty"  # written only if a record survives
    DELETE = "delete"  # dropped whole (its records may all go: an aborted transaction, an expired marker)


class LastRecord(NamedTuple):
    """A producer that still has state, as the cleaner sees it (Kafka's LastRecord)."""

    last_data_offset: int | None  # the last offset of its last data batch; None: none is left
    producer_epoch: int


def batch_retention(*, producer_id: int, producer_epoch: int, last_offset: int, next_offset: int, control: bool,
                    discard_records: bool, last_records: dict[int, LastRecord], segment_end_offset: int
                    ) -> BatchRetention:
    """How a batch below the first uncleanable offset is kept (checkBatchRetention).
    `discard_records`: its records all go (an aborted transaction's batch, or a marker past its
    delete horizon that nothing needs); `last_records`: producer id -> what its state still needs;
    `segment_end_offset`: the offset just past the group of segments being cleaned."""
    if producer_id >= 0:
        last = last_records.get(producer_id)
        if last is not None:
            if last.last_data_offset is not None:
                if last_offset == last.last_data_offset:
                    return BatchRetention.RETAIN_EMPTY  # its sequence numbers
            elif control and producer_epoch == last.producer_epoch:
                return BatchRetention.RETAIN_EMPTY  # its epoch
    if next_offset >= segment_end_offset:
        return BatchRetention.RETAIN_EMPTY  # the end of the cleaned range (see the docstring)
    return BatchRetention.DELETE if discard_records else BatchRetention.DELETE_EMPTY


class CleanedTransactionMetadata:
    """What the cleaner knows of transactions while it walks a log in offset order (Kafka's
    CleanedTransactionMetadata). `aborted`: the aborted-transaction entries (producer_id,
    first_offset, last_offset, ...) of the range walked, from the segments' indexes."""

    __slots__ = ("_aborted", "_next", "_ongoing_committed", "_ongoing_aborted", "cleaned_index")

    def __init__(self, aborted: Iterable[Any]) -> None:
        unique = {(t.producer_id, t.first_offset): t for t in aborted}
        self._aborted = sorted(unique.values(), key=lambda t: (t.first_offset, t.producer_id))
        self._next = 0
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, list] = {}  # producer id -> [entry, last offset of a batch met or -1]
        self.cleaned_index: list[Any] = []  # entries of ABORT markers kept (for the cleaned .txnindex)

    def _consume_aborted_up_to(self, offset: int) -> None:
        aborted = self._aborted
        while self._next < len(aborted) and aborted[self._next].first_offset <= offset:
            txn = aborted[self._next]
            self._next += 1
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, -1])

    def on_batch_read(self, producer_id: int, last_offset: int, transactional: bool) -> bool:
        """A data batch met: True if it belongs to an aborted transaction (its records go)."""
        self._consume_aborted_up_to(last_offset)
        if not transactional:
            return False
        ongoing = self._ongoing_aborted.get(producer_id)
        if ongoing is not None:
            ongoing[1] = last_offset
            return True
        self._ongoing_committed.add(producer_id)
        return False

    def on_control_batch_read(self, producer_id: int, last_offset: int, control_type: ControlType | None) -> bool:
        """A control batch met (`control_type` None: it has no record left): True if nothing in
        the log needs it any more (it may go once past its delete horizon)."""
        self._consume_aborted_up_to(last_offset)
        if control_type is None:
            return True  # emptied by an earlier cleaning
        if control_type == ControlType.ABORT:
            ongoing = self._ongoing_aborted.pop(producer_id, None)
            if ongoing is not None and ongoing[1] >= 0:
                self.cleaned_index.append(ongoing[0])  # kept with the marker until the batches are gone
                return False
            return True
        if control_type == ControlType.COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False

    def take_cleaned_index(self) -> list[Any]:
        """The entries kept since the last call (one cleaned segment's)."""
        out, self.cleaned_index = self.cleaned_index, []
        return out


def retain_record(offset_map: OffsetMap, offset: int, key: bytes | None, has_value: bool,
                  delete_horizon_ms: int | None, now_ms: int) -> bool:
    """Whether a record of a filtered batch survives (Cleaner.shouldRetainRecord for v2 batches).
    A tombstone in a batch with no delete horizon yet survives: the rewrite sets the horizon."""
    if offset > offset_map.latest_offset:
        return True  # beyond what this round mapped: a later round decides
    if key is None:
        return False
    if offset < offset_map.get(key):
        return False
    return has_value or delete_horizon_ms is None or now_ms < delete_horizon_ms
