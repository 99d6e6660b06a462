"""The share-group streaming source (quafka.spark.stream): fan-out to more tasks than topic
partitions, acknowledgement after Spark's commit (including the idle tail), replay from the
checkpoint after a failed batch, and lock renewal during a long batch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Producer

from quafka import EmbeddedBroker
from quafka.client import Admin

pytestmark = pytest.mark.spark

LOCK_MS = 5000


@pytest.fixture(scope="module")
def broker():
    """A broker whose groups may use 5 s record locks (the default minimum is 15 s)."""
    with EmbeddedBroker(config={"group.share.min.record.lock.duration.ms": 5000}) as b:
        yield b.bootstrap_servers


def make_topic(bootstrap: str, n: int) -> tuple[str, str]:
    topic, group = f"st-{uuid.uuid4().hex[:8]}", f"sg-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({topic: (1, 1)})
        admin.alter_configs("group", group, {"share.auto.offset.reset": "earliest",
                                             "share.assignment.interval.ms": "0",
                                             "share.record.lock.duration.ms": str(LOCK_MS)})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, value=str(i).encode(), key=b"k")
    assert producer.flush(30) == 0
    return topic, group


def group_state(bootstrap: str, group: str, topic: str) -> tuple[int, int]:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        return admin.list_share_group_offsets(group, [topic]).get((topic, 0), (-1, -1))


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def wait_drained(bootstrap: str, group: str, topic: str, n: int, timeout: float = 40.0) -> None:
    wait_for(lambda: group_state(bootstrap, group, topic) == (n, 0), timeout,
             f"start offset {n} and lag 0 (now {group_state(bootstrap, group, topic)})")


class Sink:
    """foreachBatch target (runs in this driver process): values per batch and partition ids."""

    def __init__(self, fail_batch: int | None = None, sleep_batch: tuple[int, float] | None = None) -> None:
        self.lock = threading.Lock()
        self.values: list[int] = []
        self.batches: list[tuple[int, int, set[int]]] = []  # (batch id, rows, spark partition ids)
        self.batch_values: dict[int, set[int]] = {}
        self.delivery_counts: Counter = Counter()
        self.failed_values: set[int] = set()
        self.fail_batch = fail_batch
        self.sleep_batch = sleep_batch
        self.block_batch: int | None = None  # this batch waits for `release`, then fails
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, df, batch_id: int) -> None:
        from pyspark.sql.functions import spark_partition_id

        rows = df.select("value", "deliveryCount", "partition", spark_partition_id().alias("pid")).collect()
        values = [int(r.value) for r in rows]
        if self.fail_batch is not None and rows and batch_id == self.fail_batch:
            self.failed_values = set(values)
            raise RuntimeError(f"injected failure in batch {batch_id}")
        if self.block_batch is not None and rows and batch_id == self.block_batch:
            self.failed_values = set(values)
            self.entered.set()
            self.release.wait(30)
            raise RuntimeError(f"batch {batch_id} interrupted by query.stop()")
        if self.sleep_batch is not None and rows and batch_id == self.sleep_batch[0]:
            time.sleep(self.sleep_batch[1])
        with self.lock:
            self.values.extend(values)
            self.batches.append((batch_id, len(rows), {r.pid for r in rows}))
            self.batch_values[batch_id] = set(values)
            self.delivery_counts.update(r.deliveryCount for r in rows)

    def seen(self) -> set[int]:
        with self.lock:
            return set(self.values)


def start(spark, bootstrap, topic, group, checkpoint, sink, **options):
    reader = (spark.readStream.format("quafka")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic)
              .option("share.group", group))
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return (reader.load().writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds").start())


def test_num_partitions_defaults_to_spark_default_parallelism(spark, broker, tmp_path):
    """No numPartitions: the runner fans each batch out into spark.default.parallelism (3, set by
    the session fixture) tasks, read from the driver JVM's launch configuration."""
    assert spark.sparkContext.defaultParallelism == 3
    n = 600
    topic, group = make_topic(broker, n)
    sink = Sink()
    query = start(spark, broker, topic, group, tmp_path / "cp", sink, maxRecordsPerTrigger=200)
    try:
        wait_for(lambda: len(sink.seen()) == n or query.exception() is not None, 60, "all records in the sink")
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    big = [pids for _, rows, pids in sink.batches if rows >= 3]
    assert big and all(pids == {0, 1, 2} for pids in big), sink.batches


