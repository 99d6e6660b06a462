"""A hand-written encoder for the share consumer's hot request: ShareFetch (key 78) v1 and v2.

quafka's ShareConsumer sends one ShareFetch per poll; at `max.poll.records=1` (a job queue) that is
one per record, and building a kio entity and writing it with kio's generic (pure-Python) writer
was the largest part of the client's CPU per poll (docs/benchmarks.md, "One job, one request").
This writes the same bytes straight from the values mapping the client builds
(`client/_share_session.py`, `ShareSession.fetch_values`), in the style of `share_encoders`:
precompiled `struct.Struct`s, one list of parts, one `b"".join`. tests/protocol/
test_share_request_encoders.py compares it with kio's writer for random requests of both versions.

Layout (Kafka's clients/src/main/resources/common/message/ShareFetchRequest.json; every version is
flexible): request header v2 — int16 key, int16 version, int32 correlation id, the client id as a
nullable *int16-length* string, an empty tag section — then GroupId and MemberId (compact nullable
strings), ShareSessionEpoch, MaxWaitMs, MinBytes, MaxBytes, MaxRecords, BatchSize (int32), from v2
ShareAcquireMode (int8) and IsRenewAck (bool), Topics [TopicId, Partitions [PartitionIndex,
AcknowledgementBatches [FirstOffset, LastOffset, AcknowledgeTypes [int8]]]], ForgottenTopicsData
[TopicId, Partitions [int32]]; a tag section (one zero byte: none of these fields is tagged) after
every structure.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from .varint import uvarint_bytes as _uvarint

__all__ = ["SHARE_FETCH_REQUEST_VERSIONS", "encode_share_fetch_request"]

SHARE_FETCH_REQUEST_VERSIONS = (1, 2)

_HEADER = struct.Struct(">hhih")  # key, version, correlation id, client id length
_FIXED = struct.Struct(">iiiiii")  # epoch, max wait, min bytes, max bytes, max records, batch size
_MODE_RENEW = struct.Struct(">bb")
_I32 = struct.Struct(">i")
_BATCH = struct.Struct(">qq")
_ZERO_UUID = bytes(16)
_TAGS = b"\x00"


def _compact_nullable_string(parts: list[Any], value: str | None) -> None:
    if value is None:
        parts.append(b"\x00")
    else:
        data = value.encode("utf-8")
        parts.append(_uvarint(len(data) + 1))
        parts.append(data)


def _millis(value: Any) -> int:
    """Milliseconds from an int or a timedelta (duck-typed: protocol/ imports no clock module)."""
    total_seconds = getattr(value, "total_seconds", None)
    return int(value) if total_seconds is None else round(total_seconds() * 1000)


def _uuid_bytes(value: Any) -> bytes:
    return _ZERO_UUID if value is None else value.bytes


def encode_share_fetch_request(version: int, correlation_id: int, client_id: str | None,
                               values: Mapping[str, Any]) -> bytes:
    """The complete frame (size prefix, request header v2, body) of a ShareFetch from `values`
    (the keys of kio's ShareFetchRequest fields; nested structures as mappings; MaxWait as
    milliseconds or a timedelta; a key this version lacks, such as PartitionMaxBytes, is left out
    as kio's builder leaves it out)."""
    if version not in SHARE_FETCH_REQUEST_VERSIONS:
        raise ValueError(f"ShareFetch v{version}: the hand-written encoder writes v1 and v2")
    parts: list[Any] = []
    if client_id is None:
        parts.append(_HEADER.pack(78, version, correlation_id, -1))
    else:
        cid = client_id.encode("utf-8")
        parts.append(_HEADER.pack(78, version, correlation_id, len(cid)))
        parts.append(cid)
    parts.append(_TAGS)
    _compact_nullable_string(parts, values.get("group_id"))
    _compact_nullable_string(parts, values.get("member_id"))
    parts.append(_FIXED.pack(values["share_session_epoch"], _millis(values["max_wait"]), values["min_bytes"],
                             values["max_bytes"], values["max_records"], values["batch_size"]))
    if version >= 2:
        parts.append(_MODE_RENEW.pack(values.get("share_acquire_mode", 0), 1 if values.get("is_renew_ack") else 0))
    topics: Sequence[Mapping[str, Any]] = values.get("topics") or ()
    parts.append(_uvarint(len(topics) + 1))
    for topic in topics:
        parts.append(_uuid_bytes(topic.get("topic_id")))
        partitions = topic.get("partitions") or ()
        parts.append(_uvarint(len(partitions) + 1))
        for partition in partitions:
            parts.append(_I32.pack(partition["partition_index"]))
            batches = partition.get("acknowledgement_batches") or ()
            parts.append(_uvarint(len(batches) + 1))
            for batch in batches:
                parts.append(_BATCH.pack(batch["first_offset"], batch["last_offset"]))
                types = batch["acknowledge_types"]
                parts.append(_uvarint(len(types) + 1))
                parts.append(struct.pack(f">{len(types)}b", *types))
                parts.append(_TAGS)
            parts.append(_TAGS)
        parts.append(_TAGS)
    forgotten: Sequence[Mapping[str, Any]] = values.get("forgotten_topics_data") or ()
    parts.append(_uvarint(len(forgotten) + 1))
    for topic in forgotten:
        parts.append(_uuid_bytes(topic.get("topic_id")))
        indexes = topic.get("partitions") or ()
        parts.append(_uvarint(len(indexes) + 1))
        parts.append(struct.pack(f">{len(indexes)}i", *indexes))
        parts.append(_TAGS)
    parts.append(_TAGS)
    body = b"".join(parts)
    return _I32.pack(len(body)) + body
