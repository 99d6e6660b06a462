"""The worker's metrics: counters fed by the instrumentation bus (instrumentation.py), rendered in
the Prometheus text format 0.0.4 and served over HTTP at ``/metrics`` (``quafka worker
--metrics-port PORT``; ``Worker(metrics_port=...)``).

Every series has the label ``route`` (the route's name, ``group/topic``); the info series adds
``group``, ``topic`` and ``group_type`` (``share`` or ``consumer``).

| series | type | labels | counts |
| --- | --- | --- | --- |
| `quafka_framework_jobs_total` | counter | `route`, `status` (`finished`, `failed`) | `job.finished` / `job.failed` events |
| `quafka_framework_messages_total` | counter | `route`, `outcome` (`accepted`, `retried`, `released`, `rejected`, `dead-lettered`, `released-at-shutdown`, `lock-lost`) | `message.settled` events |
| `quafka_framework_failures_total` | counter | `route`, `error_class`, `outcome` (`retried`, `rejected`, `dead-lettered`, `released`, `lock-lost`) | `message.failed` events: each message of a failed job, by what it raised (the first `ERROR_CLASSES_PER_ROUTE` classes of a route by name, later ones as `other`) and what became of it |
| `quafka_framework_job_duration_seconds` | histogram | `route` (+ `le`) | `duration_s` of `job.finished` and `job.failed` |
| `quafka_framework_job_failures_total` | counter | `route` | `job.failed` events |
| `quafka_framework_renewals_total` | counter | `route`, `result` (`ok`, `failed`) | `job.renewed` / `job.renew_failed` events |
| `quafka_framework_backoffs_total` | counter | `route` | `job.backoff` events (a failed message waiting out a backoff, in the worker or in the broker) |
| `quafka_framework_dead_letters_produced_total` | counter | `route` | `dead_letter.produced` events (dead letters the worker produced itself) |
| `quafka_framework_rebalances_total` | counter | `route` | `rebalance` events (consumer-group routes) |
| `quafka_framework_messages_in_flight` | gauge | `route` | messages inside a running job, read when scraped |
| `quafka_framework_workers` | gauge | `route` | live worker threads, read when scraped |
| `quafka_framework_route_info` | gauge | `route`, `group`, `topic`, `group_type` | always 1 |

Histogram buckets (seconds): 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, +Inf.

Rates are not exported; take them in PromQL. Jobs per second: ``rate(quafka_framework_jobs_total[1m])``
(``sum by (route)`` for both statuses); mean job time:
``rate(quafka_framework_job_duration_seconds_sum[1m]) / rate(quafka_framework_job_duration_seconds_count[1m])``;
p99: ``histogram_quantile(0.99, rate(quafka_framework_job_duration_seconds_bucket[1m]))``.

Counters start at 0 when the exporter is created; every series of a route the exporter was given
exists from the start (at 0), so ``rate()`` and ``increase()`` see the first event. An event for a
route the exporter was not given starts that route's series when it arrives (no info series).

Cost: an event is counted on the thread that publishes it (a worker, the renewer), under a lock
of its route: a dictionary lookup, a lock, one to three additions. Gauges are read from the
worker (``gauges()``) when scraped, costing nothing in between.
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from quafka._exposition import CONTENT_TYPE, TextWriter

if TYPE_CHECKING:
    from .instrumentation import Event, EventBus
    from .routing import Route

__all__ = ["CONTENT_TYPE", "DURATION_BUCKETS_S", "MetricsExporter"]

log = logging.getLogger("quafka.framework")

DURATION_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0)
OUTCOMES = ("accepted", "retried", "released", "rejected", "dead-lettered", "released-at-shutdown", "lock-lost")
ERROR_CLASSES_PER_ROUTE = 20  # a route's failures are labelled by at most this many exception classes

# indexes into _RouteCounts.counts
FINISHED, FAILED, RENEWED, RENEW_FAILED, BACKOFFS, DEAD_LETTERS, REBALANCES = range(7)


class _RouteCounts:
    """One route's counters; every change and every snapshot holds ``lock``."""

    __slots__ = ("lock", "counts", "outcomes", "buckets", "duration_sum", "failures")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts = [0] * 7
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self.failures: dict[tuple[str, str], int] = {}  # (error class, outcome) -> messages
        self.buckets = [0] * (len(DURATION_BUCKETS_S) + 1)  # not cumulative; the last is > 60 s
        self.duration_sum = 0.0

    def snapshot(self) -> tuple[list[int], dict[str, int], list[int], float]:
        with self.lock:
            return list(self.counts), dict(self.outcomes), list(self.buckets), self.duration_sum

    def failure_counts(self) -> dict[tuple[str, str], int]:
        with self.lock:
            return dict(self.failures)


