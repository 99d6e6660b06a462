"""Record batches (magic v2) as opaque bytes.

The broker never looks inside a batch on the produce or fetch path: it validates the 61-byte
header and the CRC32C, rewrites the base offset (bytes 0-7, outside the CRC) and stores the bytes as
they came, compressed or not. Record-level parsing (`iter_records`) exists only for the rare paths
that need it, such as ListOffsets by timestamp.

Layout of the header (all big-endian)::

    0  baseOffset int64          21 attributes int16         45 producerEpoch int16
    8  batchLength int32         23 lastOffsetDelta int32    47 baseSequence int32
    12 partitionLeaderEpoch      27 baseTimestamp int64      51 recordsCount int32
    16 magic int8                35 maxTimestamp int64       57 (records start at 61)
    17 crc uint32                37 producerId int64

The CRC covers bytes 21..end (attributes onward), so base offset and leader epoch can be rewritten
without recomputing it.
"""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

import crc32c

from .errors import ErrorCode
from .varint import read_varlong, write_varlong

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = BATCH_HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength precede the counted length
# Smallest legal batchLength: header bytes after the length field, no records.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_MAX_TS_ATTR = struct.Struct(">h")
_CRC = struct.Struct(">I")


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_header(buf, pos: int = 0) -> BatchHeader:
    """Unpack the header at `pos` (the caller guarantees HEADER_SIZE bytes)."""
    return BatchHeader._make(BATCH_HEADER.unpack_from(buf, pos))


class InvalidBatch(Exception):
    """A produced batch that must be refused; `error_code` is the Kafka error to return."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


class ValidatedBatch(NamedTuple):
    """One batch of a produce request: where it is in the request and its header."""

    position: int
    header: BatchHeader


def validate_batches(records: bytes | bytearray | memoryview, max_batch_bytes: int) -> list[ValidatedBatch]:
    """Split a produce request's `records` into v2 batches and validate each one.

    Checks framing, magic, size against `max_batch_bytes` (message.max.bytes), the CRC32C, and
    that the record count matches the offset delta (as Kafka requires of produced batches).
    Raises InvalidBatch with the Kafka error code on the first bad batch.
    """
    total = len(records)
    if total == 0:
        raise InvalidBatch(ErrorCode.invalid_record, "produce request has no record batches")
    view = memoryview(records)
    out: list[ValidatedBatch] = []
    pos = 0
    while pos < total:
        # The magic byte sits at offset 16 in every message format (v0/v1 messages too), so a
        # legacy message is refused as such even when it is shorter than a v2 header.
        if total - pos > 16 and view[pos + 16] != 2:
            raise InvalidBatch(
                ErrorCode.invalid_record,
                f"record batch magic {view[pos + 16]} is not supported: only magic 2 (Kafka 0.11+) is accepted",
            )
        if total - pos < HEADER_SIZE:
            raise InvalidBatch(
                ErrorCode.corrupt_message,
                f"record batch at byte {pos} is truncated: {total - pos} bytes, a header needs {HEADER_SIZE}",
            )
        header = read_header(view, pos)
        if header.magic != 2:
            raise InvalidBatch(
                ErrorCode.invalid_record,
                f"record batch magic {header.magic} is not supported: only magic 2 (Kafka 0.11+) is accepted",
            )
        size = header.batch_length + LOG_OVERHEAD
        if header.batch_length < MIN_BATCH_LENGTH:
            raise InvalidBatch(
                ErrorCode.corrupt_message,
                f"record batch length {header.batch_length} is below the minimum {MIN_BATCH_LENGTH}",
            )
        if size > max_batch_bytes:
            raise InvalidBatch(
                ErrorCode.message_too_large,
                f"record batch of {size} bytes exceeds the maximum of {max_batch_bytes} bytes (message.max.bytes)",
            )
        if pos + size > total:
            raise InvalidBatch(
                ErrorCode.corrupt_message,
                f"record batch at byte {pos} claims {size} bytes but only {total - pos} remain",
            )
        if crc32c.crc32c(view[pos + 21 : pos + size]) != header.crc:
            raise InvalidBatch(ErrorCode.corrupt_message, f"record batch at byte {pos} failed its CRC32C check")
        if header.records_count <= 0 or header.last_offset_delta != header.records_count - 1:
            raise InvalidBatch(
                ErrorCode.invalid_record,
                f"record batch has {header.records_count} records but lastOffsetDelta {header.last_offset_delta}",
            )
        if header.compression > COMPRESSION_ZSTD:
            raise InvalidBatch(ErrorCode.invalid_record, f"unknown compression codec id {header.compression}")
        out.append(ValidatedBatch(pos, header))
        pos += size
    return out


def stamp_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    """Set the base offset of the batch at `pos` (outside the CRC)."""
    _INT64.pack_into(buf, pos, base_offset)


def stamp_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    _INT32.pack_into(buf, pos + 12, epoch)


def set_log_append_time(buf: bytearray, pos: int, size: int, timestamp_ms: int) -> None:
    """Mark the batch at `pos` as LogAppendTime with `timestamp_ms` and recompute its CRC."""
    attributes = _MAX_TS_ATTR.unpack_from(buf, pos + 21)[0] | TIMESTAMP_TYPE_MASK
    _MAX_TS_ATTR.pack_into(buf, pos + 21, attributes)
    _INT64.pack_into(buf, pos + 35, timestamp_ms)
    _CRC.pack_into(buf, pos + 17, crc32c.crc32c(memoryview(buf)[pos + 21 : pos + size]))


def iter_headers(buf, start: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each complete batch in buf[start:end]; stops at a partial one."""
    end = len(buf) if end is None else end
    pos = start
    while end - pos >= HEADER_SIZE:
        header = read_header(buf, pos)
        size = header.batch_length + LOG_OVERHEAD
        if header.batch_length < MIN_BATCH_LENGTH or pos + size > end:
            return
        yield pos, header
        pos += size


