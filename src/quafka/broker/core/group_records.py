"""The share-group coordinator's records on `__consumer_offsets` (kafka-reference §3.3).

A share group is written as Kafka writes it, one record per fact, keyed so that the newest record
of a key is its current value and a tombstone removes it:

- 10 ShareGroupMemberMetadata (group, member): rack, client id and host, subscribed topics;
- 11 ShareGroupMetadata (group): the group epoch;
- 12 ShareGroupTargetAssignmentMetadata (group): the assignment epoch;
- 13 ShareGroupTargetAssignmentMember (group, member): the member's target partitions;
- 14 ShareGroupCurrentMemberAssignment (group, member): member epoch, previous epoch, partitions;
- 15 ShareGroupStatePartitionMetadata (group): share partitions initializing, initialized and
  being deleted on the share coordinator.

`image_of(group, state_metadata)` renders a group as {(record type, key): value}; `diff(old, new)`
gives the records that turn one image into the other (tombstones for keys that went). The shell
keeps the last image it wrote per group (a `ShareGroupImageTracker`) and appends what `diff(last,
image_of(...))` gives after every change, so the topic always holds the group as it is; the
tracker renders only the group's own keys and those of the members the group marks `touched`, so
a heartbeat costs O(what changed), not O(members) (issue 28). On start-up `GroupImages` replays the
records back into images, and `restore_group` turns an image back into a live `ShareGroup`.
"""

from __future__ import annotations

from uuid import UUID
from dataclasses import dataclass, field

from quafka.protocol.coordinator_record_codec import GroupKey, GroupMemberKey, TopicPartitions
from quafka.protocol.share_group_records import (
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    SHARE_GROUP_MEMBER_METADATA,
    SHARE_GROUP_METADATA,
    SHARE_GROUP_STATE_PARTITION_METADATA,
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
    GroupRecord,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataValue,
    TopicInfo,
    TopicPartitionsInfo,
)

from ._image_tracker import GroupImageTracker
from .share_group import ShareGroup, ShareGroupMember

MEMBER_STATE_STABLE = 0

Image = dict[tuple[int, tuple], object]

__all__ = ["GroupImages", "ShareGroupImageTracker", "StatePartitionMetadata", "diff", "image_of", "restore_group"]


@dataclass(slots=True)
class StatePartitionMetadata:
    """Record 15 of one group: which share partitions the share coordinator holds state for.
    Maps are topic id -> (topic name, partitions)."""

    initializing: dict[UUID, tuple[str, frozenset[int]]] = field(default_factory=dict)
    initialized: dict[UUID, tuple[str, frozenset[int]]] = field(default_factory=dict)
    deleting: dict[UUID, str] = field(default_factory=dict)

    def initialized_partitions(self, topic_id: UUID) -> frozenset[int]:
        entry = self.initialized.get(topic_id)
        return entry[1] if entry else frozenset()

    def is_empty(self) -> bool:
        return not (self.initializing or self.initialized or self.deleting)

    def to_value(self) -> ShareGroupStatePartitionMetadataValue:
        def infos(m):
            return tuple(TopicPartitionsInfo(t, name, tuple(sorted(ps))) for t, (name, ps) in sorted(m.items()))
        return ShareGroupStatePartitionMetadataValue(
            infos(self.initializing), infos(self.initialized),
            tuple(TopicInfo(t, name) for t, name in sorted(self.deleting.items())))

    @classmethod
    def from_value(cls, value: ShareGroupStatePartitionMetadataValue) -> "StatePartitionMetadata":
        return cls({t.topic_id: (t.topic_name, frozenset(t.partitions)) for t in value.initializing_topics},
                   {t.topic_id: (t.topic_name, frozenset(t.partitions)) for t in value.initialized_topics},
                   {t.topic_id: t.topic_name for t in value.deleting_topics})


def _partitions(assignment) -> tuple[TopicPartitions, ...]:
    return tuple(TopicPartitions(t, tuple(sorted(ps))) for t, ps in sorted(assignment.items()) if ps)


_MEMBER_TYPES = (SHARE_GROUP_MEMBER_METADATA, SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER)


def _group_entries(group: ShareGroup, state_metadata: StatePartitionMetadata | None, image: Image) -> None:
    gkey = (group.group_id,)
    image[(SHARE_GROUP_METADATA, gkey)] = ShareGroupMetadataValue(group.group_epoch, group.metadata_hash)
    image[(SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, gkey)] = ShareGroupTargetAssignmentMetadataValue(
        group.assignment_epoch)
    if state_metadata is not None and not state_metadata.is_empty():
        image[(SHARE_GROUP_STATE_PARTITION_METADATA, gkey)] = state_metadata.to_value()


def _member_entries(group: ShareGroup, member_id: str, image: Image) -> None:
    mkey = (group.group_id, member_id)
    m = group.members.get(member_id)
    if m is not None:
        image[(SHARE_GROUP_MEMBER_METADATA, mkey)] = ShareGroupMemberMetadataValue(
            m.rack_id, m.client_id, m.client_host, tuple(m.subscribed_topic_names))
        image[(SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, mkey)] = ShareGroupCurrentMemberAssignmentValue(
            m.member_epoch, m.previous_member_epoch, MEMBER_STATE_STABLE, _partitions(m.assignment))
    target = group.target.get(member_id)
    if target is not None:
        image[(SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, mkey)] = ShareGroupTargetAssignmentMemberValue(
            _partitions(target))


