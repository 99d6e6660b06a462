"""Transactions in the simulator (issue 31): transactional producers and the invariants of what
they were told, checked against what the partitions hold.

A `TxnProducer` behaves as Kafka's transactional producer (TransactionManager): InitProducerId
with its transactional id; per transaction 2+ partitions of the seed's transactional topics, added
with AddPartitionsToTxn v3 (transaction version 1: Produce v11, EndTxn v4) or implicitly by
Produce v12 (transaction version 2: EndTxn v5 answers the next epoch); transactional batches with
per-partition sequences, a batch whose outcome is unknown retried with the same sequence; once
every batch is acknowledged, EndTxn commit or abort (chosen at random), retried on retriable errors
and — like the client — after a lost answer. After a broker crash it sometimes restarts instead
(InitProducerId again, which aborts or completes what its previous incarnation left). An error
that makes the transaction abortable leads to EndTxn(abort); a fatal one (fenced) to a restart.

`TxnLedger` keeps every transaction (its partitions, the batches acknowledged, what EndTxn
answered) and checks, from full reads of every transactional partition:

- ``txn-half-committed``: one transaction's records are committed in a partition and aborted in
  another (at the end: committed in one and not in another) — a transaction is committed in every
  partition or in none, across crashes at every step of EndTxn;
- ``txn-commit-lost``: EndTxn(commit) was answered NONE but a record of an acknowledged batch of
  the transaction is missing or aborted (at the end: not committed);
- ``txn-abort-committed``: EndTxn(abort) was answered NONE but the transaction's records are
  committed;
- ``txn-never-completed``: after the drain a transaction's records are still open (no marker: the
  last stable offset stays below them);
- ``aborted-visible-read-committed`` / ``uncommitted-visible-read-committed``: a Fetch at
  read_committed, filtered with its aborted-transaction list as a consumer does (Kafka's
  CompletedFetch), shows a record of an aborted (or still open) transaction;
- ``read-committed-above-lso``: a Fetch at read_committed returns a data batch at or above the last
  stable offset it answers;
- ``committed-invisible``: a committed record below the last stable offset is missing from the
  read_committed view;
- ``duplicate-record``: one transactional record is stored twice.

The truth of a partition is read at read_uncommitted with the control batches: a producer's
transactional records are committed or aborted by the next COMMIT / ABORT marker of that producer
in the partition, open until then.
"""

from __future__ import annotations

import random
import struct
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from quafka.protocol.record_batch import LOG_OVERHEAD, TRANSACTIONAL_FLAG, build_batch, iter_headers, iter_records

from .actors import Actor, ms, req
from .oracle import Violation

if TYPE_CHECKING:
    from .runner import Simulation

NONE = 0
# errors a transactional client retries as they are (the same request again)
RETRIABLE = {
    6,   # NOT_LEADER_OR_FOLLOWER
    7,   # REQUEST_TIMED_OUT
    14,  # COORDINATOR_LOAD_IN_PROGRESS
    15,  # COORDINATOR_NOT_AVAILABLE
    16,  # NOT_COORDINATOR
    19,  # NOT_ENOUGH_REPLICAS
    51,  # CONCURRENT_TRANSACTIONS
    56,  # KAFKA_STORAGE_ERROR
}
FENCED = {47, 90}  # INVALID_PRODUCER_EPOCH, PRODUCER_FENCED: fatal for the producer instance
TXN_SALT = 0x7C0DE


@dataclass
class Txn:
    key: str
    producer: str
    pid: int
    epoch: int
    tv: int
    partitions: list[tuple[str, int]]
    acked: dict[tuple[str, int], list[bytes]] = field(default_factory=dict)
    decision: str | None = None  # "commit" / "abort" once EndTxn was first sent
    outcome: str | None = None  # "committed" / "aborted" (EndTxn answered NONE), "abandoned"


@dataclass
class TxnBatch:
    tp: tuple[str, int]
    seq: int
    values: list[bytes]
    attempts: int = 0


