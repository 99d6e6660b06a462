"""Where a job runs when the route says ``executor="process"``: a process pool per worker process,
for CPU-bound jobs. The job's consumer class is imported by name in the pool's process (so it must
be defined at a module's top level), one instance per class and process, ``initialized()`` once.
The verdicts the consumer settled there come back with the outcome; its locks are renewed by the
parent's renewer meanwhile (``renew()`` inside a pool process has no consumer to ask, and returns
False). Messages and exceptions cross by pickle; an exception that does not pickle comes back as a
RuntimeError with its text.

Nothing of the pool outlives its worker process: a graceful stop shuts the pool down once its jobs
are done; a forced stop (a second signal, the shutdown deadline) terminates its processes, whose
jobs may never return (``terminate``), and so does the supervisor watchdog before it ends a stop
that hangs; and each pool process watches its parent's pid, ending itself when the worker process
is gone without either (``kill -9``): pool processes read their jobs from a queue whose ends they
hold themselves, so they would never see end of file."""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import multiprocessing.connection
import pickle
import os
import signal
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from .consumers import bind, call
from .errors import describe

__all__ = ["ProcessJobs"]

_instances: dict[tuple[str, str, str], Any] = {}
log = logging.getLogger("quafka.framework")
PARENT_CHECK_S = 0.5  # how often a pool process looks for its worker process
TERMINATE_WAIT_S = 2.0  # after SIGTERM, before a pool process that has not ended gets SIGKILL


def _init_pool_process(parent: int) -> None:
    """Pool processes leave Ctrl-C to the worker process (which stops gracefully; a terminal's
    SIGINT reaches the whole process group), and end when their worker process is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_end_with_parent, args=(parent,), name="quafka-pool-parent-watch", daemon=True).start()


def _end_with_parent(parent: int) -> None:
    tick = threading.Event()
    while os.getppid() == parent:
        tick.wait(PARENT_CHECK_S)
    log.warning("pool process %d: worker process %d is gone; exiting", os.getpid(), parent)
    os._exit(1)


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
    except Exception as exc:  # handed to the parent's error policy, with its traceback as text
        info = describe(exc)  # (a traceback does not pickle; errors.describe reads this attribute)
        try:
            exc.__quafka_traceback__ = info.traceback
            pickle.dumps(exc)
        except Exception:  # noqa: BLE001 - an exception that does not cross processes: its class and text do
            exc = RuntimeError(info.message)
            exc.__quafka_traceback__, exc.__quafka_class__ = info.traceback, info.error_class
        return instance._take_settled(), exc
    return instance._take_settled(), None


class ProcessJobs:
    """One process pool shared by the process-executor routes of a worker process (created on first use)."""

    def __init__(self, max_workers: int) -> None:
        self._max_workers = max(max_workers, 1)
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._terminated = False  # after terminate(): no new pool

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
                if self._terminated:
                    raise
                log.warning("route %s: a process of the pool died; starting a new pool", route.name)
                with self._lock:
                    if self._pool is pool:
                        self._pool = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _get_pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._terminated:
                raise RuntimeError("the process pool was terminated by a forced stop")
            if self._pool is None:
                self._pool = ProcessPoolExecutor(self._max_workers, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_init_pool_process, initargs=(os.getpid(),))
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def terminate(self) -> None:
        """A forced stop: end the pool's processes now (SIGTERM, then SIGKILL after
        ``TERMINATE_WAIT_S``), whatever their jobs are doing; no pool is started after it."""
        with self._lock:
            pool, self._pool = self._pool, None
            self._terminated = True
        if pool is None:
            return
        # ProcessPoolExecutor has no public way to end running jobs: its processes are in _processes
        processes = [p for p in dict(getattr(pool, "_processes", None) or {}).values() if p.is_alive()]
        for process in processes:
            process.terminate()
        for process in processes:
            if not _ended(process, TERMINATE_WAIT_S):
                process.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        left = [p.pid for p in processes if not _ended(p, TERMINATE_WAIT_S)]
        if left:
            log.error("process pool: processes %s did not end after SIGKILL", left)
        elif processes:
            log.warning("process pool: %d processes terminated (forced stop)", len(processes))


def _ended(process: multiprocessing.process.BaseProcess, timeout_s: float) -> bool:
    """Whether ``process`` has exited, waiting up to ``timeout_s``. Its sentinel (a pipe the child holds)
    becomes readable when the child exits, whoever reaps it: ``is_alive()`` is not used because the
    pool's management thread may reap the child at the same moment, and multiprocessing's ``poll`` then
    sees ECHILD and answers "alive" (the CI flake of stop 37)."""
    try:
        sentinel = process.sentinel
    except ValueError:  # the process object was closed, which needs the process to have ended
        return True
    return bool(multiprocessing.connection.wait([sentinel], timeout_s))
