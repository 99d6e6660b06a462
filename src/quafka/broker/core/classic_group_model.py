"""The data of the classic group machine (classic_group.py): configuration, members, groups,
the state transition table, the effects and the results. Kafka 4.2's `ClassicGroup`,
`ClassicGroupMember` and `ClassicGroupState` (group-coordinator module, package classic).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from quafka.protocol.errors import ErrorCode

from .consumer_offsets import ClassicState
from .share_group import ArmTimer, CancelTimer

__all__ = [
    "ArmTimer", "AppendGroupRecord", "CancelTimer", "ClassicGroup", "ClassicGroupConfig", "ClassicGroupMember",
    "ClassicState", "DescribedClassicGroup", "DescribedClassicMember", "Effect", "JoinMember", "JoinResponse",
    "LeaveMemberResponse", "LeaveResult", "ListedClassicGroup", "SyncResponse", "VALID_PREVIOUS_STATES",
    "heartbeat_timer_key", "join_timer_key", "sync_timer_key",
]

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
GROUP_TYPE = "classic"

# ClassicGroupState's validPreviousStates: the one transition table of the machine. A transition
# to a state from one not listed is a bug (Kafka: IllegalStateException in assertValidTransition).
VALID_PREVIOUS_STATES: dict[ClassicState, frozenset[ClassicState]] = {
    ClassicState.EMPTY: frozenset({ClassicState.PREPARING_REBALANCE}),
    ClassicState.PREPARING_REBALANCE: frozenset(
        {ClassicState.STABLE, ClassicState.COMPLETING_REBALANCE, ClassicState.EMPTY}),
    ClassicState.COMPLETING_REBALANCE: frozenset({ClassicState.PREPARING_REBALANCE}),
    ClassicState.STABLE: frozenset({ClassicState.COMPLETING_REBALANCE}),
    ClassicState.DEAD: frozenset(ClassicState),
}


@dataclass(frozen=True, slots=True)
class ClassicGroupConfig:
    """Kafka's group.* broker settings for classic groups (GroupCoordinatorConfig defaults)."""

    min_session_timeout_ms: int = 6000          # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1800000       # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000      # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1                   # group.max.size
    new_member_join_timeout_ms: int = 300000    # CLASSIC_GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS (not configurable)


# --------------------------------------------------------------------------- timer keys


def heartbeat_timer_key(group_id: str, member_id: str) -> tuple:
    """Kafka's "heartbeat-<group>-<member>": session expiry of a member or pending member."""
    return ("classic-group-heartbeat", group_id, member_id)


def join_timer_key(group_id: str) -> tuple:
    """Kafka's "join-<group>": the join phase timeout, or the initial rebalance delay."""
    return ("classic-group-join", group_id)


def sync_timer_key(group_id: str) -> tuple:
    """Kafka's "sync-<group>": the CompletingRebalance phase waiting for every SyncGroup."""
    return ("classic-group-sync", group_id)


# --------------------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResponse:
    """Complete the JoinGroup parked under `token` with this response."""

    token: int
    error: ErrorCode
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinMember, ...] = ()  # for the leader only
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResponse:
    """Complete the SyncGroup parked under `token` with this response."""

    token: int
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class AppendGroupRecord:
    """Append GroupMetadataKey(group_id) / `value` (None: a tombstone) to __consumer_offsets (the
    shell encodes it with protocol.classic_group_records). When `append_id` is not None, report
    the outcome with `ClassicGroupCoordinator.on_append_complete(append_id, error, now_ms)`:
    some responses wait for it (SyncGroup from the leader, a static member's rejoin in Stable)."""

    group_id: str
    value: object  # GroupMetadataValue | None (kept loose so that this module needs no protocol import)
    append_id: int | None = None


Effect = ArmTimer | CancelTimer | JoinResponse | SyncResponse | AppendGroupRecord


# --------------------------------------------------------------------------- state


@dataclass(slots=True)
class ClassicGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's order of preference
    assignment: bytes = b""
    join_token: int | None = None  # a JoinGroup parked until the join phase completes
    sync_token: int | None = None  # a SyncGroup parked until the leader's assignment is stored
    is_new: bool = False

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_token is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_token is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def has_satisfied_heartbeat(self) -> bool:
        """ClassicGroupMember.hasSatisfiedHeartbeat: a new member may expire while it waits; others
        waiting for a join or sync response count as alive."""
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def metadata(self, protocol_name: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        raise ValueError(f"Member {self.member_id} does not support protocol {protocol_name}")

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.protocols}

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return protocols == self.protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"Member {self.member_id} does not support any of the candidate protocols")


