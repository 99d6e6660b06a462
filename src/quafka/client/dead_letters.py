"""Dead letters of share groups (KIP-1191): list them from a DLQ topic, and redrive them.

Everything here works only through topics and groups, so it serves a quafka broker and Apache
Kafka 4.4 alike:

- **Listing** reads every partition of the DLQ topic from its log start to its end offset at call
  time (``PartitionReader``'s plain Fetch, no group) and keeps the records whose
  ``__dlq.errors.group`` header names the share group (and, optionally, whose source topic is the
  one asked for). A record without the dead-letter headers is not a dead letter and is left out.
  The reason is quafka's ``quafka.dlq.reason`` header; on a record without it (Apache Kafka's)
  it is inferred from ``__dlq.errors.message``: a client REJECT is "rejected", the delivery count
  exceeded is "delivery-limit" (which of RELEASE, lock expiry or session end cannot be told).
  The error (exception class and message, error id, route) comes from the ``quafka.error.*``
  headers of a letter the worker framework wrote; the broker never sees the exception, so its
  letters have none (older framework letters carry "Class: message" in ``quafka.dlq.error``).
- **Still failing**: ``still_failing`` tells, before a redrive sends anything, whether the
  group's workers were failing on the same exception classes lately (letters written within a
  window, and letters of jobs that had been redriven before and died again), so that a redrive
  into broken workers is noticed.
- **Redrive** produces each selected dead letter again: the DLQ record's key, value and headers
  (the ``__dlq.errors.*`` and ``quafka.dlq.*`` ones left out) when it holds a copy, otherwise the
  original record fetched from its source topic, partition and offset, with the original's
  headers (never the ``quafka.error.*`` ones of a dead letter the worker framework wrote: they
  describe that letter's failure, not the job); a source record that retention (or compaction) removed is skipped as "source record no
  longer in the log" — once: such a letter can never be redriven, so it is then recorded as
  handled and does not hold the committed offset back. Either way the record gets the
  ``quafka.redrive.dlq.*`` headers naming the dead letter. The target is ``to_topic``, else the source topic; the producer's partitioner
  chooses the partition from the key (the source partition is not kept: the target may have other
  partitions). The producer is confluent-kafka's, idempotent with acks=all; its record timestamp
  is the time of the redrive.
- **Progress** makes a repeated redrive send nothing twice. It is kept as the committed offsets of
  the consumer group ``quafka-redrive.<share group>`` on the DLQ topic's partitions: a committed
  offset C means every dead letter of the group below C was redriven (or was no dead letter of the
  group); the metadata string ``redriven:a-b,c,d-e`` lists the DLQ offset ranges above C that were
  redriven too (holes left by ``offsets`` ranges). The ranges stretch over offsets holding nothing
  of this group, so they stay few, and the string is kept under 4 KB (Kafka's default
  offset.metadata.max.bytes); a redrive that would need more is refused before it sends anything.
  The offsets are committed after the producer's flush has confirmed delivery; a redrive that
  fails in between sends those records again next time (at-least-once). Two redrives of one group
  at the same time are not coordinated.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from quafka.protocol import dead_letter_headers as h
from quafka.protocol.errors import ErrorCode

from ._security import SECURITY_CONFIG, librdkafka_security_config
from .errors import KafkaException
from .reader import AsyncPartitionReader
from .records import Record

__all__ = ["DLQ_TOPIC_CONFIG", "DeadLetterRecord", "FAILING_WINDOW_MS", "FailingClass", "PartitionProgress",
           "REASON_DELIVERY_LIMIT", "RedriveItem", "RedriveResult", "advance", "dead_letter_headers", "decode_dead_letter",
           "describe_progress", "dlq_topic_of", "format_redriven", "infer_reason", "merge_ranges", "parse_redriven",
           "pending_letters", "progress_group", "read_dead_letters", "redrive", "still_failing"]

DLQ_TOPIC_CONFIG = "errors.deadletterqueue.topic.name"
PROGRESS_GROUP_PREFIX = "quafka-redrive."
METADATA_PREFIX = "redriven:"
MAX_METADATA_BYTES = 4000  # Kafka's offset.metadata.max.bytes is 4096
REASON_DELIVERY_LIMIT = "delivery-limit"  # inferred: the delivery count was exceeded, cause unknown

# a redrive item's status
SEND = "send"                          # dry run: would be sent
SENT = "sent"
ALREADY_REDRIVEN = "already-redriven"
SOURCE_MISSING = "source-missing"      # a headers-only letter whose source record is gone
MISSING_TEXT = "source record no longer in the log"
# where a redriven record's key and value come from
PAYLOAD_COPY = "dlq-copy"
PAYLOAD_SOURCE = "source"

HEADER_ERROR = "quafka.dlq.error"  # a client-written dead letter: what failed (the exception's text)
# not copied onto a redriven record: they describe a dead letter (and an earlier redrive), not the job
_DROPPED_HEADER_PREFIXES = ("__dlq.errors.", "quafka.dlq.", "quafka.redrive.", "quafka.error.")
#: how far back ``still_failing`` looks for letters of the same exception class (5 minutes)
FAILING_WINDOW_MS = 5 * 60 * 1000


@dataclass(frozen=True)
class DeadLetterRecord:
    """One dead letter: where it lies in the DLQ topic, when it died (the DLQ record's timestamp,
    the broker's wall clock), the source record it stands for, and its key and value when the
    broker copied them (``has_copy``; both None when only the headers were kept). ``error_class``,
    ``error_message``, ``error_id`` and ``route`` say why the worker framework gave up on it (None
    on a letter the broker wrote: the broker never sees the exception)."""

    dlq_topic: str
    dlq_partition: int
    dlq_offset: int
    timestamp_ms: int
    group: str
    topic: str
    partition: int
    offset: int
    delivery_count: int | None
    message: str
    reason: str | None
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()  # every header of the DLQ record, in order
    error_class: str | None = None
    error_message: str | None = None
    error_id: str | None = None
    route: str | None = None

    @property
    def has_copy(self) -> bool:
        return self.key is not None or self.value is not None

    def header(self, name: str) -> str | None:
        """The first header ``name`` as text (UTF-8, bad bytes replaced); None when absent."""
        for each, value in self.headers:
            if each == name:
                return None if value is None else value.decode("utf-8", errors="replace")
        return None

    @property
    def error_traceback(self) -> str | None:
        return self.header(h.HEADER_ERROR_TRACEBACK)

    @property
    def redriven_from(self) -> tuple[str, int, int] | None:
        """(DLQ topic, partition, offset) of the earlier dead letter whose redrive this job was,
        when the letter carries the source record's ``quafka.redrive.dlq.*`` headers (the worker
        framework copies them; the broker does not); None otherwise."""
        topic, partition, offset = (self.header(n) for n in (h.HEADER_REDRIVE_TOPIC, h.HEADER_REDRIVE_PARTITION,
                                                              h.HEADER_REDRIVE_OFFSET))
        if topic is None or partition is None or offset is None:
            return None
        try:
            return topic, int(partition), int(offset)
        except ValueError:
            return None

    @property
    def died_at(self) -> str:
        """The timestamp as ISO-8601 UTC with milliseconds, e.g. 2026-01-31T09:00:00.000Z."""
        moment = datetime.datetime.fromtimestamp(self.timestamp_ms / 1000, datetime.timezone.utc)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.timestamp_ms % 1000:03d}Z"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; key and value as text when they are UTF-8, else as {"base64": ...}."""
        return {"group": self.group, "topic": self.topic, "partition": self.partition, "offset": self.offset,
                "delivery_count": self.delivery_count, "reason": self.reason, "message": self.message,
                "died_at": self.died_at, "timestamp_ms": self.timestamp_ms, "dlq_topic": self.dlq_topic,
                "dlq_partition": self.dlq_partition, "dlq_offset": self.dlq_offset, "copy": self.has_copy,
                "key": _json_bytes(self.key), "value": _json_bytes(self.value), "error_class": self.error_class,
                "error_message": self.error_message, "error_traceback": self.error_traceback,
                "error_id": self.error_id, "route": self.route}


