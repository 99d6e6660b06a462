"""A Spark driver for tests/spark/test_cluster.py, run as a process of its own (the test process
hosts a local SparkContext already, and pyspark allows one per process) against a standalone
cluster (tests/support/spark_cluster.py). It reaches the broker only through bootstrap.servers.

    cluster_driver.py MASTER BOOTSTRAP INPUT GROUP OUTPUT CHECKPOINT MARKS TRIGGER [HOLD ...]

Runs the share-group stream ``readStream.format("quafka")`` (share.group GROUP, numPartitions 2,
maxRecordsPerTrigger TRIGGER) through a Python UDF into the sink ``writeStream.format("quafka")``
(topic OUTPUT) with CHECKPOINT. It writes MARKS/app-<pid> (the application id) once the query runs.
For each HOLD value, the task whose UDF meets that record value first writes MARKS/hold-<value> (its
Python worker's pid) and sleeps, once: the test kills something while that batch is in flight.
When MARKS/stop appears it stops the query, counts INPUT with the batch reader
``spark.read.format("quafka")`` on the cluster (tasks of at most TRIGGER records), writes the count to MARKS/count-<pid> and exits 0.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support.spark_cluster

from support.spark_cluster import DRIVER_CONF  # noqa: E402


def main(argv: list[str]) -> int:
    master, bootstrap, source, group, out, checkpoint, marks, trigger, *holds = argv
    marks_dir = Path(marks)
    hold_values = {h.encode() for h in holds}

    from pyspark.sql import SparkSession
    from pyspark.sql.functions import udf
    from pyspark.sql.types import BinaryType

    builder = SparkSession.builder.master(master).appName(f"quafka-cluster-test-{os.getpid()}")
    for key, value in DRIVER_CONF.items():
        builder = builder.config(key, value)
    # a JVM that starts fast on a busy machine (C1 only, serial GC): this driver and its executors
    # do little work, and most of the test's time is JVMs starting
    fast = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    spark = (builder.config("spark.cores.max", "2").config("spark.driver.extraJavaOptions", fast)
             .config("spark.executor.extraJavaOptions", fast).getOrCreate())
    spark.sparkContext.setLogLevel("WARN")

    @udf(BinaryType())
    def hold(value):
        # runs in an executor's Python worker: the first task to meet a HOLD value stops here, once
        if value in hold_values:
            mark = marks_dir / f"hold-{value.decode()}"
            try:
                fd = os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return value
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            time.sleep(3600)
        return value

    query = (spark.readStream.format("quafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", source).option("share.group", group)
             .option("maxRecordsPerTrigger", trigger).option("numPartitions", "2").load()
             .select("key", hold("value").alias("value"))
             .writeStream.format("quafka").option("kafka.bootstrap.servers", bootstrap).option("topic", out)
             .option("checkpointLocation", checkpoint).trigger(processingTime="200 milliseconds").start())
    app = marks_dir / f"app-{os.getpid()}"
    app.with_suffix(".tmp").write_text(spark.sparkContext.applicationId)
    app.with_suffix(".tmp").rename(app)
    while not (marks_dir / "stop").exists():
        if query.awaitTermination(0.2):
            print(f"the query ended: {query.exception()}", file=sys.stderr, flush=True)
            return 1
    query.stop()
    count = (spark.read.format("quafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source)
             .option("maxRecordsPerPartition", trigger).load().count())  # several tasks per topic partition
    result = marks_dir / f"count-{os.getpid()}"
    result.with_suffix(".tmp").write_text(str(count))
    result.with_suffix(".tmp").rename(result)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
