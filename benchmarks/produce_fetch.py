#!/usr/bin/env python3
"""Produce and fetch throughput of a quafka broker, measured with confluent-kafka on loopback.

The script starts `python -m quafka broker` in a child process (fresh temporary log dir, free
port), creates one topic per measurement with the confluent AdminClient, and measures:

- produce: N records of a fixed-size value from one Python process (acks=1; acks=all with
  enable.idempotence=true), and from two producer processes in parallel;
- fetch: one confluent Consumer (assign from the beginning, no commits) reading back everything
  the acks=1 phase wrote;
- broker CPU: utime+stime of the broker process from /proc/<pid>/stat around every phase, and
  the client's own CPU (getrusage of each client process, librdkafka threads included).

Clients run in spawned child processes so that each measurement starts from a fresh client and
its CPU can be read on its own. It prints a table and writes docs/benchmarks.md.

    .venv/bin/python benchmarks/produce_fetch.py            # full run + broker profile (~30 s on 2 cores)
    .venv/bin/python benchmarks/produce_fetch.py --quick    # smoke run (< 30 s), no doc written

See benchmarks/README.md for the options.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import io
import multiprocessing as mp
import os
import pstats
import queue as _queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from _bench import (
    CLK_TCK,
    REPO,
    BrokerRun,
    CpuPerRecord,
    _cpu_self,
    add_quick_profile_args,
    admin_client,
    arg_parser,
    create_topic,
    delete_topic,
    finish,
    free_port,
    interrupted,
    machine_busy_seconds,
    machine_info,
    markdown_grid,
    port_open,
    print_blocks,
    resolve_quick_profile_args,
    text_grid,
    worker_reports,
)

GOAL_RECORDS_PER_S = 250_000
KIB = 1024
MIB = 1024 * 1024

# Producer settings shared by every produce phase (acks / idempotence are set per phase).
PRODUCER_TUNING: dict[str, object] = {
    "linger.ms": 5,                          # wait up to 5 ms to fill a batch
    "batch.size": 1_000_000,                 # bytes per partition batch (librdkafka also caps a batch
                                             # at message.max.bytes, default 1,000,000)
    "batch.num.messages": 10_000,            # records per batch (librdkafka's default)
    "compression.type": "none",
    "delivery.report.only.error": True,      # successful deliveries do not call back into Python
}

CONSUMER_TUNING: dict[str, object] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
    "fetch.max.bytes": 50 * MIB,
    "max.partition.fetch.bytes": 10 * MIB,
    "receive.message.max.bytes": 50 * MIB + 64 * KIB,  # must exceed fetch.max.bytes + 512
    "fetch.wait.max.ms": 100,
    "queued.min.messages": 1_000_000,        # prefetch up to this many records per partition...
    "queued.max.messages.kbytes": 262_144,   # ...or 256 MiB
}

CONSUME_BATCH = 10_000


# ----------------------------------------------------------------------------- broker process


class Broker:
    """`python -m quafka broker` in a child process (with `overrides`, KEY=VALUE broker settings),
    optionally with cProfile ready to switch on.

    A profiled broker runs the `--profiled-broker` mode of `SCRIPT` (this script; a subclass names
    its own): the broker in-process with a cProfile profiler that SIGUSR1 enables and SIGUSR2
    disables, written out when the broker exits (after SIGTERM). That keeps start-up (imports,
    first requests) out of the profile.
    """

    SCRIPT = Path(__file__).resolve()

    def __init__(self, work_dir: str, profile_path: str | None = None, overrides: list[str] = ()) -> None:
        self.data_dir = os.path.join(work_dir, "data" if profile_path is None else "data-profiled")
        self.log_path = self.data_dir + ".log"
        self.profile_path = profile_path
        self.overrides = list(overrides)
        self.extra_args: list[str] = []  # more `quafka broker` options, e.g. ["--event-loop", "asyncio"]
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> "Broker":
        if self.profile_path:
            args = [sys.executable, str(self.SCRIPT), "--profiled-broker", self.profile_path]
        else:
            args = [sys.executable, "-m", "quafka", "broker"]
        args += ["--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                 "--override", f"log.dirs={self.data_dir}"]
        for item in self.overrides:
            args += ["--override", item]
        args += self.extra_args
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, cwd=str(REPO))
        deadline = time.monotonic() + timeout_s
        while not port_open(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker did not listen on {self.port} within {timeout_s}s:\n{self.log_tail()}")
            time.sleep(0.05)
        return self

    def profiler(self, on: bool) -> None:
        assert self.proc is not None and self.profile_path
        self.proc.send_signal(signal.SIGUSR1 if on else signal.SIGUSR2)
        time.sleep(0.3)  # the handler runs when the event loop wakes up (asyncio's wakeup fd)

    def cpu_seconds(self) -> float:
        """utime + stime of the broker process (all its threads), in seconds."""
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no broker log)"

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM, wait (a profiled broker writes its profile on the way out), SIGKILL if stuck."""
        if self.proc is None:
            return None
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None
        return self.proc.returncode