@dataclass(frozen=True)
class RedriveItem:
    """What a redrive does (or, in a dry run, would do) with one dead letter: ``status`` is "send"
    (dry run), "sent", "already-redriven" or "source-missing"; ``payload`` "dlq-copy" or "source"."""

    letter: DeadLetterRecord
    status: str
    target_topic: str
    payload: str

    @property
    def skip_reason(self) -> str | None:
        return {ALREADY_REDRIVEN: "already redriven", SOURCE_MISSING: MISSING_TEXT}.get(self.status)


@dataclass
class RedriveResult:
    """The outcome of a redrive: ``planned`` holds one item per selected dead letter, in DLQ order."""

    group: str
    dlq_topic: str
    dry_run: bool
    planned: list[RedriveItem] = field(default_factory=list)

    def _with(self, *statuses: str) -> list[RedriveItem]:
        return [i for i in self.planned if i.status in statuses]

    @property
    def sent(self) -> list[RedriveItem]:
        """Items sent (in a dry run: those that would be sent)."""
        return self._with(SENT, SEND)

    @property
    def skipped_already_redriven(self) -> list[RedriveItem]:
        return self._with(ALREADY_REDRIVEN)

    @property
    def skipped_missing(self) -> list[RedriveItem]:
        return self._with(SOURCE_MISSING)


