#!/usr/bin/env python3
"""Measured examples for docs/job-queues.md: running a job queue on share groups.

Starts its own `python -m quafka broker` child process (free port, temporary log directory), runs
seven short scenarios with `quafka.client.ShareConsumer` workers in threads (explicit
acknowledgement, one ACCEPT/RELEASE per record, each followed by commit_sync so that its outcome
is known), and prints one markdown table per scenario:

  spread    consumers per partition: 60 slow jobs on ONE partition, 1/2/4/8 workers
  acquire   max.poll.records=1 with share.acquire.mode batch_optimized vs record_limit
  lock      share.record.lock.duration.ms shorter / longer than the job: redeliveries
  renew     the same long job kept locked with AcknowledgeType.RENEW + commit_sync
  cap       share.partition.max.record.locks: a worker waits while the in-flight cap is held
  join      time to first record for a worker joining a running group, per
            share.heartbeat.interval.ms / share.assignment.interval.ms
  limit     share.delivery.count.limit: poison jobs archived after N deliveries

The broker is started with group.share.min.record.lock.duration.ms=1000 and
group.share.min.heartbeat.interval.ms=500 (Kafka's lowest allowed group values are 15000 and
5000) so that the lock and heartbeat scenarios take seconds, not minutes; every other setting is
Kafka's default. Unless a scenario is about them, groups use share.heartbeat.interval.ms=500 and
share.assignment.interval.ms=0 (as `quafka demo` does) and wait until every worker is assigned.
Jobs are sleeps (like a job waiting on I/O), so the numbers hold on a busy 2-core machine.
The full run takes about 75 s; --only runs a subset.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = ("spread", "acquire", "lock", "renew", "cap", "join", "limit")
BROKER_OVERRIDES = ("group.share.min.record.lock.duration.ms=1000", "group.share.min.heartbeat.interval.ms=500")
FAST_GROUP = {"share.auto.offset.reset": "earliest", "share.heartbeat.interval.ms": "500",
              "share.assignment.interval.ms": "0"}


# ----------------------------------------------------------------------------- broker

class Broker:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="quafka-jobq-")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "Broker":
        args = [sys.executable, "-m", "quafka", "broker",
                "--override", f"listeners=PLAINTEXT://{self.bootstrap}",
                "--override", f"log.dirs={self.dir}/data"]
        for item in BROKER_OVERRIDES:
            args += ["--override", item]
        self.log = open(os.path.join(self.dir, "broker.log"), "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, cwd=str(REPO))
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"broker did not start; see {self.dir}/broker.log")
                time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Env:
    """The broker plus an Admin, with helpers to make topics, groups and jobs."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer
        from quafka.client import Admin

        self.bootstrap = bootstrap
        self.admin = Admin({"bootstrap.servers": bootstrap})
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000,
                                  "batch.num.messages": 10_000, "logger": _quiet_logger()})
        self.n = 0

    def fresh(self, name: str, group_configs: dict[str, str]) -> tuple[str, str]:
        self.n += 1
        topic, group = f"{name}-{self.n}", f"{name}-workers-{self.n}"
        self.admin.create_topics({topic: (1, 1)})
        self.admin.alter_configs("group", group, set=group_configs)
        return topic, group

    def produce(self, topic: str, jobs: int, batch: int = 1, start: int = 0) -> None:
        """`jobs` records (value = job number) in producer batches of `batch` records: records are
        queued with linger.ms=1000 and flushed after each `batch`, so each flush is one batch."""
        self.producer.list_topics(topic, timeout=10)   # metadata first: else the first record goes alone
        for i in range(start, start + jobs):
            self.producer.produce(topic, value=str(i).encode())
            if (i - start + 1) % batch == 0:
                self.producer.flush(10)
        self.producer.flush(10)

    def wait_assigned(self, group: str, members: int, timeout_s: float = 30.0) -> None:
        from quafka.client import KafkaException

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                desc = self.admin.describe_share_groups([group]).get(group)
            except KafkaException:   # GROUP_ID_NOT_FOUND until the first heartbeat
                desc = None
            if desc and sum(1 for m in desc.members if any(m.assignment.values())) >= members:
                return
            time.sleep(0.05)
        raise RuntimeError(f"{group}: {members} members not assigned within {timeout_s}s")

    def offsets(self, group: str, topic: str) -> tuple[int, int]:
        """(share-partition start offset, lag) of partition 0."""
        return self.admin.list_share_group_offsets(group, [topic])[(topic, 0)]

    def close(self) -> None:
        self.admin.close()
        self.producer.flush(10)
        del self.producer   # librdkafka is destroyed now, not after the broker has gone