class MetricsExporter:
    """Counts the bus's events per route and renders them (``render``), served by ``serve(port)``
    until ``close()``. ``gauges()`` returns ``{route name: {"in_flight": n, "workers": n}}``."""

    def __init__(self, events: EventBus, routes: Iterable[Route],
                 gauges: Callable[[], Mapping[str, Mapping[str, int]]] | None = None) -> None:
        self.events = events
        self.routes = list(routes)
        self.gauges = gauges
        self._states: dict[str, _RouteCounts] = {route.name: _RouteCounts() for route in self.routes}
        self._states_lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.host: str | None = None
        self.port: int | None = None
        # bound methods are made anew at each attribute access; the bus unsubscribes by identity
        self._callbacks: dict[str, Callable[[Event], None]] = {
            "job.finished": self._on_finished, "job.failed": self._on_failed, "message.settled": self._on_settled,
            "job.renewed": self._on_renewed, "job.renew_failed": self._on_renew_failed,
            "job.backoff": self._on_backoff, "dead_letter.produced": self._on_dead_letter,
            "rebalance": self._on_rebalance, "message.failed": self._on_message_failed,
        }
        for name, callback in self._callbacks.items():
            events.subscribe(name, callback)
        self._subscribed = True

    # ------------------------------------------------------------------ counting (publishing threads)

    def _state(self, route: Any) -> _RouteCounts:
        state = self._states.get(route)
        if state is None:
            with self._states_lock:
                state = self._states.get(route)
                if state is None:
                    state = self._states[route] = _RouteCounts()
        return state

    def _job_ended(self, event: Event, status: int) -> None:
        state = self._states.get(event["route"]) or self._state(event["route"])
        duration = event["duration_s"]
        index = bisect_left(DURATION_BUCKETS_S, duration)
        with state.lock:
            state.counts[status] += 1
            state.buckets[index] += 1
            state.duration_sum += duration

    def _on_finished(self, event: Event) -> None:
        self._job_ended(event, FINISHED)

    def _on_failed(self, event: Event) -> None:
        self._job_ended(event, FAILED)

    def _on_settled(self, event: Event) -> None:
        state = self._states.get(event["route"]) or self._state(event["route"])
        outcome = event["outcome"]
        with state.lock:
            outcomes = state.outcomes
            outcomes[outcome] = outcomes.get(outcome, 0) + 1

    def _on_message_failed(self, event: Event) -> None:
        state = self._states.get(event["route"]) or self._state(event["route"])
        error_class, outcome = event["error_class"], event["outcome"]
        with state.lock:
            failures = state.failures
            if (error_class, outcome) not in failures and \
                    len({c for c, _ in failures}) >= ERROR_CLASSES_PER_ROUTE and \
                    all(c != error_class for c, _ in failures):
                error_class = "other"
            failures[(error_class, outcome)] = failures.get((error_class, outcome), 0) + 1

    def _count(self, event: Event, index: int) -> None:
        state = self._states.get(event["route"]) or self._state(event["route"])
        with state.lock:
            state.counts[index] += 1

    def _on_renewed(self, event: Event) -> None:
        self._count(event, RENEWED)

    def _on_renew_failed(self, event: Event) -> None:
        self._count(event, RENEW_FAILED)

    def _on_backoff(self, event: Event) -> None:
        self._count(event, BACKOFFS)

    def _on_dead_letter(self, event: Event) -> None:
        self._count(event, DEAD_LETTERS)

    def _on_rebalance(self, event: Event) -> None:
        self._count(event, REBALANCES)

    # ------------------------------------------------------------------ rendering

    def render(self) -> str:
        """Every series in the Prometheus text format 0.0.4."""
        with self._states_lock:
            states = list(self._states.items())
        snapshots = [(str(name), state.snapshot()) for name, state in states]
        gauges: Mapping[str, Mapping[str, int]] | None = {}
        if self.gauges is not None:
            try:
                gauges = self.gauges()
            except Exception:  # a scrape must not fail on it; the gauges are left out
                log.exception("metrics: reading the worker gauges failed")
                gauges = None

        out = TextWriter()
        out.family("quafka_framework_jobs_total", "counter",
                   "Jobs that ended, by status: finished (returned) or failed (raised; one per job.failed event).",
                   [((("route", name), ("status", status)), counts[index]) for name, (counts, _, _, _) in snapshots
                    for status, index in (("finished", FINISHED), ("failed", FAILED))])
        out.family("quafka_framework_messages_total", "counter",
                   "Messages settled, by outcome (accepted, retried, released, rejected, dead-lettered, "
                   "released-at-shutdown, lock-lost).",
                   [((("route", name), ("outcome", outcome)), n)
                    for name, (_, outcomes, _, _) in snapshots for outcome, n in outcomes.items()])
        out.histogram("quafka_framework_job_duration_seconds",
                      "Time a job ran (finished or failed), in seconds.",
                      [((("route", name),), DURATION_BUCKETS_S, buckets, total)
                       for name, (_, _, buckets, total) in snapshots])
        out.family("quafka_framework_job_failures_total", "counter", "Jobs that raised (job.failed events).",
                   [((("route", name),), counts[FAILED]) for name, (counts, _, _, _) in snapshots])
        out.family("quafka_framework_failures_total", "counter",
                   "Messages of failed jobs, by the exception's class and the message's outcome.",
                   [((("route", str(name)), ("error_class", error_class), ("outcome", outcome)), n)
                    for name, state in states for (error_class, outcome), n in sorted(state.failure_counts().items())])
        out.family("quafka_framework_renewals_total", "counter",
                   "Lock renewals answered, by result: ok (every lock renewed) or failed.",
                   [((("route", name), ("result", result)), counts[index]) for name, (counts, _, _, _) in snapshots
                    for result, index in (("ok", RENEWED), ("failed", RENEW_FAILED))])
        out.family("quafka_framework_backoffs_total", "counter",
                   "Failed messages waiting out a backoff before their next delivery (held by the worker, or "
                   "released for the broker to hold back).",
                   [((("route", name),), counts[BACKOFFS]) for name, (counts, _, _, _) in snapshots])
        out.family("quafka_framework_dead_letters_produced_total", "counter",
                   "Dead letters the worker produced itself (not those the broker writes).",
                   [((("route", name),), counts[DEAD_LETTERS]) for name, (counts, _, _, _) in snapshots])
        out.family("quafka_framework_rebalances_total", "counter",
                   "Partition assignment changes of a consumer-group route.",
                   [((("route", name),), counts[REBALANCES]) for name, (counts, _, _, _) in snapshots])
        if gauges is not None:
            names = [name for name, _ in snapshots]
            names += sorted(str(name) for name in gauges if name not in self._states)
            out.family("quafka_framework_messages_in_flight", "gauge", "Messages inside a running job.",
                       [((("route", name),), int(gauges.get(name, {}).get("in_flight", 0))) for name in names])
            out.family("quafka_framework_workers", "gauge", "Worker threads alive.",
                       [((("route", name),), int(gauges.get(name, {}).get("workers", 0))) for name in names])
        out.family("quafka_framework_route_info", "gauge", "The routes this worker runs (always 1).",
                   [((("route", r.name), ("group", r.group), ("topic", r.topic), ("group_type", r.group_type)), 1)
                    for r in self.routes])
        return out.text()

    # ------------------------------------------------------------------ HTTP

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """Answer ``GET /metrics`` on ``host:port`` from a daemon thread (port 0: a free port, then
        in ``self.port``)."""
        if self._server is not None:
            raise RuntimeError(f"metrics already served on {self.host}:{self.port}")
        server = ThreadingHTTPServer((host, port), _Handler)
        server.daemon_threads = True
        server.exporter = self  # type: ignore[attr-defined]
        self._server = server
        self.host, self.port = server.server_address[0], server.server_address[1]
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.25},
                                        name="quafka-metrics", daemon=True)
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)

    def close(self) -> None:
        """Stop serving and stop counting (idempotent)."""
        if self._subscribed:
            self._subscribed = False
            for callback in self._callbacks.values():
                self.events.unsubscribe(callback)
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(5)


class _Handler(BaseHTTPRequestHandler):
    server_version = "quafka-metrics"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path.split("?", 1)[0] != "/metrics":
            self._send(404, b"not found: try /metrics\n", "text/plain; charset=utf-8")
            return
        try:
            body = self.server.exporter.render().encode()  # type: ignore[attr-defined]
        except Exception:
            log.exception("metrics: rendering failed")
            self._send(500, b"rendering the metrics failed\n", "text/plain; charset=utf-8")
            return
        self._send(200, body, CONTENT_TYPE)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
        log.debug("metrics: %s - %s", self.address_string(), format % args)
