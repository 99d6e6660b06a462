#!/usr/bin/env python3
"""Throughput of the PySpark data source `format("quafka")`: the share-group streaming source into
Spark's no-op sink, the batch reader, and (optionally) a profile of the streaming source's runner.

The script starts `python -m quafka broker` in a child process (fresh temporary log dir, free
port; the helpers of benchmarks/produce_fetch.py and benchmarks/share.py), pre-produces N records
of 100 B (no key) to a 1-partition topic (and to a 4-partition topic for the batch reader) with
one confluent Producer, starts a SparkSession in this process (`local[2]`, UI and progress bar
off, `spark.sql.shuffle.partitions=2`, loopback only, log level ERROR) and measures:

- streaming: for maxRecordsPerTrigger 10,000 and 100,000, one query
  `spark.readStream.format("quafka")` (fresh share group with share.auto.offset.reset=earliest and
  share.assignment.interval.ms=0, numPartitions=2) `.writeStream.format("noop")` (default trigger)
  until the progress events (polled from the query) count N input rows; then it waits until the
  group's start offset is N with lag 0 (the idle tail acknowledged) and stops the query. rows/s is
  reported two ways: N / wall time from the first data batch's start to the last data batch's end,
  and N / the summed triggerExecution durations of the data batches; plus the median batch
  duration and rows per batch. By default a share partition has at most 2,000 records in flight,
  which caps a micro-batch on a 1-partition topic near 2,000 rows whatever maxRecordsPerTrigger
  says; so (default on, `--wide-locks 0` turns it off) the group's share.partition.max.record.locks
  is raised to 10,000 (the broker's cap raised to match) for 10k per trigger on the 1-partition
  topic, and for 100k per trigger on a 10-partition topic of `--wide-records` records (default
  1,000,000, record i in partition i mod 10): 10 × 10,000 in flight leaves room for 100k-record
  micro-batches — the goal's row. That query runs once (reported as its first run), then
  `--wide-warmup` times unmeasured (Spark's per-batch paths are JIT-compiled only after dozens of
  batches), then measured with Spark's defaults, with executorFetch=true, and with Spark's
  FileSystem checkpoint manager (CHECKPOINT_MANAGER_CONF). Each stream row also reports the CPU per
  row of every process by role (/proc, from the end of its first data batch).
- batch reader: `spark.read.format("quafka")...load().write.format("noop").mode("overwrite").save()`
  over the N records, `--repeat` times (best and median), on the 1- and the 4-partition topic.
- `--profile-runner`: `quafka.spark.stream.QuafkaShareStreamReader` driven in this process the way
  Spark's runner drives it (initialOffset, then latestOffset(ReadMaxRows(n)) / partitions /
  pickle each partition / commit until N records are through), timed per phase (µs per record),
  then once more under cProfile (top functions by cumulative and own time); then the executor side:
  unpickle each partition and iterate `read(partition)`.

- `--cluster` (instead of the above): the same N records on a 4-partition topic, streamed
  (maxRecordsPerTrigger 20,000, 10,000 record locks, numPartitions=2, noop sink) and batch-read on a
  Spark standalone cluster (tests/support/spark_cluster.py: master and workers from pyspark's
  spark-class on loopback) of 1 worker, then of 2 workers, 1 core each, with the driver in this
  process; rows/s side by side and the ratio 2 / 1.

A small warm-up query (and a warm-up batch read) runs first so that Python worker start-up is not
measured. It prints a table and with `--update-docs` rewrites its own section of
docs/benchmarks.md (between `<!-- spark:begin -->` and `<!-- spark:end -->`).

    .venv/bin/python benchmarks/spark.py                                   # 200,000 records, prints only
    .venv/bin/python benchmarks/spark.py --profile-runner --update-docs    # the documented run
    .venv/bin/python benchmarks/spark.py --quick                           # smoke run (20,000 records)
    .venv/bin/python benchmarks/spark.py --cluster --records 100000        # 1 vs 2 workers, standalone
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as _dt
import json
import os
import pickle
import pstats
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (  # noqa: E402
    DOC_PATH,
    REPO,
    BrokerRun,
    arg_parser,
    create_topic,
    delete_topic,
    finish,
    interrupted,
    produce_round_robin,
    machine_info,
    markdown_grid,
    print_blocks,
    replace_marked_section,
    text_grid,
)

from produce_fetch import _label, run_clients  # noqa: E402
from share import (  # noqa: E402
    RECORD_SIZE,
    ShareBroker,
    produce_topic,
    produce_worker_tuned,
    producer_tuning,
    set_group_configs,
)

BEGIN_MARK = "<!-- spark:begin -->"
END_MARK = "<!-- spark:end -->"
GOAL_ROWS_PER_S = 250_000  # issue 32 (it was 200,000)
TRIGGER_SIZES = (10_000, 100_000)
NUM_PARTITIONS = 2
WARMUP_RECORDS = 5_000
DEFAULT_LOCKS = 2000        # the broker's default share.partition.max.record.locks
WIDE_LOCKS = 10_000         # the highest value group.share.max.partition.max.record.locks allows
WIDE_PARTITIONS = 10        # partitions × locks = 100,000 records in flight: room for 100k-row micro-batches
# Spark writes each offset and commit log file through Hadoop's FileContext; without Hadoop's native
# library (pyspark ships none: "Unable to load native-hadoop library") the local file system forks a
# chmod for every file it creates and a readlink for every rename, about 60 ms a log write here
# (jstack of the stream thread: RawLocalFileSystem.setPermission -> Shell.execCommand). Hadoop's
# FileSystem API creates files without setting permissions: Spark's own FileSystemBasedCheckpointFileManager.
CHECKPOINT_MANAGER_CONF = {"spark.sql.streaming.checkpointFileManagerClass":
                           "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"}
CHECKPOINT_MANAGER_LABEL = "FileSystem checkpoint manager"


# ----------------------------------------------------------------------------- Spark session

def spark_session():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("quafka-bench-spark")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class ProgressCollector:
    """Every progress event (as a dict) per query id, polled from the query: ``query.lastProgress``
    while it runs (one py4j call and one JSON document per poll) and ``query.recentProgress`` (kept
    by the JVM: spark.sql.streaming.numRecentProgressUpdates) for the complete list. Not a Python
    StreamingQueryListener: pyspark builds each event object field by field over py4j, which cost
    the driver JVM's listener thread about a fifth of a core at 100k-row batches (measured with
    jstack's per-thread CPU) — CPU the measured query then lacks on 2 cores."""

    def __init__(self) -> None:
        self.queries: dict[str, object] = {}
        self.events: dict[str, dict[int, dict]] = {}

    def watch(self, query) -> str:
        qid = str(query.id)
        self.queries[qid] = query
        self.events.setdefault(qid, {})
        return qid

    def _add(self, qid: str, p) -> None:
        """p: a pyspark StreamingQueryProgress (a dict whose "id" is a UUID), kept as its JSON."""
        if p and str(p["id"]) == qid:
            self.events[qid][p["batchId"]] = json.loads(p.json)

    def rows(self, query_id: str, complete: bool = False) -> int:
        """Input rows of the batches seen so far; ``complete`` reads every event the JVM keeps (a
        batch can end between two polls of lastProgress)."""
        if complete:
            self.progress(query_id)
        else:
            self._add(query_id, self.queries[query_id].lastProgress)
        return sum(p.get("numInputRows", 0) for p in self.events[query_id].values())

    def progress(self, query_id: str) -> list[dict]:
        for p in self.queries[query_id].recentProgress:
            self._add(query_id, p)
        return [p for _, p in sorted(self.events[query_id].items())]


