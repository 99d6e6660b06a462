"""The share-group coordinator: groups, members, epochs and target assignments (KIP-932 as Kafka
4.2-4.4's GroupMetadataManager runs share groups). A pure machine: every entry point takes its
inputs and `now_ms` and returns a result plus effects for the shell to carry out.

Vocabulary:

- group epoch: bumped whenever what the assignment depends on changes (a member joins, leaves, is
  fenced or changes its subscription; a subscribed topic is created, deleted or gains partitions);
- assignment epoch: the group epoch at which the current target assignment was computed. A group
  epoch ahead of it makes the next heartbeat recompute the target (at most once per
  share.assignment.interval.ms, KIP-1263; at once when there is no useful prior assignment);
- member epoch: the assignment epoch of the assignment the member holds. Share groups have no
  revocation handshake, so a member moves to a new target assignment as soon as it heartbeats.

A heartbeat with epoch 0 joins (creating the group; a member that was fenced or that lost its
state may rejoin with the same id), -1 leaves, any other epoch must be the member's epoch (or the
previous one, in case the response that moved it on was lost). Each heartbeat re-arms the member's
session timer; `on_session_timeout` removes a member whose timer fired.

Effects: ArmTimer / CancelTimer (the session timers), MemberRemoved (the shell closes the member's
share sessions and releases its records), GroupEmptied.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable, Mapping, Protocol

from quafka.protocol.errors import ErrorCode

from .share_assignor import ASSIGNOR_NAME, assign

__all__ = [
    "ArmTimer", "CancelTimer", "DescribedGroup", "DescribedMember", "Effect", "GroupEmptied", "GroupSettings",
    "GroupState", "HeartbeatResult", "MemberRemoved", "ShareGroup", "ShareGroupCoordinator", "ShareGroupMember",
    "StaticGroupSettings", "session_timer_key",
]

GROUP_TYPE = "share"
LEAVE_GROUP_MEMBER_EPOCH = -1
JOIN_GROUP_MEMBER_EPOCH = 0
MAX_MEMBER_ID_LENGTH = 36  # what ShareFetch accepts; librdkafka sends 22 characters

TopicId = Hashable
Topics = Mapping[str, tuple[TopicId, int]]  # topic name -> (topic id, partition count)
Assignment = dict[TopicId, tuple[int, ...]]


class GroupState(str, enum.Enum):
    """ShareGroupDescribe / ListGroups state strings, as Kafka spells them."""

    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"  # a deleted group; kept for DeleteGroups


# --------------------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class ArmTimer:
    key: tuple
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class CancelTimer:
    key: tuple


@dataclass(frozen=True, slots=True)
class MemberRemoved:
    group_id: str
    member_id: str
    reason: str  # "left", "session timeout"


@dataclass(frozen=True, slots=True)
class GroupEmptied:
    group_id: str


Effect = ArmTimer | CancelTimer | MemberRemoved | GroupEmptied


def session_timer_key(group_id: str, member_id: str) -> tuple:
    return ("share-group-session", group_id, member_id)


# --------------------------------------------------------------------------- settings and state


class GroupSettings(Protocol):
    """What the coordinator reads of a group's configuration (config.ShareGroupConfig has these)."""

    session_timeout_ms: int
    heartbeat_interval_ms: int
    assignment_interval_ms: int


@dataclass(frozen=True, slots=True)
class StaticGroupSettings:
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    assignment_interval_ms: int = 1000


@dataclass(slots=True)
class ShareGroupMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    assignment: Assignment = field(default_factory=dict)
    session_deadline_ms: int = 0


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareGroupMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    last_assignment_ms: int | None = None
    subscribed_metadata: dict[str, tuple[TopicId, int]] = field(default_factory=dict)
    metadata_hash: int = 0  # of `subscribed_metadata` when the group epoch last moved (record 11)
    # member ids whose records may differ from those last written (None: any member's; see
    # group_records.ShareGroupImageTracker)
    touched: set[str] | None = None

    def touch(self, member_id: str) -> None:
        if self.touched is not None:
            self.touched.add(member_id)

    @property
    def state(self) -> GroupState:
        return GroupState.STABLE if self.members else GroupState.EMPTY


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: dict[TopicId, list[int]] | None = None  # None: unchanged since the member last got it


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: tuple[tuple[TopicId, str, tuple[int, ...]], ...]  # (topic id, topic name, partitions)


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


