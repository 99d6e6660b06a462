#!/usr/bin/env python3
"""quafka's delivery controls measured with confluent-kafka clients (docs/benchmarks.md, "Delivery
controls"; docs/job-queues.md cites the window rows).

A `python -m quafka broker` child process; confluent-kafka ShareConsumers, each in its own spawned
process, explicit acknowledgement; the group configs set with confluent's AdminClient. Rows:

- window: 20,000 records consumed by 4 consumers at max.poll.records=100, ACCEPT each (counted
  once `commit_sync()` returned: the broker has the acknowledgements) — with the
  window empty, and with 1,000 records waiting in a one-hour redelivery backoff at the head of the
  partition (half of share.partition.max.record.locks=2000); then with 2,500 waiting (more than the
  window holds: nothing new can be delivered, the broker logs why and counts the stall) and the
  same with the window raised to 5,000;
- delay: 2,000 records produced with `quafka.deliver.after.ms` 1,000-5,000 ms (CreateTime), taken by
  4 consumers: how late after its due time each arrived (p50, p99, max), and that none came early;
- keys: 8 consumers, 100 keys, 50,000 records, jobs of 0-5 ms (a sleep), 5 % released once,
  max.poll.records=10 — with quafka.share.key.ordering off and on: records/s and broker CPU per
  record.

`--update-docs` rewrites the section between `<!-- delivery-controls:begin -->` and
`<!-- delivery-controls:end -->` of docs/benchmarks.md. `--quick` runs smaller counts.
"""

from __future__ import annotations

import multiprocessing as mp
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (  # noqa: E402
    DOC_PATH,
    admin_client,
    arg_parser,
    create_topic,
    finish,
    machine_info,
    markdown_grid,
    print_blocks,
    replace_marked_section,
    stop_procs,
    text_grid,
    worker_reports,
)
from produce_fetch import Broker  # noqa: E402

SEED = 25


def set_group(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin = admin_client(bootstrap)  # held until the results are in (a dropped client cancels them)
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(10)


def new_topic(bootstrap: str, name: str) -> None:
    admin = admin_client(bootstrap)
    create_topic(admin, name, 1)


def produce(bootstrap: str, topic: str, values, *, keys=None, headers=None, linger_ms: int = 5) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms})
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value, key=keys[i] if keys else None, headers=headers[i] if headers else None)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


# ----------------------------------------------------------------------------- consumer processes
# Top-level functions: they run in spawned processes.


def worker(bootstrap: str, topic: str, group: str, conf: dict, mode: str, expected: int, counter, go, out,
           seed: int, deadline_s: float) -> None:
    """One ShareConsumer. mode "accept": ACCEPT everything; "release": RELEASE everything (to put
    records into a backoff); "delay": ACCEPT, reporting each record's lateness after its due time;
    "jobs": a 0-5 ms sleep per record, RELEASE 5 % of first deliveries, ACCEPT the rest."""

    try:
        _consume(bootstrap, topic, group, conf, mode, expected, counter, go, out, seed, deadline_s)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        out.put(("error", f"{type(exc).__name__}: {exc}"))


def _consume(bootstrap: str, topic: str, group: str, conf: dict, mode: str, expected: int, counter, go, out,
             seed: int, deadline_s: float) -> None:
    from confluent_kafka import AcknowledgeType, ShareConsumer

    rng = random.Random(seed)
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit",
                       "log_level": 3, **conf})
    c.subscribe([topic])
    late: list[float] = []
    handled = 0
    go.wait(120)
    end = time.monotonic() + deadline_s
    try:
        while counter.value < expected and time.monotonic() < end:
            done = 0
            for m in c.poll(0.1):
                if m.error() is not None:
                    continue
                ack = AcknowledgeType.ACCEPT
                if mode == "release":
                    ack = AcknowledgeType.RELEASE
                elif mode == "delay":
                    due = m.timestamp()[1] + int(dict(m.headers())["quafka.deliver.after.ms"])
                    late.append(time.time() * 1000 - due)
                elif mode == "jobs":
                    time.sleep(rng.random() * 0.005)
                    if m.delivery_count() == 1 and rng.random() < 0.05:
                        ack = AcknowledgeType.RELEASE
                c.acknowledge(m, ack)
                if ack == AcknowledgeType.ACCEPT or mode == "release":
                    done += 1
            if mode == "accept":
                c.commit_sync()  # counted once the broker has the acknowledgements
            else:
                c.commit_async()
            if done:
                handled += done
                with counter.get_lock():
                    counter.value += done
                done = 0
        c.commit_sync(30)
    finally:
        c.close()
    out.put(("ok", (handled, late)))


