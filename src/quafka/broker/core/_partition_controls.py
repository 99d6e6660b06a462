"""quafka's delivery controls in the share partition machine (`delivery_policy`; docs/share-groups.md,
"Extensions"), as `DeliveryControlsMixin`, which `SharePartition` inherits: one machine, its
Kafka-shaped part in `share_partition` and this part here.

- the policy (`configure`) and what it changes when it changes; the window's keys and delivery times
  read from the log (`load_record_meta`);
- new records entering the window acquired, waiting for their delivery time or blocked behind
  their key (`_admit`);
- a record released into its backoff (`_set_state`), a key failed by a failure (`_note_failure`),
  records re-blocked behind their key (`_reblock`), a key's next record when the one before it
  settles (`_settle_offsets`, `_on_new_head`: unblocked, kept parked, or sent after the failed one);
- what counts against `share.partition.max.record.locks` (`window_used`).

Pure, like the rest of the machine; the attributes it uses are `SharePartition`'s.
"""

from __future__ import annotations

from typing import Iterable

from quafka.protocol.dead_letter_headers import REASON_KEY_FAILED

from ._runs import WAIT_BACKOFF, WAIT_DELIVERY, Run
from .delivery_policy import ON_FAILURE_CONTINUE, ON_FAILURE_DEAD_LETTER, DeliveryPolicy, backoff_delay_ms
from .record_state import Event, RecordState, next_state
from .share_partition_effects import AcquiredRange, Effect, WakeFetches, _snapshot

AVAILABLE = RecordState.AVAILABLE
ACQUIRED = RecordState.ACQUIRED

_TAKE, _WAIT, _BLOCK = 0, 1, 2  # what a new record does as it enters the window (`_admit`)
# With a delivery control on, settled records past a waiting one stay in the window as runs; equal
# neighbours merge, but past this many runs per unsettled record the cap counts them all again.
MAX_RUNS_PER_LOCK = 8
MAX_RUNS_SLACK = 10_000


