"""The share coordinator shard: the durable state of share-partitions in `__share_group_state`.

One `ShareCoordinator` serves every partition of `__share_group_state` on this node
(kafka-reference §2.7, §3.1, §3.2, §7).

Vocabulary
- **key**: a `ShareStateKey` (group id, topic id, partition): one share-partition of one share group.
- **state partition**: the partition of `__share_group_state` whose log holds a key's records,
  `partition_for(key)` (Kafka's hash of "group:topicId:partition").
- **state batch**: (first offset, last offset, delivery state, delivery count), a run of records in
  one persisted state: AVAILABLE 0, ACKNOWLEDGED 2, ARCHIVING 3, ARCHIVED 4 (never ACQUIRED).
- **start offset** (SPSO): the first offset the share-partition still tracks; -1 means not yet
  initialised (the share partition resolves it with its auto.offset.reset and writes it back).
- **state epoch**: set by the group coordinator whenever it (re)initialises a key (a new group,
  altered or reset offsets). A write carrying another state epoch is fenced.
- **leader epoch**: the epoch of the partition leader that owns the share-partition. A read from a
  newer leader records it; reads and writes from an older one are fenced.
- **delivery complete count** (DCC, KIP-1226): how many records at or after the start offset are
  already in a terminal state, -1 when unknown; lag = latest offset - start offset - DCC.
- **snapshot / update**: a ShareSnapshot record carries the full state of a key and a snapshot
  epoch, bumped by each new snapshot. A ShareUpdate carries one write's delta (leader epoch, moved
  start offset, DCC, changed batches) on top of the snapshot with the same snapshot epoch; an
  update whose snapshot epoch is not the stored one is stale and ignored.
- **failed keys** (quafka, `key_order`): the key-ordered share partition's failed keys, carried
  whole by a snapshot and by an update that changes them (a quafka tagged field), else unchanged.
- **tombstone**: a ShareSnapshot record without a value; it deletes the key.
- **combining**: laying newer batches over older ones (`combine_batches`): the newer wins where
  they overlap, batches below the start offset are dropped or trimmed, and touching batches in the
  same (state, count) become one.

Records are the truth. The operation handlers (`initialize`, `read`, `write`, `delete`,
`cold_snapshots`) never change state: they validate against the state as it stands and return the
records to append. The shell appends those records to the state partition's log and feeds each one,
with its offset and in order, to `replay()`, which alone changes state, both at start-up (between
`begin_loading` and `finish_loading`) and in steady state. So a coordinator rebuilt from the log is
identical to the one that wrote it, and records before `prune_offset(partition)` may be deleted.

Snapshot policy (Kafka 4.2-4.4): `initialize` writes a key's first snapshot. Each later record a
handler makes for the key is an update, unless `snapshot_update_records_per_snapshot` updates have
followed the latest snapshot; then it is a new snapshot with the fully combined state (0: always a
snapshot). `cold_snapshots` folds the updates of keys whose latest snapshot is old into a new one,
once, so that an idle key does not hold the log back.

Pure and synchronous: no I/O, clocks or randomness; time comes in as `now_ms`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from quafka.protocol.partition_placement import share_state_partition
from quafka.protocol.share_state_records import (
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    STATE_ACKNOWLEDGED,
    STATE_ARCHIVED,
    ShareSnapshotValue,
    ShareStateKey,
    ShareStateRecord,
    ShareUpdateValue,
    StateBatch,
)
from quafka.protocol.errors import ErrorCode

UNSET = -1  # start offset, leader epoch, DCC: "none yet" in state, "unchanged" in an update


# ----------------------------------------------------------------------------- batch combiner


def _last_offset(batch: StateBatch) -> int:
    return batch.last_offset


def _overlay(batches: list[StateBatch], new: StateBatch) -> list[StateBatch]:
    """Lay `new` over sorted, disjoint `batches`. Where they overlap `new` wins: an older batch
    keeps at most its two outer pieces, so an overlap yields at most three pieces."""
    i = bisect_left(batches, new.first_offset, key=_last_offset)  # first batch ending at or after new
    j = i
    while j < len(batches) and batches[j].first_offset <= new.last_offset:
        j += 1
    pieces = []
    if i < j and batches[i].first_offset < new.first_offset:
        pieces.append(batches[i]._replace(last_offset=new.first_offset - 1))
    pieces.append(new)
    if i < j and batches[j - 1].last_offset > new.last_offset:
        pieces.append(batches[j - 1]._replace(first_offset=new.last_offset + 1))
    return batches[:i] + pieces + batches[j:]


def _first_offset(batch: StateBatch) -> int:
    return batch.first_offset


def _lay_over(older: list[StateBatch], newer: list[StateBatch]) -> list[StateBatch]:
    """`_overlay` of sorted, disjoint `newer` batches onto sorted, disjoint `older` in one sweep."""
    out: list[StateBatch] = []
    i, n = 0, len(older)
    for new in newer:
        while i < n and older[i].last_offset < new.first_offset:
            out.append(older[i])
            i += 1
        if i < n and older[i].first_offset < new.first_offset:  # the older batch's left piece
            out.append(older[i]._replace(last_offset=new.first_offset - 1))
        out.append(new)
        while i < n and older[i].last_offset <= new.last_offset:
            i += 1
        if i < n and older[i].first_offset <= new.last_offset:  # its right piece stays for the next
            older[i] = older[i]._replace(first_offset=new.last_offset + 1)
    out.extend(older[i:])
    return out


def combine_batches(older: Iterable[StateBatch], newer: Iterable[StateBatch],
                    start_offset: int) -> tuple[StateBatch, ...]:
    """Combine persisted state batches (kafka-reference §3.2).

    `older` must be sorted and disjoint (a stored state is). The `newer` batches are laid over it one
    by one, each winning where it overlaps what is there (so a later one in `newer` beats an earlier
    one); two overlapping batches in the same (state, count) thus end up as their union. Then the
    batches wholly below `start_offset` are dropped and one straddling it is trimmed (-1: none), and
    touching batches in the same (state, count) are merged. The result is sorted and disjoint, and
    no two neighbours touch with equal (state, count).
    """
    fresh = sorted((StateBatch(*b) for b in newer), key=_first_offset)
    if all(a.last_offset < b.first_offset for a, b in zip(fresh, fresh[1:])):
        merged = _lay_over(list(older), fresh)  # the usual case, in one pass: O(old + new)
    else:  # newer batches overlap each other: lay them one by one, in their order
        merged = list(older)
        for batch in newer:
            merged = _overlay(merged, StateBatch(*batch))
    out: list[StateBatch] = []
    for batch in merged:
        if start_offset >= 0:
            if batch.last_offset < start_offset:
                continue
            if batch.first_offset < start_offset:
                batch = batch._replace(first_offset=start_offset)
        if out and out[-1].last_offset + 1 == batch.first_offset and out[-1][2:] == batch[2:]:
            out[-1] = out[-1]._replace(last_offset=batch.last_offset)
        else:
            out.append(batch)
    return tuple(out)


def _valid_batch(batch: StateBatch) -> bool:
    return 0 <= batch.first_offset <= batch.last_offset


# ----------------------------------------------------------------------------- results and state


_TERMINAL = (STATE_ACKNOWLEDGED, STATE_ARCHIVED)


@dataclass(frozen=True)
class ReadResult:
    error: ErrorCode
    message: str | None
    state_epoch: int
    start_offset: int  # -1: uninitialised
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int
    leader_epoch: int
    failed_keys: tuple = ()  # quafka: ((key, offset), ...) of a key-ordered share partition


@dataclass(frozen=True)
class ReadSummaryResult:
    error: ErrorCode
    message: str | None
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int


@dataclass
class ShareState:
    """The state of one key, as replayed from its records (the offsets are state-partition offsets)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    create_timestamp_ms: int
    write_timestamp_ms: int  # of the latest snapshot (updates carry no time)
    state_batches: tuple[StateBatch, ...]
    updates_since_snapshot: int  # updates replayed on top of the latest snapshot
    snapshot_offset: int  # offset of the latest snapshot record: nothing before it matters to the key
    last_offset: int  # offset of the latest record applied to the key
    cold_snapshot_ms: int  # -1 while the latest record is a snapshot; else the write time of the
    # snapshot the pending updates sit on (a cold snapshot is due once it is old enough)
    failed_keys: tuple = ()  # quafka's failed keys (key ordering), as last written


