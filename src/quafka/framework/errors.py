"""Failures made visible: what a failed job raised, in a form that cannot fail again, logged once
per failed attempt, kept in a bounded record per route, and counted by exception class and outcome.

``describe(exc)`` is the one sanitiser for exception text (a log line, a dead letter's headers, an
event, the error record all use it): ``str()`` is guarded (a ``__str__`` that raises gives a
placeholder), the text is cut to ``MESSAGE_MAX_CHARS`` and made valid UTF-8 (a lone surrogate, from
``surrogateescape`` decoding, becomes ``?``), the traceback keeps its last ``TRACEBACK_MAX_CHARS``.
Karafka's Web UI and Sidekiq keep 10,000 characters of a message in their stores; a dead letter's
header should stay well under a record's size limit, so quafka keeps 2,000 and 4,000.

``Failures.record`` is called by a worker for each message of a failed job once its outcome is known
(the outcomes are distinct everywhere: ``retried``, ``rejected`` by the consumer's code,
``dead-lettered`` after the route's last attempt, ``released-at-shutdown``, ``lock-lost``). It

- logs one line (WARNING when the message will be tried again, ERROR otherwise) with the route,
  ``topic-partition@offset``, key, attempt/limit, outcome, exception class and message and an error
  id, followed by the traceback. Rate-limited per (route, exception class): at most
  ``LOG_BURST`` lines per ``LOG_WINDOW_S``; the next line after a quiet spell says how many were
  suppressed, so a poison flood cannot fill the disk (neither Karafka nor Sidekiq limits this);
- keeps the last ``RECORDS_PER_ROUTE`` failures per route (``Worker.errors()``) and unbounded
  counts per class, as Karafka Pro's errors tracker does;
- publishes ``message.failed`` (the metrics count it by class and outcome) when someone listens.

Failures are recorded directly by the workers, not through the event bus: a subscriber would take
the workers off their lean path for every successful job (instrumentation.py).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

__all__ = ["ErrorInfo", "ErrorRecord", "Failures", "OUTCOME_DEAD_LETTERED", "OUTCOME_LOCK_LOST",
           "OUTCOME_REJECTED", "OUTCOME_RELEASED_AT_SHUTDOWN", "OUTCOME_RETRIED", "describe", "error_class_name",
           "worker_identity"]

log = logging.getLogger("quafka.framework")

MESSAGE_MAX_CHARS = 2000
TRACEBACK_MAX_CHARS = 4000
LOG_BURST = 10          # log lines per (route, exception class) per window
LOG_WINDOW_S = 60.0
RECORDS_PER_ROUTE = 100

OUTCOME_RETRIED = "retried"
OUTCOME_REJECTED = "rejected"
OUTCOME_DEAD_LETTERED = "dead-lettered"
OUTCOME_RELEASED_AT_SHUTDOWN = "released-at-shutdown"
OUTCOME_LOCK_LOST = "lock-lost"
_AGAIN = frozenset({OUTCOME_RETRIED, OUTCOME_RELEASED_AT_SHUTDOWN, OUTCOME_LOCK_LOST})  # delivered again


def _clean(text: str, limit: int, keep_end: bool = False) -> str:
    text = text.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate cannot be encoded: '?'
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    if keep_end:
        return f"[{cut} characters cut]\n" + text[-limit:]
    return text[:limit] + f"... [{cut} more characters]"


def error_class_name(exc: BaseException) -> str:
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


@dataclass(frozen=True)
class ErrorInfo:
    """A failure as text that is safe to log, send and store."""
    error_class: str
    message: str
    traceback: str
    error_id: str

    @property
    def summary(self) -> str:
        return f"{self.error_class}: {self.message}" if self.message else self.error_class


def describe(exc: BaseException) -> ErrorInfo:
    """``exc`` as an ErrorInfo; never raises. A traceback formatted in another process (the
    process executor) rides on the exception as ``__quafka_traceback__``, and the class of one
    that could not cross as itself as ``__quafka_class__``."""
    try:
        text = str(exc)
    except BaseException as inner:  # noqa: BLE001 - a __str__ that raises must not stop the worker
        text = f"<str() raised {type(inner).__name__}>"
    try:
        tb = getattr(exc, "__quafka_traceback__", None)
        if not isinstance(tb, str):
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except BaseException as inner:  # noqa: BLE001 - formatting calls __str__ again
        tb = f"<the traceback could not be formatted: {type(inner).__name__}>"
    name = getattr(exc, "__quafka_class__", None)
    return ErrorInfo(name if isinstance(name, str) else error_class_name(exc), _clean(text, MESSAGE_MAX_CHARS),
                     _clean(tb, TRACEBACK_MAX_CHARS, keep_end=True), uuid.uuid4().hex[:12])


def worker_identity() -> tuple[str, int]:
    return socket.gethostname(), os.getpid()


@dataclass(frozen=True)
class ErrorRecord:
    """One failed attempt of one message, as ``Worker.errors()`` returns it."""
    route: str
    topic: str
    partition: int
    offset: int
    key: Any
    attempt: int
    max_attempts: int
    outcome: str
    error_class: str
    message: str
    traceback: str
    error_id: str
    at_ms: int
    host: str
    pid: int


class _RouteFailures:
    __slots__ = ("records", "by_class", "window")

    def __init__(self) -> None:
        self.records: deque[ErrorRecord] = deque(maxlen=RECORDS_PER_ROUTE)
        self.by_class: dict[str, int] = {}
        self.window: dict[str, list[float]] = {}  # class -> [window start, lines in it, suppressed]


class Failures:
    """The failures of one worker process's routes (thread-safe)."""

    def __init__(self, events: Any = None, *, log_failures: bool = True) -> None:
        self._events = events
        self._log = log_failures
        self._routes: dict[str, _RouteFailures] = {}
        self._lock = threading.Lock()
        self.host, self.pid = worker_identity()

    def record(self, route: str, message: Any, info: ErrorInfo, outcome: str, max_attempts: int,
               detail: str = "") -> None:
        """One message of a failed job, with its final outcome (``detail``: e.g. the backoff)."""
        now = time.time()
        key = message.key
        record = ErrorRecord(route, message.topic, message.partition, message.offset, key,
                             message.delivery_attempt, max_attempts, outcome, info.error_class, info.message,
                             info.traceback, info.error_id, int(now * 1000), self.host, self.pid)
        with self._lock:
            failures = self._routes.get(route)
            if failures is None:
                failures = self._routes[route] = _RouteFailures()
            failures.records.append(record)
            failures.by_class[info.error_class] = failures.by_class.get(info.error_class, 0) + 1
            suppressed = self._admit(failures, info.error_class, time.monotonic())
        if self._log and suppressed is not None:
            self._write(record, detail, suppressed)
        events = self._events
        if events is not None and events.wants("message.failed"):
            events.publish("message.failed", route=route, message=message, outcome=outcome,
                           error_class=info.error_class, error_message=info.message, error_id=info.error_id,
                           attempt=message.delivery_attempt, max_attempts=max_attempts)

    @staticmethod
    def _admit(failures: _RouteFailures, error_class: str, now: float) -> int | None:
        """None: suppress this line; else how many lines were suppressed before it."""
        window = failures.window.get(error_class)
        if window is None or now - window[0] >= LOG_WINDOW_S:
            suppressed = int(window[2]) if window is not None else 0
            failures.window[error_class] = [now, 1, 0]
            return suppressed
        if window[1] < LOG_BURST:
            window[1] += 1
            return 0
        window[2] += 1
        return None

    def _write(self, r: ErrorRecord, detail: str, suppressed: int) -> None:
        level = logging.WARNING if r.outcome in _AGAIN else logging.ERROR
        key = "" if r.key is None else f", key {_clean(repr(r.key), 80)}"
        extra = f" ({suppressed} similar failures of this route were not logged in the last " \
                f"{LOG_WINDOW_S:.0f} s)" if suppressed else ""
        log.log(level, "route %s: job failed on %s-%d@%d%s, attempt %d/%d: %s: %s -> %s%s [error %s]%s\n%s",
                r.route, r.topic, r.partition, r.offset, key, r.attempt, r.max_attempts, r.error_class, r.message,
                r.outcome, f" ({detail})" if detail else "", r.error_id, extra, r.traceback.rstrip())

    def errors(self, route: str | None = None) -> list[ErrorRecord]:
        """The last failures (of ``route``, or of every route), oldest first."""
        with self._lock:
            routes = [self._routes[route]] if route in self._routes else (
                [] if route is not None else list(self._routes.values()))
            out = [r for f in routes for r in f.records]
        return sorted(out, key=lambda r: r.at_ms)

    def counts(self) -> dict[str, dict[str, int]]:
        """{route: {exception class: failed attempts}} since the start."""
        with self._lock:
            return {name: dict(f.by_class) for name, f in self._routes.items()}
