"""The states of a transaction, the one transition table, and the metadata of a transactional id.

Follows Kafka's transaction coordinator (transaction-coordinator module, Kafka 4.x):
`TransactionState` (ids, names, which states may expire, valid previous states) and
`TransactionMetadata` (the prepare* methods that compute the next metadata: `prepare_*` here).

Vocabulary
- **transactional id**: the producer's `transactional.id`; the key of `__transaction_state`.
- **producer id / epoch**: the idempotent identity a transactional producer writes with. Each
  InitProducerId bumps the epoch (fencing older producers of the same transactional id); with
  transaction version 2 (KIP-890) every EndTxn bumps it too, and an epoch that reaches
  `Short.MAX_VALUE - 1` is *exhausted*: the coordinator rotates to a new producer id.
- **previous / next producer id**: the id before the latest transition, and (TV2) the id that an
  exhausted epoch rotates to when the transaction completes.
- **last producer epoch**: the epoch before the latest bump, so a retried InitProducerId or EndTxn
  is recognised (Kafka keeps it in memory only; quafka persists it in a tagged field).
- **client transaction version**: 0/1 for a client of the KIP-98 protocol (TV1), 2 for KIP-890
  part 2 (EndTxn v5+, AddPartitionsToTxn v5+ from the partition leader).

States at rest (in the log): Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,
CompleteAbort. Dead is never written (expiry writes a tombstone) and PrepareEpochFence is never
written either: Kafka uses it as a pending state while it fences an ongoing transaction, which it
then aborts with a PrepareAbort at the bumped epoch. quafka goes from Ongoing straight to that
PrepareAbort (see `prepare_fence_and_abort`).

`TRANSITIONS` is the one table of what each input does in each state at rest: prepare a transition
to a target state (`Go`), answer at once (`Answer`), or nothing (`IGNORE`, for timer inputs). The
checks on producer id and epoch that come before it are the coordinator's
(`transaction_coordinator`). Every target respects Kafka's valid previous states
(`VALID_PREVIOUS_STATES`), which a test checks, as it checks every (state, input) pair.

Pure: no I/O, clocks or randomness; times come in as `now_ms`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import NamedTuple

from quafka.protocol.errors import ErrorCode
from quafka.protocol.transaction_log_records import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartitionIds,
    TransactionLogValue,
)

SHORT_MAX = 32767
EPOCH_EXHAUSTED_AT = SHORT_MAX - 1  # TransactionMetadata.isEpochExhausted: epoch >= Short.MAX_VALUE - 1
TV_0, TV_1, TV_2 = 0, 1, 2


def supports_epoch_bump(transaction_version: int) -> bool:
    """TransactionVersion.supportsEpochBump: transaction version 2 and later (KIP-890 part 2)."""
    return transaction_version >= TV_2


def is_epoch_exhausted(producer_epoch: int) -> bool:
    return producer_epoch >= EPOCH_EXHAUSTED_AT


class TransactionState(enum.Enum):
    """Kafka's TransactionState: (id written in the log, name shown by DescribeTransactions and
    ListTransactions, whether the transactional id may expire in this state)."""

    EMPTY = (0, "Empty", True)
    ONGOING = (1, "Ongoing", False)
    PREPARE_COMMIT = (2, "PrepareCommit", False)
    PREPARE_ABORT = (3, "PrepareAbort", False)
    COMPLETE_COMMIT = (4, "CompleteCommit", True)
    COMPLETE_ABORT = (5, "CompleteAbort", True)
    DEAD = (6, "Dead", False)
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence", False)

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def state_name(self) -> str:
        return self.value[1]

    @property
    def expiration_allowed(self) -> bool:
        return self.value[2]

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        return next((s for s in cls if s.state_name == name), None)


S = TransactionState
RESTING_STATES = (S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)

# TransactionState.validPreviousStates, as Kafka 4.x declares it
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


class Input(enum.Enum):
    """What can happen to a transactional id whose producer id and epoch checks passed."""

    INIT_PRODUCER_ID = "InitProducerId"
    ADD_PARTITIONS = "AddPartitionsToTxn"  # v0-3 from clients, v4+ not verify-only, AddOffsetsToTxn
    VERIFY_PARTITIONS = "AddPartitionsToTxn(verifyOnly)"  # v4+ from a partition leader (KIP-890 part 1)
    COMMIT_V1 = "EndTxn(commit) TV1"
    ABORT_V1 = "EndTxn(abort) TV1"
    COMMIT_V2 = "EndTxn(commit) TV2"
    ABORT_V2 = "EndTxn(abort) TV2"
    COMMIT_V2_RETRY = "EndTxn(commit) TV2 retry"  # its epoch is the one before the bump (or overflow)
    ABORT_V2_RETRY = "EndTxn(abort) TV2 retry"
    MARKERS_WRITTEN = "markers written"
    TXN_TIMED_OUT = "transaction timed out"
    ID_EXPIRED = "transactional id expired"


class Go(NamedTuple):
    """Prepare a transition to `target` (a record to write)."""

    target: TransactionState


class Answer(NamedTuple):
    """Answer at once, writing nothing. NONE with VERIFY_PARTITIONS: answer per partition
    (NONE if it is in the transaction, TRANSACTION_ABORTABLE if not)."""

    error: ErrorCode


IGNORE = None  # a timer input in a state it does not concern
E = ErrorCode
_CONCURRENT = Answer(E.concurrent_transactions)
_ITS = Answer(E.invalid_txn_state)
_OK = Answer(E.none)
_I = Input

# The one table. Sources: TransactionCoordinator.prepareInitProducerIdTransit,
# handleAddPartitionsToTransaction, handleVerifyPartitionsInTransaction, endTransactionWithTV1,
# endTransaction (TV2, with its Empty/CompleteAbort/CompleteCommit table), abortTimedOutTransactions;
# TransactionMarkerChannelManager (markers written -> complete); TransactionStateManager
# (timedOutTransactions: Ongoing only; shouldExpire: states that allow expiration).
TRANSITIONS: dict[tuple[TransactionState, Input], Go | Answer | None] = {}


def _row(state: TransactionState, **cells: Go | Answer | None) -> None:
    for name, outcome in cells.items():
        TRANSITIONS[(state, Input[name])] = outcome


_row(S.EMPTY, INIT_PRODUCER_ID=Go(S.EMPTY), ADD_PARTITIONS=Go(S.ONGOING), VERIFY_PARTITIONS=_OK,
     COMMIT_V1=_ITS, ABORT_V1=_ITS, COMMIT_V2=_ITS, ABORT_V2=Go(S.PREPARE_ABORT),
     COMMIT_V2_RETRY=_ITS, ABORT_V2_RETRY=_ITS,  # unreachable: a retry epoch is fenced in Empty
     MARKERS_WRITTEN=IGNORE, TXN_TIMED_OUT=IGNORE, ID_EXPIRED=Go(S.DEAD))
_row(S.ONGOING, INIT_PRODUCER_ID=Go(S.PREPARE_ABORT), ADD_PARTITIONS=Go(S.ONGOING), VERIFY_PARTITIONS=_OK,
     COMMIT_V1=Go(S.PREPARE_COMMIT), ABORT_V1=Go(S.PREPARE_ABORT),
     COMMIT_V2=Go(S.PREPARE_COMMIT), ABORT_V2=Go(S.PREPARE_ABORT),
     COMMIT_V2_RETRY=_ITS, ABORT_V2_RETRY=_ITS,  # unreachable: a retry epoch is fenced in Ongoing
     MARKERS_WRITTEN=IGNORE, TXN_TIMED_OUT=Go(S.PREPARE_ABORT), ID_EXPIRED=IGNORE)
# In PrepareCommit/PrepareAbort the markers are always in flight, so a request meets
# CONCURRENT_TRANSACTIONS before this row (as in Kafka, whose pending state is CompleteCommit/
# CompleteAbort then); and with TV2 only a retry epoch passes the epoch check there.
_row(S.PREPARE_COMMIT, INIT_PRODUCER_ID=_CONCURRENT, ADD_PARTITIONS=_CONCURRENT, VERIFY_PARTITIONS=_CONCURRENT,
     COMMIT_V1=_CONCURRENT, ABORT_V1=_ITS, COMMIT_V2=_CONCURRENT, ABORT_V2=_ITS,
     COMMIT_V2_RETRY=_CONCURRENT, ABORT_V2_RETRY=_ITS,
     MARKERS_WRITTEN=Go(S.COMPLETE_COMMIT), TXN_TIMED_OUT=IGNORE, ID_EXPIRED=IGNORE)
_row(S.PREPARE_ABORT, INIT_PRODUCER_ID=_CONCURRENT, ADD_PARTITIONS=_CONCURRENT, VERIFY_PARTITIONS=_CONCURRENT,
     COMMIT_V1=_ITS, ABORT_V1=_CONCURRENT, COMMIT_V2=_ITS, ABORT_V2=_CONCURRENT,
     COMMIT_V2_RETRY=_ITS, ABORT_V2_RETRY=_CONCURRENT,
     MARKERS_WRITTEN=Go(S.COMPLETE_ABORT), TXN_TIMED_OUT=IGNORE, ID_EXPIRED=IGNORE)
_row(S.COMPLETE_COMMIT, INIT_PRODUCER_ID=Go(S.EMPTY), ADD_PARTITIONS=Go(S.ONGOING), VERIFY_PARTITIONS=_OK,
     COMMIT_V1=_OK, ABORT_V1=_ITS, COMMIT_V2=_ITS, ABORT_V2=Go(S.PREPARE_ABORT),
     COMMIT_V2_RETRY=_OK, ABORT_V2_RETRY=_ITS,
     MARKERS_WRITTEN=IGNORE, TXN_TIMED_OUT=IGNORE, ID_EXPIRED=Go(S.DEAD))
_row(S.COMPLETE_ABORT, INIT_PRODUCER_ID=Go(S.EMPTY), ADD_PARTITIONS=Go(S.ONGOING), VERIFY_PARTITIONS=_OK,
     COMMIT_V1=_ITS, ABORT_V1=_OK, COMMIT_V2=_ITS, ABORT_V2=Go(S.PREPARE_ABORT),
     COMMIT_V2_RETRY=_ITS, ABORT_V2_RETRY=_OK,
     MARKERS_WRITTEN=IGNORE, TXN_TIMED_OUT=IGNORE, ID_EXPIRED=Go(S.DEAD))


def end_txn_input(committed: bool, client_transaction_version: int, is_retry: bool) -> Input:
    if not supports_epoch_bump(client_transaction_version):
        return Input.COMMIT_V1 if committed else Input.ABORT_V1
    if is_retry:
        return Input.COMMIT_V2_RETRY if committed else Input.ABORT_V2_RETRY
    return Input.COMMIT_V2 if committed else Input.ABORT_V2


# ----------------------------------------------------------------------------- metadata

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class TxnMetadata:
    """The durable state of one transactional id: exactly what its latest record says."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: TransactionState
    txn_timeout_ms: int
    topic_partitions: frozenset[TopicPartition] = frozenset()
    txn_start_timestamp_ms: int = -1
    txn_last_update_timestamp_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    client_transaction_version: int = TV_0

    @property
    def epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    def to_value(self) -> TransactionLogValue:
        """TransactionLog.valueToBytes' fields; the partitions array is null in Empty."""
        if self.state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
            raise ValueError(f"{self.transactional_id}: state {self.state.state_name} is never written")
        if self.state is S.EMPTY and self.topic_partitions:
            raise ValueError(f"{self.transactional_id}: Empty with partitions {sorted(self.topic_partitions)}")
        partitions = None
        if self.state is not S.EMPTY:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in self.topic_partitions:
                by_topic.setdefault(topic, []).append(partition)
            partitions = tuple(TopicPartitionIds(t, tuple(sorted(ps))) for t, ps in sorted(by_topic.items()))
        return TransactionLogValue(
            self.producer_id, self.producer_epoch, self.txn_timeout_ms, self.state.id, partitions,
            self.txn_last_update_timestamp_ms, self.txn_start_timestamp_ms,
            previous_producer_id=self.previous_producer_id, next_producer_id=self.next_producer_id,
            client_transaction_version=self.client_transaction_version,
            last_producer_epoch=self.last_producer_epoch)

    @classmethod
    def from_value(cls, transactional_id: str, value: TransactionLogValue) -> TxnMetadata:
        """TransactionLog.read: the partitions of a record in Empty are ignored."""
        state = TransactionState.from_id(value.transaction_status)
        tps: frozenset[TopicPartition] = frozenset()
        if state is not S.EMPTY and value.partitions:
            tps = frozenset((e.topic, p) for e in value.partitions for p in e.partitions)
        return cls(transactional_id, value.producer_id, value.producer_epoch, state, value.transaction_timeout_ms,
                   tps, value.start_timestamp_ms, value.last_update_timestamp_ms, value.previous_producer_id,
                   value.next_producer_id, value.last_producer_epoch, value.client_transaction_version)


