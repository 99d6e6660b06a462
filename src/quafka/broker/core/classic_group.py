"""The classic consumer group coordinator (JoinGroup / SyncGroup / Heartbeat / LeaveGroup), as
Kafka 4.2's GroupMetadataManager runs classic groups. A pure machine: every entry point takes its
inputs and `now_ms` and returns effects (and, for Heartbeat and LeaveGroup, a result).

States (the transition table is `VALID_PREVIOUS_STATES` in classic_group_model.py):

- Empty: no members (maybe pending members that got MEMBER_ID_REQUIRED);
- PreparingRebalance: the join phase. Every member must send JoinGroup again; the responses are
  parked (a *token* per request, answered by a `JoinResponse` effect) until all have joined or the
  rebalance timeout (the largest of the members') passes. The first rebalance of an empty group
  waits `group.initial.rebalance.delay.ms`, extended while members keep joining, up to the
  rebalance timeout (Kafka's InitialDelayedJoin);
- CompletingRebalance: the generation was bumped and the protocol chosen; the members send
  SyncGroup (parked too) and the leader's carries the assignment. Its GroupMetadata record is
  appended, and when the append succeeds every parked SyncGroup is answered and the group is
  Stable. Members that send no SyncGroup within the rebalance timeout are removed;
- Stable: heartbeats;
- Dead: a deleted or unloaded group (it leaves the machine at once; requests then find no group).

Member ids come from the injected `new_member_id(prefix)` (the shell returns
f"{prefix}-{uuid4()}", prefix being the group.instance.id or else the client id, as
ClassicGroup.generateMemberId). Timers are ArmTimer/CancelTimer effects keyed by
heartbeat_timer_key / join_timer_key / sync_timer_key; the shell calls `on_timer(key, now_ms)`
when one fires (a re-arm with the same key replaces the earlier deadline).

The API (all keyword arguments; every call returns the effects to carry out, in order):

- join_group(token=, group_id=, member_id=, protocol_type=, protocols=[(name, metadata)], session_timeout_ms=,
  rebalance_timeout_ms=, group_instance_id=, client_id=, client_host=, api_version=, now_ms=) -> effects;
- sync_group(token=, group_id=, member_id=, generation_id=, group_instance_id=, protocol_type=, protocol_name=,
  assignments={member id: bytes}, now_ms=) -> effects;
- heartbeat(group_id=, member_id=, generation_id=, group_instance_id=, now_ms=) -> (error, effects);
- leave_group(group_id=, members=[(member id, instance id)], now_ms=) -> (LeaveResult, effects);
- on_timer(key, now_ms), on_append_complete(append_id, error, now_ms) -> effects;
- describe(group_id), list_groups(states_filter), delete(group_id, now_ms), maybe_delete_empty, unload,
  to_view(group_id), image(group_id), restore(group_id, value, now_ms).

Kafka references: GroupMetadataManager.classicGroupJoinToClassicGroup, classicGroupJoinNewMember,
classicGroupJoinNewStaticMember, classicGroupJoinNewDynamicMember, classicGroupJoinExistingMember,
updateStaticMemberThenRebalanceOrCompleteJoin, addMemberThenRebalanceOrCompleteJoin,
maybePrepareRebalanceOrCompleteJoin, prepareRebalance, maybeCompleteJoinPhase,
completeClassicGroupJoin, tryCompleteInitialRebalanceElseSchedule, expireClassicGroupMemberHeartbeat,
expirePendingSync, classicGroupSyncToClassicGroup, classicGroupHeartbeatToClassicGroup,
classicGroupLeaveToClassicGroup, describeGroups, replay(GroupMetadataKey, GroupMetadataValue),
onLoaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from quafka.protocol.classic_group_records import GroupMetadataValue
from quafka.protocol.errors import ErrorCode

from .classic_group_model import (
    UNKNOWN_MEMBER_ID,
    AppendGroupRecord,
    ArmTimer,
    CancelTimer,
    ClassicGroup,
    ClassicGroupConfig,
    ClassicGroupMember,
    ClassicState,
    DescribedClassicGroup,
    DescribedClassicMember,
    Effect,
    JoinMember,
    JoinResponse,
    LeaveMemberResponse,
    LeaveResult,
    ListedClassicGroup,
    SyncResponse,
    heartbeat_timer_key,
    join_timer_key,
    sync_timer_key,
)
from .classic_group_views import (
    describe_group,
    empty_group_value,
    group_from_value,
    image_of,
    listed_group,
    metadata_value,
    view_of,
)
from .classic_group_rebalance import ClassicGroupRebalancer, append_error_to_response_error
from .consumer_offsets import GroupView

__all__ = [
    "AppendGroupRecord", "ArmTimer", "CancelTimer", "ClassicGroupConfig", "ClassicGroupCoordinator", "ClassicState",
    "DescribedClassicGroup", "DescribedClassicMember", "Effect", "JoinMember", "JoinResponse", "LeaveMemberResponse",
    "LeaveResult", "ListedClassicGroup", "SyncResponse", "append_error_to_response_error", "heartbeat_timer_key",
    "join_timer_key", "sync_timer_key",
]

Protocols = Sequence[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class _JoinRequest:
    token: int
    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    api_version: int


class ClassicGroupCoordinator(ClassicGroupRebalancer):
    """All classic groups of the broker. `new_member_id(prefix)` returns a fresh member id."""

    def __init__(self, new_member_id: Callable[[str], str], config: ClassicGroupConfig | None = None) -> None:
        super().__init__(config)
        self._new_member_id = new_member_id
        self.completed_rebalances = 0  # generations that reached Stable

    # ------------------------------------------------------------------ lookups
    def group(self, group_id: str) -> ClassicGroup | None:
        return self._groups.get(group_id)

    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    # ------------------------------------------------------------------ JoinGroup
    def join_group(self, *, token: int, group_id: str, member_id: str, protocol_type: str, protocols: Protocols,
                   session_timeout_ms: int, rebalance_timeout_ms: int = -1, group_instance_id: str | None = None,
                   client_id: str = "", client_host: str = "", api_version: int = 9, now_ms: int) -> list[Effect]:
        """Serve one JoinGroup. Its answer is a JoinResponse(token, ...) effect, now or later.
        `rebalance_timeout_ms` < 0 (JoinGroup v0) means the session timeout."""
        out = self._begin(now_ms)
        request = _JoinRequest(token, group_id, member_id, group_instance_id, protocol_type,
                               tuple((name, bytes(metadata)) for name, metadata in protocols), session_timeout_ms,
                               session_timeout_ms if rebalance_timeout_ms < 0 else rebalance_timeout_ms,
                               client_id, client_host, api_version)
        # GroupCoordinatorService.joinGroup
        if not group_id:
            self._emit(JoinResponse(token, ErrorCode.invalid_group_id, member_id))
            return out
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            self._emit(JoinResponse(token, ErrorCode.invalid_session_timeout, member_id))
            return out
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self._groups.get(group_id)
        is_new_group = group is None
        if group is None:
            if not is_unknown:
                self._emit(JoinResponse(token, ErrorCode.unknown_member_id, member_id))
                return out
            group = self._groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=now_ms)

        if not self._accept_joining_member(group, member_id):
            self._remove(group, member_id)
            self._emit(JoinResponse(token, ErrorCode.group_max_size_reached, UNKNOWN_MEMBER_ID))
        elif is_unknown:
            self._join_new_member(group, request)
        else:
            self._join_existing_member(group, request)

        if is_new_group and not any(isinstance(e, AppendGroupRecord) for e in out):
            # newEmptyGroupMetadataRecord: commits the new group; if the append fails, the group goes
            self._append(group_id, empty_group_value(group), ("new-group", token))
        return out

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        """GroupMetadataManager.acceptJoiningMember (group.max.size)."""
        if group.state in (ClassicState.EMPTY, ClassicState.DEAD):
            return True
        member = group.members.get(member_id)
        if group.state is ClassicState.PREPARING_REBALANCE:
            return (member is not None and member.is_awaiting_join) or group.num_awaiting_join() < self.config.max_size
        return member is not None or len(group.members) < self.config.max_size

    def _join_new_member(self, group: ClassicGroup, request: _JoinRequest) -> None:
        if group.state is ClassicState.DEAD:
            self._emit(JoinResponse(request.token, ErrorCode.coordinator_not_available, UNKNOWN_MEMBER_ID))
            return
        if not group.supports_protocols(request.protocol_type, {name for name, _ in request.protocols}):
            self._emit(JoinResponse(request.token, ErrorCode.inconsistent_group_protocol, UNKNOWN_MEMBER_ID))
            return
        new_member_id = self._new_member_id(
            request.group_instance_id if request.group_instance_id is not None else request.client_id)
        if request.group_instance_id is not None:
            existing = group.static_members.get(request.group_instance_id)
            if existing is not None:
                self._update_static_member(group, request, existing, new_member_id)
            else:
                self._add_member(group, request, new_member_id)
        elif request.api_version >= 4:  # JoinGroupRequest.requiresKnownMemberId
            group.pending_join_members.add(new_member_id)
            self._arm(group, heartbeat_timer_key(group.group_id, new_member_id), request.session_timeout_ms,
                      ("heartbeat", new_member_id))
            self._emit(JoinResponse(request.token, ErrorCode.member_id_required, new_member_id))
        else:
            self._add_member(group, request, new_member_id)

    def _join_existing_member(self, group: ClassicGroup, request: _JoinRequest) -> None:
        member_id, token = request.member_id, request.token
        if group.state is ClassicState.DEAD:
            self._emit(JoinResponse(token, ErrorCode.coordinator_not_available, member_id))
            return
        if not group.supports_protocols(request.protocol_type, {name for name, _ in request.protocols}):
            self._emit(JoinResponse(token, ErrorCode.inconsistent_group_protocol, member_id))
            return
        if member_id in group.pending_join_members:
            if request.group_instance_id is not None:  # Kafka: IllegalStateException
                self._emit(JoinResponse(token, ErrorCode.unknown_server_error, member_id))
                return
            self._add_member(group, request, member_id)
            return
        error = group.validate_member(member_id, request.group_instance_id)
        if error is not ErrorCode.none:
            self._emit(JoinResponse(token, error, member_id))
            return
        member = group.members[member_id]
        state = group.state
        if state is ClassicState.PREPARING_REBALANCE:
            self._update_member_then_rebalance(group, member, request)
        elif state is ClassicState.COMPLETING_REBALANCE:
            if member.matches(request.protocols):
                # the member probably lost its JoinGroup response: the current generation again
                self._emit(self._current_join_response(group, member, token, with_members=group.is_leader(member_id)))
            else:
                self._update_member_then_rebalance(group, member, request)
        elif state is ClassicState.STABLE:
            if group.is_leader(member_id) or not member.matches(request.protocols):
                # a leader's JoinGroup always rebalances (topic metadata changed, say)
                self._update_member_then_rebalance(group, member, request)
            else:
                self._emit(self._current_join_response(group, member, token, with_members=False))
        else:  # Empty: let the member reset its generation and rejoin
            self._emit(JoinResponse(token, ErrorCode.unknown_member_id, member_id))

    def _add_member(self, group: ClassicGroup, request: _JoinRequest, member_id: str) -> None:
        """addMemberThenRebalanceOrCompleteJoin (and ClassicGroup.add)."""
        member = ClassicGroupMember(member_id, request.group_instance_id, request.client_id, request.client_host,
                                    request.rebalance_timeout_ms, request.session_timeout_ms, request.protocol_type,
                                    request.protocols, is_new=True)
        if group.state is ClassicState.PREPARING_REBALANCE and group.previous_state is ClassicState.EMPTY:
            group.new_member_added = True
        if member.group_instance_id is not None:
            group.static_members[member.group_instance_id] = member_id
        if not group.members:
            group.protocol_type = member.protocol_type
        if group.leader_id is None:
            group.leader_id = member_id
        member.join_token = request.token
        group.add(member)
        group.pending_join_members.discard(member_id)
        # a new member cannot heartbeat while its JoinGroup is parked: it times out after 5 minutes
        self._reschedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(group)

    def _update_member_then_rebalance(self, group: ClassicGroup, member: ClassicGroupMember,
                                      request: _JoinRequest) -> None:
        self._update_member(group, member, request.protocols, request.rebalance_timeout_ms,
                            request.session_timeout_ms, request.token)
        self._maybe_prepare_rebalance_or_complete_join(group)

    def _update_static_member(self, group: ClassicGroup, request: _JoinRequest, old_member_id: str,
                              new_member_id: str) -> None:
        """updateStaticMemberThenRebalanceOrCompleteJoin: a known group.instance.id joins with no
        member id; the new member id replaces the old (fenced: FENCED_INSTANCE_ID from now on)."""
        current_leader = group.leader_id or ""
        new_member = self._replace_static_member(group, request.group_instance_id or "", old_member_id, new_member_id)
        self._reschedule_heartbeat(group, new_member)
        old = (new_member.protocols, new_member.rebalance_timeout_ms, new_member.session_timeout_ms)
        self._update_member(group, new_member, request.protocols, request.rebalance_timeout_ms,
                            request.session_timeout_ms, request.token)
        if group.state is ClassicState.STABLE:
            if (group.protocol_name or "") == group.select_protocol():
                # the chosen protocol stays: no rebalance, store the group with the new member id
                self._append(group.group_id, metadata_value(group, {m.member_id: m.assignment
                                                                          for m in group.members.values()}),
                             ("static-rejoin", request.token, request.group_instance_id, old_member_id, new_member_id,
                              old, current_leader, request.api_version))
            else:
                self._maybe_prepare_rebalance_or_complete_join(group)
        elif group.state is ClassicState.COMPLETING_REBALANCE:
            # the leader may already have the old member id in hand: rebalance
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join_phase(group)

    # ------------------------------------------------------------------ SyncGroup
    def sync_group(self, *, token: int, group_id: str, member_id: str, generation_id: int,
                   group_instance_id: str | None = None, protocol_type: str | None = None,
                   protocol_name: str | None = None, assignments: Mapping[str, bytes] | None = None,
                   now_ms: int) -> list[Effect]:
        """Serve one SyncGroup. Its answer is a SyncResponse(token, ...) effect, now or later."""
        out = self._begin(now_ms)
        group = self._groups.get(group_id)
        if group is None or group.state is ClassicState.EMPTY:
            self._emit(SyncResponse(token, ErrorCode.unknown_member_id))
            return out
        error = self._validate_sync(group, member_id, group_instance_id, generation_id, protocol_type, protocol_name)
        if error is not ErrorCode.none:
            self._emit(SyncResponse(token, error))
        elif group.state is ClassicState.PREPARING_REBALANCE:
            self._emit(SyncResponse(token, ErrorCode.rebalance_in_progress))
        elif group.state is ClassicState.COMPLETING_REBALANCE:
            group.members[member_id].sync_token = token
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                assignment = {mid: bytes(a) for mid, a in (assignments or {}).items()}
                for mid in group.members:
                    assignment.setdefault(mid, b"")
                self._append(group_id, metadata_value(group, assignment),
                             ("sync", generation_id, assignment))
        elif group.state is ClassicState.STABLE:
            self._remove_pending_sync_member(group, member_id)
            member = group.members[member_id]
            self._emit(SyncResponse(token, ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment))
        return out

    @staticmethod
    def _validate_sync(group: ClassicGroup, member_id: str, group_instance_id: str | None, generation_id: int,
                       protocol_type: str | None, protocol_name: str | None) -> ErrorCode:
        """validateSyncGroup."""
        if group.state is ClassicState.DEAD:
            return ErrorCode.coordinator_not_available
        error = group.validate_member(member_id, group_instance_id)
        if error is not ErrorCode.none:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if _inconsistent(protocol_type, group.protocol_type) or _inconsistent(protocol_name, group.protocol_name):
            return ErrorCode.inconsistent_group_protocol
        return ErrorCode.none

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if group.state in (ClassicState.COMPLETING_REBALANCE, ClassicState.STABLE) and group.pending_sync_members:
            return
        self._cancel(group, sync_timer_key(group.group_id))

    # ------------------------------------------------------------------ appends
    def on_append_complete(self, append_id: int, error: ErrorCode, now_ms: int) -> list[Effect]:
        """The append of AppendGroupRecord(append_id) succeeded (error NONE) or failed."""
        out = self._begin(now_ms)
        pending = self._appends.pop(append_id, None)
        if pending is None:
            return out
        group_id, action = pending
        group = self._groups.get(group_id)
        if group is None:
            return out
        if action[0] == "sync":
            self._on_sync_stored(group, action[1], action[2], error)
        elif action[0] == "static-rejoin":
            self._on_static_rejoin_stored(group, action[1:], error)
        elif action[0] == "new-group" and error is not ErrorCode.none:
            self._on_new_group_failed(group, action[1], error)
        return out

    def _on_sync_stored(self, group: ClassicGroup, generation_id: int, assignment: Mapping[str, bytes],
                        error: ErrorCode) -> None:
        if group.state is not ClassicState.COMPLETING_REBALANCE or group.generation_id != generation_id:
            return  # the group moved on meanwhile: nothing to do
        if error is not ErrorCode.none:
            self._reset_and_propagate_assignment(group, append_error_to_response_error(error))
            self._maybe_prepare_rebalance_or_complete_join(group)
            return
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, ErrorCode.none)
        self._transition(group, ClassicState.STABLE)
        self.completed_rebalances += 1  # group-completed-rebalance-count (GroupCoordinatorMetrics)

    def _on_static_rejoin_stored(self, group: ClassicGroup, action: tuple, error: ErrorCode) -> None:
        token, instance_id, old_member_id, new_member_id, old, current_leader, api_version = action
        member = group.members.get(new_member_id)
        if member is None:
            return
        if error is not ErrorCode.none:
            # revert to the old member id
            self._update_member(group, member, old[0], old[1], old[2], None)
            restored = self._replace_static_member(group, instance_id, new_member_id, old_member_id)
            self._reschedule_heartbeat(group, restored)
            self._emit(JoinResponse(token, append_error_to_response_error(error), UNKNOWN_MEMBER_ID,
                                    group.generation_id, group.protocol_type, group.protocol_name, current_leader))
            return
        if member.join_token != token:
            return
        group.set_join_token(member, None)
        if api_version >= 9:  # JoinGroupRequest.supportsSkippingAssignment
            is_leader = group.is_leader(new_member_id)
            self._emit(self._current_join_response(group, member, token, with_members=is_leader,
                                                   skip_assignment=is_leader))
        else:
            self._emit(self._current_join_response(group, member, token, with_members=False, leader=current_leader))

    def _on_new_group_failed(self, group: ClassicGroup, token: int, error: ErrorCode) -> None:
        """The new group's first record failed: Kafka reverts to before the group existed."""
        for member in group.members.values():
            if member.join_token is not None:
                self._emit(JoinResponse(member.join_token, append_error_to_response_error(error)))
                group.set_join_token(member, None)
        self._drop(group)

    # ------------------------------------------------------------------ Heartbeat
    def heartbeat(self, *, group_id: str, member_id: str, generation_id: int, group_instance_id: str | None = None,
                  now_ms: int) -> tuple[ErrorCode, list[Effect]]:
        out = self._begin(now_ms)
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id, out
        if group.state is ClassicState.DEAD:
            return ErrorCode.coordinator_not_available, out
        error = group.validate_member(member_id, group_instance_id)
        if error is not ErrorCode.none:
            return error, out
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation, out
        if group.state is ClassicState.EMPTY:
            return ErrorCode.unknown_member_id, out
        self._reschedule_heartbeat(group, group.members[member_id])
        if group.state is ClassicState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress, out
        return ErrorCode.none, out

    # ------------------------------------------------------------------ LeaveGroup
    def leave_group(self, *, group_id: str, members: Iterable[tuple[str, str | None]],
                    now_ms: int) -> tuple[LeaveResult, list[Effect]]:
        """LeaveGroup v3+: `members` is (member id, group.instance.id); a member id of "" with an
        instance id removes that static member (an admin's removal). Handlers of v0-2 pass one
        (member id, None) and answer with the member's error as the top-level error."""
        out = self._begin(now_ms)
        group = self._groups.get(group_id)
        if group is None:
            return LeaveResult(ErrorCode.unknown_member_id), out
        if group.state is ClassicState.DEAD:
            return LeaveResult(ErrorCode.coordinator_not_available), out
        responses = []
        for member_id, instance_id in members:
            error = ErrorCode.none
            if member_id == UNKNOWN_MEMBER_ID:
                if instance_id is not None and instance_id in group.static_members:
                    self._remove_current_member(group, group.static_members[instance_id])
                else:
                    error = ErrorCode.unknown_member_id
            elif member_id in group.pending_join_members:
                self._remove(group, member_id)
            else:
                error = group.validate_member(member_id, instance_id)
                if error is ErrorCode.none:
                    self._remove_current_member(group, member_id)
            responses.append(LeaveMemberResponse(member_id, instance_id, error))
        if any(r.error is ErrorCode.none for r in responses):
            if group.state in (ClassicState.STABLE, ClassicState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group)
            elif group.state is ClassicState.PREPARING_REBALANCE:
                self._maybe_complete_join_phase(group)
        return LeaveResult(ErrorCode.none, tuple(responses)), out

    def _remove_current_member(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members[member_id]
        if member.join_token is not None:
            self._emit(JoinResponse(member.join_token, ErrorCode.unknown_member_id, UNKNOWN_MEMBER_ID))
            group.set_join_token(member, None)
        self._remove(group, member_id)

    # ------------------------------------------------------------------ describe, list, delete
    def describe(self, group_id: str) -> DescribedClassicGroup:
        """DescribeGroups for one group id (views.describe_group)."""
        return describe_group(group_id, self._groups.get(group_id))

    def list_groups(self, states_filter: Iterable[str] = ()) -> list[ListedClassicGroup]:
        """ListGroups: every group, or those in one of `states_filter` (compared case-insensitively)."""
        wanted = {s.lower() for s in states_filter}
        return [listed_group(g) for g in (self._groups[gid] for gid in sorted(self._groups))
                if not wanted or g.state.value.lower() in wanted]

    def delete(self, group_id: str, now_ms: int = 0) -> tuple[ErrorCode, list[Effect]]:
        """DeleteGroups (ClassicGroup.validateDeleteGroup): only an Empty group; its tombstone is
        appended (the shell adds the offsets' tombstones) and the group is gone."""
        out = self._begin(now_ms)
        group = self._groups.get(group_id)
        if group is None or group.state is ClassicState.DEAD:
            return ErrorCode.group_id_not_found, out
        if group.state is not ClassicState.EMPTY:
            return ErrorCode.non_empty_group, out
        self._append(group_id, None)
        self._drop(group)
        return ErrorCode.none, out

    def maybe_delete_empty(self, group_id: str, now_ms: int = 0) -> list[Effect]:
        """GroupMetadataManager.maybeDeleteGroup: the shell calls it when an Empty group has no
        committed offsets left (offset expiry); the group's tombstone is appended."""
        group = self._groups.get(group_id)
        if group is None or group.state is not ClassicState.EMPTY:
            return self._begin(now_ms)
        return self.delete(group_id, now_ms)[1]

    def unload(self, group_id: str, now_ms: int = 0) -> list[Effect]:
        """onUnloaded: parked requests get NOT_COORDINATOR, timers go, the group leaves memory."""
        out = self._begin(now_ms)
        group = self._groups.get(group_id)
        if group is not None:
            for member in group.members.values():
                if member.join_token is not None:
                    self._emit(JoinResponse(member.join_token, ErrorCode.not_coordinator, member.member_id))
                if member.sync_token is not None:
                    self._emit(SyncResponse(member.sync_token, ErrorCode.not_coordinator))
            self._drop(group)
        return out

    # ------------------------------------------------------------------ online migration
    def surrender(self, group_id: str, now_ms: int) -> tuple[ClassicGroup | None, list[Effect]]:
        """The group leaves this machine to become a consumer group (GroupMetadataManager.
        convertToConsumerGroup): parked JoinGroups and SyncGroups get REBALANCE_IN_PROGRESS so
        that their members rejoin, its timers go. The caller writes its tombstone."""
        out = self._begin(now_ms)
        group = self._groups.get(group_id)
        if group is None:
            return None, out
        for member in group.members.values():
            if member.join_token is not None:
                self._emit(JoinResponse(member.join_token, ErrorCode.rebalance_in_progress, member.member_id))
                group.set_join_token(member, None)
            if member.sync_token is not None:
                self._emit(SyncResponse(member.sync_token, ErrorCode.rebalance_in_progress))
                member.sync_token = None
        self._drop(group)
        return group, out

    def adopt(self, group_id: str, value: GroupMetadataValue, now_ms: int) -> list[Effect]:
        """A consumer group downgraded to this classic group, whose GroupMetadata record the caller
        wrote (GroupMetadataManager.convertToClassicGroup): Stable with its members, session timers
        armed, then a rebalance so that every member rejoins."""
        out = self.restore(group_id, value, now_ms)
        group = self._groups[group_id]
        if group.state is ClassicState.STABLE:
            self._prepare_rebalance(group)
        return out

    # ------------------------------------------------------------------ offsets view
    def to_view(self, group_id: str) -> GroupView:
        """What consumer_offsets needs to validate commits and expire offsets."""
        return view_of(self._groups.get(group_id))

    # ------------------------------------------------------------------ durability
    def image(self, group_id: str) -> GroupMetadataValue | None:
        """The GroupMetadataValue for the group as it is now (views.image_of); None for no group."""
        group = self._groups.get(group_id)
        return None if group is None else image_of(group)

    def restore(self, group_id: str, value: GroupMetadataValue | None, now_ms: int) -> list[Effect]:
        """Replay one GroupMetadata record (start-up), then what onLoaded does: a group with members
        is Stable, one without is Empty; each member's session timer is armed; a group over
        group.max.size rebalances. A tombstone (None) removes the group."""
        out = self._begin(now_ms)
        existing = self._groups.get(group_id)
        if existing is not None:
            for key in sorted(existing.timers, key=repr):
                self._emit(CancelTimer(key))
            self._groups.pop(group_id)
        if value is None:
            return out
        group = group_from_value(group_id, value)
        self._groups[group_id] = group
        for member in group.members.values():
            self._reschedule_heartbeat(group, member)
        if len(group.members) > self.config.max_size:
            self._prepare_rebalance(group)
        return out


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