def _ts(stamp: str) -> float:
    """A progress timestamp ('2026-11-22T10:11:12.345Z') as epoch seconds."""
    return _dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=_dt.timezone.utc).timestamp()


# ----------------------------------------------------------------------------- broker side helpers

def new_group(admin, tag: str, locks: int | None = None) -> str:
    group = f"bench-spark-{tag}-{uuid.uuid4().hex[:6]}"
    configs = {"share.auto.offset.reset": "earliest", "share.assignment.interval.ms": "0"}
    if locks:
        configs["share.partition.max.record.locks"] = str(locks)
    set_group_configs(admin, group, configs)
    return group


def group_state(bootstrap: str, group: str, topic: str) -> tuple[int, int]:
    """(Σ start offset, Σ lag) over the group's share partitions of `topic`, by quafka's Admin:
    (records, 0) once every partition is drained."""
    from quafka.client import Admin

    with Admin({"bootstrap.servers": bootstrap}) as admin:
        offsets = admin.list_share_group_offsets(group, [topic])
    if not offsets:
        return (-1, -1)
    return (sum(max(start, 0) for start, _ in offsets.values()), sum(max(lag, 0) for _, lag in offsets.values()))


def produce_even(bootstrap: str, topic: str, records: int, partitions: int, args) -> None:
    """`records` keyless records of RECORD_SIZE bytes, record i to partition i mod `partitions` (one
    confluent Producer in this process): every partition gets the same count, so a 100k trigger on
    10 partitions × 10,000 locks fills every micro-batch but the last."""
    took = produce_round_robin(conf={**producer_tuning(args), "bootstrap.servers": bootstrap, "acks": "1"},
                               topic=topic, records=records, partitions=partitions, value=os.urandom(RECORD_SIZE),
                               deadline_s=args.deadline)
    print(f"  produced {records:,} records of {RECORD_SIZE} B to {topic} ({partitions} partitions, round robin, "
          f"{records / took:,.0f} records/s)", flush=True)


def produce_partitioned(broker, admin, topic: str, records: int, partitions: int, args) -> None:
    """share.produce_topic for a topic of `partitions` partitions: round robin (--spread even) or by
    librdkafka's sticky partitioner (--spread sticky)."""
    if partitions == 1:
        produce_topic(broker, admin, topic, records, args)
        return
    create_topic(admin, topic, partitions)
    if args.spread == "even":
        produce_even(broker.bootstrap, topic, records, partitions, args)
        return
    res = run_clients(broker, f"produce {topic}", RECORD_SIZE,
                      [(produce_worker_tuned, (producer_tuning(args), broker.bootstrap, topic, records, RECORD_SIZE,
                                               "1", False))], args.deadline)
    if res.problems or res.records != records:
        raise RuntimeError(f"pre-producing {topic} failed: {res.problems}")
    print(f"  produced {records:,} records of {RECORD_SIZE} B to {topic} ({partitions} partitions, sticky, "
          f"{res.rate:,.0f} records/s)", flush=True)


# ----------------------------------------------------------------------------- streaming

@dataclass
class StreamResult:
    name: str
    trigger: int
    locks: int
    records: int
    partitions: int = 1
    rows: int = 0
    wall_s: float = 0.0            # first data batch start to last data batch end
    trigger_sum_s: float = 0.0     # Σ triggerExecution of the data batches
    batches: list[int] = field(default_factory=list)       # rows per data batch
    durations_ms: list[int] = field(default_factory=list)  # triggerExecution per data batch
    phases_ms: dict[str, int] = field(default_factory=dict)  # Σ durationMs per phase over data batches
    start_to_done_s: float = 0.0   # start() to the listener reporting N rows (incl. query start-up)
    drained: tuple[int, int] | None = None
    problems: list[str] = field(default_factory=list)
    tag: str = ""           # the 100k-per-trigger rows: first | steady | executorFetch | checkpoint
    cpu_s: dict[str, float] = field(default_factory=dict)  # CPU seconds by role after the first data batch
    cpu_rows: int = 0       # the rows of that window
    cpu_wall_s: float = 0.0  # and its length

    @property
    def rate_wall(self) -> float:
        return self.rows / self.wall_s if self.wall_s else 0.0

    @property
    def rate_trigger(self) -> float:
        return self.rows / self.trigger_sum_s if self.trigger_sum_s else 0.0

    @property
    def median_ms(self) -> float:
        return statistics.median(self.durations_ms) if self.durations_ms else 0.0


def _role(cmdline: str, pid: int, broker_pid: int | None) -> str:
    """Which part of the set-up a process of this benchmark's tree is (for the CPU split)."""
    if pid == os.getpid():
        return "benchmark process (py4j driver)"
    if pid == broker_pid:
        return "broker"
    if "python_streaming_source_runner" in cmdline:
        return "runner"
    if "pyspark.daemon pyspark.worker" in cmdline or cmdline.endswith("pyspark.worker"):
        return "executors' Python workers"
    if "pyspark.daemon" in cmdline:
        return "planning Python workers"
    if "java" in cmdline.split(" ", 1)[0]:
        return "Spark JVM"
    return "other"


