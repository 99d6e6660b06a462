"""Reconciliation of one consumer-group member towards its target assignment (Kafka's
modern/consumer/CurrentAssignmentBuilder), as a pure function.

A member moves to the target assignment (and to the target epoch) only after it has revoked the
partitions the target takes from it, and it is given a partition only once no other member owns
it (at any epoch). Its states (MemberState; the int8 stored in record 8):

- STABLE: it holds what its epoch's target gives it;
- UNREVOKED_PARTITIONS: it must revoke `pending_revocation` first and stays at its epoch until it
  reports (in its owned partitions) that it no longer holds any of them;
- UNRELEASED_PARTITIONS: it is at the target epoch, but some of its target partitions are still
  owned by other members; they are added when they are released.

`reconcile` is `CurrentAssignmentBuilder.build`: it takes the member's assignment state, the target
(epoch and partitions), the topic ids the member subscribes to, whether its subscription changed,
the partitions it reports owning (None when the heartbeat omitted them) and `partition_epoch`
(topic id, partition) -> epoch of the member owning it, -1 for none. It returns the new state, or
raises FencedInUnknownState (Kafka fences a member in the UNKNOWN state that still owns partitions).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Collection, Hashable, Mapping

__all__ = ["AssignmentState", "FencedInUnknownState", "MemberState", "Partitions", "reconcile"]

TopicId = Hashable
Partitions = Mapping[TopicId, frozenset[int]]


class MemberState(enum.IntEnum):
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclass(frozen=True, slots=True)
class AssignmentState:
    """A member's side of the reconciliation (ConsumerGroupMember's epoch, state and partitions)."""

    state: MemberState = MemberState.STABLE
    member_epoch: int = 0
    previous_member_epoch: int = -1
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == MemberState.STABLE and self.member_epoch == epoch

    def with_epoch(self, epoch: int, **changes) -> "AssignmentState":
        """ConsumerGroupMember.Builder.updateMemberEpoch: the old epoch becomes the previous one."""
        return AssignmentState(changes.get("state", self.state), epoch, self.member_epoch,
                               changes.get("assigned", self.assigned),
                               changes.get("pending_revocation", self.pending_revocation))

    def replace(self, **changes) -> "AssignmentState":
        return AssignmentState(changes.get("state", self.state), self.member_epoch,
                               self.previous_member_epoch, changes.get("assigned", self.assigned),
                               changes.get("pending_revocation", self.pending_revocation))


class FencedInUnknownState(Exception):
    pass


def _owns_any(owned: Partitions | None, partitions: Partitions) -> bool:
    """CurrentAssignmentBuilder.ownsRevokedPartitions: unknown ownership counts as owning."""
    if owned is None:
        return True
    return any(p in partitions.get(t, ()) for t, ps in owned.items() for p in ps)


def _clean(m: Mapping[TopicId, Collection[int]]) -> dict[TopicId, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in m.items() if ps}


def reconcile(member: AssignmentState, *, target_epoch: int, target: Partitions,
              subscribed_topic_ids: Collection[TopicId], subscription_changed: bool,
              owned: Partitions | None, partition_epoch: Callable[[TopicId, int], int]) -> AssignmentState:
    args = (member, target_epoch, target, subscribed_topic_ids, owned, partition_epoch)
    if member.state == MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next_assignment(member.member_epoch, *args)
        if subscription_changed:
            return _update_current(member, subscribed_topic_ids, owned)
        return member
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return _update_current(member, subscribed_topic_ids, owned) if subscription_changed else member
        return _next_assignment(member.member_epoch, *args)
    if member.state == MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(member.member_epoch, *args)
    if owned is None or any(owned.values()):
        raise FencedInUnknownState("The consumer group member is in a unknown state. "
                                   "The member must abandon all its partitions and rejoin.")
    return _next_assignment(target_epoch, *args)


def _update_current(member: AssignmentState, subscribed: Collection[TopicId],
                    owned: Partitions | None) -> AssignmentState:
    """CurrentAssignmentBuilder.updateCurrentAssignment: partitions of topics no longer subscribed
    move from assigned to pending revocation."""
    dropped = {t: ps for t, ps in member.assigned.items() if t not in subscribed}
    if not dropped:
        return member
    assigned = {t: ps for t, ps in member.assigned.items() if t in subscribed}
    pending = dict(member.pending_revocation)
    for t, ps in dropped.items():
        pending[t] = frozenset(pending.get(t, frozenset()) | ps)
    if pending and _owns_any(owned, pending):
        return member.replace(state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned, pending_revocation=pending)
    return member.replace(assigned=assigned)


def _next_assignment(epoch: int, member: AssignmentState, target_epoch: int, target: Partitions,
                     subscribed: Collection[TopicId], owned: Partitions | None,
                     partition_epoch: Callable[[TopicId, int], int]) -> AssignmentState:
    """CurrentAssignmentBuilder.computeNextAssignment."""
    unreleased = False
    assigned: dict[TopicId, set[int]] = {}
    revoking: dict[TopicId, set[int]] = {}
    to_assign: dict[TopicId, set[int]] = {}
    for t in set(target) | set(member.assigned):
        wanted = set(target.get(t, ())) if t in subscribed else set()
        current = set(member.assigned.get(t, ()))
        keep = current & wanted
        pending_mine = member.pending_revocation.get(t, frozenset())
        new = wanted - keep
        blocked = {p for p in new if partition_epoch(t, p) != -1 and p not in pending_mine}
        unreleased = unreleased or bool(blocked)
        assigned[t], revoking[t], to_assign[t] = keep, current - keep, new - blocked
    assigned_c, revoking_c, to_assign_c = _clean(assigned), _clean(revoking), _clean(to_assign)
    if revoking_c and _owns_any(owned, revoking_c):
        return member.with_epoch(epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned_c,
                                 pending_revocation=revoking_c)
    if to_assign_c:
        merged = _clean({t: assigned.get(t, set()) | to_assign.get(t, set()) for t in set(assigned) | set(to_assign)})
        state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        return member.with_epoch(target_epoch, state=state, assigned=merged, pending_revocation={})
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.with_epoch(target_epoch, state=state, assigned=assigned_c, pending_revocation={})
