"""The rebalance engine of the classic group machine (classic_group.py builds the request
handlers on it): the join phase (prepareRebalance, maybeCompleteJoinPhase,
completeClassicGroupJoin, the initial delay), assignment propagation, member removal, the timers
(heartbeat / join / sync expiry) and the plumbing that collects effects. Kafka 4.2
GroupMetadataManager, classic paths.
"""

from __future__ import annotations

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
    Effect,
    JoinResponse,
    SyncResponse,
    heartbeat_timer_key,
    join_timer_key,
    sync_timer_key,
)
from .classic_group_views import metadata_value

__all__ = ["ClassicGroupRebalancer", "append_error_to_response_error"]


def append_error_to_response_error(error: ErrorCode) -> ErrorCode:
    """GroupMetadataManager.appendGroupMetadataErrorToResponseError."""
    if error in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas, ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.unknown_server_error
    return error


class ClassicGroupRebalancer:
    """The groups and the rebalance engine; see classic_group.ClassicGroupCoordinator."""

    def __init__(self, config: ClassicGroupConfig | None = None) -> None:
        self.config = config or ClassicGroupConfig()
        self._groups: dict[str, ClassicGroup] = {}
        self._appends: dict[int, tuple] = {}  # append id -> (group id, what to do when the append completes)
        self._next_append_id = 1
        self._now_ms = 0
        self._out: list[Effect] = []

    # ------------------------------------------------------------------ plumbing
    def _begin(self, now_ms: int) -> list[Effect]:
        self._now_ms = now_ms
        self._out = []
        return self._out

    def _emit(self, effect: Effect) -> None:
        self._out.append(effect)

    def _arm(self, group: ClassicGroup, key: tuple, delay_ms: int, action: tuple) -> None:
        deadline_ms = self._now_ms + delay_ms
        group.timers[key] = (deadline_ms, action)
        self._emit(ArmTimer(key, deadline_ms))

    def _cancel(self, group: ClassicGroup, key: tuple) -> None:
        if group.timers.pop(key, None) is not None:
            self._emit(CancelTimer(key))

    def _append(self, group_id: str, value: GroupMetadataValue | None, on_complete: tuple | None = None) -> None:
        append_id = None
        if on_complete is not None:
            append_id = self._next_append_id
            self._next_append_id += 1
            self._appends[append_id] = (group_id, on_complete)
        self._emit(AppendGroupRecord(group_id, value, append_id))

    def _reschedule_heartbeat(self, group: ClassicGroup, member: ClassicGroupMember,
                              timeout_ms: int | None = None) -> None:
        key = heartbeat_timer_key(group.group_id, member.member_id)
        self._arm(group, key, member.session_timeout_ms if timeout_ms is None else timeout_ms,
                  ("heartbeat", member.member_id))

    def _transition(self, group: ClassicGroup, state: ClassicState) -> None:
        group.transition_to(state, self._now_ms)

    def _current_join_response(self, group: ClassicGroup, member: ClassicGroupMember, token: int, *,
                               with_members: bool, skip_assignment: bool = False,
                               leader: str | None = None) -> JoinResponse:
        return JoinResponse(token, ErrorCode.none, member.member_id, group.generation_id, group.protocol_type,
                            group.protocol_name, (group.leader_id or "") if leader is None else leader,
                            group.current_join_members() if with_members else (), skip_assignment)

    @staticmethod
    def _update_member(group: ClassicGroup, member: ClassicGroupMember, protocols: tuple[tuple[str, bytes], ...],
                       rebalance_timeout_ms: int, session_timeout_ms: int, token: int | None) -> None:
        """ClassicGroup.updateMember (a parked JoinGroup token is replaced, not answered)."""
        group.set_protocols(member, protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        group.set_join_token(member, token)

    def _replace_static_member(self, group: ClassicGroup, instance_id: str, old_member_id: str,
                               new_member_id: str) -> ClassicGroupMember:
        """ClassicGroup.replaceStaticMember: the old member's parked requests get FENCED_INSTANCE_ID."""
        old = group.pop(old_member_id)
        assert old is not None, old_member_id
        if old.join_token is not None:
            self._emit(JoinResponse(old.join_token, ErrorCode.fenced_instance_id, old_member_id))
        if old.sync_token is not None:
            self._emit(SyncResponse(old.sync_token, ErrorCode.fenced_instance_id))
        group.timers.pop(heartbeat_timer_key(group.group_id, old_member_id), None)
        self._emit(CancelTimer(heartbeat_timer_key(group.group_id, old_member_id)))
        new = ClassicGroupMember(new_member_id, old.group_instance_id, old.client_id, old.client_host,
                                 old.rebalance_timeout_ms, old.session_timeout_ms, old.protocol_type, old.protocols,
                                 old.assignment)
        group.add(new)
        if group.leader_id == old_member_id:
            group.leader_id = new_member_id
        group.static_members[instance_id] = new_member_id
        if old_member_id in group.pending_sync_members:
            group.pending_sync_members.discard(old_member_id)
            group.pending_sync_members.add(new_member_id)
        return new

    # ------------------------------------------------------------------ rebalance
    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join_phase(group)

    def _prepare_rebalance(self, group: ClassicGroup) -> None:
        if group.state is ClassicState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment(group, ErrorCode.rebalance_in_progress)
        group.pending_sync_members.clear()
        self._cancel(group, sync_timer_key(group.group_id))
        initial = group.state is ClassicState.EMPTY
        if initial:
            delay_ms = self.config.initial_rebalance_delay_ms
            remaining_ms = max(group.rebalance_timeout_ms() - delay_ms, 0)
            self._arm(group, join_timer_key(group.group_id), delay_ms, ("initial-join", delay_ms, remaining_ms))
        self._transition(group, ClassicState.PREPARING_REBALANCE)
        if not initial:
            if group.has_all_members_joined():
                self._complete_join(group)
            else:
                self._arm(group, join_timer_key(group.group_id), group.rebalance_timeout_ms(), ("join",))

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        if (group.state is ClassicState.PREPARING_REBALANCE and group.previous_state is not ClassicState.EMPTY
                and group.has_all_members_joined()):
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        """completeClassicGroupJoin: dynamic members that did not rejoin are removed; the next
        generation starts (CompletingRebalance), or the group is Empty."""
        self._cancel(group, join_timer_key(group.group_id))
        for member in [m for m in group.members.values() if not m.is_awaiting_join and not m.is_static]:
            self._remove(group, member.member_id)
        if group.state is ClassicState.DEAD:
            return
        if not self._maybe_elect_new_joined_leader(group) and group.members:
            # nobody rejoined: wait another rebalance timeout for the sessions to expire
            self._arm(group, join_timer_key(group.group_id), group.rebalance_timeout_ms(), ("join",))
            return
        group.generation_id += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            self._transition(group, ClassicState.COMPLETING_REBALANCE)
        else:
            group.protocol_name = None
            self._transition(group, ClassicState.EMPTY)
        group.pending_sync_members.clear()
        if group.state is ClassicState.EMPTY:
            self._append(group.group_id, metadata_value(group, {}))  # a failure is only logged by Kafka
            return
        for member in group.members.values():
            if member.join_token is not None:
                self._emit(self._current_join_response(group, member, member.join_token,
                                                       with_members=group.is_leader(member.member_id)))
                group.set_join_token(member, None)
            self._reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._arm(group, sync_timer_key(group.group_id), group.rebalance_timeout_ms(),
                  ("sync", group.generation_id))

    def _maybe_elect_new_joined_leader(self, group: ClassicGroup) -> bool:
        if group.leader_id is None:
            return False
        if group.members[group.leader_id].is_awaiting_join:
            return True
        for member in group.members.values():
            if member.is_awaiting_join:
                group.leader_id = member.member_id
                return True
        return False

    def _reset_and_propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error is ErrorCode.none
        for member in group.members.values():
            if member.sync_token is not None:
                self._emit(SyncResponse(member.sync_token, error, group.protocol_type if ok else None,
                                        group.protocol_name if ok else None, member.assignment))
                member.sync_token = None
                self._reschedule_heartbeat(group, member)

    def _remove(self, group: ClassicGroup, member_id: str) -> None:
        """ClassicGroup.remove, plus cancelling the member's session timer."""
        member = group.pop(member_id)
        if member is not None and member.group_instance_id is not None:
            group.static_members.pop(member.group_instance_id, None)
        if group.leader_id == member_id:
            group.leader_id = next(iter(group.members), None)
        group.pending_join_members.discard(member_id)
        group.pending_sync_members.discard(member_id)
        self._cancel(group, heartbeat_timer_key(group.group_id, member_id))

    def _remove_member_and_update(self, group: ClassicGroup, member: ClassicGroupMember) -> None:
        """removeMemberAndUpdateClassicGroup (session expiry)."""
        if member.join_token is not None:
            self._emit(JoinResponse(member.join_token, ErrorCode.unknown_member_id, UNKNOWN_MEMBER_ID))
            group.set_join_token(member, None)
        self._remove(group, member.member_id)
        if group.state in (ClassicState.STABLE, ClassicState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group)
        elif group.state is ClassicState.PREPARING_REBALANCE and group.has_all_members_joined():
            self._complete_join(group)

    def _drop(self, group: ClassicGroup) -> None:
        for key in sorted(group.timers, key=repr):
            self._emit(CancelTimer(key))
        group.timers.clear()
        group.transition_to(ClassicState.DEAD, self._now_ms)
        self._groups.pop(group.group_id, None)

    # ------------------------------------------------------------------ timers
    def on_timer(self, key: tuple, now_ms: int) -> list[Effect]:
        """A timer armed by an ArmTimer effect fired. Stale or cancelled timers do nothing."""
        out = self._begin(now_ms)
        group = self._groups.get(key[1]) if len(key) > 1 else None
        if group is None or key not in group.timers:
            return out
        deadline_ms, action = group.timers[key]
        if now_ms < deadline_ms:
            self._emit(ArmTimer(key, deadline_ms))
            return out
        del group.timers[key]
        if action[0] == "heartbeat":
            self._expire_heartbeat(group, action[1])
        elif action[0] == "join":
            self._complete_join(group)
        elif action[0] == "initial-join":
            self._try_complete_initial_rebalance(group, action[1], action[2])
        elif action[0] == "sync":
            self._expire_pending_sync(group, action[1])
        return out

    def _expire_heartbeat(self, group: ClassicGroup, member_id: str) -> None:
        """expireClassicGroupMemberHeartbeat."""
        if group.state is ClassicState.DEAD:
            return
        if member_id in group.pending_join_members:
            self._remove(group, member_id)
            if group.state is ClassicState.PREPARING_REBALANCE and group.has_all_members_joined():
                self._complete_join(group)
            return
        member = group.members.get(member_id)
        if member is not None and not member.has_satisfied_heartbeat():
            self._remove_member_and_update(group, member)

    def _try_complete_initial_rebalance(self, group: ClassicGroup, delay_ms: int, remaining_ms: int) -> None:
        """tryCompleteInitialRebalanceElseSchedule (InitialDelayedJoin)."""
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay_ms = min(self.config.initial_rebalance_delay_ms, remaining_ms)
            new_remaining_ms = max(remaining_ms - delay_ms, 0)
            self._arm(group, join_timer_key(group.group_id), new_delay_ms,
                      ("initial-join", new_delay_ms, new_remaining_ms))
        else:
            self._complete_join(group)

    def _expire_pending_sync(self, group: ClassicGroup, generation_id: int) -> None:
        """expirePendingSync: members that sent no SyncGroup in time are removed."""
        if generation_id != group.generation_id:
            return
        if group.state not in (ClassicState.COMPLETING_REBALANCE, ClassicState.STABLE):
            return
        if group.pending_sync_members:
            for member_id in [m for m in group.members if m in group.pending_sync_members]:
                self._remove(group, member_id)
            self._prepare_rebalance(group)
