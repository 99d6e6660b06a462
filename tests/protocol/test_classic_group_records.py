"""GroupMetadataKey / GroupMetadataValue codecs: golden bytes written out by hand from Kafka's
JSON schemas (GroupMetadataKey.json, GroupMetadataValue.json), and round trips of every version."""

import pytest

from quafka.protocol.classic_group_records import (
    GROUP_METADATA_VALUE_VERSION,
    CorruptRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    UnknownRecordType,
    decode_group_metadata_record,
    encode_group_metadata_key,
    encode_group_metadata_value,
    is_group_metadata_key,
)

MEMBER = MemberMetadata("m1", None, "c", "/h", 30000, 10000, b"ab", b"x")
STATIC = MemberMetadata("i-1", "i", "c", "/h", 30000, 10000, b"ab", b"")
VALUE = GroupMetadataValue("consumer", 1, "range", "m1", 1000, (MEMBER,))

KEY_BYTES = bytes.fromhex("0002" "0001") + b"g"
V3_BYTES = (
    bytes.fromhex("0003")                       # version
    + bytes.fromhex("0008") + b"consumer"       # protocolType
    + bytes.fromhex("00000001")                 # generation
    + bytes.fromhex("0005") + b"range"          # protocol
    + bytes.fromhex("0002") + b"m1"             # leader
    + bytes.fromhex("00000000000003e8")         # currentStateTimestamp 1000
    + bytes.fromhex("00000001")                 # members: 1
    + bytes.fromhex("0002") + b"m1"             # memberId
    + bytes.fromhex("ffff")                     # groupInstanceId null
    + bytes.fromhex("0001") + b"c"              # clientId
    + bytes.fromhex("0002") + b"/h"             # clientHost
    + bytes.fromhex("00007530")                 # rebalanceTimeout 30000
    + bytes.fromhex("00002710")                 # sessionTimeout 10000
    + bytes.fromhex("00000002") + b"ab"         # subscription
    + bytes.fromhex("00000001") + b"x"          # assignment
)
V4_BYTES = (
    bytes.fromhex("0004")
    + bytes([9]) + b"consumer"
    + bytes.fromhex("00000001")
    + bytes([6]) + b"range"
    + bytes([3]) + b"m1"
    + bytes.fromhex("00000000000003e8")
    + bytes([2])                                # compact array: 1 member
    + bytes([3]) + b"m1"
    + bytes([0])                                # null instance id
    + bytes([2]) + b"c"
    + bytes([3]) + b"/h"
    + bytes.fromhex("00007530")
    + bytes.fromhex("00002710")
    + bytes([3]) + b"ab"
    + bytes([2]) + b"x"
    + bytes([0])                                # member tags
    + bytes([0])                                # value tags
)
V0_BYTES = (
    bytes.fromhex("0000")
    + bytes.fromhex("0008") + b"consumer"
    + bytes.fromhex("00000001")
    + bytes.fromhex("0005") + b"range"
    + bytes.fromhex("0002") + b"m1"
    + bytes.fromhex("00000001")
    + bytes.fromhex("0002") + b"m1"
    + bytes.fromhex("0001") + b"c"
    + bytes.fromhex("0002") + b"/h"
    + bytes.fromhex("00002710")
    + bytes.fromhex("00000002") + b"ab"
    + bytes.fromhex("00000001") + b"x"
)


def test_key_golden_bytes():
    assert encode_group_metadata_key(GroupMetadataKey("g")) == KEY_BYTES
    assert is_group_metadata_key(KEY_BYTES)
    assert not is_group_metadata_key(bytes.fromhex("0001"))


def test_kafka_4_2_writes_version_3():
    assert GROUP_METADATA_VALUE_VERSION == 3
    assert encode_group_metadata_value(VALUE) == V3_BYTES


def test_version_4_golden_bytes():
    assert encode_group_metadata_value(VALUE, version=4) == V4_BYTES
    assert decode_group_metadata_record(KEY_BYTES, V4_BYTES) == (GroupMetadataKey("g"), VALUE)


def test_version_0_golden_bytes_decode_with_defaults():
    value = GroupMetadataValue("consumer", 1, "range", "m1", 1000, (MEMBER,))
    assert encode_group_metadata_value(value, version=0) == V0_BYTES
    _, decoded = decode_group_metadata_record(KEY_BYTES, V0_BYTES)
    assert decoded == GroupMetadataValue("consumer", 1, "range", "m1", -1,
                                         (MEMBER._replace(rebalance_timeout_ms=-1),))


def test_decode_version_3_golden_bytes():
    assert decode_group_metadata_record(KEY_BYTES, V3_BYTES) == (GroupMetadataKey("g"), VALUE)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_round_trip_every_version(version):
    members = (MEMBER,) if version < 3 else (MEMBER, STATIC)
    value = GroupMetadataValue("consumer", 7, "range", "m1", 1234 if version >= 2 else -1, members)
    if version == 0:
        value = value._replace(members=tuple(m._replace(rebalance_timeout_ms=-1) for m in members))
    encoded = encode_group_metadata_value(value, version=version)
    assert decode_group_metadata_record(KEY_BYTES, encoded)[1] == value


def test_empty_group_record_has_null_protocol_and_leader():
    value = GroupMetadataValue("", 0, None, None, 5, ())
    encoded = encode_group_metadata_value(value)
    assert encoded == (bytes.fromhex("0003") + bytes.fromhex("0000") + bytes.fromhex("00000000") + bytes.fromhex("ffff")
                       + bytes.fromhex("ffff") + bytes.fromhex("0000000000000005") + bytes.fromhex("00000000"))
    assert decode_group_metadata_record(KEY_BYTES, encoded)[1] == value


def test_tombstone():
    assert encode_group_metadata_value(None) is None
    assert decode_group_metadata_record(KEY_BYTES, None) == (GroupMetadataKey("g"), None)


def test_instance_id_cannot_be_written_below_version_3():
    with pytest.raises(ValueError):
        encode_group_metadata_value(VALUE._replace(members=(STATIC,)), version=2)


def test_other_record_type_is_unknown():
    with pytest.raises(UnknownRecordType):
        decode_group_metadata_record(bytes.fromhex("0001" "0001") + b"g", None)


@pytest.mark.parametrize("data", [V3_BYTES[:-1], V3_BYTES + b"\0", bytes.fromhex("0005") + V3_BYTES[2:],
                                  V4_BYTES[:-2]])
def test_corrupt_values_raise_corrupt_record(data):
    with pytest.raises(CorruptRecord):
        decode_group_metadata_record(KEY_BYTES, data)
