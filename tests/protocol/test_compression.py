"""Rewriting a produced batch into a topic's codec (quafka.protocol.compression), as Kafka's
LogValidator.buildRecordsAndAssignOffsets does: records, producer fields and flags kept, the
compressed forms the ones Kafka's own codecs write."""

from __future__ import annotations

import struct

import cramjam
import crc32c
import pytest

from quafka.protocol import record_batch as rb
from quafka.protocol.compression import (
    TargetCompression, compress, needs_recompression, recompress_batch, target_compression,
)
from quafka.protocol.errors import ErrorCode
from quafka.protocol.varint import write_varlong

CODECS = ["uncompressed", "gzip", "snappy", "lz4", "zstd"]
RECORDS = [(b"k%d" % i if i % 3 else None, None if i == 4 else b"value-%d-" % i * (1 + i % 40),
            [("h", b"%d" % i), ("n", None)] if i % 2 else []) for i in range(300)]


def records_of(batch) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in rb.iter_records(batch)]


def with_codec(batch: bytes, codec: str) -> bytes:
    """`batch` as a producer would send it compressed with `codec`."""
    return bytes(recompress_batch(batch, target_compression(codec)))


@pytest.mark.parametrize("source", CODECS)
@pytest.mark.parametrize("target", CODECS)
def test_every_codec_is_rewritten_into_every_other_with_records_and_producer_fields_kept(source, target):
    original = rb.build_batch(RECORDS, base_timestamp=1_700_000_000_000, producer_id=42, producer_epoch=3,
                              base_sequence=17)
    sent = with_codec(original, source)
    out = recompress_batch(sent, target_compression(target))
    h = rb.read_header(out, 0)
    assert rb.batch_crc_ok(out, 0, h)
    assert h.compression == target_compression(target).codec
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count, h.last_offset_delta) == (
        42, 3, 17, len(RECORDS), len(RECORDS) - 1)
    assert records_of(out) == records_of(original)
    assert bytes(recompress_batch(out, target_compression("uncompressed"))) == original


def test_the_target_is_the_topic_codec_unless_producer_and_a_codec_already_right_is_kept():
    batch = rb.read_header(with_codec(rb.build_batch(RECORDS[:3]), "gzip"), 0)
    assert not needs_recompression(batch, None)  # compression.type=producer
    assert not needs_recompression(batch, target_compression("gzip", gzip_level=9))  # a level alone: in place
    assert needs_recompression(batch, target_compression("zstd"))
    assert needs_recompression(batch, target_compression("uncompressed"))
    control = rb.read_header(rb.build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
                                            attributes=rb.CONTROL_FLAG | rb.TRANSACTIONAL_FLAG), 0)
    assert not needs_recompression(control, target_compression("zstd"))  # LogValidator: never compressed
    assert target_compression("producer") is None
    assert target_compression("lz4", lz4_level=12) == TargetCompression(rb.COMPRESSION_LZ4, 12)
    with pytest.raises(ValueError):
        target_compression("brotli")


