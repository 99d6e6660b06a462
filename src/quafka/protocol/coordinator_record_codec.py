"""The framing every coordinator record shares, and the field readers and writers its codecs use.

Kafka's coordinators (share coordinator, group coordinator) write their state as records of an
internal topic, framed as `CoordinatorRecordSerde` does:

- key: int16 record type, then the key struct at version 0 (non-flexible: int16 string lengths);
- value: int16 version, then the value struct at that version (flexible for the records of
  share groups and KIP-848 groups: compact strings and arrays, a tag section after every struct);
  a null value is a tombstone.

The codecs of each record family build on this module: `share_state_records` (`__share_group_state`),
`share_group_records`, `consumer_group_records`, `classic_group_records` and
`offset_commit_records` (`__consumer_offsets`). The keys and the topic-partitions struct that
several `__consumer_offsets` families share live here too.

Pure and synchronous: broker, tests and tools share this one implementation.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple
from uuid import UUID

from .varint import VarintTooLong, read_uvarint, write_uvarint

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
VALUE_VERSION = 0  # the value version of every flexible record these codecs write
_MAX_UVARINT = 0xFFFFFFFF


class CorruptRecord(ValueError):
    """A key or value that does not decode (truncated, unknown type or version, bad lengths)."""


class UnknownRecordType(CorruptRecord):
    """A key of a record type a codec does not decode (e.g. the classic and consumer-group records
    of `__consumer_offsets` for the share-group codec); callers that want only some records skip these."""

    def __init__(self, record_type: int, topic: str) -> None:
        super().__init__(f"{topic}: unknown record type {record_type}")
        self.record_type = record_type


class GroupKey(NamedTuple):
    """Key of the group-level records of `__consumer_offsets` (share groups: types 11, 12 and 15)."""

    group_id: str


class GroupMemberKey(NamedTuple):
    """Key of the member-level records of `__consumer_offsets` (share groups: types 10, 13 and 14)."""

    group_id: str
    member_id: str


class TopicPartitions(NamedTuple):
    topic_id: UUID
    partitions: tuple[int, ...]


# ----------------------------------------------------------------------------- writing

def write_string(buf: bytearray, s: str) -> None:
    """Non-flexible string: int16 length, then UTF-8."""
    data = s.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes is too long for an int16 length")
    buf += I16.pack(len(data)) + data


def write_compact_string(buf: bytearray, s: str | None) -> None:
    if s is None:
        buf.append(0)
    else:
        data = s.encode("utf-8")
        write_uvarint(buf, len(data) + 1)
        buf += data


def write_int32s(buf: bytearray, values: tuple[int, ...]) -> None:
    write_uvarint(buf, len(values) + 1)
    buf += struct.pack(f">{len(values)}i", *values)


def write_structs(buf: bytearray, items: tuple, write_item: Callable[[bytearray, Any], None]) -> None:
    """Compact array of flexible structs: each element is written, then its (empty) tag section."""
    write_uvarint(buf, len(items) + 1)
    for item in items:
        write_item(buf, item)
        buf.append(0)


def write_topic_partitions(buf: bytearray, t: TopicPartitions) -> None:
    buf += t.topic_id.bytes
    write_int32s(buf, t.partitions)


def checked_encode(fn: Callable[..., bytes], *args: Any) -> bytes:
    """`fn(*args)`, with a field outside its wire type's range reported as a ValueError."""
    try:
        return fn(*args)
    except struct.error as exc:
        raise ValueError(f"field out of range: {exc}") from None


# ----------------------------------------------------------------------------- reading


class FieldReader:
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
        return self.unpack(I16)[0]

    def int32(self) -> int:
        return self.unpack(I32)[0]

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

    def structs(self, min_item_size: int, read_item: Callable[[FieldReader], Any]) -> tuple:
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


def read_topic_partitions(r: FieldReader) -> TopicPartitions:
    return TopicPartitions(r.uuid(), r.int32s())


def read_record_type(r: FieldReader) -> int:
    record_type = r.int16()
    if record_type < 0:
        raise r.fail(f"bad record type {record_type}")
    return record_type


def decode_value(value: bytes, what: str, read_fields: Callable[[FieldReader], Any],
                 top_tags: Mapping[int, int | None] | None = None) -> tuple[Any, dict[int, bytes]]:
    """Version check, the value's fields, its top-level tag section, nothing after it.
    `top_tags` maps each tag to return to its required payload size (None: any size).
    Returns (fields, payloads of the `top_tags` present)."""
    r = FieldReader(value, what)
    version = r.int16()
    if version != VALUE_VERSION:
        raise r.fail(f"unsupported value version {version}")
    fields = read_fields(r)
    top_tags = top_tags or {}
    payloads = r.tag_map(tuple(top_tags))
    r.end()
    for tag, payload in payloads.items():
        size = top_tags[tag]
        if size is not None and len(payload) != size:
            raise r.fail(f"tagged field {tag} has size {len(payload)}, expected {size}")
    return fields, payloads
