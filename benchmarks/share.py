#!/usr/bin/env python3
"""Share-group (KIP-932) consume throughput of a quafka broker, measured with confluent-kafka.

The script starts `python -m quafka broker` in a child process (fresh temporary log dir, free
port; the same helpers as benchmarks/produce_fetch.py), pre-produces N records of 100 B to a
1-partition topic with one confluent Producer, and then, for every measurement, lets C
confluent-kafka `ShareConsumer`s (C = 1, 4, 16, each in its own spawned process) of a fresh share
group (share.auto.offset.reset=earliest, set with the AdminClient) consume and acknowledge all N
records:

- implicit: `share.acknowledgement.mode=implicit`; the records of a poll are accepted with the
  next poll (or the final `commit_sync()`);
- explicit: `share.acknowledgement.mode=explicit` and `acknowledge(msg)` (ACCEPT) per record.

It measures records/s delivered and acknowledged, broker CPU (utime+stime from /proc/<pid>/stat)
per record, the consumers' own CPU, and the rest of the machine, checks that every record was
delivered exactly once and that nothing is left in the share partition, optionally profiles the
broker (cProfile during the consume phase), prints a table and rewrites its own section of
docs/benchmarks.md (between `<!-- share:begin -->` and `<!-- share:end -->`).

    .venv/bin/python benchmarks/share.py             # full run + broker profile (~2 min on a quiet 2-core machine)
    .venv/bin/python benchmarks/share.py --quick     # smoke run (< 30 s), no doc written
    .venv/bin/python benchmarks/share.py --job-queue # the job-queue measurements (benchmarks/share_jobs.py)

See benchmarks/README.md for the options.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import multiprocessing as mp
import os
import queue as _queue
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (  # noqa: E402
    DOC_PATH,
    BrokerRun,
    CpuPerRecord,
    _cpu_self,
    CLK_TCK,
    add_quick_profile_args,
    admin_client,
    arg_parser,
    create_topic,
    delete_topic,
    finish,
    interrupted,
    machine_busy_seconds,
    machine_info,
    machine_times,
    markdown_grid,
    print_blocks,
    process_cpu_seconds,
    replace_marked_section,
    resolve_quick_profile_args,
    stop_procs,
    text_grid,
    worker_reports,
)

from produce_fetch import (  # noqa: E402
    PRODUCER_TUNING,
    Broker,
    ProfileSummary,
    produce_worker,
    profile_or_none,
    read_profile,
    run_clients,
)
from produce_fetch import profiled_broker as _profiled_broker  # noqa: E402

BEGIN_MARK = "<!-- share:begin -->"
END_MARK = "<!-- share:end -->"
GOAL_RECORDS_PER_S = 500_000
GOAL_CONSUMERS = 4
RECORD_SIZE = 100
POLL_TIMEOUT_S = 0.1   # short, so that idle consumers notice the end quickly

# Share consumer settings beyond bootstrap.servers, group.id and share.acknowledgement.mode (set
# per measurement): none, librdkafka's defaults (--max-poll-records sets max.poll.records).
SHARE_CONSUMER_TUNING: dict[str, object] = {}
# The extra rows with a wider in-flight window: share.partition.max.record.locks of their groups.
# The broker's cap on it (group.share.max.partition.max.record.locks, default 4000) is raised to
# match; groups that do not set it keep the default of 2000.
WIDE_WINDOW_LOCKS = 10_000


# ----------------------------------------------------------------------------- broker

class ShareBroker(Broker):
    """produce_fetch's Broker, whose profiled mode runs this script's `--profiled-broker`: cProfile
    with a CPU-time clock. cProfile's default clock is wall time, and on a 2-core machine shared
    with the consumers a `send()` to loopback often wakes the receiver and loses the core to it:
    wall time would charge that wait to the broker's send."""

    SCRIPT = Path(__file__).resolve()


def profiled_broker(out_path: str, broker_args: list[str]) -> int:
    """`--profiled-broker OUT ARGS...`: `quafka broker ARGS...` under cProfile (CPU-time clock),
    switched on by SIGUSR1 and off by SIGUSR2, written out when the broker exits."""
    return _profiled_broker(out_path, broker_args, time.process_time)


# ----------------------------------------------------------------------------- client worker
# Top-level function: it runs in spawned processes.

def share_worker(bootstrap: str, topic: str, group: str, mode: str, expected: int, conf_extra: dict,
                 counter, go, out: mp.Queue, deadline_s: float) -> None:
    """One ShareConsumer: subscribe (the parent waits until the whole group is assigned), then,
    once released, poll until the group as a whole has received `expected` records.

    librdkafka's share consumer sends ShareFetch only from poll(), so subscribing early joins the
    group without acquiring anything. `counter` (shared by the group's consumers) counts the
    records they received. Every record's error() is checked and its offset summed (so that the
    parent can check exactly-once delivery); in explicit mode every record is acknowledged with
    ACCEPT.
    """
    try:
        from confluent_kafka import ShareConsumer

        conf = dict(SHARE_CONSUMER_TUNING)
        conf.update(conf_extra)
        conf.update({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": mode,
                     "logger": _quiet_logger})
        consumer = ShareConsumer(conf)
        explicit = mode == "explicit"
        subscribed = time.monotonic()
        consumer.subscribe([topic])
        out.put(("ready", subscribed))
        go.wait()

        cpu0 = _cpu_self()
        t0 = time.monotonic()
        poll = consumer.poll
        acknowledge = consumer.acknowledge
        lock = counter.get_lock()
        got = 0
        offset_sum = 0
        timeline = []        # (time, records) of every poll that returned records
        acked_at = None      # when this consumer's last records were acknowledged (see below)
        pending = False      # records received and not yet acknowledged to the broker
        errors = 0
        first_error = None
        while True:
            now = time.monotonic()
            if now - t0 > deadline_s:
                break
            msgs = poll(POLL_TIMEOUT_S)
            if pending:
                # This poll carried the acknowledgements of the previous one: the broker applied
                # them when the ShareFetch arrived, i.e. at the start of the poll.
                acked_at = now
                pending = False
            n = len(msgs)
            if n:
                timeline.append((time.monotonic(), n))
                for m in msgs:
                    if m.error() is not None:
                        errors += 1
                        first_error = first_error or str(m.error())
                        n -= 1
                        continue
                    offset_sum += m.offset()
                    if explicit:
                        acknowledge(m)
                got += n
                pending = True
                with lock:
                    counter.value += n
                    total = counter.value
            else:
                total = counter.value
            if total >= expected:
                break
        consumer.commit_sync(30)  # the last poll's records (a no-op when nothing is pending)
        t1 = time.monotonic()
        if pending:
            acked_at = t1
        cpu1 = _cpu_self()
        consumer.close()
        out.put(("done", dict(start=t0, acked=acked_at, end=t1, records=got, offset_sum=offset_sum,
                              timeline=timeline, cpu=cpu1 - cpu0, errors=errors,
                              first_error=[first_error] if first_error else [])))
    except BaseException as exc:  # report, never hang the parent
        out.put(("error", f"{type(exc).__name__}: {exc}"))


