"""The shell around share partitions: creation and initial offsets, the fetch path, persistence
of their writes, lock-expiry timers, following the log start offset, and completing parked
ShareFetch requests.

Each share partition (group × topic partition) is a pure `SharePartition` machine; this module
carries out the effects its calls return:

- `PersistWrite` goes to the share coordinator (`server.share_coordinator`, WriteShareGroupState on
  `__share_group_state`) and is committed or rolled back when the write is durable; a write fenced
  by a newer state epoch (the group's offsets were altered) drops the share partition, which is
  read again on next use;
- `LockTimer` arms the partition's acquisition-lock timer on a monotonic-clock `TimerService`;
  when it fires, expired locks are released;
- `WakeFetches` completes the partition's parked ShareFetches (`delayed_share_fetch`), oldest
  first, synchronously — before the request whose acknowledgement freed the records runs its own
  fetch, as Kafka's `SharePartitionManager.acknowledge` does;
- `DeadLetterWrite` writes records to the group's dead-letter queue (`dead_letter_writer`), then
  archives them. Whether a group has one (`share.version` 2 and a DLQ topic configured) is read
  at every acknowledgement, release and lock expiry, as Kafka's supplier is.

A share partition is created from the share coordinator's state (ReadShareGroupState); state with
start offset -1 is resolved by `share.auto.offset.reset` and written back; a share partition with
no state at all (fetched without the group coordinator having initialised it) is initialised here.
The partition log's "log_start_offset" events move the share partition's start offset (archiving
what it passes) and "append" events complete parked fetches.

quafka's delivery controls (redelivery backoff, delayed delivery, key ordering) are applied by
`delivery_controls`: each share partition gets its group's policy before it serves anything, reads
of the log are decoded for keys and delivery headers only for groups that need them, and due times
cross between the share partition's monotonic clock and the epoch milliseconds stored in
`__share_group_state`.

The fetch path reads only what it sends: the share partition says where acquisition starts
(`fetch_offset`) and how far it can reach (`read_stop_offset`), and `Log.read_batches` returns the
batches up to there, located through the offset index — so the broker's work per ShareFetch
follows what it returns, not what lies beyond.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from time import perf_counter
from typing import TYPE_CHECKING, Protocol, Sequence

from quafka.broker import config as cfg
from quafka.broker.core.share_partition import (
    AcquiredRange,
    DeadLetterWrite,
    Effect,
    LockTimer,
    PersistWrite,
    SharePartition,
    StateBatch,
    WakeFetches,
)
from quafka.broker.storage import Log, LogEvent
from quafka.broker.storage.base import BatchRead
from quafka.protocol.record_batch import CONTROL_FLAG, TRANSACTIONAL_FLAG, read_header
from quafka.protocol import share_state_records as records
from quafka.protocol.errors import ErrorCode

from ._services import BrokerServices
from .clock import monotonic_ms, wall_clock_ms
from .dead_letter_writer import DeadLetterWriter
from .delayed_share_fetch import DelayedShareFetch, ShareFetchPurgatory
from .delivery_controls import DeliveryControls
from .timers import TimerService

if TYPE_CHECKING:
    from quafka.broker.core.in_flight import ForceResult
    from quafka.broker.core.share_session import ShareSession, ShareSessionCache

    from .share_coordinator import ShareCoordinatorService
    from .state import PartitionState, TopicState

log = logging.getLogger("quafka.share")

READ_COMMITTED = "read_committed"
# where a batch's attributes (int16, big-endian) end: base offset 8, length 4, leader epoch 4, magic 1, CRC 4
_ATTRIBUTES_LOW_BYTE = 22
MAX_READS_PER_FETCH = 8  # reads of one partition per fetch (each reaches one AVAILABLE run, or new records)
META_READ_RECORDS = 64  # with key ordering or delayed delivery, new records read at once (some may wait)


@dataclass(eq=False)
class ShareContext:
    """One share partition and what the shell needs around it."""

    group_id: str
    topic: "TopicState"
    index: int
    log: Log
    share_partition: SharePartition  # the pure machine (broker/core/share_partition.py)
    key: tuple = field(default=())
    state_epoch: int = 0
    # the group config `DeliveryControls.prepare` last applied: unchanged, it has nothing to do
    prepared_for: object = None

    @property
    def state_key(self) -> records.ShareStateKey:
        return records.ShareStateKey(self.group_id, self.topic.topic_id, self.index)

    @property
    def topic_id(self) -> uuid.UUID:
        return self.topic.topic_id


class FetchedPartition:
    """What one share partition gave a ShareFetch: the batches read, the ranges acquired, and the
    acquisition lock they were acquired with (the group's `share.record.lock.duration.ms` when
    they were acquired, which the response reports: a config change while the request waited
    for its acknowledgements or was parked applies to these records)."""

    __slots__ = ("records", "acquired", "lock_duration_ms")

    def __init__(self, records: bytes, acquired: list[AcquiredRange], lock_duration_ms: int) -> None:
        self.records = records
        self.acquired = acquired
        self.lock_duration_ms = lock_duration_ms


class FetchParams:
    """What one ShareFetch asks for (MaxRecords, ShareAcquireMode, MaxBytes), and the topic ids of
    the session the principal may not READ (an authorizer said no: nothing is acquired there)."""

    __slots__ = ("max_records", "record_limit", "max_bytes", "denied_topic_ids")

    def __init__(self, max_records: int, record_limit: bool, max_bytes: int,
                 denied_topic_ids: frozenset = frozenset()) -> None:
        self.max_records = max_records
        self.record_limit = record_limit
        self.max_bytes = max_bytes
        self.denied_topic_ids = denied_topic_ids


class SharePartitionsBroker(BrokerServices, Protocol):
    """What the share-partition manager (and its dead-letter writer) uses of the broker."""

    share_coordinator: ShareCoordinatorService | None
    share_sessions: ShareSessionCache


class SharePartitionManager:
    def __init__(self, server: "SharePartitionsBroker") -> None:
        self.server = server
        self.contexts: dict[tuple[str, uuid.UUID, int], ShareContext] = {}
        self.by_group: dict[str, set[ShareContext]] = {}
        self.by_log: dict[tuple[uuid.UUID, int], set[ShareContext]] = {}
        self.purgatory = ShareFetchPurgatory()
        self.lock_timers = TimerService(clock_ms=monotonic_ms)
        self._watched_logs: dict[tuple[uuid.UUID, int], Log] = {}
        # partition count of a topic when a group first met it: later partitions start at 0
        self.known_partitions: dict[tuple[str, uuid.UUID], int] = {}
        self._tasks: set[asyncio.Task] = set()
        self._loading: dict[tuple[str, uuid.UUID, int], asyncio.Future] = {}
        self.dead_letters = DeadLetterWriter(server, self)
        self.controls = DeliveryControls(self)

    # ------------------------------------------------------------------ lookup and creation
    def loaded(self, group_id: str, topic_id: uuid.UUID, index: int) -> ShareContext | None:
        """The share partition if it is loaded and its topic still the same (no I/O)."""
        ctx = self.contexts.get((group_id, topic_id, index))
        if ctx is not None and ctx.topic is self.server.state.topics_by_id.get(topic_id):
            return ctx
        return None

    def all_loaded(self, group_id: str, keys) -> bool:
        """Every share partition (topic id, partition) of `keys` is loaded (the ShareFetch hot path:
        no coroutine unless one must be read from the share coordinator)."""
        loaded = self.loaded
        return all(loaded(group_id, topic_id, index) is not None for topic_id, index in keys)

    async def load(self, group_id: str, keys) -> None:
        """Load the share partitions (topic id, partition) not loaded yet (`fill` uses only
        loaded ones, so that parked fetches are served synchronously)."""
        for topic_id, index in list(keys):
            if self.loaded(group_id, topic_id, index) is None:  # new, or its topic was re-created
                await self.get(group_id, topic_id, index)

    async def get(self, group_id: str, topic_id: uuid.UUID, index: int) -> ShareContext | None:
        """The share partition, loaded from the share coordinator on first use (its read, and an
        initialisation when it has no state, are stored before it serves anything)."""
        key = (group_id, topic_id, index)
        ctx = self.contexts.get(key)
        if ctx is not None:
            if ctx.topic is self.server.state.topics_by_id.get(topic_id):
                return ctx
            self._drop(ctx)  # the topic was deleted (and maybe re-created)
        topic = self.server.state.topics_by_id.get(topic_id)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        loading = self._loading.get(key)
        if loading is not None:  # another request is loading it (an fsync is in flight)
            return await asyncio.shield(loading)
        started = perf_counter()
        loading = self._loading[key] = asyncio.ensure_future(self._create(group_id, topic, index))
        try:
            created = await asyncio.shield(loading)
        finally:
            if self._loading.get(key) is loading:
                del self._loading[key]
        self.server.metrics.partition_load_time_ms.observe((perf_counter() - started) * 1000.0)
        return created

    async def _create(self, group_id: str, topic: "TopicState", index: int) -> ShareContext | None:
        plog = topic.partitions[index].log
        share_coordinator = self.server.share_coordinator
        key = records.ShareStateKey(group_id, topic.topic_id, index)
        try:
            read = await share_coordinator.read(key)
        except OSError as exc:
            log.warning("share state of %s %s-%d unavailable: %s", group_id, topic.name, index, exc)
            return None
        group_config = self.server.state.group_config(group_id)
        known_key = (group_id, topic.topic_id)
        known = self.known_partitions.setdefault(known_key, len(topic.partitions))
        state_epoch = read.state_epoch
        if read.error == ErrorCode.unknown_topic_or_partition:  # no state: initialise it here
            start = plog.log_start_offset if index >= known else self._initial_offset(plog, group_config)
            state_epoch = 0
            initialized = await _stored(share_coordinator.initialize_if_absent(key, state_epoch=0, start_offset=start), key)
            if initialized is None:  # the group coordinator initialised it meanwhile: read it again
                return await self._create(group_id, topic, index)
            if initialized != ErrorCode.none:
                return None
            share_partition = SharePartition(start)
        elif read.error != ErrorCode.none:
            log.warning("share state of %s %s-%d unavailable: %s", group_id, topic.name, index, read.error.name)
            return None
        elif read.start_offset < 0:  # initialised, start offset to be set by share.auto.offset.reset
            start = self._initial_offset(plog, group_config)
            if await _stored(share_coordinator.write(key, state_epoch=state_epoch, start_offset=start,
                                               delivery_complete_count=0), key) != ErrorCode.none:
                return None
            share_partition = SharePartition(start)
        else:
            to_monotonic = self.controls.to_monotonic
            share_partition = SharePartition(max(read.start_offset, plog.log_start_offset),
                                             [StateBatch(*b[:4], to_monotonic(b[4]) if len(b) > 4 else 0)
                                              for b in read.state_batches], read.failed_keys)
        if self.server.state.topics_by_id.get(topic.topic_id) is not topic:
            return None  # deleted while its state was read
        ctx = ShareContext(group_id, topic, index, plog, share_partition, (group_id, topic.topic_id, index), state_epoch)
        self.contexts[ctx.key] = ctx
        self.by_group.setdefault(group_id, set()).add(ctx)
        log_key = (topic.topic_id, index)
        self.by_log.setdefault(log_key, set()).add(ctx)
        if self._watched_logs.get(log_key) is not plog:
            plog.add_listener(lambda event, key=log_key: self._on_log_event(key, event))
            self._watched_logs[log_key] = plog
        if share_partition.start_offset < plog.log_start_offset:
            self.execute(ctx, share_partition.move_start_offset(plog.log_start_offset))
        self.controls.prepare(ctx, group_config, monotonic_ms())  # quafka's delivery controls, before serving
        self.execute(ctx, share_partition.resume_dead_letters())  # ARCHIVING when the broker last stopped
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
        self.lock_timers.cancel(ctx.key)
        self.purgatory.wake_all(ctx.key)
        self.controls.forget(ctx.key)

    def drop_topic(self, topic_id: uuid.UUID) -> None:
        """The topic was deleted: its share partitions go, and so does their durable state."""
        for ctx in [c for c in self.contexts.values() if c.topic_id == topic_id]:
            self._drop(ctx)
        share_coordinator = self.server.share_coordinator
        for key in share_coordinator.coordinator.keys():
            if key.topic_id == topic_id:  # tombstones; a failure is logged (the round logged why)
                share_coordinator.delete(key).add_done_callback(_log_failed_delete)

    def drop_partitions(self, group_id: str, topic_id: uuid.UUID, partitions) -> None:
        """Forget these share partitions of the group (AlterShareGroupOffsets re-initialised
        them); the topic's other partitions keep their in-flight state."""
        for index in partitions:
            ctx = self.contexts.get((group_id, topic_id, index))
            if ctx is not None:
                self._drop(ctx)

    def drop_group(self, group_id: str, topic_ids: set[uuid.UUID] | None = None) -> None:
        """Forget the group's share partitions (of these topics) so they are read again from the
        share coordinator on next use (offsets altered or deleted; the group is empty)."""
        for ctx in list(self.by_group.get(group_id, ())):
            if topic_ids is None or ctx.topic_id in topic_ids:
                self._drop(ctx)
        for key in [k for k in self.known_partitions if k[0] == group_id and (topic_ids is None or k[1] in topic_ids)]:
            del self.known_partitions[key]

    def on_group_config_changed(self, group_id: str) -> None:
        """A group's configs changed: its loaded share partitions take the new delivery policy now
        (a control turned off frees what it held, and parked fetches are served)."""
        group_config = self.server.state.group_config(group_id)
        now_ms = monotonic_ms()
        for ctx in list(self.by_group.get(group_id, ())):
            if self.contexts.get(ctx.key) is ctx:
                self.controls.prepare(ctx, group_config, now_ms)

    def close(self) -> None:
        """The broker is stopping: timers off, and the state writes still waiting for the share
        coordinator (which stops next, and answers them no more) cancelled, not left pending."""
        self.lock_timers.close()
        self.dead_letters.close()
        for task in list(self._tasks):
            task.cancel()

    # ------------------------------------------------------------------ fetch
    def fill(self, session: "ShareSession", member_id: str, params: FetchParams) -> dict[tuple, FetchedPartition]:
        """Acquire for `member_id` from its session's partitions (rotated per request): what one
        ShareFetch gets right now, {(topic id, partition): fetched}, empty when nothing."""
        group_config = self.server.state.group_config(session.group_id)
        fetched: dict[tuple, FetchedPartition] = {}
        remaining_records = params.max_records
        remaining_bytes = params.max_bytes
        now_ms = monotonic_ms()
        denied = params.denied_topic_ids
        for key in session.rotated():
            if remaining_records <= 0 or remaining_bytes <= 0:
                break
            if denied and key[0] in denied:
                continue
            ctx = self.loaded(session.group_id, key[0], key[1])
            if ctx is None:
                continue
            try:
                got = self.fetch(ctx, member_id, max_records=remaining_records, record_limit=params.record_limit,
                                 max_bytes=remaining_bytes, group_config=group_config, now_ms=now_ms)
            except OSError:  # the log directory failed: the handler answers KAFKA_STORAGE_ERROR
                continue
            if got is not None:
                fetched[key] = got
                remaining_records -= sum(r.last_offset - r.first_offset + 1 for r in got.acquired)
                remaining_bytes -= len(got.records)
        return fetched

    def fetch(self, ctx: ShareContext, member_id: str, *, max_records: int, record_limit: bool,
              max_bytes: int, group_config: "cfg.ShareGroupConfig", now_ms: int) -> FetchedPartition | None:
        """Acquire records of one share partition and read the batches that hold them."""
        share_partition = ctx.share_partition
        plog = ctx.log
        self.controls.prepare(ctx, group_config, now_ms)
        self.maybe_expire(ctx, group_config, now_ms)
        max_locks = group_config.partition_max_record_locks
        with_meta = share_partition.policy.needs_record_meta  # keys or delivery headers are read
        parts: list[bytes] = []
        acquired: list[AcquiredRange] = []
        total = 0
        sent_upto = -1  # the offset after the last batch put in `parts`
        committed = group_config.isolation_level == READ_COMMITTED
        partition = ctx.topic.partitions[ctx.index]
        # read_committed: acquire only below the last stable offset (a batch boundary), as Kafka's
        # share fetch reads with FetchIsolation.TXN_COMMITTED
        readable_end = partition.last_stable_offset if committed else plog.log_end_offset
        for _ in range(MAX_READS_PER_FETCH):
            offset = share_partition.fetch_offset(max_locks, now_ms)
            if offset is None:
                self.controls.note_stall(ctx, max_locks, now_ms)
                break
            if offset >= readable_end or total >= max_records:
                break
            if offset < plog.log_start_offset:
                self.execute(ctx, share_partition.move_start_offset(plog.log_start_offset))
                continue
            want = max_records - total
            read = plog.read_batches(offset, max(max_bytes, 1),
                                     min(readable_end - 1,
                                         share_partition.read_stop_offset(offset, max(want, META_READ_RECORDS) if with_meta
                                                                          else want)))
            extents = read.extents
            if not extents:
                break
            before = share_partition.next_offset
            got = share_partition.acquire(
                member_id, [(e.base_offset, e.last_offset) for e in extents],
                max_records=want, record_limit=record_limit,
                lock_duration_ms=group_config.record_lock_duration_ms,
                delivery_limit=group_config.delivery_count_limit, max_in_flight=max_locks, now_ms=now_ms,
                record_meta=self.controls.record_meta(ctx, read, now_ms) if with_meta else None,
                never_delivered=never_delivered(read, partition if committed else None),
            )
            self.execute(ctx, got.effects)
            if not got.ranges:
                if share_partition.next_offset > before and not got.throttled:
                    continue  # new records entered the window waiting (delivery time, key): read on
                break
            data = read.data
            last_acquired = got.ranges[-1].last_offset
            end = next((e.end for e in extents if e.last_offset >= last_acquired), len(data))
            # a later read may start inside what an earlier one already sent: send each batch once
            begin = 0
            for e in extents:
                if e.last_offset >= sent_upto:
                    break
                begin = e.end
            if begin < end:
                parts.append(data[begin:end] if begin or end < len(data) else data)
                sent_upto = next(e.last_offset for e in extents if e.end == end) + 1
            acquired.extend(got.ranges)
            total += sum(r.last_offset - r.first_offset + 1 for r in got.ranges)
            max_bytes -= max(end - begin, 0)
            if end < len(data) or max_bytes <= 0 or got.throttled:
                break
        if not acquired:
            return None
        return FetchedPartition(parts[0] if len(parts) == 1 else b"".join(parts), acquired,
                                group_config.record_lock_duration_ms)

    def acquirable(self, ctx: ShareContext) -> bool:
        """Something in this share partition can be acquired now (O(log n))."""
        group_config = self.server.state.group_config(ctx.group_id)
        offset = ctx.share_partition.fetch_offset(group_config.partition_max_record_locks, monotonic_ms())
        if offset is None:
            return False
        if group_config.isolation_level == READ_COMMITTED:
            return offset < ctx.topic.partitions[ctx.index].last_stable_offset
        return offset < ctx.log.log_end_offset

    async def wait(self, session: "ShareSession", member_id: str, params: FetchParams,
                   timeout_ms: float) -> dict[tuple, FetchedPartition]:
        """Park a ShareFetch that found nothing until it acquires something or `timeout_ms`
        passes; then one last try (Kafka's DelayedShareFetch.onExpiration → onComplete)."""
        keys = [(session.group_id, k[0], k[1]) for k in session.partitions]
        if timeout_ms <= 0 or not keys:
            return {}
        cache = self.server.share_sessions

        def try_fill() -> dict[tuple, FetchedPartition]:
            if not cache.is_live(session):
                return {}  # the session closed or was replaced while parked: acquire nothing for it
            got = self.fill(session, member_id, params)
            if got:  # acquired, not yet answered: handed back undelivered if the connection drops now
                session.unsent = got
            return got

        op = DelayedShareFetch(keys, try_fill)
        self.purgatory.watch(op)
        session.parked = op
        # the future itself is awaited, with a timer that resolves it (None) at MaxWaitMs: one
        # future and one timer handle per parked fetch (asyncio.wait adds a second future and
        # callbacks; wait_for on Python 3.11 could swallow a cancellation that arrives just after
        # the future completed, and a broker stopping would then keep serving this connection)
        expiry = asyncio.get_running_loop().call_later(timeout_ms / 1000.0, _expire, op.future)
        try:
            got = await op.future
        finally:
            expiry.cancel()
            self.purgatory.unwatch(op)
            session.parked = None
            session.unsent = None  # from here to the response being written nothing waits
        if not cache.is_live(session):
            return {}  # the session ended while this fetch waited (what it got was handed back)
        if got is None:  # MaxWaitMs passed: one last try, answered at once (nothing to hand back later)
            got = try_fill()
            session.unsent = None
        return got  # ({}: woken with nothing)

    def session_ended(self, session: "ShareSession") -> None:
        """A share session was closed, replaced or dropped with its connection: wake its parked
        ShareFetch with nothing, and hand back undelivered what a completed fetch acquired for it
        but has not answered yet (`SharePartition.return_unsent`)."""
        op, unsent = session.parked, session.unsent
        session.parked = session.unsent = None
        if unsent:
            for (topic_id, partition), fetched in unsent.items():
                ctx = self.contexts.get((session.group_id, topic_id, partition))
                if ctx is None:
                    continue
                ranges = [(r.first_offset, r.last_offset) for r in fetched.acquired]
                self.execute(ctx, ctx.share_partition.return_unsent(session.member_id, ranges))
                self.server.metrics.share_fetch_unsent_returned += sum(last - first + 1 for first, last in ranges)
        if op is not None:
            self.purgatory.unwatch(op)
            if not op.future.done():
                op.future.set_result({})

    def complete_parked(self, ctx: ShareContext) -> int:
        """Serve the fetches parked on this share partition while it has records to hand out."""
        return self.purgatory.complete(ctx.key, lambda: self.contexts.get(ctx.key) is ctx and self.acquirable(ctx))

    # ------------------------------------------------------------------ acknowledge and release
    async def acknowledge(self, ctx: ShareContext, member_id: str, batches: Sequence[tuple[int, int, Sequence[int]]],
                          group_config: "cfg.ShareGroupConfig") -> ErrorCode:
        """Apply a member's acknowledgements; the partition's error code (NONE when applied).
        Returns once the change is durable — by then the partition's parked fetches have been
        served with whatever the acknowledgement freed."""
        now_ms = monotonic_ms()
        self.controls.prepare(ctx, group_config, now_ms)
        self.maybe_expire(ctx, group_config, now_ms)
        result = ctx.share_partition.acknowledge(
            member_id, batches, delivery_limit=group_config.delivery_count_limit,
            lock_duration_ms=group_config.record_lock_duration_ms,
            renew_enabled=group_config.renew_acknowledge_enable, now_ms=now_ms,
            dlq_enabled=self.dead_letters.enabled(ctx.group_id, group_config),
        )
        self.execute(ctx, result.effects)
        if result.error != ErrorCode.none:
            return result.error
        if result.write is not None:
            error = await self._persist(ctx, result.write)
            if error != ErrorCode.none:  # rolled back: a storage failure, or the write was refused
                return ErrorCode.kafka_storage_error if error == ErrorCode.kafka_storage_error \
                    else ErrorCode.invalid_record_state
        self.server.metrics.count_acknowledgements(batches)
        return ErrorCode.none

    async def force(self, ctx: ShareContext, operation) -> "ForceResult":
        """Run a force action of `core.in_flight` (`operation(share_partition, now_ms)`) with the
        group's current policy, carry out its effects and await its write: the caller answers once
        the change is durable (or says why it is not)."""
        now_ms = monotonic_ms()
        group_config = self.server.state.group_config(ctx.group_id)
        self.controls.prepare(ctx, group_config, now_ms)
        self.maybe_expire(ctx, group_config, now_ms)
        result = operation(ctx.share_partition, now_ms)
        self.execute(ctx, result.effects)
        if result.error == ErrorCode.none and result.write is not None:
            error = await self._persist(ctx, result.write)
            if error != ErrorCode.none:  # rolled back
                return result._replace(error=error, message=f"the share state write failed ({error.name}); "
                                                            "nothing changed")
        return result

    def release_member(self, group_id: str, member_id: str) -> None:
        """The member's share session ended: release what it holds (delivery counts kept)."""
        now_ms = monotonic_ms()
        dlq_enabled = self.dead_letters.enabled(group_id)
        group_config = self.server.state.group_config(group_id)
        for ctx in list(self.by_group.get(group_id, ())):
            self.controls.prepare(ctx, group_config, now_ms)
            self.execute(ctx, ctx.share_partition.release_member(member_id, delivery_limit=group_config.delivery_count_limit,
                                                                 now_ms=now_ms, dlq_enabled=dlq_enabled))

    def maybe_expire(self, ctx: ShareContext, group_config: "cfg.ShareGroupConfig", now_ms: int) -> None:
        deadline = ctx.share_partition.next_deadline_ms()
        if deadline is not None and deadline <= now_ms:
            self.execute(ctx, ctx.share_partition.expire_locks(delivery_limit=group_config.delivery_count_limit, now_ms=now_ms,
                                                  dlq_enabled=self.dead_letters.enabled(ctx.group_id, group_config)))

    # ------------------------------------------------------------------ effects
    def execute(self, ctx: ShareContext, effects: Sequence[Effect]) -> None:
        """Carry out a share partition's effects."""
        dead: list[DeadLetterWrite] | None = None
        for effect in effects:
            if isinstance(effect, PersistWrite):
                self._spawn_persist(ctx, effect)
            elif isinstance(effect, LockTimer):
                if effect.deadline_ms is None:
                    self.lock_timers.cancel(ctx.key)
                else:
                    self.lock_timers.arm(ctx.key, effect.deadline_ms,
                                         lambda now_ms, ctx=ctx: self._on_lock_timer(ctx, now_ms))
            elif isinstance(effect, WakeFetches):
                self.complete_parked(ctx)
            elif isinstance(effect, DeadLetterWrite):
                if dead is None:
                    dead = []
                dead.append(effect)
        if dead:
            self.dead_letters.submit(ctx, dead)

    def _submit_write(self, ctx: ShareContext, write: PersistWrite) -> asyncio.Future:
        """Queue the write at once, so writes reach the share coordinator in the order the share
        partition started them (each carries the delivery-complete count as of its start)."""
        batches = write.state_batches
        if any(b.due_ms for b in batches):  # quafka's backoff due times are stored as epoch ms
            to_wall = self.controls.to_wall
            batches = tuple(b._replace(due_ms=to_wall(b.due_ms)) if b.due_ms else b for b in batches)
        return self.server.share_coordinator.write(
            ctx.state_key, state_epoch=ctx.state_epoch, start_offset=write.start_offset,
            delivery_complete_count=write.delivery_complete_count, state_batches=batches,
            failed_keys=write.failed_keys)

    async def _persist(self, ctx: ShareContext, write: PersistWrite, fut: asyncio.Future | None = None) -> ErrorCode:
        """Wait for the write, then tell the share partition (commit or roll back); the error."""
        try:
            error = await (fut if fut is not None else self._submit_write(ctx, write))
        except OSError as exc:  # the log directory failed (it is offline now)
            log.error("share state write failed for %s %s-%d: %s", ctx.group_id, ctx.topic.name, ctx.index, exc)
            error = ErrorCode.kafka_storage_error
        except Exception:
            log.exception("share state write failed for %s %s-%d", ctx.group_id, ctx.topic.name, ctx.index)
            error = ErrorCode.unknown_server_error
        ok = error == ErrorCode.none
        if not ok:
            log.warning("share state write for %s %s-%d refused: %s", ctx.group_id, ctx.topic.name, ctx.index,
                        getattr(error, "name", error))
        group_config = self.server.state.group_config(ctx.group_id)
        effects = ctx.share_partition.on_write_complete(
            write.write_id, ok, delivery_limit=group_config.delivery_count_limit, now_ms=monotonic_ms(),
            dlq_enabled=self.dead_letters.enabled(ctx.group_id, group_config))
        if error == ErrorCode.fenced_state_epoch and self.contexts.get(ctx.key) is ctx:
            self._drop(ctx)  # re-initialised meanwhile (AlterShareGroupOffsets): read it again
        elif self.contexts.get(ctx.key) is ctx:
            self.execute(ctx, effects)  # a catch-up write of the start offset; parked fetches served
        return error

    def _spawn_persist(self, ctx: ShareContext, write: PersistWrite) -> None:
        fut = self._submit_write(ctx, write)
        task = asyncio.get_running_loop().create_task(self._persist(ctx, write, fut))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_lock_timer(self, ctx: ShareContext, now_ms: int) -> None:
        if self.contexts.get(ctx.key) is not ctx:
            return
        group_config = self.server.state.group_config(ctx.group_id)
        self.controls.prepare(ctx, group_config, now_ms)
        self.execute(ctx, ctx.share_partition.on_lock_timer(delivery_limit=group_config.delivery_count_limit, now_ms=now_ms,
                                               dlq_enabled=self.dead_letters.enabled(ctx.group_id, group_config)))

    def _on_log_event(self, key: tuple[uuid.UUID, int], event: LogEvent) -> None:
        for ctx in list(self.by_log.get(key, ())):
            if ctx.log is not event.log:
                continue
            if event.kind == "log_start_offset":
                self.execute(ctx, ctx.share_partition.move_start_offset(event.log.log_start_offset))
            else:
                self.complete_parked(ctx)

    def parked(self, group_id: str, topic_id: uuid.UUID, index: int) -> int:
        """ShareFetches parked on one share partition (tests, metrics)."""
        return self.purgatory.parked((group_id, topic_id, index))