class _Refused(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _not_found(group_id: str) -> _Refused:
    return _Refused(ErrorCode.group_id_not_found, f"Group {group_id} not found.")


def _validate(group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
              subscribed_topic_names: Iterable[str] | None) -> None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid, plus the member id length ShareFetch needs."""
    if not member_id:
        raise _Refused(ErrorCode.invalid_request, "MemberId can't be empty.")
    if len(member_id) > MAX_MEMBER_ID_LENGTH:
        raise _Refused(ErrorCode.invalid_request, f"MemberId can't be longer than {MAX_MEMBER_ID_LENGTH} characters.")
    if not group_id:
        raise _Refused(ErrorCode.invalid_request, "GroupId can't be empty.")
    if rack_id is not None and not rack_id:
        raise _Refused(ErrorCode.invalid_request, "RackId can't be empty.")
    if member_epoch == JOIN_GROUP_MEMBER_EPOCH:
        if not subscribed_topic_names:
            raise _Refused(ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request.")
    elif member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        raise _Refused(ErrorCode.invalid_request, "MemberEpoch is invalid.")


def _check_member_epoch(member: ShareGroupMember, epoch: int) -> None:
    if epoch > member.member_epoch:
        raise _Refused(ErrorCode.fenced_member_epoch, (
            f"The share group member has a greater member epoch ({epoch}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin."))
    if epoch < member.member_epoch and epoch != member.previous_member_epoch:
        raise _Refused(ErrorCode.fenced_member_epoch, (
            f"The share group member has a smaller member epoch ({epoch}) than the one known by the group "
            f"coordinator ({member.member_epoch}), and it does not match the previous member epoch "
            f"({member.previous_member_epoch}). The member must abandon all its partitions and rejoin."))


def metadata_hash(subscribed: Mapping[str, tuple[TopicId, int]]) -> int:
    """An int64 digest of the subscribed topics (name, id, partition count), stored as record
    11's MetadataHash (KIP-1101) so that a restart can tell whether the topics changed since the
    group epoch last moved. quafka's own digest (Kafka hashes differently); 0 for no topics."""
    if not subscribed:
        return 0
    text = ";".join(f"{name}/{topic_id}/{count}" for name, (topic_id, count) in sorted(subscribed.items()))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True) or 1


# --------------------------------------------------------------------------- the coordinator