class _QuietLogger:
    """librdkafka logs a "Preview" warning for every share consumer; keep the output readable."""

    def log(self, level, msg, *args, **kwargs) -> None:
        if level >= 40:  # logging.ERROR
            print(msg % args if args else msg, file=sys.stderr)


_quiet_logger = _QuietLogger()


def drain_worker(bootstrap: str, topic: str, group: str, wait_s: float, go, out: mp.Queue) -> None:
    """After a measurement: a fresh member of the group; whatever it gets was not acknowledged."""
    try:
        from confluent_kafka import ShareConsumer

        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "share.acknowledgement.mode": "implicit", "logger": _quiet_logger})
        consumer.subscribe([topic])
        out.put(("ready", time.monotonic()))
        go.wait()
        got = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < wait_s:
            got += len(consumer.poll(0.2))
        consumer.close()
        out.put(("done", dict(records=got)))
    except BaseException as exc:
        out.put(("error", f"{type(exc).__name__}: {exc}"))


# ----------------------------------------------------------------------------- group state

class GroupDescriber:
    """ShareGroupDescribe v1 over one blocking connection (confluent's AdminClient lacks it)."""

    def __init__(self, bootstrap: str) -> None:
        import socket

        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def _recv(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def describe(self, group: str):
        import io

        from kio.index import load_request_schema, load_response_schema
        from kio.serial import entity_reader, entity_writer

        req_cls = load_request_schema(77, 1)
        self.correlation_id += 1
        header_cls = req_cls.__header_schema__
        header = header_cls(request_api_key=77, request_api_version=1, correlation_id=self.correlation_id,
                            client_id="quafka-bench")
        buf = io.BytesIO()
        entity_writer(header_cls)(buf, header)
        entity_writer(req_cls)(buf, req_cls(group_ids=(group,), include_authorized_operations=False))
        frame = buf.getvalue()
        self.sock.sendall(len(frame).to_bytes(4, "big") + frame)
        resp = self._recv(int.from_bytes(self._recv(4), "big"))
        resp_cls = load_response_schema(77, 1)
        _header, used = entity_reader(resp_cls.__header_schema__)(resp, 0)
        body, _ = entity_reader(resp_cls)(resp, used)
        return body.groups[0]

    def wait_assigned(self, group: str, members: int, timeout_s: float) -> None:
        """Until `group` has `members` members, each assigned partition 0 of the topic."""
        deadline = time.monotonic() + timeout_s
        while True:
            g = self.describe(group)
            assigned = [m for m in g.members if any(0 in tp.partitions for tp in m.assignment.topic_partitions)]
            if len(g.members) == members and len(assigned) == members:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"group {group}: {len(assigned)} of {len(g.members)} members assigned, "
                                   f"{members} expected, after {timeout_s:.0f} s")
            time.sleep(0.05)


def wait_idle(pids: list[int], max_s: float = 5.0, interval_s: float = 0.3) -> None:
    """Until the processes together use under 5% of a core over `interval_s` (the consumers'
    start-up work — connections, metadata, the first heartbeats — must not fall into the
    measured window), or `max_s` passed."""
    deadline = time.monotonic() + max_s
    last = sum(process_cpu_seconds(p) for p in pids)
    while time.monotonic() < deadline:
        time.sleep(interval_s)
        now = sum(process_cpu_seconds(p) for p in pids)
        if now - last < 0.05 * interval_s + 1.0 / CLK_TCK:
            return
        last = now


def wait_quiet(limit_s: float, max_other_pct: float = 25.0) -> float:
    """Wait (up to `limit_s`) until the rest of the machine uses less than `max_other_pct` of a
    core over half a second (the broker is idle between measurements). Returns the time waited."""
    t0 = time.monotonic()
    while True:
        m0 = machine_busy_seconds()
        time.sleep(0.5)
        busy = (machine_busy_seconds() - m0) / 0.5 * 100
        waited = time.monotonic() - t0
        if busy < max_other_pct or waited >= limit_s:
            if waited > 1:
                print(f"  (waited {waited:.0f} s for other load to stop; now {busy:.0f}% of a core busy)", flush=True)
            return waited
        time.sleep(1.0)


# ----------------------------------------------------------------------------- measurement

@dataclass
class Result(CpuPerRecord):
    name: str
    mode: str
    consumers: int
    records: int
    seconds: float          # consumers released (all joined) -> last record acknowledged
    seconds_first: float    # first record received -> last record acknowledged
    join_s: float           # first subscribe() -> every member assigned the partition
    broker_cpu_s: float     # broker utime+stime from the release to the last consumer reporting
    window_s: float         # parent-measured window for the broker CPU %
    client_cpu_s: float     # sum over the consumer processes
    other_cpu_s: float      # the rest of the machine's busy time in the window (steal excluded)
    steal_s: float          # time the hypervisor took for other guests in the window
    polls: int              # polls that returned records, all consumers
    per_consumer: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def rate_first(self) -> float:
        return self.records / self.seconds_first if self.seconds_first > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.rate * RECORD_SIZE / 1e6

    @property
    def client_cpu_pct(self) -> float:
        return self.client_cpu_s / self.window_s * 100 if self.window_s > 0 else float("nan")

    @property
    def steal_pct(self) -> float:
        return self.steal_s / self.window_s * 100 if self.window_s > 0 else float("nan")

    @property
    def machine_busy_pct(self) -> float:
        """Broker, consumers, the rest and steal: how much of the cores was not idle."""
        return self.broker_cpu_pct + self.client_cpu_pct + self.other_cpu_pct + self.steal_pct

    @property
    def records_per_poll(self) -> float:
        return self.records / self.polls if self.polls else float("nan")

    @property
    def holders(self) -> int:
        """Consumers that received records."""
        return sum(1 for n in self.per_consumer if n)


