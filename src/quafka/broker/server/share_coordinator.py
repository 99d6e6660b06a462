"""The asyncio shell of the share coordinator: `__share_group_state` on this node.

The pure `ShareCoordinator` (broker/core/share_coordinator.py) answers the persister's operations
— Initialize, Read, Write, Delete, ReadSummary — with the ShareSnapshot/ShareUpdate records to
append; this module appends them and replays them into the coordinator ("records are the truth").

Records first: an operation's records are computed from the coordinator without changing it, appended,
and only then replayed into it — DescribeShareGroupOffsets and ReadShareGroupStateSummary never see
state that is not stored, and a failed append leaves the coordinator as it was. Every operation, the
share-partition leader's first read included, goes through the same queue (there is no "answer now,
write later" path).

Writes to one state partition are batched: while a round of writes is in flight (its records
appended, its fsync not yet done), new operations queue; the next round takes all of them, runs
them one after the other (each appended and replayed before the next is computed, so it sees the
records of the one before) and fsyncs once on the flusher's worker thread (group commit). With no
round in flight and no fsync to wait for (flush off, the default), an operation is its own round
and runs at once: the append is synchronous, so the caller's future is already resolved when it
awaits it. A caller is answered only when its records are durable:

- always: the records are written to the segment file before the answer (they survive SIGKILL of
  the broker process);
- with flush enabled for the state topic (`flush.messages` / `log.flush.interval.messages` set to
  anything but its default, the maximum long): also fsynced, once per round of waiters.

A failed append or fsync fails every waiter of its round with the OSError (the log directory is
then offline: server.BrokerServer.on_log_dir_failure).

On start-up every state partition is replayed from its log start offset: each batch's CRC is
checked and a batch that fails it (or does not decode) is dropped and logged, never applied. A torn
tail — the realistic case, a write cut short by a crash — has already been cut by the file log's
recovery, so the state is the last state whose records were written whole. Until a partition is
replayed, the coordinator answers COORDINATOR_LOAD_IN_PROGRESS.

Upkeep timers: every `share.coordinator.state.topic.prune.interval.ms` the log start offset of each
state partition moves up to the first record still needed (the latest snapshots); every
`share.coordinator.cold.partition.snapshot.interval.ms` share partitions with updates but no recent
write get a fresh snapshot so their older records can be pruned.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Callable, Sequence

from quafka.broker.core.share_coordinator import ReadSummaryResult, ShareCoordinator
from quafka.broker.storage import Log
from quafka.broker.storage.base import MAX_LONG
from quafka.protocol.share_state_records import (
    SHARE_GROUP_STATE_TOPIC,
    ShareStateKey,
    ShareStateRecord,
    StateBatch,
    decode_share_state_record,
    encode_share_state_record,
)

from .clock import wall_clock_ms
from .internal_log import append_records, verified_records

if TYPE_CHECKING:
    from ._services import BrokerServices

log = logging.getLogger("quafka.share_coordinator")

LEADER_EPOCH = 0  # one node: every partition keeps leader epoch 0

Op = Callable[[], tuple[object, list[ShareStateRecord]]]

__all__ = ["LEADER_EPOCH", "ShareCoordinatorService"]


class ShareCoordinatorService:
    def __init__(self, server: "BrokerServices") -> None:
        self.server = server
        config = server.state.config
        self.num_partitions = int(config.get("share.coordinator.state.topic.num.partitions"))
        self.coordinator = ShareCoordinator(
            self.num_partitions, int(config.get("share.coordinator.snapshot.update.records.per.snapshot")))
        self.loaded = False
        self._topic = None  # __share_group_state's TopicState, once created or found
        self._queues: dict[int, list[tuple[Op, asyncio.Future]]] = {}
        self._draining: set[int] = set()
        self._tasks: list[asyncio.Task] = []
        self.load_time_ms = 0.0
        self.load_buffer_bytes = int(config.get("share.coordinator.load.buffer.size"))
        self.rounds = 0  # write rounds (batches of waiters), for tests and metrics
        self.write_time_ms_total = 0.0
        # the partitions' log end offsets as the logs came back at start-up, before any listener
        # opened: share state past them describes records the logs lost (`_truncate_past_log_ends`)
        self._log_ends_at_start = {(topic.topic_id, p.index): p.log.log_end_offset
                                   for topic in server.state.topics.values() for p in topic.partitions}

    # ------------------------------------------------------------------ topic
    def _logs(self) -> list[Log] | None:
        topic = self.server.state.topics.get(SHARE_GROUP_STATE_TOPIC)
        return None if topic is None else [p.log for p in topic.partitions]

    def _log(self, partition: int) -> Log:
        topic = self._topic
        if topic is None or self.server.state.topics.get(SHARE_GROUP_STATE_TOPIC) is not topic:
            config = self.server.state.config
            topic = self._topic = self.server.state.ensure_internal_topic(SHARE_GROUP_STATE_TOPIC, self.num_partitions, {
                "segment.bytes": str(config.get("share.coordinator.state.topic.segment.bytes")),
                "retention.ms": "-1",
            })
            if len(topic.partitions) != self.num_partitions:  # the topic predates a changed setting: keep it
                self.num_partitions = self.coordinator.num_partitions = len(topic.partitions)
        return topic.partitions[partition].log

    # ------------------------------------------------------------------ start-up
    async def load(self) -> None:
        """Replay every state partition (yielding between partitions so requests meanwhile get
        COORDINATOR_LOAD_IN_PROGRESS), then start the upkeep timers."""
        started = asyncio.get_running_loop().time()
        logs = self._logs()
        if logs is not None and len(logs) != self.num_partitions:
            log.warning("%s has %d partitions (share.coordinator.state.topic.num.partitions is %d): using %d",
                        SHARE_GROUP_STATE_TOPIC, len(logs), self.num_partitions, len(logs))
            self.num_partitions = self.coordinator.num_partitions = len(logs)
        load_times_ms = self.server.metrics.share_state_partition_load_ms
        load_times_ms.clear()
        for p in range(self.num_partitions):
            partition_started = asyncio.get_running_loop().time()
            self.coordinator.begin_loading(p)
            if logs is not None:
                self._replay_partition(p, logs[p])
            self.coordinator.finish_loading(p)
            if logs is not None:
                self._truncate_past_log_ends(p)  # before anything reads this partition's state
            load_times_ms.append((asyncio.get_running_loop().time() - partition_started) * 1000.0)
            if p % 8 == 7:
                await asyncio.sleep(0)
        self.loaded = True
        self.load_time_ms = (asyncio.get_running_loop().time() - started) * 1000.0
        if logs is not None:
            log.info("replayed %s in %.0f ms: %d share partition(s)", SHARE_GROUP_STATE_TOPIC, self.load_time_ms,
                     len(self.coordinator.keys()))
        self._tasks.append(asyncio.create_task(self._prune_loop(), name="share-state-prune"))
        self._tasks.append(asyncio.create_task(self._cold_snapshot_loop(), name="share-state-snapshots"))

    def _truncate_past_log_ends(self, partition: int) -> None:
        """Cut the state of this state partition's share partitions at their partition's log end as
        it was at start-up (`ShareCoordinator.truncate`), with a warning for each.

        With log flush off (the default), a machine crash can cut the unflushed tail of a data log
        while the share-state write that followed it survived: the stored start offset and state
        batches then reach past the log end, and records produced at those offsets after the
        restart would be read against stale state — past the stored start offset nothing is
        fetched until the log grows beyond it, and offsets in stored ACKNOWLEDGED or ARCHIVED
        batches are skipped — so they would never be delivered, silently. Kafka takes the stored
        start offset as it is (`SharePartition.maybeInitialize`; a fetch past the log end gets
        OFFSET_OUT_OF_RANGE, on which `ShareFetchUtils.processFetchResponse` moves the start
        offset to the log start only if that is later); quafka cuts the state instead. The log
        end is the one of start-up: a record produced since is a new one. A start offset set past
        the log end by AlterShareGroupOffsets is cut too if the broker restarts before the log
        reaches it. Done while the partition loads, before any request can read its state; a
        failed append is logged (the log directory is then offline)."""
        log_ends = self._log_ends_at_start
        for key in self.coordinator.partition_keys(partition):
            log_end = log_ends.get((key.topic_id, key.partition))
            st = self.coordinator.state(key)
            if log_end is None or st is None:
                continue
            past = max([st.start_offset - 1] + [b.last_offset for b in st.state_batches])
            if past < log_end:
                continue
            try:
                self._apply(partition, [lambda key=key, st=st, log_end=log_end: self.coordinator.truncate(
                    key, state_epoch=st.state_epoch, log_end_offset=log_end, now_ms=wall_clock_ms())])
            except OSError as exc:
                log.error("share state of %s %s-%d reaches past the log end %d; cutting it failed: %s",
                          key.group_id, key.topic_id, key.partition, log_end, exc)
                continue
            topic = self.server.state.topics_by_id.get(key.topic_id)
            log.warning("share state of group %s on %s-%d reaches offset %d (start offset %d) but the log ends at "
                        "%d: the log lost its tail after the state was written (a machine crash with log flush "
                        "off?); the state past the log end is dropped, the start offset is now %d, and records "
                        "produced from there are delivered", key.group_id,
                        topic.name if topic is not None else key.topic_id, key.partition, past, st.start_offset,
                        log_end, min(st.start_offset, log_end))
        plog = self._log(partition)
        if self.flush_enabled(plog) and plog.flushed_offset < plog.log_end_offset:
            self.server.flusher.flush_in_background(plog)

    def _replay_partition(self, partition: int, plog: Log) -> None:
        """Replay one state partition (batches that fail their CRC or do not decode are dropped)."""
        for offset, record in verified_records(plog, decode_share_state_record, chunk_bytes=self.load_buffer_bytes):
            self.coordinator.replay(partition, offset, record)

    # ------------------------------------------------------------------ the persister's operations
    # Each returns a future that resolves with the operation's result once its records are
    # appended (and fsynced when flush is on); nothing is visible in the coordinator before that.

    def read(self, key: ShareStateKey) -> asyncio.Future:
        """ReadShareGroupState (the share-partition leader's first use of a share partition): a
        newer leader epoch is recorded first, so the answer is only given once it is stored."""
        return self._submit(self.coordinator.partition_for(key), lambda: self.coordinator.read(
            key, leader_epoch=LEADER_EPOCH, now_ms=wall_clock_ms()))

    async def read_summary(self, key: ShareStateKey) -> ReadSummaryResult:
        """ReadShareGroupStateSummary: what is stored — the coordinator holds only appended records,
        and with flush on this waits until they are fsynced too (a start offset whose fsync then
        failed must not be shown). Raises the OSError of a failed fsync."""
        topic = self.server.state.topics.get(SHARE_GROUP_STATE_TOPIC)
        if topic is not None:
            plog = topic.partitions[self.coordinator.partition_for(key) % len(topic.partitions)].log
            if self.flush_enabled(plog) and plog.flushed_offset < plog.log_end_offset:
                await self.server.flusher.flush(plog, plog.log_end_offset)
        return self.coordinator.read_summary(key, leader_epoch=LEADER_EPOCH)

    def initialize(self, key: ShareStateKey, *, state_epoch: int, start_offset: int) -> asyncio.Future:
        """InitializeShareGroupState."""
        return self._submit(self.coordinator.partition_for(key), lambda: self.coordinator.initialize(
            key, state_epoch=state_epoch, start_offset=start_offset, now_ms=wall_clock_ms()))

    def initialize_if_absent(self, key: ShareStateKey, *, state_epoch: int, start_offset: int) -> asyncio.Future:
        """InitializeShareGroupState unless the key has state when the round runs: the future
        resolves with None then (nothing written). The share-partition leader's first fetch and the
        group coordinator's initialisation of newly assigned partitions may race (with flush on,
        both can be queued before either is stored): the second must not re-initialise."""
        def op() -> tuple[object, list[ShareStateRecord]]:
            if self.coordinator.state(key) is not None:
                return None, []
            return self.coordinator.initialize(key, state_epoch=state_epoch, start_offset=start_offset,
                                           now_ms=wall_clock_ms())
        return self._submit(self.coordinator.partition_for(key), op)

    def write(self, key: ShareStateKey, *, state_epoch: int, start_offset: int, delivery_complete_count: int,
              state_batches: Sequence[StateBatch] = (), failed_keys: tuple | None = None) -> asyncio.Future:
        """WriteShareGroupState: queued now (writes of one state partition are applied in the
        order they are submitted); the future resolves with the error code once durable.
        `failed_keys` (quafka's key ordering) replaces the stored set when not None."""
        return self._submit(self.coordinator.partition_for(key), lambda: self.coordinator.write(
            key, state_epoch=state_epoch, leader_epoch=LEADER_EPOCH, start_offset=start_offset,
            delivery_complete_count=delivery_complete_count, state_batches=state_batches, now_ms=wall_clock_ms(),
            failed_keys=failed_keys))

    def delete(self, key: ShareStateKey) -> asyncio.Future:
        """DeleteShareGroupState: a tombstone for the share partition."""
        return self._submit(self.coordinator.partition_for(key), lambda: self.coordinator.delete(key, now_ms=wall_clock_ms()))

    # ------------------------------------------------------------------ write rounds
    def _submit(self, partition: int, op: Op) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        if partition not in self._draining and not self.flush_enabled(self._log(partition)):
            # Nothing in flight and nothing to fsync: the round is this one operation, run now
            # (the append is synchronous), so the caller's `await` does not wait for a task.
            self._round(partition, [(op, fut)])
            return fut
        self._queues.setdefault(partition, []).append((op, fut))
        if partition not in self._draining:
            self._draining.add(partition)
            self._spawn(self._drain(partition))
        return fut

    async def _drain(self, partition: int) -> None:
        try:
            while self._queues.get(partition):
                waiting = self._queues.pop(partition)
                started = asyncio.get_running_loop().time()
                try:
                    results = self._apply(partition, [op for op, _ in waiting])
                    plog = self._log(partition)
                    await self.server.flusher.flush(plog, plog.log_end_offset)
                except Exception as exc:  # noqa: BLE001 - every waiter gets the failure
                    self._fail(partition, waiting, exc)
                    continue
                self._answer(waiting, results, started)
        finally:
            self._draining.discard(partition)

    def _round(self, partition: int, waiting: list[tuple[Op, asyncio.Future]]) -> None:
        """One round without an fsync to wait for: apply, append, answer — synchronously."""
        started = asyncio.get_running_loop().time()
        try:
            results = self._apply(partition, [op for op, _ in waiting])
        except Exception as exc:  # noqa: BLE001 - every waiter gets the failure
            self._fail(partition, waiting, exc)
            return
        self._answer(waiting, results, started)

    @staticmethod
    def _fail(partition: int, waiting: list[tuple[Op, asyncio.Future]], exc: Exception) -> None:
        if isinstance(exc, OSError):
            log.error("%s-%d: write failed: %s", SHARE_GROUP_STATE_TOPIC, partition, exc)
        else:
            log.exception("%s-%d: write failed", SHARE_GROUP_STATE_TOPIC, partition, exc_info=exc)
        for _op, fut in waiting:
            if not fut.done():
                fut.set_exception(exc)

    def _answer(self, waiting: list[tuple[Op, asyncio.Future]], results: list[object], started: float) -> None:
        self.rounds += 1
        elapsed_ms = (asyncio.get_running_loop().time() - started) * 1000.0
        self.write_time_ms_total += elapsed_ms
        metrics = self.server.metrics
        metrics.share_state_writes += len(waiting)
        metrics.share_state_write_time_ms.observe(elapsed_ms)
        for (_op, fut), result in zip(waiting, results):
            if not fut.done():
                fut.set_result(result)

    def _apply(self, partition: int, ops: list[Op]) -> list[object]:
        """Records first: each operation's records are computed from the coordinator (which they do
        not change), appended as one batch, and only then replayed into the coordinator at the
        offsets they got — so the next operation sees them, and a failed append leaves the
        coordinator as it was (the operations before it are stored and replayed; the round fails as
        a whole, since their fsync will not come). The order is Kafka's CoordinatorRuntime
        less its snapshot-and-revert: nothing is applied that was not written."""
        plog = self._log(partition)
        results: list[object] = []
        for op in ops:
            result, records = op()
            if records:
                first_offset = plog.log_end_offset
                append_records(plog, [encode_share_state_record(r) for r in records], wall_clock_ms())
                for i, record in enumerate(records):
                    self.coordinator.replay(partition, first_offset + i, record)
            results.append(result)
        return results

    def flush_enabled(self, plog: Log) -> bool:
        return plog.config.flush_messages < MAX_LONG

    def state_flush_enabled(self, key: ShareStateKey) -> bool:
        """Whether the key's share-state writes are fsynced before they are answered."""
        return self.flush_enabled(self._log(self.coordinator.partition_for(key)))

    # ------------------------------------------------------------------ upkeep
    def prune(self) -> dict[int, int]:
        """Move each state partition's log start offset up to the first record still needed."""
        logs = self._logs()
        moved: dict[int, int] = {}
        if logs is None:
            return moved
        for p, plog in enumerate(logs):
            offset = self.coordinator.prune_offset(p)
            if offset is not None and offset > plog.log_start_offset:
                moved[p] = plog.delete_records_before(offset)
        if moved:
            log.debug("pruned %s partitions %s", SHARE_GROUP_STATE_TOPIC, sorted(moved))
        return moved

    async def snapshot_cold_partitions(self) -> int:
        """Snapshot share partitions with updates but no write for the cold interval."""
        interval_ms = int(self.server.state.config.get("share.coordinator.cold.partition.snapshot.interval.ms"))
        now_ms = wall_clock_ms()
        waits = []
        for p in range(self.num_partitions):
            if self.coordinator.cold_snapshots(p, now_ms=now_ms, interval_ms=interval_ms):
                waits.append(self._submit(p, lambda p=p: self._cold_snapshots(p, interval_ms)))
        count = 0
        for fut in waits:
            count += await fut
        return count

    def _cold_snapshots(self, partition: int, interval_ms: int) -> tuple[int, list[ShareStateRecord]]:
        """Computed when the round runs, from the state as it is then: a write queued before
        must not be folded over by a snapshot taken earlier."""
        records = self.coordinator.cold_snapshots(partition, now_ms=wall_clock_ms(), interval_ms=interval_ms)
        return len(records), records

    async def _prune_loop(self) -> None:
        while True:
            await asyncio.sleep(int(self.server.state.config.get(
                "share.coordinator.state.topic.prune.interval.ms")) / 1000.0)
            try:
                self.prune()
            except Exception:
                log.exception("pruning %s failed", SHARE_GROUP_STATE_TOPIC)

    async def _cold_snapshot_loop(self) -> None:
        while True:
            await asyncio.sleep(int(self.server.state.config.get(
                "share.coordinator.cold.partition.snapshot.interval.ms")) / 1000.0)
            try:
                await self.snapshot_cold_partitions()
            except Exception:
                log.exception("snapshotting cold share partitions failed")

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

