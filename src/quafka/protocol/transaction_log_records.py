"""Codecs for the records of `__transaction_state`, the transaction coordinator's topic.

Laid out as Kafka's transaction coordinator writes them (transaction-coordinator module,
`TransactionLog.keyToBytes` / `valueToBytes` / `read`, schemas `TransactionLogKey.json` and
`TransactionLogValue.json`):

- key: int16 record type 0 (`CoordinatorRecordType.TRANSACTION_LOG`), then TransactionalId as a
  non-flexible string (int16 length);
- value: int16 version, then the TransactionLogValue struct. Version 0 is not flexible; version 1
  (written from transaction version 1 on, `TransactionVersion.transactionLogValueVersion`) is
  flexible: compact strings and arrays, a tag section after the partitions struct and after the
  value. Fields: ProducerId int64, ProducerEpoch int16, TransactionTimeoutMs int32,
  TransactionStatus int8 (the `TransactionState` id), TransactionPartitions (nullable array of
  {Topic string, PartitionIds [int32]}; null in state Empty), TransactionLastUpdateTimestampMs
  int64, TransactionStartTimestampMs int64; and, as tagged fields of version 1,
  PreviousProducerId (tag 0, int64, default -1), NextProducerId (tag 1, int64, default -1) and
  ClientTransactionVersion (tag 2, int16, default 0). A tagged field at its default is not written.
  A null value is a tombstone (the transactional id expired).

quafka writes version 1 and keeps one more field in a tagged field of its own, which Kafka's
generated readers skip: `TAG_LAST_PRODUCER_EPOCH` (int16, Kafka's in-memory
`TransactionMetadata.lastProducerEpoch`, which Kafka does not persist and resets to -1 on load).
Persisting it makes the coordinator rebuilt from the log identical to the one that wrote it, so an
InitProducerId retry with the previous epoch is recognised across a restart too. Kafka 4.2+ trunk
also writes a NextProducerEpoch tag for KIP-939's two-phase commit; quafka neither writes nor needs
it (an unknown tag is skipped on read).

Topics and partitions are written sorted (Kafka groups a hash set, in no particular order).

The framing and field codecs are `coordinator_record_codec`'s. Pure and synchronous.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .coordinator_record_codec import (
    I16,
    I64,
    CorruptRecord,
    FieldReader,
    UnknownRecordType,
    checked_encode,
    read_record_type,
    write_compact_string,
    write_int32s,
    write_string,
)
from .varint import write_uvarint

TRANSACTION_STATE_TOPIC = "__transaction_state"

TRANSACTION_LOG = 0  # the key's record type (CoordinatorRecordType.TRANSACTION_LOG)
VALUE_VERSION = 1  # the value version quafka writes (flexible)
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

TAG_PREVIOUS_PRODUCER_ID = 0
TAG_NEXT_PRODUCER_ID = 1
TAG_CLIENT_TRANSACTION_VERSION = 2
TAG_LAST_PRODUCER_EPOCH = 10_000  # quafka: TransactionMetadata.lastProducerEpoch (int16)

_HEAD = struct.Struct(">qhib")  # ProducerId, ProducerEpoch, TransactionTimeoutMs, TransactionStatus
_TIMES = struct.Struct(">qq")  # TransactionLastUpdateTimestampMs, TransactionStartTimestampMs


class TopicPartitionIds(NamedTuple):
    topic: str
    partitions: tuple[int, ...]


class TransactionLogValue(NamedTuple):
    """One TransactionLogValue. `partitions` is None exactly when Kafka writes a null array (state
    Empty); `()` is an empty array."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    partitions: tuple[TopicPartitionIds, ...] | None
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    last_producer_epoch: int = NO_PRODUCER_EPOCH  # quafka's tag TAG_LAST_PRODUCER_EPOCH


class TransactionLogRecord(NamedTuple):
    """One record of `__transaction_state`: a transactional id and its value (None: tombstone)."""

    transactional_id: str
    value: TransactionLogValue | None


# ----------------------------------------------------------------------------- writing


def encode_transaction_log_key(transactional_id: str) -> bytes:
    buf = bytearray(I16.pack(TRANSACTION_LOG))
    write_string(buf, transactional_id)
    return bytes(buf)


def _tags(value: TransactionLogValue) -> list[tuple[int, bytes]]:
    tags = []
    if value.previous_producer_id != NO_PRODUCER_ID:
        tags.append((TAG_PREVIOUS_PRODUCER_ID, I64.pack(value.previous_producer_id)))
    if value.next_producer_id != NO_PRODUCER_ID:
        tags.append((TAG_NEXT_PRODUCER_ID, I64.pack(value.next_producer_id)))
    if value.client_transaction_version != 0:
        tags.append((TAG_CLIENT_TRANSACTION_VERSION, I16.pack(value.client_transaction_version)))
    if value.last_producer_epoch != NO_PRODUCER_EPOCH:
        tags.append((TAG_LAST_PRODUCER_EPOCH, I16.pack(value.last_producer_epoch)))
    return tags


