#!/usr/bin/env python3
"""Consumer groups (classic, and KIP-848) with confluent-kafka against a `python -m quafka broker` child process.

Four measurements (`--update-docs` rewrites this script's section of docs/benchmarks.md, between
`<!-- consumer-groups:begin -->` and `<!-- consumer-groups:end -->`):

- stabilisation: 10 members (confluent-kafka Consumers, one thread each, eager `range`) subscribe
  to a 20-partition topic at once; the time from the first subscribe() to the moment every member
  holds its partitions (all 20, each partition once), with the broker's
  `group.initial.rebalance.delay.ms` at Kafka's default 3000 and at 0;
- rebalance on join: an 11th member joins a stable 10-member group; the time from its subscribe()
  to the moment every member holds its new assignment (all 20 partitions over 11 members), eager
  (`range`) and incremental (`cooperative-sticky`), at librdkafka's default
  `heartbeat.interval.ms` (3000, Kafka's too) and at 500;
- consume throughput: 200,000 records of 100 bytes on a 4-partition topic, read by a 4-member group
  (one spawned process per member) that commits synchronously after every batch, by the same group
  without commits in the loop (auto-commit, librdkafka's default), and by one `assign()` consumer
  (no group, no commits); records/s from the release of the joined (or assigned) consumers, their
  partitions paused until then, to the last record.

- KIP-848 (`group.protocol=consumer`): the same stabilisation and 11th-member join with the
  broker-side assignor (`uniform`), at the broker's `group.consumer.heartbeat.interval.ms` of 5000
  (Kafka's default) and 500.
The times come from the consumers' rebalance callbacks (on_assign / on_revoke), which librdkafka
serves inside poll(); every member polls continuously.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import queue as _queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (DOC_PATH, admin_client, create_topic, machine_info, produce_round_robin,  # noqa: E402
                    replace_marked_section, stop_procs)

from share import ShareBroker, _quiet_logger  # noqa: E402

BEGIN_MARK, END_MARK = "<!-- consumer-groups:begin -->", "<!-- consumer-groups:end -->"
MEMBERS = 10
PARTITIONS = 20
VALUE_SIZE = 100
THROUGHPUT_PARTITIONS = 4
GROUP_MEMBERS = 4
BATCH = 500  # consume(num_messages=...) per call: one "batch"
COMMIT_EACH_BATCH = "group of 4, commit after every batch"
AUTO_COMMIT = "group of 4, auto-commit"
ASSIGN = "1 assign() consumer, no group"


# ----------------------------------------------------------------------------- group members (threads)

class Group:
    """Members (one thread each) of one group; tracks what every member holds, and the first moment
    the members hold every partition exactly once with none of them empty."""

    def __init__(self, bootstrap: str, topic: str, group: str, partitions: int, extra: dict) -> None:
        self.bootstrap, self.topic, self.group, self.partitions, self.extra = bootstrap, topic, group, partitions, extra
        self.lock = threading.Lock()
        self.held: list[set[int]] = []
        self.stable_at: float | None = None
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.consumers = []
        self.errors: list[str] = []
        self.callbacks = 0

    def _check(self) -> None:
        if self.stable_at is not None or not self.held:
            return
        if any(not h for h in self.held):
            return
        if sum(len(h) for h in self.held) != self.partitions or len(set().union(*self.held)) != self.partitions:
            return
        self.stable_at = time.monotonic()

    def add_member(self):
        """Create a member (a Consumer, not yet subscribed); returns its start function."""
        from confluent_kafka import Consumer

        conf = {"bootstrap.servers": self.bootstrap, "group.id": self.group, "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "logger": _quiet_logger}
        conf.update(self.extra)
        consumer = Consumer(conf)
        index = len(self.held)
        self.held.append(set())
        self.consumers.append(consumer)
        incremental = conf.get("partition.assignment.strategy") == "cooperative-sticky" \
            or conf.get("group.protocol") == "consumer"  # KIP-848 callbacks are incremental

        def on_assign(_c, partitions) -> None:
            with self.lock:
                self.callbacks += 1
                if incremental:
                    self.held[index].update(tp.partition for tp in partitions)
                else:
                    self.held[index] = {tp.partition for tp in partitions}
                self._check()

        def on_revoke(_c, partitions) -> None:
            with self.lock:
                self.callbacks += 1
                self.held[index].difference_update(tp.partition for tp in partitions)

        def loop() -> None:
            try:
                consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
                while not self.stop.is_set():
                    msg = consumer.poll(0.1)
                    if msg is not None and msg.error() is not None and msg.error().fatal():
                        raise RuntimeError(msg.error().str())
            except BaseException as exc:  # noqa: BLE001 - reported by the measurement
                self.errors.append(f"{type(exc).__name__}: {exc}")

        thread = threading.Thread(target=loop, daemon=True, name=f"member-{index}")
        self.threads.append(thread)
        return thread.start

    def reset_stable(self) -> None:
        with self.lock:
            self.stable_at = None

    def wait_stable(self, timeout_s: float) -> float:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.errors:
                raise RuntimeError(self.errors[0])
            with self.lock:
                if self.stable_at is not None:
                    return self.stable_at
            time.sleep(0.005)
        with self.lock:
            raise RuntimeError(f"group {self.group} not stable after {timeout_s:.0f} s: "
                               f"{[sorted(h) for h in self.held]}")

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)
        closers = [threading.Thread(target=c.close, daemon=True) for c in self.consumers]
        for t in closers:
            t.start()
        for t in closers:
            t.join(15)


def measure_stabilise(bootstrap: str, topic: str, group: str, timeout_s: float, extra: dict | None = None) -> float:
    """Seconds from the first subscribe() of MEMBERS members to every member holding its partitions."""
    g = Group(bootstrap, topic, group, PARTITIONS, extra or {"partition.assignment.strategy": "range"})
    try:
        starts = [g.add_member() for _ in range(MEMBERS)]  # Consumers made before the clock starts
        t0 = time.monotonic()
        for start in starts:
            start()
        return g.wait_stable(timeout_s) - t0
    finally:
        g.close()


def measure_join(bootstrap: str, topic: str, group: str, strategy: str, heartbeat_ms: int, phase: float,
                 timeout_s: float, extra: dict | None = None) -> tuple[float, int, float]:
    """Seconds from an 11th member's subscribe() to every member holding its new assignment, in a
    stable MEMBERS-member group; and the rebalance callbacks served meanwhile. The 11th member
    subscribes 0.2 s + `phase` (0..1) heartbeat intervals after the group became stable: the
    members' heartbeats run in step from then, and the wait for the next one is most of the time.
    Returns (seconds, rebalance callbacks, seconds from the join to the members' next heartbeat
    counted from the stable moment). `extra` replaces the client settings (KIP-848: the broker sets
    the heartbeat interval and assigns)."""
    g = Group(bootstrap, topic, group, PARTITIONS, extra or {"partition.assignment.strategy": strategy,
                                                             "heartbeat.interval.ms": heartbeat_ms})
    try:
        for start in [g.add_member() for _ in range(MEMBERS)]:
            start()
        g.wait_stable(timeout_s)
        pause = 0.2 + phase * heartbeat_ms / 1000.0
        time.sleep(pause)  # settled; a chosen point of the heartbeat cycle
        g.reset_stable()
        start = g.add_member()
        with g.lock:
            callbacks0 = g.callbacks
        t0 = time.monotonic()
        start()
        stable = g.wait_stable(timeout_s)
        with g.lock:
            hb_s = heartbeat_ms / 1000.0
            return stable - t0, g.callbacks - callbacks0, hb_s - (pause % hb_s)
    finally:
        g.close()


# ----------------------------------------------------------------------------- throughput (spawned processes)

def consume_worker(index: int, bootstrap: str, topic: str, group: str | None, mode: str, expected: int, counter,
                   go, out: mp.Queue, deadline_s: float) -> None:
    """One consumer: a group member (subscribe; `commit` mode commits synchronously after every
    non-empty batch, `auto` leaves it to auto-commit) or, with group None, one consumer assign()ed
    every partition from offset 0. Until released, a member keeps polling (rebalances need it)
    with whatever it is assigned paused, and reports the number of partitions it holds after every
    rebalance; released, it consumes until the shared counter reaches `expected`."""
    try:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        conf = {"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest", "logger": _quiet_logger,
                "enable.auto.commit": mode == "auto", "group.id": group or "unused-assign-only",
                "partition.assignment.strategy": "range"}
        consumer = Consumer(conf)
        if group is None:
            # the topic's metadata first: assign()ed before its leader is known, librdkafka retries the
            # start-offset lookup only after 500 ms; then paused until the release, as the members
            consumer.list_topics(topic, timeout=30)
            partitions = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(THROUGHPUT_PARTITIONS)]
            consumer.assign(partitions)
            consumer.pause(partitions)
            out.put(("assigned", index, THROUGHPUT_PARTITIONS))
        else:
            def on_assign(c, partitions) -> None:
                c.assign(partitions)
                if not go.is_set():
                    c.pause(partitions)
                out.put(("assigned", index, len(partitions)))

            def on_revoke(c, _partitions) -> None:
                c.unassign()
                out.put(("assigned", index, 0))

            consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        early = 0
        while not go.is_set():
            msg = consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                early += 1  # paused partitions return none; counted all the same
        consumer.resume(consumer.assignment())
        lock = counter.get_lock()
        got, commits = early, 0
        with lock:
            counter.value += early
        t0 = time.monotonic()
        last = first = None
        while time.monotonic() - t0 < deadline_s:
            msgs = consumer.consume(num_messages=BATCH, timeout=0.1)
            n = 0
            for m in msgs:
                if m.error() is None:
                    n += 1
            if n:
                last = time.monotonic()
                first = first or last
                got += n
                if mode == "commit":
                    consumer.commit(asynchronous=False)
                    commits += 1
                with lock:
                    counter.value += n
                    total = counter.value
            else:
                total = counter.value
            if total >= expected:
                break
        consumer.close()
        out.put(("done", index, dict(first=first, end=last, records=got, commits=commits)))
    except BaseException as exc:  # noqa: BLE001 - report, never hang the parent
        out.put(("error", index, f"{type(exc).__name__}: {exc}"))


@dataclass
class Throughput:
    name: str
    rate: float
    seconds: float
    per_consumer: list[int] = field(default_factory=list)
    commits: int = 0
    first_after_release: float = 0.0  # seconds from the release to the first record


def measure_throughput(bootstrap: str, topic: str, name: str, records: int, run: int, deadline_s: float) -> Throughput:
    ctx = mp.get_context("spawn")
    go, out, counter = ctx.Event(), ctx.Queue(), ctx.Value("q", 0)
    if name == ASSIGN:
        group, mode, n = None, "none", 1
    else:
        mode = "commit" if name == COMMIT_EACH_BATCH else "auto"
        group, n = f"tp-{run}-{mode}", GROUP_MEMBERS
    procs = [ctx.Process(target=consume_worker, daemon=True,
                         args=(i, bootstrap, topic, group, mode, records, counter, go, out, deadline_s))
             for i in range(n)]
    try:
        for p in procs:
            p.start()
        held = [0] * n
        settled_since = None
        start_by = time.monotonic() + 90
        while True:  # every member holds one partition (the whole topic for the assign() consumer), for 0.5 s
            try:
                kind, i, payload = out.get(timeout=0.05)
                if kind == "error":
                    raise RuntimeError(payload)
                held[i] = payload
                settled_since = None
            except _queue.Empty:
                pass
            if sum(held) == THROUGHPUT_PARTITIONS and all(held):
                settled_since = settled_since or time.monotonic()
                if time.monotonic() - settled_since >= 0.5:
                    break
            if time.monotonic() > start_by:
                raise RuntimeError(f"{name}: consumers not assigned: {held}")
        t0 = time.monotonic()
        go.set()
        results = []
        while len(results) < n:
            kind, i, payload = out.get(timeout=deadline_s + 60)
            if kind == "error":
                raise RuntimeError(payload)
            if kind == "done":
                results.append(payload)
            # ("assigned", ...) after the release: a rebalance during the run, which a member's
            # consumption would show; the counts are checked below
    finally:
        go.set()
        stop_procs(procs)
    got = sum(r["records"] for r in results)
    if got != records:
        raise RuntimeError(f"{name}: consumed {got} records, expected {records}")
    if mode == "commit":  # every record's offset was committed
        _check_committed(bootstrap, group, topic, records)
    first = min(r["first"] for r in results if r["first"] is not None)
    seconds = max(r["end"] for r in results if r["end"] is not None) - t0
    return Throughput(name, records / seconds, seconds, sorted(r["records"] for r in results),
                      sum(r["commits"] for r in results), first - t0)


def _check_committed(bootstrap: str, group: str, topic: str, records: int) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    admin = admin_client(bootstrap)
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(THROUGHPUT_PARTITIONS)])
    answer = admin.list_consumer_group_offsets([request])[group].result(30)
    committed = sum(tp.offset for tp in answer.topic_partitions)
    if committed != records:
        raise RuntimeError(f"group {group}: committed offsets sum to {committed}, expected {records}: "
                           f"{[(tp.partition, tp.offset) for tp in answer.topic_partitions]}")


def produce(bootstrap: str, topic: str, records: int) -> float:
    return produce_round_robin({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1, "logger": _quiet_logger},
                               topic, records, THROUGHPUT_PARTITIONS, b"x" * VALUE_SIZE, deadline_s=120.0)


# ----------------------------------------------------------------------------- report

@dataclass
class Report:
    stabilise: dict[int, list[float]] = field(default_factory=dict)              # delay -> seconds per run
    join: dict[tuple[str, int], list[tuple[float, int, float]]] = field(default_factory=dict)  # (strategy, hb) -> runs
    throughput: dict[str, list[Throughput]] = field(default_factory=dict)
    kip848_stabilise: dict[int, list[float]] = field(default_factory=dict)  # broker heartbeat ms -> runs
    kip848_join: dict[int, list[tuple[float, int, float]]] = field(default_factory=dict)


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:,.0f}"


def _runs_ms(values: list[float]) -> str:
    return ", ".join(f"{v * 1000:,.0f}" for v in values)


def tables(report: Report) -> str:
    out = []
    if report.stabilise:
        rows = ["| `group.initial.rebalance.delay.ms` | median (ms) | runs (ms) |", "|---:|---:|---|"]
        for delay, runs in sorted(report.stabilise.items(), reverse=True):
            rows.append(f"| {delay} | {_ms(runs)} | {_runs_ms(runs)} |")
        out.append("### Stabilisation: 10 members, first subscribe() to every member assigned\n\n" + "\n".join(rows))
    if report.join:
        rows = ["| strategy | `heartbeat.interval.ms` | mean (ms) | runs (ms) | mean beyond the wait for the next "
                "heartbeat (ms) | rebalance callbacks |",
                "|---|---:|---:|---|---:|---:|"]
        for (strategy, hb), runs in report.join.items():
            label = "eager (`range`)" if strategy == "range" else "incremental (`cooperative-sticky`)"
            callbacks = statistics.median(c for _, c, _ in runs)
            beyond = statistics.mean(s - w for s, _, w in runs)
            rows.append(f"| {label} | {hb} | {statistics.mean(s for s, _, _ in runs) * 1000:,.0f} | "
                        f"{_runs_ms([s for s, _, _ in runs])} | {beyond * 1000:,.0f} | {callbacks:.0f} |")
        out.append("### Rebalance: an 11th member joins a stable 10-member group\n\n" + "\n".join(rows))
    if report.kip848_stabilise or report.kip848_join:
        rows = ["| `group.consumer.heartbeat.interval.ms` | 10 members stabilise: median (ms) | runs (ms) | "
                "11th member joins: mean (ms) | runs (ms) |",
                "|---:|---:|---|---:|---|"]
        for hb in sorted(set(report.kip848_stabilise) | set(report.kip848_join), reverse=True):
            st, jn = report.kip848_stabilise.get(hb, []), report.kip848_join.get(hb, [])
            mean = f"{statistics.mean(x for x, _, _ in jn) * 1000:,.0f}" if jn else "-"
            rows.append(f"| {hb} | {_ms(st) if st else '-'} | {_runs_ms(st)} | {mean} | "
                        f"{_runs_ms([x for x, _, _ in jn])} |")
        out.append("### KIP-848 (`group.protocol=consumer`, `uniform`): stabilisation and an 11th member's join\n\n"
                   + "\n".join(rows))
    if report.throughput:
        best = {name: max(runs, key=lambda r: r.rate) for name, runs in report.throughput.items()}
        base = best.get(ASSIGN)
        rows = ["| consumers | records/s (best) | runs (records/s) | vs assign() | first record after the release "
                "(ms, each run) | records per consumer | commits |",
                "|---|---:|---|---:|---|---|---:|"]
        for name, runs in report.throughput.items():
            b = best[name]
            ratio = f"{b.rate / base.rate:.2f}" if base else "-"
            rows.append(f"| {name} | {b.rate:,.0f} | {', '.join(f'{r.rate:,.0f}' for r in runs)} | {ratio} | "
                        f"{', '.join(f'{r.first_after_release * 1000:,.0f}' for r in runs)} | "
                        f"{' / '.join(f'{x:,}' for x in b.per_consumer)} | {b.commits:,} |")
        out.append("### Consume throughput: 200,000 records of 100 bytes, 4 partitions\n\n" + "\n".join(rows))
    return "\n\n".join(out)


def section(report: Report, args, elapsed_s: float) -> str:

    info = machine_info()
    machine = "\n".join(["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in info.items()])
    return f"""{BEGIN_MARK}
