"""``spark.default.parallelism`` as seen from a Python data-source process.

The streaming source's ``numPartitions`` option defaults to ``spark.default.parallelism``, but the
processes that run a Python data source (the planner and the query's runner, spark-notes §2) have
no SparkContext, and Spark passes them no configuration. What they do have is the driver JVM that
started them — the runner is its child — and that JVM's launch configuration: PySpark starts the
JVM as ``spark-submit`` with every builder setting as ``--conf key=value``, ``spark-submit`` passes
the user's flags through, and ``$SPARK_CONF_DIR/spark-defaults.conf`` (or ``--properties-file``)
holds the rest. From those, :func:`default_parallelism` applies Spark's rule:

- ``spark.default.parallelism`` when set;
- local masters: the number of cores — ``local`` 1, ``local[N]`` / ``local[N, F]`` N,
  ``local[*]`` the machine's CPU count, ``local-cluster[N, C, M]`` max(N × C, 2);
- cluster masters: the executors' total cores, max(…, 2), when the launch configuration names them
  (``spark.executor.instances`` × ``spark.executor.cores``, or ``spark.cores.max``); otherwise
  unknown (Spark counts the cores of executors as they register, which no launch setting shows).

A setting made after the JVM started (``spark-submit app.py`` whose code then sets
``spark.default.parallelism`` on the builder) is not visible here; ``numPartitions`` set on the
query always wins. :func:`runner_default_parallelism` reads the parent process's command line
(``/proc`` on Linux, ``ps`` elsewhere) and returns None when the parent is not a Spark JVM;
:func:`runner_master` reads ``spark.master`` from the same configuration (the streaming source's
``executorFetch=auto`` asks whether the executors run in the driver's JVM).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence

from quafka.protocol.properties import parse_properties

__all__ = ["default_parallelism", "is_local_master", "parse_properties", "runner_default_parallelism", "runner_master",
           "submit_conf"]

_SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"
#: spark-submit flags that stand for a configuration key
_FLAG_KEYS = {
    "--master": "spark.master",
    "--num-executors": "spark.executor.instances",
    "--executor-cores": "spark.executor.cores",
    "--total-executor-cores": "spark.cores.max",
    "--properties-file": "--properties-file",
}
#: spark-submit's options that take no value; every other option takes one
_SWITCHES = {"--supervise", "--verbose", "-v", "--help", "-h", "--version", "--usage-error"}
_LOCAL = re.compile(r"^local(?:\[\s*(\*|\d+)\s*(?:,\s*\d+\s*)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]$")


def submit_conf(argv: Sequence[str], defaults: Mapping[str, str] | None = None,
                read_file=None) -> dict[str, str] | None:
    """The Spark configuration a ``java … SparkSubmit [options] primary`` command line sets, over
    ``defaults`` (spark-defaults.conf); None when ``argv`` is not a SparkSubmit JVM.
    ``read_file(path) -> str | None`` loads a ``--properties-file`` (which replaces the defaults)."""
    try:
        start = list(argv).index(_SUBMIT_CLASS) + 1
    except ValueError:
        return None
    args = list(argv[start:])
    conf: dict[str, str] = {}
    properties_file = None
    i = 0
    while i < len(args):
        arg = args[i]
        key, value = arg, None
        if "=" in arg and arg.startswith("--"):
            key, value = arg.split("=", 1)
        if key in ("--conf", "-c"):
            if value is None:
                i += 1
                value = args[i] if i < len(args) else ""
            name, _, setting = value.partition("=")
            conf[name.strip()] = setting.strip()
        elif key in _FLAG_KEYS:
            if value is None:
                i += 1
                value = args[i] if i < len(args) else ""
            if key == "--properties-file":
                properties_file = value
            else:
                conf[_FLAG_KEYS[key]] = value.strip()
        elif not arg.startswith("-"):
            break  # the primary resource (pyspark-shell, app.py, a jar): its own arguments follow
        elif value is None and key not in _SWITCHES:
            i += 1  # an option of no interest here (--name, --jars, --driver-memory …): skip its value
        i += 1
    base = dict(defaults or {})
    if properties_file is not None and read_file is not None:
        text = read_file(properties_file)
        base = parse_properties(text) if text is not None else base
    base.update(conf)
    return base


def _int(value: str | None) -> int | None:
    try:
        return int(str(value).strip()) if value is not None else None
    except ValueError:
        return None


def default_parallelism(conf: Mapping[str, str], cpu_count: int) -> int | None:
    """Spark's default parallelism for a configuration; None when it depends on executors that
    register at run time."""
    explicit = _int(conf.get("spark.default.parallelism"))
    if explicit is not None and explicit > 0:
        return explicit
    master = str(conf.get("spark.master", "local[*]")).strip()
    local = _LOCAL.match(master)
    if local:
        cores = local.group(1)
        if cores is None:
            return 1
        return max(1, cpu_count) if cores == "*" else max(1, int(cores))
    cluster = _LOCAL_CLUSTER.match(master)
    if cluster:
        return max(int(cluster.group(1)) * int(cluster.group(2)), 2)
    instances = _int(conf.get("spark.executor.instances"))
    cores = _int(conf.get("spark.executor.cores"))
    if instances and cores:
        return max(instances * cores, 2)
    cores_max = _int(conf.get("spark.cores.max"))
    if cores_max:
        return max(cores_max, 2)
    return None


# ------------------------------------------------------------------------------ process access

def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _command_line(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
        return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]
    except OSError:
        pass
    try:  # no /proc (macOS): ps prints the arguments joined by spaces
        out = subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(pid)], capture_output=True,
                             text=True, timeout=5, check=False).stdout.strip()
        return shlex.split(out) if out else None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def _runner_conf() -> Mapping[str, str] | None:
    """The launch configuration of the Spark driver JVM that started this process, or None."""
    argv = _command_line(os.getppid())
    if not argv:
        return None
    conf_dir = os.environ.get("SPARK_CONF_DIR") or os.path.join(os.environ.get("SPARK_HOME", ""), "conf")
    defaults_text = _read_text(os.path.join(conf_dir, "spark-defaults.conf"))
    defaults = parse_properties(defaults_text) if defaults_text else {}
    return submit_conf(argv, defaults, _read_text)


def runner_default_parallelism() -> int | None:
    """spark.default.parallelism of the Spark driver JVM that started this process, or None."""
    conf = _runner_conf()
    if conf is None:
        return None
    return default_parallelism(conf, os.cpu_count() or 1)


def is_local_master(master: str | None) -> bool:
    """Whether ``master`` runs the executors inside the driver JVM (``local``, ``local[N]``,
    ``local[N, F]``, ``local[*]``; not ``local-cluster[...]``, whose executors are processes of their own)."""
    return bool(master) and _LOCAL.match(str(master).strip()) is not None


def runner_master() -> str | None:
    """spark.master of the Spark driver JVM that started this process (``local[2]``,
    ``spark://host:7077``, ``yarn``, ``k8s://...``), or None when its launch configuration does
    not say."""
    conf = _runner_conf()
    if conf is None:
        return None
    master = conf.get("spark.master")
    return str(master).strip() if master else None
