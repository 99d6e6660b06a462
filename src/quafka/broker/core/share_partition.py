"""The share partition: one share group's view of one topic partition (KIP-932).

Vocabulary:

- start offset (SPSO, `start_offset`): the first offset that is not yet known to be terminal.
  Every offset below it is ACKNOWLEDGED or ARCHIVED, or was never to be delivered.
- end offset (SPEO): the last offset acquired so far; `next_offset` is SPEO + 1, where new records
  from the log are acquired next. The records in [SPSO, SPEO] are the in-flight window, bounded
  by the group's `share.partition.max.record.locks`.
- run: a contiguous range of offsets sharing one state, delivery count, holder and lock deadline.
  A fetch creates one run per producer batch it acquires (batch-level state); a run is split only
  when a request covers part of it (an ack of some offsets, a partial acquisition), and equal
  neighbours are merged again when a write commits. The runs live in a `RunIndex` (`_runs.py`):
  every operation below costs O(log n) in the window's runs (plus the runs it changes).

Every entry point takes its inputs and `now_ms` and returns its results and effects (`PersistWrite`,
`LockTimer`, `WakeFetches`); nothing here reads a clock or does I/O. `now_ms` for lock deadlines
comes from a monotonic clock in the shell, so a wall-clock step neither expires every lock nor
stretches them. Changes that must be persisted are two-phase: the transition is applied at once
and the runs it touched are marked pending; a `PersistWrite` effect is returned; the shell calls
`on_write_complete(write_id, ok)` when the write is durable (commit: the start offset may advance)
or failed (rollback; a record whose lock expired meanwhile, or whose holder's session ended, rolls
back to AVAILABLE, not ACQUIRED — at the delivery limit it is archived by a new write). A write
never persists a start offset past records of another write still in flight (that write could
fail), so overlapping writes can leave the stored start offset behind the one in memory;
`on_write_complete` then returns one more write that catches the stored start offset up. Pending
runs take no other transition until their write completes. Acquisitions and renewals are not
persisted (ACQUIRED is never stored, as Kafka).

Dead-letter queues (Kafka 4.4, KIP-1191): when the caller says the group has one (`dlq_enabled`:
share.version 2 and a DLQ topic configured), a REJECT, a RELEASE at the delivery limit, a share
session ending at the limit and a lock expiring at the limit lead to ARCHIVING instead of ARCHIVED.
ARCHIVING is persisted (state 3) by the same two-phase write; when that write commits, a
`DeadLetterWrite` effect asks the shell to write the records to the DLQ, and the shell then calls
`on_dead_letters_done`, which archives them whether the DLQ write succeeded or not, and persists
that (Kafka's `SharePartition.initiateDLQAndArchive`). ARCHIVING is not terminal, so it holds the
start offset back until then. Records found ARCHIVING at start-up are handed back by
`resume_dead_letters` (Kafka's `maybeResumeDlqArchiving`).

quafka's delivery controls (`delivery_policy`, set by `configure`; all off by default, and then
nothing below changes Kafka's behaviour): a record that becomes AVAILABLE again may have to wait
for a *due time* (redelivery backoff, persisted with its state batch), a new record may wait for
the time its header names (delayed delivery), and a record may be *blocked* behind an earlier
record of its key (key ordering, `key_order`). A waiting or blocked record is AVAILABLE — in the
window, counted in lag and against `share.partition.max.record.locks` as Kafka counts AVAILABLE
records — but not acquirable; the `LockTimer` effect also covers the earliest due time, and
`on_lock_timer` makes due records acquirable and wakes parked fetches. The methods of these
controls are in `_partition_controls` (a mixin of this class); the effects and results are in
`share_partition_effects` (re-exported here). Operators see the window and force records on
through `in_flight` (describe, force release, force archive, release a key).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Iterable, Sequence

from quafka.protocol.share_state_records import StateBatch
from quafka.protocol.dead_letter_headers import (
    REASON_LOCK_EXPIRED_AT_LIMIT,
    REASON_RECOVERED,
    REASON_REJECTED,
    REASON_RELEASED_AT_LIMIT,
)
from quafka.protocol.errors import ErrorCode

from ._partition_controls import DeliveryControlsMixin
from ._runs import WAIT_BACKOFF, Run, RunIndex
from .delivery_policy import KAFKA, DeliveryPolicy
from .key_order import KeyOrder
from .record_state import ACK_ACCEPT, ACK_EVENTS, ACK_RELEASE, ACK_REJECT, ACK_RENEW, Event, RecordState, next_state
from .share_partition_effects import (
    AcquiredRange,
    Acknowledgement,
    Acquisition,
    DeadLetterWrite,
    Effect,
    LockTimer,
    PersistWrite,
    Snapshot,
    WakeFetches,
    _snapshot,
    _state_batch,
)

AVAILABLE = RecordState.AVAILABLE
ACQUIRED = RecordState.ACQUIRED
ARCHIVED = RecordState.ARCHIVED
ARCHIVING = RecordState.ARCHIVING
_NO_LIMIT = 2**62


_TO_DLQ = {
    Event.REJECT: (Event.REJECT_TO_DLQ, REASON_REJECTED),
    Event.RELEASE_AT_LIMIT: (Event.RELEASE_AT_LIMIT_TO_DLQ, REASON_RELEASED_AT_LIMIT),
    Event.LOCK_EXPIRED_AT_LIMIT: (Event.LOCK_EXPIRED_AT_LIMIT_TO_DLQ, REASON_LOCK_EXPIRED_AT_LIMIT),
}



class SharePartition(DeliveryControlsMixin):
    def __init__(self, start_offset: int, state_batches: Iterable[StateBatch] = (), failed_keys=()) -> None:
        """A share partition starting at `start_offset`, with persisted state batches (if any;
        their due times in this machine's clock) and failed keys (key ordering)."""
        self.start_offset = start_offset
        self.next_offset = start_offset
        self.runs = RunIndex()
        self._writes: dict[int, dict[Run, Snapshot]] = {}
        self._write_lows: dict[int, int] = {}  # lowest offset each write in flight holds
        self._sent_start_offset = start_offset  # the highest start offset any write has carried
        self._write_seq = 0
        self._armed_deadline_ms: int | None = None  # the last LockTimer effect's deadline
        self.lock_timeout_count = 0  # records whose acquisition lock expired (a metric; only grows)
        self.policy: DeliveryPolicy = KAFKA  # quafka's delivery controls (`configure`)
        self._active = False  # policy.active, kept at hand (the hot paths ask it)
        self._keyed = False  # policy.key_ordering, likewise
        self.keys = KeyOrder()  # key ordering: the window's keys, and the failed keys
        self.keys.restore_failed(failed_keys)
        self.meta_loaded = False  # whether the window's keys and delivery times are known (`load_record_meta`)
        self._pending_failed: list[tuple[bytes, int]] = []  # keys failed by the write about to start
        self._write_failed: dict[int, list[tuple[bytes, int]]] = {}  # ... by each write in flight
        self._failed_dirty = False  # the failed keys changed since a write last carried them
        self.failed_keys_over_cap = 0  # failures not parked: MAX_FAILED_KEYS reached (a metric)
        for b in sorted(state_batches):
            first = max(b.first_offset, self.next_offset)
            if b.last_offset < first:
                continue
            if first > self.next_offset:  # a gap between persisted batches: not yet delivered
                self.runs.add(Run(self.next_offset, first - 1, AVAILABLE, 0))
            state = RecordState(b.delivery_state)
            if state == ACQUIRED:
                state = AVAILABLE
            due = b.due_ms if len(b) > 4 and state == AVAILABLE and b.due_ms > 0 else 0
            self.runs.add(Run(first, b.last_offset, state, b.delivery_count, due_ms=due,
                              wait=WAIT_BACKOFF if due else 0))
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
        return self.runs.terminal_count

    def fetch_offset(self, max_in_flight: int, now_ms: int | None = None) -> int | None:
        """Where the next acquisition would start: the first acquirable offset in the window, else
        the end of the window — or None when the window is full and nothing in it is acquirable.
        With `now_ms`, records whose due time has come are acquirable first."""
        if now_ms is not None:
            self.runs.promote(now_ms)
        run = self.runs.first_available()
        if run is not None:
            return run.first
        if (self.window_used() if self._active else self.next_offset - self.start_offset) >= max_in_flight:
            return None
        return self.next_offset

    def read_stop_offset(self, offset: int, max_records: int) -> int:
        """The last offset an acquisition of `max_records` starting at `offset` (a `fetch_offset`)
        can need from the log: the shell reads the batches up to the one holding it. From an
        AVAILABLE run inside the window, to its end (the next available run is another read),
        or on into new records when the run ends the window; past the window, `max_records`
        offsets (each offset holds at most one record). O(log n)."""
        if max_records <= 0:
            max_records = _NO_LIMIT
        want = offset + max_records - 1
        if offset >= self.next_offset:
            return want
        run = self.runs.find(offset)
        if run is None or run.last >= want or run.last + 1 >= self.next_offset:
            return want
        return run.last

    def next_deadline_ms(self) -> int | None:
        return self.runs.earliest_deadline_ms()

    def record(self, offset: int) -> tuple[RecordState, int, str | None] | None:
        """(state, delivery count, holder) of one offset in the window, None outside it."""
        if offset < self.start_offset or offset >= self.next_offset:
            return None
        run = self.runs.find(offset)
        assert run is not None
        return run.state, run.delivery_count, run.member_id

    def state_batches(self) -> list[StateBatch]:
        return [_state_batch(r) for r in self.runs]

    def pending_writes(self) -> int:
        return len(self._writes)

    # ------------------------------------------------------------------ acquire
    def acquire(
        self,
        member_id: str,
        log_batches: Sequence[tuple[int, int]],
        *,
        max_records: int,
        record_limit: bool,
        lock_duration_ms: int,
        delivery_limit: int,
        max_in_flight: int,
        now_ms: int,
        record_meta: dict[int, tuple[bytes | None, int]] | None = None,
        never_delivered: Sequence[tuple[int, int]] = (),
    ) -> Acquisition:
        """Acquire records for `member_id` from the log batches the shell read (their (base
        offset, last offset), in order): first AVAILABLE records in the window (released or
        expired ones, redelivered), then new records past the end offset.

        batch_optimized (`record_limit` False): whole batches; `max_records` is a soft cap that
        a batch may overshoot. record_limit: at most `max_records` offsets, splitting a batch.
        Redelivery is throttled near the delivery limit as Kafka 4.2's `SharePartition.acquire` /
        `acquireSubsetBatchRecords` (KAFKA-17541, apache/kafka#20837): once records have been
        delivered max(2, ceil(limit / 2)) times, each further attempt takes half as many of the
        batch's records as the one before, the last permitted attempt (limit > 2) takes a record
        alone, a throttled run is never taken after other records in the same acquisition, and
        nothing is acquired after a throttled run (`throttled` tells the shell to stop reading).

        `record_meta` ({offset: (key, due time)} of the records of `log_batches`) is given when the
        policy needs it (key ordering, delayed delivery): new records that must wait for their
        delivery time or behind an earlier record of their key then enter the window AVAILABLE,
        not acquired (`next_offset` moves past them).

        `never_delivered` ((first, last) offsets of whole batches among `log_batches`, sorted) are
        archived, never delivered: the batches of aborted transactions at
        `share.isolation.level=read_committed` (Kafka's `SharePartition.acquire` ->
        `filterAbortedTransactionalAcquiredRecords`, which archives them after acquiring them) and
        control batches (transaction markers; Kafka acquires them and its clients acknowledge their
        offsets as GAP — the same end, one round trip sooner). New ones enter the window ARCHIVED at
        delivery count 0 and need no write, like a hole, and hold no lock; AVAILABLE ones (delivered
        before the group went read_committed) are archived by a write.
        """
        effects: list[Effect] = []
        if not log_batches:
            return Acquisition([], False, effects)
        runs = self.runs
        runs.promote(now_ms)
        limit = max_records if max_records > 0 else _NO_LIMIT
        deadline = now_ms + lock_duration_ms
        throttle_from = max(2, -(-delivery_limit // 2))
        data_first, data_last = log_batches[0][0], log_batches[-1][1]
        acquired: list[AcquiredRange] = []
        archived: dict[Run, Snapshot] = {}  # AVAILABLE records that may never be delivered
        total = 0
        throttled = False
        while total < limit:
            run = runs.first_available()
            if run is None or run.first > data_last:
                break
            if run.first < data_first:  # compacted away: nothing at these offsets, never delivered
                self._archive(self._isolate(run.first, min(run.last, data_first - 1)), archived)
                continue
            lo, hi = run.first, min(run.last, data_last)
            cut = _first_range_in(never_delivered, lo, hi)
            if cut is not None:
                if cut[0] <= lo:  # an aborted transaction's records, or a marker: never delivered
                    self._archive(self._isolate(lo, min(hi, cut[1])), archived)
                    continue
                hi = cut[0] - 1
            before = run.delivery_count  # deliveries so far
            if before >= delivery_limit:  # over a lowered limit: never delivered again
                self._archive(self._isolate(lo, hi), archived)
                continue
            last_attempt = delivery_limit > 2 and before + 1 == delivery_limit
            throttled = before >= throttle_from or last_attempt
            if throttled and total > 0:
                total = limit  # throttled records come alone, in a later fetch
                break
            n = hi - lo + 1
            if last_attempt:
                n = 1  # the last permitted attempt delivers a record alone
            elif throttled:
                n = min(n, max(1, run.batch_records >> (before - throttle_from + 1)))  # half the batch, a quarter, ...
            if record_limit:
                n = min(n, limit - total)
            for part in self._isolate(lo, lo + n - 1):
                runs.set_state(part, next_state(part.state, Event.ACQUIRE), member_id, deadline,
                               delivery_count=part.delivery_count + 1)
                acquired.append(AcquiredRange(part.first, part.last, part.delivery_count))
            total += n
            if throttled:
                break
        heads: list[int] = []  # new heads of failed keys (key ordering), handled once admitted
        skipped = False
        if not throttled:
            for base, last in log_batches:
                if total >= limit or (self.window_used() if self._active else self.in_flight_count) >= max_in_flight:
                    break
                if last < self.next_offset:
                    continue
                lo = max(base, self.next_offset)
                if lo > self.next_offset and not len(runs):
                    self.start_offset = lo
                elif lo > self.next_offset:  # a hole in the log (no records there): nothing to deliver
                    runs.add(Run(self.next_offset, lo - 1, ARCHIVED, 0))
                if never_delivered and _first_range_in(never_delivered, lo, last) is not None:
                    runs.add(Run(lo, last, ARCHIVED, 0))
                    self.next_offset = last + 1
                    skipped = True
                    if not archived:  # (records archived above must stay in the window for their write)
                        self._advance_start()
                    continue
                if record_meta is not None:
                    self.next_offset = lo
                    total += self._admit(member_id, base, last, record_meta, budget=limit - total,
                                         record_limit=record_limit, deadline=deadline, now_ms=now_ms,
                                         max_in_flight=max_in_flight, acquired=acquired, heads=heads)
                    continue
                hi = last if not record_limit else min(last, lo + (limit - total) - 1)
                runs.add(Run(lo, hi, ACQUIRED, 1, member_id, deadline, batch_records=last - base + 1, batch=base))
                acquired.append(AcquiredRange(lo, hi, 1))
                self.next_offset = hi + 1
                total += hi - lo + 1
        self._start_write(archived, effects)
        if skipped:  # a window of aborted records only must not hold the locks
            self._advance_start()
        for offset in heads:
            self._on_new_head(offset, effects)
        self._timer_effect(effects)
        return Acquisition(_merge(acquired), throttled, effects)

    def _archive(self, parts: list[Run], archived: dict[Run, Snapshot]) -> None:
        for part in parts:
            archived[part] = _snapshot(part)
            if part.delivery_count:  # over a lowered delivery limit: a failure (compacted away is not)
                self._note_failure(part)
            self.runs.set_state(part, ARCHIVED)

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
        dlq_enabled: bool = False,
    ) -> Acknowledgement:
        """Apply acknowledgements atomically: (first offset, last offset, types) batches, where
        types holds one type for the whole range or one per offset (already validated for shape
        by the caller). Every offset must be ACQUIRED by `member_id` with an unexpired lock and no
        write in flight; otherwise nothing changes and the error says why. As Kafka's
        `SharePartition.acknowledge` (4.2-4.4):

        - a batch wholly below the start offset is skipped (its records are already terminal and
          gone from the window: "All offsets in the acknowledgement batch are already
          archived"), with no error — also when another member's acceptance moved the start
          offset past a record whose lock this member had lost;
        - a batch that starts below the start offset and ends at or above it (the start offset
          moved inside it) is applied from the start offset on (`fetchSubMapForAcknowledgementBatch`
          → `checkForStartOffsetWithinBatch`);
        - INVALID_REQUEST: offsets past the end offset (never acquired: "The last offset in
          request is past acquired records");
        - INVALID_RECORD_STATE: offsets in the window not acquired by this member, whose lock
          expired, already acknowledged, or with an earlier change still being written — also an
          offset an earlier batch of the same request acknowledged (batches may share an offset:
          Kafka's request validation lets a batch start at the previous batch's last offset, and
          Kafka applies the batches in turn, so the shared offset is still ACQUIRED only if the
          earlier batch RENEWed it).

        RENEW extends the lock and needs `renew_enabled`. With `dlq_enabled`, REJECT and RELEASE at
        the limit lead to ARCHIVING (see the module docstring)."""
        effects: list[Effect] = []
        kept: list[tuple[int, int, Sequence[int]]] = []
        max_last = -1
        for first, last, types in batches:
            if last < self.start_offset:
                continue  # already terminal and gone from the window (Kafka skips these)
            if first < self.start_offset:  # the part below the start offset is already terminal
                types = types if len(types) == 1 else types[self.start_offset - first:]
                first = self.start_offset
            if last >= self.next_offset:
                return Acknowledgement(ErrorCode.invalid_request, None, effects)  # offsets never acquired
            if ACK_RENEW in types and not renew_enabled:
                return Acknowledgement(ErrorCode.invalid_record_state, None, effects)
            if kept and first <= max_last and not _renewed_before(kept, first, last):
                # Kafka's request validation lets a batch start at the previous batch's last offset,
                # then applies the batches in turn: an offset an earlier batch of this request
                # acknowledged is no longer ACQUIRED (one it renewed still is)
                return Acknowledgement(ErrorCode.invalid_record_state, None, effects)
            max_last = max(max_last, last)
            for run in self.runs.overlapping(first, last):
                if run.state != ACQUIRED or run.member_id != member_id or run.pending or run.deadline_ms <= now_ms:
                    return Acknowledgement(ErrorCode.invalid_record_state, None, effects)
            kept.append((first, last, types))
        changes: dict[Run, Snapshot] = {}
        runs = self.runs
        for first, last, types in kept:
            for lo, hi, ack_type in _segments(first, last, types):
                for run in self._isolate(lo, hi):
                    if ack_type == ACK_RENEW:
                        runs.set_deadline(run, now_ms + lock_duration_ms)
                        continue
                    snapshot = _snapshot(run)
                    event = ACK_EVENTS[ack_type]
                    if ack_type == ACK_RELEASE and run.delivery_count >= delivery_limit:
                        event = Event.RELEASE_AT_LIMIT
                    if ack_type == ACK_REJECT or event == Event.RELEASE_AT_LIMIT:
                        self._note_failure(run)
                        if dlq_enabled:
                            event = self._to_dlq(run, event)
                    state = next_state(run.state, event)
                    if state is AVAILABLE:  # released: may wait for a backoff
                        self._set_state(run, state, now_ms)
                    else:
                        runs.set_state(run, state)
                    changes[run] = snapshot
        write = self._start_write(changes, None)
        self._timer_effect(effects)
        return Acknowledgement(ErrorCode.none, write, effects)

    # ------------------------------------------------------------------ releases
    def release_member(self, member_id: str, *, delivery_limit: int, now_ms: int,
                       dlq_enabled: bool = False) -> list[Effect]:
        """Release every record `member_id` holds because its share session ended (closed at the
        final epoch, or its connection dropped): AVAILABLE again with the delivery count kept, or
        ARCHIVED at the limit — exactly as an explicit RELEASE. This is Kafka 4.2+
        (`SharePartition.releaseAcquiredRecords` with `DeliveryCountOps.NO_OP`, KAFKA-19972,
        apache/kafka#21092); Kafka 4.1 decreased the count instead (`DeliveryCountOps.DECREASE`,
        KAFKA-17541), which 4.2 reverted so that a consumer crashing in a loop cannot have the same
        records delivered forever.

        Records the member acknowledged whose write is still in flight are not held any more;
        should that write fail, they are released as here rather than handed back to the member
        (see `on_write_complete`)."""
        effects: list[Effect] = []
        for write_id, pending in self._writes.items():  # (bounded by the writes in flight)
            for run, snapshot in pending.items():
                if snapshot[0] == ACQUIRED and snapshot[2] == member_id and run.pending == write_id:
                    # its acknowledgement is being written: if that write fails, the record must
                    # not go back to this member (`on_write_complete` releases it instead)
                    pending[run] = (ACQUIRED, snapshot[1], None, *snapshot[3:])
        changes: dict[Run, Snapshot] = {}
        for run in self.runs.held_by(member_id):
            changes[run] = _snapshot(run)
            event = Event.RELEASE_AT_LIMIT if run.delivery_count >= delivery_limit else Event.RELEASE
            if event == Event.RELEASE_AT_LIMIT:
                self._note_failure(run)
                if dlq_enabled:
                    event = self._to_dlq(run, event)
            self._set_state(run, next_state(run.state, event), now_ms)
        self._start_write(changes, effects)
        self._timer_effect(effects)
        return effects

    def return_unsent(self, member_id: str, ranges: Iterable[tuple[int, int]]) -> list[Effect]:
        """Hand back records acquired for `member_id` whose delivery never left the broker (the
        fetch that acquired them was completed, but its connection dropped before the response
        was written): AVAILABLE again at once with the delivery count from before the acquisition
        — the acquisition is undone, not counted as an attempt. Records the member no longer holds
        (a lock expired meanwhile) are left as they are.

        A departure from Kafka, which only has the session-close release (`release_member`, count
        kept since KAFKA-19972): Kafka's `DelayedShareFetch` completes and the response is then
        lost on the closed channel, so those records come back one delivery closer to the limit
        although nobody saw them. A record that did reach a client keeps its count (that release
        still goes through `release_member`), so a consumer crashing on a record still reaches the
        limit."""
        effects: list[Effect] = []
        changes: dict[Run, Snapshot] = {}
        runs = self.runs
        for first, last in ranges:
            held = [run for run in runs.held_by(member_id) if run.last >= first and run.first <= last]
            for run in held:
                for part in self._isolate(max(run.first, first), min(run.last, last)):
                    if part.state is not ACQUIRED or part.member_id != member_id or part.pending:
                        continue
                    changes[part] = _snapshot(part)
                    runs.set_state(part, AVAILABLE, delivery_count=max(part.delivery_count - 1, 0))
        self._start_write(changes, effects)
        self._timer_effect(effects)
        return effects

    def on_lock_timer(self, *, delivery_limit: int, now_ms: int, dlq_enabled: bool = False) -> list[Effect]:
        """The timer of the last `LockTimer` effect fired: expire what is due, make records whose
        due time came acquirable (and wake parked fetches for them), re-arm."""
        self._armed_deadline_ms = None
        promoted = self.runs.promote(now_ms)
        effects = self.expire_locks(delivery_limit=delivery_limit, now_ms=now_ms, dlq_enabled=dlq_enabled)
        if promoted and not any(isinstance(e, WakeFetches) for e in effects):
            effects.append(WakeFetches())
        return effects

    def expire_locks(self, *, delivery_limit: int, now_ms: int, dlq_enabled: bool = False) -> list[Effect]:
        """Return records whose acquisition lock has passed to AVAILABLE with their delivery count
        (ARCHIVED at the limit)."""
        effects: list[Effect] = []
        changes: dict[Run, Snapshot] = {}
        for run in self.runs.pop_expired(now_ms):
            changes[run] = _snapshot(run)
            event = Event.LOCK_EXPIRED_AT_LIMIT if run.delivery_count >= delivery_limit else Event.LOCK_EXPIRED
            if event == Event.LOCK_EXPIRED_AT_LIMIT:
                self._note_failure(run)
                if dlq_enabled:
                    event = self._to_dlq(run, event)
            self._set_state(run, next_state(run.state, event), now_ms)
            self.lock_timeout_count += run.size
        self._start_write(changes, effects)
        self._timer_effect(effects)
        return effects

    # ------------------------------------------------------------------ dead letters
    def _to_dlq(self, run: Run, event: Event) -> Event:
        """The ARCHIVING event standing for `event`; the run keeps quafka's reason (`Run.dlq_reason`,
        which its splits carry) until its write completes."""
        dlq_event, run.dlq_reason = _TO_DLQ[event]
        return dlq_event

    def resume_dead_letters(self) -> list[Effect]:
        """Records persisted ARCHIVING (their DLQ write may not have happened before the broker
        stopped): write them to the DLQ again (Kafka's `SharePartition.maybeResumeDlqArchiving`,
        which does so whether or not the group still has a DLQ; their cause is inferred from the
        delivery count, as Kafka does not persist it)."""
        return [DeadLetterWrite(run.first, run.last, run.delivery_count, REASON_RECOVERED)
                for run in self.runs if run.state == ARCHIVING and not run.pending]

    def on_dead_letters_done(self, ranges: Iterable[tuple[int, int]]) -> list[Effect]:
        """The DLQ writes of these (first offset, last offset) ranges ended (written, or refused:
        either way): archive their records still ARCHIVING, persisted by one write. Offsets the
        start offset passed meanwhile are gone from the window and need nothing. The archive is
        not rolled back if its write fails (Kafka keeps ARCHIVED in memory too: "Could not persist
        ARCHIVED state"); the stored ARCHIVING is written to the DLQ again at the next load."""
        effects: list[Effect] = []
        changes: dict[Run, Snapshot] = {}
        for first_offset, last_offset in ranges:
            first = max(first_offset, self.start_offset)
            last = min(last_offset, self.next_offset - 1)
            if first > last:
                continue
            for run in list(self.runs.overlapping(first, last)):
                if run.state != ARCHIVING or run.pending:
                    continue
                for part in self._isolate(max(run.first, first), min(run.last, last)):
                    changes[part] = _snapshot(part)
                    self.runs.set_state(part, next_state(part.state, Event.DEAD_LETTER_DONE))
        self._start_write(changes, effects)
        return effects

    # ------------------------------------------------------------------ start offset
    def move_start_offset(self, log_start_offset: int) -> list[Effect]:
        """Follow the log start offset (DeleteRecords, retention): records it passes are archived
        (not counted as complete) and leave the window."""
        effects: list[Effect] = []
        if log_start_offset <= self.start_offset:
            return effects
        runs = self.runs
        first = runs.first()
        if first is not None and log_start_offset > first.first:
            for run in self._isolate(first.first, min(log_start_offset, self.next_offset) - 1):
                runs.set_state(run, next_state(run.state, Event.START_OFFSET_MOVED))
        settled = self._keyed and self.start_offset < log_start_offset
        while len(runs) and runs.first().last < log_start_offset:
            runs.pop_first()
        for write_id, changes in self._writes.items():  # what writes in flight still hold (rare path)
            held = [r.first for r in changes if r.alive and r.pending == write_id]
            if held:
                self._write_lows[write_id] = min(held)
            else:
                self._write_lows.pop(write_id, None)
        old_start = self.start_offset
        self.start_offset = log_start_offset
        self.next_offset = max(self.next_offset, log_start_offset)
        effects.append(self._start_offset_write())
        if settled:  # key ordering: the records passed settle, their keys' next records move up
            self._settle_offsets(range(old_start, min(log_start_offset, self.next_offset)), effects)
        effects.append(WakeFetches())
        self._timer_effect(effects)
        return effects

    def _start_offset_write(self) -> PersistWrite:
        """A write of the start offset (and delivery-complete count) alone (and of the failed
        keys, when they changed)."""
        self._write_seq += 1
        write = PersistWrite(self._write_seq, self.start_offset, self.runs.terminal_count, (),
                             self._take_failed_keys(self._write_seq))
        self._writes[write.write_id] = {}
        self._sent_start_offset = max(self._sent_start_offset, self.start_offset)
        return write

    def _take_failed_keys(self, write_id: int) -> tuple | None:
        """The failed keys for the write `write_id` to carry: the whole set when it changed since
        a write last carried it (the keys this write fails are remembered for a rollback)."""
        if self._pending_failed:
            self._write_failed[write_id] = self._pending_failed
            self._pending_failed = []
            self._failed_dirty = True
        if not self._failed_dirty:
            return None
        self._failed_dirty = False
        self._write_failed.setdefault(write_id, [])
        return self.keys.failed_items()

    # ------------------------------------------------------------------ two-phase writes
    def _start_write(self, changes: dict[Run, Snapshot], effects: list[Effect] | None) -> PersistWrite | None:
        """Mark `changes` pending under a new write; append the write to `effects` (if given)."""
        if not changes:
            return None
        # the start offset this write may carry: below the first non-terminal record and below
        # every record another write in flight holds (that write could still fail)
        start = self.runs.first_open_offset()
        if start is None:
            start = self.next_offset
        for low in self._write_lows.values():  # one per write in flight (bounded by requests, not the window)
            start = min(start, low)
        start = max(start, self.start_offset)
        self._write_seq += 1
        write_id = self._write_seq
        for run in changes:
            self.runs.set_pending(run, write_id)
        self._writes[write_id] = changes
        self._write_lows[write_id] = min(r.first for r in changes)
        # terminal records past the start offset, counting those of writes still in flight: writes
        # reach the share coordinator in the order they start, so the count never goes back. If an
        # earlier write then fails (a disk error), this count includes its records: the stored
        # count is too high (lag shown too low) until the next write; no record state is wrong.
        # Every record in [start_offset, start) is terminal, so the count is one subtraction.
        complete = self.runs.terminal_count - (start - self.start_offset)
        batches = tuple(sorted(_state_batch(r) for r in changes if r.last >= start))
        self._sent_start_offset = max(self._sent_start_offset, start)
        write = PersistWrite(write_id, start, complete, batches, self._take_failed_keys(write_id))
        if effects is not None:
            effects.append(write)
        if self._keyed:  # released records of an ordered key wait behind it (splits keep the write's snapshots)
            for run in [r for r in changes if r.state == AVAILABLE]:
                self._reblock(run)
        return write

    def on_write_complete(self, write_id: int, ok: bool, *, delivery_limit: int, now_ms: int,
                          dlq_enabled: bool = False) -> list[Effect]:
        """Commit or roll back a write. Effects: a write of the start offset alone when, with no
        write left in flight, the stored start offset lags the one in memory (see the module
        docstring); `WakeFetches` when records became acquirable; the lock timer.

        A rollback restores each run's state from before the write (Kafka's
        `InFlightState.completeStateTransition(false)`), except for records that were ACQUIRED and
        whose holder is gone by now — the acquisition lock ran out while the write was in flight
        (Kafka's timeout handler skips records with a transition in flight, and
        `completeStateTransition(false)` then finds the lock task expired), or the holder's share
        session ended meanwhile (`release_member`, which Kafka's `releaseAcquiredRecords` also
        skips for them). Such records become AVAILABLE with the delivery count from before the
        write and are delivered again (Kafka's result: `completeStateTransition(false)` and
        `updateFindNextFetchOffset(true)` in `SharePartition.rollbackOrProcessStateUpdates`), not
        persisted, as Kafka does not persist them either. Kafka makes them AVAILABLE even at the
        delivery limit and would deliver them once more; quafka instead applies the rule of the
        event that took the holder away — a lock expiring at the limit, or a session ending at
        it — as Kafka's timeout path does, whatever the persist did: ARCHIVED, persisted by a new
        write whose commit moves the start offset and wakes parked fetches (the archive stays if
        that write fails too); or, with `dlq_enabled` (the group has a DLQ, as for
        `expire_locks`), ARCHIVING with its `DeadLetterWrite` at once, after which
        `on_dead_letters_done` archives and persists it. A record whose holder's session ended
        is not handed back to that holder, as Kafka would do until the lock expires."""
        effects: list[Effect] = []
        changes = self._writes.pop(write_id, {})
        self._write_lows.pop(write_id, None)
        failed = self._write_failed.pop(write_id, None)
        if not ok and failed is not None:  # the failed keys it carried are not stored
            for key, offset in failed:
                self.keys.unfail(key, offset)
            self._failed_dirty = True
        runs = self.runs
        wake = False
        keyed = self._keyed
        settled: list[Run] = []  # runs that became terminal for good (key ordering settles them)
        given_up: dict[Run, Snapshot] = {}  # holder gone at the delivery limit: ARCHIVED by a new write
        for run, (state, count, member_id, deadline_ms, due_ms, wait) in changes.items():
            if run.pending != write_id or not run.alive:
                continue
            reason, run.dlq_reason = run.dlq_reason, None  # this write's outcome decides it: sent or dropped
            runs.set_pending(run, 0)
            if ok and reason is not None and run.state == ARCHIVING:
                effects.append(DeadLetterWrite(run.first, run.last, run.delivery_count, reason))
            if not ok and run.first >= self.start_offset and state != ARCHIVING:  # (an archive stays)
                expired = deadline_ms <= now_ms
                if state == ACQUIRED and (expired or member_id is None):  # the holder is gone
                    if count < delivery_limit:
                        run.delivery_count = count
                        self._set_state(run, AVAILABLE, now_ms)
                    else:  # at the limit: given up, as the event that took the holder away
                        event = Event.LOCK_EXPIRED_AT_LIMIT if expired else Event.RELEASE_AT_LIMIT
                        run.delivery_count = count
                        self._note_failure(run)
                        if expired:
                            self.lock_timeout_count += run.size
                        if dlq_enabled or reason is not None:
                            # ARCHIVING, and its DLQ write goes ahead although ARCHIVING is not stored
                            # (Kafka's timeout path writes the DLQ whatever the persist did);
                            # on_dead_letters_done then archives and persists it
                            event, why = _TO_DLQ[event]
                            runs.set_state(run, next_state(ACQUIRED, event))
                            effects.append(DeadLetterWrite(run.first, run.last, count, why))
                        else:
                            runs.set_state(run, next_state(ACQUIRED, event))
                            # persisted by a new write; kept if that write fails too (Kafka's timeout
                            # path keeps its transition whatever the persist did): nothing loops
                            given_up[run] = _snapshot(run)
                            continue  # settled (key ordering) when that write commits
                else:
                    runs.set_state(run, state, member_id, deadline_ms, delivery_count=count, due_ms=due_ms, wait=wait)
                if keyed and run.state == AVAILABLE:
                    self._reblock(run)
            if keyed and run.state.terminal:
                settled.append(run)
            wake = wake or (run.state == AVAILABLE and not run.blocked and not run.due_ms)
        self._start_write(given_up, effects)
        if settled:
            self._settle_offsets([o for run in settled for o in range(run.first, run.last + 1)], effects)
        if not ok and self._failed_dirty and not self._writes:
            effects.append(self._start_offset_write())  # store the failed keys as they are now
        if ok:
            for run in changes:
                if run.alive and not run.pending:
                    self._merge_neighbours(run)
            before = self.start_offset
            self._advance_start()
            wake = wake or self.start_offset > before  # room in the window
            if not self._writes and self.start_offset > self._sent_start_offset:
                effects.append(self._start_offset_write())
        if wake:
            effects.append(WakeFetches())
        self._timer_effect(effects)
        return effects

    # ------------------------------------------------------------------ internals
    def _timer_effect(self, effects: list[Effect]) -> None:
        deadline = self.runs.earliest_deadline_ms()
        if self._active:  # records may wait for a due time
            due = self.runs.earliest_due_ms()
            if due is not None and (deadline is None or due < deadline):
                deadline = due
        if deadline != self._armed_deadline_ms:
            self._armed_deadline_ms = deadline
            effects.append(LockTimer(deadline))

    def _advance_start(self) -> None:
        runs = self.runs
        while len(runs):
            run = runs.first()
            if not run.state.terminal or run.pending:
                break
            runs.pop_first()
        first = runs.first()
        self.start_offset = first.first if first is not None else max(self.start_offset, self.next_offset)

    def _merge_neighbours(self, run: Run) -> None:
        """Join `run` with every equal neighbour on either side (runs of one batch, same state,
        count, holder and deadline, no write pending)."""
        runs = self.runs
        loose = self._active  # settled records past a waiting one stay in the window: keep them few
        while True:
            after = runs.neighbours(run)[1]
            if after is None or after.first != run.last + 1 or not run.same_as(after, loose):
                break
            runs.merge(run, after)
        while True:
            before = runs.neighbours(run)[0]
            if before is None or before.last + 1 != run.first or not before.same_as(run, loose):
                break
            runs.merge(before, run)
            run = before

    def _split(self, run: Run, at: int) -> Run:
        right = self.runs.split(run, at)  # (the right part keeps the run's DLQ reason)
        if run.pending:
            changes = self._writes.get(run.pending)
            if changes is not None and run in changes:
                changes[right] = changes[run]
        return right

    def _isolate(self, first: int, last: int) -> list[Run]:
        """Split runs so that [first, last] is covered exactly by whole runs; return them."""
        run = self.runs.find(first)
        assert run is not None and run.last >= first
        if run.first < first:
            run = self._split(run, first)
        out = [run]
        while run.last < last:
            run = next(self.runs.iter_from(run.last + 1))
            out.append(run)
        if run.last > last:
            self._split(run, last + 1)
        return out


def _renewed_before(kept: list[tuple[int, int, Sequence[int]]], first: int, last: int) -> bool:
    """Every offset of [first, last] that an earlier batch covers was RENEWed by it (rare: batches
    overlap only when a client sends them so)."""
    for lo, hi, types in kept:
        for o in range(max(lo, first), min(hi, last) + 1):
            if (types[0] if len(types) == 1 else types[o - lo]) != ACK_RENEW:
                return False
    return True


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
    "Acknowledgement",
    "Acquisition",
    "DeadLetterWrite",
    "Effect",
    "LockTimer",
    "PersistWrite",
    "SharePartition",
    "StateBatch",
    "WakeFetches",
]


def _first_range_in(ranges: Sequence[tuple[int, int]], lo: int, hi: int) -> tuple[int, int] | None:
    """The first of `ranges` (sorted, disjoint) overlapping [lo, hi], or None. O(log n)."""
    if not ranges:
        return None
    i = bisect_right(ranges, (lo, _NO_LIMIT)) - 1
    if i >= 0 and ranges[i][1] >= lo:
        return ranges[i]
    if i + 1 < len(ranges) and ranges[i + 1][0] <= hi:
        return ranges[i + 1]
    return None
