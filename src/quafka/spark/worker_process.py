"""What the source does once in each of Spark's Python worker processes that run its tasks.

pyspark's worker daemon (``pyspark/daemon.py``, ``manager``) runs a full ``gc.collect()`` after
every task of a reused worker. A full collection visits every object the garbage collector tracks
— in a worker that has imported pyarrow, numpy, pyspark and quafka, hundreds of thousands — so it
cost tens of milliseconds per task (py-spy of the executors' workers: 46% of their samples in that
line at 100k-record micro-batches). :func:`settle_worker_process` moves everything alive at the
first task's start into the permanent generation (``gc.freeze()``): the imported modules, which
never become garbage. Later collections visit only what tasks create.

Only in a worker forked by that daemon with reuse on (``SPARK_REUSE_WORKER``, Spark's default):
anywhere else — a worker without the daemon, a test or benchmark calling ``read()`` in its own
process — nothing collects after every task, and nothing is frozen."""

from __future__ import annotations

import gc
import os
import sys

__all__ = ["settle_worker_process"]

_settled_pid: int | None = None


def _reused_daemon_worker() -> bool:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return getattr(spec, "name", None) == "pyspark.daemon" and bool(os.environ.get("SPARK_REUSE_WORKER"))


def settle_worker_process() -> None:
    """``gc.freeze()`` once per reused daemon worker process (a forked child settles itself again)."""
    global _settled_pid
    pid = os.getpid()
    if _settled_pid == pid:
        return
    _settled_pid = pid
    if not _reused_daemon_worker():
        return
    gc.collect()  # what is garbage already goes now, not frozen with the rest
    gc.freeze()
