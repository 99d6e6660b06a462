"""A Spark standalone cluster on loopback for tests and benchmarks (issue 32): a master and N workers,
each its own JVM started from pyspark's own launcher (``<pyspark>/bin/spark-class
org.apache.spark.deploy.master.Master`` / ``...deploy.worker.Worker spark://...``; SPARK_HOME is the
pyspark package directory, so no Spark download), every port free and bound to 127.0.0.1, each worker
1 core and a modest memory, its work dir under the cluster's temporary directory, and
PYSPARK_PYTHON/PYTHONPATH naming this interpreter and this checkout's ``src`` (where ``quafka`` and
``pyspark_quafka`` live), so that executors' Python workers import the code under test.

A driver connects with ``--master spark://127.0.0.1:<port>`` (:attr:`SparkCluster.master_url`) and
asks for at most 1 core per executor (:data:`DRIVER_CONF`). :meth:`SparkCluster.start` returns once
the master's ``/json`` web UI endpoint lists every worker ALIVE. :meth:`SparkCluster.stop` SIGKILLs
each JVM's process group (the Worker starts its executors, CoarseGrainedExecutorBackend, in its own
group; their pyspark.daemon makes a group of its own and exits with its JVM's pipe) and then fails
loudly if any process of the cluster is left: one whose environment carries the cluster's mark
(every process below a master or worker inherits it), whose command line or working directory names
the cluster's directory, or whose command line names one of its workers' ports (an executor's
``--worker-url``).

Every JVM is started in a session of its own and with PR_SET_PDEATHSIG=SIGKILL (Linux), so it dies
with the process that started it even when that process is SIGKILLed and no finalizer runs.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from support import free_port, port_open, processes, wait_until

CLUSTER_MARK = "QUAFKA_SPARK_CLUSTER"  # in the environment of every process of a cluster
WORKER_MEMORY = "1g"
EXECUTOR_MEMORY = "512m"
DAEMON_MEMORY = "256m"  # the master's and the workers' own heaps
SRC = Path(__file__).resolve().parents[2] / "src"
PR_SET_PDEATHSIG = 1

#: what a driver of this cluster sets: 1 core per executor (so 1 executor per worker), executors
#: small enough for the workers, loopback only, no UI
DRIVER_CONF = {
    "spark.executor.cores": "1",
    "spark.executor.memory": EXECUTOR_MEMORY,
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
}


def pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _die_with_parent() -> None:
    """preexec_fn: SIGKILL this child when the thread that started it ends (Linux prctl)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclass
class _Daemon:
    name: str
    proc: subprocess.Popen
    log: Path
    port: int
    webui_port: int


