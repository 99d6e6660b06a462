#!/usr/bin/env python3
"""What TLS and SASL cost: produce and share consume+ack over PLAINTEXT and SASL_SSL, side by side.

The script starts `python -m quafka broker` in a child process with two listeners on loopback,
PLAINTEXT and SASL_SSL (a trustme certificate for 127.0.0.1 in a PEM key store; SASL mechanisms
SCRAM-SHA-512 and PLAIN; SCRAM user `bench` made with AlterUserScramCredentials over PLAINTEXT),
and then, `--repeat` rounds, the protocol order alternating between rounds, for each protocol:

- produce: one confluent-kafka Producer (librdkafka: TLS by OpenSSL in C, SCRAM-SHA-512) writes
  `--records` records of 100 B to a fresh 4-partition topic (acks=1, linger.ms=5); records/s from
  the first produce() to the last delivery report, and the broker's CPU per record;
- share consume+ack: `--consumers` quafka ShareConsumer processes (spawned) in a fresh share
  group (share.auto.offset.reset=earliest) read that topic, ACCEPT every record
  (share.acknowledgement.mode=explicit) and commit_sync() per poll; records/s from the first
  record any of them received to the last commit, every offset checked delivered exactly once
  (count and sum), and the broker's and consumers' CPU per record.

It prints a table with the SASL_SSL / PLAINTEXT ratios and with --update-docs rewrites its
section of docs/benchmarks.md (between `<!-- security:begin -->` and `<!-- security:end -->`).

    .venv/bin/python benchmarks/security.py                       # 100,000 records, 3 rounds, prints only
    .venv/bin/python benchmarks/security.py --update-docs         # the documented run
    .venv/bin/python benchmarks/security.py --records 20000 --repeat 1   # smoke run
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import hashlib
import multiprocessing as mp
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (  # noqa: E402
    DOC_PATH,
    BrokerRun,
    _cpu_self,
    arg_parser,
    finish,
    free_port,
    interrupted,
    machine_info,
    machine_times,
    markdown_grid,
    print_blocks,
    replace_marked_section,
    stop_procs,
    text_grid,
)

from produce_fetch import Broker  # noqa: E402

BEGIN_MARK = "<!-- security:begin -->"
END_MARK = "<!-- security:end -->"
RECORD_SIZE = 100
PARTITIONS = 4
USER, PASSWORD = "bench", "bench-secret"
PROTOCOLS = ("PLAINTEXT", "SASL_SSL")


class SecureBroker(Broker):
    """produce_fetch's Broker with a SASL_SSL listener next to its PLAINTEXT one."""

    def __init__(self, work_dir: str) -> None:
        import trustme

        ca = trustme.CA()
        self.ca_file = os.path.join(work_dir, "ca.pem")
        keystore = os.path.join(work_dir, "broker.pem")
        ca.cert_pem.write_to_path(self.ca_file)
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(keystore)
        super().__init__(work_dir)
        self.sasl_ssl_port = free_port()
        self.overrides = [
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},SASL_SSL://127.0.0.1:{self.sasl_ssl_port}",
            "ssl.keystore.type=PEM", f"ssl.keystore.location={keystore}",
            "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
            f'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'user_{USER}="{PASSWORD}";',
        ]

    def client_config(self, protocol: str) -> dict:
        if protocol == "PLAINTEXT":
            return {"bootstrap.servers": self.bootstrap}
        return {"bootstrap.servers": f"127.0.0.1:{self.sasl_ssl_port}", "security.protocol": "SASL_SSL",
                "ssl.ca.location": self.ca_file, "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
                "sasl.password": PASSWORD}


async def _add_scram_user(bootstrap: str) -> None:
    from quafka.client import AsyncAdmin

    async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
        conn = await (await admin._get_cluster()).any_connection()
        salt = os.urandom(16)
        upsertion = {"name": USER, "mechanism": 2, "iterations": 4096, "salt": salt,
                     "salted_password": hashlib.pbkdf2_hmac("sha512", PASSWORD.encode(), salt, 4096)}
        response = await conn.call(51, {"deletions": [], "upsertions": [upsertion]})
        if response.results[0].error_code != 0:
            raise RuntimeError(f"AlterUserScramCredentials failed: {response.results[0]}")