def image_of(group: ShareGroup | None, state_metadata: StatePartitionMetadata | None) -> Image:
    """The records that describe `group` (None: a deleted group) and its state metadata."""
    image: Image = {}
    if group is None:
        return image
    _group_entries(group, state_metadata, image)
    for member_id in group.members:
        _member_entries(group, member_id, image)
    for member_id in group.target:
        if member_id not in group.members:
            _member_entries(group, member_id, image)
    return image


class ShareGroupImageTracker(GroupImageTracker):
    """The image last written to `__consumer_offsets` per group, kept up to date incrementally
    (as consumer_group_images.ConsumerGroupImageTracker): `records(group_id, group,
    state_metadata)` gives what `diff(last, image_of(group, state_metadata))` gives, rendering the
    group's own keys and those of the members in `group.touched` only (all when it is None, or
    for a deleted group); `written(group_id)` takes them as written and empties `group.touched`."""

    def records(self, group_id: str, group: ShareGroup | None,
                state_metadata: StatePartitionMetadata | None) -> list[GroupRecord]:
        if group is None or group.touched is None:
            new = image_of(group, state_metadata)
            return diff(self._pend(group_id, group, new, None), new)
        part: Image = {}
        _group_entries(group, state_metadata, part)
        touched = sorted(group.touched)
        for member_id in touched:
            _member_entries(group, member_id, part)
        keys = ((SHARE_GROUP_METADATA, (group_id,)), (SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, (group_id,)),
                (SHARE_GROUP_STATE_PARTITION_METADATA, (group_id,)),
                *((t, (group_id, m)) for m in touched for t in _MEMBER_TYPES))
        return diff(self._pend(group_id, group, part, keys), part)


_ORDER = {SHARE_GROUP_MEMBER_METADATA: 0, SHARE_GROUP_METADATA: 1, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER: 2,
          SHARE_GROUP_TARGET_ASSIGNMENT_METADATA: 3, SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT: 4,
          SHARE_GROUP_STATE_PARTITION_METADATA: 5}


def _key(record_type: int, key: tuple) -> GroupKey | GroupMemberKey:
    return GroupMemberKey(*key) if len(key) == 2 else GroupKey(*key)


def diff(old: Image, new: Image) -> list[GroupRecord]:
    """Records turning `old` into `new`: changed values, then tombstones for removed keys (a
    group's metadata tombstone last, as Kafka writes it)."""
    records = [GroupRecord(t, _key(t, k), v) for (t, k), v in sorted(new.items(), key=lambda i: (_ORDER[i[0][0]], i[0]))
               if old.get((t, k)) != v]
    gone = sorted((k for k in old if k not in new), key=lambda i: (-_ORDER[i[0]], i))
    records.extend(GroupRecord(t, _key(t, k), None) for t, k in gone)
    return records


class GroupImages:
    """Replays `__consumer_offsets` share-group records into one image per group."""

    def __init__(self) -> None:
        self.images: dict[str, Image] = {}

    def replay(self, record: GroupRecord) -> None:
        key = tuple(record.key)
        image = self.images.setdefault(key[0], {})
        if record.value is None:
            image.pop((record.record_type, key), None)
        else:
            image[(record.record_type, key)] = record.value
        if not image:
            del self.images[key[0]]

    def groups(self) -> dict[str, Image]:
        """Images of the groups that exist (those with a ShareGroupMetadata record)."""
        return {g: img for g, img in self.images.items() if (SHARE_GROUP_METADATA, (g,)) in img}


def restore_group(group_id: str, image: Image) -> tuple[ShareGroup, StatePartitionMetadata]:
    """The live group an image describes (session deadlines are the shell's to set)."""
    meta = image[(SHARE_GROUP_METADATA, (group_id,))]
    target_meta = image.get((SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, (group_id,)))
    group = ShareGroup(group_id, group_epoch=meta.epoch,  # type: ignore[attr-defined]
                       assignment_epoch=target_meta.assignment_epoch if target_meta else 0,  # type: ignore
                       metadata_hash=meta.metadata_hash)  # type: ignore[attr-defined]
    state_metadata = StatePartitionMetadata()
    for (record_type, key), value in sorted(image.items(), key=lambda i: (i[0][0], i[0][1])):
        if record_type == SHARE_GROUP_MEMBER_METADATA:
            member = group.members.setdefault(key[1], ShareGroupMember(key[1]))
            member.rack_id, member.client_id, member.client_host = value.rack_id, value.client_id, value.client_host
            member.subscribed_topic_names = tuple(value.subscribed_topic_names)
        elif record_type == SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            member = group.members.setdefault(key[1], ShareGroupMember(key[1]))
            member.member_epoch, member.previous_member_epoch = value.member_epoch, value.previous_member_epoch
            member.assignment = {tp.topic_id: tuple(tp.partitions) for tp in value.assigned_partitions}
        elif record_type == SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER:
            group.target[key[1]] = {tp.topic_id: tuple(tp.partitions) for tp in value.topic_partitions}
        elif record_type == SHARE_GROUP_STATE_PARTITION_METADATA:
            state_metadata = StatePartitionMetadata.from_value(value)
    return group, state_metadata