@dataclass(slots=True)
class ClassicGroup:
    """A classic group. Two counts are kept member by member, as Kafka's ClassicGroup keeps
    `numMembersAwaitingJoinResponse` and `supportedProtocols` (updated in add/remove/updateMember/
    completeJoinFuture), so that neither a JoinGroup nor the end of a join phase walks every member
    once per member (O(members²) per rebalance): `awaiting_join` (members with a parked JoinGroup)
    and `supported_protocols` (protocol name -> members supporting it). Add and remove members,
    park and answer JoinGroups and change protocols through `add`, `pop`, `set_join_token` and
    `set_protocols`, never on the member directly."""

    group_id: str
    state: ClassicState = ClassicState.EMPTY
    previous_state: ClassicState = ClassicState.DEAD
    state_timestamp_ms: int | None = None  # currentStateTimestamp
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicGroupMember] = field(default_factory=dict)  # in join order
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_join_members: set[str] = field(default_factory=set)  # got MEMBER_ID_REQUIRED, not joined yet
    pending_sync_members: set[str] = field(default_factory=set)
    new_member_added: bool = False  # during the initial rebalance delay
    # armed timers: key -> (deadline_ms, what to do when it fires)
    timers: dict[tuple, tuple[int, tuple]] = field(default_factory=dict)
    awaiting_join: int = 0  # members with a parked JoinGroup (numMembersAwaitingJoinResponse)
    supported_protocols: Counter[str] = field(default_factory=Counter)  # name -> members supporting it

    def add(self, member: ClassicGroupMember) -> None:
        self.members[member.member_id] = member
        self._count_protocols(member, 1)
        self.awaiting_join += member.is_awaiting_join

    def pop(self, member_id: str) -> ClassicGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._count_protocols(member, -1)
            self.awaiting_join -= member.is_awaiting_join
        return member

    def set_join_token(self, member: ClassicGroupMember, token: int | None) -> None:
        self.awaiting_join += (token is not None) - member.is_awaiting_join
        member.join_token = token

    def set_protocols(self, member: ClassicGroupMember, protocols: tuple[tuple[str, bytes], ...]) -> None:
        self._count_protocols(member, -1)
        member.protocols = protocols
        self._count_protocols(member, 1)

    def _count_protocols(self, member: ClassicGroupMember, delta: int) -> None:
        counts = self.supported_protocols
        for name in member.protocol_names():
            counts[name] += delta
            if counts[name] <= 0:
                del counts[name]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def num_awaiting_join(self) -> int:
        return self.awaiting_join

    def has_all_members_joined(self) -> bool:
        return self.num_awaiting_join() == len(self.members) and not self.pending_join_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[ClassicState.PREPARING_REBALANCE]

    def transition_to(self, state: ClassicState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            allowed = sorted(s.value for s in VALID_PREVIOUS_STATES[state])
            raise AssertionError(f"Group {self.group_id} should be in one of {allowed} states before moving to "
                                 f"{state.value} state. Instead it is in {self.state.value} state.")
        self.previous_state, self.state = self.state, state
        self.state_timestamp_ms = now_ms

    def supported_count(self, protocol_name: str) -> int:
        return self.supported_protocols.get(protocol_name, 0)

    def supports_protocols(self, protocol_type: str, protocol_names: set[str]) -> bool:
        """ClassicGroup.supportsProtocols."""
        if self.state is ClassicState.EMPTY:
            return bool(protocol_type) and bool(protocol_names)
        return (self.protocol_type == protocol_type
                and any(self.supported_count(name) == len(self.members) for name in protocol_names))

    def select_protocol(self) -> str:
        """ClassicGroup.selectProtocol: among the protocols every member supports, each member
        votes for its most preferred; the most votes wins. Kafka breaks a tie by HashMap order;
        quafka by the first protocol to get a vote, in join order (deterministic)."""
        if not self.members:
            raise AssertionError("Cannot select protocol for empty group")
        candidates = {name for name, count in self.supported_protocols.items() if count == len(self.members)}
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        return next(name for name, count in votes.items() if count == best)

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """ClassicGroup.validateMember."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.unknown_member_id
            if existing != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def current_join_members(self) -> tuple[JoinMember, ...]:
        return tuple(JoinMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                     for m in self.members.values())


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class LeaveMemberResponse:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error: ErrorCode = ErrorCode.none
    members: tuple[LeaveMemberResponse, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes  # the chosen protocol's metadata in Stable, else empty
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedClassicGroup:
    group_id: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""  # the chosen protocol, in Stable only
    members: tuple[DescribedClassicMember, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedClassicGroup:
    group_id: str
    state: str
    protocol_type: str
    group_type: str = GROUP_TYPE
