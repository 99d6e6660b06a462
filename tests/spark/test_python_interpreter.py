"""Spark's Python workers run the driver's interpreter on a local master when PYSPARK_PYTHON is unset
(quafka.spark.use_driver_python): examples/job_pipeline.py, run as a checkout user runs it —
``.venv/bin/python examples/job_pipeline.py ...``, nothing activated, PYSPARK_PYTHON unset and a
``python3`` on PATH that is not the venv's — produces its results."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from quafka import EmbeddedBroker
from quafka.client import Admin
from quafka.spark import interpreter
from quafka.spark.interpreter import is_local_master, use_driver_python

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
# The interpreter the venv was made from: it has no quafka (installed in the venv only), as the
# `python3` a checkout user has on PATH (the probe in the test checks it cannot import quafka).
SYSTEM_PYTHON = os.path.join(sys.base_prefix, "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}")


@pytest.mark.parametrize("master", [None, "local", "local[2]", "local[*]", "local[2, 3]",
                                    " local[*] ", "local-cluster[2, 1, 1024]"])
def test_local_masters(master):
    assert is_local_master(master)


@pytest.mark.parametrize("master", ["yarn", "spark://host:7077", "k8s://https://h:443", "local[x]",
                                    "mesos://h:5050"])
def test_cluster_masters(master):
    assert not is_local_master(master)


@pytest.fixture
def no_jvm(monkeypatch, tmp_path):
    """use_driver_python as if no Spark JVM were running yet and no Spark configuration existed."""
    monkeypatch.setattr(interpreter, "_jvm_running", lambda environ: False)
    return {"SPARK_CONF_DIR": str(tmp_path)}


def test_sets_the_driver_interpreter_on_a_local_master(no_jvm):
    for master in (None, "local[2]"):
        env = dict(no_jvm)
        assert use_driver_python(master, env) == sys.executable
        assert env["PYSPARK_PYTHON"] == sys.executable


def test_leaves_a_chosen_interpreter_and_cluster_masters_alone(no_jvm, tmp_path):
    env = {**no_jvm, "PYSPARK_PYTHON": "/opt/py/bin/python"}
    assert use_driver_python(None, env) is None and env["PYSPARK_PYTHON"] == "/opt/py/bin/python"
    for master in ("yarn", "spark://h:7077"):
        env = dict(no_jvm)
        assert use_driver_python(master, env) is None and "PYSPARK_PYTHON" not in env
    env = {**no_jvm, "PYSPARK_SUBMIT_ARGS": "--master yarn pyspark-shell"}
    assert use_driver_python(None, env) is None and "PYSPARK_PYTHON" not in env
    (tmp_path / "spark-defaults.conf").write_text("spark.master  spark://h:7077\n")
    env = dict(no_jvm)
    assert use_driver_python(None, env) is None and "PYSPARK_PYTHON" not in env


def test_passes_a_configured_interpreter_on_as_the_variable(no_jvm):
    for master in (None, "yarn"):
        env = {**no_jvm, "PYSPARK_SUBMIT_ARGS": "--conf spark.pyspark.python=/opt/py pyspark-shell"}
        assert use_driver_python(master, env) == "/opt/py" and env["PYSPARK_PYTHON"] == "/opt/py"


def test_warns_when_the_jvm_already_runs(monkeypatch, tmp_path):
    monkeypatch.setattr(interpreter, "_jvm_running", lambda environ: True)
    env = {"SPARK_CONF_DIR": str(tmp_path)}
    with pytest.warns(RuntimeWarning, match="PYSPARK_PYTHON"):
        assert use_driver_python("local[2]", env) is None
    assert "PYSPARK_PYTHON" not in env


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b.bootstrap_servers


def checkout_user_env(bin_dir: Path, log: Path) -> dict[str, str]:
    """The environment of a user who runs ``.venv/bin/python`` without activating the venv: no
    PYSPARK_PYTHON, and a ``python3`` on PATH (the system's, logging its calls) without quafka."""
    for name in ("python3", "python"):
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {SYSTEM_PYTHON} -s "$@"\n')
        wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_SUBMIT_ARGS",
                        "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "PYTHONPATH",
                        "VIRTUAL_ENV", "SPARK_HOME", "SPARK_CONF_DIR")}
    java = shutil.which("java")
    assert java is not None, "Spark needs java on PATH"
    env["PATH"] = os.pathsep.join([str(bin_dir), os.path.dirname(java), "/usr/bin", "/bin"])
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def test_job_pipeline_runs_without_pyspark_python(broker, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "path-python3.log"
    env = checkout_user_env(bin_dir, log)
    probe = subprocess.run(["python3", "-c", "import quafka"], env=env, capture_output=True, timeout=30)
    assert probe.returncode != 0, "the python3 on PATH must not be able to import quafka"
    log.unlink()

    suffix = uuid.uuid4().hex[:8]
    topic, results_topic, group = f"jobs-{suffix}", f"results-{suffix}", f"workers-{suffix}"
    with Admin({"bootstrap.servers": broker}) as admin:
        admin.create_topics({t: (1, 1) for t in (topic, results_topic)})
        admin.alter_configs("group", group, {"share.auto.offset.reset": "earliest",
                                             "share.assignment.interval.ms": "0"})
    n = 20
    producer = Producer({"bootstrap.servers": broker, "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, key=str(i).encode(), value=json.dumps({"id": i, "numbers": [i, 1]}).encode())
    assert producer.flush(30) == 0
    output = tmp_path / "results.parquet"

    proc = subprocess.run(
        [sys.executable, "examples/job_pipeline.py", "--bootstrap-server", broker, "--topic", topic,
         "--group", group, "--results-topic", results_topic, "--output", str(output),
         "--checkpoint", str(tmp_path / "ckpt"), "--available-now", "--timeout", "60"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)

    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert f"wrote {n} results" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-5000:]
    import pyarrow.parquet as pq

    rows = pq.read_table(str(output)).to_pylist()
    assert sorted(r["id"] for r in rows) == list(range(n))
    assert all(r["error"] is None and r["total"] == float(r["id"] + 1) for r in rows)
    # the workers ran the driver's interpreter: the python3 on PATH was never started
    assert not log.exists() or log.read_text() == "", log.read_text()
