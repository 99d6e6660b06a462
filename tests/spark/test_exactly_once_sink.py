"""The sink's ``exactlyOnce`` (quafka/spark/sink.py; issue 31, acceptance 7) on local mode with the
driver in a process of its own, over a replayable file source: a task's Python worker SIGKILLed
(Spark retries the task; the retry's InitProducerId with the same transactional.id fences the
killed attempt and ends its transaction, Kafka's TransactionCoordinator.handleInitProducerId), then
the driver SIGKILLed in the middle of a micro-batch and started again on the checkpoint (Spark
runs the batch again with the same batchId: MicroBatchExecution reruns the last batch of the
offset log without a commit-log entry). Read at read_committed the output topic holds every input
row exactly once. Plus the option combinations the sink refuses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter

import pytest
from pyspark.sql.types import StringType, StructField, StructType
from support.readers import read_to_end
from support import wait_until

from quafka.client import Admin
from quafka.spark.options import OptionError, Options
from quafka.spark.sink import QuafkaStreamWriter, QuafkaWriter

pytestmark = pytest.mark.spark

FILES, ROWS = 3, 400  # one file per micro-batch (maxFilesPerTrigger=1): batches 0, 1, 2


def read_all(bootstrap: str, topic: str, isolation: str, expect: int, partitions: int, timeout_s: float = 30.0) -> list[str]:
    return [m.value().decode() for m in read_to_end(bootstrap, topic, partitions=partitions, isolation=isolation,
                                                    expect=expect, timeout_s=timeout_s, partial_ok=True)]


DRIVER = """
import os, sys, time
from pathlib import Path
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from pyspark.sql.types import StringType

bootstrap, out, source, checkpoint, marks = sys.argv[1:6]
stall = os.environ.get("EO_STALL") == "1"
spark = (SparkSession.builder.master("local[2, 2]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")


@udf(StringType())
def hold(value):
    # the task holding `row` stops here once (its Python worker's pid written to marks/<name>)
    for row, name in (("row-500", "executor"), ("row-900", "driver")):
        mark = Path(marks) / name
        if stall and value == row and not mark.exists():
            mark.write_text(str(os.getpid()))
            time.sleep(3600)
    return value


query = (spark.readStream.option("maxFilesPerTrigger", 1).text(source).repartition(2)
         .select(hold("value").alias("value"))
         .writeStream.format("quafka").option("kafka.bootstrap.servers", bootstrap).option("topic", out)
         .option("exactlyOnce", "true").option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
query.awaitTermination()
sys.exit(1 if query.exception() is not None else 0)
"""


def start_driver(tmp_path, *args: str, stall: bool) -> subprocess.Popen:
    (tmp_path / "driver.py").write_text(DRIVER)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1", EO_STALL="1" if stall else "0")
    return subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), *args], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "driver.log", "ab"))


def kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL the driver, its JVM and every process of its session (as test_stream.kill_session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)


def test_exactly_once_across_an_executor_sigkill_and_a_driver_restart(bootstrap, tmp_path):
    """Issue 31, acceptance 7, on local mode with the driver in a process of its own: the Python
    worker of a task of batch 1 is SIGKILLed mid-task (Spark retries the task: its InitProducerId
    fences the killed attempt); then, in batch 2, the driver is SIGKILLed (with its JVM and
    workers) while one task of the batch is held and the other has committed; a new driver on the
    checkpoint runs batch 2 again, where the committed task writes nothing and the other writes
    its rows. The output read at read_committed holds every input row once."""
    out = f"eo-kill-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({out: (2, 1)})
    source, marks = tmp_path / "in", tmp_path / "marks"
    source.mkdir()
    marks.mkdir()
    for f in range(FILES):
        (source / f"part-{f}.txt").write_text("".join(f"row-{f * ROWS + i}\n" for i in range(ROWS)))
        os.utime(source / f"part-{f}.txt", (1_000_000 + f, 1_000_000 + f))
    args = (bootstrap, out, str(source), str(tmp_path / "cp"), str(marks))

    def log() -> str:
        return (tmp_path / "driver.log").read_text(errors="replace")[-4000:]

    def committed_rows() -> int:
        return len(read_all(bootstrap, out, "read_committed", 0, 2, timeout_s=5))

    driver = start_driver(tmp_path, *args, stall=True)
    try:
        wait_until(lambda: (marks / "executor").exists() or driver.poll() is not None, 120,
                   message="a task of batch 1 to be held")
        assert driver.poll() is None, log()
        os.kill(int((marks / "executor").read_text()), signal.SIGKILL)  # the task's Python worker
        wait_until(lambda: (marks / "driver").exists() or driver.poll() is not None, 120,
                   message="a task of batch 2 to be held")
        assert driver.poll() is None, log()
        # batches 0 and 1 (800 rows) and batch 2's other task are committed
        wait_until(lambda: committed_rows() > 2 * ROWS, 60, message="batch 2's other task to commit")
    finally:
        kill_session(driver)

    driver = start_driver(tmp_path, *args, stall=False)
    try:
        assert driver.wait(180) == 0, log()
    finally:
        kill_session(driver)

    expected = [f"row-{i}" for i in range(FILES * ROWS)]
    counts = Counter(read_all(bootstrap, out, "read_committed", len(expected), 2))
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
