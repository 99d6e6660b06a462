"""The share partition against a naive per-offset reference model (kafka-reference §4.1, §12).

A Hypothesis state machine produces batches into a log, lets two or three members acquire,
acknowledge (accept, release, reject, gap, renew — one type per range or one per offset, valid or
not), lets locks expire as a virtual clock advances, releases members, moves the log start offset
and restarts the partition from what was made durable. Writes are committed or failed at once, or
left in flight for a while. After every step the machine and the model must agree on every
record's state, delivery count and holder, on the start and end offsets, and on the §12
invariants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from quafka.broker.core.record_state import RecordState, persisted_state
from quafka.broker.core.share_partition import PersistWrite, SharePartition, StateBatch
from quafka.protocol.errors import ErrorCode

A, Q, K, X = RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
MEMBERS = ("m1", "m2", "m3")
LOCK_MS = 100
ACK_TYPES = st.sampled_from([ACCEPT, ACCEPT, RELEASE, RELEASE, RELEASE, REJECT, GAP, RENEW])


@dataclass
class Rec:
    """The reference model's view of one offset."""

    state: RecordState
    count: int
    member: str | None = None
    deadline: int = 0
    pending: int = 0  # write id in flight, 0 when none
    snapshot: tuple | None = None  # (state, count, member, deadline) before the write in flight
    written: RecordState | None = None  # the state the last committed write made durable


def overlay(old: list[StateBatch], new: list[StateBatch]) -> list[StateBatch]:
    """Lay `new` state batches over `old` ones (newer wins), as a share-state store does."""
    out = list(old)
    for b in new:
        kept = []
        for o in out:
            if o.last_offset < b.first_offset or o.first_offset > b.last_offset:
                kept.append(o)
                continue
            if o.first_offset < b.first_offset:
                kept.append(o._replace(last_offset=b.first_offset - 1))
            if o.last_offset > b.last_offset:
                kept.append(o._replace(first_offset=b.last_offset + 1))
        kept.append(b)
        out = sorted(kept)
    return out


