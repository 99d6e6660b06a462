#!/usr/bin/env python3
"""The web dashboard's cost (issue 30, acceptance 4): page render times at scale, and what live views cost the broker.

The script starts `python -m quafka broker` in a child process (fresh temporary log dir, free
ports) with the dashboard on (`quafka.dashboard.listener`), and fills it: `--topics` topics of one
partition (default 1,000), `--share-groups` share groups (default 100), each on its own topic
with records; `--held-groups` of them keep a member (a quafka AsyncShareConsumer in a holder
process) holding acquired records in flight, some with a second member, and a tenth of the groups
send records to a dead-letter queue; `--consumer-groups` consumer groups (default 5) with
committed offsets. Which groups hold records and how many comes from `--seed` (printed).

1. Render time: every page type fetched over HTTP (a new connection per fetch, as a browser's first
   load) — the first fetch of each page after the broker starts (cold: templates compiled, the
   dashboard's client connects), then `--fetches` rounds of all pages (warm): median, p99 and max
   ms per page, and the bytes of each page. With `--standalone`, the same against a `quafka
   dashboard` process pointed at the broker.
2. Live-view cost: the same broker under a steady share-group job workload (a producer pacing
   `--job-rate` records/s to one partition, two quafka ShareConsumers accepting every record), its
   CPU (utime+stime from /proc/<pid>/stat) over `--window` seconds with no dashboard open and with
   `--dashboards` dashboards open (each holds the event stream of the job group's share-group page
   and of the overview, as a browser tab on each would), in `--pairs` alternating pairs (0 then 5,
   5 then 0, ...): percentage points of one core and the ratio.

Goals (issue 30): every page under 300 ms; 5 dashboards cost the broker under 2 percentage points
of one core. `--profile FILE` samples the broker with py-spy during one window with dashboards
open and keeps the shares per function. `--update-docs` rewrites the "Dashboard" section of
docs/benchmarks.md (`<!-- dashboard:begin -->` ... `<!-- dashboard:end -->`).

    .venv/bin/python benchmarks/dashboard.py --update-docs     # ~9 min
    .venv/bin/python benchmarks/dashboard.py --quick           # smoke run, prints only
"""

from __future__ import annotations

import asyncio
import importlib.util
import multiprocessing as mp
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (  # noqa: E402
    DOC_PATH,
    REPO,
    BrokerRun,
    arg_parser,
    finish,
    free_port,
    interrupted,
    machine_busy_seconds,
    machine_info,
    markdown_grid,
    port_open,
    print_blocks,
    process_cpu_seconds,
    replace_marked_section,
    text_grid,
)
from produce_fetch import Broker  # noqa: E402

BEGIN, END = "<!-- dashboard:begin -->", "<!-- dashboard:end -->"
JOB_TOPIC, JOB_GROUP = "jobs", "job-workers"
DLQ_TOPIC = "dlq.jobs"
RENDER_GOAL_MS = 300.0
LIVE_GOAL_PP = 2.0


# ----------------------------------------------------------------------------- the broker

def broker_serves_dashboard() -> bool:
    """Whether `quafka broker` starts the dashboard on quafka.dashboard.listener (the wiring of
    cli/broker.py); before it does, the broker child is this script's --serve-broker, which runs
    the broker and the dashboard on one loop the same way."""
    from quafka.cli import broker

    return hasattr(broker, "start_dashboard")


class DashBroker(Broker):
    SCRIPT = Path(__file__).resolve()

    def __init__(self, work_dir: str, overrides: list[str]) -> None:
        super().__init__(work_dir, None, overrides)
        self.http_port = free_port()
        self.overrides.append(f"quafka.dashboard.listener=http://127.0.0.1:{self.http_port}")
        self.builtin = broker_serves_dashboard()

    def start(self, timeout_s: float = 30.0) -> "DashBroker":
        if not self.builtin:
            self.profile_path = None
            self.extra_args = []
            self._own_start(timeout_s)
        else:
            super().start(timeout_s)
        deadline = time.monotonic() + timeout_s
        while not port_open(self.http_port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the dashboard did not listen on {self.http_port}:\n{self.log_tail()}")
            time.sleep(0.05)
        return self

    def _own_start(self, timeout_s: float) -> None:
        args = [sys.executable, str(self.SCRIPT), "--serve-broker",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}", "--override", f"log.dirs={self.data_dir}"]
        for item in self.overrides:
            args += ["--override", item]
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, cwd=str(REPO))
        deadline = time.monotonic() + timeout_s
        while not port_open(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"broker did not start:\n{self.log_tail()}")
            time.sleep(0.05)


