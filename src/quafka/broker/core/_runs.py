"""The in-flight runs of a share partition, kept so that every operation costs O(log n).

A run is a contiguous range of offsets sharing one state, delivery count, holder and lock
deadline (see `share_partition`). `RunIndex` holds the window's runs sorted by first offset
(`SortedRuns`: blocks of at most 2·BLOCK runs and the first offset of each block, so a lookup is
two bisections and an insert or delete moves at most one block, never the window) and the
secondary structures the share partition asks of it:

- the first AVAILABLE run that no write holds, that is due and not blocked (where the next
  acquisition starts): a min-heap;
- the AVAILABLE runs waiting for a due time (quafka's redelivery backoff and delayed delivery,
  `delivery_policy`), by due time: a min-heap; `promote(now_ms)` moves the due ones to the first;
- the earliest acquisition-lock deadline: a min-heap of ACQUIRED runs by deadline;
- the first non-terminal run (how far a write may move the stored start offset): a min-heap;
- the runs a member holds (its share session closes): a set per member;
- the number of terminal (ACKNOWLEDGED or ARCHIVED) records in the window, of AVAILABLE records
  waiting for a due time (per reason) and of AVAILABLE records blocked behind an earlier record of
  their key (`key_order`).

The heaps are lazy: an entry carries the run's `token` at push time, and every change of a run
that matters to a heap (`set_state`, `set_pending`, `set_deadline`) bumps the token and pushes
fresh entries; stale entries are dropped when they reach the top, and the heaps are rebuilt when
stale entries outnumber live runs (amortised O(1) per change). Every mutation of a run's state,
holder, deadline, pending write or extent goes through this class, so the structures never drift.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass
from operator import attrgetter
from typing import Iterator

from .record_state import RecordState

AVAILABLE = RecordState.AVAILABLE
ACQUIRED = RecordState.ACQUIRED
WAIT_BACKOFF = 1  # released (or its lock expired) under quafka.share.redelivery.backoff.ms
WAIT_DELIVERY = 2  # its quafka.deliver.after.ms / quafka.deliver.at.ms header is not due yet
_TERMINAL = frozenset((RecordState.ACKNOWLEDGED, RecordState.ARCHIVED))
_FIRST = attrgetter("first")


@dataclass(slots=True, eq=False)
class Run:
    first: int
    last: int
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    deadline_ms: int = 0  # acquisition lock deadline while ACQUIRED
    pending: int = 0  # id of the write in flight for this run, 0 when none
    batch_records: int = 0  # records in the log batch this run was cut from (throttling halves it)
    batch: int = -1  # first offset of that batch (-1: the run's own first offset)
    due_ms: int = 0  # AVAILABLE: not acquirable before this time (0: now); quafka's extension
    wait: int = 0  # why it waits: WAIT_BACKOFF or WAIT_DELIVERY (0 while due_ms is 0)
    blocked: bool = False  # AVAILABLE: an earlier record of its key is not settled (key ordering)
    # moving to ARCHIVING under a write in flight: quafka's reason for its dead letter
    # (`dead_letter_headers.REASONS`), handed to the `DeadLetterWrite` when that write commits
    dlq_reason: str | None = None
    token: int = 0  # heap entries carrying another token are stale
    alive: bool = True  # False once removed from the window (merged or passed by the start offset)

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def same_as(self, other: "Run", settled_across_batches: bool = False) -> bool:
        """Equal in everything but extent: neighbours like this may be one run. The batch matters
        only to records that may be delivered again (throttling halves it); with
        `settled_across_batches`, settled neighbours of different batches are equal too (a
        restored run's batch may be a log batch's base, with another size)."""
        return (self.state == other.state and self.delivery_count == other.delivery_count
                and self.member_id == other.member_id and self.deadline_ms == other.deadline_ms
                and ((settled_across_batches and self.state in _TERMINAL)
                     or (self.batch == other.batch and self.batch_records == other.batch_records))
                and self.due_ms == other.due_ms and self.wait == other.wait and self.blocked == other.blocked
                and self.dlq_reason == other.dlq_reason and not self.pending and not other.pending)


class SortedRuns:
    """Runs sorted by first offset, with disjoint extents: a list of blocks (each sorted, at most
    2·BLOCK runs) and the first offset of each block. find/add/remove are two bisections plus a
    move inside one block; a block that grows past 2·BLOCK splits in two."""

    BLOCK = 256

    def __init__(self) -> None:
        self._blocks: list[list[Run]] = []
        self._mins: list[int] = []  # first offset of each block's first run
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Run]:
        for block in self._blocks:
            yield from block

    def first(self) -> Run | None:
        return self._blocks[0][0] if self._blocks else None

    def _locate(self, offset: int) -> tuple[int, int]:
        """(block, index) of the run with the greatest first offset <= `offset`; (-1, -1) if none."""
        b = bisect_right(self._mins, offset) - 1
        if b < 0:
            return -1, -1
        return b, bisect_right(self._blocks[b], offset, key=_FIRST) - 1

    def find(self, offset: int) -> Run | None:
        b, i = self._locate(offset)
        return self._blocks[b][i] if b >= 0 else None

    def iter_from(self, offset: int) -> Iterator[Run]:
        """Runs in order from the one holding `offset` (or the first after it)."""
        b, i = self._locate(offset)
        if b < 0:
            b, i = 0, 0
        blocks = self._blocks
        while b < len(blocks):
            block = blocks[b]
            while i < len(block):
                yield block[i]
                i += 1
            b, i = b + 1, 0

    def before(self, run: Run) -> Run | None:
        return self.find(run.first - 1)

    def after(self, run: Run) -> Run | None:
        b, i = self._locate(run.first)
        if b < 0:
            return None
        block = self._blocks[b]
        if i + 1 < len(block):
            return block[i + 1]
        return self._blocks[b + 1][0] if b + 1 < len(self._blocks) else None

    def add(self, run: Run) -> None:
        self._len += 1
        if not self._blocks:
            self._blocks.append([run])
            self._mins.append(run.first)
            return
        b = max(bisect_right(self._mins, run.first) - 1, 0)
        block = self._blocks[b]
        insort(block, run, key=_FIRST)
        if run.first < self._mins[b]:
            self._mins[b] = run.first
        if len(block) > 2 * self.BLOCK:
            right = block[self.BLOCK:]
            del block[self.BLOCK:]
            self._blocks.insert(b + 1, right)
            self._mins.insert(b + 1, right[0].first)

    def remove(self, run: Run) -> None:
        b = bisect_right(self._mins, run.first) - 1
        block = self._blocks[b]
        i = bisect_left(block, run.first, key=_FIRST)
        assert block[i] is run, (run, block[i])
        del block[i]
        self._len -= 1
        if not block:
            del self._blocks[b]
            del self._mins[b]
        elif i == 0:
            self._mins[b] = block[0].first


class RunIndex:
    def __init__(self) -> None:
        self._runs = SortedRuns()
        self._available: list[tuple[int, int, Run]] = []  # (first, token, run)
        self._waiting: list[tuple[int, int, Run]] = []  # (due_ms, token, run)
        self._deadlines: list[tuple[int, int, Run]] = []  # (deadline_ms, token, run)
        self._open: list[tuple[int, int, Run]] = []  # (first, token, run), non-terminal runs
        self._held: dict[str, set[Run]] = {}
        self._token = 0
        self.terminal_count = 0  # terminal records in the window
        self.waiting_counts = [0, 0, 0]  # AVAILABLE records waiting for a due time, by reason (WAIT_*)
        self.blocked_count = 0  # AVAILABLE records blocked behind an earlier record of their key

    # ------------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self._runs)

    def __iter__(self) -> Iterator[Run]:
        return iter(self._runs)

    def first(self) -> Run | None:
        return self._runs.first()

    def find(self, offset: int) -> Run | None:
        """The run holding `offset`, or None when no run starts at or before it."""
        return self._runs.find(offset)

    def iter_from(self, offset: int) -> Iterator[Run]:
        """Runs in offset order from the one holding `offset` (or the first after it)."""
        return self._runs.iter_from(offset)

    def overlapping(self, first: int, last: int) -> Iterator[Run]:
        for run in self.iter_from(first):
            if run.first > last:
                return
            if run.last >= first:
                yield run

    def first_available(self) -> Run | None:
        """The lowest AVAILABLE run that no write holds, not blocked and due (as of the last
        `promote`)."""
        return self._peek(self._available, _available_ok)

    def earliest_due_ms(self) -> int | None:
        """The earliest due time of a run waiting for one (None when none waits)."""
        if not self._waiting:
            return None
        top = self._peek(self._waiting, _waiting_ok)
        return top.due_ms if top is not None else None

    def promote(self, now_ms: int) -> int:
        """Runs whose due time is at or before `now_ms` stop waiting (they become acquirable);
        returns how many records did."""
        heap, promoted = self._waiting, 0
        while heap:  # (empty unless a delivery control is on)
            due, token, run = heap[0]
            if not _waiting_ok(run, token):
                heapq.heappop(heap)
                continue
            if due > now_ms:
                break
            heapq.heappop(heap)
            self.set_due(run, 0, 0)
            promoted += run.size
        return promoted

    def earliest_deadline_ms(self) -> int | None:
        top = self._peek(self._deadlines, _locked_ok)
        return top.deadline_ms if top is not None else None

    def first_open_offset(self) -> int | None:
        """First offset of the lowest non-terminal run (None when every run is terminal)."""
        top = self._peek(self._open, _open_ok)
        return top.first if top is not None else None

    def pop_expired(self, now_ms: int) -> list[Run]:
        """ACQUIRED runs, no write holding them, whose lock deadline is at or before `now_ms`."""
        heap, out = self._deadlines, []
        while heap:
            deadline, token, run = heap[0]
            if not _locked_ok(run, token):
                heapq.heappop(heap)
                continue
            if deadline > now_ms:
                break
            heapq.heappop(heap)
            out.append(run)
        return out

    def held_by(self, member_id: str) -> list[Run]:
        """Runs `member_id` holds (ACQUIRED), in offset order."""
        return sorted(self._held.get(member_id, ()), key=_FIRST)

    @staticmethod
    def _peek(heap: list, ok) -> Run | None:
        while heap:
            _key, token, run = heap[0]
            if ok(run, token):
                return run
            heapq.heappop(heap)
        return None

    # ------------------------------------------------------------------ changes
    def add(self, run: Run) -> Run:
        """Insert a new run (its extent must not overlap another's)."""
        if not run.batch_records:
            run.batch_records = run.size
        if run.batch < 0:
            run.batch = run.first
        self._runs.add(run)
        if run.state in _TERMINAL:
            self.terminal_count += run.size
        if run.state == ACQUIRED and run.member_id is not None:
            self._held.setdefault(run.member_id, set()).add(run)
        if run.state is AVAILABLE:
            self._count(run, 1)
        self._push(run)
        return run

    def set_state(self, run: Run, state: RecordState, member_id: str | None = None, deadline_ms: int = 0,
                  delivery_count: int | None = None, due_ms: int = 0, wait: int = 0) -> None:
        """Move a run to `state` with this holder and lock deadline (None/0 unless ACQUIRED) and
        due time (0 unless AVAILABLE and waiting); it is no longer blocked (the share partition
        blocks it again where its key says so)."""
        was_terminal, is_terminal = run.state in _TERMINAL, state in _TERMINAL
        if was_terminal != is_terminal:
            self.terminal_count += run.size if is_terminal else -run.size
        if run.state == ACQUIRED and run.member_id is not None:
            self._unhold(run)
        if run.state is AVAILABLE:
            self._count(run, -1)
        run.state, run.member_id, run.deadline_ms = state, member_id, deadline_ms
        run.due_ms, run.wait, run.blocked = (due_ms, wait, False) if due_ms > 0 else (0, 0, False)
        if delivery_count is not None:
            run.delivery_count = delivery_count
        if state == ACQUIRED and member_id is not None:
            self._held.setdefault(member_id, set()).add(run)
        if state is AVAILABLE:
            self._count(run, 1)
        self._push(run)

    def set_due(self, run: Run, due_ms: int, wait: int) -> None:
        """An AVAILABLE run waits until `due_ms` (0: acquirable now) for reason `wait`."""
        self._count(run, -1)
        run.due_ms, run.wait = (due_ms, wait) if due_ms > 0 else (0, 0)
        self._count(run, 1)
        self._push(run)

    def set_blocked(self, run: Run, blocked: bool) -> None:
        """Block (or unblock) an AVAILABLE run behind an earlier record of its key."""
        if run.blocked == blocked:
            return
        self._count(run, -1)
        run.blocked = blocked
        self._count(run, 1)
        self._push(run)

    def set_deadline(self, run: Run, deadline_ms: int) -> None:
        run.deadline_ms = deadline_ms
        self._push(run)

    def set_pending(self, run: Run, write_id: int) -> None:
        run.pending = write_id
        self._push(run)

    def split(self, run: Run, at: int) -> Run:
        """Cut `run` before offset `at` (run.first < at <= run.last); returns the new right part."""
        right = Run(at, run.last, run.state, run.delivery_count, run.member_id, run.deadline_ms, run.pending,
                    run.batch_records, run.batch, run.due_ms, run.wait, run.blocked, run.dlq_reason)
        run.last = at - 1
        self._runs.add(right)
        if right.state == ACQUIRED and right.member_id is not None:
            self._held.setdefault(right.member_id, set()).add(right)
        self._push(right)
        return right

    def merge(self, left: Run, right: Run) -> None:
        """Join `right` (the run just after `left`, equal to it) into `left`."""
        self._runs.remove(right)
        right.alive = False
        if right.state == ACQUIRED and right.member_id is not None:
            self._unhold(right)
        left.last = right.last

    def neighbours(self, run: Run) -> tuple[Run | None, Run | None]:
        return self._runs.before(run), self._runs.after(run)

    def pop_first(self) -> Run:
        run = self._runs.first()
        assert run is not None
        self._runs.remove(run)
        run.alive = False
        if run.state in _TERMINAL:
            self.terminal_count -= run.size
        if run.state == ACQUIRED and run.member_id is not None:
            self._unhold(run)
        if run.state is AVAILABLE:
            self._count(run, -1)
        return run

    def _count(self, run: Run, sign: int) -> None:
        """Add (sign 1) or remove (-1) the run's records from the waiting and blocked counts."""
        if run.state == AVAILABLE:
            if run.blocked:
                self.blocked_count += sign * run.size
            elif run.due_ms:
                self.waiting_counts[run.wait] += sign * run.size

    def _unhold(self, run: Run) -> None:
        held = self._held.get(run.member_id)  # type: ignore[arg-type]
        if held is not None:
            held.discard(run)
            if not held:
                del self._held[run.member_id]  # type: ignore[arg-type]

    def _push(self, run: Run) -> None:
        self._token += 1
        run.token = token = self._token
        if not run.pending:
            if run.state == AVAILABLE:
                if run.blocked:
                    pass  # its key's earlier record unblocks it (set_blocked)
                elif run.due_ms:
                    heapq.heappush(self._waiting, (run.due_ms, token, run))
                else:
                    heapq.heappush(self._available, (run.first, token, run))
            elif run.state == ACQUIRED:
                heapq.heappush(self._deadlines, (run.deadline_ms, token, run))
        if run.state not in _TERMINAL:
            heapq.heappush(self._open, (run.first, token, run))
        if len(self._available) + len(self._waiting) + len(self._deadlines) + len(self._open) > 4 * len(self._runs) + 64:
            self._rebuild_heaps()

    def _rebuild_heaps(self) -> None:
        """Drop stale entries (O(n), after at least n changes: amortised O(1) per change)."""
        self._available = [e for e in self._available if _available_ok(e[2], e[1])]
        self._waiting = [e for e in self._waiting if _waiting_ok(e[2], e[1])]
        self._deadlines = [e for e in self._deadlines if _locked_ok(e[2], e[1])]
        self._open = [e for e in self._open if _open_ok(e[2], e[1])]
        for heap in (self._available, self._waiting, self._deadlines, self._open):
            heapq.heapify(heap)


def _available_ok(run: Run, token: int) -> bool:
    return (run.token == token and run.alive and run.state == AVAILABLE and not run.pending and not run.blocked
            and not run.due_ms)


def _waiting_ok(run: Run, token: int) -> bool:
    return (run.token == token and run.alive and run.state == AVAILABLE and not run.pending and not run.blocked
            and run.due_ms > 0)


def _locked_ok(run: Run, token: int) -> bool:
    return run.token == token and run.alive and run.state == ACQUIRED and not run.pending


def _open_ok(run: Run, token: int) -> bool:
    return run.token == token and run.alive and run.state not in _TERMINAL