def _quiet_logger():
    import logging

    logger = logging.getLogger("job_queue_guide.librdkafka")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


# ----------------------------------------------------------------------------- workers

@dataclass
class Delivery:
    worker: str
    offset: int
    delivery_count: int
    got: float          # monotonic time poll() returned it
    done: float = 0.0   # monotonic time its acknowledgement was answered
    ack: str = ""
    ok: bool = False    # the acknowledgement succeeded


Job = Callable[["Worker", object], "object"]   # returns the AcknowledgeType to send


@dataclass(eq=False)
class Worker(threading.Thread):
    name_: str
    env: Env
    group: str
    topic: str
    job: Job
    stop: threading.Event
    conf: dict = field(default_factory=dict)
    deliveries: list[Delivery] = field(default_factory=list)
    poll_sizes: list[int] = field(default_factory=list)
    t_subscribed: float = 0.0
    t_first: float | None = None
    error: BaseException | None = None

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, name=self.name_, daemon=True)
        self.consumer = None

    def run(self) -> None:
        from quafka.client import IllegalStateException, ShareConsumer

        conf = {"bootstrap.servers": self.env.bootstrap, "group.id": self.group,
                "client.id": self.name_, "share.acknowledgement.mode": "explicit",
                "max.poll.records": 1, "share.acquire.mode": "record_limit"}
        conf.update(self.conf)
        try:
            with ShareConsumer(conf) as consumer:
                self.consumer = consumer
                self.t_subscribed = time.monotonic()
                consumer.subscribe([self.topic])
                while not self.stop.is_set():
                    records = consumer.poll(0.1)
                    if not records:
                        continue
                    now = time.monotonic()
                    if self.t_first is None:
                        self.t_first = now
                    self.poll_sizes.append(len(records))
                    for record in records:
                        d = Delivery(self.name_, record.offset, record.delivery_count, now)
                        self.deliveries.append(d)
                        ack = self.job(self, record)
                        d.ack = ack.name
                        try:
                            consumer.acknowledge(record, ack)
                            result = consumer.commit_sync(10)
                            d.ok = all(e is None for e in result.values())
                        except IllegalStateException:
                            d.ok = False
                        d.done = time.monotonic()
        except BaseException as e:  # noqa: BLE001 - reported by the scenario
            self.error = e


