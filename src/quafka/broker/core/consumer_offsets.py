"""Committed offsets of consumer groups: the pure machine behind OffsetCommit, OffsetFetch,
OffsetDelete and offset expiry (the shell is broker/server/consumer_offsets.py).

Records are the truth. `prepare_commit`, `prepare_delete` and `expired` compute the records to
append (`OffsetCommitKey` with a value, or a tombstone) and change nothing; the shell appends them
and then calls `replay` for each, which is also what start-up does with `__consumer_offsets`. So a
failed append leaves the machine as the log is.

Which commits are accepted depends on the group the id names, given as a `GroupView` by the group
coordinator; the rules are Kafka 4.2's (group-coordinator module):

- no group, generation < 0: a *simple* group (a consumer using `assign()`): the commit creates an
  empty classic group that exists through its offsets (`OffsetMetadataManager.validateOffsetCommit`
  via `GroupMetadataManager.getOrMaybeCreateClassicGroup`; no group record is written, replaying
  the offsets recreates it). Then the classic rules below apply to that empty group.
- no group, generation >= 0: GROUP_ID_NOT_FOUND from OffsetCommit v9, ILLEGAL_GENERATION before.
- a share group: GROUP_ID_NOT_FOUND for commit and delete (`ShareGroup.validateOffsetCommit`,
  `validateOffsetDelete`); a fetch answers -1 for every partition with no error, as Kafka's
  `fetchOffsets` does when validation fails (`failAllPartitions`).
- a classic group (`ClassicGroup.validateOffsetCommit`): DEAD -> COORDINATOR_NOT_AVAILABLE;
  generation < 0 on an EMPTY group -> accepted; generation >= 0, a member id or an instance id ->
  the member must be known (UNKNOWN_MEMBER_ID; FENCED_INSTANCE_ID for a static member whose member
  id differs) and the generation current (ILLEGAL_GENERATION); generation < 0 with neither on a
  non-empty group -> UNKNOWN_MEMBER_ID; a valid member while COMPLETING_REBALANCE ->
  REBALANCE_IN_PROGRESS.
- a consumer group (KIP-848, `ConsumerGroup.validateOffsetCommit`): member epoch < 0 on a group
  with no members -> accepted; otherwise the member must be known (UNKNOWN_MEMBER_ID), use
  OffsetCommit v9+ (UNSUPPORTED_VERSION) and send its current member epoch (STALE_MEMBER_EPOCH).
  OffsetFetch v9+ with a member id is checked the same way (`validateOffsetFetch`); OffsetDelete
  has no group-level check, only GROUP_SUBSCRIBED_TO_TOPIC per partition.
- per partition: metadata longer than `offset.metadata.max.bytes` characters ->
  OFFSET_METADATA_TOO_LARGE for that partition only (`OffsetMetadataManager.commitOffset`).

Expiry (`OffsetExpirationConditionImpl`): an offset with an expire timestamp (OffsetCommit v2-4
RetentionTimeMs) expires then; otherwise `offsets.retention.minutes` after its base time, which
is the commit time for a simple group and the time the group became empty for a classic group
with a protocol (`empty_since_ms`). A consumer group's offsets expire from their commit time,
except those of topics a member subscribes to (`ConsumerGroup.offsetExpirationCondition`,
`OffsetMetadataManager.cleanupExpiredOffsets`).

Transactional offsets (TxnOffsetCommit, KIP-98): `prepare_txn_commit` validates as
`OffsetMetadataManager.validateTransactionalOffsetCommit` does (no group: generation < 0 makes a
simple group, else ILLEGAL_GENERATION; a consumer group member's stale epoch is
ILLEGAL_GENERATION) and computes the records, which the shell writes in a transactional batch of
the producer. Replayed with `replay_transactional`, they stay *pending* for (offsets partition,
producer id) until the COMMIT or ABORT marker of that producer on that partition is replayed
(`replay_end_transaction`, Kafka's `replayEndTransactionMarker`): committed, they become the
group's offsets; aborted, they are dropped. A partition with a pending offset answers an
OffsetFetch with RequireStable UNSTABLE_OFFSET_COMMIT (`has_pending`). Departure: Kafka keeps a
non-transactional commit written after the transactional one when the marker comes
(it compares record offsets); quafka applies the transactional offsets at the marker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable
from uuid import UUID

from quafka.protocol.errors import ErrorCode
from quafka.protocol.offset_commit_records import (
    NO_LEADER_EPOCH,
    NO_TIMESTAMP,
    ZERO_UUID,
    OffsetCommitKey,
    OffsetCommitValue,
)

TopicPartition = tuple[str, int]
OffsetRecord = tuple[OffsetCommitKey, OffsetCommitValue | None]

DEFAULT_RETENTION_TIME_MS = -1  # OffsetCommit RetentionTimeMs: "use the broker's retention"
DEFAULT_MAX_METADATA_CHARS = 4096  # offset.metadata.max.bytes


class GroupKind(Enum):
    NONE = "none"          # no group of that id
    CLASSIC = "classic"
    CONSUMER = "consumer"  # a KIP-848 consumer group
    SHARE = "share"


class ClassicState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class GroupView:
    """What the group coordinator tells this machine about a group id."""

    kind: GroupKind = GroupKind.NONE
    state: ClassicState = ClassicState.EMPTY
    generation: int = 0
    members: dict[str, str | None] = field(default_factory=dict)  # member id -> group.instance.id
    subscribed_topics: frozenset[str] = frozenset()
    empty_since_ms: int | None = None  # classic group with a protocol, while Empty
    member_epochs: dict[str, int] = field(default_factory=dict)  # consumer group: member id -> member epoch
    classic_members: frozenset[str] = frozenset()  # consumer group: members that use the classic protocol


NO_GROUP = GroupView()


@dataclass(frozen=True, slots=True)
class CommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str | None = ""
    topic_id: UUID = ZERO_UUID


@dataclass(frozen=True, slots=True)
class CommitRequest:
    group_id: str
    generation: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    api_version: int = 9
    retention_time_ms: int = DEFAULT_RETENTION_TIME_MS
    partitions: tuple[CommitPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class CommitPlan:
    errors: dict[TopicPartition, ErrorCode]   # every requested partition, NONE when it commits
    records: list[OffsetRecord]


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    offset: int = -1
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class DeletePlan:
    error: ErrorCode                          # group level; when set, no partition results
    errors: dict[TopicPartition, ErrorCode]
    records: list[OffsetRecord]


def validate_commit(view: GroupView, request: CommitRequest) -> ErrorCode:
    """The group-level answer to an OffsetCommit (module docstring); NONE when it may commit."""
    if view.kind is GroupKind.SHARE:
        return ErrorCode.group_id_not_found
    if view.kind is GroupKind.CONSUMER:
        if request.generation < 0 and not view.member_epochs:
            return ErrorCode.none
        return validate_consumer_member(view, request.member_id, request.generation, request.api_version)
    if view.kind is GroupKind.NONE:
        if request.generation >= 0:
            return ErrorCode.group_id_not_found if request.api_version >= 9 else ErrorCode.illegal_generation
        view = GroupView(GroupKind.CLASSIC, ClassicState.EMPTY)  # the simple group the commit creates
    if view.state is ClassicState.DEAD:
        return ErrorCode.coordinator_not_available
    if request.generation < 0 and view.state is ClassicState.EMPTY:
        return ErrorCode.none
    if request.generation >= 0 or request.member_id or request.group_instance_id is not None:
        error = _validate_member(view, request.member_id, request.group_instance_id)
        if error is not ErrorCode.none:
            return error
        if request.generation != view.generation:
            return ErrorCode.illegal_generation
    elif view.state is not ClassicState.EMPTY:
        return ErrorCode.unknown_member_id
    if view.state is ClassicState.COMPLETING_REBALANCE:
        return ErrorCode.rebalance_in_progress
    return ErrorCode.none


def validate_consumer_member(view: GroupView, member_id: str, member_epoch: int, api_version: int = 9) -> ErrorCode:
    """A consumer group member's commit or fetch (ConsumerGroup.validateOffsetCommit, validateMemberEpoch):
    a member using the classic protocol commits with any version, its generation being its member
    epoch (ILLEGAL_GENERATION when it differs)."""
    if member_id not in view.member_epochs:
        return ErrorCode.unknown_member_id
    classic = member_id in view.classic_members
    if api_version < 9 and not classic:
        return ErrorCode.unsupported_version
    if member_epoch != view.member_epochs[member_id]:
        return ErrorCode.illegal_generation if classic else ErrorCode.stale_member_epoch
    return ErrorCode.none


def validate_fetch(view: GroupView, member_id: str | None, member_epoch: int) -> ErrorCode:
    """OffsetFetch v9+ of a member (ConsumerGroup.validateOffsetFetch): only consumer groups check it;
    no member id with epoch -1 (admin clients, older versions) is always accepted."""
    if view.kind is not GroupKind.CONSUMER or (not member_id and member_epoch < 0):
        return ErrorCode.none
    return validate_consumer_member(view, member_id or "", member_epoch)


def _validate_member(view: GroupView, member_id: str, group_instance_id: str | None) -> ErrorCode:
    """ClassicGroup.validateMember: a static member is found by its instance id."""
    if group_instance_id is not None:
        owners = [m for m, instance in view.members.items() if instance == group_instance_id]
        if not owners:
            return ErrorCode.unknown_member_id
        return ErrorCode.none if owners[0] == member_id else ErrorCode.fenced_instance_id
    return ErrorCode.none if member_id in view.members else ErrorCode.unknown_member_id


class ConsumerOffsets:
    """Committed offsets per group, as replayed from `__consumer_offsets`."""

    def __init__(self, max_metadata_chars: int = DEFAULT_MAX_METADATA_CHARS) -> None:
        self.max_metadata_chars = max_metadata_chars
        self._offsets: dict[str, dict[TopicPartition, OffsetCommitValue]] = {}
        # (offsets partition, producer id) -> {(group id, topic, partition): value}
        self._pending: dict[tuple[int, int], dict[tuple[str, str, int], OffsetCommitValue | None]] = {}

    # -- replay: the only way state changes ----------------------------------------------------

    def replay(self, key: OffsetCommitKey, value: OffsetCommitValue | None) -> None:
        group = self._offsets.get(key.group_id)
        tp = (key.topic, key.partition)
        if value is None:
            if group is not None:
                group.pop(tp, None)
                if not group:
                    del self._offsets[key.group_id]
            return
        if group is None:
            group = self._offsets[key.group_id] = {}
        group[tp] = value

    def replay_transactional(self, offsets_partition: int, producer_id: int, key: OffsetCommitKey,
                             value: OffsetCommitValue | None) -> None:
        """An offset record of a transactional batch: pending until its producer's marker."""
        self._pending.setdefault((offsets_partition, producer_id), {})[(key.group_id, key.topic, key.partition)] = value

    def replay_end_transaction(self, offsets_partition: int, producer_id: int, committed: bool) -> int:
        """The producer's COMMIT or ABORT marker on the offsets partition: its pending offsets
        become committed or are dropped. Returns how many there were."""
        pending = self._pending.pop((offsets_partition, producer_id), {})
        if committed:
            for (group_id, topic, partition), value in pending.items():
                self.replay(OffsetCommitKey(group_id, topic, partition), value)
        return len(pending)

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        """OffsetMetadataManager.hasPendingTransactionalOffsets."""
        key = (group_id, tp[0], tp[1])
        return any(key in offsets for offsets in self._pending.values())

    def pending_producers(self) -> list[tuple[int, int]]:
        """(offsets partition, producer id) with pending transactional offsets."""
        return sorted(self._pending)

    # -- reads -----------------------------------------------------------------------------------

    def group_ids(self) -> list[str]:
        """Groups that have committed offsets (a simple group exists only through them)."""
        return sorted(self._offsets)

    def has_offsets(self, group_id: str) -> bool:
        return group_id in self._offsets

    def committed(self, group_id: str) -> dict[TopicPartition, OffsetCommitValue]:
        return dict(self._offsets.get(group_id, {}))

    def fetch(self, group_id: str, view: GroupView, partitions: Iterable[TopicPartition] | None = None,
              require_stable: bool = False) -> dict[TopicPartition, FetchedOffset]:
        """OffsetFetch for one group: the requested partitions (None: every partition with an
        offset). Unknown groups and partitions answer -1 with no error; so does a share group's id.
        With `require_stable`, a partition with a pending transactional offset answers -1 and
        UNSTABLE_OFFSET_COMMIT (OffsetMetadataManager.fetchOffsets)."""
        stored = {} if view.kind is GroupKind.SHARE else self._offsets.get(group_id, {})
        if partitions is None:
            wanted = sorted(stored)
        else:
            wanted = list(partitions)
        out: dict[TopicPartition, FetchedOffset] = {}
        for tp in wanted:
            value = stored.get(tp)
            out[tp] = FetchedOffset() if value is None else FetchedOffset(value.offset, value.leader_epoch, value.metadata)
            if require_stable and self._pending and self.has_pending(group_id, tp):
                out[tp] = FetchedOffset(error=ErrorCode.unstable_offset_commit)
        return out

    # -- writes, computed: the shell appends the records, then replays them ----------------------

    def prepare_commit(self, request: CommitRequest, view: GroupView, now_ms: int) -> CommitPlan:
        error = validate_commit(view, request)
        if error is not ErrorCode.none:
            return CommitPlan({(p.topic, p.partition): error for p in request.partitions}, [])
        expire_ms = NO_TIMESTAMP if request.retention_time_ms == DEFAULT_RETENTION_TIME_MS \
            else now_ms + request.retention_time_ms
        errors: dict[TopicPartition, ErrorCode] = {}
        records: list[OffsetRecord] = []
        for p in request.partitions:
            metadata = p.metadata or ""
            if len(metadata) > self.max_metadata_chars:
                errors[(p.topic, p.partition)] = ErrorCode.offset_metadata_too_large
                continue
            errors[(p.topic, p.partition)] = ErrorCode.none
            records.append((OffsetCommitKey(request.group_id, p.topic, p.partition),
                            OffsetCommitValue(p.offset, metadata, now_ms, p.leader_epoch, expire_ms, p.topic_id)))
        return CommitPlan(errors, records)

    def prepare_txn_commit(self, request: CommitRequest, view: GroupView, now_ms: int) -> CommitPlan:
        """TxnOffsetCommit: `OffsetMetadataManager.validateTransactionalOffsetCommit`, then the
        records as `prepare_commit` makes them."""
        if view.kind is GroupKind.NONE and request.generation >= 0:
            error = ErrorCode.illegal_generation
        else:
            error = validate_commit(view, request)
            if error is ErrorCode.stale_member_epoch:
                error = ErrorCode.illegal_generation
        if error is not ErrorCode.none:
            return CommitPlan({(p.topic, p.partition): error for p in request.partitions}, [])
        # validated: the records as for a simple group's commit
        return self.prepare_commit(CommitRequest(request.group_id, partitions=request.partitions), NO_GROUP, now_ms)

    def prepare_delete(self, group_id: str, view: GroupView, partitions: Iterable[TopicPartition]) -> DeletePlan:
        """OffsetDelete (`ClassicGroup.validateOffsetDelete`, `OffsetMetadataManager.deleteOffsets`)."""
        if view.kind is GroupKind.SHARE or (view.kind is GroupKind.NONE and group_id not in self._offsets):
            return DeletePlan(ErrorCode.group_id_not_found, {}, [])
        if view.kind is GroupKind.CLASSIC:
            if view.state is ClassicState.DEAD:
                return DeletePlan(ErrorCode.group_id_not_found, {}, [])
            if view.state is not ClassicState.EMPTY:
                return DeletePlan(ErrorCode.non_empty_group, {}, [])
        stored = self._offsets.get(group_id, {})
        errors: dict[TopicPartition, ErrorCode] = {}
        records: list[OffsetRecord] = []
        for tp in partitions:
            if tp[0] in view.subscribed_topics:
                errors[tp] = ErrorCode.group_subscribed_to_topic
                continue
            errors[tp] = ErrorCode.none
            if tp in stored:
                records.append((OffsetCommitKey(group_id, *tp), None))
        return DeletePlan(ErrorCode.none, errors, records)

    def prepare_delete_group(self, group_id: str) -> list[OffsetRecord]:
        """Tombstones for every offset of a group being deleted (DeleteGroups)."""
        return [(OffsetCommitKey(group_id, *tp), None) for tp in sorted(self._offsets.get(group_id, {}))]

    def expired(self, now_ms: int, retention_ms: int,
                views: dict[str, GroupView] | None = None) -> list[OffsetRecord]:
        """Tombstones for the offsets due to expire now, of groups that are empty (a group with
        members keeps its offsets: Kafka expires only those of EMPTY groups, or of simple ones)."""
        views = views or {}
        records: list[OffsetRecord] = []
        for group_id in sorted(self._offsets):
            view = views.get(group_id, NO_GROUP)
            if view.kind is GroupKind.CLASSIC and view.state is not ClassicState.EMPTY:
                continue
            for tp, value in sorted(self._offsets[group_id].items()):
                if view.kind is GroupKind.CONSUMER and tp[0] in view.subscribed_topics:
                    continue
                if value.expire_timestamp_ms != NO_TIMESTAMP:
                    due = now_ms >= value.expire_timestamp_ms
                else:
                    base = view.empty_since_ms if view.empty_since_ms is not None else value.commit_timestamp_ms
                    due = now_ms - base >= retention_ms
                if due:
                    records.append((OffsetCommitKey(group_id, *tp), None))
        return records