class ShareGroupCoordinator:
    """All share groups of the broker (one namespace of group ids)."""

    def __init__(self, *, max_group_size: int = 200,
                 settings: Callable[[str], GroupSettings] | None = None,
                 topics: Topics | None = None) -> None:
        self.max_group_size = max_group_size
        self._settings = settings or (lambda _group_id: StaticGroupSettings())
        self._topics: dict[str, tuple[TopicId, int]] = dict(topics or {})
        self._groups: dict[str, ShareGroup] = {}

    # ------------------------------------------------------------------ lookups
    def group(self, group_id: str) -> ShareGroup | None:
        return self._groups.get(group_id)

    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self._groups.get(group_id)
        return group is not None and member_id in group.members

    def assignment(self, group_id: str, member_id: str) -> Assignment | None:
        """The partitions the member holds (as last given to it), or None if it is not a member."""
        group = self._groups.get(group_id)
        member = group.members.get(member_id) if group else None
        return None if member is None else dict(member.assignment)

    # ------------------------------------------------------------------ heartbeat
    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, rack_id: str | None = None,
                  subscribed_topic_names: Iterable[str] | None = None, client_id: str = "",
                  client_host: str = "", now_ms: int) -> tuple[HeartbeatResult, list[Effect]]:
        """Serve one ShareGroupHeartbeat. `subscribed_topic_names` None means unchanged."""
        subscribed = None if subscribed_topic_names is None else tuple(subscribed_topic_names)
        try:
            _validate(group_id, member_id, member_epoch, rack_id, subscribed)
            if member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                return self._leave(group_id, member_id)
            return self._heartbeat(group_id, member_id, member_epoch, rack_id, subscribed, client_id, client_host,
                                   now_ms)
        except _Refused as refused:
            return HeartbeatResult(refused.error, refused.message), []

    def _leave(self, group_id: str, member_id: str) -> tuple[HeartbeatResult, list[Effect]]:
        group = self._groups.get(group_id)
        if group is None:
            raise _not_found(group_id)
        if member_id not in group.members:
            raise _Refused(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}.")
        effects = self._remove_member(group, member_id, "left")
        return HeartbeatResult(ErrorCode.none, None, member_id, LEAVE_GROUP_MEMBER_EPOCH, 0, None), effects

    def _heartbeat(self, group_id: str, member_id: str, epoch: int, rack_id: str | None,
                   subscribed: tuple[str, ...] | None, client_id: str, client_host: str,
                   now_ms: int) -> tuple[HeartbeatResult, list[Effect]]:
        joining = epoch == JOIN_GROUP_MEMBER_EPOCH
        group = self._groups.get(group_id)
        if group is None and not joining:
            raise _not_found(group_id)
        if group is not None and member_id not in group.members and len(group.members) >= self.max_group_size:
            raise _Refused(ErrorCode.group_max_size_reached,
                           f"The share group has reached its maximum capacity of {self.max_group_size} members.")
        member = group.members.get(member_id) if group is not None else None
        if member is None and not joining:
            raise _Refused(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}.")
        if member is not None and not joining:
            _check_member_epoch(member, epoch)
        if group is None:
            group = self._groups[group_id] = ShareGroup(group_id)
        settings = self._settings(group_id)

        is_new = member is None
        if member is None:
            member = group.members[member_id] = ShareGroupMember(member_id)
        group.touch(member_id)
        previous_subscription = None if is_new else member.subscribed_topic_names
        previous_assignment = None if is_new else member.assignment
        if rack_id is not None:
            member.rack_id = rack_id
        if subscribed is not None:
            member.subscribed_topic_names = tuple(sorted(set(subscribed)))
        member.client_id, member.client_host = client_id, client_host
        subscription_changed = is_new or member.subscribed_topic_names != previous_subscription
        if subscription_changed:
            self._bump_group_epoch(group)

        if group.group_epoch > group.assignment_epoch and self._may_assign(group, settings, now_ms):
            self._compute_target(group, now_ms)
        if member.member_epoch != group.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch
            member.assignment = self._subscribed_part(member, group.target.get(member_id, {}))
        elif subscription_changed:
            member.assignment = self._subscribed_part(member, group.target.get(member_id, {}))

        member.session_deadline_ms = now_ms + settings.session_timeout_ms
        effects: list[Effect] = [ArmTimer(session_timer_key(group_id, member_id), member.session_deadline_ms)]
        # Kafka sends the assignment to a member that (re)joins and whenever it changes; quafka also
        # sends it to a member still at its previous epoch (the response that moved it on was lost).
        send = joining or member.assignment != previous_assignment or epoch != member.member_epoch
        assignment = {t: list(ps) for t, ps in member.assignment.items()} if send else None
        return HeartbeatResult(ErrorCode.none, None, member_id, member.member_epoch, settings.heartbeat_interval_ms,
                               assignment), effects

    # ------------------------------------------------------------------ other events
    def on_session_timeout(self, group_id: str, member_id: str, now_ms: int) -> list[Effect]:
        """The member's session timer fired: remove the member unless it heartbeated since."""
        group = self._groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return []
        if now_ms < member.session_deadline_ms:
            return [ArmTimer(session_timer_key(group_id, member_id), member.session_deadline_ms)]
        return self._remove_member(group, member_id, "session timeout")

    def on_topics_changed(self, topics: Topics, now_ms: int) -> list[Effect]:
        """New topic metadata (a topic created or deleted, partitions added): every group whose
        subscribed topics look different bumps its group epoch, so its next heartbeat reassigns."""
        self._topics = dict(topics)
        for group_id in sorted(self._groups):
            group = self._groups[group_id]
            if self._subscription_metadata(group) != group.subscribed_metadata:
                self._bump_group_epoch(group)
        return []

    def restore(self, group: ShareGroup, now_ms: int) -> list[Effect]:
        """Put back a group replayed from its records (start-up): members keep their ids, epochs and
        assignments, and each gets a fresh session timer, as Kafka does on loading a group."""
        self._groups[group.group_id] = group
        current = self._subscription_metadata(group)
        if metadata_hash(current) != group.metadata_hash:
            # the subscribed topics changed after the last stored epoch (a topic created or deleted
            # just before a crash): a new epoch, so the next heartbeat reassigns (KIP-1101's use of
            # the stored MetadataHash); the shell stores it
            self._bump_group_epoch(group)
        else:
            group.subscribed_metadata = current
        settings = self._settings(group.group_id)
        effects: list[Effect] = []
        for member_id in sorted(group.members):
            member = group.members[member_id]
            member.session_deadline_ms = now_ms + settings.session_timeout_ms
            effects.append(ArmTimer(session_timer_key(group.group_id, member_id), member.session_deadline_ms))
        return effects

    def unload(self, group_id: str) -> list[Effect]:
        """Forget the group as it is in memory (the shell reloads it from its records after a
        failed append): its members' session timers are cancelled."""
        group = self._groups.pop(group_id, None)
        if group is None:
            return []
        return [CancelTimer(session_timer_key(group_id, member_id)) for member_id in sorted(group.members)]

    def bump_group_epoch(self, group_id: str) -> None:
        """AlterShareGroupOffsets on an empty group: the group epoch moves on (KIP-932)."""
        group = self._groups.get(group_id)
        if group is not None:
            self._bump_group_epoch(group)
            if not group.members:
                group.assignment_epoch = group.group_epoch

    def ensure_group(self, group_id: str) -> ShareGroup:
        """The group, created empty when it does not exist (AlterShareGroupOffsets creates one)."""
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = ShareGroup(group_id)
        return group

    def delete_group(self, group_id: str) -> tuple[ErrorCode, str | None, list[Effect]]:
        """DeleteGroups: only an empty group can be deleted."""
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found, f"Group {group_id} not found.", []
        if group.members:
            return ErrorCode.non_empty_group, "The group is not empty.", []
        del self._groups[group_id]
        return ErrorCode.none, None, []

    # ------------------------------------------------------------------ describe and list
    def describe(self, group_ids: Iterable[str]) -> list[DescribedGroup]:
        names = {topic_id: name for name, (topic_id, _count) in self._topics.items()}
        out = []
        for group_id in group_ids:
            if not group_id:
                out.append(DescribedGroup(group_id, ErrorCode.invalid_group_id, "The group id must not be empty."))
                continue
            group = self._groups.get(group_id)
            if group is None:
                out.append(DescribedGroup(group_id, ErrorCode.group_id_not_found, f"Group {group_id} not found."))
                continue
            members = tuple(self._describe_member(group.members[m], names) for m in sorted(group.members))
            out.append(DescribedGroup(group_id, ErrorCode.none, None, group.state.value, group.group_epoch,
                                      group.assignment_epoch, ASSIGNOR_NAME, members))
        return out

    @staticmethod
    def _describe_member(member: ShareGroupMember, names: Mapping[TopicId, str]) -> DescribedMember:
        assignment = sorted((names[t], t, tuple(sorted(ps))) for t, ps in member.assignment.items() if t in names)
        return DescribedMember(member.member_id, member.rack_id, member.member_epoch, member.client_id,
                               member.client_host, member.subscribed_topic_names,
                               tuple((t, name, ps) for name, t, ps in assignment))

    def list_groups(self, states_filter: Iterable[str] = (),
                    types_filter: Iterable[str] = ()) -> list[tuple[str, str]]:
        """(group id, state) of every group that passes the filters (both case-insensitive; an empty
        filter passes everything). Every group here is a share group."""
        states = {s.strip().lower() for s in states_filter}
        types = {t.strip().lower() for t in types_filter}
        if types and GROUP_TYPE not in types:
            return []
        out = []
        for group_id in sorted(self._groups):
            state = self._groups[group_id].state.value
            if not states or state.lower() in states:
                out.append((group_id, state))
        return out

    # ------------------------------------------------------------------ internals
    def _bump_group_epoch(self, group: ShareGroup) -> None:
        group.group_epoch += 1
        group.subscribed_metadata = self._subscription_metadata(group)
        group.metadata_hash = metadata_hash(group.subscribed_metadata)

    def _subscription_metadata(self, group: ShareGroup) -> dict[str, tuple[TopicId, int]]:
        names = {t for m in group.members.values() for t in m.subscribed_topic_names}
        return {t: self._topics[t] for t in sorted(names) if t in self._topics}

    @staticmethod
    def _may_assign(group: ShareGroup, settings: GroupSettings, now_ms: int) -> bool:
        """KIP-1263: at most one new target assignment per share.assignment.interval.ms, except when
        there is no useful prior one (none yet, or it gives nothing to anyone)."""
        if settings.assignment_interval_ms <= 0 or group.last_assignment_ms is None:
            return True
        if not any(group.target.values()):
            return True
        return now_ms >= group.last_assignment_ms + settings.assignment_interval_ms

    def _compute_target(self, group: ShareGroup, now_ms: int) -> None:
        subscriptions = {m.member_id: m.subscribed_topic_names for m in group.members.values()}
        current = {m: group.target.get(m, {}) for m in group.members}
        target = assign(subscriptions, group.subscribed_metadata, current)
        group.target = {m: {t: tuple(ps) for t, ps in a.items()} for m, a in target.items()}
        group.touched = None  # every member's target record may have changed
        group.assignment_epoch = group.group_epoch
        group.last_assignment_ms = now_ms

    def _subscribed_part(self, member: ShareGroupMember, assignment: Assignment) -> Assignment:
        ids = {self._topics[t][0] for t in member.subscribed_topic_names if t in self._topics}
        return {t: tuple(ps) for t, ps in assignment.items() if t in ids}

    def _remove_member(self, group: ShareGroup, member_id: str, reason: str) -> list[Effect]:
        del group.members[member_id]
        group.target.pop(member_id, None)
        group.touch(member_id)
        self._bump_group_epoch(group)
        effects: list[Effect] = [CancelTimer(session_timer_key(group.group_id, member_id)),
                                 MemberRemoved(group.group_id, member_id, reason)]
        if not group.members:
            group.assignment_epoch = group.group_epoch  # KAFKA-20442 (4.4)
            group.target = {}
            effects.append(GroupEmptied(group.group_id))
        return effects
