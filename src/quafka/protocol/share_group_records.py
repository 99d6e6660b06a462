"""Codecs for the share-group records of `__consumer_offsets`, the group coordinator's topic
(kafka-reference §3.3).

Record types 10-15 (ShareGroupMemberMetadata, ShareGroupMetadata, ShareGroupTargetAssignmentMetadata,
ShareGroupTargetAssignmentMember, ShareGroupCurrentMemberAssignment, ShareGroupStatePartitionMetadata):
key = int16 type + non-flexible key struct (`GroupKey` or `GroupMemberKey`); value = int16 version 0
+ flexible struct; a null value is a tombstone. The other record types of the topic are
`offset_commit_records`, `classic_group_records` and `consumer_group_records`; the framing and field
codecs are `coordinator_record_codec`'s; which partition holds a group is
`partition_placement.group_partition`.

Pure and synchronous: broker, tests and tools share this one implementation.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple
from uuid import UUID

from .coordinator_record_codec import (
    CONSUMER_OFFSETS_TOPIC,
    I16,
    I32,
    VALUE_VERSION,
    FieldReader,
    GroupKey,
    GroupMemberKey,
    TopicPartitions,
    UnknownRecordType,
    checked_encode,
    decode_value,
    read_record_type,
    read_topic_partitions,
    write_compact_string,
    write_int32s,
    write_string,
    write_structs,
    write_topic_partitions,
)
from .varint import write_uvarint

SHARE_GROUP_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
SHARE_GROUP_STATE_PARTITION_METADATA = 15


class TopicPartitionsInfo(NamedTuple):
    topic_id: UUID
    topic_name: str
    partitions: tuple[int, ...]


class TopicInfo(NamedTuple):
    topic_id: UUID
    topic_name: str


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:  # type 10
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:  # type 11
    epoch: int
    metadata_hash: int = 0  # int64 (KIP-1101, Kafka 4.1+); quafka: share_group.metadata_hash


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataValue:  # type 12
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberValue:  # type 13
    topic_partitions: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:  # type 14
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState: 0 STABLE (share members are always stable)
    assigned_partitions: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataValue:  # type 15
    initializing_topics: tuple[TopicPartitionsInfo, ...] = ()
    initialized_topics: tuple[TopicPartitionsInfo, ...] = ()
    deleting_topics: tuple[TopicInfo, ...] = ()


GroupValue = (ShareGroupMemberMetadataValue | ShareGroupMetadataValue | ShareGroupTargetAssignmentMetadataValue
              | ShareGroupTargetAssignmentMemberValue | ShareGroupCurrentMemberAssignmentValue
              | ShareGroupStatePartitionMetadataValue)


class GroupRecord(NamedTuple):
    """One decoded share-group record of `__consumer_offsets`; value None is a tombstone."""

    record_type: int  # 10..15
    key: GroupKey | GroupMemberKey
    value: GroupValue | None


_GROUP_METADATA = struct.Struct(">iq")  # ShareGroupMetadataValue: Epoch, MetadataHash
_ASSIGNMENT_HEAD = struct.Struct(">iib")  # ShareGroupCurrentMemberAssignmentValue before its partitions


def _w_topic_partitions_info(buf: bytearray, t: TopicPartitionsInfo) -> None:
    buf += t.topic_id.bytes
    write_compact_string(buf, t.topic_name)
    write_int32s(buf, t.partitions)


def _w_topic_info(buf: bytearray, t: TopicInfo) -> None:
    buf += t.topic_id.bytes
    write_compact_string(buf, t.topic_name)


def _r_topic_partitions_info(r: FieldReader) -> TopicPartitionsInfo:
    return TopicPartitionsInfo(r.uuid(), r.compact_string(), r.int32s())


def _r_topic_info(r: FieldReader) -> TopicInfo:
    return TopicInfo(r.uuid(), r.compact_string())


def _w_member_metadata(buf: bytearray, v: ShareGroupMemberMetadataValue) -> None:
    write_compact_string(buf, v.rack_id)
    write_compact_string(buf, v.client_id)
    write_compact_string(buf, v.client_host)
    write_uvarint(buf, len(v.subscribed_topic_names) + 1)
    for name in v.subscribed_topic_names:
        write_compact_string(buf, name)


def _w_current_member_assignment(buf: bytearray, v: ShareGroupCurrentMemberAssignmentValue) -> None:
    buf += _ASSIGNMENT_HEAD.pack(v.member_epoch, v.previous_member_epoch, v.state)
    write_structs(buf, v.assigned_partitions, write_topic_partitions)


def _w_state_partition_metadata(buf: bytearray, v: ShareGroupStatePartitionMetadataValue) -> None:
    write_structs(buf, v.initializing_topics, _w_topic_partitions_info)
    write_structs(buf, v.initialized_topics, _w_topic_partitions_info)
    write_structs(buf, v.deleting_topics, _w_topic_info)


# record type -> (key class, value class, writer of the value's fields, reader of them)
_GROUP_CODECS = {
    SHARE_GROUP_MEMBER_METADATA: (
        GroupMemberKey, ShareGroupMemberMetadataValue, _w_member_metadata,
        lambda r: ShareGroupMemberMetadataValue(r.nullable_compact_string(), r.compact_string(),
                                                r.compact_string(), r.strings())),
    SHARE_GROUP_METADATA: (
        GroupKey, ShareGroupMetadataValue,
        lambda buf, v: buf.extend(_GROUP_METADATA.pack(v.epoch, v.metadata_hash)),
        lambda r: ShareGroupMetadataValue(*r.unpack(_GROUP_METADATA))),
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA: (
        GroupKey, ShareGroupTargetAssignmentMetadataValue,
        lambda buf, v: buf.extend(I32.pack(v.assignment_epoch)),
        lambda r: ShareGroupTargetAssignmentMetadataValue(r.int32())),
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER: (
        GroupMemberKey, ShareGroupTargetAssignmentMemberValue,
        lambda buf, v: write_structs(buf, v.topic_partitions, write_topic_partitions),
        lambda r: ShareGroupTargetAssignmentMemberValue(r.structs(17, read_topic_partitions))),
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT: (
        GroupMemberKey, ShareGroupCurrentMemberAssignmentValue, _w_current_member_assignment,
        lambda r: ShareGroupCurrentMemberAssignmentValue(*r.unpack(_ASSIGNMENT_HEAD),
                                                         r.structs(17, read_topic_partitions))),
    SHARE_GROUP_STATE_PARTITION_METADATA: (
        GroupKey, ShareGroupStatePartitionMetadataValue, _w_state_partition_metadata,
        lambda r: ShareGroupStatePartitionMetadataValue(r.structs(18, _r_topic_partitions_info),
                                                        r.structs(18, _r_topic_partitions_info),
                                                        r.structs(17, _r_topic_info))),
}


def _write_group_value(write_fields: Callable[[bytearray, Any], None], value: GroupValue) -> bytes:
    buf = bytearray(I16.pack(VALUE_VERSION))
    write_fields(buf, value)
    buf.append(0)  # top-level tag section
    return bytes(buf)


def encode_group_record(record: GroupRecord) -> tuple[bytes, bytes | None]:
    codec = _GROUP_CODECS.get(record.record_type)
    if codec is None:
        raise ValueError(f"not a share-group record type: {record.record_type}")
    key_cls, value_cls, write_fields, _ = codec
    if type(record.key) is not key_cls:
        raise ValueError(f"record type {record.record_type} needs a {key_cls.__name__} key")
    key = bytearray(I16.pack(record.record_type))
    for part in record.key:
        write_string(key, part)
    if record.value is None:
        return bytes(key), None
    if not isinstance(record.value, value_cls):
        raise ValueError(f"record type {record.record_type} needs a {value_cls.__name__} value")
    return bytes(key), checked_encode(_write_group_value, write_fields, record.value)


def decode_group_record(key: bytes, value: bytes | None) -> GroupRecord:
    r = FieldReader(key, f"{CONSUMER_OFFSETS_TOPIC} key")
    record_type = read_record_type(r)
    codec = _GROUP_CODECS.get(record_type)
    if codec is None:
        raise UnknownRecordType(record_type, CONSUMER_OFFSETS_TOPIC)
    key_cls, _, _, read_fields = codec
    decoded_key = key_cls(*(r.string() for _ in key_cls._fields))
    r.end()
    if value is None:
        return GroupRecord(record_type, decoded_key, None)
    decoded, _ = decode_value(value, f"{CONSUMER_OFFSETS_TOPIC} value of type {record_type}", read_fields)
    return GroupRecord(record_type, decoded_key, decoded)
