"""A consumer group's records on `__consumer_offsets` (types 3, 5-8; see
protocol/consumer_group_records.py), the way group_records.py does it for share groups:

`image_of(group)` renders a group as {(record type, key): value}; `diff(old, new)` gives the
records that turn one image into the other (tombstones for keys that went, the group's metadata
tombstone last, as Kafka's GroupMetadataManager writes a deleted group). The shell keeps the last
image written per group and appends `diff(last, image_of(...))` after each change.
`ConsumerGroupImages` replays records back into images at start-up and `restore_group` turns an
image back into a live ConsumerGroup (then `ConsumerGroupCoordinator.restore`). A type-4 record
(deprecated ConsumerGroupPartitionMetadata) read back is ignored and tombstoned by the next diff.
"""

from __future__ import annotations

from quafka.protocol.consumer_group_records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_PARTITION_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataValue,
    ConsumerGroupRecord,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupKey,
    GroupMemberKey,
    TopicPartitions,
)

from .consumer_group import ConsumerGroup, ConsumerGroupMember
from .consumer_group_reconcile import AssignmentState, MemberState

__all__ = ["ConsumerGroupImages", "Image", "diff", "image_of", "restore_group"]

Image = dict[tuple[int, tuple], object]

# Kafka's write order within one change: member subscription, group epoch, target members, target
# epoch, current assignments
_ORDER = {CONSUMER_GROUP_MEMBER_METADATA: 0, CONSUMER_GROUP_PARTITION_METADATA: 1, CONSUMER_GROUP_METADATA: 2,
          CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: 3, CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: 4,
          CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: 5}


def _partitions(assignment) -> tuple[TopicPartitions, ...]:
    return tuple(TopicPartitions(t, tuple(sorted(ps))) for t, ps in sorted(assignment.items()) if ps)


def image_of(group: ConsumerGroup | None) -> Image:
    """The records that describe `group` (None: a deleted group, no records)."""
    image: Image = {}
    if group is None:
        return image
    gkey = (group.group_id,)
    image[(CONSUMER_GROUP_METADATA, gkey)] = ConsumerGroupMetadataValue(group.group_epoch, group.metadata_hash)
    image[(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, gkey)] = ConsumerGroupTargetAssignmentMetadataValue(
        group.assignment_epoch)
    for member_id, m in group.members.items():
        mkey = (group.group_id, member_id)
        image[(CONSUMER_GROUP_MEMBER_METADATA, mkey)] = ConsumerGroupMemberMetadataValue(
            m.instance_id, m.rack_id, m.client_id, m.client_host, tuple(m.subscribed_topic_names),
            m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor, m.classic_member_metadata)
        image[(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, mkey)] = ConsumerGroupCurrentMemberAssignmentValue(
            m.member_epoch, m.previous_member_epoch, int(m.state), _partitions(m.assigned),
            _partitions(m.pending_revocation))
    for member_id, target in group.target.items():
        image[(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, (group.group_id, member_id))] = \
            ConsumerGroupTargetAssignmentMemberValue(_partitions(target))
    return image


def _key(key: tuple) -> GroupKey | GroupMemberKey:
    return GroupMemberKey(*key) if len(key) == 2 else GroupKey(*key)


def diff(old: Image, new: Image) -> list[ConsumerGroupRecord]:
    records = [ConsumerGroupRecord(t, _key(k), v)
               for (t, k), v in sorted(new.items(), key=lambda i: (_ORDER[i[0][0]], i[0][1]))
               if old.get((t, k)) != v]
    gone = sorted((k for k in old if k not in new),
                  key=lambda i: (i[0] == CONSUMER_GROUP_METADATA, -_ORDER[i[0]], i[1]))
    records.extend(ConsumerGroupRecord(t, _key(k), None) for t, k in gone)
    return records


class ConsumerGroupImages:
    """Replays `__consumer_offsets` consumer-group records into one image per group."""

    def __init__(self) -> None:
        self.images: dict[str, Image] = {}

    def replay(self, record: ConsumerGroupRecord) -> None:
        key = tuple(record.key)
        image = self.images.setdefault(key[0], {})
        if record.value is None:
            image.pop((record.record_type, key), None)
        else:
            image[(record.record_type, key)] = record.value
        if not image:
            del self.images[key[0]]

    def groups(self) -> dict[str, Image]:
        """Images of the groups that exist (those with a ConsumerGroupMetadata record)."""
        return {g: img for g, img in self.images.items() if (CONSUMER_GROUP_METADATA, (g,)) in img}


def restore_group(group_id: str, image: Image) -> ConsumerGroup:
    """The live group an image describes (timers are the coordinator's `restore` to arm)."""
    meta = image[(CONSUMER_GROUP_METADATA, (group_id,))]
    target_meta = image.get((CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, (group_id,)))
    group = ConsumerGroup(group_id, group_epoch=meta.epoch,  # type: ignore[attr-defined]
                          assignment_epoch=target_meta.assignment_epoch if target_meta else 0,  # type: ignore
                          metadata_hash=meta.metadata_hash)  # type: ignore[attr-defined]
    for (record_type, key), value in sorted(image.items(), key=lambda i: (i[0][0], i[0][1])):
        if record_type == CONSUMER_GROUP_MEMBER_METADATA:
            m = group.members.setdefault(key[1], ConsumerGroupMember(key[1]))
            m.instance_id, m.rack_id = value.instance_id, value.rack_id
            m.client_id, m.client_host = value.client_id, value.client_host
            m.subscribed_topic_names = tuple(value.subscribed_topic_names)
            m.subscribed_topic_regex, m.rebalance_timeout_ms = value.subscribed_topic_regex, value.rebalance_timeout_ms
            m.server_assignor, m.classic_member_metadata = value.server_assignor, value.classic_member_metadata
        elif record_type == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            m = group.members.setdefault(key[1], ConsumerGroupMember(key[1]))
            try:
                state = MemberState(value.state)
            except ValueError:
                state = MemberState.UNKNOWN
            m.current = AssignmentState(
                state, value.member_epoch, value.previous_member_epoch,
                {tp.topic_id: frozenset(tp.partitions) for tp in value.assigned_partitions},
                {tp.topic_id: frozenset(tp.partitions) for tp in value.partitions_pending_revocation})
        elif record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            group.target[key[1]] = {tp.topic_id: frozenset(tp.partitions) for tp in value.topic_partitions}
    return group
