"""Codecs for the records of Kafka's internal coordinator topics that share groups use.

`__share_group_state` (the share coordinator, kafka-reference §3.1):

- key: int16 record type (0 ShareSnapshot, 1 ShareUpdate), then the key struct, non-flexible:
  GroupId string, TopicId uuid, Partition int32;
- value: int16 version (0), then the flexible value struct; a null value is a tombstone.

quafka's extensions ride in tagged fields, which Kafka's generated readers (flexible versions 0+)
skip and keep as unknown tagged fields, so the layout stays Kafka's: a StateBatch's tag
`TAG_DUE_MS` (int64, the epoch time before which the batch's AVAILABLE records wait, set by
`quafka.share.redelivery.backoff.*`), and the value's tag `TAG_FAILED_KEYS` (the share partition's
failed keys under `quafka.share.key.ordering`: a compact array of (compact bytes key, int64
offset), the whole set, present only in a record that changes it).

`__consumer_offsets` share-group records (the group coordinator, kafka-reference §3.3), types
10-15: key = int16 type + non-flexible key struct; value = int16 version 0 + flexible struct.

Plus the placement rules: Java's String.hashCode, Kafka's Utils.abs and the base64 text form of a
topic id, which together pick the partition of each internal topic a key lives in.

Pure and synchronous: broker, tests and tools share this one implementation.
"""

from __future__ import annotations

import base64
import struct
from uuid import UUID
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .varint import VarintTooLong, read_uvarint, write_uvarint

# ----------------------------------------------------------------------------- record types

SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1

SHARE_GROUP_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
SHARE_GROUP_STATE_PARTITION_METADATA = 15

SHARE_GROUP_STATE_TOPIC = "__share_group_state"
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"

# Persisted delivery states (never 1 ACQUIRED)
STATE_AVAILABLE = 0
STATE_ACKNOWLEDGED = 2
STATE_ARCHIVING = 3
STATE_ARCHIVED = 4


class CorruptRecord(ValueError):
    """A key or value that does not decode (truncated, unknown type or version, bad lengths)."""


# ----------------------------------------------------------------------------- __share_group_state


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


# ----------------------------------------------------------------------------- __consumer_offsets


class TopicPartitions(NamedTuple):
    topic_id: UUID
    partitions: tuple[int, ...]


class TopicPartitionsInfo(NamedTuple):
    topic_id: UUID
    topic_name: str
    partitions: tuple[int, ...]


class TopicInfo(NamedTuple):
    topic_id: UUID
    topic_name: str


class GroupKey(NamedTuple):
    """Key of types 11, 12 and 15."""

    group_id: str


