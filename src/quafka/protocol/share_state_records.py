"""Codecs for the records of `__share_group_state`, the share coordinator's topic (kafka-reference §3.1).

- key: int16 record type (0 ShareSnapshot, 1 ShareUpdate), then the key struct, non-flexible:
  GroupId string, TopicId uuid, Partition int32;
- value: int16 version (0), then the flexible value struct; a null value is a tombstone.

quafka's extensions ride in tagged fields, which Kafka's generated readers (flexible versions 0+)
skip and keep as unknown tagged fields, so the layout stays Kafka's: a StateBatch's tag
`TAG_DUE_MS` (int64, the epoch time before which the batch's AVAILABLE records wait, set by
`quafka.share.redelivery.backoff.*`), and the value's tag `TAG_FAILED_KEYS` (the share partition's
failed keys under `quafka.share.key.ordering`: a compact array of (compact bytes key, int64
offset), the whole set, present only in a record that changes it).

The framing and field codecs are `coordinator_record_codec`'s; which partition holds a key is
`partition_placement.share_state_partition`.

Pure and synchronous: broker, tests and tools share this one implementation.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple
from uuid import UUID

from .coordinator_record_codec import (
    I16,
    I32,
    I64,
    VALUE_VERSION,
    FieldReader,
    UnknownRecordType,
    checked_encode,
    decode_value,
    read_record_type,
    write_string,
)
from .varint import write_uvarint

SHARE_GROUP_STATE_TOPIC = "__share_group_state"

SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1

# Persisted delivery states (never 1 ACQUIRED)
STATE_AVAILABLE = 0
STATE_ACKNOWLEDGED = 2
STATE_ARCHIVING = 3
STATE_ARCHIVED = 4

TAG_DUE_MS = 10_000  # quafka: a StateBatch's due time (int64 epoch ms)
TAG_FAILED_KEYS = 10_001  # quafka: a share partition's failed keys (top level)
_NO_DCC = -1  # DeliveryCompleteCount default
_TAG_DCC = 0  # its tag


class StateBatch(NamedTuple):
    """A persisted range: (first offset, last offset, delivery state, delivery count), and
    quafka's due time (0: none; persisted as epoch milliseconds in tag `TAG_DUE_MS`)."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int
    due_ms: int = 0


FailedKeys = tuple  # ((key bytes, offset), ...): a share partition's failed keys (TAG_FAILED_KEYS)


class ShareStateKey(NamedTuple):
    """Key of both ShareSnapshot and ShareUpdate records (the record type is carried separately)."""

    group_id: str
    topic_id: UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp_ms: int
    write_timestamp_ms: int
    state_batches: tuple[StateBatch, ...] = ()
    delivery_complete_count: int = -1  # tagged field 0 (KIP-1226), written only when not -1
    failed_keys: FailedKeys | None = None  # quafka's tag TAG_FAILED_KEYS; None: absent


@dataclass(frozen=True, slots=True)
class ShareUpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int  # -1 = unchanged
    state_batches: tuple[StateBatch, ...] = ()
    delivery_complete_count: int = -1  # tagged field 0
    failed_keys: FailedKeys | None = None  # quafka's tag TAG_FAILED_KEYS; None: unchanged


class ShareStateRecord(NamedTuple):
    """One decoded record of `__share_group_state`; value None is a tombstone."""

    record_type: int  # SHARE_SNAPSHOT or SHARE_UPDATE
    key: ShareStateKey
    value: ShareSnapshotValue | ShareUpdateValue | None


_BATCH = struct.Struct(">qqbh")  # StateBatch fields (its tag section follows)
_SNAPSHOT_HEAD = struct.Struct(">iiiqqq")  # ShareSnapshotValue fields before StateBatches
_UPDATE_HEAD = struct.Struct(">iiq")  # ShareUpdateValue fields before StateBatches


# ----------------------------------------------------------------------------- writing


def _w_batches(buf: bytearray, batches: tuple) -> None:
    """The StateBatches array: each batch, then its tag section (quafka's due time, when set)."""
    write_uvarint(buf, len(batches) + 1)
    for b in batches:
        buf += _BATCH.pack(b[0], b[1], b[2], b[3])
        due = b[4] if len(b) > 4 else 0
        if due:
            buf.append(1)
            write_uvarint(buf, TAG_DUE_MS)
            buf.append(I64.size)
            buf += I64.pack(due)
        else:
            buf.append(0)


