"""Transactions across restarts: the last stable offset (open transactions, from producer
snapshots' currentTxnFirstOffset and the replay) and the aborted-transaction indexes are the same
after a clean stop and after a SIGKILL (the active segment's index is rebuilt from the log, as
Kafka's LogLoader recovers a segment). Segments of 1 MiB (the smallest segment.bytes) hold one
600 KB batch each, so the transactions span segments."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading

from confluent_kafka.admin import AdminClient, NewTopic

from support import RawClient
from support.txn import (
    READ_COMMITTED, fetch, init_producer_id, install_verifier, list_offset, produce, txn_batch, write_markers,
)

from quafka.protocol.errors import ErrorCode

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_txn_broker_child.py")
BIG = b"x" * 600_000


class Child:
    def __init__(self, data_dir: str) -> None:
        self.proc = subprocess.Popen([sys.executable, CHILD, data_dir], stdout=subprocess.PIPE, stdin=subprocess.PIPE,
                                     text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def next(self, timeout_s: float = 30.0) -> dict:
        try:
            got = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"the broker child printed nothing for {timeout_s} s") from None
        assert got is not None, f"the broker child exited with {self.proc.wait()}"
        return got

    def markers(self, producer_id: int, committed: bool, partitions) -> dict:
        self.proc.stdin.write(json.dumps({"producer_id": producer_id, "epoch": 0, "committed": committed,
                                          "partitions": partitions}) + "\n")
        self.proc.stdin.flush()
        return self.next()["written"]


def scenario(bootstrap: str, write) -> dict:
    """Open and abort transactions over four segments; p2's stays open. Returns the producer ids."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("k", 1, 1, config={"segment.bytes": "1048576"})])["k"].result(10)
    with RawClient(bootstrap) as raw:
        p1, p2, p3 = (init_producer_id(raw) for _ in range(3))
        assert produce(raw, "k", txn_batch([BIG], p1, 0)).base_offset == 0  # segment 0
        assert produce(raw, "k", txn_batch([BIG], p2, 0)).base_offset == 1  # segment 1
        assert write(p1, False) == ErrorCode.none  # ABORT at 2, in segment 1: (p1, 0, 2, LSO 1)
        assert produce(raw, "k", txn_batch([BIG], p3, 0)).base_offset == 3  # segment 3 (active)
        assert write(p3, False) == ErrorCode.none  # ABORT at 4: (p3, 3, 4, LSO 1)
        assert produce(raw, "k", txn_batch([b"small"], p1, 1)).base_offset == 5  # p1's next transaction
    return {"p1": p1, "p2": p2, "p3": p3}


def observe(bootstrap: str) -> tuple:
    with RawClient(bootstrap) as raw:
        part = fetch(raw, "k", 0, READ_COMMITTED, partition_max_bytes=4 << 20)
        lso = list_offset(raw, "k", -1, READ_COMMITTED)
    return part.last_stable_offset, lso, part.high_watermark, [(a.producer_id, a.first_offset)
                                                                for a in part.aborted_transactions]


def txn_index_files(data_dir: str) -> dict:
    path = os.path.join(data_dir, "k-0")
    out = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".txnindex"):
            with open(os.path.join(path, name), "rb") as f:
                out[name] = f.read()
    return out


def expected_view(ids) -> tuple:
    return 1, 1, 6, [(ids["p1"], 0)]  # p2 open at 1; a fetch below the LSO overlaps p1's aborted txn only


def test_sigkill_keeps_the_lso_and_rebuilds_the_aborted_transaction_index(tmp_path, make_broker):
    data_dir = str(tmp_path / "data")
    child = Child(data_dir)
    try:
        bootstrap = child.next()["bootstrap"]
        ids = scenario(bootstrap, lambda pid, committed: ErrorCode(child.markers(pid, committed, [["k", 0]])["k-0"]))
        before = observe(bootstrap)
        files_before = txn_index_files(data_dir)
        child.proc.send_signal(signal.SIGKILL)
        child.proc.wait(10)
    finally:
        if child.proc.poll() is None:
            child.proc.kill()
        child.proc.wait(10)
    assert before == expected_view(ids)
    assert sorted(files_before) == [f"{1:020d}.txnindex", f"{3:020d}.txnindex"]

    broker = make_broker(data_dir=data_dir)
    assert observe(broker.bootstrap_servers) == before
    assert txn_index_files(data_dir) == files_before  # the active segment's was reset and rebuilt
    part = broker.server.state.topics["k"].partitions[0]
    assert [tuple(t) for t in broker.call(part.aborted_transactions, 0, 6)] == [
        (ids["p1"], 0, 2, 1), (ids["p3"], 3, 4, 1)]
    # the open transactions go on after the restart: committing p2 and p1 releases everything
    install_verifier(broker)
    assert write_markers(broker, ids["p2"], 0, True, [("k", 0)]) == {("k", 0): ErrorCode.none}
    assert broker.call(lambda: part.last_stable_offset) == 5  # p1's second transaction (at 5) is open
    assert write_markers(broker, ids["p1"], 1, True, [("k", 0)]) == {("k", 0): ErrorCode.none}
    assert broker.call(lambda: part.last_stable_offset) == 8


