"""Rewriting a batch with some of its records (protocol/record_filter.py), as Kafka's
MemoryRecords.filterTo / buildRetainedRecordsInto do for the log cleaner."""

from __future__ import annotations

import struct

import crc32c
import pytest

from quafka.protocol.record_batch import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    batch_crc_ok,
    iter_records,
    read_header,
)
from quafka.protocol.record_filter import (
    DELETE_HORIZON_FLAG,
    compress,
    delete_horizon_ms,
    empty_batch,
    parse_records,
    rebuild_batch,
)
from quafka.protocol.varint import write_varlong

BASE_TS = 1_700_000_000_000


def batch_with(codec: int, records, base_offset=100, producer_id=42, base_sequence=7) -> bytes:
    """A v2 batch of (key, value) `records`, record i at offset base+i and time BASE_TS+i,
    its records section compressed with `codec`."""
    section = bytearray()
    for i, (key, value) in enumerate(records):
        inner = bytearray(b"\x00")  # attributes
        write_varlong(inner, i)  # timestamp delta
        write_varlong(inner, i)  # offset delta
        for part in (key, value):
            write_varlong(inner, -1 if part is None else len(part))
            inner += part or b""
        write_varlong(inner, 0)  # no headers
        write_varlong(section, len(inner))
        section += inner
    after_crc = struct.pack(">hiqqqhii", codec, len(records) - 1, BASE_TS, BASE_TS + len(records) - 1,
                            producer_id, 3, base_sequence, len(records)) + compress(codec, bytes(section))
    return struct.pack(">qiibI", base_offset, 9 + len(after_crc), -1, 2, crc32c.crc32c(after_crc)) + after_crc


RECORDS = [(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"c", None), (b"d", b"5")]


@pytest.mark.parametrize("codec", [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4,
                                   COMPRESSION_ZSTD])
def test_a_rebuilt_batch_keeps_its_offsets_producer_fields_codec_and_record_timestamps(codec):
    original = batch_with(codec, RECORDS)
    header, body, records = parse_records(original)
    kept = [records[1], records[2], records[3]]
    out = rebuild_batch(header, body, kept)
    new = read_header(out)
    assert batch_crc_ok(out, 0, new)
    assert (new.base_offset, new.last_offset, new.producer_id, new.producer_epoch, new.base_sequence) == (
        100, 104, 42, 3, 7)  # the last offset is preserved, so the sequence range still describes the batch
    assert new.compression == codec and new.records_count == 3
    assert [(r.offset, r.timestamp, r.key, r.value) for r in iter_records(out)] == [
        (101, BASE_TS + 1, b"b", b"2"), (102, BASE_TS + 2, b"a", b"3"), (103, BASE_TS + 3, b"c", None)]
    assert new.max_timestamp == BASE_TS + 3


def test_setting_the_delete_horizon_rebases_timestamps_without_changing_them():
    original = batch_with(COMPRESSION_NONE, RECORDS)
    header, body, records = parse_records(original)
    horizon = BASE_TS + 86_400_000
    out = rebuild_batch(header, body, records, horizon)
    new = read_header(out)
    assert new.attributes & DELETE_HORIZON_FLAG and delete_horizon_ms(new) == horizon
    assert delete_horizon_ms(header) is None
    assert [r.timestamp for r in iter_records(out)] == [BASE_TS + i for i in range(5)]
    assert [r.value for r in iter_records(out)] == [b"1", b"2", b"3", None, b"5"]
    assert batch_crc_ok(out, 0, new)


def test_an_empty_batch_keeps_offsets_and_sequence_with_no_records():
    header = read_header(batch_with(COMPRESSION_ZSTD, RECORDS))
    out = empty_batch(header)
    new = read_header(out)
    assert batch_crc_ok(out, 0, new) and new.records_count == 0 and list(iter_records(out)) == []
    assert (new.base_offset, new.last_offset, new.last_sequence, new.compression) == (100, 104, 11, 0)
