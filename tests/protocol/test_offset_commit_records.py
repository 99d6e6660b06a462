"""OffsetCommitKey / OffsetCommitValue on __consumer_offsets, byte for byte as Kafka's schemas lay
them out (group-coordinator OffsetCommitKey.json, OffsetCommitValue.json v0-4; the version written
as GroupCoordinatorRecordHelpers.offsetCommitValueVersion chooses)."""

from __future__ import annotations

import struct
from uuid import UUID

import pytest

from quafka.protocol.coordinator_record_codec import CorruptRecord, GroupKey, UnknownRecordType
from quafka.protocol.share_group_records import (
    SHARE_GROUP_METADATA,
    GroupRecord,
    ShareGroupMetadataValue,
    encode_group_record,
)
from quafka.protocol.offset_commit_records import (
    OffsetCommitKey,
    OffsetCommitValue,
    decode_offset_commit_record,
    encode_offset_commit_key,
    encode_offset_commit_value,
    is_offset_commit_key,
    offset_commit_value_version,
)

TOPIC_ID = UUID("12345678-9abc-def0-1234-56789abcdef0")


def _s(text: str) -> bytes:  # non-flexible string
    return struct.pack(">h", len(text)) + text.encode()


def test_key_layout():
    key = encode_offset_commit_key(OffsetCommitKey("g", "orders", 3))
    assert key == struct.pack(">h", 1) + _s("g") + _s("orders") + struct.pack(">i", 3)
    assert is_offset_commit_key(key)


def test_value_v4_without_and_with_topic_id():
    value = OffsetCommitValue(42, "meta", 1_700_000_000_000, leader_epoch=7)
    head = struct.pack(">hqi", 4, 42, 7) + bytes([5]) + b"meta" + struct.pack(">q", 1_700_000_000_000)
    assert encode_offset_commit_value(value) == head + b"\x00"
    with_id = value._replace(topic_id=TOPIC_ID)
    assert encode_offset_commit_value(with_id) == head + bytes([1, 0, 16]) + TOPIC_ID.bytes
    assert offset_commit_value_version(with_id) == 4


def test_value_v1_when_an_expire_timestamp_is_set():
    value = OffsetCommitValue(42, "", 1000, expire_timestamp_ms=5000)
    assert offset_commit_value_version(value) == 1
    assert encode_offset_commit_value(value) == struct.pack(">hq", 1, 42) + _s("") + struct.pack(">qq", 1000, 5000)


@pytest.mark.parametrize("raw, expected", [
    (struct.pack(">hq", 0, 5) + _s("m") + struct.pack(">q", 10), OffsetCommitValue(5, "m", 10)),
    (struct.pack(">hq", 1, 5) + _s("m") + struct.pack(">qq", 10, 20), OffsetCommitValue(5, "m", 10, expire_timestamp_ms=20)),
    (struct.pack(">hq", 2, 5) + _s("m") + struct.pack(">q", 10), OffsetCommitValue(5, "m", 10)),
    (struct.pack(">hqi", 3, 5, 9) + _s("m") + struct.pack(">q", 10), OffsetCommitValue(5, "m", 10, leader_epoch=9)),
])
def test_every_older_version_is_read(raw, expected):
    key = encode_offset_commit_key(OffsetCommitKey("g", "t", 0))
    assert decode_offset_commit_record(key, raw) == (OffsetCommitKey("g", "t", 0), expected)


@pytest.mark.parametrize("value", [
    OffsetCommitValue(0), OffsetCommitValue(2**62, "x" * 300, 123, 4, topic_id=TOPIC_ID),
    OffsetCommitValue(9, "é", 1, expire_timestamp_ms=99), None,
])
def test_round_trip(value):
    key = OffsetCommitKey("group-é", "topic", 2_000_000)
    assert decode_offset_commit_record(encode_offset_commit_key(key), encode_offset_commit_value(value)) == (key, value)


def test_unknown_tags_are_skipped():
    raw = struct.pack(">hqi", 4, 1, -1) + bytes([1]) + struct.pack(">q", 0) + bytes([1, 5, 2]) + b"zz"
    _, value = decode_offset_commit_record(encode_offset_commit_key(OffsetCommitKey("g", "t", 0)), raw)
    assert value == OffsetCommitValue(1, "", 0)


@pytest.mark.parametrize("raw, message", [
    (struct.pack(">hq", 5, 1), "unsupported value version 5"),
    (struct.pack(">hq", 0, 1), "truncated"),
    (struct.pack(">hq", 0, 1) + _s("") + struct.pack(">q", 0) + b"x", "trailing"),
    (struct.pack(">hqi", 4, 1, -1) + bytes([1]) + struct.pack(">q", 0) + bytes([1, 0, 3]) + b"abc", "expected 16"),
])
def test_corrupt_values_are_refused(raw, message):
    with pytest.raises(CorruptRecord, match=message):
        decode_offset_commit_record(encode_offset_commit_key(OffsetCommitKey("g", "t", 0)), raw)


def test_other_record_types_of_the_topic_are_not_offset_commits():
    key, _ = encode_group_record(GroupRecord(SHARE_GROUP_METADATA, GroupKey("g"), ShareGroupMetadataValue(1, 0)))
    assert not is_offset_commit_key(key)
    with pytest.raises(UnknownRecordType):
        decode_offset_commit_record(key, None)


def test_out_of_range_fields_are_value_errors():
    with pytest.raises(ValueError):
        encode_offset_commit_key(OffsetCommitKey("g", "t", 2**31))
    with pytest.raises(ValueError):
        encode_offset_commit_value(OffsetCommitValue(2**63))
