"""In-flight inspection and force actions on a share partition (a quafka extension; Kafka has no
admin API for in-flight records).

- `describe`: the window as rows — offset ranges with state, delivery count, holder, lock deadline,
  due time and why it waits, whether it is blocked behind its key (and the key), whether a write is
  deciding it — plus the failed keys of key ordering. `locate` answers "where is my record".
- `force_release`: ACQUIRED and AVAILABLE records become acquirable at once (no backoff or delivery
  time left; optionally with the delivery count reset to 0); a holder loses its lock, and its later
  acknowledgement of them is refused with INVALID_RECORD_STATE, as after a lock expiry. Key ordering
  still holds: a record behind an earlier one of its key stays blocked; failed keys whose next
  record lies in the range are released.
- `force_archive`: ACQUIRED and AVAILABLE records are archived — to the group's dead-letter queue
  first when it has one (ARCHIVING, reason `force-archived`).
- `release_key`: a failed key (key ordering with park or dead-letter) flows again.

Each change is persisted like an acknowledgement (two-phase, `PersistWrite`); the caller awaits the
write and answers after it. Records that are settled (ACKNOWLEDGED, ARCHIVED), on their way to the
DLQ (ARCHIVING), or held by a write in flight are left alone and counted as skipped. Offsets below
the start offset are settled; offsets past the end offset have not been fetched yet (nothing holds
them) and are left alone.

Pure, like `share_partition` (whose internals this module uses: it is part of that machine).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from quafka.protocol.dead_letter_headers import REASON_FORCE_ARCHIVED
from quafka.protocol.errors import ErrorCode

from ._runs import Run
from .record_state import Event, RecordState, next_state
from .share_partition import Effect, PersistWrite, SharePartition, WakeFetches, _snapshot

AVAILABLE, ACQUIRED, ARCHIVING = RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ARCHIVING

MAX_ROWS = 10_000


class InFlightRow(NamedTuple):
    """A range of the window sharing one state (times in the share partition's clock)."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int
    member_id: str | None  # the holder while ACQUIRED
    lock_deadline_ms: int  # while ACQUIRED
    due_ms: int  # AVAILABLE and waiting: acquirable from then (0: now)
    wait: int  # WAIT_BACKOFF, WAIT_DELIVERY, or 0
    blocked: bool  # behind an earlier unsettled record of its key
    pending: bool  # a write in flight is deciding it
    key: bytes | None  # with key ordering, a single keyed record's key


class FailedKey(NamedTuple):
    key: bytes
    failed_offset: int  # the record whose failure parked the key
    waiting_offsets: tuple[int, ...]  # the key's unsettled records in the window, in order


class InFlightView(NamedTuple):
    start_offset: int
    end_offset: int
    in_flight_count: int
    rows: list[InFlightRow]
    truncated: bool  # more rows than asked for
    failed_keys: list[FailedKey]
    waiting_backoff_count: int
    waiting_delivery_count: int
    blocked_count: int


class ForceResult(NamedTuple):
    error: ErrorCode
    message: str | None
    write: PersistWrite | None  # await it before answering (its effect is not in `effects`)
    effects: list[Effect]
    changed: int  # records moved
    skipped: int  # records in range left alone (settled, ARCHIVING, or a write in flight)
    not_fetched: int  # offsets in range past the end offset
    keys_released: int


def describe(sp: SharePartition, first: int | None = None, last: int | None = None, *,
             max_rows: int = MAX_ROWS, now_ms: int) -> InFlightView:
    """The window (or its part in [first, last]) as rows, at most `max_rows`."""
    sp.runs.promote(now_ms)
    lo = sp.start_offset if first is None else max(first, sp.start_offset)
    hi = sp.end_offset if last is None else min(last, sp.end_offset)
    rows: list[InFlightRow] = []
    truncated = False
    keys = sp.keys
    for run in sp.runs.overlapping(lo, hi):
        for row in _rows(run, max(run.first, lo), min(run.last, hi), keys):
            if len(rows) >= max_rows:
                truncated = True
                break
            rows.append(row)
        if truncated:
            break
    failed = [FailedKey(key, offset, keys.queued(key)) for key, offset in keys.failed_items()]
    counts = sp.runs.waiting_counts
    return InFlightView(sp.start_offset, sp.end_offset, sp.in_flight_count, rows, truncated, failed,
                        counts[1], counts[2], sp.runs.blocked_count)


def _rows(run: Run, lo: int, hi: int, keys) -> list[InFlightRow]:
    def row(a: int, b: int, key: bytes | None) -> InFlightRow:
        acquired = run.state == ACQUIRED
        return InFlightRow(a, b, run.state, run.delivery_count, run.member_id if acquired else None,
                           run.deadline_ms if acquired else 0, run.due_ms, run.wait, run.blocked,
                           bool(run.pending), key)

    if not keys or run.state.terminal:
        return [row(lo, hi, None)]
    out: list[InFlightRow] = []  # one row per keyed record; unkeyed neighbours together
    start = lo
    for offset in range(lo, hi + 1):
        key = keys.key_of(offset)
        if key is None:
            continue
        if start < offset:
            out.append(row(start, offset - 1, None))
        out.append(row(offset, offset, key))
        start = offset + 1
    if start <= hi:
        out.append(row(start, hi, None))
    return out


def locate(sp: SharePartition, offset: int, now_ms: int) -> InFlightRow | None:
    """The row of one offset in the window; None when it is below the start offset (settled) or
    past the end offset (not fetched yet)."""
    if not sp.start_offset <= offset <= sp.end_offset:
        return None
    view = describe(sp, offset, offset, max_rows=1, now_ms=now_ms)
    return view.rows[0] if view.rows else None


def _range(sp: SharePartition, first: int, last: int) -> tuple[ErrorCode, str | None, int, int, int]:
    """(error, message, lo, hi, not fetched) of a force action's range, clamped to the window."""
    if first < 0 or last < first:
        return ErrorCode.invalid_request, f"invalid offset range {first}-{last}: need 0 <= first <= last", 0, -1, 0
    lo, hi = max(first, sp.start_offset), min(last, sp.end_offset)
    not_fetched = max(0, last - max(first, sp.next_offset) + 1)
    return ErrorCode.none, None, lo, hi, not_fetched


def preview(sp: SharePartition, first: int, last: int, *, key: bytes | None = None) -> ForceResult:
    """What a force action would change, changing nothing (a dry run): for a range, the records a
    release or an archive would move and those it would skip; for `key`, whether it is failed."""
    if key is not None:
        if key not in sp.keys.failed:
            return release_key(sp, key, 0)  # the same refusal, and nothing changes
        return ForceResult(ErrorCode.none, None, None, [], 0, 0, 0, 1)
    error, message, lo, hi, not_fetched = _range(sp, first, last)
    if error != ErrorCode.none:
        return ForceResult(error, message, None, [], 0, 0, 0, 0)
    movable, skipped = _movable(sp, lo, hi)
    heads = sum(1 for k, _ in sp.keys.failed_items() if (h := sp.keys.head(k)) is not None and lo <= h <= hi)
    return ForceResult(ErrorCode.none, None, None, [], sum(b - a + 1 for a, b in movable), skipped, not_fetched,
                       heads)


def _movable(sp: SharePartition, lo: int, hi: int) -> tuple[list[tuple[int, int]], int]:
    """The (first, last) spans of [lo, hi] a force action may move (ACQUIRED or AVAILABLE, no write
    in flight), and how many records it must skip."""
    movable: list[tuple[int, int]] = []
    skipped = 0
    for run in sp.runs.overlapping(lo, hi):
        a, b = max(run.first, lo), min(run.last, hi)
        if run.state in (ACQUIRED, AVAILABLE) and not run.pending:
            movable.append((a, b))
        else:
            skipped += b - a + 1
    return movable, skipped


def _force(sp: SharePartition, first: int, last: int, move: Callable[[Run], None],
           ) -> ForceResult | tuple[dict[Run, tuple], int, int, int, int]:
    """The common part of the range actions: the range checked and clamped to the window, and
    `move` applied to each movable run (isolated to the range, its snapshot kept for the write).
    A refusal as a ForceResult, else (changes, skipped, not fetched, lo, hi)."""
    error, message, lo, hi, not_fetched = _range(sp, first, last)
    if error != ErrorCode.none:
        return ForceResult(error, message, None, [], 0, 0, 0, 0)
    changes: dict[Run, tuple] = {}
    skipped = 0
    if lo <= hi:
        movable, skipped = _movable(sp, lo, hi)
        for a, b in movable:
            for part in sp._isolate(a, b):
                changes[part] = _snapshot(part)
                move(part)
    return changes, skipped, not_fetched, lo, hi


def force_release(sp: SharePartition, first: int, last: int, *, reset_delivery_count: bool,
                  now_ms: int) -> ForceResult:
    """Make the records of [first, last] acquirable at once (see the module docstring)."""
    def move(part: Run) -> None:
        count = 0 if reset_delivery_count else part.delivery_count
        sp.runs.set_state(part, next_state(part.state, Event.FORCE_RELEASE), delivery_count=count)

    forced = _force(sp, first, last, move)
    if isinstance(forced, ForceResult):
        return forced
    changes, skipped, not_fetched, lo, hi = forced
    effects: list[Effect] = []
    heads: list[int] = []  # next records of the failed keys released
    for key, _failed_offset in sp.keys.failed_items():
        head = sp.keys.head(key)
        if head is not None and lo <= head <= hi:
            _release_failed(sp, key)
            heads.append(head)
    write = sp._start_write(changes, None)
    if write is None and heads:
        write = sp._start_offset_write()  # the failed keys, stored
    for head in heads:
        sp._on_new_head(head, effects)
    effects.append(WakeFetches())
    sp._timer_effect(effects)
    return ForceResult(ErrorCode.none, None, write, effects, sum(r.size for r in changes), skipped, not_fetched,
                       len(heads))


def force_archive(sp: SharePartition, first: int, last: int, *, now_ms: int, dlq_enabled: bool) -> ForceResult:
    """Archive the records of [first, last] (to the dead-letter queue first when the group has one)."""
    event = Event.FORCE_ARCHIVE_TO_DLQ if dlq_enabled else Event.FORCE_ARCHIVE

    def move(part: Run) -> None:
        if dlq_enabled:
            part.dlq_reason = REASON_FORCE_ARCHIVED
        sp.runs.set_state(part, next_state(part.state, event))

    forced = _force(sp, first, last, move)
    if isinstance(forced, ForceResult):
        return forced
    changes, skipped, not_fetched, _lo, _hi = forced
    effects: list[Effect] = []
    write = sp._start_write(changes, None)
    sp._timer_effect(effects)
    return ForceResult(ErrorCode.none, None, write, effects, sum(r.size for r in changes), skipped, not_fetched, 0)


def release_key(sp: SharePartition, key: bytes, now_ms: int) -> ForceResult:
    """A failed key flows again: its next record is acquirable (behind nothing)."""
    if key not in sp.keys.failed:
        return ForceResult(ErrorCode.invalid_request, "the key is not parked or dead-lettering in this share "
                           "partition", None, [], 0, 0, 0, 0)
    effects: list[Effect] = []
    head = _release_failed(sp, key)
    write = sp._start_offset_write()  # the failed keys, stored
    if head is not None:
        sp._on_new_head(head, effects)
    effects.append(WakeFetches())
    sp._timer_effect(effects)
    return ForceResult(ErrorCode.none, None, write, effects, 0, 0, 0, 1)


def _release_failed(sp: SharePartition, key: bytes) -> int | None:
    """Forget a failed key (the next write stores the set); its head, if any."""
    sp._failed_dirty = True
    return sp.keys.release_key(key)