# ----------------------------------------------------------------------------- workers (spawned)

def consume_worker(config: dict, topic: str, group: str, expected: int, counter, go, out, deadline_s: float) -> None:
    """One quafka ShareConsumer: join, wait for `go`, then poll, ACCEPT and commit_sync until the
    group as a whole has `expected` records; reports (first record time, last commit time,
    records, offset sum, CPU seconds)."""
    try:
        from quafka.client import ShareConsumer

        consumer = ShareConsumer(dict(config, **{"group.id": group, "share.acknowledgement.mode": "explicit"}))
        consumer.subscribe([topic])
        consumer.commit_sync()  # starts the heartbeat: joins the group before the clock starts
        out.put(("ready", None))
        go.wait()
        cpu0 = _cpu_self()
        first = last = None
        count = total = 0
        deadline = time.monotonic() + deadline_s
        while counter.value < expected and time.monotonic() < deadline:
            records = consumer.poll(0.2)
            if not records:
                continue
            if first is None:
                first = time.monotonic()
            for record in records:
                consumer.acknowledge(record)
                total += record.offset
            for tp, error in consumer.commit_sync().items():
                if error is not None:
                    raise RuntimeError(f"commit of {tp} failed: {error}")
            count += len(records)
            last = time.monotonic()
            with counter.get_lock():
                counter.value += len(records)
        out.put(("done", (first, last, count, total, _cpu_self() - cpu0)))
        consumer.close()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        out.put(("error", f"{type(exc).__name__}: {exc}"))


# ----------------------------------------------------------------------------- measurements

@dataclass
class Result:
    protocol: str
    what: str
    records: int
    seconds: float
    broker_cpu_s: float
    client_cpu_s: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


def measure_produce(run: BrokerRun, protocol: str, topic: str, records: int) -> Result:
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    from quafka.client import librdkafka_security_config

    broker: SecureBroker = run.broker
    run.admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({**librdkafka_security_config(broker.client_config(protocol)), "acks": "1", "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000, "batch.num.messages": 10_000})
    producer.list_topics(timeout=30)  # connected and authenticated before the clock starts
    failed: list[str] = []
    value = b"x" * RECORD_SIZE
    cpu0, broker0, t0 = _cpu_self(), broker.cpu_seconds(), time.monotonic()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=i % PARTITIONS,
                                 on_delivery=lambda err, _m: failed.append(str(err)) if err else None)
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(120)
    seconds = time.monotonic() - t0
    if left or failed:
        raise RuntimeError(f"produce over {protocol}: {left} not delivered, errors {failed[:3]}")
    return Result(protocol, "produce", records, seconds, broker.cpu_seconds() - broker0, _cpu_self() - cpu0)


def measure_consume(run: BrokerRun, protocol: str, topic: str, records: int, consumers: int, round_: int,
                    deadline_s: float) -> Result:
    broker: SecureBroker = run.broker
    group = f"g-{topic}"
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    run.admin.incremental_alter_configs([resource])[resource].result(30)
    ctx = mp.get_context("spawn")
    counter, go, out = ctx.Value("q", 0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=consume_worker, args=(broker.client_config(protocol), topic, group, records, counter,
                                                      go, out, deadline_s)) for _ in range(consumers)]
    try:
        for p in procs:
            p.start()
        for _ in procs:
            kind, payload = out.get(timeout=120)
            if kind == "error":
                raise RuntimeError(f"consumer over {protocol}: {payload}")
        broker0 = broker.cpu_seconds()
        go.set()
        reports = []
        for _ in procs:
            kind, payload = out.get(timeout=deadline_s + 60)
            if kind == "error":
                raise RuntimeError(f"consumer over {protocol}: {payload}")
            reports.append(payload)
        broker_cpu = broker.cpu_seconds() - broker0
    finally:
        stop_procs(procs)
    count = sum(r[2] for r in reports)
    total = sum(r[3] for r in reports)
    per_partition = records // PARTITIONS
    expected_sum = PARTITIONS * per_partition * (per_partition - 1) // 2
    if count != records or total != expected_sum:
        raise RuntimeError(f"consume over {protocol} (round {round_}): {count:,} records, offset sum {total} "
                           f"(expected {records:,} and {expected_sum}): not exactly once")
    first = min(r[0] for r in reports if r[0] is not None)
    last = max(r[1] for r in reports if r[1] is not None)
    return Result(protocol, f"share consume+ack, {consumers} consumers", records, last - first, broker_cpu,
                  sum(r[4] for r in reports))


