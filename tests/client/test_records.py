"""decode_batches on batches built in the test: CRCs, control batches, partial batches, offsets."""

from __future__ import annotations

import pytest

from quafka.client import CorruptRecordException, Record
from quafka.client.records import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, decode_batches
from quafka.protocol.errors import ErrorCode
from quafka.protocol.record_batch import CONTROL_FLAG, build_batch, set_log_append_time


def _batch(base_offset: int, count: int, **kwargs) -> bytes:
    return build_batch([(b"k%d" % i, b"v%d" % i, [("h", b"x")]) for i in range(count)],
                       base_offset=base_offset, base_timestamp=1000, partition_leader_epoch=3, **kwargs)


def test_records_of_every_complete_batch_come_with_their_batch_fields():
    data = _batch(0, 2) + _batch(2, 1)
    records, next_offset = decode_batches("t", 1, data, check_crcs=True)
    assert records[0] == Record("t", 1, 0, 1000, TIMESTAMP_CREATE_TIME, b"k0", b"v0", [("h", b"x")], 3)
    assert [r.offset for r in records] == [0, 1, 2] and next_offset == 3


def test_a_partial_batch_at_the_end_is_left_for_the_next_fetch():
    records, next_offset = decode_batches("t", 0, _batch(0, 2) + _batch(2, 2)[:40], check_crcs=True)
    assert [r.offset for r in records] == [0, 1] and next_offset == 2
    assert decode_batches("t", 0, _batch(0, 2)[:70], check_crcs=True) == ([], None)


def test_control_batches_are_skipped_but_advance_the_offset():
    control = build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], base_offset=2,
                          attributes=CONTROL_FLAG | 0x10, producer_id=7, producer_epoch=0)
    records, next_offset = decode_batches("t", 0, _batch(0, 2) + control, check_crcs=True)
    assert [r.offset for r in records] == [0, 1] and next_offset == 3


def test_records_below_min_offset_are_dropped():
    records, _ = decode_batches("t", 0, _batch(0, 5), check_crcs=True, min_offset=3)
    assert [r.offset for r in records] == [3, 4]


def test_log_append_time_batches_report_the_batch_max_timestamp():
    data = bytearray(_batch(0, 2))
    set_log_append_time(data, 0, len(data), 5555)
    records, _ = decode_batches("t", 0, bytes(data), check_crcs=True)
    assert {(r.timestamp, r.timestamp_type) for r in records} == {(5555, TIMESTAMP_LOG_APPEND_TIME)}


def test_a_bad_crc_raises_corrupt_record_exception_naming_the_batch_unless_checks_are_off():
    data = bytearray(_batch(10, 2))
    data[-1] ^= 0xFF  # inside the last record's header value
    with pytest.raises(CorruptRecordException, match=r"t-0 batch at offsets 10..11 failed its CRC32C") as info:
        decode_batches("t", 0, bytes(data), check_crcs=True)
    assert info.value.code == ErrorCode.corrupt_message and not info.value.retriable
    records, _ = decode_batches("t", 0, bytes(data), check_crcs=False)
    assert [r.offset for r in records] == [10, 11]


def test_a_batch_that_does_not_decode_raises_corrupt_record_exception():
    data = bytearray(_batch(0, 1, attributes=1))  # claims gzip, holds plain records
    with pytest.raises(CorruptRecordException, match=r"does not decode \(gzip\)"):
        decode_batches("t", 0, bytes(data), check_crcs=False)
