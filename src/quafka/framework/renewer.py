"""The process's lock renewer: one thread that watches every running job (and every record a
pause holds) of the share-group routes, and renews a job's records (RENEW, KIP-1222) once half of
the lock has passed since they were acquired or last renewed — until the job ends, or the route's
``max_renew_ms`` is reached, or a renewal fails (the broker gave the record to another consumer).
When it first renews a running job it also asks the worker to release the messages of the job's
batch that have not started (back-pressure: they would wait too long behind it).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

__all__ = ["Renewer"]

log = logging.getLogger("quafka.framework")
MIN_TICK_S = 0.05


class Renewer(threading.Thread):
    def __init__(self, stopping: threading.Event) -> None:
        super().__init__(name="quafka-renewer", daemon=True)
        self._jobs: dict[int, Any] = {}  # id(job) → job
        self._by_worker: dict[int, Any] = {}  # id(worker) → its running job
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = stopping
        self._given_up: set[int] = set()

    def add(self, job) -> None:
        with self._lock:
            self._jobs[id(job)] = job
            if not job.held:
                self._by_worker[id(job.worker)] = job
        self._wake.set()  # a new job may be due before the current wait ends

    def remove(self, job) -> None:
        with self._lock:
            self._jobs.pop(id(job), None)
            if self._by_worker.get(id(job.worker)) is job:
                del self._by_worker[id(job.worker)]
            self._given_up.discard(id(job))

    def job_of(self, worker):
        with self._lock:
            return self._by_worker.get(id(worker))

    def close(self) -> None:
        self._wake.set()

    def run(self) -> None:
        while not (self._stopping.is_set() and not self._jobs):
            tick = self.tick(time.monotonic())
            self._wake.wait(tick)
            self._wake.clear()

    def tick(self, now: float) -> float:
        """Renew what is due; returns the seconds until the next check."""
        with self._lock:
            jobs = [j for j in self._jobs.values() if id(j) not in self._given_up]
        next_s = 1.0
        for job in jobs:
            worker = job.worker
            half_s = worker.lock_ms / 2000
            due = job.lock_from + half_s
            if now < due:
                next_s = min(next_s, due - now)
                continue
            if not worker.route.settings["renew"]:
                continue
            limit_ms = worker.route.settings["max_renew_ms"]
            if limit_ms and (now - job.started) * 1000 >= limit_ms:
                log.warning("route %s: job on %s ran past max_renew_ms %d; its lock is no longer renewed",
                            worker.route.name, [m.coordinates for m in job.messages], limit_ms)
                self._given_up.add(id(job))
                continue
            if not job.held:
                released = worker.release_waiting()
                if released:
                    log.info("route %s: a long job; released %d waiting messages to other workers",
                             worker.route.name, released)
            try:
                ok = worker.renew(job.messages, job.records)
            except Exception as exc:  # noqa: BLE001 - a renewal that cannot be sent is a failed one
                log.warning("route %s: renewal failed: %s", worker.route.name, exc)
                ok = False
            if ok:
                job.lock_from = time.monotonic()
                next_s = min(next_s, half_s)
            else:
                self._given_up.add(id(job))
        return max(next_s, MIN_TICK_S)