class SharePartitionMachine(RuleBasedStateMachine):
    # ------------------------------------------------------------------ set-up
    @initialize(limit=st.sampled_from([2, 3, 3, 4, 5]), max_in_flight=st.integers(3, 30), members=st.integers(2, 3),
                sizes=st.lists(st.integers(1, 6), min_size=1, max_size=4))
    def setup(self, limit, max_in_flight, members, sizes):
        self.limit = limit
        self.throttle_from = max(2, math.ceil(limit / 2))
        self.max_in_flight = max_in_flight
        self.members = MEMBERS[:members]
        self.now = 0
        self.log: list[tuple[int, int]] = []
        self.log_start = 0
        self.log_end = 0
        self.sp = SharePartition(0)
        self.recs: dict[int, Rec] = {}
        self.start = 0  # model SPSO
        self.next = 0  # model SPEO + 1
        self.writes: dict[int, tuple[PersistWrite, list[int]]] = {}
        self.durable_start = 0
        self.durable_batches: list[StateBatch] = []
        self.acknowledged: set[int] = set()  # offsets durably ACKNOWLEDGED: never delivered again
        self.highest_start = 0
        self.sent_start = 0  # the highest start offset a write has carried
        self.produce(sizes)

    # ------------------------------------------------------------------ helpers
    def window(self):
        return range(self.start, self.next)

    def model_advance(self):
        """The start offset passes the contiguous terminal records whose writes are durable."""
        while self.start < self.next:
            rec = self.recs[self.start]
            if not rec.state.terminal or rec.pending:
                break
            del self.recs[self.start]
            self.start += 1

    def expected_write_start(self, write_id: int) -> int:
        for o in self.window():
            rec = self.recs[o]
            if not rec.state.terminal or (rec.pending and rec.pending != write_id):
                return o
        return self.next

    def register(self, write: PersistWrite | None, changed: list[int], snapshots: dict[int, tuple]):
        if not changed:
            assert write is None, "a change that alters nothing must write nothing"
            return
        assert write is not None, "a change to record states must be persisted"
        assert write.write_id not in self.writes
        for o in changed:
            rec = self.recs[o]
            rec.pending = write.write_id
            rec.snapshot = snapshots[o]
        self.check_write(write, changed)
        self.writes[write.write_id] = (write, changed)
        self.sent_start = max(self.sent_start, write.start_offset)

    def check_write(self, write: PersistWrite, changed: list[int]):
        start = self.expected_write_start(write.write_id)
        assert write.start_offset == start, (
            f"write {write.write_id} carries start {write.start_offset}, but only records that are durable or "
            f"in this write may be passed: expected {start}")
        # terminal records past the start, including those of other writes still in flight (writes
        # reach the share coordinator in the order they start, so the count never goes back)
        complete = sum(1 for o in self.window() if o >= start and self.recs[o].state.terminal)
        assert write.delivery_complete_count == complete
        covered = []
        for b in write.state_batches:
            for o in range(b.first_offset, b.last_offset + 1):
                rec = self.recs[o]
                assert o in changed
                assert (b.state, b.delivery_count) == (int(persisted_state(rec.state)), rec.count)
                covered.append(o)
        assert covered == sorted(o for o in changed if o >= start)

    def settle(self, write: PersistWrite | None, how: str):
        if write is None or how == "delay":
            return
        self.complete(write.write_id, how == "commit")

    def complete(self, write_id: int, ok: bool):
        write, changed = self.writes.pop(write_id)
        catch_up = self.sp.on_write_complete(write_id, ok, delivery_limit=self.limit, now_ms=self.now)
        for o in changed:
            if o < self.start:
                continue  # passed by the start offset while the write was in flight
            rec = self.recs[o]
            assert rec.pending == write_id
            rec.pending = 0
            if ok:
                rec.written = rec.state
                if rec.state == K:
                    self.acknowledged.add(o)
                continue
            state, count, member, deadline = rec.snapshot
            if state == Q and deadline <= self.now:  # the lock ran out while the write was in flight
                rec.state, rec.count, rec.member, rec.deadline = (X if count >= self.limit else A), count, None, 0
            else:
                rec.state, rec.count, rec.member, rec.deadline = state, count, member, deadline
        if ok:
            self.durable_start = max(self.durable_start, write.start_offset)
            self.durable_batches = [b for b in overlay(self.durable_batches, list(write.state_batches))
                                    if b.last_offset >= self.durable_start]
            self.model_advance()
        if ok and not self.writes and self.start > self.sent_start:
            # overlapping writes left the stored start offset behind: one more write catches it up
            assert catch_up is not None and catch_up.start_offset == self.start and catch_up.state_batches == ()
            self.writes[catch_up.write_id] = (catch_up, [])
            self.sent_start = self.start
        else:
            assert catch_up is None, f"unexpected catch-up write {catch_up}"

    def release_where(self, predicate):
        changed, snapshots = [], {}
        for o in self.window():
            rec = self.recs[o]
            if rec.state == Q and not rec.pending and predicate(rec):
                snapshots[o] = (rec.state, rec.count, rec.member, rec.deadline)
                rec.state = X if rec.count >= self.limit else A
                rec.member, rec.deadline = None, 0
                changed.append(o)
        return changed, snapshots

    def owned_segments(self, member):
        """Contiguous ranges of offsets acquired by `member`."""
        segments = []
        for o in self.window():
            rec = self.recs[o]
            if rec.state == Q and rec.member == member:
                if segments and segments[-1][1] == o - 1:
                    segments[-1][1] = o
                else:
                    segments.append([o, o])
        return segments

    def draw_ranges(self, data, member, mode):
        """Up to three sorted, disjoint (first, last) ranges."""
        ranges = []
        if mode == "owned":
            segments = self.owned_segments(member)
            if not segments:
                return []
            for _ in range(data.draw(st.integers(1, 3), label="batches")):
                lo, hi = data.draw(st.sampled_from(segments), label="segment")
                first = data.draw(st.sampled_from([lo, lo]) | st.integers(lo, hi), label="first")
                last = data.draw(st.sampled_from([hi, hi]) | st.integers(first, hi), label="last")
                ranges.append((first, last))
        else:
            lo, hi = self.start - 2, self.next
            for _ in range(data.draw(st.integers(1, 2), label="batches")):
                first = data.draw(st.integers(max(lo, 0), hi), label="first")
                last = data.draw(st.integers(first, min(first + 6, hi)), label="last")
                ranges.append((first, last))
        ranges.sort()
        disjoint = []
        for first, last in ranges:
            if disjoint and first <= disjoint[-1][1]:
                continue
            disjoint.append((first, last))
        return disjoint

    def draw_types(self, data, first, last, renew_only=False):
        types = st.just(RENEW) if renew_only else ACK_TYPES
        if first == last or data.draw(st.booleans(), label="one type"):
            return (data.draw(types, label="type"),)
        return tuple(data.draw(st.lists(types, min_size=last - first + 1, max_size=last - first + 1), label="types"))

    def expected_ack_error(self, member, batches, renew_enabled):
        """The acknowledgement batches that apply (those below the start offset are skipped, as
        Kafka does) and the error that refuses the whole request, if any."""
        kept = []
        for first, last, types in batches:
            if last < self.start:
                continue
            if first < self.start:
                types = types if len(types) == 1 else types[self.start - first:]
                first = self.start
            if last >= self.next:
                return [], ErrorCode.invalid_request  # offsets never acquired
            if RENEW in types and not renew_enabled:
                return [], ErrorCode.invalid_record_state
            for o in range(first, last + 1):
                rec = self.recs[o]
                if rec.state != Q or rec.member != member or rec.pending or rec.deadline <= self.now:
                    return [], ErrorCode.invalid_record_state
            kept.append((first, last, types))
        return kept, ErrorCode.none

    def do_acknowledge(self, member, batches, renew_enabled, how):
        ok, write = self.sp.acknowledge(member, batches, delivery_limit=self.limit, lock_duration_ms=LOCK_MS,
                                        renew_enabled=renew_enabled, now_ms=self.now)
        kept, error = self.expected_ack_error(member, batches, renew_enabled)
        assert (ok, self.sp.last_ack_error) == (error == ErrorCode.none, error), (
            f"acknowledge {batches} by {member} at {self.now}: expected {error!r}")
        if not ok:
            assert write is None
            return
        changed, snapshots = [], {}
        for first, last, types in kept:
            for i, o in enumerate(range(first, last + 1)):
                ack_type = types[0] if len(types) == 1 else types[i]
                rec = self.recs[o]
                if ack_type == RENEW:
                    rec.deadline = self.now + LOCK_MS
                    continue
                snapshots[o] = (rec.state, rec.count, rec.member, rec.deadline)
                if ack_type == ACCEPT:
                    rec.state = K
                elif ack_type == RELEASE:
                    rec.state = X if rec.count >= self.limit else A
                else:
                    rec.state = X
                rec.member, rec.deadline = None, 0
                changed.append(o)
        self.register(write, changed, snapshots)
        self.settle(write, how)

    def is_throttled(self, deliveries_before: int) -> bool:
        return deliveries_before >= self.throttle_from or deliveries_before + 1 >= self.limit

    # ------------------------------------------------------------------ rules
    @rule(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=3))
    def produce(self, sizes):
        for size in sizes:
            self.log.append((self.log_end, self.log_end + size - 1))
            self.log_end += size

    @rule(ms=st.one_of(st.integers(0, LOCK_MS // 4), st.integers(LOCK_MS // 2, 2 * LOCK_MS)))
    def tick(self, ms):
        self.now += ms

    acquire_args = dict(member_index=st.integers(0, 2), max_records=st.integers(0, 12), record_limit=st.booleans(),
                        batch_size=st.integers(1, 16), batches=st.integers(1, 4),
                        from_earlier=st.sampled_from([0, 0, 0, 1, 3]))

    @rule(**acquire_args)
    def acquire(self, member_index, max_records, record_limit, batch_size, batches, from_earlier):
        member = self.members[member_index % len(self.members)]
        fetch_offset = self.sp.fetch_offset(self.max_in_flight)
        read_from = self.start if fetch_offset is None else fetch_offset
        if read_from >= self.log_end:
            return
        index = next(i for i, (_b, last) in enumerate(self.log) if last >= read_from)
        index = max(0, index - from_earlier)  # a read from before the start offset must be trimmed
        log_batches = self.log[index:index + batches + from_earlier]
        got = self.sp.acquire(member, log_batches, max_records=max_records, batch_size=batch_size,
                              record_limit=record_limit, lock_duration_ms=LOCK_MS, delivery_limit=self.limit,
                              max_in_flight=self.max_in_flight, now_ms=self.now)
        if fetch_offset is None:
            assert got == [], "a full window with nothing available acquires nothing"
        self.check_acquired(got, member, log_batches, max_records, record_limit, batch_size)

    def check_acquired(self, got, member, log_batches, max_records, record_limit, batch_size):
        acquired = [(o, r.delivery_count) for r in got for o in range(r.first_offset, r.last_offset + 1)]
        offsets = [o for o, _c in acquired]
        assert offsets == sorted(set(offsets)), f"overlapping or unordered ranges {got}"
        data_first, data_last = log_batches[0][0], log_batches[-1][1]
        cap = max_records if max_records > 0 else math.inf
        old = [(o, c) for o, c in acquired if o < self.next]
        new = [o for o, _c in acquired if o >= self.next]
        for o, c in acquired:
            assert c <= self.limit, f"offset {o} delivered {c} times, over the limit {self.limit}"
            assert o not in self.acknowledged, f"acknowledged offset {o} delivered again"
            assert data_first <= o <= data_last
        for o, c in old:
            assert o >= self.start, f"offset {o} below the start offset {self.start} acquired"
            rec = self.recs[o]
            assert rec.state == A and not rec.pending, f"offset {o} acquired from {rec}"
            assert c == rec.count + 1
        assert new == list(range(self.next, self.next + len(new))), f"new records {new} not contiguous"
        assert all(c == 1 for o, c in acquired if o >= self.next)
        total = len(acquired)
        if record_limit:
            assert total <= cap, f"record_limit: {total} records for MaxRecords {max_records}"
        # throttling near the delivery limit (KAFKA-17541): records delivered throttle_from times
        # or more go half a batch at a time, the last permitted attempt alone
        available = [o for o in self.window() if data_first <= o <= data_last
                     and self.recs[o].state == A and not self.recs[o].pending]
        throttled = [(o, c) for o, c in old if self.is_throttled(c - 1)]
        if throttled:
            counts = {c for _o, c in throttled}
            assert len(counts) == 1, f"throttled records with different counts {throttled}"
            count = counts.pop()
            first_throttled = throttled[0][0]
            segment = 1  # the available records of that count around the throttled ones
            while first_throttled + segment in available and self.recs[first_throttled + segment].count == count - 1:
                segment += 1
            batch = next(last - base + 1 for base, last in log_batches if base <= first_throttled <= last)
            most = 1 if count >= self.limit else max(1, max(segment, batch) >> (count - self.throttle_from))
            assert len(throttled) <= most, f"{len(throttled)} records at delivery {count}: at most {most}"
            assert offsets[-len(throttled):] == [o for o, _c in throttled], "records acquired after throttled ones"
            assert not new
            if count >= self.limit and self.limit > 2:
                assert total == 1, f"the last delivery attempt must go alone, got {got}"
        # nothing acquirable in the data was left behind, unless acquisition stopped before throttling
        skipped = sorted(set(available) - {o for o, _c in old})
        stopped = bool(throttled) or total >= cap
        if skipped and not stopped:
            assert self.is_throttled(self.recs[skipped[0]].count), f"available offsets {skipped} left behind by {got}"
            assert not new
            stopped = True
        # new records: whole batches (batch_optimized) while under the soft cap and the lock cap
        pieces = []
        if new:
            for base, last in log_batches:
                lo, hi = max(base, new[0]), min(last, new[-1])
                if lo <= hi:
                    pieces.append((lo, hi, last))
            for lo, _hi, _last in pieces:
                assert lo - self.start < self.max_in_flight, f"new batch at {lo} acquired at the lock cap"
            lo, hi, batch_last = pieces[-1]
            assert total - (hi - lo + 1) < cap, "a new batch acquired after MaxRecords was reached"
            if hi != batch_last:
                assert record_limit and total == cap, f"batch split at {hi} in batch_optimized mode"
        end = self.next + len(new)
        if not stopped and end <= data_last and end - self.start < self.max_in_flight:
            raise AssertionError(f"acquisition stopped at {end} with more records and room: {got}")
        # apply
        for o, c in acquired:
            self.recs[o] = Rec(Q, c, member, self.now + LOCK_MS,
                               written=self.recs[o].written if o in self.recs else None)
        self.next = end

    @rule(**acquire_args)
    def acquire_again(self, **kwargs):  # a second rule: acquisitions are twice as frequent
        self.acquire(**kwargs)

    ack_args = dict(data=st.data(), how=st.sampled_from(["commit", "commit", "fail", "delay", "delay", "delay"]))
    settle_how = st.sampled_from(["commit", "fail", "delay", "delay"])

    @rule(**ack_args)
    def acknowledge_again(self, data, how):  # a second rule: acknowledgements are twice as frequent
        self.acknowledge(data, how)

    @rule(**ack_args)
    def acknowledge(self, data, how):
        """Acknowledge some of a member's records (or any range, mostly invalid) with random types,
        one per range or one per offset; the write is committed, failed or left in flight."""
        member = data.draw(st.sampled_from(self.members), label="member")
        mode = data.draw(st.sampled_from(["owned", "owned", "owned", "any"]), label="mode")
        if mode == "owned" and not self.owned_segments(member):
            owners = [m for m in self.members if self.owned_segments(m)]
            if owners:
                member = data.draw(st.sampled_from(owners), label="owner")
        ranges = self.draw_ranges(data, member, mode)
        if not ranges:
            return
        batches = [(first, last, self.draw_types(data, first, last)) for first, last in ranges]
        renew_enabled = data.draw(st.sampled_from([True, True, True, False]), label="renew enabled")
        self.do_acknowledge(member, batches, renew_enabled, how)

    @rule(data=st.data(), acquire_again=st.fixed_dictionaries(acquire_args))
    def release_some_and_fetch_again(self, data, acquire_again):
        """A consumer that cannot process some of its records releases them and polls again:
        records climb towards the delivery limit at different paces."""
        owners = [m for m in self.members if self.owned_segments(m)]
        if owners:
            member = data.draw(st.sampled_from(owners), label="owner")
            ranges = self.draw_ranges(data, member, "owned")
            self.do_acknowledge(member, [(first, last, (RELEASE,)) for first, last in ranges], True, "commit")
        self.acquire(**acquire_again)

    @rule(data=st.data(), renew_enabled=st.booleans())
    def renew(self, data, renew_enabled):
        owners = [m for m in self.members if self.owned_segments(m)]
        if not owners:
            return
        member = data.draw(st.sampled_from(owners), label="owner")
        ranges = self.draw_ranges(data, member, "owned")
        batches = [(first, last, self.draw_types(data, first, last, renew_only=True)) for first, last in ranges]
        self.do_acknowledge(member, batches, renew_enabled, "commit")

    @rule(data=st.data())
    def steal(self, data):
        """Acknowledge another member's records, mixed with one's own: the whole request is refused
        (INVALID_RECORD_STATE) and nothing changes."""
        owners = [m for m in self.members if self.owned_segments(m)]
        if not owners:
            return
        victim = data.draw(st.sampled_from(owners), label="victim")
        thief = data.draw(st.sampled_from([m for m in self.members if m != victim]), label="thief")
        ranges = self.draw_ranges(data, victim, "owned") + self.draw_ranges(data, thief, "owned")
        ranges.sort()
        disjoint = []
        for first, last in ranges:
            if not disjoint or first > disjoint[-1][1]:
                disjoint.append((first, last))
        batches = [(first, last, self.draw_types(data, first, last)) for first, last in disjoint]
        self.do_acknowledge(thief, batches, True, "commit")

    @rule(how=settle_how)
    def expire_locks(self, how):
        write = self.sp.expire_locks(delivery_limit=self.limit, now_ms=self.now)
        changed, snapshots = self.release_where(lambda rec: rec.deadline <= self.now)
        self.register(write, changed, snapshots)
        self.settle(write, how)

    @rule(member_index=st.integers(0, 2), how=settle_how)
    def release_member(self, member_index, how):
        member = self.members[member_index % len(self.members)]
        write = self.sp.release_member(member, delivery_limit=self.limit, now_ms=self.now)
        changed, snapshots = self.release_where(lambda rec: rec.member == member)
        self.register(write, changed, snapshots)
        self.settle(write, how)

    @precondition(lambda self: self.writes)
    @rule(data=st.data(), ok=st.sampled_from([True, True, False]))
    def complete_write(self, data, ok):
        """Complete one of the writes in flight (not necessarily the oldest)."""
        write_id = data.draw(st.sampled_from(sorted(self.writes)), label="write")
        self.complete(write_id, ok)

    @precondition(lambda self: self.writes)
    @rule(ok=st.sampled_from([True, True, False]))
    def complete_oldest_write(self, ok):
        self.complete(min(self.writes), ok)

    @precondition(lambda self: self.log_end > self.log_start)
    @rule(data=st.data(), how=st.sampled_from(["commit", "delay"]))
    def move_log_start(self, data, how):
        """The log start offset moves (retention, DeleteRecords): the share partition follows it."""
        lo, hi = max(self.log_start, self.start) + 1, min(self.log_end, self.start + 6)
        # offsets inside a range whose write is in flight: the move splits it
        splitting = [o for o in range(self.start + 1, self.next)
                     if self.recs[o].pending and self.recs[o].pending == self.recs[o - 1].pending]
        where = data.draw(st.integers(0, 4), label="where")
        if splitting and where >= 1:
            new_start = data.draw(st.sampled_from(splitting), label="log start")
        elif lo <= hi and where >= 1:
            new_start = data.draw(st.integers(lo, hi), label="log start")  # inside the window: splits runs
        else:
            new_start = data.draw(st.integers(self.log_start + 1, self.log_end), label="log start")
        self.log_start = new_start
        write = self.sp.move_start_offset(new_start)
        if new_start <= self.start:
            assert write is None
            return
        assert write is not None and write.start_offset == new_start
        assert write.state_batches == ()
        for o in range(self.start, min(new_start, self.next)):
            del self.recs[o]  # archived, not counted complete, out of the window
        self.start = new_start
        self.next = max(self.next, new_start)
        self.writes[write.write_id] = (write, [])
        self.sent_start = max(self.sent_start, write.start_offset)
        self.settle(write, how)

    @rule(skip=st.integers(0, 7))
    def restart(self, skip):
        """The broker restarts from the durable state: writes in flight are lost."""
        if skip:
            return  # restarts are rarer than other steps
        restored = SharePartition(max(self.durable_start, self.log_start), list(self.durable_batches))
        for o in self.window():
            rec = self.recs[o]
            if not rec.state.terminal or rec.pending:
                # not durably finished: it must be delivered again after the restart
                assert o >= restored.start_offset, f"offset {o} ({rec}) lost: restored start {restored.start_offset}"
                again = restored.record(o)
                assert again is None or again[0] == A, f"offset {o} ({rec}) restored as {again}"
            elif rec.written == rec.state:
                again = restored.record(o)
                assert o < restored.start_offset or (again is not None and again[0] == rec.state), (
                    f"durable {rec.state.name} offset {o} restored as {again}")
        # the reference model of the restored partition, offset by offset
        start = max(self.durable_start, self.log_start)
        recs, nxt = {}, start
        for b in sorted(self.durable_batches):
            first = max(b.first_offset, nxt)
            if b.last_offset < first:
                continue
            for o in range(nxt, first):
                recs[o] = Rec(A, 0)
            state = RecordState(b.state)
            state = A if state == Q else X if state == RecordState.ARCHIVING else state
            for o in range(first, b.last_offset + 1):
                recs[o] = Rec(state, b.delivery_count, written=state)
            nxt = b.last_offset + 1
        self.sp = restored
        self.recs, self.start, self.next = recs, start, nxt
        self.writes = {}
        self.sent_start = start
        self.model_advance()

    # ------------------------------------------------------------------ invariants
    @invariant()
    def offsets_agree(self):
        sp = self.sp
        assert (sp.start_offset, sp.end_offset) == (self.start, self.next - 1), (
            f"window [{sp.start_offset}, {sp.end_offset}] but model [{self.start}, {self.next - 1}]")
        assert sp.in_flight_count == self.next - self.start
        assert sp.start_offset >= self.highest_start, "the start offset went backwards"
        self.highest_start = sp.start_offset
        assert sp.start_offset >= self.log_start
        assert self.durable_start <= sp.start_offset, (
            f"durable start {self.durable_start} is past records not yet durable (start {sp.start_offset})")

    @invariant()
    def records_agree(self):
        sp = self.sp
        assert sp.record(self.start - 1) is None and sp.record(self.next) is None
        for o in self.window():
            rec = self.recs[o]
            assert sp.record(o) == (rec.state, rec.count, rec.member), f"offset {o}: {sp.record(o)} vs {rec}"
            assert (rec.state == Q) == (rec.member is not None)
            assert rec.count <= self.limit
            if rec.state == A:
                assert rec.count < self.limit, f"offset {o} back to AVAILABLE at the delivery limit"
        batches = sp.state_batches()
        expanded = [(o, b.state, b.delivery_count) for b in batches for o in range(b.first_offset, b.last_offset + 1)]
        assert expanded == [(o, int(persisted_state(self.recs[o].state)), self.recs[o].count) for o in self.window()]

    @invariant()
    def derived_values_agree(self):
        sp = self.sp
        recs = [self.recs[o] for o in self.window()]
        assert sp.delivery_complete_count() == sum(1 for r in recs if r.state.terminal)
        deadlines = [r.deadline for r in recs if r.state == Q and not r.pending]
        assert sp.next_deadline_ms() == (min(deadlines) if deadlines else None)
        available = [o for o in self.window() if self.recs[o].state == A and not self.recs[o].pending]
        expected = available[0] if available else (
            self.next if self.next - self.start < self.max_in_flight else None)
        assert sp.fetch_offset(self.max_in_flight) == expected
        assert sp.pending_writes() == len(self.writes)


SharePartitionMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    database=None,
    report_multiple_bugs=False,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],  # no slow explain phase
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_share_partition_against_the_reference_model = SharePartitionMachine.TestCase