def serve_broker(overrides: list[str]) -> int:
    """`--serve-broker --override K=V ...`: BrokerServer and DashboardServer on one event loop (what
    cli/broker.py does with quafka.dashboard.listener), for a tree whose broker does not yet."""
    import logging

    from quafka.broker import config as cfg
    from quafka.broker.server.server import BrokerServer
    from quafka.dashboard.server import DashboardServer
    from quafka.dashboard.settings import DashboardSettings

    logging.basicConfig(level="INFO", stream=sys.stderr, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    props = dict(item.split("=", 1) for item in overrides)
    listen = props.pop("quafka.dashboard.listener")
    config = cfg.BrokerConfig.from_props(props)
    bootstrap = props["listeners"].split("://", 1)[1]

    async def main() -> int:
        server = BrokerServer(config)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await server.start()
        dash = await DashboardServer(DashboardSettings({"bootstrap.servers": bootstrap}, listen=listen,
                                                       mode="broker")).start()
        await stop.wait()
        await dash.close()
        await server.stop()
        return 0

    from quafka.broker.server.event_loop import run_on

    return run_on("auto", main())


def serve_standalone(bootstrap: str, listen: str) -> int:
    """`--serve-standalone BOOTSTRAP LISTEN`: the dashboard in its own process (`quafka dashboard`
    where that command exists; this is its core for a tree without it)."""
    from quafka.dashboard.server import DashboardServer
    from quafka.dashboard.settings import DashboardSettings

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        dash = await DashboardServer(DashboardSettings({"bootstrap.servers": bootstrap}, listen=listen)).start()
        await stop.wait()
        await dash.close()
        return 0

    return asyncio.run(main())


def start_standalone(bootstrap: str, log_path: str) -> tuple[subprocess.Popen, int, str]:
    port = free_port()
    listen = f"http://127.0.0.1:{port}"
    if importlib.util.find_spec("quafka.cli.dashboard") is not None:
        args, how = [sys.executable, "-m", "quafka", "dashboard", "--bootstrap-server", bootstrap, "--listen", listen], \
            "quafka dashboard"
    else:
        args, how = [sys.executable, str(Path(__file__).resolve()), "--serve-standalone", bootstrap, listen], \
            "DashboardServer in its own process (no `quafka dashboard` command in this tree)"
    proc = subprocess.Popen(args, stdout=open(log_path, "ab"), stderr=subprocess.STDOUT, cwd=str(REPO))
    deadline = time.monotonic() + 30
    while not port_open(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the standalone dashboard did not start; see {log_path}")
        time.sleep(0.05)
    return proc, port, how


# ----------------------------------------------------------------------------- filling the broker

@dataclass
class Population:
    topics: list[str]
    share_groups: list[str]
    held: list[str]  # groups whose members hold records in flight
    dlq_groups: list[str]
    consumer_groups: list[str]


def group_topic(i: int) -> str:
    return f"t{i:04d}"


def populate(bootstrap: str, args, rng: random.Random) -> Population:
    from confluent_kafka import Consumer, Producer, TopicPartition

    from quafka.client import Admin

    admin = Admin({"bootstrap.servers": bootstrap})
    topics = [group_topic(i) for i in range(args.topics)]
    t0 = time.monotonic()
    for i in range(0, len(topics), 250):
        admin.create_topics({t: (1, 1) for t in topics[i:i + 250]}, timeout=60)
    admin.create_topics({DLQ_TOPIC: (1, 1)})
    admin.alter_configs("topic", DLQ_TOPIC, set={"errors.deadletterqueue.group.enable": "true"})
    groups = [f"share-{i:03d}" for i in range(args.share_groups)]
    dlq_groups = groups[::10]
    for g in groups:
        configs = {"share.auto.offset.reset": "earliest", "share.heartbeat.interval.ms": "5000"}
        if g in dlq_groups:
            configs["errors.deadletterqueue.topic.name"] = DLQ_TOPIC
        admin.alter_configs("group", g, set=configs)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "logger": _QuietLogger()})
    for i, t in enumerate(topics):
        n = rng.randint(20, 200) if i < len(groups) else rng.randint(0, 20)
        for k in range(n):
            producer.produce(t, key=b"k%d" % k, value=b"job %d of %s: " % (k, t.encode()) + b"x" * rng.randint(10, 300),
                             headers=[("attempt", b"1")])
    producer.flush(60)
    cgroups = [f"consumer-{i}" for i in range(args.consumer_groups)]
    for i, g in enumerate(cgroups):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": g, "enable.auto.commit": False,
                      "logger": _QuietLogger()})
        tps = [TopicPartition(group_topic(len(groups) + i * 10 + j), 0, j) for j in range(10)]
        c.commit(offsets=tps, asynchronous=False)
        c.close()
    held = sorted(rng.sample(groups, min(args.held_groups, len(groups))))
    admin.close()
    print(f"filled in {time.monotonic() - t0:.1f} s: {len(topics)} topics, {len(groups)} share groups "
          f"({len(held)} holding records, {len(dlq_groups)} with a DLQ), {len(cgroups)} consumer groups", flush=True)
    return Population(topics, groups, held, dlq_groups, cgroups)


