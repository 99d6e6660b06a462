"""A consumer group's records on `__consumer_offsets` (types 3, 5-8; see
protocol/consumer_group_records.py), the way group_records.py does it for share groups:

`image_of(group)` renders a group as {(record type, key): value}; `diff(old, new)` gives the
records that turn one image into the other (tombstones for keys that went, the group's metadata
tombstone last, as Kafka's GroupMetadataManager writes a deleted group). The shell keeps the last
image written per group in a `ConsumerGroupImageTracker`, which appends what `diff(last,
image_of(...))` would give after each change but renders only the group's own keys and those of
the members the group marks `touched` (all of them after a new target assignment or a restore):
a heartbeat costs O(what changed), not O(members) (issue 28).
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

from ._image_tracker import GroupImageTracker
from .consumer_group import ConsumerGroup, ConsumerGroupMember
from .consumer_group_reconcile import AssignmentState, MemberState

__all__ = ["ConsumerGroupImageTracker", "ConsumerGroupImages", "Image", "diff", "image_of", "restore_group"]

Image = dict[tuple[int, tuple], object]

# Kafka's write order within one change: member subscription, group epoch, target members, target
# epoch, current assignments
_ORDER = {CONSUMER_GROUP_MEMBER_METADATA: 0, CONSUMER_GROUP_PARTITION_METADATA: 1, CONSUMER_GROUP_METADATA: 2,
          CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: 3, CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: 4,
          CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: 5}


def _partitions(assignment) -> tuple[TopicPartitions, ...]:
    return tuple(TopicPartitions(t, tuple(sorted(ps))) for t, ps in sorted(assignment.items()) if ps)


_MEMBER_TYPES = (CONSUMER_GROUP_MEMBER_METADATA, CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                 CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER)


def _group_entries(group: ConsumerGroup, image: Image) -> None:
    gkey = (group.group_id,)
    image[(CONSUMER_GROUP_METADATA, gkey)] = ConsumerGroupMetadataValue(group.group_epoch, group.metadata_hash)
    image[(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, gkey)] = ConsumerGroupTargetAssignmentMetadataValue(
        group.assignment_epoch)


def _member_entries(group: ConsumerGroup, member_id: str, image: Image) -> None:
    mkey = (group.group_id, member_id)
    m = group.members.get(member_id)
    if m is not None:
        image[(CONSUMER_GROUP_MEMBER_METADATA, mkey)] = ConsumerGroupMemberMetadataValue(
            m.instance_id, m.rack_id, m.client_id, m.client_host, tuple(m.subscribed_topic_names),
            m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor, m.classic_member_metadata)
        image[(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, mkey)] = ConsumerGroupCurrentMemberAssignmentValue(
            m.member_epoch, m.previous_member_epoch, int(m.state), _partitions(m.assigned),
            _partitions(m.pending_revocation))
    target = group.target.get(member_id)
    if target is not None:
        image[(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, mkey)] = ConsumerGroupTargetAssignmentMemberValue(
            _partitions(target))


def image_of(group: ConsumerGroup | None) -> Image:
    """The records that describe `group` (None: a deleted group, no records)."""
    image: Image = {}
    if group is None:
        return image
    _group_entries(group, image)
    for member_id in group.members:
        _member_entries(group, member_id, image)
    for member_id in group.target:
        if member_id not in group.members:
            _member_entries(group, member_id, image)
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


class ConsumerGroupImageTracker(GroupImageTracker):
    """The image last written to `__consumer_offsets` per group, kept up to date incrementally.

    `records(group_id, group)` gives the records that bring the log in line with `group` (what
    `diff(last, image_of(group))` gives), looking only at the group's own keys and at the keys of
    the members in `group.touched` (every key when `touched` is None, or for a deleted group);
    `written(group_id)` then takes them as written (after a successful append) and empties
    `group.touched`. Without `written` (a failed append) the last image stays as it was."""

    def records(self, group_id: str, group: ConsumerGroup | None) -> list[ConsumerGroupRecord]:
        if group is None or group.touched is None:
            new = image_of(group)
            return diff(self._pend(group_id, group, new, None), new)
        part: Image = {}
        _group_entries(group, part)
        for member_id in sorted(group.touched):
            _member_entries(group, member_id, part)
        keys = tuple(part) + tuple((t, (group_id, m)) for m in sorted(group.touched) for t in _MEMBER_TYPES)
        return diff(self._pend(group_id, group, part, keys), part)


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