def new_metadata(transactional_id: str, producer_id: int, txn_timeout_ms: int, now_ms: int) -> TxnMetadata:
    """A transactional id seen for the first time (TransactionCoordinator.handleInitProducerId):
    Empty, no epoch yet; it becomes durable with its first record."""
    return TxnMetadata(transactional_id, producer_id, NO_PRODUCER_EPOCH, S.EMPTY, txn_timeout_ms,
                       txn_last_update_timestamp_ms=now_ms)


def _transit(current: TxnMetadata, target: TransactionState, **changes) -> TxnMetadata:
    """TransactionMetadata.prepareTransitionTo: a target allowed from the current state, a valid
    producer id and epoch; the previous producer id becomes the current one."""
    if current.state not in VALID_PREVIOUS_STATES[target]:
        raise ValueError(f"{current.transactional_id}: no transition from {current.state.state_name} "
                         f"to {target.state_name}")
    new = replace(current, state=target, previous_producer_id=current.producer_id, **changes)
    if new.producer_id < 0:
        raise ValueError(f"{current.transactional_id}: illegal producer id {new.producer_id}")
    if target is not S.DEAD and new.producer_epoch < 0:
        raise ValueError(f"{current.transactional_id}: illegal producer epoch {new.producer_epoch}")
    return new