# ----------------------------------------------------------------------------- report

def summary_rows(results: list[Result]) -> list[list[str]]:
    rows = []
    for what in dict.fromkeys(r.what for r in results):
        best = {}
        for protocol in PROTOCOLS:
            mine = [r for r in results if r.what == what and r.protocol == protocol]
            top = max(mine, key=lambda r: r.rate)
            best[protocol] = top
            rows.append([what, protocol, f"{top.rate:,.0f}", f"{statistics.median(r.rate for r in mine):,.0f}",
                         ", ".join(f"{r.rate:,.0f}" for r in mine),
                         f"{top.broker_cpu_s / top.records * 1e6:.2f}", f"{top.client_cpu_s / top.records * 1e6:.2f}"])
        ratio = best["SASL_SSL"].rate / best["PLAINTEXT"].rate
        medians = {p: statistics.median(r.rate for r in results if r.what == what and r.protocol == p)
                   for p in PROTOCOLS}
        cpu = (best["SASL_SSL"].broker_cpu_s / best["SASL_SSL"].records) / \
            (best["PLAINTEXT"].broker_cpu_s / best["PLAINTEXT"].records)
        rows.append([what, "SASL_SSL / PLAINTEXT", f"**{ratio:.2f}**", f"{medians['SASL_SSL'] / medians['PLAINTEXT']:.2f}",
                     "", f"{cpu:.2f}", ""])
    return rows


HEAD = ["workload", "protocol", "records/s (best)", "records/s (median)", "runs", "broker CPU µs/record",
        "client CPU µs/record"]


def section(results: list[Result], info: dict[str, str], args, elapsed_s: float, other_pct: float) -> str:
    info_lines = "\n".join(f"| {k} | {v} |" for k, v in info.items())
    return f"""{BEGIN_MARK}
## TLS and SASL (`benchmarks/security.py`)

What it costs to run the same workloads over SASL_SSL (TLS, then SASL SCRAM-SHA-512) instead of
PLAINTEXT, on one broker with both listeners. Each round, for each protocol (the order alternating
between rounds), one confluent-kafka Producer writes {args.records:,} records of {RECORD_SIZE} B to a fresh
{PARTITIONS}-partition topic (acks=1, linger.ms=5), then {args.consumers} quafka ShareConsumer processes of a fresh
share group read them, ACCEPT every record and `commit_sync()` per poll (every offset checked
delivered exactly once). Authentication happens once per connection, before the clock starts, so
the difference is TLS record encryption in the broker (Python's `ssl` over asyncio) and in the
clients (OpenSSL from librdkafka; Python's `ssl` in quafka's client). Best of {args.repeat} rounds; all
runs listed. Run on {_dt.date.today().isoformat()} in {elapsed_s:.0f} s; the rest of the machine was
{other_pct:.0f}% busy (of one core) on average.

| | |
|---|---|
{info_lines}

{markdown_grid(HEAD, summary_rows(results))}

The ratio row gives SASL_SSL's records/s over PLAINTEXT's (best runs, then medians) and, in the
broker CPU column, its broker CPU per record over PLAINTEXT's (CPU from /proc in 10 ms ticks:
coarse at these record counts).

{analysis(results, other_pct)}
{END_MARK}
"""