def test_clean_restart_keeps_the_lso_and_the_index(tmp_path, make_broker):
    data_dir = str(tmp_path / "data")
    broker = make_broker(data_dir=data_dir)
    install_verifier(broker)
    ids = scenario(broker.bootstrap_servers,
                   lambda pid, committed: write_markers(broker, pid, 0, committed, [("k", 0)])[("k", 0)])
    before = observe(broker.bootstrap_servers)
    assert before == expected_view(ids)
    broker.stop()
    files = txn_index_files(data_dir)
    broker = make_broker(data_dir=data_dir)
    assert observe(broker.bootstrap_servers) == before
    assert txn_index_files(data_dir) == files


def test_random_transactions_agree_with_a_model_before_and_after_a_restart(tmp_path, make_broker):
    """Seeded random transactional, plain and marker writes from four producers; the LSO, the
    aborted transactions and what a read_committed reader keeps agree with a small model
    (Kafka's semantics), before and after a clean restart. Rerun a seed with QUAFKA_TXN_SEED."""
    import random

    from support.txn import READ_UNCOMMITTED

    from quafka.protocol.record_batch import build_batch, iter_headers, iter_records

    seed = int(os.environ.get("QUAFKA_TXN_SEED", random.randrange(1 << 30)))
    print(f"[txn model] seed {seed} (replay with QUAFKA_TXN_SEED={seed})")
    rng = random.Random(seed)
    data_dir = str(tmp_path / "data")
    broker = make_broker(data_dir=data_dir)
    install_verifier(broker)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("r", 1, 1)])["r"].result(10)
    del admin  # librdkafka handles are closed when collected
    end = 0
    open_txn: dict[int, int] = {}  # producer -> first offset of its open transaction
    pending: dict[int, list[bytes]] = {}  # producer -> values of its open transaction
    decided: list[tuple[int, bytes]] = []  # (offset, value) of decided records that a reader keeps
    offsets_of_value: dict[bytes, int] = {}
    aborted: list[tuple[int, int, int]] = []  # (producer, first offset, marker offset)
    with RawClient(broker.bootstrap_servers) as raw:
        pids = [init_producer_id(raw) for _ in range(4)]
        seqs = {p: 0 for p in pids}
        for step in range(60):
            pid = rng.choice(pids)
            op = rng.random()
            if op < 0.5:  # a transactional batch
                values = [b"%d-%d-%d" % (pid, step, i) for i in range(rng.randint(1, 3))]
                assert produce(raw, "r", txn_batch(values, pid, seqs[pid])).base_offset == end
                open_txn.setdefault(pid, end)
                pending.setdefault(pid, []).extend(values)
                for i, v in enumerate(values):
                    offsets_of_value[v] = end + i
                seqs[pid] += len(values)
                end += len(values)
            elif op < 0.65 and pid not in open_txn:  # a plain (idempotent) batch
                value = b"%d-%d-plain" % (pid, step)
                batch = build_batch([(None, value)], producer_id=pid, producer_epoch=0, base_sequence=seqs[pid])
                assert produce(raw, "r", batch, transactional_id=None).base_offset == end
                decided.append((end, value))
                seqs[pid] += 1
                end += 1
            else:  # a marker (for a producer with or without an open transaction)
                commit = rng.random() < 0.5
                assert write_markers(broker, pid, 0, commit, [("r", 0)]) == {("r", 0): ErrorCode.none}
                if pid in open_txn:
                    if commit:
                        decided.extend((offsets_of_value[v], v) for v in pending[pid])
                    else:
                        aborted.append((pid, open_txn[pid], end))
                    del open_txn[pid], pending[pid]
                end += 1
        lso = min(open_txn.values(), default=end)
        committed_values = [v for o, v in sorted(decided) if o < lso]

        def check():
            part = broker.server.state.topics["r"].partitions[0]
            assert broker.call(lambda: part.last_stable_offset) == lso
            assert [(t.producer_id, t.first_offset, t.last_offset) for t in broker.call(
                part.aborted_transactions, 0, end)] == sorted(aborted, key=lambda t: (t[1], t[0]))
            with RawClient(broker.bootstrap_servers) as r2:
                got = fetch(r2, "r", 0, READ_COMMITTED, partition_max_bytes=8 << 20)
                assert got.last_stable_offset == lso and got.high_watermark == end
                assert list_offset(r2, "r", -1, READ_COMMITTED) == lso
                assert fetch(r2, "r", 0, READ_UNCOMMITTED).last_stable_offset == lso
            # a read_committed reader's filtering (Kafka's Fetcher: skip a listed producer's records from
            # its first offset to its ABORT marker, and every control batch)
            listed = sorted((a.first_offset, a.producer_id) for a in got.aborted_transactions)
            aborting: set[int] = set()
            kept = []
            for pos, h in iter_headers(got.records):
                while listed and listed[0][0] <= h.base_offset:
                    aborting.add(listed.pop(0)[1])
                if h.is_control:
                    aborting.discard(h.producer_id)
                    continue
                if h.is_transactional and h.producer_id in aborting:
                    continue
                kept.extend(r.value for r in iter_records(got.records[pos:pos + h.size_bytes]))
            assert kept == committed_values

        check()
    broker.stop()
    broker = make_broker(data_dir=data_dir)
    check()
