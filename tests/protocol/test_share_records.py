"""Codecs of the share coordinators' records: `__share_group_state` (protocol/share_state_records.py)
and the share-group records of `__consumer_offsets` (protocol/share_group_records.py), on the framing of
protocol/coordinator_record_codec.py. The placement rules are tests/protocol/test_partition_placement.py."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quafka.protocol.coordinator_record_codec import (
    CorruptRecord,
    GroupKey,
    GroupMemberKey,
    TopicPartitions,
    UnknownRecordType,
)
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
    decode_group_record,
    encode_group_record,
)
from quafka.protocol.share_state_records import (
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    STATE_ACKNOWLEDGED,
    STATE_ARCHIVED,
    STATE_AVAILABLE,
    ShareSnapshotValue,
    ShareStateKey,
    ShareStateRecord,
    ShareUpdateValue,
    StateBatch,
    decode_share_state_record,
    encode_share_state_key,
    encode_share_state_record,
    encode_share_state_value,
)

TOPIC_A = uuid.UUID("01234567-89ab-cdef-fedc-ba9876543210")
TOPIC_B = uuid.UUID(int=2)
KEY = ShareStateKey("share-group", TOPIC_A, 7)


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


# ----------------------------------------------------------------------------- golden bytes


def test_share_snapshot_value_bytes_are_laid_out_field_by_field() -> None:
    value = ShareSnapshotValue(
        snapshot_epoch=3, state_epoch=1, leader_epoch=5, start_offset=100,
        create_timestamp_ms=1_700_000_000_000, write_timestamp_ms=1_700_000_000_500,
        state_batches=(StateBatch(100, 109, STATE_ACKNOWLEDGED, 1), StateBatch(110, 110, STATE_AVAILABLE, 2)),
        delivery_complete_count=10,
    )
    expected = b"".join([
        i16(0),  # value version
        i32(3), i32(1), i32(5), i64(100),  # SnapshotEpoch, StateEpoch, LeaderEpoch, StartOffset
        i64(1_700_000_000_000), i64(1_700_000_000_500),  # CreateTimestamp, WriteTimestamp
        bytes([3]),  # StateBatches: compact array, 2 elements + 1
        i64(100), i64(109), struct.pack(">b", 2), i16(1), bytes([0]),  # batch 1 + empty tag section
        i64(110), i64(110), struct.pack(">b", 0), i16(2), bytes([0]),  # batch 2 + empty tag section
        bytes([1]),  # top-level tag section: one tagged field
        bytes([0]), bytes([4]), i32(10),  # tag 0, size 4, DeliveryCompleteCount
    ])
    assert encode_share_state_value(value) == expected


def test_share_snapshot_value_without_delivery_complete_count_has_an_empty_tag_section() -> None:
    value = ShareSnapshotValue(0, 0, 0, 0, 0, 0)
    expected = i16(0) + i32(0) * 3 + i64(0) * 3 + bytes([1]) + bytes([0])
    assert encode_share_state_value(value) == expected


def test_share_update_value_bytes() -> None:
    value = ShareUpdateValue(2, 4, -1, (StateBatch(5, 6, STATE_ARCHIVED, 3),))
    expected = (i16(0) + i32(2) + i32(4) + i64(-1) + bytes([2]) + i64(5) + i64(6) + bytes([4]) + i16(3)
                + bytes([0]) + bytes([0]))
    assert encode_share_state_value(value) == expected


def test_share_state_key_bytes() -> None:
    expected = i16(SHARE_UPDATE) + i16(11) + b"share-group" + TOPIC_A.bytes + i32(7)
    assert encode_share_state_key(SHARE_UPDATE, KEY) == expected


def test_group_record_bytes() -> None:
    record = GroupRecord(SHARE_GROUP_MEMBER_METADATA, GroupMemberKey("g", "m1"),
                         ShareGroupMemberMetadataValue(None, "cid", "/10.0.0.1", ("t1",)))
    key, value = encode_group_record(record)
    assert key == i16(10) + i16(1) + b"g" + i16(2) + b"m1"
    # rack null (0), "cid" (3+1), "/10.0.0.1" (9+1), array of 1 (2) with "t1" (2+1), tags (0)
    assert value == i16(0) + b"\x00" + b"\x04cid" + b"\x0a/10.0.0.1" + b"\x02" + b"\x03t1" + b"\x00"

    key, value = encode_group_record(GroupRecord(SHARE_GROUP_METADATA, GroupKey("g"), ShareGroupMetadataValue(9, -2)))
    assert key == i16(11) + i16(1) + b"g"
    assert value == i16(0) + i32(9) + i64(-2) + b"\x00"


# ----------------------------------------------------------------------------- round trips

SHARE_STATE_RECORDS = [
    ShareStateRecord(SHARE_SNAPSHOT, KEY, ShareSnapshotValue(1, 0, 0, 0, 10, 20)),
    ShareStateRecord(SHARE_SNAPSHOT, KEY, ShareSnapshotValue(
        7, 2, 9, 1000, 10, 20, (StateBatch(1000, 1004, STATE_AVAILABLE, 2), StateBatch(1005, 1005, 4, 5)), 0)),
    ShareStateRecord(SHARE_SNAPSHOT, ShareStateKey("", uuid.UUID(int=0), 0), ShareSnapshotValue(
        2**31 - 1, -(2**31), -1, -1, -(2**63), 2**63 - 1, (), 2**31 - 1)),
    ShareStateRecord(SHARE_UPDATE, KEY, ShareUpdateValue(1, 3, -1)),
    ShareStateRecord(SHARE_UPDATE, KEY, ShareUpdateValue(1, 3, 42, (StateBatch(42, 50, STATE_ACKNOWLEDGED, 1),), 8)),
    ShareStateRecord(SHARE_SNAPSHOT, KEY, None),
    ShareStateRecord(SHARE_UPDATE, ShareStateKey("grüppe-😀", TOPIC_B, 2**31 - 1), None),
]


@pytest.mark.parametrize("record", SHARE_STATE_RECORDS)
def test_share_state_records_round_trip(record: ShareStateRecord) -> None:
    key, value = encode_share_state_record(record)
    assert (value is None) == (record.value is None)
    decoded = decode_share_state_record(key, value)
    assert decoded == record
    assert type(decoded.key) is ShareStateKey
    if decoded.value is not None:
        assert type(decoded.value.state_batches) is tuple
        assert all(type(b) is StateBatch for b in decoded.value.state_batches)


GROUP_RECORDS = [
    GroupRecord(SHARE_GROUP_MEMBER_METADATA, GroupMemberKey("g", "m"),
                ShareGroupMemberMetadataValue("rack-1", "client", "/127.0.0.1", ("a", "b"))),
    GroupRecord(SHARE_GROUP_MEMBER_METADATA, GroupMemberKey("g", "m"),
                ShareGroupMemberMetadataValue(None, "", "", ())),
    GroupRecord(SHARE_GROUP_MEMBER_METADATA, GroupMemberKey("g", "m"), None),
    GroupRecord(SHARE_GROUP_METADATA, GroupKey("g"), ShareGroupMetadataValue(5)),
    GroupRecord(SHARE_GROUP_METADATA, GroupKey("g"), ShareGroupMetadataValue(2**31 - 1, -(2**63))),
    GroupRecord(SHARE_GROUP_METADATA, GroupKey("g"), None),
    GroupRecord(SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, GroupKey("g"), ShareGroupTargetAssignmentMetadataValue(3)),
    GroupRecord(SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, GroupKey("g"), None),
    GroupRecord(SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, GroupMemberKey("g", "m"),
                ShareGroupTargetAssignmentMemberValue((TopicPartitions(TOPIC_A, (0, 1, 2)),
                                                       TopicPartitions(TOPIC_B, ())))),
    GroupRecord(SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, GroupMemberKey("g", "m"), ShareGroupTargetAssignmentMemberValue(())),
    GroupRecord(SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, GroupMemberKey("g", "m"), None),
    GroupRecord(SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, GroupMemberKey("g", "m"),
                ShareGroupCurrentMemberAssignmentValue(4, 3, 0, (TopicPartitions(TOPIC_A, (5,)),))),
    GroupRecord(SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, GroupMemberKey("g", "m"),
                ShareGroupCurrentMemberAssignmentValue(0, -1, -1, ())),
    GroupRecord(SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, GroupMemberKey("g", "m"), None),
    GroupRecord(SHARE_GROUP_STATE_PARTITION_METADATA, GroupKey("g"), ShareGroupStatePartitionMetadataValue(
        (TopicPartitionsInfo(TOPIC_A, "orders", (0, 1)),),
        (TopicPartitionsInfo(TOPIC_B, "payments", ()), TopicPartitionsInfo(uuid.UUID(int=9), "é", (3,))),
        (TopicInfo(uuid.UUID(int=10), "gone"),))),
    GroupRecord(SHARE_GROUP_STATE_PARTITION_METADATA, GroupKey("g"), ShareGroupStatePartitionMetadataValue()),
    GroupRecord(SHARE_GROUP_STATE_PARTITION_METADATA, GroupKey("g"), None),
]


@pytest.mark.parametrize("record", GROUP_RECORDS)
def test_group_records_round_trip(record: GroupRecord) -> None:
    key, value = encode_group_record(record)
    assert (value is None) == (record.value is None)
    decoded = decode_group_record(key, value)
    assert decoded == record
    assert type(decoded.key) is type(record.key)
    for name in ("topic_partitions", "assigned_partitions", "initializing_topics", "initialized_topics",
                 "deleting_topics", "subscribed_topic_names"):
        items = getattr(decoded.value, name, None)
        if items is not None:
            assert type(items) is tuple
            for item in items:
                assert type(item) in (str, TopicPartitions, TopicPartitionsInfo, TopicInfo)
                assert type(getattr(item, "partitions", ())) is tuple


def test_every_share_group_record_type_has_a_round_trip_case() -> None:
    assert {r.record_type for r in GROUP_RECORDS} == set(range(10, 16))
    assert {r.record_type for r in SHARE_STATE_RECORDS} == {SHARE_SNAPSHOT, SHARE_UPDATE}


int8 = st.integers(-(2**7), 2**7 - 1)
int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
# quafka's due time (tag TAG_DUE_MS) is 0 (absent) or any int64
batches = st.lists(st.builds(StateBatch, int64, int64, int8, int16, st.just(0) | int64), max_size=8).map(tuple)
# quafka's failed keys (tag TAG_FAILED_KEYS): absent, or a set of (key bytes, offset)
failed_keys = st.none() | st.lists(st.tuples(st.binary(max_size=20), int64), max_size=4).map(tuple)
uuids = st.binary(min_size=16, max_size=16).map(lambda b: uuid.UUID(bytes=b))
# Non-flexible strings carry an int16 byte length; keep them well under it. Lone surrogates do not
# encode to UTF-8, so they are excluded.
key_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
share_keys = st.builds(ShareStateKey, key_text, uuids, int32)
snapshots = st.builds(ShareSnapshotValue, int32, int32, int32, int64, int64, int64, batches, int32, failed_keys)
updates = st.builds(ShareUpdateValue, int32, int32, int64, batches, int32, failed_keys)


@settings(max_examples=200)
@given(share_keys, snapshots)
def test_any_share_snapshot_round_trips(key: ShareStateKey, value: ShareSnapshotValue) -> None:
    record = ShareStateRecord(SHARE_SNAPSHOT, key, value)
    assert decode_share_state_record(*encode_share_state_record(record)) == record


@settings(max_examples=200)
@given(share_keys, updates)
def test_any_share_update_round_trips(key: ShareStateKey, value: ShareUpdateValue) -> None:
    record = ShareStateRecord(SHARE_UPDATE, key, value)
    assert decode_share_state_record(*encode_share_state_record(record)) == record


@given(share_keys, st.sampled_from([SHARE_SNAPSHOT, SHARE_UPDATE]))
def test_any_share_state_key_round_trips_as_a_tombstone(key: ShareStateKey, record_type: int) -> None:
    record = ShareStateRecord(record_type, key, None)
    assert decode_share_state_record(encode_share_state_key(record_type, key), None) == record


@given(st.binary(max_size=64), st.one_of(st.none(), st.binary(max_size=64)))
def test_arbitrary_bytes_decode_or_raise_corrupt_record(key: bytes, value: bytes | None) -> None:
    for decode in (decode_share_state_record, decode_group_record):
        try:
            decode(key, value)
        except CorruptRecord:
            pass


# ----------------------------------------------------------------------------- decoder robustness


def test_unknown_tags_are_skipped_in_share_state_values() -> None:
    key = encode_share_state_key(SHARE_SNAPSHOT, KEY)
    value = b"".join([
        i16(0), i32(1), i32(2), i32(3), i64(4), i64(5), i64(6),
        bytes([2]),  # one batch
        i64(10), i64(12), bytes([0]), i16(1),
        bytes([1, 9, 3]) + b"xyz",  # batch tag section: unknown tag 9, 3 bytes
        bytes([3]),  # top-level: three tagged fields
        bytes([0, 4]) + i32(77),  # tag 0 = DeliveryCompleteCount
        bytes([1, 0]),  # unknown tag 1, empty
        bytes([0x80, 0x01, 2]) + b"ab",  # unknown tag 128 (two-byte varint), 2 bytes
    ])
    decoded = decode_share_state_record(key, value)
    assert decoded.value == ShareSnapshotValue(1, 2, 3, 4, 5, 6, (StateBatch(10, 12, 0, 1),), 77)


def test_unknown_tags_alone_leave_delivery_complete_count_at_minus_one() -> None:
    key = encode_share_state_key(SHARE_UPDATE, KEY)
    value = i16(0) + i32(1) + i32(2) + i64(3) + bytes([1]) + bytes([1, 5, 1]) + b"\x00"
    assert decode_share_state_record(key, value).value == ShareUpdateValue(1, 2, 3, (), -1)


def test_unknown_tags_are_skipped_in_group_values() -> None:
    key, value = encode_group_record(GROUP_RECORDS[8])  # target assignment member, two topics
    assert value is not None and value.endswith(b"\x00\x00")  # last element's tags, then top-level tags
    element_tags = bytes([1, 3, 1]) + b"z"  # one field: tag 3, 1 byte
    top_tags = bytes([2, 4, 2]) + b"qq" + bytes([6, 0])  # two fields: tag 4 (2 bytes), tag 6 (empty)
    tagged = value[:-2] + element_tags + top_tags
    assert decode_group_record(key, tagged) == GROUP_RECORDS[8]


@pytest.mark.parametrize("record", [r for r in SHARE_STATE_RECORDS if r.value is not None])
def test_every_truncation_of_a_share_state_record_raises_corrupt_record(record: ShareStateRecord) -> None:
    key, value = encode_share_state_record(record)
    assert value is not None
    for n in range(len(key)):
        with pytest.raises(CorruptRecord):
            decode_share_state_record(key[:n], value)
    for n in range(len(value)):
        with pytest.raises(CorruptRecord):
            decode_share_state_record(key, value[:n])


@pytest.mark.parametrize("record", [r for r in GROUP_RECORDS if r.value is not None])
def test_every_truncation_of_a_group_record_raises_corrupt_record(record: GroupRecord) -> None:
    key, value = encode_group_record(record)
    assert value is not None
    for n in range(len(key)):
        with pytest.raises(CorruptRecord):
            decode_group_record(key[:n], value)
    for n in range(len(value)):
        with pytest.raises(CorruptRecord):
            decode_group_record(key, value[:n])


def test_a_value_version_other_than_zero_raises_corrupt_record() -> None:
    key, value = encode_share_state_record(SHARE_STATE_RECORDS[1])
    assert value is not None
    with pytest.raises(CorruptRecord, match="version 1"):
        decode_share_state_record(key, i16(1) + value[2:])
    key, value = encode_group_record(GROUP_RECORDS[0])
    assert value is not None
    with pytest.raises(CorruptRecord, match="version -1"):
        decode_group_record(key, i16(-1) + value[2:])


def test_classic_group_record_types_raise_unknown_record_type() -> None:
    key = i16(3) + i16(1) + b"g"  # a classic GroupMetadata key
    with pytest.raises(UnknownRecordType) as info:
        decode_group_record(key, b"\x00\x03whatever")
    assert info.value.record_type == 3
    assert isinstance(info.value, CorruptRecord)
    for record_type in (0, 1, 2, 9, 16, 17):
        with pytest.raises(UnknownRecordType):
            decode_group_record(i16(record_type) + i16(1) + b"g", None)


def test_share_state_keys_of_other_types_raise_unknown_record_type() -> None:
    with pytest.raises(UnknownRecordType):
        decode_share_state_record(i16(2) + i16(1) + b"g" + TOPIC_A.bytes + i32(0), None)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (i16(-1) + i16(1) + b"g", None, "bad record type"),
        (i16(11) + i16(-1), None, "bad string length"),
        (i16(11) + i16(2) + b"\xff\xfe", None, "not UTF-8"),
        (i16(11) + i16(1) + b"g" + b"!", None, "trailing"),
        (i16(11) + i16(1) + b"g", i16(0) + i32(1) + i64(2) + b"\x00" + b"!", "trailing"),
        (i16(12) + i16(1) + b"g", b"", "truncated"),
        # ClientId is not nullable
        (i16(10) + i16(1) + b"g" + i16(1) + b"m", i16(0) + b"\x00\x00\x01\x01\x00", "null in a non-nullable string"),
        # null array
        (i16(13) + i16(1) + b"g" + i16(1) + b"m", i16(0) + b"\x00\x00", "null in a non-nullable array"),
        # array count far beyond the remaining bytes
        (i16(13) + i16(1) + b"g" + i16(1) + b"m", i16(0) + b"\xff\xff\xff\xff\x0f\x00", "does not fit"),
        # a varint longer than five bytes
        (i16(13) + i16(1) + b"g" + i16(1) + b"m", i16(0) + b"\x80\x80\x80\x80\x80\x01", "varint"),
    ],
)
def test_malformed_group_records_raise_corrupt_record(key: bytes, value: bytes | None, message: str) -> None:
    with pytest.raises(CorruptRecord, match=message):
        decode_group_record(key, value)


def test_delivery_complete_count_tag_of_the_wrong_size_raises_corrupt_record() -> None:
    key = encode_share_state_key(SHARE_UPDATE, KEY)
    value = i16(0) + i32(1) + i32(2) + i64(3) + bytes([1]) + bytes([1, 0, 2]) + i16(5)
    with pytest.raises(CorruptRecord, match="size 2"):
        decode_share_state_record(key, value)


def test_a_tag_size_beyond_the_value_raises_corrupt_record() -> None:
    key = encode_share_state_key(SHARE_UPDATE, KEY)
    value = i16(0) + i32(1) + i32(2) + i64(3) + bytes([1]) + bytes([1, 7, 100]) + b"abc"
    with pytest.raises(CorruptRecord, match="truncated"):
        decode_share_state_record(key, value)


def test_decoders_accept_bytearray_and_memoryview() -> None:
    key, value = encode_share_state_record(SHARE_STATE_RECORDS[1])
    assert value is not None
    assert decode_share_state_record(bytearray(key), memoryview(value)) == SHARE_STATE_RECORDS[1]


# ----------------------------------------------------------------------------- encoder checks


def test_encoders_reject_mismatched_types_and_out_of_range_fields() -> None:
    with pytest.raises(ValueError):
        encode_share_state_key(10, KEY)
    with pytest.raises(ValueError):
        encode_share_state_record(ShareStateRecord(SHARE_SNAPSHOT, KEY, ShareUpdateValue(1, 1, 1)))
    with pytest.raises(ValueError):
        encode_share_state_record(ShareStateRecord(SHARE_UPDATE, KEY, ShareSnapshotValue(1, 1, 1, 1, 1, 1)))
    with pytest.raises(ValueError):
        encode_share_state_value(ShareUpdateValue(2**31, 0, 0))
    with pytest.raises(ValueError):
        encode_share_state_value(ShareUpdateValue(0, 0, 0, (StateBatch(0, 0, 128, 0),)))
    with pytest.raises(ValueError):
        encode_share_state_key(SHARE_SNAPSHOT, ShareStateKey("x" * 40000, TOPIC_A, 0))
    with pytest.raises(ValueError):
        encode_group_record(GroupRecord(3, GroupKey("g"), None))
    with pytest.raises(ValueError):
        encode_group_record(GroupRecord(SHARE_GROUP_METADATA, GroupMemberKey("g", "m"), None))
    with pytest.raises(ValueError):
        encode_group_record(GroupRecord(SHARE_GROUP_METADATA, GroupKey("g"), ShareGroupTargetAssignmentMetadataValue(1)))
    with pytest.raises(ValueError):
        encode_group_record(GroupRecord(SHARE_GROUP_METADATA, GroupKey("g"), ShareGroupMetadataValue(2**31)))


def test_tombstones_encode_to_a_null_value() -> None:
    assert encode_share_state_value(None) is None
    assert encode_share_state_record(ShareStateRecord(SHARE_UPDATE, KEY, None))[1] is None
    assert encode_group_record(GroupRecord(SHARE_GROUP_METADATA, GroupKey("g"), None))[1] is None


@given(st.sampled_from([SHARE_SNAPSHOT, SHARE_UPDATE]), snapshots, updates)
def test_the_fast_value_decoder_agrees_with_the_general_reader(record_type, snapshot, update) -> None:
    from quafka.protocol import share_state_records as cr
    from quafka.protocol.coordinator_record_codec import decode_value

    value = snapshot if record_type == SHARE_SNAPSHOT else update
    encoded = cr.encode_share_state_value(value)
    fast = cr._fast_share_state_value(record_type, encoded)
    value_cls, read_fields = cr._SHARE_STATE_VALUES[record_type]
    fields, tags = decode_value(encoded, "test", read_fields, {cr._TAG_DCC: 4})
    general = value_cls(*fields, struct.unpack(">i", tags[cr._TAG_DCC])[0] if cr._TAG_DCC in tags else -1)
    if value.failed_keys is None and not any(b.due_ms for b in value.state_batches):
        assert fast == general == value
    else:  # quafka's tags take the general reader
        assert fast is None