# ----------------------------------------------------------------------------- client workers
# Top-level functions: they run in spawned processes.


def produce_worker(bootstrap: str, topic: str, records: int, size: int, acks: str, idempotent: bool,
                   go, out: mp.Queue, deadline_s: float) -> None:
    try:
        from confluent_kafka import Producer

        errors = [0]
        first_error: list[str] = []

        def on_delivery(err, _msg) -> None:  # called for failed deliveries only
            errors[0] += 1
            if not first_error:
                first_error.append(str(err))

        conf = dict(PRODUCER_TUNING)
        conf.update({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": idempotent,
                     "on_delivery": on_delivery})
        producer = Producer(conf)
        # Warm up: connection, metadata and (idempotent) the producer id, outside the timed part.
        producer.list_topics(topic, timeout=10)
        producer.produce("bench-warmup", b"w")
        if producer.flush(10):
            raise RuntimeError("warm-up record was not delivered")
        value = os.urandom(size)
        out.put(("ready", os.getpid()))
        go.wait()

        produce = producer.produce
        poll = producer.poll
        cpu0 = _cpu_self()
        t0 = time.monotonic()
        for _ in range(records):
            try:
                produce(topic, value)
            except BufferError:
                # The client queue is full: serve delivery reports (this frees delivered records)
                # until there is room. poll() returns as soon as there is something to serve.
                while True:
                    poll(0.001)
                    try:
                        produce(topic, value)
                        break
                    except BufferError:
                        if time.monotonic() - t0 > deadline_s:
                            raise TimeoutError("producer queue stayed full past the deadline") from None
        remaining = producer.flush(max(1.0, deadline_s - (time.monotonic() - t0)))
        t1 = time.monotonic()
        cpu1 = _cpu_self()
        out.put(("done", dict(start=t0, end=t1, records=records - remaining - errors[0], cpu=cpu1 - cpu0,
                              undelivered=remaining, errors=errors[0], first_error=first_error[:1])))
    except BaseException as exc:  # report, never hang the parent
        out.put(("error", f"{type(exc).__name__}: {exc}"))


def consume_worker(bootstrap: str, topic: str, partitions: int, expected: int, size: int,
                   go, out: mp.Queue, deadline_s: float) -> None:
    try:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        conf = dict(CONSUMER_TUNING)
        conf.update({"bootstrap.servers": bootstrap, "group.id": f"bench-{os.getpid()}"})
        consumer = Consumer(conf)
        consumer.list_topics(topic, timeout=10)
        out.put(("ready", os.getpid()))
        go.wait()

        cpu0 = _cpu_self()
        t0 = time.monotonic()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        consume = consumer.consume
        got = 0
        bad_sizes = 0
        first_error = None
        while got < expected:
            if time.monotonic() - t0 > deadline_s:
                break
            msgs = consume(CONSUME_BATCH, 1.0)
            for m in msgs:
                if m.error() is not None:
                    first_error = first_error or str(m.error())
                    got -= 1
            got += len(msgs)
            if msgs:  # spot-check the payload size on the last record of each batch
                last = msgs[-1]
                if last.error() is None and len(last.value()) != size:
                    bad_sizes += 1
        t1 = time.monotonic()
        cpu1 = _cpu_self()
        consumer.close()
        out.put(("done", dict(start=t0, end=t1, records=got, cpu=cpu1 - cpu0,
                              errors=0 if first_error is None else 1, first_error=[first_error] if first_error else [],
                              bad_sizes=bad_sizes, undelivered=max(0, expected - got))))
    except BaseException as exc:
        out.put(("error", f"{type(exc).__name__}: {exc}"))


# ----------------------------------------------------------------------------- phases

@dataclass
class Result(CpuPerRecord):
    name: str
    records: int
    size: int
    seconds: float          # client-measured: first produce/consume call to flush()/last record
    broker_cpu_s: float     # broker utime+stime from go to the last client finishing
    window_s: float         # parent-measured window for the broker CPU %
    client_cpu_s: float     # sum over client processes
    other_cpu_s: float      # everything else busy on the machine in the window (other processes)
    clients: int
    problems: list[str] = field(default_factory=list)
    details: list[dict] = field(default_factory=list)  # per-client raw results (--verbose)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.rate * self.size / 1e6

    @property
    def client_cpu_pct(self) -> float:
        return self.client_cpu_s / self.seconds * 100 if self.seconds > 0 else float("nan")


