"""Record batches built byte by byte in the formats Java clients write, and ways to put them in a
broker's log (tests only).

- ``build(records, codec=...)``: a magic-v2 batch of (key, value, headers, timestamp) records with
  per-record timestamp deltas, compressed as the Java producer does: gzip; snappy in xerial's
  stream framing (``b"\\x82SNAPPY\\x00"``, version 1, compatible version 1, then 4-byte big-endian
  length-prefixed raw snappy blocks); lz4 in the frame format with independent 64 KiB blocks and no
  checksums or content size (KafkaLZ4BlockOutputStream); zstd as a plain frame.
- ``control_batch(...)``: a transaction marker (attributes: control + transactional; one record,
  key = version 0 + type, value = version 0 + coordinator epoch).
- ``produce_raw(bootstrap, topic, batch)``: a raw Produce v9 carrying the batch as it is.
- ``append_to_log(broker, topic, batch)``: appends on the broker's loop thread, past Produce's
  checks — for batches a Produce would refuse (control batches, a broken CRC).
"""

from __future__ import annotations

import datetime
import gzip
import struct

import crc32c

from quafka.protocol.record_batch import CONTROL_FLAG, TRANSACTIONAL_FLAG, read_header

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
XERIAL_MAGIC = b"\x82SNAPPY\x00"
CONTROL_ABORT = 0
CONTROL_COMMIT = 1


def _varint(out: bytearray, value: int) -> None:
    raw = (value << 1) ^ (value >> 63)
    while raw & ~0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _bytes_field(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _varint(out, -1)
    else:
        _varint(out, len(data))
        out += data


def encode_records(records: list[tuple[bytes | None, bytes | None, list, int]], base_timestamp: int) -> bytes:
    """The records section of an uncompressed batch: (key, value, headers, timestamp) each."""
    body = bytearray()
    for i, (key, value, headers, timestamp) in enumerate(records):
        r = bytearray([0])  # record attributes
        _varint(r, timestamp - base_timestamp)
        _varint(r, i)
        _bytes_field(r, key)
        _bytes_field(r, value)
        _varint(r, len(headers))
        for hkey, hvalue in headers:
            _bytes_field(r, hkey.encode())
            _bytes_field(r, hvalue)
        _varint(body, len(r))
        body += r
    return bytes(body)


def xerial_snappy(data: bytes, block_size: int = 64) -> bytes:
    """Snappy in the xerial stream framing Java's SnappyOutputStream writes. Small blocks so that a
    small batch still spans several of them."""
    import snappy  # python-snappy: raw snappy blocks

    out = bytearray(XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    for start in range(0, len(data), block_size):
        block = snappy.compress(data[start : start + block_size])
        out += struct.pack(">i", len(block)) + block
    return bytes(out)


def lz4_frame(data: bytes) -> bytes:
    """LZ4 frame format as KafkaLZ4BlockOutputStream writes it: independent blocks of at most
    64 KiB, no block checksum, no content size, no content checksum (FLG 0x60, BD 0x40)."""
    import lz4.frame

    framed = lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                                content_checksum=False, block_checksum=False, store_size=False)
    assert framed[:4] == b"\x04\x22\x4d\x18" and framed[4] == 0x60 and framed[5] == 0x40, framed[:7]
    return framed


def compress(codec: str, data: bytes) -> bytes:
    if codec == "none":
        return data
    if codec == "gzip":
        return gzip.compress(data)
    if codec == "snappy":
        return xerial_snappy(data)
    if codec == "lz4":
        return lz4_frame(data)
    if codec == "zstd":
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    raise ValueError(codec)


def build(records: list[tuple[bytes | None, bytes | None, list, int]], *, codec: str = "none",
          attributes: int = 0, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
          partition_leader_epoch: int = -1) -> bytes:
    """A magic-v2 batch (base offset 0: the log stamps it) with a valid CRC32C."""
    timestamps = [r[3] for r in records]
    base_timestamp, max_timestamp = min(timestamps), max(timestamps)
    body = compress(codec, encode_records(records, base_timestamp))
    count = len(records)
    after_crc = struct.pack(">hiqqqhii", attributes | CODEC_IDS[codec], count - 1, base_timestamp, max_timestamp,
                            producer_id, producer_epoch, base_sequence, count) + body
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, then the rest
    return struct.pack(">qiibI", 0, batch_length, partition_leader_epoch, 2, crc32c.crc32c(after_crc)) + after_crc


def control_batch(marker: int = CONTROL_COMMIT, *, timestamp: int, producer_id: int = 4242,
                  producer_epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    """A transaction marker: key = int16 version 0 + int16 type; value = int16 version 0 + int32
    coordinator epoch."""
    key = struct.pack(">hh", 0, marker)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build([(key, value, [], timestamp)], attributes=CONTROL_FLAG | TRANSACTIONAL_FLAG,
                 producer_id=producer_id, producer_epoch=producer_epoch)


def break_crc(batch: bytes) -> bytes:
    """The same batch with a wrong CRC field (the payload itself intact)."""
    buf = bytearray(batch)
    struct.pack_into(">I", buf, 17, struct.unpack_from(">I", buf, 17)[0] ^ 0xDEADBEEF)
    return bytes(buf)


def produce_raw(bootstrap: str, topic: str, batch: bytes, partition: int = 0) -> int:
    """Produce one batch as it is (raw Produce v9, acks=-1); returns its base offset."""
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from support import RawClient

    request = ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
        TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=partition, records=batch),)),))
    with RawClient(bootstrap) as raw:
        resp = raw.request(request)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == 0, resp
    return part.base_offset


def append_to_log(broker, topic: str, batch: bytes, partition: int = 0) -> int:
    """Append one batch straight to the partition's log on the broker's loop thread (no Produce
    validation); returns its base offset."""
    from quafka.broker.server.clock import wall_clock_ms

    def append():
        plog = broker.server.state.topics[topic].partitions[partition].log
        buf = bytearray(batch)
        return plog.append(buf, [(0, read_header(buf, 0))], wall_clock_ms()).first_offset

    return broker.call(append)
