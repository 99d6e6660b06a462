#!/usr/bin/env python3
"""Redis Streams baseline for share-group consumption: consumer-group reads with batched XACK.

The share-group speed goal (developers' guide) is "share-consume + acknowledge at least as fast as
Redis Streams with batched XACK on the same machine (4 ShareConsumers, 1 partition, 100-byte
records)". This script measures that baseline the way benchmarks/share.py measures share groups:
its own `redis-server` (free loopback port, `--save "" --appendonly no`, temp dir) holds one
stream (the "partition") of N entries of 100 B (entry i has id 1-i: sequence number = offset);
for every measurement a fresh consumer group at id 0 and C spawned consumer processes (redis-py),
released together, loop `XREADGROUP GROUP g c<i> COUNT <batch> BLOCK 100 STREAMS s >`, touch
every entry and acknowledge the batch with ONE `XACK`, until the group has consumed N entries.
records/s = entries consumed and acknowledged / (release -> last XACK returned); CPU per record of
redis-server (/proc/<pid>/stat) and the consumers (getrusage); exactly-once and XPENDING checked.

    .venv/bin/python benchmarks/redis_streams.py                 # 4 consumers, COUNT 500, 1,000,000 entries
    .venv/bin/python benchmarks/redis_streams.py --quick         # smoke run (100,000 entries), prints only
    .venv/bin/python benchmarks/redis_streams.py --consumers 1,4,16 --batch 100,500 --repeat 3 --update-docs

Needs `redis-server` on PATH (`apt-get install redis-server`) and the `redis` package
(`.venv/bin/pip install -e '.[bench]'`). See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import multiprocessing as mp
import os
import queue as _queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (  # noqa: E402
    DOC_PATH,
    REPO,
    _cpu_self,
    arg_parser,
    finish,
    free_port,
    interrupt_on_sigterm,
    interrupted,
    machine_info,
    machine_times,
    markdown_grid,
    print_blocks,
    process_cpu_seconds,
    replace_marked_section,
    stop_procs,
    text_grid,
)

from share import wait_idle, wait_quiet  # noqa: E402

BEGIN_MARK = "<!-- redis:begin -->"
END_MARK = "<!-- redis:end -->"
STREAM = b"bench-stream"
WARMUP_STREAM = b"bench-warmup"
FIELD = b"v"
RECORD_SIZE = 100
BLOCK_MS = 100
LOAD_PIPELINE = 10_000      # XADDs per pipeline round trip while loading
GOAL_CONSUMERS, GOAL_BATCH = 4, 500
INSTALL_HINT = ("install them with `apt-get install redis-server` (the server) and "
                "`.venv/bin/pip install -e '.[bench]'` (the redis Python package)")


# ----------------------------------------------------------------------------- redis-server

class RedisServer:
    """`redis-server` in a child process: loopback, free port, no persistence, temp dir."""

    def __init__(self, work_dir: str) -> None:
        self.work_dir = work_dir
        self.port = free_port()
        self.log_path = os.path.join(work_dir, "redis.log")
        self.proc: subprocess.Popen | None = None
        self.version = "unknown"

    def start(self, timeout_s: float = 20.0) -> "RedisServer":
        import redis

        args = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                "--appendonly", "no", "--dir", self.work_dir, "--logfile", self.log_path,
                "--daemonize", "no"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, cwd=self.work_dir)
        deadline = time.monotonic() + timeout_s
        probe = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1)
        while True:
            try:
                self.version = probe.info("server")["redis_version"]
                probe.close()
                return self
            except redis.exceptions.RedisError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server exited with {self.proc.returncode}:\n{self.log_tail()}") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not answer on {self.port} within {timeout_s:g} s") from None
                time.sleep(0.05)

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-lines:]) \
            if os.path.exists(self.log_path) else "(no redis-server log)"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def load_stream(r, stream: bytes, entries: int) -> float:
    """XADD `entries` entries with ids 1-0 .. 1-(entries-1), pipelined; returns entries/s."""
    value = os.urandom(RECORD_SIZE)
    r.delete(stream)
    t0 = time.monotonic()
    for start in range(0, entries, LOAD_PIPELINE):
        pipe = r.pipeline(transaction=False)
        for i in range(start, min(entries, start + LOAD_PIPELINE)):
            pipe.execute_command("XADD", stream, b"1-%d" % i, FIELD, value)
        pipe.execute()
    if r.xlen(stream) != entries:
        raise RuntimeError(f"stream {stream!r} holds {r.xlen(stream)} entries, {entries} loaded")
    return entries / (time.monotonic() - t0)


# ----------------------------------------------------------------------------- consumer worker
# Top-level function: it runs in spawned processes.

def consumer_worker(port: int, stream: bytes, group: bytes, name: bytes, batch: int, expected: int,
                    counter, go, out, deadline_s: float) -> None:
    """One consumer of `group`: once released, XREADGROUP ... COUNT batch BLOCK 100 >, touch every
    entry, one XACK for the batch's ids, until the group as a whole has consumed `expected`."""
    try:
        import redis

        r = redis.Redis(host="127.0.0.1", port=port, decode_responses=False)
        r.ping()  # connect before the release
        out.put(("ready", os.getpid()))
        go.wait()

        cpu0 = _cpu_self()
        t0 = time.monotonic()
        xreadgroup, xack = r.xreadgroup, r.xack
        streams = {stream: b">"}
        lock = counter.get_lock()
        got = acked = seq_sum = value_bytes = reads = 0
        acked_at = None
        while time.monotonic() - t0 < deadline_s:
            resp = xreadgroup(group, name, streams, count=batch, block=BLOCK_MS)
            if resp:
                entries = resp[0][1]
                ids = []
                for eid, fields in entries:
                    ids.append(eid)
                    seq_sum += int(eid[2:])           # ids are b"1-<offset>"
                    value_bytes += len(fields[FIELD])
                acked += xack(stream, group, *ids)
                acked_at = time.monotonic()
                n = len(entries)
                got += n
                reads += 1
                with lock:
                    counter.value += n
                    total = counter.value
            else:
                total = counter.value
            if total >= expected:
                break
        t1 = time.monotonic()
        cpu1 = _cpu_self()
        r.close()
        out.put(("done", dict(start=t0, acked_at=acked_at, end=t1, records=got, acked=acked, seq_sum=seq_sum,
                              value_bytes=value_bytes, reads=reads, cpu=cpu1 - cpu0)))
    except BaseException as exc:  # report, never hang the parent
        out.put(("error", f"{type(exc).__name__}: {exc}"))


