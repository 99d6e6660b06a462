"""The consumer-group machine's data: groups, members, settings, and what heartbeats and describes
return (see consumer_group.py for the machine itself)."""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Hashable, Protocol

from quafka.protocol.errors import ErrorCode

from .consumer_group_assignors import DEFAULT_ASSIGNOR
from .consumer_group_reconcile import AssignmentState, MemberState, Partitions
from .consumer_group_subscriptions import SubscribedTopics

__all__ = ["ConsumerGroup", "ConsumerGroupMember", "ConsumerGroupState", "DescribedGroup", "DescribedMember",
           "GroupSettings", "HeartbeatResult", "OffsetsView", "Refused", "StaticGroupSettings"]

TopicId = Hashable
MEMBER_TYPE_CLASSIC = 0  # ConsumerGroupDescribe v1 MemberType
MEMBER_TYPE_CONSUMER = 1


def session_timer_key(group_id: str, member_id: str) -> tuple:
    return ("consumer-group-session", group_id, member_id)


def rebalance_timer_key(group_id: str, member_id: str) -> tuple:
    return ("consumer-group-rebalance", group_id, member_id)


class Refused(Exception):
    """A request the consumer-group machine refuses, before it changed anything."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


class ConsumerGroupState(str, enum.Enum):
    """ConsumerGroupDescribe / ListGroups state strings (ConsumerGroup.ConsumerGroupState)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupSettings(Protocol):
    session_timeout_ms: int
    heartbeat_interval_ms: int


@dataclass(frozen=True, slots=True)
class StaticGroupSettings:
    session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms


