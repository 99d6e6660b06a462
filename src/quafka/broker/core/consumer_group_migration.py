"""Online migration between classic and consumer groups (KIP-848's upgrade path), as Kafka 4.x's
GroupMetadataManager does it under `group.consumer.migration.policy` (ConsumerGroupMigrationPolicy:
disabled, upgrade, downgrade, bidirectional — Kafka's default):

- **upgrade**: a ConsumerGroupHeartbeat joining (epoch 0) a classic group with members converts it
  in place (getOrMaybeCreateConsumerGroup -> validateOnlineUpgrade -> convertToConsumerGroup and
  ConsumerGroup.fromClassicGroup): the group epoch and the target assignment epoch become the
  classic generation, every classic member becomes a consumer-group member at that epoch, Stable,
  holding (and targeted with) the partitions of its last classic assignment, with its session
  timeout and supported protocols kept as its ClassicMemberMetadata. `upgrade_refusal` says why a
  group may not be converted; `adopt_classic` converts it (the shell writes the classic group's
  tombstone and the consumer group's records in one append).
- **classic members inside a consumer group** speak JoinGroup / SyncGroup / Heartbeat / LeaveGroup
  and the consumer group serves them (classicGroupJoinToConsumerGroup,
  classicGroupSyncToConsumerGroup, classicGroupHeartbeatToConsumerGroup,
  classicGroupLeaveToConsumerGroup): a JoinGroup is a heartbeat carrying the member's subscription
  and owned partitions (decoded from the first protocol's metadata) and is answered at once with
  the member epoch as the generation and no leader (the member syncs as a follower); the SyncGroup
  returns the member's assigned partitions in the consumer protocol; a Heartbeat answers
  REBALANCE_IN_PROGRESS when the member must rejoin (its epoch is behind the group's, it has
  partitions to revoke, or partitions it waits for were released). Their timers: the session
  timer with the member's own session timeout, a join timer (rebalance timeout) from the
  REBALANCE_IN_PROGRESS until the member rejoins, a sync timer from the JoinGroup until the
  SyncGroup; either fences the member.
- **downgrade**: when the last member using the consumer protocol leaves or is fenced and classic
  members remain (consumerGroupFenceMember -> validateOnlineDowngradeWithFencedMember ->
  convertToClassicGroup and ClassicGroup.fromConsumerGroup), the group becomes a classic group at
  generation = the group epoch, Stable, each member with its target assignment serialized at the
  version of its subscription, the protocol chosen by the members' votes; a `Downgraded` effect
  carries its GroupMetadata value (the shell writes the consumer group's tombstones and that
  record in one append and hands the group to the classic machine, which starts a rebalance).

Departures from Kafka: a static classic member whose instance id is taken by a member using the
consumer protocol replaces it without the downgrade of validateOnlineDowngradeWithReplacedMemberId
(the group stays a consumer group); a subscription that does not decode gets
INCONSISTENT_GROUP_PROTOCOL (Kafka fails the request with an IllegalStateException).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

from quafka.protocol.classic_group_records import GroupMetadataValue
from quafka.protocol.consumer_group_records import decode_classic_member_metadata, encode_classic_member_metadata
from quafka.protocol.consumer_protocol import (
    consumer_protocol_version,
    decode_consumer_assignment,
    decode_consumer_subscription,
    encode_consumer_assignment,
)
from quafka.protocol.coordinator_record_codec import CorruptRecord
from quafka.protocol.errors import ErrorCode

from .classic_group_model import ClassicGroup, ClassicGroupMember, ClassicState
from .classic_group_views import image_of as classic_image_of
from .consumer_group_model import ConsumerGroup, ConsumerGroupMember, Refused, session_timer_key
from .consumer_group_reconcile import AssignmentState, MemberState
from .share_group import ArmTimer, CancelTimer, GroupEmptied, MemberRemoved, metadata_hash

if TYPE_CHECKING:
    from .consumer_group import ConsumerGroupCoordinator

__all__ = ["ClassicJoinResult", "ClassicMembers", "ClassicSyncResult", "Downgraded", "MigrationPolicy",
           "join_timer_key", "sync_timer_key"]

CONSUMER_PROTOCOL_TYPE = "consumer"  # ConsumerProtocol.PROTOCOL_TYPE


class MigrationPolicy(str, enum.Enum):
    """ConsumerGroupMigrationPolicy (`group.consumer.migration.policy`)."""

    DISABLED = "disabled"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    BIDIRECTIONAL = "bidirectional"

    @property
    def upgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.UPGRADE, MigrationPolicy.BIDIRECTIONAL)

    @property
    def downgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.DOWNGRADE, MigrationPolicy.BIDIRECTIONAL)


@dataclass(frozen=True, slots=True)
class ClassicJoinResult:
    error: ErrorCode
    message: str | None = None
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class ClassicSyncResult:
    error: ErrorCode
    message: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class Downgraded:
    """Effect: the consumer group left the machine to become this classic group."""

    group_id: str
    value: GroupMetadataValue


def join_timer_key(group_id: str, member_id: str) -> tuple:
    return ("consumer-group-join", group_id, member_id)


def sync_timer_key(group_id: str, member_id: str) -> tuple:
    return ("consumer-group-sync", group_id, member_id)


def classic_metadata(member: ConsumerGroupMember) -> tuple[int, tuple[tuple[str, bytes], ...]]:
    """(session timeout, supported protocols) of a member using the classic protocol."""
    assert member.classic_member_metadata is not None, member.member_id
    decoded = decode_classic_member_metadata(member.classic_member_metadata)
    assert decoded is not None, member.member_id
    return decoded


def classic_session_timeout_ms(member: ConsumerGroupMember, default_ms: int) -> int:
    """ConsumerGroupMember.classicProtocolSessionTimeout, else the consumer group's session timeout."""
    if member.classic_member_metadata is None:
        return default_ms
    try:
        decoded = decode_classic_member_metadata(member.classic_member_metadata)
    except CorruptRecord:
        return default_ms
    return default_ms if decoded is None else decoded[0]