# ----------------------------------------------------------------------------- measurement

@dataclass
class Result:
    consumers: int
    batch: int
    records: int
    seconds: float          # release of the consumers -> last XACK returned
    redis_cpu_s: float      # redis-server utime+stime from the release to the counter reaching N
    window_s: float         # that window, measured by the parent
    client_cpu_s: float     # sum over the consumer processes (their own getrusage)
    other_cpu_s: float      # the rest of the machine's busy time in the window (steal excluded)
    steal_s: float
    reads: int              # XREADGROUP calls that returned entries, all consumers
    per_consumer: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.consumers} consumer{'s' if self.consumers != 1 else ''}, COUNT {self.batch}"

    def pct(self, seconds: float) -> float:
        return seconds / self.window_s * 100 if self.window_s > 0 else float("nan")

    def per_record_us(self, seconds: float) -> float:
        return seconds / self.records * 1e6 if self.records else float("nan")

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Row:
    result: Result          # the fastest run
    median_rate: float


_group_seq = [0]


def measure(server: RedisServer, r, stream: bytes, records: int, consumers: int, batch: int, args) -> Result:
    _group_seq[0] += 1
    group = b"g%d" % _group_seq[0]
    r.xgroup_create(stream, group, id="0")
    if args.quiet_wait > 0:
        wait_quiet(args.quiet_wait)
    ctx = mp.get_context("spawn")
    go, out, counter = ctx.Event(), ctx.Queue(), ctx.Value("q", 0)
    procs = [ctx.Process(target=consumer_worker, daemon=True,
                         args=(server.port, stream, group, b"c%d" % i, batch, records, counter, go, out, args.deadline))
             for i in range(consumers)]
    results = []
    try:
        for p in procs:
            p.start()
        for _ in procs:
            kind, payload = out.get(timeout=60 + 2 * consumers)
            if kind == "error":
                raise RuntimeError(f"consumer failed while starting: {payload}")
        wait_idle([p.pid for p in procs] + [server.proc.pid])
        cpu0, m0, w0 = server.cpu_seconds(), machine_times(), time.monotonic()
        go.set()
        finish_by = time.monotonic() + args.deadline + 30
        end_sample = None
        while len(results) < consumers:
            # The window ends when the shared counter (bumped after each XACK) reaches N, not when
            # the last idle consumer's BLOCK 100 times out: sampled every 5 ms.
            if end_sample is None and counter.value >= records:
                end_sample = time.monotonic(), server.cpu_seconds(), machine_times()
            try:
                kind, payload = out.get(timeout=0.005 if end_sample is None else 1.0)
            except _queue.Empty:
                if time.monotonic() > finish_by:
                    raise
                continue
            if kind == "error":
                raise RuntimeError(f"consumer failed: {payload}")
            results.append(payload)
        w1, cpu1, m1 = end_sample or (time.monotonic(), server.cpu_seconds(), machine_times())
    except _queue.Empty:
        raise RuntimeError(f"consumers did not report in time (redis log:\n{server.log_tail()})") from None
    finally:
        if len(results) < consumers:  # failed or interrupted: do not wait for consumers parked on `go`
            for p in procs:
                p.terminate()
        stop_procs(procs)

    got = sum(x["records"] for x in results)
    client_cpu = sum(x["cpu"] for x in results)
    problems = []
    if got != records:
        problems.append(f"{got:,} entries consumed for {records:,} in the stream")
    if sum(x["seq_sum"] for x in results) != records * (records - 1) // 2:
        problems.append("the consumed sequence numbers are not 0..N-1 exactly once (sum differs)")
    if sum(x["acked"] for x in results) != records:
        problems.append(f"XACK acknowledged {sum(x['acked'] for x in results):,} entries, not {records:,}")
    if sum(x["value_bytes"] for x in results) != records * RECORD_SIZE:
        problems.append("value bytes differ from entries x 100 B")
    pending = r.xpending(stream, group)["pending"]
    if pending:
        problems.append(f"XPENDING shows {pending:,} entries still pending")
    info = next((g for g in r.xinfo_groups(stream) if g["name"] == group), {})
    if info.get("lag") not in (None, 0):
        problems.append(f"the group's lag is {info['lag']} (entries never delivered)")
    r.xgroup_destroy(stream, group)
    ackeds = [x["acked_at"] for x in results if x["acked_at"] is not None]
    end = max(ackeds) if ackeds else max(x["end"] for x in results)
    return Result(consumers=consumers, batch=batch, records=got, seconds=end - min(x["start"] for x in results),
                  redis_cpu_s=cpu1 - cpu0, window_s=w1 - w0, client_cpu_s=client_cpu,
                  other_cpu_s=max(0.0, (m1[0] - m0[0]) - (cpu1 - cpu0) - client_cpu), steal_s=m1[1] - m0[1],
                  reads=sum(x["reads"] for x in results),
                  per_consumer=sorted((x["records"] for x in results), reverse=True), problems=problems)


