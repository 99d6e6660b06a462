"""Which Python interpreter Spark starts for its Python workers, and making it the driver's.

Spark runs everything Python — the planner and runner of a Python data source (so the lookup of
``pyspark_quafka.DefaultSource`` behind ``format("quafka")``), UDFs, ``foreachBatch`` helpers — in
worker processes that it starts with ``PYSPARK_PYTHON``, or ``python3`` from ``PATH`` when that is
unset. A script run as ``.venv/bin/python app.py`` from a checkout therefore gets workers from
another interpreter, one without quafka, and fails with ``[DATA_SOURCE_NOT_FOUND] ...
quafka.DefaultSource``. PySpark reads the variable when the JVM and the SparkContext start (the
driver JVM inherits the Python driver's environment, and ``SparkContext.pythonExec`` is read
from it), so it has to be set before the first ``SparkSession.builder.getOrCreate()``.

:func:`use_driver_python` does that for local masters, where the workers run on this machine and
``sys.executable`` is the right interpreter; on a cluster the executors need an interpreter with
quafka installed on every node, which only the user can name (docs/spark.md, "Which Python the
workers run").
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import warnings
from collections.abc import Mapping

from .parallelism import parse_properties, submit_conf

__all__ = ["is_local_master", "use_driver_python"]

#: local, local[N], local[*], local[N, F], local[*, F], local-cluster[N, C, M]
_LOCAL = re.compile(r"^local(?:\[\s*(?:\*|\d+)\s*(?:,\s*\d+\s*)?\])?$"
                    r"|^local-cluster\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\]$")
_SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"


def is_local_master(master: str | None) -> bool:
    """True for Spark masters whose Python workers run on this machine (None: Spark's default,
    ``local[*]``)."""
    return master is None or bool(_LOCAL.match(master.strip()))


def _launch_conf(environ: Mapping[str, str]) -> dict[str, str]:
    """What the JVM PySpark is about to launch will be configured with, before the builder's own
    settings: ``spark-defaults.conf`` and ``PYSPARK_SUBMIT_ARGS``."""
    conf_dir = environ.get("SPARK_CONF_DIR") or os.path.join(environ.get("SPARK_HOME", ""), "conf")
    try:
        with open(os.path.join(conf_dir, "spark-defaults.conf"), encoding="utf-8") as f:
            defaults = parse_properties(f.read())
    except OSError:
        defaults = {}
    try:
        args = shlex.split(environ.get("PYSPARK_SUBMIT_ARGS", ""))
    except ValueError:
        args = []
    return submit_conf([_SUBMIT_CLASS, *args], defaults) or defaults


def use_driver_python(master: str | None = None, environ: dict[str, str] | None = None) -> str | None:
    """Make Spark's Python workers run this interpreter (``sys.executable``) when nothing chose one.

    Call it before the first ``SparkSession.builder....getOrCreate()`` of the process, with the
    master the builder sets (if it sets one). When ``PYSPARK_PYTHON`` is unset and the master is
    local (``local``, ``local[N]``, ``local[*]``, ``local[N, F]``, ``local-cluster[...]``, or unset,
    which Spark runs as ``local[*]``), it sets ``PYSPARK_PYTHON`` to ``sys.executable`` in
    ``environ`` (``os.environ``) and returns it. When ``spark.pyspark.python`` is configured where
    the launch reads it (``spark-defaults.conf``, ``PYSPARK_SUBMIT_ARGS``), it sets
    ``PYSPARK_PYTHON`` to that instead, for any master: the driver JVM looks Python data sources up
    with the variable only, so the setting alone leaves that lookup to ``python3`` from ``PATH``.
    Otherwise it changes nothing and returns None.

    Too late once a Spark JVM is running for this process (a SparkContext was created before, or the
    script runs under ``spark-submit``, which started the JVM with its own environment): it then
    changes nothing and warns when the workers' interpreter is left to ``PATH``.
    """
    env = os.environ if environ is None else environ
    if env.get("PYSPARK_PYTHON"):
        return None
    conf = _launch_conf(env)
    configured = conf.get("spark.pyspark.python")
    if master is None:
        master = conf.get("spark.master")
    if not configured and not is_local_master(master):
        return None
    if _jvm_running(env):
        warnings.warn(
            "quafka: PYSPARK_PYTHON is unset and the Spark JVM is already running, so Spark's Python "
            "workers run `python3` from PATH, which may not have quafka installed "
            "([DATA_SOURCE_NOT_FOUND] ... quafka.DefaultSource). Set PYSPARK_PYTHON to "
            f"{sys.executable} before starting Spark (see docs/spark.md).",
            RuntimeWarning, stacklevel=2)
        return None
    # The driver JVM looks Python data sources up with the interpreter of its PYSPARK_PYTHON
    # environment variable, not spark.pyspark.python: pass a configured one on as the variable.
    python = configured or sys.executable
    env["PYSPARK_PYTHON"] = python
    return python


def _jvm_running(environ: Mapping[str, str]) -> bool:
    if "PYSPARK_GATEWAY_PORT" in environ:  # started by spark-submit / the pyspark shell
        return True
    pyspark = sys.modules.get("pyspark")
    if pyspark is None:
        return False
    context = getattr(pyspark, "SparkContext", None)
    return context is not None and getattr(context, "_gateway", None) is not None
