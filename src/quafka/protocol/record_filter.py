"""Rewriting one v2 record batch with some of its records: what log compaction writes.

Kafka's cleaner filters a batch record by record (`MemoryRecords.filterTo`) and, when anything
changes, writes a new batch (`buildRetainedRecordsInto`) that keeps the original batch's identity:
- the base offset and, for v2 batches, the last offset (`preserveLastOffset`): a batch never
  shrinks its offset range, so the producer's sequence range (base sequence + last offset delta)
  still describes it;
- producer id, epoch, base sequence, partition leader epoch, timestamp type and compression codec
  (the retained records are compressed again with the batch's codec, in the framing Kafka's own
  codecs write: compression.py);
- the records themselves byte for byte (their offset deltas are relative to the unchanged base
  offset), except that their timestamp deltas are re-based when the base timestamp changes.

A batch whose records are all dropped may still be kept as a header with no records
(`MemoryRecords.writeEmptyHeader`): it carries a producer's last sequence and epoch, or the last
offset of a cleaned range.

The delete horizon (KIP-534): when a cleaner first rewrites a batch holding tombstones, it sets
attribute bit 6 and stores `now + delete.retention.ms` as the batch's base timestamp; the record
timestamps are kept by re-basing their deltas. A later cleaning drops the tombstones once that
time has passed (`DefaultRecordBatch.deleteHorizonMs`).

Pure: bytes in, bytes out.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c

from .compression import compress
from .record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    decompress,
    read_header,
)
from .varint import read_varlong, write_varlong

__all__ = [
    "DELETE_HORIZON_FLAG",
    "RawRecord",
    "compress",
    "delete_horizon_ms",
    "empty_batch",
    "parse_records",
    "rebuild_batch",
]

DELETE_HORIZON_FLAG = 0x40  # v2 attributes bit 6: the base timestamp is the delete horizon (KIP-534)

_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. records count
_BEFORE_CRC = struct.Struct(">qiibI")  # base offset, batch length, leader epoch, magic, crc


class RawRecord(NamedTuple):
    """One record of a batch as it lies in the (decompressed) records section."""

    offset: int
    timestamp: int
    key: bytes | None
    has_value: bool
    start: int  # position of the record's length varint in the body
    ts_start: int  # position of its timestamp delta
    ts_end: int  # position just past the timestamp delta
    end: int  # position just past the record


def delete_horizon_ms(header: BatchHeader) -> int | None:
    """The batch's delete horizon, or None if it has none."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_FLAG else None


def parse_records(batch: bytes | memoryview) -> tuple[BatchHeader, bytes, list[RawRecord]]:
    """The header, the decompressed records section and each record's position in it. Raises
    ValueError (or IndexError) on a malformed body."""
    header = read_header(batch, 0)
    size = header.batch_length + LOG_OVERHEAD
    body = decompress(header.compression, bytes(memoryview(batch)[HEADER_SIZE:size]))
    base_offset, base_timestamp = header.base_offset, header.base_timestamp
    records: list[RawRecord] = []
    pos = 0
    for _ in range(header.records_count):
        start = pos
        length, pos = read_varlong(body, pos)
        end = pos + length
        pos += 1  # record attributes
        ts_start = pos
        ts_delta, pos = read_varlong(body, pos)
        ts_end = pos
        off_delta, pos = read_varlong(body, pos)
        key_len, pos = read_varlong(body, pos)
        key = None
        if key_len >= 0:
            key = body[pos:pos + key_len]
            pos += key_len
        value_len, pos = read_varlong(body, pos)
        if end > len(body) or length < 0:
            raise ValueError("record runs past the end of its batch")
        records.append(RawRecord(base_offset + off_delta, base_timestamp + ts_delta, key, value_len >= 0,
                                 start, ts_start, ts_end, end))
        pos = end
    return header, body, records


def _assemble(header: BatchHeader, attributes: int, base_timestamp: int, max_timestamp: int, count: int,
              records_section: bytes) -> bytes:
    after_crc = _AFTER_CRC.pack(attributes, header.last_offset_delta, base_timestamp, max_timestamp,
                                header.producer_id, header.producer_epoch, header.base_sequence, count) + records_section
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, then the rest
    return _BEFORE_CRC.pack(header.base_offset, batch_length, header.partition_leader_epoch, 2,
                            crc32c.crc32c(after_crc)) + after_crc


def empty_batch(header: BatchHeader) -> bytes:
    """A header with no records and the batch's offsets, producer fields and timestamps."""
    attributes = header.attributes & ~0x07  # nothing to compress
    return _assemble(header, attributes, header.base_timestamp, header.max_timestamp, 0, b"")


def rebuild_batch(header: BatchHeader, body: bytes, kept: list[RawRecord], new_delete_horizon_ms: int | None = None
                  ) -> bytes:
    """The batch with only the `kept` records (in order, all from `body`), and the delete horizon
    set to `new_delete_horizon_ms` when given (the batch must not have one yet). An empty `kept`
    gives `empty_batch(header)`."""
    if not kept:
        return empty_batch(header)
    attributes = header.attributes
    base_timestamp = header.base_timestamp
    rebase = new_delete_horizon_ms is not None
    if rebase:
        attributes |= DELETE_HORIZON_FLAG
        base_timestamp = new_delete_horizon_ms
    out = bytearray()
    for rec in kept:
        if not rebase:
            out += body[rec.start:rec.end]
            continue
        tail = bytearray()
        write_varlong(tail, rec.timestamp - base_timestamp)
        _, after_length = read_varlong(body, rec.start)
        inner = body[after_length:after_length + 1] + bytes(tail) + body[rec.ts_end:rec.end]
        write_varlong(out, len(inner))
        out += inner
    if header.attributes & TIMESTAMP_TYPE_MASK:  # LogAppendTime: every record's time is the batch's
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(rec.timestamp for rec in kept)
    section = compress(header.compression, bytes(out))
    return _assemble(header, attributes, base_timestamp, max_timestamp, len(kept), section)
