"""The shell of quafka's delivery controls (redelivery backoff, delayed delivery, key ordering;
`broker/core/delivery_policy.py`, docs/share-groups.md "Extensions").

- `policy`: a share group's `DeliveryPolicy`, resolved from its group configs (and whether it has a
  dead-letter queue); `prepare` asks for it only when the group config object changed, so every
  ShareFetch asks cheaply;
- `prepare`: gives a share partition its group's current policy before it serves anything, and, when
  the policy needs the window's keys or delivery times and they are not loaded (first use, a
  restart, a control just turned on), reads them from the log;
- `record_meta`: what a read of the log holds for the delivery controls — {offset: (key, due time)},
  read by `record_batch.iter_record_meta` (keys and the two headers; never values), only for groups
  whose policy needs it;
- the clocks: the share partition keeps due times in the broker's monotonic milliseconds, the log
  and `__share_group_state` in epoch milliseconds (`to_wall`, `to_monotonic`);
- `note_stall`: a fetch that finds the window full of records that wait says so — a warning
  (at most one a minute per share partition) and a counter.

Bad delivery headers (not a decimal number, negative) are ignored and counted; times further ahead
than `quafka.share.delivery.delay.max.ms` are capped and counted; one warning a minute per group
names an example.
"""

from __future__ import annotations

import logging
import zlib
from bisect import bisect_left
from collections import OrderedDict
from typing import TYPE_CHECKING

from quafka.broker.core._runs import WAIT_BACKOFF, WAIT_DELIVERY
from quafka.broker.core.delivery_policy import (
    DELIVERY_HEADERS,
    DUE_BAD,
    DUE_CAPPED,
    DeliveryPolicy,
    delivery_due_ms,
)
from quafka.protocol.record_batch import LOG_OVERHEAD, iter_headers, iter_record_meta

from .clock import wall_clock_ms, wall_minus_monotonic_ms

if TYPE_CHECKING:
    from quafka.broker.config import ShareGroupConfig
    from quafka.broker.storage import BatchRead

    from .share_partitions import ShareContext, SharePartitionManager

log = logging.getLogger("quafka.share")

_HEADER_NAMES = frozenset(DELIVERY_HEADERS)
_META_READ_BYTES = 4 * 1024 * 1024  # one read of the window's records at a time
_LOG_EVERY_MS = 60_000
_CACHED_BATCHES = 64  # decoded batches kept per share partition (a batch is read by many fetches)


class ReadMeta:
    """{offset: (key, due time)} of the records of one read, looked up batch by batch: each batch
    is decoded once (`DeliveryControls` caches them), so a batch of hundreds of records read by
    hundreds of one-record fetches is not decoded hundreds of times."""

    __slots__ = ("_lasts", "_batches")

    def __init__(self, lasts: list[int], batches: list[dict]) -> None:
        self._lasts = lasts
        self._batches = batches

    def get(self, offset: int):
        i = bisect_left(self._lasts, offset)
        return self._batches[i].get(offset) if i < len(self._batches) else None


