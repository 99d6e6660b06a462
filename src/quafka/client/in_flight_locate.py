"""Where is the record at offset O of a share partition, for a share group: in the in-flight window
(and in which state, held by whom, waiting for what), settled below the share partition's start
offset (and, when the group has a dead-letter queue, the dead letter written for it), deleted from
the log, not delivered yet, or not produced yet.

One classification for every tool that asks: `quafka share-groups --describe --in-flight --offset
O` (cli/_in_flight.py, over the blocking Admin) and the dashboard's share-group page
(``locate_record``, over an AsyncAdmin). Both ask the broker the same two things - quafka's
QuafkaDescribeInFlight for the one range holding O, then, when ``needs_letter`` says they can
tell more, the group's dead letters of the topic (``latest_letter`` picks the record's) - and
hand the answers to ``classify``, the pure part: a window, an offset, the time of the sample and
the dead letter found (if any) -> ``(where, text)``.

``where`` is a short token for a program (``in-flight``, ``acknowledged``, ``archived``,
``archiving``, ``dead-lettered``, ``settled``, ``deleted``, ``not-delivered``, ``not-produced``,
``no-record``); ``text`` is one sentence for a person (no final full stop).

Apache Kafka has no admin API for a share partition's in-flight records; the nearest is
``kafka-share-groups.sh --describe --offsets`` (ShareGroupCommand), which shows the start offset
only, i.e. the "settled below the start offset" line here. The record states are Kafka's
(``org.apache.kafka.server.share.fetch.RecordState``: AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED)
plus quafka's ARCHIVING (a record on its way to the dead-letter queue).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._admin_in_flight import InFlightPartitionView, InFlightRange

if TYPE_CHECKING:
    from .admin import AsyncAdmin
    from .dead_letters import DeadLetterRecord

__all__ = ["RecordLocation", "classify", "due_text", "duration", "holder", "in_window", "latest_letter",
           "letter_text", "locate_record", "needs_letter", "utc", "WHERE"]

#: every ``where`` token, in the order a record passes them (roughly)
WHERE = ("not-produced", "not-delivered", "in-flight", "archiving", "acknowledged", "archived", "dead-lettered",
         "settled", "deleted", "no-record")


@dataclass(frozen=True)
class RecordLocation:
    """Where one record is for a share group, as ``locate_record`` found it."""

    where: str  # one of WHERE
    text: str  # one sentence for a person, without the final full stop
    row: InFlightRange | None  # the window's range holding the offset (describe_in_flight's row)
    letter: DeadLetterRecord | None  # the group's latest dead letter for the record, when one was looked up and found
    view: InFlightPartitionView  # the share partition's window (start/end offsets, log offsets, DLQ)
    sample_ms: int  # the wall-clock time the window was read at (for due times)


# ----------------------------------------------------------------------------- text for a person

def duration(ms: int) -> str:
    """12.3s, 9m59s, 2h05m, 3d04h."""
    ms = max(ms, 0)
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    seconds = ms // 1000
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def utc(epoch_ms: int) -> str:
    """ISO-8601 UTC with milliseconds, e.g. 2026-01-31T09:00:00.000Z (as DIED-AT)."""
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


def due_text(due_at_ms: int | None, now_ms: int) -> str | None:
    """'in 9m59s (2026-...Z)', or 'now (...)' once due; None without a due time."""
    if due_at_ms is None:
        return None
    left = due_at_ms - now_ms
    return f"{'in ' + duration(left) if left > 0 else 'now'} ({utc(due_at_ms)})"


def holder(r: Any) -> str | None:
    """'member-id (client-id@host)' of an ACQUIRED range; the member id alone once it left."""
    if not r.member_id:
        return None
    if r.client_id is None:
        return r.member_id
    return f"{r.member_id} ({r.client_id}@{(r.client_host or '?').lstrip('/')})"


def letter_text(letter: Any) -> str:
    """A dead letter in a sentence: where it lies in the DLQ, when, why, and what the job raised."""
    reason = letter.reason or letter.message or "unknown"
    count = letter.delivery_count if letter.delivery_count is not None else "unknown"
    text = (f"dead-lettered to {letter.dlq_topic} partition {letter.dlq_partition} offset {letter.dlq_offset} at "
            f"{letter.died_at}, reason {reason}, delivery count {count}")
    if letter.error_class or letter.error_message:  # written by the worker framework: what the job raised
        error = ": ".join(x for x in (letter.error_class, " ".join((letter.error_message or "").split())[:200]) if x)
        text += f", error {error}"
    return text


# ----------------------------------------------------------------------------- classification (pure)

def in_window(row: InFlightRange, view: InFlightPartitionView, now_ms: int) -> tuple[str, str]:
    """``(where, text)`` of a record the window holds (``row`` is its range)."""
    settled = "the start offset has not passed it yet"
    if row.state == "ACQUIRED":
        lock = f", lock left {duration(row.lock_remaining_ms)}" if row.lock_remaining_ms is not None else ""
        return "in-flight", f"in flight, held by {holder(row)}{lock}"
    if row.state == "ACKNOWLEDGED":
        return "acknowledged", f"acknowledged (settled; {settled})"
    if row.state == "ARCHIVED":
        return "archived", f"archived (settled; {settled})"
    if row.state == "ARCHIVING":
        dlq = f" {view.dead_letter_topic}" if view.dead_letter_topic else ""
        return "archiving", f"being written to the dead-letter queue{dlq}, then archived"
    if row.state != "AVAILABLE":  # a state this client does not know (a newer broker): said as it is
        return row.state.lower(), row.state
    failed = {f.key for f in view.failed_keys}
    if row.blocked and row.key is not None and row.key in failed:
        return "in-flight", ("in flight, available but blocked: its key failed (key ordering); it waits until the key "
                             "is released with --release --key")
    if row.blocked:
        return "in-flight", "in flight, available but blocked behind an earlier record of its key (key ordering)"
    if row.wait_reason and row.due_at_ms is not None:
        why = "its redelivery backoff" if row.wait_reason == "backoff" else "its delivery time"
        return "in-flight", f"in flight, available; it waits for {why}: due {due_text(row.due_at_ms, now_ms)}"
    return "in-flight", "in flight, available: the next fetch can acquire it"


def needs_letter(view: InFlightPartitionView, offset: int) -> bool:
    """Whether the group's dead letters can tell more about the record: it is settled (archived in
    the window, or below the start offset, where the broker no longer keeps which) and the group
    has a dead-letter queue."""
    if not view.dead_letter_topic:
        return False
    row = view.ranges[0] if view.ranges else None
    if row is not None:
        return row.state == "ARCHIVED"
    return offset < view.start_offset


def classify(view: InFlightPartitionView, offset: int, now_ms: int,
             letter: DeadLetterRecord | None = None) -> tuple[str, str]:
    """``(where, text)`` of the record at ``offset``; ``view`` is describe_in_flight's answer for
    that offset (its one range holds the offset, or there is none), ``letter`` the group's dead
    letter for the record when ``needs_letter`` said to look and one was found."""
    row = view.ranges[0] if view.ranges else None
    if row is not None:
        if row.state == "ARCHIVED" and view.dead_letter_topic and letter is not None:
            return "dead-lettered", f"archived, {letter_text(letter)}"
        return in_window(row, view, now_ms)
    if offset < view.start_offset:
        below = (f"it is below the share partition's start offset {view.start_offset}, where the broker no longer "
                 f"keeps which")
        if view.dead_letter_topic and letter is not None:
            where, text = "dead-lettered", (f"{letter_text(letter)} (settled: below the start offset "
                                            f"{view.start_offset})")
        elif view.dead_letter_topic:
            where, text = "settled", (f"settled: acknowledged or archived ({below}); the dead-letter queue "
                                      f"{view.dead_letter_topic} holds no dead letter for it")
        else:
            where, text = "settled", f"settled: acknowledged or archived ({below})"
        if offset < view.log_start_offset:
            text += (f"; and deleted from the log since (below the log start offset {view.log_start_offset}: "
                     f"retention or delete-records)")
        return where, text
    if offset >= view.log_end_offset:
        return "not-produced", (f"no such record yet: the log end offset is {view.log_end_offset} (the next record "
                                f"produced gets that offset)")
    if offset < view.log_start_offset:
        return "deleted", (f"deleted from the log (below the log start offset {view.log_start_offset}: retention or "
                           f"delete-records) before it was delivered")
    if offset > view.end_offset:
        return "not-delivered", (f"not delivered yet: it waits to be fetched (past the end offset {view.end_offset}; "
                                 f"the log end offset is {view.log_end_offset})")
    return "no-record", (f"no record at this offset in the window (start offset {view.start_offset}, end offset "
                         f"{view.end_offset}): a gap in the log, such as a compacted or transaction-marker offset")


# ----------------------------------------------------------------------------- asking the broker

def latest_letter(letters: Iterable[DeadLetterRecord], partition: int, offset: int) -> DeadLetterRecord | None:
    """The latest of ``letters`` (one source topic's dead letters) for the record at ``offset`` of
    ``partition`` (by DLQ timestamp, then DLQ position), or None."""
    mine = [x for x in letters if x.partition == partition and x.offset == offset]
    return max(mine, key=lambda x: (x.timestamp_ms, x.dlq_partition, x.dlq_offset)) if mine else None


async def locate_record(admin: AsyncAdmin, group_id: str, topic: str, partition: int, offset: int, *,
                        now_ms: int | None = None) -> RecordLocation:
    """Where the record at ``offset`` of ``topic``-``partition`` is for share group ``group_id``.

    Reads the one in-flight range holding the offset (QuafkaDescribeInFlight with an offset), then,
    when it is settled and the group has a dead-letter queue, the group's dead letters of ``topic``.
    ``now_ms``: the wall-clock time for due times (default: when the window was read). Raises what
    describe_in_flight raises: ExtensionUnavailable against a broker that is not quafka, a
    KafkaException naming a missing group, topic or partition."""
    views = await admin.describe_in_flight(group_id, {topic: [partition]}, offset=offset)
    view = views[(topic, partition)]
    sample_ms = int(time.time() * 1000) if now_ms is None else now_ms
    letter = None
    if needs_letter(view, offset) and view.dead_letter_topic:
        letter = latest_letter(await admin.list_dead_letters(group_id, view.dead_letter_topic, topic), partition,
                               offset)
    where, text = classify(view, offset, sample_ms, letter)
    return RecordLocation(where, text, view.ranges[0] if view.ranges else None, letter, view, sample_ms)
