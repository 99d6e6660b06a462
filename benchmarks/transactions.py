#!/usr/bin/env python3
"""What transactions cost on produce (docs/benchmarks.md, "Transactions").

A `python -m quafka broker` child process; one topic per row (3 partitions); confluent-kafka's
Producer (acks=all, linger.ms=5, one process) writes N records of ~100 B. Rows: an idempotent
producer (the baseline: what quafka served before transactions), then a transactional producer
committing every 1,000 records (issue 31's row), every 100 and every 10: each transaction is
begin_transaction, the records, commit_transaction (AddPartitionsToTxn, or the implicit add of
transaction version 2, then EndTxn and one COMMIT marker per partition). Each row reports
records/s, transactions/s, the broker's CPU per record (utime+stime from /proc around the produce)
and the ratio to the idempotent row. A last row reads everything back at read_committed and at
read_uncommitted (one consumer each, best of two after a warm read) to show what the LSO and the
aborted index cost a reader.

    .venv/bin/python benchmarks/transactions.py                 # prints
    .venv/bin/python benchmarks/transactions.py --update-docs   # and rewrites its section
    .venv/bin/python benchmarks/transactions.py --quick         # 20,000 records per row
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (  # noqa: E402
    DOC_PATH,
    BrokerRun,
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

PARTITIONS = 3
PER_TRANSACTION = (1000, 100, 10)


def value(i: int) -> bytes:
    return (b'{"id":%d,"user":"user-%d","event":"page_view","path":"/products/%d","ms":%d}'
            % (i, i % 977, i % 131, 1_700_000_000_000 + i))


def _send(producer, topic: str, i: int, errors: list) -> None:
    while True:
        try:
            producer.produce(topic, value(i), key=b"%d" % (i % 1000),
                             on_delivery=lambda err, _m: err is not None and errors.append(err))
            return
        except BufferError:
            producer.poll(0.005)


def produce_idempotent(bootstrap: str, topic: str, records: int, deadline_s: float) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "log_level": 3})
    errors: list = []
    for i in range(records):
        _send(producer, topic, i, errors)
    if producer.flush(deadline_s) or errors:
        raise RuntimeError(f"produce to {topic} failed: {errors[:3]}")
    return 0


def produce_transactional(bootstrap: str, topic: str, records: int, per_txn: int, deadline_s: float,
                          txn_id: str) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5,
                         "log_level": 3})
    producer.init_transactions(deadline_s)
    errors: list = []
    transactions = 0
    for start in range(0, records, per_txn):
        producer.begin_transaction()
        for i in range(start, min(start + per_txn, records)):
            _send(producer, topic, i, errors)
        producer.commit_transaction(deadline_s)
        transactions += 1
    if errors:
        raise RuntimeError(f"transactional produce to {topic} failed: {errors[:3]}")
    return transactions


def consume_all(bootstrap: str, topic: str, records: int, isolation: str, deadline_s: float) -> float:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{isolation}-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": isolation, "log_level": 3})
    consumer.subscribe([topic])
    got, t0 = 0, None
    deadline = time.monotonic() + deadline_s
    try:
        while got < records and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.5):
                if m.error() is None:
                    if t0 is None:
                        t0 = time.perf_counter()
                    got += 1
        if got < records:
            raise RuntimeError(f"read {got} of {records} records of {topic} at {isolation}")
        return got / (time.perf_counter() - t0)
    finally:
        consumer.close()


def run_row(run: BrokerRun, kind: str, per_txn: int, records: int, deadline_s: float) -> dict:
    broker = run.broker
    topic = f"txn-{kind}-{per_txn}"
    create_topic(run.admin, topic, PARTITIONS)
    # warm: connections, metadata, the producer id (and for transactions __transaction_state)
    if kind == "idempotent":
        produce_idempotent(broker.bootstrap, topic + "-warm", 1000, deadline_s)
    else:
        produce_transactional(broker.bootstrap, topic + "-warm", 1000, 500, deadline_s, f"warm-{per_txn}")
    cpu0, t0 = broker.cpu_seconds(), time.perf_counter()
    if kind == "idempotent":
        transactions = produce_idempotent(broker.bootstrap, topic, records, deadline_s)
    else:
        transactions = produce_transactional(broker.bootstrap, topic, records, per_txn, deadline_s, f"bench-{per_txn}")
    wall, cpu = time.perf_counter() - t0, broker.cpu_seconds() - cpu0
    return {"kind": kind, "per_txn": per_txn, "topic": topic, "records": records, "rate": records / wall,
            "txn_rate": transactions / wall, "broker_us": cpu / records * 1e6}


def measure(records: int, deadline_s: float) -> tuple[list[dict], dict]:
    run = BrokerRun(lambda work_dir: Broker(work_dir), "quafka-transactions-")
    try:
        run.start()
        rows = [run_row(run, "idempotent", 0, records, deadline_s)]
        print(f"idempotent            {rows[0]['rate']:>10,.0f} records/s  {rows[0]['broker_us']:5.1f} broker µs/record",
              flush=True)
        for per_txn in PER_TRANSACTION:
            row = run_row(run, "transactional", per_txn, records, deadline_s)
            rows.append(row)
            print(f"{per_txn:>5} per transaction {row['rate']:>10,.0f} records/s  {row['txn_rate']:>8,.1f} txn/s  "
                  f"{row['broker_us']:5.1f} broker µs/record", flush=True)
        topic = rows[1]["topic"]
        consume_all(run.broker.bootstrap, topic, records, "read_uncommitted", deadline_s)  # warm: the page cache
        reads = {level: max(consume_all(run.broker.bootstrap, topic, records, level, deadline_s) for _ in range(2))
                 for level in ("read_committed", "read_uncommitted")}
        print(f"read back {topic}: " + ", ".join(f"{k} {v:,.0f} records/s" for k, v in reads.items()), flush=True)
        return rows, reads
    finally:
        run.close()


HEAD = ["producer", "records/s", "transactions/s", "broker µs/record", "records/s vs idempotent",
        "broker CPU vs idempotent"]


def cells(rows: list[dict]) -> list[list[str]]:
    base = rows[0]
    out = []
    for r in rows:
        name = "idempotent" if r["kind"] == "idempotent" else f"transactional, {r['per_txn']:,} records per transaction"
        out.append([name, f"{r['rate']:,.0f}", "-" if r["kind"] == "idempotent" else f"{r['txn_rate']:,.1f}",
                    f"{r['broker_us']:.1f}", f"{r['rate'] / base['rate']:.2f}×",
                    f"{r['broker_us'] / base['broker_us']:.2f}×"])
    return out


def section(rows: list[dict], reads: dict, records: int, elapsed_s: float) -> str:
    info = machine_info()
    return (
        "<!-- transactions:begin -->\n\n"
        f"Measured by `benchmarks/transactions.py` ({info['CPU model']}, {info['CPUs (nproc)']} CPUs, quafka "
        f"{info['quafka commit']}; {elapsed_s:.0f} s). One confluent-kafka producer "
        f"({info['confluent-kafka / librdkafka']}), acks=all, linger.ms=5, {records:,} records of ~100 B per row, "
        f"one topic of {PARTITIONS} partitions per row, rows run one after another against one broker.\n\n"
        + markdown_grid(HEAD, cells(rows))
        + f"\n\nReading the 1,000-per-transaction topic back with one confluent-kafka consumer: "
        f"{reads['read_uncommitted']:,.0f} records/s at read_uncommitted, {reads['read_committed']:,.0f} records/s "
        f"at read_committed ({reads['read_committed'] / reads['read_uncommitted']:.2f}×).\n\n"
        "<!-- transactions:end -->\n")


def main(argv: list[str] | None = None) -> int:
    parser = arg_parser(__doc__, epilog=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--quick", action="store_true", help="20,000 records per row (does not write the doc)")
    parser.add_argument("--deadline", type=float, default=180.0, help="seconds one produce may take")
    parser.add_argument("--update-docs", action="store_true", help="rewrite this section of docs/benchmarks.md")
    parser.add_argument("--doc", default=str(DOC_PATH), help="the file --update-docs rewrites")
    args = parser.parse_args(argv)
    records = 20_000 if args.quick else args.records
    started = time.monotonic()
    try:
        rows, reads = measure(records, args.deadline)
    except KeyboardInterrupt:
        return interrupted()
    elapsed = time.monotonic() - started
    print_blocks(text_grid(HEAD, cells(rows)))
    if args.update_docs and not args.quick:
        replace_marked_section(section(rows, reads, records, elapsed), Path(args.doc),
                               "<!-- transactions:begin -->", "<!-- transactions:end -->")
        print(f"wrote the transactions section of {args.doc}")
    return finish([], elapsed)


if __name__ == "__main__":
    sys.exit(main())