class _QuietLogger:
    def log(self, *a) -> None:
        pass

    def __getattr__(self, _name):
        return lambda *a, **k: None


def holder_worker(bootstrap: str, groups: list[str], held: list[str], dlq_groups: list[str], seed: int,
                  leave, out) -> None:
    """One AsyncShareConsumer per share group (a second one on every third held group): each takes
    a batch, accepts some, rejects one (dead-lettered where the group has a DLQ), releases one, and
    holds the rest; members of the groups not in `held` then leave (their groups stay, empty, with
    their share-group state). The held members stay (heartbeating) until `leave`."""
    try:
        asyncio.run(_hold(bootstrap, groups, held, dlq_groups, seed, leave, out))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        out.put(("error", repr(exc)))


async def _hold(bootstrap, groups, held, dlq_groups, seed, leave, out) -> None:
    from quafka.client import AcknowledgeType, AsyncShareConsumer

    rng = random.Random(seed)
    members = []
    for i, g in enumerate(groups):
        topic = f"t{i:04d}"
        count = 2 if g in held and i % 3 == 0 else 1
        for m in range(count):
            c = AsyncShareConsumer({"bootstrap.servers": bootstrap, "group.id": g, "client.id": f"worker-{i}-{m}",
                                    "share.acknowledgement.mode": "explicit", "share.acquire.mode": "record_limit",
                                    "max.poll.records": rng.randint(5, 40)})
            c.subscribe([topic])
            members.append((g, c))

    async def first_batch(g, c) -> None:
        deadline = time.monotonic() + 60
        records = []
        while not records and time.monotonic() < deadline:
            records = await c.poll(0.5)
        for n, r in enumerate(records):
            if n % 4 == 0:
                c.acknowledge(r, AcknowledgeType.ACCEPT)
            elif n == 1 and g in dlq_groups:
                c.acknowledge(r, AcknowledgeType.REJECT)
            elif n == 2:
                c.acknowledge(r, AcknowledgeType.RELEASE)
        await c.commit_sync()

    for i in range(0, len(members), 25):
        await asyncio.gather(*(first_batch(g, c) for g, c in members[i:i + 25]))
    await asyncio.gather(*(c.close() for g, c in members if g not in held))
    out.put(("ready", sum(1 for g, _ in members if g in held)))
    while not leave.is_set():
        await asyncio.sleep(0.2)
    for g, c in members:
        if g in held:
            await c.close()
    out.put(("done", None))


# ----------------------------------------------------------------------------- HTTP

def http_get(port: int, path: str, timeout_s: float = 60.0) -> tuple[float, int, int]:
    """One GET on a new connection: (ms to the last byte, status, body bytes)."""
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
        chunks = []
        while True:
            b = s.recv(1 << 16)
            if not b:
                break
            chunks.append(b)
    ms = (time.perf_counter() - t0) * 1000
    data = b"".join(chunks)
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head else 0
    return ms, status, len(body)