class ConfluentWorker(threading.Thread):
    """confluent-kafka's ShareConsumer (librdkafka) doing the same jobs: explicit mode, ACCEPT sent
    with the next poll; only the time to its first record is kept."""

    def __init__(self, name: str, env: Env, group: str, topic: str, work_s: float, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.name_, self.env, self.group, self.topic, self.work_s, self.stop = name, env, group, topic, work_s, stop
        self.t_subscribed = 0.0
        self.t_first: float | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import AcknowledgeType, ShareConsumer

        try:
            consumer = ShareConsumer({"bootstrap.servers": self.env.bootstrap, "group.id": self.group,
                                      "share.acknowledgement.mode": "explicit", "logger": _quiet_logger()})
            self.t_subscribed = time.monotonic()
            consumer.subscribe([self.topic])
            while not self.stop.is_set():
                for msg in consumer.poll(0.1) or []:
                    if msg.error():
                        continue
                    if self.t_first is None:
                        self.t_first = time.monotonic()
                    time.sleep(self.work_s)
                    consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
            consumer.close()
        except BaseException as e:  # noqa: BLE001
            self.error = e


def sleep_job(seconds: float) -> Job:
    from quafka.client import AcknowledgeType

    def job(worker: Worker, record) -> object:
        time.sleep(seconds)
        return AcknowledgeType.ACCEPT
    return job


def run_workers(env: Env, group: str, topic: str, names: list[str], job: Job, conf: dict | None = None,
                wait_assigned: bool = True) -> tuple[list[Worker], threading.Event]:
    stop = threading.Event()
    workers = [Worker(n, env, group, topic, job, stop, dict(conf or {})) for n in names]
    for w in workers:
        w.start()
    if wait_assigned:
        env.wait_assigned(group, len(workers))
    return workers, stop


def finish(workers: list[Worker], stop: threading.Event) -> None:
    stop.set()
    for w in workers:
        w.join(30)
    for w in workers:
        if w.error is not None:
            raise RuntimeError(f"worker {w.name_} failed: {w.error!r}")


def wait_done(env: Env, group: str, topic: str, end: int, timeout_s: float) -> float:
    """Wait until the share partition's start offset reaches `end` (everything accepted or
    archived); return the time it took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        start, _lag = env.offsets(group, topic)
        if start >= end:
            return time.monotonic() - t0
        time.sleep(0.02)
    raise RuntimeError(f"{group}: not done within {timeout_s}s (start offset {env.offsets(group, topic)})")


def table(headers: list[str], rows: list[list[object]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


# ----------------------------------------------------------------------------- scenarios

def scenario_spread(env: Env) -> str:
    """Consumers per partition: 60 jobs of 100 ms on one partition, 1, 2, 4 and 8 workers."""
    jobs, work = 60, 0.100
    rows = []
    base = None
    for n in (1, 2, 4, 8):
        topic, group = env.fresh("spread", FAST_GROUP)
        workers, stop = run_workers(env, group, topic, [f"w{i}" for i in range(n)], sleep_job(work))
        t0 = time.monotonic()
        env.produce(topic, jobs)
        wall = time.monotonic() - t0 + wait_done(env, group, topic, jobs, 60)
        finish(workers, stop)
        per = sorted((sum(1 for d in w.deliveries if d.ok) for w in workers), reverse=True)
        redeliveries = sum(1 for w in workers for d in w.deliveries if d.delivery_count > 1)
        base = base or wall
        rows.append([n, f"{min(per)}–{max(per)}", f"{wall:.2f}", f"{jobs * work / n:.2f}",
                     f"{base / wall:.1f}×", redeliveries])
    return table(["workers (1 partition)", "jobs per worker (min–max)", "wall s", "ideal s (jobs·100 ms / workers)",
                  "speedup", "redeliveries"], rows)


def scenario_acquire(env: Env) -> str:
    """max.poll.records=1 with batch_optimized vs record_limit: 100 jobs of 30 ms produced in 5
    producer batches of 20, 4 workers."""
    jobs, batch, work, n = 100, 20, 0.030, 4
    rows = []
    for mode in ("batch_optimized", "record_limit"):
        topic, group = env.fresh(f"acquire-{mode.replace('_', '-')}", FAST_GROUP)
        workers, stop = run_workers(env, group, topic, [f"w{i}" for i in range(n)], sleep_job(work),
                                    {"max.poll.records": 1, "share.acquire.mode": mode})
        t0 = time.monotonic()
        env.produce(topic, jobs, batch=batch)
        wall = time.monotonic() - t0 + wait_done(env, group, topic, jobs, 60)
        finish(workers, stop)
        per = sorted((sum(1 for d in w.deliveries if d.ok) for w in workers), reverse=True)
        sizes = [s for w in workers for s in w.poll_sizes]
        rows.append([mode, max(sizes), f"{statistics.median(sizes):g}", " / ".join(map(str, per)),
                     f"{wall:.2f}", f"{jobs * work / n:.2f}"])
    return table(["share.acquire.mode", "most records one poll returned", "median per poll",
                  "jobs per worker", "wall s", "ideal s"], rows)


def long_job_scenario(env: Env, name: str, lock_ms: int, job_s: float, renew_every_s: float | None,
                      limit: int = 5) -> list[object]:
    """Two workers; one job that takes `job_s`; the group's lock is `lock_ms`. With
    `renew_every_s` the job renews its lock (RENEW + commit_sync) that often."""
    from quafka.client import AcknowledgeType

    def job(worker: Worker, record) -> object:
        t_end = time.monotonic() + job_s
        while True:
            left = t_end - time.monotonic()
            if left <= 0:
                return AcknowledgeType.ACCEPT
            if renew_every_s is None or left <= renew_every_s:
                time.sleep(left)
                continue
            time.sleep(renew_every_s)
            worker.consumer.acknowledge(record, AcknowledgeType.RENEW)
            result = worker.consumer.commit_sync(10)
            worker.renewals = getattr(worker, "renewals", 0) + 1
            if not all(e is None for e in result.values()):
                return AcknowledgeType.ACCEPT   # the renewal failed: the ACCEPT will fail too

    configs = dict(FAST_GROUP, **{"share.record.lock.duration.ms": str(lock_ms),
                                  "share.delivery.count.limit": str(limit)})
    topic, group = env.fresh(name, configs)
    workers, stop = run_workers(env, group, topic, ["w0", "w1"], job)
    t0 = time.monotonic()
    env.produce(topic, 1)
    wall = time.monotonic() - t0 + wait_done(env, group, topic, 1, 60)
    time.sleep(0.2)
    finish(workers, stop)
    t_moved = t0 + wall   # when the share partition's start offset passed the job
    ds = sorted((d for w in workers for d in w.deliveries), key=lambda d: d.got)
    counts = ",".join(str(d.delivery_count) for d in ds)
    who = ",".join(d.worker for d in ds)
    answers = " ".join(("ok (late)" if d.done > t_moved + 0.05 else "ok") if d.ok else "failed" for d in ds)
    renewals = sum(getattr(w, "renewals", 0) for w in workers)
    in_time = [d for d in ds if d.ok and d.done <= t_moved + 0.05]
    outcome = "accepted" if in_time else f"archived after {len(ds)} deliveries"
    return [f"{lock_ms:,}", f"{job_s * 1000:,.0f}", "yes" if renew_every_s else "no", renewals, len(ds),
            who, counts, answers, outcome, f"{wall:.1f}"]


LONG_HEAD = ["lock ms", "job ms", "RENEW", "renewals", "executions", "workers in order", "delivery_count",
             "answer to each ACCEPT", "end state", "s until the job left the queue"]


def scenario_lock(env: Env) -> str:
    rows = [long_job_scenario(env, "lock-long", 3000, 1.5, None),
            long_job_scenario(env, "lock-short", 1000, 1.5, None)]
    return table(LONG_HEAD, rows)


def scenario_renew(env: Env) -> str:
    rows = [long_job_scenario(env, "renew", 1000, 3.0, 0.5)]
    return table(LONG_HEAD, rows)


def scenario_cap(env: Env) -> str:
    """share.partition.max.record.locks=100 (the lowest a group may set): worker A asks for 150
    records (record_limit) and holds them for 2 s; worker B, asking for 1, waits."""
    from quafka.client import AcknowledgeType

    hold_s = 2.0
    configs = dict(FAST_GROUP, **{"share.partition.max.record.locks": "100"})
    topic, group = env.fresh("cap", configs)
    env.produce(topic, 300, batch=10)
    done = {}

    def b_job(worker: Worker, record) -> object:
        time.sleep(0.005)
        return AcknowledgeType.ACCEPT

    def a_job(worker: Worker, record) -> object:
        if not hasattr(worker, "slept"):   # hold every record of the first poll for hold_s
            worker.slept = True
            done["a_got"] = time.monotonic()
            done["a_held"] = worker.poll_sizes[0]
            time.sleep(hold_s)
        return AcknowledgeType.ACCEPT

    stop = threading.Event()
    a = Worker("A", env, group, topic, a_job, stop, {"max.poll.records": 150})
    b = Worker("B", env, group, topic, b_job, stop, {"max.poll.records": 1})
    a.start()
    env.wait_assigned(group, 1)
    while "a_got" not in done:
        time.sleep(0.01)
    t_b = time.monotonic()
    b.start()
    time.sleep(hold_s / 2)
    start, lag = env.offsets(group, topic)
    mid = (len(b.deliveries), start, lag)
    wait_done(env, group, topic, 300, 60)
    finish([a, b], stop)
    b_first = b.deliveries[0].got - t_b if b.deliveries else float("nan")
    a_first = done["a_got"] - a.t_subscribed
    rows = [["A", "150", f"{done['a_held']} (the cap), all held for {hold_s:.0f} s", f"{a_first:.2f}"],
            ["B, started once A held its records", "1",
             f"{mid[0]} after {hold_s / 2:.0f} s (start offset {mid[1]}, lag {mid[2]}); then the rest",
             f"{b_first:.2f} (when A acknowledged)"]]
    first = table(["worker", "max.poll.records (record_limit)", "records acquired", "first record after s"], rows)
    return first + "\n\n" + stuck_job(env)


def stuck_job(env: Env) -> str:
    """The window runs from the start offset: one slow job at offset 0 (3 s) and 2 workers; the
    other 299 jobs take 2 ms. With the cap at 100, the fast worker stops after 99."""
    from quafka.client import AcknowledgeType

    def job(worker: Worker, record) -> object:
        time.sleep(3.0 if record.offset == 0 else 0.002)
        return AcknowledgeType.ACCEPT

    rows = []
    for cap in (100, 2000):
        topic, group = env.fresh(f"stuck{cap}", dict(FAST_GROUP, **{"share.partition.max.record.locks": str(cap)}))
        env.produce(topic, 300, batch=10)
        workers, stop = run_workers(env, group, topic, ["w0", "w1"], job)
        t0 = time.monotonic()
        time.sleep(1.5)
        done_mid = sum(1 for w in workers for d in w.deliveries if d.ok)
        start, lag = env.offsets(group, topic)
        wall = time.monotonic() - t0 + wait_done(env, group, topic, 300, 60)
        finish(workers, stop)
        rows.append([cap, done_mid, f"{start} / {lag}", f"{wall:.2f}"])
    return table(["share.partition.max.record.locks", "jobs done after 1.5 s (offset 0 takes 3 s)",
                  "start offset / lag then", "all 300 done after s"], rows)


def scenario_join(env: Env) -> str:
    """Time to first record for a worker joining a running group."""
    rows = []
    for client, hb, ai in (("quafka.client", 5000, 1000), ("confluent-kafka", 5000, 1000), ("quafka.client", 5000, 0),
                           ("quafka.client", 500, 1000), ("quafka.client", 500, 0)):
        configs = {"share.auto.offset.reset": "earliest", "share.heartbeat.interval.ms": str(hb),
                   "share.assignment.interval.ms": str(ai)}
        topic, group = env.fresh("join", configs)
        env.produce(topic, 2000, batch=100)
        stop = threading.Event()

        def make(name: str):
            if client == "quafka.client":
                return Worker(name, env, group, topic, sleep_job(0.02), stop)
            return ConfluentWorker(name, env, group, topic, 0.02, stop)
        w0 = make("w0")
        w0.start()
        env.wait_assigned(group, 1)
        time.sleep(max(2.0, ai / 1000 + 1.0))          # the group has been stable for a while
        j1 = make("j1")
        j1.start()
        time.sleep(0.3)
        j2 = make("j2")                                 # joins 0.3 s after j1
        j2.start()
        deadline = time.monotonic() + 30
        while (j1.t_first is None or j2.t_first is None) and time.monotonic() < deadline:
            time.sleep(0.01)
        finish([w0, j1, j2], stop)
        first = [f"{w.t_first - w.t_subscribed:.2f}" if w.t_first else "none in 30 s" for w in (w0, j1, j2)]
        rows.append([client, f"{hb:,}", f"{ai:,}", *first])
    return table(["client", "share.heartbeat.interval.ms", "share.assignment.interval.ms",
                  "first worker of a new group, s", "joins a group stable for ≥ 2 s, s",
                  "joins 0.3 s after another worker, s"], rows)


def scenario_limit(env: Env) -> str:
    """Poison jobs: 20 jobs, jobs 3 and 7 fail every time (RELEASE); 2 workers."""
    from quafka.client import AcknowledgeType

    def job(worker: Worker, record) -> object:
        time.sleep(0.01)
        return AcknowledgeType.RELEASE if int(record.value) in (3, 7) else AcknowledgeType.ACCEPT

    rows = []
    for limit in (5, 2):
        configs = dict(FAST_GROUP, **{"share.delivery.count.limit": str(limit)})
        topic, group = env.fresh(f"limit{limit}", configs)
        workers, stop = run_workers(env, group, topic, ["w0", "w1"], job)
        t0 = time.monotonic()
        env.produce(topic, 20)
        wall = time.monotonic() - t0 + wait_done(env, group, topic, 20, 60)
        start, lag = env.offsets(group, topic)
        finish(workers, stop)
        ds = [d for w in workers for d in w.deliveries]
        per_offset = Counter(d.offset for d in ds)
        poison = (3, 7)
        accepted = sum(1 for d in ds if d.ok and d.ack == "ACCEPT")
        rows.append([limit, " / ".join(str(per_offset[o]) for o in poison),
                     " / ".join(str(max(d.delivery_count for d in ds if d.offset == o)) for o in poison),
                     accepted, f"{start} / {lag}", f"{wall:.2f}"])
    return table(["share.delivery.count.limit", "deliveries of poison jobs 3 / 7", "last delivery_count",
                  "good jobs accepted (of 18)", "start offset / lag at the end", "wall s"], rows)


TITLES = {
    "spread": "1. Consumers per partition (60 jobs × 100 ms, 1 partition, max.poll.records=1, record_limit)",
    "acquire": ("2. max.poll.records=1: batch_optimized vs record_limit (100 jobs × 30 ms in 5 producer batches "
                "of 20, 4 workers)"),
    "lock": "3. Lock duration vs job time (one 1,500 ms job, 2 workers)",
    "renew": "4. RENEW for a long job (one 3,000 ms job, lock 1,000 ms, RENEW every 500 ms)",
    "cap": ("5. The in-flight cap (share.partition.max.record.locks=100, 300 jobs in batches of 10; then one "
            "stuck job, 2 workers)"),
    "join": ("6. Time from subscribe() to first record (1 partition, a backlog of 2,000 jobs × 20 ms, "
             "max.poll.records=1 for quafka.client)"),
    "limit": "7. Delivery limit (20 jobs, jobs 3 and 7 always RELEASEd, 2 workers)",
}
RUNNERS = {"spread": scenario_spread, "acquire": scenario_acquire, "lock": scenario_lock,
           "renew": scenario_renew, "cap": scenario_cap, "join": scenario_join, "limit": scenario_limit}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", choices=SCENARIOS, metavar="SCENARIO",
                        help=f"run only this scenario (repeatable): {', '.join(SCENARIOS)}")
    args = parser.parse_args(argv)
    chosen = args.only or list(SCENARIOS)
    print(f"# job_queue_guide.py — {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; broker overrides: {', '.join(BROKER_OVERRIDES)}\n", flush=True)
    t_all = time.monotonic()
    with Broker() as broker:
        env = Env(broker.bootstrap)
        try:
            for name in SCENARIOS:
                if name not in chosen:
                    continue
                t0 = time.monotonic()
                out = RUNNERS[name](env)
                print(f"## {TITLES[name]}\n\n{out}\n\n({time.monotonic() - t0:.1f} s)\n", flush=True)
        finally:
            env.close()
    print(f"total {time.monotonic() - t_all:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