def run_clients(broker: Broker, name: str, size: int, targets: list[tuple], deadline_s: float) -> Result:
    """Start one spawned process per (function, args) target, release them together, collect."""
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    out = ctx.Queue()
    procs = [ctx.Process(target=fn, args=(*args, go, out, deadline_s), daemon=True) for fn, args in targets]
    try:
        for p in procs:
            p.start()
        worker_reports(out, len(procs), time.monotonic() + 60, f"{name}: client failed while starting")
        cpu0 = broker.cpu_seconds()
        m0 = machine_busy_seconds()
        w0 = time.monotonic()
        go.set()
        results = worker_reports(out, len(procs), time.monotonic() + deadline_s + 30, f"{name}: client failed")
        w1 = time.monotonic()
        cpu1 = broker.cpu_seconds()
        m1 = machine_busy_seconds()
        for p in procs:
            p.join(30)
    except _queue.Empty:
        raise RuntimeError(f"{name}: clients did not report in time (broker log:\n{broker.log_tail()})") from None
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
    problems = []
    for r in results:
        if r["undelivered"] or r["errors"]:
            problems.append(f"{r['undelivered']} records missing, {r['errors']} errors {r['first_error']}")
        if r.get("bad_sizes"):
            problems.append(f"{r['bad_sizes']} records with an unexpected value size")
    return Result(
        name=name,
        records=sum(r["records"] for r in results),
        size=size,
        seconds=max(r["end"] for r in results) - min(r["start"] for r in results),
        broker_cpu_s=cpu1 - cpu0,
        window_s=w1 - w0,
        client_cpu_s=sum(r["cpu"] for r in results),
        other_cpu_s=max(0.0, (m1 - m0) - (cpu1 - cpu0) - sum(r["cpu"] for r in results)),
        clients=len(results),
        problems=problems,
        details=[dict(r, start=r["start"] - w0, end=r["end"] - w0) for r in results],
    )