@dataclass(slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    # record 5's tag 0 (consumer_group_records.encode_classic_member_metadata): set for a member
    # that joined with the classic protocol (JoinGroup), None for a ConsumerGroupHeartbeat member
    classic_member_metadata: bytes | None = None
    current: AssignmentState = field(default_factory=AssignmentState)
    session_deadline_ms: int = 0
    rebalance_deadline_ms: int | None = None  # armed while UNREVOKED_PARTITIONS
    rebalance_epoch: int = 0  # the member epoch the rebalance timer was armed at
    join_deadline_ms: int | None = None  # a classic member told to rejoin (consumerGroupJoinKey timer)
    sync_deadline_ms: int | None = None  # a classic member that joined and must sync (consumerGroupSyncKey)

    @property
    def uses_classic_protocol(self) -> bool:
        """ConsumerGroupMember.useClassicProtocol."""
        return self.classic_member_metadata is not None

    @property
    def member_epoch(self) -> int:
        return self.current.member_epoch

    @property
    def previous_member_epoch(self) -> int:
        return self.current.previous_member_epoch

    @property
    def state(self) -> MemberState:
        return self.current.state

    @property
    def assigned(self) -> Partitions:
        return self.current.assigned

    @property
    def pending_revocation(self) -> Partitions:
        return self.current.pending_revocation


@dataclass(slots=True)
class ConsumerGroup:
    """A consumer group. Besides what its records say, indexes kept up to date member by member
    (so that a heartbeat costs O(what changed), not O(members); rebuilt by `reindex`):

    - `subscriptions`: the subscribed topics and regexes, counted (consumer_group_subscriptions.py);
    - `owners`: (topic id, partition) -> the member that holds it, assigned or pending revocation
      (Kafka's ConsumerGroup.currentPartitionEpoch map, kept by maybeUpdatePartitionEpoch /
      maybeRemovePartitionEpoch; the epoch is read from the owner);
    - `static_members`: group.instance.id -> member id (ConsumerGroup.staticMembers).

    Change a member's assignment state with `set_current`, never by assigning `member.current`."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    target: dict[str, dict[TopicId, frozenset[int]]] = field(default_factory=dict)
    subscribed_metadata: dict[str, tuple[TopicId, int]] = field(default_factory=dict)
    metadata_hash: int = 0
    subscriptions: SubscribedTopics = field(default_factory=SubscribedTopics)
    owners: dict[tuple[TopicId, int], str] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    # member ids whose records may differ from those last written (None: any member's; see
    # consumer_group_images.ConsumerGroupImageTracker)
    touched: set[str] | None = None

    def touch(self, member_id: str) -> None:
        if self.touched is not None:
            self.touched.add(member_id)

    def touch_all(self) -> None:
        self.touched = None

    @property
    def state(self) -> ConsumerGroupState:
        """ConsumerGroup.maybeUpdateGroupState."""
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.current.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def set_instance_id(self, member: ConsumerGroupMember, instance_id: str | None) -> None:
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member.member_id:
            del self.static_members[member.instance_id]
        member.instance_id = instance_id
        self.touch(member.member_id)
        if instance_id is not None:
            self.static_members[instance_id] = member.member_id

    def set_current(self, member: ConsumerGroupMember, state: AssignmentState) -> None:
        """The member's new assignment state; `owners` follows (O(the member's partitions))."""
        old = member.current
        self.touch(member.member_id)
        if old.assigned is not state.assigned or old.pending_revocation is not state.pending_revocation:
            self._disown(member.member_id, old)
            self._own(member.member_id, state)
        member.current = state

    def drop_member(self, member_id: str) -> ConsumerGroupMember:
        """Remove the member from `members`, `owners`, `static_members` and `target` (the caller
        counts its subscription out)."""
        member = self.members.pop(member_id)
        self.touch(member_id)
        self._disown(member_id, member.current)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        return member

    def partition_epoch(self, topic_id: TopicId, partition: int) -> int:
        """ConsumerGroup.currentPartitionEpoch: the epoch of the member holding it, -1 for none."""
        owner = self.owners.get((topic_id, partition))
        return -1 if owner is None else self.members[owner].member_epoch

    def reindex(self) -> None:
        """Rebuild `owners` and `static_members` from the members (a group put together from its
        records); the coordinator rebuilds `subscriptions`."""
        self.owners = {}
        self.static_members = {}
        for member_id in sorted(self.members):
            member = self.members[member_id]
            self._own(member_id, member.current)
            if member.instance_id is not None:
                self.static_members.setdefault(member.instance_id, member_id)

    def _own(self, member_id: str, state: AssignmentState) -> None:
        for part_map in (state.assigned, state.pending_revocation):
            for t, ps in part_map.items():
                for p in ps:
                    self.owners[(t, p)] = member_id

    def _disown(self, member_id: str, state: AssignmentState) -> None:
        owners = self.owners
        for part_map in (state.assigned, state.pending_revocation):
            for t, ps in part_map.items():
                for p in ps:
                    if owners.get((t, p)) == member_id:
                        del owners[(t, p)]

    def preferred_assignor(self, default: str = DEFAULT_ASSIGNOR) -> str:
        """ConsumerGroup.computePreferredServerAssignor: the one most members ask for (ties: by name);
        `default` (the first of group.consumer.assignors) when none asks."""
        counts = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        if not counts:
            return default
        return min(counts, key=lambda name: (-counts[name], name))

    def partition_epochs(self) -> dict[tuple[TopicId, int], int]:
        """ConsumerGroup.currentPartitionEpoch as a map: who owns what, at which member epoch."""
        out: dict[tuple[TopicId, int], int] = {}
        for m in self.members.values():
            for part_map in (m.assigned, m.pending_revocation):
                for t, ps in part_map.items():
                    for p in ps:
                        out[(t, p)] = m.member_epoch
        return out


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: dict[TopicId, list[int]] | None = None  # None: not sent (unchanged)


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[tuple[TopicId, str, tuple[int, ...]], ...]  # (topic id, topic name, partitions)
    target_assignment: tuple[tuple[TopicId, str, tuple[int, ...]], ...]
    member_type: int = MEMBER_TYPE_CONSUMER


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetsView:
    """What OffsetCommit / OffsetFetch validation and offset expiry need of a consumer group
    (ConsumerGroup.validateOffsetCommit / validateOffsetFetch / isSubscribedToTopic)."""

    state: ConsumerGroupState
    member_epochs: dict[str, int]  # member id -> member epoch (-2: a static member that left)
    instance_ids: dict[str, str | None]  # member id -> group.instance.id
    subscribed_topics: frozenset[str]
    classic_members: frozenset[str] = frozenset()  # members that use the classic protocol
