"""Codecs for classic consumer-group metadata on `__consumer_offsets` (record type 2).

Kafka's layouts (group-coordinator `GroupMetadataKey.json` / `GroupMetadataValue.json`, framed by
`CoordinatorRecordSerde`):

- key: int16 record type 2, then the key struct at version 0 (non-flexible): group string;
- value: int16 version, then the struct at that version. Versions 0-3 are non-flexible (int16
  string lengths, int32 bytes lengths, int32 array counts); version 4 is flexible (compact
  strings, bytes and arrays, a tag section after every struct):

  | field                          | versions                    |
  |--------------------------------|-----------------------------|
  | protocolType string            | 0+                          |
  | generation int32               | 0+                          |
  | protocol string (nullable)     | 0+                          |
  | leader string (nullable)       | 0+                          |
  | currentStateTimestamp int64    | 2+ (default -1)             |
  | members []MemberMetadata       | 0+                          |
  |   memberId string              | 0+                          |
  |   groupInstanceId string (nullable) | 3+ (default null)      |
  |   clientId string              | 0+                          |
  |   clientHost string            | 0+                          |
  |   rebalanceTimeout int32       | 1+ (default -1)             |
  |   sessionTimeout int32         | 0+                          |
  |   subscription bytes           | 0+                          |
  |   assignment bytes             | 0+                          |

- a null value is a tombstone (the group was deleted).

Kafka 4.2 writes version 3 (`GroupCoordinatorRecordHelpers.GROUP_METADATA_VALUE_VERSION`, used by
`newGroupMetadataRecord` and `newEmptyGroupMetadataRecord`); `encode_group_metadata_value` does the
same unless told another version. Every version 0-4 is read.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .coordinator_record_codec import (
    CONSUMER_OFFSETS_TOPIC,
    CorruptRecord,
    FieldReader,
    UnknownRecordType,
    write_compact_string,
    write_string,
)
from .varint import write_uvarint

GROUP_METADATA = 2  # record type of GroupMetadataKey / GroupMetadataValue
GROUP_METADATA_VALUE_VERSION = 3  # what Kafka 4.2 writes
NO_TIMESTAMP = -1
NO_REBALANCE_TIMEOUT = -1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

__all__ = ["GROUP_METADATA", "GROUP_METADATA_VALUE_VERSION", "GroupMetadataKey", "GroupMetadataValue",
           "MemberMetadata", "CorruptRecord", "UnknownRecordType", "decode_group_metadata_record",
           "encode_group_metadata_key", "encode_group_metadata_value", "is_group_metadata_key"]


class GroupMetadataKey(NamedTuple):
    group_id: str


class MemberMetadata(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


class GroupMetadataValue(NamedTuple):
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int = NO_TIMESTAMP
    members: tuple[MemberMetadata, ...] = ()


# ----------------------------------------------------------------------------- writing


def _w_nullable_string(buf: bytearray, s: str | None) -> None:
    if s is None:
        buf += _I16.pack(-1)
    else:
        write_string(buf, s)


def _w_bytes(buf: bytearray, data: bytes, flexible: bool) -> None:
    if flexible:
        write_uvarint(buf, len(data) + 1)
    else:
        buf += _I32.pack(len(data))
    buf += data


def _w_str(buf: bytearray, s: str | None, flexible: bool) -> None:
    if flexible:
        write_compact_string(buf, s)
    else:
        _w_nullable_string(buf, s)


def encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    buf = bytearray(_I16.pack(GROUP_METADATA))
    write_string(buf, key.group_id)
    return bytes(buf)


def encode_group_metadata_value(value: GroupMetadataValue | None,
                                version: int = GROUP_METADATA_VALUE_VERSION) -> bytes | None:
    """The value bytes (None for a tombstone). Fields a version lacks are dropped, as Kafka's
    generated code drops ignorable fields; a group instance id below version 3 is an error, since
    Kafka marks it ignorable but dropping it would turn a static member dynamic."""
    if value is None:
        return None
    if not 0 <= version <= 4:
        raise ValueError(f"unsupported GroupMetadataValue version {version}")
    flexible = version >= 4
    buf = bytearray(_I16.pack(version))
    try:
        _w_str(buf, value.protocol_type, flexible)
        buf += _I32.pack(value.generation)
        _w_str(buf, value.protocol, flexible)
        _w_str(buf, value.leader, flexible)
        if version >= 2:
            buf += _I64.pack(value.current_state_timestamp_ms)
        if flexible:
            write_uvarint(buf, len(value.members) + 1)
        else:
            buf += _I32.pack(len(value.members))
        for m in value.members:
            _w_str(buf, m.member_id, flexible)
            if version >= 3:
                _w_str(buf, m.group_instance_id, flexible)
            elif m.group_instance_id is not None:
                raise ValueError(f"GroupMetadataValue version {version} cannot hold a group instance id")
            _w_str(buf, m.client_id, flexible)
            _w_str(buf, m.client_host, flexible)
            if version >= 1:
                buf += _I32.pack(m.rebalance_timeout_ms)
            buf += _I32.pack(m.session_timeout_ms)
            _w_bytes(buf, bytes(m.subscription), flexible)
            _w_bytes(buf, bytes(m.assignment), flexible)
            if flexible:
                buf.append(0)  # the member's tag section
        if flexible:
            buf.append(0)  # the value's tag section
    except struct.error as exc:
        raise ValueError(f"field out of range: {exc}") from None
    return bytes(buf)


# ----------------------------------------------------------------------------- reading


def is_group_metadata_key(key: bytes) -> bool:
    return len(key) >= 2 and _I16.unpack_from(key, 0)[0] == GROUP_METADATA


def _decode_key(key: bytes) -> GroupMetadataKey:
    r = FieldReader(key, f"{CONSUMER_OFFSETS_TOPIC} key")
    record_type = r.int16()
    if record_type != GROUP_METADATA:
        raise UnknownRecordType(record_type, CONSUMER_OFFSETS_TOPIC)
    decoded = GroupMetadataKey(r.string())
    r.end()
    return decoded


def _r_nullable(r: FieldReader, flexible: bool) -> str | None:
    if flexible:
        return r.nullable_compact_string()
    n = r.int16()
    if n == -1:
        return None
    if n < 0:
        raise r.fail(f"bad string length {n}")
    return r._text(n)


def _r_string(r: FieldReader, flexible: bool) -> str:
    return r.compact_string() if flexible else r.string()


def _r_bytes(r: FieldReader, flexible: bool) -> bytes:
    if flexible:
        n = r.uvarint()
        if n == 0:
            raise r.fail("null in non-nullable bytes")
        return r.take(n - 1)
    n = r.int32()
    if n < 0:
        raise r.fail(f"bad bytes length {n}")
    return r.take(n)


def _decode_value(value: bytes) -> GroupMetadataValue:
    r = FieldReader(value, f"{CONSUMER_OFFSETS_TOPIC} group metadata value")
    version = r.int16()
    if not 0 <= version <= 4:
        raise r.fail(f"unsupported value version {version}")
    flexible = version >= 4
    protocol_type = _r_string(r, flexible)
    generation = r.int32()
    protocol = _r_nullable(r, flexible)
    leader = _r_nullable(r, flexible)
    timestamp = r.unpack(_I64)[0] if version >= 2 else NO_TIMESTAMP
    if flexible:
        count = r.count(8)
    else:
        count = r.int32()
        if count < 0 or count * 16 > len(r.data) - r.pos:
            raise r.fail(f"bad member count {count}")
    members = []
    for _ in range(count):
        member_id = _r_string(r, flexible)
        instance_id = _r_nullable(r, flexible) if version >= 3 else None
        client_id = _r_string(r, flexible)
        client_host = _r_string(r, flexible)
        rebalance_timeout_ms = r.int32() if version >= 1 else NO_REBALANCE_TIMEOUT
        session_timeout_ms = r.int32()
        subscription = _r_bytes(r, flexible)
        assignment = _r_bytes(r, flexible)
        if flexible:
            r.tags()
        members.append(MemberMetadata(member_id, instance_id, client_id, client_host,
                                      rebalance_timeout_ms, session_timeout_ms, subscription, assignment))
    if flexible:
        r.tags()
    r.end()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp, tuple(members))


def decode_group_metadata_record(key: bytes,
                                 value: bytes | None) -> tuple[GroupMetadataKey, GroupMetadataValue | None]:
    """(key, value or None for a tombstone); UnknownRecordType for another record type of the
    topic, CorruptRecord for bytes that do not decode."""
    decoded_key = _decode_key(bytes(key))
    return decoded_key, None if value is None else _decode_value(bytes(value))