class ProducerFenced(Exception):
    """The expected epoch of an InitProducerId is neither the current nor the previous one."""


def prepare_increment_producer_epoch(current: TxnMetadata, txn_timeout_ms: int, expected_epoch: int | None,
                                     now_ms: int) -> TxnMetadata:
    """TransactionMetadata.prepareIncrementProducerEpoch: to Empty at the next epoch, or at the same
    one for a retry of a call that succeeded (the expected epoch is the previous one)."""
    bumped = current.producer_epoch + 1
    if expected_epoch is None:
        epoch, last = bumped, NO_PRODUCER_EPOCH
    elif current.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == current.producer_epoch:
        epoch, last = bumped, current.producer_epoch
    elif expected_epoch == current.last_producer_epoch:
        epoch, last = current.producer_epoch, current.last_producer_epoch
    else:
        raise ProducerFenced(f"expected epoch {expected_epoch} is neither {current.producer_epoch} "
                             f"nor {current.last_producer_epoch}")
    if epoch != current.producer_epoch and is_epoch_exhausted(current.producer_epoch):
        raise ProducerFenced(f"epoch {current.producer_epoch} of producer id {current.producer_id} is exhausted")
    return _transit(current, S.EMPTY, producer_epoch=epoch, last_producer_epoch=last, txn_timeout_ms=txn_timeout_ms,
                    topic_partitions=frozenset(), txn_start_timestamp_ms=-1, txn_last_update_timestamp_ms=now_ms)