def analysis(results: list[Result], other_pct: float) -> str:
    """What the numbers say, from the best runs."""
    def best(what: str, protocol: str) -> Result:
        return max((r for r in results if r.what == what and r.protocol == protocol), key=lambda r: r.rate)

    produce = {p: best("produce", p) for p in PROTOCOLS}
    consume = {p: best(next(r.what for r in results if r.what != "produce"), p) for p in PROTOCOLS}

    def cpu(r: Result) -> float:
        return r.broker_cpu_s / r.records * 1e6

    noisy = (f" The machine was shared ({other_pct:.0f}% of a core busy elsewhere on average), so single runs "
             "vary by up to 2x; the ratios of best runs and of medians are the figures to read." if other_pct > 20 else "")
    return (f"Produce over SASL_SSL ran at {produce['SASL_SSL'].rate / produce['PLAINTEXT'].rate:.2f}x the PLAINTEXT "
            f"rate and cost the broker {cpu(produce['SASL_SSL']):.2f} µs of CPU per record against "
            f"{cpu(produce['PLAINTEXT']):.2f}: the broker decrypts every produced byte in Python's `ssl` (OpenSSL "
            "under asyncio's SSL protocol, which copies each TLS record between buffers), while librdkafka encrypts "
            f"in C. Share consume+ack ran at {consume['SASL_SSL'].rate / consume['PLAINTEXT'].rate:.2f}x "
            f"(broker {cpu(consume['SASL_SSL']):.2f} against {cpu(consume['PLAINTEXT']):.2f} µs/record): there the "
            "per-record work of quafka's Python consumers dominates and the bytes per record are fewer, so "
            f"encryption adds less.{noisy}")


def main(argv: list[str] | None = None) -> int:
    ap = arg_parser(__doc__)
    ap.add_argument("--records", type=int, default=100_000, help="records per produce and consume (default 100,000)")
    ap.add_argument("--consumers", type=int, default=4, help="share consumers (default 4)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--deadline", type=float, default=300.0, help="seconds a consume may take (default 300)")
    ap.add_argument("--update-docs", action="store_true", help="rewrite the section in docs/benchmarks.md")
    args = ap.parse_args(argv)
    args.records -= args.records % PARTITIONS
    started = time.monotonic()
    busy0, _ = machine_times()
    run = BrokerRun(SecureBroker, "quafka-bench-security-")
    results: list[Result] = []
    problems: list[str] = []
    try:
        run.start()
        asyncio.run(_add_scram_user(run.broker.bootstrap))
        for round_ in range(args.repeat):
            order = PROTOCOLS if round_ % 2 == 0 else PROTOCOLS[::-1]
            for protocol in order:
                topic = f"sec-{protocol.lower()}-{round_}"
                produced = measure_produce(run, protocol, topic, args.records)
                consumed = measure_consume(run, protocol, topic, args.records, args.consumers, round_, args.deadline)
                results += [produced, consumed]
                print(f"round {round_ + 1} {protocol:10} produce {produced.rate:>10,.0f} records/s   "
                      f"consume+ack {consumed.rate:>10,.0f} records/s", flush=True)
    except KeyboardInterrupt:
        return interrupted()
    except RuntimeError as exc:
        problems.append(str(exc))
    finally:
        run.close()
    elapsed = time.monotonic() - started
    if results and not problems:
        busy1, _ = machine_times()
        other_pct = max(0.0, (busy1 - busy0) - sum(r.broker_cpu_s + r.client_cpu_s for r in results)) / elapsed * 100
        print_blocks(text_grid(HEAD, [[c.replace("**", "") for c in row] for row in summary_rows(results)]))
        if args.update_docs:
            replace_marked_section(section(results, machine_info(), args, elapsed, other_pct), DOC_PATH,
                                   BEGIN_MARK, END_MARK)
            print(f"wrote {DOC_PATH}")
    return finish(problems, elapsed)


if __name__ == "__main__":
    sys.exit(main())
