"""A Spark Connect server for the tests, started from the pip-installed pyspark (4.3 ships the server:
``jars/spark-connect_2.13-4.3.0.jar`` and ``sbin/start-connect-server.sh``).

``start-connect-server.sh`` daemonizes through ``spark-daemon.sh`` (pid file, log directory); the
tests start what it ends in — ``spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer`` — directly, as a child in a process group
of its own, so that the fixture owns the JVM and can end it. The server's Python (``PYSPARK_PYTHON``,
which runs the data source's planner, its runner, the read and write tasks and the ``foreachBatch``
function of a Connect client) is this interpreter, with this quafka first on ``PYTHONPATH``.

Every process of the server (the JVM, its ``pyspark.daemon`` workers — which move to a process group
of their own, ``pyspark/daemon.py`` — the streaming runners, the ``foreachBatch`` workers) carries
``QUAFKA_SPARK_CONNECT_SERVER=<token>`` in its environment; :meth:`SparkConnectServer.stop` ends
the JVM, waits for every such process to exit, and fails naming the ones that did not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from . import environ_has, free_port, port_open, processes

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
MARK = "QUAFKA_SPARK_CONNECT_SERVER"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def connect_jar() -> Path:
    """The Connect server's jar in pyspark's own jars (it is part of the PyPI package since 4.0)."""
    jars = sorted((spark_home() / "jars").glob("spark-connect_*.jar"))
    if not jars:
        raise AssertionError(f"no spark-connect_*.jar in {spark_home() / 'jars'}: this pyspark has no Connect server")
    return jars[0]


class SparkConnectServer:
    """One Spark Connect server JVM (master ``local[2]``) on 127.0.0.1:``port``."""

    def __init__(self, log_dir: str | os.PathLike, port: int | None = None, master: str = "local[2]") -> None:
        self.port = port or free_port()
        self.master = master
        self.token = uuid.uuid4().hex[:12]
        self.log_path = Path(log_dir) / f"spark-connect-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """What a client passes to ``SparkSession.builder.remote(...)``."""
        return f"sc://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [str(spark_home() / "bin" / "spark-submit"),
                "--class", SERVER_CLASS,
                "--master", self.master,
                "--name", "quafka-tests-connect",
                "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                "--conf", f"spark.connect.grpc.binding.port={self.port}",
                "--conf", "spark.ui.enabled=false",
                "--conf", "spark.sql.shuffle.partitions=2",
                "--conf", "spark.driver.host=127.0.0.1",
                "--conf", "spark.driver.bindAddress=127.0.0.1"]

    def environment(self) -> dict[str, str]:
        import quafka

        env = dict(os.environ)
        src = str(Path(quafka.__file__).resolve().parent.parent)  # this quafka, not another install
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
        env["PYSPARK_PYTHON"] = sys.executable  # the server's Python workers import quafka
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        env["SPARK_CONNECT_MODE"] = "0"  # as sbin/start-connect-server.sh: the server is a classic driver
        env.pop("SPARK_REMOTE", None)
        env.pop("SPARK_HOME", None)  # pyspark's bin/ finds its own home
        env[MARK] = self.token
        return env

    def start(self, timeout_s: float = 90.0) -> "SparkConnectServer":
        """Start the JVM and wait, at most `timeout_s`, until its gRPC port accepts and a client's
        ``spark.range(3).count()`` answers 3 (run in a subprocess, see :func:`ping`)."""
        connect_jar()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=self.environment(), start_new_session=True)
        deadline = time.monotonic() + timeout_s
        try:
            while not port_open(self.port):
                if self.proc.poll() is not None:
                    raise AssertionError(f"the Spark Connect server exited with {self.proc.returncode} before "
                                         f"listening on {self.port}:\n{self.log_tail()}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"the Spark Connect server did not listen on {self.port} within "
                                         f"{timeout_s} s:\n{self.log_tail()}")
                time.sleep(0.2)
            ping(self.url, max(5.0, deadline - time.monotonic()))
        except BaseException:
            self.stop(check=False)
            raise
        return self

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as e:
            return f"(no log: {e})"
        return "\n".join(text.splitlines()[-lines:])

    def server_processes(self) -> list:
        """The running processes of this server: the JVM and whatever carries its mark."""
        return [p for p in processes() if p.state != "Z" and environ_has(p.pid, MARK, self.token)]

    def stop(self, timeout_s: float = 30.0, check: bool = True) -> None:
        """SIGTERM to the JVM's process group (its shutdown hook stops the SparkContext, which ends
        the Python workers), SIGKILL after `timeout_s`; then wait for every process carrying the
        mark. With `check`, fail naming any that had to be killed or outlived the JVM."""
        if self.proc is None:
            return
        problems: list[str] = []
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                problems.append(f"the JVM (pid {self.proc.pid}) ignored SIGTERM for {timeout_s} s")
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        deadline = time.monotonic() + timeout_s
        left = self.server_processes()
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = self.server_processes()
        for p in left:
            problems.append(f"pid {p.pid} (parent {p.ppid}) outlived the JVM by {timeout_s} s: {p.cmdline[:200]}")
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not self._log.closed:
            self._log.close()
        if check and problems:
            raise AssertionError("stopping the Spark Connect server:\n  " + "\n  ".join(problems))


PING = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
n = spark.range(3).count()
spark.stop()
print(n)
"""


def ping(url: str, timeout_s: float) -> None:
    """A real client call: ``spark.range(3).count()`` from a Connect client in a subprocess (this
    process may host a classic SparkSession; see tests/spark/connect_client.py)."""
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE")}
    try:
        out = subprocess.run([sys.executable, "-c", PING, url], capture_output=True, text=True,
                             timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"a Connect client's count on {url} did not answer within {timeout_s:.0f} s") from e
    if out.returncode != 0 or out.stdout.strip() != "3":
        raise AssertionError(f"a Connect client's count on {url} failed ({out.returncode}): "
                             f"{out.stdout[-500:]}{out.stderr[-2000:]}")
