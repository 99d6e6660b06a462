"""The share partition: one share group's view of one topic partition (KIP-932).

Vocabulary:

- start offset (SPSO, `start_offset`): the first offset that is not yet known to be terminal.
  Every offset below it is ACKNOWLEDGED or ARCHIVED, or was never to be delivered.
- end offset (SPEO): the last offset acquired so far; `next_offset` is SPEO + 1, where new records
  from the log are acquired next. The records in [SPSO, SPEO] are the in-flight window, bounded
  by the group's `share.partition.max.record.locks`.
- run: a contiguous range of offsets sharing one state, delivery count, holder and lock deadline.
  A fetch creates one run per producer batch it acquires (batch-level state); a run is split only
  when a request covers part of it (an ack of some offsets, a partial acquisition), so the common
  path — acquire a whole batch, accept it whole — costs O(1) per batch.

Every entry point takes its inputs and `now_ms` and returns results and effects; nothing here
reads a clock or does I/O. Changes that must be persisted are two-phase: the transition is applied
at once and the runs it touched are marked pending; a `PersistWrite` effect is returned; the shell
calls `on_write_complete(write_id, ok)` when the write is durable (commit: the start offset may
advance) or failed (rollback; a lock that expired meanwhile rolls back to AVAILABLE, not ACQUIRED).
A write never persists a start offset past records of another write still in flight (that write
could fail), so overlapping writes can leave the stored start offset behind the one in memory;
`on_write_complete` then returns one more write that catches the stored start offset up.
Pending runs take no other transition until their write completes. Acquisitions and renewals are
not persisted (ACQUIRED is never stored, as Kafka).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from operator import attrgetter
from typing import Iterable, NamedTuple, Sequence

from quafka.protocol.errors import ErrorCode

from .record_state import (
    ACK_ACCEPT,
    ACK_EVENTS,
    ACK_RELEASE,
    ACK_RENEW,
    Event,
    RecordState,
    next_state,
    persisted_state,
)

AVAILABLE = RecordState.AVAILABLE
ACQUIRED = RecordState.ACQUIRED
ARCHIVED = RecordState.ARCHIVED
_FIRST = attrgetter("first")
_NO_LIMIT = 2**62


@dataclass(slots=True)
class Run:
    first: int
    last: int
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    deadline_ms: int = 0  # acquisition lock deadline while ACQUIRED
    pending: int = 0  # id of the write in flight for this run, 0 when none
    span: int = 0  # records in the batch this run was cut from

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def copy_range(self, first: int, last: int) -> "Run":
        return Run(first, last, self.state, self.delivery_count, self.member_id, self.deadline_ms, self.pending,
                   self.span or self.size)


class AcquiredRange(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_count: int


class StateBatch(NamedTuple):
    """A persisted range: (first offset, last offset, state as stored, delivery count)."""

    first_offset: int
    last_offset: int
    state: int
    delivery_count: int


class PersistWrite(NamedTuple):
    """Effect: make this state durable, then call `on_write_complete(write_id, ok)`."""

    write_id: int
    start_offset: int
    delivery_complete_count: int
    state_batches: tuple[StateBatch, ...]


class SharePartition:
    def __init__(self, start_offset: int, state_batches: Iterable[StateBatch] = ()) -> None:
        """A share partition starting at `start_offset`, with persisted state batches (if any)."""
        self.start_offset = start_offset
        self.next_offset = start_offset
        self.runs: list[Run] = []
        self._writes: dict[int, list[tuple[Run, tuple]]] = {}
        self._sent_start_offset = start_offset  # the highest start offset any write has carried
        self._write_seq = 0
        self.last_acquire_throttled = False  # the last acquire() stopped early near the delivery limit
        self.last_ack_error = ErrorCode.none  # why the last acknowledge() was refused
        self.lock_timeout_count = 0  # records whose acquisition lock expired (a metric; only grows)
        self.deferred_writes: list[PersistWrite] = []
        for b in sorted(state_batches):
            first = max(b.first_offset, self.next_offset)
            if b.last_offset < first:
                continue
            if first > self.next_offset:  # a gap between persisted batches: not yet delivered
                self.runs.append(Run(self.next_offset, first - 1, AVAILABLE, 0))
            state = RecordState(b.state)
            if state == ACQUIRED or state == RecordState.ARCHIVING:
                state = AVAILABLE if state == ACQUIRED else ARCHIVED
            self.runs.append(Run(first, b.last_offset, state, b.delivery_count))
            self.next_offset = b.last_offset + 1
        self._advance_start()

    # ------------------------------------------------------------------ queries
    @property
    def end_offset(self) -> int:
        """SPEO: the last offset in the in-flight window (start_offset - 1 when it is empty)."""
        return self.next_offset - 1

    @property
    def in_flight_count(self) -> int:
        return self.next_offset - self.start_offset

    def delivery_complete_count(self) -> int:
        return sum(r.size for r in self.runs if r.state.terminal)

    def fetch_offset(self, max_in_flight: int) -> int | None:
        """Where the next acquisition would start: the first AVAILABLE offset in the window, else
        the end of the window — or None when the window is full and nothing in it is available."""
        for run in self.runs:
            if run.state == AVAILABLE and not run.pending:
                return run.first
        if self.in_flight_count >= max_in_flight:
            return None
        return self.next_offset

    def next_deadline_ms(self) -> int | None:
        deadlines = [r.deadline_ms for r in self.runs if r.state == ACQUIRED and not r.pending]
        return min(deadlines) if deadlines else None

    def record(self, offset: int) -> tuple[RecordState, int, str | None] | None:
        """(state, delivery count, holder) of one offset in the window, None outside it."""
        if offset < self.start_offset or offset >= self.next_offset:
            return None
        run = self.runs[self._index_of(offset)]
        return run.state, run.delivery_count, run.member_id

    def state_batches(self) -> list[StateBatch]:
        return [StateBatch(r.first, r.last, int(persisted_state(r.state)), r.delivery_count) for r in self.runs]

    # ------------------------------------------------------------------ acquire
    def acquire(
        self,
        member_id: str,
        log_batches: Sequence[tuple[int, int]],
        *,
        max_records: int,
        batch_size: int,
        record_limit: bool,
        lock_duration_ms: int,
        delivery_limit: int,
        max_in_flight: int,
        now_ms: int,
    ) -> list[AcquiredRange]:
        """Acquire records for `member_id` from the log batches the shell read (their (base
        offset, last offset), in order): first AVAILABLE records in the window (released or
        expired ones, redelivered), then new records past the end offset.

        batch_optimized (`record_limit` False): whole batches; `max_records` is a soft cap that
        a batch may overshoot. record_limit: at most `max_records` offsets, splitting a batch.
        Redelivery is throttled near the delivery limit (KAFKA-17541): once records have been
        delivered max(2, ceil(limit / 2)) times, each further attempt takes half as many of the
        batch's records as the one before, and the last permitted attempt takes a record alone.
        """
        self.last_acquire_throttled = False
        if not log_batches:
            return []
        limit = max_records if max_records > 0 else _NO_LIMIT
        deadline = now_ms + lock_duration_ms
        throttle_from = max(2, -(-delivery_limit // 2))
        data_first, data_last = log_batches[0][0], log_batches[-1][1]
        acquired: list[AcquiredRange] = []
        archived: list[tuple[Run, tuple]] = []  # AVAILABLE records that may never be delivered
        total = 0
        i = 0
        while i < len(self.runs) and total < limit:
            run = self.runs[i]
            i += 1
            if run.state == AVAILABLE and not run.pending and run.first < data_first:
                # compacted away: nothing at these offsets any more, never to be delivered
                for part in self._isolate(run.first, min(run.last, data_first - 1)):
                    archived.append((part, (part.state, part.delivery_count, part.member_id, part.deadline_ms)))
                    part.state = ARCHIVED
                i = self._index_of(min(run.last, data_first - 1)) + 1
                continue
            if run.state != AVAILABLE or run.pending or run.last < data_first:
                continue
            if run.first > data_last:
                break
            lo, hi = max(run.first, data_first), min(run.last, data_last)
            before = run.delivery_count  # deliveries so far
            if before >= delivery_limit:  # over a lowered limit: never delivered again
                for part in self._isolate(lo, hi):
                    archived.append((part, (part.state, part.delivery_count, part.member_id, part.deadline_ms)))
                    part.state = ARCHIVED
                i = self._index_of(hi) + 1
                continue
            if before + 1 >= delivery_limit and total > 0 and delivery_limit > 2:
                total = limit
                break
            throttled = before >= throttle_from or before + 1 >= delivery_limit
            n = hi - lo + 1
            if before + 1 >= delivery_limit:
                n = 1  # the last permitted attempt delivers a record alone
            elif throttled:
                n = min(n, max(1, (run.span or run.size) >> (before - throttle_from + 1)))  # half the batch, then a quarter, ...
            if record_limit:
                n = min(n, limit - total)
            for part in self._isolate(lo, lo + n - 1):
                part.state = next_state(part.state, Event.ACQUIRE)
                part.delivery_count += 1
                part.member_id = member_id
                part.deadline_ms = deadline
                acquired.append(AcquiredRange(part.first, part.last, part.delivery_count))
            i = self._index_of(lo + n - 1) + 1
            total += n
            if throttled:
                self.last_acquire_throttled = True
                return self._acquired(acquired, archived)
        for base, last in log_batches:
            if total >= limit or self.in_flight_count >= max_in_flight:
                break
            if last < self.next_offset:
                continue
            lo = max(base, self.next_offset)
            if lo > self.next_offset and not self.runs:
                self.start_offset = lo
            elif lo > self.next_offset:  # a hole in the log (no records there): nothing to deliver
                self.runs.append(Run(self.next_offset, lo - 1, ARCHIVED, 0))
            hi = last if not record_limit else min(last, lo + (limit - total) - 1)
            self.runs.append(Run(lo, hi, ACQUIRED, 1, member_id, deadline))
            acquired.append(AcquiredRange(lo, hi, 1))
            self.next_offset = hi + 1
            total += hi - lo + 1
        return self._acquired(acquired, archived)

    def _acquired(self, acquired: list[AcquiredRange], archived: list[tuple[Run, tuple]]) -> list[AcquiredRange]:
        write = self._start_write(archived)
        if write is not None:
            self.deferred_writes.append(write)
        return _merge(acquired)

    def take_deferred_writes(self) -> list[PersistWrite]:
        """Writes started by acquire() (records archived instead of delivered) for the shell."""
        writes, self.deferred_writes = self.deferred_writes, []
        return writes

    # ------------------------------------------------------------------ acknowledge
    def acknowledge(
        self,
        member_id: str,
        batches: Sequence[tuple[int, int, Sequence[int]]],
        *,
        delivery_limit: int,
        lock_duration_ms: int,
        renew_enabled: bool,
        now_ms: int,
    ) -> tuple[bool, PersistWrite | None]:
        """Apply acknowledgements atomically: (first offset, last offset, types) batches, where
        types holds one type for the whole range or one per offset (already validated for shape
        by the caller). Every offset must be ACQUIRED by `member_id` with an unexpired lock;
        otherwise nothing changes, the result is False and `last_ack_error` says why
        (INVALID_RECORD_STATE; INVALID_REQUEST for offsets past the end offset, never acquired).
        Batches below the start offset are already terminal and skipped, as Kafka does. RENEW
        extends the lock and needs `renew_enabled`."""
        self.last_ack_error = ErrorCode.none
        kept = []
        for first, last, types in batches:
            if last < self.start_offset:
                continue  # already terminal and gone from the window (Kafka skips these)
            if first < self.start_offset:  # the part below the start offset is already terminal
                types = types if len(types) == 1 else types[self.start_offset - first:]
                first = self.start_offset
            if last >= self.next_offset:
                return self._refuse(ErrorCode.invalid_request)  # offsets never acquired
            if ACK_RENEW in types and not renew_enabled:
                return self._refuse(ErrorCode.invalid_record_state)
            for run in self._overlapping(first, last):
                if run.state != ACQUIRED or run.member_id != member_id or run.pending or run.deadline_ms <= now_ms:
                    return self._refuse(ErrorCode.invalid_record_state)
            kept.append((first, last, types))
        changes: list[tuple[Run, tuple]] = []
        for first, last, types in kept:
            for lo, hi, ack_type in _segments(first, last, types):
                for run in self._isolate(lo, hi):
                    if ack_type == ACK_RENEW:
                        run.deadline_ms = now_ms + lock_duration_ms
                        continue
                    snapshot = (run.state, run.delivery_count, run.member_id, run.deadline_ms)
                    event = ACK_EVENTS[ack_type]
                    if ack_type == ACK_RELEASE and run.delivery_count >= delivery_limit:
                        event = Event.RELEASE_AT_LIMIT
                    run.state = next_state(run.state, event)
                    run.member_id = None
                    run.deadline_ms = 0
                    changes.append((run, snapshot))
        return True, self._start_write(changes)

    def _refuse(self, error: ErrorCode) -> tuple[bool, None]:
        self.last_ack_error = error
        return False, None

    def release_member(self, member_id: str, *, delivery_limit: int, now_ms: int) -> PersistWrite | None:
        """Release every record `member_id` holds (its share session closed or was dropped):
        AVAILABLE again with the delivery count kept, or ARCHIVED at the limit."""
        return self._start_write(self._release_where(lambda r: r.member_id == member_id, Event.RELEASE,
                                                     Event.RELEASE_AT_LIMIT, delivery_limit))

    def expire_locks(self, *, delivery_limit: int, now_ms: int) -> PersistWrite | None:
        """Return records whose acquisition lock has passed to AVAILABLE (ARCHIVED at the limit)."""
        changes = self._release_where(lambda r: r.deadline_ms <= now_ms, Event.LOCK_EXPIRED,
                                      Event.LOCK_EXPIRED_AT_LIMIT, delivery_limit)
        for run, _snapshot in changes:
            self.lock_timeout_count += run.size
        return self._start_write(changes)

    def _release_where(self, predicate, event: Event, at_limit: Event,
                       delivery_limit: int) -> list[tuple[Run, tuple]]:
        changes = []
        for run in self.runs:
            if run.state == ACQUIRED and not run.pending and predicate(run):
                snapshot = (run.state, run.delivery_count, run.member_id, run.deadline_ms)
                run.state = next_state(run.state, at_limit if run.delivery_count >= delivery_limit else event)
                run.member_id = None
                run.deadline_ms = 0
                changes.append((run, snapshot))
        return changes

    # ------------------------------------------------------------------ start offset
    def move_start_offset(self, log_start_offset: int) -> PersistWrite | None:
        """Follow the log start offset (DeleteRecords, retention): records it passes are archived
        (not counted as complete) and leave the window."""
        if log_start_offset <= self.start_offset:
            return None
        if self.runs and log_start_offset > self.runs[0].first:
            for run in self._isolate(self.runs[0].first, min(log_start_offset, self.next_offset) - 1):
                run.state = next_state(run.state, Event.START_OFFSET_MOVED)
                run.member_id = None
                run.deadline_ms = 0
        keep = bisect_right(self.runs, log_start_offset - 1, key=lambda r: r.last)
        del self.runs[:keep]
        self.start_offset = log_start_offset
        self.next_offset = max(self.next_offset, log_start_offset)
        return self._start_offset_write()

    def _start_offset_write(self) -> PersistWrite:
        """A write of the start offset (and delivery-complete count) alone."""
        self._write_seq += 1
        write = PersistWrite(self._write_seq, self.start_offset, self.delivery_complete_count(), ())
        self._writes[write.write_id] = []
        self._sent_start_offset = max(self._sent_start_offset, self.start_offset)
        return write

    # ------------------------------------------------------------------ two-phase writes
    def _start_write(self, changes: list[tuple[Run, tuple]]) -> PersistWrite | None:
        if not changes:
            return None
        self._write_seq += 1
        write_id = self._write_seq
        for run, _ in changes:
            run.pending = write_id
        self._writes[write_id] = changes
        start = self.start_offset
        for run in self.runs:
            if not run.state.terminal or (run.pending and run.pending != write_id):
                start = run.first
                break
        else:
            start = self.next_offset
        # terminal records past the start offset, counting those of writes still in flight: writes
        # reach the share coordinator in the order they start, so the count never goes back. If an
        # earlier write then fails (a disk error), this count includes its records: the stored
        # count is too high (lag shown too low) until the next write; no record state is wrong.
        complete = sum(r.size for r in self.runs if r.state.terminal and r.first >= start)
        batches = tuple(StateBatch(r.first, r.last, int(persisted_state(r.state)), r.delivery_count)
                        for r, _ in changes if r.last >= start)
        self._sent_start_offset = max(self._sent_start_offset, start)
        return PersistWrite(write_id, start, complete, batches)

    def on_write_complete(self, write_id: int, ok: bool, *, delivery_limit: int, now_ms: int) -> PersistWrite | None:
        """Commit or roll back a write. Returns a write of the start offset alone when, with no
        write left in flight, the stored start offset lags the one in memory (see the docstring)."""
        changes = self._writes.pop(write_id, [])
        for run, (state, count, member_id, deadline_ms) in changes:
            if run.pending != write_id:
                continue
            run.pending = 0
            if ok or run.first < self.start_offset:
                continue
            if state == ACQUIRED and deadline_ms <= now_ms:  # the lock ran out while writing
                event = Event.LOCK_EXPIRED_AT_LIMIT if count >= delivery_limit else Event.LOCK_EXPIRED
                run.state, run.delivery_count, run.member_id, run.deadline_ms = next_state(state, event), count, None, 0
            else:
                run.state, run.delivery_count, run.member_id, run.deadline_ms = state, count, member_id, deadline_ms
        if ok:
            self._advance_start()
            if not self._writes and self.start_offset > self._sent_start_offset:
                return self._start_offset_write()
        return None

    def pending_writes(self) -> int:
        return len(self._writes)

    # ------------------------------------------------------------------ internals
    def _terminal_prefix_end(self, include_pending: bool) -> int:
        for run in self.runs:
            if not run.state.terminal or (run.pending and not include_pending):
                return run.first
        return self.next_offset

    def _advance_start(self) -> None:
        k = 0
        for run in self.runs:
            if not run.state.terminal or run.pending:
                break
            k += 1
        if k:
            del self.runs[:k]
        self.start_offset = self.runs[0].first if self.runs else max(self.start_offset, self.next_offset)

    def _split_copy(self, run, first, last):
        part = run.copy_range(first, last)
        if run.pending:
            changes = self._writes.get(run.pending)
            if changes is not None:
                for r, snap in list(changes):
                    if r is run:
                        changes.append((part, snap))
                        break
        return part

    def _index_of(self, offset: int) -> int:
        return bisect_right(self.runs, offset, key=_FIRST) - 1

    def _overlapping(self, first: int, last: int) -> list[Run]:
        i = max(self._index_of(first), 0)
        out = []
        while i < len(self.runs) and self.runs[i].first <= last:
            if self.runs[i].last >= first:
                out.append(self.runs[i])
            i += 1
        return out

    def _isolate(self, first: int, last: int) -> list[Run]:
        """Split runs so that [first, last] is covered exactly by whole runs; return them."""
        runs = self.runs
        i = self._index_of(first)
        run = runs[i]
        if run.first < first:
            runs.insert(i + 1, self._split_copy(run, first, run.last))
            run.last = first - 1
            i += 1
        out = []
        while i < len(runs) and runs[i].first <= last:
            run = runs[i]
            if run.last > last:
                runs.insert(i + 1, self._split_copy(run, last + 1, run.last))
                run.last = last
            out.append(run)
            i += 1
        return out


def _segments(first: int, last: int, types: Sequence[int]) -> list[tuple[int, int, int]]:
    """(lo, hi, type) runs of equal acknowledge types."""
    if len(types) == 1:
        return [(first, last, types[0])]
    out: list[tuple[int, int, int]] = []
    for offset, ack_type in zip(range(first, last + 1), types):
        if out and out[-1][2] == ack_type and out[-1][1] == offset - 1:
            out[-1] = (out[-1][0], offset, ack_type)
        else:
            out.append((offset, offset, ack_type))
    return out


def _merge(ranges: list[AcquiredRange]) -> list[AcquiredRange]:
    out: list[AcquiredRange] = []
    for r in ranges:
        if out and out[-1].last_offset + 1 == r.first_offset and out[-1].delivery_count == r.delivery_count:
            out[-1] = AcquiredRange(out[-1].first_offset, r.last_offset, r.delivery_count)
        else:
            out.append(r)
    return out


__all__ = [
    "ACK_ACCEPT",
    "AcquiredRange",
    "PersistWrite",
    "Run",
    "SharePartition",
    "StateBatch",
]
