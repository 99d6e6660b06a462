"""Idempotent producer state of one partition: sequence checks and duplicate detection.

An idempotent producer (KIP-98) tags every batch with (producer id, producer epoch, base
sequence). Per partition the broker remembers, for each producer id, its epoch and the metadata of
its last five batches, so that:

- a retried batch that was already written is recognised (same epoch, same first and last
  sequence as a cached batch) and acknowledged with its original offsets, not written twice;
- a batch whose first sequence does not follow the last one gets OUT_OF_ORDER_SEQUENCE_NUMBER;
- a batch from an older epoch gets INVALID_PRODUCER_EPOCH;
- a new epoch must start at sequence 0.

When nothing is known of a producer (a new id, or its batches were all deleted), any sequence is
accepted, as Kafka does.

Transactions (KIP-98), as Kafka's ProducerAppendInfo / ProducerStateManager: a producer's first
transactional batch on the partition opens its transaction there (`current_txn_first_offset`,
Kafka's currentTxnFirstOffset); a non-transactional batch while one is open gets
INVALID_TXN_STATE. The COMMIT or ABORT marker (`complete_txn`) closes it and returns the
completed transaction (`CompletedTxn`: producer id, first offset, the marker's offset, aborted);
a marker from an older producer epoch is refused INVALID_PRODUCER_EPOCH and one from an older
coordinator epoch TRANSACTION_COORDINATOR_FENCED (`ProducerAppendInfo.appendEndTxnMarker`,
checkProducerEpoch, checkCoordinatorEpoch). A marker for a producer with nothing open changes
only its epochs (Kafka emits no CompletedTxn for it). The *first unstable offset* is the smallest
first offset of an open transaction; the last stable offset is it, else the high watermark.

Persistence, as Kafka's ProducerStateManager: the shell writes the table to a snapshot file
(`snapshot_entries`, Kafka's snapshot entry fields) when a segment is rolled and on clean shutdown;
on start-up it loads the latest snapshot (`load_snapshot`) and replays only the batch headers
after the snapshot's offset (`replay`). Without a snapshot the whole log is replayed. The file
format is storage's (broker/storage/producer_snapshot.py); this module only gives and takes tuples.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from quafka.protocol.errors import ErrorCode

INT32_MAX = 2**31 - 1
BATCHES_KEPT = 5  # as Kafka (ProducerStateEntry.NUM_BATCHES_TO_RETAIN)
NO_TIMESTAMP = -1


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int = NO_TIMESTAMP  # the batch's max timestamp (Kafka's BatchMetadata.timestamp)


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))
    coordinator_epoch: int = -1  # of the last marker (Kafka's ProducerStateEntry.coordinatorEpoch)
    current_txn_first_offset: int = -1  # first offset of the open transaction, -1: none

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


class Append(NamedTuple):
    """The batch is new and in sequence: write it."""


class Duplicate(NamedTuple):
    """The batch was written before: answer with its original offsets, write nothing."""

    first_offset: int
    last_offset: int


class Refused(NamedTuple):
    error_code: ErrorCode
    message: str


class CompletedTxn(NamedTuple):
    """A transaction a marker closed (Kafka's CompletedTxn): `last_offset` is the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


APPEND = Append()


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (last_seq == INT32_MAX and next_seq == 0)


class ProducerStateTable:
    """Producer entries of one partition."""

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
              transactional: bool = False) -> Append | Duplicate | Refused:
        entry = self.entries.get(producer_id)
        if entry is None:
            return APPEND
        if not transactional and entry.current_txn_first_offset >= 0 and epoch >= entry.epoch:
            # ProducerAppendInfo.updateCurrentTxnFirstOffset: InvalidTxnStateException
            return Refused(
                ErrorCode.invalid_txn_state,
                f"expected a transactional write from producer {producer_id}: its transaction is open since "
                f"offset {entry.current_txn_first_offset}",
            )
        if epoch < entry.epoch:
            return Refused(
                ErrorCode.invalid_producer_epoch,
                f"producer {producer_id} epoch {epoch} is older than the current epoch {entry.epoch}",
            )
        if epoch > entry.epoch:
            if first_seq != 0:
                return Refused(
                    ErrorCode.out_of_order_sequence_number,
                    f"new epoch {epoch} of producer {producer_id} must start at sequence 0, got {first_seq}",
                )
            return APPEND
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return Duplicate(batch.first_offset, batch.last_offset)
        if entry.batches and not in_sequence(entry.last_seq, first_seq):
            return Refused(
                ErrorCode.out_of_order_sequence_number,
                f"out of order sequence number for producer {producer_id}: expected "
                f"{(entry.last_seq + 1) & INT32_MAX}, got {first_seq}",
            )
        return APPEND

    def record(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, first_offset: int, last_offset: int,
               timestamp_ms: int = NO_TIMESTAMP, transactional: bool = False) -> None:
        """Remember a written batch (after append, or when replaying the log); the first
        transactional batch of a producer opens its transaction at `first_offset`."""
        entry = self.entries.get(producer_id)
        if entry is None or epoch > entry.epoch:
            old = entry
            entry = ProducerEntry(epoch)
            if old is not None:  # a new epoch keeps the coordinator's epoch and an open transaction
                entry.coordinator_epoch = old.coordinator_epoch
                entry.current_txn_first_offset = old.current_txn_first_offset
            self.entries[producer_id] = entry
        elif epoch < entry.epoch:
            return
        entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp_ms))
        if transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self.ongoing[producer_id] = first_offset

    def replay(self, producer_id: int, epoch: int, base_seq: int, last_offset_delta: int, base_offset: int,
               timestamp_ms: int = NO_TIMESTAMP, transactional: bool = False) -> None:
        if producer_id < 0 or base_seq < 0:
            return
        last_seq = (base_seq + last_offset_delta) & INT32_MAX
        self.record(producer_id, epoch, base_seq, last_seq, base_offset, base_offset + last_offset_delta, timestamp_ms,
                    transactional)

    # -- transactions (ProducerAppendInfo.appendEndTxnMarker)
    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> Refused | None:
        """Whether a COMMIT/ABORT marker of `producer_id` at `epoch` from a coordinator at
        `coordinator_epoch` may be appended (None: yes)."""
        entry = self.entries.get(producer_id)
        if entry is None:
            return None
        if epoch < entry.epoch:  # checkProducerEpoch (InvalidProducerEpochException since Kafka 2.7)
            return Refused(ErrorCode.invalid_producer_epoch,
                           f"marker epoch {epoch} of producer {producer_id} is older than its epoch {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:  # checkCoordinatorEpoch
            return Refused(ErrorCode.transaction_coordinator_fenced,
                           f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch} (zombie); "
                           f"the current coordinator epoch is {entry.coordinator_epoch}")
        return None

    def complete_txn(self, producer_id: int, epoch: int, coordinator_epoch: int, marker_offset: int,
                     aborted: bool) -> CompletedTxn | None:
        """Apply a marker written at `marker_offset` (after `check_marker` allowed it, or when
        replaying the log): the producer's open transaction, if any, is closed and returned; its
        epochs move up to the marker's. A marker of an older epoch (replay only) changes nothing."""
        entry = self.entries.get(producer_id)
        if entry is None:
            entry = self.entries[producer_id] = ProducerEntry(epoch)
        elif epoch < entry.epoch:
            return None
        elif epoch > entry.epoch:  # ProducerStateEntry.maybeUpdateProducerEpoch: the batches go
            entry.epoch = epoch
            entry.batches.clear()
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        first = entry.current_txn_first_offset
        if first < 0:
            return None
        entry.current_txn_first_offset = -1
        self.ongoing.pop(producer_id, None)
        return CompletedTxn(producer_id, first, marker_offset, aborted)

    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of an open transaction (None: none is open)."""
        ongoing = self.ongoing
        return min(ongoing.values()) if ongoing else None

    def last_stable_offset(self, high_watermark: int) -> int:
        """Kafka's UnifiedLog.lastStableOffset on one node: the first unstable offset, else the high
        watermark (the log end offset)."""
        first = self.first_unstable_offset()
        return high_watermark if first is None or first > high_watermark else first

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """ProducerStateManager.lastStableOffset(completedTxn): the first offset of the earliest
        transaction still open once `completed` is closed, else the offset after its marker
        (what the aborted-transaction index records as the entry's last stable offset)."""
        first = self.first_unstable_offset()
        return completed.last_offset + 1 if first is None else first

    # -- snapshots (Kafka's ProducerStateManager.writeSnapshot / loadFromSnapshot)
    def snapshot_entries(self) -> list[tuple[int, int, int, int, int, int, int, int]]:
        """The table as snapshot entries, in the field order of Kafka's snapshot entry: (producer id,
        epoch, last sequence, last offset, offset delta, timestamp, coordinator epoch, current
        transaction's first offset). One entry per remembered batch, oldest first per producer
        (Kafka keeps one per producer: its last batch); each carries the producer's coordinator
        epoch and open transaction's first offset (-1: none). A producer with no batch left (only
        markers) is not written, as Kafka evicts a producer without data below the log start."""
        out = []
        for producer_id, entry in self.entries.items():
            epoch, coordinator_epoch, txn_first = entry.epoch, entry.coordinator_epoch, entry.current_txn_first_offset
            for b in entry.batches:
                out.append((producer_id, epoch, b.last_seq, b.last_offset, b.last_offset - b.first_offset,
                            b.timestamp_ms, coordinator_epoch, txn_first))
        return out

    def load_snapshot(self, entries, log_start_offset: int = 0) -> None:
        """Replace the table with `entries` (as `snapshot_entries` gives them, in order). Batches
        that end below `log_start_offset` were deleted and are dropped, and with them a producer
        none of whose batches remain, as a replay from the log start would have it."""
        table = self.entries
        table.clear()
        ongoing = self.ongoing
        ongoing.clear()
        for producer_id, epoch, last_seq, last_offset, offset_delta, timestamp_ms, coord_epoch, txn in entries:
            if last_offset < log_start_offset or offset_delta < 0:
                continue
            entry = table.get(producer_id)  # as record(), inlined: start-up loads every partition's
            if entry is None or epoch > entry.epoch:
                entry = table[producer_id] = ProducerEntry(epoch)
            elif epoch < entry.epoch:
                continue
            entry.batches.append(BatchMetadata((last_seq - offset_delta) & INT32_MAX, last_seq,
                                               last_offset - offset_delta, last_offset, timestamp_ms))
            entry.coordinator_epoch = coord_epoch  # the producer's last entry is its current state
            entry.current_txn_first_offset = txn
            if txn >= 0:
                ongoing[producer_id] = txn
            else:
                ongoing.pop(producer_id, None)
