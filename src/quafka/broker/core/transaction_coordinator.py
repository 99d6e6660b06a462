"""The transaction coordinator: transactional ids on `__transaction_state`, records first.

Follows Kafka 4.x's `TransactionCoordinator` (handleInitProducerId, handleAddPartitionsToTransaction,
handleVerifyPartitionsInTransaction, handleEndTransaction, abortTimedOutTransactions,
handleDescribeTransactions, handleListTransactions) and `TransactionStateManager`
(appendTransactionToLog, timedOutTransactions, transactional id expiry, partition loading). What
each input does in each state is the table in `transaction_state`; this module adds the producer id
and epoch checks in front of it and the records, responses and markers behind it.

Records are the truth. A handler never changes the durable state: it answers at once, or computes
the next metadata of the transactional id, marks the id as having a write in flight (Kafka's
pending state: any other request for it gets CONCURRENT_TRANSACTIONS until the write ends) and
returns an `AppendTxnRecord` effect. The shell appends the record to its `__transaction_state`
partition and calls `on_write_complete` (which replays the record: the only place state changes
outside loading) or `on_write_failed`. The answer to the request that caused a write comes back
from those calls. At start-up the shell feeds the log to `replay` between `begin_loading` and
`finish_loading`; a coordinator rebuilt so is identical to the one that wrote the log.

Ending a transaction: EndTxn writes PrepareCommit/PrepareAbort; once that is durable the client is
answered and a `WriteTxnMarkers` effect asks the shell to append COMMIT/ABORT control batches to
every partition of the transaction (the broker is its own WriteTxnMarkers target). As the shell
reports partitions done (`on_markers_written`), the coordinator writes CompleteCommit/CompleteAbort
when none is left. A partition loaded in PrepareCommit/PrepareAbort resumes its markers
(`finish_loading`), as TransactionStateManager.loadTransactionsForTxnTopicPartition does.

Departures from Kafka, each for the records-are-the-truth rule:
- a new transactional id exists only once its first record is durable (Kafka caches it at once);
- a failed epoch fence leaves no in-memory bump behind (see `prepare_fence_and_abort`);
- `last_producer_epoch` is persisted (a quafka tagged field), so retries are recognised after a
  restart too;
- an exhausted epoch whose InitProducerId expects another epoch is answered PRODUCER_FENCED
  (Kafka throws an IllegalStateException, UNKNOWN_SERVER_ERROR on the wire).

Pure: no I/O, clocks or randomness. Producer ids come from an injected source; write ids are a
counter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from quafka.protocol.errors import ErrorCode
from quafka.protocol.partition_placement import group_partition, transaction_state_partition
from quafka.protocol.transaction_log_records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TransactionLogRecord

from .transaction_state import (
    IGNORE,
    SHORT_MAX,
    TRANSITIONS,
    TV_0,
    TV_2,
    Answer,
    Go,
    Input,
    ProducerFenced,
    TopicPartition,
    TransactionState,
    TxnMetadata,
    end_txn_input,
    new_metadata,
    prepare_abort_or_commit,
    prepare_add_partitions,
    prepare_complete,
    prepare_fence_and_abort,
    prepare_increment_producer_epoch,
    prepare_producer_id_rotation,
    supports_epoch_bump,
)

S = TransactionState
E = ErrorCode
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"


# ----------------------------------------------------------------------------- effects and results


class AppendTxnRecord(NamedTuple):
    """Append `record` to `__transaction_state` partition `partition`, then call
    `on_write_complete(write_id, offset, now_ms)` or `on_write_failed(write_id, error, now_ms)`."""

    write_id: int
    partition: int
    record: TransactionLogRecord


class WriteTxnMarkers(NamedTuple):
    """Append a COMMIT (committed) or ABORT control batch for (producer id, epoch) to each of
    `partitions`, then report them with `on_markers_written`. A partition whose topic is gone
    counts as written (Kafka's marker handler drops it too)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    partitions: tuple[TopicPartition, ...]
    transaction_version: int


@dataclass(frozen=True)
class TxnResult:
    """An answer: the error, the producer id and epoch (InitProducerId; EndTxn with TV2), and for
    AddPartitionsToTxn one error per partition."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    partition_errors: tuple[tuple[TopicPartition, ErrorCode], ...] = ()


class Outcome(NamedTuple):
    """`result` None: the answer comes with the completion of this call's `AppendTxnRecord`."""

    result: TxnResult | None
    effects: tuple = ()


@dataclass(frozen=True)
class DescribedTransaction:
    """DescribeTransactionsResponse's TransactionState entry."""

    transactional_id: str
    error: ErrorCode
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    topics: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class ListedTransactions:
    """ListTransactionsResponse: (transactional id, producer id, state name) sorted by id."""

    error: ErrorCode
    unknown_state_filters: tuple[str, ...] = ()
    transaction_states: tuple[tuple[str, int, str], ...] = ()


# Kafka's fencing answer for clients older than KIP-588 (KafkaApis: PRODUCER_FENCED becomes
# INVALID_PRODUCER_EPOCH below these request versions)
PRODUCER_FENCED_SINCE_VERSION = {"InitProducerId": 4, "AddPartitionsToTxn": 2, "AddOffsetsToTxn": 2, "EndTxn": 2}


def error_for_version(api: str, version: int, error: ErrorCode) -> ErrorCode:
    if error is E.producer_fenced and version < PRODUCER_FENCED_SINCE_VERSION[api]:
        return E.invalid_producer_epoch
    return error


def append_error_to_coordinator_error(error: ErrorCode) -> ErrorCode:
    """TransactionStateManager.appendTransactionToLog: a log append error as the coordinator answers it."""
    if error in (E.unknown_topic_or_partition, E.not_enough_replicas, E.not_enough_replicas_after_append,
                 E.request_timed_out):
        return E.coordinator_not_available
    if error in (E.not_leader_or_follower, E.kafka_storage_error):
        return E.not_coordinator
    if error in (E.message_too_large, E.record_list_too_large):
        return E.unknown_server_error
    return error


# ----------------------------------------------------------------------------- pending writes

_REPLY_INIT, _REPLY_FENCE, _REPLY_ADD, _REPLY_END, _NO_REPLY = "init", "fence", "add", "end", "none"


@dataclass
class _Pending:
    """The one write in flight for a transactional id (Kafka's pendingState)."""

    target: TransactionState  # DEAD for a tombstone
    new: TxnMetadata
    reply: str
    write_id: int | None = None  # None while the complete record waits for markers
    partitions: tuple[TopicPartition, ...] = ()  # for the per-partition answer of AddPartitionsToTxn
    markers_outstanding: set[TopicPartition] = field(default_factory=set)


@dataclass
class _Partition:
    loaded: bool = False
    txns: dict[str, TxnMetadata] = field(default_factory=dict)


class TransactionCoordinator:
    """Every partition of `__transaction_state` on this node. A partition being loaded answers
    COORDINATOR_LOAD_IN_PROGRESS; one this node never began to load answers NOT_COORDINATOR."""

    def __init__(self, producer_ids: Callable[[], int], *, num_partitions: int = 50,
                 transaction_max_timeout_ms: int = 900_000, transactional_id_expiration_ms: int = 604_800_000,
                 transaction_version_level: int = TV_2, offsets_num_partitions: int = 50) -> None:
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be positive, got {num_partitions}")
        self._producer_ids = producer_ids
        self.num_partitions = num_partitions
        self.transaction_max_timeout_ms = transaction_max_timeout_ms
        self.transactional_id_expiration_ms = transactional_id_expiration_ms
        self.transaction_version_level = transaction_version_level
        self.offsets_num_partitions = offsets_num_partitions
        self._partitions: dict[int, _Partition] = {}
        self._pending: dict[str, _Pending] = {}
        self._writes: dict[int, str] = {}  # write id -> transactional id
        self._next_write_id = 0

    # ------------------------------------------------------------------------- loading and replay

    def partition_for(self, transactional_id: str) -> int:
        return transaction_state_partition(transactional_id, self.num_partitions)

    def begin_loading(self, partition: int) -> None:
        """Forget the partition's state and its writes in flight; it answers
        COORDINATOR_LOAD_IN_PROGRESS until `finish_loading`."""
        self._partitions[partition] = _Partition()
        for txn_id in [t for t in self._pending if self.partition_for(t) == partition]:
            self._drop_pending(txn_id)

    def finish_loading(self, partition: int, now_ms: int) -> tuple:
        """The partition serves requests; transactions it holds in PrepareCommit/PrepareAbort
        resume writing their markers."""
        p = self._partitions.setdefault(partition, _Partition())
        p.loaded = True
        effects = []
        for txn_id in sorted(p.txns):
            meta = p.txns[txn_id]
            if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                effects.extend(self._start_markers(meta, now_ms))
        return tuple(effects)

    def replay(self, partition: int, offset: int, record: TransactionLogRecord) -> None:
        """Apply one record of the partition's log. A tombstone (or a Dead record) removes the id."""
        del offset  # the state of a transactional id is its latest record
        txn_id = record.transactional_id
        if self.partition_for(txn_id) != partition:
            raise ValueError(f"record for transactional id {txn_id!r} replayed into partition {partition}, "
                             f"but it lives in {self.partition_for(txn_id)}")
        txns = self._partitions.setdefault(partition, _Partition()).txns
        if record.value is None:
            txns.pop(txn_id, None)
            return
        meta = TxnMetadata.from_value(txn_id, record.value)
        if meta.state is S.DEAD:
            txns.pop(txn_id, None)
        elif meta.state is S.PREPARE_EPOCH_FENCE:
            raise ValueError(f"transactional id {txn_id!r}: a PrepareEpochFence record is never written")
        else:
            txns[txn_id] = meta

    # ------------------------------------------------------------------------- introspection

    def metadata(self, transactional_id: str) -> TxnMetadata | None:
        p = self._partitions.get(self.partition_for(transactional_id))
        return None if p is None else p.txns.get(transactional_id)

    def durable_state(self) -> dict[str, TxnMetadata]:
        """Every transactional id's metadata, as its records say (what replay rebuilds)."""
        return {t: m for p in self._partitions.values() for t, m in p.txns.items()}

    def has_pending(self, transactional_id: str) -> bool:
        return transactional_id in self._pending

    def _lookup(self, transactional_id: str) -> tuple[ErrorCode, TxnMetadata | None]:
        p = self._partitions.get(self.partition_for(transactional_id))
        if p is None:
            return E.not_coordinator, None
        if not p.loaded:
            return E.coordinator_load_in_progress, None
        return E.none, p.txns.get(transactional_id)

    # ------------------------------------------------------------------------- writes

    def _write(self, txn_id: str, target: TransactionState, new: TxnMetadata, reply: str,
               partitions: tuple[TopicPartition, ...] = ()) -> AppendTxnRecord:
        pending = self._pending.get(txn_id)
        if pending is None:
            pending = self._pending[txn_id] = _Pending(target, new, reply, partitions=partitions)
        self._next_write_id += 1
        pending.write_id = self._next_write_id
        self._writes[pending.write_id] = txn_id
        value = None if target is S.DEAD else new.to_value()
        return AppendTxnRecord(pending.write_id, self.partition_for(txn_id), TransactionLogRecord(txn_id, value))

    def _drop_pending(self, txn_id: str) -> None:
        pending = self._pending.pop(txn_id, None)
        if pending is not None and pending.write_id is not None:
            self._writes.pop(pending.write_id, None)

    def _pending_of(self, write_id: int) -> tuple[str, _Pending]:
        txn_id = self._writes.pop(write_id, None)
        pending = None if txn_id is None else self._pending.get(txn_id)
        if pending is None or pending.write_id != write_id:
            raise KeyError(f"no transaction log write {write_id} in flight")
        pending.write_id = None
        return txn_id, pending

    def on_write_complete(self, write_id: int, offset: int, now_ms: int) -> Outcome:
        """The record of `write_id` is durable at `offset`: replay it, answer, and go on."""
        txn_id, pending = self._pending_of(write_id)
        value = None if pending.target is S.DEAD else pending.new.to_value()
        self.replay(self.partition_for(txn_id), offset, TransactionLogRecord(txn_id, value))
        del self._pending[txn_id]
        new = pending.new
        if pending.reply == _REPLY_INIT:
            return Outcome(TxnResult(E.none, new.producer_id, new.producer_epoch))
        if pending.reply == _REPLY_ADD:
            return Outcome(TxnResult(E.none, partition_errors=tuple((tp, E.none) for tp in pending.partitions)))
        if new.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            effects = self._start_markers(new, now_ms)
            if pending.reply == _REPLY_FENCE:  # InitProducerId: retry once the abort completed
                return Outcome(TxnResult(E.concurrent_transactions), effects)
            if pending.reply == _REPLY_END:
                complete = self._pending[txn_id].new
                if supports_epoch_bump(new.client_transaction_version):
                    return Outcome(TxnResult(E.none, complete.producer_id, complete.producer_epoch), effects)
                return Outcome(TxnResult(E.none), effects)
            return Outcome(None, effects)
        return Outcome(None)

    def on_write_failed(self, write_id: int, error: ErrorCode, now_ms: int) -> Outcome:
        """The record of `write_id` could not be appended. A complete record is written again (the
        markers are in the partitions, so the transaction must complete; Kafka retries it too);
        any other transition is abandoned and its request answered with the coordinator's error."""
        txn_id, pending = self._pending_of(write_id)
        mapped = append_error_to_coordinator_error(error)
        if pending.target in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return Outcome(None, (self._write(txn_id, pending.target, pending.new, pending.reply),))
        del self._pending[txn_id]
        if pending.reply == _REPLY_ADD:
            return Outcome(TxnResult(mapped, partition_errors=tuple((tp, mapped) for tp in pending.partitions)))
        return Outcome(None if pending.reply == _NO_REPLY else TxnResult(mapped))

    def _start_markers(self, prepared: TxnMetadata, now_ms: int) -> list:
        """Prepare the complete transition (pending until the markers are written) and ask for markers."""
        complete = prepare_complete(prepared, now_ms)
        partitions = tuple(sorted(prepared.topic_partitions))
        self._pending[prepared.transactional_id] = _Pending(complete.state, complete, _NO_REPLY,
                                                            markers_outstanding=set(partitions))
        if not partitions:
            return [self._write(prepared.transactional_id, complete.state, complete, _NO_REPLY)]
        return [WriteTxnMarkers(prepared.transactional_id, prepared.producer_id, prepared.producer_epoch,
                                prepared.state is S.PREPARE_COMMIT, partitions, prepared.client_transaction_version)]

    def on_markers_written(self, transactional_id: str, partitions: Iterable[TopicPartition],
                           now_ms: int) -> tuple:
        """Markers are in `partitions`; once all are, write the complete record (MARKERS_WRITTEN)."""
        del now_ms  # the complete record's time was set when the markers were asked for
        pending = self._pending.get(transactional_id)
        meta = self.metadata(transactional_id)
        if pending is None or meta is None or pending.write_id is not None:
            return ()
        outcome = TRANSITIONS[(meta.state, Input.MARKERS_WRITTEN)]
        if not isinstance(outcome, Go):
            return ()
        pending.markers_outstanding.difference_update(partitions)
        if pending.markers_outstanding:
            return ()
        return (self._write(transactional_id, outcome.target, pending.new, _NO_REPLY),)

    # ------------------------------------------------------------------------- InitProducerId

    def handle_init_producer_id(self, transactional_id: str | None, transaction_timeout_ms: int,
                                expected: tuple[int, int] | None, now_ms: int) -> Outcome:
        """InitProducerId with a transactional id; `expected` is the request's (producer id,
        epoch) when it carries one (KIP-360), else None."""
        if not transactional_id:
            return Outcome(TxnResult(E.invalid_request))
        if not 0 < transaction_timeout_ms <= self.transaction_max_timeout_ms:
            return Outcome(TxnResult(E.invalid_transaction_timeout))
        error, meta = self._lookup(transactional_id)
        if error is not E.none:
            return Outcome(TxnResult(error))
        if transactional_id in self._pending:
            return Outcome(TxnResult(E.concurrent_transactions))
        if meta is None:
            meta = new_metadata(transactional_id, self._producer_ids(), transaction_timeout_ms, now_ms)
        if expected is not None and not self._valid_expected_producer_id(meta, *expected):
            return Outcome(TxnResult(E.producer_fenced))
        outcome = TRANSITIONS[(meta.state, Input.INIT_PRODUCER_ID)]
        if isinstance(outcome, Answer):
            return Outcome(TxnResult(outcome.error))
        if outcome.target is S.PREPARE_ABORT:  # Ongoing: fence the current producer, abort, retry
            new = prepare_fence_and_abort(meta, self.transaction_version_level, now_ms)
            return Outcome(None, (self._write(transactional_id, new.state, new, _REPLY_FENCE),))
        expected_epoch = None if expected is None else expected[1]
        try:
            if meta.epoch_exhausted and expected_epoch in (None, meta.producer_epoch):
                new = prepare_producer_id_rotation(meta, self._producer_ids(), transaction_timeout_ms, now_ms,
                                                   expected is not None)
            else:
                new = prepare_increment_producer_epoch(meta, transaction_timeout_ms, expected_epoch, now_ms)
        except ProducerFenced:
            return Outcome(TxnResult(E.producer_fenced))
        return Outcome(None, (self._write(transactional_id, new.state, new, _REPLY_INIT),))

    @staticmethod
    def _valid_expected_producer_id(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
        """prepareInitProducerIdTransit.isValidProducerId."""
        return (meta.producer_epoch == NO_PRODUCER_EPOCH or producer_id == meta.producer_id
                or (producer_id == meta.previous_producer_id and epoch >= SHORT_MAX - 1))

    # ------------------------------------------------------------------------- AddPartitionsToTxn

    def _check_producer(self, transactional_id: str | None, producer_id: int,
                        producer_epoch: int) -> tuple[ErrorCode, TxnMetadata | None]:
        if not transactional_id:
            return E.invalid_request, None
        error, meta = self._lookup(transactional_id)
        if error is not E.none:
            return error, None
        if meta is None or meta.producer_id != producer_id:
            return E.invalid_producer_id_mapping, None
        if meta.producer_epoch != producer_epoch:
            return E.producer_fenced, None
        return E.none, meta

    def handle_add_partitions(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                              partitions: Iterable[TopicPartition], now_ms: int,
                              client_transaction_version: int = TV_0) -> Outcome:
        """AddPartitionsToTxn v0-3 (a client) or v4+ not verify-only (a partition leader adding a
        partition for a TV2 producer, client_transaction_version 2). One error for every partition."""
        tps = tuple(sorted(set(partitions)))

        def answer(error: ErrorCode) -> Outcome:
            return Outcome(TxnResult(error, partition_errors=tuple((tp, error) for tp in tps)))

        error, meta = self._check_producer(transactional_id, producer_id, producer_epoch)
        if error is not E.none:
            return answer(error)
        if transactional_id in self._pending:
            return answer(E.concurrent_transactions)
        outcome = TRANSITIONS[(meta.state, Input.ADD_PARTITIONS)]
        if isinstance(outcome, Answer):
            return answer(outcome.error)
        if meta.state is S.ONGOING and set(tps) <= meta.topic_partitions:
            return answer(E.none)  # already in the transaction: no record
        new = prepare_add_partitions(meta, frozenset(tps), now_ms, client_transaction_version)
        return Outcome(None, (self._write(transactional_id, new.state, new, _REPLY_ADD, tps),))

    def handle_add_offsets(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                           group_id: str, now_ms: int, client_transaction_version: int = TV_0) -> Outcome:
        """AddOffsetsToTxn: adds the group's `__consumer_offsets` partition (KafkaApis)."""
        tp = (CONSUMER_OFFSETS_TOPIC, group_partition(group_id, self.offsets_num_partitions))
        return self.handle_add_partitions(transactional_id, producer_id, producer_epoch, (tp,), now_ms,
                                          client_transaction_version)

    def handle_verify_partitions(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                                 partitions: Iterable[TopicPartition]) -> Outcome:
        """AddPartitionsToTxn v4+ verify-only (KIP-890 part 1): is each partition in the ongoing
        transaction? NONE if so, TRANSACTION_ABORTABLE if not. Never writes."""
        tps = tuple(sorted(set(partitions)))
        error, meta = self._check_producer(transactional_id, producer_id, producer_epoch)
        if error is E.none:
            error = TRANSITIONS[(meta.state, Input.VERIFY_PARTITIONS)].error
        if error is not E.none:
            return Outcome(TxnResult(error, partition_errors=tuple((tp, error) for tp in tps)))
        return Outcome(TxnResult(E.none, partition_errors=tuple(
            (tp, E.none if tp in meta.topic_partitions else E.transaction_abortable) for tp in tps)))

    # ------------------------------------------------------------------------- EndTxn

    def handle_end_txn(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                       committed: bool, client_transaction_version: int, now_ms: int) -> Outcome:
        """EndTxn (client_transaction_version 2 from EndTxn v5 on, as KafkaApis decides)."""
        if not transactional_id:
            return Outcome(TxnResult(E.invalid_request))
        error, meta = self._lookup(transactional_id)
        if error is not E.none:
            return Outcome(TxnResult(error))
        if meta is None:
            return Outcome(TxnResult(E.invalid_producer_id_mapping))
        tv2 = supports_epoch_bump(client_transaction_version)
        retry_on_overflow = (tv2 and meta.previous_producer_id == producer_id and producer_epoch == SHORT_MAX - 1
                             and meta.producer_epoch == 0)
        retry_on_bump = tv2 and meta.producer_epoch == producer_epoch + 1
        if meta.producer_id != producer_id and not retry_on_overflow:
            return Outcome(TxnResult(E.invalid_producer_id_mapping))
        if not tv2:
            valid_epoch = producer_epoch == meta.producer_epoch
        elif meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            valid_epoch = retry_on_bump
        elif meta.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            valid_epoch = retry_on_bump or retry_on_overflow or producer_epoch == meta.producer_epoch
        else:
            valid_epoch = producer_epoch == meta.producer_epoch
        if not valid_epoch:
            return Outcome(TxnResult(E.producer_fenced))
        if transactional_id in self._pending:
            return Outcome(TxnResult(E.concurrent_transactions))
        is_retry = retry_on_bump or retry_on_overflow
        outcome = TRANSITIONS[(meta.state, end_txn_input(committed, client_transaction_version, is_retry))]
        if isinstance(outcome, Answer):
            if outcome.error is E.none and tv2:
                return Outcome(TxnResult(E.none, meta.producer_id, meta.producer_epoch))
            return Outcome(TxnResult(outcome.error))
        next_producer_id = NO_PRODUCER_ID
        if tv2 and meta.epoch_exhausted:
            next_producer_id = self._producer_ids()
        new = prepare_abort_or_commit(meta, outcome.target, client_transaction_version, next_producer_id, now_ms,
                                      no_partition_added=meta.state is not S.ONGOING)
        return Outcome(None, (self._write(transactional_id, new.state, new, _REPLY_END),))

    # ------------------------------------------------------------------------- timers

    def abort_timed_out_transactions(self, now_ms: int) -> tuple:
        """TransactionStateManager.timedOutTransactions + abortTimedOutTransactions: every ongoing
        transaction past its timeout, with no write in flight, is fenced and aborted."""
        effects = []
        for txn_id, meta in sorted(self._loaded_txns()):
            if txn_id in self._pending or TRANSITIONS[(meta.state, Input.TXN_TIMED_OUT)] is IGNORE:
                continue
            if meta.txn_start_timestamp_ms + meta.txn_timeout_ms < now_ms:
                new = prepare_fence_and_abort(meta, self.transaction_version_level, now_ms)
                effects.append(self._write(txn_id, new.state, new, _NO_REPLY))
        return tuple(effects)

    def expire_transactional_ids(self, now_ms: int) -> tuple:
        """TransactionStateManager.removeExpiredTransactionalIds: an id idle in Empty/CompleteCommit/
        CompleteAbort for `transactional.id.expiration.ms` gets a tombstone."""
        effects = []
        for txn_id, meta in sorted(self._loaded_txns()):
            if txn_id in self._pending or TRANSITIONS[(meta.state, Input.ID_EXPIRED)] is IGNORE:
                continue
            if meta.txn_last_update_timestamp_ms <= now_ms - self.transactional_id_expiration_ms:
                dead = replace(meta, state=S.DEAD, topic_partitions=frozenset())
                effects.append(self._write(txn_id, S.DEAD, dead, _NO_REPLY))
        return tuple(effects)

    def _loaded_txns(self) -> list[tuple[str, TxnMetadata]]:
        return [(t, m) for p in self._partitions.values() if p.loaded for t, m in p.txns.items()]

    # ------------------------------------------------------------------------- views

    def describe_transaction(self, transactional_id: str) -> DescribedTransaction:
        """DescribeTransactions for one id (handleDescribeTransactions)."""
        if not transactional_id:
            return DescribedTransaction(transactional_id, E.invalid_request)
        error, meta = self._lookup(transactional_id)
        if error is not E.none:
            return DescribedTransaction(transactional_id, error)
        if meta is None:
            return DescribedTransaction(transactional_id, E.transactional_id_not_found)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.topic_partitions):
            by_topic.setdefault(topic, []).append(partition)
        return DescribedTransaction(
            transactional_id, E.none, meta.state.state_name, meta.producer_id, meta.producer_epoch,
            meta.txn_timeout_ms, meta.txn_start_timestamp_ms, tuple((t, tuple(ps)) for t, ps in by_topic.items()))

    def list_transactions(self, producer_ids: Iterable[int] = (), states: Iterable[str] = (),
                          duration_filter_ms: int = -1, now_ms: int = 0) -> ListedTransactions:
        """ListTransactions (TransactionStateManager.listTransactionStates): filters by producer id,
        state name and (KIP-994) transactions running longer than `duration_filter_ms`."""
        if any(p.loaded is False for p in self._partitions.values()):
            return ListedTransactions(E.coordinator_load_in_progress)
        wanted_ids = set(producer_ids)
        names = list(states)
        unknown = tuple(n for n in names if TransactionState.from_name(n) is None)
        wanted_states = {TransactionState.from_name(n) for n in names} - {None}
        rows = []
        for txn_id, meta in sorted(self._loaded_txns()):
            if wanted_ids and meta.producer_id not in wanted_ids:
                continue
            if names and meta.state not in wanted_states:
                continue
            if duration_filter_ms >= 0 and now_ms - meta.txn_start_timestamp_ms <= duration_filter_ms:
                continue
            rows.append((txn_id, meta.producer_id, meta.state.state_name))
        return ListedTransactions(E.none, unknown, tuple(rows))
