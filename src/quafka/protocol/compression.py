"""Topic compression: the broker-side codec of a topic, and rewriting a produced batch into it.

A topic's `compression.type` is one of Kafka's broker compression types
(`org.apache.kafka.server.record.BrokerCompressionType`): `producer` (the default: a batch is
stored with whatever codec the producer chose), `uncompressed`, `gzip`, `snappy`, `lz4` or `zstd`.
For gzip, lz4 and zstd the level comes from `compression.gzip.level`, `compression.lz4.level` and
`compression.zstd.level` (KIP-390; `LogConfig.getCompression` builds the same `Compression`).

What happens on append follows `LogValidator.validateMessagesAndAssignOffsets`: the target codec
is the topic's, or the batch's own under `producer` (`BrokerCompressionType.targetCompression`).
When the two codecs are the same the batch is kept as it came (Kafka's in-place assignment; a
different level alone never recompresses); otherwise its records are decompressed, validated,
and written into a new batch with the target codec (`LogValidator.buildRecordsAndAssignOffsets`),
which keeps the producer id, epoch, base sequence, the transactional flag, the timestamp type and
every record's key, value, headers and timestamp. A control batch sent uncompressed stays
uncompressed ("do not compress control records unless they are written compressed").

Departures from Kafka, none visible to a consumer: the new batch keeps the producer's base
timestamp and per-record timestamp deltas (Kafka's builder rebases on the first record's
timestamp; the absolute timestamps are the same either way), and the records' bytes are reused
as they are when their offset deltas already run 0..n-1 (Kafka re-encodes each record; the bytes
come out the same). A body that cannot be decompressed is refused with INVALID_RECORD (Kafka
answers UNKNOWN_SERVER_ERROR from a KafkaException there), so the producer fails at once instead of
retrying a batch that can never be stored.

Compressed forms are those Kafka's own codecs write, so every Kafka client reads them: gzip
(RFC 1952), snappy in snappy-java's xerial framing with 32 KiB blocks (`SnappyOutputStream`),
LZ4 frames with independent 64 KiB blocks (`Lz4BlockOutputStream`; Kafka's reader refuses
dependent blocks), zstd frames. Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c
import cramjam

from .errors import ErrorCode
from .record_batch import (
    COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_MASK, COMPRESSION_NONE, COMPRESSION_SNAPPY, COMPRESSION_ZSTD,
    HEADER_SIZE, LOG_OVERHEAD, TIMESTAMP_TYPE_MASK, BatchHeader, InvalidBatch, decompress, read_header,
)
from .varint import read_varlong, write_varlong

__all__ = ["BROKER_COMPRESSION_TYPES", "CODEC_BY_NAME", "GZIP_LEVELS", "LZ4_LEVELS", "ZSTD_LEVELS",
           "TargetCompression", "compress", "needs_recompression", "recompress_batch", "target_compression"]

# Kafka's BrokerCompressionType names, in its order.
BROKER_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
CODEC_BY_NAME = {"uncompressed": COMPRESSION_NONE, "gzip": COMPRESSION_GZIP, "snappy": COMPRESSION_SNAPPY,
                 "lz4": COMPRESSION_LZ4, "zstd": COMPRESSION_ZSTD}

# (min, max, default) per codec, as Kafka's CompressionType.{GZIP,LZ4,ZSTD} define them. Gzip's
# default -1 is java.util.zip.Deflater.DEFAULT_COMPRESSION, which deflate reads as level 6.
GZIP_LEVELS = (1, 9, -1)
LZ4_LEVELS = (1, 17, 9)
ZSTD_LEVELS = (-131072, 22, 3)
_GZIP_DEFAULT_LEVEL = 6

_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)  # magic, version, minimum compatible version
_XERIAL_BLOCK_BYTES = 32 * 1024  # snappy-java SnappyOutputStream's default block size
_INT32 = struct.Struct(">i")
_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
_BEFORE_CRC = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc


class TargetCompression(NamedTuple):
    """The codec a topic stores its batches with (attribute id) and the level to compress at."""

    codec: int
    level: int

    @property
    def name(self) -> str:
        return next(name for name, codec in CODEC_BY_NAME.items() if codec == self.codec)


def target_compression(compression_type: str, gzip_level: int = GZIP_LEVELS[2], lz4_level: int = LZ4_LEVELS[2],
                       zstd_level: int = ZSTD_LEVELS[2]) -> TargetCompression | None:
    """The topic's own codec for a `compression.type` value, or None for `producer` (each batch keeps
    the producer's codec). Mirrors `LogConfig.getCompression`."""
    if compression_type == "producer":
        return None
    codec = CODEC_BY_NAME.get(compression_type)
    if codec is None:
        raise ValueError(f"unknown compression.type {compression_type!r}: one of {', '.join(BROKER_COMPRESSION_TYPES)}")
    level = {COMPRESSION_GZIP: gzip_level, COMPRESSION_LZ4: lz4_level, COMPRESSION_ZSTD: zstd_level}.get(codec, 0)
    return TargetCompression(codec, level)


