"""The records a client hands to the application, and their decoding from fetched batches.

A fetched ``records`` field holds whole v2 batches and possibly a partial one at the end (the
broker cuts at the byte limit); the partial batch is left for the next fetch. Control batches
(transaction markers) are skipped, but their offsets still advance the position. With
``check_crcs`` every batch's CRC32C is verified before it is opened.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from quafka.protocol import record_batch as rb

from .errors import CorruptRecordException

__all__ = ["Record", "TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME", "TopicPartition", "decode_batches"]

#: Record.timestamp_type values, as Kafka's TimestampType (bit 3 of the batch attributes).
TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class Record(NamedTuple):
    """One record of a partition. ``timestamp`` is epoch milliseconds; ``headers`` keeps the
    order and duplicates of the wire; ``leader_epoch`` is the batch's partition leader epoch.
    ``delivery_count`` is set on records a share consumer delivers (1 on first delivery) and None
    on records read by offset. ``key`` and ``value`` are bytes unless a share consumer's
    deserializers turned them into other objects. A NamedTuple: immutable and cheap to create
    (a consumer makes one per record)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: list[tuple[str, bytes | None]]
    leader_epoch: int
    delivery_count: int | None = None


def decode_batches(topic: str, partition: int, data: bytes | memoryview | None, *, check_crcs: bool,
                   min_offset: int = 0) -> tuple[list[Record], int | None]:
    """Records of every complete batch in ``data`` with offset >= ``min_offset``, and the offset
    after the last complete batch (None when there was none). Raises CorruptRecordException."""
    if not data:
        return [], None
    out: list[Record] = []
    next_offset: int | None = None
    for pos, header in rb.iter_headers(data):
        where = f"{topic}-{partition} batch at offsets {header.base_offset}..{header.last_offset}"
        if header.magic != 2:
            raise CorruptRecordException(f"{where} has magic {header.magic}; only magic 2 (Kafka 0.11+) is readable")
        if check_crcs and not rb.batch_crc_ok(data, pos, header):
            raise CorruptRecordException(f"{where} failed its CRC32C check (check.crcs)")
        next_offset = header.next_offset
        if header.is_control or header.last_offset < min_offset:
            continue
        timestamp_type = TIMESTAMP_LOG_APPEND_TIME if header.attributes & rb.TIMESTAMP_TYPE_MASK else TIMESTAMP_CREATE_TIME
        batch = memoryview(data)[pos : pos + header.size_bytes]
        try:
            for record in rb.iter_records(batch):
                if record.offset >= min_offset:
                    out.append(Record(topic, partition, record.offset, record.timestamp, timestamp_type, record.key,
                                      record.value, list(record.headers), header.partition_leader_epoch))
        except Exception as exc:  # a codec or varint error from inside the batch
            raise CorruptRecordException(f"{where} does not decode "
                                         f"({rb.COMPRESSION_NAMES.get(header.compression, header.compression)}): "
                                         f"{type(exc).__name__}: {exc}") from exc
    return out, next_offset
