"""The transaction coordinator against a small reference model, and records as the truth.

A Hypothesis state machine drives three transactional ids through InitProducerId, AddPartitionsToTxn,
EndTxn (TV1 and TV2, current and stale epochs), marker acknowledgements (in parts), transaction
timeouts, transactional id expiry, failed writes, and broker restarts (the coordinator is rebuilt
from its log, writes in flight are lost, prepared transactions resume their markers). Writes
complete in any order across ids. The model is written from Kafka's rules as prose
(TransactionCoordinator's endTransaction table and epoch checks), not from the coordinator's table.

After every step: the coordinator's durable state equals the model's, and a fresh coordinator that
replays every record written so far, encoded to bytes and decoded as the broker will read them,
has exactly the same durable state.

A failure prints the falsifying steps and a `@reproduce_failure` blob (print_blob) to replay it;
`derandomize=True` makes each run the same, so the seed is fixed.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from quafka.broker.core.transaction_coordinator import (
    AppendTxnRecord,
    TransactionCoordinator,
    TxnResult,
    WriteTxnMarkers,
)
from quafka.protocol.errors import ErrorCode
from quafka.protocol.transaction_log_records import decode_transaction_log_record, encode_transaction_log_record

E = ErrorCode
IDS = ("a", "b", "c")
PARTITIONS = (("t", 0), ("t", 1), ("u", 0))
TIMEOUT_MS = 1000
EXPIRATION_MS = 2000
NUM_PARTITIONS = 4


@dataclass(frozen=True)
class M:
    """The model of one transactional id's durable state."""

    state: str
    pid: int
    epoch: int
    partitions: frozenset = frozenset()
    start_ms: int = -1
    update_ms: int = 0


@dataclass
class Expect:
    """A write in flight: the model after it, and the answer it brings (None: no answer)."""

    tid: str
    after: M | None  # None: a tombstone
    result: TxnResult | None
    then_markers: bool = False  # a prepare: markers (or the complete record) follow
    new_pid: bool = False  # InitProducerId of a new id: the answer carries a fresh producer id


class TransactionCoordinatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000_000
        self.log: list[tuple[int, int, bytes, bytes | None]] = []
        self.model: dict[str, M] = {}
        self.inflight: dict[int, tuple[AppendTxnRecord, Expect]] = {}
        self.markers: dict[str, tuple[WriteTxnMarkers, set, M]] = {}  # outstanding, and the complete model
        self.complete_waiting: dict[str, M] = {}  # markers done or none: the complete record's model
        self.pids = itertools.count(5000)
        self.server_tv = 2
        self.coordinator: TransactionCoordinator | None = None

    def _new_coordinator(self) -> TransactionCoordinator:
        return TransactionCoordinator(lambda: next(self.pids), num_partitions=NUM_PARTITIONS,
                                      transaction_max_timeout_ms=10_000, transactional_id_expiration_ms=EXPIRATION_MS,
                                      transaction_version_level=self.server_tv)

    @initialize(server_tv=st.sampled_from([1, 2]))
    def start(self, server_tv: int) -> None:
        self.server_tv = server_tv
        self.coordinator = self._new_coordinator()
        for p in range(NUM_PARTITIONS):
            self.coordinator.begin_loading(p)
            assert self.coordinator.finish_loading(p, self.now) == ()
        for tid in IDS[:2]:  # two ids start initialised, so that transactions get going
            self.init_producer_id(tid)
        self.settle()

    # ------------------------------------------------------------------------- helpers

    def _pending(self, tid: str) -> bool:
        return (tid in self.markers or tid in self.complete_waiting
                or any(x.tid == tid for _, x in self.inflight.values()))

    def _expect_write(self, outcome, expect: Expect) -> None:
        assert outcome.result is None, outcome
        (write,) = outcome.effects
        assert isinstance(write, AppendTxnRecord) and write.record.transactional_id == expect.tid
        self.inflight[write.write_id] = (write, expect)

    def _start_complete(self, tid: str, prepared: M, committed: bool, effects) -> None:
        done = M("CompleteCommit" if committed else "CompleteAbort", prepared.pid, prepared.epoch, frozenset(),
                 prepared.start_ms, self.now)
        if prepared.partitions:
            (markers,) = effects
            assert isinstance(markers, WriteTxnMarkers)
            assert (markers.committed, set(markers.partitions), markers.producer_epoch) == (
                committed, set(prepared.partitions), prepared.epoch)
            self.markers[tid] = (markers, set(markers.partitions), done)
        else:
            (write,) = effects
            self.inflight[write.write_id] = (write, Expect(tid, done, None))

    def _fence(self, m: M) -> M:
        return replace(m, state="PrepareAbort", epoch=m.epoch + (2 if self.server_tv >= 2 else 1), update_ms=self.now)

    # ------------------------------------------------------------------------- requests

    @rule(tid=st.sampled_from(IDS))
    def init_producer_id(self, tid: str) -> None:
        out = self.coordinator.handle_init_producer_id(tid, TIMEOUT_MS, None, self.now)
        m = self.model.get(tid)
        if self._pending(tid):
            assert out == (TxnResult(E.concurrent_transactions), ())
        elif m is None:
            self._expect_write(out, Expect(tid, M("Empty", -1, 0, update_ms=self.now), None, new_pid=True))
        elif m.state == "Ongoing":
            self._expect_write(out, Expect(tid, self._fence(m), TxnResult(E.concurrent_transactions), True))
        else:
            after = M("Empty", m.pid, m.epoch + 1, update_ms=self.now)
            self._expect_write(out, Expect(tid, after, TxnResult(E.none, m.pid, m.epoch + 1)))

    @rule(tid=st.sampled_from(IDS), stale=st.booleans(), tps=st.sets(st.sampled_from(PARTITIONS), min_size=1),
          tv=st.sampled_from([0, 2]))
    def add_partitions(self, tid: str, stale: bool, tps: set, tv: int) -> None:
        m = self.model.get(tid)
        pid, epoch = (m.pid, m.epoch - stale) if m else (4999, 0)
        out = self.coordinator.handle_add_partitions(tid, pid, epoch, tps, self.now, tv)
        if m is None:
            expected = E.invalid_producer_id_mapping
        elif stale:
            expected = E.producer_fenced
        elif self._pending(tid):
            expected = E.concurrent_transactions
        elif m.state == "Ongoing" and tps <= m.partitions:
            expected = E.none
        else:
            start = m.start_ms if m.state == "Ongoing" else self.now
            after = M("Ongoing", m.pid, m.epoch, m.partitions | tps, start, self.now)
            self._expect_write(out, Expect(tid, after, TxnResult(E.none, partition_errors=tuple(
                (tp, E.none) for tp in sorted(tps)))))
            return
        assert out.effects == () and {e for _, e in out.result.partition_errors} == {expected}

    @rule(tid=st.sampled_from(IDS), commit=st.booleans(), tv=st.sampled_from([0, 2]), stale=st.booleans())
    def end_txn(self, tid: str, commit: bool, tv: int, stale: bool) -> None:
        m = self.model.get(tid)
        pid, epoch = (m.pid, m.epoch - stale) if m else (4999, 0)
        out = self.coordinator.handle_end_txn(tid, pid, epoch, commit, tv, self.now)
        if m is None:
            assert out == (TxnResult(E.invalid_producer_id_mapping), ())
            return
        # the epoch: TV1 wants the current one; TV2 takes the one before the bump as a retry, and
        # while a commit or abort is being completed only that retry epoch
        if tv == 0:
            valid = not stale
        elif m.state.startswith("Prepare"):
            valid = stale
        elif m.state.startswith("Complete"):
            valid = True
        else:
            valid = not stale
        wanted = "CompleteCommit" if commit else "CompleteAbort"
        bump = 1 if tv == 2 else 0
        if not valid:
            assert out == (TxnResult(E.producer_fenced), ())
        elif self._pending(tid):
            assert out == (TxnResult(E.concurrent_transactions), ())
        elif m.state == "Ongoing":
            after = replace(m, state="PrepareCommit" if commit else "PrepareAbort", epoch=m.epoch + bump,
                            update_ms=self.now)
            answer = TxnResult(E.none, m.pid, m.epoch + bump) if tv == 2 else TxnResult(E.none)
            self._expect_write(out, Expect(tid, after, answer, True))
        elif tv == 0:  # Empty, CompleteCommit, CompleteAbort
            assert out == (TxnResult(E.none if m.state == wanted else E.invalid_txn_state), ())
        elif stale:  # a TV2 retry of the EndTxn that completed
            ok = m.state == wanted
            assert out == (TxnResult(E.none, m.pid, m.epoch) if ok else TxnResult(E.invalid_txn_state), ())
        elif commit:
            assert out == (TxnResult(E.invalid_txn_state), ())
        else:  # a TV2 abort of no transaction: bump the epoch, nothing to mark
            after = M("PrepareAbort", m.pid, m.epoch + 1, frozenset(), self.now, self.now)
            self._expect_write(out, Expect(tid, after, TxnResult(E.none, m.pid, m.epoch + 1), True))

    # ------------------------------------------------------------------------- the shell's side

    @precondition(lambda self: self.inflight)
    @rule(data=st.data())
    def complete_write(self, data) -> None:
        self._complete(data.draw(st.sampled_from(sorted(self.inflight))))

    def _complete(self, write_id: int) -> None:
        write, expect = self.inflight.pop(write_id)
        key, value = encode_transaction_log_record(write.record)
        offset = len(self.log)
        self.log.append((write.partition, offset, key, value))
        out = self.coordinator.on_write_complete(write_id, offset, self.now)
        after = expect.after
        if expect.new_pid:
            assert out.result.error is E.none and out.result.producer_epoch == 0
            assert out.result.producer_id not in {m.pid for m in self.model.values()}
            after = replace(after, pid=out.result.producer_id)
        else:
            assert out.result == expect.result
        if after is None or after.state == "Dead":
            self.model.pop(expect.tid, None)
        else:
            self.model[expect.tid] = after
        if expect.then_markers:
            self._start_complete(expect.tid, after, after.state == "PrepareCommit", out.effects)
        else:
            assert out.effects == ()

    @rule()
    def settle(self) -> None:
        """Complete every write in flight and write every marker, until nothing is left."""
        while self.inflight or self.markers:
            if self.inflight:
                write_id = min(self.inflight)
                self._complete(write_id)
            else:
                tid = min(self.markers)
                self._markers(tid, set(self.markers[tid][1]))

    @precondition(lambda self: self.inflight)
    @rule(data=st.data(), error=st.sampled_from([E.not_enough_replicas, E.not_leader_or_follower,
                                                  E.kafka_storage_error, E.request_timed_out]))
    def fail_write(self, data, error) -> None:
        write_id = data.draw(st.sampled_from(sorted(self.inflight)))
        write, expect = self.inflight.pop(write_id)
        out = self.coordinator.on_write_failed(write_id, error, self.now)
        if expect.after is not None and expect.after.state.startswith("Complete") and expect.result is None \
                and self.model.get(expect.tid, M("", 0, 0)).state.startswith("Prepare"):
            (again,) = out.effects  # the transaction must complete: the record is written again
            assert again.record == write.record
            self.inflight[again.write_id] = (again, expect)
            return
        mapped = {E.not_enough_replicas: E.coordinator_not_available, E.request_timed_out: E.coordinator_not_available,
                  E.not_leader_or_follower: E.not_coordinator, E.kafka_storage_error: E.not_coordinator}[error]
        assert out.effects == ()
        if expect.result is None and not expect.new_pid:
            assert out.result is None
        elif expect.result is not None and expect.result.partition_errors:
            assert {e for _, e in out.result.partition_errors} == {mapped}
        else:
            assert out.result == TxnResult(mapped)

    @precondition(lambda self: self.markers)
    @rule(data=st.data())
    def markers_written(self, data) -> None:
        tid = data.draw(st.sampled_from(sorted(self.markers)))
        self._markers(tid, data.draw(st.sets(st.sampled_from(sorted(self.markers[tid][1])), min_size=1)))

    def _markers(self, tid: str, part: set) -> None:
        markers, outstanding, done = self.markers[tid]
        effects = self.coordinator.on_markers_written(tid, part, self.now)
        outstanding -= part
        if outstanding:
            assert effects == ()
            return
        del self.markers[tid]
        (write,) = effects
        self.inflight[write.write_id] = (write, Expect(tid, done, None))

    @rule(ms=st.integers(0, 1500))
    def tick(self, ms: int) -> None:
        """Time passes; the coordinator's two timers run: timed-out transactions, expired ids."""
        self.now += ms
        effects = self.coordinator.abort_timed_out_transactions(self.now)
        due = sorted(t for t, m in self.model.items() if m.state == "Ongoing" and not self._pending(t)
                     and m.start_ms + TIMEOUT_MS < self.now)
        assert sorted(w.record.transactional_id for w in effects) == due
        for write in effects:
            tid = write.record.transactional_id
            self.inflight[write.write_id] = (write, Expect(tid, self._fence(self.model[tid]), None, True))
        effects = self.coordinator.expire_transactional_ids(self.now)
        due = sorted(t for t, m in self.model.items() if m.state in ("Empty", "CompleteCommit", "CompleteAbort")
                     and not self._pending(t) and m.update_ms <= self.now - EXPIRATION_MS)
        assert sorted(w.record.transactional_id for w in effects) == due
        for write in effects:
            assert write.record.value is None
            self.inflight[write.write_id] = (write, Expect(write.record.transactional_id, None, None))

    @rule(tid=st.sampled_from(IDS), tps=st.sets(st.sampled_from(PARTITIONS), min_size=1), commit=st.booleans(),
          tv=st.sampled_from([0, 2]))
    def whole_transaction(self, tid: str, tps: set, commit: bool, tv: int) -> None:
        """A well-behaved producer: add partitions, let the write land, end the transaction."""
        self.add_partitions(tid, False, tps, tv)
        self.settle()
        self.end_txn(tid, commit, tv, False)

    @rule()
    def restart(self) -> None:
        """The broker dies: writes in flight are lost; the new coordinator loads the log."""
        self.coordinator = self._replayed(loaded=False)
        self.inflight.clear()
        self.markers.clear()
        self.complete_waiting.clear()
        effects = []
        for p in range(NUM_PARTITIONS):
            effects.extend(self.coordinator.finish_loading(p, self.now))
        for tid, m in sorted(self.model.items()):
            if m.state.startswith("Prepare"):
                mine = [e for e in effects if getattr(e, "transactional_id", None) == tid
                        or (isinstance(e, AppendTxnRecord) and e.record.transactional_id == tid)]
                self._start_complete(tid, m, m.state == "PrepareCommit", mine)
        assert len(effects) == sum(m.state.startswith("Prepare") for m in self.model.values())

    # ------------------------------------------------------------------------- invariants

    def _replayed(self, loaded: bool = True) -> TransactionCoordinator:
        fresh = self._new_coordinator()
        for p in range(NUM_PARTITIONS):
            fresh.begin_loading(p)
        for partition, offset, key, value in self.log:
            fresh.replay(partition, offset, decode_transaction_log_record(key, value))
        if loaded:
            for p in range(NUM_PARTITIONS):
                fresh.finish_loading(p, self.now)
        return fresh

    @invariant()
    def durable_state_matches_the_model(self) -> None:
        if self.coordinator is None:
            return
        state = self.coordinator.durable_state()
        assert set(state) == set(self.model)
        for tid, m in self.model.items():
            meta = state[tid]
            assert (meta.state.state_name, meta.producer_id, meta.producer_epoch, meta.topic_partitions) == (
                m.state, m.pid, m.epoch, m.partitions), tid
            if m.state in ("Ongoing", "PrepareCommit", "PrepareAbort"):
                assert meta.txn_start_timestamp_ms == m.start_ms, tid

    @invariant()
    def replaying_the_records_gives_the_same_state(self) -> None:
        if self.coordinator is not None:
            assert self._replayed().durable_state() == self.coordinator.durable_state()


TransactionCoordinatorMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None, derandomize=True, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow])
test_transaction_coordinator_against_the_model = TransactionCoordinatorMachine.TestCase
