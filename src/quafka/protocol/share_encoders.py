"""Hand-written encoders for the share-group hot responses: ShareFetch (key 78) and
ShareAcknowledge (key 79), versions 1 and 2 (KIP-932).

Each returns the complete frame (4-byte size prefix, response header v1 = correlation id and an
empty tag section, body) byte-identical to ``framing.encode_response`` over the equivalent kio
entity (``tests/protocol/test_share_encoders.py`` compares them), in the style of
``hot_encoders``: precompiled ``struct.Struct`` objects, one list of parts, a single
``b"".join``; record bytes (bytes or memoryview) are spliced in as given, never copied.

Every version served is flexible (compact lengths, a tag section per struct). No tagged fields
exist in these schemas, so every tag section is the single byte 0.

* ShareFetchResponse v1 = v2: ThrottleTimeMs, ErrorCode, ErrorMessage, AcquisitionLockTimeoutMs,
  Responses [TopicId, Partitions [PartitionIndex, ErrorCode, ErrorMessage, AcknowledgeErrorCode,
  AcknowledgeErrorMessage, CurrentLeader {LeaderId, LeaderEpoch}, Records, AcquiredRecords
  [FirstOffset, LastOffset, DeliveryCount]]], NodeEndpoints.
* ShareAcknowledgeResponse v1: ThrottleTimeMs, ErrorCode, ErrorMessage, Responses [TopicId,
  Partitions [PartitionIndex, ErrorCode, ErrorMessage, CurrentLeader {LeaderId, LeaderEpoch}]],
  NodeEndpoints. v2 adds AcquisitionLockTimeoutMs after ErrorMessage (ignored for v1).

NodeEndpoints is always written empty (quafka is a single broker and never answers
NOT_LEADER_OR_FOLLOWER with a new leader).

Signatures (``topics`` is a sequence of ``(topic_id, partitions)``; a topic_id of None is written
as the zero UUID, as kio does; error codes may be ints or ``ErrorCode`` members)::

    encode_share_fetch_response(version, correlation_id, topics=(), *, error_code=0,
        error_message=None, acquisition_lock_timeout_ms=0, throttle_time_ms=0) -> bytes
        # partitions: Sequence[ShareFetchPartitionResult]
    encode_share_acknowledge_response(version, correlation_id, topics=(), *, error_code=0,
        error_message=None, acquisition_lock_timeout_ms=0, throttle_time_ms=0) -> bytes
        # partitions: Sequence[ShareAcknowledgePartitionResult]
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

from .hot_encoders import (
    _EMPTY_TAGS,
    _I16,
    _I32,
    _ZERO_UUID,
    _append_nullable_string,
    _finish,
    _uvarint,
)

__all__ = [
    "SHARE_ACKNOWLEDGE_VERSIONS",
    "SHARE_FETCH_VERSIONS",
    "ShareAcknowledgePartitionResult",
    "ShareFetchPartitionResult",
    "encode_share_acknowledge_response",
    "encode_share_fetch_response",
]

SHARE_FETCH_VERSIONS = range(1, 3)
SHARE_ACKNOWLEDGE_VERSIONS = range(1, 3)


class ShareFetchPartitionResult(NamedTuple):
    index: int
    error_code: int
    acknowledge_error_code: int
    leader_id: int
    leader_epoch: int
    records: bytes | memoryview | None  # a non-null field; None is sent as empty
    acquired_records: Sequence[tuple[int, int, int]] = ()  # (first_offset, last_offset, delivery_count)
    error_message: str | None = None
    acknowledge_error_message: str | None = None


class ShareAcknowledgePartitionResult(NamedTuple):
    index: int
    error_code: int
    leader_id: int
    leader_epoch: int
    error_message: str | None = None


# (topic_id, partitions); topic_id is a uuid.UUID or None (written as 16 zero bytes).
ShareFetchTopic = tuple[Any, Sequence[ShareFetchPartitionResult]]
ShareAcknowledgeTopic = tuple[Any, Sequence[ShareAcknowledgePartitionResult]]

# A pad byte ("x") packs as 0: here a null compact string or an empty tag section.
_I32_I16 = struct.Struct(">ih")
_LEADER = struct.Struct(">iix")  # CurrentLeader: leader_id, leader_epoch, tags
# partition_index, error_code, null error_message, acknowledge_error_code,
# null acknowledge_error_message, current_leader (+ its tags)
_FETCH_PARTITION_NO_MESSAGES = struct.Struct(">ihxhxiix")
_ACQUIRED = struct.Struct(">qqhx")  # first_offset, last_offset, delivery_count, tags
# partition_index, error_code, null error_message, current_leader (+ its tags), partition tags
_ACK_PARTITION_NO_MESSAGE = struct.Struct(">ihxiixx")
_HEADER = struct.Struct(">ix")  # response header v1: correlation_id, tags
_NO_NODE_ENDPOINTS = b"\x01\x00"  # empty NodeEndpoints array, then the top-level tags


def _append_header(parts: list[Any], correlation_id: int, throttle_time_ms: int, error_code: int,
                   error_message: str | None) -> None:
    parts.append(_HEADER.pack(correlation_id))
    parts.append(_I32_I16.pack(throttle_time_ms, error_code))
    _append_nullable_string(parts, error_message, True)


def encode_share_fetch_response(
    version: int,
    correlation_id: int,
    topics: Sequence[ShareFetchTopic] = (),
    *,
    error_code: int = 0,
    error_message: str | None = None,
    acquisition_lock_timeout_ms: int = 0,
    throttle_time_ms: int = 0,
) -> bytes:
    """ShareFetchResponse *version* (1..2) with header and size prefix, as kio would encode it."""
    if version not in SHARE_FETCH_VERSIONS:
        raise ValueError(f"ShareFetch v{version} is not supported by the hand-written encoder")
    parts: list[Any] = [b""]  # parts[0]: the size placeholder
    _append_header(parts, correlation_id, throttle_time_ms, error_code, error_message)
    append = parts.append
    append(_I32.pack(acquisition_lock_timeout_ms))
    append(_uvarint(len(topics) + 1))
    for topic_id, partitions in topics:
        append(_ZERO_UUID if topic_id is None else topic_id.bytes)
        append(_uvarint(len(partitions) + 1))
        for p in partitions:
            if p.error_message is None and p.acknowledge_error_message is None:
                append(
                    _FETCH_PARTITION_NO_MESSAGES.pack(
                        p.index, p.error_code, p.acknowledge_error_code, p.leader_id, p.leader_epoch
                    )
                )
            else:
                append(_I32_I16.pack(p.index, p.error_code))
                _append_nullable_string(parts, p.error_message, True)
                append(_I16.pack(p.acknowledge_error_code))
                _append_nullable_string(parts, p.acknowledge_error_message, True)
                append(_LEADER.pack(p.leader_id, p.leader_epoch))
            records = p.records
            if records is None:
                records = b""
            elif not isinstance(records, bytes):
                records = memoryview(records).cast("B")  # so that len() counts bytes
            size = len(records)
            append(_uvarint(size + 1))
            if size:
                append(records)
            acquired = p.acquired_records
            append(_uvarint(len(acquired) + 1))
            for first_offset, last_offset, delivery_count in acquired:
                append(_ACQUIRED.pack(first_offset, last_offset, delivery_count))
            append(_EMPTY_TAGS)
        append(_EMPTY_TAGS)
    append(_NO_NODE_ENDPOINTS)
    return _finish(parts)


def encode_share_acknowledge_response(
    version: int,
    correlation_id: int,
    topics: Sequence[ShareAcknowledgeTopic] = (),
    *,
    error_code: int = 0,
    error_message: str | None = None,
    acquisition_lock_timeout_ms: int = 0,
    throttle_time_ms: int = 0,
) -> bytes:
    """ShareAcknowledgeResponse *version* (1..2) with header and size prefix, as kio would
    encode it. ``acquisition_lock_timeout_ms`` exists from v2 and is dropped for v1."""
    if version not in SHARE_ACKNOWLEDGE_VERSIONS:
        raise ValueError(f"ShareAcknowledge v{version} is not supported by the hand-written encoder")
    parts: list[Any] = [b""]
    _append_header(parts, correlation_id, throttle_time_ms, error_code, error_message)
    append = parts.append
    if version >= 2:
        append(_I32.pack(acquisition_lock_timeout_ms))
    append(_uvarint(len(topics) + 1))
    for topic_id, partitions in topics:
        append(_ZERO_UUID if topic_id is None else topic_id.bytes)
        append(_uvarint(len(partitions) + 1))
        for p in partitions:
            if p.error_message is None:
                append(_ACK_PARTITION_NO_MESSAGE.pack(p.index, p.error_code, p.leader_id, p.leader_epoch))
            else:
                append(_I32_I16.pack(p.index, p.error_code))
                _append_nullable_string(parts, p.error_message, True)
                append(_LEADER.pack(p.leader_id, p.leader_epoch))
                append(_EMPTY_TAGS)
        append(_EMPTY_TAGS)
    append(_NO_NODE_ENDPOINTS)
    return _finish(parts)