def batch_crc_ok(buf, pos: int, header: BatchHeader) -> bool:
    size = header.batch_length + LOG_OVERHEAD
    return header.magic == 2 and crc32c.crc32c(memoryview(buf)[pos + 21 : pos + size]) == header.crc


# ----------------------------------------------------------------------------- record level

class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


_read_varint = read_varlong  # (value, new pos); the inline fast paths below fall back to it


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def decompress(codec: int, data: bytes) -> bytes:
    """Decompress a batch's records section (codec ids as in the attributes)."""
    import cramjam  # imported lazily: only record-level reads need it

    if codec == COMPRESSION_NONE:
        return bytes(data)
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if codec == COMPRESSION_SNAPPY:
        if bytes(data[:8]) == _XERIAL_MAGIC:
            out = bytearray()
            pos = 16  # magic, version, compatible version
            while pos + 4 <= len(data):
                (n,) = struct.unpack_from(">i", data, pos)
                pos += 4
                out += bytes(cramjam.snappy.decompress_raw(bytes(data[pos : pos + n])))
                pos += n
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(bytes(data)))
    if codec == COMPRESSION_LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    raise ValueError(f"unknown compression codec id {codec}")


def iter_records(batch: bytes | bytearray | memoryview) -> Iterator[Record]:
    """Decode every record of one v2 batch (decompressing if needed).

    Varints of one or two bytes (the common case for lengths and deltas) are read inline; longer
    ones go through ``_read_varint``. Raises ValueError (or IndexError) on a malformed body.
    """
    header = read_header(batch, 0)
    size = header.batch_length + LOG_OVERHEAD
    body = decompress(header.compression, bytes(memoryview(batch)[HEADER_SIZE:size]))
    base_offset, base_timestamp = header.base_offset, header.base_timestamp
    log_append = header.attributes & TIMESTAMP_TYPE_MASK
    max_timestamp = header.max_timestamp
    read_varint = _read_varint
    pos = 0
    for _ in range(header.records_count):
        b = body[pos]
        if b < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif body[pos + 1] < 0x80:
            raw = (b & 0x7F) | (body[pos + 1] << 7)
            length, pos = (raw >> 1) ^ -(raw & 1), pos + 2
        else:
            length, pos = read_varint(body, pos)
        end = pos + length
        pos += 1  # record attributes
        b = body[pos]
        if b < 0x80:
            ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif body[pos + 1] < 0x80:
            raw = (b & 0x7F) | (body[pos + 1] << 7)
            ts_delta, pos = (raw >> 1) ^ -(raw & 1), pos + 2
        else:
            ts_delta, pos = read_varint(body, pos)
        b = body[pos]
        if b < 0x80:
            off_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif body[pos + 1] < 0x80:
            raw = (b & 0x7F) | (body[pos + 1] << 7)
            off_delta, pos = (raw >> 1) ^ -(raw & 1), pos + 2
        else:
            off_delta, pos = read_varint(body, pos)
        b = body[pos]
        if b < 0x80:
            klen, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            klen, pos = read_varint(body, pos)
        if klen < 0:
            key = None
        else:
            key = body[pos : pos + klen]
            pos += klen
        b = body[pos]
        if b < 0x80:
            vlen, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif body[pos + 1] < 0x80:
            raw = (b & 0x7F) | (body[pos + 1] << 7)
            vlen, pos = (raw >> 1) ^ -(raw & 1), pos + 2
        else:
            vlen, pos = read_varint(body, pos)
        if vlen < 0:
            value = None
        else:
            value = body[pos : pos + vlen]
            pos += vlen
        b = body[pos]
        if b == 0:
            headers: tuple = ()
            pos += 1
        else:
            nheaders, pos = read_varint(body, pos)
            items = []
            for _h in range(nheaders):
                hk, pos = read_varint(body, pos)
                hkey = body[pos : pos + hk].decode("utf-8", "replace")
                pos += hk
                hv, pos = read_varint(body, pos)
                hval = None if hv < 0 else body[pos : pos + hv]
                pos += max(hv, 0)
                items.append((hkey, hval))
            headers = tuple(items)
        if pos > end or end > len(body):
            raise ValueError(f"record at offset delta {off_delta} overruns its length")
        pos = end
        yield Record(base_offset + off_delta, max_timestamp if log_append else base_timestamp + ts_delta, key, value,
                     headers)


