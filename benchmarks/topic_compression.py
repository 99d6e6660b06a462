#!/usr/bin/env python3
"""What a topic's compression.type costs on produce (docs/benchmarks.md, "Topic compression").

A `python -m quafka broker` child process; one topic per row; confluent-kafka's Producer (acks=1,
linger.ms=5, one process) writes N records of ~100 B of JSON-like text. Rows: the producer's codec
into a topic at `producer` (the default: stored as sent, the hot path), into topics at zstd, lz4,
snappy, gzip and uncompressed (the broker rewrites every batch, as Kafka's LogValidator does), and
zstd into a zstd topic (the codecs agree: kept as sent). Each row reports records/s, the broker's
CPU per record (utime+stime from /proc around the produce), and the bytes on disk (the topic's
segment files).

    .venv/bin/python benchmarks/topic_compression.py                 # prints
    .venv/bin/python benchmarks/topic_compression.py --update-docs   # and rewrites its section
    .venv/bin/python benchmarks/topic_compression.py --quick         # 20,000 records per row

`--repeat N` keeps each row's best of N runs (fastest; its CPU and size with it); `--rows
none:producer` measures the hot path alone (run it at two commits to compare them).
"""

from __future__ import annotations

import glob
import os
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

# (producer's compression.type, topic's compression.type)
ROWS = [("none", "producer"), ("none", "zstd"), ("none", "lz4"), ("none", "snappy"), ("none", "gzip"),
        ("zstd", "producer"), ("zstd", "zstd"), ("zstd", "uncompressed")]


def value(i: int) -> bytes:
    return (b'{"id":%d,"user":"user-%d","event":"page_view","path":"/products/%d","ms":%d}'
            % (i, i % 977, i % 131, 1_700_000_000_000 + i))


def produce(bootstrap: str, topic: str, records: int, codec: str, deadline_s: float) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "compression.type": codec,
                         "log_level": 3})
    errors = []
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value(i), on_delivery=lambda err, _m: err is not None and errors.append(err))
                break
            except BufferError:
                producer.poll(0.005)
    if producer.flush(deadline_s) or errors:
        raise RuntimeError(f"produce to {topic} failed: {errors[:3]}")


def disk_bytes(broker: Broker, topic: str) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(broker.data_dir, f"{topic}-0", "*.log")))


def run_row(run: BrokerRun, n: int, codec: str, topic_type: str, records: int, deadline_s: float) -> dict:
    from confluent_kafka.admin import NewTopic

    broker = run.broker
    topic = f"tc-{n}-{codec}-{topic_type}"
    configs = {} if topic_type == "producer" else {"compression.type": topic_type}
    if configs:
        run.admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(10)
    else:
        create_topic(run.admin, topic, 1)
    produce(broker.bootstrap, topic, 1000, codec, deadline_s)  # warm: connections, metadata
    cpu0, t0 = broker.cpu_seconds(), time.perf_counter()
    produce(broker.bootstrap, topic, records, codec, deadline_s)
    wall, cpu = time.perf_counter() - t0, broker.cpu_seconds() - cpu0
    return {"codec": codec, "topic": topic_type, "records": records, "rate": records / wall,
            "broker_us": cpu / records * 1e6, "bytes": disk_bytes(broker, topic)}


def measure(records: int, repeat: int, deadline_s: float, rows_wanted: list[tuple[str, str]]) -> list[dict]:
    run = BrokerRun(lambda work_dir: Broker(work_dir), "quafka-compression-")
    try:
        run.start()
        rows = []
        for codec, topic_type in rows_wanted:
            tries = [run_row(run, n, codec, topic_type, records, deadline_s) for n in range(repeat)]
            best = max(tries, key=lambda r: r["rate"])
            rows.append(best)
            print(f"{codec:>5} -> {topic_type:<12} {best['rate']:>10,.0f} records/s  "
                  f"{best['broker_us']:5.1f} broker µs/record  {best['bytes']:>12,} bytes", flush=True)
        return rows
    finally:
        run.close()


def cells(rows: list[dict]) -> list[list[str]]:
    base = next((r for r in rows if r["codec"] == "none" and r["topic"] == "producer"), rows[0])
    out = []
    for r in rows:
        kept = r["topic"] == "producer" or r["topic"] == r["codec"] or (r["topic"] == "uncompressed"
                                                                          and r["codec"] == "none")
        out.append([f"{r['codec']}", f"{r['topic']}", "kept as sent" if kept else "rewritten",
                    f"{r['rate']:,.0f}", f"{r['broker_us']:.1f}", f"{r['broker_us'] / base['broker_us']:.2f}×",
                    f"{r['bytes'] / r['records']:.1f}"])
    return out


HEAD = ["producer sends", "topic compression.type", "batch", "records/s", "broker µs/record",
        "broker CPU vs stored as sent", "bytes/record on disk"]


def section(rows: list[dict], records: int, repeat: int, elapsed_s: float) -> str:
    info = machine_info()
    return (
        "<!-- topic-compression:begin -->\n\n"
        f"Measured by `benchmarks/topic_compression.py` ({info['CPU model']}, {info['CPUs (nproc)']} CPUs, quafka {info['quafka commit']}; "
        f"{elapsed_s:.0f} s). One confluent-kafka producer ({info['confluent-kafka / librdkafka']}), acks=1, "
        f"linger.ms=5, {records:,} records of ~100 B JSON-like text per row, best of {repeat}, one partition.\n\n"
        + markdown_grid(HEAD, cells(rows)) + "\n\n<!-- topic-compression:end -->\n")


def main(argv: list[str] | None = None) -> int:
    parser = arg_parser(__doc__, epilog=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="20,000 records per row (does not write the doc)")
    parser.add_argument("--deadline", type=float, default=120.0, help="seconds one produce may take")
    parser.add_argument("--rows", default=",".join(f"{c}:{t}" for c, t in ROWS),
                        help="comma-separated PRODUCER_CODEC:TOPIC_TYPE rows (default: all); e.g. none:producer "
                             "alone compares the hot path across commits")
    parser.add_argument("--update-docs", action="store_true", help="rewrite this section of docs/benchmarks.md")
    parser.add_argument("--doc", default=str(DOC_PATH), help="the file --update-docs rewrites")
    args = parser.parse_args(argv)
    records = 20_000 if args.quick else args.records
    started = time.monotonic()
    try:
        rows = measure(records, args.repeat, args.deadline,
                       [tuple(item.split(":", 1)) for item in args.rows.split(",")])
    except KeyboardInterrupt:
        return interrupted()
    elapsed = time.monotonic() - started
    print_blocks(text_grid(HEAD, cells(rows)))
    if args.update_docs and not args.quick:
        replace_marked_section(section(rows, records, args.repeat, elapsed), Path(args.doc),
                               "<!-- topic-compression:begin -->", "<!-- topic-compression:end -->")
        print(f"wrote the topic-compression section of {args.doc}")
    return finish([], elapsed)


if __name__ == "__main__":
    sys.exit(main())
