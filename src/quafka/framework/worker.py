"""Running an app: one process runs every included route's workers (threads), the lock renewer and
the dead-letter sink; ``supervisor.run_processes`` runs and supervises several such processes.

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

import faulthandler
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

from . import group_check
from .dead_letters import DeadLetters
from .delivery_controls import DeliveryControls
from .enqueue import EnqueueError
from .errors import Failures
from .executors import ProcessJobs
from .health import HealthMonitor
from .parent_watch import FORCE_GRACE_S, watch_parent
from .renewer import Renewer
from .routing import App, Route
from .supervisor import run_processes  # where it was before the supervisor had a module of its own

__all__ = ["Runtime", "Worker", "run_processes"]

log = logging.getLogger("quafka.framework")
FORCED_EXIT = 1
SIGNAL_CHECK_S = 0.2  # how soon the main thread acts on a signal its handler recorded


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
        self.failures = Failures(app.events)  # failed jobs: logged, kept per route, counted (errors.py)
        self.group_configs: dict[str, dict[str, str | None]] = {}  # route name -> its group's configs, read at start
        self._host = socket.gethostname()

    def client_id(self, route: Route, index: int) -> str:
        """A worker's default client.id: its group, host, process and index, so that a group's
        description tells the workers apart (as Sidekiq's and Karafka's process identities do)."""
        return f"quafka-worker-{route.group}-{self._host}-{os.getpid()}-{index}"

    def worker_failed(self, worker: Any) -> None:
        self.failed.set()
        self.stopping.set()


class Worker:
    """The routes of ``app`` (those matching ``include_routes``) in this process."""

    def __init__(self, app: App, *, include_routes: Iterable[str] | None = None, concurrency: int | None = None,
                 shutdown_timeout_s: float = 30.0, log_interval_s: float = 10.0, metrics_port: int | None = None,
                 metrics_host: str = "127.0.0.1", handle_signals: bool = True, strict: bool = False,
                 apply_group_configs: bool = False) -> None:
        """``strict``: refuse to start when a route's topic does not exist (MissingTopicError);
        ``apply_group_configs``: set the groups' configs the routes declare (``group_configs``) at
        start, logging the diff first (group_check.py)."""
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
        self._signals = 0  # SIGTERM/SIGINT received: counted by the handler only
        self._signals_acted = 0  # of those, acted on by the main thread (_act_on_signals)
        self._last_signum = 0
        self._stack_dumps = 0  # SIGTTIN received (the handler counts) ...
        self._stack_dumps_done = 0  # ... and stack dumps written by the main thread
        self._forced = threading.Event()
        self._metrics = None
        self.strict, self.apply_group_configs = strict, apply_group_configs
        self._monitor = HealthMonitor(app.kafka, self.routes, self.workers, lambda: self.runtime.group_configs)

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
        # Only recorded: the handler runs in the main thread between two bytecodes, perhaps inside
        # wait()'s Event.wait while it holds the Event's lock, so calling stop() (Event.set) here
        # could deadlock, and so could logging (its handlers' locks). The main thread's loops
        # (wait, _shutdown) look at the count every SIGNAL_CHECK_S and act.
        if signum == getattr(signal, "SIGTTIN", None):
            self._stack_dumps += 1
            return
        self._last_signum = signum
        self._signals += 1

    def _act_on_signals(self) -> None:
        """In the main thread: the first signal stops, any further one forces; SIGTTIN dumps every
        thread's stack to stderr (here, holding the GIL: faulthandler's own signal handler reads
        the other threads' frames while they run, and can crash the process)."""
        if self._stack_dumps_done < self._stack_dumps:
            self._stack_dumps_done = self._stack_dumps
            try:
                faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            except (OSError, ValueError, AttributeError) as exc:  # a stderr with no file descriptor
                log.warning("SIGTTIN: cannot dump the threads' stacks: %s", exc)
        while self._signals_acted < self._signals:
            self._signals_acted += 1
            if self._signals_acted == 1:
                log.info("signal %d: stopping (running jobs may finish within %.0f s; a second signal forces)",
                         self._last_signum, self.shutdown_timeout_s)
                self.stop()
            else:
                log.warning("signal %d again: forcing the stop", self._last_signum)
                self.force()

    # ------------------------------------------------------------------ run

    def start(self) -> None:
        """Connect and start the workers (returns at once; ``wait`` ends the run)."""
        from .share_worker import ShareWorkerThread

        runtime = self.runtime
        self._monitor.check_topics_at_start(self.strict)  # warns, or (strict) MissingTopicError
        if self.apply_group_configs:
            group_check.apply(runtime.kafka, self.routes)  # the diff logged, then set; GroupConfigError
        modes = runtime.dead_letters.prepare(self.routes)
        for name, mode in modes.items():
            log.info("route %s: dead letters written by the worker%s", name,
                     " (and by the broker's dead-letter queue for records no worker saw fail)" if mode == "broker" else "")
        runtime.delivery_controls.prepare(self.routes)  # before the workers: each asks who waits out its backoffs
        runtime.group_configs = group_check.check(runtime.kafka, self.routes, modes)  # after the framework's own changes
        if self.metrics_port is not None:
            from .metrics import MetricsExporter

            self._metrics = MetricsExporter(self.app.events, self.routes, self._gauges)
            self._metrics.serve(self.metrics_port, self.metrics_host)
        runtime.renewer.start()
        for route in self.routes:
            if route.group_type == "share":
                cls = ShareWorkerThread
            else:
                from .consumer_group_worker import ConsumerGroupWorkerThread
                cls = ConsumerGroupWorkerThread
            for index in range(route.settings["concurrency"]):
                self.workers.append(cls(route, runtime, index))
        self._monitor.start()  # topics, broker reachability, assignments (health.py)
        for worker in self.workers:
            if worker.route.group_type == "share":
                runtime.renewer.register(worker)
            worker.start()
        self.app.events.publish("worker.started", route=None, routes=[r.name for r in self.routes])
        log.info("worker started: %s", ", ".join(f"{r.name} ×{r.settings['concurrency']}" for r in self.routes))

    def run(self) -> int:
        """Start, wait for a signal (or ``stop()``), stop; the exit status. Under the supervisor
        (``quafka worker --processes``) a watchdog also stops the worker when the supervisor is gone."""
        previous = {}
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            # SIGTTIN: every thread's stack to stderr
            for sig in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGTTIN", None)):
                if sig is not None:
                    previous[sig] = signal.signal(sig, self._on_signal)
        watch_parent(self.stop, force_after_s=self.shutdown_timeout_s + FORCE_GRACE_S,
                     before_exit=self.runtime.process_jobs.terminate)
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
        while not runtime.stopping.wait(min(self.log_interval_s, SIGNAL_CHECK_S)):
            self._act_on_signals()
            if runtime.stopping.is_set():
                break
            if time.monotonic() - last_log >= self.log_interval_s:
                last_done = self._log_progress(last_done, time.monotonic() - last_log)
                last_log = time.monotonic()
            if any(not w.is_alive() for w in self.workers):
                runtime.stopping.set()
        return self._shutdown()

    def _shutdown(self) -> int:
        runtime = self.runtime
        self.app.events.publish("worker.stopping", route=None, routes=[r.name for r in self.routes])
        self._monitor.stop()
        for worker in self.workers:
            worker.stop()
        deadline = time.monotonic() + self.shutdown_timeout_s
        for worker in self.workers:
            while worker.is_alive() and not self._forced.is_set():
                worker.join(min(SIGNAL_CHECK_S, max(deadline - time.monotonic(), 0)))
                self._act_on_signals()  # a second signal forces
                if time.monotonic() >= deadline:
                    break
        late = [w for w in self.workers if w.is_alive()]
        if late:
            log.warning("%d workers still running a job at the %s; closing their consumers (the broker "
                        "releases their records)", len(late), "second signal" if self._forced.is_set() else "deadline")
            for worker in late:
                job = getattr(worker, "job", None)
                if job is not None:  # name what is cut short (Karafka's app.stopping.error does too)
                    log.warning("route %s worker %d: job on %s running for %.1f s is cut short", worker.route.name,
                                worker.index, ", ".join(f"{m.topic}-{m.partition}@{m.offset}" for m in job.messages),
                                time.monotonic() - job.started)
                worker.force_close()
        runtime.renewer.close()
        runtime.dead_letters.close()
        try:
            self.app.flush(timeout_s=10)  # jobs the consumers enqueued with wait=False
        except EnqueueError as exc:
            log.error("worker stopping: %s", exc)
            runtime.failed.set()
        if late:  # their jobs may be inside the pool's processes, running code that may never return
            runtime.process_jobs.terminate()
        else:
            runtime.process_jobs.close()
        if self._metrics is not None:
            self._metrics.close()
        for name, st in self.stats().items():  # the run's summary, outcomes apart
            counts = runtime.failures.counts().get(name)
            log.info("route %s: stopped after %d jobs done, %d failed; messages: %s%s", name, st["done"], st["failed"],
                     self._outcomes_text(st), "; failures by class: " + ", ".join(
                         f"{c} {n}" for c, n in sorted(counts.items(), key=lambda x: -x[1])) if counts else "")
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
        """Per route: jobs done and failed, dead letters written, renewals, messages in flight, and
        messages by outcome (``accepted``, ``retried``, ``released``, ``rejected``,
        ``dead-lettered``, ``released-at-shutdown``, ``lock-lost``)."""
        counters = ("done", "failed", "dead_lettered", "renewed", "in_flight")
        out: dict[str, dict[str, int]] = {r.name: dict.fromkeys(counters, 0) for r in self.routes}
        for worker in self.workers:
            stats = out[worker.route.name]
            for key in counters:
                stats[key] += getattr(worker, key)
            for outcome, n in worker.outcomes.items():
                stats[outcome] = stats.get(outcome, 0) + n
        return out

    def errors(self, route: str | None = None) -> list:
        """The last failures (errors.ErrorRecord, at most 100 per route) of ``route`` or every route."""
        return self.runtime.failures.errors(route)

    @staticmethod
    def _outcomes_text(s: dict[str, int]) -> str:
        parts = [f"{s.get(o, 0)} {o}" for o in ("accepted", "retried", "rejected", "dead-lettered")]
        parts += [f"{s[o]} {o}" for o in ("released", "released-at-shutdown", "lock-lost") if s.get(o)]
        return ", ".join(parts)

    def _log_progress(self, last_done: dict[str, int], elapsed_s: float) -> dict[str, int]:
        stats = self.stats()
        for name, s in stats.items():
            rate = (s["done"] + s["failed"] - last_done.get(name, 0)) / max(elapsed_s, 1e-9)
            log.info("route %s: %d jobs done (%.0f/s), %d failed, %d running, %d renewals; messages: %s",
                     name, s["done"], rate, s["failed"], s["in_flight"], s["renewed"], self._outcomes_text(s))
        return {name: s["done"] + s["failed"] for name, s in stats.items()}

