"""A Spark Connect client running docs/spark.md's pipeline (section "Spark Connect") against a
Connect server: tests/spark/test_connect.py runs it as a subprocess.

It runs in a process of its own because the test process hosts the classic SparkSession of
tests/spark/conftest.py: creating a Connect session sets ``SPARK_CONNECT_MODE_ENABLED=1`` in
``os.environ`` ("prevents that local PySpark is used in conjunction with Spark Connect mode",
pyspark/sql/session.py, 4.3), which turns ``pyspark.sql.utils.is_remote()`` true for the whole
process — pyspark's functions then dispatch to their Connect versions — and is inherited by every
process started afterwards, the classic session's Python workers included.

Steps, each reported on stdout as one JSON line (``--without-quafka`` first makes quafka
unimportable in this process, ``--batch-only`` stops after step 2):

1. ``{"registered": name}`` — ``spark.dataSource.register(QuafkaDataSource)`` (with ``--register``):
   the client pickles the class (by reference: ``quafka.spark.datasource.QuafkaDataSource``) and the
   server's Python workers unpickle it, so they import quafka;
2. ``{"batch": [[key, value], ...]}`` — ``spark.read.format("quafka")`` of the input topic;
3. ``{"started": query id}`` — ``spark.readStream.format("quafka")`` with ``share.group``, and
   ``foreachBatch`` writing each micro-batch with ``df.write.format("quafka")`` to the output topic
   (the function runs on the server, in a Python process the server starts, with a Connect session
   of its own);
4. then it waits for a line ``stop`` on stdin (the test sends it once the output topic holds every
   record and the group is drained), stops the query and reports
   ``{"stopped": id, "input_rows": sum of numInputRows, "batches": batches with rows}``.

When the query dies, or a step raises, it reports ``{"error": ...}`` (the error without the JVM's
stack) and exits 1."""

from __future__ import annotations

import argparse
import importlib
import json
import select
import sys
import time


def say(**fields) -> None:
    print(json.dumps(fields), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--remote", required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--max-records-per-trigger", type=int, default=1000)
    ap.add_argument("--register", action="store_true")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--without-quafka", action="store_true",
                    help="make quafka unimportable here: the server finds format('quafka') by itself")
    ap.add_argument("--batch-only", action="store_true")
    args = ap.parse_args(argv)
    if args.without_quafka:
        for name in ("quafka", "pyspark_quafka"):
            sys.modules[name] = None  # `import quafka` raises ImportError from now on
        try:
            importlib.import_module("quafka")
            blocked = False
        except ImportError:
            blocked = True
        say(without_quafka=blocked)

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(args.remote).getOrCreate()
    if args.register:
        from quafka.spark import QuafkaDataSource

        spark.dataSource.register(QuafkaDataSource)
        say(registered=QuafkaDataSource.name())

    rows = (spark.read.format("quafka")
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("subscribe", args.input)
            .load()
            .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")
            .collect())
    say(batch=[[r.key, r.value] for r in rows])
    if args.batch_only:
        spark.stop()
        return 0

    bootstrap, output = args.bootstrap, args.output

    def write_batch(df, batch_id):  # runs on the server (pickled by value: this is __main__)
        (df.selectExpr("key", "value")
           .write.format("quafka")
           .option("kafka.bootstrap.servers", bootstrap)
           .option("topic", output)
           .mode("append")
           .save())

    query = (spark.readStream.format("quafka")
             .option("kafka.bootstrap.servers", args.bootstrap)
             .option("subscribe", args.input)
             .option("share.group", args.group)
             .option("maxRecordsPerTrigger", args.max_records_per_trigger)
             .load()
             .writeStream.foreachBatch(write_batch)
             .option("checkpointLocation", args.checkpoint)
             .start())
    say(started=query.id)

    deadline = time.monotonic() + args.timeout
    try:
        while True:
            if not query.isActive:
                say(error=f"the query ended: {query.exception()}")
                return 1
            if time.monotonic() > deadline:
                say(error=f"no stop within {args.timeout} s; status {query.status}")
                return 1
            ready, _, _ = select.select([sys.stdin], [], [], 0.5)
            if ready and sys.stdin.readline().strip() == "stop":
                break
    finally:
        query.stop()
    progress = query.recentProgress
    say(stopped=query.id, input_rows=sum(p.numInputRows for p in progress),
        batches=sum(1 for p in progress if p.numInputRows))
    spark.stop()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # noqa: BLE001 - reported to the test, which fails with it
        message = str(e)
        say(error=f"{type(e).__name__}: {message.split('JVM stacktrace:')[0][:3000]}")
        raise
