"""Codecs of the consumer-group records of __consumer_offsets (types 3-8): golden bytes built from
the JSON schemas of Kafka 4.2, round trips, tombstones and refusals."""

from uuid import UUID

import pytest

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
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRecord,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupKey,
    GroupMemberKey,
    PartitionTopicMetadata,
    TopicPartitions,
    decode_consumer_group_record,
    encode_consumer_group_record,
)
from quafka.protocol.coordinator_record_codec import CorruptRecord, UnknownRecordType

TID = UUID(bytes=bytes(range(16)))
GK = GroupKey("g")
MK = GroupMemberKey("g", "m1")


def roundtrip(record):
    key, value = encode_consumer_group_record(record)
    assert decode_consumer_group_record(key, value) == record
    return key, value


def test_record_type_ids_match_kafka_4_2():
    assert (CONSUMER_GROUP_METADATA, CONSUMER_GROUP_PARTITION_METADATA, CONSUMER_GROUP_MEMBER_METADATA,
            CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
            CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT) == (3, 4, 5, 6, 7, 8)


def test_group_metadata_golden_without_and_with_hash():
    key, value = roundtrip(ConsumerGroupRecord(3, GK, ConsumerGroupMetadataValue(5)))
    assert key == bytes.fromhex("0003" "0001") + b"g"
    assert value == bytes.fromhex("0000" "00000005" "00")
    _, value = roundtrip(ConsumerGroupRecord(3, GK, ConsumerGroupMetadataValue(5, -2)))
    assert value == bytes.fromhex("0000" "00000005" "01" "00" "08" "fffffffffffffffe")


def test_member_metadata_golden():
    v = ConsumerGroupMemberMetadataValue("i1", None, "cid", "/h", ("a", "b"), None, 30000, "uniform")
    key, value = roundtrip(ConsumerGroupRecord(5, MK, v))
    assert key == bytes.fromhex("0005" "0001") + b"g" + bytes.fromhex("0002") + b"m1"
    expected = (bytes.fromhex("0000") + b"\x03i1" + b"\x00" + b"\x04cid" + b"\x03/h" + b"\x03" + b"\x02a" + b"\x02b"
                + b"\x00" + (30000).to_bytes(4, "big") + b"\x08uniform" + b"\x00")
    assert value == expected


def test_member_metadata_keeps_classic_tag_raw():
    v = ConsumerGroupMemberMetadataValue(None, "r", "c", "h", (), "^t.*", -1, None, b"\x00\x00\x75\x30\x01\x00")
    _, value = roundtrip(ConsumerGroupRecord(5, MK, v))
    assert value.endswith(b"\x01\x00\x06\x00\x00\x75\x30\x01\x00")


def test_target_assignment_golden():
    _, value = roundtrip(ConsumerGroupRecord(6, GK, ConsumerGroupTargetAssignmentMetadataValue(7)))
    assert value == bytes.fromhex("0000" "00000007" "00")
    _, value = roundtrip(ConsumerGroupRecord(7, MK, ConsumerGroupTargetAssignmentMemberValue(
        (TopicPartitions(TID, (0, 2)),))))
    assert value == bytes.fromhex("0000" "02") + TID.bytes + bytes.fromhex("03" "00000000" "00000002" "00" "00")


def test_current_member_assignment_golden():
    v = ConsumerGroupCurrentMemberAssignmentValue(4, 3, 1, (TopicPartitions(TID, (1,)),), (TopicPartitions(TID, (5,)),))
    _, value = roundtrip(ConsumerGroupRecord(8, MK, v))
    assert value == (bytes.fromhex("0000" "00000004" "00000003" "01" "02") + TID.bytes
                     + bytes.fromhex("02" "00000001" "00" "02") + TID.bytes + bytes.fromhex("02" "00000005" "00" "00"))


def test_partition_metadata_deprecated_record_decodes():
    v = ConsumerGroupPartitionMetadataValue((PartitionTopicMetadata(TID, "t", 3, ((0, ("r1",)),)),))
    _, value = roundtrip(ConsumerGroupRecord(4, GK, v))
    assert value == (bytes.fromhex("0000" "02") + TID.bytes + b"\x02t" + bytes.fromhex("00000003" "02" "00000000" "02")
                     + b"\x03r1" + bytes.fromhex("00" "00" "00"))


def test_tombstones_and_refusals():
    key, value = roundtrip(ConsumerGroupRecord(8, MK, None))
    assert value is None
    with pytest.raises(UnknownRecordType):
        decode_consumer_group_record(bytes.fromhex("000b0001") + b"g", None)
    with pytest.raises(ValueError):
        encode_consumer_group_record(ConsumerGroupRecord(8, GK, None))
    with pytest.raises(ValueError):
        encode_consumer_group_record(ConsumerGroupRecord(6, GK, ConsumerGroupMetadataValue(1)))
    with pytest.raises(CorruptRecord):
        decode_consumer_group_record(bytes.fromhex("00060001") + b"g", bytes.fromhex("0000000000"))
    with pytest.raises(CorruptRecord):
        decode_consumer_group_record(bytes.fromhex("00060001") + b"g", bytes.fromhex("0001000000070000"))
    with pytest.raises(CorruptRecord):  # MetadataHash of the wrong size
        decode_consumer_group_record(bytes.fromhex("00030001") + b"g",
                                     bytes.fromhex("0000" "00000005" "01" "00" "02" "0000"))
