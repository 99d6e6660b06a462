"""The consumer-group coordinator of KIP-848 (`group.protocol=consumer`), as Kafka 4.2's
GroupMetadataManager runs consumer groups. A pure machine: every entry point takes its inputs and
`now_ms` and returns a result plus effects for the shell to carry out.

Vocabulary (as in share_group.py):

- group epoch: bumped when what the assignment depends on changes (a member joins with or changes
  its subscribed topics, leaves or is fenced; a subscribed topic is created, deleted or grows);
- assignment epoch: the group epoch at which the target assignment was computed; a heartbeat that
  finds the group epoch ahead of it recomputes the target (TargetAssignmentBuilder) at once;
- member epoch: the epoch of the assignment the member holds. Unlike share groups, a member reaches
  the target only through reconciliation (consumer_group_reconcile.py): it first revokes what the
  target gives to others, and gets a partition only once its previous owner released it. So no
  partition is ever owned by two members.

Heartbeats: epoch 0 joins (creating the group), -1 leaves, -2 is a static member's leave (it keeps
its partitions and its place for its next instance, until its session times out), any other epoch
must be the member's (or its previous one, if it owns no partition outside its assignment).

Timers (ArmTimer / CancelTimer, keyed by `session_timer_key` / `rebalance_timer_key`): a session
timer per member (group.consumer.session.timeout.ms) re-armed by every heartbeat; a rebalance timer
(the member's rebalance.timeout.ms) while the member has partitions to revoke. Either firing
(`on_timer`) fences the member. Effects also: MemberRemoved (left, fenced) and GroupEmptied.
"""

from __future__ import annotations

import re
from typing import Callable, Hashable, Iterable, Mapping

from quafka.protocol.errors import ErrorCode

from .consumer_group_assignors import ASSIGNORS, MemberSpec, assign
from .consumer_group_model import (
    MEMBER_TYPE_CLASSIC,
    MEMBER_TYPE_CONSUMER,
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupState,
    DescribedGroup,
    DescribedMember,
    GroupSettings,
    HeartbeatResult,
    OffsetsView,
    Refused,
    StaticGroupSettings,
    rebalance_timer_key,
    session_timer_key,
)
from .consumer_group_migration import ClassicMembers, Downgraded, MigrationPolicy, classic_session_timeout_ms
from .consumer_group_migration import join_timer_key, sync_timer_key
from .consumer_group_reconcile import AssignmentState, FencedInUnknownState, MemberState, Partitions, reconcile
from .consumer_group_subscriptions import Resolve, SubscribedTopics
from .share_group import ArmTimer, CancelTimer, GroupEmptied, MemberRemoved, metadata_hash

__all__ = [
    "ArmTimer", "CancelTimer", "ConsumerGroup", "ConsumerGroupCoordinator", "ConsumerGroupMember",
    "ConsumerGroupState", "DescribedGroup", "DescribedMember", "Downgraded", "Effect", "GroupEmptied",
    "GroupSettings", "HeartbeatResult", "MemberRemoved", "MemberState", "MigrationPolicy", "OffsetsView", "StaticGroupSettings", "rebalance_timer_key",
    "session_timer_key",
]

GROUP_TYPE = "consumer"
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
REGEX_REFRESH_INTERVAL_MS = 10 * 60 * 1000  # group.consumer.regex.refresh.interval.ms (Kafka's default)

TopicId = Hashable
Topics = Mapping[str, tuple[TopicId, int]]  # topic name -> (topic id, partition count)
Effect = ArmTimer | CancelTimer | MemberRemoved | GroupEmptied | Downgraded


_Refused = Refused


def _fenced(message: str) -> _Refused:
    return _Refused(ErrorCode.fenced_member_epoch, message)


