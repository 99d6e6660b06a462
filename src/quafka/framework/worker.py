"""Running an app: one process runs every included route's workers (threads), the lock renewer and
the dead-letter sink; ``run_processes`` runs several such processes and passes signals on.

Order of things: validate the routes (nothing connects before they are all right), set up the
dead letters and the share groups' delivery controls (connects), start the workers, log progress
every ``log_interval_s``. On SIGTERM or SIGINT: stop fetching, let running jobs finish until
``shutdown_timeout_s``, acknowledge what finished and release what did not start, leave the
groups, write what the app enqueued without waiting (``enqueue(..., wait=False)``; a job that
cannot be written is logged and makes the exit status 1). A second signal, or the deadline,
forces: each consumer is closed at once (its unacknowledged records are released by the broker
when the share session ends) and the process exits with status 1.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from .dead_letters import DeadLetters
from .delivery_controls import DeliveryControls
from .enqueue import EnqueueError
from .executors import ProcessJobs
from .renewer import Renewer
from .routing import App, Route

__all__ = ["Runtime", "Worker", "run_processes"]

log = logging.getLogger("quafka.framework")
FORCED_EXIT = 1


class Runtime:
    """What the workers of one process share."""

    def __init__(self, app: App, process_workers: int = 0) -> None:
        self.app = app
        self.kafka = dict(app.kafka)
        self.events = app.events
        self.stopping = threading.Event()
        self.failed = threading.Event()
        self.renewer = Renewer(self.stopping)
        self.dead_letters = DeadLetters(app.kafka, app.events)
        self.delivery_controls = DeliveryControls(app.kafka)  # share groups' redelivery backoff, delayed delivery
        self.process_jobs = ProcessJobs(process_workers)  # the process executor's pool, started on first use

    def worker_failed(self, worker: Any) -> None:
        self.failed.set()
        self.stopping.set()


class Worker:
    """The routes of ``app`` (those matching ``include_routes``) in this process."""

    def __init__(self, app: App, *, include_routes: Iterable[str] | None = None, concurrency: int | None = None,
                 shutdown_timeout_s: float = 30.0, log_interval_s: float = 10.0, metrics_port: int | None = None,
                 metrics_host: str = "127.0.0.1", handle_signals: bool = True) -> None:
        self.app = app
        self.routes: list[Route] = app.routes(include_routes)  # validates before anything connects
        if concurrency is not None:
            if concurrency < 1:
                raise ValueError(f"--concurrency must be >= 1, got {concurrency}")
            self.routes = [Route(r.group_type, r.group, r.topic, r.consumer, {**r.settings, "concurrency": concurrency})
                           for r in self.routes]
        self.shutdown_timeout_s = shutdown_timeout_s
        self.log_interval_s = log_interval_s
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.handle_signals = handle_signals
        self.runtime = Runtime(app, sum(r.settings["concurrency"] for r in self.routes if r.executor == "process"))
        self.workers: list[Any] = []
        self._signals = 0
        self._forced = threading.Event()
        self._metrics = None

    # ------------------------------------------------------------------ control

    def stop(self) -> None:
        """Begin a graceful stop (any thread)."""
        self.runtime.stopping.set()
        for worker in self.workers:
            worker.stop()

    def force(self) -> None:
        self._forced.set()
        self.stop()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self._signals += 1
        if self._signals == 1:
            log.info("signal %d: stopping (running jobs may finish within %.0f s; a second signal forces)",
                     signum, self.shutdown_timeout_s)
            self.stop()
        else:
            log.warning("signal %d again: forcing the stop", signum)
            self.force()

    # ------------------------------------------------------------------ run

    def start(self) -> None:
        """Connect and start the workers (returns at once; ``wait`` ends the run)."""
        from .share_worker import ShareWorker

        runtime = self.runtime
        modes = runtime.dead_letters.prepare(self.routes)
        for name, mode in modes.items():
            log.info("route %s: dead letters written by the %s", name, "broker" if mode == "broker" else "worker")
        runtime.delivery_controls.prepare(self.routes)  # before the workers: each asks who waits out its backoffs
        if self.metrics_port is not None:
            from .metrics import MetricsExporter

            self._metrics = MetricsExporter(self.app.events, self.routes, self._gauges)
            self._metrics.serve(self.metrics_port, self.metrics_host)
            log.info("metrics on http://%s:%d/metrics", self.metrics_host, self._metrics.port)
        runtime.renewer.start()
        for route in self.routes:
            if route.group_type == "share":
                cls = ShareWorker
            else:
                from .consumer_group_worker import ConsumerGroupWorker
                cls = ConsumerGroupWorker
            for index in range(route.settings["concurrency"]):
                self.workers.append(cls(route, runtime, index))
        for worker in self.workers:
            if worker.route.group_type == "share":
                runtime.renewer.register(worker)
            worker.start()
        self.app.events.publish("worker.started", route=None, routes=[r.name for r in self.routes])
        log.info("worker started: %s", ", ".join(f"{r.name} ×{r.settings['concurrency']}" for r in self.routes))

    def run(self) -> int:
        """Start, wait for a signal (or ``stop()``), stop; the exit status."""
        previous = {}
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            self.start()
            return self.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def wait(self) -> int:
        runtime = self.runtime
        last_log = time.monotonic()
        last_done = {r.name: 0 for r in self.routes}
        while not runtime.stopping.wait(min(self.log_interval_s, 0.5)):
            if time.monotonic() - last_log >= self.log_interval_s:
                last_done = self._log_progress(last_done, time.monotonic() - last_log)
                last_log = time.monotonic()
            if any(not w.is_alive() for w in self.workers):
                runtime.stopping.set()
        return self._shutdown()

    def _shutdown(self) -> int:
        runtime = self.runtime
        self.app.events.publish("worker.stopping", route=None, routes=[r.name for r in self.routes])
        for worker in self.workers:
            worker.stop()
        deadline = time.monotonic() + self.shutdown_timeout_s
        for worker in self.workers:
            while worker.is_alive() and not self._forced.is_set():
                worker.join(min(0.1, max(deadline - time.monotonic(), 0)))
                if time.monotonic() >= deadline:
                    break
        late = [w for w in self.workers if w.is_alive()]
        if late:
            log.warning("%d workers still running a job at the %s; closing their consumers (the broker "
                        "releases their records)", len(late), "second signal" if self._forced.is_set() else "deadline")
            for worker in late:
                worker.force_close()
        runtime.renewer.close()
        runtime.dead_letters.close()
        try:
            self.app.flush(timeout_s=10)  # jobs the consumers enqueued with wait=False
        except EnqueueError as exc:
            log.error("worker stopping: %s", exc)
            runtime.failed.set()
        if not late:
            runtime.process_jobs.close()
        if self._metrics is not None:
            self._metrics.close()
        self.app.events.publish("worker.stopped", route=None, routes=[r.name for r in self.routes])
        status = FORCED_EXIT if late or runtime.failed.is_set() else 0
        log.info("worker stopped (status %d)", status)
        return status

    # ------------------------------------------------------------------ progress

    def _gauges(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for worker in self.workers:
            stats = out.setdefault(worker.route.name, {"in_flight": 0, "workers": 0})
            stats["in_flight"] += worker.in_flight
            stats["workers"] += worker.is_alive()
        return out

    def stats(self) -> dict[str, dict[str, int]]:
        """Per route: jobs done and failed, dead letters, renewals, messages in flight."""
        out: dict[str, dict[str, int]] = {r.name: {"done": 0, "failed": 0, "dead_lettered": 0, "renewed": 0,
                                                    "in_flight": 0} for r in self.routes}
        for worker in self.workers:
            stats = out[worker.route.name]
            for key in stats:
                stats[key] += getattr(worker, key)
        return out

    def _log_progress(self, last_done: dict[str, int], elapsed_s: float) -> dict[str, int]:
        stats = self.stats()
        for name, s in stats.items():
            rate = (s["done"] + s["failed"] - last_done.get(name, 0)) / max(elapsed_s, 1e-9)
            log.info("route %s: %d jobs done (%.0f/s), %d failed, %d dead-lettered, %d running, %d renewals",
                     name, s["done"], rate, s["failed"], s["dead_lettered"], s["in_flight"], s["renewed"])
        return {name: s["done"] + s["failed"] for name, s in stats.items()}


def run_processes(argv: Sequence[str], processes: int, *, env: dict[str, str] | None = None) -> int:
    """Run ``processes`` worker processes (``python -m quafka.cli.main`` + ``argv``, one process each)
    and pass SIGTERM/SIGINT on to them; a second signal is passed on too (they force). The exit
    status is the highest of theirs."""
    children = []
    for index in range(processes):
        child_env = {**os.environ, **(env or {}), "QUAFKA_WORKER_INDEX": str(index)}
        # a session of its own: a terminal's Ctrl-C (or a service manager's signal to the group)
        # reaches this process only, which passes one SIGTERM on per signal it gets
        children.append(subprocess.Popen([sys.executable, "-m", "quafka.cli.main", *argv], env=child_env,
                                         start_new_session=True))

    def forward(signum: int, _frame: Any) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        statuses = [child.wait() for child in children]
        return max(status if status >= 0 else 128 - status for status in statuses)  # -N: killed by signal N
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