def _w_failed_keys(failed_keys: FailedKeys) -> bytes:
    out = bytearray()
    write_uvarint(out, len(failed_keys) + 1)
    for key, offset in failed_keys:
        write_uvarint(out, len(key) + 1)
        out += key
        out += I64.pack(offset)
    return bytes(out)


def encode_share_state_key(record_type: int, key: ShareStateKey) -> bytes:
    if record_type not in (SHARE_SNAPSHOT, SHARE_UPDATE):
        raise ValueError(f"not a {SHARE_GROUP_STATE_TOPIC} record type: {record_type}")
    buf = bytearray(I16.pack(record_type))
    write_string(buf, key.group_id)
    buf += key.topic_id.bytes
    buf += checked_encode(I32.pack, key.partition)
    return bytes(buf)


def _write_share_state_value(value: ShareSnapshotValue | ShareUpdateValue) -> bytes:
    buf = bytearray(I16.pack(VALUE_VERSION))
    if isinstance(value, ShareSnapshotValue):
        buf += _SNAPSHOT_HEAD.pack(value.snapshot_epoch, value.state_epoch, value.leader_epoch,
                                   value.start_offset, value.create_timestamp_ms, value.write_timestamp_ms)
    elif isinstance(value, ShareUpdateValue):
        buf += _UPDATE_HEAD.pack(value.snapshot_epoch, value.leader_epoch, value.start_offset)
    else:
        raise TypeError(f"not a share state value: {type(value).__name__}")
    _w_batches(buf, value.state_batches)
    if value.failed_keys is None:  # Kafka's own tags only (the common case)
        if value.delivery_complete_count == _NO_DCC:
            buf.append(0)
        else:  # one tagged field: tag 0, size 4, int32
            buf += bytes((1, _TAG_DCC, 4)) + I32.pack(value.delivery_complete_count)
        return bytes(buf)
    tags: list[tuple[int, bytes]] = []  # in increasing tag order
    if value.delivery_complete_count != _NO_DCC:
        tags.append((_TAG_DCC, I32.pack(value.delivery_complete_count)))
    tags.append((TAG_FAILED_KEYS, _w_failed_keys(value.failed_keys)))
    write_uvarint(buf, len(tags))
    for tag, payload in tags:
        write_uvarint(buf, tag)
        write_uvarint(buf, len(payload))
        buf += payload
    return bytes(buf)


def encode_share_state_value(value: ShareSnapshotValue | ShareUpdateValue | None) -> bytes | None:
    return None if value is None else checked_encode(_write_share_state_value, value)


def encode_share_state_record(record: ShareStateRecord) -> tuple[bytes, bytes | None]:
    expected = ShareSnapshotValue if record.record_type == SHARE_SNAPSHOT else ShareUpdateValue
    if record.value is not None and not isinstance(record.value, expected):
        raise ValueError(f"record type {record.record_type} cannot carry a {type(record.value).__name__}")
    return encode_share_state_key(record.record_type, record.key), encode_share_state_value(record.value)


# ----------------------------------------------------------------------------- reading


def _r_batches(r: FieldReader) -> tuple[StateBatch, ...]:
    """The StateBatches array, with quafka's due time from each batch's tag section."""
    out = []
    for _ in range(r.count(_BATCH.size + 1)):
        fields = r.unpack(_BATCH)
        due = r.tag_map((TAG_DUE_MS,)).get(TAG_DUE_MS)
        if due is not None:
            if len(due) != I64.size:
                raise r.fail(f"tagged field {TAG_DUE_MS} has size {len(due)}, expected {I64.size}")
            out.append(StateBatch(*fields, I64.unpack(due)[0]))
        else:
            out.append(StateBatch(*fields))
    return tuple(out)


def _r_failed_keys(payload: bytes, what: str) -> FailedKeys:
    r = FieldReader(payload, f"{what} failed keys")
    items = []
    for _ in range(r.count(1 + I64.size)):
        n = r.uvarint()
        if n == 0:
            raise r.fail("null key")
        key = r.take(n - 1)
        items.append((key, r.unpack(I64)[0]))
    r.end()
    return tuple(items)


def _r_share_snapshot(r: FieldReader) -> tuple:
    return *r.unpack(_SNAPSHOT_HEAD), _r_batches(r)


