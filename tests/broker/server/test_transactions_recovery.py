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