def _write_value(value: TransactionLogValue) -> bytes:
    buf = bytearray(I16.pack(VALUE_VERSION))
    buf += _HEAD.pack(value.producer_id, value.producer_epoch, value.transaction_timeout_ms,
                      value.transaction_status)
    if value.partitions is None:
        buf.append(0)
    else:
        ordered = sorted(value.partitions)
        write_uvarint(buf, len(ordered) + 1)
        for entry in ordered:
            write_compact_string(buf, entry.topic)
            write_int32s(buf, tuple(sorted(entry.partitions)))
            buf.append(0)  # the struct's tag section
    buf += _TIMES.pack(value.last_update_timestamp_ms, value.start_timestamp_ms)
    tags = _tags(value)
    write_uvarint(buf, len(tags))
    for tag, payload in tags:
        write_uvarint(buf, tag)
        write_uvarint(buf, len(payload))
        buf += payload
    return bytes(buf)


def encode_transaction_log_value(value: TransactionLogValue | None) -> bytes | None:
    return None if value is None else checked_encode(_write_value, value)


def encode_transaction_log_record(record: TransactionLogRecord) -> tuple[bytes, bytes | None]:
    return encode_transaction_log_key(record.transactional_id), encode_transaction_log_value(record.value)


# ----------------------------------------------------------------------------- reading


def decode_transaction_log_key(key: bytes) -> str:
    r = FieldReader(key, f"{TRANSACTION_STATE_TOPIC} key")
    record_type = read_record_type(r)
    if record_type != TRANSACTION_LOG:
        raise UnknownRecordType(record_type, TRANSACTION_STATE_TOPIC)
    transactional_id = r.string()
    r.end()
    return transactional_id


def _read_partitions_v0(r: FieldReader) -> tuple[TopicPartitionIds, ...] | None:
    n = r.int32()
    if n < 0:
        return None
    out = []
    for _ in range(n):
        topic = r.string()
        count = r.int32()
        if count < 0 or count * 4 > len(r.data) - r.pos:
            raise r.fail(f"bad partition count {count}")
        out.append(TopicPartitionIds(topic, struct.unpack(f">{count}i", r.take(4 * count))))
    return tuple(out)


def _read_partitions_v1(r: FieldReader) -> tuple[TopicPartitionIds, ...] | None:
    n = r.uvarint()
    if n == 0:
        return None
    out = []
    for _ in range(n - 1):
        topic = r.compact_string()
        out.append(TopicPartitionIds(topic, r.int32s()))
        r.tags()
    return tuple(out)


def _int_tag(tags: dict[int, bytes], tag: int, st: struct.Struct, default: int, r: FieldReader) -> int:
    payload = tags.get(tag)
    if payload is None:
        return default
    if len(payload) != st.size:
        raise r.fail(f"tagged field {tag} has size {len(payload)}, expected {st.size}")
    return st.unpack(payload)[0]


def decode_transaction_log_value(value: bytes) -> TransactionLogValue:
    r = FieldReader(value, f"{TRANSACTION_STATE_TOPIC} value")
    version = r.int16()
    if version not in (0, 1):
        raise r.fail(f"unsupported value version {version}")
    producer_id, producer_epoch, timeout_ms, status = r.unpack(_HEAD)
    partitions = _read_partitions_v0(r) if version == 0 else _read_partitions_v1(r)
    last_update_ms, start_ms = r.unpack(_TIMES)
    tags: dict[int, bytes] = {}
    if version >= 1:
        tags = r.tag_map((TAG_PREVIOUS_PRODUCER_ID, TAG_NEXT_PRODUCER_ID, TAG_CLIENT_TRANSACTION_VERSION,
                          TAG_LAST_PRODUCER_EPOCH))
    r.end()
    return TransactionLogValue(
        producer_id, producer_epoch, timeout_ms, status, partitions, last_update_ms, start_ms,
        previous_producer_id=_int_tag(tags, TAG_PREVIOUS_PRODUCER_ID, I64, NO_PRODUCER_ID, r),
        next_producer_id=_int_tag(tags, TAG_NEXT_PRODUCER_ID, I64, NO_PRODUCER_ID, r),
        client_transaction_version=_int_tag(tags, TAG_CLIENT_TRANSACTION_VERSION, I16, 0, r),
        last_producer_epoch=_int_tag(tags, TAG_LAST_PRODUCER_EPOCH, I16, NO_PRODUCER_EPOCH, r))


def decode_transaction_log_record(key: bytes, value: bytes | None) -> TransactionLogRecord:
    """Decode one record; raises CorruptRecord (UnknownRecordType for a key of another type)."""
    transactional_id = decode_transaction_log_key(key)
    return TransactionLogRecord(transactional_id, None if value is None else decode_transaction_log_value(value))


__all__ = [
    "TRANSACTION_STATE_TOPIC", "TRANSACTION_LOG", "VALUE_VERSION", "NO_PRODUCER_ID", "NO_PRODUCER_EPOCH",
    "TAG_LAST_PRODUCER_EPOCH", "TopicPartitionIds", "TransactionLogValue", "TransactionLogRecord",
    "CorruptRecord", "encode_transaction_log_key", "encode_transaction_log_value",
    "encode_transaction_log_record", "decode_transaction_log_key", "decode_transaction_log_value",
    "decode_transaction_log_record",
]