class TxnProducer(Actor):
    kind = "txn"

    def __init__(self, sim: "Simulation", name: str, ledger: "TxnLedger", tv: int, timeout_ms: int) -> None:
        super().__init__(sim, name)
        self.ledger = ledger
        self.tv = tv
        self.timeout_ms = timeout_ms
        self.pid = -1
        self.epoch = -1
        self.seqs: dict[tuple[str, int], int] = {}
        self.txn: Txn | None = None
        self.added = False  # TV1: AddPartitionsToTxn answered for the current transaction
        self.todo: list[TxnBatch] = []  # batches of the current transaction still to acknowledge
        self.pending: TxnBatch | None = None
        self.number = 0
        self.draining = False

    # -- what the drain waits for
    @property
    def settled(self) -> bool:
        return self.txn is None and self.pid >= 0

    def act(self) -> None:
        if self.pid < 0:
            self._init()
        elif self.txn is None:
            if not self.draining:
                self._begin()
        elif self.txn.decision is not None:
            self._end()
        elif self.tv == 1 and not self.added:
            self._add_partitions()
        elif self.pending is not None or self.todo:
            self._produce()
        else:
            self._end()

    # -- InitProducerId
    def _init(self) -> None:
        self.send(req(22, 5, transactional_id=self.name, transaction_timeout=ms(self.timeout_ms), producer_id=-1,
                      producer_epoch=-1), self._on_init, "InitProducerId (transactional)")

    def _on_init(self, response, failure, now_ms) -> None:
        if response is None or int(response.error_code) != NONE:
            if response is not None:
                self.event(f"{self.name} <- InitProducerId: error {int(response.error_code)}")
            return  # retried
        self.pid, self.epoch = response.producer_id, response.producer_epoch
        self.seqs.clear()
        self.event(f"{self.name} <- InitProducerId pid {self.pid} epoch {self.epoch}")

    def restart(self, why: str) -> None:
        """The client restarts: what was in flight is abandoned; InitProducerId again."""
        if self.txn is not None and self.txn.outcome is None:
            self.txn.outcome = "abandoned"
        self.event(f"{self.name} restarts ({why})")
        self.txn = None
        self.todo = []
        self.pending = None
        self.pid = -1

    # -- a new transaction
    def _begin(self) -> None:
        tps = self.ledger.partitions()
        chosen = sorted(self.rng.sample(tps, self.rng.randint(min(2, len(tps)), min(3, len(tps)))))
        self.number += 1
        txn = self.txn = Txn(f"{self.name}#{self.number}", self.name, self.pid, self.epoch, self.tv, chosen)
        self.ledger.txns.append(txn)
        self.added = False
        self.todo = []
        for tp in chosen:
            for _ in range(self.rng.choice((1, 1, 2))):
                seq = self.seqs.get(tp, 0)
                n = self.rng.choice((1, 2, 3))
                values = [f"{txn.key}/{tp[0]}-{tp[1]}/{seq + i}".encode() for i in range(n)]
                self.todo.append(TxnBatch(tp, seq, values))
                self.seqs[tp] = seq + n
        self.event(f"{self.name} begins {txn.key} (pid {self.pid} epoch {self.epoch}, TV{self.tv}) on {chosen}")
        self.act()

    def _add_partitions(self) -> None:
        txn = self.txn
        topics: dict[str, list[int]] = {}
        for t, p in txn.partitions:
            topics.setdefault(t, []).append(p)
        entity = req(24, 3, v3_and_below_transactional_id=self.name, v3_and_below_producer_id=self.pid,
                     v3_and_below_producer_epoch=self.epoch,
                     v3_and_below_topics=[{"name": t, "partitions": tuple(ps)} for t, ps in sorted(topics.items())])
        self.send(entity, self._on_add, f"AddPartitionsToTxn {txn.key}")

    def _on_add(self, response, failure, now_ms) -> None:
        if self.txn is None:
            return
        if response is None:
            self._after_lost(failure)
            return
        errors = sorted({int(p.partition_error_code) for t in response.results_by_topic_v3_and_below
                         for p in t.results_by_partition})
        self.event(f"{self.name} <- AddPartitionsToTxn {self.txn.key}: {errors}")
        if errors == [NONE]:
            self.added = True
        elif set(errors) & FENCED:
            self.restart(f"fenced ({errors})")
        elif not set(errors) <= RETRIABLE | {NONE, 55}:  # 55: OPERATION_NOT_ATTEMPTED (another partition failed)
            self._abort(f"AddPartitionsToTxn {errors}")

    # -- produce
    def _produce(self) -> None:
        batch = self.pending
        if batch is None:
            batch = self.pending = self.todo.pop(0)
        batch.attempts += 1
        data = build_batch([(None, v) for v in batch.values], base_timestamp=self.world.wall_ms(),
                           producer_id=self.pid, producer_epoch=self.epoch, base_sequence=batch.seq,
                           attributes=TRANSACTIONAL_FLAG)
        topic, partition = batch.tp
        entity = req(0, 11 if self.tv == 1 else 12, transactional_id=self.name, acks=-1, timeout=ms(30000),
                     topic_data=[{"name": topic, "partition_data": [{"index": partition, "records": data}]}])
        self.send(entity, self._on_produce, f"Produce {self.txn.key} {topic}-{partition} pid {self.pid} epoch "
                                            f"{self.epoch} seq {batch.seq} x{len(batch.values)}"
                                            f"{' (retry)' if batch.attempts > 1 else ''}")

    def _on_produce(self, response, failure, now_ms) -> None:
        batch, txn = self.pending, self.txn
        if batch is None or txn is None:
            return
        if response is None:
            self._after_lost(failure)
            return
        part = response.responses[0].partition_responses[0]
        error = int(part.error_code)
        self.event(f"{self.name} <- Produce {txn.key} {batch.tp[0]}-{batch.tp[1]} seq {batch.seq}: error {error} "
                   f"base offset {part.base_offset}")
        if error == NONE:
            txn.acked.setdefault(batch.tp, []).extend(batch.values)
            self.pending = None
        elif error in RETRIABLE:
            return
        elif error in FENCED:
            self.restart(f"fenced ({error})")
        else:  # INVALID_TXN_STATE, TRANSACTION_ABORTABLE, OUT_OF_ORDER_SEQUENCE_NUMBER, ...: abortable
            self._abort(f"Produce error {error}")

    # -- EndTxn
    def _abort(self, why: str) -> None:
        self.event(f"{self.name}: {self.txn.key} must abort ({why})")
        self.txn.decision = "abort"
        self.pending = None
        self.todo = []

    def _end(self) -> None:
        txn = self.txn
        if txn.decision is None:
            txn.decision = "commit" if self.rng.random() < 0.7 else "abort"
        entity = req(26, 4 if self.tv == 1 else 5, transactional_id=self.name, producer_id=self.pid,
                     producer_epoch=self.epoch, committed=txn.decision == "commit")
        self.send(entity, self._on_end, f"EndTxn {txn.key} {txn.decision.upper()} pid {self.pid} epoch {self.epoch}")

    def _on_end(self, response, failure, now_ms) -> None:
        txn = self.txn
        if txn is None:
            return
        if response is None:
            self._after_lost(failure)
            return
        error = int(response.error_code)
        self.event(f"{self.name} <- EndTxn {txn.key} {txn.decision.upper()}: error {error}")
        if error == NONE:
            txn.outcome = "committed" if txn.decision == "commit" else "aborted"
            self.txn = None
            if self.tv >= 2:  # EndTxn v5 answers the epoch of the next transaction (KIP-890)
                self.pid, self.epoch = response.producer_id, response.producer_epoch
                self.seqs.clear()
            elif txn.decision == "abort":
                self.pid = -1  # sequences of batches in doubt: start again with a new epoch
        elif error in RETRIABLE:
            return
        else:
            self.restart(f"EndTxn error {error}")

    def _after_lost(self, failure) -> None:
        """The answer was lost (the broker crashed, the connection dropped): retry the request as
        it is (Kafka's client), or restart the client (then InitProducerId resolves it)."""
        if self.rng.random() < 0.5:
            self.restart(f"after {failure}")


