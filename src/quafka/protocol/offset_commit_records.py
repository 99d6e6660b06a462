"""Codecs for consumer-group committed offsets on `__consumer_offsets` (issue 16).

Kafka's layouts (group-coordinator `OffsetCommitKey.json` / `OffsetCommitValue.json`, framed by
`CoordinatorRecordSerde`):

- key: int16 record type 1, then the key struct at version 0 (non-flexible): GroupId string,
  Topic string, Partition int32;
- value: int16 version, then the struct at that version. Versions 0-3 are non-flexible (int16
  string lengths), version 4 is flexible (compact strings, tag sections):

  | field           | versions                        |
  |-----------------|---------------------------------|
  | Offset int64    | 0+                              |
  | LeaderEpoch int32 | 3+ (default -1)               |
  | Metadata string | 0+                              |
  | CommitTimestamp int64 | 0+                        |
  | ExpireTimestamp int64 | 1 only (default -1)       |
  | TopicId uuid    | 4+, tagged field 0              |

- a null value is a tombstone (the offset was deleted or expired).

Kafka 4.2 writes version 1 when the commit carries an expire timestamp (an OffsetCommit v2-4 with
RetentionTimeMs != -1) and version 4 otherwise (`GroupCoordinatorRecordHelpers.newOffsetCommitRecord`,
`offsetCommitValueVersion`); `encode_offset_commit_value` chooses the same way. Every version is
read.
"""

from __future__ import annotations

import struct
from typing import NamedTuple
from uuid import UUID

from .coordinator_record_codec import (
    CONSUMER_OFFSETS_TOPIC,
    CorruptRecord,
    FieldReader,
    UnknownRecordType,
    write_compact_string,
    write_string,
)

OFFSET_COMMIT = 1  # record type of OffsetCommitKey / OffsetCommitValue
ZERO_UUID = UUID(int=0)
NO_TIMESTAMP = -1
NO_LEADER_EPOCH = -1
_TAG_TOPIC_ID = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

__all__ = ["OFFSET_COMMIT", "OffsetCommitKey", "OffsetCommitValue", "decode_offset_commit_record",
           "encode_offset_commit_key", "encode_offset_commit_value", "is_offset_commit_key",
           "offset_commit_value_version"]


class OffsetCommitKey(NamedTuple):
    group_id: str
    topic: str
    partition: int


class OffsetCommitValue(NamedTuple):
    offset: int
    metadata: str = ""
    commit_timestamp_ms: int = NO_TIMESTAMP
    leader_epoch: int = NO_LEADER_EPOCH
    expire_timestamp_ms: int = NO_TIMESTAMP
    topic_id: UUID = ZERO_UUID


def offset_commit_value_version(value: OffsetCommitValue) -> int:
    """The version Kafka 4.2 writes: 1 with an expire timestamp, else 4."""
    return 1 if value.expire_timestamp_ms != NO_TIMESTAMP else 4


def encode_offset_commit_key(key: OffsetCommitKey) -> bytes:
    buf = bytearray(_I16.pack(OFFSET_COMMIT))
    write_string(buf, key.group_id)
    write_string(buf, key.topic)
    try:
        buf += _I32.pack(key.partition)
    except struct.error:
        raise ValueError(f"partition out of range: {key.partition}") from None
    return bytes(buf)


def encode_offset_commit_value(value: OffsetCommitValue | None) -> bytes | None:
    if value is None:
        return None
    version = offset_commit_value_version(value)
    buf = bytearray(_I16.pack(version))
    try:
        if version == 1:
            buf += _I64.pack(value.offset)
            write_string(buf, value.metadata)
            buf += _I64.pack(value.commit_timestamp_ms) + _I64.pack(value.expire_timestamp_ms)
        else:
            buf += _I64.pack(value.offset) + _I32.pack(value.leader_epoch)
            write_compact_string(buf, value.metadata)
            buf += _I64.pack(value.commit_timestamp_ms)
            if value.topic_id == ZERO_UUID:
                buf.append(0)  # no tagged fields
            else:  # one tagged field: tag 0, size 16, the uuid
                buf += bytes((1, _TAG_TOPIC_ID, 16)) + value.topic_id.bytes
    except struct.error as exc:
        raise ValueError(f"field out of range: {exc}") from None
    return bytes(buf)


def is_offset_commit_key(key: bytes) -> bool:
    return len(key) >= 2 and _I16.unpack_from(key, 0)[0] == OFFSET_COMMIT


def _decode_key(key: bytes) -> OffsetCommitKey:
    r = FieldReader(key, f"{CONSUMER_OFFSETS_TOPIC} key")
    record_type = r.int16()
    if record_type != OFFSET_COMMIT:
        raise UnknownRecordType(record_type, CONSUMER_OFFSETS_TOPIC)
    decoded = OffsetCommitKey(r.string(), r.string(), r.int32())
    r.end()
    return decoded


def _decode_value(value: bytes) -> OffsetCommitValue:
    r = FieldReader(value, f"{CONSUMER_OFFSETS_TOPIC} offset commit value")
    version = r.int16()
    if not 0 <= version <= 4:
        raise r.fail(f"unsupported value version {version}")
    offset = r.unpack(_I64)[0]
    leader_epoch = r.int32() if version >= 3 else NO_LEADER_EPOCH
    metadata = r.compact_string() if version >= 4 else r.string()
    commit_timestamp_ms = r.unpack(_I64)[0]
    expire_timestamp_ms = r.unpack(_I64)[0] if version == 1 else NO_TIMESTAMP
    topic_id = ZERO_UUID
    if version >= 4:
        payload = r.tags(_TAG_TOPIC_ID)
        if payload is not None:
            if len(payload) != 16:
                raise r.fail(f"tagged field {_TAG_TOPIC_ID} has size {len(payload)}, expected 16")
            topic_id = UUID(bytes=payload)
    r.end()
    return OffsetCommitValue(offset, metadata, commit_timestamp_ms, leader_epoch, expire_timestamp_ms, topic_id)


def decode_offset_commit_record(key: bytes, value: bytes | None) -> tuple[OffsetCommitKey, OffsetCommitValue | None]:
    """(key, value or None for a tombstone); UnknownRecordType for another record type of the
    topic, CorruptRecord for bytes that do not decode."""
    decoded_key = _decode_key(bytes(key))
    return decoded_key, None if value is None else _decode_value(bytes(value))


# re-exported for callers that catch both
__all__ += ["CorruptRecord", "UnknownRecordType"]
