"""What Spark's Python workers do once per process (quafka/spark/worker_process.py) and what they
import with quafka.spark (quafka/spark/__init__.py: kio without hypothesis's test strategies)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark

IMPORT_PROBE = """
import json, sys
import quafka.spark.stream  # what a worker unpickling the streaming reader imports
print(json.dumps({"kio": "kio.serial" in sys.modules, "hypothesis": "hypothesis" in sys.modules,
                  "pytest": "pytest" in sys.modules}))
"""

SETTLE_PROBE = """
import gc, json, os, sys, types
from quafka.spark import worker_process
from quafka.spark.worker_process import settle_worker_process
before = gc.get_freeze_count()
settle_worker_process()  # not a pyspark.daemon worker (python -c): nothing frozen
outside = gc.get_freeze_count()
# as in a worker forked by `python -m pyspark.daemon` with SPARK_REUSE_WORKER set
sys.modules["__main__"].__spec__ = types.SimpleNamespace(name="pyspark.daemon")
os.environ["SPARK_REUSE_WORKER"] = "1"
worker_process._settled_pid = None
settle_worker_process()
first = gc.get_freeze_count()
settle_worker_process()  # once per process: nothing more is frozen
again = gc.get_freeze_count()
pid = os.fork()
if pid == 0:  # a forked child (pyspark.daemon forks its workers) settles itself again
    gc.unfreeze()
    settle_worker_process()
    os._exit(0 if gc.get_freeze_count() > 0 else 3)
_, status = os.waitpid(pid, 0)
print(json.dumps({"before": before, "outside": outside, "first": first, "again": again,
                  "child": os.waitstatus_to_exitcode(status)}))
"""


def _probe(code: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_worker_importing_quafka_spark_gets_kio_without_hypothesis_or_pytest():
    # this venv has hypothesis installed; kio would import it (and pytest) to register strategies
    assert _probe(IMPORT_PROBE) == {"kio": True, "hypothesis": False, "pytest": False}


def test_settle_freezes_the_heap_once_per_reused_daemon_worker_and_again_in_a_forked_child():
    answer = _probe(SETTLE_PROBE)
    assert answer["before"] == 0 and answer["outside"] == 0, answer  # not pyspark.daemon's worker
    assert answer["first"] > 10_000, answer  # the imported modules' objects
    assert answer["again"] == answer["first"] and answer["child"] == 0, answer