class RecordMeta(NamedTuple):
    """What quafka's delivery controls read of a record: never its value."""

    offset: int
    timestamp: int
    key: bytes | None
    headers: dict[str, bytes | None]  # only the headers asked for


def iter_record_meta(batch: bytes | bytearray | memoryview, header_names: frozenset[str] = frozenset()) -> Iterator[RecordMeta]:
    """The offset, timestamp, key and the `header_names` headers of every record of one v2 batch,
    skipping values (a compressed batch is decompressed whole: the codecs have no random access).
    Control batches (transaction markers) yield nothing. Raises ValueError (or IndexError) on a
    malformed body."""
    header = read_header(batch, 0)
    if header.is_control:
        return
    size = header.batch_length + LOG_OVERHEAD
    raw = memoryview(batch)[HEADER_SIZE:size]
    body = decompress(header.compression, raw) if header.compression else bytes(raw)
    base_offset, base_timestamp = header.base_offset, header.base_timestamp
    log_append = header.attributes & TIMESTAMP_TYPE_MASK
    read = read_varlong
    pos = 0
    for _ in range(header.records_count):
        length, pos = read(body, pos)
        end = pos + length
        pos += 1  # record attributes
        ts_delta, pos = read(body, pos)
        off_delta, pos = read(body, pos)
        klen, pos = read(body, pos)
        key = None if klen < 0 else body[pos:pos + klen]
        pos += max(klen, 0)
        vlen, pos = read(body, pos)
        pos += max(vlen, 0)  # the value is skipped, never read
        found: dict[str, bytes | None] = {}
        if header_names:
            count, pos = read(body, pos)
            for _h in range(count):
                hk, pos = read(body, pos)
                name = body[pos:pos + hk].decode("utf-8", "replace")
                pos += hk
                hv, pos = read(body, pos)
                if name in header_names:
                    found[name] = None if hv < 0 else body[pos:pos + hv]
                pos += max(hv, 0)
        if pos > end or end > len(body):
            raise ValueError(f"record at offset delta {off_delta} overruns its length")
        pos = end
        yield RecordMeta(base_offset + off_delta, header.max_timestamp if log_append else base_timestamp + ts_delta,
                         key, found)


# ----------------------------------------------------------------------------- building (tests, tools)

_write_varint = write_varlong


def build_batch(
    records: list[tuple[bytes | None, bytes | None]] | list[tuple[bytes | None, bytes | None, list]],
    *,
    base_offset: int = 0,
    base_timestamp: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    attributes: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Build an uncompressed v2 batch of (key, value[, headers]) records with a valid CRC."""
    body = bytearray()
    for i, rec in enumerate(records):
        key, value = rec[0], rec[1]
        hdrs = rec[2] if len(rec) > 2 else []
        r = bytearray()
        r.append(0)
        _write_varint(r, 0)  # timestamp delta
        _write_varint(r, i)
        for part in (key, value):
            if part is None:
                _write_varint(r, -1)
            else:
                _write_varint(r, len(part))
                r += part
        _write_varint(r, len(hdrs))
        for hk, hv in hdrs:
            hkb = hk.encode()
            _write_varint(r, len(hkb))
            r += hkb
            if hv is None:
                _write_varint(r, -1)
            else:
                _write_varint(r, len(hv))
                r += hv
        _write_varint(body, len(r))
        body += r
    count = len(records)
    after_crc = struct.pack(
        ">hiqqqhii", attributes, count - 1, base_timestamp, base_timestamp, producer_id, producer_epoch,
        base_sequence, count,
    ) + bytes(body)
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, 2, crc) + after_crc
