"""The placement rules of protocol/partition_placement.py: Java's String.hashCode, Kafka's Utils.abs,
the base64 text of a topic id, and the internal-topic partition they pick for a key."""

from __future__ import annotations

import uuid

import pytest

from quafka.protocol.partition_placement import (
    group_partition,
    java_string_hash,
    kafka_abs,
    kafka_uuid_str,
    share_coordinator_key,
    share_state_partition,
)

TOPIC_A = uuid.UUID("01234567-89ab-cdef-fedc-ba9876543210")
TOPIC_B = uuid.UUID(int=2)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Hello, World!", 1498789909),
        ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE
        ("é", 233),  # U+00E9 is one UTF-16 code unit
        # U+1F600 is the surrogate pair D83D DE00: 0xd83d*31 + 0xde00 = 55357*31 + 56832 = 1772899
        ("😀", 1772899),
        ("ab", 3105),  # 97*31 + 98
        ("my-share-group", 64861296),
    ],
)
def test_java_string_hash_matches_java_string_hash_code(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_java_string_hash_wraps_to_a_signed_int32() -> None:
    # 31**7 * 97 overflows 32 bits long before the end of the string
    h = java_string_hash("a" * 50)
    assert -(2**31) <= h < 2**31
    # independent reference: sum of c * 31**(n-1-i), reduced mod 2**32, read as signed
    ref = sum(97 * 31 ** (49 - i) for i in range(50)) % 2**32
    assert h == (ref - 2**32 if ref >= 2**31 else ref)


def test_kafka_abs_maps_integer_min_value_to_zero() -> None:
    assert kafka_abs(-(2**31)) == 0
    assert kafka_abs(-5) == 5
    assert kafka_abs(7) == 7
    assert kafka_abs(0) == 0
    assert kafka_abs(java_string_hash("polygenelubricants")) == 0


def test_kafka_uuid_str_is_unpadded_url_safe_base64() -> None:
    assert kafka_uuid_str(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert kafka_uuid_str(uuid.UUID(bytes=b"\xff" * 16)) == "_____________________w"
    # uses '-' and '_' rather than '+' and '/'
    assert kafka_uuid_str(TOPIC_A) == "ASNFZ4mrze_-3LqYdlQyEA"
    assert len(kafka_uuid_str(TOPIC_B)) == 22


def test_share_coordinator_key_is_group_colon_base64_topic_colon_partition() -> None:
    assert share_coordinator_key("share-group", uuid.UUID(int=0), 0) == "share-group:AAAAAAAAAAAAAAAAAAAAAA:0"
    assert share_coordinator_key("g", TOPIC_A, 12) == "g:ASNFZ4mrze_-3LqYdlQyEA:12"


def test_share_state_partition_hashes_the_coordinator_key() -> None:
    # "share-group:AAAAAAAAAAAAAAAAAAAAAA:0".hashCode() == -296193825 (checked against a JVM);
    # abs -> 296193825; 296193825 % 50 == 25
    assert java_string_hash("share-group:AAAAAAAAAAAAAAAAAAAAAA:0") == -296193825
    assert share_state_partition("share-group", uuid.UUID(int=0), 0, 50) == 25
    assert share_state_partition("share-group", uuid.UUID(int=0), 0, 1) == 0


def test_group_partition_hashes_the_group_id() -> None:
    assert group_partition("my-share-group", 50) == 64861296 % 50 == 46
    assert group_partition("polygenelubricants", 50) == 0  # MIN_VALUE -> abs 0
    with pytest.raises(ValueError):
        group_partition("g", 0)