class TxnLedger:
    """The seed's transactional topics and producers, and the checks of what their partitions hold."""

    def __init__(self, sim: "Simulation", enabled: bool) -> None:
        self.sim = sim
        rng = random.Random(sim.seed ^ TXN_SALT)
        self.topics: dict[str, int] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.producers: list[TxnProducer] = []
        self.txns: list[Txn] = []
        self.checked = 0
        self.state_partitions = 1
        if not enabled or rng.random() >= 0.4:
            return
        self.topics = {"x0": rng.randint(2, 3)}
        if rng.random() < 0.5:
            self.topics["x1"] = rng.randint(1, 2)
        self.state_partitions = rng.randint(1, 3)
        for i in range(rng.randint(1, 2)):
            self.producers.append(TxnProducer(sim, f"T{i}", self, rng.choice((1, 2)), rng.choice((20000, 120000))))

    def describe(self) -> str:
        return (f"{self.topics}, __transaction_state x{self.state_partitions}, "
                + ", ".join(f"{p.name} TV{p.tv} timeout {p.timeout_ms}" for p in self.producers))

    def partitions(self) -> list[tuple[str, int]]:
        return [(t, p) for t, n in sorted(self.topics.items()) for p in range(n)]

    def settled(self) -> bool:
        inc = self.sim.world.inc
        service = getattr(inc.server, "transactions", None) if inc is not None and inc.server is not None else None
        return all(p.settled and not p.busy for p in self.producers) and not getattr(service, "markers_in_flight", {})

    # ------------------------------------------------------------------ checks
    async def check(self, call, final: bool) -> bool:
        """Read every transactional partition (read_committed, then the truth at read_uncommitted)
        and check; False when the broker went down meanwhile."""
        truth: dict[bytes, tuple[tuple[str, int], int, str]] = {}  # value -> (partition, offset, status)
        for tp in self.partitions():
            visible = await self._read_committed(call, tp)
            if visible is None:
                return False
            raw = await self._read_all(call, tp)
            if raw is None:
                return False
            here = _statuses(raw)
            for value, (offset, status) in here.items():
                if value in truth:
                    raise Violation("duplicate-record", f"{tp[0]}-{tp[1]}: transactional record {value!r} is stored "
                                                        f"twice (offsets {truth[value][1]} and {offset})")
                truth[value] = (tp, offset, status)
            self._check_read_committed(tp, visible, here)
        self._check_txns(truth, final)
        self.checked += 1
        return True

    def _check_read_committed(self, tp, visible, here) -> None:
        lso, records = visible
        where = f"{tp[0]}-{tp[1]}"
        for offset, value in records:
            if offset >= lso:
                raise Violation("read-committed-above-lso", f"{where}: a Fetch at read_committed returned the record "
                                                            f"at offset {offset}, at or above its last stable offset {lso}")
            status = here.get(value, (None, "missing"))[1]
            if status == "aborted":
                raise Violation("aborted-visible-read-committed",
                                f"{where}: record {value!r} at offset {offset} of an aborted transaction is visible "
                                f"at read_committed")
            if status != "committed":
                raise Violation("uncommitted-visible-read-committed",
                                f"{where}: record {value!r} at offset {offset} ({status}) is visible at read_committed")
        seen = {value for _, value in records}
        for value, (offset, status) in sorted(here.items(), key=lambda kv: kv[1][0]):
            if status == "committed" and offset < lso and value not in seen:
                raise Violation("committed-invisible", f"{where}: committed record {value!r} at offset {offset}, below "
                                                       f"the last stable offset {lso}, is missing at read_committed")

    def _check_txns(self, truth, final: bool) -> None:
        for txn in self.txns:
            found = {}
            for value, (tp, offset, status) in truth.items():
                if value.startswith(txn.key.encode() + b"/"):
                    found.setdefault(tp, set()).add((status, offset))
            statuses = {s for parts in found.values() for s, _ in parts}
            describe = f"{txn.key} (pid {txn.pid} epoch {txn.epoch}, TV{txn.tv}, EndTxn {txn.decision} -> " \
                       f"{txn.outcome}): " + "; ".join(f"{t}-{p}: {sorted(s)}" for (t, p), s in sorted(found.items()))
            for tp, parts in found.items():
                if len({s for s, _ in parts}) > 1 and "open" not in {s for s, _ in parts}:
                    raise Violation("txn-half-committed", f"records of one transaction end differently in one "
                                                          f"partition: {describe}")
            if "committed" in statuses and "aborted" in statuses:
                raise Violation("txn-half-committed", f"committed in a partition, aborted in another: {describe}")
            if final and "committed" in statuses and "open" in statuses:
                raise Violation("txn-half-committed", f"committed in a partition, never in another: {describe}")
            if final and "open" in statuses:
                raise Violation("txn-never-completed", f"open after the drain: {describe}")
            if txn.outcome == "committed":
                for tp, values in txn.acked.items():
                    for value in values:
                        got = truth.get(value)
                        if got is None or got[2] == "aborted" or (final and got[2] != "committed"):
                            raise Violation("txn-commit-lost", f"EndTxn(commit) answered NONE, but record {value!r} "
                                                               f"is {got[2] if got else 'missing'}: {describe}")
            if txn.outcome == "aborted" and "committed" in statuses:
                raise Violation("txn-abort-committed", f"EndTxn(abort) answered NONE, but it is committed: {describe}")

    # ------------------------------------------------------------------ reads
    def _fetch(self, tp, offset: int, isolation: int):
        return req(1, 13, cluster_id=None, replica_id=-1, max_wait=ms(0), min_bytes=0, max_bytes=64 << 20,
                   isolation_level=isolation, session_id=0, session_epoch=-1, topics=[{
                       "topic_id": self.topic_ids[tp[0]], "partitions": [{
                           "partition": tp[1], "current_leader_epoch": -1, "fetch_offset": offset,
                           "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 32 << 20}]}],
                   forgotten_topics_data=(), rack_id="")

    async def _partition(self, call, tp, offset: int, isolation: int):
        response = await call(self._fetch(tp, offset, isolation))
        if response is None:
            return None
        part = response.responses[0].partitions[0]
        if int(part.error_code) != 0:
            world = self.sim.world
            if getattr(world.inc.server, "halted", False) or not world.inc.alive:
                return None
            raise Violation("txn-partition-unreadable", f"a Fetch of {tp[0]}-{tp[1]} at offset {offset} failed with "
                                                        f"error {int(part.error_code)}")
        return part

    async def _read_all(self, call, tp):
        """[(offset, pid, is_control, value or control type)] of every record, read_uncommitted."""
        out: list = []
        offset = 0
        for _ in range(10000):
            part = await self._partition(call, tp, offset, 0)
            if part is None:
                return None
            got = list(_records(part.records))
            out += [r for r in got if r[0] >= offset]
            if not got or got[-1][0] + 1 >= part.high_watermark:
                return out
            offset = got[-1][0] + 1
        return out

    async def _read_committed(self, call, tp):
        """(last stable offset, [(offset, value)] visible at read_committed): a consumer's view,
        dropping the records of the aborted transactions the answers list (Kafka's CompletedFetch:
        a producer is aborted from its listed first offset until its ABORT marker)."""
        out: list = []
        offset = 0
        lso = 0
        for _ in range(10000):
            part = await self._partition(call, tp, offset, 1)
            if part is None:
                return None
            lso = part.last_stable_offset
            aborted = sorted((a.first_offset, a.producer_id) for a in (part.aborted_transactions or ()))
            aborting: set[int] = set()
            got = list(_records(part.records))
            last = None
            for o, pid, control, value, batch_last in got:
                last = max(last or 0, batch_last)
                while aborted and aborted[0][0] <= batch_last:
                    aborting.add(aborted.pop(0)[1])
                if control:
                    if value == 0:  # ABORT
                        aborting.discard(pid)
                    continue
                if o < offset or pid in aborting:
                    continue
                out.append((o, value))
            if last is None or last + 1 >= lso:
                return lso, out
            offset = last + 1
        return lso, out


def _records(data: bytes | None):
    """(offset, producer id, is control, value or control type, the batch's last offset)."""
    if not data:
        return
    view = memoryview(data)
    for pos, header in iter_headers(data):
        for rec in iter_records(view[pos:pos + header.batch_length + LOG_OVERHEAD]):
            if header.is_control:
                kind = struct.unpack_from(">h", rec.key, 2)[0] if rec.key is not None and len(rec.key) >= 4 else -1
                yield rec.offset, header.producer_id, True, kind, header.last_offset
            else:
                yield rec.offset, header.producer_id, False, rec.value, header.last_offset


def _statuses(raw) -> dict[bytes, tuple[int, str]]:
    """value -> (offset, committed / aborted / open) from the markers of each producer."""
    out: dict[bytes, tuple[int, str]] = {}
    open_: dict[int, list[bytes]] = {}
    for offset, pid, control, value, _last in raw:
        if control:
            status = "committed" if value == 1 else "aborted"
            for v in open_.pop(pid, []):
                out[v] = (out[v][0], status)
            continue
        if value in out:
            raise Violation("duplicate-record", f"transactional record {value!r} is stored twice in its partition "
                                                f"(offsets {out[value][0]} and {offset})")
        out[value] = (offset, "open")
        open_.setdefault(pid, []).append(value)
    return out