def run_suite(server: RedisServer, r, records: int, consumers: list[int], batches: list[int], args) -> list[Row]:
    rows = []
    for batch in batches:
        for c in consumers:
            runs = []
            for rep in range(args.repeat):
                res = measure(server, r, STREAM, records, c, batch, args)
                runs.append(res)
                cells = dict(zip(COLUMNS, table_rows([Row(res, res.rate)])[0]))
                print(f"  {res.name} [{rep + 1}/{args.repeat}]: "
                      + ", ".join(f"{k} {v}" for k, v in list(cells.items())[3:])
                      + f", per consumer {res.per_consumer}" + (f"  PROBLEMS: {res.problems}" if res.problems else ""),
                      flush=True)
            rows.append(Row(max(runs, key=lambda x: x.rate), statistics.median(x.rate for x in runs)))
    return rows


# ----------------------------------------------------------------------------- report

COLUMNS = ["consumers", "batch (COUNT)", "records", "records/s", "MB/s", "entries/read", "redis CPU µs/record",
           "redis CPU %", "consumer CPU µs/record", "consumer CPU %", "other CPU %", "steal %"]


def table_rows(rows: list[Row]) -> list[list[str]]:
    out = []
    for row in rows:
        x = row.result
        out.append([str(x.consumers), str(x.batch), f"{x.records:,}", f"{x.rate:,.0f}",
                    f"{x.rate * RECORD_SIZE / 1e6:.1f}", f"{x.records / max(1, x.reads):,.0f}",
                    f"{x.per_record_us(x.redis_cpu_s):.2f}", f"{x.pct(x.redis_cpu_s):.0f}",
                    f"{x.per_record_us(x.client_cpu_s):.2f}", f"{x.pct(x.client_cpu_s):.0f}",
                    f"{x.pct(x.other_cpu_s):.0f}", f"{x.pct(x.steal_s):.0f}"])
    return out


