"""TransactionLogKey / TransactionLogValue on __transaction_state, byte for byte as Kafka's schemas
lay them out (transaction-coordinator TransactionLogKey.json v0, TransactionLogValue.json v0-1;
TransactionLog.keyToBytes / valueToBytes / read)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quafka.protocol.coordinator_record_codec import CorruptRecord, UnknownRecordType
from quafka.protocol.partition_placement import transaction_state_partition
from quafka.protocol.transaction_log_records import (
    TopicPartitionIds,
    TransactionLogRecord,
    TransactionLogValue,
    decode_transaction_log_record,
    decode_transaction_log_value,
    encode_transaction_log_key,
    encode_transaction_log_record,
    encode_transaction_log_value,
)


def _s(text: str) -> bytes:  # non-flexible string
    return struct.pack(">h", len(text)) + text.encode()


def test_key_is_record_type_zero_then_the_transactional_id():
    assert encode_transaction_log_key("tx-1") == struct.pack(">h", 0) + _s("tx-1")


def test_value_v1_in_state_ongoing_with_kafka_tags():
    value = TransactionLogValue(1000, 3, 60_000, 1, (TopicPartitionIds("b", (2, 0)), TopicPartitionIds("a", (5,))),
                                1_700_000_000_123, 1_700_000_000_000, previous_producer_id=999,
                                client_transaction_version=2)
    expected = (struct.pack(">hqhib", 1, 1000, 3, 60_000, 1)
                + bytes([3])  # two topics, sorted, each: compact string, compact int32 array, tags
                + bytes([2]) + b"a" + bytes([2]) + struct.pack(">i", 5) + bytes([0])
                + bytes([2]) + b"b" + bytes([3]) + struct.pack(">ii", 0, 2) + bytes([0])
                + struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_000)
                + bytes([2, 0, 8]) + struct.pack(">q", 999) + bytes([2, 2]) + struct.pack(">h", 2))
    assert encode_transaction_log_value(value) == expected


def test_value_in_state_empty_has_a_null_partition_array_and_no_default_tags():
    value = TransactionLogValue(7, 0, 60_000, 0, None, 10, -1)
    assert encode_transaction_log_value(value) == struct.pack(">hqhib", 1, 7, 0, 60_000, 0) + bytes([0]) \
        + struct.pack(">qq", 10, -1) + bytes([0])


def test_quafka_last_epoch_tag_is_written_and_read_back():
    value = TransactionLogValue(7, 4, 60_000, 0, None, 10, -1, last_producer_epoch=3)
    raw = encode_transaction_log_value(value)
    assert raw.endswith(bytes([1]) + bytes([0x90, 0x4E]) + bytes([2]) + struct.pack(">h", 3))  # tag 10000 varint
    assert decode_transaction_log_value(raw) == value


def test_value_v0_as_kafka_wrote_it_before_transaction_version_1():
    raw = (struct.pack(">hqhib", 0, 42, 1, 30_000, 4) + struct.pack(">i", 1) + _s("orders")
           + struct.pack(">iii", 2, 0, 1) + struct.pack(">qq", 200, 100))
    assert decode_transaction_log_value(raw) == TransactionLogValue(
        42, 1, 30_000, 4, (TopicPartitionIds("orders", (0, 1)),), 200, 100)


def test_unknown_tags_are_skipped():
    value = TransactionLogValue(7, 0, 60_000, 0, None, 10, -1)
    raw = encode_transaction_log_value(value)[:-1] + bytes([1, 3, 2]) + struct.pack(">h", 9)  # tag 3: NextProducerEpoch
    assert decode_transaction_log_value(raw) == value


def test_tombstone_and_record_round_trip():
    key, value = encode_transaction_log_record(TransactionLogRecord("t", None))
    assert value is None
    assert decode_transaction_log_record(key, None) == TransactionLogRecord("t", None)


@pytest.mark.parametrize("raw", [
    b"",
    struct.pack(">h", 2) + bytes(30),  # unknown version
    struct.pack(">hqhib", 1, 7, 0, 60_000, 0) + bytes([0]) + struct.pack(">q", 1),  # truncated
    struct.pack(">hqhib", 1, 7, 0, 60_000, 0) + bytes([0]) + struct.pack(">qq", 1, 2) + bytes([0, 9]),  # trailing
    struct.pack(">hqhib", 1, 7, 0, 60_000, 0) + bytes([0]) + struct.pack(">qq", 1, 2) + bytes([1, 0, 2, 0, 0]),
])
def test_corrupt_values_are_refused(raw):
    with pytest.raises(CorruptRecord):
        decode_transaction_log_value(raw)


def test_a_key_of_another_record_type_is_unknown():
    with pytest.raises(UnknownRecordType):
        decode_transaction_log_record(struct.pack(">h", 1) + _s("x"), None)


def test_partition_of_a_transactional_id_is_kafkas():
    # Utils.abs("my-txn".hashCode) % 50; "my-txn".hashCode() == -1061187895 in Java
    assert transaction_state_partition("my-txn", 50) == 1061187895 % 50


_values = st.builds(
    TransactionLogValue,
    st.integers(-1, 2**63 - 1), st.integers(-1, 2**15 - 1), st.integers(1, 2**31 - 1), st.integers(0, 5),
    st.one_of(st.none(), st.lists(st.builds(TopicPartitionIds, st.text(min_size=1, max_size=5),
                                            st.lists(st.integers(0, 99), unique=True).map(lambda x: tuple(sorted(x)))),
                                  unique_by=lambda e: e.topic).map(lambda x: tuple(sorted(x)))),
    st.integers(-1, 2**62), st.integers(-1, 2**62),
    previous_producer_id=st.integers(-1, 2**62), next_producer_id=st.integers(-1, 2**62),
    client_transaction_version=st.integers(0, 2), last_producer_epoch=st.integers(-1, 2**15 - 1))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20), _values)
def test_any_record_round_trips(txn_id, value):
    record = TransactionLogRecord(txn_id, value)
    assert decode_transaction_log_record(*encode_transaction_log_record(record)) == record
