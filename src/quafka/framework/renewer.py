"""The process's lock renewer: one thread that watches every share-group worker's running job (and
the records a pause holds), and renews their records (RENEW, KIP-1222) once half of the lock has
passed since they were acquired or last renewed — until the job ends, or the route's
``max_renew_ms`` is reached, or a renewal fails (the broker gave the record to another consumer).
When it first renews a running job it also asks the worker to release the messages of the job's
batch that have not started (back-pressure: they would wait too long behind it).

Workers register once; a job is seen through the worker's ``job`` and ``held_job`` attributes,
so starting and ending a job costs no lock and no thread switch. A worker whose lock is short
enough that a new job is due before the renewer's next look calls ``wake()``.

The renewals themselves run on a small pool of threads (one per registered worker at most), most
urgent first: a RENEW waits for its broker's answer, and a worker's consumer lock may be held by
that worker's own poll for up to a second, so renewing one job after the other on this thread
would let one slow answer (or one busy worker) expire the locks of every job behind it. A job
whose renewal is still under way is not renewed again until it has answered.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["Renewer"]

log = logging.getLogger("quafka.framework")
MIN_TICK_S = 0.05
MAX_TICK_S = 1.0


class Renewer(threading.Thread):
    def __init__(self, stopping: threading.Event) -> None:
        super().__init__(name="quafka-renewer", daemon=True)
        self._workers: list[Any] = []
        self._wake = threading.Event()
        self._stopping = stopping
        self._closed = False
        self.next_check = 0.0  # monotonic time of the next look
        self._pool: ThreadPoolExecutor | None = None
        self._renewing: set[int] = set()  # id() of the jobs whose renewal is under way (this thread's)
        self._done: list[tuple[Any, bool, float]] = []  # (job, ok, sent at) answered by the pool
        self._done_lock = threading.Lock()

    def register(self, worker: Any) -> None:
        self._workers = [*self._workers, worker]

    def wake(self) -> None:
        self._wake.set()

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def run(self) -> None:
        while not self._closed:
            now = time.monotonic()
            try:
                wait_s = self.tick(now)
            except Exception:  # noqa: BLE001 - a bug here must not end the renewals of every job
                log.exception("lock renewer: a look at the running jobs failed; looking again")
                wait_s = MIN_TICK_S
            self.next_check = now + wait_s
            self._wake.wait(wait_s)
            self._wake.clear()

    def _jobs(self) -> list:
        jobs = []
        for worker in self._workers:
            for job in (worker.job, worker.held_job):
                if job is not None and not job.given_up:
                    jobs.append(job)
        return jobs

    def _take_answers(self) -> None:
        with self._done_lock:
            done, self._done = self._done, []
        for job, ok, sent in done:
            self._renewing.discard(id(job))
            if ok:  # the broker renewed the lock when the RENEW arrived: after it was sent, whenever it answered
                job.lock_from = sent
            else:
                job.given_up = True

    def _renew(self, job: Any) -> None:
        """On a pool thread: one job's renewal; its answer goes back to the renewer's thread."""
        worker = job.worker
        sent = time.monotonic()
        try:
            ok = worker.renew(list(job.messages), list(job.records), job)
        except Exception as exc:  # noqa: BLE001 - a renewal that cannot be sent is a failed one
            log.warning("route %s: renewal failed: %s", worker.route.name, exc)
            ok = False
        with self._done_lock:
            self._done.append((job, ok, sent))
        self._wake.set()

    def tick(self, now: float) -> float:
        """Renew what is due (most urgent first, on the pool); returns the seconds until the next look."""
        self._take_answers()
        next_s = MAX_TICK_S
        jobs = sorted(self._jobs(), key=lambda j: j.lock_from)
        for job in jobs:
            if id(job) in self._renewing:
                continue
            worker = job.worker
            half_s = worker.lock_ms / 2000
            due = job.lock_from + half_s
            if now < due:
                next_s = min(next_s, due - now)
                continue
            settings = worker.route.settings
            if not job.held and not job.released_waiting:
                job.released_waiting = True  # back-pressure, with or without renewals
                released = worker.release_waiting(job)
                if released:
                    log.info("route %s: a long job; released %d waiting messages to other workers",
                             worker.route.name, released)
            if not settings["renew"]:
                job.given_up = True
                continue
            limit_ms = settings["max_renew_ms"]
            if limit_ms and (now - job.started) * 1000 >= limit_ms:
                log.warning("route %s: job on %s ran past max_renew_ms %d; its lock is no longer renewed",
                            worker.route.name, [m.coordinates for m in job.messages], limit_ms)
                job.given_up = True
                continue
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max(len(self._workers), 1), thread_name_prefix="quafka-renew")
            self._renewing.add(id(job))
            self._pool.submit(self._renew, job)
        return max(next_s, MIN_TICK_S)
