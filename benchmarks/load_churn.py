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

import dataclasses
import json
import multiprocessing as mp
import os
import queue as _queue
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (  # noqa: E402
    DOC_PATH,
    arg_parser,
    finish,
    interrupt_on_sigterm,
    interrupted,
    machine_busy_seconds,
    machine_info,
    markdown_grid,
    print_blocks,
    process_cpu_seconds,
    replace_marked_section,
    text_grid,
)
from _load_clients import (  # noqa: E402
    CANARY_GROUP,
    CANARY_TOPIC,
    LOAD_NICE,
    MIB,
    Canary,
    RssSampler,
    _quiet_logger,
    consumer_groups_worker,
    idle_connections_worker,
    load_average,
    percentile,
    proc_nofile,
    proc_status_kb,
    raise_nofile,
    run_worker,
    scaled,
    share_members_worker,
    slowloris_worker,
    stalled_reader_worker,
)
from produce_fetch import Broker  # noqa: E402

BEGIN_MARK, END_MARK = "<!-- load-churn:begin -->", "<!-- load-churn:end -->"
SCENARIOS = ("idle-connections", "share-1000", "share-groups", "consumer-groups", "stalled-reader", "slowloris")
CANARY_P99_GOAL_MS = 50.0
SERVER_CPU = 0


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
    deadline = time.monotonic() + 300
    while producer.flush(1) and time.monotonic() < deadline:
        pass  # a saturated broker answers late; wait for every delivery report
    if len(producer):
        out.problems.append(f"{len(producer)} of {records} records not acknowledged by the broker within 300 s")
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
        out.notes.append(f"{sum(r['error_count'] for r in reports)} consumer errors and "
                         f"{sum(r.get('failed_ack_count', 0) for r in reports)} failed acknowledgements "
                         f"(their records came again or stayed unaccepted, checked above), first: {errs[:2]}")
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
