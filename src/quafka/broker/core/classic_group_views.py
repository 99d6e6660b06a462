"""Pure conversions of a classic group (classic_group_model.ClassicGroup) into what others read:
the GroupMetadataValue record (GroupCoordinatorRecordHelpers.newGroupMetadataRecord), the group
rebuilt from such a record (GroupMetadataManager.replay), DescribeGroups and ListGroups entries
(GroupMetadataManager.describeGroups, ClassicGroup.asListedGroup) and the view that
consumer_offsets validates commits against.
"""

from __future__ import annotations

from typing import Mapping

from quafka.protocol.classic_group_records import NO_REBALANCE_TIMEOUT, NO_TIMESTAMP, GroupMetadataValue, MemberMetadata
from quafka.protocol.errors import ErrorCode

from .classic_group_model import (
    ClassicGroup,
    ClassicGroupMember,
    ClassicState,
    DescribedClassicGroup,
    DescribedClassicMember,
    ListedClassicGroup,
)
from .consumer_offsets import NO_GROUP, GroupKind, GroupView

__all__ = ["describe_group", "group_from_value", "image_of", "listed_group", "metadata_value", "view_of"]


def timestamp_of(group: ClassicGroup) -> int:
    """currentStateTimestampOrDefault."""
    return NO_TIMESTAMP if group.state_timestamp_ms is None else group.state_timestamp_ms


def empty_group_value(group: ClassicGroup) -> GroupMetadataValue:
    """GroupCoordinatorRecordHelpers.newEmptyGroupMetadataRecord (a group just created)."""
    return GroupMetadataValue("", 0, None, None, timestamp_of(group), ())


def metadata_value(group: ClassicGroup, assignment: Mapping[str, bytes]) -> GroupMetadataValue:
    """newGroupMetadataRecord: every member with its metadata for the chosen protocol and the
    given assignment (empty when it has none)."""
    members = tuple(MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                   m.rebalance_timeout_ms, m.session_timeout_ms, m.metadata(group.protocol_name),
                                   assignment.get(m.member_id, b""))
                    for m in group.members.values())
    return GroupMetadataValue(group.protocol_type or "", group.generation_id, group.protocol_name, group.leader_id,
                              timestamp_of(group), members)


def image_of(group: ClassicGroup) -> GroupMetadataValue:
    """The record for the group as it is now, members with their current assignments. While no
    protocol is chosen (the first join phase) the subscriptions are empty."""
    members = tuple(MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                   m.rebalance_timeout_ms, m.session_timeout_ms,
                                   _metadata_or_empty(m, group.protocol_name), m.assignment)
                    for m in group.members.values())
    return GroupMetadataValue(group.protocol_type or "", group.generation_id, group.protocol_name, group.leader_id,
                              timestamp_of(group), members)


def group_from_value(group_id: str, value: GroupMetadataValue) -> ClassicGroup:
    """GroupMetadataManager.replay: Stable with members, Empty without; a member's only protocol
    is the group's; a v0 record's rebalance timeout is the session timeout."""
    group = ClassicGroup(group_id, ClassicState.STABLE if value.members else ClassicState.EMPTY, ClassicState.DEAD,
                         None if value.current_state_timestamp_ms == NO_TIMESTAMP else value.current_state_timestamp_ms,
                         value.generation, value.protocol_type or None, value.protocol, value.leader)
    for m in value.members:
        rebalance_timeout_ms = (m.session_timeout_ms if m.rebalance_timeout_ms == NO_REBALANCE_TIMEOUT
                                else m.rebalance_timeout_ms)
        group.add(ClassicGroupMember(
            m.member_id, m.group_instance_id, m.client_id, m.client_host, rebalance_timeout_ms, m.session_timeout_ms,
            value.protocol_type, ((value.protocol or "", bytes(m.subscription)),), bytes(m.assignment)))
        if m.group_instance_id is not None:
            group.static_members[m.group_instance_id] = m.member_id
    if group.leader_id is None and group.members:
        group.leader_id = next(iter(group.members))
    return group


def describe_group(group_id: str, group: ClassicGroup | None) -> DescribedClassicGroup:
    """describeGroups: member metadata and the protocol name only when Stable; an unknown group
    is Dead with GROUP_ID_NOT_FOUND (the handler drops the error below DescribeGroups v6)."""
    if group is None:
        return DescribedClassicGroup(group_id, ErrorCode.group_id_not_found, f"Group {group_id} not found.",
                                     ClassicState.DEAD.value)
    stable = group.state is ClassicState.STABLE
    members = tuple(DescribedClassicMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                           m.metadata(group.protocol_name) if stable else b"", m.assignment)
                    for m in group.members.values())
    return DescribedClassicGroup(group_id, ErrorCode.none, None, group.state.value, group.protocol_type or "",
                                 (group.protocol_name or "") if stable else "", members)


def listed_group(group: ClassicGroup) -> ListedClassicGroup:
    return ListedClassicGroup(group.group_id, group.state.value, group.protocol_type or "")


def view_of(group: ClassicGroup | None) -> GroupView:
    """For consumer_offsets: empty_since_ms is when the group became Empty, for a group with a
    protocol type (ClassicGroup.offsetExpirationCondition)."""
    if group is None:
        return NO_GROUP
    empty_since_ms = None
    if group.state is ClassicState.EMPTY and group.protocol_type:
        empty_since_ms = group.state_timestamp_ms
    return GroupView(GroupKind.CLASSIC, group.state, group.generation_id,
                     {m.member_id: m.group_instance_id for m in group.members.values()}, frozenset(), empty_since_ms)


def _metadata_or_empty(member: ClassicGroupMember, protocol_name: str | None) -> bytes:
    for name, metadata in member.protocols:
        if name == protocol_name:
            return metadata
    return b""