def measure_produce(broker: Broker, admin, topic: str, name: str, records: int, size: int, acks: str,
                    idempotent: bool, producers: int, partitions: int, deadline_s: float) -> Result:
    create_topic(admin, topic, partitions)
    per = [records // producers + (1 if i < records % producers else 0) for i in range(producers)]
    targets = [(produce_worker, (broker.bootstrap, topic, n, size, acks, idempotent)) for n in per]
    return run_clients(broker, name, size, targets, deadline_s)


def measure_fetch(broker: Broker, topic: str, name: str, records: int, size: int, partitions: int,
                  deadline_s: float) -> Result:
    targets = [(consume_worker, (broker.bootstrap, topic, partitions, records, size))]
    return run_clients(broker, name, size, targets, deadline_s)


def warm_up(broker: Broker, deadline_s: float) -> None:
    """Produce and fetch a little (not reported): first connections, lazy imports, caches."""
    run_clients(broker, "warm-up", 100, [(produce_worker, (broker.bootstrap, "bench-warmup", 20_000, 100, "1",
                                                           False))], deadline_s)
    run_clients(broker, "warm-up", 100, [(consume_worker, (broker.bootstrap, "bench-warmup", 1, 20_000, 100))],
                deadline_s)


def pick_best(results: list[Result]) -> Result:
    """The run with the highest records/s.

    Interference (other processes, the hypervisor) only ever slows a run down, so on a shared
    machine the fastest of N runs is the best estimate of what client and broker can do.
    """
    return max(results, key=lambda r: r.rate)


@dataclass
class Row:
    result: Result          # the best run (by records/s)
    median_rate: float
    runs: int


def run_suite(broker: Broker, admin, plan: list[dict], repeat: int, partitions: int, deadline_s: float,
              label: str = "") -> list[Row]:
    """Run every phase of `plan` `repeat` times; fetch phases read their source topic again."""
    rows: list[Row] = []
    for spec in plan:
        runs: list[Result] = []
        for rep in range(repeat):
            if spec["kind"] == "produce":
                topic = f"{spec['topic']}-r{rep}"
                res = measure_produce(broker, admin, topic, spec["name"], spec["records"], spec["size"],
                                      spec["acks"], spec["idempotent"], spec["producers"], partitions,
                                      deadline_s)
                if not spec.get("keep"):
                    delete_topic(admin, topic)
                elif rep > 0:
                    delete_topic(admin, topic)  # fetch reads the first repetition's topic
            else:
                res = measure_fetch(broker, f"{spec['topic']}-r0", spec["name"], spec["records"], spec["size"],
                                    partitions, deadline_s)
                if rep == repeat - 1:
                    delete_topic(admin, f"{spec['topic']}-r0")
            runs.append(res)
            print(f"  {label}{res.name} [{rep + 1}/{repeat}]: {res.rate:,.0f} records/s, {res.mb_per_s:.1f} MB/s, "
                  f"broker {res.broker_us_per_record:.2f} us/record ({res.broker_cpu_pct:.0f}% of a core), "
                  f"client {res.client_cpu_pct:.0f}% of a core, other processes {res.other_cpu_pct:.0f}%"
                  + (f"  PROBLEMS: {res.problems}" if res.problems else ""), flush=True)
        rows.append(Row(pick_best(runs), statistics.median(r.rate for r in runs), len(runs)))
    return rows


def make_plan(n_small: int, n_large: int) -> list[dict]:
    small, large = 100, KIB
    return [
        dict(kind="produce", name="produce acks=1, 100 B", topic="bench-100b-acks1", records=n_small, size=small,
             acks="1", idempotent=False, producers=1, keep=True),
        dict(kind="produce", name="produce acks=all idempotent, 100 B", topic="bench-100b-acksall",
             records=n_small, size=small, acks="all", idempotent=True, producers=1),
        dict(kind="produce", name="produce acks=1, 2 producers, 100 B", topic="bench-100b-2p", records=n_small,
             size=small, acks="1", idempotent=False, producers=2),
        dict(kind="fetch", name="fetch 100 B", topic="bench-100b-acks1", records=n_small, size=small),
        dict(kind="produce", name="produce acks=1, 1 KiB", topic="bench-1k-acks1", records=n_large, size=large,
             acks="1", idempotent=False, producers=1, keep=True),
        dict(kind="produce", name="produce acks=all idempotent, 1 KiB", topic="bench-1k-acksall",
             records=n_large, size=large, acks="all", idempotent=True, producers=1),
        dict(kind="fetch", name="fetch 1 KiB", topic="bench-1k-acks1", records=n_large, size=large),
    ]


# ----------------------------------------------------------------------------- profile

IDLE_FUNCTIONS = ("<method 'poll' of 'select.epoll' objects>", "<method 'select' of 'select.epoll' objects>")
SYSCALL_WORDS = ("'send'", "'recv'", "'sendmsg'", "posix.write", "posix.pread", "posix.read", "posix.fsync",
                 "posix.fdatasync")


def _short(file: str) -> str:
    """A profiled function's file as the docs print it: the package path of installed and quafka
    code (`quafka/...`, `kio/...`, `asyncio/...`), a repository file relative to the repository
    (`benchmarks/spark.py`), never an absolute path of the machine that ran it."""
    for marker in ("/site-packages/", "/src/"):
        if marker in file:
            return file.split(marker, 1)[1]
    m = re.search(r"/lib/python3\.\d+/", file)
    if m:
        return file[m.end():]
    path = Path(file)
    if not path.is_absolute():
        return file
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


def _label(key) -> str:
    file, line, func = key
    return func if file == "~" else f"{_short(file)}:{line}({func})"


def _area(key) -> str:
    file, _line, func = key
    if file == "~":
        if any(w in func for w in SYSCALL_WORDS):
            return "system calls: socket send/recv, file write/pread"
        return "C built-ins: bytes/bytearray/struct/crc32c/…"
    short = _short(file)
    if short.startswith("quafka/"):
        return short.rsplit("/", 1)[0].replace("/", ".") + "." + short.rsplit("/", 1)[1][:-3]
    if short.startswith("kio/"):
        return "kio (request decoding)"
    if short.startswith("asyncio/"):
        return "asyncio (event loop, streams, transports)"
    return "other Python (stdlib, libraries)"


@dataclass
class ProfileSummary:
    total_s: float
    idle_s: float
    busy_s: float
    by_own: list[tuple[str, int, float]]      # (label, calls, own seconds), largest first
    by_cum: list[tuple[str, int, float]]      # quafka functions by cumulative seconds
    by_area: list[tuple[str, float]]          # (area, own seconds)

    def pct(self, seconds: float) -> float:
        return seconds / self.busy_s * 100 if self.busy_s > 0 else float("nan")

    def area_seconds(self) -> tuple[float, float, float, float]:
        """Own seconds in quafka's Python code, system calls, asyncio and C built-ins (the areas an
        analysis names first)."""
        areas = dict(self.by_area)
        return (sum(t for a, t in self.by_area if a.startswith("quafka.")),
                areas.get("system calls: socket send/recv, file write/pread", 0.0),
                areas.get("asyncio (event loop, streams, transports)", 0.0),
                areas.get("C built-ins: bytes/bytearray/struct/crc32c/…", 0.0))

    def markdown(self, top: int = 15) -> str:
        lines = [f"Profiled {self.total_s:.2f} s, of which {self.idle_s:.2f} s idle in `epoll.poll`; the "
                 f"percentages below are of the {self.busy_s:.2f} s the broker was busy.", "",
                 "Own time grouped by area:", "", "| area | own s | % of busy |", "|---|---:|---:|"]
        areas = self.by_area[:10]
        rest = sum(t for _a, t in self.by_area[10:])
        if rest:
            areas.append(("everything else", rest))
        lines += [f"| {a} | {t:.3f} | {self.pct(t):.1f} |" for a, t in areas]
        lines += ["", f"Top {top} functions by own time (`tottime`):", "",
                  "| function | calls | own s | % of busy |", "|---|---:|---:|---:|"]
        lines += [f"| `{l}` | {n:,} | {t:.3f} | {self.pct(t):.1f} |" for l, n, t in self.by_own[:top]]
        lines += ["", f"Top {top} quafka functions by cumulative time (a coroutine counts one call per "
                  "resumption and its time only while it runs):", "",
                  "| function | calls | cumulative s | % of busy |", "|---|---:|---:|---:|"]
        lines += [f"| `{l}` | {n:,} | {t:.3f} | {self.pct(t):.1f} |" for l, n, t in self.by_cum[:top]]
        return "\n".join(lines)


def summarise_profile(path: str) -> ProfileSummary:
    """Where the broker's busy (non-idle) profiled time went."""
    raw = pstats.Stats(path, stream=io.StringIO()).stats  # {(file, line, func): (cc, nc, tt, ct, callers)}
    total = sum(v[2] for v in raw.values())
    idle = sum(v[2] for k, v in raw.items() if k[2] in IDLE_FUNCTIONS)
    busy = total - idle
    own = [(_label(k), v[1], v[2]) for k, v in raw.items() if k[2] not in IDLE_FUNCTIONS]
    own.sort(key=lambda x: x[2], reverse=True)
    cum = [(_label(k), v[1], v[3]) for k, v in raw.items() if "/quafka/" in k[0]]
    cum.sort(key=lambda x: x[2], reverse=True)
    areas: dict[str, float] = {}
    for k, v in raw.items():
        if k[2] not in IDLE_FUNCTIONS:
            areas[_area(k)] = areas.get(_area(k), 0.0) + v[2]
    return ProfileSummary(total, idle, busy, own, cum, sorted(areas.items(), key=lambda x: x[1], reverse=True))


def profiled_broker(out_path: str, broker_args: list[str], clock=None) -> int:
    """`--profiled-broker OUT ARGS...`: run `quafka broker ARGS...`; SIGUSR1/SIGUSR2 switch cProfile
    (with `clock` as its timer when given; cProfile's default is wall time)."""
    import cProfile

    from quafka.cli.main import main as quafka_main

    prof = cProfile.Profile(clock) if clock else cProfile.Profile()
    signal.signal(signal.SIGUSR1, lambda *_: prof.enable())
    signal.signal(signal.SIGUSR2, lambda *_: prof.disable())
    try:
        return quafka_main(["broker", *broker_args])
    finally:
        prof.disable()
        prof.dump_stats(out_path)


def run_profile(work_dir: str, records: int, partitions: int, deadline_s: float, keep: str | None = None
                ) -> tuple[ProfileSummary, list[Row]] | None:
    """Produce (acks=1 and acks=all) and fetch 100 B records against a profiled broker."""
    prof_path = os.path.join(work_dir, "broker.prof")
    broker = Broker(work_dir, profile_path=prof_path)
    admin = None
    try:
        broker.start()
        admin = admin_client(broker.bootstrap)
        create_topic(admin, "bench-warmup", 1)
        warm_up(broker, deadline_s)
        plan = [p for p in make_plan(records, 0) if p["size"] == 100 and p.get("producers", 1) == 1]
        broker.profiler(True)
        rows = run_suite(broker, admin, plan, 1, partitions, deadline_s, label="[profiled] ")
        broker.profiler(False)
    finally:
        admin = None
        code = broker.stop(120)
    summary = read_profile(prof_path, code, keep)
    return None if summary is None else (summary, rows)


def profile_or_none(run_profile, *args):
    """`run_profile(*args)` after saying so; None when it fails (said on stderr): the measurements
    stand without the profile."""
    print("profiling the broker (cProfile) ...", flush=True)
    try:
        return run_profile(*args)
    except (RuntimeError, OSError) as exc:
        print(f"  profiling failed, the report goes without it: {exc}", file=sys.stderr)
        return None


def read_profile(prof_path: str, exit_code: int | None, keep: str | None) -> ProfileSummary | None:
    """The summary of the profile a profiled broker wrote on its way out (None, said on stderr,
    when it wrote none), copied to `keep` when given."""
    if not os.path.exists(prof_path):
        print(f"  profile not written (broker exit code {exit_code})", file=sys.stderr)
        return None
    if keep:
        shutil.copyfile(prof_path, keep)
        print(f"  profile saved to {keep} (python -m pstats {keep})")
    return summarise_profile(prof_path)


# ----------------------------------------------------------------------------- report


COLUMNS = ["measurement", "records", "records/s", "MB/s", "broker CPU µs/record", "broker CPU %",
           "client CPU µs/record", "client CPU %", "other processes CPU %"]


def table_rows(rows: list[Row]) -> list[list[str]]:
    out = []
    for row in rows:
        r = row.result
        out.append([
            r.name, f"{r.records:,}", f"{r.rate:,.0f}", f"{r.mb_per_s:,.1f}", f"{r.broker_us_per_record:.2f}",
            f"{r.broker_cpu_pct:.0f}", f"{r.client_us_per_record:.2f}", f"{r.client_cpu_pct:.0f}",
            f"{r.other_cpu_pct:.0f}",
        ])
    return out


def markdown_table(rows: list[Row]) -> str:
    return markdown_grid(COLUMNS, table_rows(rows))


def text_table(rows: list[Row]) -> str:
    return text_grid(COLUMNS, table_rows(rows))


def analysis(rows: list[Row], profile: tuple[ProfileSummary, list[Row]] | None = None) -> str:
    by = {row.result.name: row.result for row in rows}
    one = by.get("produce acks=1, 100 B")
    idem = by.get("produce acks=all idempotent, 100 B")
    two = by.get("produce acks=1, 2 producers, 100 B")
    fetch = by.get("fetch 100 B")
    one_k = by.get("produce acks=1, 1 KiB")
    if not (one and idem and two and fetch and one_k):
        return "(incomplete run: no analysis)"
    cores = len(os.sched_getaffinity(0))
    out = []

    single = min(one.rate, idem.rate)
    verdict = (f"met by a single Python producer process ({single / GOAL_RECORDS_PER_S:.1f}× the goal in the "
               f"slower of the two single-producer runs)" if single >= GOAL_RECORDS_PER_S else
               f"**not** met by a single producer (the slower single-producer run reached "
               f"{single / GOAL_RECORDS_PER_S:.0%} of it)")
    out.append(
        f"**Goal: produce ≥ {GOAL_RECORDS_PER_S:,} records/s of 100 bytes.** One producer process reached "
        f"{one.rate:,.0f} records/s with acks=1 and {idem.rate:,.0f} records/s with acks=all + idempotence; two "
        f"producer processes together reached {two.rate:,.0f} records/s. The goal is {verdict}."
    )

    ratio = one.client_us_per_record / one.broker_us_per_record if one.broker_us_per_record > 0 else float("inf")
    ceiling = 1e6 / one.broker_us_per_record if one.broker_us_per_record > 0 else float("inf")
    out.append(
        f"**Client or broker?** For 100 B records with acks=1 the broker spent {one.broker_us_per_record:.2f} µs of "
        f"CPU per record ({one.broker_cpu_pct:.0f}% of one core at that rate); the producer process spent "
        f"{one.client_us_per_record:.2f} µs per record ({one.client_cpu_pct:.0f}% of a core: the Python loop "
        f"calling `produce()`, plus librdkafka's threads), {ratio:.0f}× as much. "
        + ("The client is the bottleneck. " if ratio > 1 else "The broker is the bottleneck. ")
        + f"At {one.broker_us_per_record:.2f} µs per record one core of broker CPU would absorb about "
        f"{ceiling / 1e6:.1f} million records/s of 100 B — CPU alone, not counting what the clients need."
    )

    busy = two.client_cpu_pct + two.broker_cpu_pct + two.other_cpu_pct
    out.append(
        f"**Two producers** together reached {two.rate:,.0f} records/s ({two.rate / one.rate:.2f}× one producer) "
        f"with the broker at {two.broker_us_per_record:.2f} µs per record ({two.broker_cpu_pct:.0f}% of a core). "
        f"The two clients used {two.client_cpu_pct:.0f}% of a core, the broker {two.broker_cpu_pct:.0f}% and other "
        f"processes {two.other_cpu_pct:.0f}%: "
        + (f"the {cores} cores were saturated, so this rate is bounded by the machine (mostly by the clients), "
           f"not by the broker." if busy > 85 * cores else
           f"the {cores} cores were not saturated.")
    )

    out.append(
        f"**Fetch.** The consumer read {fetch.rate:,.0f} records/s of 100 B ({fetch.mb_per_s:.0f} MB/s). The broker "
        f"spent {fetch.broker_us_per_record:.2f} µs per record ({fetch.broker_cpu_pct:.0f}% of a core): it reads "
        f"whole stored batches with `pread` and sends them as they are. The consumer spent "
        f"{fetch.client_us_per_record:.2f} µs per record ({fetch.client_cpu_pct:.0f}% of a core) turning records "
        f"into Python `Message` objects"
        + (", so fetch is client-bound too." if fetch.client_us_per_record > fetch.broker_us_per_record else ".")
    )

    ns_small = one.broker_us_per_record * 1000 / one.size
    ns_large = one_k.broker_us_per_record * 1000 / one_k.size
    out.append(
        f"**Broker cost follows bytes, not records.** Per byte of record value the broker spent {ns_small:.1f} ns "
        f"producing 100 B records and {ns_large:.1f} ns producing 1 KiB records "
        f"({one_k.broker_us_per_record:.2f} µs per 1 KiB record, {one_k.mb_per_s:.0f} MB/s). The produce path keeps "
        f"record batches opaque: per batch it checks the 61-byte header and the CRC32C (one C call over the "
        f"batch), stamps the base offset and writes the bytes with one `os.write`; nothing runs per record, so "
        f"what remains is copying bytes (socket → asyncio buffer → file, file → socket) and system calls."
    )

    diff = idem.broker_us_per_record - one.broker_us_per_record
    tick_us = 1e6 / CLK_TCK / min(one.records, idem.records)  # resolution of /proc/<pid>/stat
    same = abs(diff) <= max(0.05, 0.2 * one.broker_us_per_record, 2 * tick_us)
    out.append(
        f"**acks=all + idempotence** cost the broker {idem.broker_us_per_record:.2f} µs per record against "
        f"{one.broker_us_per_record:.2f} µs for acks=1"
        + (" — the same within measurement noise. " if same else ". ")
        + "On one node both acks levels are answered once the batch is in the segment file, and the "
        "idempotence check is one sequence comparison per batch."
    )

    noisy = [r for r in by.values() if r.other_cpu_pct > 20]
    if noisy:
        out.append(
            "**Other load.** The machine was shared with other work during the run: other processes used more "
            "than 20% of a core during " + ", ".join(f"*{r.name}* ({r.other_cpu_pct:.0f}%)" for r in noisy)
            + ". Those rows had less CPU for the clients and read low; broker CPU per record is the steadier "
            "number."
        )

    if profile is not None:
        prof, prow = profile
        quafka_s, sys_s, asyncio_s, builtin_s = prof.area_seconds()
        cum = {label.rsplit("(", 1)[-1].rstrip(")"): (n, t) for label, n, t in reversed(prof.by_cum)}
        produce_calls = cum.get("handle_produce", (0, 0.0))[0]
        produced = sum(r.result.records for r in prow if r.result.name.startswith("produce"))
        tops = ", ".join(f"`{l}` {prof.pct(t):.0f}%" for l, _n, t in prof.by_cum[:12]
                         if any(f in l for f in ("(handle_produce)", "(append)", "(handle_fetch)", "(read)",
                                                 "(decode_request)", "(validate_batches)")))
        out.append(
            f"**Broker profile** (details below). Of the broker's busy time, {prof.pct(sys_s):.0f}% was in system "
            f"calls (socket send/recv, file write/pread), {prof.pct(builtin_s):.0f}% in C built-ins (mostly "
            f"buffer copies), {prof.pct(asyncio_s):.0f}% in asyncio's event loop and streams, and "
            f"{prof.pct(quafka_s):.0f}% in quafka's own Python code. By cumulative time: {tops}. "
            + (f"The profiled run moved {produced:,} produced records in {produce_calls:,} Produce requests "
               f"(~{produced / produce_calls:,.0f} records per request), so per-request Python overhead is "
               f"spread over thousands of records." if produce_calls else "")
        )
    return "\n\n".join(out)


def write_doc(rows: list[Row], info: dict[str, str], args, elapsed_s: float,
              profile: tuple[ProfileSummary, list[Row]] | None, path: Path) -> None:
    command = " ".join([".venv/bin/python", "benchmarks/produce_fetch.py", *(sys.argv[1:])])
    tuning = "\n".join(f"  - `{k}={v}`" for k, v in PRODUCER_TUNING.items())
    ctuning = "\n".join(f"  - `{k}={v}`" for k, v in CONSUMER_TUNING.items())
    info_lines = "\n".join(f"| {k} | {v} |" for k, v in info.items())
    repeat_note = ("Each measurement ran once." if args.repeat == 1 else
                   f"Each measurement ran {args.repeat} times; the table shows the fastest run of each (other "
                   f"load only ever slows a run down). Medians, records/s: "
                   + "; ".join(f"{r.result.name}: {r.median_rate:,.0f}" for r in rows) + ".")
    profile_section = ""
    if profile is not None:
        summary, prow = profile
        text = summary.markdown()
        rates = ", ".join(f"{r.result.name}: {r.result.rate:,.0f} records/s" for r in prow)
        profile_section = f"""
## Broker profile

A second broker ran with cProfile (`benchmarks/produce_fetch.py --profiled-broker …`: the broker
in-process, the profiler switched on by SIGUSR1 after the warm-up and off by SIGUSR2 before
shutdown, so start-up is not in it) while the same client code produced {args.profile_records:,}
100-byte records with acks=1, the same with acks=all + idempotence, and fetched the first topic
back. cProfile adds a cost to every Python call in the broker (the profiled runs reached {rates}),
so read the shares, not the absolute times.

{text}
"""
    doc = f"""# Benchmarks: produce and fetch throughput

Generated on {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')} by `{command}` (the run took {elapsed_s:.0f} s).
Reproduce from the repository root with:

<!-- snippet: skip: a measurement that takes minutes and rewrites this file; run by hand to refresh the tables -->
```sh
.venv/bin/python benchmarks/produce_fetch.py              # full run (+ broker profile), rewrites this file
.venv/bin/python benchmarks/produce_fetch.py --repeat 3   # the same, best of 3 runs per row
.venv/bin/python benchmarks/produce_fetch.py --quick      # smoke run (< 30 s), prints only
```

## What is measured

- The broker is `python -m quafka broker` in a child process with its default settings (so, as
  with Kafka, an acknowledged batch is in the segment file's page cache, not yet fsynced), a fresh
  temporary `log.dirs` and a free loopback port. Every produce measurement writes its own topic
  ({args.partitions} partition{'s' if args.partitions != 1 else ''}, created with the confluent `AdminClient`).
  Every client runs in its own spawned process on the same machine, over loopback. A short
  produce + fetch warm-up (20,000 records, not reported) runs first.
- **produce**: a confluent-kafka `Producer` calls `produce(topic, value)` in a tight Python loop
  (no key, one fixed random value of 100 B or 1 KiB). When the client queue is full (`BufferError`)
  it calls `poll(0.001)` and retries: that serves delivery reports (freeing delivered records) and
  returns as soon as there are any, without the busy spin of `poll(0)`, which would take a core away
  from the broker on a 2-core machine. The time runs from the first `produce()` to `flush()`
  returning, i.e. until the broker acknowledged every record. acks=1 runs with idempotence off;
  acks=all runs with `enable.idempotence=true`, as Kafka users do. Producer settings (everything else
  is librdkafka's default):
{tuning}
- **2 producers**: the Python thread calling `produce()` is the usual limit of one client, so two
  producer processes write half the records each to one topic at the same time; records/s is the
  total over the time from the first one starting to the last one finishing.
- **fetch**: one confluent-kafka `Consumer` assigns the acks=1 topic from the beginning (no group,
  no commits) and calls `consume(num_messages={CONSUME_BATCH}, timeout=1.0)`, checking `error()` on
  every message, until it has every record. The records were written moments before, so the broker
  reads them from the page cache. Consumer settings:
{ctuning}
- **broker CPU**: utime+stime of the broker process from `/proc/<pid>/stat` just before the clients
  start and just after the last one reports; **µs/record** divides it by the records moved, **%**
  divides it by the wall time (100% = one core busy).
- **client CPU**: the client processes' own `getrusage()` (librdkafka's threads included) over the
  timed part, per record and as % of one core (summed over both processes for 2 producers).
- **other processes CPU**: busy time of the whole machine (`/proc/stat`) minus broker and clients,
  as % of one core. Anything well above 0 means something else competed for the cores.
- MB/s counts record values only, 1 MB = 10^6 bytes. {repeat_note}

## Machine

| | |
|---|---|
{info_lines}

## Results

{markdown_table(rows)}

## Analysis

{analysis(rows, profile)}
{profile_section}"""
    # Keep the sections that benchmarks/share.py and benchmarks/share_state.py maintain in the same file.
    old = path.read_text() if path.exists() else ""
    for kept in re.finditer(r"<!-- ([\w-]+):begin -->.*?<!-- \1:end -->\n?", old, re.S):
        doc = doc.rstrip("\n") + "\n\n" + kept.group(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc)


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--profiled-broker"]:  # internal: the child process of a profiled run
        return profiled_broker(argv[1], argv[2:])
    ap = arg_parser(__doc__)
    ap.add_argument("--records", type=int, default=None,
                    help="records per 100 B measurement (default 1,000,000; --quick: 100,000)")
    ap.add_argument("--records-1k", type=int, default=None,
                    help="records per 1 KiB measurement (default 300,000; --quick: 30,000)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each measurement N times, report the fastest run (and the median)")
    ap.add_argument("--partitions", type=int, default=1, help="partitions per topic (default 1)")
    add_quick_profile_args(ap, "run a broker under cProfile and add its top functions to the doc", "phase",
                           "where to write the markdown report")
    ap.add_argument("--deadline", type=float, default=90.0, help="seconds one phase may take before it fails")
    args = ap.parse_args(argv)
    n_small = args.records or (100_000 if args.quick else 1_000_000)
    n_large = args.records_1k or (30_000 if args.quick else 300_000)
    doc_path = resolve_quick_profile_args(args, n_small)
    if args.repeat < 1 or n_small < 1 or n_large < 1 or args.partitions < 1:
        ap.error("--repeat, --records, --records-1k and --partitions must be at least 1")

    try:
        for module in ("confluent_kafka", "quafka"):
            importlib.import_module(module)
    except ImportError as exc:
        print(f"needs confluent-kafka and quafka installed (run with .venv/bin/python): {exc}", file=sys.stderr)
        return 2

    t_start = time.monotonic()
    run = BrokerRun(Broker, "quafka-bench-")
    broker = run.broker
    profile = None
    try:
        run.start()  # from here on SIGTERM (e.g. from a CI timeout) unwinds like Ctrl-C, so the broker goes away
        create_topic(run.admin, "bench-warmup", 1)
        warm_up(broker, args.deadline)
        rows = run_suite(broker, run.admin, make_plan(n_small, n_large), args.repeat, args.partitions, args.deadline)
        run.stop()  # the admin client first: no "connection refused" noise
        if args.profile:
            profile = profile_or_none(run_profile, run.work_dir, args.profile_records, args.partitions,
                                      args.deadline, args.profile_out)
    except KeyboardInterrupt:
        return interrupted()
    finally:
        run.close()

    elapsed = time.monotonic() - t_start
    problems = [f"{row.result.name}: {p}" for row in rows for p in row.result.problems]
    print_blocks(text_table(rows), None if profile is None else profile[0].markdown(), analysis(rows, profile))
    if doc_path is not None:
        write_doc(rows, machine_info(), args, elapsed, profile, doc_path)
        print(f"\nwrote {doc_path}")
    return finish(problems, elapsed)


if __name__ == "__main__":
    sys.exit(main())
