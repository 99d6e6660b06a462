#!/usr/bin/env python3
"""quafka's ShareConsumer against confluent-kafka's ShareConsumer: same broker, same workload.

The script starts `python -m quafka broker` in a child process (fresh temporary log dir, free
port; the helpers of benchmarks/produce_fetch.py and benchmarks/share.py), pre-produces N records
of 100 B to a 1-partition topic with one confluent Producer, and then measures, in turn and
`--repeat` times each (the order rotates between rounds), one consumer process of each kind
consuming all N records of a fresh share group (group config share.auto.offset.reset=earliest)
with share.acknowledgement.mode=explicit, ACCEPT per record and a commit per poll:

- confluent: `confluent_kafka.ShareConsumer`, `acknowledge(msg)` per record, `commit_sync()` per poll;
- quafka commit_sync: `quafka.client.ShareConsumer`, `acknowledge(record)` per record,
  `commit_sync()` per poll;
- quafka commit_async: the same with `commit_async()` per poll (the results reach the
  acknowledgement commit callback; the run ends when it has confirmed every record).

It reports records/s (best of the runs and median), consumer and broker CPU per record, the
ratio quafka / confluent, checks exactly-once delivery (count and offset sum of the delivered
records, every commit result a success), optionally profiles quafka's consumer with cProfile
(`--profile`: both of its threads, the application's and the client's event loop thread), prints
a table and with `--update-docs` rewrites its own section of docs/benchmarks.md (between
`<!-- client:begin -->` and `<!-- client:end -->`).

    .venv/bin/python benchmarks/client.py                                # 200,000 records, best of 3, prints only
    .venv/bin/python benchmarks/client.py --profile --update-docs        # the documented run
    .venv/bin/python benchmarks/client.py --records 50000 --repeat 1     # smoke run
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import io
import multiprocessing as mp
import os
import pstats
import queue as _queue
import re
import shutil
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
    arg_parser,
    finish,
    interrupted,
    machine_info,
    machine_times,
    markdown_grid,
    print_blocks,
    replace_marked_section,
    stop_procs,
    text_grid,
)

from produce_fetch import _label  # noqa: E402
from share import (  # noqa: E402
    RECORD_SIZE,
    GroupDescriber,
    ShareBroker,
    _quiet_logger,
    produce_topic,
    set_group_configs,
    wait_idle,
    wait_quiet,
)

BEGIN_MARK = "<!-- client:begin -->"
END_MARK = "<!-- client:end -->"
POLL_TIMEOUT_S = 0.5
CLIENTS = {
    "confluent": "confluent-kafka ShareConsumer, commit_sync per poll",
    "quafka-sync": "quafka ShareConsumer, commit_sync per poll",
    "quafka-async": "quafka ShareConsumer, commit_async per poll",
}
# Functions in which a thread waits rather than works (excluded from the profile's "busy" time).
WAIT_FUNCTIONS = ("<method 'poll' of 'select.epoll' objects>", "<method 'select' of 'select.epoll' objects>",
                  "<method 'acquire' of '_thread.lock' objects>", "<built-in method time.sleep>")


# ----------------------------------------------------------------------------- consumer worker
# Top-level functions: they run in spawned processes.

def _on_loop(consumer, fn) -> None:
    """Run fn() on the quafka consumer's private event loop thread (to switch its profiler) and wait.
    Uses quafka internals (`ShareConsumer._loop.loop`); only the profiled run does this."""
    import concurrent.futures

    done: concurrent.futures.Future = concurrent.futures.Future()

    def call() -> None:
        try:
            fn()
            done.set_result(None)
        except BaseException as exc:  # pragma: no cover
            done.set_exception(exc)

    consumer._loop.loop.call_soon_threadsafe(call)
    done.result(10)


def consume_worker(kind: str, bootstrap: str, topic: str, group: str, expected: int, max_poll_records: int | None,
                   profile_path: str | None, go, out: mp.Queue, deadline_s: float) -> None:
    """One share consumer in explicit mode: subscribe and join (the parent waits until the group has
    assigned the partition), then, once released, poll / ACCEPT every record / commit per poll until
    every record is delivered and its acknowledgement confirmed."""
    try:
        base = {"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"}
        if max_poll_records:
            base["max.poll.records"] = max_poll_records
        confirmed = [0]   # acknowledgements the broker confirmed
        failed: list[str] = []
        if kind == "confluent":
            from confluent_kafka import ShareConsumer as ConfluentShareConsumer

            consumer = ConfluentShareConsumer(dict(base, logger=_quiet_logger))
            consumer.subscribe([topic])   # librdkafka joins now and fetches only from poll()
        else:
            from quafka.client import ShareConsumer

            consumer = ShareConsumer(base)
            consumer.subscribe([topic])
            # The first consumer call starts the heartbeat task (the join); commit_async() with
            # nothing to send does only that, so that no ShareFetch goes out before the release.
            consumer.commit_async()

            def on_commit(offsets, exc) -> None:
                if exc is None:
                    confirmed[0] += sum(len(o) for o in offsets.values())
                elif len(failed) < 3:
                    failed.append(repr(exc))

            if kind == "quafka-async":
                consumer.set_acknowledgement_commit_callback(on_commit)
        out.put(("ready", time.monotonic()))
        go.wait()

        profilers = []
        if profile_path:
            import cProfile

            main_prof, loop_prof = cProfile.Profile(), cProfile.Profile()
            profilers = [main_prof, loop_prof]
            _on_loop(consumer, loop_prof.enable)
            main_prof.enable()
        poll, acknowledge = consumer.poll, consumer.acknowledge
        cpu0 = _cpu_self()
        t0 = time.monotonic()
        got = offset_sum = polls = 0
        commit_errors = 0
        if kind == "quafka-async":
            commit = consumer.commit_async
        else:
            commit = consumer.commit_sync
        while got < expected:
            if time.monotonic() - t0 > deadline_s:
                raise TimeoutError(f"{got:,} of {expected:,} records after {deadline_s:.0f} s")
            records = poll(POLL_TIMEOUT_S)
            n = len(records)
            if not n:
                continue
            polls += 1
            if kind == "confluent":
                for m in records:
                    if m.error() is not None:
                        raise RuntimeError(f"message error: {m.error()}")
                    offset_sum += m.offset()
                    acknowledge(m)
            else:
                for r in records:
                    offset_sum += r.offset
                    acknowledge(r)
            got += n
            result = commit()
            if result is not None:   # commit_sync: {partition: None or the exception}
                for exc in result.values():
                    if exc is None:
                        continue
                    commit_errors += 1
                    if len(failed) < 3:
                        failed.append(repr(exc))
                if not commit_errors:
                    confirmed[0] += n
        if kind == "quafka-async":
            # The last commit_async()s may still be in flight: wait until the callback (run inside
            # commit_sync, which has nothing left to send) has seen every acknowledgement confirmed.
            while confirmed[0] < expected and not failed:
                if time.monotonic() - t0 > deadline_s:
                    raise TimeoutError(f"{confirmed[0]:,} of {expected:,} acknowledgements confirmed")
                consumer.commit_sync(1.0)
                if confirmed[0] < expected:
                    time.sleep(0.0005)
        t1 = time.monotonic()
        cpu1 = _cpu_self()
        if profilers:
            main_prof.disable()
            _on_loop(consumer, loop_prof.disable)
            main_prof.dump_stats(profile_path + ".main")
            loop_prof.dump_stats(profile_path + ".loop")
        consumer.close()
        out.put(("done", dict(start=t0, end=t1, records=got, offset_sum=offset_sum, polls=polls, cpu=cpu1 - cpu0,
                              confirmed=confirmed[0], errors=commit_errors, first_errors=failed)))
    except BaseException as exc:  # report, never hang the parent
        import traceback

        out.put(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


# ----------------------------------------------------------------------------- measurement

@dataclass
class Result(CpuPerRecord):
    kind: str
    records: int
    seconds: float
    polls: int
    client_cpu_s: float
    broker_cpu_s: float
    window_s: float
    other_cpu_s: float
    problems: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


_group_seq = [0]


def measure(broker: ShareBroker, admin, kind: str, topic: str, records: int, args,
            profile_path: str | None = None) -> Result:
    _group_seq[0] += 1
    group = f"bench-client-{kind}-{_group_seq[0]}-{os.getpid()}"
    set_group_configs(admin, group, {"share.auto.offset.reset": "earliest"})
    if args.quiet_wait > 0:
        wait_quiet(args.quiet_wait)
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=consume_worker, daemon=True,
                       args=(kind, broker.bootstrap, topic, group, records, args.max_poll_records, profile_path,
                             go, out, args.deadline))
    try:
        proc.start()
        kind_, payload = out.get(timeout=60)
        if kind_ == "error":
            raise RuntimeError(f"{kind}: consumer failed while starting: {payload}")
        describer = GroupDescriber(broker.bootstrap)
        try:
            describer.wait_assigned(group, 1, timeout_s=60)
        finally:
            describer.close()
        wait_idle([proc.pid, broker.proc.pid])
        cpu0 = broker.cpu_seconds()
        m0 = machine_times()
        w0 = time.monotonic()
        go.set()
        kind_, payload = out.get(timeout=args.deadline + 60)
        w1 = time.monotonic()
        cpu1 = broker.cpu_seconds()
        m1 = machine_times()
        if kind_ == "error":
            raise RuntimeError(f"{kind}: consumer failed: {payload}")
    except _queue.Empty:
        raise RuntimeError(f"{kind}: the consumer did not report in time (broker log:\n{broker.log_tail()})") from None
    finally:
        stop_procs([proc])
    r = payload
    problems = []
    if r["records"] != records:
        problems.append(f"{r['records']:,} records delivered for {records:,} produced")
    if r["offset_sum"] != records * (records - 1) // 2:
        problems.append("the delivered offsets are not 0..N-1 exactly once (offset sum differs)")
    if r["errors"] or r["first_errors"]:
        problems.append(f"failed acknowledgements ({r['errors']} failed commit results), first: {r['first_errors'][:1]}")
    if r["confirmed"] < records:
        problems.append(f"only {r['confirmed']:,} acknowledgements confirmed")
    return Result(kind=kind, records=r["records"], seconds=r["end"] - r["start"], polls=r["polls"],
                  client_cpu_s=r["cpu"], broker_cpu_s=cpu1 - cpu0, window_s=w1 - w0,
                  other_cpu_s=max(0.0, (m1[0] - m0[0]) - (cpu1 - cpu0) - r["cpu"]), problems=problems)


@dataclass
class Row:
    kind: str
    best: Result
    runs: list[Result]

    @property
    def median(self) -> float:
        return statistics.median(r.rate for r in self.runs)


def run_all(broker, admin, topic: str, records: int, kinds: list[str], repeat: int, args) -> list[Row]:
    runs: dict[str, list[Result]] = {k: [] for k in kinds}
    for rep in range(repeat):
        order = kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]   # rotate: no client always goes first
        for kind in order:
            res = measure(broker, admin, kind, topic, records, args)
            runs[kind].append(res)
            print(f"  [{rep + 1}/{repeat}] {CLIENTS[kind]}: {res.rate:,.0f} records/s, {res.records / res.polls:,.0f} "
                  f"records/poll, consumer {res.client_us_per_record:.2f} us/record, broker "
                  f"{res.broker_us_per_record:.2f} us/record, other {res.other_cpu_pct:.0f}% of a core"
                  + (f"  PROBLEMS: {res.problems}" if res.problems else ""),
                  flush=True)
    return [Row(k, max(runs[k], key=lambda r: r.rate), runs[k]) for k in kinds]


# ----------------------------------------------------------------------------- profile

@dataclass
class Profile:
    rate: float
    records: int
    main_total: float
    main_busy: float
    loop_total: float
    loop_busy: float
    by_own: list[tuple[str, str, int, float]]      # (thread, label, calls, own s), both threads, waits excluded
    by_cum: list[tuple[str, str, int, float]]      # quafka functions by cumulative s
    by_area: list[tuple[str, float]]               # (area, own s), both threads, waits excluded

    def us(self, seconds: float) -> float:
        return seconds / self.records * 1e6

    def pct(self, seconds: float) -> float:
        busy = self.main_busy + self.loop_busy
        return seconds / busy * 100 if busy > 0 else float("nan")

    def markdown(self, top: int = 15) -> str:
        busy = self.main_busy + self.loop_busy
        lines = [f"Profiled run: {self.records:,} records at {self.rate:,.0f} records/s under cProfile. "
                 f"Application thread: {self.main_total:.2f} s, of which {self.main_total - self.main_busy:.2f} s "
                 f"waiting for the event loop thread (lock `acquire`); event loop thread: {self.loop_total:.2f} s, "
                 f"of which {self.loop_total - self.loop_busy:.2f} s idle in `epoll`. The percentages are of the "
                 f"{busy:.2f} s both threads were busy; µs/record divide by the records.", "",
                 "Own time of both threads grouped by area:", "", "| area | own s | µs/record | % of busy |",
                 "|---|---:|---:|---:|"]
        lines += [f"| {a} | {s:.3f} | {self.us(s):.2f} | {self.pct(s):.1f} |" for a, s in self.by_area]
        lines += ["", f"Top {top} functions by own time (`tottime`):", "",
                 "| thread | function | calls | own s | µs/record | % of busy |", "|---|---|---:|---:|---:|---:|"]
        lines += [f"| {t} | `{l}` | {n:,} | {s:.3f} | {self.us(s):.2f} | {self.pct(s):.1f} |"
                  for t, l, n, s in self.by_own[:top]]
        lines += ["", f"Top {top} quafka functions by cumulative time (a coroutine counts one call per resumption "
                  "and its time only while it runs; the application thread's calls include their wait for "
                  "the loop thread):", "",
                  "| thread | function | calls | cumulative s | µs/record |", "|---|---|---:|---:|---:|"]
        lines += [f"| {t} | `{l}` | {n:,} | {s:.3f} | {self.us(s):.2f} |" for t, l, n, s in self.by_cum[:top]]
        return "\n".join(lines)


AREAS = [
    ("record decoding: record_batch.iter_records, _share_fetch, Record objects",
     ("quafka/protocol/record_batch.py", "quafka/client/_share_fetch.py", "quafka/client/records.py")),
    ("acknowledgement book (_share_acks)", ("quafka/client/_share_acks.py",)),
    ("share consumer logic (share_consumer.py, sessions, membership, metrics)",
     ("quafka/client/share_consumer.py", "quafka/client/_share_session.py", "quafka/client/_share_membership.py",
      "quafka/client/_metrics.py")),
    ("wire and transport: request encoding, response decoding (quafka _wire/_transport, kio)",
     ("quafka/client/_wire.py", "quafka/client/_transport.py", "quafka/client/_cluster.py", "kio/")),
    ("sync-over-async bridge and asyncio (_sync, _base, event loop, futures, threading)",
     ("quafka/client/_sync.py", "quafka/client/_base.py", "asyncio/", "concurrent/", "threading.py")),
]


def _client_area(key) -> str:
    from produce_fetch import SYSCALL_WORDS, _short

    file, _line, func = key
    if file == "~":
        if any(w in func for w in SYSCALL_WORDS):
            return "system calls: socket send/recv"
        if "__new__" in func or "isinstance" in func:
            return "C built-ins: object creation (__new__), isinstance"
        return "C built-ins: other (dict/list/bytes/struct/...)"
    short = _short(file)
    for name, prefixes in AREAS:
        if short.startswith(prefixes):
            return name
    return "other Python (benchmark loop, stdlib)"


def summarise(path: str, records: int, rate: float) -> Profile:
    own, cum, totals, areas = [], [], {}, {}
    for thread, suffix in (("app", ".main"), ("loop", ".loop")):
        raw = pstats.Stats(path + suffix, stream=io.StringIO()).stats
        total = sum(v[2] for v in raw.values())
        wait = sum(v[2] for k, v in raw.items() if k[2] in WAIT_FUNCTIONS)
        totals[thread] = (total, total - wait)
        own += [(thread, re.sub(r" of type object at 0x[0-9a-f]+", "", _label(k)), v[1], v[2])
                for k, v in raw.items() if k[2] not in WAIT_FUNCTIONS]
        for k, v in raw.items():
            if k[2] not in WAIT_FUNCTIONS:
                areas[_client_area(k)] = areas.get(_client_area(k), 0.0) + v[2]
        cum += [(thread, _label(k), v[1], v[3]) for k, v in raw.items() if "/quafka/" in k[0]]
    own.sort(key=lambda x: x[3], reverse=True)
    cum.sort(key=lambda x: x[3], reverse=True)
    return Profile(rate, records, totals["app"][0], totals["app"][1], totals["loop"][0], totals["loop"][1], own, cum,
                   sorted(areas.items(), key=lambda x: x[1], reverse=True))


def run_profile(broker, admin, topic: str, records: int, work_dir: str, args) -> Profile:
    path = os.path.join(work_dir, "consumer.prof")
    res = measure(broker, admin, "quafka-sync", topic, records, args, profile_path=path)
    if res.problems:
        raise RuntimeError(f"profiled run: {res.problems}")
    if args.profile_out:
        for suffix in (".main", ".loop"):
            shutil.copyfile(path + suffix, args.profile_out + suffix)
        print(f"  profiles saved to {args.profile_out}.main / .loop (python -m pstats FILE)")
    return summarise(path, res.records, res.rate)


# ----------------------------------------------------------------------------- report

COLUMNS = ["client", "records", "records/s (best)", "records/s (median)", "runs", "records/poll",
           "consumer CPU µs/record", "broker CPU µs/record", "other CPU %"]


def table_rows(rows: list[Row]) -> list[list[str]]:
    out = []
    for row in rows:
        b = row.best
        out.append([CLIENTS[row.kind], f"{b.records:,}", f"{b.rate:,.0f}", f"{row.median:,.0f}",
                    ", ".join(f"{r.rate:,.0f}" for r in row.runs), f"{b.records / b.polls:,.0f}",
                    f"{b.client_us_per_record:.2f}", f"{b.broker_us_per_record:.2f}", f"{b.other_cpu_pct:.0f}"])
    return out


def markdown_table(rows: list[Row]) -> str:
    return markdown_grid(COLUMNS, table_rows(rows))


def text_table(rows: list[Row]) -> str:
    return text_grid(COLUMNS, table_rows(rows), rule=False)


def ratios(rows: list[Row]) -> list[tuple[str, float, float]]:
    by = {r.kind: r for r in rows}
    conf = by.get("confluent")
    if conf is None:
        return []
    return [(CLIENTS[k], by[k].best.rate / conf.best.rate, by[k].median / conf.median)
            for k in ("quafka-sync", "quafka-async") if k in by]


def ratio_text(rows: list[Row], md: bool = True) -> str:
    """quafka / confluent records/s, one line a quafka row: a markdown list, or plain lines."""
    bullet, bold = ("- ", "**") if md else ("", "")
    return "\n".join(f"{bullet}{name} / confluent: {bold}{best:.2f}{bold} (best runs), {median:.2f} (medians)"
                     for name, best, median in ratios(rows))


def section(rows: list[Row], profile: Profile | None, info: dict[str, str], args, elapsed_s: float,
            analysis: str) -> str:
    command = ".venv/bin/python benchmarks/client.py " + " ".join(args.argv)
    info_lines = "\n".join(f"| {k} | {v} |" for k, v in info.items())
    profile_text = ""
    if profile is not None:
        profile_text = f"""