class SseClient(threading.Thread):
    """A browser's EventSource: holds /events?page=... open and reads everything, counting samples."""

    def __init__(self, port: int, path: str) -> None:
        super().__init__(daemon=True)
        self.port, self.path = port, path
        self.sock: socket.socket | None = None
        self.samples = 0
        self.bytes = 0
        self.status = 0
        self.error: str | None = None
        self.first = threading.Event()

    def run(self) -> None:
        try:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
            self.sock.sendall(f"GET {self.path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                              "Accept: text/event-stream\r\n\r\n".encode())
            tail = b""
            while True:
                b = self.sock.recv(1 << 16)
                if not b:
                    break
                if not self.status:
                    self.status = int(b.split(b" ", 2)[1])
                self.bytes += len(b)
                text = tail + b
                self.samples += text.count(b"event: sample\n")
                tail = text[-20:]
                if self.samples:
                    self.first.set()
        except OSError as exc:
            if self.sock is not None:
                self.error = repr(exc)
        finally:
            self.first.set()

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


# ----------------------------------------------------------------------------- 1. render time

def page_paths(pop: Population) -> list[tuple[str, str]]:
    g = pop.held[0]
    gi = pop.share_groups.index(g)
    return [("overview", "/"),
            ("topic", f"/topic?name={quote(pop.topics[gi])}"),
            ("share group", f"/share-group?group={quote(g)}"),
            ("share group + strip", f"/share-group?group={quote(g)}&topic={pop.topics[gi]}&partition=0"),
            ("share group + where is", f"/share-group?group={quote(g)}&topic={pop.topics[gi]}&partition=0&offset=3"),
            ("consumer group", f"/consumer-group?group={quote(pop.consumer_groups[0])}"),
            ("failures (one group)", f"/failures?group={quote(pop.dlq_groups[0])}"),
            ("failures (all groups)", "/failures"),
            ("workers", "/workers")]


@dataclass
class PageTimes:
    page: str
    cold_ms: float
    warm_ms: list[float] = field(default_factory=list)
    size: int = 0
    statuses: set = field(default_factory=set)
    cpu_ms: float = 0.0  # CPU of the serving processes per warm fetch (broker; + the standalone dashboard)
    fresh_ms: list[float] = field(default_factory=list)  # fetches that had to sample (no snapshot younger than 5 s)

    def p(self, q: float) -> float:
        xs = sorted(self.warm_ms)
        return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def measure_render(port: int, paths: list[tuple[str, str]], fetches: int, pids: list[int]) -> list[PageTimes]:
    """Cold: the first fetch of each page; then `fetches` warm fetches of one page after the other,
    with the CPU the serving processes (`pids`) spent on them (wall times on a busy machine include
    waiting for a core; the CPU does not)."""
    out = []
    for name, path in paths:
        ms, status, size = http_get(port, path)
        out.append(PageTimes(name, ms, size=size, statuses={status}))
    for t, (_, path) in zip(out, paths):
        cpu0 = sum(process_cpu_seconds(p) for p in pids)
        for _ in range(fetches):
            ms, status, size = http_get(port, path)
            t.warm_ms.append(ms)
            t.statuses.add(status)
            t.size = size
        t.cpu_ms = (sum(process_cpu_seconds(p) for p in pids) - cpu0) * 1000 / fetches
    # warm fetches one after the other reuse the page's snapshot (at most one refresh old: 5 s for
    # these pages, pages.Snapshots); a viewer who reloads later waits for a fresh sample: time that too
    for t, (_, path) in zip(out, paths):
        if t.page in FRESH_PAGES:
            for _ in range(FRESH_FETCHES):
                time.sleep(SNAPSHOT_AGE_S + 0.5)  # the snapshot expires (a wait between fetches, not a poll)
                ms, status, _size = http_get(port, path)
                t.fresh_ms.append(ms)
                t.statuses.add(status)
    return out


FRESH_PAGES = ("overview", "failures (all groups)")  # the pages whose sample is costly at this scale
FRESH_FETCHES = 3
SNAPSHOT_AGE_S = 5.0  # DashboardSettings.overview_cadence_s


def worst_ms(t: PageTimes) -> float:
    """What the goal is judged on: the warm p99, or the slowest fetch that had to sample."""
    return max([t.p(0.99)] + t.fresh_ms)


def render_rows(times: list[PageTimes]) -> list[list[str]]:
    return [[t.page, f"{t.cold_ms:.0f}", f"{statistics.median(t.warm_ms):.0f}", f"{t.p(0.99):.0f}",
             f"{max(t.warm_ms):.0f}", " / ".join(f"{x:.0f}" for x in t.fresh_ms) or "-", f"{t.cpu_ms:.0f}",
             f"{t.size / 1024:.0f}", "yes" if worst_ms(t) < RENDER_GOAL_MS and t.statuses == {200} else "NO"]
            for t in times]


RENDER_HEAD = ["page", "cold ms", "warm median ms", "warm p99 ms", "max ms", "fresh-sample ms", "CPU ms per fetch",
               "KiB", "< 300 ms"]


# ----------------------------------------------------------------------------- 2. live-view cost

def job_worker(bootstrap: str, rate: int, stop, out) -> None:
    """The steady job workload: a producer pacing `rate` records/s to JOB_TOPIC, two quafka
    ShareConsumers (explicit acknowledgement, one ACCEPT per record, commit_async per poll)."""
    try:
        from confluent_kafka import Producer

        from quafka.client import ShareConsumer

        done = [0, 0]

        def consume(n: int) -> None:
            c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": JOB_GROUP, "client.id": f"job-worker-{n}",
                               "share.acknowledgement.mode": "explicit", "max.poll.records": 50})
            c.subscribe([JOB_TOPIC])
            while not stop.is_set():
                records = c.poll(0.2)
                for r in records:
                    c.acknowledge(r)
                if records:
                    c.commit_async()
                done[n] += len(records)
            c.close()

        threads = [threading.Thread(target=consume, args=(n,), daemon=True) for n in range(2)]
        for t in threads:
            t.start()
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "logger": _QuietLogger()})
        t0 = time.monotonic()
        sent = 0
        out.put(("started", None))
        while not stop.is_set():
            due = int((time.monotonic() - t0) * rate)
            while sent < due:
                producer.produce(JOB_TOPIC, value=b"job %d" % sent)
                sent += 1
            producer.poll(0)
            time.sleep(0.01)
        producer.flush(10)
        for t in threads:
            t.join(15)
        out.put(("done", (sent, sum(done))))
    except Exception as exc:  # noqa: BLE001 - reported
        out.put(("error", repr(exc)))