# ----------------------------------------------------------------------------- decoding

def _json_bytes(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(bytes(data)).decode("ascii")}


def _text(headers: Mapping[str, bytes | None], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        return None
    return bytes(value).decode("utf-8", errors="replace")


def _number(headers: Mapping[str, bytes | None], name: str) -> int | None:
    text = _text(headers, name)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def infer_reason(reason_header: str | None, message: str) -> str | None:
    """quafka's reason header when present, else what Kafka's cause message tells."""
    if reason_header:
        return reason_header
    if message == h.MESSAGE_CLIENT_REJECT:
        return h.REASON_REJECTED
    if message == h.MESSAGE_DELIVERY_COUNT_EXCEEDED:
        return REASON_DELIVERY_LIMIT
    return None


def decode_dead_letter(record: Record) -> DeadLetterRecord | None:
    """The dead letter a DLQ record holds; None when it lacks the group, topic, partition or offset
    header (not a dead letter). The first occurrence of a repeated header wins."""
    headers: dict[str, bytes | None] = {}
    for name, value in record.headers:
        headers.setdefault(name, value)
    group, topic = _text(headers, h.HEADER_GROUP), _text(headers, h.HEADER_TOPIC)
    partition, offset = _number(headers, h.HEADER_PARTITION), _number(headers, h.HEADER_OFFSET)
    if group is None or topic is None or partition is None or offset is None:
        return None
    message = _text(headers, h.HEADER_MESSAGE) or ""
    key = None if record.key is None else bytes(record.key)
    value = None if record.value is None else bytes(record.value)
    error_class, error_message = _error(headers)
    return DeadLetterRecord(record.topic, record.partition, record.offset, record.timestamp, group, topic,
                            partition, offset, _number(headers, h.HEADER_DELIVERY_COUNT), message,
                            infer_reason(_text(headers, h.HEADER_REASON), message), key, value,
                            tuple((n, None if v is None else bytes(v)) for n, v in record.headers),
                            error_class, error_message, _text(headers, h.HEADER_ERROR_ID),
                            _text(headers, h.HEADER_ERROR_ROUTE))


_CLASS_NAME = re.compile(r"[A-Za-z_][\w.]*")


def _error(headers: Mapping[str, bytes | None]) -> tuple[str | None, str | None]:
    """(exception class, message) of a framework-written letter: the ``quafka.error.*`` headers,
    else the older ``quafka.dlq.error`` "Class: message" text; (None, None) on the broker's."""
    error_class, error_message = _text(headers, h.HEADER_ERROR_CLASS), _text(headers, h.HEADER_ERROR_MESSAGE)
    if error_class is not None or error_message is not None:
        return error_class, error_message
    legacy = _text(headers, HEADER_ERROR)
    if legacy is None:
        return None, None
    name, separator, text = legacy.partition(": ")
    if separator and _CLASS_NAME.fullmatch(name):
        return name, text
    return None, legacy


# ----------------------------------------------------------------------------- progress metadata

def dead_letter_headers(topic: str, partition: int, offset: int, group_id: str, delivery_count: int, *,
                        rejected: bool, reason: str | None = None, error: str | None = None) -> list[tuple[str, bytes]]:
    """The headers of a dead letter written by a client rather than the broker (the worker
    framework, against a broker without share.version 2): Kafka's six, in Kafka's order and words
    (``rejected``: the client rejected it, else the delivery count ran out), then quafka's reason
    and, when given, ``quafka.dlq.error`` with the failure's text."""
    return h.dead_letter_headers(topic, partition, offset, group_id, delivery_count,
                                 h.MESSAGE_CLIENT_REJECT if rejected else h.MESSAGE_DELIVERY_COUNT_EXCEEDED,
                                 reason=reason, extra=((HEADER_ERROR, error),) if error is not None else ())


def progress_group(group_id: str) -> str:
    """The consumer group that keeps a share group's redrive progress."""
    return PROGRESS_GROUP_PREFIX + group_id


def parse_redriven(metadata: str) -> list[tuple[int, int]]:
    """'redriven:12-15,20,22-23' → [(12, 15), (20, 20), (22, 23)]; anything else → []."""
    if not metadata or not metadata.startswith(METADATA_PREFIX):
        return []
    out = []
    for part in metadata[len(METADATA_PREFIX):].split(","):
        first, _, last = part.strip().partition("-")
        try:
            out.append((int(first), int(last or first)))
        except ValueError:
            continue
    return merge_ranges(out)


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, with overlapping and adjacent ranges joined."""
    out: list[tuple[int, int]] = []
    for first, last in sorted(r for r in ranges if r[0] <= r[1]):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


def format_redriven(ranges: Iterable[tuple[int, int]]) -> str:
    """[(12, 15), (20, 20)] → 'redriven:12-15,20'; no ranges → ''."""
    merged = merge_ranges(ranges)
    if not merged:
        return ""
    return METADATA_PREFIX + ",".join(str(a) if a == b else f"{a}-{b}" for a, b in merged)


@dataclass(frozen=True)
class PartitionProgress:
    """A DLQ partition's redrive progress: every letter below ``committed`` is done, and those in
    ``ranges`` above it."""

    committed: int = 0
    ranges: tuple[tuple[int, int], ...] = ()

    def done(self, offset: int) -> bool:
        return offset < self.committed or any(a <= offset <= b for a, b in self.ranges)


def advance(progress: PartitionProgress, group_offsets: Sequence[int], newly_done: Iterable[int],
            end_offset: int) -> tuple[int, str]:
    """The (committed offset, metadata) after ``newly_done`` letters were redriven. ``group_offsets``
    are the DLQ offsets of every letter of the group in the partition read up to ``end_offset``.
    The committed offset moves to the first letter still pending (the end when none is); the ranges
    cover the stretches between pending letters that hold a redriven one."""
    newly = set(newly_done)
    pending = sorted(o for o in group_offsets if o >= progress.committed and o not in newly
                     and not progress.done(o))
    committed = pending[0] if pending else max(end_offset, progress.committed)
    ranges: list[tuple[int, int]] = []
    bounds = pending + [end_offset]
    done_offsets = sorted(o for o in group_offsets if o >= committed and (o in newly or progress.done(o)))
    for low, high in zip(bounds, bounds[1:]):
        if any(low < o < high for o in done_offsets):
            ranges.append((low + 1, high - 1))
    # ranges recorded earlier beyond what this read saw (the log end moved back?) are kept as they were
    ranges += [r for r in progress.ranges if r[1] >= end_offset]
    return committed, format_redriven(ranges)


# ----------------------------------------------------------------------------- reading

def _security(config: Mapping[str, Any]) -> dict[str, Any]:
    """The Admin's security settings that were given (not left at their defaults): the reader and
    the redrive producer connect as the Admin does (TLS, SASL)."""
    return {k: v for k, v in config.items() if k in SECURITY_CONFIG and v != SECURITY_CONFIG[k].default}


def _reader(admin: Any) -> AsyncPartitionReader:
    config = admin.config
    return AsyncPartitionReader({"bootstrap.servers": config["bootstrap.servers"],
                                 "client.id": config["client.id"],
                                 "request.timeout.ms": config["request.timeout.ms"], **_security(config)})


async def dlq_topic_of(admin: Any, group_id: str) -> str:
    """The group's ``errors.deadletterqueue.topic.name``; KafkaException when it is not set."""
    name = ((await admin.describe_configs("group", group_id)).get(DLQ_TOPIC_CONFIG) or "").strip()
    if not name:
        raise KafkaException(f"Share group {group_id} has no dead-letter queue topic "
                             f"({DLQ_TOPIC_CONFIG} is not set).")
    return name


async def _log_ranges(admin: Any, topic: str) -> dict[int, tuple[int, int]]:
    """{partition: (log start offset, end offset)} of a topic."""
    partitions = sorted((await admin.describe_topics([topic]))[topic].partitions)
    tps = [(topic, p) for p in partitions]
    earliest = await admin.list_offsets({tp: "earliest" for tp in tps})
    latest = await admin.list_offsets({tp: "latest" for tp in tps})
    return {p: (earliest[(topic, p)][0], latest[(topic, p)][0]) for p in partitions}


async def _read_letters(admin: Any, dlq_topic: str, group_id: str, topic: str | None = None,
                        limit: int | None = None) -> tuple[list[DeadLetterRecord], dict[int, int]]:
    """The group's dead letters in DLQ order, and {partition: end offset read to}; ``limit``: only
    the newest ``limit`` of each DLQ partition (read backwards from its end, `_newest_letters`)."""
    ranges = await _log_ranges(admin, dlq_topic)

    def keep(letter: DeadLetterRecord | None) -> bool:
        return letter is not None and letter.group == group_id and (topic is None or letter.topic == topic)

    letters: list[DeadLetterRecord] = []
    async with _reader(admin) as reader:
        for partition, (start, end) in ranges.items():
            if end <= start:
                continue
            if limit is not None:
                letters += await _newest_letters(reader, dlq_topic, partition, start, end, limit, keep)
                continue
            async for chunk in reader.read_chunks(dlq_topic, partition, start, end):
                letters += [letter for letter in map(decode_dead_letter, chunk) if keep(letter)]
    return letters, {p: end for p, (_, end) in ranges.items()}


async def _newest_letters(reader: AsyncPartitionReader, dlq_topic: str, partition: int, start: int, end: int,
                          limit: int, keep: Callable[[DeadLetterRecord | None], bool]) -> list[DeadLetterRecord]:
    """The newest ``limit`` letters ``keep`` accepts in [start, end) of a DLQ partition, in offset
    order: windows read backwards from the end, each twice the last (a DLQ shared with other
    groups holds their letters too), until enough are found or the log start is reached."""
    windows: list[list[DeadLetterRecord]] = []  # newest first
    found, high, size = 0, end, max(limit, 1)
    while limit > 0 and high > start and found < limit:
        low = max(start, high - size)
        window: list[DeadLetterRecord] = []
        async for chunk in reader.read_chunks(dlq_topic, partition, low, high):
            window += [letter for letter in map(decode_dead_letter, chunk) if keep(letter)]
        windows.append(window)
        found += len(window)
        high, size = low, size * 2
    letters = [letter for window in reversed(windows) for letter in window]
    return letters[len(letters) - limit:] if len(letters) > limit else letters


async def read_dead_letters(admin: Any, group_id: str, dlq_topic: str | None = None,
                            topic: str | None = None, limit: int | None = None) -> list[DeadLetterRecord]:
    """The dead letters of ``group_id`` in its DLQ topic (``dlq_topic``, else the group's config),
    ordered by DLQ partition and offset; ``topic`` keeps those of one source topic; ``limit``
    keeps the newest ``limit`` of each DLQ partition, reading only as far back as it takes
    (None: every letter, read from the log start)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise KafkaException(f"limit must be None or an int >= 0, not {limit!r}", ErrorCode.invalid_request)
    dlq_topic = dlq_topic or await dlq_topic_of(admin, group_id)
    return (await _read_letters(admin, dlq_topic, group_id, topic, limit))[0]


async def describe_progress(admin: Any, group_id: str, dlq_topic: str,
                            partitions: Iterable[int]) -> dict[int, PartitionProgress]:
    """{DLQ partition: its redrive progress} from the progress group's committed offsets."""
    committed = await admin.list_consumer_group_offsets(progress_group(group_id),
                                                        [(dlq_topic, p) for p in partitions])
    return {p: PartitionProgress(offset, tuple(parse_redriven(metadata)))
            for (_, p), (offset, metadata) in committed.items()}


# ----------------------------------------------------------------------------- still failing?

def pending_letters(letters: Iterable[DeadLetterRecord], progress: Mapping[int, PartitionProgress],
                    offsets: Any = None) -> list[DeadLetterRecord]:
    """The letters a redrive with ``offsets`` (as ``redrive`` takes it) would handle now: selected
    and not redriven yet according to ``progress`` (``describe_progress``)."""
    return [letter for letter in letters if _selected(letter, offsets)
            and not progress.get(letter.dlq_partition, PartitionProgress()).done(letter.dlq_offset)]


@dataclass(frozen=True)
class FailingClass:
    """Why a redrive of letters with ``error_class`` may die again. Of the group's dead letters
    with that class: ``recent`` were written within the window, the newest at
    ``recent_newest_ms``; ``died_again`` are letters of jobs that were themselves redriven from
    the DLQ earlier (written within the window, or among those being redriven now), the newest at
    ``died_again_newest_ms``. ``redriving``: how many letters of the class the redrive would send."""

    error_class: str
    redriving: int
    recent: int
    recent_newest_ms: int | None
    died_again: int
    died_again_newest_ms: int | None


def still_failing(letters: Iterable[DeadLetterRecord], redriving: Iterable[DeadLetterRecord], now_ms: int,
                  window_ms: int = FAILING_WINDOW_MS) -> list[FailingClass]:
    """The exception classes of the letters about to be redriven (``redriving``) on which the
    group's workers were failing lately, judged from all the group's letters (``letters``): a
    letter of the class written within ``window_ms`` before ``now_ms`` (the workers failed on it
    that recently), or a letter of a job that had been redriven before and died again. Letters
    without an error class (the broker's) count for nothing. Most evidence first; a window of 0
    (or less) turns the check off."""
    if window_ms <= 0:
        return []
    redriving = list(redriving)
    counts: dict[str, int] = {}
    for letter in redriving:
        if letter.error_class:
            counts[letter.error_class] = counts.get(letter.error_class, 0) + 1
    if not counts:
        return []
    chosen = {(letter.dlq_partition, letter.dlq_offset) for letter in redriving}
    since_ms = now_ms - window_ms
    recent: dict[str, list[int]] = {c: [] for c in counts}
    again: dict[str, list[int]] = {c: [] for c in counts}
    for letter in letters:
        if letter.error_class not in counts:
            continue
        if letter.timestamp_ms >= since_ms:
            recent[letter.error_class].append(letter.timestamp_ms)
        if letter.redriven_from is not None and (letter.timestamp_ms >= since_ms
                                                 or (letter.dlq_partition, letter.dlq_offset) in chosen):
            again[letter.error_class].append(letter.timestamp_ms)
    out = [FailingClass(c, counts[c], len(recent[c]), max(recent[c], default=None), len(again[c]),
                        max(again[c], default=None))
           for c in counts if recent[c] or again[c]]
    return sorted(out, key=lambda f: (-f.died_again, -f.recent, f.error_class))


# ----------------------------------------------------------------------------- redrive

def _selected(letter: DeadLetterRecord, offsets: Any) -> bool:
    if offsets is None:
        return True
    if isinstance(offsets, Mapping):
        bounds = offsets.get(letter.dlq_partition)
        if bounds is None:
            return False
    else:
        bounds = offsets
    first, last = bounds
    return first <= letter.dlq_offset <= last


def _redrive_headers(letter: DeadLetterRecord) -> list[tuple[str, bytes]]:
    return [(h.HEADER_REDRIVE_TOPIC, letter.dlq_topic.encode()),
            (h.HEADER_REDRIVE_PARTITION, str(letter.dlq_partition).encode()),
            (h.HEADER_REDRIVE_OFFSET, str(letter.dlq_offset).encode())]


def _kept_headers(headers: Iterable[tuple[str, bytes | None]]) -> list[tuple[str, bytes | None]]:
    return [(n, v) for n, v in headers if not n.startswith(_DROPPED_HEADER_PREFIXES)]


async def fetch_source(admin: Any, reader: AsyncPartitionReader, letter: DeadLetterRecord,
                        log_ranges: dict[str, dict[int, tuple[int, int]] | None]) -> Record | None:
    """The source record of a headers-only letter; None when it is no longer in the log (or its
    topic or partition is gone). ``log_ranges`` caches each topic's (log start, end) per partition
    across calls. Used by redrive and by the dashboard's failures page."""
    if letter.topic not in log_ranges:
        try:
            log_ranges[letter.topic] = await _log_ranges(admin, letter.topic)
        except KafkaException as exc:
            if exc.code not in (ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id):
                raise
            log_ranges[letter.topic] = None
    ranges = log_ranges[letter.topic]
    if ranges is None or letter.partition not in ranges:
        return None
    start, end = ranges[letter.partition]
    if not start <= letter.offset < end:
        return None
    try:
        async for record in reader.read(letter.topic, letter.partition, letter.offset, letter.offset + 1):
            return record if record.offset == letter.offset else None
    except KafkaException as exc:  # deleted between the offset lookup and the fetch
        if exc.code != ErrorCode.offset_out_of_range:
            raise
    return None


def _produce(config: Mapping[str, Any], messages: list[tuple[RedriveItem, Any, Any, list]],
             timeout_s: float, progress: Callable[[int], None] | None) -> tuple[set[int], list[str]]:
    """Send the messages with an idempotent confluent-kafka producer (acks=all) and wait for every
    delivery report: (indexes delivered, error texts). Runs in a worker thread."""
    from confluent_kafka import Producer

    producer = Producer({**librdkafka_security_config(_security(config)),
                         "bootstrap.servers": config["bootstrap.servers"],
                         "client.id": config["client.id"] + "-redrive",
                         "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    delivered: set[int] = set()
    errors: list[str] = []

    def report(index: int) -> Callable[[Any, Any], None]:
        def on_delivery(error: Any, _message: Any) -> None:
            if error is None:
                delivered.add(index)
                if progress is not None:
                    progress(1)
            else:
                letter = messages[index][0].letter
                errors.append(f"{letter.dlq_topic}-{letter.dlq_partition}@{letter.dlq_offset}: {error.str()}")
        return on_delivery

    for index, (item, key, value, headers) in enumerate(messages):
        while True:
            try:
                producer.produce(item.target_topic, value=value, key=key, headers=headers,
                                 on_delivery=report(index))
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(timeout_s)
    if left:
        errors.append(f"{left} record(s) not delivered within {timeout_s:.0f} s")
        producer.purge()  # drop what is still queued, so that the producer closes at once
        producer.flush(0)
    return delivered, errors


async def redrive(admin: Any, group_id: str, dlq_topic: str | None, *, to_topic: str | None = None,
                  offsets: Any = None, dry_run: bool = False,
                  progress: Callable[[int], None] | None = None) -> RedriveResult:
    """Redrive the group's dead letters (see the module docstring). ``offsets``: None for every
    letter, a (first, last) range of DLQ offsets applied to every DLQ partition, or {partition:
    (first, last)}. ``progress`` is called with the number of records delivered as they are (from
    a worker thread). Raises KafkaException when a target topic does not exist, when the progress
    metadata would outgrow 4 KB, or when records were not delivered (the delivered ones are
    committed as redriven first)."""
    dlq_topic = dlq_topic or await dlq_topic_of(admin, group_id)
    letters, end_offsets = await _read_letters(admin, dlq_topic, group_id)
    done = await describe_progress(admin, group_id, dlq_topic, end_offsets)
    result = RedriveResult(group_id, dlq_topic, dry_run)
    selected = [letter for letter in letters if _selected(letter, offsets)]

    targets = sorted({to_topic} if to_topic else {letter.topic for letter in selected
                                                  if not done.get(letter.dlq_partition, PartitionProgress())
                                                  .done(letter.dlq_offset)})
    if targets:
        await admin.describe_topics(targets)  # UNKNOWN_TOPIC_OR_PARTITION names a missing target

    messages: list[tuple[RedriveItem, Any, Any, list]] = []
    log_ranges: dict[str, dict[int, tuple[int, int]] | None] = {}
    async with _reader(admin) as reader:
        for letter in selected:
            target = to_topic or letter.topic
            payload = PAYLOAD_COPY if letter.has_copy else PAYLOAD_SOURCE
            if done.get(letter.dlq_partition, PartitionProgress()).done(letter.dlq_offset):
                result.planned.append(RedriveItem(letter, ALREADY_REDRIVEN, target, payload))
                continue
            if letter.has_copy:
                key, value, headers = letter.key, letter.value, _kept_headers(letter.headers)
            else:
                source = await fetch_source(admin, reader, letter, log_ranges)
                if source is None:
                    result.planned.append(RedriveItem(letter, SOURCE_MISSING, target, payload))
                    continue
                key, value, headers = source.key, source.value, _kept_headers(source.headers)
            item = RedriveItem(letter, SEND, target, payload)
            result.planned.append(item)
            messages.append((item, key, value, headers + _redrive_headers(letter)))

    # the progress each partition would have: checked before anything is sent
    by_partition: dict[int, list[int]] = {}
    for letter in letters:
        by_partition.setdefault(letter.dlq_partition, []).append(letter.dlq_offset)

    # a letter whose source record is gone can never be redriven: it is recorded as handled (so
    # that it does not hold the committed offset back for good), reported as source-missing once
    missing = [item.letter for item in result.planned if item.status == SOURCE_MISSING]
    dropped: list[int] = []  # redriven records whose progress did not fit (sent again next time)

    def commits(sent: Iterable[int], *, before_sending: bool) -> dict[tuple[str, int], tuple[int, str]]:
        newly: dict[int, list[int]] = {}
        for letter in [messages[i][0].letter for i in sent] + missing:
            newly.setdefault(letter.dlq_partition, []).append(letter.dlq_offset)
        out = {}
        for partition in sorted(newly):
            committed, metadata = advance(done.get(partition, PartitionProgress()), by_partition[partition],
                                          newly[partition], end_offsets[partition])
            if len(metadata.encode()) > MAX_METADATA_BYTES:
                if before_sending:
                    raise KafkaException(
                        f"Redrive of share group {group_id!r} from {dlq_topic}-{partition}: the redriven offset "
                        f"ranges would not fit the {MAX_METADATA_BYTES}-byte commit metadata of group "
                        f"{progress_group(group_id)!r}; redrive the dead letters in between first (or all of them)")
                # some records were not delivered and left more holes: keep the lowest ranges that fit
                ranges = parse_redriven(metadata)
                while ranges and len(format_redriven(ranges).encode()) > MAX_METADATA_BYTES:
                    low, high = ranges.pop()
                    dropped.extend(o for o in newly[partition] if low <= o <= high)
                metadata = format_redriven(ranges)
            out[(dlq_topic, partition)] = (committed, metadata)
        return out

    commits(range(len(messages)), before_sending=True)
    if dry_run:
        return result
    if not messages:
        if missing:
            await admin.alter_consumer_group_offsets(progress_group(group_id), commits((), before_sending=False))
        return result

    timeout_s = max(admin.config["request.timeout.ms"] / 1000, 30.0)
    delivered, errors = await asyncio.to_thread(_produce, admin.config, messages, timeout_s, progress)
    statuses = {id(item): SENT for i, (item, *_) in enumerate(messages) if i in delivered}
    result.planned = [RedriveItem(i.letter, statuses[id(i)], i.target_topic, i.payload) if id(i) in statuses else i
                      for i in result.planned]
    to_commit = commits(delivered, before_sending=False)
    if to_commit:
        await admin.alter_consumer_group_offsets(progress_group(group_id), to_commit)
    if errors:
        unrecorded = (f" ({len(dropped)} delivered record(s) did not fit the progress metadata and will be sent "
                      f"again)") if dropped else ""
        raise KafkaException(f"Redrive of share group {group_id!r}: {len(messages) - len(delivered)} record(s) "
                             f"were not delivered ({'; '.join(errors[:3])}); those delivered are recorded as "
                             f"redriven{unrecorded}, run the redrive again for the rest")
    return result