# Consumer groups

Generated on {time.strftime('%Y-%m-%d %H:%M')} by `.venv/bin/python benchmarks/consumer_groups.py --update-docs{
        f" --repeat {args.repeat}" if args.repeat != 3 else ""}` (the run took {elapsed_s:.0f} s). This section is rewritten by `benchmarks/consumer_groups.py` (`--update-docs`). Reproduce with:

<!-- snippet: skip: a measurement that takes minutes and rewrites this file; run by hand to refresh the tables -->
```sh
.venv/bin/python benchmarks/consumer_groups.py --update-docs      # all four measurements, rewrites this section
.venv/bin/python benchmarks/consumer_groups.py --only join        # some of them, prints only
```

## What is measured (consumer groups)

Classic consumer groups (JoinGroup / SyncGroup / Heartbeat, OffsetCommit) served by a `python -m
quafka broker` child process to confluent-kafka {_versions()} consumers on the same machine.

- **Stabilisation**: 10 members (one thread each, eager `range`) subscribe at once to a
  20-partition topic; the time from the first `subscribe()` to the moment every member holds its
  partitions (the 20 partitions, each once, no member empty), taken in the members' `on_assign`
  callbacks. With the broker's `group.initial.rebalance.delay.ms` at Kafka's default 3000 the
  group waits for more members before its first rebalance; at 0 the first member's join completes
  at once and the others join in further rebalances.