def markdown_table(rows: list[Row]) -> str:
    return markdown_grid(COLUMNS, table_rows(rows), first_left=False)


def text_table(rows: list[Row]) -> str:
    return text_grid(COLUMNS, table_rows(rows), first_left=False)


def analysis(rows: list[Row], args) -> str:
    res = [row.result for row in rows]
    if not res:
        return ""
    cores = len(os.sched_getaffinity(0))
    goal = next((x for x in res if (x.consumers, x.batch) == (GOAL_CONSUMERS, GOAL_BATCH)), None)
    lead = goal or max(res, key=lambda x: x.rate)
    redis_pct, client_pct = lead.pct(lead.redis_cpu_s), lead.pct(lead.client_cpu_s)
    busy = lead.pct(lead.redis_cpu_s + lead.client_cpu_s + lead.other_cpu_s + lead.steal_s)
    if redis_pct >= 90:
        limit = "redis-server's single thread was busy almost all the time, so redis-server was the limit"
    elif busy >= 85 * cores and lead.pct(lead.other_cpu_s + lead.steal_s) > 20:
        limit = (f"the {cores} cores were saturated ({busy:.0f}% of {cores * 100}%), "
                 f"{lead.pct(lead.other_cpu_s + lead.steal_s):.0f}% of a core of it by other load or steal")
    elif busy >= 85 * cores:
        limit = (f"the {cores} cores were saturated ({busy:.0f}% of {cores * 100}%), {client_pct:.0f}% of a core "
                 f"of it in the Python consumers against {redis_pct:.0f}% in redis-server: the consumers "
                 f"(redis-py parsing replies and building an (id, dict) pair per entry) were the limit")
    else:
        limit = (f"neither redis-server ({redis_pct:.0f}% of a core) nor the machine ({busy:.0f}% of "
                 f"{cores * 100}%) was saturated: each consumer waits for its XREADGROUP and its XACK in turn, so "
                 f"round-trip latency, not CPU, bounded it")
    text = (f"**Baseline.** {lead.name} consumed and acknowledged {lead.rate:,.0f} records/s of 100 B "
            f"({lead.rate * RECORD_SIZE / 1e6:.1f} MB/s"
            + (f"; the fastest of {args.repeat} runs, median {rows[res.index(lead)].median_rate:,.0f}"
               if args.repeat > 1 else "")
            + f"). redis-server spent {lead.per_record_us(lead.redis_cpu_s):.2f} µs per record and the consumers "
            f"(redis-py, {args.parser} reply parser) {lead.per_record_us(lead.client_cpu_s):.2f} µs; {limit}.")
    if goal is not None:
        text += (f" This row is the baseline of the share-group goal ({GOAL_CONSUMERS} ShareConsumers, 1 "
                 f"partition, 100 B records): compare it with the share section's {GOAL_CONSUMERS}-consumer rows.")
    if len(res) > 1:
        lo_r, hi_r = (f(x.per_record_us(x.redis_cpu_s) for x in res) for f in (min, max))
        lo_c, hi_c = (f(x.per_record_us(x.client_cpu_s) for x in res) for f in (min, max))
        text += (f" Across the rows redis-server spent {lo_r:.2f}–{hi_r:.2f} µs per record and the consumers "
                 f"{lo_c:.2f}–{hi_c:.2f} µs.")
    noisy = [x for x in res if x.pct(x.other_cpu_s) > 20 or x.pct(x.steal_s) > 5]
    if noisy:
        text += (" Other load or steal above 20% / 5% of a core during " + ", ".join(x.name for x in noisy)
                 + ": those rows had less CPU and read low.")
    return text


