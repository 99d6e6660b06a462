"""End-transaction marker batches as Kafka writes them (MemoryRecords.withEndTransactionMarker,
EndTransactionMarker, ControlRecordType): byte layout, decoding, refusals."""

from __future__ import annotations

import struct

import crc32c
import pytest

from quafka.protocol.control_batches import (
    ControlType, InvalidControlBatch, decode_end_txn_marker, end_txn_marker_batch,
)
from quafka.protocol.record_batch import build_batch, read_header, validate_batches


def test_abort_marker_bytes_are_kafkas_layout():
    data = end_txn_marker_batch(producer_id=4242, producer_epoch=7, coordinator_epoch=3, committed=False,
                                timestamp_ms=1_700_000_000_000, base_offset=15)
    # one record: length 16, attributes 0, timestamp delta 0, offset delta 0, key (4 bytes: version 0, type 0
    # ABORT), value (6 bytes: version 0, coordinator epoch 3), no headers; varints zigzag-encoded
    record = bytes([32, 0, 0, 0, 8]) + b"\x00\x00\x00\x00" + bytes([12]) + b"\x00\x00\x00\x00\x00\x03" + bytes([0])
    after_crc = struct.pack(">hiqqqhii", 0x30, 0, 1_700_000_000_000, 1_700_000_000_000, 4242, 7, -1, 1) + record
    expected = struct.pack(">qiibI", 15, 49 + len(record), -1, 2, crc32c.crc32c(after_crc)) + after_crc
    assert data == expected and len(data) == 78  # Kafka: 61-byte header + CURRENT_END_TXN_SCHEMA_RECORD_SIZE 17
    h = read_header(data)
    assert h.is_control and h.is_transactional and h.compression == 0 and h.base_sequence == -1
    validate_batches(data, 1 << 20)  # a valid batch (CRC, count)


def test_commit_marker_decodes():
    data = end_txn_marker_batch(9, 1, 12, True, 5, base_offset=100)
    marker = decode_end_txn_marker(data)
    assert marker == (9, 1, ControlType.COMMIT, 12, 100) and marker.committed


def test_higher_versions_are_read_by_their_version_0_prefix():
    # ControlRecordType.parse / EndTransactionMarker.deserializeValue read a newer version's prefix
    key = struct.pack(">hh", 1, 0) + b"extra"
    value = struct.pack(">hi", 1, 44) + b"more"
    data = build_batch([(key, value)], producer_id=3, producer_epoch=2, attributes=0x30)
    assert decode_end_txn_marker(data) == (3, 2, ControlType.ABORT, 44, 0)


def test_other_control_types_and_bad_records():
    leader_change = build_batch([(struct.pack(">hh", 0, 2), b"\x00\x00")], attributes=0x20)
    assert decode_end_txn_marker(leader_change) is None  # LEADER_CHANGE: not a transaction marker
    with pytest.raises(InvalidControlBatch):
        decode_end_txn_marker(build_batch([(None, b"x")]))  # not a control batch
    with pytest.raises(InvalidControlBatch):
        decode_end_txn_marker(build_batch([(b"\x00", b"x")], attributes=0x30))  # key too short
    with pytest.raises(InvalidControlBatch):
        decode_end_txn_marker(build_batch([(struct.pack(">hh", 0, 1), b"\x00\x00")], attributes=0x30))  # value