### quafka consumer profile

One more quafka commit_sync run ({profile.records:,} records) with cProfile switched on in the consumer
process, in both of its threads (the application thread that calls `poll` / `acknowledge` /
`commit_sync`, and the event loop thread that `ShareConsumer` drives the asyncio client on), from
the release to the last commit. cProfile slows every Python call, so read the shares, not the
absolute times.

{profile.markdown()}
"""
    return f"""{BEGIN_MARK}
# Client: quafka ShareConsumer vs confluent-kafka ShareConsumer

Generated on {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')} by `{command.strip()}` (the run took {elapsed_s:.0f} s).
This section is rewritten by `benchmarks/client.py --update-docs`. Reproduce from the repository root with:

<!-- snippet: skip: a measurement that takes minutes and rewrites this file; run by hand to refresh the tables -->
```sh
.venv/bin/python benchmarks/client.py --profile --update-docs   # this section
.venv/bin/python benchmarks/client.py --records 50000 --repeat 1 # smoke run, prints only
```

## What is measured (client)

- The broker is `python -m quafka broker` in a child process with its default settings, a fresh
  temporary `log.dirs` and a free loopback port. One confluent `Producer` first writes
  {args.records:,} records of {RECORD_SIZE} B (no key) to a 1-partition topic (acks=1, the producer
  settings of the share-group section: batches of up to 10,000 records).
- Each measurement is one consumer process (spawned; the broker and the consumer do not share a
  GIL) with a fresh share group whose group config `share.auto.offset.reset=earliest` is set
  first. Consumer config: `bootstrap.servers`, `group.id`, `share.acknowledgement.mode=explicit`,
  {f"`max.poll.records={args.max_poll_records}`" if args.max_poll_records else "everything else the client's default"}.
  The consumer subscribes and joins (quafka: `commit_async()` with nothing to send starts its
  heartbeat task; librdkafka joins on `subscribe()`); the script waits until ShareGroupDescribe
  shows the partition assigned, then releases it. The consumer then loops: `poll({POLL_TIMEOUT_S})`,
  `acknowledge()` (ACCEPT) every record (confluent: after checking `error()`), then one commit:
  - **confluent-kafka ShareConsumer, commit_sync per poll**: `commit_sync()` (blocks for the broker's answer);
  - **quafka ShareConsumer, commit_sync per poll**: `commit_sync()`, every partition result checked;
  - **quafka ShareConsumer, commit_async per poll**: `commit_async()`; an acknowledgement commit
    callback counts the confirmed offsets, and the run ends when it has seen all of them.
- **records/s**: records delivered and acknowledged (confirmed by the broker) per second, from the
  release to the last confirmation. The three clients run one after the other, {args.repeat} rounds,
  the order rotating between rounds; **best** is the fastest run (interference only ever slows a
  run down), **median** the median; every run is listed.
- **records/poll**: mean records of a non-empty `poll()` (a commit per poll, so also records per commit).
- **consumer CPU**: the consumer process's `getrusage()` (all its threads) over the timed part;
  **broker CPU**: utime+stime of the broker process; both per record. **other CPU**: the rest of
  the machine's busy time in the window (`/proc/stat`), as % of one core: anything well above 0
  means something else competed for the cores.
- Checks: every run must deliver offsets 0..N-1 exactly once (count and sum), every commit result
  must be a success, and every acknowledgement must be confirmed.

## Machine (client)

| | |
|---|---|
{info_lines}

## Results (client)

{markdown_table(rows)}

Ratio quafka / confluent-kafka (records/s):

{ratio_text(rows)}

## Analysis (client)

{analysis}
{profile_text}{END_MARK}
"""


def analysis_text(rows: list[Row], profile: Profile | None) -> str:
    """The measured facts in prose; the interpretation is added by hand in docs only when it holds."""
    by = {r.kind: r for r in rows}
    parts = []
    if "confluent" in by and "quafka-sync" in by:
        c, q = by["confluent"].best, by["quafka-sync"].best
        q_us, c_us = q.client_us_per_record, c.client_us_per_record
        parts.append(
            f"quafka's consumer spent {q_us:.2f} µs of CPU per record against confluent's {c_us:.2f} µs "
            f"({q_us / c_us:.1f}×); the broker spent {q.broker_us_per_record:.2f} µs per record serving quafka "
            f"and {c.broker_us_per_record:.2f} µs serving confluent. Records per poll (= per commit): quafka "
            f"{q.records / q.polls:,.0f}, confluent {c.records / c.polls:,.0f}. quafka's consumer process was busy "
            f"{q.client_cpu_s / q.seconds * 100:.0f}% of one core during its best run, i.e. it is CPU-bound: "
            f"1 / {q_us:.2f} µs = {1e6 / q_us:,.0f} records/s, close to the {q.rate:,.0f} measured. "
            "Both of its threads (the application's and the event loop's) share one GIL, so their work adds up.")
        parts.append(
            "Why: confluent-kafka decodes record batches in C (librdkafka) and its `acknowledge()` is one C call. "
            "quafka does the per-record work in Python: on the event loop thread `record_batch.iter_records` "
            "decodes every record's varints, `decode_acquired` turns each into a `Record` (a NamedTuple) with its "
            "delivery count, and `on_delivered` enters each one into the acknowledgement book; on the application "
            "thread every `acknowledge()` checks its arguments and the type, takes a "
            "lock and updates the book (dict lookups and an insert), and the commit moves the acknowledgements to "
            "the pending map and turns them into acknowledgement batches. The thread hand-off of "
            "`poll()`/`commit_sync()` (`run_coroutine_threadsafe`) and the network round trips are per call, not "
            "per record, and matter little at thousands of records per poll; the broker's CPU per record is "
            "a fraction of either consumer's (see the broker CPU column).")
    if "quafka-async" in by and "quafka-sync" in by:
        a, q = by["quafka-async"].best, by["quafka-sync"].best
        parts.append(
            f"commit_async per poll ({a.rate:,.0f} records/s) is no faster than commit_sync ({q.rate:,.0f}): the "
            "consumer keeps one request in flight per leader, so the next poll's ShareFetch waits for the "
            "ShareAcknowledge that commit_async started, and the round trip stays serial; the callback "
            "bookkeeping adds a little CPU.")
    worst = max((r for row in rows for r in row.runs), key=lambda r: r.other_cpu_pct, default=None)
    if worst is not None and worst.other_cpu_pct > 25:
        parts.append(f"The machine was not idle: in some runs other processes used up to {worst.other_cpu_pct:.0f}% "
                     "of a core (see the other CPU column and the spread of the runs), so the best of the runs is the "
                     "better estimate, and the ratio is indicative to about ±20%.")
    if profile is not None:
        parts.append("In the profiled quafka run the consumer's two threads were busy "
                     f"{profile.us(profile.main_busy + profile.loop_busy):.2f} µs per record (cProfile included); by area: "
                     + "; ".join(f"{a} {profile.pct(s):.0f}% ({profile.us(s):.2f} µs/record)"
                                 for a, s in profile.by_area[:5]) + ".")
        top = profile.by_own[:6]
        parts.append("Largest own-time costs in the profiled quafka run: " + "; ".join(
            f"`{l}` ({t}) {profile.pct(s):.0f}% of busy, {profile.us(s):.2f} µs/record" for t, l, _n, s in top) + ".")
    return "\n\n".join(parts)


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = arg_parser(__doc__)
    ap.add_argument("--records", type=int, default=200_000, help="records per measurement (default 200,000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per client; best and median reported (default 3)")
    ap.add_argument("--clients", default=",".join(CLIENTS), help=f"which rows (default {','.join(CLIENTS)})")
    ap.add_argument("--max-poll-records", type=int, default=None,
                    help="max.poll.records of both consumers (default: each client's own default)")
    ap.add_argument("--profile", action="store_true", help="also profile one quafka commit_sync run with cProfile")
    ap.add_argument("--profile-out", metavar="PREFIX", default=None,
                    help="keep the profiles as PREFIX.main and PREFIX.loop")
    ap.add_argument("--update-docs", action="store_true", help="rewrite the client section of docs/benchmarks.md")
    ap.add_argument("--doc", default=str(DOC_PATH), help="the markdown file --update-docs writes (default %(default)s)")
    ap.add_argument("--quiet-wait", type=float, default=20.0,
                    help="before each run wait up to this many seconds for other load to drop below 25%% of a core")
    ap.add_argument("--deadline", type=float, default=120.0, help="seconds one run may take before it fails")
    args = ap.parse_args(argv)
    args.argv = argv
    kinds = [k.strip() for k in args.clients.split(",") if k.strip()]
    if not kinds or not set(kinds) <= set(CLIENTS):
        ap.error(f"--clients takes some of {', '.join(CLIENTS)}")
    if args.records < 1 or args.repeat < 1:
        ap.error("--records and --repeat must be at least 1")
    try:
        import confluent_kafka

        confluent_kafka.ShareConsumer  # noqa: B018
        importlib.import_module("quafka.client").ShareConsumer  # noqa: B018
    except (ImportError, AttributeError) as exc:
        print(f"needs confluent-kafka with ShareConsumer and quafka.client (run with .venv/bin/python): {exc}",
              file=sys.stderr)
        return 2

    t_start = time.monotonic()
    run = BrokerRun(ShareBroker, "quafka-bench-client-")
    broker = run.broker
    profile = None
    produce_args = argparse.Namespace(producer_batch=None, deadline=args.deadline)
    try:
        run.start()
        produce_topic(broker, run.admin, "bench-client-warmup", 20_000, produce_args)
        topic = "bench-client"
        produce_topic(broker, run.admin, topic, args.records, produce_args)
        print("warm-up (not reported) ...", flush=True)
        for kind in kinds:
            measure(broker, run.admin, kind, "bench-client-warmup", 20_000, args)
        rows = run_all(broker, run.admin, topic, args.records, kinds, args.repeat, args)
        if args.profile:
            print("profiling quafka's consumer (cProfile) ...", flush=True)
            profile = run_profile(broker, run.admin, topic, args.records, run.work_dir, args)
    except KeyboardInterrupt:
        return interrupted()
    finally:
        run.close()
    elapsed = time.monotonic() - t_start

    analysis = analysis_text(rows, profile)
    print_blocks(text_table(rows), ratio_text(rows, md=False), None if profile is None else profile.markdown(),
                 analysis)
    if args.update_docs:
        replace_marked_section(section(rows, profile, machine_info(), args, elapsed, analysis), Path(args.doc),
                               BEGIN_MARK, END_MARK)
        print(f"\nwrote the client section of {args.doc}")
    problems = [f"{CLIENTS[row.kind]}: {p}" for row in rows for r in row.runs for p in r.problems]
    return finish(problems, elapsed)


if __name__ == "__main__":
    sys.exit(main())
