#!/usr/bin/env python3
"""The worker framework's cost per job against a raw quafka ShareConsumer loop (issue 19, point 5:
at 10k trivial jobs/s the framework may cost at most 15 % more CPU per job).

The script starts `python -m quafka broker` in a child process (fresh temporary log dir, free
port; benchmarks/produce_fetch.py's Broker), and for each variant and `--repeat` round: a fresh
1-partition topic and share group (share.auto.offset.reset=earliest), one consumer process, and a
producer in this process paced at `--rate` records/s (100-byte values) for `--seconds`. The
consumer processes every job as it comes, and reports the CPU its process used (user + system,
all threads) from the moment the producer starts to its last job, per job. The variants take
turns, and each round's ratio framework / raw is reported with the median of the rounds: the
machine's speed drifts between rounds by more than the difference measured.

- raw: `quafka.client.ShareConsumer`, explicit mode, `share.acquire.mode=record_limit`,
  `max.poll.records` as given; per record a trivial job (`len(value)`) and `acknowledge(record)`;
- framework: `quafka.framework` share-group route with concurrency 1 and the same max_poll_records
  (its consumer runs with the same configs), `consume_one` doing the same trivial job; the
  framework accepts it when it returns. No event subscribers and no metrics endpoint (the
  default): what a plain `quafka worker` costs.

    .venv/bin/python benchmarks/framework.py                       # 10k jobs/s for 10 s, 7 rounds
    .venv/bin/python benchmarks/framework.py --update-docs         # the documented run
    .venv/bin/python benchmarks/framework.py --seconds 3 --repeat 1  # smoke run
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (  # noqa: E402
    DOC_PATH,
    BrokerRun,
    _cpu_self,
    arg_parser,
    create_topic,
    finish,
    interrupted,
    machine_info,
    markdown_grid,
    print_blocks,
    replace_marked_section,
    text_grid,
)

from produce_fetch import Broker  # noqa: E402
from share import set_group_configs, wait_quiet  # noqa: E402

BEGIN_MARK = "<!-- framework:begin -->"
END_MARK = "<!-- framework:end -->"
VARIANTS = ("raw", "framework")
VALUE = b"x" * 100


# ----------------------------------------------------------------------------- consumer processes

def _consumer_config(bootstrap: str, group: str, max_poll_records: int) -> dict:
    return {"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit",
            "share.acquire.mode": "record_limit", "max.poll.records": max_poll_records}


def raw_consumer(bootstrap: str, topic: str, group: str, expected: int, max_poll_records: int, rate: int, ready,
                 out) -> None:
    from quafka.client import ShareConsumer

    jobs = 0
    with ShareConsumer(_consumer_config(bootstrap, group, max_poll_records)) as consumer:
        consumer.subscribe([topic])
        consumer.poll(0.5)  # joins; nothing is produced yet
        cpu0, t0 = _cpu_self(), time.monotonic()
        ready.set()
        while jobs < expected:
            for record in consumer.poll(0.5):
                len(record.value)  # the trivial job
                consumer.acknowledge(record)
                jobs += 1
        cpu, elapsed = _cpu_self() - cpu0, time.monotonic() - t0
        consumer.commit_sync()
    out.put((jobs, cpu, elapsed))


def framework_consumer(bootstrap: str, topic: str, group: str, expected: int, max_poll_records: int, rate: int,
                       ready, out) -> None:
    from quafka.framework import App, Consumer, Worker

    class Trivial(Consumer):
        def consume_one(self, message):
            len(message.value)  # the trivial job

    app = App({"bootstrap.servers": bootstrap})
    app.share_group(group).topic(topic, Trivial, max_poll_records=max_poll_records)
    worker = Worker(app, handle_signals=False, log_interval_s=3600)
    worker.start()
    [share_worker] = worker.workers
    time.sleep(0.5)  # joins, as the raw consumer's first poll
    cpu0, t0 = _cpu_self(), time.monotonic()
    ready.set()
    # this thread's wake-ups would compete for the GIL with the worker's threads: sleep through the
    # production, then look for the end
    time.sleep(max(expected / rate - 0.5, 0))
    while share_worker.done < expected:
        time.sleep(0.02)
    cpu, elapsed = _cpu_self() - cpu0, time.monotonic() - t0
    jobs = share_worker.done
    worker.stop()
    worker.wait()
    out.put((jobs, cpu, elapsed))


# ----------------------------------------------------------------------------- one measurement

def produce_paced(bootstrap: str, topic: str, rate: int, seconds: float) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    total = int(rate * seconds)
    tick_s = 0.005
    per_tick = max(1, round(rate * tick_s))
    sent = 0
    start = time.monotonic()
    while sent < total:
        due = start + (sent / rate)
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        for _ in range(min(per_tick, total - sent)):
            producer.produce(topic, VALUE)
            sent += 1
        producer.poll(0)
    producer.flush(30)
    return total


def measure(run: BrokerRun, variant: str, args) -> dict:
    bootstrap = run.broker.bootstrap
    tag = uuid.uuid4().hex[:8]
    topic, group = f"fw-{variant}-{tag}", f"fw-{variant}-{tag}"
    create_topic(run.admin, topic, 1)
    set_group_configs(run.admin, group, {"share.auto.offset.reset": "earliest"})
    expected = int(args.rate * args.seconds)
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    target = raw_consumer if variant == "raw" else framework_consumer
    proc = ctx.Process(target=target, args=(bootstrap, topic, group, expected, args.max_poll_records, args.rate,
                                            ready, out))
    proc.start()
    try:
        if not ready.wait(60):
            raise RuntimeError(f"{variant} consumer did not start")
        produce_paced(bootstrap, topic, args.rate, args.seconds)
        jobs, cpu, elapsed = out.get(timeout=args.seconds * 5 + 60)
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    return {"variant": variant, "jobs": jobs, "cpu_us_per_job": cpu / jobs * 1e6, "jobs_per_s": jobs / elapsed}


# ----------------------------------------------------------------------------- report

def paired_ratios(results: dict[str, list[dict]]) -> list[float]:
    """framework / raw CPU per job of each round (the two ran next to each other in time, so the
    machine's drift between rounds cancels out)."""
    return [f["cpu_us_per_job"] / r["cpu_us_per_job"] for r, f in zip(results["raw"], results["framework"])]


def report(results: dict[str, list[dict]]) -> tuple[str, str]:
    best = {v: min(rs, key=lambda r: r["cpu_us_per_job"]) for v, rs in results.items()}
    median = {v: statistics.median(r["cpu_us_per_job"] for r in rs) for v, rs in results.items()}
    raw_best, raw_median = best["raw"]["cpu_us_per_job"], median["raw"]
    ratios = paired_ratios(results)
    paired = statistics.median(ratios)
    head = ["consumer", "jobs", "jobs/s", "CPU µs/job (best)", "CPU µs/job (median)", "runs (µs/job)",
            "vs raw (best)", "vs raw (median)", "vs raw (median of rounds)"]
    rows = []
    for variant in VARIANTS:
        rs, b = results[variant], best[variant]
        rows.append([
            "raw quafka ShareConsumer loop" if variant == "raw" else "quafka.framework route (1 worker)",
            f"{b['jobs']:,}", f"{b['jobs_per_s']:,.0f}", f"{b['cpu_us_per_job']:.1f}", f"{median[variant]:.1f}",
            ", ".join(f"{r['cpu_us_per_job']:.1f}" for r in rs),
            f"{(b['cpu_us_per_job'] / raw_best - 1) * 100:+.1f} %", f"{(median[variant] / raw_median - 1) * 100:+.1f} %",
            "" if variant == "raw" else f"{(paired - 1) * 100:+.1f} % (rounds: "
                                        + ", ".join(f"{(x - 1) * 100:+.0f}" for x in ratios) + ")"])
    return text_grid(head, rows), markdown_grid(head, rows)


def main() -> int:
    ap = arg_parser(__doc__)
    ap.add_argument("--rate", type=int, default=10_000, help="jobs produced per second (default 10,000)")
    ap.add_argument("--seconds", type=float, default=10.0, help="how long the producer runs (default 10)")
    ap.add_argument("--repeat", type=int, default=7, help="rounds; each measures both variants, in turn (default 7)")
    ap.add_argument("--max-poll-records", type=int, default=500,
                    help="max.poll.records of both consumers (default 500, the framework's and Kafka's default)")
    ap.add_argument("--update-docs", action="store_true", help="rewrite the framework section of docs/benchmarks.md")
    ap.add_argument("--doc", default=str(DOC_PATH), help="the markdown file --update-docs writes")
    args = ap.parse_args()
    started = time.monotonic()
    run = BrokerRun(lambda work_dir: Broker(work_dir), "quafka-bench-framework-")
    results: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    try:
        run.start()
        for round_no in range(args.repeat):
            order = VARIANTS if round_no % 2 == 0 else tuple(reversed(VARIANTS))
            for variant in order:
                wait_quiet(30)
                result = measure(run, variant, args)
                results[variant].append(result)
                print(f"round {round_no + 1} {variant}: {result['jobs']:,} jobs, {result['jobs_per_s']:,.0f}/s, "
                      f"{result['cpu_us_per_job']:.1f} µs CPU/job", flush=True)
    except KeyboardInterrupt:
        return interrupted()
    finally:
        run.close()
    text, markdown = report(results)
    info = machine_info()
    setup = (f"{args.rate:,} trivial jobs/s for {args.seconds:g} s, max.poll.records={args.max_poll_records}, "
             f"record_limit, explicit ACCEPT per job, {args.repeat} rounds; {info['CPUs (nproc)']} CPUs "
             f"({info['CPU model']}), {info['Python']}, quafka {info['quafka commit']}")
    print_blocks(setup, text)
    if args.update_docs:
        section = (f"{BEGIN_MARK}\n## Worker framework overhead\n\n"
                   "`benchmarks/framework.py`: CPU per job of one `quafka.framework` share-group worker against a raw "
                   "quafka `ShareConsumer` loop doing the same trivial job, each in its own process, with a producer "
                   "paced at the rate below (issue 19: at most 15 % more). The consumer process's CPU (user + system, "
                   "all threads) is counted from the producer's start to the last job.\n\n"
                   f"{setup}.\n\n{markdown}\n\n"
                   f"Command: `.venv/bin/python benchmarks/framework.py --update-docs`.\n{END_MARK}\n")
        replace_marked_section(section, Path(args.doc), BEGIN_MARK, END_MARK)
    return finish([], time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(main())
