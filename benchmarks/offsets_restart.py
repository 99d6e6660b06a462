"""A restart's group-coordinator load against commit history: is it the live keys or the history?

One consumer group commits the offsets of a 6-partition topic --commits times (one OffsetCommit
of six offsets each, as a consumer committing after every poll does), the broker is left running
--settle-s seconds (its log cleaner's backoff is 15 s by default), then SIGKILLed and started
again. Reported: the size of `__consumer_offsets` before the kill, the time from the restart's
process spawn to its port accepting connections, and to the first `committed()` answered with
the latest offsets (the group coordinator has replayed `__consumer_offsets` by then), and from
the port accepting connections to that answer.

--src DIR (repeatable) runs the broker from a source tree, to compare before/after a change:

    git archive <commit> src | tar -x -C /tmp/before
    .venv/bin/python benchmarks/offsets_restart.py --src /tmp/before/src --src src --commits 100000

Each run uses a fresh data directory under --work-dir, deleted afterwards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import free_port, markdown_grid, port_open  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPIC = "six"
PARTITIONS = 6


def start_broker(src: str, data_dir: str, port: int, log_path: str) -> tuple[subprocess.Popen, float]:
    """Spawn `quafka broker` from `src`; (process, seconds until its port accepted)."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    args = [sys.executable, "-m", "quafka", "broker", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override", f"log.dirs={data_dir}"]
    started = time.monotonic()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    while not port_open(port):
        if proc.poll() is not None:
            raise SystemExit(f"broker exited with {proc.returncode}; see {log_path}")
        if time.monotonic() - started > 120:
            raise SystemExit("broker did not listen within 120 s")
        time.sleep(0.01)
    return proc, time.monotonic() - started


def offsets_bytes(data_dir: str) -> int:
    total = 0
    for name in os.listdir(data_dir):
        if name.startswith("__consumer_offsets-"):
            part = os.path.join(data_dir, name)
            total += sum(os.path.getsize(os.path.join(part, f)) for f in os.listdir(part) if f.endswith(".log"))
    return total


def commit_many(bootstrap: str, commits: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-committer", "enable.auto.commit": False})
    for n in range(1, commits + 1):
        consumer.commit(offsets=[TopicPartition(TOPIC, p, n) for p in range(PARTITIONS)],
                        asynchronous=n % 500 != 0)  # a synchronous one every 500 bounds the queue
        if n % 50 == 0:
            consumer.poll(0)  # serve the client's queue of commit results
        if n % 10_000 == 0:
            print(f"  {n:,} commit calls", file=sys.stderr, flush=True)
    consumer.commit(offsets=[TopicPartition(TOPIC, p, commits) for p in range(PARTITIONS)], asynchronous=False)
    consumer.close()
    return commits


def first_committed_s(bootstrap: str, expected: int, started: float) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-committer"})
    try:
        while True:
            try:
                got = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=120)
            except Exception:  # noqa: BLE001 - coordinator still loading: retry
                continue
            if all(tp.offset == expected for tp in got):
                return time.monotonic() - started
            raise SystemExit(f"committed offsets after restart: {[tp.offset for tp in got]}, expected {expected}")
    finally:
        consumer.close()


def run(src: str, commits: int, settle_s: float, work_dir: str) -> list[str]:
    data_dir = tempfile.mkdtemp(prefix="offsets-restart-", dir=work_dir)
    log_path = data_dir + ".log"
    try:
        port = free_port()
        proc, _ = start_broker(src, data_dir, port, log_path)
        bootstrap = f"127.0.0.1:{port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        t = time.monotonic()
        commit_many(bootstrap, commits)
        commit_s = time.monotonic() - t
        time.sleep(settle_s)
        size = offsets_bytes(data_dir)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        port = free_port()
        started = time.monotonic()
        proc, listen_s = start_broker(src, data_dir, port, log_path)
        committed_s = first_committed_s(f"127.0.0.1:{port}", commits, started)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        return [src, f"{commits:,}", f"{commits / commit_s:,.0f}/s", f"{size / 1e6:.1f} MB", f"{listen_s:.2f} s",
                f"{committed_s:.2f} s", f"{committed_s - listen_s:.2f} s"]
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", action="append", help="source tree to run the broker from (repeatable)")
    ap.add_argument("--commits", type=int, default=100_000)
    ap.add_argument("--settle-s", type=float, default=20.0, help="wait after the commits before the SIGKILL")
    ap.add_argument("--work-dir", default=tempfile.gettempdir())
    args = ap.parse_args()
    rows = [run(src, args.commits, args.settle_s, args.work_dir) for src in (args.src or [os.path.join(REPO, "src")])]
    print(markdown_grid(["broker source", "commit calls", "commit rate", "__consumer_offsets before kill",
                         "restart: listening", "restart: first committed()",
                         "restart: first committed() after listening"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
