"""Job-processing pipeline: stream work items from a share group, process them with a Python UDF on
the executors, write the results to Parquet and to a results topic.

Each work item is a JSON object ``{"id": 7, "numbers": [3, 1, 4]}`` (bytes in the record's value).
The UDF parses it and computes the number of items, sum, mean and maximum of ``numbers``; a record that is
not valid JSON gives a result row with ``error`` set (it is not retried: records are accepted a
whole micro-batch at a time, see docs/spark.md). Each micro-batch is written, in ``foreachBatch``,
to ``--output`` (Parquet, append) and to ``--results-topic`` (``df.write.format("quafka")``, key =
the job id, value = the result as JSON). The batch's records are ACCEPTed at the broker only after
Spark has committed the batch, so a crash re-delivers them: both outputs are at-least-once (dedupe
on ``id`` downstream).

    python examples/job_pipeline.py --bootstrap-server 127.0.0.1:9092 --topic jobs \\
        --group job-workers --results-topic job-results --output /tmp/results \\
        --checkpoint /tmp/ckpt --available-now

``--available-now`` stops the query once the group is drained (every partition's share-group start
offset is at the end of the topic, nothing in flight); ``--timeout`` bounds the run in seconds.
Without either, the query runs until interrupted. ``main(argv, spark)`` runs in-process with an
existing SparkSession (the tests do this) and returns the number of result rows written.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

RESULT_DDL = ("id LONG, items INT, total DOUBLE, mean DOUBLE, maximum DOUBLE, error STRING")


def process_job(value):  # no type hints: pyspark would try to infer a pandas UDF from them
    """The work done for one job (runs on the executors, inside the Python UDF): bytes -> row."""
    try:
        job = json.loads(bytes(value or b"").decode("utf-8"))
        numbers = [float(x) for x in job.get("numbers", [])]
        job_id = int(job["id"])
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return (None, 0, None, None, None, f"{type(exc).__name__}: {exc}")
    total = sum(numbers)
    return (job_id, len(numbers), total, total / len(numbers) if numbers else None,
            max(numbers) if numbers else None, None)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    p.add_argument("--topic", default="jobs")
    p.add_argument("--group", default="job-workers")
    p.add_argument("--results-topic", default="job-results")
    p.add_argument("--output", required=True, help="Parquet directory (appended to)")
    p.add_argument("--checkpoint", required=True, help="Structured Streaming checkpoint directory")
    p.add_argument("--num-partitions", type=int, default=2, help="Spark tasks per micro-batch")
    p.add_argument("--max-records-per-trigger", type=int, default=10000)
    p.add_argument("--trigger-interval", default="500 milliseconds")
    p.add_argument("--available-now", action="store_true",
                   help="stop once the share group has consumed the whole topic")
    p.add_argument("--timeout", type=float, default=None, help="stop after this many seconds")
    return p.parse_args(argv)


def group_drained(bootstrap: str, group: str, topic: str) -> bool:
    """True when every partition of ``topic`` has a share-group start offset at the end of the log."""
    from quafka.client import Admin

    from quafka.client.errors import KafkaException

    try:
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            state = admin.list_share_group_offsets(group, [topic])
    except KafkaException:  # e.g. GROUP_ID_NOT_FOUND before the query's consumer has joined
        return False
    return bool(state) and all(start >= 0 and lag == 0 for start, lag in state.values())


def main(argv: list[str] | None = None, spark=None) -> int:
    args = parse_args(argv)
    if spark is None:
        from pyspark.sql import SparkSession

        from quafka.spark import use_driver_python

        use_driver_python()  # local master: Spark's Python workers run this interpreter (docs/spark.md)
        spark = SparkSession.builder.appName("quafka-job-pipeline").getOrCreate()
    # Ship this module's functions to the executors by value (the examples directory is not on the
    # workers' path when the module is imported rather than run as a script).
    if __name__ != "__main__" and __name__ in sys.modules:
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])

    from pyspark.sql import functions as F

    process = F.udf(process_job, RESULT_DDL)
    written = {"rows": 0}

    def write_batch(batch, batch_id: int) -> None:
        results = (batch.select(process(F.col("value")).alias("r"), "topic", "partition", "offset",
                                "deliveryCount")
                   .select("r.*", F.col("topic").alias("sourceTopic"), F.col("partition").alias("sourcePartition"),
                           F.col("offset").alias("sourceOffset"), "deliveryCount",
                           F.lit(batch_id).cast("long").alias("batchId"))
                   .persist())
        try:
            n = results.count()
            if n == 0:
                return
            results.write.mode("append").parquet(args.output)
            (results.select(F.col("id").cast("string").alias("key"),
                            F.to_json(F.struct(*[c for c in results.columns])).alias("value"))
             .write.format("quafka")
             .option("kafka.bootstrap.servers", args.bootstrap_server)
             .option("topic", args.results_topic)
             .mode("append").save())
            written["rows"] += n
            print(f"batch {batch_id}: {n} results", flush=True)  # progress
        finally:
            results.unpersist()

    query = (spark.readStream.format("quafka")
             .option("kafka.bootstrap.servers", args.bootstrap_server)
             .option("subscribe", args.topic)
             .option("share.group", args.group)
             .option("numPartitions", args.num_partitions)
             .option("maxRecordsPerTrigger", args.max_records_per_trigger)
             .load()
             .writeStream.foreachBatch(write_batch)
             .option("checkpointLocation", args.checkpoint)
             .trigger(processingTime=args.trigger_interval)
             .start())
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    try:
        while query.isActive:
            if args.available_now and group_drained(args.bootstrap_server, args.group, args.topic):
                break
            if deadline is not None and time.monotonic() > deadline:
                break
            query.awaitTermination(0.5)
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"query failed: {query.exception()}")
    print(f"wrote {written['rows']} results to {args.output} and topic {args.results_topic}")
    return written["rows"]


if __name__ == "__main__":
    main()