def section(rows: list[Row], info: dict[str, str], args, records: int, elapsed_s: float) -> str:
    command = " ".join([".venv/bin/python", "benchmarks/redis_streams.py", *sys.argv[1:]])
    info_lines = "\n".join(f"| {k} | {v} |" for k, v in info.items())
    repeat_note = ("Each measurement ran once." if args.repeat == 1 else
                   f"Each measurement ran {args.repeat} times; the table shows the fastest run (other load only "
                   f"ever slows a run down). Medians, records/s: "
                   + "; ".join(f"{r.result.name}: {r.median_rate:,.0f}" for r in rows) + ".")
    return f"""{BEGIN_MARK}
# Redis Streams baseline

Generated on {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')} by `{command}` (the run took {elapsed_s:.0f} s).
This section is rewritten by `benchmarks/redis_streams.py --update-docs`. It is the baseline of the
share-group goal: share-consume + acknowledge at least as fast as Redis Streams with batched XACK on
the same machine ({GOAL_CONSUMERS} consumers, 1 partition, 100-byte records). Reproduce from the
repository root with (needs `apt-get install redis-server` and `.venv/bin/pip install -e '.[bench]'`):

<!-- snippet: skip: a measurement that takes minutes and rewrites this file; run by hand to refresh the tables -->
```sh
.venv/bin/python benchmarks/redis_streams.py --update-docs   # {GOAL_CONSUMERS} consumers, COUNT {GOAL_BATCH}; rewrites this section
.venv/bin/python benchmarks/redis_streams.py --consumers 1,4,16 --batch 100,500 --repeat 3 --update-docs
.venv/bin/python benchmarks/redis_streams.py --quick         # smoke run (100,000 entries), prints only
```

## What is measured (Redis Streams)

- `redis-server` runs in a child process on a free loopback port with persistence off
  (`--save "" --appendonly no`; otherwise its defaults) in a temporary directory. One stream (the
  "partition") holds {records:,} entries, loaded with pipelined `XADD`s; each has one field `v`
  with the same 100-byte random value, and entry i has the id `1-i` (sequence number = offset).
- Every measurement creates a fresh consumer group at id 0 and starts C consumer processes
  (spawned; redis-py, `decode_responses=False`, reply parser: {info['redis-py parser']}). Each
  connects (`PING`); once all are idle they are released together. Each loops `XREADGROUP GROUP g
  c<i> COUNT <batch> BLOCK {BLOCK_MS} STREAMS s >`, sums the sequence numbers and value lengths of
  the entries, and acknowledges them with one `XACK` carrying all the batch's ids, until the group
  as a whole (a counter the processes share) has consumed every entry.
- **records/s** counts entries consumed *and acknowledged*, from the release to the last `XACK`
  returning; **entries/read** is the mean size of a non-empty `XREADGROUP` reply. Checks: the
  sequence numbers must be 0..N-1 exactly once (count and sum), the `XACK`s must have acknowledged
  N entries, and afterwards `XPENDING` must show 0 pending and `XINFO GROUPS` a lag of 0.
- **redis CPU**: utime+stime of redis-server (`/proc/<pid>/stat`) from the release until the
  shared counter, bumped after each `XACK`, reaches N (sampled every 5 ms), per record and as % of
  one core over that window. **consumer CPU**: the
  consumers' own `getrusage()`, summed. **other CPU**: the machine's busy time (`/proc/stat`) minus
  both; **steal**: time the hypervisor gave to other guests. Before each measurement the script
  waits (up to {args.quiet_wait:g} s) for the rest of the machine to drop below 25% of a core.
- MB/s counts values only, 1 MB = 10^6 bytes. {repeat_note} The machine has
  {len(os.sched_getaffinity(0))} cores, which redis-server and the consumers share.

## Machine (Redis Streams)

| | |
|---|---|
{info_lines}

## Results (Redis Streams)

{markdown_table(rows)}

## Analysis (Redis Streams)

{analysis(rows, args)}
{END_MARK}
"""


# ----------------------------------------------------------------------------- main

