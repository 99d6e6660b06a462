"""The in-flight window of a share partition drawn as a strip, and the numbers beside it: the
delivery-count histogram and the lock expiries coming up.

Input: one ``InFlightPartitionView`` (``AsyncAdmin.describe_in_flight``, quafka's
QuafkaDescribeInFlight): the window from the share partition's start offset to its end offset (both
included) and its ranges, each in one record state. Kafka keeps the same window in
``SharePartition`` (its ``cachedState`` of ``InFlightBatch``/``InFlightState``, from
``startOffset`` to ``endOffset``) but has no API that shows it; the states are Kafka's
``RecordState`` plus quafka's ARCHIVING (on its way to the dead-letter queue).

The strip is ``width_px`` SVG user units wide with a linear offset scale: offset O starts at
``(O - start_offset) * width_px / span``, span = end_offset - start_offset + 1. Each drawn segment
gets one of ``STATES``: AVAILABLE splits by why it waits (``waiting-backoff``: a redelivery backoff;
``waiting-delivery``: a delivery time; else ``available``). Offsets the broker did not return (a
gap in the log, or rows cut at max_rows) are not drawn.

- A window of at most ``width_px`` offsets is drawn exactly: every returned offset lies in one
  segment, at least 1 unit wide. Adjacent ranges are merged into one segment when everything the
  segment shows (state, holder, deliveries, lock left, due time, blocked, pending) is equal.
- A bigger window is drawn in ``width_px`` columns of whole offsets (column c holds the offsets
  from ``start + floor(c * span / width_px)``): a run of columns that one range covers alone is one
  segment; a column that several ranges share is one ``mixed`` segment in the state that matters
  most (the first of ``STATES`` among them), so at most one segment per column.

Members holding records get colour slots 0..7 by order of first appearance along the window (the
ninth holder shares slot 0 with the first: ``members`` lists them all, slot = index % 8).

Pure: no I/O, clock (the sample time is passed in) or randomness.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from quafka.client.in_flight_locate import duration, utc

__all__ = ["LockExpiry", "PALETTE_SIZE", "STATES", "Segment", "Strip", "build_strip", "delivery_histogram",
           "lock_expiries", "state_token"]

#: the drawn states, most important first (a mixed column takes the first one it holds)
STATES = ("acquired", "archiving", "waiting-backoff", "waiting-delivery", "available", "archived", "acknowledged")
#: colour slots of the holders
PALETTE_SIZE = 8
_PRIORITY = {s: i for i, s in enumerate(STATES)}
_SETTLED = ("ACKNOWLEDGED", "ARCHIVED")


@dataclass(frozen=True)
class Segment:
    first_offset: int
    last_offset: int
    state: str  # one of STATES (the dominant one when a drawn column mixes states)
    mixed: bool  # the segment stands for more than one range (downsampled)
    member_id: str | None  # ACQUIRED holder
    client_id: str | None
    client_host: str | None
    delivery_count: int  # max over the ranges it stands for
    x: float  # SVG user units, 0..width_px
    width: float
    title: str  # tooltip text (plain; the template escapes it)
    member_index: int | None  # colour slot of the holder (0..7), stable by order of first appearance


@dataclass(frozen=True)
class Strip:
    topic: str
    partition: int
    start_offset: int
    end_offset: int
    width_px: int
    segments: tuple[Segment, ...]
    truncated: bool  # the broker cut the rows at max_rows: the window goes on past the last segment
    counts: tuple[tuple[str, int], ...]  # records per state (from the ranges returned), in STATES order
    members: tuple[tuple[str, str | None, str | None], ...]  # (member_id, client_id, host) in slot order


@dataclass(frozen=True)
class LockExpiry:
    first_offset: int
    last_offset: int
    member_id: str | None
    client_id: str | None
    expires_at_ms: int  # sample_ms + lock_remaining_ms


def state_token(r: Any) -> str:
    """The drawn state of an InFlightRange (one of STATES). A state this module does not know (a
    newer broker's) raises ValueError naming it, rather than being drawn as something it is not."""
    if r.state == "AVAILABLE":
        if r.wait_reason == "backoff":
            return "waiting-backoff"
        if r.wait_reason == "delivery-time":
            return "waiting-delivery"
        return "available"
    token = {"ACQUIRED": "acquired", "ARCHIVING": "archiving", "ARCHIVED": "archived",
             "ACKNOWLEDGED": "acknowledged"}.get(r.state)
    if token is None:
        raise ValueError(f"in-flight range {r.first_offset}-{r.last_offset} has a state the dashboard does not "
                         f"know: {r.state!r}")
    return token


@dataclass
class _Run:
    """Adjacent ranges that show the same (merged), clipped to the window."""

    first: int
    last: int
    token: str
    r: Any  # the first range: what the run shows
    holder: tuple[str, str | None, str | None] | None

    def key(self) -> tuple:
        r = self.r
        return (self.token, self.holder, r.delivery_count, r.lock_remaining_ms, r.due_at_ms, r.blocked, r.pending)


def _runs(ranges: Sequence[Any], start: int, end: int) -> list[_Run]:
    runs: list[_Run] = []
    for r in sorted(ranges, key=lambda r: r.first_offset):
        first, last = max(r.first_offset, start), min(r.last_offset, end)
        if first > last:
            continue  # outside the window: counted, not drawn
        token = state_token(r)
        held = (r.member_id, r.client_id, r.client_host) if token == "acquired" and r.member_id else None
        run = _Run(first, last, token, r, held)
        if runs and runs[-1].last + 1 == first and runs[-1].key() == run.key():
            runs[-1].last = last
        else:
            runs.append(run)
    return runs


def _offsets(first: int, last: int) -> str:
    return f"offset {first}" if first == last else f"offsets {first}-{last}"


def _times(n: int) -> str:
    return f"{n} time" if n == 1 else f"{n} times"


def _holder_text(h: tuple[str, str | None, str | None]) -> str:
    member, client, host = h
    return member if client is None else f"{member} ({client}@{(host or '?').lstrip('/')})"


def _run_title(run: _Run, first: int, last: int) -> str:
    r = run.r
    what = {"acquired": "acquired", "archiving": "being written to the dead-letter queue, then archived",
            "waiting-backoff": "available, waiting for its redelivery backoff",
            "waiting-delivery": "available, waiting for its delivery time", "available": "available",
            "archived": "archived", "acknowledged": "acknowledged"}[run.token]
    parts = [f"{_offsets(first, last)}: {what}"]
    if run.holder is not None:
        parts[0] += f" by {_holder_text(run.holder)}"
    if r.lock_remaining_ms is not None and run.token == "acquired":
        parts.append(f"lock left {duration(r.lock_remaining_ms)}")
    if r.due_at_ms is not None and run.token.startswith("waiting"):
        parts.append(f"due {utc(r.due_at_ms)}")
    if r.blocked:
        parts.append("blocked by key ordering")
    if r.pending:
        parts.append("a state write is deciding it")
    parts.append(f"delivered {_times(r.delivery_count)}")
    return "; ".join(parts)


def _slots(runs: Iterable[_Run]) -> dict[tuple[str, str | None, str | None], int]:
    order: dict[tuple[str, str | None, str | None], int] = {}
    for run in runs:
        if run.holder is not None and run.holder not in order:
            order[run.holder] = len(order)
    return order


def _pure(run: _Run, first: int, last: int, x: float, width: float, slots: dict) -> Segment:
    h = run.holder
    return Segment(first, last, run.token, False, h[0] if h else None, h[1] if h else None, h[2] if h else None,
                   run.r.delivery_count, x, width, _run_title(run, first, last),
                   slots[h] % PALETTE_SIZE if h is not None else None)


def _mixed(pieces: list[tuple[_Run, int, int]], column: int, slots: dict) -> Segment:
    """One column that several runs share: ``pieces`` are (run, first, last) clipped to the column."""
    state = min((run.token for run, _, _ in pieces), key=_PRIORITY.__getitem__)
    holders = {run.holder for run, _, _ in pieces if run.token == state and run.holder is not None}
    h = holders.pop() if len(holders) == 1 else None
    first, last = pieces[0][1], pieces[-1][2]
    records: dict[str, int] = {}
    for run, a, b in pieces:
        records[run.token] = records.get(run.token, 0) + b - a + 1
    counts = ", ".join(f"{s} {records[s]}" for s in STATES if s in records)
    deliveries = max(run.r.delivery_count for run, _, _ in pieces)
    held = f"; held by {_holder_text(h)}" if h is not None else ""
    if h is None and len({run.holder for run, _, _ in pieces if run.holder is not None}) > 1:
        held = "; held by several members"
    title = f"{_offsets(first, last)} ({len(pieces)} ranges): {counts}{held}; delivered up to {_times(deliveries)}"
    return Segment(first, last, state, True, h[0] if h else None, h[1] if h else None, h[2] if h else None,
                   deliveries, float(column), 1.0, title, slots[h] % PALETTE_SIZE if h is not None else None)


def _exact(runs: list[_Run], start: int, span: int, width_px: int, slots: dict) -> list[Segment]:
    scale = width_px / span
    return [_pure(run, run.first, run.last, (run.first - start) * scale, (run.last - run.first + 1) * scale, slots)
            for run in runs]


def _columns(runs: list[_Run], start: int, span: int, width_px: int, slots: dict) -> list[Segment]:
    """span > width_px: columns of whole offsets, at most one segment per column."""
    def lo(c: int) -> int:  # first offset of column c (c == width_px: one past the window)
        return start + c * span // width_px

    def col(o: int) -> int:  # the column of offset o: the last c with lo(c) <= o
        return ((o - start + 1) * width_px + span - 1) // span - 1

    # cells in column order: (first column, last column, [(run, first, last)])
    cells: list[tuple[int, int, list[tuple[_Run, int, int]]]] = []

    def add(c0: int, c1: int, run: _Run, a: int, b: int) -> None:
        if cells and cells[-1][0] == c0 == c1 == cells[-1][1]:
            cells[-1][2].append((run, a, b))
        else:
            cells.append((c0, c1, [(run, a, b)]))

    for run in runs:
        c0, c1 = col(run.first), col(run.last)
        if c0 == c1:
            add(c0, c0, run, run.first, run.last)
            continue
        add(c0, c0, run, run.first, lo(c0 + 1) - 1)
        if c1 > c0 + 1:
            add(c0 + 1, c1 - 1, run, lo(c0 + 1), lo(c1) - 1)
        add(c1, c1, run, lo(c1), run.last)
    segments: list[Segment] = []
    pure: tuple[_Run, int, int, int, int] | None = None  # run, first/last column, first/last offset

    def flush() -> None:
        if pure is not None:
            run, c0, c1, a, b = pure
            segments.append(_pure(run, a, b, float(c0), float(c1 - c0 + 1), slots))

    for c0, c1, pieces in cells:
        if len(pieces) == 1:
            run, a, b = pieces[0]
            if pure is not None and pure[0] is run and pure[2] + 1 == c0:
                pure = (run, pure[1], c1, pure[3], b)
            else:
                flush()
                pure = (run, c0, c1, a, b)
            continue
        flush()
        pure = None
        segments.append(_mixed(pieces, c0, slots))
    flush()
    return segments


def build_strip(view: Any, width_px: int = 1000) -> Strip:
    """The strip of one share partition's window (see the module's docstring)."""
    if width_px < 1:
        raise ValueError(f"width_px must be >= 1, not {width_px}")
    start, end = view.start_offset, view.end_offset
    span = max(end - start + 1, 1)
    runs = _runs(view.ranges, start, end)
    slots = _slots(runs)
    if span <= width_px:
        segments = _exact(runs, start, span, width_px, slots)
    else:
        segments = _columns(runs, start, span, width_px, slots)
    records = dict.fromkeys(STATES, 0)
    for r in view.ranges:
        records[state_token(r)] += r.last_offset - r.first_offset + 1
    return Strip(view.topic, view.partition, start, end, width_px, tuple(segments), bool(view.truncated),
                 tuple(records.items()), tuple(slots))


def delivery_histogram(view: Any) -> tuple[tuple[int, int], ...]:
    """(delivery_count, records) of the unsettled records returned (AVAILABLE, ACQUIRED and
    ARCHIVING: not yet acknowledged or archived), by delivery count ascending; counts with no
    record are left out."""
    records: dict[int, int] = {}
    for r in view.ranges:
        if r.state not in _SETTLED:
            records[r.delivery_count] = records.get(r.delivery_count, 0) + r.last_offset - r.first_offset + 1
    return tuple(sorted(records.items()))


def lock_expiries(view: Any, sample_ms: int, limit: int = 10) -> tuple[LockExpiry, ...]:
    """The acquisition locks that expire soonest (ACQUIRED ranges with a lock), at most ``limit``,
    soonest first (ties by offset). When a lock expires the broker makes its records available
    again (Kafka: ``SharePartition``'s acquisition lock timeout task), counting the delivery."""
    if limit < 0:
        raise ValueError(f"limit must be >= 0, not {limit}")
    locks = [LockExpiry(r.first_offset, r.last_offset, r.member_id, r.client_id, sample_ms + r.lock_remaining_ms)
             for r in view.ranges if r.state == "ACQUIRED" and r.lock_remaining_ms is not None]
    locks.sort(key=lambda x: (x.expires_at_ms, x.first_offset))
    return tuple(locks[:limit])
