#!/usr/bin/env python3
"""One job, one request: the broker's CPU per one-at-a-time job against the floor of a bare asyncio
server, paced job-queue latency beside Redis Streams, and one consumer at max.poll.records=1.

Issue 27's measurements, side by side in one run (machines differ about 2x; the ratios are what
holds from one to another):

1. **Echo floor**: the server CPU per request/response of a minimal asyncio server (a 100-byte
   request, a 16-byte answer, one at a time over loopback; `benchmarks/echo_floor.py`), on
   asyncio's standard loop and on uvloop.
2. **Broker CPU per job**: a `python -m quafka broker` child (on the loop `--loop` names); a
   producer sends one record at a time (`linger.ms=0`) at `--round-rate` jobs/s; 4 confluent-kafka
   ShareConsumers at `max.poll.records=1` acknowledge each record on their next ShareFetch. The
   broker's utime+stime from /proc over the run, divided by the jobs: one one-record Produce, one
   one-record ShareFetch and the acknowledgement riding on the next per job. Its ratio to the echo
   floor on the same loop is the issue's goal 1 (at most 3x).
3. **Paced rows**: the same at 2,000 and 8,000 jobs/s, but each job acknowledged with
   `commit_async()` (a ShareAcknowledge per job): end-to-end latency from `produce()` to the
   consumer's `poll()`, p50/p99/p99.9, and whether the group kept up. **Redis Streams** beside
   them: a producer XADDs one entry at a time at the same rate, 4 consumers XREADGROUP COUNT 1
   BLOCK 100 and XACK each entry (redis-py with hiredis).
4. **One consumer at `max.poll.records=1`**: a backlog of one-record batches drained by one
   ShareConsumer, confluent-kafka's and quafka's own, records/s and broker CPU per record.

`--profile FILE` also samples the broker with py-spy during the job round and writes the inclusive
and self shares per function to FILE.
Needs `redis-server` on PATH for the Redis rows (`--no-redis` leaves them out). See
benchmarks/README.md.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as _queue
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (  # noqa: E402
    arg_parser,
    finish,
    free_port,
    interrupt_on_sigterm,
    interrupted,
    machine_info,
    markdown_grid,
    print_blocks,
    text_grid,
)

import echo_floor  # noqa: E402
from share import ShareBroker  # noqa: E402
from share_jobs import Metrics, measure_paced, measure_throughput, percentile  # noqa: E402

VALUE_SIZE = 100


# ----------------------------------------------------------------------------- Redis Streams, paced

def redis_paced_producer(port: int, stream: bytes, rate: int, records: int, go, out) -> None:
    """XADD `records` stamped entries at `rate` per second, one command each."""
    try:
        import redis

        r = redis.Redis(host="127.0.0.1", port=port)
        r.ping()
        pad = b"x" * (VALUE_SIZE - 8)
        out.put(("ready", time.monotonic()))
        go.wait()
        t0 = time.monotonic()
        for i in range(records):
            due = t0 + i / rate
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            r.xadd(stream, {b"v": time.time_ns().to_bytes(8, "big") + pad})
        out.put(("produced", time.monotonic() - t0))
    except BaseException as exc:
        out.put(("error", f"{type(exc).__name__}: {exc}"))


def redis_job_consumer(port: int, stream: bytes, group: bytes, name: bytes, expected: int, counter, go, out,
                       deadline_s: float) -> None:
    """XREADGROUP COUNT 1 BLOCK 100, XACK each entry, until the group has `expected` entries."""
    try:
        import redis

        r = redis.Redis(host="127.0.0.1", port=port)
        r.ping()
        out.put(("ready", time.monotonic()))
        go.wait()
        t0 = time.monotonic()
        lock = counter.get_lock()
        got = 0
        latencies: list[tuple[int, int]] = []
        streams = {stream: b">"}
        while time.monotonic() - t0 < deadline_s:
            resp = r.xreadgroup(group, name, streams, count=1, block=100)
            if resp:
                now_ns = time.time_ns()
                for eid, fields in resp[0][1]:
                    stamp = int.from_bytes(fields[b"v"][:8], "big")
                    latencies.append((stamp // 1000, (now_ns - stamp) // 1000))
                    r.xack(stream, group, eid)
                    got += 1
                with lock:
                    counter.value += len(resp[0][1])
            if counter.value >= expected:
                break
        out.put(("done", dict(start=t0, end=time.monotonic(), records=got, latencies_us=latencies)))
    except BaseException as exc:
        out.put(("error", f"{type(exc).__name__}: {exc}"))


@dataclass
class Paced:
    system: str
    rate: int
    records: int
    wall_s: float
    latencies_us: list[int] = field(default_factory=list)
    backlog: int = 0
    server_cpu_s: float = 0.0

    @property
    def throughput(self) -> float:
        return self.records / self.wall_s if self.wall_s else 0.0

    def kept_up(self) -> bool:
        return self.backlog == 0 and self.throughput >= 0.95 * self.rate


def redis_paced(rate: int, seconds: float, consumers: int, deadline_s: float) -> Paced:
    from redis_streams import RedisServer

    import redis

    work = tempfile.mkdtemp(prefix="quafka-job-round-redis-")
    server = RedisServer(work).start()
    pin(server.proc.pid)
    procs = []
    try:
        r = redis.Redis(host="127.0.0.1", port=server.port)
        stream, group = b"jobs", b"workers"
        r.xgroup_create(stream, group, id="0", mkstream=True)
        records = int(rate * seconds)
        ctx = mp.get_context("spawn")
        go, out, counter = ctx.Event(), ctx.Queue(), ctx.Value("q", 0)
        procs = [ctx.Process(target=redis_job_consumer, daemon=True,
                             args=(server.port, stream, group, b"c%d" % i, records, counter, go, out, deadline_s))
                 for i in range(consumers)]
        procs.append(ctx.Process(target=redis_paced_producer, daemon=True,
                                 args=(server.port, stream, rate, records, go, out)))
        for p in procs:
            p.start()
        for _ in procs:
            kind, payload = out.get(timeout=60)
            if kind == "error":
                raise RuntimeError(payload)
        cpu0 = server.cpu_seconds()
        go.set()
        reports = []
        give_up = time.monotonic() + deadline_s + 30
        cpu1 = None
        while len(reports) < consumers:
            if cpu1 is None and counter.value >= records:
                cpu1 = server.cpu_seconds()
            try:
                kind, payload = out.get(timeout=0.01)
            except _queue.Empty:
                if time.monotonic() > give_up:
                    raise RuntimeError("the Redis consumers did not finish") from None
                continue
            if kind == "error":
                raise RuntimeError(payload)
            if kind == "done":
                reports.append(payload)
        cpu1 = cpu1 if cpu1 is not None else server.cpu_seconds()
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join(10)
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    stamped = [x for rep in reports for x in rep["latencies_us"]]
    last_sent = max((s for s, _ in stamped), default=0)
    backlog = sum(1 for s, lat in stamped if s <= last_sent - 5000 and s + lat > last_sent)
    got = sum(rep["records"] for rep in reports)
    wall = max(rep["end"] for rep in reports) - min(rep["start"] for rep in reports)
    return Paced("Redis Streams", rate, got, wall, sorted(lat for _, lat in stamped),
                 backlog + max(0, records - got), cpu1 - cpu0)


# ----------------------------------------------------------------------------- quafka

class LoopBroker(ShareBroker):
    """The benchmark's broker on a chosen event loop (`quafka broker --event-loop`), optionally run
    from another checkout's `src` (`--broker-src`: before/after on the same machine; a checkout from
    before `--event-loop` existed runs on asyncio's loop, and gets no such option)."""

    def __init__(self, work_dir: str, loop: str, broker_src: str | None = None) -> None:
        self.metrics_port = free_port()
        super().__init__(work_dir, None, overrides=[f"metrics.listener=http://127.0.0.1:{self.metrics_port}"])
        self.broker_src = broker_src
        if broker_src is None or loop != "asyncio":
            self.extra_args = ["--event-loop", loop]

    def cpu_split(self) -> tuple[float, float]:
        """(user, system) CPU seconds of the broker so far."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tck = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tck, int(fields[12]) / tck

    def start(self, timeout_s: float = 30.0):
        if self.broker_src is None:
            return super().start(timeout_s)
        saved = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = self.broker_src
        try:
            return super().start(timeout_s)
        finally:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved


def quafka_paced(broker, metrics, rate: int, seconds: float, consumers: int, deadline_s: float,
                 commit: bool | str, hooks=None) -> Paced:
    run = measure_paced(broker, metrics, 1, rate, seconds, deadline_s, commit_each_poll=commit, consumers=consumers,
                        hooks=hooks)
    return Paced("quafka", rate, run.records, run.wall_s, run.latencies_us, run.backlog, run.broker_cpu_s)


# ----------------------------------------------------------------------------- pinning

SERVER_CPU = 0


def pin(pid: int) -> None:
    """Put a server process on CPU 0 (when `pin.enabled`; the clients are on the others)."""
    if pin.enabled:
        os.sched_setaffinity(pid, {SERVER_CPU})


pin.enabled = False
pin.others = lambda: set(range(os.cpu_count() or 1)) - {SERVER_CPU} or {SERVER_CPU}


# ----------------------------------------------------------------------------- profile

class SpyProfile:
    """py-spy sampling the broker (no instrumentation: the functions' costs keep their proportions,
    where cProfile's per-call overhead would swamp a path of many small calls). `start()` and
    `stop()` bracket the job round; `report()` gives the inclusive and self shares of the samples."""

    def __init__(self, pid: int, out_path: str, rate_hz: int = 500) -> None:
        self.pid, self.out_path, self.rate_hz = pid, out_path, rate_hz
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
        self.proc = subprocess.Popen([spy, "record", "--pid", str(self.pid), "--rate", str(self.rate_hz),
                                      "--format", "raw", "--nonblocking", "--output", self.out_path],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(0.5)  # attached
        if self.proc.poll() is not None:
            raise RuntimeError(f"py-spy failed: {self.proc.stderr.read().decode(errors='replace')}")

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(30)

    def report(self, top: int = 45) -> str:
        """Inclusive and self shares (of all samples, idle included) per function."""
        inclusive: dict[str, int] = {}
        own: dict[str, int] = {}
        total = 0
        with open(self.out_path) as f:
            for line in f:
                stack, _, count = line.rstrip("\n").rpartition(" ")
                n = int(count)
                total += n
                frames = [_short(x) for x in stack.split(";")]
                for fr in set(frames):
                    inclusive[fr] = inclusive.get(fr, 0) + n
                if frames:
                    own[frames[-1]] = own.get(frames[-1], 0) + n
        lines = [f"{total:,} samples at {self.rate_hz} Hz (the broker's threads, idle included)", "",
                 "inclusive %  self %  function"]
        for fr, n in sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]:
            lines.append(f"{100 * n / total:10.1f}  {100 * own.get(fr, 0) / total:6.1f}  {fr}")
        lines += ["", "self %  function"]
        for fr, n in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
            lines.append(f"{100 * n / total:6.1f}  {fr}")
        return "\n".join(lines)


def _short(frame: str) -> str:
    """`func (path/to/module.py:123)` as `module.py:func`."""
    name, _, where = frame.partition(" (")
    path = where.split(":")[0]
    return f"{os.path.basename(path)}:{name}" if path else name


# ----------------------------------------------------------------------------- report

def fmt_ms(us: float) -> str:
    return f"{us / 1000:.2f}"


def paced_rows(rows: list[Paced]) -> list[list[str]]:
    out = []
    for p in rows:
        lat = p.latencies_us
        out.append([p.system, f"{p.rate:,}", f"{p.throughput:,.0f}", fmt_ms(percentile(lat, 0.5)),
                    fmt_ms(percentile(lat, 0.99)), fmt_ms(percentile(lat, 0.999)), f"{p.backlog:,}",
                    "yes" if p.kept_up() else "NO",
                    f"{p.server_cpu_s * 1e6 / p.records:.0f}" if p.records else "-"])
    return out


PACED_HEAD = ["system", "jobs/s asked", "jobs/s done", "p50 ms", "p99 ms", "p99.9 ms", "backlog", "kept up",
              "server CPU µs/job"]


def main(argv: list[str] | None = None) -> int:
    ap = arg_parser(__doc__)
    ap.add_argument("--loop", choices=["asyncio", "uvloop"], default=None,
                    help="the broker's event loop (default: uvloop when installed, as `quafka broker` picks)")
    ap.add_argument("--round-rate", type=int, default=2000, help="jobs/s of the CPU-per-job round (default 2,000)")
    ap.add_argument("--rates", default="2000,8000", help="jobs/s of the paced rows (default 2000,8000)")
    ap.add_argument("--seconds", type=float, default=5.0, help="how long each paced producer sends (default 5)")
    ap.add_argument("--consumers", type=int, default=4, help="consumers of the paced rows (default 4)")
    ap.add_argument("--one-records", type=int, default=10_000,
                    help="backlog of the one-consumer rows (default 10,000)")
    ap.add_argument("--echo-requests", type=int, default=20_000, help="round trips of each echo floor")
    ap.add_argument("--only", default="echo,round,paced,one",
                    help="comma-separated parts: echo, round, paced, one (default all)")
    ap.add_argument("--no-redis", action="store_true", help="leave out the Redis Streams rows")
    ap.add_argument("--profile", metavar="FILE", default=None,
                    help="sample the broker with py-spy during the job round; shares per function to FILE")
    ap.add_argument("--broker-src", metavar="DIR", default=None,
                    help="run the broker from this source tree (PYTHONPATH), e.g. the src of a worktree of an "
                         "earlier commit, for before/after figures on the same machine")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="do not pin the server (broker, echo server, redis-server) to the first CPU and "
                         "everything else to the others (pinning keeps the clients from preempting the server: "
                         "its CPU and its profile are its own work)")
    ap.add_argument("--deadline", type=float, default=120.0, help="seconds one measurement may take")
    args = ap.parse_args(argv)
    if args.loop is None:
        try:
            import uvloop  # noqa: F401

            args.loop = "uvloop"
        except ImportError:
            args.loop = "asyncio"
    parts = set(args.only.split(","))
    rates = [int(x) for x in args.rates.split(",") if x]
    interrupt_on_sigterm()
    info = machine_info()  # before pinning: nproc counts the CPUs this process may use
    pin.enabled = args.pin and len(os.sched_getaffinity(0)) >= 2
    if pin.enabled:
        os.sched_setaffinity(0, pin.others())  # this process and every child it starts...
    started = time.monotonic()
    problems: list[str] = []
    blocks: list[str] = []
    print(f"quafka job round: broker on {args.loop}" + (f" from {args.broker_src}" if args.broker_src else "") + "; "
          + "; ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    echo: dict[str, float] = {}
    try:
        if "echo" in parts or "round" in parts:
            for loop in ("asyncio", "uvloop"):
                try:
                    echo[loop] = echo_floor.measure(loop, args.echo_requests, on_start=pin)[0]
                except ImportError:
                    continue
            blocks.append("echo floor (server CPU per request/response): " +
                          ", ".join(f"{k} {v:.1f} µs" for k, v in echo.items()))
            print(blocks[-1], flush=True)
        work = tempfile.mkdtemp(prefix="quafka-job-round-")
        broker = LoopBroker(work, args.loop, args.broker_src)
        broker.start()
        pin(broker.proc.pid)  # ...but the broker
        try:
            metrics = Metrics(broker.metrics_port)
            if "round" in parts:
                spy = SpyProfile(broker.proc.pid, os.path.join(work, "spy.txt")) if args.profile else None
                split: list[tuple[float, float]] = []

                def begin() -> None:
                    split.append(broker.cpu_split())
                    if spy:
                        spy.start()

                def end() -> None:
                    split.append(broker.cpu_split())
                    if spy:
                        spy.stop()

                run = quafka_paced(broker, metrics, args.round_rate, args.seconds, args.consumers, args.deadline, False,
                                   hooks=(begin, end))
                user_us = (split[1][0] - split[0][0]) * 1e6 / max(1, run.records)
                system_us = (split[1][1] - split[0][1]) * 1e6 / max(1, run.records)
                if spy:
                    with open(args.profile, "w") as f:
                        f.write(spy.report() + "\n")
                    print(f"broker profile of the job round (py-spy): {args.profile}")
                per_job = run.server_cpu_s * 1e6 / run.records
                floor = echo.get(args.loop)
                ratio = f"{per_job / floor:.1f}x the {args.loop} echo floor" if floor else "no echo floor"
                blocks.append(f"job round at {args.round_rate:,} jobs/s, {args.consumers} consumers, "
                              f"max.poll.records=1, acknowledgement on the next ShareFetch: "
                              f"{per_job:.0f} µs of broker CPU per job ({ratio}; user {user_us:.0f}, "
                              f"system {system_us:.0f}); "
                              f"p50 {fmt_ms(percentile(run.latencies_us, 0.5))} ms, "
                              f"p99 {fmt_ms(percentile(run.latencies_us, 0.99))} ms, "
                              f"{run.throughput:,.0f} jobs/s, backlog {run.backlog}")
                print(blocks[-1], flush=True)
            if "paced" in parts:
                rows = []
                for rate in rates:
                    rows.append(quafka_paced(broker, metrics, rate, args.seconds, args.consumers, args.deadline,
                                             "async"))
                    print(text_grid(PACED_HEAD, paced_rows(rows[-1:]), rule=False), flush=True)
                    if not args.no_redis:
                        rows.append(redis_paced(rate, args.seconds, args.consumers, args.deadline))
                        print(text_grid(PACED_HEAD, paced_rows(rows[-1:]), rule=False), flush=True)
                blocks.append(f"paced, {args.consumers} consumers, fetch size 1 (COUNT 1), one acknowledgement "
                              f"per job (commit_async / XACK), producer linger.ms=0 (one XADD per job):\n" +
                              text_grid(PACED_HEAD, paced_rows(rows)))
                blocks.append(markdown_grid(PACED_HEAD, paced_rows(rows)))
            if "one" in parts:
                head = ["client", "records/s", "broker CPU µs/record"]
                rows2 = []
                for client in ("confluent", "quafka"):
                    r1 = measure_throughput(broker, metrics, 1, 1, args.one_records, args.deadline, client=client)
                    if r1.records != args.one_records:
                        problems.append(f"one consumer ({client}) received {r1.records:,} of {args.one_records:,}")
                    rows2.append([client, f"{r1.rate:,.0f}", f"{r1.broker_us_per_record:.0f}"])
                    print(text_grid(head, rows2[-1:], rule=False), flush=True)
                blocks.append("one consumer, max.poll.records=1, a backlog of one-record batches:\n" +
                              text_grid(head, rows2))
                blocks.append(markdown_grid(head, rows2))
        finally:
            broker.stop()
            shutil.rmtree(work, ignore_errors=True)
    except KeyboardInterrupt:
        return interrupted()
    print_blocks(*blocks)
    return finish(problems, time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(main())