def test_fan_out_every_record_and_group_drained(spark, broker, tmp_path):
    n = 10_000  # as the issue asks
    topic, group = make_topic(broker, n)
    sink = Sink()
    query = start(spark, broker, topic, group, tmp_path / "cp", sink, numPartitions=4, maxRecordsPerTrigger=3000)
    try:
        wait_for(lambda: len(sink.seen()) == n or query.exception() is not None, 60, "all records in the sink")
        assert query.exception() is None, query.exception()
        # the idle tail is acknowledged by latestOffset (no commit() comes for the last batch)
        wait_drained(broker, group, topic, n)
    finally:
        query.stop()
    assert sorted(sink.values) == list(range(n))  # every record exactly once
    assert all(rows <= 3000 for _, rows, _ in sink.batches)  # maxRecordsPerTrigger honoured
    big = [pids for _, rows, pids in sink.batches if rows >= 4]
    assert big and all(pids == {0, 1, 2, 3} for pids in big), sink.batches  # 4 tasks from 1 topic partition
    assert set(sink.delivery_counts) == {1}


def restart_and_check(spark, broker, topic, group, checkpoint, n, failing: Sink) -> None:
    sink = Sink()
    query = start(spark, broker, topic, group, checkpoint, sink, numPartitions=2, maxRecordsPerTrigger=1000)
    try:
        wait_for(lambda: failing.seen() | sink.seen() == set(range(n)) or query.exception() is not None,
                 60, "all records after the restart")
        assert query.exception() is None, query.exception()
        wait_drained(broker, group, topic, n)
    finally:
        query.stop()
    # the restart reruns batch 1 first, read by offset from the ranges the checkpoint names
    assert sink.batches[0][0] == 1 and sink.batch_values[1] == failing.failed_values
    everything = Counter(failing.values) + Counter(sink.values)
    assert set(everything) == set(range(n))  # nothing missing
    duplicates = {v for v, c in everything.items() if c > 1}
    assert duplicates <= failing.failed_values, sorted(duplicates - failing.failed_values)[:10]
    assert not set(failing.values) & failing.failed_values  # the failed batch never reached the sink before


def test_stop_mid_batch_then_restart(spark, broker, tmp_path):
    n = 3000
    topic, group = make_topic(broker, n)
    checkpoint = tmp_path / "cp"
    failing = Sink()
    failing.block_batch = 1
    query = start(spark, broker, topic, group, checkpoint, failing, numPartitions=2, maxRecordsPerTrigger=1000)
    assert failing.entered.wait(60), query.exception()
    stopper = threading.Thread(target=query.stop)
    stopper.start()
    time.sleep(0.5)  # let stop() begin while batch 1 is still running
    failing.release.set()
    stopper.join(60)
    assert not stopper.is_alive() and not query.isActive
    assert failing.failed_values and failing.seen()
    restart_and_check(spark, broker, topic, group, checkpoint, n, failing)


def test_failed_batch_is_replayed_from_the_checkpoint(spark, broker, tmp_path):
    n = 3000
    topic, group = make_topic(broker, n)
    checkpoint = tmp_path / "cp"
    failing = Sink(fail_batch=1)
    query = start(spark, broker, topic, group, checkpoint, failing, numPartitions=2, maxRecordsPerTrigger=1000)
    wait_for(lambda: query.exception() is not None or not query.isActive, 60, "the injected failure")
    assert "injected failure" in str(query.exception())
    query.stop()
    assert failing.failed_values and failing.seen()  # batch 0 went through, batch 1 failed
    restart_and_check(spark, broker, topic, group, checkpoint, n, failing)