def prepare_producer_id_rotation(current: TxnMetadata, new_producer_id: int, txn_timeout_ms: int, now_ms: int,
                                 record_last_epoch: bool) -> TxnMetadata:
    """TransactionMetadata.prepareProducerIdRotation: an exhausted epoch moves to a new producer id."""
    return _transit(current, S.EMPTY, producer_id=new_producer_id, producer_epoch=0,
                    last_producer_epoch=current.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                    txn_timeout_ms=txn_timeout_ms, topic_partitions=frozenset(), txn_start_timestamp_ms=-1,
                    txn_last_update_timestamp_ms=now_ms)


def prepare_add_partitions(current: TxnMetadata, partitions: frozenset[TopicPartition], now_ms: int,
                           client_transaction_version: int) -> TxnMetadata:
    """TransactionMetadata.prepareAddPartitions: to Ongoing; a new transaction starts now."""
    starting = current.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT)
    return _transit(current, S.ONGOING, topic_partitions=current.topic_partitions | partitions,
                    txn_start_timestamp_ms=now_ms if starting else current.txn_start_timestamp_ms,
                    txn_last_update_timestamp_ms=now_ms, client_transaction_version=client_transaction_version)


def prepare_abort_or_commit(current: TxnMetadata, target: TransactionState, client_transaction_version: int,
                            next_producer_id: int, now_ms: int, no_partition_added: bool) -> TxnMetadata:
    """TransactionMetadata.prepareAbortOrCommit: with TV2 the epoch is bumped (except an abort at
    Short.MAX_VALUE, which lets a broken producer recover)."""
    if supports_epoch_bump(client_transaction_version):
        epoch = current.producer_epoch
        if not (current.producer_epoch == SHORT_MAX and target is S.PREPARE_ABORT):
            epoch = current.producer_epoch + 1
        last = current.producer_epoch
    else:
        epoch, last = current.producer_epoch, current.last_producer_epoch
    return _transit(current, target, producer_epoch=epoch, last_producer_epoch=last,
                    txn_start_timestamp_ms=now_ms if no_partition_added else current.txn_start_timestamp_ms,
                    next_producer_id=next_producer_id, txn_last_update_timestamp_ms=now_ms,
                    client_transaction_version=client_transaction_version)


