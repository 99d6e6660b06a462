"""The shell around share partitions: creation and initial offsets, persistence of their writes,
lock-expiry timers, following the log start offset, and waking parked ShareFetch requests.

Each share partition (group × topic partition) is a pure `SharePartition` machine; this module
carries out its effects:

- `PersistWrite` effects go to the share coordinator (`server.share_state`, WriteShareGroupState
  on `__share_group_state`) and are committed or rolled back when the write is durable; a write
  fenced by a newer state epoch (the group's offsets were altered) drops the share partition, which
  is read again on next use;
- a share partition is created from the share coordinator's state (ReadShareGroupState); state
  with start offset -1 is resolved by `share.auto.offset.reset` and written back; a share
  partition with no state at all (fetched without the group coordinator having initialised it)
  is initialised here;
- the earliest acquisition-lock deadline of each partition is armed on the broker's
  `TimerService`; when it passes, expired locks are released and parked fetches woken;
- the partition log's "log_start_offset" events move the share partition's start offset
  (archiving what it passes) and "append" events wake parked fetches.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from time import perf_counter
from typing import TYPE_CHECKING, Sequence

from quafka.broker import config as cfg
from quafka.broker.core.share_partition import AcquiredRange, PersistWrite, SharePartition, StateBatch
from quafka.broker.storage import Log, LogEvent
from quafka.protocol import coordinator_records as records
from quafka.protocol.errors import ErrorCode
from quafka.protocol.record_batch import iter_headers

from .clock import wall_clock_ms

if TYPE_CHECKING:
    from .server import BrokerServer
    from .state import TopicState

log = logging.getLogger("quafka.share")

READ_CHUNK_BYTES = 256 * 1024
MAX_READS_PER_FETCH = 8


@dataclass(eq=False)
class ShareContext:
    """One share partition and what the shell needs around it."""

    group_id: str
    topic: "TopicState"
    index: int
    log: Log
    sp: SharePartition
    key: tuple = field(default=())
    state_epoch: int = 0

    @property
    def state_key(self) -> records.ShareStateKey:
        return records.ShareStateKey(self.group_id, self.topic.topic_id, self.index)

    @property
    def topic_id(self) -> uuid.UUID:
        return self.topic.topic_id


class FetchedPartition:
    __slots__ = ("records", "acquired")

    def __init__(self, records: bytes, acquired: list[AcquiredRange]) -> None:
        self.records = records
        self.acquired = acquired


class SharePartitionManager:
    def __init__(self, server: "BrokerServer") -> None:
        self.server = server
        self.contexts: dict[tuple[str, uuid.UUID, int], ShareContext] = {}
        self.by_group: dict[str, set[ShareContext]] = {}
        self.by_log: dict[tuple[uuid.UUID, int], set[ShareContext]] = {}
        self.waiters: dict[tuple[uuid.UUID, int], set[asyncio.Future]] = {}
        self._watched_logs: dict[tuple[uuid.UUID, int], Log] = {}
        # partition count of a topic when a group first met it: later partitions start at 0
        self.known_partitions: dict[tuple[str, uuid.UUID], int] = {}
        self._tasks: set[asyncio.Task] = set()

    # ------------------------------------------------------------------ lookup and creation
    def get(self, group_id: str, topic_id: uuid.UUID, index: int) -> ShareContext | None:
        ctx = self.contexts.get((group_id, topic_id, index))
        if ctx is not None:
            if ctx.topic is self.server.state.topics_by_id.get(topic_id):
                return ctx
            self._drop(ctx)  # the topic was deleted (and maybe re-created)
        topic = self.server.state.topics_by_id.get(topic_id)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        started = perf_counter()
        created = self._create(group_id, topic, index)
        self.server.metrics.partition_load_time_ms.observe((perf_counter() - started) * 1000.0)
        return created

    def _create(self, group_id: str, topic: "TopicState", index: int) -> ShareContext | None:
        plog = topic.partitions[index].log
        share_state = self.server.share_state
        key = records.ShareStateKey(group_id, topic.topic_id, index)
        read = share_state.read(key)
        group_config = self.server.state.group_config(group_id)
        known_key = (group_id, topic.topic_id)
        known = self.known_partitions.setdefault(known_key, len(topic.partitions))
        state_epoch = read.state_epoch
        if read.error == ErrorCode.unknown_topic_or_partition:  # no state: initialise it here
            start = plog.log_start_offset if index >= known else self._initial_offset(plog, group_config)
            state_epoch = 0
            if share_state.initialize_now(key, state_epoch=0, start_offset=start) != ErrorCode.none:
                return None
            sp = SharePartition(start)
        elif read.error != ErrorCode.none:
            log.warning("share state of %s %s-%d unavailable: %s", group_id, topic.name, index, read.error.name)
            return None
        elif read.start_offset < 0:  # initialised, start offset to be set by share.auto.offset.reset
            start = self._initial_offset(plog, group_config)
            share_state.write_now(key, state_epoch=state_epoch, start_offset=start, delivery_complete_count=0)
            sp = SharePartition(start)
        else:
            sp = SharePartition(max(read.start_offset, plog.log_start_offset),
                                [StateBatch(*b) for b in read.state_batches])
        ctx = ShareContext(group_id, topic, index, plog, sp, (group_id, topic.topic_id, index), state_epoch)
        self.contexts[ctx.key] = ctx
        self.by_group.setdefault(group_id, set()).add(ctx)
        log_key = (topic.topic_id, index)
        self.by_log.setdefault(log_key, set()).add(ctx)
        if self._watched_logs.get(log_key) is not plog:
            plog.add_listener(lambda event, key=log_key: self._on_log_event(key, event))
            self._watched_logs[log_key] = plog
        if sp.start_offset < plog.log_start_offset:
            self._spawn_persist(ctx, sp.move_start_offset(plog.log_start_offset))
        return ctx

    def _initial_offset(self, plog: Log, group_config: "cfg.ShareGroupConfig") -> int:
        reset = group_config.auto_offset_reset
        if reset == "earliest":
            return plog.log_start_offset
        if reset.startswith("by_duration:"):
            duration_ms = cfg.auto_offset_reset_duration_ms(reset) or 0
            found = plog.offset_for_timestamp(wall_clock_ms() - duration_ms)
            return found[0] if found is not None else plog.log_end_offset
        return plog.log_end_offset

    def _drop(self, ctx: ShareContext) -> None:
        self.contexts.pop(ctx.key, None)
        self.by_group.get(ctx.group_id, set()).discard(ctx)
        self.by_log.get((ctx.topic_id, ctx.index), set()).discard(ctx)
        self.server.timers.cancel(("lock",) + ctx.key)

    def drop_topic(self, topic_id: uuid.UUID) -> None:
        """The topic was deleted: its share partitions go, and so does their durable state."""
        for ctx in [c for c in self.contexts.values() if c.topic_id == topic_id]:
            self._drop(ctx)
        share_state = self.server.share_state
        for key in share_state.machine.keys():
            if key.topic_id == topic_id:
                share_state.delete_now(key)

    def drop_group(self, group_id: str, topic_ids: set[uuid.UUID] | None = None) -> None:
        """Forget the group's share partitions (of these topics) so they are read again from the
        share coordinator on next use (offsets altered or deleted; the group is empty)."""
        for ctx in list(self.by_group.get(group_id, ())):
            if topic_ids is None or ctx.topic_id in topic_ids:
                self._drop(ctx)
        for key in [k for k in self.known_partitions if k[0] == group_id and (topic_ids is None or k[1] in topic_ids)]:
            del self.known_partitions[key]

    # ------------------------------------------------------------------ fetch
    def fetch(self, ctx: ShareContext, member_id: str, *, max_records: int, batch_size: int, record_limit: bool,
              max_bytes: int, group_config: "cfg.ShareGroupConfig", now_ms: int) -> FetchedPartition | None:
        sp = ctx.sp
        plog = ctx.log
        self.expire(ctx, group_config, now_ms)
        parts: list[bytes] = []
        acquired: list[AcquiredRange] = []
        total = 0
        sent_upto = -1  # the offset after the last batch put in `parts`
        for _ in range(MAX_READS_PER_FETCH):
            offset = sp.fetch_offset(group_config.partition_max_record_locks)
            if offset is None or offset >= plog.log_end_offset or total >= max_records:
                break
            if offset < plog.log_start_offset:
                self._spawn_persist(ctx, sp.move_start_offset(plog.log_start_offset))
                continue
            data = plog.read(offset, min(READ_CHUNK_BYTES, max(max_bytes, 1)), min_one_batch=True)
            batches = [(h.base_offset, h.last_offset, pos + h.batch_length + 12) for pos, h in iter_headers(data)]
            if not batches:
                break
            got = sp.acquire(
                member_id, [(b, last) for b, last, _ in batches],
                max_records=max_records - total, batch_size=batch_size, record_limit=record_limit,
                lock_duration_ms=group_config.record_lock_duration_ms,
                delivery_limit=group_config.delivery_count_limit,
                max_in_flight=group_config.partition_max_record_locks, now_ms=now_ms,
            )
            for write in sp.take_deferred_writes():
                self._spawn_persist(ctx, write)
            if not got:
                break
            last_acquired = max(r.last_offset for r in got)
            end = next((stop for _b, last, stop in batches if last >= last_acquired), len(data))
            # a later read may start inside what an earlier one already sent: send each batch once
            begin = next((stop for _b, last, stop in reversed(batches) if last < sent_upto), 0)
            if begin < end:
                parts.append(data[begin:end] if begin or end < len(data) else data)
            sent_upto = max([sent_upto] + [last + 1 for _b, last, stop in batches if stop <= end])
            acquired.extend(got)
            total += sum(r.last_offset - r.first_offset + 1 for r in got)
            max_bytes -= max(end - begin, 0)
            if end < len(data) or max_bytes <= 0 or sp.last_acquire_throttled:
                break
        if not acquired:
            return None
        self._arm_lock_timer(ctx)
        return FetchedPartition(parts[0] if len(parts) == 1 else b"".join(parts), acquired)

    def acquirable(self, ctx: ShareContext, group_config: "cfg.ShareGroupConfig") -> bool:
        offset = ctx.sp.fetch_offset(group_config.partition_max_record_locks)
        return offset is not None and offset < ctx.log.log_end_offset

    # ------------------------------------------------------------------ acknowledge and release
    async def acknowledge(self, ctx: ShareContext, member_id: str, batches: Sequence[tuple[int, int, Sequence[int]]],
                          group_config: "cfg.ShareGroupConfig", now_ms: int) -> ErrorCode:
        """Apply a member's acknowledgements; the partition's error code (NONE when applied)."""
        self.expire(ctx, group_config, now_ms)
        ok, write = ctx.sp.acknowledge(
            member_id, batches, delivery_limit=group_config.delivery_count_limit,
            lock_duration_ms=group_config.record_lock_duration_ms,
            renew_enabled=group_config.renew_acknowledge_enable, now_ms=now_ms,
        )
        if not ok:
            return ctx.sp.last_ack_error
        if write is not None:
            ok = await self._persist(ctx, write)
        self._arm_lock_timer(ctx)
        if not ok:
            return ErrorCode.invalid_record_state
        self.server.metrics.count_acknowledgements(batches)
        return ErrorCode.none

    def release_member(self, group_id: str, member_id: str) -> None:
        now_ms = wall_clock_ms()
        for ctx in list(self.by_group.get(group_id, ())):
            group_config = self.server.state.group_config(group_id)
            write = ctx.sp.release_member(member_id, delivery_limit=group_config.delivery_count_limit, now_ms=now_ms)
            if write is not None:
                self._spawn_persist(ctx, write)
                self._arm_lock_timer(ctx)
                self.wake((ctx.topic_id, ctx.index))

    def expire(self, ctx: ShareContext, group_config: "cfg.ShareGroupConfig", now_ms: int) -> None:
        deadline = ctx.sp.next_deadline_ms()
        if deadline is None or deadline > now_ms:
            return
        write = ctx.sp.expire_locks(delivery_limit=group_config.delivery_count_limit, now_ms=now_ms)
        if write is not None:
            self._spawn_persist(ctx, write)
            self.wake((ctx.topic_id, ctx.index))
        self._arm_lock_timer(ctx)

    # ------------------------------------------------------------------ effects
    def _submit_write(self, ctx: ShareContext, write: PersistWrite) -> asyncio.Future:
        """Queue the write at once, so writes reach the share coordinator in the order the share
        partition started them (each carries the delivery-complete count as of its start)."""
        return self.server.share_state.write(
            ctx.state_key, state_epoch=ctx.state_epoch, start_offset=write.start_offset,
            delivery_complete_count=write.delivery_complete_count,
            state_batches=[records.StateBatch(*b) for b in write.state_batches])

    async def _persist(self, ctx: ShareContext, write: PersistWrite, fut: asyncio.Future | None = None) -> bool:
        try:
            error = await (fut if fut is not None else self._submit_write(ctx, write))
        except Exception:
            log.exception("share state write failed for %s %s-%d", ctx.group_id, ctx.topic.name, ctx.index)
            error = ErrorCode.unknown_server_error
        ok = error == ErrorCode.none
        if not ok:
            log.warning("share state write for %s %s-%d refused: %s", ctx.group_id, ctx.topic.name, ctx.index,
                        getattr(error, "name", error))
        group_config = self.server.state.group_config(ctx.group_id)
        catch_up = ctx.sp.on_write_complete(write.write_id, ok, delivery_limit=group_config.delivery_count_limit,
                                            now_ms=wall_clock_ms())
        self._spawn_persist(ctx, catch_up)  # overlapping writes left the stored start offset behind
        if error == ErrorCode.fenced_state_epoch and self.contexts.get(ctx.key) is ctx:
            self._drop(ctx)  # re-initialised meanwhile (AlterShareGroupOffsets): read it again
        # the records the write touched were pending until now: parked fetches may acquire them
        self.wake((ctx.topic_id, ctx.index))
        return ok

    def _spawn_persist(self, ctx: ShareContext, write: PersistWrite | None) -> None:
        if write is None:
            return
        fut = self._submit_write(ctx, write)
        task = asyncio.get_running_loop().create_task(self._persist(ctx, write, fut))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _arm_lock_timer(self, ctx: ShareContext) -> None:
        key = ("lock",) + ctx.key
        deadline = ctx.sp.next_deadline_ms()
        timers = self.server.timers
        if deadline is None:
            timers.cancel(key)
        elif timers.deadline_of(key) != deadline:
            timers.arm(key, deadline, lambda now_ms, ctx=ctx: self._on_lock_timer(ctx, now_ms))

    def _on_lock_timer(self, ctx: ShareContext, now_ms: int) -> None:
        if self.contexts.get(ctx.key) is not ctx:
            return
        self.expire(ctx, self.server.state.group_config(ctx.group_id), now_ms)

    def _on_log_event(self, key: tuple[uuid.UUID, int], event: LogEvent) -> None:
        if event.kind == "log_start_offset":
            for ctx in list(self.by_log.get(key, ())):
                if ctx.log is event.log:
                    self._spawn_persist(ctx, ctx.sp.move_start_offset(event.log.log_start_offset))
                    self._arm_lock_timer(ctx)
        self.wake(key)

    # ------------------------------------------------------------------ parked fetches
    def wake(self, key: tuple[uuid.UUID, int]) -> None:
        futures = self.waiters.pop(key, None)
        if futures:
            for fut in futures:
                if not fut.done():
                    fut.set_result(None)

    async def wait(self, keys: list[tuple[uuid.UUID, int]], timeout_ms: float) -> None:
        if timeout_ms <= 0 or not keys:
            return
        fut = asyncio.get_running_loop().create_future()
        for key in keys:
            self.waiters.setdefault(key, set()).add(fut)
        try:
            # asyncio.wait, not wait_for: on Python 3.11 wait_for swallows a cancellation that
            # arrives just after the future completed, and a broker stopping would then keep
            # serving this connection
            await asyncio.wait((fut,), timeout=timeout_ms / 1000.0)
        finally:
            for key in keys:
                waiting = self.waiters.get(key)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self.waiters[key]