DRIVER = """
import os, sys, time
from pyspark.sql import SparkSession
bootstrap, topic, group, checkpoint, out = sys.argv[1:6]
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")

def sink(df, batch_id):
    values = [int(r.value) for r in df.select("value").collect()]
    if not values:
        return
    if batch_id == 1:  # the batch in flight when the driver is killed
        with open(os.path.join(out, "inflight.tmp"), "w") as f:
            f.write(" ".join(map(str, values)))
        os.rename(os.path.join(out, "inflight.tmp"), os.path.join(out, "inflight"))
        time.sleep(120)
    with open(os.path.join(out, f"batch-{batch_id}.tmp"), "w") as f:
        f.write(" ".join(map(str, values)))
    os.rename(os.path.join(out, f"batch-{batch_id}.tmp"), os.path.join(out, f"batch-{batch_id}"))

(spark.readStream.format("quafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
 .option("share.group", group).option("maxRecordsPerTrigger", "1000").option("numPartitions", "2").load()
 .writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
 .trigger(processingTime="200 milliseconds").start().awaitTermination())
"""


def test_sigkill_of_the_driver_then_restart(spark, broker, tmp_path):
    n = 3000
    topic, group = make_topic(broker, n)
    checkpoint, out = tmp_path / "cp", tmp_path / "out"
    out.mkdir()
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.Popen([sys.executable, str(script), broker, topic, group, str(checkpoint), str(out)],
                            env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (out / "inflight").exists() or proc.poll() is not None, 90, "batch 1 in the driver")
        assert proc.poll() is None, "the driver subprocess ended early"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its JVM and the JVM's Python workers
        proc.wait(30)
    failing = Sink()
    failing.failed_values = {int(v) for v in (out / "inflight").read_text().split()}
    for f in out.glob("batch-*"):
        failing.values.extend(int(v) for v in f.read_text().split())
    assert failing.values  # batch 0 reached the sink before the kill
    restart_and_check(spark, broker, topic, group, str(checkpoint), n, failing)


def test_long_batch_is_renewed_not_redelivered(spark, broker, tmp_path):
    n = 300
    topic, group = make_topic(broker, n)
    sink = Sink(sleep_batch=(0, 3 * LOCK_MS / 1000))
    query = start(spark, broker, topic, group, tmp_path / "cp", sink, numPartitions=2)
    try:
        wait_for(lambda: len(sink.seen()) == n or query.exception() is not None, 60, "the long batch")
        assert query.exception() is None, query.exception()
        wait_drained(broker, group, topic, n)
    finally:
        query.stop()
    assert sorted(sink.values) == list(range(n))  # neither redelivered nor duplicated
    assert set(sink.delivery_counts) == {1}


# ---------------------------------------------------------------------- no Spark query needed

def test_options_checked_and_reader_pickles_without_client():
    import pickle

    from quafka.spark.datasource import RECORD_SCHEMA
    from quafka.spark.options import OptionError, Options
    from quafka.spark.stream import QuafkaShareStreamReader

    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}
    with pytest.raises(OptionError, match="share.group"):
        QuafkaShareStreamReader(Options(base), RECORD_SCHEMA)
    with pytest.raises(OptionError, match="asyncProgressTrackingEnabled"):
        QuafkaShareStreamReader(Options({**base, "share.group": "g", "asyncProgressTrackingEnabled": "true"}),
                                RECORD_SCHEMA)
    with pytest.raises(OptionError, match="share.acknowledgement.mode"):
        QuafkaShareStreamReader(Options({**base, "share.group": "g",
                                         "kafka.share.acknowledgement.mode": "implicit"}), RECORD_SCHEMA)
    for name in ("startingOffsets", "startingTimestamp", "endingOffsetsByTimestamp"):
        with pytest.raises(OptionError, match=f"{name}.*does not apply to a share-group stream"):
            QuafkaShareStreamReader(Options({**base, "share.group": "g", name: "1"}), RECORD_SCHEMA)
    reader = QuafkaShareStreamReader(Options({**base, "share.group": "g", "maxRecordsPerTrigger": "7",
                                              "kafka.client.id": "x"}), RECORD_SCHEMA)
    assert reader._consumer is None  # no I/O in __init__
    assert reader.getDefaultReadLimit().max_rows == 7
    assert reader.client_config["client.id"] == "x" and reader.client_config["group.id"] == "g"
    reader._consumer = object()  # stands for a live client: never pickled
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._consumer is None and copy._pending == {} and copy.max_records == 7