def run_consumers(broker: Broker, topic: str, group: str, n: int, conf: dict, mode: str, expected: int,
                  deadline_s: float, produce_after=None) -> tuple[float, float, list]:
    """`n` consumers in spawned processes until `expected` records are handled (or the deadline);
    `produce_after()` runs once they are subscribed. (wall s, broker CPU s, [(handled, late)])."""
    ctx = mp.get_context("spawn")
    counter, go, out = ctx.Value("q", 0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(broker.bootstrap, topic, group, conf, mode, expected, counter, go, out,
                                              SEED + i, deadline_s), daemon=True) for i in range(n)]
    for p in procs:
        p.start()
    try:
        time.sleep(6.0)  # members join and get the partition (Kafka's ~5 s first assignment)
        if produce_after is not None:
            produce_after()
        cpu0, t0 = broker.cpu_seconds(), time.monotonic()
        go.set()
        while counter.value < expected and time.monotonic() - t0 < deadline_s:
            time.sleep(0.02)
        wall, cpu = time.monotonic() - t0, broker.cpu_seconds() - cpu0
        reports = worker_reports(out, n, time.monotonic() + 60, "a consumer failed")
    finally:
        stop_procs(procs)
    return wall, cpu, reports


# ----------------------------------------------------------------------------- measurements


def window_rows(broker: Broker, records: int, deadline_s: float) -> list[list[str]]:
    rows = []
    for name, waiting, locks in (("empty window", 0, 2000), ("1,000 waiting in backoff", 1000, 2000),
                                 ("2,500 waiting (window 2,000)", 2500, 2000),
                                 ("2,500 waiting, window raised to 5,000", 2500, 5000)):
        topic = group = f"window-{waiting}-{locks}"
        new_topic(broker.bootstrap, topic)
        set_group(broker.bootstrap, group, {"share.auto.offset.reset": "earliest",
                                            "share.partition.max.record.locks": str(locks),
                                            "quafka.share.redelivery.backoff.ms": "3600000"})
        if waiting:
            produce(broker.bootstrap, topic, [b"fails"] * waiting)
            run_consumers(broker, topic, group, 1, {"max.poll.records": 500}, "release", waiting, deadline_s)
        stall = waiting > locks
        wall, cpu, _ = run_consumers(broker, topic, group, 4, {"max.poll.records": 100}, "accept", records,
                                     10.0 if stall else deadline_s,
                                     produce_after=lambda t=topic: produce(broker.bootstrap, t, [b"job"] * records, linger_ms=0))
        done = sum(h for h, _ in _)
        rate = done / wall if wall else 0.0
        print(f"window, {name}: {done:,} of {records:,} records in {wall:.1f} s, {rate:,.0f} records/s", flush=True)
        rows.append([name, f"{locks:,}", f"{done:,} / {records:,}", f"{rate:,.0f}",
                     f"{cpu / done * 1e6:.0f}" if done else "-"])
    return rows


def delay_row(broker: Broker, records: int, deadline_s: float) -> list[str]:
    topic = group = "delayed"
    new_topic(broker.bootstrap, topic)
    set_group(broker.bootstrap, group, {"share.auto.offset.reset": "earliest",
                                        "quafka.share.delivery.delay.enable": "true"})
    rng = random.Random(SEED)
    headers = [{"quafka.deliver.after.ms": str(rng.randrange(1000, 5000)).encode()} for _ in range(records)]
    wall, cpu, reports = run_consumers(broker, topic, group, 4, {"max.poll.records": 100}, "delay", records,
                                       deadline_s, produce_after=lambda: produce(
                                           broker.bootstrap, topic, [b"job"] * records, headers=headers, linger_ms=0))
    late = sorted(x for _, lates in reports for x in lates)
    pct = lambda q: late[min(int(q * len(late)), len(late) - 1)]  # noqa: E731
    print(f"delay: {len(late):,} records, lateness p50 {pct(.5):.0f} ms, p99 {pct(.99):.0f} ms, max {late[-1]:.0f} ms, "
          f"earliest {late[0]:.0f} ms", flush=True)
    return [f"{len(late):,}", f"{late[0]:.0f}", f"{pct(.5):.0f}", f"{pct(.99):.0f}", f"{late[-1]:.0f}"]


