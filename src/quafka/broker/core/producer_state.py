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


APPEND = Append()


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (last_seq == INT32_MAX and next_seq == 0)


class ProducerStateTable:
    """Producer entries of one partition."""

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> Append | Duplicate | Refused:
        entry = self.entries.get(producer_id)
        if entry is None:
            return APPEND
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
               timestamp_ms: int = NO_TIMESTAMP) -> None:
        """Remember a written batch (after append, or when replaying the log)."""
        entry = self.entries.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = ProducerEntry(epoch)
            self.entries[producer_id] = entry
        elif epoch < entry.epoch:
            return
        entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp_ms))

    def replay(self, producer_id: int, epoch: int, base_seq: int, last_offset_delta: int, base_offset: int,
               timestamp_ms: int = NO_TIMESTAMP) -> None:
        if producer_id < 0 or base_seq < 0:
            return
        last_seq = (base_seq + last_offset_delta) & INT32_MAX
        self.record(producer_id, epoch, base_seq, last_seq, base_offset, base_offset + last_offset_delta, timestamp_ms)

    # -- snapshots (Kafka's ProducerStateManager.writeSnapshot / loadFromSnapshot)
    def snapshot_entries(self) -> list[tuple[int, int, int, int, int, int, int, int]]:
        """The table as snapshot entries, in the field order of Kafka's snapshot entry: (producer id,
        epoch, last sequence, last offset, offset delta, timestamp, coordinator epoch, current
        transaction's first offset). One entry per remembered batch, oldest first per producer
        (Kafka keeps one per producer: its last batch); no transactions, so the last two are -1."""
        out = []
        for producer_id, entry in self.entries.items():
            epoch = entry.epoch
            for b in entry.batches:
                out.append((producer_id, epoch, b.last_seq, b.last_offset, b.last_offset - b.first_offset,
                            b.timestamp_ms, -1, -1))
        return out

    def load_snapshot(self, entries, log_start_offset: int = 0) -> None:
        """Replace the table with `entries` (as `snapshot_entries` gives them, in order). Batches
        that end below `log_start_offset` were deleted and are dropped, and with them a producer
        none of whose batches remain, as a replay from the log start would have it."""
        table = self.entries
        table.clear()
        for producer_id, epoch, last_seq, last_offset, offset_delta, timestamp_ms, _coord_epoch, _txn in entries:
            if last_offset < log_start_offset or offset_delta < 0:
                continue
            entry = table.get(producer_id)  # as record(), inlined: start-up loads every partition's
            if entry is None or epoch > entry.epoch:
                entry = table[producer_id] = ProducerEntry(epoch)
            elif epoch < entry.epoch:
                continue
            entry.batches.append(BatchMetadata((last_seq - offset_delta) & INT32_MAX, last_seq,
                                               last_offset - offset_delta, last_offset, timestamp_ms))
