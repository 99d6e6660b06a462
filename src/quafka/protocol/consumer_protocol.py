"""The embedded consumer protocol of classic groups (Kafka's `ConsumerProtocol`): the bytes a
member sends as its subscription in JoinGroup and receives as its assignment in SyncGroup, which
the broker passes through and DescribeGroups returns. Only reading the assignment is needed here
(tools show which partitions each member holds):

    ConsumerProtocolAssignment (versions 0-3, non-flexible): int16 version, then
      AssignedPartitions: int32 count, each Topic string (int16 length), Partitions int32 count + int32s;
      UserData: nullable bytes (int32 length, -1 null).

Later versions add nothing to the assignment's layout; a version above 3 is read the same way, as
Kafka's `ConsumerProtocol.deserializeAssignment` reads any version with the highest schema.
"""

from __future__ import annotations

import struct

__all__ = ["decode_consumer_assignment"]

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
