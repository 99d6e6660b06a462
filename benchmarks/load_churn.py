#!/usr/bin/env python3
"""Load and churn: a quafka broker under many connections, many members and misbehaving clients,
while a canary share consumer measures how well it keeps serving.

Every scenario starts a fresh `python -m quafka broker` child process (temporary data directory,
free port; with --pin on CPU 0 and everything else on the other CPUs) and a canary: a
confluent-kafka Producer sending one stamped record every 10 ms (linger.ms=0, acks=all) to a
1-partition topic, and one confluent-kafka ShareConsumer (explicit acknowledgement, an ACCEPT per
record) in its own share group. The canary runs for a baseline window, the whole scenario and a
settling window; the scenario's load runs in spawned worker processes at nice 10 (the canary and
the broker come first on a busy machine). Per scenario:

- canary latency, produce() to the consumer's poll() returning the record, p50/p99/max during the
  load (the goal: p99 < 50 ms), and p99 of the baseline window before the load;
- broker memory: VmRSS before the load, the peak of VmRSS sampled every 100 ms during it, VmRSS
  after it (the load gone, 3 s later), and VmHWM;
- data: every record the canary produced (delivery report with an offset) was accepted exactly
  once (acknowledgement commit callback without error); a record delivered again is allowed only
  while none of its deliveries was accepted; the share group's lag is 0 at the end. The share
  scenarios check the same for every record of the load, with quafka's AsyncShareConsumer.

Scenarios (--scenario NAME runs one; --scale F multiplies the counts and durations, for a smoke run):

  idle-connections   10,000 connections, each sends one ApiVersions (v3) and then nothing; memory
                     per connection = RSS delta / connections
  share-1000         1,000 share consumers (quafka AsyncShareConsumer) in one share group on a
                     16-partition topic (group.share.max.size=1000, Kafka's upper bound) join, consume
                     and ACCEPT 20,000 records, and leave
  share-groups       200 share groups x 10 members, each group on its own 1-partition topic, 100
                     records per topic, joined, consumed, left
  consumer-groups    100 consumer groups x 20 members (KIP-848 ConsumerGroupHeartbeat, raw protocol
                     members that reconcile at once) on a shared 20-partition topic, joining, then 30 s
                     of churn (5% of the members leave and are replaced every second), then leaving;
                     every group must end with each partition owned by exactly one member
  stalled-reader     a client sends Fetch requests (fetch.max.bytes 50 MiB) for a 64 MiB partition
                     every 50 ms for 20 s and never reads its socket
  slowloris          100 connections each announce a 100 MB request (socket.request.max.bytes) and send
                     one byte a second for 30 s

    .venv/bin/python benchmarks/load_churn.py                      # all six, ~10 min; prints only
    .venv/bin/python benchmarks/load_churn.py --update-docs        # ... and rewrites docs/benchmarks.md's section
    .venv/bin/python benchmarks/load_churn.py --scenario slowloris --scale 0.1

The consumer-group churn is seeded (--seed; printed at the start).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import multiprocessing as mp
import os
import queue as _queue
import random
import resource
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (  # noqa: E402
    DOC_PATH,
    arg_parser,
    machine_busy_seconds,
    process_cpu_seconds,
    finish,
    interrupt_on_sigterm,
    interrupted,
    machine_info,
    markdown_grid,
    print_blocks,
    replace_marked_section,
    text_grid,
)
from produce_fetch import Broker  # noqa: E402

BEGIN_MARK, END_MARK = "<!-- load-churn:begin -->", "<!-- load-churn:end -->"
SCENARIOS = ("idle-connections", "share-1000", "share-groups", "consumer-groups", "stalled-reader", "slowloris")
CANARY_TOPIC, CANARY_GROUP = "canary", "canary-group"
CANARY_INTERVAL_S = 0.010
CANARY_P99_GOAL_MS = 50.0
SERVER_CPU = 0
LOAD_NICE = 10
MIB = 1024 * 1024


# ----------------------------------------------------------------------------- small helpers

def raise_nofile() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; returns (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def proc_status_kb(pid: int, key: str) -> int:
    """A `kB` field of /proc/PID/status (VmRSS, VmHWM), 0 when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def proc_nofile(pid: int) -> str:
    """The soft/hard 'Max open files' of a process, from /proc/PID/limits."""
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    parts = line.split()
                    return f"{parts[3]}/{parts[4]}"
    except OSError:
        pass
    return "?"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def scaled(n: int, scale: float, least: int = 1) -> int:
    return max(least, int(round(n * scale)))


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class RssSampler(threading.Thread):
    """Samples the broker's VmRSS every 100 ms: (monotonic time, kB)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True, name="rss-sampler")
        self.pid = pid
        self.samples: list[tuple[float, int]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            kb = proc_status_kb(self.pid, "VmRSS")
            if kb:
                self.samples.append((time.monotonic(), kb))
            self.stopped.wait(0.1)

    def now_kb(self) -> int:
        return proc_status_kb(self.pid, "VmRSS")

    def peak_kb(self, t0: float, t1: float) -> int:
        return max((kb for t, kb in self.samples if t0 <= t <= t1), default=0)


def _quiet_logger():
    import logging

    logger = logging.getLogger("load-churn-librdkafka")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


def _load_process_setup() -> None:
    """A load worker: nice 10 (the canary and the broker first) and every descriptor it may open."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, LOAD_NICE)  # absolute: the parent may run at --priority
    except OSError:
        pass
    raise_nofile()


# ----------------------------------------------------------------------------- canary (spawned)

def canary_producer(bootstrap: str, topic: str, stop, out) -> None:
    """One stamped record (seq 8 bytes, time_ns 8 bytes) every 10 ms until `stop`; reports
    ("produced", [(seq, offset)], failures)."""
    try:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", "logger": _quiet_logger()})
        delivered: list[tuple[int, int]] = []
        failures: list[str] = []

        def on_delivery(err, msg) -> None:
            if err is not None:
                failures.append(str(err))
            else:
                delivered.append((int.from_bytes(msg.value()[:8], "big"), msg.offset()))

        out.put(("ready", None))
        seq = 0
        due = time.monotonic()
        while not stop.is_set():
            producer.produce(topic, value=seq.to_bytes(8, "big") + time.time_ns().to_bytes(8, "big"),
                             on_delivery=on_delivery)
            seq += 1
            due += CANARY_INTERVAL_S
            producer.poll(0)
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # not poll(wait): poll returns at the first delivery report
        left = producer.flush(30)
        out.put(("produced", (delivered, failures + [f"{left} records not delivered at the end"] * bool(left))))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        out.put(("error", f"canary producer: {type(exc).__name__}: {exc}"))


