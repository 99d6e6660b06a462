"""Codecs for the consumer-group (KIP-848) records of `__consumer_offsets`, as Kafka 4.2 writes them
(group-coordinator/src/main/resources/common/message/ConsumerGroup*.json):

- 3 ConsumerGroupMetadata (group): Epoch; MetadataHash is tagged field 0 (int64, written when not 0);
- 4 ConsumerGroupPartitionMetadata (group): deprecated since 4.1 (KIP-1101) — Kafka only reads it
  from older logs and writes its tombstone; decoded for that;
- 5 ConsumerGroupMemberMetadata (group, member): instance id, rack, client id and host, subscribed
  topic names and regex, rebalance timeout, server assignor; tagged field 0 ClassicMemberMetadata
  (members that joined with the classic protocol) is kept as its raw payload, which
  `encode_classic_member_metadata` / `decode_classic_member_metadata` write and read: a nullable
  struct's presence byte (1), SessionTimeoutMs int32, SupportedProtocols as a compact array of
  (Name compact string, Metadata compact bytes, empty tag section), the struct's empty tag section;
- 6 ConsumerGroupTargetAssignmentMetadata (group): AssignmentEpoch;
- 7 ConsumerGroupTargetAssignmentMember (group, member): TopicPartitions;
- 8 ConsumerGroupCurrentMemberAssignment (group, member): member epoch, previous epoch, state (int8
  MemberState: 0 STABLE, 1 UNREVOKED_PARTITIONS, 2 UNRELEASED_PARTITIONS), assigned partitions and
  partitions pending revocation.

Key: int16 record type + the non-flexible key struct (strings with int16 lengths); value: int16
version 0 + the flexible struct + its tag section; a null value is a tombstone. Type 16
(ConsumerGroupRegularExpression) is not decoded yet (UnknownRecordType, like any other type).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple
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
    read_record_type,
    read_topic_partitions,
    write_compact_string,
    write_string,
    write_structs,
    write_topic_partitions,
)
from .varint import write_uvarint

__all__ = [
    "CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT", "CONSUMER_GROUP_MEMBER_METADATA", "CONSUMER_GROUP_METADATA",
    "CONSUMER_GROUP_PARTITION_METADATA", "CONSUMER_GROUP_RECORD_TYPES", "CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER",
    "CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA", "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupMemberMetadataValue", "ConsumerGroupMetadataValue", "ConsumerGroupPartitionMetadataValue",
    "ConsumerGroupRecord", "ConsumerGroupTargetAssignmentMemberValue", "ConsumerGroupTargetAssignmentMetadataValue",
    "GroupKey", "GroupMemberKey", "PartitionTopicMetadata", "TopicPartitions", "decode_consumer_group_record",
    "decode_classic_member_metadata", "encode_classic_member_metadata", "encode_consumer_group_record",
]

CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
CONSUMER_GROUP_RECORD_TYPES = frozenset(range(3, 9))

_I64 = struct.Struct(">q")
_ASSIGNMENT_HEAD = struct.Struct(">iib")
_TAG_METADATA_HASH = 0
_TAG_CLASSIC_MEMBER_METADATA = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:  # type 3
    epoch: int
    metadata_hash: int = 0  # tagged 0 (KIP-1101)


class PartitionTopicMetadata(NamedTuple):
    topic_id: UUID
    topic_name: str
    num_partitions: int
    partition_racks: tuple[tuple[int, tuple[str, ...]], ...] = ()  # deprecated PartitionMetadata


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:  # type 4 (deprecated)
    topics: tuple[PartitionTopicMetadata, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:  # type 5
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic_member_metadata: bytes | None = None  # tagged 0, raw payload (None: absent)


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:  # type 6
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:  # type 7
    topic_partitions: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:  # type 8
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: tuple[TopicPartitions, ...]
    partitions_pending_revocation: tuple[TopicPartitions, ...] = ()


ConsumerGroupValue = (ConsumerGroupMetadataValue | ConsumerGroupPartitionMetadataValue
                      | ConsumerGroupMemberMetadataValue | ConsumerGroupTargetAssignmentMetadataValue
                      | ConsumerGroupTargetAssignmentMemberValue | ConsumerGroupCurrentMemberAssignmentValue)


class ConsumerGroupRecord(NamedTuple):
    """One decoded consumer-group record of `__consumer_offsets`; value None is a tombstone."""

    record_type: int  # 3..8
    key: GroupKey | GroupMemberKey
    value: ConsumerGroupValue | None


# ----------------------------------------------------------------------------- classic member metadata

def encode_classic_member_metadata(session_timeout_ms: int, protocols: tuple[tuple[str, bytes], ...]) -> bytes:
    """The tagged ClassicMemberMetadata payload (see the module docstring)."""
    buf = bytearray(b"\x01")
    buf += I32.pack(session_timeout_ms)

    def protocol(b: bytearray, item: tuple[str, bytes]) -> None:
        write_compact_string(b, item[0])
        write_uvarint(b, len(item[1]) + 1)
        b += item[1]
    write_structs(buf, tuple(protocols), protocol)
    buf.append(0)
    return bytes(buf)


def decode_classic_member_metadata(payload: bytes) -> tuple[int, tuple[tuple[str, bytes], ...]] | None:
    """(session timeout ms, ((protocol name, metadata), ...)), None for a null struct; CorruptRecord
    for a payload that does not decode."""
    r = FieldReader(payload, "ClassicMemberMetadata")
    if r.take(1) != b"\x01":
        return None
    session_timeout_ms = r.int32()

    def protocol(rr: FieldReader) -> tuple[str, bytes]:
        name = rr.compact_string()
        n = rr.uvarint()
        if n == 0:
            raise rr.fail("null protocol metadata")
        return name, rr.take(n - 1)
    protocols = r.structs(2, protocol)
    r.tags()
    return session_timeout_ms, protocols


# ----------------------------------------------------------------------------- fields


def _w_tags(buf: bytearray, tags: list[tuple[int, bytes]]) -> None:
    write_uvarint(buf, len(tags))
    for tag, payload in tags:
        write_uvarint(buf, tag)
        write_uvarint(buf, len(payload))
        buf += payload


def _w_metadata(buf: bytearray, v: ConsumerGroupMetadataValue) -> list[tuple[int, bytes]]:
    buf += I32.pack(v.epoch)
    return [(_TAG_METADATA_HASH, _I64.pack(v.metadata_hash))] if v.metadata_hash else []


def _w_partition_topic(buf: bytearray, t: PartitionTopicMetadata) -> None:
    buf += t.topic_id.bytes
    write_compact_string(buf, t.topic_name)
    buf += I32.pack(t.num_partitions)

    def rack(b: bytearray, item: tuple[int, tuple[str, ...]]) -> None:
        b += I32.pack(item[0])
        write_uvarint(b, len(item[1]) + 1)
        for name in item[1]:
            write_compact_string(b, name)
    write_structs(buf, t.partition_racks, rack)


def _r_partition_topic(r: FieldReader) -> PartitionTopicMetadata:
    topic_id, name, count = r.uuid(), r.compact_string(), r.int32()
    return PartitionTopicMetadata(topic_id, name, count, r.structs(5, lambda rr: (rr.int32(), rr.strings())))


def _w_member_metadata(buf: bytearray, v: ConsumerGroupMemberMetadataValue) -> list[tuple[int, bytes]]:
    write_compact_string(buf, v.instance_id)
    write_compact_string(buf, v.rack_id)
    write_compact_string(buf, v.client_id)
    write_compact_string(buf, v.client_host)
    write_uvarint(buf, len(v.subscribed_topic_names) + 1)
    for name in v.subscribed_topic_names:
        write_compact_string(buf, name)
    write_compact_string(buf, v.subscribed_topic_regex)
    buf += I32.pack(v.rebalance_timeout_ms)
    write_compact_string(buf, v.server_assignor)
    if v.classic_member_metadata is None:
        return []
    return [(_TAG_CLASSIC_MEMBER_METADATA, v.classic_member_metadata)]


def _r_member_metadata(r: FieldReader) -> tuple:
    return (r.nullable_compact_string(), r.nullable_compact_string(), r.compact_string(), r.compact_string(),
            r.strings(), r.nullable_compact_string(), r.int32(), r.nullable_compact_string())


def _w_current_assignment(buf: bytearray, v: ConsumerGroupCurrentMemberAssignmentValue) -> list:
    buf += _ASSIGNMENT_HEAD.pack(v.member_epoch, v.previous_member_epoch, v.state)
    write_structs(buf, v.assigned_partitions, write_topic_partitions)
    write_structs(buf, v.partitions_pending_revocation, write_topic_partitions)
    return []


# record type -> (key class, value class, writer (returns the top-level tags), reader, known top tag)
_CODECS: dict[int, tuple[type, type, Callable[[bytearray, Any], list], Callable[[FieldReader], tuple], int | None]] = {
    CONSUMER_GROUP_METADATA: (GroupKey, ConsumerGroupMetadataValue, _w_metadata,
                              lambda r: (r.int32(),), _TAG_METADATA_HASH),
    CONSUMER_GROUP_PARTITION_METADATA: (
        GroupKey, ConsumerGroupPartitionMetadataValue,
        lambda buf, v: write_structs(buf, v.topics, _w_partition_topic) or [],
        lambda r: (r.structs(22, _r_partition_topic),), None),
    CONSUMER_GROUP_MEMBER_METADATA: (GroupMemberKey, ConsumerGroupMemberMetadataValue, _w_member_metadata,
                                     _r_member_metadata, _TAG_CLASSIC_MEMBER_METADATA),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: (
        GroupKey, ConsumerGroupTargetAssignmentMetadataValue,
        lambda buf, v: buf.extend(I32.pack(v.assignment_epoch)) or [], lambda r: (r.int32(),), None),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: (
        GroupMemberKey, ConsumerGroupTargetAssignmentMemberValue,
        lambda buf, v: write_structs(buf, v.topic_partitions, write_topic_partitions) or [],
        lambda r: (r.structs(17, read_topic_partitions),), None),
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: (
        GroupMemberKey, ConsumerGroupCurrentMemberAssignmentValue, _w_current_assignment,
        lambda r: (*r.unpack(_ASSIGNMENT_HEAD), r.structs(17, read_topic_partitions),
                   r.structs(17, read_topic_partitions)), None),
}


def _write_value(write_fields: Callable[[bytearray, Any], list], value: Any) -> bytes:
    buf = bytearray(I16.pack(VALUE_VERSION))
    tags = write_fields(buf, value)
    _w_tags(buf, tags)
    return bytes(buf)


def encode_consumer_group_record(record: ConsumerGroupRecord) -> tuple[bytes, bytes | None]:
    codec = _CODECS.get(record.record_type)
    if codec is None:
        raise ValueError(f"not a consumer-group record type: {record.record_type}")
    key_cls, value_cls, write_fields, _, _ = codec
    if type(record.key) is not key_cls:
        raise ValueError(f"record type {record.record_type} needs a {key_cls.__name__} key")
    key = bytearray(I16.pack(record.record_type))
    for part in record.key:
        write_string(key, part)
    if record.value is None:
        return bytes(key), None
    if not isinstance(record.value, value_cls):
        raise ValueError(f"record type {record.record_type} needs a {value_cls.__name__} value")
    return bytes(key), checked_encode(_write_value, write_fields, record.value)


def decode_consumer_group_record(key: bytes, value: bytes | None) -> ConsumerGroupRecord:
    """Raises UnknownRecordType for the other types of `__consumer_offsets` and CorruptRecord for
    bytes that do not decode."""
    r = FieldReader(key, f"{CONSUMER_OFFSETS_TOPIC} key")
    record_type = read_record_type(r)
    codec = _CODECS.get(record_type)
    if codec is None:
        raise UnknownRecordType(record_type, CONSUMER_OFFSETS_TOPIC)
    key_cls, value_cls, _, read_fields, top_tag = codec
    decoded_key = key_cls(*(r.string() for _ in key_cls._fields))
    r.end()
    if value is None:
        return ConsumerGroupRecord(record_type, decoded_key, None)
    vr = FieldReader(value, f"{CONSUMER_OFFSETS_TOPIC} value of type {record_type}")
    version = vr.int16()
    if version != VALUE_VERSION:
        raise vr.fail(f"unsupported value version {version}")
    fields = read_fields(vr)
    payload = vr.tags(top_tag)
    vr.end()
    if record_type == CONSUMER_GROUP_METADATA:
        if payload is not None and len(payload) != 8:
            raise vr.fail(f"tagged field 0 has size {len(payload)}, expected 8")
        fields = (*fields, _I64.unpack(payload)[0] if payload is not None else 0)
    elif record_type == CONSUMER_GROUP_MEMBER_METADATA:
        fields = (*fields, payload)
    return ConsumerGroupRecord(record_type, decoded_key, value_cls(*fields))