def test_compact_ranges_and_replay_partitions():
    from quafka.client import AcquiredBatches
    from quafka.spark.datasource import RECORD_SCHEMA
    from quafka.spark.options import Options
    from quafka.spark.stream import QuafkaShareStreamReader, RangesPartition, compact_ranges

    items = [AcquiredBatches("t", 0, b"", [(0, 2, 1), (5, 6, 1), (7, 7, 2)]), AcquiredBatches("t", 1, b"", [(3, 3, 1)]),
             AcquiredBatches("t", 0, b"", [(8, 9, 2)])]
    acq = compact_ranges(items)
    assert acq == {"t:0": [[0, 2, 1], [5, 6, 1], [7, 9, 2]], "t:1": [[3, 3, 1]]}
    records = [(t, p, o, dc) for i in items for t, p in [(i.topic, i.partition)]
               for f, l, dc in i.acquired for o in range(f, l + 1)]
    reader = QuafkaShareStreamReader(Options({"kafka.bootstrap.servers": "b:1", "subscribe": "t",
                                              "share.group": "g", "numPartitions": "3"}), RECORD_SCHEMA)
    parts = reader.partitions({"v": 1, "seq": 0}, {"v": 1, "seq": 1, "member": "m", "acq": acq})  # cache miss
    assert all(isinstance(p, RangesPartition) for p in parts) and len(parts) == 3
    spans = [(t, p, f, l, dc) for part in parts for (t, p, f, l, dc) in part.ranges]
    covered = sorted((t, p, o, dc) for t, p, f, l, dc in spans for o in range(f, l + 1))
    assert covered == sorted(records)


@pytest.mark.parametrize("batch_sizes, n", [
    ([600, 600, 522], 4),  # fewer batches than tasks: batches are shared
    ([1722], 4),  # one big batch
    ([1000, 100, 100, 100], 4),  # uneven batches: still four groups
    ([50] * 30, 4),
    ([3, 2], 8),  # fewer offsets than tasks: one group per offset
])
def test_fan_out_makes_n_groups_covering_every_offset_once(batch_sizes, n):
    from quafka.client import AcquiredBatches
    from quafka.protocol import record_batch as rb
    from quafka.spark.stream import fan_out

    data, base = bytearray(), 0
    for size in batch_sizes:
        batch = bytearray(rb.build_batch([(None, str(base + i).encode()) for i in range(size)], base_timestamp=1))
        rb.stamp_base_offset(batch, 0, base)
        data += batch
        base += size
    item = AcquiredBatches("t", 0, bytes(data), [(0, base - 1, 1)])
    groups = fan_out([item], n)
    assert len(groups) == min(n, base)
    offsets = [r.offset for group in groups for piece in group for r in piece.records()]
    assert offsets == list(range(base))
    counts = [sum(piece.count for piece in group) for group in groups]
    assert all(c > 0 for c in counts)


SIGTERM_CHILD = """
import os, signal, time
from quafka.spark import stream
from quafka.spark.datasource import RECORD_SCHEMA
from quafka.spark.options import Options

stream.CLOSE_ON_SIGTERM_S = 1.0
reader = stream.QuafkaShareStreamReader(Options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
                                                 "share.group": "g"}), RECORD_SCHEMA)
reader._install_sigterm()
# SIGTERM arrives while the main thread holds a lock close() needs: here the stop event's own lock,
# as when a first SIGTERM's handler was inside Event.set and Spark sent the second
reader._stop._cond.acquire()
print("ready", flush=True)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(60)
print("survived", flush=True)
"""


def test_sigterm_ends_the_runner_even_when_its_main_thread_holds_a_lock_close_needs():
    """A runner left behind by its driver (issue 14: parent 1, SIGTERM ignored) was stuck in the
    SIGTERM handler: close() ran in signal context and waited forever on a lock its own thread held.
    The handler now closes on a thread of its own for a bounded time and then lets SIGTERM end it."""
    child = subprocess.Popen([sys.executable, "-c", SIGTERM_CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        out, err = child.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        pytest.fail(f"the runner did not end on SIGTERM within 30 s: {out!r} {err[-2000:]!r}")
    assert out.strip() == "ready" and child.returncode == -signal.SIGTERM, (child.returncode, out, err[-2000:])
