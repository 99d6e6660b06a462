"""Log compaction's decisions: which log to clean, which offsets, which records survive.

Pure, as Kafka's cleaner would be with its I/O taken out: the shell (server/log_cleaner.py) reads
segments, asks these functions, and writes through the storage layer. Facts from Kafka's
`org.apache.kafka.storage.internals.log` package:

- `cleanable_offsets` — LogCleanerManager.cleanableOffsets: the *first dirty offset* is the
  cleaner checkpoint (`cleaner-offset-checkpoint`), reset to the log start offset when it lies
  outside [log start, log end]; the *first uncleanable offset* is the active segment's base
  offset, or earlier: the base of the first dirty segment holding a record newer than
  `min.compaction.lag.ms`. (The last stable offset would bound it too; quafka has no
  transactions, so it is the log end.)
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
- `batch_retention`, `retain_record` — Cleaner.cleanInto's filter and Cleaner.shouldRetainRecord:
  a record survives when it is the latest of its key (or past the map's last offset), and a
  tombstone only until its batch's delete horizon; keyless records are dropped. A batch whose
  records all go is still written as an empty header when it holds the last data of a producer
  that still has state (`lastRecordsOfActiveProducers`, so its sequence and epoch survive), or
  ends the cleaned range.

Departures, each for a reason:
- quafka refuses transactional and control batches at produce (it has no transactions), so such
  a batch can only come from a log written elsewhere: it is kept whole, untouched.
- The last batch of *every* cleaned segment is kept (empty if need be), not only the last of the
  round: a cleaned segment then always ends where the segments it replaces ended, which is what
  start-up recovery of an interrupted swap relies on (file_log.py) and keeps segment boundaries
  exact.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable, NamedTuple, Sequence

__all__ = [
    "BatchRetention",
    "CompactionConfig",
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
                      checkpoint: int | None, config: CompactionConfig, now_ms: int) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, whether the checkpoint had to be reset)."""
    if checkpoint is None or checkpoint < log_start_offset or checkpoint > log_end_offset:
        first_dirty, reset = log_start_offset, checkpoint is not None
    else:
        first_dirty, reset = checkpoint, False
    active_base = segments[-1].base_offset
    first_uncleanable = active_base
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
                 log_end_offset: int, checkpoint: int | None, config: CompactionConfig, now_ms: int
                 ) -> tuple[LogToClean, bool]:
    """The log's LogToClean, and whether its checkpoint must be rewritten (it was out of range)."""
    first_dirty, first_uncleanable, reset = cleanable_offsets(
        segments, log_start_offset, log_end_offset, checkpoint, config, now_ms)
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

    KEEP_WHOLE = "keep whole"  # not filtered at all (transactional or control: see the docstring)
    RETAIN_EMPTY = "retain empty"  # written even if no record survives (as an empty header)
    DELETE_EMPTY = "delete empty"  # written only if a record survives


def batch_retention(*, producer_id: int, last_offset: int, next_offset: int, transactional: bool, control: bool,
                    last_data_offsets: dict[int, int], segment_end_offset: int) -> BatchRetention:
    """How a batch is kept. `last_data_offsets`: producer id -> the last offset of its last data
    batch, for producers that still have state; `segment_end_offset`: the offset just past the
    segment being cleaned."""
    if transactional or control:
        return BatchRetention.KEEP_WHOLE
    if producer_id >= 0 and last_data_offsets.get(producer_id) == last_offset:
        return BatchRetention.RETAIN_EMPTY
    if next_offset >= segment_end_offset:
        return BatchRetention.RETAIN_EMPTY
    return BatchRetention.DELETE_EMPTY


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