@dataclass
class _Partition:
    loaded: bool = False
    states: dict[ShareStateKey, ShareState] = field(default_factory=dict)
    next_offset: int | None = None  # one past the last record replayed, None before any


def _error_read(error: ErrorCode, message: str | None) -> ReadResult:
    return ReadResult(error, message, 0, UNSET, (), UNSET, UNSET)


def _error_summary(error: ErrorCode, message: str | None) -> ReadSummaryResult:
    return ReadSummaryResult(error, message, 0, UNSET, UNSET, UNSET)


_LOADING = "The share coordinator is loading this state partition."
_NEGATIVE_LEADER_EPOCH = "The leader epoch must not be negative."
_OLD_LEADER_EPOCH = "The leader epoch is older than the recorded one."


def _not_initialized(key: ShareStateKey) -> str:
    return f"The share-partition {key.group_id}:{key.topic_id}:{key.partition} is not initialized."


# ----------------------------------------------------------------------------- the shard


class ShareCoordinator:
    """All `__share_group_state` partitions of this node. A partition that is not loaded (a new
    coordinator has none loaded) answers COORDINATOR_LOAD_IN_PROGRESS to every operation."""

    def __init__(self, num_partitions: int = 50, snapshot_update_records_per_snapshot: int = 500) -> None:
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be positive, got {num_partitions}")
        self._num_partitions = num_partitions
        self.snapshot_update_records_per_snapshot = snapshot_update_records_per_snapshot  # dynamic
        self._partitions: dict[int, _Partition] = {}
        self._placement: dict[ShareStateKey, int] = {}  # partition_for cache (Java string hashing is slow)

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    @num_partitions.setter
    def num_partitions(self, value: int) -> None:  # the state topic predates a changed setting
        self._num_partitions = value
        self._placement.clear()

    def partition_for(self, key: ShareStateKey) -> int:
        found = self._placement.get(key)
        if found is None or len(self._placement) > 1_000_000:
            if len(self._placement) > 1_000_000:
                self._placement.clear()
            found = self._placement[key] = share_state_partition(key.group_id, key.topic_id, key.partition,
                                                                 self._num_partitions)
        return found

    # ------------------------------------------------------------------------- loading and replay

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self.num_partitions:
            raise ValueError(f"state partition {partition} not in [0, {self.num_partitions})")

    def begin_loading(self, partition: int) -> None:
        """Forget the partition's state; it answers COORDINATOR_LOAD_IN_PROGRESS until loaded."""
        self._check_partition(partition)
        self._partitions[partition] = _Partition()

    def finish_loading(self, partition: int) -> None:
        self._check_partition(partition)
        self._partitions.setdefault(partition, _Partition()).loaded = True

    def is_loaded(self, partition: int) -> bool:
        p = self._partitions.get(partition)
        return p is not None and p.loaded

    def replay(self, partition: int, offset: int, record: ShareStateRecord) -> None:
        """Apply one record of the partition's log (the only place state changes)."""
        key, value = record.key, record.value
        p = self._partitions.setdefault(partition, _Partition())
        if key not in p.states and self.partition_for(key) != partition:
            raise ValueError(f"record for {key} replayed into state partition {partition}, "
                             f"but the key lives in {self.partition_for(key)}")
        p.next_offset = offset + 1
        if value is None:  # tombstone
            p.states.pop(key, None)
        elif isinstance(value, ShareSnapshotValue):
            batches = [b for b in value.state_batches if _valid_batch(b)]
            p.states[key] = ShareState(
                snapshot_epoch=value.snapshot_epoch, state_epoch=value.state_epoch,
                leader_epoch=value.leader_epoch, start_offset=value.start_offset,
                delivery_complete_count=value.delivery_complete_count,
                create_timestamp_ms=value.create_timestamp_ms, write_timestamp_ms=value.write_timestamp_ms,
                state_batches=combine_batches((), batches, value.start_offset),
                updates_since_snapshot=0, snapshot_offset=offset, last_offset=offset, cold_snapshot_ms=UNSET,
                failed_keys=value.failed_keys or ())
        else:
            st = p.states.get(key)
            if st is None or value.snapshot_epoch != st.snapshot_epoch:
                return  # an update of a deleted key, or of an older snapshot: superseded
            start = max(st.start_offset, value.start_offset)  # -1 (unchanged) never wins
            batches = [b for b in value.state_batches if _valid_batch(b)]
            # in place: state() hands out copies, so nobody else holds this object
            if value.leader_epoch != UNSET:
                st.leader_epoch = value.leader_epoch
            if value.delivery_complete_count >= 0:
                st.delivery_complete_count = value.delivery_complete_count
            if value.failed_keys is not None:
                st.failed_keys = value.failed_keys
            if batches or start != st.start_offset:
                st.state_batches = combine_batches(st.state_batches, batches, start)
            st.start_offset = start
            st.updates_since_snapshot += 1
            st.last_offset = offset
            st.cold_snapshot_ms = st.write_timestamp_ms

    # ------------------------------------------------------------------------- introspection

    def _states(self, key: ShareStateKey) -> dict[ShareStateKey, ShareState] | None:
        """The states of the key's partition, or None while that partition is not loaded."""
        p = self._partitions.get(self.partition_for(key))
        return p.states if p is not None and p.loaded else None

    def keys(self, group_id: str | None = None) -> list[ShareStateKey]:
        """The live keys of the loaded partitions (of one group when given), sorted."""
        return sorted(k for p in self._partitions.values() if p.loaded for k in p.states
                      if group_id is None or k.group_id == group_id)

    def partition_keys(self, partition: int) -> list[ShareStateKey]:
        """The live keys of one state partition (none while it is not loaded), sorted."""
        p = self._partitions.get(partition)
        return sorted(p.states) if p is not None and p.loaded else []

    def state(self, key: ShareStateKey) -> ShareState | None:
        """A copy of the key's replayed state, loaded or not; None when it has none."""
        p = self._partitions.get(self.partition_for(key))
        st = p.states.get(key) if p is not None else None
        return None if st is None else replace(st)

    # ------------------------------------------------------------------------- record makers

    def _snapshot(self, key: ShareStateKey, st: ShareState, now_ms: int, *, leader_epoch: int,
                  start_offset: int, dcc: int, batches: Sequence[StateBatch],
                  failed_keys: tuple | None = None) -> ShareStateRecord:
        failed = st.failed_keys if failed_keys is None else failed_keys
        return ShareStateRecord(SHARE_SNAPSHOT, key, ShareSnapshotValue(
            snapshot_epoch=st.snapshot_epoch + 1, state_epoch=st.state_epoch, leader_epoch=leader_epoch,
            start_offset=start_offset, create_timestamp_ms=st.create_timestamp_ms, write_timestamp_ms=now_ms,
            state_batches=combine_batches(st.state_batches, batches, start_offset),
            delivery_complete_count=st.delivery_complete_count if dcc < 0 else dcc,
            failed_keys=failed or None))

    def _next_record(self, key: ShareStateKey, st: ShareState, now_ms: int, *, leader_epoch: int,
                     start_offset: int, dcc: int, batches: Sequence[StateBatch],
                     failed_keys: tuple | None = None) -> ShareStateRecord:
        """The record moving `st` to `leader_epoch`, `start_offset` (>= the stored one) and `dcc`
        (-1: unchanged) with `batches` laid over (and quafka's failed keys replaced, when given): a
        snapshot once enough updates followed the latest snapshot, else an update."""
        if st.updates_since_snapshot >= self.snapshot_update_records_per_snapshot:
            return self._snapshot(key, st, now_ms, leader_epoch=leader_epoch, start_offset=start_offset,
                                  dcc=dcc, batches=batches, failed_keys=failed_keys)
        return ShareStateRecord(SHARE_UPDATE, key, ShareUpdateValue(
            snapshot_epoch=st.snapshot_epoch, leader_epoch=leader_epoch,
            start_offset=UNSET if start_offset == st.start_offset else start_offset,
            state_batches=combine_batches((), batches, start_offset),
            delivery_complete_count=dcc, failed_keys=failed_keys))

    # ------------------------------------------------------------------------- operations

    def initialize(self, key: ShareStateKey, *, state_epoch: int, start_offset: int,
                   now_ms: int) -> tuple[ErrorCode, list[ShareStateRecord]]:
        """InitializeShareGroupState: (re)start the key at `state_epoch` with no batches; start offset
        -1 keeps a stored one (or leaves it uninitialised). Idempotent for an equal epoch and offset."""
        states = self._states(key)
        if states is None:
            return ErrorCode.coordinator_load_in_progress, []
        if start_offset < UNSET:
            return ErrorCode.invalid_request, []
        st = states.get(key)
        if st is None:
            snapshot_epoch, leader_epoch, start = 0, UNSET, start_offset
        else:
            if state_epoch < st.state_epoch:
                return ErrorCode.fenced_state_epoch, []
            start = st.start_offset if start_offset == UNSET else start_offset
            if state_epoch == st.state_epoch and start == st.start_offset:
                return ErrorCode.none, []
            snapshot_epoch, leader_epoch = st.snapshot_epoch + 1, st.leader_epoch
        return ErrorCode.none, [ShareStateRecord(SHARE_SNAPSHOT, key, ShareSnapshotValue(
            snapshot_epoch=snapshot_epoch, state_epoch=state_epoch, leader_epoch=leader_epoch,
            start_offset=start, create_timestamp_ms=now_ms, write_timestamp_ms=now_ms, state_batches=(),
            delivery_complete_count=UNSET if start == UNSET else 0))]

    def truncate(self, key: ShareStateKey, *, state_epoch: int, log_end_offset: int,
                 now_ms: int) -> tuple[ErrorCode, list[ShareStateRecord]]:
        """quafka's: forget the stored state at and past `log_end_offset`, where the partition's log
        no longer has records (a machine crash with log flush off cut the data log's unflushed
        tail while the share-state write survived): a snapshot whose start offset is at most the
        log end, with the batches cut there and the delivery-complete count recounted, so that
        records produced at those offsets again are delivered. Nothing to write when nothing lies
        past the log end. Kafka has no such operation (its SharePartition.maybeInitialize takes
        the stored start offset as it is)."""
        states = self._states(key)
        if states is None:
            return ErrorCode.coordinator_load_in_progress, []
        st = states.get(key)
        if st is None:
            return ErrorCode.unknown_topic_or_partition, []
        if state_epoch != st.state_epoch:
            return ErrorCode.fenced_state_epoch, []
        if st.start_offset <= log_end_offset and all(b.last_offset < log_end_offset for b in st.state_batches):
            return ErrorCode.none, []
        start = min(st.start_offset, log_end_offset)
        batches = tuple(b if b.last_offset < log_end_offset else b._replace(last_offset=log_end_offset - 1)
                        for b in st.state_batches if b.first_offset < log_end_offset)
        dcc = sum(b.last_offset - b.first_offset + 1 for b in batches if b.delivery_state in _TERMINAL)
        return ErrorCode.none, [ShareStateRecord(SHARE_SNAPSHOT, key, ShareSnapshotValue(
            snapshot_epoch=st.snapshot_epoch + 1, state_epoch=st.state_epoch, leader_epoch=st.leader_epoch,
            start_offset=start, create_timestamp_ms=st.create_timestamp_ms, write_timestamp_ms=now_ms,
            state_batches=batches, delivery_complete_count=dcc, failed_keys=st.failed_keys or None))]

    def read(self, key: ShareStateKey, *, leader_epoch: int,
             now_ms: int) -> tuple[ReadResult, list[ShareStateRecord]]:
        """ReadShareGroupState from the share-partition leader. A newer leader epoch is recorded."""
        states = self._states(key)
        if states is None:
            return _error_read(ErrorCode.coordinator_load_in_progress, _LOADING), []
        if leader_epoch < 0:
            return _error_read(ErrorCode.invalid_request, _NEGATIVE_LEADER_EPOCH), []
        st = states.get(key)
        if st is None:
            return _error_read(ErrorCode.unknown_topic_or_partition, _not_initialized(key)), []
        if leader_epoch < st.leader_epoch:
            return _error_read(ErrorCode.fenced_leader_epoch, _OLD_LEADER_EPOCH), []
        records = []
        if leader_epoch > st.leader_epoch:
            records.append(self._next_record(key, st, now_ms, leader_epoch=leader_epoch,
                                             start_offset=st.start_offset, dcc=UNSET, batches=()))
        return ReadResult(ErrorCode.none, None, st.state_epoch, st.start_offset, st.state_batches,
                          st.delivery_complete_count, leader_epoch, st.failed_keys), records

    def read_summary(self, key: ShareStateKey, *, leader_epoch: int) -> ReadSummaryResult:
        """ReadShareGroupStateSummary (the group coordinator, for offsets and lag). Its asker does not
        own the share-partition, so the leader epoch is neither checked nor recorded."""
        states = self._states(key)
        if states is None:
            return _error_summary(ErrorCode.coordinator_load_in_progress, _LOADING)
        st = states.get(key)
        if st is None:
            return _error_summary(ErrorCode.unknown_topic_or_partition, _not_initialized(key))
        return ReadSummaryResult(ErrorCode.none, None, st.state_epoch, st.leader_epoch, st.start_offset,
                                 st.delivery_complete_count)

    def write(self, key: ShareStateKey, *, state_epoch: int, leader_epoch: int, start_offset: int,
              delivery_complete_count: int, state_batches: Sequence[StateBatch],
              now_ms: int, failed_keys: tuple | None = None) -> tuple[ErrorCode, list[ShareStateRecord]]:
        """WriteShareGroupState from the share-partition leader (`failed_keys`: quafka's, replacing
        the stored ones when not None).

        Refused: a malformed request (start offset < -1, a batch with first > last or a negative
        offset) and a DCC below the stored one at an unchanged start offset with INVALID_REQUEST; an
        uninitialised key with UNKNOWN_TOPIC_OR_PARTITION; an older leader epoch with
        FENCED_LEADER_EPOCH; another state epoch with FENCED_STATE_EPOCH. The start offset becomes
        max(stored, incoming); with an incoming start offset below the stored one the DCC (counted
        from that older start) is counted again from the stored start and the merged batches.
        """
        states = self._states(key)
        if states is None:
            return ErrorCode.coordinator_load_in_progress, []
        if start_offset < UNSET or not all(_valid_batch(b) for b in state_batches):
            return ErrorCode.invalid_request, []
        st = states.get(key)
        if st is None:
            return ErrorCode.unknown_topic_or_partition, []
        if leader_epoch < st.leader_epoch:
            return ErrorCode.fenced_leader_epoch, []
        if state_epoch != st.state_epoch:
            return ErrorCode.fenced_state_epoch, []
        dcc = max(delivery_complete_count, UNSET)
        if start_offset in (UNSET, st.start_offset):
            if 0 <= dcc < st.delivery_complete_count:
                return ErrorCode.invalid_request, []  # a DeliveryCompleteCount regression
        elif start_offset < st.start_offset:
            # A write that started before an earlier one moved the start offset on (both were in
            # flight together) counted from its older start: count again from the stored start.
            # Every terminal record past the start offset is in the stored batches (a record
            # becomes terminal only through a write of its range), so the batches give the count.
            merged = combine_batches(st.state_batches, state_batches, st.start_offset)
            dcc = sum(b.last_offset - b.first_offset + 1 for b in merged if b.delivery_state in _TERMINAL)
        record = self._next_record(key, st, now_ms, leader_epoch=max(leader_epoch, st.leader_epoch),
                                   start_offset=max(start_offset, st.start_offset), dcc=dcc,
                                   batches=state_batches, failed_keys=failed_keys)
        return ErrorCode.none, [record]

    def delete(self, key: ShareStateKey, *, now_ms: int) -> tuple[ErrorCode, list[ShareStateRecord]]:
        """DeleteShareGroupState: a tombstone for a live key; nothing for an unknown one."""
        states = self._states(key)
        if states is None:
            return ErrorCode.coordinator_load_in_progress, []
        if key not in states:
            return ErrorCode.none, []
        return ErrorCode.none, [ShareStateRecord(SHARE_SNAPSHOT, key, None)]

    # ------------------------------------------------------------------------- upkeep

    def cold_snapshots(self, partition: int, *, now_ms: int, interval_ms: int) -> list[ShareStateRecord]:
        """Snapshots folding the pending updates of each key of the partition whose latest snapshot is
        at least `interval_ms` old. A key whose latest record is a snapshot gets none, so an idle key
        is snapshotted once, not at every tick."""
        p = self._partitions.get(partition)
        if p is None or not p.loaded:
            return []
        return [self._snapshot(key, st, now_ms, leader_epoch=st.leader_epoch, start_offset=st.start_offset,
                               dcc=UNSET, batches=())
                for key, st in sorted(p.states.items())
                if st.updates_since_snapshot > 0 and now_ms - st.cold_snapshot_ms >= interval_ms]

    def prune_offset(self, partition: int) -> int | None:
        """The offset below which every record of the loaded partition is redundant: the oldest
        latest-snapshot offset of its live keys, or one past the last record when it has none (a
        deleted key's records, tombstone included, are then all redundant). None before any record."""
        p = self._partitions.get(partition)
        if p is None or not p.loaded or p.next_offset is None:
            return None
        if p.states:
            return min(st.snapshot_offset for st in p.states.values())
        return p.next_offset
