"""``format("quafka")`` on a real Spark cluster (issue 32, acceptance 1): a standalone master and two
workers, each its own JVM (the session fixture ``spark_cluster``, tests/support/spark_cluster.py),
executors in JVMs of their own with their own Python workers, and the driver in a process of its own
(tests/spark/cluster_driver.py; the test process hosts a local SparkContext already). The broker
(this module's EmbeddedBroker) is reached only through bootstrap.servers.

The share-group stream runs through a Python UDF into the sink; an executor JVM
(CoarseGrainedExecutorBackend of the application) is SIGKILLed while a task of a batch is held in
that UDF (Spark reruns the task elsewhere: TaskSetManager.executorLost), then the driver is SIGKILLed
with its JVM and its data-source runner while a later batch is held, and a new driver starts on the
same checkpoint (MicroBatchExecution runs the last batch of the offset log again, read by offset).
The sink is at-least-once: every input record is in the output, none lost, and the extra copies
number at most one micro-batch (maxRecordsPerTrigger) per crash. The batch reader then counts the
input on the cluster, and no executor or Python worker of either application is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support import process_info, set_group_configs, wait_until
from support.readers import read_to_end

from quafka.client import Admin

pytestmark = pytest.mark.spark

RECORDS = 3000
TRIGGER = 500  # maxRecordsPerTrigger: the bound on the extra copies one crash may cause
CRASHES = 2  # the executor, then the driver
# one topic partition, acquired in offset order: a micro-batch holds at most TRIGGER consecutive
# values, so these two are in different batches, the second a later one (and records before the
# first are out before the second is met)
EXECUTOR_HOLD, DRIVER_HOLD = 250, 1250
DRIVER = Path(__file__).resolve().parent / "cluster_driver.py"
LOCK_MS = 60_000  # the broker's maximum: a loaded machine must not let a held batch's locks lapse


def make_input(bootstrap: str) -> tuple[str, str, str]:
    topic, out, group = (f"cl-{tag}-{uuid.uuid4().hex[:8]}" for tag in ("in", "out", "sg"))
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({topic: (1, 1), out: (1, 1)})
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest", "share.assignment.interval.ms": "0",
                                         "share.record.lock.duration.ms": str(LOCK_MS)})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(topic, value=str(i).encode())
    assert producer.flush(30) == 0
    return topic, out, group


class Output:
    """The output topic read from offset 0 by one consumer, as it grows."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"cl-reader-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "log_level": 3})
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.values: Counter = Counter()

    def drain(self) -> Counter:
        for m in self.consumer.consume(10_000, 0.2):
            if m.error():
                raise AssertionError(f"reading the output: {m.error()}")
            self.values[int(m.value())] += 1
        return self.values

    def close(self) -> None:
        self.consumer.close()


class Driver:
    """cluster_driver.py in a session of its own (SIGKILL of the group: driver, its JVM, its runner)."""

    def __init__(self, cluster, tmp_path: Path, *args: str, holds: tuple[int, ...] = ()) -> None:
        self.marks, self.log_path = tmp_path / "marks", tmp_path / "driver.log"
        self.marks.mkdir(exist_ok=True)
        env = dict(cluster.env())
        del env["QUAFKA_SPARK_CLUSTER"]  # the driver is not part of the cluster: its leftovers are checked here
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, str(DRIVER), cluster.master_url, *args, str(self.marks),
                                          str(TRIGGER), *map(str, holds)],
                                         env=env, cwd=tmp_path, start_new_session=True, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT)
        self.app_id = ""

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def wait_for(self, name: str, timeout_s: float) -> Path:
        mark = self.marks / name
        wait_until(lambda: mark.exists() or self.proc.poll() is not None, timeout_s, interval_s=0.1,
                   message=f"{name} from the driver")
        assert self.proc.poll() is None, f"the driver exited with {self.proc.returncode}:\n{self.log()}"
        return mark

    def started(self, timeout_s: float = 90.0) -> "Driver":
        self.app_id = self.wait_for(f"app-{self.proc.pid}", timeout_s).read_text()
        return self

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)


def executor_of(pid: int, app_id: str) -> int:
    """The CoarseGrainedExecutorBackend JVM of `app_id` above the Python worker `pid` (its parent
    is pyspark.daemon, whose parent is the executor)."""
    chain, info = [], process_info(pid)
    while info is not None and info.pid > 1:
        chain.append(info.cmdline[:160])
        if "CoarseGrainedExecutorBackend" in info.cmdline:
            assert f"--app-id {app_id}" in info.cmdline, info.cmdline
            return info.pid
        info = process_info(info.ppid)
    raise AssertionError(f"no executor JVM above the Python worker {pid}: {chain}")


