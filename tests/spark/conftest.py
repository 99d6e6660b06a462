"""The Spark tests' fixtures (test modules mark themselves `pytestmark = pytest.mark.spark`): one local[2, 2] SparkSession per test process (task retries allowed),
UI and progress bar off, loopback only; and a broker per module.

Every test under tests/spark joins the xdist group "spark" (`make test` runs pytest with
`--dist loadgroup`), so one worker runs them all on one SparkSession, and a hang guard covers the
group: from its first test to its last, at most SPARK_GROUP_GUARD_S seconds, after which the
worker prints every thread's stack to the terminal and exits (as pytest-timeout's thread method
does for one test) instead of hanging the suite."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import traceback
from pathlib import Path

import pytest

from quafka import EmbeddedBroker


SPARK_DIR = Path(__file__).resolve().parent
# Every Spark JVM the tests start through spark-submit (this process's SparkSession, the driver
# subprocesses, the Connect server) inherits these: C1 only and the serial collector, for short-lived
# JVMs on 2 cores. Measured on test_stream's driver SIGKILL test and test_batch_and_sink: user CPU
# 60.6 s -> 39.1 s, wall 87 s -> 76 s. A user's setting wins.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
SPARK_GROUP_GUARD_S = 900  # the group takes about 8 minutes on a quiet 2-core machine (the exactly-once test 90-120 s, the standalone cluster about 2 minutes)
_group: dict = {"ids": set(), "finished": 0, "armed": False}


def _in_group(item) -> bool:
    return SPARK_DIR in Path(str(item.fspath)).resolve().parents


def pytest_collection_modifyitems(config, items):
    group = [item for item in items if _in_group(item)]
    for item in group:
        item.add_marker(pytest.mark.xdist_group("spark"))
    _group["ids"] = {item.nodeid for item in group}


def _group_timed_out(config, nodeid_holder: dict) -> None:
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        capman.suspend_global_capture(in_=True)
    terminal = config.get_terminal_writer()
    terminal.sep("+", f"the Spark test group ran past its {SPARK_GROUP_GUARD_S} s guard "
                      f"(running: {nodeid_holder.get('current')})")
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        terminal.sep("~", f"thread {names.get(ident, ident)}")
        terminal.write("".join(traceback.format_stack(frame)))
    terminal.flush()
    os._exit(1)


def pytest_runtest_setup(item):
    if _in_group(item):
        _group["current"] = item.nodeid
        if not _group["armed"]:
            timer = threading.Timer(SPARK_GROUP_GUARD_S, _group_timed_out, (item.config, _group))
            timer.daemon = True
            timer.start()
            _group["armed"], _group["timer"] = True, timer


def pytest_runtest_logfinish(nodeid, location):
    if _group["armed"] and nodeid in _group["ids"]:
        _group["finished"] += 1
        if _group["finished"] >= len(_group["ids"]):
            _group["timer"].cancel()
            _group["armed"] = False


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the workers need this venv (quafka, pyspark_quafka)
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2, 2]").appName("quafka-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               # 3, not the 2 of local[2]: the stream test checks numPartitions defaults to it
               .config("spark.default.parallelism", "3")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    stop_gateway_jvm()


def stop_gateway_jvm(timeout_s: float = 30.0) -> None:
    """End the driver JVM, which session.stop() leaves running (pyspark keeps the py4j gateway for
    the next session) until this process exits: closing its stdin ends it — PythonGatewayServer
    exits on end of input, so that it dies with its Python driver — and with it go its Python
    workers (pyspark.daemon exits when its stdin closes too; a streaming runner when its JVM goes,
    quafka.spark.lifetime). Then no process of the suite outlives it (the root conftest checks)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    except Exception:  # noqa: BLE001 - the JVM is ended below either way
        pass
    SparkContext._gateway = None
    SparkContext._jvm = None
    if proc is None:
        return
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


@pytest.fixture(scope="module")
def bootstrap():
    """One broker for the module: every test uses its own topics and groups."""
    with EmbeddedBroker() as broker:
        yield broker.bootstrap_servers


@pytest.fixture(scope="session")
def spark_cluster():
    """A Spark standalone master and 2 workers (1 core each) on loopback, shared by the session's
    cluster tests (tests/support/spark_cluster.py); its stop fails the teardown if any of its JVMs,
    executors or Python workers is left."""
    from support.spark_cluster import SparkCluster

    cluster = SparkCluster(workers=2).start()
    print(f"\nspark cluster {cluster.master_url}: 2 workers ALIVE in {cluster.started_s:.1f} s")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory):
    """A Spark Connect server (pyspark's own, master local[2], on a free loopback port) whose Python
    workers run this interpreter and this quafka (tests/support/spark_connect.py). Its teardown
    fails when the JVM or one of its Python processes had to be killed or outlived it."""
    from support.spark_connect import SparkConnectServer

    server = SparkConnectServer(tmp_path_factory.mktemp("spark-connect")).start()
    yield server
    server.stop()