def _check_member_epoch(member: ConsumerGroupMember, epoch: int, owned: Partitions | None) -> None:
    """GroupMetadataManager.throwIfConsumerGroupMemberEpochIsInvalid."""
    if epoch == JOIN_GROUP_MEMBER_EPOCH:
        return
    if epoch > member.member_epoch:
        raise _fenced(f"The consumer group member has a greater member epoch ({epoch}) than the one known by the "
                      f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and "
                      f"rejoin.")
    if epoch < member.member_epoch:
        subset = owned is not None and all(set(ps) <= set(member.assigned.get(t, ())) if t in member.assigned
                                           else False for t, ps in owned.items())
        if epoch != member.previous_member_epoch or not subset:
            raise _fenced(f"The consumer group member has a smaller member epoch ({epoch}) than the one known by the "
                          f"group coordinator ({member.member_epoch}). The member must abandon all its partitions "
                          f"and rejoin.")


def _parts(assignment: Mapping[TopicId, Iterable[int]] | None) -> dict[TopicId, frozenset[int]] | None:
    return None if assignment is None else {t: frozenset(ps) for t, ps in assignment.items()}


class ConsumerGroupCoordinator(ClassicMembers):
    """All consumer groups of the broker (one namespace of group ids); members using the classic
    protocol and the conversions are consumer_group_migration.py's."""

    def __init__(self, *, max_group_size: int = 2**31 - 1, assignors: Iterable[str] = ASSIGNORS,
                 settings: Callable[[str], GroupSettings] | None = None, topics: Topics | None = None) -> None:
        self.max_group_size = max_group_size  # group.consumer.max.size
        self.assignors = tuple(assignors)  # group.consumer.assignors
        self._settings = settings or (lambda _group_id: StaticGroupSettings())
        self._topics: dict[str, tuple[TopicId, int]] = dict(topics or {})
        self._groups: dict[str, ConsumerGroup] = {}
        self.rebalances = 0  # new target assignments computed
        self._patterns: dict[str, re.Pattern] = {}  # compiled subscription regexes
        self._resolved: dict[str, frozenset[str]] = {}  # regex -> matching topics, for the current topics
        # With an authorizer, the shell sets `authorize_regex_topics` and passes each heartbeat a
        # `describable(topic)` decision of the member's principal: a group's regexes then resolve to
        # the topics that member may DESCRIBE (see _refresh_regexes). Off, nothing of it runs.
        self.authorize_regex_topics = False
        self.regex_refresh_interval_ms = REGEX_REFRESH_INTERVAL_MS

    # ------------------------------------------------------------------ lookups
    def group(self, group_id: str) -> ConsumerGroup | None:
        return self._groups.get(group_id)

    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    def offsets_view(self, group_id: str) -> OffsetsView | None:
        """For consumer_offsets.py (None: no consumer group of that id)."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        members = group.members
        return OffsetsView(group.state, {m: members[m].member_epoch for m in sorted(members)},
                           {m: members[m].instance_id for m in sorted(members)}, group.subscriptions.names(),
                           frozenset(m for m in members if members[m].uses_classic_protocol))

    # ------------------------------------------------------------------ heartbeat
    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, instance_id: str | None = None,
                  rack_id: str | None = None, rebalance_timeout_ms: int = -1,
                  subscribed_topic_names: Iterable[str] | None = None, subscribed_topic_regex: str | None = None,
                  server_assignor: str | None = None,
                  topic_partitions: Mapping[TopicId, Iterable[int]] | None = None,
                  client_id: str = "", client_host: str = "", now_ms: int,
                  describable: Callable[[str], bool] | None = None) -> tuple[HeartbeatResult, list[Effect]]:
        """Serve one ConsumerGroupHeartbeat (v1+: the client generates its member id). None means
        "not sent" (unchanged) for the optional fields, -1 for rebalance_timeout_ms;
        `topic_partitions` is what the member reports owning. `describable(topic)`: whether the
        member's principal may DESCRIBE the topic (given when `authorize_regex_topics` is set)."""
        names = None if subscribed_topic_names is None else tuple(subscribed_topic_names)
        owned = _parts(topic_partitions)
        try:
            self._validate(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms, names,
                           subscribed_topic_regex, server_assignor, owned)
            if member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(group_id, member_id, member_epoch, instance_id, now_ms)
            return self._heartbeat(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                                   names, subscribed_topic_regex, server_assignor, owned, client_id, client_host,
                                   now_ms, describable)
        except _Refused as refused:
            return HeartbeatResult(refused.error, refused.message), []

    def _validate(self, group_id: str, member_id: str, epoch: int, instance_id: str | None, rack_id: str | None,
                  rebalance_timeout_ms: int, names: tuple[str, ...] | None, regex: str | None,
                  assignor: str | None, owned: Partitions | None) -> None:
        """GroupCoordinatorService.throwIfConsumerGroupHeartbeatRequestIsInvalid (version 1+)."""
        def invalid(message: str) -> _Refused:
            return _Refused(ErrorCode.invalid_request, message)
        if not member_id:
            raise invalid("MemberId can't be empty.")
        if not group_id:
            raise invalid("GroupId can't be empty.")
        if instance_id is not None and not instance_id:
            raise invalid("InstanceId can't be empty.")
        if rack_id is not None and not rack_id:
            raise invalid("RackId can't be empty.")
        if epoch == JOIN_GROUP_MEMBER_EPOCH:
            if rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if owned is None or any(owned.values()):
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if names is None and regex is None:
                raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                              "(re-)joining.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if assignor is not None and assignor not in self.assignors:
            raise _Refused(ErrorCode.unsupported_assignor, f"ServerAssignor {assignor} is not supported. "
                           f"Supported assignors: {', '.join(self.assignors)}.")
        if regex:  # Utils.throwIfRegularExpressionIsInvalid (Java's Pattern; Python's re here)
            try:
                self._pattern(regex)
            except re.error as exc:
                raise _Refused(ErrorCode.invalid_regular_expression,
                               f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}.") from None

    def _group_or_refuse(self, group_id: str) -> ConsumerGroup:
        group = self._groups.get(group_id)
        if group is None:
            raise _Refused(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
        return group

    def _leave(self, group_id: str, member_id: str, epoch: int, instance_id: str | None,
               now_ms: int) -> tuple[HeartbeatResult, list[Effect]]:
        """GroupMetadataManager.consumerGroupLeave / consumerGroupStaticMemberGroupLeave."""
        group = self._group_or_refuse(group_id)
        if instance_id is None:
            if member_id not in group.members:
                raise _Refused(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}.")
            return HeartbeatResult(ErrorCode.none, None, member_id, epoch), self._fence_or_downgrade(
                group, member_id, "left", now_ms)
        member = group.static_member(instance_id)
        if member is None:
            raise _Refused(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
        if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # it keeps its partitions (and its target) for the next instance; its session timer runs on
            group.set_current(member, AssignmentState(member.state, LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                                                      member.previous_member_epoch, member.assigned, {}))
            return HeartbeatResult(ErrorCode.none, None, member.member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH), []
        return HeartbeatResult(ErrorCode.none, None, member_id, epoch), self._fence_or_downgrade(
            group, member.member_id, "left", now_ms)

    def _heartbeat(self, group_id: str, member_id: str, epoch: int, instance_id: str | None, rack_id: str | None,
                   rebalance_timeout_ms: int, names: tuple[str, ...] | None, regex: str | None,
                   assignor: str | None, owned: Partitions | None, client_id: str, client_host: str,
                   now_ms: int, describable: Callable[[str], bool] | None) -> tuple[HeartbeatResult, list[Effect]]:
        """GroupMetadataManager.consumerGroupHeartbeat."""
        joining = epoch == JOIN_GROUP_MEMBER_EPOCH
        group = self._groups.get(group_id)
        if group is None:
            if not joining:
                raise _Refused(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
            group = ConsumerGroup(group_id)
        if len(group.members) >= self.max_group_size and member_id not in group.members:
            raise _Refused(ErrorCode.group_max_size_reached,
                           f"The consumer group has reached its maximum capacity of {self.max_group_size} members.")
        effects: list[Effect] = []
        replaced: ConsumerGroupMember | None = None
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None and not joining:
                raise _Refused(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}.")
            if member is not None:
                _check_member_epoch(member, epoch, owned)
        else:
            existing = group.static_member(instance_id)
            if joining:
                member = group.members.get(member_id) if existing is None else None
                if existing is not None:
                    if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                        raise _Refused(ErrorCode.unreleased_instance_id, (
                            f"Static member {member_id} with instance id {instance_id} cannot join the group "
                            f"because the instance id is owned by {existing.member_id} member."))
                    replaced = existing
            else:
                if existing is None:
                    raise _Refused(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
                if existing.member_id != member_id:
                    raise _Refused(ErrorCode.fenced_instance_id, (
                        f"Static member {member_id} with instance id {instance_id} was fenced by member "
                        f"{existing.member_id}."))
                _check_member_epoch(existing, epoch, owned)
                member = existing

        # ---- past every refusal: change state
        self._groups[group_id] = group
        settings = self._settings(group_id)
        if replaced is not None:  # GroupMetadataManager.replaceMember
            # the new member takes over the subscription (still counted), partitions and target
            target = group.target.get(replaced.member_id)
            group.drop_member(replaced.member_id)
            member = ConsumerGroupMember(**{f: getattr(replaced, f) for f in ConsumerGroupMember.__slots__})
            member.member_id = member_id
            member.current = AssignmentState()
            member.rebalance_deadline_ms = None
            group.members[member_id] = member
            group.set_current(member, AssignmentState(replaced.state, 0, 0, replaced.assigned,
                                                      replaced.pending_revocation))
            group.set_instance_id(member, replaced.instance_id)
            if target is not None:
                group.target[member_id] = target
            effects += self._cancel_timers(group_id, replaced)
            if replaced.member_id != member_id:
                effects.append(MemberRemoved(group_id, replaced.member_id, "replaced by static member " + member_id))
        if member is None:
            member = group.members[member_id] = ConsumerGroupMember(member_id)
        group.touch(member_id)  # its metadata record is rendered again (client id and host may move)
        before_assigned = member.assigned
        before_names = member.subscribed_topic_names
        before_regex = member.subscribed_topic_regex
        if instance_id is not None and instance_id != member.instance_id:
            group.set_instance_id(member, instance_id)
        if rack_id is not None:
            member.rack_id = rack_id
        if rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if assignor is not None:
            member.server_assignor = assignor
        if names is not None:
            member.subscribed_topic_names = tuple(sorted(set(names)))
        if regex is not None:  # "" clears it (librdkafka sends "" with a list of names)
            member.subscribed_topic_regex = regex or None
        member.client_id, member.client_host = client_id, client_host
        member.classic_member_metadata = None
        subscription_changed = (member.subscribed_topic_names != before_names
                                or member.subscribed_topic_regex != before_regex)
        filtering = self.authorize_regex_topics and describable is not None
        resolve = self._describable_resolver(describable) if filtering else self._resolve
        introduced = False  # a regex no other member of the group subscribes with
        if subscription_changed:  # ConsumerGroup.computeSubscribedTopicNames(oldMember, newMember)
            new_regex = member.subscribed_topic_regex
            introduced = bool(new_regex) and not group.subscriptions.has_regex(new_regex)
            group.subscriptions.remove(before_names, before_regex)
            group.subscriptions.add(member.subscribed_topic_names, new_regex, resolve)
        regexes_changed = filtering and self._refresh_regexes(group, resolve, introduced, now_ms)

        # the subscribed topics move only with a subscription (the topics' own changes are
        # on_topics_changed's): a heartbeat that changes nothing looks at no other member
        if group.group_epoch == 0 or subscription_changed or regexes_changed:
            metadata = self._subscription_metadata(group)
            group.group_epoch += 1
            group.subscribed_metadata, group.metadata_hash = metadata, metadata_hash(metadata)
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group)

        if subscription_changed or not member.current.is_reconciled_to(group.assignment_epoch):
            effects += self._reconcile(group, member, subscription_changed, owned, now_ms)

        member.session_deadline_ms = now_ms + settings.session_timeout_ms
        effects.append(ArmTimer(session_timer_key(group_id, member_id), member.session_deadline_ms))
        full_request = rebalance_timeout_ms != -1 and names is not None and owned is not None
        send = joining or full_request or member.assigned != before_assigned
        assignment = {t: sorted(ps) for t, ps in member.assigned.items()} if send else None
        return HeartbeatResult(ErrorCode.none, None, member_id, member.member_epoch, settings.heartbeat_interval_ms,
                               assignment), effects

    def _reconcile(self, group: ConsumerGroup, member: ConsumerGroupMember, subscription_changed: bool,
                   owned: Partitions | None, now_ms: int) -> list[Effect]:
        """GroupMetadataManager.maybeReconcile."""
        try:
            updated = reconcile(member.current, target_epoch=group.assignment_epoch,
                                target=group.target.get(member.member_id, {}),
                                subscribed_topic_ids=self._topic_ids(self._member_topics(group, member)),
                                subscription_changed=subscription_changed, owned=owned,
                                partition_epoch=group.partition_epoch)
        except FencedInUnknownState as exc:
            raise _fenced(str(exc)) from None
        if updated == member.current:
            return []
        group.set_current(member, updated)
        key = rebalance_timer_key(group.group_id, member.member_id)
        if updated.state == MemberState.UNREVOKED_PARTITIONS:
            member.rebalance_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)
            member.rebalance_epoch = updated.member_epoch
            return [ArmTimer(key, member.rebalance_deadline_ms)]
        if member.rebalance_deadline_ms is not None:
            member.rebalance_deadline_ms = None
            return [CancelTimer(key)]
        return []

    # ------------------------------------------------------------------ other events
    def on_timer(self, key: tuple, now_ms: int) -> list[Effect]:
        """A session or rebalance timer fired: fence the member unless it moved on since."""
        kind, group_id, member_id = key
        group = self._groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return []
        if kind == "consumer-group-session":
            if now_ms < member.session_deadline_ms:
                return [ArmTimer(key, member.session_deadline_ms)]
            return self._fence_or_downgrade(group, member_id, "session timeout", now_ms)
        if kind == "consumer-group-rebalance":
            if member.rebalance_deadline_ms is None or member.member_epoch != member.rebalance_epoch:
                return []
            if now_ms < member.rebalance_deadline_ms:
                return [ArmTimer(key, member.rebalance_deadline_ms)]
            return self._fence_or_downgrade(group, member_id, "rebalance timeout", now_ms)
        return self._on_classic_timer(group, member, key, now_ms)

    def on_topics_changed(self, topics: Topics, now_ms: int) -> list[Effect]:
        """New topic metadata: a group whose subscribed topics look different gets a new group epoch
        (Kafka finds it on the next heartbeat through the metadata hash; same outcome). Each regex
        in use is resolved once against the new topics, for all groups. With an authorizer the
        groups' resolutions wait for a member's heartbeat instead, if a topic was created
        (_refresh_regexes): a deleted topic leaves them through the existence checks."""
        created = any(self._topics.get(name, (None,))[0] != topic_id for name, (topic_id, _n) in topics.items())
        self._topics = dict(topics)
        self._resolved = {}
        for group_id in sorted(self._groups):
            group = self._groups[group_id]
            if not self.authorize_regex_topics:
                group.subscriptions.refresh(self._resolve)
            elif created and group.subscriptions.has_regexes():
                group.subscriptions.stale = True
            metadata = self._subscription_metadata(group)
            if group.members and metadata != group.subscribed_metadata:
                group.group_epoch += 1
                group.subscribed_metadata, group.metadata_hash = metadata, metadata_hash(metadata)
        return []

    def restore(self, group: ConsumerGroup, now_ms: int) -> list[Effect]:
        """Put back a group replayed from its records: every member gets a fresh session timer, and a
        member still revoking a fresh rebalance timer (Kafka's onLoaded)."""
        self._groups[group.group_id] = group
        group.reindex()
        group.subscriptions = SubscribedTopics()
        for member_id in sorted(group.members):
            member = group.members[member_id]
            group.subscriptions.add(member.subscribed_topic_names, member.subscribed_topic_regex, self._resolve)
        # Kafka stores the resolutions (ConsumerGroupRegularExpression records); quafka resolves them
        # again, so with an authorizer the first heartbeat resolves them in its member's context
        group.subscriptions.stale = self.authorize_regex_topics and group.subscriptions.has_regexes()
        current = self._subscription_metadata(group)
        if group.members and metadata_hash(current) != group.metadata_hash:
            group.group_epoch += 1
        group.subscribed_metadata = current
        group.metadata_hash = metadata_hash(current)
        settings = self._settings(group.group_id)
        effects: list[Effect] = []
        for member_id in sorted(group.members):
            member = group.members[member_id]
            member.session_deadline_ms = now_ms + classic_session_timeout_ms(member, settings.session_timeout_ms)
            effects.append(ArmTimer(session_timer_key(group.group_id, member_id), member.session_deadline_ms))
            if member.state == MemberState.UNREVOKED_PARTITIONS:
                member.rebalance_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)
                member.rebalance_epoch = member.member_epoch
                effects.append(ArmTimer(rebalance_timer_key(group.group_id, member_id), member.rebalance_deadline_ms))
        return effects

    def unload(self, group_id: str) -> list[Effect]:
        group = self._groups.pop(group_id, None)
        if group is None:
            return []
        return [e for m in sorted(group.members) for e in self._cancel_timers(group_id, group.members[m])]

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
        """ConsumerGroupDescribe (ConsumerGroup.asDescribedGroup)."""
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
            members = tuple(self._describe_member(group, group.members[m], names) for m in sorted(group.members))
            out.append(DescribedGroup(group_id, ErrorCode.none, None, group.state.value, group.group_epoch,
                                      group.assignment_epoch, group.preferred_assignor(self.assignors[0]), members))
        return out

    @staticmethod
    def _describe_member(group: ConsumerGroup, member: ConsumerGroupMember,
                         names: Mapping[TopicId, str]) -> DescribedMember:
        def render(parts: Partitions) -> tuple[tuple[TopicId, str, tuple[int, ...]], ...]:
            rows = sorted((names[t], t, tuple(sorted(ps))) for t, ps in parts.items() if t in names and ps)
            return tuple((t, name, ps) for name, t, ps in rows)
        return DescribedMember(member.member_id, member.instance_id, member.rack_id, member.member_epoch,
                               member.client_id, member.client_host, member.subscribed_topic_names,
                               member.subscribed_topic_regex, render(member.assigned),
                               render(group.target.get(member.member_id, {})),
                               MEMBER_TYPE_CLASSIC if member.uses_classic_protocol else MEMBER_TYPE_CONSUMER)

    def list_groups(self, states_filter: Iterable[str] = (),
                    types_filter: Iterable[str] = ()) -> list[tuple[str, str]]:
        """(group id, state) of every group passing the filters (case-insensitive; empty passes all)."""
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
    def _pattern(self, regex: str) -> re.Pattern:
        pattern = self._patterns.get(regex)
        if pattern is None:
            pattern = self._patterns[regex] = re.compile(regex)
        return pattern

    def _resolve(self, regex: str) -> frozenset[str]:
        """The topics a regex matches in full (GroupMetadataManager.refreshRegularExpressions:
        Pattern.matcher(topic).matches(), over every topic name), resolved once per regex and
        topic metadata (on_topics_changed forgets them all). Kafka resolves in the background at
        most every 10 s and at least every group.consumer.regex.refresh.interval.ms; here a new
        matching topic reaches the groups as soon as the metadata changes."""
        resolved = self._resolved.get(regex)
        if resolved is None:
            try:
                pattern = self._pattern(regex)
            except re.error:  # refused when it arrived; a stored one that no longer compiles matches nothing
                resolved = frozenset()
            else:
                resolved = frozenset(t for t in self._topics if pattern.fullmatch(t))
            self._resolved[regex] = resolved
        return resolved

    def _describable_resolver(self, describable: Callable[[str], bool]) -> Resolve:
        """`_resolve` less the topics the member may not DESCRIBE, each distinct topic asked once
        however many regexes match it (TopicRegexResolver.filterTopicDescribeAuthorizedTopics: one
        authorizer Action per topic name)."""
        decided: dict[str, bool] = {}

        def resolve(regex: str) -> frozenset[str]:
            allowed = []
            for topic in sorted(self._resolve(regex)):
                ok = decided.get(topic)
                if ok is None:
                    ok = decided[topic] = bool(describable(topic))
                if ok:
                    allowed.append(topic)
            return frozenset(allowed)
        return resolve

    def _refresh_regexes(self, group: ConsumerGroup, resolve: Resolve, introduced: bool, now_ms: int) -> bool:
        """With an authorizer: resolve every regex of the group again, in the context of the member
        whose heartbeat this is, when GroupMetadataManager.maybeUpdateRegularExpressions would —
        the member brought a regex new to the group (3.1, unresolved), a topic was created since
        the last resolution (3.2, lastMetadataImageWithNewTopics) or the last resolution is older
        than group.consumer.regex.refresh.interval.ms (3.3). Kafka resolves in the background and
        waits at least REGEX_BATCH_REFRESH_MIN_INTERVAL_MS (10 s) between two resolutions; quafka
        resolves at once. So a DESCRIBE granted or revoked later reaches the assignment at the
        group's next resolution, as in Kafka. True if what a regex resolves to changed."""
        books = group.subscriptions
        if not books.has_regexes():
            return False
        if not (introduced or books.stale or now_ms > books.refreshed_ms + self.regex_refresh_interval_ms):
            return False
        books.refreshed_ms, books.stale = now_ms, False
        return books.refresh(resolve)

    @staticmethod
    def _member_topics(group: ConsumerGroup, member: ConsumerGroupMember) -> tuple[str, ...]:
        """The topics a member subscribes to: its names, and the topics its regex matches."""
        return tuple(sorted(group.subscriptions.member_topics(member.subscribed_topic_names,
                                                               member.subscribed_topic_regex)))

    def _topic_ids(self, topic_names: Iterable[str]) -> set[TopicId]:
        return {self._topics[t][0] for t in topic_names if t in self._topics}

    def _subscription_metadata(self, group: ConsumerGroup) -> dict[str, tuple[TopicId, int]]:
        """The subscribed topics that exist, from the group's counts: O(topics), not O(members)."""
        return {t: self._topics[t] for t in sorted(group.subscriptions.names()) if t in self._topics}

    def _compute_target(self, group: ConsumerGroup) -> None:
        """TargetAssignmentBuilder.build: every member's spec with its current target."""
        specs = {m.member_id: MemberSpec(self._member_topics(group, m), m.instance_id,
                                         group.target.get(m.member_id, {}))
                 for m in group.members.values()}
        target = assign(group.preferred_assignor(self.assignors[0]), specs, group.subscribed_metadata)
        group.target = {m: {t: frozenset(ps) for t, ps in a.items() if ps} for m, a in target.items()}
        group.touch_all()  # every member's target record may have changed
        group.assignment_epoch = group.group_epoch
        self.rebalances += 1  # consumer-group-rebalance-count (GroupCoordinatorMetrics)

    @staticmethod
    def _cancel_timers(group_id: str, member: ConsumerGroupMember) -> list[Effect]:
        effects: list[Effect] = [CancelTimer(session_timer_key(group_id, member.member_id))]
        if member.rebalance_deadline_ms is not None:
            effects.append(CancelTimer(rebalance_timer_key(group_id, member.member_id)))
        if member.join_deadline_ms is not None:
            effects.append(CancelTimer(join_timer_key(group_id, member.member_id)))
        if member.sync_deadline_ms is not None:
            effects.append(CancelTimer(sync_timer_key(group_id, member.member_id)))
        return effects

    def _fence(self, group: ConsumerGroup, member_id: str, reason: str) -> list[Effect]:
        """GroupMetadataManager.consumerGroupFenceMembers: remove the member, bump the group epoch."""
        member = group.drop_member(member_id)
        group.subscriptions.remove(member.subscribed_topic_names, member.subscribed_topic_regex)
        group.subscribed_metadata = self._subscription_metadata(group)
        group.metadata_hash = metadata_hash(group.subscribed_metadata)
        group.group_epoch += 1
        effects = self._cancel_timers(group.group_id, member)
        effects.append(MemberRemoved(group.group_id, member_id, reason))
        if not group.members:
            effects.append(GroupEmptied(group.group_id))
        return effects
