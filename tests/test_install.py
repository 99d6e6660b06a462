"""`make run` installs the broker's dependencies only (issue 15, acceptance 4): pyspark and the test
extras are not among `[project].dependencies`, and a broker whose interpreter cannot import any of
them starts, serves a topic and a share group, and stops cleanly."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

from confluent_kafka import Producer

from quafka.client import AcknowledgeType, Admin, ShareConsumer
from support import free_port, port_open, wait_until

REPO = Path(__file__).resolve().parents[1]
# top-level modules of the [test], [spark], [dev] and [bench] extras (pyspark[sql] brings pyarrow,
# pyspark[connect] grpc)
EXTRA_MODULES = ["pyspark", "pandas", "pyarrow", "grpc", "pytest", "xdist", "hypothesis", "importlinter",
                 "prometheus_client", "kafka", "aiokafka", "snappy", "lz4", "zstandard", "build", "redis",
                 "hiredis", "httpx", "selenium"]

_WITHOUT_EXTRAS = """
import importlib.abc, runpy, sys
BLOCKED = set(sys.argv[1].split(","))
class NoExtras(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: not installed by make run)")
        return None
sys.meta_path.insert(0, NoExtras())
sys.argv = ["quafka"] + sys.argv[2:]
runpy.run_module("quafka", run_name="__main__", alter_sys=True)
"""


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower()


def test_make_run_installs_no_extra():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = {_requirement_name(r) for r in project["dependencies"]}
    extras = {_requirement_name(r) for group in project["optional-dependencies"].values() for r in group}
    assert base and not base & extras, base & extras
    assert "pyspark" in extras and "pyspark" not in base
    makefile = (REPO / "Makefile").read_text()
    run_stamp = makefile.split("$(RUN_STAMP): pyproject.toml", 1)[1].split("\n\n", 1)[0]
    assert "pip install --quiet -e .\n" in run_stamp + "\n" and "[" not in run_stamp, run_stamp


def test_the_broker_serves_without_pyspark_or_the_test_extras(tmp_path):
    """...and with the web dashboard on, as `make run` starts it (its libraries are core
    dependencies): it serves the overview, and SIGTERM still stops the broker with status 0."""
    port, dashboard_port = free_port(), free_port()
    log_path = tmp_path / "broker.log"
    with open(log_path, "wb") as log:
        broker = subprocess.Popen(
            [sys.executable, "-c", _WITHOUT_EXTRAS, ",".join(EXTRA_MODULES), "broker",
             "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={tmp_path / 'data'}",
             "--override", f"quafka.dashboard.listener=http://127.0.0.1:{dashboard_port}"],
            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: broker.poll() is not None or port_open(port), 20, message="the broker to listen")
        assert broker.poll() is None, log_path.read_text()
        bootstrap = f"127.0.0.1:{port}"
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            admin.create_topics({"jobs": (1, 1)})
            admin.alter_configs("group", "workers", set={"share.auto.offset.reset": "earliest"})
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(3):
            producer.produce("jobs", f"job-{i}".encode())
        assert producer.flush(10) == 0
        received = []
        with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "workers",
                            "share.acknowledgement.mode": "explicit"}) as consumer:
            consumer.subscribe(["jobs"])
            deadline_polls = 20
            while len(received) < 3 and deadline_polls:
                deadline_polls -= 1
                for record in consumer.poll(0.5):
                    received.append(record.value)
                    consumer.acknowledge(record, AcknowledgeType.ACCEPT)
            assert all(error is None for error in consumer.commit_sync().values())
        assert sorted(received) == [b"job-0", b"job-1", b"job-2"]
        with urllib.request.urlopen(f"http://127.0.0.1:{dashboard_port}/", timeout=10) as page:
            assert page.status == 200 and 'data-topic="jobs"' in page.read().decode()
    finally:
        broker.terminate()
        broker.wait(20)
    log_text = log_path.read_text()
    assert broker.returncode == 0, log_text
    assert "blocked: not installed by make run" not in log_text