def set_group_configs(admin, group: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin.incremental_alter_configs([res])[res].result(30)


def group_configs(locks: int | None) -> dict[str, str]:
    configs = {"share.auto.offset.reset": "earliest"}
    if locks:
        configs["share.partition.max.record.locks"] = str(locks)
    return configs


def consumer_conf(args) -> dict:
    return {"max.poll.records": args.max_poll_records} if args.max_poll_records else {}


def start_group(broker: Broker, group: str, consumers: int, target, args_for) -> tuple:
    """Start `consumers` spawned processes running `target(*args_for(go, out))`; each subscribes and
    reports ready; wait until the broker has assigned the partition to all of them."""
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    out = ctx.Queue()
    procs = [ctx.Process(target=target, daemon=True, args=args_for(ctx, go, out)) for _ in range(consumers)]
    try:
        for p in procs:
            p.start()
        subscribed = worker_reports(out, consumers, time.monotonic() + 60 + 2 * consumers,
                                    "consumer failed while starting")
        describer = GroupDescriber(broker.bootstrap)
        try:
            describer.wait_assigned(group, consumers, timeout_s=60)
        finally:
            describer.close()
        joined = time.monotonic() - min(subscribed)
        wait_idle([p.pid for p in procs] + [broker.proc.pid])
        return procs, go, out, joined
    except BaseException:
        stop_procs(procs)
        raise


def measure_share(broker: Broker, admin, topic: str, records: int, name: str, mode: str, consumers: int,
                  group: str, args, locks: int | None = None, profile: bool = False) -> Result:
    """One measurement; with `profile` the broker's cProfile runs from just before the release of
    the (joined) consumers to the last one reporting."""
    set_group_configs(admin, group, group_configs(locks))
    conf = consumer_conf(args)
    counter_box = []

    def args_for(ctx, go, out):
        if not counter_box:
            counter_box.append(ctx.Value("q", 0))
        return (broker.bootstrap, topic, group, mode, records, conf, counter_box[0], go, out, args.deadline)

    if args.quiet_wait > 0:
        wait_quiet(args.quiet_wait)
    procs, go, out, join_s = start_group(broker, group, consumers, share_worker, args_for)
    results: list[dict] = []
    profiling = False
    try:
        if profile:
            broker.profiler(True)
            profiling = True
        cpu0 = broker.cpu_seconds()
        m0 = machine_times()
        w0 = time.monotonic()
        go.set()
        results = worker_reports(out, consumers, time.monotonic() + args.deadline + 60, f"{name}: consumer failed")
        w1 = time.monotonic()
        cpu1 = broker.cpu_seconds()
        m1 = machine_times()
    except _queue.Empty:
        raise RuntimeError(f"{name}: consumers did not report in time (broker log:\n{broker.log_tail()})") from None
    finally:
        if profiling:
            broker.profiler(False)
        stop_procs(procs)

    got = sum(r["records"] for r in results)
    offset_sum = sum(r["offset_sum"] for r in results)
    problems = []
    if got != records:
        problems.append(f"{got:,} records delivered for {records:,} produced")
    if offset_sum != records * (records - 1) // 2:
        problems.append("the delivered offsets are not 0..N-1 exactly once (offset sum differs)")
    errors = sum(r["errors"] for r in results)
    if errors:
        problems.append(f"{errors} error messages, first: {next(e for r in results for e in r['first_error'])}")
    firsts = [r["timeline"][0][0] for r in results if r["timeline"]]
    ackeds = [r["acked"] for r in results if r["acked"] is not None]
    start = min(r["start"] for r in results)
    end = max(ackeds) if ackeds else max(r["end"] for r in results)
    client_cpu = sum(r["cpu"] for r in results)
    if args.verify:
        left = drain(broker, topic, group, args)
        if left:
            problems.append(f"{left:,} records were still available in the share group afterwards (not acknowledged)")
    return Result(
        name=name, mode=mode, consumers=consumers, records=got, seconds=end - start,
        seconds_first=end - min(firsts) if firsts else float("nan"), join_s=join_s,
        broker_cpu_s=cpu1 - cpu0, window_s=w1 - w0, client_cpu_s=client_cpu,
        other_cpu_s=max(0.0, (m1[0] - m0[0]) - (cpu1 - cpu0) - client_cpu),
        steal_s=m1[1] - m0[1],
        polls=sum(len(r["timeline"]) for r in results),
        per_consumer=sorted((r["records"] for r in results), reverse=True), problems=problems,
    )


def drain(broker: Broker, topic: str, group: str, args) -> int:
    """Records a fresh member of `group` still receives (0 when every record was acknowledged)."""
    procs, go, out, _join = start_group(broker, group, 1, drain_worker,
                                        lambda ctx, go, out: (broker.bootstrap, topic, group, args.verify_wait, go,
                                                              out))
    try:
        go.set()
        kind, payload = out.get(timeout=60 + args.verify_wait)
        if kind == "error":
            raise RuntimeError(f"verification consumer failed: {payload}")
        return payload["records"]
    except _queue.Empty:
        raise RuntimeError("the verification consumer did not report in time") from None
    finally:
        stop_procs(procs)


def produce_worker_tuned(tuning: dict, *args) -> None:
    """produce_fetch.produce_worker with PRODUCER_TUNING changed by `tuning` (in this process only)."""
    PRODUCER_TUNING.update(tuning)
    produce_worker(*args)


def producer_tuning(args) -> dict:
    tuning = dict(PRODUCER_TUNING)
    if args.producer_batch:
        tuning["batch.num.messages"] = args.producer_batch
    return tuning


def produce_topic(broker: Broker, admin, topic: str, records: int, args) -> None:
    create_topic(admin, topic, 1)
    res = run_clients(broker, f"produce {topic}", RECORD_SIZE,
                      [(produce_worker_tuned, (producer_tuning(args), broker.bootstrap, topic, records, RECORD_SIZE,
                                               "1", False))], args.deadline)
    if res.problems or res.records != records:
        raise RuntimeError(f"pre-producing {topic} failed: {res.problems}")
    print(f"  produced {records:,} records of {RECORD_SIZE} B to {topic} ({res.rate:,.0f} records/s)", flush=True)


MODE_LABELS = {"implicit": "implicit", "explicit": "explicit, ACCEPT per record"}


def make_plan(counts: list[int], records: dict[int, int], modes: list[str], locks: int | None,
              wide_locks: int, wide_counts: list[int]) -> list[dict]:
    """Every mode x consumer count with the group default window (or `locks`), then the
    `wide_counts` rows again with a `wide_locks` window."""
    plan = []
    for mode in modes:
        for c in counts:
            plan.append(dict(name=f"{MODE_LABELS[mode]}, {c} consumer{'s' if c != 1 else ''}", mode=mode,
                             consumers=c, records=records[c], locks=locks))
    if wide_locks:
        for mode in modes:
            for c in wide_counts:
                plan.append(dict(name=f"{MODE_LABELS[mode]}, {c} consumer{'s' if c != 1 else ''}, "
                                      f"{wide_locks:,} record locks", mode=mode, consumers=c, records=records[c],
                                 locks=wide_locks, wide=True))
    return plan


@dataclass
class Row:
    result: Result
    median_rate: float
    runs: int


_group_seq = [0]


def next_group(tag: str) -> str:
    _group_seq[0] += 1
    return f"bench-share-{tag}-{_group_seq[0]}"


def run_suite(broker: Broker, admin, plan: list[dict], topics: dict[int, str], repeat: int, args,
              label: str = "", profile: bool = False) -> list[Row]:
    rows = []
    for spec in plan:
        runs = []
        for rep in range(repeat):
            res = measure_share(broker, admin, topics[spec["records"]], spec["records"], spec["name"], spec["mode"],
                                spec["consumers"], next_group(f"{spec['mode']}-{spec['consumers']}"), args,
                                locks=spec.get("locks"), profile=profile)
            runs.append(res)
            print(f"  {label}{res.name} [{rep + 1}/{repeat}]: {res.rate:,.0f} records/s "
                  f"({res.rate_first:,.0f} from the first record; join {res.join_s:.1f} s), broker {res.broker_us_per_record:.2f} us/record "
                  f"({res.broker_cpu_pct:.0f}% of a core), consumers {res.client_us_per_record:.2f} us/record "
                  f"({res.client_cpu_pct:.0f}%), other {res.other_cpu_pct:.0f}%, steal "
                  f"{res.steal_pct:.0f}%, "
                  f"{res.records_per_poll:,.0f} records/poll, per consumer {res.per_consumer}"
                  + (f"  PROBLEMS: {res.problems}" if res.problems else ""), flush=True)
        rows.append(Row(max(runs, key=lambda r: r.rate), statistics.median(r.rate for r in runs), len(runs)))
    return rows


# ----------------------------------------------------------------------------- profile

def run_profile(work_dir: str, topic_records: int, args) -> tuple[ProfileSummary, list[Row]] | None:
    """The 4-consumer rows (implicit, explicit) against a broker running under cProfile."""
    prof_path = os.path.join(work_dir, "broker-share.prof")
    broker = ShareBroker(work_dir, profile_path=prof_path, overrides=broker_overrides(args))
    admin = None
    try:
        broker.start()
        admin = admin_client(broker.bootstrap)
        produce_topic(broker, admin, "bench-share-warmup", 20_000, args)
        topic = "bench-share-profiled"
        produce_topic(broker, admin, topic, topic_records, args)
        warm_up(broker, admin, args)
        plan = make_plan([GOAL_CONSUMERS], {GOAL_CONSUMERS: topic_records}, ["implicit", "explicit"],
                         args.max_record_locks, 0, [])
        rows = run_suite(broker, admin, plan, {topic_records: topic}, 1, args, label="[profiled] ", profile=True)
    finally:
        admin = None
        code = broker.stop(120)
    summary = read_profile(prof_path, code, args.profile_out)
    return None if summary is None else (summary, rows)


def warm_up(broker: Broker, admin, args) -> None:
    """One consumer of each mode over 20,000 records (not reported): lazy imports, first sessions."""
    quiet = argparse.Namespace(**{**vars(args), "verify": False, "quiet_wait": 0})
    for mode in ("implicit", "explicit"):
        measure_share(broker, admin, "bench-share-warmup", 20_000, "warm-up", mode, 1, next_group("warmup"), quiet)


def broker_overrides(args) -> list[str]:
    """--broker-override settings, plus the cap that lets the wide-window groups set their window."""
    overrides = list(args.broker_override)
    locks = max(args.wide_locks or 0, args.max_record_locks or 0)
    if locks > 4000 and not any(o.startswith("group.share.max.partition.max.record.locks=") for o in overrides):
        overrides.append(f"group.share.max.partition.max.record.locks={locks}")
    return overrides


# ----------------------------------------------------------------------------- report

COLUMNS = ["measurement", "records", "records/s", "MB/s", "records/poll", "consumers that got records",
           "join s", "broker CPU µs/record", "broker CPU %", "client CPU µs/record", "client CPU %",
           "other CPU %", "steal %"]


def table_rows(rows: list[Row]) -> list[list[str]]:
    out = []
    for row in rows:
        r = row.result
        out.append([r.name, f"{r.records:,}", f"{r.rate:,.0f}", f"{r.mb_per_s:.1f}", f"{r.records_per_poll:,.0f}",
                    f"{r.holders} of {r.consumers}", f"{r.join_s:.1f}", f"{r.broker_us_per_record:.2f}", f"{r.broker_cpu_pct:.0f}",
                    f"{r.client_us_per_record:.2f}", f"{r.client_cpu_pct:.0f}", f"{r.other_cpu_pct:.0f}",
                    f"{r.steal_pct:.0f}"])
    return out


def markdown_table(rows: list[Row]) -> str:
    return markdown_grid(COLUMNS, table_rows(rows))


def text_table(rows: list[Row]) -> str:
    return text_grid(COLUMNS, table_rows(rows))


def redis_baseline(doc: Path) -> float | None:
    """records/s of the Redis Streams section's 4-consumer COUNT 500 row in `doc`, if it has one."""
    try:
        text = doc.read_text()
    except OSError:
        return None
    section = re.search(r"<!-- redis:begin -->(.*?)<!-- redis:end -->", text, re.S)
    if section is None:
        return None
    row = re.search(rf"^\| {GOAL_CONSUMERS} \| 500 \| [0-9,]+ \| ([0-9,]+) \|", section.group(1), re.M)
    return float(row.group(1).replace(",", "")) if row else None


def _cum(prof: ProfileSummary, func: str) -> tuple[str, int, float] | None:
    for label, n, t in prof.by_cum:
        if label.endswith(f"({func})"):
            return label, n, t
    return None


def _pct_of_core(x: float) -> str:
    return f"{x:.0f}% of a core"


def analysis(rows: list[Row], profile: tuple[ProfileSummary, list[Row]] | None, args) -> str:
    res = [row.result for row in rows]
    std = {(r.mode, r.consumers): r for r in res if not r.name.endswith("record locks")}
    wide = {(r.mode, r.consumers): r for r in res if r.name.endswith("record locks")}
    cores = len(os.sched_getaffinity(0))
    default_locks = args.max_record_locks or 2000
    best = " (the fastest of {} runs)".format(args.repeat) if args.repeat > 1 else ""
    out = []

    medians = {row.result.name: row.median_rate for row in rows}
    goal = [std[(m, GOAL_CONSUMERS)] for m in ("implicit", "explicit") if (m, GOAL_CONSUMERS) in std]
    if goal:
        worst = min(goal, key=lambda r: r.rate)
        parts = " and ".join(f"{r.rate:,.0f} records/s {r.mode}" for r in goal)
        if args.repeat > 1:
            edge = [r.mode for r in goal if medians[r.name] < GOAL_RECORDS_PER_S <= r.rate]
            best = (f" (the fastest of {args.repeat} runs; the medians were "
                    + " and ".join(f"{medians[r.name]:,.0f}" for r in goal)
                    + (f", so the {' and '.join(edge)} row{'s are' if len(edge) > 1 else ' is'} at the goal's edge"
                       if edge else "") + ")")
        verdict = ("met" if worst.rate >= GOAL_RECORDS_PER_S else
                   f"**not** met: the {worst.mode} row reached {worst.rate / GOAL_RECORDS_PER_S:.0%} of it")
        wtext = ""
        wgoal = [wide[(m, GOAL_CONSUMERS)] for m in ("implicit", "explicit") if (m, GOAL_CONSUMERS) in wide]
        if wgoal:
            wtext = (f" With a {args.wide_locks:,}-record in-flight window they reached "
                     + " and ".join(f"{r.rate:,.0f} {r.mode}" for r in wgoal) + ".")
        out.append(f"**Goal: ≥ {GOAL_RECORDS_PER_S:,} records/s of 100 B consumed and acknowledged with "
                   f"{GOAL_CONSUMERS} consumers.** With the default settings {GOAL_CONSUMERS} share consumers on one "
                   f"partition reached {parts}{best}; the goal is {verdict}.{wtext}")
        redis = redis_baseline(DOC_PATH)
        if redis is not None:
            ratio = worst.rate / redis
            out.append(f"**Against Redis Streams** (DEVELOPERS.md: at least as fast as Redis Streams with batched "
                       f"XACK on the same machine, {GOAL_CONSUMERS} consumers, one partition, 100 B records): the "
                       f"Redis Streams section of this file (`benchmarks/redis_streams.py`, {GOAL_CONSUMERS} "
                       f"consumers, COUNT 500, hiredis) reached {redis:,.0f} records/s; the slower of the "
                       f"{GOAL_CONSUMERS}-consumer rows here is {ratio:.2f}× that — "
                       + ("met." if ratio >= 1 else "**not** met.") + " Run both scripts in one session: the "
                       "numbers of different machines do not compare.")

    lines = []
    for r in res:
        busy = r.machine_busy_pct
        lines.append(f"| {r.name} | {r.broker_us_per_record:.2f} | {r.broker_cpu_pct:.0f} | "
                     f"{r.client_us_per_record:.2f} | {r.client_cpu_pct:.0f} | {r.other_cpu_pct:.0f} | "
                     f"{r.steal_pct:.0f} | "
                     f"{busy:.0f} of {cores * 100} |")
    head = ("| measurement | broker µs/record | broker % | consumers µs/record | consumers % | other % | "
            "steal % | machine busy % |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
    one = std.get(("implicit", 1))
    text = ("**Client or broker?** CPU per record delivered and acknowledged, from the release of the consumers "
            "to the last one reporting, and as % of one core over that window:\n\n" + head + "\n".join(lines))
    if res:
        lo_b, hi_b = min(r.broker_us_per_record for r in res), max(r.broker_us_per_record for r in res)
        lo_c, hi_c = min(r.client_us_per_record for r in res), max(r.client_us_per_record for r in res)
        text += (f"\n\nThe broker spent {lo_b:.2f}–{hi_b:.2f} µs per record and at most "
                 f"{max(r.broker_cpu_pct for r in res):.0f}% of a core; the consumers {lo_c:.2f}–{hi_c:.2f} µs per "
                 f"record, {lo_c / hi_b:.0f}–{hi_c / lo_b:.0f}× as much: librdkafka parses the batches and "
                 f"confluent-kafka builds a Python `Message` per record, which the loop then touches (and, in "
                 f"explicit mode, passes to `acknowledge()`). The broker is not the bottleneck.")
    if one is not None and one.broker_us_per_record > 0:
        text += (f" At {one.broker_us_per_record:.2f} µs per record (implicit, 1 consumer) one core of broker CPU "
                 f"would serve about {1e6 / one.broker_us_per_record / 1e6:.1f} million records/s: a ShareFetch "
                 f"acquires whole stored batches and an acknowledgement covers a whole range, so the broker's work "
                 f"is per request and per batch, not per record.")
    out.append(text)

    if one is not None:
        rpp = one.records_per_poll
        cycle_ms = rpp / one.rate * 1000 if one.rate else float("nan")
        cpu_ms = rpp * (one.client_us_per_record + one.broker_us_per_record) / 1000
        shares = "; ".join(f"{r.name}: {r.holders} of {r.consumers} got records, the busiest "
                           f"{max(r.per_consumer) / r.records:.0%} of them" for r in res if r.consumers > 1
                           and not r.name.endswith("record locks"))
        para = (f"**One consumer at a time.** The producer wrote batches of about {rpp:,.0f} records (linger.ms=5 "
                f"at its rate), and a poll returns what one ShareFetch acquired: whole batches, at least "
                f"`max.poll.records` records (a soft limit). With one consumer a poll cycle took {cycle_ms:.1f} ms for "
                f"{rpp:,.0f} records while consumer and broker together spent {cpu_ms:.1f} ms of CPU on them "
                f"({one.client_cpu_pct + one.broker_cpu_pct:.0f}% of a core between them): the share consumer "
                f"sends its ShareFetch (with the previous poll's acknowledgements) only from `poll()`, so the "
                f"broker's work and the consumer's loop alternate instead of overlapping.")
        if rpp > default_locks:
            para += (f" More consumers do not overlap either: a fetch may acquire a further batch only while "
                     f"fewer than `share.partition.max.record.locks` ({default_locks:,}) records are in flight, so "
                     f"with batches of {rpp:,.0f} records one batch at a time is out. Every other consumer's "
                     f"ShareFetch parks until the holder acknowledges, which it does with its next poll, and that "
                     f"same request acquires the next batch for the holder. The consumers take uneven turns "
                     f"({shares}), and the group's rate stays about one consumer's.")
        out.append(para)

    if wide:
        parts = []
        ceiling = cores * 1e6 / min(w.client_us_per_record + w.broker_us_per_record for w in wide.values())
        for key, w in sorted(wide.items()):
            base = std.get(key)
            if base:
                parts.append(f"{w.mode}, {w.consumers} consumers: {w.rate:,.0f} records/s against {base.rate:,.0f} "
                             f"({w.rate / base.rate:.2f}×), {min(w.per_consumer):,}–{max(w.per_consumer):,} records "
                             f"per consumer, machine busy "
                             f"{w.machine_busy_pct:.0f}% of {cores * 100}%")
        rpp_w = statistics.mean(w.records_per_poll for w in wide.values())
        in_flight = -(-args.wide_locks // round(rpp_w)) if rpp_w > 0 else 0
        out.append(f"**A wider window.** With `share.partition.max.record.locks={args.wide_locks:,}` (the broker's "
                   f"cap `group.share.max.partition.max.record.locks` raised to allow it) a fetch may acquire "
                   f"while fewer than {args.wide_locks:,} records are in flight, so with batches of "
                   f"{rpp_w:,.0f} records up to {in_flight} batches are out at once, the consumers share the "
                   f"partition more evenly, and up to {in_flight} of them process at the same time: "
                   + "; ".join(parts) + ". At the CPU per record of these rows, consumers and broker together "
                   f"would fill {cores} otherwise idle cores at about {ceiling / 1e6:.2f} million records/s; a "
                   f"window of more batches (or smaller batches) would let more consumers overlap.")

    ex = std.get(("explicit", 1))
    if one is not None and ex is not None:
        out.append(f"**Explicit acknowledgement** cost the consumer {ex.client_us_per_record:.2f} µs per record "
                   f"against {one.client_us_per_record:.2f} µs implicit (1 consumer; one `acknowledge()` call per "
                   f"record) and the broker {ex.broker_us_per_record:.2f} µs against {one.broker_us_per_record:.2f} "
                   f"µs: librdkafka sends consecutive ACCEPTs as one range with a single type, so the broker applies "
                   f"the same few acknowledgement batches per poll in both modes.")

    sixteen = [r for r in res if r.consumers >= 16]
    if sixteen:
        parts = []
        for r in sixteen:
            four = std.get((r.mode, GOAL_CONSUMERS))
            parts.append(f"{r.mode}: {r.rate:,.0f} records/s, broker {r.broker_us_per_record:.2f} µs/record"
                         + (f" against {four.broker_us_per_record:.2f} with {GOAL_CONSUMERS}" if four else ""))
        out.append("**16 consumers** (" + "; ".join(parts) + "). Most of them wait: their ShareFetch requests park "
                   "at the broker, and a parked fetch is tried only when its partition has records to hand out "
                   "(oldest first, `broker/server/delayed_share_fetch.py`), so the waiting ones cost nothing. "
                   "The join column: the first member of a new group is assigned the partition at once; the others "
                   "at their next heartbeat, `share.heartbeat.interval.ms` (5 s) later. The clock starts only once "
                   "all are assigned.")

    steal = [r.steal_pct for r in res]
    if steal and max(steal) > 5:
        out.append(f"**Steal.** The hypervisor took {min(steal):.0f}–{max(steal):.0f}% of a core from this "
                   f"machine for other guests during the measurements: CPU this machine's processes did not get.")
    noisy = [r for r in res if r.other_cpu_pct > 20]
    if noisy:
        lo, hi = min(r.other_cpu_pct for r in noisy), max(r.other_cpu_pct for r in noisy)
        span = f"{lo:.0f}%" if round(lo) == round(hi) else f"{lo:.0f}–{hi:.0f}%"
        out.append(f"**Other load.** The rest of the machine used {span} of a core during {len(noisy)} of the "
                   f"{len(res)} rows. The script waits (up to {args.quiet_wait:g} s) for a quiet machine before "
                   f"each row, so unless other processes started meanwhile this is mostly kernel work for the "
                   f"benchmark's own loopback traffic that was charged to no process (a softirq that ran on an "
                   f"otherwise idle core). Where it was other processes, those rows had less CPU and read low; "
                   f"the CPU per record columns are the steadier numbers.")

    if profile is not None:
        prof, prow = profile
        quafka_s, sys_s, asyncio_s, builtin_s = prof.area_seconds()
        kio_s = dict(prof.by_area).get("kio (request decoding)", 0.0)
        picks = ("share_fetch.py", "framing.py", "share_partitions.py", "file_log.py:", "state.py:",
                 "share_partition.py")
        tops = ", ".join(f"`{l}` {prof.pct(t):.0f}%" for l, _n, t in prof.by_cum[2:]
                         if any(p in l for p in picks) and prof.pct(t) >= 3)
        fills = _cum(prof, "fill")
        encoders = [_cum(prof, f) for f in ("encode_response", "encode_share_fetch_response",
                                             "encode_share_acknowledge_response")]
        responses = sum(e[1] for e in encoders if e)
        records = sum(r.result.records for r in prow)
        per = (f" The profiled runs answered {responses:,} requests in all for {records:,} records "
               f"({records / responses:,.0f} records per request) and acquired for a ShareFetch {fills[1]:,} "
               f"times: a parked fetch is tried only when its partition has records to hand out."
               if fills and responses else "")
        out.append(f"**Broker profile** ({GOAL_CONSUMERS} consumers, CPU time, details below). Of the broker's "
                   f"busy time {prof.pct(quafka_s):.0f}% was quafka's own Python code, {prof.pct(kio_s):.0f}% "
                   f"kio (request decoding and generic response encoding), {prof.pct(asyncio_s):.0f}% asyncio, "
                   f"{prof.pct(builtin_s):.0f}% C built-ins and {prof.pct(sys_s):.0f}% system calls. By cumulative "
                   f"time: {tops}.{per}")
    return "\n\n".join(out)


def section(rows: list[Row], info: dict[str, str], args, elapsed_s: float,
            profile: tuple[ProfileSummary, list[Row]] | None) -> str:
    shown = []
    skip = False
    for a in sys.argv[1:]:  # the profile's output file is a local detail
        if skip:
            skip = False
        elif a == "--profile-out":
            skip = True
        elif not a.startswith("--profile-out="):
            shown.append(a)
    command = " ".join([".venv/bin/python", "benchmarks/share.py", *shown])
    ptuning = "\n".join(f"  - `{k}={v}`" for k, v in producer_tuning(args).items())
    ctuning = dict(SHARE_CONSUMER_TUNING)
    ctuning.update(consumer_conf(args))
    ctext = (", ".join(f"`{k}={v}`" for k, v in ctuning.items()) + ", the rest librdkafka's defaults" if ctuning
             else "librdkafka's defaults")
    overrides = broker_overrides(args)
    otext = ", ".join(f"`{o}`" for o in overrides) if overrides else "none"
    if any(o.startswith("group.share.max.partition.max.record.locks=") for o in overrides):
        otext += (" (a cap only: groups that do not set `share.partition.max.record.locks` keep its default "
                  "of 2,000)")
    info_lines = "\n".join(f"| {k} | {v} |" for k, v in info.items())
    repeat_note = ("Each measurement ran once." if args.repeat == 1 else
                   f"Each measurement ran {args.repeat} times; the table shows the fastest run of each (other "
                   f"load only ever slows a run down). Medians, records/s: "
                   + "; ".join(f"{r.result.name}: {r.median_rate:,.0f}" for r in rows) + ".")
    locks_note = (f"`share.partition.max.record.locks={args.max_record_locks}` and " if args.max_record_locks else "")
    profile_text = ""
    if profile is not None:
        summary, prow = profile
        rates = ", ".join(f"{r.result.name}: {r.result.rate:,.0f} records/s" for r in prow)
        profile_text = f"""
### Broker profile (share groups)

A second broker ran under cProfile with a CPU-time clock (`benchmarks/share.py --profiled-broker
…`; cProfile's default wall clock would charge the broker for the time it loses the core to a
consumer it just woke up). The profiler was switched on by SIGUSR1 once the {GOAL_CONSUMERS}
consumers had joined and off by SIGUSR2 after the last one reported, for the implicit and the
explicit {GOAL_CONSUMERS}-consumer measurement ({prow[0].result.records:,} records each). cProfile
slows every Python call in the broker (the profiled runs reached {rates}), so read the shares,
not the absolute times.

{summary.markdown().replace("| kio (request decoding) |", "| kio (request decoding, generic response encoding) |")}
"""
    return f"""{BEGIN_MARK}
# Share groups

Generated on {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')} by `{command}` (the run took {elapsed_s:.0f} s).
This section is rewritten by `benchmarks/share.py`; the rest of the file by
`benchmarks/produce_fetch.py`. Reproduce from the repository root with:

<!-- snippet: skip: a measurement that takes minutes and rewrites this file; run by hand to refresh the tables -->
```sh
.venv/bin/python benchmarks/share.py              # full run (+ broker profile), rewrites this section
.venv/bin/python benchmarks/share.py --repeat 3   # the same, best of 3 runs per row
.venv/bin/python benchmarks/share.py --quick      # smoke run (< 30 s), prints only
```

## What is measured (share groups)

- The broker is `python -m quafka broker` in a child process with its default settings (the
  in-memory share-state persister), a fresh temporary `log.dirs` and a free loopback port.
  Extra broker settings: {otext}.
- First one confluent `Producer` writes the records (100 B values, no key) to a 1-partition topic
  with acks=1 and these settings, so the log holds batches of a few thousand records:
{ptuning}
- Every measurement uses a fresh share group, configured with {locks_note}`share.auto.offset.reset=earliest`
  through `AdminClient.incremental_alter_configs` on its GROUP resource, and C consumer processes
  (spawned; one `confluent_kafka.ShareConsumer` each). Each creates its consumer and calls
  `subscribe([topic])`; the script waits until ShareGroupDescribe shows every member assigned the
  partition (**join s**: from the first `subscribe()` until then), then releases them together.
  librdkafka's share consumer sends ShareFetch only from `poll()`, so nothing is acquired before
  the release. Each consumer then calls `poll({POLL_TIMEOUT_S})` in a loop, checks `error()` and
  sums `offset()` of every record, and stops when the group as a whole (a counter the processes
  share) has received every record; then `commit_sync()` and `close()`.
  - **implicit**: `share.acknowledgement.mode=implicit`: a poll's records are accepted by the
    next poll (the acknowledgements ride on its ShareFetch) or by the final `commit_sync()`.
  - **explicit, ACCEPT per record**: `share.acknowledgement.mode=explicit` and
    `acknowledge(msg)` for every record; they are sent the same way.
  - **…, {WIDE_WINDOW_LOCKS:,} record locks**: the group also sets
    `share.partition.max.record.locks={WIDE_WINDOW_LOCKS}` (the default is 2,000).
  Consumer settings otherwise: {ctext}.
- **records/s** counts records delivered *and acknowledged*, from the release of the joined
  consumers to the moment the last records were acknowledged: the start of the poll that carried
  their acknowledgements, or the return of the final `commit_sync()`. **records/poll** is the
  mean number of records of a non-empty `poll()`; **consumers that got records** how many of the
  C received any.
- Checks: the delivered offsets must be 0..N-1 exactly once (count and sum), no record may carry
  an error, and afterwards a new member of the same group, once assigned, polls for
  {args.verify_wait:g} s and must receive nothing (a record left unacknowledged would have been
  released when its holder closed, and delivered again).
- **broker CPU**: utime+stime of the broker process from `/proc/<pid>/stat`, from the release of
  the consumers to the last one reporting (after its `commit_sync()`); **µs/record** divides it by
  the records, **%** by the wall time of that window (100% = one core).
- **client CPU**: the consumer processes' own `getrusage()` (librdkafka's threads included) from
  their release to the end of `commit_sync()`, summed over the consumers, per record and as % of
  one core over the same window.
- **other CPU**: busy time of the whole machine (`/proc/stat`: user, nice, system, irq, softirq)
  minus broker and consumers, as % of one core: other processes, and kernel work charged to none
  of them (such as a softirq handling loopback traffic on an otherwise idle core). **steal**: time
  the hypervisor gave to other guests, as % of one core. Before each measurement the script waits (up to
  {args.quiet_wait:g} s) for the rest of the machine to drop below 25% of a core.
- MB/s counts record values only, 1 MB = 10^6 bytes. {repeat_note}
- The machine has {len(os.sched_getaffinity(0))} cores, which the broker and all consumer
  processes share; the CPU columns show who used them.

## Machine (share groups)

| | |
|---|---|
{info_lines}

## Results (share groups)

{markdown_table(rows)}

## Analysis (share groups)

{analysis(rows, profile, args)}
{profile_text}{END_MARK}
"""


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--profiled-broker"]:  # internal: the child process of a profiled run
        return profiled_broker(argv[1], argv[2:])
    if argv[:1] == ["--job-queue"]:  # the job-queue measurements (benchmarks/share_jobs.py)
        import share_jobs

        rest = argv[1:]
        if "--print-only" in rest:
            return share_jobs.main([a for a in rest if a != "--print-only"])
        return share_jobs.main(["--update-docs", *rest])
    ap = arg_parser(__doc__)
    ap.add_argument("--records", type=int, default=None,
                    help="records per measurement with 1 and 4 consumers (default 1,000,000; --quick: 100,000)")
    ap.add_argument("--records-16", type=int, default=None,
                    help="records per 16-consumer measurement (default: the same as --records)")
    ap.add_argument("--consumers", default=None,
                    help="consumer counts, comma-separated (default 1,4,16; --quick: 1,4)")
    ap.add_argument("--modes", default="implicit,explicit", help="implicit, explicit or both (default)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each measurement N times, report the fastest run (and the median)")
    ap.add_argument("--max-poll-records", type=int, default=None,
                    help="ShareConsumer max.poll.records (default: librdkafka's)")
    ap.add_argument("--producer-batch", type=int, default=None,
                    help="batch.num.messages of the producer that writes the records (default 10,000)")
    ap.add_argument("--broker-override", action="append", default=[], metavar="KEY=VALUE",
                    help="extra broker setting (repeatable)")
    ap.add_argument("--max-record-locks", type=int, default=None,
                    help="share.partition.max.record.locks of every group (default: the broker's, 2000)")
    ap.add_argument("--wide-locks", type=int, default=None,
                    help=f"share.partition.max.record.locks of the extra wide-window rows (default "
                         f"{WIDE_WINDOW_LOCKS}; 0 or --quick: no such rows)")
    ap.add_argument("--wide-consumers", default=str(GOAL_CONSUMERS),
                    help=f"consumer counts of the wide-window rows (default {GOAL_CONSUMERS})")
    ap.add_argument("--verify", dest="verify", action="store_true", default=None,
                    help="after each measurement check that nothing is left in the group (default: on for a "
                         "full run, off with --quick)")
    ap.add_argument("--no-verify", dest="verify", action="store_false")
    ap.add_argument("--verify-wait", type=float, default=1.0,
                    help="seconds the check consumer polls once assigned (default 1)")
    ap.add_argument("--quiet-wait", type=float, default=None,
                    help="before each measurement wait up to this many seconds for other load on the machine "
                         "to drop below 25%% of a core (default 60; --quick: 0, do not wait)")
    add_quick_profile_args(ap, "run the 4-consumer rows against a broker under cProfile", "measurement",
                           "the markdown file whose share section to rewrite")
    ap.add_argument("--deadline", type=float, default=120.0, help="seconds one measurement may take before it fails")
    ap.add_argument("--job-queue", action="store_true",
                    help="run the job-queue measurements instead (benchmarks/share_jobs.py: many consumers, small "
                         "max.poll.records, slow jobs, paced latency, acknowledgement cost) and rewrite their section; "
                         "must come first; the options after it are share_jobs.py's (--print-only: do not write)")
    args = ap.parse_args(argv)
    n = args.records or (100_000 if args.quick else 1_000_000)
    n16 = args.records_16 or n
    counts = [int(c) for c in (args.consumers or ("1,4" if args.quick else "1,4,16")).split(",") if c.strip()]
    wide_counts = [int(c) for c in args.wide_consumers.split(",") if c.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.wide_locks is None:
        args.wide_locks = 0 if args.quick else WIDE_WINDOW_LOCKS
    if args.quiet_wait is None:
        args.quiet_wait = 0.0 if args.quick else 60.0
    if args.verify is None:
        args.verify = not args.quick
    doc_path = resolve_quick_profile_args(args, n)
    if args.repeat < 1 or n < 1 or n16 < 1 or not counts or min(counts) < 1:
        ap.error("--repeat, --records, --records-16 and --consumers must be at least 1")
    if not set(modes) <= {"implicit", "explicit"} or not modes:
        ap.error("--modes takes implicit and/or explicit")

    try:
        import confluent_kafka

        importlib.import_module("quafka")
        confluent_kafka.ShareConsumer  # noqa: B018
    except (ImportError, AttributeError) as exc:
        print(f"needs confluent-kafka with ShareConsumer and quafka installed (run with .venv/bin/python): {exc}",
              file=sys.stderr)
        return 2

    records = {c: (n16 if c >= 16 else n) for c in set(counts) | (set(wide_counts) if args.wide_locks else set())}
    plan = make_plan(counts, records, modes, args.max_record_locks, args.wide_locks, wide_counts)
    t_start = time.monotonic()
    run = BrokerRun(lambda work_dir: ShareBroker(work_dir, overrides=broker_overrides(args)), "quafka-bench-share-")
    broker = run.broker
    profile = None
    rows: list[Row] = []
    try:
        run.start()
        produce_topic(broker, run.admin, "bench-share-warmup", 20_000, args)
        topics = {}
        for count in sorted(set(records.values())):
            topics[count] = f"bench-share-{count}"
            produce_topic(broker, run.admin, topics[count], count, args)
        warm_up(broker, run.admin, args)
        rows = run_suite(broker, run.admin, plan, topics, args.repeat, args)
        for topic in topics.values():
            delete_topic(run.admin, topic)
        run.stop()
        if args.profile:
            profile = profile_or_none(run_profile, run.work_dir, args.profile_records, args)
    except KeyboardInterrupt:
        return interrupted()
    finally:
        run.close()

    elapsed = time.monotonic() - t_start
    print_blocks(text_table(rows), None if profile is None else profile[0].markdown(), analysis(rows, profile, args))
    problems = [f"{row.result.name}: {p}" for row in rows for p in row.result.problems]
    if doc_path is not None:
        replace_marked_section(section(rows, machine_info(), args, elapsed, profile), doc_path, BEGIN_MARK, END_MARK)
        print(f"\nwrote the share section of {doc_path}")
    return finish(problems, elapsed)


if __name__ == "__main__":
    sys.exit(main())