def _int_list(text: str) -> list[int]:
    try:
        values = [int(v.replace("_", "")) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"needs integers of at least 1: {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    ap = arg_parser(__doc__, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--records", type=int, default=None,
                    help="entries in the stream, consumed by every measurement (default 1,000,000; --quick: 100,000)")
    ap.add_argument("--consumers", type=_int_list, default=[GOAL_CONSUMERS],
                    help=f"consumer process counts, comma-separated, e.g. 1,4,16 (default {GOAL_CONSUMERS})")
    ap.add_argument("--batch", type=_int_list, default=[GOAL_BATCH],
                    help=f"XREADGROUP COUNT, comma-separated, e.g. 100,500 (default {GOAL_BATCH}, like "
                         "librdkafka's max.poll.records)")
    ap.add_argument("--repeat", type=int, default=1, help="run each measurement N times, report the fastest")
    ap.add_argument("--quick", action="store_true", help="smoke run: 100,000 entries, no waiting for a quiet machine")
    ap.add_argument("--quiet-wait", type=float, default=None,
                    help="before each measurement wait up to this many seconds for other load to drop below 25%% "
                         "of a core (default 60; --quick: 0)")
    ap.add_argument("--update-docs", action="store_true",
                    help=f"rewrite the section of {DOC_PATH.relative_to(REPO)} between {BEGIN_MARK} and {END_MARK} "
                         "(appended when absent); otherwise print only")
    ap.add_argument("--doc", default=str(DOC_PATH), help="the markdown file --update-docs rewrites")
    ap.add_argument("--deadline", type=float, default=120.0, help="seconds one measurement may take before it fails")
    args = ap.parse_args(argv)
    records = args.records or (100_000 if args.quick else 1_000_000)
    if args.quiet_wait is None:
        args.quiet_wait = 0.0 if args.quick else 60.0
    if args.repeat < 1 or records < 1:
        ap.error("--repeat and --records must be at least 1")
    if args.quick and args.update_docs:
        ap.error("--quick prints only; drop --update-docs (or --quick)")

    try:
        import redis
    except ImportError:
        redis = None
    missing = [m for m, ok in (("redis-server on PATH", shutil.which("redis-server")), ("the redis package", redis))
               if not ok]
    if missing:
        print(f"needs {' and '.join(missing)}: {INSTALL_HINT}; then run with .venv/bin/python", file=sys.stderr)
        return 2
    from redis.utils import HIREDIS_AVAILABLE

    args.parser = "hiredis" if HIREDIS_AVAILABLE else "pure-Python"

    t_start = time.monotonic()
    work_dir = tempfile.mkdtemp(prefix="quafka-bench-redis-")
    server = RedisServer(work_dir)
    interrupt_on_sigterm()
    try:
        server.start()
        r = redis.Redis(host="127.0.0.1", port=server.port, decode_responses=False)
        print(f"redis-server {server.version} pid {server.proc.pid} on 127.0.0.1:{server.port}; redis-py "
              f"{redis.__version__} ({args.parser} parser)", flush=True)
        load_stream(r, WARMUP_STREAM, 20_000)
        rate = load_stream(r, STREAM, records)
        print(f"  loaded {records:,} entries of {RECORD_SIZE} B ({rate:,.0f} XADD/s pipelined; redis-server uses "
              f"{r.info('memory')['used_memory'] / 1e6:,.0f} MB)", flush=True)
        quiet = argparse.Namespace(**{**vars(args), "quiet_wait": 0})
        measure(server, r, WARMUP_STREAM, 20_000, 1, args.batch[0], quiet)   # warm-up, not reported
        rows = run_suite(server, r, records, args.consumers, args.batch, args)
        r.close()
    except KeyboardInterrupt:
        return interrupted()
    finally:
        server.stop()
        shutil.rmtree(work_dir, ignore_errors=True)

    elapsed = time.monotonic() - t_start
    print_blocks(text_table(rows), analysis(rows, args))
    if args.update_docs:
        info = machine_info()
        info["redis-server"] = server.version
        info["redis-py"] = redis.__version__
        info["redis-py parser"] = args.parser + ("" if HIREDIS_AVAILABLE else " (hiredis not installed)")
        replace_marked_section(section(rows, info, args, records, elapsed), Path(args.doc), BEGIN_MARK, END_MARK)
        print(f"\nwrote the Redis Streams section of {args.doc}")
    problems = [f"{row.result.name}: {p}" for row in rows for p in row.result.problems]
    return finish(problems, elapsed)


if __name__ == "__main__":
    sys.exit(main())