@dataclass
class Window:
    dashboards: int
    broker_cpu_s: float
    window_s: float
    other_pct: float
    samples: int = 0
    sse_bytes: int = 0
    share_updates: int = 0  # sample events of the share-group streams, all viewers
    overview_updates: int = 0

    @property
    def pct(self) -> float:
        return self.broker_cpu_s / self.window_s * 100


def live_paths(dashboards: int) -> list[str]:
    share = f"/events?page=share-group&group={quote(JOB_GROUP)}"
    return [p for _ in range(dashboards) for p in (share, "/events?page=overview")]


def measure_window(broker: DashBroker, dashboards: int, window_s: float) -> Window:
    clients = [SseClient(broker.http_port, p) for p in live_paths(dashboards)]
    for c in clients:
        c.start()
    for c in clients:
        c.first.wait(30)
    bad = [f"{c.path}: status {c.status} {c.error or ''}" for c in clients if c.status != 200 or c.error]
    if bad:
        raise RuntimeError("live views failed: " + "; ".join(bad))
    time.sleep(1.0)  # both samplers past their first sample
    s0 = {c: c.samples for c in clients}
    b0 = sum(c.bytes for c in clients)
    cpu0, busy0, t0 = process_cpu_seconds(broker.proc.pid), machine_busy_seconds(), time.monotonic()
    time.sleep(window_s)
    cpu1, busy1, t1 = process_cpu_seconds(broker.proc.pid), machine_busy_seconds(), time.monotonic()
    got = {c: c.samples - s0[c] for c in clients}
    samples = sum(got.values())
    sse_bytes = sum(c.bytes for c in clients) - b0
    for c in clients:
        c.close()
    for c in clients:
        c.join(5)
    broker_s = cpu1 - cpu0
    other = (busy1 - busy0) - broker_s
    return Window(dashboards, broker_s, t1 - t0, other / (t1 - t0) * 100, samples, sse_bytes,
                  sum(n for c, n in got.items() if "share-group" in c.path),
                  sum(n for c, n in got.items() if "overview" in c.path))