class DeliveryControlsMixin:
    """The delivery-control methods of `SharePartition` (see the module docstring)."""

    def window_used(self) -> int:
        """What counts against `share.partition.max.record.locks`. Kafka's rule
        (`SharePartition.canAcquireRecords`): every offset from the start offset to the end offset,
        settled or not. With a quafka delivery control on, only the records not yet settled: a
        record waiting an hour at the head of the window would otherwise hold the window shut
        behind it once the cap's worth of later records were done (docs/share-groups.md)."""
        span = self.next_offset - self.start_offset
        if not self._active:
            return span
        if len(self.runs) > MAX_RUNS_PER_LOCK * max(span - self.runs.terminal_count, 1) + MAX_RUNS_SLACK:
            return span  # settled records that do not merge (their delivery counts differ) fill memory
        return span - self.runs.terminal_count

    def next_due_ms(self) -> int | None:
        """The earliest due time of a record waiting for one (backoff, delayed delivery)."""
        return self.runs.earliest_due_ms()

    @property
    def record_meta_missing(self) -> bool:
        """The policy needs the window's keys or delivery times and they are not loaded yet: the
        shell reads them from the log and calls `load_record_meta` before acquiring."""
        return self.policy.needs_record_meta and not self.meta_loaded

    def _admit(self, member_id: str, base: int, last: int, meta: dict[int, tuple[bytes | None, int]], *,
               budget: int, record_limit: bool, deadline: int, now_ms: int, max_in_flight: int,
               acquired: list[AcquiredRange], heads: list[int]) -> int:
        """New records from `next_offset` to `last` (of the log batch at `base`) enter the window
        one by one: acquired, waiting for their delivery time, or blocked behind their key.
        Consecutive records doing the same become one run. Returns how many it acquired."""
        policy = self.policy
        keys = self.keys if policy.key_ordering else None
        failed_blocks = policy.on_failure != ON_FAILURE_CONTINUE
        batch_records = last - base + 1
        taken = 0
        segment: list | None = None  # [first, last, kind, due]
        offset = self.next_offset
        room = max_in_flight - self.window_used()
        while offset <= last and offset - self.next_offset < room:
            m = meta.get(offset)
            if m is None:  # no record at this offset (compacted): goes with its neighbours
                kind, due = (segment[2], segment[3]) if segment is not None else (_TAKE, 0)
            else:
                key, due = m
                due = due if policy.delayed_delivery and due > now_ms else 0
                queued = keys is not None and key is not None and keys.head(key) is not None
                failed = keys is not None and key is not None and failed_blocks and key in keys.failed
                kind = _BLOCK if queued or failed else _WAIT if due else _TAKE
                if kind == _TAKE and (record_limit or keys is not None) and taken >= budget:
                    break  # key ordering splits batches per record anyway: MaxRecords is a hard cap
                if keys is not None and key is not None:
                    keys.add(offset, key)
                    if failed and not queued:
                        heads.append(offset)
            if segment is not None and (segment[2] != kind or segment[3] != due):
                self._add_new_run(segment, member_id, deadline, base, batch_records, acquired)
                segment = None
            if segment is None:
                segment = [offset, offset, kind, due]
            else:
                segment[1] = offset
            if kind == _TAKE:
                taken += 1
            offset += 1
        if segment is not None:
            self._add_new_run(segment, member_id, deadline, base, batch_records, acquired)
        self.next_offset = offset
        return taken

    def _add_new_run(self, segment: list, member_id: str, deadline: int, base: int, batch_records: int,
                     acquired: list[AcquiredRange]) -> None:
        first, last, kind, due = segment
        if kind == _TAKE:
            self.runs.add(Run(first, last, ACQUIRED, 1, member_id, deadline, batch_records=batch_records, batch=base))
            acquired.append(AcquiredRange(first, last, 1))
        else:
            self.runs.add(Run(first, last, AVAILABLE, 0, batch_records=batch_records, batch=base, due_ms=due,
                              wait=WAIT_DELIVERY if due else 0, blocked=kind == _BLOCK))

    def configure(self, policy: DeliveryPolicy, now_ms: int) -> list[Effect]:
        """Apply a (changed) delivery policy. Turning a control off frees what it held: records
        waiting for a backoff or delivery time are acquirable at once, blocked records unblock
        and the failed keys are forgotten. Turning key ordering or delayed delivery on makes
        `record_meta_missing` true: the shell then loads the window's keys and delivery times."""
        old, self.policy = self.policy, policy
        self._active, self._keyed = policy.active, policy.key_ordering
        effects: list[Effect] = []
        if old == policy and (self.meta_loaded or not policy.needs_record_meta):
            return effects
        runs, wake = self.runs, False
        stop_backoff = not policy.backoff_ms and runs.waiting_counts[WAIT_BACKOFF]
        stop_delivery = not policy.delayed_delivery and runs.waiting_counts[WAIT_DELIVERY]
        if stop_backoff or stop_delivery:
            for run in [r for r in runs if r.due_ms and r.state == AVAILABLE]:
                if (run.wait == WAIT_BACKOFF and stop_backoff) or (run.wait == WAIT_DELIVERY and stop_delivery):
                    runs.set_due(run, 0, 0)
                    wake = True
        if not policy.key_ordering and self.keys:
            for run in [r for r in runs if r.blocked]:
                runs.set_blocked(run, False)
                wake = True
            if self.keys.failed:
                self._failed_dirty = True
            self.keys.clear()
            if self._failed_dirty and not self._writes:
                effects.append(self._start_offset_write())
        if (policy.key_ordering and not old.key_ordering) or (policy.delayed_delivery and not old.delayed_delivery):
            self.meta_loaded = False
        elif policy.key_ordering and old.on_failure != policy.on_failure:
            wake = self._recompute_blocks(effects) or wake
        if wake:
            effects.append(WakeFetches())
        self._timer_effect(effects)
        return effects

    def load_record_meta(self, meta: dict[int, tuple[bytes | None, int]], now_ms: int) -> list[Effect]:
        """The keys and delivery times ({offset: (key, due time)}) of the window's records, read
        from the log: key ordering queues every unsettled keyed record in offset order and blocks
        those behind another; delayed delivery makes AVAILABLE records wait for their time."""
        effects: list[Effect] = []
        policy, keys, runs = self.policy, self.keys, self.runs
        if policy.key_ordering:
            keys.clear_queues()
        delays: list[tuple[int, int]] = []
        for run in list(runs.iter_from(self.start_offset)):
            if run.state.terminal:
                continue
            for offset in range(run.first, run.last + 1):
                m = meta.get(offset)
                if m is None:
                    continue
                key, due = m
                if policy.key_ordering and key is not None:
                    keys.add(offset, key)
                if policy.delayed_delivery and due > now_ms and run.state == AVAILABLE and not run.pending:
                    delays.append((offset, due))
        for offset, due in delays:
            part = self._isolate(offset, offset)[0]
            if part.state == AVAILABLE and not part.pending and due > part.due_ms:
                runs.set_due(part, due, WAIT_DELIVERY)
        self.meta_loaded = True
        if self._recompute_blocks(effects):
            effects.append(WakeFetches())
        self._timer_effect(effects)
        return effects

    def _recompute_blocks(self, effects: list[Effect]) -> bool:
        """Block every AVAILABLE keyed record that must wait and unblock the others (a changed
        policy, keys loaded); heads of failed keys follow the policy. True when any unblocked."""
        keys, runs = self.keys, self.runs
        failed_blocks = self.policy.on_failure != ON_FAILURE_CONTINUE
        unblocked = False
        for run in [r for r in runs if r.state == AVAILABLE and not r.pending]:
            for offset in range(run.first, run.last + 1):
                if keys.key_of(offset) is None:
                    continue
                waits = keys.waits(offset, failed_blocks)
                part = runs.find(offset)
                if part.blocked != waits:
                    part = self._isolate(offset, offset)[0]
                    runs.set_blocked(part, waits)
                    unblocked = unblocked or not waits
        for key, offset in list(self.keys.failed.items()):
            head = keys.head(key)
            if head is not None and self.policy.on_failure == ON_FAILURE_DEAD_LETTER:
                self._on_new_head(head, effects)
        return unblocked

    def _set_state(self, run: Run, state: RecordState, now_ms: int) -> None:
        """Move a run to a state it reaches without a holder; AVAILABLE again (a release, a lock
        expiry) waits for the redelivery backoff (and, once its write started, behind its key:
        `_start_write` blocks what must wait)."""
        if state == AVAILABLE:
            delay = backoff_delay_ms(self.policy, run.delivery_count, run.first) if self.policy.backoff_ms else 0
            self.runs.set_state(run, state, due_ms=now_ms + delay if delay else 0, wait=WAIT_BACKOFF)
        else:
            self.runs.set_state(run, state)

    def _note_failure(self, run: Run) -> None:
        """Records of `run` failed (rejected, or at the delivery limit): under key ordering with
        park or dead-letter, their keys fail; the next write carries the failed keys."""
        keys = self.keys
        if not keys or not self.policy.key_ordering or self.policy.on_failure == ON_FAILURE_CONTINUE:
            return
        for offset in range(run.first, run.last + 1):
            key = keys.key_of(offset)
            if key is None or key in keys.failed:
                continue
            if keys.fail(key, offset):
                self._pending_failed.append((key, offset))
            else:
                self.failed_keys_over_cap += 1

    def _reblock(self, run: Run) -> None:
        """Block the records of an AVAILABLE run that must wait behind their key."""
        keys = self.keys
        failed_blocks = self.policy.on_failure != ON_FAILURE_CONTINUE
        for offset in [o for o in range(run.first, run.last + 1) if keys.waits(o, failed_blocks)]:
            part = self._isolate(offset, offset)[0]
            self.runs.set_blocked(part, True)

    def _settle_offsets(self, offsets: Iterable[int], effects: list[Effect]) -> None:
        """These records settled (terminal for good): their keys' next records become heads."""
        keys = self.keys
        heads = [h for h in (keys.settle(o) for o in offsets) if h is not None]
        for head in heads:
            self._on_new_head(head, effects)

    def _on_new_head(self, offset: int, effects: list[Effect]) -> None:
        """The record at `offset` is now the first unsettled record of its key: unblock it, or
        (its key failed) keep it parked, or send it after the failed record (dead-letter)."""
        if offset < self.start_offset or offset >= self.next_offset:
            return
        run = self.runs.find(offset)
        if run is None or run.state != AVAILABLE or run.pending:
            return  # held, or a write is deciding it: settled or re-blocked when that completes
        key = self.keys.key_of(offset)
        mode = self.policy.on_failure
        if key is not None and key in self.keys.failed and mode != ON_FAILURE_CONTINUE:
            if mode != ON_FAILURE_DEAD_LETTER:
                if not run.blocked:
                    self.runs.set_blocked(self._isolate(offset, offset)[0], True)
                return
            part = self._isolate(offset, offset)[0]
            changes = {part: _snapshot(part)}
            if self.policy.dead_letters:
                part.dlq_reason = REASON_KEY_FAILED
                self.runs.set_state(part, next_state(AVAILABLE, Event.KEY_FAILED_TO_DLQ))
            else:
                self.runs.set_state(part, next_state(AVAILABLE, Event.KEY_FAILED))
            self._start_write(changes, effects)
            return
        if run.blocked:
            self.runs.set_blocked(self._isolate(offset, offset)[0], False)
            if not run.due_ms:
                effects.append(WakeFetches())