def _r_share_update(r: FieldReader) -> tuple:
    return *r.unpack(_UPDATE_HEAD), _r_batches(r)


_SHARE_STATE_VALUES = {SHARE_SNAPSHOT: (ShareSnapshotValue, _r_share_snapshot),
                       SHARE_UPDATE: (ShareUpdateValue, _r_share_update)}
_TOP_TAGS = {_TAG_DCC: I32.size, TAG_FAILED_KEYS: None}  # the value's tags read, and their sizes


_KEY_CACHE: dict[bytes, tuple[int, ShareStateKey]] = {}  # replay decodes the same keys again and again
_KEY_CACHE_MAX = 200_000
_VALUE_HEADS = {SHARE_SNAPSHOT: struct.Struct(">h" + _SNAPSHOT_HEAD.format[1:]),
                SHARE_UPDATE: struct.Struct(">h" + _UPDATE_HEAD.format[1:])}
_BATCH_WITH_TAGS = struct.Struct(">qqbhB")  # a StateBatch and its (empty) tag section
_DCC_TAGS = struct.Struct(">BBBi")  # one tagged field: count 1, tag 0, size 4, the int32


def _decode_share_state_key(key: bytes) -> tuple[int, ShareStateKey]:
    if type(key) is not bytes:
        key = bytes(key)
    found = _KEY_CACHE.get(key)
    if found is not None:
        return found
    r = FieldReader(key, f"{SHARE_GROUP_STATE_TOPIC} key")
    record_type = read_record_type(r)
    if record_type not in _SHARE_STATE_VALUES:
        raise UnknownRecordType(record_type, SHARE_GROUP_STATE_TOPIC)
    decoded = (record_type, ShareStateKey(r.string(), r.uuid(), r.int32()))
    r.end()
    if len(_KEY_CACHE) >= _KEY_CACHE_MAX:
        _KEY_CACHE.clear()
    _KEY_CACHE[key] = decoded
    return decoded


def _fast_share_state_value(record_type: int, value) -> ShareSnapshotValue | ShareUpdateValue | None:
    """The common layout (fewer than 127 batches, no tags but DeliveryCompleteCount) in a few
    struct calls; None for anything else, which the general reader then decodes (or refuses)."""
    head = _VALUE_HEADS[record_type]
    n = len(value)
    if n < head.size + 2:
        return None
    fields = head.unpack_from(value, 0)
    if fields[0] != VALUE_VERSION:
        return None
    pos = head.size
    count = value[pos] - 1
    if count < 0 or count >= 0x7F:
        return None
    pos += 1
    size = _BATCH_WITH_TAGS.size
    if pos + count * size > n:
        return None
    batches = []
    for _ in range(count):
        first, last, state, delivery_count, tags = _BATCH_WITH_TAGS.unpack_from(value, pos)
        if tags:
            return None
        batches.append(StateBatch(first, last, state, delivery_count))
        pos += size
    if pos + 1 == n and value[pos] == 0:
        dcc = _NO_DCC
    elif pos + _DCC_TAGS.size == n:
        tag_count, tag, tag_size, dcc = _DCC_TAGS.unpack_from(value, pos)
        if (tag_count, tag, tag_size) != (1, _TAG_DCC, 4):
            return None
    else:
        return None
    value_cls = ShareSnapshotValue if record_type == SHARE_SNAPSHOT else ShareUpdateValue
    return value_cls(*fields[1:], tuple(batches), dcc)


def decode_share_state_record(key: bytes, value: bytes | None) -> ShareStateRecord:
    record_type, decoded_key = _decode_share_state_key(key)
    if value is None:
        return ShareStateRecord(record_type, decoded_key, None)
    fast = _fast_share_state_value(record_type, value)
    if fast is not None:
        return ShareStateRecord(record_type, decoded_key, fast)
    value_cls, read_fields = _SHARE_STATE_VALUES[record_type]
    what = f"{SHARE_GROUP_STATE_TOPIC} value of type {record_type}"
    fields, tags = decode_value(value, what, read_fields, _TOP_TAGS)
    dcc = I32.unpack(tags[_TAG_DCC])[0] if _TAG_DCC in tags else _NO_DCC
    failed = _r_failed_keys(tags[TAG_FAILED_KEYS], what) if TAG_FAILED_KEYS in tags else None
    return ShareStateRecord(record_type, decoded_key, value_cls(*fields, dcc, failed))