def app_gone(cluster, app_id: str, timeout_s: float = 60.0) -> None:
    """No executor JVM of `app_id` and no Python worker of its executors is left: the workers kill
    an application's executors once its driver is gone, and their pyspark.daemon ends with them."""
    assert app_id.startswith("app-"), app_id
    wait_until(lambda: not cluster.app_processes(app_id), timeout_s, interval_s=0.2,
               message=f"the processes of {app_id} to exit (left: "
                       f"{[p.cmdline[:100] for p in cluster.app_processes(app_id)]})")


def test_stream_into_sink_across_an_executor_and_a_driver_sigkill_then_batch_count(spark_cluster, bootstrap, tmp_path):
    began = time.monotonic()
    topic, out, group = make_input(bootstrap)
    args = (bootstrap, topic, group, out, str(tmp_path / "cp"))
    output = Output(bootstrap, out)
    timings = {}
    try:
        first = Driver(spark_cluster, tmp_path, *args, holds=(EXECUTOR_HOLD, DRIVER_HOLD))
        try:
            first.started()
            timings["first driver up"] = time.monotonic() - began
            worker = int(first.wait_for(f"hold-{EXECUTOR_HOLD}", 90).read_text())
            executor = executor_of(worker, first.app_id)
            assert len(spark_cluster.executors(first.app_id)) == 2  # one per worker
            os.kill(executor, signal.SIGKILL)  # mid-batch: a task of this batch is held in its Python worker
            timings["executor killed"] = time.monotonic() - began
            first.wait_for(f"hold-{DRIVER_HOLD}", 90)  # the batch went on without that executor
            assert not process_info(executor) or process_info(executor).state == "Z"
            before_driver_kill = sum(output.drain().values())
            assert before_driver_kill >= DRIVER_HOLD - TRIGGER, before_driver_kill  # the batches before its batch are out
        finally:
            first.kill()  # mid-batch again: the driver, its JVM and its runner
        timings["driver killed"] = time.monotonic() - began

        second = Driver(spark_cluster, tmp_path, *args)
        try:
            app_gone(spark_cluster, first.app_id)  # while the new driver starts
            second.started()
            expected = set(range(RECORDS))
            wait_until(lambda: expected <= set(output.drain()) or second.proc.poll() is not None, 90, interval_s=0.2,
                       message=f"all {RECORDS} records in the output")
            assert second.proc.poll() is None, second.log()
            timings["every record out"] = time.monotonic() - began
            (second.marks / "stop").touch()
            assert second.proc.wait(90) == 0, second.log()
            count = int((second.marks / f"count-{second.proc.pid}").read_text())
        finally:
            second.kill()
        app_gone(spark_cluster, second.app_id)
        timings["batch count"] = time.monotonic() - began
    finally:
        output.close()
    # the whole output, to its end, once both drivers are gone
    counts = Counter(int(m.value()) for m in read_to_end(bootstrap, out, expect=RECORDS))
    print(f"\ncluster stream test (s since start): {', '.join(f'{k} {v:.1f}' for k, v in timings.items())}")
    extra = sum(c - 1 for c in counts.values())
    print(f"output: {len(counts)} distinct of {RECORDS}, {extra} extra copies; batch count {count}")
    assert set(counts) == set(range(RECORDS))  # none lost, nothing else
    assert extra <= CRASHES * TRIGGER, {v: c for v, c in counts.items() if c > 1}
    assert count == RECORDS  # the batch reader on the cluster counts every record


@pytest.mark.parametrize("found_by", ["mark", "cwd"])
def test_cluster_stop_fails_when_a_process_of_it_is_left(tmp_path, found_by):
    """The teardown's leftover check (SparkCluster.stop) finds a process of the cluster that its
    JVMs' process groups did not take along — by the cluster's mark in its environment (an executor
    and its Python workers inherit it) or by a working directory under the cluster's directory
    (an executor runs in its work dir) — kills it, and fails naming it."""
    from support.spark_cluster import CLUSTER_MARK, SparkCluster

    cluster = SparkCluster(workers=0, root=tmp_path)
    env = dict(os.environ, **({CLUSTER_MARK: cluster.mark} if found_by == "mark" else {}))
    cwd = tmp_path / "worker-0" if found_by == "cwd" else Path.cwd()
    cwd.mkdir(exist_ok=True)
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env, cwd=cwd,
                             start_new_session=True)
    try:
        with pytest.raises(AssertionError, match=rf"pid {stray.pid} .*time.sleep\(600\)"):
            cluster.stop(timeout_s=0.5)
        assert stray.wait(10) == -signal.SIGKILL
    finally:
        if stray.poll() is None:
            stray.kill()
            stray.wait(10)