def measure_live(broker: DashBroker, args) -> tuple[list[Window], tuple[int, int]]:
    from quafka.client import Admin

    admin = Admin({"bootstrap.servers": broker.bootstrap})
    admin.create_topics({JOB_TOPIC: (1, 1)})
    admin.alter_configs("group", JOB_GROUP, set={"share.auto.offset.reset": "earliest"})
    admin.close()
    ctx = mp.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=job_worker, args=(broker.bootstrap, args.job_rate, stop, out))
    proc.start()
    windows: list[Window] = []
    try:
        kind, payload = out.get(timeout=60)
        if kind == "error":
            raise RuntimeError(f"job workload: {payload}")
        time.sleep(args.settle)  # consumers assigned, the workload steady
        for i in range(args.pairs):
            order = (0, args.dashboards) if i % 2 == 0 else (args.dashboards, 0)
            for n in order:
                w = measure_window(broker, n, args.window)
                windows.append(w)
                print(f"  pair {i + 1}: {n} dashboards: broker {w.pct:.2f} % of a core, other processes "
                      f"{w.other_pct:.0f} %, {w.samples} sample events, {w.sse_bytes / 1024:.0f} KiB", flush=True)
    finally:
        stop.set()
        try:
            kind, payload = out.get(timeout=30)
        except Exception:  # noqa: BLE001
            kind, payload = "error", "no report"
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
    if kind != "done":
        raise RuntimeError(f"job workload: {payload}")
    return windows, payload


def live_rows(windows: list[Window], dashboards: int) -> tuple[list[list[str]], float, float]:
    rows = []
    deltas = []
    pairs = [windows[i:i + 2] for i in range(0, len(windows), 2)]
    for n, pair in enumerate(pairs, 1):
        off = next(w for w in pair if w.dashboards == 0)
        on = next(w for w in pair if w.dashboards != 0)
        deltas.append(on.pct - off.pct)
        rows.append([f"pair {n} ({'0 first' if pair[0].dashboards == 0 else f'{dashboards} first'})",
                     f"{off.pct:.2f}", f"{on.pct:.2f}", f"{on.pct - off.pct:+.2f}", f"{on.pct / off.pct:.2f}",
                     f"{on.share_updates / dashboards / on.window_s:.2f}",
                     f"{on.overview_updates / dashboards / on.window_s * 60:.1f}",
                     f"{on.sse_bytes / 1024 / on.window_s:.0f}", f"{max(off.other_pct, on.other_pct):.0f}"])
    off_mean = statistics.mean(w.pct for w in windows if w.dashboards == 0)
    on_mean = statistics.mean(w.pct for w in windows if w.dashboards != 0)
    delta = statistics.mean(deltas)
    rows.append(["mean", f"{off_mean:.2f}", f"{on_mean:.2f}", f"{delta:+.2f}", f"{on_mean / off_mean:.2f}", "", "", "",
                 ""])
    return rows, delta, on_mean / off_mean


LIVE_HEAD = ["windows", "0 dashboards: broker % of a core", "{n} dashboards: broker %", "difference (pp)", "ratio",
             "share-group updates/s per view", "overview updates/min per view", "KiB/s sent",
             "other processes % (max)"]


# ----------------------------------------------------------------------------- main