def key_rows(broker: Broker, records: int, deadline_s: float) -> list[list[str]]:
    rows = []
    rng = random.Random(SEED)
    keys = [b"key-%d" % rng.randrange(100) for _ in range(records)]
    for ordering in ("false", "true"):
        topic = group = f"keys-{ordering}"
        new_topic(broker.bootstrap, topic)
        set_group(broker.bootstrap, group, {"share.auto.offset.reset": "earliest",
                                            "quafka.share.key.ordering": ordering})
        produce(broker.bootstrap, topic, [str(i).encode() for i in range(records)], keys=keys, linger_ms=0)
        wall, cpu, reports = run_consumers(broker, topic, group, 8, {"max.poll.records": 10}, "jobs", records,
                                           deadline_s)
        done = sum(h for h, _ in reports)
        print(f"keys, key ordering {ordering}: {done:,} records in {wall:.1f} s, {done / wall:,.0f} records/s, "
              f"broker {cpu / done * 1e6:.0f} µs/record", flush=True)
        rows.append(["on" if ordering == "true" else "off", f"{done:,}", f"{wall:.1f}", f"{done / wall:,.0f}",
                     f"{cpu / done * 1e6:.0f}", " / ".join(str(h) for h, _ in reports)])
    return rows


def section(window, delay, keys, args, elapsed: float) -> str:
    m = machine_info()
    parts = ["<!-- delivery-controls:begin -->",
             f"Measured by `benchmarks/delivery_controls.py` ({m.get('CPU model', '?')}, {m.get('CPUs (nproc)', '?')} "
             f"CPUs, quafka {m.get('quafka commit', '?')}; {elapsed:.0f} s). confluent-kafka ShareConsumers "
             f"({m.get('confluent-kafka / librdkafka', '?')}), one process each, explicit acknowledgement, against a "
             "`quafka broker` child process."]
    if window:
        parts.append("**Waiting records and the window** (4 consumers, max.poll.records=100, ACCEPT each; the waiting "
                     "records wait one hour):\n\n" + markdown_grid(
                         ["in the window", "share.partition.max.record.locks", "delivered", "records/s",
                          "broker µs/record"], window))
    if delay:
        parts.append("**Delayed delivery** (`quafka.deliver.after.ms` 1,000-5,000 ms; lateness = arrival at the "
                     "consumer minus due time, ms; negative would be early):\n\n" + markdown_grid(
                         ["records", "earliest", "p50", "p99", "max"], [delay]))
    if keys:
        parts.append("**Key ordering** (8 consumers, 100 keys, jobs of 0-5 ms, 5 % released once, "
                     "max.poll.records=10):\n\n" + markdown_grid(
                         ["key ordering", "records", "wall s", "records/s", "broker µs/record", "per consumer"], keys))
    parts.append("<!-- delivery-controls:end -->")
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = arg_parser(__doc__, epilog=__doc__)
    parser.add_argument("--only", default="window,delay,keys", help="comma-separated: window, delay, keys")
    parser.add_argument("--quick", action="store_true", help="smaller counts (does not write the doc)")
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds one measurement may take")
    parser.add_argument("--update-docs", action="store_true", help="rewrite this section of docs/benchmarks.md")
    parser.add_argument("--doc", default=str(DOC_PATH), help="the file --update-docs rewrites")
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    if only - {"window", "delay", "keys"}:
        parser.error(f"--only: unknown measurement(s) {', '.join(sorted(only - {'window', 'delay', 'keys'}))}")
    import shutil
    import tempfile

    started = time.monotonic()
    work_dir = tempfile.mkdtemp(prefix="quafka-controls-")
    broker = Broker(work_dir, overrides=["group.share.max.partition.max.record.locks=10000"]).start()
    window = keys = []
    delay = None
    try:
        if "window" in only:
            window = window_rows(broker, 5_000 if args.quick else 20_000, args.deadline)
        if "delay" in only:
            delay = delay_row(broker, 200 if args.quick else 2_000, args.deadline)
        if "keys" in only:
            keys = key_rows(broker, 5_000 if args.quick else 50_000, args.deadline)
    finally:
        broker.stop()
        shutil.rmtree(work_dir, ignore_errors=True)
    elapsed = time.monotonic() - started
    print_blocks(text_grid(["window", "locks", "delivered", "records/s", "µs/record"], window) if window else None,
                 text_grid(["records", "earliest", "p50", "p99", "max"], [delay]) if delay else None,
                 text_grid(["ordering", "records", "wall s", "records/s", "µs/record", "per consumer"], keys)
                 if keys else None)
    if args.update_docs and not args.quick:
        replace_marked_section(section(window, delay, keys, args, elapsed), Path(args.doc),
                               "<!-- delivery-controls:begin -->", "<!-- delivery-controls:end -->")
        print(f"wrote the delivery-controls section of {args.doc}")
    return finish([], elapsed)


if __name__ == "__main__":
    sys.exit(main())