def compress(codec: int, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
    """Compress a batch's records section with `codec` (attribute id) at `level` (None: the
    codec's Kafka default)."""
    if codec == COMPRESSION_NONE:
        return bytes(data)
    if codec == COMPRESSION_GZIP:
        if level is None or level == -1:
            level = _GZIP_DEFAULT_LEVEL
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == COMPRESSION_SNAPPY:
        out = bytearray(_XERIAL_HEADER)
        view = memoryview(data)
        for start in range(0, len(view), _XERIAL_BLOCK_BYTES):
            block = bytes(cramjam.snappy.compress_raw(view[start:start + _XERIAL_BLOCK_BYTES]))
            out += _INT32.pack(len(block))
            out += block
        return bytes(out)
    if codec == COMPRESSION_LZ4:
        compressor = cramjam.lz4.Compressor(level=LZ4_LEVELS[2] if level is None else level,
                                            content_checksum=False, block_linked=False)
        compressor.compress(bytes(data))
        return bytes(compressor.finish())
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVELS[2] if level is None else level))
    raise ValueError(f"unknown compression codec id {codec}")


def needs_recompression(header: BatchHeader, target: TargetCompression | None) -> bool:
    """Whether a produced batch must be rewritten to be stored under `target` (None: producer)."""
    if target is None or header.compression == target.codec:
        return False
    # LogValidator: an uncompressed control batch is never compressed
    return not (header.is_control and header.compression == COMPRESSION_NONE)


def recompress_batch(batch: bytes | bytearray | memoryview, target: TargetCompression) -> bytearray:
    """The batch at the start of `batch` rewritten with the target codec (a new CRC; the base
    offset and leader epoch as they were, for the log to stamp). Its records are checked on the
    way: exactly `recordsCount` well-formed records filling the decompressed section. Raises
    InvalidBatch(INVALID_RECORD) when they are not or the section cannot be decompressed."""
    header = read_header(batch, 0)
    size = header.batch_length + LOG_OVERHEAD
    raw = memoryview(batch)[HEADER_SIZE:size]
    try:
        body = decompress(header.compression, raw) if header.compression else bytes(raw)
    except Exception as exc:  # each codec raises its own error type
        raise InvalidBatch(ErrorCode.invalid_record,
                           f"record batch could not be decompressed ({exc}): it cannot be stored as "
                           f"{target.name}") from exc
    body, max_timestamp = _check_records(body, header)
    if header.attributes & TIMESTAMP_TYPE_MASK:
        max_timestamp = header.max_timestamp  # LogAppendTime: the log stamps it
    records = compress(target.codec, body, target.level)
    attributes = (header.attributes & ~COMPRESSION_MASK) | target.codec
    after_crc = _AFTER_CRC.pack(attributes, header.records_count - 1, header.base_timestamp, max_timestamp,
                                header.producer_id, header.producer_epoch, header.base_sequence,
                                header.records_count)
    crc = crc32c.crc32c(records, crc32c.crc32c(after_crc))
    out = bytearray(_BEFORE_CRC.pack(header.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(records),
                                     header.partition_leader_epoch, 2, crc))
    out += after_crc
    out += records
    return out