def _record(ts_delta: int, offset_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    fields = bytearray(b"\x00")  # attributes
    write_varlong(fields, ts_delta)
    write_varlong(fields, offset_delta)
    for part in (key, value):
        write_varlong(fields, -1 if part is None else len(part))
        fields += part or b""
    write_varlong(fields, 0)  # no headers
    out = bytearray()
    write_varlong(out, len(fields))
    return bytes(out + fields)


def test_flags_and_timestamps_are_kept_offsets_renumbered_and_max_timestamp_is_the_records():
    """Transactional flag and CreateTime kept; offset deltas not numbered 0..n-1 renumbered and
    maxTimestamp taken from the records, as Kafka's rebuild does (the header here claims 1000)."""
    header = rb.build_batch([(None, b"x")], base_timestamp=1000, attributes=rb.TRANSACTIONAL_FLAG, producer_id=7,
                            producer_epoch=0, base_sequence=0)
    body = b"".join(_record(ts, off, b"k%d" % i, b"v%d" % i) for i, (ts, off) in enumerate([(0, 0), (50, 5), (9, 9)]))
    batch = _reframed(header, body, 3)
    out = recompress_batch(batch, target_compression("zstd"))
    h = rb.read_header(out, 0)
    assert h.is_transactional and not h.attributes & rb.TIMESTAMP_TYPE_MASK
    assert (h.base_timestamp, h.max_timestamp, h.producer_id) == (1000, 1050, 7)
    assert records_of(out) == [(0, 1000, b"k0", b"v0", []), (1, 1050, b"k1", b"v1", []), (2, 1009, b"k2", b"v2", [])]


def test_log_append_time_batches_keep_their_header_timestamp_for_the_log_to_stamp():
    batch = bytearray(rb.build_batch(RECORDS[:2], base_timestamp=5))
    rb.set_log_append_time(batch, 0, len(batch), 99)
    h = rb.read_header(recompress_batch(batch, target_compression("gzip")), 0)
    assert h.attributes & rb.TIMESTAMP_TYPE_MASK and h.max_timestamp == 99


def test_compressed_forms_are_those_kafka_writes():
    data = b"".join(b"record %d " % i for i in range(40_000))  # > 64 KiB: several blocks
    lz4 = compress(rb.COMPRESSION_LZ4, data, 9)
    assert lz4[:4] == b"\x04\x22\x4d\x18" and lz4[4] & 0x20  # LZ4 frame, independent blocks (Lz4BlockOutputStream)
    assert lz4[5] >> 4 & 7 == 4  # 64 KiB blocks
    snappy = compress(rb.COMPRESSION_SNAPPY, data)
    assert snappy[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)  # xerial framing (SnappyOutputStream)
    first_block = struct.unpack_from(">i", snappy, 16)[0]
    assert len(bytes(cramjam.snappy.decompress_raw(snappy[20:20 + first_block]))) == 32 * 1024
    gzip = compress(rb.COMPRESSION_GZIP, data, -1)
    assert gzip[:2] == b"\x1f\x8b"
    assert len(compress(rb.COMPRESSION_ZSTD, data, 19)) < len(compress(rb.COMPRESSION_ZSTD, data, -50))
    words = [b"w%d" % (i * 7919 % 1009) for i in range(60_000)]  # the levels take effect (KIP-390)
    text = b" ".join(words)
    assert len(compress(rb.COMPRESSION_LZ4, text, 17)) < len(compress(rb.COMPRESSION_LZ4, text, 1))
    assert len(compress(rb.COMPRESSION_GZIP, text, 9)) < len(compress(rb.COMPRESSION_GZIP, text, 1))
    for codec, out in ((rb.COMPRESSION_LZ4, lz4), (rb.COMPRESSION_SNAPPY, snappy), (rb.COMPRESSION_GZIP, gzip)):
        assert rb.decompress(codec, out) == data


def _reframed(batch: bytes, body: bytes, count: int) -> bytes:
    out = bytearray(batch[:rb.HEADER_SIZE]) + body
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">i", out, 23, count - 1)
    struct.pack_into(">i", out, 57, count)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def test_malformed_records_are_refused_not_blessed_with_a_new_crc():
    good = rb.build_batch(RECORDS[:3])
    body = good[rb.HEADER_SIZE:]
    cases = {
        "fewer records than declared": _reframed(good, body, 4),
        "bytes left after the records": _reframed(good, body + b"\x00", 3),
        "a record overrunning the body": _reframed(good, body[:-2], 3),
    }
    gz = bytearray(with_codec(good, "gzip"))
    gz[rb.HEADER_SIZE + 12] ^= 0xFF  # inside the deflate stream
    struct.pack_into(">I", gz, 17, crc32c.crc32c(bytes(gz[21:])))
    cases["a body that does not decompress"] = bytes(gz)
    for what, batch in cases.items():
        with pytest.raises(rb.InvalidBatch) as info:
            recompress_batch(batch, target_compression("zstd"))
        assert info.value.error_code == ErrorCode.invalid_record, what
