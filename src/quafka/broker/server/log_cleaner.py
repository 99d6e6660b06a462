"""The log cleaner: compacts the logs of topics with `cleanup.policy` compact, off the event loop.

Kafka's LogCleaner with one CleanerThread (`log.cleaner.threads` must be 1). Each round:

1. on the event loop: every compacted partition's segments are summarised and the core picks the
   filthiest log (broker/core/log_cleaner.py: LogCleanerManager.grabFilthiestCompactedLog), with
   its first dirty offset (the `cleaner-offset-checkpoint`) and first uncleanable offset (the
   active segment, `min.compaction.lag.ms`, the last stable offset); the sealed segments below
   that offset are opened for reading, and the producers' last data offsets and epochs and the
   aborted transactions of the sealed segments (their `.txnindex`) are noted;
2. on the cleaner's own thread (`log-cleaner`): the key -> latest offset map of the dirty range
   is built (Cleaner.buildOffsetMap, bounded by `log.cleaner.dedupe.buffer.size`; the records of
   aborted transactions are left out), the segments up
   to the map's end are grouped by size (Cleaner.groupSegmentsBySize) and each group is copied
   into one new segment, record by record as the core decides (Cleaner.cleanInto, with one
   CleanedTransactionMetadata for the round: aborted transactions' records go, markers go once
   nothing needs them and their delete horizon passed), with the aborted-transaction entries still
   needed as its `.txnindex` (Cleaner.cleanSegments), through the
   throttle (`log.cleaner.io.max.bytes.per.second`, Kafka's Throttler over bytes read and
   written), and fsynced;
3. back on the event loop: the log is fsynced up to the end of the mapped range (through the
   flusher, off the loop), so that every record that supersedes another is durable before the
   removal of what it supersedes is; then per group `Log.replace_segments` swaps the new segment
   in (renames only: see storage/_cleaned_segment.py for the crash-safe protocol); then the
   checkpoint moves to the end of the mapped range, written on the cleaner's thread. (Kafka
   flushes a segment when it rolls it, UnifiedLog.roll, and cleans only below the last stable
   offset, which the replicated high watermark bounds, LogCleanerManager.cleanableOffsets; a
   single broker's durability is its fsync, so the cleaner asks for it. Without it a power loss
   after a swap could leave a key with neither its old value nor the new one.)

Requests never wait for the cleaner: the event loop does only step 1 and the renames of step 3.
A round that finds the log changed under it (retention, DeleteRecords, a deleted topic) discards
its copy. A batch that does not decode makes its partition *uncleanable* until the broker
restarts (Kafka's uncleanable partitions), logged with the offsets; a storage error takes the log
directory offline like any other. `log.cleaner.backoff.ms` is the sleep when nothing is due.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from quafka.broker import config as cfg
from quafka.broker.core.log_cleaner import (
    BatchRetention,
    CleanedTransactionMetadata,
    CompactionConfig,
    LastRecord,
    LogToClean,
    OffsetMap,
    SegmentSummary,
    batch_retention,
    grab_filthiest,
    group_segments_by_size,
    log_to_clean,
    offset_map_slots,
    retain_record,
)
from quafka.broker.storage import Log
from quafka.protocol.control_batches import InvalidControlBatch, control_type_of_key
from quafka.protocol.record_filter import delete_horizon_ms, empty_batch, parse_records, rebuild_batch

from .clock import wall_clock_ms

if TYPE_CHECKING:
    from ._services import BrokerServices
    from .state import PartitionState

log = logging.getLogger("quafka.log_cleaner")

__all__ = ["CleaningAborted", "LogCleanerService"]

_MAX_LONG = 2**63 - 1


class CleaningAborted(Exception):
    """The round stopped: the broker is stopping, or the log changed or went away."""


class _Throttler:
    """At most `rate` bytes per second on average (Kafka's Throttler: sleep off any excess)."""

    def __init__(self, rate: float, abort: threading.Event) -> None:
        self.rate = rate
        self._abort = abort
        self._start = time.monotonic()
        self._bytes = 0

    def maybe_throttle(self, n: int) -> None:
        if self.rate >= 1e300 or n <= 0:
            return
        self._bytes += n
        elapsed = time.monotonic() - self._start
        wanted = self._bytes / self.rate
        if wanted > elapsed:
            self._abort.wait(wanted - elapsed)  # woken at once by a stopping broker


@dataclass
class CleanerStats:
    """One round (Kafka's CleanerStats), logged when it ends."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    map_records: int = 0
    groups: int = 0
    swapped: list[int] = field(default_factory=list)


@dataclass
class _Plan:
    part: "PartitionState"
    ltc: LogToClean
    config: CompactionConfig
    summaries: list[SegmentSummary]  # every segment of the log (the last is the active one)
    last_records: dict[int, LastRecord]
    aborted: list  # the aborted-transaction entries of the sealed segments (storage's AbortedTxn)
    now_ms: int
    slots: int
    chunk_bytes: int
    rate: float


class LogCleanerService:
    def __init__(self, server: "BrokerServices") -> None:
        self.server = server
        self.state = server.state
        self._executor: ThreadPoolExecutor | None = None
        self._abort = threading.Event()
        self._wake = asyncio.Event()
        self._round_lock = asyncio.Lock()
        self._task: asyncio.Task | None = None
        self.checkpoints: dict[tuple[str, int], int] = self.state.log_store.read_cleaner_checkpoints()
        self.uncleanable: set[tuple[str, int]] = set()
        self.in_progress: tuple[str, int] | None = None
        # introspection and metrics (kafka.log:type=LogCleaner)
        self.rounds = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.last_round_ms = 0.0
        self.errors = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if not self.state.config.get("log.cleaner.enable"):
            log.warning("log.cleaner.enable=false: topics with cleanup.policy=compact (and __consumer_offsets) are "
                        "not compacted")
            return
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="log-cleaner")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="log-cleaner")

    def wake(self) -> None:
        """Look for work now instead of after log.cleaner.backoff.ms (tests, a topic made compact)."""
        self._wake.set()

    async def close(self) -> None:
        """Stop: a round in progress stops at its next batch and discards its copy."""
        self._abort.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._executor is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)

    async def _run(self) -> None:
        while not self._abort.is_set():
            cleaned = False
            try:
                cleaned = await self.clean_filthiest()
            except asyncio.CancelledError:
                raise
            except OSError:
                pass  # the log directory is offline (on_log_dir_failure logged it)
            except Exception:  # noqa: BLE001 - the cleaner goes on with other logs
                self.errors += 1
                log.exception("log cleaner round failed")
            if not cleaned:
                backoff_s = int(self.state.config.get("log.cleaner.backoff.ms")) / 1000.0
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=backoff_s)
                except asyncio.TimeoutError:
                    pass
                self._wake.clear()

    # ------------------------------------------------------------------ one round
    def _choose(self, now_ms: int) -> _Plan | None:
        """Step 1 (on the loop): the filthiest compacted log, or None."""
        config = self.state.config
        candidates: dict[tuple[str, int], tuple] = {}
        ltcs: list[LogToClean] = []
        for topic in list(self.state.topics.values()):
            try:
                compaction = cfg.compaction_config(config, topic.configs)
            except cfg.ConfigError:
                continue
            if not compaction.compact:
                continue
            for part in topic.partitions:
                key = (topic.name, part.index)
                plog = part.log
                if key in self.uncleanable or not plog.health.online or getattr(plog, "closed", False):
                    continue
                infos = plog.segment_infos()
                summaries = [SegmentSummary(i.base_offset, i.size_bytes, i.largest_timestamp_ms,
                                            i.first_batch_timestamp_ms) for i in infos]
                ltc, reset = log_to_clean(key, summaries, plog.log_start_offset, plog.log_end_offset,
                                          self.checkpoints.get(key), compaction, now_ms, part.last_stable_offset)
                if reset:
                    log.info("%s-%d: cleaner checkpoint %s is outside the log [%d, %d]; cleaning from %d", *key,
                             self.checkpoints.get(key), plog.log_start_offset, plog.log_end_offset,
                             ltc.first_dirty_offset)
                    self.checkpoints[key] = ltc.first_dirty_offset
                candidates[key] = (part, compaction, summaries)
                ltcs.append(ltc)
        best = grab_filthiest(ltcs)
        if best is None:
            return None
        part, compaction, summaries = candidates[best.key]
        # Cleaner.doClean: lastRecordsOfActiveProducers, and the aborted transactions of what is cleaned
        last_records = {pid: LastRecord(entry.batches[-1].last_offset if entry.batches else None, entry.epoch)
                        for pid, entry in part.producers.entries.items()}
        plog = part.log
        aborted = part.aborted_transactions(plog.log_start_offset, summaries[-1].base_offset)
        slots = offset_map_slots(int(config.get("log.cleaner.dedupe.buffer.size")),
                                 float(config.get("log.cleaner.io.buffer.load.factor")))
        return _Plan(part, best, compaction, summaries, last_records, aborted, now_ms, slots,
                     max(int(config.get("log.cleaner.io.buffer.size")), 4096),
                     float(config.get("log.cleaner.io.max.bytes.per.second")))

    async def clean_filthiest(self, now_ms: int | None = None) -> bool:
        """One round: clean the filthiest compacted log if any is due. True if one was cleaned.
        Rounds run one at a time (one cleaner thread); `now_ms` lets tests move the clock."""
        async with self._round_lock:
            return await self._clean_filthiest(now_ms)

    async def _clean_filthiest(self, now_ms: int | None) -> bool:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="log-cleaner")
        now_ms = wall_clock_ms() if now_ms is None else now_ms
        plan = self._choose(now_ms)
        if plan is None:
            return False
        part = plan.part
        key = plan.ltc.key
        plog = part.log
        summaries = plan.summaries
        active_base = summaries[-1].base_offset
        sealed = [s.base_offset for s in summaries[:-1] if s.base_offset < plan.ltc.first_uncleanable_offset]
        self.in_progress = key
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        stats = CleanerStats()
        sources = plog.open_for_cleaning(sealed)
        try:
            offset_map = await loop.run_in_executor(self._executor, self._build_offset_map, plan, sources, stats)
            end_offset = offset_map.latest_offset + 1 if len(offset_map) else plan.ltc.first_uncleanable_offset
            # the records that supersede must be durable before a swap makes their removal durable
            await self.server.flusher.flush(plog, end_offset)
            to_clean = [s for s in summaries[:-1] if s.base_offset < end_offset and s.base_offset < active_base]
            groups = group_segments_by_size(to_clean, plan.config.segment_bytes, plan.ltc.first_uncleanable_offset)
            by_base = {src.base_offset: src for src in sources}
            bases = [s.base_offset for s in summaries]
            txn_metadata = CleanedTransactionMetadata(plan.aborted)  # one for the round, as Cleaner.doClean
            for group in groups:
                last_index = bases.index(group[-1].base_offset)
                group_end = bases[last_index + 1]
                cleaned = await loop.run_in_executor(
                    self._executor, self._clean_group, plan, plog, [by_base[s.base_offset] for s in group],
                    offset_map, txn_metadata, group_end, stats)
                if not plog.replace_segments(cleaned, [s.base_offset for s in group]):
                    raise CleaningAborted(f"{key[0]}-{key[1]}: segments changed during cleaning")
                stats.groups += 1
                stats.swapped.append(group[0].base_offset)
        except CleaningAborted as exc:
            log.info("log cleaning of %s-%d stopped: %s", *key, exc)
            return False
        except (ValueError, IndexError) as exc:  # InvalidControlBatch too
            self.uncleanable.add(key)
            self.errors += 1
            log.error("%s-%d is uncleanable until the broker restarts: a batch in offsets [%d, %d) does not decode "
                      "(%s)", *key, plan.ltc.first_dirty_offset, plan.ltc.first_uncleanable_offset, exc)
            return False
        except OSError as exc:
            plog.health.fail(exc, f"log cleaning of {key[0]}-{key[1]}")
            raise
        finally:
            self.in_progress = None
            for src in sources:
                src.close()
        self.checkpoints[key] = end_offset
        snapshot = dict(self.checkpoints)
        try:
            await loop.run_in_executor(self._executor, self.state.log_store.write_cleaner_checkpoints, snapshot)
        except OSError as exc:
            plog.health.fail(exc, "writing cleaner-offset-checkpoint")
            raise
        elapsed_ms = (time.monotonic() - started) * 1000.0
        self.rounds += 1
        self.bytes_read += stats.bytes_read
        self.bytes_written += stats.bytes_written
        self.last_round_ms = elapsed_ms
        kept = 100.0 * stats.records_kept / stats.records_read if stats.records_read else 100.0
        log.info("cleaned %s-%d: dirty offsets [%d, %d) mapped (%d keys), %d segment group(s) rewritten, %d -> %d "
                 "bytes, %.1f%% of %d records kept, in %.0f ms", *key, plan.ltc.first_dirty_offset, end_offset,
                 len(offset_map), stats.groups, stats.bytes_read, stats.bytes_written, kept, stats.records_read,
                 elapsed_ms)
        return True

    # ------------------------------------------------------------------ the cleaner thread
    def _check(self, plog: Log) -> None:
        if self._abort.is_set():
            raise CleaningAborted("the broker is stopping")
        if getattr(plog, "closed", False):
            raise CleaningAborted("the log was closed (its topic deleted?)")

    def _build_offset_map(self, plan: _Plan, sources: list, stats: CleanerStats) -> OffsetMap:
        """Step 2a: key -> latest offset over [first dirty, first uncleanable), stopping at a batch
        boundary when the map is full (the rest waits for the next round)."""
        start, end = plan.ltc.first_dirty_offset, plan.ltc.first_uncleanable_offset
        offset_map = OffsetMap(plan.slots)
        txn_metadata = CleanedTransactionMetadata(plan.aborted)
        throttler = _Throttler(plan.rate, self._abort)
        plog = plan.part.log
        summaries = plan.summaries
        for src in sources:
            i = next(j for j, s in enumerate(summaries) if s.base_offset == src.base_offset)
            if summaries[i + 1].base_offset <= start:
                continue  # wholly clean
            for header, batch in src.iter_batches(plan.chunk_bytes):
                self._check(plog)
                if header.base_offset >= end:
                    return offset_map
                throttler.maybe_throttle(len(batch))
                if header.next_offset <= start:
                    continue
                if header.is_control:
                    txn_metadata.on_control_batch_read(header.producer_id, header.last_offset,
                                                       _control_type(header, batch))
                    continue
                if txn_metadata.on_batch_read(header.producer_id, header.last_offset, header.is_transactional):
                    continue  # an aborted transaction's records supersede nothing
                _, _, records = parse_records(batch)
                keyed = [r for r in records if r.key is not None and r.offset >= start]
                if len(offset_map) and len(offset_map) + len(keyed) > offset_map.capacity:
                    return offset_map  # full: the round ends before this batch
                for r in keyed:
                    offset_map.put(r.key, r.offset)
                stats.map_records += len(keyed)
        return offset_map

    def _clean_group(self, plan: _Plan, plog: Log, sources: list, offset_map: OffsetMap,
                     txn_metadata: CleanedTransactionMetadata, group_end: int, stats: CleanerStats):
        """Step 2b: copy one group of segments into one cleaned segment (Cleaner.cleanSegments)."""
        cleaned = plog.create_cleaned_segment(sources[0].base_offset)
        throttler = _Throttler(plan.rate, self._abort)
        now_ms = plan.now_ms
        retention_ms = plan.config.delete_retention_ms
        try:
            for src in sources:
                for header, batch in src.iter_batches(plan.chunk_bytes):
                    self._check(plog)
                    stats.bytes_read += len(batch)
                    throttler.maybe_throttle(len(batch))
                    out = self._filter_batch(header, batch, plan, offset_map, txn_metadata, group_end, now_ms,
                                             retention_ms, stats)
                    if out is not None:
                        cleaned.append(header, out)
                        stats.bytes_written += len(out)
                        throttler.maybe_throttle(len(out))
            cleaned.finish(group_end, txn_metadata.take_cleaned_index())
        except BaseException:
            cleaned.discard()
            raise
        return cleaned

    @staticmethod
    def _filter_batch(header, batch: bytes, plan: _Plan, offset_map: OffsetMap, txn_metadata: CleanedTransactionMetadata,
                      group_end: int, now_ms: int, retention_ms: int, stats: CleanerStats) -> bytes | None:
        """One batch's cleaned form, or None (Cleaner.cleanInto's checkBatchRetention and
        shouldRetainRecord)."""
        horizon = delete_horizon_ms(header)
        control = header.is_control
        if control:
            can_discard = txn_metadata.on_control_batch_read(header.producer_id, header.last_offset,
                                                             _control_type(header, batch))
            discard_records = can_discard and horizon is not None and horizon <= now_ms
        else:
            can_discard = discard_records = txn_metadata.on_batch_read(header.producer_id, header.last_offset,
                                                                       header.is_transactional)
        if header.base_offset >= plan.ltc.first_uncleanable_offset:  # at or past the LSO: untouched
            stats.records_read += header.records_count
            stats.records_kept += header.records_count
            return batch
        retention = batch_retention(producer_id=header.producer_id, producer_epoch=header.producer_epoch,
                                    last_offset=header.last_offset, next_offset=header.next_offset, control=control,
                                    discard_records=discard_records, last_records=plan.last_records,
                                    segment_end_offset=group_end)
        stats.records_read += header.records_count
        if retention is BatchRetention.DELETE:
            return None
        _, body, records = parse_records(batch)
        if discard_records:
            kept = []
        elif control:
            kept = records
        else:
            kept = [r for r in records if retain_record(offset_map, r.offset, r.key, r.has_value, horizon, now_ms)]
        stats.records_kept += len(kept)
        new_horizon = None
        if horizon is None and kept and ((control and can_discard) or any(not r.has_value for r in kept)):
            # KIP-534: tombstones, and markers nothing needs, live delete.retention.ms on
            new_horizon = min(now_ms + retention_ms, _MAX_LONG)
        if not kept:  # an empty batch too: kept only when it must be (MemoryRecords.filterTo)
            return empty_batch(header) if retention is BatchRetention.RETAIN_EMPTY else None
        if len(kept) == len(records) and new_horizon is None:
            return batch
        return rebuild_batch(header, body, kept, new_horizon)


def _control_type(header, batch: bytes):
    """The control type of a control batch, None if it has no record (Kafka's isControlBatchEmpty).
    Raises InvalidControlBatch (a ValueError: the partition becomes uncleanable)."""
    if header.records_count == 0:
        return None
    _, _, records = parse_records(batch)
    if not records:
        raise InvalidControlBatch(f"control batch at offset {header.base_offset} has no readable record")
    return control_type_of_key(records[0].key)