def _check_records(body: bytes, header: BatchHeader) -> tuple[bytes, int]:
    """Walk every record of a decompressed records section (as DefaultRecord.readFrom reads them):
    the section, with offset deltas renumbered 0..n-1 if a producer numbered them otherwise (as
    Kafka rewrites such batches), and the largest record timestamp."""
    read = read_varlong
    count = header.records_count
    base_timestamp = header.base_timestamp
    max_delta = None
    renumber = False
    total = len(body)
    pos = 0
    try:
        # one- and two-byte varints (nearly every field of a record) are decoded inline; longer
        # ones go through read_varlong, as in record_batch.iter_records
        for index in range(count):
            b = body[pos]
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif body[pos + 1] < 0x80:
                raw = (b & 0x7F) | (body[pos + 1] << 7)
                length, pos = (raw >> 1) ^ -(raw & 1), pos + 2
            else:
                length, pos = read(body, pos)
            end = pos + length
            if length <= 0 or end > total:
                raise ValueError(f"record {index} claims {length} bytes, {total - pos} remain")
            p = pos + 1  # after the record attributes
            b = body[p]
            if b < 0x80:
                ts_delta, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                ts_delta, p = read(body, p)
            b = body[p]
            if b < 0x80:
                offset_delta, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                offset_delta, p = read(body, p)
            if offset_delta != index:
                renumber = True
            if max_delta is None or ts_delta > max_delta:
                max_delta = ts_delta
            b = body[p]
            if b < 0x80:
                key_length, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                key_length, p = read(body, p)
            if key_length > 0:
                p += key_length
            b = body[p]
            if b < 0x80:
                value_length, p = (b >> 1) ^ -(b & 1), p + 1
            elif body[p + 1] < 0x80:
                raw = (b & 0x7F) | (body[p + 1] << 7)
                value_length, p = (raw >> 1) ^ -(raw & 1), p + 2
            else:
                value_length, p = read(body, p)
            if value_length > 0:
                p += value_length
            b = body[p]
            if b == 0:  # no headers
                p += 1
            else:
                headers, p = read(body, p)
                if headers < 0:
                    raise ValueError(f"record {index} has {headers} headers")
                for _ in range(headers):
                    name_length, p = read(body, p)
                    if name_length < 0:
                        raise ValueError(f"record {index} has a header with a null key")
                    p += name_length
                    header_value_length, p = read(body, p)
                    p += max(header_value_length, 0)
            if p != end:
                raise ValueError(f"record {index} is {length} bytes but its fields take {p - pos}")
            pos = end
    except (ValueError, IndexError) as exc:
        raise InvalidBatch(ErrorCode.invalid_record, f"record batch has a malformed record: {exc}") from exc
    if pos != total:
        raise InvalidBatch(ErrorCode.invalid_record,
                           f"record batch declares {count} records but {total - pos} bytes remain after them")
    if renumber:
        body = _renumber(body, count)
    return body, base_timestamp + (max_delta or 0)


def _renumber(body: bytes, count: int) -> bytes:
    """The records with offset deltas 0..n-1 (each record re-framed; its other fields unchanged)."""
    read = read_varlong
    out = bytearray()
    pos = 0
    for index in range(count):
        length, pos = read(body, pos)
        end = pos + length
        _ts, p = read(body, pos + 1)
        ts_bytes = body[pos:p]  # attributes and timestamp delta
        _offset, p = read(body, p)
        record = bytearray(ts_bytes)
        write_varlong(record, index)
        record += body[p:end]
        write_varlong(out, len(record))
        out += record
        pos = end
    return bytes(out)
