"""The asyncio shell of the transaction coordinator: `__transaction_state` on this node.

The pure `TransactionCoordinator` (broker/core/transaction_coordinator.py) answers the transaction
APIs with effects; this module carries them out, as Kafka's `TransactionStateManager`
(appendTransactionToLog, loadTransactionsForTxnTopicPartition) and
`TransactionMarkerChannelManager` do around `TransactionCoordinator`:

- `AppendTxnRecord`: the record is appended to its `__transaction_state` partition, then
  `on_write_complete(write_id, offset)` replays it into the coordinator and gives the answer (or
  `on_write_failed` maps the append error). One write in flight per partition: writes asked for
  meanwhile queue and go together as one batch when it completes (and its fsync, when flush is
  enabled for the topic), so batching falls out of it.
- `WriteTxnMarkers`: the broker is its own marker target. COMMIT/ABORT control batches are written
  through the log side's `write_txn_markers` (server/txn_markers.py); partitions that failed are
  retried with a growing backoff (logged), the others reported with `on_markers_written`.
  Markers on a `__consumer_offsets` partition also settle the producer's pending transactional
  offsets there (`ConsumerOffsetsService.on_txn_marker`).

Start-up: every partition is replayed between `begin_loading` and `finish_loading` (requests meanwhile
get COORDINATOR_LOAD_IN_PROGRESS); transactions found in PrepareCommit/PrepareAbort resume their
markers. Timers: `transaction.abort.timed.out.transaction.cleanup.interval.ms` aborts transactions
past their timeout (TransactionCoordinator.abortTimedOutTransactions);
`transaction.remove.expired.transaction.cleanup.interval.ms` tombstones transactional ids idle
for `transactional.id.expiration.ms` (TransactionStateManager.removeExpiredTransactionalIds).

Producer ids come from the broker's `ProducerIdAllocator` (BrokerState.allocate_producer_id).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Iterable

from quafka.broker.core.transaction_coordinator import (
    AppendTxnRecord,
    Outcome,
    TransactionCoordinator,
    TxnResult,
    WriteTxnMarkers,
)
from quafka.broker.core.transaction_state import TV_2, TopicPartition
from quafka.broker.storage import Log
from quafka.broker.storage.base import MAX_LONG
from quafka.protocol.coordinator_record_codec import CONSUMER_OFFSETS_TOPIC
from quafka.protocol.errors import ErrorCode
from quafka.protocol.transaction_log_records import (
    TRANSACTION_STATE_TOPIC,
    decode_transaction_log_record,
    encode_transaction_log_record,
)

from .clock import wall_clock_ms
from .internal_log import append_records, ensure_compacted, verified_records

if TYPE_CHECKING:
    from ._services import BrokerServices

log = logging.getLogger("quafka.transactions")


def markers_writer():
    """The log side's `write_txn_markers(server, producer_id, producer_epoch, coordinator_epoch,
    committed, partitions) -> {TopicPartition: ErrorCode}` (server/txn_markers.py), or None in a
    build without control batches (then markers are retried with backoff and never written)."""
    try:
        from .txn_markers import write_txn_markers
    except ImportError:
        return None
    return write_txn_markers

__all__ = ["TransactionCoordinatorService", "TRANSACTION_VERSION_FEATURE"]

TRANSACTION_VERSION_FEATURE = "transaction.version"
# A partition that refuses a marker with these holds a newer producer or coordinator epoch: Kafka's
# TransactionMarkerRequestCompletionHandler stops sending the transaction's markers then (they can
# be ignored); quafka counts the partition as written, so the transaction still completes.
GIVE_UP_MARKER_ERRORS = (ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced)
MARKER_RETRY_INITIAL_MS = 100
WRITE_RETRY_BACKOFF_MS = 100
MARKER_RETRY_MAX_MS = 5_000


_RETRIABLE_FOR_PRODUCE = (ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator,
                          ErrorCode.coordinator_not_available, ErrorCode.concurrent_transactions)


def _produce_error(error: ErrorCode, tv2: bool) -> ErrorCode:
    """A verification error as a produce answer (see `verify_produce`)."""
    if error is ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if error is ErrorCode.transaction_abortable and not tv2:
        return ErrorCode.invalid_txn_state
    if error in _RETRIABLE_FOR_PRODUCE:
        return ErrorCode.not_enough_replicas
    return error


class TransactionCoordinatorService:
    def __init__(self, server: "BrokerServices") -> None:
        self.server = server
        config = server.state.config
        self.num_partitions = int(config.get("transaction.state.log.num.partitions"))
        self.coordinator = TransactionCoordinator(
            server.state.allocate_producer_id,
            num_partitions=self.num_partitions,
            transaction_max_timeout_ms=int(config.get("transaction.max.timeout.ms")),
            transactional_id_expiration_ms=int(config.get("transactional.id.expiration.ms")),
            transaction_version_level=self._transaction_version_level(),
            offsets_num_partitions=int(config.get("offsets.topic.num.partitions")))
        self.loaded = False
        self._waiters: dict[int, asyncio.Future] = {}  # write id -> the request's answer
        self._queues: dict[int, list[AppendTxnRecord]] = {}
        self._draining: set[int] = set()
        self._tasks: set[asyncio.Task] = set()
        self._loops: list[asyncio.Task] = []
        self.markers_in_flight: dict[str, WriteTxnMarkers] = {}  # for tests and `describe`
        self.writes = 0  # records appended, for tests and metrics

    def _transaction_version_level(self) -> int:
        try:
            return self.server.state.feature_level(TRANSACTION_VERSION_FEATURE)
        except (AssertionError, KeyError):
            return TV_2

    def _now_ms(self) -> int:
        return wall_clock_ms()

    # ------------------------------------------------------------------ topic
    def topic_configs(self) -> dict[str, str]:
        """The configs `__transaction_state` is created with, as Kafka's
        TransactionStateManager.transactionTopicConfigs: compacted (one record per transactional id
        is the state, a tombstone removes an expired id), segments of
        `transaction.state.log.segment.bytes`. (Kafka also sets compression.type=uncompressed,
        which is how quafka writes it, and min.insync.replicas / unclean.leader.election.enable,
        which mean nothing on one node.)"""
        config = self.server.state.config
        return {"cleanup.policy": "compact",
                "segment.bytes": str(int(config.get("transaction.state.log.segment.bytes")))}

    def _topic(self):
        """`__transaction_state`, created on its first write (as `__consumer_offsets` and
        `__share_group_state` are): a broker that never sees a transactional producer has none."""
        topic = self.server.state.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            topic = self.server.state.ensure_internal_topic(TRANSACTION_STATE_TOPIC, self.num_partitions,
                                                            self.topic_configs())
        return topic

    def _log(self, partition: int) -> Log:
        return self._topic().partitions[partition].log

    # ------------------------------------------------------------------ start-up
    async def load(self) -> None:
        """Replay each partition of `__transaction_state` (all of them are this node's), resume the
        markers of transactions found in PrepareCommit/PrepareAbort and start the timers. The log
        may have been compacted: offsets with gaps, only each id's latest record, tombstones of
        expired ids (replay removes the id) — a replay of the latest record per id is the state.
        A topic created before quafka compacted it (retention.ms=-1) is made compacted."""
        ensure_compacted(self.server.state, TRANSACTION_STATE_TOPIC, self.topic_configs())
        topic = self.server.state.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is not None and len(topic.partitions) != self.num_partitions:
            log.warning("%s has %d partitions (transaction.state.log.num.partitions is %d): using %d",
                        TRANSACTION_STATE_TOPIC, len(topic.partitions), self.num_partitions, len(topic.partitions))
            self.num_partitions = self.coordinator.num_partitions = len(topic.partitions)
        chunk = int(self.server.state.config.get("transaction.state.log.load.buffer.size"))
        effects: list = []
        for p in range(self.num_partitions):
            self.coordinator.begin_loading(p)
            if topic is None:
                effects.extend(self.coordinator.finish_loading(p, self._now_ms()))
                continue
            part = topic.partitions[p]
            for offset, record in verified_records(part.log, decode_transaction_log_record, chunk_bytes=chunk):
                try:
                    self.coordinator.replay(p, offset, record)
                except ValueError as exc:  # a record in the wrong partition, a PrepareEpochFence record
                    log.error("%s-%d: record at offset %d not replayed: %s", TRANSACTION_STATE_TOPIC, p, offset, exc)
            effects.extend(self.coordinator.finish_loading(p, self._now_ms()))
            if p % 8 == 7:
                await asyncio.sleep(0)
        self.loaded = True
        count = len(self.coordinator.durable_state())
        if count:
            log.info("replayed %s: %d transactional id(s)", TRANSACTION_STATE_TOPIC, count)
        self._carry_out(effects)
        self._loops.append(asyncio.create_task(self._timer_loop(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms", self.abort_timed_out_transactions),
            name="transaction-timeouts"))
        self._loops.append(asyncio.create_task(self._timer_loop(
            "transaction.remove.expired.transaction.cleanup.interval.ms", self.expire_transactional_ids),
            name="transactional-id-expiry"))

    # ------------------------------------------------------------------ requests
    async def run(self, outcome: Outcome) -> TxnResult:
        """Carry out a request's outcome; the answer once its record (if any) is durable."""
        waiter = None
        for effect in outcome.effects:
            if isinstance(effect, AppendTxnRecord) and outcome.result is None and waiter is None:
                waiter = asyncio.get_running_loop().create_future()
                self._waiters[effect.write_id] = waiter
        self._carry_out(outcome.effects)
        if outcome.result is not None:
            return outcome.result
        if waiter is None:  # the core always pairs a None result with a write
            log.error("a transaction request got neither an answer nor a write: %r", outcome)
            return TxnResult(ErrorCode.unknown_server_error)
        return await waiter

    def _carry_out(self, effects: Iterable) -> None:
        for effect in effects:
            if isinstance(effect, AppendTxnRecord):
                self._submit(effect)
            elif isinstance(effect, WriteTxnMarkers):
                self.markers_in_flight[effect.transactional_id] = effect
                self._spawn(self._write_markers(effect), f"txn-markers-{effect.transactional_id}")
            else:
                log.error("unknown transaction coordinator effect %r", effect)

    def _answer(self, write_id: int, outcome: Outcome) -> None:
        waiter = self._waiters.pop(write_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(outcome.result if outcome.result is not None else TxnResult(ErrorCode.none))
        self._carry_out(outcome.effects)

    # ------------------------------------------------------------------ appends
    def _submit(self, write: AppendTxnRecord) -> None:
        self._queues.setdefault(write.partition, []).append(write)
        if write.partition not in self._draining:
            self._draining.add(write.partition)
            self._spawn(self._drain(write.partition), f"txn-log-{write.partition}")

    async def _drain(self, partition: int) -> None:
        """One write in flight per partition: what queued meanwhile goes as one batch."""
        try:
            while self._queues.get(partition):
                writes = self._queues.pop(partition)
                try:
                    plog = self._log(partition)
                    if not plog.health.online:
                        raise plog.health.offline_error()
                    first = plog.log_end_offset
                    end = append_records(plog, [encode_transaction_log_record(w.record) for w in writes],
                                         self._now_ms())
                    if plog.config.flush_messages < MAX_LONG:
                        await self.server.flusher.flush(plog, end)
                except Exception as exc:  # noqa: BLE001 - every waiter gets the failure
                    if isinstance(exc, OSError):
                        log.error("%s-%d: appending %d record(s) failed: %s", TRANSACTION_STATE_TOPIC, partition,
                                  len(writes), exc)
                        error = ErrorCode.kafka_storage_error
                    else:
                        log.exception("%s-%d: appending %d record(s) failed", TRANSACTION_STATE_TOPIC, partition,
                                      len(writes))
                        error = ErrorCode.unknown_server_error
                    for w in writes:
                        self._answer(w.write_id, self.coordinator.on_write_failed(w.write_id, error, self._now_ms()))
                    # a complete record is written again (its markers are in): not in a tight loop,
                    # and letting the loop run (a failed log directory stops the broker)
                    await asyncio.sleep(WRITE_RETRY_BACKOFF_MS / 1000.0)
                    continue
                self.writes += len(writes)
                for i, w in enumerate(writes):
                    self._answer(w.write_id, self.coordinator.on_write_complete(w.write_id, first + i, self._now_ms()))
        finally:
            self._draining.discard(partition)

    # ------------------------------------------------------------------ markers
    async def _write_markers(self, markers: WriteTxnMarkers) -> None:
        """Write the control batches; retry failed partitions with a growing backoff until they
        are written (Kafka's TransactionMarkerRequestCompletionHandler retries retriable errors
        the same way). The coordinator then writes the complete record."""
        remaining = set(markers.partitions)
        backoff_ms = MARKER_RETRY_INITIAL_MS
        coordinator_epoch = 0  # one node: the coordinator epoch of every partition stays 0
        try:
            while remaining:
                write_txn_markers = markers_writer()
                if write_txn_markers is None:
                    log.error("transactional id %s: no control-batch writer in this build (txn_markers); markers "
                              "for %d partition(s) wait", markers.transactional_id, len(remaining))
                    await asyncio.sleep(MARKER_RETRY_MAX_MS / 1000.0)
                    continue
                errors = await write_txn_markers(self.server, markers.producer_id, markers.producer_epoch,
                                                 coordinator_epoch, markers.committed, sorted(remaining))
                for tp in sorted(remaining):
                    if errors.get(tp) in GIVE_UP_MARKER_ERRORS:
                        log.warning("transactional id %s: %s marker of producer %d epoch %d on %s-%d refused (%s): the "
                                    "partition has a newer producer or coordinator epoch; counted as written",
                                    markers.transactional_id, "COMMIT" if markers.committed else "ABORT",
                                    markers.producer_id, markers.producer_epoch, tp[0], tp[1], errors[tp].name)
                done = {tp for tp in remaining if errors.get(tp, ErrorCode.none) in (ErrorCode.none, *GIVE_UP_MARKER_ERRORS)}
                self._settle_offsets(markers, done)
                remaining -= done
                if done:
                    self._carry_out(self.coordinator.on_markers_written(markers.transactional_id, done,
                                                                        self._now_ms()))
                if remaining:
                    log.warning("transactional id %s: %s markers not written to %s (%s); retrying in %d ms",
                                markers.transactional_id, "COMMIT" if markers.committed else "ABORT",
                                ", ".join(f"{t}-{p}" for t, p in sorted(remaining)),
                                ", ".join(sorted({errors[tp].name for tp in remaining})), backoff_ms)
                    await asyncio.sleep(backoff_ms / 1000.0)
                    backoff_ms = min(backoff_ms * 2, MARKER_RETRY_MAX_MS)
        finally:
            if self.markers_in_flight.get(markers.transactional_id) is markers:
                del self.markers_in_flight[markers.transactional_id]

    def _settle_offsets(self, markers: WriteTxnMarkers, partitions: Iterable[TopicPartition]) -> None:
        offsets = getattr(self.server, "consumer_offsets", None)
        if offsets is None:
            return
        for topic, partition in partitions:
            if topic == CONSUMER_OFFSETS_TOPIC:
                offsets.on_txn_marker(partition, markers.producer_id, markers.committed)

    # ------------------------------------------------------------------ produce verification
    async def verify_produce(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             topic_partitions: Iterable[TopicPartition], transaction_version: int | None = None,
                             *, for_produce: bool = True) -> dict[TopicPartition, ErrorCode]:
        """KIP-890 part 1, for the produce path: is each partition in the ongoing transaction of
        (producer id, epoch)? Kafka's ReplicaManager asks the coordinator with a verify-only
        AddPartitionsToTxn (AddPartitionsToTxnManager); here the coordinator is local
        (TransactionCoordinator.handleVerifyPartitionsInTransaction). With transaction version 2
        the producer does not add partitions itself: the partition is added implicitly
        (AddPartitionsToTxn v5 from the leader, handleAddPartitionsToTransaction with
        clientTransactionVersion 2) when the transaction is ongoing or its producer starts a new
        one. `transaction_version` is the client's (Produce v12+ and TxnOffsetCommit v5+ mean 2, as
        KafkaApis decides); None takes the one the transaction was started with.

        `for_produce`: the errors as the produce path answers them (AddPartitionsToTxnManager's
        handler: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE becomes
        INVALID_TXN_STATE for clients below the latest produce version, i.e. not transaction
        version 2; the coordinator's retriable COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR,
        COORDINATOR_NOT_AVAILABLE and CONCURRENT_TRANSACTIONS become NOT_ENOUGH_REPLICAS, which
        every producer retries)."""
        tps = tuple(topic_partitions)
        verified = self.coordinator.handle_verify_partitions(transactional_id, producer_id, producer_epoch, tps)
        result = verified.result
        assert result is not None
        errors = dict(result.partition_errors) or {tp: result.error for tp in tps}
        meta = self.coordinator.metadata(transactional_id)
        if transaction_version is None:
            transaction_version = meta.client_transaction_version if meta is not None else 0
        missing = [tp for tp, error in errors.items() if error is not ErrorCode.none]
        if missing and meta is not None and transaction_version >= TV_2:
            # the add checks the producer and the state itself (a TV2 producer may start a
            # transaction this way)
            added = await self.run(self.coordinator.handle_add_partitions(
                transactional_id, producer_id, producer_epoch, missing, self._now_ms(), TV_2))
            errors.update(dict(added.partition_errors) or {tp: added.error for tp in missing})
        if for_produce:
            tv2 = transaction_version >= TV_2
            errors = {tp: _produce_error(error, tv2) for tp, error in errors.items()}
        return errors

    # ------------------------------------------------------------------ timers
    def abort_timed_out_transactions(self) -> int:
        effects = self.coordinator.abort_timed_out_transactions(self._now_ms())
        for effect in effects:
            log.info("transactional id %s: transaction timed out; aborting it", effect.record.transactional_id)
        self._carry_out(effects)
        return len(effects)

    def expire_transactional_ids(self) -> int:
        effects = self.coordinator.expire_transactional_ids(self._now_ms())
        for effect in effects:
            log.info("transactional id %s: idle for transactional.id.expiration.ms; removed",
                     effect.record.transactional_id)
        self._carry_out(effects)
        return len(effects)

    async def _timer_loop(self, interval_key: str, tick) -> None:
        while True:
            await asyncio.sleep(int(self.server.state.config.get(interval_key)) / 1000.0)
            try:
                self.coordinator.transaction_version_level = self._transaction_version_level()
                tick()
            except Exception:  # noqa: BLE001 - the loop goes on; the failure is logged
                log.exception("transaction coordinator timer (%s) failed", interval_key)

    # ------------------------------------------------------------------ tasks
    def _spawn(self, coro, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("%s failed", task.get_name(), exc_info=exc)

    async def close(self) -> None:
        for task in [*self._loops, *self._tasks]:
            task.cancel()
        await asyncio.gather(*self._loops, *self._tasks, return_exceptions=True)
        for waiter in self._waiters.values():
            if not waiter.done():
                waiter.set_result(TxnResult(ErrorCode.not_coordinator))