def _supports_classic_protocols(group: ConsumerGroup, protocol_type: str, names: set[str]) -> bool:
    """ConsumerGroup.supportsClassicProtocols: the consumer protocol type, and (unless the group
    has no member) a protocol every classic member supports."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return False
    if not group.members:
        return bool(names)
    classic = [m for m in group.members.values() if m.uses_classic_protocol]
    if not classic:
        return bool(names)
    supported = [{n for n, _ in classic_metadata(m)[1]} for m in classic]
    return any(all(name in s for s in supported) for name in names)


class ClassicMembers:
    """The part of ConsumerGroupCoordinator that converts groups and serves classic members."""

    migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL  # group.consumer.migration.policy
    classic_max_size: int = 2**31 - 1  # group.max.size

    # ------------------------------------------------------------------ upgrade
    def upgrade_refusal(self: "ConsumerGroupCoordinator", classic: ClassicGroup) -> str | None:
        """GroupMetadataManager.validateOnlineUpgrade: why `classic` may not become a consumer
        group (None: it may)."""
        group_id = classic.group_id
        if not self.migration_policy.upgrade_enabled:
            return (f"Cannot upgrade classic group {group_id} to consumer group because the online upgrade is "
                    f"disabled (group.consumer.migration.policy={self.migration_policy.value}).")
        if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return (f"Cannot upgrade classic group {group_id} to consumer group because the group does not use "
                    f"the consumer embedded protocol.")
        if len(classic.members) > self.max_group_size:
            return (f"Cannot upgrade classic group {group_id} to consumer group because the group size exceeds "
                    f"the consumer group maximum size.")
        if classic.protocol_name is None:
            return (f"Cannot upgrade the classic group {group_id} to consumer group because the embedded "
                    f"consumer protocol is malformed.")
        return None

    def adopt_classic(self: "ConsumerGroupCoordinator", classic: ClassicGroup, now_ms: int) -> list:
        """ConsumerGroup.fromClassicGroup, then the group is put in place as a restored one (its
        classic members' session timers armed with their own timeouts). ValueError for a member
        whose subscription or (non-empty) assignment does not decode (the group is then left untouched)."""
        ids = {name: topic_id for name, (topic_id, _n) in self._topics.items()}
        group = ConsumerGroup(classic.group_id, group_epoch=classic.generation_id,
                              assignment_epoch=classic.generation_id)
        for cm in classic.members.values():
            # A member that joined during the rebalance may not support the protocol the last
            # generation chose (aiokafka asks roundrobin only, kafka-python range first); its
            # subscription, the same in each of its protocols, comes from the first one. Kafka's
            # fromClassicGroup calls ClassicGroupMember.metadata(protocolName), whose
            # IllegalArgumentException it does not catch: the heartbeat fails with an unknown error.
            name = classic.protocol_name if classic.protocol_name in cm.protocol_names() else cm.protocols[0][0]
            subscription = decode_consumer_subscription(cm.metadata(name))
            # a member that joined and never synced has no assignment yet: no partitions, as Kafka's
            # ConsumerGroup.fromClassicGroup accepts it (only a non-empty one must decode)
            assigned = {ids[t]: frozenset(ps) for t, ps in decode_consumer_assignment(cm.assignment).items()
                        if t in ids and ps} if cm.assignment else {}
            member = ConsumerGroupMember(
                cm.member_id, instance_id=cm.group_instance_id, rack_id=subscription.rack_id,
                rebalance_timeout_ms=cm.rebalance_timeout_ms, client_id=cm.client_id, client_host=cm.client_host,
                subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                classic_member_metadata=encode_classic_member_metadata(cm.session_timeout_ms, cm.protocols),
                current=AssignmentState(MemberState.STABLE, classic.generation_id, classic.generation_id, assigned))
            group.members[cm.member_id] = member
            group.target[cm.member_id] = dict(assigned)
        group.touch_all()
        return self.restore(group, now_ms)

    # ------------------------------------------------------------------ classic requests
    def classic_join(self: "ConsumerGroupCoordinator", *, group_id: str, member_id: str, instance_id: str | None,
                     protocol_type: str, protocols: Sequence[tuple[str, bytes]], session_timeout_ms: int,
                     rebalance_timeout_ms: int, client_id: str, client_host: str, requires_known_member_id: bool,
                     new_member_id: str, now_ms: int) -> tuple[ClassicJoinResult, list]:
        """GroupMetadataManager.classicGroupJoinToConsumerGroup (`requires_known_member_id`:
        JoinGroupRequest.requiresKnownMemberId, decided by the handler from the version)."""
        group = self._groups.get(group_id)
        unknown = not member_id
        if unknown:
            member_id = new_member_id
        protocols = tuple((name, bytes(metadata)) for name, metadata in protocols)
        if group is None:
            return ClassicJoinResult(ErrorCode.unknown_member_id, f"Group {group_id} not found.", member_id), []
        if member_id not in group.members and len(group.members) >= self.max_group_size:
            return ClassicJoinResult(ErrorCode.group_max_size_reached, (
                f"The consumer group has reached its maximum capacity of {self.max_group_size} members."),
                member_id), []
        if not protocols or not _supports_classic_protocols(group, protocol_type, {n for n, _ in protocols}):
            return ClassicJoinResult(ErrorCode.inconsistent_group_protocol,
                                     f"Member {member_id}'s protocols are not supported.", member_id), []
        if requires_known_member_id and unknown:
            return ClassicJoinResult(ErrorCode.member_id_required, None, member_id), []
        try:
            subscription = decode_consumer_subscription(protocols[0][1])
        except ValueError as exc:
            return ClassicJoinResult(ErrorCode.inconsistent_group_protocol,
                                     f"Malformed embedded consumer protocol in subscription: {exc}.", member_id), []
        if rebalance_timeout_ms < 0:  # JoinGroup v0
            rebalance_timeout_ms = session_timeout_ms
        member = group.static_member(instance_id) if instance_id is not None else group.members.get(member_id)
        if member is not None and member.member_id != member_id:
            if not unknown:
                return ClassicJoinResult(ErrorCode.fenced_instance_id, (
                    f"Static member {member_id} with instance id {instance_id} was fenced by member "
                    f"{member.member_id}."), member_id), []
            # a new instance of a static member takes its place (GroupMetadataManager.replaceMember)
            group.set_current(member, AssignmentState(member.state, -2, member.previous_member_epoch,
                                                      member.assigned, member.pending_revocation))
            epoch = 0
        else:
            epoch = member.member_epoch if member is not None and member.member_epoch >= 0 else 0
        ids = {name: topic_id for name, (topic_id, _n) in self._topics.items()}
        owned = {ids[t]: frozenset(ps) for t, ps in subscription.owned_partitions.items() if t in ids}
        try:
            result, effects = self._heartbeat(group_id, member_id, epoch, instance_id, subscription.rack_id,
                                              rebalance_timeout_ms, tuple(subscription.topics), None, None, owned,
                                              client_id, client_host, now_ms, None)
        except Refused as refused:
            return ClassicJoinResult(refused.error, refused.message, member_id), []
        member = group.members[member_id]
        member.classic_member_metadata = encode_classic_member_metadata(session_timeout_ms, protocols)
        session_key = session_timer_key(group_id, member_id)
        effects = [e for e in effects if not (isinstance(e, ArmTimer) and e.key == session_key)]
        member.session_deadline_ms = now_ms + session_timeout_ms
        effects.append(ArmTimer(session_key, member.session_deadline_ms))
        if member.join_deadline_ms is not None:
            member.join_deadline_ms = None
            effects.append(CancelTimer(join_timer_key(group_id, member_id)))
        member.sync_deadline_ms = now_ms + rebalance_timeout_ms
        effects.append(ArmTimer(sync_timer_key(group_id, member_id), member.sync_deadline_ms))
        return ClassicJoinResult(ErrorCode.none, None, member_id, member.member_epoch, CONSUMER_PROTOCOL_TYPE,
                                 protocols[0][0]), effects

    def _classic_member(self: "ConsumerGroupCoordinator", group_id: str, member_id: str,
                        instance_id: str | None) -> tuple[ConsumerGroup, ConsumerGroupMember]:
        """GroupMetadataManager.validateConsumerGroupMember and throwIfMemberDoesNotUseClassicProtocol."""
        group = self._groups.get(group_id)
        if group is None:
            raise Refused(ErrorCode.unknown_member_id, f"Group {group_id} not found.")
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise Refused(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise Refused(ErrorCode.unknown_member_id,
                              f"Member with instance id {instance_id} is not a member of group {group_id}.")
            if member.member_id != member_id:
                raise Refused(ErrorCode.fenced_instance_id, (
                    f"Static member {member_id} with instance id {instance_id} was fenced by member "
                    f"{member.member_id}."))
        if not member.uses_classic_protocol:
            raise Refused(ErrorCode.unknown_member_id, f"Member {member.member_id} does not use the classic protocol.")
        return group, member

    def _join_timer_if_absent(self, group: ConsumerGroup, member: ConsumerGroupMember, now_ms: int) -> list:
        """scheduleConsumerGroupJoinTimeoutIfAbsent."""
        if member.join_deadline_ms is not None:
            return []
        member.join_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)
        return [ArmTimer(join_timer_key(group.group_id, member.member_id), member.join_deadline_ms)]

    def classic_sync(self: "ConsumerGroupCoordinator", *, group_id: str, member_id: str, instance_id: str | None,
                     generation_id: int, protocol_type: str | None, protocol_name: str | None,
                     now_ms: int) -> tuple[ClassicSyncResult, list]:
        """GroupMetadataManager.classicGroupSyncToConsumerGroup."""
        effects: list = []
        try:
            group, member = self._classic_member(group_id, member_id, instance_id)
            if generation_id != member.member_epoch:
                raise Refused(ErrorCode.illegal_generation, (
                    f"The request generation id {generation_id} is not equal to the member epoch "
                    f"{member.member_epoch} of member {member_id}."))
            session_timeout_ms, protocols = classic_metadata(member)
            name = protocols[0][0]
            if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE:
                raise Refused(ErrorCode.inconsistent_group_protocol, (
                    f"The protocol type {protocol_type} from member {member_id} request is not equal to the group "
                    f"protocol type {CONSUMER_PROTOCOL_TYPE}."))
            if protocol_name is not None and protocol_name != name:
                raise Refused(ErrorCode.inconsistent_group_protocol, (
                    f"The protocol name {protocol_name} from member {member_id} request is not equal to the "
                    f"protocol name {name} returned in the join response."))
            if group.group_epoch > member.member_epoch and member.state != MemberState.UNREVOKED_PARTITIONS:
                effects += self._join_timer_if_absent(group, member, now_ms)
                raise Refused(ErrorCode.rebalance_in_progress, (
                    f"A new rebalance is triggered in group {group_id} and member {member_id} should rejoin to "
                    f"catch up."))
        except Refused as refused:
            return ClassicSyncResult(refused.error, refused.message), effects
        if member.sync_deadline_ms is not None:
            member.sync_deadline_ms = None
            effects.append(CancelTimer(sync_timer_key(group_id, member.member_id)))
        member.session_deadline_ms = now_ms + session_timeout_ms
        effects.append(ArmTimer(session_timer_key(group_id, member.member_id), member.session_deadline_ms))
        names = {topic_id: t for t, (topic_id, _n) in self._topics.items()}
        partitions = {names[t]: ps for t, ps in member.assigned.items() if t in names and ps}
        assignment = encode_consumer_assignment(partitions, consumer_protocol_version(protocols[0][1]))
        return ClassicSyncResult(ErrorCode.none, None, protocol_type, protocol_name, assignment), effects

    def classic_heartbeat(self: "ConsumerGroupCoordinator", *, group_id: str, member_id: str,
                          instance_id: str | None, generation_id: int, now_ms: int) -> tuple[ErrorCode, list]:
        """GroupMetadataManager.classicGroupHeartbeatToConsumerGroup."""
        try:
            group, member = self._classic_member(group_id, member_id, instance_id)
        except Refused as refused:
            return refused.error, []
        if generation_id != member.member_epoch:
            return ErrorCode.illegal_generation, []
        session_timeout_ms, _protocols = classic_metadata(member)
        member.session_deadline_ms = now_ms + session_timeout_ms
        effects: list = [ArmTimer(session_timer_key(group_id, member.member_id), member.session_deadline_ms)]
        if (member.member_epoch < group.group_epoch or member.state == MemberState.UNREVOKED_PARTITIONS
                or (member.state == MemberState.UNRELEASED_PARTITIONS and not _waiting_on_unreleased(group, member))):
            return ErrorCode.rebalance_in_progress, effects + self._join_timer_if_absent(group, member, now_ms)
        return ErrorCode.none, effects

    def classic_leave(self: "ConsumerGroupCoordinator", group_id: str, members: Iterable[tuple[str, str | None]],
                      ) -> tuple[list[tuple[str, str | None, ErrorCode]], list]:
        """GroupMetadataManager.classicGroupLeaveToConsumerGroup: each member leaves (no downgrade
        on this path, as in Kafka); the group epoch is bumped once."""
        group = self._groups[group_id]
        out: list[tuple[str, str | None, ErrorCode]] = []
        effects: list = []
        for member_id, instance_id in members:
            try:
                if instance_id is None:
                    _group, member = self._classic_member(group_id, member_id, None)
                else:
                    member = group.static_member(instance_id)
                    if member is None:
                        raise Refused(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
                    if member_id and member.member_id != member_id:
                        raise Refused(ErrorCode.fenced_instance_id, "fenced")
                    if not member.uses_classic_protocol:
                        raise Refused(ErrorCode.unknown_member_id, "not classic")
            except Refused as refused:
                out.append((member_id, instance_id, refused.error))
                continue
            removed = group.drop_member(member.member_id)
            group.subscriptions.remove(removed.subscribed_topic_names, removed.subscribed_topic_regex)
            effects += self._cancel_timers(group_id, removed)
            effects.append(MemberRemoved(group_id, removed.member_id, "left"))
            out.append((removed.member_id, instance_id, ErrorCode.none))
        if effects:
            group.subscribed_metadata = self._subscription_metadata(group)
            group.metadata_hash = metadata_hash(group.subscribed_metadata)
            group.group_epoch += 1
            if not group.members:
                effects.append(GroupEmptied(group_id))
        return out, effects

    def _on_classic_timer(self: "ConsumerGroupCoordinator", group: ConsumerGroup, member: ConsumerGroupMember,
                          key: tuple, now_ms: int) -> list:
        """A classic member's join or sync timer fired (consumerGroupFenceMemberOperation)."""
        kind = key[0]
        if kind not in ("consumer-group-join", "consumer-group-sync"):
            return []
        deadline = member.join_deadline_ms if kind == "consumer-group-join" else member.sync_deadline_ms
        if deadline is None:
            return []
        if now_ms < deadline:
            return [ArmTimer(key, deadline)]
        reason = ("the classic member failed to join within the rebalance timeout" if kind == "consumer-group-join"
                  else "the member failed to sync within timeout")
        return self._fence_or_downgrade(group, member.member_id, reason, now_ms)

    # ------------------------------------------------------------------ downgrade
    def _fence_or_downgrade(self: "ConsumerGroupCoordinator", group: ConsumerGroup, member_id: str,
                            reason: str, now_ms: int) -> list:
        """GroupMetadataManager.consumerGroupFenceMember."""
        if self._may_downgrade(group, member_id):
            return self._downgrade(group, member_id, reason, now_ms)
        return self._fence(group, member_id, reason)

    def _may_downgrade(self, group: ConsumerGroup, member_id: str) -> bool:
        """validateOnlineDowngradeWithFencedMember."""
        leaving = group.members.get(member_id)
        if leaving is None or leaving.uses_classic_protocol:
            return False
        if any(not m.uses_classic_protocol for m in group.members.values() if m is not leaving):
            return False
        if len(group.members) <= 1 or not self.migration_policy.downgrade_enabled:
            return False
        return len(group.members) - 1 <= self.classic_max_size

    def _downgrade(self: "ConsumerGroupCoordinator", group: ConsumerGroup, leaving_id: str, reason: str,
                   now_ms: int) -> list:
        """convertToClassicGroup with ClassicGroup.fromConsumerGroup: the group leaves this machine."""
        names = {topic_id: t for t, (topic_id, _n) in self._topics.items()}
        classic = ClassicGroup(group.group_id, ClassicState.STABLE, ClassicState.DEAD, now_ms,
                               group.group_epoch, CONSUMER_PROTOCOL_TYPE)
        for member_id in sorted(group.members):
            if member_id == leaving_id:
                continue
            m = group.members[member_id]
            session_timeout_ms, protocols = classic_metadata(m)
            classic.add(ClassicGroupMember(member_id, m.instance_id, m.client_id, m.client_host,
                                           m.rebalance_timeout_ms, session_timeout_ms, CONSUMER_PROTOCOL_TYPE,
                                           protocols))
            if m.instance_id is not None:
                classic.static_members[m.instance_id] = member_id
        classic.protocol_name = classic.select_protocol()
        classic.leader_id = next(iter(classic.members))
        for cm in classic.members.values():
            target = group.target.get(cm.member_id, {})
            partitions = {names[t]: ps for t, ps in target.items() if t in names and ps}
            cm.assignment = encode_consumer_assignment(partitions,
                                                       consumer_protocol_version(cm.metadata(classic.protocol_name)))
        value = classic_image_of(classic)
        del self._groups[group.group_id]
        effects: list = []
        for member_id in sorted(group.members):
            effects += self._cancel_timers(group.group_id, group.members[member_id])
        effects.append(MemberRemoved(group.group_id, leaving_id, reason))
        effects.append(Downgraded(group.group_id, value))
        return effects


def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """ConsumerGroup.waitingOnUnreleasedPartition."""
    if member.state != MemberState.UNRELEASED_PARTITIONS:
        return False
    for topic_id, partitions in group.target.get(member.member_id, {}).items():
        assigned = member.assigned.get(topic_id, frozenset())
        for p in partitions:
            if p not in assigned and group.partition_epoch(topic_id, p) != -1:
                return True
    return False
