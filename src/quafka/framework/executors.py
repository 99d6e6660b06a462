"""Where a job runs when the route says ``executor="process"``: a process pool per worker process,
for CPU-bound jobs. The job's consumer class is imported by name in the pool's process (so it must
be defined at a module's top level), one instance per class and process, ``initialized()`` once.
The verdicts the consumer settled there come back with the outcome; its locks are renewed by the
parent's renewer meanwhile (``renew()`` inside a pool process has no consumer to ask, and returns
False). Messages and exceptions cross by pickle; an exception that does not pickle comes back as a
RuntimeError with its text."""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import pickle
import signal
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from .consumers import bind, call

__all__ = ["ProcessJobs"]

_instances: dict[tuple[str, str, str], Any] = {}
log = logging.getLogger("quafka.framework")


def _ignore_sigint() -> None:
    """Pool processes leave Ctrl-C to the worker process (which stops gracefully); a terminal's
    SIGINT reaches the whole process group."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _consumer_class(module: str, qualname: str) -> type:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def run_job(module: str, qualname: str, group_type: str, max_backoff_ms: int, method: str, arg: Any):
    """In a pool process: (settled verdicts, exception or None) of one job."""
    key = (module, qualname, group_type)
    instance = _instances.get(key)
    if instance is None:
        instance = bind(_consumer_class(module, qualname), group_type)()
        instance._max_backoff_ms = max_backoff_ms
        instance.initialized()
        _instances[key] = instance
    try:
        call(instance, method, arg, None)
    except Exception as exc:  # handed to the parent's error policy
        try:
            pickle.dumps(exc)
        except Exception:  # noqa: BLE001 - an exception that does not cross processes
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        return instance._take_settled(), exc
    return instance._take_settled(), None


class ProcessJobs:
    """One process pool shared by the process-executor routes of a worker process (created on first use)."""

    def __init__(self, max_workers: int) -> None:
        self._max_workers = max(max_workers, 1)
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def run(self, route, method: str, arg: Any) -> tuple[dict, BaseException | None]:
        """(settled verdicts, exception or None) of one job in the pool. A pool broken by a
        process that died (killed, out of memory) is replaced and the job tried once more there:
        the job did not fail, its process did."""
        cls = route.consumer
        for attempt in (1, 2):
            pool = self._get_pool()
            try:
                return pool.submit(run_job, cls.__module__, cls.__qualname__, route.group_type, route.max_backoff_ms(),
                                   method, arg).result()
            except BrokenProcessPool:
                log.warning("route %s: a process of the pool died; starting a new pool", route.name)
                with self._lock:
                    if self._pool is pool:
                        self._pool = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _get_pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(self._max_workers, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_ignore_sigint)
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