def prepare_fence_and_abort(current: TxnMetadata, server_transaction_version: int, now_ms: int) -> TxnMetadata:
    """Fence an ongoing transaction and abort it (InitProducerId while Ongoing, or its timeout):
    Kafka's prepareFenceProducerEpoch (epoch + 1, unless at Short.MAX_VALUE) followed by the
    epoch-fence branch of endTransaction (last epoch forgotten; with TV2 prepareAbortOrCommit bumps
    once more). Kafka keeps the first bump in memory when the PrepareAbort write fails
    (hasFailedEpochFence); quafka changes state only by records, so a retried fence starts again
    from the durable epoch and reaches the same epoch."""
    fenced_epoch = current.producer_epoch if current.producer_epoch == SHORT_MAX else current.producer_epoch + 1
    fenced = replace(current, producer_epoch=fenced_epoch, last_producer_epoch=NO_PRODUCER_EPOCH)
    return prepare_abort_or_commit(fenced, S.PREPARE_ABORT, server_transaction_version, NO_PRODUCER_ID, now_ms,
                                   False)


def prepare_complete(current: TxnMetadata, now_ms: int) -> TxnMetadata:
    """TransactionMetadata.prepareComplete: markers are written; with TV2 an exhausted epoch moves
    to the next producer id at epoch 0."""
    target = S.COMPLETE_COMMIT if current.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
    if supports_epoch_bump(current.client_transaction_version) and current.next_producer_id != NO_PRODUCER_ID:
        pid, epoch = current.next_producer_id, 0
    else:
        pid, epoch = current.producer_id, current.producer_epoch
    return _transit(current, target, producer_id=pid, producer_epoch=epoch, next_producer_id=NO_PRODUCER_ID,
                    topic_partitions=frozenset(), txn_last_update_timestamp_ms=now_ms)