def _tree_cpu() -> dict[int, tuple[str, float]]:
    """{pid: (cmdline, CPU seconds)} of this process and every live descendant (utime + stime)."""
    procs: dict[int, tuple[int, float, str]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        procs[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick, cmdline)
    me, out = os.getpid(), {}
    for pid, (_ppid, cpu, cmdline) in procs.items():
        p, hops = pid, 0
        while p not in (me, 0, 1) and p in procs and hops < 64:
            p, hops = procs[p][0], hops + 1
        if p == me:
            out[pid] = (cmdline, cpu)
    return out


class CpuByRole:
    """CPU seconds of this process and its descendants by role (``_role``) between start() and
    stop(): sampled every 0.2 s, so that a process that ends in between counts up to its last
    sample (at most 0.2 s of it is lost) and one that starts counts from zero."""

    def __init__(self, broker_pid: int | None) -> None:
        self.broker_pid = broker_pid
        self.first: dict[int, float] = {}
        self.last: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-by-role", daemon=True)

    def start(self) -> "CpuByRole":
        self.first = {pid: cpu for pid, (_cmd, cpu) in _tree_cpu().items()}
        self.last = {}
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.last.update(_tree_cpu())

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        self.last.update(_tree_cpu())
        out: dict[str, float] = {}
        for pid, (cmdline, cpu) in self.last.items():
            role = _role(cmdline, pid, self.broker_pid)
            out[role] = out.get(role, 0.0) + cpu - self.first.get(pid, 0.0)
        return out


def run_stream(spark, collector: ProgressCollector, broker, admin, topic: str, records: int, trigger: int,
               locks: int | None, work_dir: str, deadline_s: float, name: str, verify: bool = True,
               partitions: int = 1, options: dict[str, str] | None = None) -> StreamResult:
    group = new_group(admin, f"t{trigger}", locks)
    res = StreamResult(name, trigger, locks or DEFAULT_LOCKS, records, partitions)
    checkpoint = tempfile.mkdtemp(prefix="cp-", dir=work_dir)
    df = (spark.readStream.format("quafka")
          .option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", topic)
          .option("share.group", group)
          .option("maxRecordsPerTrigger", trigger)
          .option("numPartitions", NUM_PARTITIONS)
          .options(**(options or {}))
          .load())
    cpu, cpu_from_rows, cpu_t0 = CpuByRole(getattr(getattr(broker, "proc", None), "pid", None)), 0, 0.0
    t0 = time.monotonic()
    query = df.writeStream.format("noop").option("checkpointLocation", checkpoint).start()
    qid = collector.watch(query)
    try:
        deadline = t0 + deadline_s
        next_complete = 0.0
        while True:
            seen = collector.rows(qid)
            if seen < records and time.monotonic() >= next_complete:  # a batch missed between two polls
                seen, next_complete = collector.rows(qid, complete=True), time.monotonic() + 1.0
            if seen >= records:
                break
            if not cpu_from_rows and seen:  # from the end of the first data batch: steady state
                cpu.start()
                cpu_from_rows, cpu_t0 = seen, time.monotonic()
            if query.exception() is not None or not query.isActive:
                raise RuntimeError(f"{name}: query failed: {query.exception()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: only {seen:,} of {records:,} rows after {deadline_s:.0f} s")
            time.sleep(0.05)
        res.start_to_done_s = time.monotonic() - t0
        if cpu_from_rows:
            res.cpu_s, res.cpu_rows, res.cpu_wall_s = cpu.stop(), records - cpu_from_rows, time.monotonic() - cpu_t0
        if verify:
            # the last batch is ACCEPTed by the next latestOffset (the idle tail); wait for it
            drain_deadline = time.monotonic() + 30
            state = group_state(broker.bootstrap, group, topic)
            while state != (records, 0) and time.monotonic() < drain_deadline:
                time.sleep(0.2)
                state = group_state(broker.bootstrap, group, topic)
            res.drained = state
            if state != (records, 0):
                res.problems.append(f"group not drained: start offset / lag {state}, expected ({records}, 0)")
    finally:
        query.stop()
    shutil.rmtree(checkpoint, ignore_errors=True)
    data = [p for p in collector.progress(qid) if p.get("numInputRows", 0) > 0]
    res.rows = sum(p["numInputRows"] for p in data)
    if res.rows != records:
        res.problems.append(f"{res.rows:,} input rows, expected {records:,} (redeliveries or losses)")
    if data:
        res.batches = [p["numInputRows"] for p in data]
        res.durations_ms = [p["durationMs"]["triggerExecution"] for p in data]
        res.trigger_sum_s = sum(res.durations_ms) / 1000
        first, last = data[0], data[-1]
        res.wall_s = _ts(last["timestamp"]) + last["durationMs"]["triggerExecution"] / 1000 - _ts(first["timestamp"])
        for p in data:
            for k, v in p["durationMs"].items():
                res.phases_ms[k] = res.phases_ms.get(k, 0) + v
    print(f"  {name}: {res.rows:,} rows in {len(res.batches)} batches (mean {statistics.mean(res.batches or [0]):,.0f}, "
          f"max {max(res.batches or [0]):,}), {res.rate_wall:,.0f} rows/s wall, {res.rate_trigger:,.0f} rows/s "
          f"Σ trigger, median batch {res.median_ms:.0f} ms, drained {res.drained}", flush=True)
    if res.batches:
        print("    rows per data batch: " + " ".join(f"{n:,}" for n in res.batches), flush=True)
        print("    mean ms per data batch: " + ", ".join(f"{k} {v / len(res.batches):.0f}"
                                                       for k, v in sorted(res.phases_ms.items())), flush=True)
    if res.cpu_s and res.cpu_rows:
        print(f"    CPU µs per row after the first batch ({res.cpu_rows:,} rows, {res.cpu_wall_s:.1f} s; all roles "
              f"{sum(res.cpu_s.values()) / res.cpu_wall_s:.2f} cores): " + ", ".join(
                  f"{k} {v * 1e6 / res.cpu_rows:.2f}" for k, v in sorted(res.cpu_s.items(), key=lambda kv: -kv[1])
                  if v > 0.005), flush=True)
    for p in res.problems:
        print(f"  PROBLEM {name}: {p}", flush=True)
    return res


PHASE_KEYS = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")


def phase_table(rows: list[StreamResult]) -> tuple[list[str], list[list[str]]]:
    """Mean durationMs per data batch, by phase of Spark's micro-batch."""
    head = ["measurement", *PHASE_KEYS]
    return head, [[r.name, *(f"{r.phases_ms.get(k, 0) / len(r.batches):.0f}" if r.batches else "-" for k in PHASE_KEYS)]
                  for r in rows]


# ----------------------------------------------------------------------------- batch reader

@dataclass
class BatchResult:
    name: str
    partitions: int
    records: int
    times_s: list[float] = field(default_factory=list)
    slices: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def best(self) -> float:
        return self.records / min(self.times_s) if self.times_s else 0.0

    @property
    def median(self) -> float:
        return self.records / statistics.median(self.times_s) if self.times_s else 0.0


def run_batch(spark, broker, topic: str, records: int, partitions: int, repeat: int, name: str) -> BatchResult:
    res = BatchResult(name, partitions, records)

    def df():
        return (spark.read.format("quafka").option("kafka.bootstrap.servers", broker.bootstrap)
                .option("subscribe", topic).load())

    count = df().count()
    if count != records:
        res.problems.append(f"count() = {count:,}, expected {records:,}")
    res.slices = df().rdd.getNumPartitions()
    for _ in range(repeat):
        t0 = time.monotonic()
        df().write.format("noop").mode("overwrite").save()
        res.times_s.append(time.monotonic() - t0)
    print(f"  {name}: {records:,} rows, {res.slices} Spark partitions, best {res.best:,.0f} rows/s, median "
          f"{res.median:,.0f} rows/s ({', '.join(f'{t:.2f}' for t in res.times_s)} s)", flush=True)
    return res


# ----------------------------------------------------------------------------- runner profile

PHASES = ("latestOffset", "partitions", "pickle", "commit")


@dataclass
class RunnerProfile:
    trigger: int
    records: int
    phase_s: dict[str, float]
    batches: list[int]
    read_s: float
    unpickle_s: float
    payload_bytes: int
    stats_cum: list[tuple[str, int, float, float]]    # (function, calls, tottime, cumtime)
    stats_tot: list[tuple[str, int, float, float]]
    profiled_s: float
    batch_read_s: float = 0.0       # QuafkaBatchReader.read() over every slice, in this process
    batch_read_top: list[tuple[str, int, float, float]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def us(self, seconds: float) -> float:
        return seconds / self.records * 1e6


def drive_runner(bootstrap: str, topic: str, group: str, trigger: int, records: int, deadline_s: float,
                 keep_pickles: bool) -> tuple[dict[str, float], list[int], list[bytes], object]:
    """Drive a QuafkaShareStreamReader as Spark's runner does; returns (seconds per phase, rows per
    batch, the pickled partitions if kept, the pickled reader)."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from quafka.spark.datasource import RECORD_SCHEMA
    from quafka.spark.stream import QuafkaShareStreamReader

    reader = QuafkaShareStreamReader({"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "share.group": group,
                                      "maxRecordsPerTrigger": str(trigger), "numPartitions": str(NUM_PARTITIONS),
                                      "executorFetch": "false"},  # as on local[2]; this process is no Spark JVM's child
                                     RECORD_SCHEMA)
    handler = signal.getsignal(signal.SIGTERM)
    phase = dict.fromkeys(PHASES, 0.0)
    batches: list[int] = []
    pickles: list[bytes] = []
    limit = ReadMaxRows(trigger)
    clock = time.perf_counter
    try:
        offset = reader.initialOffset()
        total = 0
        deadline = time.monotonic() + deadline_s
        while total < records:
            if time.monotonic() > deadline:
                raise RuntimeError(f"runner: {total:,} of {records:,} records after {deadline_s:.0f} s")
            t0 = clock()
            end = reader.latestOffset(offset, limit)
            t1 = clock()
            phase["latestOffset"] += t1 - t0
            if end == offset:
                continue  # nothing acquired in this poll (e.g. before the assignment)
            parts = reader.partitions(offset, end)
            t2 = clock()
            blobs = [pickle.dumps(p) for p in parts]
            t3 = clock()
            # Spark commits a batch's end when it plans the next one (after its latestOffset):
            # MicroBatchExecution.constructNextBatch, "source.commit(prevBatchOff)"
            reader.commit(offset)
            t4 = clock()
            phase["partitions"] += t2 - t1
            phase["pickle"] += t3 - t2
            phase["commit"] += t4 - t3
            n = sum(piece.count for p in parts for piece in getattr(p, "pieces", ()))
            batches.append(n)
            total += n
            if keep_pickles:
                pickles.extend(blobs)
            offset = end
        reader_blob = pickle.dumps(reader)
    finally:
        reader.close()
        signal.signal(signal.SIGTERM, handler)  # the reader installed its own SIGTERM handler
    return phase, batches, pickles, reader_blob


def _top(stats: pstats.Stats, key: int, n: int) -> list[tuple[str, int, float, float]]:
    rows = [(_label(func), nc, tt, ct) for func, (_cc, nc, tt, ct, _callers) in stats.stats.items()]
    rows.sort(key=lambda r: r[key], reverse=True)
    return rows[:n]


def profile_runner(broker, admin, topic: str, records: int, trigger: int, locks: int | None,
                   deadline_s: float) -> RunnerProfile:
    # 1. timed, no profiler; keep the pickled partitions for the executor side
    phase, batches, pickles, reader_blob = drive_runner(broker.bootstrap, topic, new_group(admin, "runner", locks),
                                                        trigger, records, deadline_s, keep_pickles=True)
    problems = []
    if sum(batches) != records:
        problems.append(f"runner got {sum(batches):,} records, expected {records:,}")
    # 2. executor side: unpickle the reader and each partition, iterate read()
    t0 = time.perf_counter()
    reader = pickle.loads(reader_blob)
    parts = [pickle.loads(b) for b in pickles]
    t1 = time.perf_counter()
    rows = 0
    for part in parts:
        for item in reader.read(part):
            rows += item.num_rows  # pyarrow.RecordBatch
    t2 = time.perf_counter()
    if rows != records:
        problems.append(f"read() gave {rows:,} rows, expected {records:,}")
    payload = sum(len(b) for b in pickles)
    del parts, pickles
    # 3. the same under cProfile (fresh group)
    prof = cProfile.Profile()
    group = new_group(admin, "runner-prof", locks)
    t3 = time.perf_counter()
    prof.enable()
    try:
        drive_runner(broker.bootstrap, topic, group, trigger, records, deadline_s, keep_pickles=False)
    finally:
        prof.disable()
    t4 = time.perf_counter()
    stats = pstats.Stats(prof)
    result = RunnerProfile(trigger, records, phase, batches, t2 - t1, t1 - t0, payload,
                           _top(stats, 3, 25), _top(stats, 2, 25), t4 - t3, problems=problems)
    # 4. the batch reader's executor side in this process: read() over every planned slice, timed, then profiled
    result.batch_read_s, got = batch_read(broker.bootstrap, topic, None)
    if got != records:
        problems.append(f"batch read() gave {got:,} rows, expected {records:,}")
    prof = cProfile.Profile()
    batch_read(broker.bootstrap, topic, prof)
    result.batch_read_top = _top(pstats.Stats(prof), 2, 15)
    return result


def batch_read(bootstrap: str, topic: str, prof: cProfile.Profile | None) -> tuple[float, int]:
    """QuafkaBatchReader: partitions() once, then read() of every slice (timed, optionally profiled)."""
    from quafka.spark.batch import QuafkaBatchReader
    from quafka.spark.datasource import RECORD_SCHEMA
    from quafka.spark.options import Options

    reader = QuafkaBatchReader(Options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}), RECORD_SCHEMA)
    slices = reader.partitions()
    rows = 0
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    try:
        for sl in slices:
            for item in reader.read(sl):
                rows += item.num_rows  # pyarrow.RecordBatch
    finally:
        if prof:
            prof.disable()
    return time.perf_counter() - t0, rows


# ----------------------------------------------------------------------------- report

def stream_table(rows: list[StreamResult]) -> tuple[list[str], list[list[str]]]:
    head = ["measurement", "topic partitions", "maxRecordsPerTrigger", "record locks", "rows", "rows/s (wall)",
            "rows/s (Σ triggerExecution)", "batches", "rows/batch mean / max", "median batch ms", "group drained"]
    out = []
    for r in rows:
        out.append([r.name, str(r.partitions), f"{r.trigger:,}", f"{r.locks:,}", f"{r.rows:,}", f"{r.rate_wall:,.0f}",
                    f"{r.rate_trigger:,.0f}", str(len(r.batches)),
                    f"{statistics.mean(r.batches or [0]):,.0f} / {max(r.batches or [0]):,}", f"{r.median_ms:.0f}",
                    "yes" if r.drained and r.drained == (r.records, 0) else f"no {r.drained}"])
    return head, out


CPU_ROLES = ("Spark JVM", "executors' Python workers", "runner", "broker", "benchmark process (py4j driver)",
             "planning Python workers")


def cpu_table(rows: list[StreamResult]) -> tuple[list[str], list[list[str]]]:
    """CPU µs per row by process, after each stream's first data batch."""
    head = ["measurement", "cores busy", *CPU_ROLES, "all"]
    out = []
    for r in rows:
        if not r.cpu_rows:
            continue
        us = {k: v * 1e6 / r.cpu_rows for k, v in r.cpu_s.items()}
        out.append([r.name, f"{sum(r.cpu_s.values()) / r.cpu_wall_s:.2f}", *(f"{us.get(k, 0.0):.2f}" for k in CPU_ROLES),
                    f"{sum(us.values()):.2f}"])
    return head, out


def batch_table(rows: list[BatchResult]) -> tuple[list[str], list[list[str]]]:
    head = ["measurement", "topic partitions", "Spark partitions", "rows", "rows/s best", "rows/s median", "runs (s)"]
    return head, [[r.name, str(r.partitions), str(r.slices), f"{r.records:,}", f"{r.best:,.0f}", f"{r.median:,.0f}",
                   ", ".join(f"{t:.2f}" for t in r.times_s)] for r in rows]


def markdown(head: list[str], rows: list[list[str]]) -> str:
    return markdown_grid(head, rows)


def text(head: list[str], rows: list[list[str]]) -> str:
    return text_grid(head, rows, rule=False)


def runner_text(p: RunnerProfile, top: int = 25, md: bool = False) -> str:
    total = sum(p.phase_s.values())
    lines = []
    head = ["phase", "s", "µs/record", "% of runner"]
    rows = [[k, f"{v:.3f}", f"{p.us(v):.2f}", f"{v / total * 100:.0f}"] for k, v in p.phase_s.items()]
    rows.append(["runner total", f"{total:.3f}", f"{p.us(total):.2f}", "100"])
    rows.append(["executor: unpickle partitions", f"{p.unpickle_s:.3f}", f"{p.us(p.unpickle_s):.2f}", ""])
    rows.append(["executor: iterate read()", f"{p.read_s:.3f}", f"{p.us(p.read_s):.2f}", ""])
    rows.append(["batch reader: read() of every slice", f"{p.batch_read_s:.3f}", f"{p.us(p.batch_read_s):.2f}", ""])
    lines.append((markdown if md else text)(head, rows))
    lines.append("")
    lines.append(f"{len(p.batches)} batches, rows per batch mean {statistics.mean(p.batches):,.0f}, max "
                 f"{max(p.batches):,}; runner alone {p.records / total:,.0f} records/s; pickled partitions "
                 f"{p.payload_bytes / p.records:.0f} B/record; the profiled run took {p.profiled_s:.1f} s.")
    for title, stats in (("cumulative", p.stats_cum), ("own time (tottime)", p.stats_tot)):
        lines.append("")
        lines.append(f"Top {top} by {title} (profiled run, µs/record = time / {p.records:,} records):")
        lines.append("")
        h = ["function", "calls", "own s", "cumulative s", "µs/record"]
        key = 3 if title == "cumulative" else 2
        r = [[f"`{f}`" if md else f, f"{nc:,}", f"{tt:.3f}", f"{ct:.3f}", f"{(ct if key == 3 else tt) / p.records * 1e6:.2f}"]
             for f, nc, tt, ct in stats[:top]]
        lines.append((markdown if md else text)(h, r))
    if p.batch_read_top:
        lines.append("")
        lines.append(f"Batch reader `read()` in-process ({p.records:,} records, "
                     f"{p.records / p.batch_read_s:,.0f} rows/s unprofiled), top 15 by own time under cProfile:")
        lines.append("")
        h = ["function", "calls", "own s", "cumulative s", "own µs/record"]
        r = [[f"`{f}`" if md else f, f"{nc:,}", f"{tt:.3f}", f"{ct:.3f}", f"{tt / p.records * 1e6:.2f}"]
             for f, nc, tt, ct in p.batch_read_top]
        lines.append((markdown if md else text)(h, r))
    return "\n".join(lines)


def _us(r: StreamResult, role: str) -> float:
    return r.cpu_s.get(role, 0.0) * 1e6 / r.cpu_rows if r.cpu_rows else 0.0


def analysis(streams: list[StreamResult], batches: list[BatchResult], prof: RunnerProfile | None,
             warmups: int = 0) -> str:
    """The analysis paragraphs, every number taken from this run's results."""
    parts = []

    def per_batch(r: StreamResult, key: str) -> float:
        return r.phases_ms.get(key, 0) / len(r.batches) if r.batches else 0.0

    def mean_rows(r: StreamResult) -> float:
        return statistics.mean(r.batches) if r.batches else 0.0

    tagged = {r.tag: r for r in streams if r.tag}
    wide, first, fetched, tuned = (tagged.get(t) for t in ("steady", "first", "executorFetch", "checkpoint"))
    narrow = {(r.trigger, r.locks): r for r in streams if r.partitions == 1}

    def logs(r: StreamResult) -> float:
        return per_batch(r, "walCommit") + per_batch(r, "commitOffsets")

    if wide:
        best = max((r for r in (wide, tuned) if r), key=lambda r: r.rate_wall)
        verdict = ("meets it with Spark's defaults" if wide.rate_wall >= GOAL_ROWS_PER_S else
                   "meets it with the checkpoint setting below, misses it with Spark's defaults"
                   if best.rate_wall >= GOAL_ROWS_PER_S else "misses it")
        parts.append(
            f"**Goal (≥ {GOAL_ROWS_PER_S:,} rows/s at 100k records per trigger on local[2]): {verdict}** — "
            f"{wide.rate_wall:,.0f} rows/s wall ({wide.rate_trigger:,.0f} over the summed triggerExecution) with "
            f"Spark's defaults"
            + (f" and {tuned.rate_wall:,.0f} rows/s with `{CHECKPOINT_MANAGER_LABEL}`" if tuned else "")
            + f", on a {wide.partitions}-partition topic of {wide.records:,} records (round robin) with the group's "
            f"share.partition.max.record.locks at {wide.locks:,}, the only set-up in which a trigger can hold 100k "
            f"records (see below), in the steady state of a long-running query (after the same query {warmups} "
            f"times in the JVM, unmeasured). "
            f"Micro-batches held {mean_rows(wide):,.0f} rows on average (max {max(wide.batches):,}); per batch "
            f"Spark spent {per_batch(wide, 'latestOffset'):.0f} ms in latestOffset (the runner ACCEPTs the "
            f"previous batch, which Spark has just written to its commit log, and polls once: `poll_batches`), "
            f"{per_batch(wide, 'addBatch'):.0f} ms running the tasks (executors decoding the record batches into "
            f"Arrow columns and handing them to the JVM), {logs(wide):.0f} ms writing the offset and commit logs "
            f"and {per_batch(wide, 'queryPlanning'):.0f} ms planning (median batch {wide.median_ms:.0f} ms).")
    if wide and tuned:
        parts.append(
            f"**Spark's checkpoint files cost {logs(wide):.0f} ms a batch with its defaults.** pyspark ships no "
            f"native Hadoop library, so Hadoop's local file system forks a `chmod` for every file it creates and a "
            f"`readlink` for every rename (jstack of the stream execution thread: `RawLocalFileSystem.setPermission` "
            f"→ `Shell.execCommand`); Spark's default `FileContextBasedCheckpointFileManager` creates files with a "
            f"permission. The same query with `spark.sql.streaming.checkpointFileManagerClass` set to Spark's own "
            f"`FileSystemBasedCheckpointFileManager` spent {logs(tuned):.0f} ms a batch on them and ran at "
            f"{tuned.rate_wall:,.0f} rows/s ({tuned.rate_wall / wide.rate_wall:.2f}×; median batch "
            f"{tuned.median_ms:.0f} ms). Spark's JVM-only `rate` source shows the same 60–70 ms per log write, so "
            f"this is no cost of the quafka source; docs/spark.md gives the setting for a checkpoint on a local "
            f"disk.")
    if wide and first:
        parts.append(
            f"**The JVM keeps getting faster.** The first run of this query (the JVM had run only the rows above "
            f"it) ran at {first.rate_wall:,.0f} rows/s: the JIT compiles Spark's per-batch planning, codegen and Arrow "
            f"paths only after dozens of micro-batches (`-Xlog:jit+compilation`: 100–300 compilations a second "
            f"still after a million rows; the driver JVM used "
            f"{_us(first, 'Spark JVM'):.1f} µs of CPU per row then, {_us(wide, 'Spark JVM'):.1f} in the steady state).")
    if wide and fetched:
        parts.append(
            f"**executorFetch** (a cluster's default: the tasks read each batch's ranges from the broker by offset "
            f"instead of getting the bytes from the runner): {fetched.rate_wall:,.0f} rows/s wall on the same "
            f"topic, {fetched.rate_wall / wide.rate_wall:.2f}× the runner-fed row on local[2], where the broker "
            f"then serves every record twice on the same 2 cores ({per_batch(fetched, 'latestOffset'):.0f} ms "
            f"latestOffset, {per_batch(fetched, 'addBatch'):.0f} ms addBatch per batch).")
    small = narrow.get((100_000, DEFAULT_LOCKS)) or narrow.get((10_000, DEFAULT_LOCKS))
    if small:
        parts.append(
            f"**The in-flight cap bounds a micro-batch.** A share partition holds at most "
            f"share.partition.max.record.locks records in flight (default {DEFAULT_LOCKS:,}; a broker allows at most "
            f"{WIDE_LOCKS:,}), acquisition stops at the cap after finishing the record batch it is in, and in explicit "
            f"mode the runner polls again only after Spark committed the previous micro-batch and it was ACCEPTed. "
            f"So on a 1-partition topic a micro-batch holds at most the cap plus the rest of the record batch the "
            f"cap falls in (the producer's batches here hold a few thousand records), whatever maxRecordsPerTrigger "
            f"says: "
            f"with the default cap batches held {mean_rows(small):,.0f} rows on average (max {max(small.batches):,}) "
            f"and the source ran at {small.rate_wall:,.0f} rows/s"
            + "".join(f"; with {r.locks:,} locks, {mean_rows(r):,.0f} rows per batch and {r.rate_wall:,.0f} rows/s"
                      for (t, locks), r in narrow.items() if locks != DEFAULT_LOCKS)
            + f". Spark's fixed cost per micro-batch (median {small.median_ms:.0f} ms here) then sets the rate. "
            f"Records per trigger scale with partitions × cap, which is why the goal row uses "
            f"{wide.partitions if wide else WIDE_PARTITIONS} partitions.")
    if prof:
        total = sum(prof.phase_s.values())
        parts.append(
            f"**Where the time goes.** The runner decodes nothing: `poll_batches` hands it the record bytes and the "
            f"acquired ranges, it acknowledges by range and fans the batches out cut at batch boundaries — "
            f"{prof.us(total):.2f} µs per record in all ({prof.records / total:,.0f} records/s; "
            + ", ".join(f"{k} {prof.us(v):.2f}" for k, v in prof.phase_s.items())
            + f" µs/record; {prof.payload_bytes / prof.records:.0f} B per record pickled into the partitions). "
            f"The executors' decoding is the per-record cost that remains: unpickling and `read()` (record batches "
            f"into Arrow columns, `quafka/spark/record_columns.py`) take {prof.us(prof.unpickle_s + prof.read_s):.2f} "
            f"µs per record in one process, spread over the {NUM_PARTITIONS} tasks of a batch.")
    if batches:
        parts.append(
            "The batch reader (plain Fetch by offset, one Spark partition per topic partition or slice, Arrow "
            "batches per Fetch response) read "
            + "; ".join(f"{r.records:,} rows from {r.partitions} partition(s) at {r.best:,.0f} rows/s best "
                        f"({r.median:,.0f} median)" for r in batches)
            + (f"; `read()` alone in one process gives {prof.records / prof.batch_read_s:,.0f} rows/s"
               if prof and prof.batch_read_s else "") + ".")
    parts.append(
        "For comparison, spark-notes §5 measured synthetic Python sources on the same kind of machine at 47–70k "
        "rows/s with 10k-row batches and 200–280k rows/s with 100k-row batches (memory sink; 340–445k at 100k "
        "with the noop sink), with a fixed cost of about 70–170 ms per micro-batch. Numbers on this 2-core "
        "machine vary by ±30% from run to run.")
    return "\n\n".join(parts)


def section(streams, batches, prof, info, args, elapsed_s: float) -> str:
    command = ".venv/bin/python benchmarks/spark.py " + " ".join(args.argv)
    info_lines = "\n".join(f"| {k} | {v} |" for k, v in info.items())
    import pyspark

    info_lines += f"\n| PySpark | {pyspark.__version__} (master local[2]) |"
    sh, sr = stream_table(streams)
    bh, br = batch_table(batches)
    prof_text = ""
    if prof is not None:
        prof_text = f"""
### Streaming source runner profile (spark)

`QuafkaShareStreamReader` driven in the benchmark process as Spark's runner drives it
(`initialOffset`, then per micro-batch `latestOffset(start, ReadMaxRows({prof.trigger:,}))`, `partitions`,
`pickle.dumps` of each partition, then `commit` of the previous batch's end, as Spark commits it once the next batch is planned), {prof.records:,} records, fresh group with
{"the default record locks" if not args.wide_locks else f"share.partition.max.record.locks={args.wide_locks:,}"}{f" on the {WIDE_PARTITIONS}-partition topic" if args.wide_locks else ""}. `latestOffset` is
`acknowledge_range` ACCEPT per acquired range of the previous batch plus `commit_sync`, then one `poll_batches()`
of the share consumer; `partitions` cuts the undecoded batches into the tasks' pieces; `commit` finds
nothing left to ACCEPT. The executor rows: unpickling the partitions and iterating `read()` over them
(decoding the record batches into columns and building the Arrow batches). Then the same run again under cProfile (which slows every Python call:
read the shares, not the absolute times).

{runner_text(prof, top=15, md=True)}
"""
    return f"""{BEGIN_MARK}
# Spark: `format("quafka")` streaming source and batch reader

Generated on {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')} by `{command.strip()}` (the run took {elapsed_s:.0f} s).
This section is rewritten by `benchmarks/spark.py --update-docs`. Reproduce from the repository root with:

<!-- snippet: skip: a measurement that takes minutes and rewrites this file; run by hand to refresh the tables -->
```sh
.venv/bin/python benchmarks/spark.py --profile-runner --update-docs   # this section
.venv/bin/python benchmarks/spark.py --quick                          # smoke run, prints only
```

## What is measured (spark)

- The broker is `python -m quafka broker` in a child process (fresh temporary `log.dirs`, free
  loopback port; `group.share.max.partition.max.record.locks={WIDE_LOCKS if args.wide_locks else 4000}`, otherwise its defaults). One
  confluent `Producer` writes {args.records:,} records of {RECORD_SIZE} B (no key) to a 1-partition topic
  and the same number to a 4-partition topic{f", and {args.wide_records:,} to a {WIDE_PARTITIONS}-partition topic" if args.wide_locks else ""}.
  The multi-partition topics get record i in partition i mod n ({args.spread}; `--spread sticky` uses
  librdkafka's sticky partitioner, whose uneven partitions leave the last micro-batches small).
- Spark runs in the benchmark process: `local[2]`, `spark.ui.enabled=false`,
  `spark.sql.shuffle.partitions=2`, `SPARK_LOCAL_IP=127.0.0.1`, log level ERROR. A warm-up query
  ({WARMUP_RECORDS:,} records, its own topic and group) and a warm-up batch read run first, so Python
  worker start-up is not measured.
- **Streaming**: `spark.readStream.format("quafka")` with `subscribe`, `share.group` (a fresh group per
  run, `share.auto.offset.reset=earliest`, `share.assignment.interval.ms=0`), `maxRecordsPerTrigger`,
  `numPartitions=2`, into `writeStream.format("noop")` with the default trigger, until the
  progress events (polled: `query.lastProgress`, and `recentProgress` for the complete list — a Python
  `StreamingQueryListener` cost the driver JVM a fifth of a core) count every record of the topic; then the script
  waits until the group's start offset is at the end of the topic with lag 0 (Admin
  ListShareGroupOffsets) and stops the query. **rows/s (wall)** = rows / (end of the last data
  batch − start of the first, from the progress timestamps and `triggerExecution`);
  **rows/s (Σ triggerExecution)** = rows / the summed `triggerExecution` of the data batches (the
  measure of spark-notes §5). One run each. "record locks" is the group's
  `share.partition.max.record.locks`, the most records the share partition keeps in flight.
- The 100k-per-trigger query runs once (its own row, "first run"), then {args.wide_warmup} more times
  unmeasured, then the measured rows: with Spark's defaults, with `executorFetch=true`, and with
  `{CHECKPOINT_MANAGER_LABEL}` (`spark.sql.streaming.checkpointFileManagerClass` set to
  `{CHECKPOINT_MANAGER_CONF["spark.sql.streaming.checkpointFileManagerClass"]}` for that query).
- **CPU per row**: utime + stime of the benchmark process and every descendant (/proc, sampled every
  0.2 s so that processes that end are counted), by role, from the end of a query's first data batch to its
  last row; "cores busy" is their sum over that wall time (2 cores: 2.00).
- **Batch reader**: `spark.read.format("quafka")` (`subscribe` only: earliest to latest) `.load()`
  `.write.format("noop").mode("overwrite").save()`, timed around `save()`, {args.repeat} runs;
  **best** and **median** rows/s.

## Machine (spark)

| | |
|---|---|
{info_lines}

## Results (spark)

Streaming source into the noop sink:

{markdown(sh, sr)}

Mean milliseconds per data batch in each phase of Spark's micro-batch (`durationMs` of the
progress events; `latestOffset` is the runner's `latestOffset` call — the ACCEPT of the previous batch,
`commit_sync`, then one `poll_batches()` — and `addBatch` runs the tasks, including the planner and executor Python workers):

{markdown(*phase_table(streams))}

CPU per row by process, after each query's first data batch:

{markdown(*cpu_table(streams))}

Batch reader into the noop sink:

{markdown(bh, br)}

## Analysis (spark)

{analysis(streams, batches, prof, args.wide_warmup)}
{prof_text}{END_MARK}
"""


# ----------------------------------------------------------------------------- main


# ----------------------------------------------------------------------------- standalone cluster (--cluster)

CLUSTER_PARTITIONS = 4      # topic partitions of the --cluster topic
CLUSTER_TRIGGER = 20_000    # maxRecordsPerTrigger on the cluster (4 partitions x 10,000 locks leave room)
CLUSTER_WORKERS = (1, 2)    # workers of 1 core each, measured one after the other


def cluster_session(master_url: str, workers: int):
    """A SparkSession in this process whose executors run on the standalone cluster `master_url`
    (1 core each, at most `workers` of them)."""
    from pyspark.sql import SparkSession
    from support.spark_cluster import DRIVER_CONF

    builder = SparkSession.builder.master(master_url).appName(f"quafka-bench-spark-cluster-{workers}w")
    for key, value in DRIVER_CONF.items():
        builder = builder.config(key, value)
    spark = (builder.config("spark.cores.max", str(workers))
             .config("spark.sql.streaming.numRecentProgressUpdates", "100000").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def wait_for_executors(spark, count: int, deadline_s: float) -> None:
    """Until `count` executors have registered with the driver (so no measurement includes an
    executor's start-up): the driver's status tracker lists them (and the driver itself)."""
    deadline = time.monotonic() + deadline_s
    while len(spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()) < count + 1:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {count} executors registered after {deadline_s:.0f} s")
        time.sleep(0.2)


def run_on_cluster(workers: int, broker, admin, topic: str, warm: str, args, work_dir: str
                   ) -> tuple[StreamResult, BatchResult]:
    """The streaming source (into noop) and the batch reader over `topic` on a fresh standalone
    cluster of `workers` workers (tests/support/spark_cluster.py), after a warm-up of each."""
    from support.spark_cluster import SparkCluster

    with SparkCluster(workers=workers) as cluster:
        print(f"  {workers} worker(s) ALIVE on {cluster.master_url} in {cluster.started_s:.1f} s", flush=True)
        spark = cluster_session(cluster.master_url, workers)
        try:
            wait_for_executors(spark, workers, args.deadline)
            collector = ProgressCollector()
            run_stream(spark, collector, broker, admin, warm, WARMUP_RECORDS, 1000, None, work_dir, args.deadline,
                       f"warm-up stream, {workers} worker(s)")
            run_batch(spark, broker, warm, WARMUP_RECORDS, 1, 1, f"warm-up batch, {workers} worker(s)")
            stream = run_stream(spark, collector, broker, admin, topic, args.records, CLUSTER_TRIGGER, WIDE_LOCKS,
                                work_dir, args.deadline, f"cluster stream, {workers} worker(s)",
                                partitions=CLUSTER_PARTITIONS)
            batch = run_batch(spark, broker, topic, args.records, CLUSTER_PARTITIONS, args.repeat,
                              f"cluster batch reader, {workers} worker(s)")
        finally:
            spark.stop()
    return stream, batch


def cluster_table(streams: list[StreamResult], batches: list[BatchResult]) -> tuple[list[str], list[list[str]]]:
    """rows/s per worker count, side by side, and the ratio of the last to the first."""
    head = ["measurement", *(f"{w} worker{'s' if w > 1 else ''} rows/s" for w in CLUSTER_WORKERS),
            f"{CLUSTER_WORKERS[-1]} / {CLUSTER_WORKERS[0]}"]
    rows = []
    for name, rates in (("streaming source (wall)", [r.rate_wall for r in streams]),
                        ("streaming source (Σ triggerExecution)", [r.rate_trigger for r in streams]),
                        ("batch reader (best)", [r.best for r in batches])):
        ratio = f"{rates[-1] / rates[0]:.2f}" if rates and rates[0] else "-"
        rows.append([name, *(f"{v:,.0f}" for v in rates), ratio])
    return head, rows


def cluster_main(args) -> int:
    """--cluster: the same records streamed and batch-read on a standalone cluster of 1 worker, then
    of 2 workers (1 core each; master and workers from pyspark's spark-class on loopback)."""
    sys.path.insert(0, str(REPO / "tests"))  # support.spark_cluster
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    t_start = time.monotonic()
    overrides = [f"group.share.max.partition.max.record.locks={WIDE_LOCKS}"]
    run = BrokerRun(lambda work_dir: ShareBroker(work_dir, overrides=overrides), "quafka-bench-spark-cluster-")
    streams: list[StreamResult] = []
    batches: list[BatchResult] = []
    try:
        run.start()
        warm, topic = "bench-spark-cluster-warmup", f"bench-spark-cluster-{CLUSTER_PARTITIONS}p"
        produce_partitioned(run.broker, run.admin, warm, WARMUP_RECORDS, 1, args)
        produce_partitioned(run.broker, run.admin, topic, args.records, CLUSTER_PARTITIONS, args)
        for workers in CLUSTER_WORKERS:
            print(f"standalone cluster with {workers} worker(s) ...", flush=True)
            stream, batch = run_on_cluster(workers, run.broker, run.admin, topic, warm, args, run.work_dir)
            streams.append(stream)
            batches.append(batch)
    except KeyboardInterrupt:
        return interrupted()
    finally:
        run.close()
    elapsed = time.monotonic() - t_start
    print_blocks(text(*stream_table(streams)), text(*phase_table(streams)), text(*cpu_table(streams)),
                 text(*batch_table(batches)), text(*cluster_table(streams, batches)))
    problems = [f"{r.name}: {p}" for r in [*streams, *batches] for p in r.problems]
    return finish(problems, elapsed)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = arg_parser(__doc__)
    ap.add_argument("--records", type=int, default=None, help="records per measurement (default 200,000; --quick 20,000)")
    ap.add_argument("--repeat", type=int, default=None, help="batch-reader runs per topic (default 3; --quick 1)")
    ap.add_argument("--wide-locks", type=int, default=None,
                    help=f"also stream with the group's share.partition.max.record.locks at this value (default "
                         f"{WIDE_LOCKS:,}; 0 or --quick: no such rows)")
    ap.add_argument("--wide-records", type=int, default=None,
                    help=f"records of the {WIDE_PARTITIONS}-partition topic streamed at 100k per trigger "
                         f"(default 1,000,000; --quick 100,000)")
    ap.add_argument("--profile-runner", action="store_true",
                    help="also drive QuafkaShareStreamReader in this process and profile it")
    ap.add_argument("--profile-trigger", type=int, default=100_000, help="maxRecordsPerTrigger of the runner profile")
    ap.add_argument("--wide-warmup", type=int, default=None,
                    help="unmeasured runs of the 100k-per-trigger stream before its measured rows (default 3; "
                         "--quick 0), after the one reported as the first run in the JVM: Spark's per-batch "
                         "planning and codegen paths are compiled by the JIT only after dozens of batches")
    ap.add_argument("--spread", choices=("even", "sticky"), default="even",
                    help="how the multi-partition topics are produced: even (record i to partition i mod n, the "
                         "default) or sticky (librdkafka's default sticky partitioner, which fills a few partitions "
                         "at a time: the last micro-batches then drain the fullest partitions 10,000 at a time)")
    ap.add_argument("--quick", action="store_true", help="a small smoke run")
    ap.add_argument("--only-wide", action="store_true",
                    help="only the 10-partition streaming rows (100k per trigger): no 1-partition rows, no batch reader")
    ap.add_argument("--cluster", action="store_true",
                    help="instead: the streaming source and the batch reader on a Spark standalone cluster of 1, "
                         "then 2 workers (1 core each), side by side")
    ap.add_argument("--update-docs", action="store_true", help=f"rewrite the spark section of {DOC_PATH.relative_to(REPO)}")
    ap.add_argument("--doc", default=str(DOC_PATH), help="the markdown file --update-docs rewrites")
    ap.add_argument("--deadline", type=float, default=300.0, help="seconds one measurement may take before it fails")
    ap.add_argument("--producer-batch", type=int, default=None, help=argparse.SUPPRESS)  # for share.produce_topic
    args = ap.parse_args(argv)
    args.argv = argv
    args.records = args.records or (20_000 if args.quick else 200_000)
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.wide_records = args.wide_records or (100_000 if args.quick else 1_000_000)
    if args.wide_warmup is None:
        args.wide_warmup = 0 if args.quick else 3
    if args.wide_locks is None:
        args.wide_locks = 0 if args.quick else WIDE_LOCKS
    n = args.records
    if args.cluster:
        return cluster_main(args)

    t_start = time.monotonic()
    overrides = [f"group.share.max.partition.max.record.locks={args.wide_locks}"] if args.wide_locks else []
    run = BrokerRun(lambda work_dir: ShareBroker(work_dir, overrides=overrides), "quafka-bench-spark-")
    broker, work_dir = run.broker, run.work_dir
    spark = None
    streams: list[StreamResult] = []
    batches: list[BatchResult] = []
    prof: RunnerProfile | None = None
    try:
        run.start()
        warm, topic, topic4 = "bench-spark-warmup", "bench-spark-1p", "bench-spark-4p"
        wide_topic = f"bench-spark-{WIDE_PARTITIONS}p"
        produce_partitioned(broker, run.admin, warm, WARMUP_RECORDS, 1, args)
        if not args.only_wide:
            produce_partitioned(broker, run.admin, topic, n, 1, args)
            produce_partitioned(broker, run.admin, topic4, n, 4, args)
        if args.wide_locks:
            produce_partitioned(broker, run.admin, wide_topic, args.wide_records, WIDE_PARTITIONS, args)

        print("starting Spark ...", flush=True)
        spark = spark_session()
        collector = ProgressCollector()
        print("warm-up ...", flush=True)
        run_stream(spark, collector, broker, run.admin, warm, WARMUP_RECORDS, 1000, None, work_dir, args.deadline,
                   "warm-up stream")
        run_batch(spark, broker, warm, WARMUP_RECORDS, 1, 1, "warm-up batch")

        print("streaming source -> noop sink ...", flush=True)
        for trigger in () if args.only_wide else TRIGGER_SIZES:
            streams.append(run_stream(spark, collector, broker, run.admin, topic, n, trigger, None, work_dir,
                                      args.deadline, f"stream {trigger // 1000}k/trigger"))
        if args.wide_locks:
            if not args.only_wide:
                streams.append(run_stream(spark, collector, broker, run.admin, topic, n, 10_000, args.wide_locks,
                                          work_dir, args.deadline, f"stream 10k/trigger, {args.wide_locks // 1000}k locks"))
            wide = f"stream 100k/trigger, {args.wide_locks // 1000}k locks, {WIDE_PARTITIONS} partitions"
            def wide_row(label: str, tag: str, options: dict[str, str] | None = None,
                         conf: dict[str, str] | None = None) -> StreamResult:
                for key, value in (conf or {}).items():  # read when the query starts
                    spark.conf.set(key, value)
                try:
                    res = run_stream(spark, collector, broker, run.admin, wide_topic, args.wide_records, 100_000,
                                     args.wide_locks, work_dir, args.deadline, label, partitions=WIDE_PARTITIONS,
                                     options=options)
                finally:
                    for key in conf or {}:
                        spark.conf.unset(key)
                res.tag = tag
                return res

            # a fresh group each time, so every run reads the whole topic: the first ...
            streams.append(wide_row(f"{wide}, first run", "first"))
            # ... then the same shape until the JIT has compiled Spark's per-batch paths (planning,
            # codegen, Arrow): a long-running query's steady state, which the rows below measure
            for i in range(args.wide_warmup):
                wide_row(f"warm-up {i + 1}/{args.wide_warmup}: {wide}", "warm-up")
            streams.append(wide_row(wide, "steady"))
            # the executors reading each batch by offset (what a cluster does by default)
            streams.append(wide_row(f"{wide}, executorFetch", "executorFetch", options={"executorFetch": "true"}))
            # Spark's checkpoint files written through Hadoop's FileSystem API (docs/spark.md)
            streams.append(wide_row(f"{wide}, {CHECKPOINT_MANAGER_LABEL}", "checkpoint", conf=CHECKPOINT_MANAGER_CONF))
        if not args.only_wide:
            print("batch reader -> noop sink ...", flush=True)
            batches.append(run_batch(spark, broker, topic, n, 1, args.repeat, "batch reader, 1 partition"))
            batches.append(run_batch(spark, broker, topic4, n, 4, args.repeat, "batch reader, 4 partitions"))
        spark.stop()
        spark = None

        if args.profile_runner:
            print(f"runner profile (maxRecordsPerTrigger {args.profile_trigger:,}) ...", flush=True)
            if args.wide_locks:  # 100k-record batches need the wide topic's in-flight room
                prof = profile_runner(broker, run.admin, wide_topic, args.wide_records, args.profile_trigger,
                                      args.wide_locks, args.deadline)
            else:
                prof = profile_runner(broker, run.admin, topic, n, args.profile_trigger, None, args.deadline)
        for t in (warm,) + (() if args.only_wide else (topic, topic4)) + ((wide_topic,) if args.wide_locks else ()):
            delete_topic(run.admin, t)
    except KeyboardInterrupt:
        return interrupted()
    finally:
        if spark is not None:
            spark.stop()
        run.close()

    elapsed = time.monotonic() - t_start
    print_blocks(text(*stream_table(streams)), text(*phase_table(streams)), text(*cpu_table(streams)),
                 text(*batch_table(batches)),
                 None if prof is None else runner_text(prof, top=25), analysis(streams, batches, prof))
    problems = [f"{r.name}: {p}" for r in [*streams, *batches] for p in r.problems]
    if prof is not None:
        problems += [f"runner profile: {p}" for p in prof.problems]
    if args.update_docs:
        replace_marked_section(section(streams, batches, prof, machine_info(), args, elapsed), Path(args.doc),
                               BEGIN_MARK, END_MARK)
        print(f"\nwrote the spark section of {args.doc}")
    return finish(problems, elapsed)


if __name__ == "__main__":
    sys.exit(main())