class GroupMemberKey(NamedTuple):
    """Key of types 10, 13 and 14."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:  # type 10
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:  # type 11
    epoch: int
    metadata_hash: int = 0  # int64 (KIP-1101, Kafka 4.1+); quafka: share_group.metadata_hash


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataValue:  # type 12
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberValue:  # type 13
    topic_partitions: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:  # type 14
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState: 0 STABLE (share members are always stable)
    assigned_partitions: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataValue:  # type 15
    initializing_topics: tuple[TopicPartitionsInfo, ...] = ()
    initialized_topics: tuple[TopicPartitionsInfo, ...] = ()
    deleting_topics: tuple[TopicInfo, ...] = ()


GroupValue = (ShareGroupMemberMetadataValue | ShareGroupMetadataValue | ShareGroupTargetAssignmentMetadataValue
              | ShareGroupTargetAssignmentMemberValue | ShareGroupCurrentMemberAssignmentValue
              | ShareGroupStatePartitionMetadataValue)


class GroupRecord(NamedTuple):
    """One decoded share-group record of `__consumer_offsets`; value None is a tombstone."""

    record_type: int  # 10..15
    key: GroupKey | GroupMemberKey
    value: GroupValue | None


class UnknownRecordType(CorruptRecord):
    """A key of a record type this module does not decode (e.g. the classic and consumer-group records
    of `__consumer_offsets`); callers that only want the share records skip these."""

    def __init__(self, record_type: int, topic: str) -> None:
        super().__init__(f"{topic}: unknown record type {record_type}")
        self.record_type = record_type


# ----------------------------------------------------------------------------- placement


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: h = 31*h + c over the UTF-16 code units, as a signed int32."""
    h = 0
    for (unit,) in struct.iter_unpack(">H", s.encode("utf-16-be", "surrogatepass")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x100000000 if h >= 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: the absolute value, except that Integer.MIN_VALUE maps to 0."""
    return 0 if n == -0x80000000 else abs(n)


def kafka_uuid_str(topic_id: UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes without padding (22 characters)."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def share_coordinator_key(group_id: str, topic_id: UUID, partition: int) -> str:
    """The coordinator key of a share-partition: "group:topicIdBase64:partition"."""
    return f"{group_id}:{kafka_uuid_str(topic_id)}:{partition}"


def _place(key: str, num_partitions: int) -> int:
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return kafka_abs(java_string_hash(key)) % num_partitions


def share_state_partition(group_id: str, topic_id: UUID, partition: int, num_partitions: int) -> int:
    """The `__share_group_state` partition that holds the state of one share-partition."""
    return _place(share_coordinator_key(group_id, topic_id, partition), num_partitions)


def group_partition(group_id: str, num_partitions: int) -> int:
    """The `__consumer_offsets` partition that holds a group's records."""
    return _place(group_id, num_partitions)


# ----------------------------------------------------------------------------- writing

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_BATCH = struct.Struct(">qqbh")  # StateBatch fields (its tag section follows)
_SNAPSHOT_HEAD = struct.Struct(">iiiqqq")  # ShareSnapshotValue fields before StateBatches
_UPDATE_HEAD = struct.Struct(">iiq")  # ShareUpdateValue fields before StateBatches
_GROUP_METADATA = struct.Struct(">iq")  # ShareGroupMetadataValue: Epoch, MetadataHash
_ASSIGNMENT_HEAD = struct.Struct(">iib")  # ShareGroupCurrentMemberAssignmentValue before its partitions
_MAX_UVARINT = 0xFFFFFFFF
_VALUE_VERSION = 0
_NO_DCC = -1  # DeliveryCompleteCount default
_TAG_DCC = 0  # its tag
TAG_DUE_MS = 10_000  # quafka: a StateBatch's due time (int64 epoch ms)
TAG_FAILED_KEYS = 10_001  # quafka: a share partition's failed keys (top level)
_I64 = struct.Struct(">q")


_w_uvarint = write_uvarint  # ValueError when out of range


def _w_string(buf: bytearray, s: str) -> None:
    """Non-flexible string: int16 length, then UTF-8."""
    data = s.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes is too long for an int16 length")
    buf += _I16.pack(len(data)) + data


def _w_compact_string(buf: bytearray, s: str | None) -> None:
    if s is None:
        buf.append(0)
    else:
        data = s.encode("utf-8")
        _w_uvarint(buf, len(data) + 1)
        buf += data


def _w_int32s(buf: bytearray, values: tuple[int, ...]) -> None:
    _w_uvarint(buf, len(values) + 1)
    buf += struct.pack(f">{len(values)}i", *values)


def _w_structs(buf: bytearray, items: tuple, write_item: Callable[[bytearray, Any], None]) -> None:
    """Compact array of flexible structs: each element is written, then its (empty) tag section."""
    _w_uvarint(buf, len(items) + 1)
    for item in items:
        write_item(buf, item)
        buf.append(0)


def _w_batches(buf: bytearray, batches: tuple) -> None:
    """The StateBatches array: each batch, then its tag section (quafka's due time, when set)."""
    _w_uvarint(buf, len(batches) + 1)
    for b in batches:
        buf += _BATCH.pack(b[0], b[1], b[2], b[3])
        due = b[4] if len(b) > 4 else 0
        if due:
            buf.append(1)
            _w_uvarint(buf, TAG_DUE_MS)
            buf.append(_I64.size)
            buf += _I64.pack(due)
        else:
            buf.append(0)


def _w_failed_keys(failed_keys: FailedKeys) -> bytes:
    out = bytearray()
    _w_uvarint(out, len(failed_keys) + 1)
    for key, offset in failed_keys:
        _w_uvarint(out, len(key) + 1)
        out += key
        out += _I64.pack(offset)
    return bytes(out)


def _w_topic_partitions(buf: bytearray, t: TopicPartitions) -> None:
    buf += t.topic_id.bytes
    _w_int32s(buf, t.partitions)


def _w_topic_partitions_info(buf: bytearray, t: TopicPartitionsInfo) -> None:
    buf += t.topic_id.bytes
    _w_compact_string(buf, t.topic_name)
    _w_int32s(buf, t.partitions)


def _w_topic_info(buf: bytearray, t: TopicInfo) -> None:
    buf += t.topic_id.bytes
    _w_compact_string(buf, t.topic_name)


# ----------------------------------------------------------------------------- reading


class _Reader:
    """A cursor over one key or value; every failure is raised as a CorruptRecord."""

    __slots__ = ("data", "pos", "what")

    def __init__(self, data: bytes | bytearray | memoryview, what: str) -> None:
        self.data = bytes(data)
        self.pos = 0
        self.what = what

    def fail(self, message: str) -> CorruptRecord:
        return CorruptRecord(f"{self.what}: {message} (at byte {self.pos} of {len(self.data)})")

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise self.fail(f"truncated, {n} more bytes needed")
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def unpack(self, st: struct.Struct) -> tuple:
        if self.pos + st.size > len(self.data):
            raise self.fail(f"truncated, {st.size} more bytes needed")
        self.pos += st.size
        return st.unpack_from(self.data, self.pos - st.size)

    def int16(self) -> int:
        return self.unpack(_I16)[0]

    def int32(self) -> int:
        return self.unpack(_I32)[0]

    def uuid(self) -> UUID:
        return UUID(bytes=self.take(16))

    def uvarint(self) -> int:
        try:
            result, self.pos = read_uvarint(self.data, self.pos)
        except IndexError:
            raise self.fail("truncated varint") from None
        except VarintTooLong:
            raise self.fail("varint longer than 5 bytes") from None
        if result > _MAX_UVARINT:
            raise self.fail("varint out of range")
        return result

    def _text(self, n: int) -> str:
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"string is not UTF-8 ({exc.reason})") from None

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise self.fail(f"bad string length {n}")
        return self._text(n)

    def nullable_compact_string(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self._text(n - 1)

    def compact_string(self) -> str:
        s = self.nullable_compact_string()
        if s is None:
            raise self.fail("null in a non-nullable string")
        return s

    def count(self, min_item_size: int) -> int:
        """A compact array's element count (these schemas have no nullable arrays)."""
        n = self.uvarint()
        if n == 0:
            raise self.fail("null in a non-nullable array")
        if (n - 1) * min_item_size > len(self.data) - self.pos:
            raise self.fail(f"array of {n - 1} elements does not fit")
        return n - 1

    def int32s(self) -> tuple[int, ...]:
        n = self.count(4)
        return struct.unpack(f">{n}i", self.take(4 * n))

    def strings(self) -> tuple[str, ...]:
        return tuple(self.compact_string() for _ in range(self.count(1)))

    def structs(self, min_item_size: int, read_item: Callable[[_Reader], Any]) -> tuple:
        """Compact array of flexible structs; each element's tag section is skipped."""
        out = []
        for _ in range(self.count(min_item_size + 1)):
            out.append(read_item(self))
            self.tags()
        return tuple(out)

    def tags(self, known: int | None = None) -> bytes | None:
        """Read a tag section, skipping every tag but `known`; returns that tag's payload, if present."""
        return self.tag_map((known,)).get(known) if known is not None else self.tag_map(()).get(None)

    def tag_map(self, known: tuple) -> dict[int, bytes]:
        """Read a tag section; the payloads of the `known` tags present (others are skipped)."""
        found: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            payload = self.take(self.uvarint())
            if tag in known:
                found[tag] = payload
        return found

    def end(self) -> None:
        if self.pos != len(self.data):
            raise self.fail(f"{len(self.data) - self.pos} trailing bytes")


def _r_batches(r: _Reader) -> tuple[StateBatch, ...]:
    """The StateBatches array, with quafka's due time from each batch's tag section."""
    out = []
    for _ in range(r.count(_BATCH.size + 1)):
        fields = r.unpack(_BATCH)
        due = r.tag_map((TAG_DUE_MS,)).get(TAG_DUE_MS)
        if due is not None:
            if len(due) != _I64.size:
                raise r.fail(f"tagged field {TAG_DUE_MS} has size {len(due)}, expected {_I64.size}")
            out.append(StateBatch(*fields, _I64.unpack(due)[0]))
        else:
            out.append(StateBatch(*fields))
    return tuple(out)


def _r_failed_keys(payload: bytes, what: str) -> FailedKeys:
    r = _Reader(payload, f"{what} failed keys")
    items = []
    for _ in range(r.count(1 + _I64.size)):
        n = r.uvarint()
        if n == 0:
            raise r.fail("null key")
        key = r.take(n - 1)
        items.append((key, r.unpack(_I64)[0]))
    r.end()
    return tuple(items)


def _r_topic_partitions(r: _Reader) -> TopicPartitions:
    return TopicPartitions(r.uuid(), r.int32s())


def _r_topic_partitions_info(r: _Reader) -> TopicPartitionsInfo:
    return TopicPartitionsInfo(r.uuid(), r.compact_string(), r.int32s())


def _r_topic_info(r: _Reader) -> TopicInfo:
    return TopicInfo(r.uuid(), r.compact_string())


def _r_record_type(r: _Reader) -> int:
    record_type = r.int16()
    if record_type < 0:
        raise r.fail(f"bad record type {record_type}")
    return record_type


def _decode_value(value: bytes, what: str, read_fields: Callable[[_Reader], Any],
                  top_tags: tuple = ()) -> tuple[Any, dict[int, bytes]]:
    """Version check, the value's fields, its top-level tag section, nothing after it.
    Returns (fields, payloads of the `top_tags` present)."""
    r = _Reader(value, what)
    version = r.int16()
    if version != _VALUE_VERSION:
        raise r.fail(f"unsupported value version {version}")
    fields = read_fields(r)
    payloads = r.tag_map(top_tags)
    r.end()
    dcc = payloads.get(_TAG_DCC)
    if _TAG_DCC in top_tags and dcc is not None and len(dcc) != 4:
        raise r.fail(f"tagged field {_TAG_DCC} has size {len(dcc)}, expected 4")
    return fields, payloads


def _encode(fn: Callable[..., bytes], *args: Any) -> bytes:
    try:
        return fn(*args)
    except struct.error as exc:  # a field outside its wire type's range
        raise ValueError(f"field out of range: {exc}") from None


# ----------------------------------------------------------------------------- __share_group_state codecs


def encode_share_state_key(record_type: int, key: ShareStateKey) -> bytes:
    if record_type not in (SHARE_SNAPSHOT, SHARE_UPDATE):
        raise ValueError(f"not a {SHARE_GROUP_STATE_TOPIC} record type: {record_type}")
    buf = bytearray(_I16.pack(record_type))
    _w_string(buf, key.group_id)
    buf += key.topic_id.bytes
    buf += _encode(_I32.pack, key.partition)
    return bytes(buf)


def _write_share_state_value(value: ShareSnapshotValue | ShareUpdateValue) -> bytes:
    buf = bytearray(_I16.pack(_VALUE_VERSION))
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
            buf += bytes((1, _TAG_DCC, 4)) + _I32.pack(value.delivery_complete_count)
        return bytes(buf)
    tags: list[tuple[int, bytes]] = []  # in increasing tag order
    if value.delivery_complete_count != _NO_DCC:
        tags.append((_TAG_DCC, _I32.pack(value.delivery_complete_count)))
    tags.append((TAG_FAILED_KEYS, _w_failed_keys(value.failed_keys)))
    _w_uvarint(buf, len(tags))
    for tag, payload in tags:
        _w_uvarint(buf, tag)
        _w_uvarint(buf, len(payload))
        buf += payload
    return bytes(buf)


def encode_share_state_value(value: ShareSnapshotValue | ShareUpdateValue | None) -> bytes | None:
    return None if value is None else _encode(_write_share_state_value, value)


def encode_share_state_record(record: ShareStateRecord) -> tuple[bytes, bytes | None]:
    expected = ShareSnapshotValue if record.record_type == SHARE_SNAPSHOT else ShareUpdateValue
    if record.value is not None and not isinstance(record.value, expected):
        raise ValueError(f"record type {record.record_type} cannot carry a {type(record.value).__name__}")
    return encode_share_state_key(record.record_type, record.key), encode_share_state_value(record.value)


def _r_share_snapshot(r: _Reader) -> tuple:
    return *r.unpack(_SNAPSHOT_HEAD), _r_batches(r)


def _r_share_update(r: _Reader) -> tuple:
    return *r.unpack(_UPDATE_HEAD), _r_batches(r)


_SHARE_STATE_VALUES = {SHARE_SNAPSHOT: (ShareSnapshotValue, _r_share_snapshot),
                       SHARE_UPDATE: (ShareUpdateValue, _r_share_update)}


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
    r = _Reader(key, f"{SHARE_GROUP_STATE_TOPIC} key")
    record_type = _r_record_type(r)
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
    if fields[0] != _VALUE_VERSION:
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
    fields, tags = _decode_value(value, what, read_fields, (_TAG_DCC, TAG_FAILED_KEYS))
    dcc = _I32.unpack(tags[_TAG_DCC])[0] if _TAG_DCC in tags else _NO_DCC
    failed = _r_failed_keys(tags[TAG_FAILED_KEYS], what) if TAG_FAILED_KEYS in tags else None
    return ShareStateRecord(record_type, decoded_key, value_cls(*fields, dcc, failed))


# ----------------------------------------------------------------------------- __consumer_offsets codecs


def _w_member_metadata(buf: bytearray, v: ShareGroupMemberMetadataValue) -> None:
    _w_compact_string(buf, v.rack_id)
    _w_compact_string(buf, v.client_id)
    _w_compact_string(buf, v.client_host)
    _w_uvarint(buf, len(v.subscribed_topic_names) + 1)
    for name in v.subscribed_topic_names:
        _w_compact_string(buf, name)


def _w_current_member_assignment(buf: bytearray, v: ShareGroupCurrentMemberAssignmentValue) -> None:
    buf += _ASSIGNMENT_HEAD.pack(v.member_epoch, v.previous_member_epoch, v.state)
    _w_structs(buf, v.assigned_partitions, _w_topic_partitions)


def _w_state_partition_metadata(buf: bytearray, v: ShareGroupStatePartitionMetadataValue) -> None:
    _w_structs(buf, v.initializing_topics, _w_topic_partitions_info)
    _w_structs(buf, v.initialized_topics, _w_topic_partitions_info)
    _w_structs(buf, v.deleting_topics, _w_topic_info)


# record type -> (key class, value class, writer of the value's fields, reader of them)
_GROUP_CODECS = {
    SHARE_GROUP_MEMBER_METADATA: (
        GroupMemberKey, ShareGroupMemberMetadataValue, _w_member_metadata,
        lambda r: ShareGroupMemberMetadataValue(r.nullable_compact_string(), r.compact_string(),
                                                r.compact_string(), r.strings())),
    SHARE_GROUP_METADATA: (
        GroupKey, ShareGroupMetadataValue,
        lambda buf, v: buf.extend(_GROUP_METADATA.pack(v.epoch, v.metadata_hash)),
        lambda r: ShareGroupMetadataValue(*r.unpack(_GROUP_METADATA))),
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA: (
        GroupKey, ShareGroupTargetAssignmentMetadataValue,
        lambda buf, v: buf.extend(_I32.pack(v.assignment_epoch)),
        lambda r: ShareGroupTargetAssignmentMetadataValue(r.int32())),
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER: (
        GroupMemberKey, ShareGroupTargetAssignmentMemberValue,
        lambda buf, v: _w_structs(buf, v.topic_partitions, _w_topic_partitions),
        lambda r: ShareGroupTargetAssignmentMemberValue(r.structs(17, _r_topic_partitions))),
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT: (
        GroupMemberKey, ShareGroupCurrentMemberAssignmentValue, _w_current_member_assignment,
        lambda r: ShareGroupCurrentMemberAssignmentValue(*r.unpack(_ASSIGNMENT_HEAD),
                                                         r.structs(17, _r_topic_partitions))),
    SHARE_GROUP_STATE_PARTITION_METADATA: (
        GroupKey, ShareGroupStatePartitionMetadataValue, _w_state_partition_metadata,
        lambda r: ShareGroupStatePartitionMetadataValue(r.structs(18, _r_topic_partitions_info),
                                                        r.structs(18, _r_topic_partitions_info),
                                                        r.structs(17, _r_topic_info))),
}


def _write_group_value(write_fields: Callable[[bytearray, Any], None], value: GroupValue) -> bytes:
    buf = bytearray(_I16.pack(_VALUE_VERSION))
    write_fields(buf, value)
    buf.append(0)  # top-level tag section
    return bytes(buf)


def encode_group_record(record: GroupRecord) -> tuple[bytes, bytes | None]:
    codec = _GROUP_CODECS.get(record.record_type)
    if codec is None:
        raise ValueError(f"not a share-group record type: {record.record_type}")
    key_cls, value_cls, write_fields, _ = codec
    if type(record.key) is not key_cls:
        raise ValueError(f"record type {record.record_type} needs a {key_cls.__name__} key")
    key = bytearray(_I16.pack(record.record_type))
    for part in record.key:
        _w_string(key, part)
    if record.value is None:
        return bytes(key), None
    if not isinstance(record.value, value_cls):
        raise ValueError(f"record type {record.record_type} needs a {value_cls.__name__} value")
    return bytes(key), _encode(_write_group_value, write_fields, record.value)


def decode_group_record(key: bytes, value: bytes | None) -> GroupRecord:
    r = _Reader(key, f"{CONSUMER_OFFSETS_TOPIC} key")
    record_type = _r_record_type(r)
    codec = _GROUP_CODECS.get(record_type)
    if codec is None:
        raise UnknownRecordType(record_type, CONSUMER_OFFSETS_TOPIC)
    key_cls, _, _, read_fields = codec
    decoded_key = key_cls(*(r.string() for _ in key_cls._fields))
    r.end()
    if value is None:
        return GroupRecord(record_type, decoded_key, None)
    decoded, _ = _decode_value(value, f"{CONSUMER_OFFSETS_TOPIC} value of type {record_type}", read_fields)
    return GroupRecord(record_type, decoded_key, decoded)