def canary_consumer(bootstrap: str, topic: str, group: str, drain, target, out) -> None:
    """A confluent ShareConsumer, explicit ACCEPT per record, until `drain` is set and `target`
    offsets have been accepted (or 60 s after `drain`); reports latencies (send ns, µs) and the
    data check's inputs."""
    try:
        from confluent_kafka import ShareConsumer

        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "share.acknowledgement.mode": "explicit", "logger": _quiet_logger()})
        accepted: Counter = Counter()
        mine: Counter = Counter()  # ACCEPTed, not yet confirmed by the callback
        failed_acks: list[str] = []

        def on_commit(offsets, exc) -> None:
            for _tp, offs in offsets.items():
                ours = [o for o in offs if mine[o]]
                for o in ours:
                    mine[o] -= 1
                if exc is None:
                    accepted.update(ours)
                else:
                    failed_acks.append(f"{len(offs)} offsets: {exc}")

        consumer.set_acknowledgement_commit_callback(on_commit)
        consumer.subscribe([topic])
        out.put(("ready", None))
        latencies: list[tuple[int, int]] = []
        received: Counter = Counter()
        after_accept = 0
        errors: list[str] = []
        give_up = None
        while True:
            msgs = consumer.poll(0.05)
            now_ns = time.time_ns()
            for m in msgs:
                if m.error() is not None:
                    errors.append(str(m.error()))
                    continue
                value, off = m.value(), m.offset()
                sent = int.from_bytes(value[8:16], "big")
                if not received[off]:
                    latencies.append((sent, (now_ns - sent) // 1000))
                    if len(latencies) == 1:
                        out.put(("warm", None))
                if accepted[off]:
                    after_accept += 1
                received[off] += 1
                mine[off] += 1
                consumer.acknowledge(m)
            if drain.is_set():
                give_up = give_up or time.monotonic() + 60
                if (target.value >= 0 and len(accepted) >= target.value) or time.monotonic() > give_up:
                    break
        consumer.commit_sync(30)
        consumer.close()
        out.put(("consumed", dict(latencies=latencies, received=dict(received), accepted=dict(accepted),
                                  after_accept=after_accept, failed_acks=failed_acks, errors=errors[:5])))
    except BaseException as exc:  # noqa: BLE001
        out.put(("error", f"canary consumer: {type(exc).__name__}: {exc}"))


class Canary:
    """The canary's two processes; `start()` waits for the first record to come through."""

    def __init__(self, ctx, bootstrap: str) -> None:
        self.ctx = ctx
        self.stop, self.drain, self.target = ctx.Event(), ctx.Event(), ctx.Value("q", -1)
        self.pout, self.cout = ctx.Queue(), ctx.Queue()
        self.producer = ctx.Process(target=canary_producer, args=(bootstrap, CANARY_TOPIC, self.stop, self.pout),
                                    daemon=True)
        self.consumer = ctx.Process(target=canary_consumer,
                                    args=(bootstrap, CANARY_TOPIC, CANARY_GROUP, self.drain, self.target, self.cout),
                                    daemon=True)

    def start(self) -> None:
        self.consumer.start()
        _expect(self.cout, "ready", 60)
        self.producer.start()
        _expect(self.pout, "ready", 60)
        _expect(self.cout, "warm", 60)

    def finish(self) -> "CanaryResult":
        self.stop.set()
        delivered, failures = _expect(self.pout, "produced", 60)
        self.target.value = len(delivered)
        self.drain.set()
        consumed = _expect(self.cout, "consumed", 120)
        for p in (self.producer, self.consumer):
            p.join(10)
        return CanaryResult(delivered, failures, consumed)

    def kill(self) -> None:
        for p in (self.producer, self.consumer):
            if p.is_alive():
                p.terminate()
            p.join(5)


def _expect(q, kind: str, timeout_s: float):
    got, payload = q.get(timeout=timeout_s)
    if got == "error":
        raise RuntimeError(payload)
    if got != kind:
        raise RuntimeError(f"expected {kind!r}, got {got!r}")
    return payload


@dataclass
class CanaryResult:
    delivered: list[tuple[int, int]]
    failures: list[str]
    consumed: dict

    def latencies_ms(self, t0_ns: int, t1_ns: int) -> list[float]:
        return [lat / 1000 for sent, lat in self.consumed["latencies"] if t0_ns <= sent < t1_ns]

    def problems(self) -> list[str]:
        out = [f"canary: {f}" for f in self.failures[:3]]
        accepted = self.consumed["accepted"]
        offsets = {off for _seq, off in self.delivered}
        missing = offsets - set(accepted)
        if missing:
            out.append(f"canary: {len(missing)} of {len(offsets)} produced records never accepted "
                       f"(first {sorted(missing)[:5]})")
        twice = [off for off, n in accepted.items() if n > 1]
        if twice:
            out.append(f"canary: {len(twice)} records accepted more than once (first {sorted(twice)[:5]})")
        if self.consumed["after_accept"]:
            out.append(f"canary: {self.consumed['after_accept']} records delivered again after being accepted")
        out += [f"canary: record error: {x}" for x in self.consumed["errors"][:3]]
        return out

    def notes(self) -> list[str]:
        extra = set(self.consumed["received"]) - {off for _seq, off in self.delivered}
        # a produce that timed out on the client may still have been written: not a loss
        notes = [f"canary: {len(extra)} records received whose produce the producer reported as failed"] if extra else []
        # a failed ACCEPT (e.g. INVALID_RECORD_STATE: the lock expired first) is no loss as long as
        # the record comes again and is accepted then; problems() checks that
        return notes + [f"canary: acknowledgement failed (the records came again): {x}"
                        for x in self.consumed["failed_acks"][:3]]

    def redelivered(self) -> int:
        return sum(n - 1 for n in self.consumed["received"].values() if n > 1)


# ----------------------------------------------------------------------------- load workers (spawned)

def run_worker(fn, args, go, out) -> None:
    """A spawned load worker: nice, raised fd limit, the client imported; reports "ready", waits
    for `go`, then runs `fn(*args, out)` (a coroutine function)."""
    _load_process_setup()
    try:
        importlib.import_module("quafka.client")  # imported before the load starts

        out.put(("ready", None))
        go.wait()
        asyncio.run(fn(*args, out))
    except BaseException as exc:  # noqa: BLE001
        import traceback

        out.put(("error", f"{fn.__name__}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


async def _wait_event(event) -> None:
    while not event.is_set():
        await asyncio.sleep(0.05)


async def idle_connections_worker(host: str, port: int, count: int, release, out) -> None:
    """`count` connections, each negotiating ApiVersions v3 (quafka's client transport), then idle."""
    from quafka.client._transport import BrokerConnection

    conns: list = []
    sem = asyncio.Semaphore(200)
    failures: list[str] = []

    async def one() -> None:
        async with sem:
            conn = BrokerConnection(host, port, client_id="idle", request_timeout=60)
            try:
                await conn.connect()
                conns.append(conn)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                failures.append(f"{type(exc).__name__}: {exc}")

    t0 = time.monotonic()
    await asyncio.gather(*(one() for _ in range(count)))
    out.put(("connected", dict(connected=len(conns), failed=len(failures), first_failures=failures[:3],
                               seconds=time.monotonic() - t0)))
    await _wait_event(release)
    alive = sum(1 for c in conns if c.connected)
    for i in range(0, len(conns), 500):
        await asyncio.gather(*(c.close() for c in conns[i:i + 500]))
    out.put(("closed", dict(alive_at_release=alive)))


async def share_members_worker(index: int, bootstrap: str, assignments: list[tuple[str, str]], leave, out) -> None:
    """One quafka AsyncShareConsumer per (group, topic) in `assignments`, explicit ACCEPT of every
    record, until `leave`; then every consumer closes (commits, leaves the group). Reports what was
    received and accepted, per (topic, partition, offset)."""
    from quafka.client import AsyncShareConsumer

    accepted: Counter = Counter()
    received: Counter = Counter()
    failed_acks: list[str] = []
    errors: list[str] = []
    after_accept = [0]
    consumers = []
    acked: list[Counter] = []
    released = [0]
    accepted_by: dict = {}  # (topic, partition, offset) -> [(consumer, stage)] of its accepting callbacks
    stage = ["running"]
    for n, (group, topic) in enumerate(assignments):
        c = AsyncShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "load",
                                "share.acknowledgement.mode": "explicit"})

        mine: Counter = Counter()  # what this consumer ACCEPTed and no callback has confirmed yet
        acked.append(mine)

        def on_commit(offsets, exc, n=n, mine=mine) -> None:
            # the callback reports every acknowledgement type: also records the client acquired
            # and released without delivering them (a fetch answered after its partition was
            # revoked, or at close); only the offsets this consumer ACCEPTed count as accepted
            for tp, offs in offsets.items():
                keys = [(tp.topic, tp.partition, o) for o in offs]
                ours = [k for k in keys if mine[k]]
                for k in ours:
                    mine[k] -= 1
                released[0] += len(keys) - len(ours)
                if exc is None:
                    accepted.update(ours)
                    for k in ours:
                        accepted_by.setdefault(k, []).append((f"{index}.{n}", stage[0]))
                else:
                    failed_acks.append(f"{tp.topic}-{tp.partition}: {len(offs)} offsets: {exc}")

        c.set_acknowledgement_commit_callback(on_commit)
        c.subscribe([topic])
        consumers.append(c)
    stopping = asyncio.Event()

    async def member(c, mine) -> None:
        while not stopping.is_set():
            try:
                records = await c.poll(0.2)
            except Exception as exc:  # noqa: BLE001 - reported
                errors.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.5)
                continue
            for r in records:
                key = (r.topic, r.partition, r.offset)
                if accepted[key]:
                    after_accept[0] += 1
                received[key] += 1
                mine[key] += 1
                c.acknowledge(r)

    tasks = [asyncio.ensure_future(member(c, mine)) for c, mine in zip(consumers, acked)]
    out.put(("started", len(consumers)))
    last = -1
    while not leave.is_set():
        await asyncio.sleep(0.1)
        if len(accepted) != last:
            last = len(accepted)
            out.put(("accepted", (index, last)))
    stopping.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    stage[0] = "closing"
    t0 = time.monotonic()
    closed = await asyncio.gather(*(c.close(30) for c in consumers), return_exceptions=True)
    close_errors = [repr(x) for x in closed if isinstance(x, BaseException)]
    twice = {k: v for k, v in accepted_by.items() if len(v) > 1}
    out.put(("done", dict(received=dict(received), accepted=dict(accepted), after_accept=after_accept[0],
                          accepted_twice=dict(list(twice.items())[:3]), released=released[0],
                          unconfirmed=sum(sum(m.values()) for m in acked),
                          failed_acks=failed_acks[:5], errors=(errors + close_errors)[:5],
                          error_count=len(errors) + len(close_errors), close_s=time.monotonic() - t0)))


# -- KIP-848 members: the raw protocol over quafka's client transport

CONSUMER_GROUP_HEARTBEAT = 68


class CgMember:
    """One KIP-848 consumer-group member: ConsumerGroupHeartbeat on its own connection, the member
    id chosen by the client (v1), reconciling at once (what it is assigned it owns, and says so in
    the next heartbeat), heartbeating at the interval the coordinator gives."""

    def __init__(self, host: str, port: int, group: str, topic: str) -> None:
        from quafka.client._transport import BrokerConnection

        self.conn = BrokerConnection(host, port, client_id="cg-load", request_timeout=60)
        self.group, self.topic = group, topic
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.owned: dict = {}           # topic id -> tuple of partitions
        self.reported: dict | None = None
        self.interval_s = 5.0
        self.errors: Counter = Counter()
        self.heartbeats = 0
        self.leaving = asyncio.Event()
        self.task: asyncio.Task | None = None

    async def _beat(self, epoch: int) -> None:
        values = {"group_id": self.group, "member_id": self.member_id, "member_epoch": epoch,
                  "instance_id": None, "rack_id": None, "server_assignor": None,
                  "subscribed_topic_regex": None}
        if epoch == 0:
            values.update(rebalance_timeout=_td_ms(60000), subscribed_topic_names=(self.topic,), topic_partitions=())
        else:
            values.update(rebalance_timeout=_td_ms(-1), subscribed_topic_names=None,
                          topic_partitions=None if self.reported == self.owned else
                          tuple({"topic_id": t, "partitions": p} for t, p in self.owned.items()))
        sent = dict(self.owned)
        resp = await self.conn.call(CONSUMER_GROUP_HEARTBEAT, values, min_version=1, max_version=1)
        self.heartbeats += 1
        if resp.error_code != 0:
            self.errors[str(resp.error_code)] += 1
            if epoch != -1:
                self.epoch, self.owned, self.reported = 0, {}, None  # fenced or unknown: rejoin
            return
        if epoch == -1:
            return
        self.reported = sent
        self.epoch = resp.member_epoch
        self.interval_s = resp.heartbeat_interval.total_seconds() or 5.0
        if resp.assignment is not None:
            self.owned = {tp.topic_id: tuple(sorted(tp.partitions)) for tp in resp.assignment.topic_partitions}

    async def run(self) -> None:
        await self.conn.connect()
        while not self.leaving.is_set():
            try:
                await self._beat(self.epoch)
            except Exception as exc:  # noqa: BLE001 - counted
                self.errors[type(exc).__name__] += 1
                await asyncio.sleep(1)
                continue
            wait = 0 if self.reported != self.owned else self.interval_s
            try:
                await asyncio.wait_for(self.leaving.wait(), wait)
            except asyncio.TimeoutError:
                pass
        try:
            await self._beat(-1)
        except Exception as exc:  # noqa: BLE001
            self.errors[f"leave {type(exc).__name__}"] += 1
        await self.conn.close()


def _td_ms(ms: int):
    import datetime

    return datetime.timedelta(milliseconds=ms)


def _groups_consistent(members: list[CgMember], partitions: int) -> tuple[int, list[str]]:
    """(groups whose live members own every partition exactly once, descriptions of the others)."""
    by_group: dict[str, list[CgMember]] = {}
    for m in members:
        by_group.setdefault(m.group, []).append(m)
    ok, bad = 0, []
    for group, ms in by_group.items():
        owned = Counter(p for m in ms for ps in m.owned.values() for p in ps)
        if set(owned) == set(range(partitions)) and all(n == 1 for n in owned.values()) \
                and all(m.reported == m.owned for m in ms):
            ok += 1
        else:
            bad.append(f"{group}: {len(owned)} of {partitions} partitions owned, "
                       f"{sum(1 for n in owned.values() if n > 1)} owned twice")
    return ok, bad


async def consumer_groups_worker(host: str, port: int, groups: list[str], members_per_group: int, topic: str,
                                 partitions: int, churn_s: float, churn_fraction: float, seed: int, leave,
                                 out) -> None:
    """Join every member, report when every group is consistent; churn for `churn_s`; report
    when consistent again; leave on `leave`."""
    rng = random.Random(seed)
    members: list[CgMember] = []
    errors: Counter = Counter()

    def add(group: str) -> CgMember:
        m = CgMember(host, port, group, topic)
        m.task = asyncio.ensure_future(m.run())
        members.append(m)
        return m

    async def settle(what: str, deadline_s: float = 120.0) -> None:
        t0 = time.monotonic()
        while True:
            ok, bad = _groups_consistent(members, partitions)
            if ok == len(groups) or time.monotonic() - t0 > deadline_s:
                out.put((what, dict(seconds=time.monotonic() - t0, consistent=ok, inconsistent=bad[:5])))
                return
            await asyncio.sleep(0.2)

    for i, group in enumerate(groups):
        for _ in range(members_per_group):
            add(group)
        if i % 10 == 9:
            await asyncio.sleep(0)  # let the connections start
    await settle("joined")
    left = 0
    t_end = time.monotonic() + churn_s
    while time.monotonic() < t_end:
        leaving = rng.sample(members, max(1, int(len(members) * churn_fraction)))
        for m in leaving:
            m.leaving.set()
        done = await asyncio.gather(*(m.task for m in leaving), return_exceptions=True)
        errors.update(type(x).__name__ for x in done if isinstance(x, BaseException))
        for m in leaving:
            errors.update(m.errors)
            members.remove(m)
            add(m.group)
        left += len(leaving)
        await asyncio.sleep(1.0)
    out.put(("churned", dict(replaced=left)))
    await settle("settled")
    await _wait_event(leave)
    for m in members:
        m.leaving.set()
    done = await asyncio.gather(*(m.task for m in members), return_exceptions=True)
    errors.update(type(x).__name__ for x in done if isinstance(x, BaseException))
    for m in members:
        errors.update(m.errors)
    out.put(("done", dict(heartbeats=sum(m.heartbeats for m in members), errors=dict(errors))))


async def stalled_reader_worker(host: str, port: int, topic: str, seconds: float, out) -> None:
    """Fetch requests for offset 0 (max_bytes 50 MiB) every 50 ms for `seconds`, never reading."""
    from quafka.client._transport import BrokerConnection
    from quafka.client._wire import WireConnection, build_entity, request_class
    from quafka.client.reader import fetch_values

    meta_conn = await BrokerConnection(host, port, client_id="stalled-meta").connect()
    version = meta_conn.version_for(1, 13)
    meta = await meta_conn.call(3, {"topics": [{"name": topic, "topic_id": None}],
                                    "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False}, min_version=12)
    topic_id = meta.topics[0].topic_id
    await meta_conn.close()
    wire = WireConnection("stalled-reader")
    request = build_entity(request_class(1, version), fetch_values(
        topic, topic_id, 0, 0, max_wait_ms=0, max_bytes=50 * MIB, partition_max_bytes=50 * MIB))
    sock = socket.create_connection((host, port))
    sock.setblocking(False)
    pending = b""
    sent_requests = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if not pending:
            _cid, pending = wire.send(request)
            sent_requests += 1
        try:
            n = sock.send(pending)
            pending = pending[n:]
        except BlockingIOError:
            pass
        await asyncio.sleep(0.05)
    out.put(("stalled", dict(requests=sent_requests, seconds=time.monotonic() - t0)))
    sock.close()
    out.put(("done", None))


async def slowloris_worker(host: str, port: int, count: int, seconds: float, out) -> None:
    """`count` connections each announce a 100 MB request and then send one byte a second."""
    socks = []
    for _ in range(count):
        s = socket.create_connection((host, port))
        s.sendall(struct.pack(">i", 100 * 1000 * 1000))
        socks.append(s)
    t0 = time.monotonic()
    sent = closed = 0
    out.put(("started", count))
    while time.monotonic() - t0 < seconds:
        for s in list(socks):
            try:
                s.send(b"\0")
                sent += 1
            except OSError:
                closed += 1
                socks.remove(s)
        await asyncio.sleep(1.0)
    for s in socks:
        s.close()
    out.put(("done", dict(bytes_sent=sent, closed_by_broker=closed, seconds=time.monotonic() - t0)))


# ----------------------------------------------------------------------------- scenarios (parent)

@dataclass
class Outcome:
    """What a scenario's load phase reports besides the canary and memory."""

    load: str
    metric: str = ""
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Ctx:
    """What a scenario gets: the broker, its admin client, the spawn context and the scale."""

    def __init__(self, broker, admin, mp_ctx, scale: float, seed: int, sampler: RssSampler) -> None:
        self.broker, self.admin, self.mp, self.scale, self.seed, self.sampler = broker, admin, mp_ctx, scale, seed, sampler
        self.host, self.port = "127.0.0.1", broker.port
        self.procs: list = []
        self.out = mp_ctx.Queue()
        self.go = mp_ctx.Event()
        self.spy = None  # job_round.SpyProfile when --profile
        self.t0: float | None = None
        self.t0_ns = 0
        self.rss_before_kb = 0

    def spawn(self, fn, *args) -> None:
        """Start a load worker; it runs `fn` once `begin()` is called."""
        p = self.mp.Process(target=run_worker, args=(fn, args, self.go, self.out), daemon=True)
        p.start()
        self.procs.append(p)

    def begin(self) -> None:
        """The load starts now: every spawned worker is ready (imports done) and is let go; what
        the scenario did before (creating topics, producing its data) is setup, not load."""
        for _ in self.procs:
            self.expect("ready", 120)
        self.rss_before_kb = self.sampler.now_kb()
        self.cpu0 = (process_cpu_seconds(self.broker.proc.pid), machine_busy_seconds())
        self.t0, self.t0_ns = time.monotonic(), time.time_ns()
        if self.spy is not None:
            self.spy.start()
        self.go.set()

    def expect(self, kind: str, timeout_s: float):
        """The next report of kind `kind` from the workers (others raise)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                got, payload = self.out.get(timeout=max(0.1, deadline - time.monotonic()))
            except _queue.Empty:
                raise RuntimeError(f"no {kind!r} report within {timeout_s:.0f} s") from None
            if got == "error":
                raise RuntimeError(payload)
            if got == kind:
                return payload

    def reap(self) -> None:
        for p in self.procs:
            p.join(30)
            if p.is_alive():
                p.terminate()
                p.join(5)


def scenario_idle_connections(ctx: Ctx) -> Outcome:
    count = scaled(10_000, ctx.scale, 10)
    release = ctx.mp.Event()
    ctx.spawn(idle_connections_worker, ctx.host, ctx.port, count, release)
    ctx.begin()
    before = ctx.rss_before_kb
    got = ctx.expect("connected", 300)
    time.sleep(3)
    loaded = ctx.sampler.now_kb()
    release.set()
    closed = ctx.expect("closed", 120)
    out = Outcome(f"{count:,} connections, one ApiVersions v3 each")
    per_conn_kb = (loaded - before) / max(1, got["connected"])
    out.metric = (f"{got['connected']:,} connected in {got['seconds']:.1f} s; {per_conn_kb:.1f} KiB RSS per connection; "
                  f"broker fd limit {proc_nofile(ctx.broker.proc.pid)}")
    if got["failed"]:
        out.problems.append(f"{got['failed']} of {count} connections failed: {got['first_failures']}")
    if closed["alive_at_release"] != got["connected"]:
        out.problems.append(f"only {closed['alive_at_release']} of {got['connected']} connections were still open "
                            f"after the idle wait")
    return out


def _share_load(ctx: Ctx, groups: list[tuple[str, str, int]], members_per_group: int, records: int,
                processes: int, label: str) -> Outcome:
    """groups: (group, topic, partitions). Join, produce `records` spread over the topics, consume
    and accept them all, leave; check every produced record accepted exactly once and lag 0."""
    from confluent_kafka import Producer
    from quafka.client import KafkaException

    admin = ctx.admin
    admin.create_topics({t: (p, 1) for _g, t, p in groups})
    for g, _t, _p in groups:
        admin.alter_configs("group", g, set={"share.auto.offset.reset": "earliest"})
    slots = [(g, t) for g, t, _p in groups for _ in range(members_per_group)]
    leave = ctx.mp.Event()
    for i in range(processes):
        ctx.spawn(share_members_worker, i, ctx.broker.bootstrap, slots[i::processes], leave)
    ctx.begin()
    t0 = time.monotonic()
    for _ in range(processes):
        ctx.expect("started", 120)
    # joined: every member in its group's description with a partition assigned
    names = [g for g, _t, _p in groups]
    deadline = time.monotonic() + 300
    joined_s = None
    while time.monotonic() < deadline:
        descs = {}
        for g in names:
            try:
                descs.update(admin.describe_share_groups([g]))
            except KafkaException:  # GROUP_ID_NOT_FOUND until its first member's heartbeat
                pass
        ready = sum(1 for d in descs.values() for m in d.members if any(m.assignment.values()))
        stable = all(d.group_epoch == d.assignment_epoch for d in descs.values())
        if ready == len(slots) and stable:
            joined_s = time.monotonic() - t0
            break
        time.sleep(0.5)
    out = Outcome(label)
    if joined_s is None:
        out.problems.append(f"members not all assigned within 300 s ({ready} of {len(slots)})")
    # work
    delivered: set[tuple[str, int, int]] = set()
    failures: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            delivered.add((msg.topic(), msg.partition(), msg.offset()))

    producer = Producer({"bootstrap.servers": ctx.broker.bootstrap, "linger.ms": 5, "logger": _quiet_logger()})
    t1 = time.monotonic()
    topics = [t for _g, t, _p in groups]
    for i in range(records):
        producer.produce(topics[i % len(topics)], value=b"x" * 100, on_delivery=on_delivery)
        if i % 1000 == 999:
            producer.poll(0)
    producer.flush(60)
    accepted_now = [0] * processes  # each worker's running total of accepted records
    deadline = time.monotonic() + 300
    while sum(accepted_now) < len(delivered) and time.monotonic() < deadline:
        try:
            got, payload = ctx.out.get(timeout=1)
        except _queue.Empty:
            continue
        if got == "error":
            raise RuntimeError(payload)
        if got == "accepted":
            accepted_now[payload[0]] = payload[1]
    work_s = time.monotonic() - t1
    t2 = time.monotonic()
    leave.set()
    reports = [ctx.expect("done", 180) for _ in range(processes)]
    leave_s = time.monotonic() - t2
    received: Counter = Counter()
    accepted: Counter = Counter()
    for r in reports:
        received.update(r["received"])
        accepted.update(r["accepted"])
    missing = delivered - set(accepted)
    if failures:
        out.problems.append(f"{len(failures)} produce failures: {failures[:2]}")
    if missing:
        out.problems.append(f"{len(missing)} of {len(delivered)} produced records never accepted")
    twice = sum(1 for n in accepted.values() if n > 1)
    if twice:
        examples = [x for r in reports for x in r["accepted_twice"].items()][:3]
        out.problems.append(f"{twice} records accepted more than once (reported twice by the acknowledgement commit "
                            f"callback; first: {examples})")
    after = sum(r["after_accept"] for r in reports)
    if after:
        out.problems.append(f"{after} records delivered again after being accepted")
    errs = [e for r in reports for e in r["failed_acks"] + r["errors"]]
    if errs:
        out.notes.append(f"{sum(r['error_count'] for r in reports)} consumer errors, first: {errs[:2]}")
    # the groups are empty and have no lag
    lagging = 0
    for g, t, _p in groups:
        lagging += sum(lag for (_t, _p2), (_start, lag) in admin.list_share_group_offsets(g, [t]).items() if lag > 0)
    if lagging:
        out.problems.append(f"share-group lag at the end: {lagging} records")
    left = sum(len(d.members) for g in names for d in admin.describe_share_groups([g]).values())
    if left:
        out.problems.append(f"{left} members still in the groups after leaving")
    redelivered = sum(n - 1 for n in received.values() if n > 1)
    client_released = sum(r["released"] for r in reports)
    if client_released:
        out.notes.append(f"{client_released} acquired records released by the client without being delivered "
                         "(fetched after their partition moved, or at close), then delivered to another member")
    out.metric = (f"joined in {joined_s or float('nan'):.1f} s, {len(delivered):,} records accepted in {work_s:.1f} s, "
                  f"left in {leave_s:.1f} s; {redelivered} delivered twice to the application")
    return out


def scenario_share_1000(ctx: Ctx) -> Outcome:
    members = scaled(1000, ctx.scale, 2)
    records = scaled(20_000, ctx.scale, 100)
    return _share_load(ctx, [("load-share", "load-share", 16)], members, records, 2,
                       f"{members:,} share consumers, 1 group, 16 partitions, {records:,} records")


def scenario_share_groups(ctx: Ctx) -> Outcome:
    groups = scaled(200, ctx.scale, 1)
    records = groups * 100
    return _share_load(ctx, [(f"load-sg-{i}", f"load-sg-{i}", 1) for i in range(groups)], 10, records, 2,
                       f"{groups} share groups x 10 members, 1 topic (1 partition) each, {records:,} records")


def scenario_consumer_groups(ctx: Ctx) -> Outcome:
    groups = scaled(100, ctx.scale, 1)
    per_group, partitions = 20, 20
    churn_s = max(3.0, 30 * ctx.scale)
    topic = "load-cg"
    ctx.admin.create_topics({topic: (partitions, 1)})
    leave = ctx.mp.Event()
    ctx.spawn(consumer_groups_worker, ctx.host, ctx.port, [f"load-cg-{i}" for i in range(groups)], per_group, topic,
              partitions, churn_s, 0.05, ctx.seed, leave)
    ctx.begin()
    joined = ctx.expect("joined", 300)
    churned = ctx.expect("churned", churn_s + 300)
    settled = ctx.expect("settled", 300)
    leave.set()
    done = ctx.expect("done", 300)
    out = Outcome(f"{groups} consumer groups x {per_group} members (KIP-848), {partitions} partitions, "
                  f"{churn_s:.0f} s churn at 5%/s")
    out.metric = (f"all groups assigned {joined['seconds']:.1f} s after the joins; {churned['replaced']:,} members "
                  f"replaced; consistent {settled['seconds']:.1f} s after the churn; {done['heartbeats']:,} heartbeats")
    for what, rep in (("after joining", joined), ("after the churn", settled)):
        if rep["consistent"] != groups:
            out.problems.append(f"{groups - rep['consistent']} groups inconsistent {what}: {rep['inconsistent'][:2]}")
    if done["errors"]:
        out.notes.append(f"heartbeat errors (rejoined): {done['errors']}")
    return out


def scenario_stalled_reader(ctx: Ctx) -> Outcome:
    from confluent_kafka import Producer

    topic = "load-stalled"
    data_mib = scaled(64, ctx.scale, 1)
    seconds = max(3.0, 20 * ctx.scale)
    ctx.admin.create_topics({topic: (1, 1)})
    producer = Producer({"bootstrap.servers": ctx.broker.bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "logger": _quiet_logger()})
    value = b"s" * 10_000
    for i in range(data_mib * MIB // len(value)):
        producer.produce(topic, value=value)
        if i % 100 == 99:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("could not produce the stalled reader's data")
    ctx.spawn(stalled_reader_worker, ctx.host, ctx.port, topic, seconds)
    ctx.begin()
    before, t0 = ctx.rss_before_kb, ctx.t0
    stalled = ctx.expect("stalled", seconds + 120)
    t1 = time.monotonic()
    samples = [kb for t, kb in ctx.sampler.samples if t0 <= t <= t1]
    half = samples[len(samples) // 2:] or [0]
    hwm = proc_status_kb(ctx.broker.proc.pid, "VmHWM")  # the 100 ms samples can miss the encoding's peak
    ctx.expect("done", 30)
    out = Outcome(f"1 client, Fetch (max_bytes 50 MiB) every 50 ms for {seconds:.0f} s on a {data_mib} MiB "
                  "partition, never reading")
    out.metric = (f"{stalled['requests']} requests written; RSS +{(max(samples + [hwm]) - before) / 1024:.0f} MiB at "
                  f"peak (VmHWM), +{(min(half) - before) / 1024:.0f} to +{(max(half) - before) / 1024:.0f} MiB "
                  "through the second half of the stall")
    if max(half) - min(half) > 64 * 1024:
        out.problems.append(f"broker RSS kept growing while the reader stalled: {min(half) // 1024}-{max(half) // 1024} MiB")
    return out


def scenario_slowloris(ctx: Ctx) -> Outcome:
    count = scaled(100, ctx.scale, 1)
    seconds = max(1.0, 30 * ctx.scale)
    ctx.spawn(slowloris_worker, ctx.host, ctx.port, count, seconds)
    ctx.begin()
    before, t0 = ctx.rss_before_kb, ctx.t0
    ctx.expect("started", 60)
    done = ctx.expect("done", seconds + 60)
    peak = ctx.sampler.peak_kb(t0, time.monotonic())
    out = Outcome(f"{count} connections announcing 100 MB requests, 1 byte/s each for {seconds:.0f} s")
    out.metric = (f"{done['bytes_sent']:,} bytes sent, {done['closed_by_broker']} connections closed by the broker; "
                  f"RSS {(peak - before) / 1024:+.1f} MiB at peak")
    if peak - before > 32 * 1024:
        out.problems.append(f"broker RSS grew by {(peak - before) // 1024} MiB under the slowloris")
    return out


RUNNERS = {"idle-connections": scenario_idle_connections, "share-1000": scenario_share_1000,
           "share-groups": scenario_share_groups, "consumer-groups": scenario_consumer_groups,
           "stalled-reader": scenario_stalled_reader, "slowloris": scenario_slowloris}

OVERRIDES = {"share-1000": ["group.share.max.size=1000"],
             "share-groups": ["group.share.max.share.sessions=3000"]}


# ----------------------------------------------------------------------------- one scenario

@dataclass
class Row:
    name: str
    outcome: Outcome
    wall_s: float
    base_p99_ms: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    samples: int
    rss_before_mib: float
    rss_peak_mib: float
    rss_after_mib: float
    hwm_mib: float
    load_avg: str
    redelivered: int
    problems: list[str]
    broker_cpu_pct: float
    machine_cpu_pct: float


def run_scenario(name: str, args, mp_ctx, seed: int) -> Row:
    from quafka.client import Admin

    work = tempfile.mkdtemp(prefix=f"quafka-load-{name}-")
    broker = Broker(work, overrides=OVERRIDES.get(name, []))
    load_avg = load_average()
    canary = None
    sampler = None
    ctx = None
    try:
        saved = os.environ.get("PYTHONPATH")
        if args.broker_src:
            os.environ["PYTHONPATH"] = os.path.abspath(args.broker_src)
        try:
            broker.start()
        finally:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
        if args.pin:
            os.sched_setaffinity(broker.proc.pid, {SERVER_CPU})
        sampler = RssSampler(broker.proc.pid)
        sampler.start()
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.create_topics({CANARY_TOPIC: (1, 1)})
            admin.alter_configs("group", CANARY_GROUP, set={"share.auto.offset.reset": "earliest"})
            canary = Canary(mp_ctx, broker.bootstrap)
            canary.start()
            ctx = Ctx(broker, admin, mp_ctx, args.scale, seed, sampler)
            if args.profile:
                from job_round import SpyProfile

                ctx.spy = SpyProfile(broker.proc.pid, os.path.join(work, "spy.txt"), rate_hz=100)
            base0_ns = time.time_ns()  # the canary is warm: its first record came through
            time.sleep(args.baseline)
            base1_ns = time.time_ns()  # the baseline ends before the scenario's setup (topics, data)
            outcome = RUNNERS[name](ctx)
            assert ctx.t0 is not None, f"{name} never called ctx.begin()"
            rss_before, t0, t0_ns = ctx.rss_before_kb, ctx.t0, ctx.t0_ns
            t1, t1_ns = time.monotonic(), time.time_ns()
            broker_cpu = process_cpu_seconds(broker.proc.pid) - ctx.cpu0[0]
            if ctx.spy is not None:
                ctx.spy.stop()
                with open(f"{args.profile}.{name}", "w") as f:
                    f.write(ctx.spy.report() + "\n")
                print(f"  broker profile during the load (py-spy): {args.profile}.{name}")
            machine_cpu = machine_busy_seconds() - ctx.cpu0[1]
            ctx.reap()
            time.sleep(args.settle)
            rss_after = sampler.now_kb()
            result = canary.finish()
        lat = result.latencies_ms(t0_ns, t1_ns)
        base = result.latencies_ms(base0_ns, base1_ns)
        hwm = proc_status_kb(broker.proc.pid, "VmHWM")
        problems = outcome.problems + result.problems()
        outcome.notes += result.notes()
        if broker.proc.poll() is not None:
            problems.append(f"broker exited with {broker.proc.returncode}")
        return Row(name, outcome, t1 - t0, percentile(base, 0.99), percentile(lat, 0.5), percentile(lat, 0.99),
                   max(lat, default=float("nan")), len(lat), rss_before / 1024, sampler.peak_kb(t0, t1) / 1024,
                   rss_after / 1024, hwm / 1024, load_avg, result.redelivered(), problems,
                   100 * broker_cpu / (t1 - t0), 100 * machine_cpu / (t1 - t0))
    finally:
        if ctx is not None:
            for p in ctx.procs:
                if p.is_alive():
                    p.terminate()
                p.join(5)
        if canary is not None:
            canary.kill()
        if sampler is not None:
            sampler.stopped.set()
        broker.stop()
        if args.keep_logs:
            print(f"  broker log kept: {broker.log_path}")
        else:
            shutil.rmtree(work, ignore_errors=True)


# ----------------------------------------------------------------------------- report

HEAD = ["scenario", "load wall s", "canary p50 ms", "canary p99 ms", "canary max ms", "baseline p99 ms",
        "RSS before MiB", "RSS peak MiB", "VmHWM MiB", "RSS after MiB", "data", "broker CPU %", "machine CPU %",
        "load avg at start"]


def row_cells(r: Row) -> list[str]:
    goal = "" if r.p99_ms < CANARY_P99_GOAL_MS else " (over 50)"
    return [r.name, f"{r.wall_s:.1f}", f"{r.p50_ms:.1f}", f"{r.p99_ms:.1f}{goal}", f"{r.max_ms:.0f}",
            f"{r.base_p99_ms:.1f}", f"{r.rss_before_mib:.0f}", f"{r.rss_peak_mib:.0f}", f"{r.hwm_mib:.0f}",
            f"{r.rss_after_mib:.0f}",
            "ok" if not r.problems else "PROBLEM", f"{r.broker_cpu_pct:.0f}", f"{r.machine_cpu_pct:.0f}", r.load_avg]


def details(rows: list[Row]) -> str:
    lines = []
    for r in rows:
        lines.append(f"- **{r.name}**: {r.outcome.load}. {r.outcome.metric}. Canary: {r.samples:,} records during "
                     f"the load, {r.redelivered} redelivered.")
        for n in r.outcome.notes:
            lines.append(f"  - note: {n}")
        for p in r.problems:
            lines.append(f"  - PROBLEM: {p}")
    return "\n".join(lines)


def _shown_args(argv: list[str]) -> list[str]:
    """The command line for the doc, without the options that name local files."""
    shown, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--doc", "--json", "--profile"):
            skip = True
        elif not a.startswith(("--doc=", "--json=", "--profile=")) and a not in ("--update-docs", "--keep-logs"):
            shown.append(a)
    return shown


def section(rows: list[Row], info: dict, args, seed: int, load_at_start: str) -> str:
    return "\n".join([
        BEGIN_MARK,
        "## Load and churn",
        "",
        "`benchmarks/load_churn.py` (`make load`): each scenario on a fresh broker child process (the load's "
        "worker processes at nice 10), with a canary share consumer "
        "(confluent-kafka, explicit ACCEPT per record) and a producer sending a stamped record every 10 ms. "
        f"Canary latency is produce() to poll(), during the load; the baseline is the {args.baseline:g} s before it. "
        f"RSS is the broker's VmRSS, sampled every 100 ms (after: {args.settle:g} s after the load ended). "
        "\"data ok\": every record the "
        "canary (and the share scenarios' load) produced was accepted exactly once, none delivered again after "
        "being accepted, and the groups end with no lag. See the script's `--help` for the scenarios.",
        "",
        f"Run: `{' '.join(['benchmarks/load_churn.py'] + _shown_args(args.argv or []))}`, seed {seed}, "
        f"scale {args.scale:g}, nice {os.getpriority(os.PRIO_PROCESS, 0)} (broker and canary), load average at start "
        f"{load_at_start}. "
        + "; ".join(f"{k} {v}" for k, v in info.items()) + ".",
        "",
        markdown_grid(HEAD, [row_cells(r) for r in rows]),
        "",
        details(rows),
        END_MARK,
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = arg_parser(__doc__)
    ap.add_argument("--scenario", action="append", choices=SCENARIOS, default=None,
                    help="run this scenario (repeatable; default all, in the order above)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply the scenario's counts and durations (e.g. 0.01 for a smoke run; default 1)")
    ap.add_argument("--seed", type=int, default=None, help="seed of the consumer-group churn (default: random, printed)")
    ap.add_argument("--baseline", type=float, default=2.0, help="seconds of canary before the load (default 2)")
    ap.add_argument("--settle", type=float, default=3.0,
                    help="seconds after the load before the RSS 'after' is read (default 3)")
    ap.add_argument("--priority", type=int, default=None, metavar="NICE",
                    help="run this script, the broker and the canary at this nice value (e.g. -10, needs root; the "
                         "load's workers stay at nice 10): on a machine shared with other work, the broker gets the "
                         "CPU a dedicated machine would give it")
    ap.add_argument("--pin", action="store_true",
                    help="pin the broker to CPU 0 and the clients to the other CPUs (off by default: on a machine "
                         "shared with other work a pinned broker cannot move away from a busy CPU)")
    ap.add_argument("--profile", metavar="FILE", default=None,
                    help="sample the broker with py-spy during each scenario's load; the shares per function go to "
                         "FILE.<scenario>")
    ap.add_argument("--broker-src", metavar="DIR", default=None,
                    help="run the broker from this source tree (its PYTHONPATH), e.g. another worktree's src, for "
                         "before/after figures on one machine (the clients stay on this checkout)")
    ap.add_argument("--keep-logs", action="store_true", help="keep each broker's data directory and log")
    ap.add_argument("--update-docs", action="store_true", help=f"rewrite the section of {DOC_PATH.name} "
                                                                "(docs/benchmarks.md, 'Load and churn')")
    ap.add_argument("--json", metavar="FILE", default=None, help="also write the rows as JSON to FILE")
    ap.add_argument("--doc", default=None, help="with --update-docs: write this file instead of docs/benchmarks.md")
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    names = args.scenario or list(SCENARIOS)
    interrupt_on_sigterm()
    soft, hard = raise_nofile()
    if args.priority is not None:
        os.setpriority(os.PRIO_PROCESS, 0, args.priority)  # inherited by the broker and the canary
    info = machine_info()
    args.pin = args.pin and len(os.sched_getaffinity(0)) >= 2
    if args.pin:
        os.sched_setaffinity(0, set(os.sched_getaffinity(0)) - {SERVER_CPU})
    load_at_start = load_average()
    if args.broker_src:
        info["broker from"] = os.path.relpath(os.path.abspath(args.broker_src))
    print(f"load and churn: scenarios {', '.join(names)}; scale {args.scale:g}; seed {seed} (--seed {seed} replays "
          f"the churn); load average {load_at_start}; RLIMIT_NOFILE {soft}/{hard}; nice "
          f"{os.getpriority(os.PRIO_PROCESS, 0)} (load workers {LOAD_NICE}); "
          + "; ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    started = time.monotonic()
    mp_ctx = mp.get_context("spawn")
    rows: list[Row] = []
    problems: list[str] = []
    try:
        for name in names:
            print(f"\n== {name} (load average {load_average()})", flush=True)
            try:
                row = run_scenario(name, args, mp_ctx, seed)
            except Exception as exc:  # noqa: BLE001 - the scenario failed; the others still run
                problems.append(f"{name}: {exc}")
                print(f"  FAILED: {exc}", flush=True)
                continue
            rows.append(row)
            print(text_grid(HEAD, [row_cells(row)]), flush=True)
            print(details([row]), flush=True)
            problems += [f"{name}: {p}" for p in row.problems]
            if row.p99_ms >= CANARY_P99_GOAL_MS:
                problems.append(f"{name}: canary p99 {row.p99_ms:.1f} ms is over {CANARY_P99_GOAL_MS:.0f} ms "
                                f"(baseline {row.base_p99_ms:.1f} ms, load average at start {row.load_avg})")
    except KeyboardInterrupt:
        return interrupted()
    if rows:
        print_blocks(text_grid(HEAD, [row_cells(r) for r in rows]))
        if args.update_docs:
            path = Path(args.doc) if args.doc else DOC_PATH
            replace_marked_section(section(rows, info, args, seed, load_at_start), path, BEGIN_MARK, END_MARK)
            print(f"wrote the 'Load and churn' section of {os.path.relpath(path)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": seed, "scale": args.scale, "rows": [dataclasses.asdict(r) for r in rows],
                       "problems": problems}, f, indent=1, default=str)
    return finish(problems, time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(main())