def parse_args(argv):
    ap = arg_parser(__doc__)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--share-groups", type=int, default=100)
    ap.add_argument("--held-groups", type=int, default=20, help="share groups whose members hold records in flight")
    ap.add_argument("--consumer-groups", type=int, default=5)
    ap.add_argument("--fetches", type=int, default=50, help="warm fetches of every page")
    ap.add_argument("--standalone", action="store_true", help="also time the pages of a standalone dashboard process")
    ap.add_argument("--only", default="render,live", help="render,live")
    ap.add_argument("--dashboards", type=int, default=5)
    ap.add_argument("--window", type=float, default=30.0, help="seconds of one CPU window")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--job-rate", type=int, default=200, help="records/s of the job workload")
    ap.add_argument("--settle", type=float, default=8.0, help="seconds between starting the workload and measuring")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--profile", metavar="FILE", default=None,
                    help="py-spy the broker during an extra window with dashboards open; shares per function to FILE")
    ap.add_argument("--quick", action="store_true", help="100 topics, 10 groups, short windows; prints only")
    ap.add_argument("--update-docs", action="store_true", help=f"rewrite the Dashboard section of {DOC_PATH.name}")
    ap.add_argument("--doc", default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.topics, args.share_groups, args.held_groups, args.consumer_groups = 100, 10, 4, 2
        args.fetches, args.window, args.pairs, args.settle = 10, 5.0, 1, 5.0
    if args.seed is None:
        args.seed = random.randrange(1 << 31)
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve-broker"]:
        return serve_broker([a for a in argv[1:] if a != "--override"])
    if argv[:1] == ["--serve-standalone"]:
        return serve_standalone(argv[1], argv[2])
    args = parse_args(argv)
    only = set(args.only.split(","))
    print(f"seed {args.seed} (rerun with --seed {args.seed})", flush=True)
    rng = random.Random(args.seed)
    started = time.monotonic()
    problems: list[str] = []
    run = BrokerRun(lambda d: DashBroker(d, []), "quafka-dash-bench-")
    ctx = mp.get_context("spawn")
    leave, out = ctx.Event(), ctx.Queue()
    holder = None
    standalone = None
    blocks: dict[str, str] = {}
    try:
        run.start()
        broker: DashBroker = run.broker
        print(f"dashboard on http://127.0.0.1:{broker.http_port}/ "
              f"({'quafka.dashboard.listener' if broker.builtin else 'this script --serve-broker'})", flush=True)
        pop = populate(broker.bootstrap, args, rng)
        holder = ctx.Process(target=holder_worker, args=(broker.bootstrap, pop.share_groups, pop.held, pop.dlq_groups,
                                                         args.seed, leave, out))
        holder.start()
        kind, payload = out.get(timeout=300)
        if kind != "ready":
            raise RuntimeError(f"holder: {payload}")
        print(f"{payload} members hold records in {len(pop.held)} groups", flush=True)
        paths = page_paths(pop)
        if "render" in only:
            times = measure_render(broker.http_port, paths, args.fetches, [broker.proc.pid])
            blocks["render"] = text_grid(RENDER_HEAD, render_rows(times))
            print_blocks(f"served by the broker, {args.fetches} warm fetches per page:\n" + blocks["render"])
            problems += [f"{t.page}: {worst_ms(t):.0f} ms >= {RENDER_GOAL_MS:.0f} ms" for t in times
                         if worst_ms(t) >= RENDER_GOAL_MS]
            problems += [f"{t.page}: HTTP {sorted(t.statuses)}" for t in times if t.statuses != {200}]
            blocks["render_md"] = markdown_grid(RENDER_HEAD, render_rows(times))
            if args.standalone:
                standalone, sport, how = start_standalone(broker.bootstrap, os.path.join(run.work_dir, "standalone.log"))
                stimes = measure_render(sport, paths, args.fetches, [broker.proc.pid, standalone.pid])
                blocks["standalone"] = text_grid(RENDER_HEAD, render_rows(stimes))
                blocks["standalone_md"] = markdown_grid(RENDER_HEAD, render_rows(stimes))
                blocks["standalone_how"] = how
                print_blocks(f"standalone ({how}):\n" + blocks["standalone"])
                standalone.send_signal(signal.SIGTERM)
                standalone.wait(15)
                standalone = None
        if "live" in only:
            print(f"\nlive views: {args.job_rate} jobs/s, {args.pairs} pairs of {args.window:.0f} s windows", flush=True)
            windows, (sent, consumed) = measure_live(broker, args)
            rows, delta, ratio = live_rows(windows, args.dashboards)
            head = [h.format(n=args.dashboards) for h in LIVE_HEAD]
            blocks["live"] = text_grid(head, rows)
            blocks["live_md"] = markdown_grid(head, rows)
            blocks["live_delta"] = f"{delta:+.2f} pp ({ratio:.2f}x)"
            print_blocks(blocks["live"], f"job workload: {sent:,} records produced, {consumed:,} delivered")
            if delta >= LIVE_GOAL_PP:
                problems.append(f"{args.dashboards} dashboards cost the broker {delta:.2f} pp >= {LIVE_GOAL_PP} pp")
        if args.profile:
            blocks["profile"] = profile_window(broker, args)
            print(f"broker profile with {args.dashboards} dashboards open (py-spy): {args.profile}")
    except KeyboardInterrupt:
        return interrupted()
    finally:
        leave.set()
        if holder is not None:
            holder.join(30)
            if holder.is_alive():
                holder.terminate()
        if standalone is not None:
            standalone.terminate()
        run.close()
    if args.update_docs or args.doc:
        write_doc(Path(args.doc) if args.doc else DOC_PATH, args, blocks)
    return finish(problems, time.monotonic() - started)


def profile_window(broker: DashBroker, args) -> str:
    """py-spy on the broker during one window with dashboards open (no workload: the dashboard's
    share only)."""
    from job_round import SpyProfile

    spy = SpyProfile(broker.proc.pid, args.profile + ".raw", rate_hz=200)
    clients = [SseClient(broker.http_port, p) for p in live_paths(args.dashboards)]
    for c in clients:
        c.start()
    for c in clients:
        c.first.wait(30)
    spy.start()
    time.sleep(args.window)
    spy.stop()
    for c in clients:
        c.close()
    report = spy.report(top=30)
    Path(args.profile).write_text(report + "\n")
    return report


def write_doc(path: Path, args, blocks: dict[str, str]) -> None:
    info = machine_info()
    parts = [BEGIN, "## Dashboard", "",
             "`benchmarks/dashboard.py` (issue 30, acceptance 4): a `quafka broker` child process serving the dashboard "
             f"(`quafka.dashboard.listener`), filled with {args.topics:,} topics, {args.share_groups} share groups "
             f"({args.held_groups} with members holding records in flight, a tenth with a dead-letter queue) and "
             f"{args.consumer_groups} consumer groups; seed {args.seed}. "
             "Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()) + ".", ""]
    if "render_md" in blocks:
        parts += ["### Page render time", "",
                  f"Each page over HTTP on a new connection (time to the last byte): the first fetch after the broker "
                  f"started (cold), then {args.fetches} fetches of each page in turn (warm), with the CPU the serving "
                  f"processes spent per fetch (the broker; standalone, the broker and the dashboard process). Warm "
                  f"fetches one after the other share the page's snapshot (at most one refresh old: 5 s here; "
                  f"`pages.Snapshots`), so for the two pages whose sample is costly at this scale the table also "
                  f"times {FRESH_FETCHES} fetches {SNAPSHOT_AGE_S + 0.5:.1f} s apart, each of which has to sample "
                  f"(fresh-sample ms). Goal: under 300 ms, judged on the warm p99 and every fresh-sample fetch (the "
                  f"last column). Wall times include waiting for a core when other processes keep the machine busy; "
                  f"the CPU column does not.", "",
                  blocks["render_md"], ""]
    if "standalone_md" in blocks:
        parts += [f"Standalone ({blocks['standalone_how']}), the same broker:", "", blocks["standalone_md"], ""]
    if "live_md" in blocks:
        parts += ["### Live views: broker CPU", "",
                  f"The broker's CPU (utime+stime, % of one core) under a job workload ({args.job_rate} records/s to one "
                  f"partition, two quafka ShareConsumers accepting each record) over {args.window:.0f} s windows, "
                  f"without and with {args.dashboards} dashboards open (each holds the live stream of the job group's "
                  f"share-group page, 1 s cadence, and of the overview, 5 s cadence; a sampler keeps its samples under "
                  f"1 % of a core (quafka.dashboard.live.SAMPLE_BUDGET), so a costly sample stretches its wait: the "
                  f"update columns show what each view received), in alternating pairs. "
                  f"Goal: under {LIVE_GOAL_PP:.0f} percentage points. Result: {blocks['live_delta']}.", "",
                  blocks["live_md"], ""]
    if "profile" in blocks:
        parts += ["Broker profile (py-spy) with the dashboards open:", "", "```text", blocks["profile"], "```", ""]
    parts.append(END)
    replace_marked_section("\n".join(parts) + "\n", path, BEGIN, END)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