- **Rebalance on join**: an 11th member joins a stable 10-member group (`group.initial.rebalance.delay.ms=0`);
  the time from its `subscribe()` to every member holding its new assignment, eager (`range`: every
  member gives up everything and rejoins) and incremental (`cooperative-sticky`: two rebalances,
  only moved partitions revoked). The 10 members learn of the rebalance from a heartbeat, so
  librdkafka's `heartbeat.interval.ms` (default 3000, Kafka's too) bounds the time; the 500 rows
  show it.
- **Consume throughput**: 200,000 records of 100 bytes produced beforehand on a 4-partition topic;
  each consumer in its own spawned process calls `consume(num_messages={BATCH}, timeout=0.1)`. A
  4-member group committing synchronously (`commit(asynchronous=False)`) after every non-empty
  batch, the same group with auto-commit (every 5 s), and one consumer `assign()`ed all 4
  partitions (no group, no commits). Every consumer holds its partitions paused (start offsets
  already looked up) until the release; the clock runs from the release to the last record; the
  best of {args.repeat} runs is kept and compared to the `assign()` consumer.

- **KIP-848** (`group.protocol=consumer`): the stabilisation and the 11th member's join again,
  with the broker's `uniform` assignor and the broker's `group.consumer.heartbeat.interval.ms` at
  Kafka's default 5000 and at 500 (a member learns of a new assignment from its next heartbeat's
  answer; there is no join phase and no initial delay).