@dataclass
class SparkCluster:
    """``with SparkCluster(workers=2) as cluster: ...`` or start()/stop()."""

    workers: int = 2
    worker_cores: int = 1
    start_timeout_s: float = 60.0
    mark: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    root: Path | None = None
    _daemons: list[_Daemon] = field(default_factory=list)

    # ------------------------------------------------------------------ start
    @property
    def master(self) -> _Daemon:
        return self._daemons[0]

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master.port}"

    def env(self) -> dict[str, str]:
        """The environment of the cluster's JVMs (and what a driver of it should run with)."""
        env = dict(os.environ)
        pythonpath = [str(SRC)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.isabs(p)]
        assert self.root is not None
        env.update({
            "SPARK_HOME": str(pyspark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_CONF_DIR": str(self.root / "conf"),  # empty: no user spark-defaults.conf
            "SPARK_LOCAL_DIRS": str(self.root / "local"),
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            # the master's REST submission server would take the fixed port 6066: off
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            # the master and workers only schedule: start them fast (C1 only); executors are untouched
            "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join(pythonpath),  # absolute: executors run in their work dirs
            CLUSTER_MARK: self.mark,
        })
        return env

    def _launch(self, name: str, cls: str, *args: str, port: int, webui_port: int) -> _Daemon:
        assert self.root is not None
        log = self.root / "logs" / f"{name}.log"
        cmd = [str(pyspark_home() / "bin" / "spark-class"), cls, "--host", "127.0.0.1", "--port", str(port),
               "--webui-port", str(webui_port), *args]
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, env=self.env(), cwd=self.root, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        daemon = _Daemon(name, proc, log, port, webui_port)
        self._daemons.append(daemon)
        return daemon

    def start(self) -> "SparkCluster":
        began = time.monotonic()
        self.root = Path(tempfile.mkdtemp(prefix=f"quafka-spark-{self.mark}-"))
        for sub in ("conf", "local", "logs"):
            (self.root / sub).mkdir()
        try:
            master = self._launch("master", "org.apache.spark.deploy.master.Master", port=free_port(),
                                  webui_port=free_port())
            # a worker that finds no master retries only after seconds (Worker's registration backoff)
            wait_until(lambda: self._up(master), self.start_timeout_s, interval_s=0.05,
                       message=f"the master's RPC port {master.port}")
            for i in range(self.workers):
                work = self.root / f"worker-{i}"
                work.mkdir()
                self._launch(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--cores", str(self.worker_cores),
                             "--memory", WORKER_MEMORY, "--work-dir", str(work), self.master_url,
                             port=free_port(), webui_port=free_port())
            wait_until(self._all_alive, self.start_timeout_s, interval_s=0.2,
                       message=f"{self.workers} ALIVE workers on {self.master_url}")
        except BaseException:
            self.stop(check=False)
            raise
        self.started_s = time.monotonic() - began
        return self

    def state(self) -> dict:
        """The master's /json document (workers, activeapps, completedapps, ...)."""
        url = f"http://127.0.0.1:{self.master.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=2) as reply:
            return json.load(reply)

    def _up(self, daemon: _Daemon) -> bool:
        if daemon.proc.poll() is not None:
            raise AssertionError(f"spark {daemon.name} exited with {daemon.proc.returncode}:\n{self.logs(daemon)}")
        return port_open(daemon.port)

    def _all_alive(self) -> bool:
        for d in self._daemons:
            if d.proc.poll() is not None:
                raise AssertionError(f"spark {d.name} exited with {d.proc.returncode}:\n{self.logs(d)}")
        try:
            workers = self.state()["workers"]
        except OSError:  # the web UI is not up yet
            return False
        return sum(w["state"] == "ALIVE" for w in workers) == self.workers

    def logs(self, daemon: _Daemon | None = None, tail: int = 3000) -> str:
        chosen = [daemon] if daemon else self._daemons
        return "\n".join(f"--- {d.name}\n{d.log.read_text(errors='replace')[-tail:]}" for d in chosen if d.log.exists())

    # ------------------------------------------------------------------ processes
    def executors(self, app_id: str | None = None) -> list[int]:
        """Pids of the live CoarseGrainedExecutorBackend JVMs of this cluster (of `app_id` if given)."""
        return [p.pid for p in self.leftovers()
                if "CoarseGrainedExecutorBackend" in p.cmdline and (app_id is None or f"--app-id {app_id}" in p.cmdline)]

    def app_processes(self, app_id: str) -> list:
        """The live processes of application `app_id` on this cluster: its executor JVMs (named by
        --app-id) and whatever runs in their work dirs (<worker dir>/<app id>/<executor id>: their
        pyspark.daemon and Python workers)."""
        return [p for p in self.leftovers()
                if f"--app-id {app_id}" in p.cmdline or f"/{app_id}/" in _cwd(p.pid) + "/"]

    def leftovers(self) -> list:
        """The live processes of this cluster: by its mark in their environment, its directory in
        their command line or working directory, or one of its workers' ports in their command line."""
        me = os.getpid()
        # an executor's command line names its worker (--worker-url spark://Worker@127.0.0.1:<port>);
        # not the master's port: a driver's JVM names that, and a driver is not the cluster's
        needles = [str(self.root)] + [f"Worker@127.0.0.1:{d.port}" for d in self._daemons[1:]] if self.root else []
        found = []
        for p in processes():
            if p.pid == me or p.state == "Z":
                continue
            if _has_mark(p.pid, self.mark) or any(n in p.cmdline for n in needles) or _cwd_under(p.pid, self.root):
                found.append(p)
        return found

    # ------------------------------------------------------------------ stop
    def stop(self, check: bool = True, timeout_s: float = 30.0) -> None:
        """SIGKILL every JVM's process group (workers first, so their executors go with them), then
        wait up to `timeout_s` for every process of the cluster to be gone; with `check`, fail
        naming what is left (after SIGKILLing it)."""
        for d in reversed(self._daemons):
            try:
                os.killpg(d.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for d in self._daemons:
            d.proc.wait(timeout_s)
        left = []
        if self.root is not None:
            deadline = time.monotonic() + timeout_s
            left = self.leftovers()
            while left and time.monotonic() < deadline:
                time.sleep(0.1)
                left = self.leftovers()
            for p in left:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self._daemons.clear()
        if self.root is not None and not left:
            shutil.rmtree(self.root, ignore_errors=True)
        if check and left:
            listing = "\n".join(f"  pid {p.pid} (parent {p.ppid}): {p.cmdline[:300]}" for p in left)
            raise AssertionError(f"{len(left)} process(es) of the Spark cluster in {self.root} outlived its "
                                 f"stop by {timeout_s:.0f} s (now killed):\n{listing}")

    def __enter__(self) -> "SparkCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop(check=exc[0] is None)


def _has_mark(pid: int, mark: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{CLUSTER_MARK}={mark}".encode() in f.read().split(b"\0")
    except OSError:  # gone, or another user's
        return False


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:  # gone, or another user's
        return ""


def _cwd_under(pid: int, root: Path | None) -> bool:
    return root is not None and _cwd(pid).startswith(str(root))