class DeliveryControls:
    def __init__(self, manager: "SharePartitionManager") -> None:
        self.manager = manager
        # counters per share partition key (metrics.py renders them; `forget` drops them with it)
        self.header_outcomes: dict[tuple, list[int]] = {}  # -> [ignored (bad), capped]
        self.force_actions: dict[tuple, dict[str, list[int]]] = {}  # -> {action: [requests, records]}
        self.window_stalls: dict[tuple, int] = {}  # -> fetches that found the window full of waiting records
        self._logged: dict[tuple, int] = {}  # what was last warned about, and when (monotonic ms)
        # share partition key -> {batch base offset: its records' meta}, least recently used first
        self._batches: dict[tuple, OrderedDict[int, dict]] = {}

    # ------------------------------------------------------------------ the policy
    @staticmethod
    def policy(group_id: str, group_config: "ShareGroupConfig", dlq_enabled: bool) -> DeliveryPolicy:
        """The group's `DeliveryPolicy` (built only when its group config changed: `prepare`)."""
        c = group_config
        return DeliveryPolicy(
            backoff_ms=c.redelivery_backoff_ms, backoff_max_ms=c.redelivery_backoff_max_ms,
            backoff_multiplier=c.redelivery_backoff_multiplier, backoff_jitter=c.redelivery_backoff_jitter,
            key_ordering=c.key_ordering, on_failure=c.key_ordering_on_failure,
            delayed_delivery=c.delivery_delay_enable, delivery_delay_max_ms=c.delivery_delay_max_ms,
            jitter_seed=zlib.crc32(group_id.encode()), dead_letters=dlq_enabled)

    def prepare(self, ctx: "ShareContext", group_config: "ShareGroupConfig", now_ms: int) -> None:
        """Give the share partition its group's current policy; load the window's keys and
        delivery times when the policy needs them and they are not loaded."""
        if ctx.prepared_for is group_config:
            return  # the policy is the one given last time (a feature change makes a new group config)
        sp = ctx.share_partition
        policy = self.policy(ctx.group_id, group_config, self.manager.dead_letters.enabled(ctx.group_id, group_config))
        if sp.policy != policy:
            self._batches.pop(ctx.key, None)  # decoded under the old policy (keys, headers, cap)
            self.manager.execute(ctx, sp.configure(policy, now_ms))
        if sp.record_meta_missing:
            meta = self.read_window_meta(ctx, now_ms)
            self.manager.execute(ctx, sp.load_record_meta(meta, now_ms))
        ctx.prepared_for = group_config

    # ------------------------------------------------------------------ reading the log
    def read_window_meta(self, ctx: "ShareContext", now_ms: int) -> dict[int, tuple[bytes | None, int]]:
        """The keys and delivery times of the window's records (at most the in-flight cap)."""
        sp, plog = ctx.share_partition, ctx.log
        meta: dict[int, tuple[bytes | None, int]] = {}
        offset, last = max(sp.start_offset, plog.log_start_offset), min(sp.end_offset, plog.log_end_offset - 1)
        while offset <= last:
            read = plog.read_batches(offset, _META_READ_BYTES, last)
            if not read.extents:
                break
            meta.update(self._decode(ctx, memoryview(read.data), now_ms))
            offset = read.extents[-1].last_offset + 1
        return meta

    def record_meta(self, ctx: "ShareContext", read: "BatchRead", now_ms: int) -> ReadMeta:
        """{offset: (key, due time in monotonic ms, 0 when none)} of the records of one read (only
        batches that reach past the window's end: the window's own records are known)."""
        sp = ctx.share_partition
        cache = self._batches.get(ctx.key)
        if cache is None:
            cache = self._batches[ctx.key] = OrderedDict()
        lasts, batches = [], []
        data = None
        start = 0
        for extent in read.extents:
            if extent.last_offset >= sp.next_offset:
                found = cache.get(extent.base_offset)
                if found is None:
                    if data is None:
                        data = memoryview(read.data)
                    found = self._decode(ctx, data[start:extent.end], now_ms)
                    cache[extent.base_offset] = found
                    if len(cache) > _CACHED_BATCHES:
                        cache.popitem(last=False)
                else:
                    cache.move_to_end(extent.base_offset)
                lasts.append(extent.last_offset)
                batches.append(found)
            start = extent.end
        return ReadMeta(lasts, batches)

    def _decode(self, ctx: "ShareContext", data, now_ms: int) -> dict[int, tuple[bytes | None, int]]:
        """The meta of the records of the batches in `data`; bad headers counted and logged."""
        policy = ctx.share_partition.policy
        names = _HEADER_NAMES if policy.delayed_delivery else frozenset()
        # a due time in epoch ms on the monotonic clock: one offset between the clocks (`now_ms`,
        # when the fetch began, is older than the wall clock read here), and 1 ms more for the
        # truncation of both readings, so that a record is never delivered before its time
        offset = wall_minus_monotonic_ms()
        wall_now = wall_clock_ms()
        meta: dict[int, tuple[bytes | None, int]] = {}
        bad = capped = 0
        example = None
        for pos, header in iter_headers(data):
            try:
                for record in iter_record_meta(data[pos:pos + header.batch_length + LOG_OVERHEAD], names):
                    due = 0
                    if record.headers:
                        due_wall, outcome = delivery_due_ms(record.headers, record.timestamp,
                                                            policy.delivery_delay_max_ms, wall_now)
                        if outcome == DUE_BAD:
                            bad += 1
                            example = example or (record.offset, record.headers)
                        elif outcome == DUE_CAPPED:
                            capped += 1
                            example = example or (record.offset, record.headers)
                        if due_wall > wall_now:
                            due = due_wall - offset + 1
                    meta[record.offset] = (bytes(record.key) if record.key is not None and policy.key_ordering
                                           else None, due)
            except (ValueError, IndexError) as exc:  # a body that does not decode: delivered as Kafka would
                self._warn(("undecodable", ctx.key), now_ms,
                           "share partition %s %s-%d: the records of the batch at offset %d do not decode (%s); "
                           "they are delivered without key ordering or delivery times",
                           ctx.group_id, ctx.topic.name, ctx.index, header.base_offset, exc)
        if bad or capped:
            counts = self.header_outcomes.setdefault(ctx.key, [0, 0])
            counts[0] += bad
            counts[1] += capped
            self._warn(("header", ctx.group_id), now_ms,
                       "share group %s, %s-%d: %d delivery header(s) ignored (not a non-negative decimal number) and "
                       "%d capped at quafka.share.delivery.delay.max.ms (%d ms); e.g. offset %d: %r",
                       ctx.group_id, ctx.topic.name, ctx.index, bad, capped, policy.delivery_delay_max_ms,
                       example[0], example[1])
        return meta

    # ------------------------------------------------------------------ clocks
    @staticmethod
    def to_wall(due_ms: int) -> int:
        """A due time of the share partition (monotonic ms) as epoch ms (0 stays 0)."""
        return due_ms + wall_minus_monotonic_ms() if due_ms else 0

    @staticmethod
    def to_monotonic(due_wall_ms: int) -> int:
        """An epoch-ms due time as the share partition's (0, or one already past, is 0: now)."""
        if due_wall_ms <= wall_clock_ms():
            return 0
        return due_wall_ms - wall_minus_monotonic_ms() + 1  # +1: never early (see `_decode`)

    # ------------------------------------------------------------------ saying why nothing moves
    def note_stall(self, ctx: "ShareContext", max_locks: int, now_ms: int) -> None:
        """A fetch found the window full and nothing in it acquirable. When records in it wait (for
        a backoff, a delivery time, their key), count it and warn: new records are not delivered
        until one of them moves."""
        sp = ctx.share_partition
        counts = sp.runs.waiting_counts
        waiting = counts[WAIT_BACKOFF] + counts[WAIT_DELIVERY] + sp.runs.blocked_count
        if not waiting:
            return
        self.window_stalls[ctx.key] = self.window_stalls.get(ctx.key, 0) + 1
        due = sp.next_due_ms()
        self._warn(("stall", ctx.key), now_ms,
                   "share partition %s %s-%d: the in-flight window is full (%d records, "
                   "share.partition.max.record.locks=%d) and nothing in it can be delivered: %d wait for a redelivery "
                   "backoff, %d for their delivery time, %d behind an earlier record of their key; the next is due in "
                   "%s. New records are not delivered until then: raise share.partition.max.record.locks (up to "
                   "group.share.max.partition.max.record.locks) or see docs/job-queues.md",
                   ctx.group_id, ctx.topic.name, ctx.index, sp.in_flight_count, max_locks, counts[WAIT_BACKOFF],
                   counts[WAIT_DELIVERY], sp.runs.blocked_count,
                   f"{max(due - now_ms, 0)} ms" if due is not None else "nothing (blocked keys only)")

    def _warn(self, what: tuple, now_ms: int, message: str, *args) -> None:
        last = self._logged.get(what)
        if last is not None and now_ms - last < _LOG_EVERY_MS:
            return
        if len(self._logged) > 10_000:
            self._logged.clear()
        self._logged[what] = now_ms
        log.warning(message, *args)

    def count_force(self, key: tuple, action: str, records: int) -> None:
        counts = self.force_actions.setdefault(key, {}).setdefault(action, [0, 0])
        counts[0] += 1
        counts[1] += records

    def forget(self, key: tuple) -> None:
        self.window_stalls.pop(key, None)
        self.header_outcomes.pop(key, None)
        self.force_actions.pop(key, None)
        self._batches.pop(key, None)