## Machine (consumer groups)

{machine}

## Results (consumer groups)

{tables(report)}

## Analysis (consumer groups)

{analysis(report)}
{END_MARK}
"""


def analysis(report: Report) -> str:
    """The findings, with the ratios of this run."""
    out = []
    st = {d: statistics.median(r) for d, r in report.stabilise.items()}
    if 3000 in st and 0 in st:
        out.append(
            f"- **Initial rebalance delay.** With the default 3000 ms a 10-member group needed {st[3000]:.1f} s "
            f"(median) to stabilise, {st[3000] / max(st[0], 1e-3):.1f}x the {st[0] * 1000:,.0f} ms it needed at 0. "
            "About twice "
            "the delay is Kafka's rule, not a slowness: the first JoinGroup arms the delay, and when it expires "
            "after new members have joined it is armed once more (GroupMetadataManager."
            "tryCompleteInitialRebalanceElseSchedule; quafka's classic group coordinator does the same), so "
            "members that all join within the first 3 s are assigned after about 6 s, in one generation. At 0 "
            "the first JoinGroup completes at once with the members that have joined by then, and every later "
            "join starts another rebalance. The runs then fall into three kinds, by timing: about 0.1-0.5 s "
            "when the later "
            "joins arrive while the generation is still forming; about `heartbeat.interval.ms` (3000) when the "
            "group has already become Stable, whose members learn of the rebalance only from their next "
            "heartbeat; and about 2 s when a member's SyncGroup is answered REBALANCE_IN_PROGRESS (a join "
            "arrived between its JoinGroup response and its SyncGroup, as Kafka answers too): librdkafka then "
            "holds its next JoinGroup back for about two seconds (seen in its `debug=cgrp` log: the rejoin is "
            "sent 1.9 s after the failed SyncGroup). A median over three runs of such a time is rough; the runs "
            "are listed.")
    join = {k: statistics.mean(s for s, _, _ in r) for k, r in report.join.items()}
    beyond = {k: statistics.mean(s - w for s, _, w in r) for k, r in report.join.items()}
    for hb in sorted({hb for _, hb in join}, reverse=True):
        eager, coop = join.get(("range", hb)), join.get(("cooperative-sticky", hb))
        if eager is not None and coop is not None:
            out.append(
                f"- **Join of an 11th member, heartbeat.interval.ms={hb}.** Eager: {eager * 1000:,.0f} ms on "
                f"average; cooperative-sticky: {coop * 1000:,.0f} ms ({coop / max(eager, 1e-3):.1f}x). The 10 "
                "members learn of the rebalance from their next heartbeat (REBALANCE_IN_PROGRESS), so the time is "
                "mostly that wait: the runs join at evenly spread points of the heartbeat cycle, and the eager "
                "times follow the time left to the next heartbeat; beyond that wait the eager rebalance itself "
                f"(11 JoinGroup, 11 SyncGroup, the callbacks) took {beyond[('range', hb)] * 1000:,.0f} ms. The "
                "cooperative protocol needs two rebalances "
                "(the first revokes the moved partitions, the second assigns them), and the members that revoked "
                "nothing learn of the second from a heartbeat again: about one more interval at 3000 ms, and about "
                "1 s rather than 0.5 s at 500 ms (the members that revoked rejoin no sooner than librdkafka's rejoin "
                "hold-back allows, as in the stabilisation runs; not traced further). In exchange, the "
                "members keep consuming the partitions they keep; eager members hold nothing between the "
                "revocation and the new assignment.")
    tp = {name: max(runs, key=lambda r: r.rate) for name, runs in report.throughput.items()}
    if ASSIGN in tp and COMMIT_EACH_BATCH in tp:
        base = tp[ASSIGN].rate
        line = (f"- **Consume throughput.** The 4-member group committing after every batch read "
                f"{tp[COMMIT_EACH_BATCH].rate:,.0f} records/s, {tp[COMMIT_EACH_BATCH].rate / base:.2f}x the single "
                f"`assign()` consumer's {base:,.0f} records/s")
        if AUTO_COMMIT in tp:
            line += (f"; without commits in the loop the group read {tp[AUTO_COMMIT].rate:,.0f} records/s "
                     f"({tp[AUTO_COMMIT].rate / base:.2f}x)")
        firsts = {name: statistics.median(r.first_after_release for r in runs)
                  for name, runs in report.throughput.items()}
        after = {name: max(b.seconds - b.first_after_release, 1e-3) for name, b in tp.items()}
        line += (". These rows measure start-up more than fetching: after the release (`resume()` of the paused "
                 "partitions) the first record took "
                 + ", ".join(f"{firsts[n] * 1000:,.0f} ms" for n in tp)
                 + " (median, in the table's order), and the rest of the 200,000 records then came within "
                 + ", ".join(f"{after[n] * 1000:,.0f} ms" for n in tp)
                 + ". That delay is librdkafka's: with `debug=fetch`, a consumer `assign()`ed before it has the "
                 "topic's metadata retries its start-offset lookup only after 500 ms (hence `list_topics()` "
                 "first here), and after `resume()` the first record also comes about 0.5 s later (not traced "
                 "further). A prefetch queue kept small (`queued.max.messages.kbytes=1024`), to start the clock "
                 "at the first record instead, slowed the consumers down more (librdkafka's "
                 "`fetch.queue.backoff.ms` when its queue is full), so it is not used. Once fetching, the broker "
                 "serves the 20 MB in a fraction of a second to one consumer or "
                 "four; the synchronous OffsetCommit after each batch of up to 500 records costs one round trip "
                 "per batch (about 400 commits)")
        out.append(line + ". The committed offsets were checked after every committing run: they sum to the "
                   "records produced.")
    for hb in sorted(set(report.kip848_stabilise) | set(report.kip848_join), reverse=True):
        st, jn = report.kip848_stabilise.get(hb), report.kip848_join.get(hb)
        parts = []
        if st:
            parts.append(f"10 members stabilised in {statistics.median(st) * 1000:,.0f} ms (median)")
        if jn:
            parts.append(f"an 11th member's join took {statistics.mean(x for x, _, _ in jn) * 1000:,.0f} ms on "
                         "average, whatever the point of the heartbeat cycle it joined at")
        if parts:
            out.append(f"- **KIP-848, group.consumer.heartbeat.interval.ms={hb}.** " + "; ".join(parts) + ". About "
                       "one interval, by the protocol: a joining member is given a partition only once its owner "
                       "has revoked it (revocation before assignment), the owners revoke when their next "
                       "heartbeat's answer shows the new target, and the joiner learns that its partitions are free "
                       "from its own next heartbeat, one interval after its first. There is no join barrier: the "
                       "members that keep their partitions consume on throughout, and no member waits for another "
                       "to rejoin, unlike the classic protocol's rows above.")
    return "\n".join(out)


def _versions() -> str:
    try:
        import confluent_kafka

        return f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})"
    except ImportError:
        return "(not installed)"


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Classic consumer groups with confluent-kafka against a quafka broker child process: time to "
                    "stabilise a 10-member group (group.initial.rebalance.delay.ms 3000 and 0), rebalance time when an "
                    "11th member joins (eager and cooperative-sticky), and consume throughput of a committing "
                    "4-member group against one assign() consumer.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--only", default="stabilise,join,throughput,kip848",
                        help="comma-separated measurements: stabilise, join, throughput, kip848")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each row")
    parser.add_argument("--records", type=int, default=200_000, help="records of the throughput rows")
    parser.add_argument("--heartbeats", default="3000,500", help="heartbeat.interval.ms values of the join rows")
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds one measurement may take")
    parser.add_argument("--update-docs", action="store_true", help="rewrite this section of docs/benchmarks.md")
    parser.add_argument("--doc", default=str(DOC_PATH),
                        help="the file --update-docs rewrites")
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    unknown = only - {"stabilise", "join", "throughput", "kip848"}
    if unknown:
        parser.error(f"--only: unknown measurement(s) {', '.join(sorted(unknown))}")
    started = time.monotonic()
    report = Report()
    work_dir = tempfile.mkdtemp(prefix="quafka-groups-")
    try:
        if "stabilise" in only:
            for delay in (3000, 0):
                broker = ShareBroker(work_dir + f"/d{delay}", overrides=[f"group.initial.rebalance.delay.ms={delay}"])
                Path(work_dir, f"d{delay}").mkdir(parents=True, exist_ok=True)
                broker.start()
                try:
                    admin = admin_client(broker.bootstrap)
                    create_topic(admin, "stab", PARTITIONS)
                    runs = [measure_stabilise(broker.bootstrap, "stab", f"stab-{delay}-{i}", args.deadline)
                            for i in range(args.repeat)]
                finally:
                    broker.stop()
                report.stabilise[delay] = runs
                print(f"stabilise, delay {delay} ms: {_runs_ms(runs)} ms", flush=True)
        if "kip848" in only:
            for hb in (5000, 500):
                overrides = [f"group.consumer.heartbeat.interval.ms={hb}",
                             f"group.consumer.min.heartbeat.interval.ms={min(hb, 5000)}"]
                Path(work_dir, f"k{hb}").mkdir(parents=True, exist_ok=True)
                broker = ShareBroker(work_dir + f"/k{hb}", overrides=overrides).start()
                extra = {"group.protocol": "consumer"}
                try:
                    admin = admin_client(broker.bootstrap)
                    create_topic(admin, "k", PARTITIONS)
                    report.kip848_stabilise[hb] = [measure_stabilise(broker.bootstrap, "k", f"k-stab-{i}",
                                                                     args.deadline, extra) for i in range(args.repeat)]
                    report.kip848_join[hb] = [measure_join(broker.bootstrap, "k", f"k-join-{i}", "uniform", hb,
                                                           (i + 0.5) / args.repeat, args.deadline, extra)
                                              for i in range(args.repeat)]
                finally:
                    broker.stop()
                print(f"kip848, heartbeat {hb} ms: stabilise {_runs_ms(report.kip848_stabilise[hb])} ms, join "
                      f"{_runs_ms([x for x, _, _ in report.kip848_join[hb]])} ms", flush=True)
        if only & {"join", "throughput"}:
            Path(work_dir, "main").mkdir(parents=True, exist_ok=True)
            broker = ShareBroker(work_dir + "/main", overrides=["group.initial.rebalance.delay.ms=0"]).start()
            try:
                admin = admin_client(broker.bootstrap)
                if "join" in only:
                    create_topic(admin, "join", PARTITIONS)
                    for hb in map(int, args.heartbeats.split(",")):
                        for strategy in ("range", "cooperative-sticky"):
                            runs = [measure_join(broker.bootstrap, "join", f"join-{strategy}-{hb}-{i}", strategy, hb,
                                                 (i + 0.5) / args.repeat, args.deadline) for i in range(args.repeat)]
                            report.join[(strategy, hb)] = runs
                            print(f"join, {strategy}, heartbeat {hb} ms: {_runs_ms([s for s, _, _ in runs])} ms, "
                                  f"callbacks {[c for _, c, _ in runs]}", flush=True)
                if "throughput" in only:
                    create_topic(admin, "tp", THROUGHPUT_PARTITIONS)
                    took = produce(broker.bootstrap, "tp", args.records)
                    print(f"produced {args.records:,} records in {took:.1f} s", flush=True)
                    for i in range(args.repeat):
                        for name in (COMMIT_EACH_BATCH, AUTO_COMMIT, ASSIGN):
                            r = measure_throughput(broker.bootstrap, "tp", name, args.records, i, args.deadline)
                            report.throughput.setdefault(name, []).append(r)
                            print(f"throughput, {name}: {r.rate:,.0f} records/s ({r.seconds:.2f} s; first record "
                                  f"{r.first_after_release * 1000:.0f} ms after the release), per consumer "
                                  f"{r.per_consumer}, commits {r.commits}", flush=True)
            finally:
                broker.stop()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    elapsed = time.monotonic() - started
    print()
    print(tables(report))
    if args.update_docs:
        replace_marked_section(section(report, args, elapsed), Path(args.doc), BEGIN_MARK, END_MARK)
        print(f"wrote the consumer-groups section of {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
