"""The embedded consumer protocol of classic groups (Kafka's `ConsumerProtocol`): the bytes a
member sends as its subscription in JoinGroup and receives as its assignment in SyncGroup, which
the broker passes through and DescribeGroups returns. Tools read the assignment (which partitions
each member holds); a consumer group serving classic members (online migration) reads their
subscriptions and writes their assignments:

    ConsumerProtocolSubscription (versions 0-3, non-flexible): int16 version, Topics (int32 count,
      strings with int16 lengths), UserData (nullable bytes); v1+ OwnedPartitions (int32 count of
      Topic string + int32 partitions); v2+ GenerationId int32; v3+ RackId nullable string.

    ConsumerProtocolAssignment (versions 0-3, non-flexible): int16 version, then
      AssignedPartitions: int32 count, each Topic string (int16 length), Partitions int32 count + int32s;
      UserData: nullable bytes (int32 length, -1 null).

Later versions add nothing to the assignment's layout; a version above 3 is read the same way, as
Kafka's `ConsumerProtocol.deserializeAssignment` reads any version with the highest schema.
"""

from __future__ import annotations

import struct
from typing import Mapping, NamedTuple

__all__ = ["ConsumerSubscription", "consumer_protocol_version", "decode_consumer_assignment",
           "decode_consumer_subscription", "encode_consumer_assignment"]

HIGHEST_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def decode_consumer_assignment(data: bytes) -> dict[str, tuple[int, ...]]:
    """{topic: partitions} of an assignment; {} for empty bytes. ValueError for bytes that do not
    decode (a group whose protocol type is not "consumer" carries another layout)."""
    if not data:
        return {}
    pos = 0

    def take(st: struct.Struct) -> int:
        nonlocal pos
        if pos + st.size > len(data):
            raise ValueError(f"consumer assignment truncated at byte {pos} of {len(data)}")
        (value,) = st.unpack_from(data, pos)
        pos += st.size
        return value

    take(_I16)  # version
    topics: dict[str, tuple[int, ...]] = {}
    count = take(_I32)
    if count < 0 or count > len(data):
        raise ValueError(f"consumer assignment with a bad topic count {count}")
    for _ in range(count):
        length = take(_I16)
        if length < 0 or pos + length > len(data):
            raise ValueError("consumer assignment with a bad topic name length")
        name = data[pos:pos + length].decode("utf-8")
        pos += length
        n = take(_I32)
        if n < 0 or pos + 4 * n > len(data):
            raise ValueError("consumer assignment with a bad partition count")
        topics[name] = tuple(take(_I32) for _ in range(n))
    return topics


class ConsumerSubscription(NamedTuple):
    version: int
    topics: tuple[str, ...]
    owned_partitions: dict[str, tuple[int, ...]]
    generation_id: int = -1
    rack_id: str | None = None


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = data, 0, what

    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, st: struct.Struct) -> int:
        if self.pos + st.size > len(self.data):
            raise ValueError(f"{self.what} truncated at byte {self.pos} of {len(self.data)}")
        (value,) = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return value

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"{self.what} with a bad length {n} at byte {self.pos}")
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def string(self) -> str | None:
        n = self.take(_I16)
        return None if n == -1 else self.raw(n).decode("utf-8")

    def count(self) -> int:
        n = self.take(_I32)
        if n < 0 or n > self.left():
            raise ValueError(f"{self.what} with a bad array length {n}")
        return n


def consumer_protocol_version(data: bytes) -> int:
    """ConsumerProtocol.deserializeVersion: the int16 a subscription or an assignment starts with."""
    return _Reader(bytes(data), "consumer protocol").take(_I16)


def decode_consumer_subscription(data: bytes) -> ConsumerSubscription:
    """ConsumerProtocol.deserializeConsumerProtocolSubscription; a version above 3 is read as 3.
    ValueError for bytes that do not decode."""
    r = _Reader(bytes(data), "consumer subscription")
    version = r.take(_I16)
    if version < 0:
        raise ValueError(f"consumer subscription version {version}")
    topics = []
    for _ in range(r.count()):
        name = r.string()
        if name is None:
            raise ValueError("consumer subscription with a null topic")
        topics.append(name)
    user_data = r.take(_I32)
    if user_data >= 0:
        r.raw(user_data)
    owned: dict[str, tuple[int, ...]] = {}
    generation_id, rack_id = -1, None
    if version >= 1 and r.left():
        for _ in range(r.count()):
            name = r.string() or ""
            owned[name] = tuple(r.take(_I32) for _ in range(r.count()))
    if version >= 2 and r.left():
        generation_id = r.take(_I32)
    if version >= 3 and r.left():
        rack_id = r.string()
    return ConsumerSubscription(version, tuple(topics), owned, generation_id, rack_id)


def encode_consumer_assignment(partitions: Mapping[str, tuple[int, ...] | frozenset[int]], version: int) -> bytes:
    """ConsumerProtocol.serializeAssignment at `version` (above 3 written as 3), no user data."""
    out = bytearray(_I16.pack(min(max(version, 0), HIGHEST_VERSION)))
    out += _I32.pack(len(partitions))
    for topic in sorted(partitions):
        name = topic.encode("utf-8")
        out += _I16.pack(len(name)) + name
        ps = sorted(partitions[topic])
        out += _I32.pack(len(ps)) + struct.pack(f">{len(ps)}i", *ps)
    out += _I32.pack(-1)
    return bytes(out)
