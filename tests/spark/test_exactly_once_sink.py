"""The sink's ``exactlyOnce`` (quafka/spark/sink.py; issue 31): a streaming query over a replayable
file source writes through ``writeStream.format("quafka")`` while (1) one task fails and Spark
retries it (the retry's InitProducerId with the same transactional.id fences the failed attempt
and ends its transaction, Kafka's TransactionCoordinator.handleInitProducerId), and (2) the driver
"dies" after the last batch's tasks committed but before Spark's commit log recorded it: its
commit-log entry is removed, so the restarted query runs that batch again with the same batchId
(MicroBatchExecution reruns the last batch of the offset log that has no commit-log entry), and
its tasks find their batch committed and write nothing. Read at read_committed the output topic
holds every input row exactly once.

Spark fails the task in the Python UDF before the sink's worker has read a row, so the failed
attempt's transaction is aborted empty (the sink logs it); a transaction holding records killed
with its process is tests/framework/test_transactional_routes.py's case."""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer
from pyspark.sql.types import StringType, StructField, StructType

from quafka.client import Admin
from quafka.spark.options import OptionError, Options
from quafka.spark.sink import QuafkaStreamWriter, QuafkaWriter

pytestmark = pytest.mark.spark

FILES, ROWS = 3, 400  # one file per micro-batch (maxFilesPerTrigger=1): batches 0, 1, 2
FAIL_AT = "row-500"  # in batch 1: its task fails once


def read_all(bootstrap: str, topic: str, isolation: str, expect: int, partitions: int, timeout_s: float = 30.0) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True})
    consumer.subscribe([topic])
    values: list[str] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not (len(values) >= expect and len(at_end) == partitions):
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    at_end.add(m.partition())
                continue
            at_end.discard(m.partition())
            values.append(m.value().decode())
    finally:
        consumer.close()
    return values


def test_exactly_once_sink_across_a_task_retry_and_a_rerun_batch(spark, bootstrap, tmp_path):
    from pyspark.sql.functions import udf

    out = f"eo-out-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({out: (2, 1)})
    source = tmp_path / "in"
    source.mkdir()
    for f in range(FILES):
        (source / f"part-{f}.txt").write_text("".join(f"row-{f * ROWS + i}\n" for i in range(ROWS)))
        os.utime(source / f"part-{f}.txt", (1_000_000 + f, 1_000_000 + f))  # the file source's order
    flag = str(tmp_path / "failed-once")

    @udf(StringType())
    def fail_once(value):
        if value == FAIL_AT and not os.path.exists(flag):
            open(flag, "w").close()
            time.sleep(1)  # the rows produced before it reach the broker, inside the open transaction
            raise RuntimeError("injected task failure")
        return value

    checkpoint = tmp_path / "cp"
    rows = (spark.readStream.option("maxFilesPerTrigger", 1).text(str(source))
            .repartition(2).select(fail_once("value").alias("value")))

    def run() -> None:
        query = (rows.writeStream.format("quafka").option("kafka.bootstrap.servers", bootstrap)
                 .option("topic", out).option("exactlyOnce", "true")
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        assert query.awaitTermination(180), "the query did not end"
        assert query.exception() is None, query.exception()

    run()
    assert os.path.exists(flag)  # the task failed once and was retried
    last = checkpoint / "commits" / str(FILES - 1)
    assert last.exists() and not (checkpoint / "commits" / str(FILES)).exists()
    last.unlink()  # the driver died after the tasks committed, before the commit log said so
    (checkpoint / "commits" / f".{FILES - 1}.crc").unlink(missing_ok=True)  # (Hadoop's checksum of it)
    run()  # batch 2 again, same batchId: its tasks find their transactions committed and write nothing
    assert last.exists()

    expected = [f"row-{i}" for i in range(FILES * ROWS)]
    committed = read_all(bootstrap, out, "read_committed", len(expected), 2)
    counts = Counter(committed)
    assert sorted(counts) == sorted(expected)
    assert set(counts.values()) == {1}, {v: c for v, c in counts.items() if c > 1}


SCHEMA = StructType([StructField("value", StringType())])
BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "t"}


@pytest.mark.parametrize("writer, options, named", [
    (QuafkaWriter, {"exactlyOnce": "true"}, "applies to writeStream"),
    (QuafkaStreamWriter, {"exactlyOnce": "yes"}, "'exactlyOnce'='yes' must be true or false"),
    (QuafkaStreamWriter, {"kafka.transactional.id": "x"}, "'kafka.transactional.id' is not taken"),
    (QuafkaStreamWriter, {"transactionalIdPrefix": "p"}, "'transactionalIdPrefix' needs 'exactlyOnce'=true"),
])
def test_exactly_once_options_are_refused_where_they_cannot_hold(writer, options, named):
    with pytest.raises(OptionError, match=named):
        writer(Options({**BASE, **options}), SCHEMA)


def test_exactly_once_needs_the_topic_option():
    schema = StructType([StructField("value", StringType()), StructField("topic", StringType())])
    with pytest.raises(OptionError, match="'exactlyOnce' needs the option 'topic'"):
        QuafkaStreamWriter(Options({"kafka.bootstrap.servers": "127.0.0.1:9092", "exactlyOnce": "true"}), schema)
