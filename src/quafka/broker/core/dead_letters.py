"""Dead-letter queue records of share groups (KIP-1191, Kafka 4.4): what is written where, and
whether it may be written at all. Pure functions; `broker/server/dead_letter_writer.py` appends
what they build, for the `DeadLetterWrite` effects of the share partition.

Kafka's behaviour, from its source (notes/kip-1191-dlq-in-kafka-source.md has the details and the
class/method of each point):

- One DLQ record per source offset of an archived range, on partition `source partition % DLQ
  partitions` of the group's `errors.deadletterqueue.topic.name` (ShareGroupDLQStateManager
  .populateDLQTopicData), timestamped with the broker's wall clock when it is built.
- Headers, in this order, UTF-8 text with numbers in decimal: `__dlq.errors.topic`,
  `__dlq.errors.partition`, `__dlq.errors.offset`, `__dlq.errors.group`,
  `__dlq.errors.delivery.count`, `__dlq.errors.message` (the cause's message: "Offset rejected by
  client." or "Offset delivery count exceeded the threshold.").
- Key and value are copied only with `errors.deadletterqueue.copy.record.enable` and when the
  source record could be read; the source record's own headers and timestamp are not copied. A
  source record larger than the DLQ topic's max message size is written headers-only.
- Before writing, the DLQ topic is checked in this order, each failure archiving the record with
  no DLQ copy and no retry (ProduceRequestHandler.validateDlqTopic): a topic name configured; not
  starting with "__"; an existing topic opted in with `errors.deadletterqueue.group.enable`; a
  missing topic only with `errors.deadletterqueue.auto.create.topics.enable`; the name starting
  with `errors.deadletterqueue.topic.name.prefix` unless that prefix is empty.
- Records are packed into produce batches up to the DLQ topic's max message size; a single record
  over it is sent alone (and the broker refuses it as MESSAGE_TOO_LARGE, as Kafka's does).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

__all__ = [
    "DeadLetter", "DeadLetterCause", "DlqTopicView", "HEADER_DELIVERY_COUNT", "HEADER_GROUP", "HEADER_MESSAGE",
    "HEADER_OFFSET", "HEADER_PARTITION", "HEADER_TOPIC", "SourceRecord", "dead_letter_partition", "dead_letters",
    "cause_of", "header_map", "infer_cause", "pack", "validate_dlq_topic",
]

from quafka.protocol.dead_letter_headers import (
    HEADER_DELIVERY_COUNT,
    HEADER_GROUP,
    HEADER_MESSAGE,
    HEADER_OFFSET,
    HEADER_PARTITION,
    HEADER_REASON,
    HEADER_STATE_EPOCH,
    HEADER_TOPIC,
    MESSAGE_CLIENT_REJECT,
    MESSAGE_DELIVERY_COUNT_EXCEEDED,
    REASON_FORCE_ARCHIVED,
    REASON_KEY_FAILED,
    REASON_RECOVERED,
    REASON_REJECTED,
    dead_letter_headers,
)

# DefaultRecordBatch.RECORD_BATCH_OVERHEAD: what a batch header adds to the records in it
RECORD_BATCH_OVERHEAD = 61


class DeadLetterCause(enum.Enum):
    """Why a record went to the DLQ (ShareGroupDLQManager's cause messages)."""

    CLIENT_REJECT = MESSAGE_CLIENT_REJECT
    DELIVERY_COUNT_EXCEEDED = MESSAGE_DELIVERY_COUNT_EXCEEDED
    # quafka's extensions, which Kafka has no cause for (docs/share-groups.md, "Extensions")
    FORCE_ARCHIVED = "Offset archived by an operator."
    KEY_FAILED = "An earlier record with the same key was dead-lettered."


def infer_cause(delivery_count: int, max_delivery_count: int) -> DeadLetterCause:
    """The cause of a record found ARCHIVING at start-up, which Kafka does not persist
    (SharePartition.maybeResumeDlqArchiving): at the limit it was the limit, else a REJECT."""
    if delivery_count >= max_delivery_count:
        return DeadLetterCause.DELIVERY_COUNT_EXCEEDED
    return DeadLetterCause.CLIENT_REJECT


def cause_of(reason: str, delivery_count: int, max_delivery_count: int) -> DeadLetterCause:
    """Kafka's cause for one of quafka's reasons (`dead_letter_headers.REASONS`)."""
    if reason == REASON_RECOVERED:
        return infer_cause(delivery_count, max_delivery_count)
    if reason == REASON_FORCE_ARCHIVED:
        return DeadLetterCause.FORCE_ARCHIVED
    if reason == REASON_KEY_FAILED:
        return DeadLetterCause.KEY_FAILED
    return DeadLetterCause.CLIENT_REJECT if reason == REASON_REJECTED else DeadLetterCause.DELIVERY_COUNT_EXCEEDED


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """What is copied from the source record when copying is on."""

    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One record to append to the DLQ topic."""

    partition: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]

    def size_bytes(self) -> int:
        """An upper bound of its size in a v2 batch (DefaultRecord.sizeInBytes: varints counted at
        their widest, 5 bytes, so that a packed batch never exceeds the limit)."""
        size = 1 + 5 + 5 + 5 + 5 + len(self.key or b"") + 5 + len(self.value or b"") + 5
        for name, value in self.headers:
            size += 5 + len(name.encode()) + 5 + len(value)
        return size


@dataclass(frozen=True, slots=True)
class DlqTopicView:
    """What the broker knows of the DLQ topic when a dead letter is to be written."""

    exists: bool
    opted_in: bool  # its errors.deadletterqueue.group.enable
    partitions: int = 0
    max_message_bytes: int = 1048588


def validate_dlq_topic(group_id: str, topic: str, view: DlqTopicView, *, auto_create: bool,
                       prefix: str) -> str | None:
    """None when the group's dead letters may be written to `topic`, else Kafka's message of the
    first check that fails (ShareGroupDLQStateManager.ProduceRequestHandler.validateDlqTopic)."""
    if not topic:
        return f"Configured DLQ topic name in share group: {group_id} is empty."
    if topic.startswith("__"):
        return f"Configured DLQ topic name in share group: {group_id} cannot start with __, topic: {topic}."
    if view.exists and not view.opted_in:
        return f"DLQ is not enabled on configured DLQ topic for share group: {group_id}, topic: {topic}."
    if not view.exists and not auto_create:
        return (f"DLQ topic does not exist and auto create is disabled on cluster for share group: {group_id}, "
                f"topic: {topic}.")
    if prefix and not topic.startswith(prefix):
        return (f"Configured DLQ topic name does not comply with the DLQ topic prefix in share group: {group_id}, "
                f"topic: {topic}, prefix: {prefix}.")
    return None


def dead_letter_partition(source_partition: int, dlq_partitions: int) -> int:
    """The DLQ partition of a source partition's dead letters: the same index modulo the count."""
    if dlq_partitions < 1:
        raise ValueError(f"a DLQ topic has at least one partition, not {dlq_partitions}")
    return source_partition % dlq_partitions


def dead_letters(*, group_id: str, topic: str, partition: int, first_offset: int, last_offset: int,
                 delivery_count: int, cause: DeadLetterCause | None, dlq_partitions: int, now_ms: int,
                 copy: bool = False, source: Callable[[int], SourceRecord | None] | None = None,
                 max_message_bytes: int = 1048588, reason: str | None = None,
                 state_epoch: int | None = None) -> list[DeadLetter]:
    """The DLQ records of source offsets [first_offset, last_offset]. With `copy`, `source(offset)`
    gives the source record (None: gone, e.g. compacted or deleted: headers only); a source record
    whose key and value alone exceed `max_message_bytes` is written headers-only. `reason`, when
    given, is quafka's `quafka.dlq.reason` header, after Kafka's six; `state_epoch` its
    `quafka.dlq.state.epoch`."""
    if last_offset < first_offset or first_offset < 0:
        raise ValueError(f"DLQ records parameters: bad offset range [{first_offset}, {last_offset}]")
    target = dead_letter_partition(partition, dlq_partitions)
    out = []
    for offset in range(first_offset, last_offset + 1):
        headers = dead_letter_headers(topic, partition, offset, group_id, delivery_count,
                                      cause.value if cause is not None else None, reason=reason,
                                      extra=((HEADER_STATE_EPOCH, str(state_epoch)),) if state_epoch is not None else ())
        key = value = None
        if copy and source is not None:
            record = source(offset)
            if record is not None and len(record.key or b"") + len(record.value or b"") <= max_message_bytes:
                key, value = record.key, record.value
        out.append(DeadLetter(target, now_ms, key, value, tuple(headers)))
    return out


def pack(records: Sequence[DeadLetter], max_message_bytes: int) -> list[list[DeadLetter]]:
    """Produce batches of at most `max_message_bytes` (batch overhead included), in order; a record
    that does not fit even alone forms its own batch (ShareGroupDLQStateManager.topicProduceData)."""
    batches: list[list[DeadLetter]] = []
    current: list[DeadLetter] = []
    size = RECORD_BATCH_OVERHEAD
    for record in records:
        record_size = record.size_bytes()
        if current and size + record_size > max_message_bytes:
            batches.append(current)
            current, size = [], RECORD_BATCH_OVERHEAD
        current.append(record)
        size += record_size
    if current:
        batches.append(current)
    return batches


def header_map(headers: Iterable[tuple[str, bytes | None]]) -> dict[str, str]:
    """The `__dlq.errors.*` headers (and quafka's reason) of a DLQ record as text."""
    return {name: (value or b"").decode("utf-8", "replace") for name, value in headers
            if name.startswith("__dlq.") or name == HEADER_REASON}