def never_delivered(read: BatchRead, committed_in: "PartitionState | None") -> list[tuple[int, int]]:
    """The batches of `read` a share partition archives instead of delivering: control batches
    (transaction markers) always, and with `committed_in` (the partition, at
    `share.isolation.level=read_committed`) the batches of its aborted transactions — a
    transactional batch of producer P inside an aborted transaction of P (first offset <= batch <=
    its ABORT marker), as Kafka's `SharePartition.filterAbortedTransactionalAcquiredRecords` finds
    them from `aborted_transactions`. Reads only the header of each batch."""
    data, extents = read.data, read.extents
    found: list[tuple[int, int]] = []
    aborted = None
    pos = 0
    for extent in extents:
        start, pos = pos, extent.end
        attributes = data[start + _ATTRIBUTES_LOW_BYTE]  # (the flags are in the low byte; no unpacking)
        if not attributes & TRANSACTIONAL_FLAG:
            continue  # (control batches are transactional too)
        if attributes & CONTROL_FLAG:
            found.append((extent.base_offset, extent.last_offset))
            continue
        if committed_in is None:
            continue
        header = read_header(data, start)
        if aborted is None:
            aborted = committed_in.aborted_transactions(extents[0].base_offset, extents[-1].last_offset + 1)
        if any(t.producer_id == header.producer_id and t.first_offset <= extent.base_offset <= t.last_offset
               for t in aborted):
            found.append((extent.base_offset, extent.last_offset))
    return found


def _expire(future: asyncio.Future) -> None:
    """A parked fetch's MaxWaitMs passed: it completes with None (one last try follows)."""
    if not future.done():
        future.set_result(None)


async def _stored(fut: asyncio.Future, key: records.ShareStateKey) -> ErrorCode | None:
    """The error code of a share-state operation; a storage failure is logged and refused."""
    try:
        return await fut
    except OSError as exc:
        log.warning("share state of %s unavailable: %s", key, exc)
        return ErrorCode.kafka_storage_error


def _log_failed_delete(fut: asyncio.Future) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("deleting share state failed: %s", fut.exception())
