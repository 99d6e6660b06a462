"""The framework's instrumentation bus: workers publish events, users and the metrics exporter
subscribe. An event with no subscriber costs a set lookup (``name in bus.wanted``, or ``wants(name)``), so
the hot path asks before it builds one.

Events (payload keys after ``route``):

| event | when | payload |
| --- | --- | --- |
| `worker.started` / `worker.stopping` / `worker.stopped` | the process's worker | `routes` |
| `job.started` | a job begins | `messages` |
| `job.finished` | a job returned | `messages`, `duration_s` |
| `job.failed` | a job raised | `messages`, `duration_s`, `error`, `verdicts` (one per message), `error_id` |
| `message.settled` | a message's outcome was sent | `message`, `outcome`: accepted; retried (its job failed, it comes again: at once, or after a backoff); released (the consumer released it, or it was handed to another worker unstarted); rejected (by the consumer's code); dead-lettered (its job failed on the last attempt); released-at-shutdown (not started when the worker stopped); lock-lost (its lock expired or a renewal failed, so the broker has it back) |
| `message.failed` | each message of a failed job, once its outcome is known (errors.py) | `message`, `outcome`, `error_class`, `error_message`, `error_id`, `attempt`, `max_attempts` |
| `job.backoff` | a failed message waits `backoff_ms` before its next delivery | `message`, `backoff_ms`, `waiter` (`worker`: held, then released; `broker`: released at once, the broker holds it back) |
| `job.renewed` / `job.renew_failed` | a lock renewal answered | `messages`, `error` |
| `dead_letter.produced` | the worker produced a dead letter itself | `message`, `topic` |
| `rebalance` | a consumer-group route's partitions changed | `assigned`, `revoked` |
| `worker.error` | a worker hit an error (it recovers, except `crash`: the worker thread ended) | `error`, `kind` (`poll`, `commit`, `acknowledge`, `dead_letter`, `hook`, `crash`) |

Subscribers run on the publishing thread; an exception in one is logged and does not reach the
worker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Event", "EventBus", "EVENTS"]

EVENTS = ("worker.started", "worker.stopping", "worker.stopped", "job.started", "job.finished", "job.failed",
          "message.settled", "message.failed", "job.backoff", "job.renewed", "job.renew_failed", "dead_letter.produced", "rebalance",
          "worker.error")
log = logging.getLogger("quafka.framework")


class Event(dict):
    """An event: ``event.name`` and its payload as a dict (``event["route"]``, ...)."""

    __slots__ = ("name",)

    def __init__(self, name: str, payload: dict[str, Any]) -> None:
        super().__init__(payload)
        self.name = name

    def __repr__(self) -> str:
        return f"Event({self.name!r}, {dict.__repr__(self)})"


class EventBus:
    def __init__(self) -> None:
        self._subscribers: dict[str, list[Callable[[Event], None]]] = {}
        #: the events with at least one subscriber (a new set after every change): a hot path
        #: reads it once and tests membership, rather than calling wants() per event
        self.wanted: frozenset[str] = frozenset()
        self._lock = threading.Lock()

    def subscribe(self, name: str, callback: Callable[[Event], None] | None = None):
        """Call ``callback(event)`` for each event ``name`` (``*`` for all). Usable as a decorator."""
        if name != "*" and name not in EVENTS:
            raise ValueError(f"unknown event {name!r}; events: {', '.join(EVENTS)}")

        def add(fn: Callable[[Event], None]):
            with self._lock:
                names = EVENTS if name == "*" else (name,)
                for each in names:
                    self._subscribers[each] = [*self._subscribers.get(each, ()), fn]
                self.wanted = frozenset(n for n, fns in self._subscribers.items() if fns)
            return fn
        return add(callback) if callback is not None else add

    def unsubscribe(self, callback: Callable[[Event], None]) -> None:
        with self._lock:
            self._subscribers = {name: [fn for fn in fns if fn is not callback]
                                 for name, fns in self._subscribers.items()}
            self.wanted = frozenset(n for n, fns in self._subscribers.items() if fns)

    def wants(self, name: str) -> bool:
        return bool(self._subscribers.get(name))

    def publish(self, name: str, **payload: Any) -> None:
        subscribers = self._subscribers.get(name)
        if not subscribers:
            return
        event = Event(name, payload)
        for fn in subscribers:
            try:
                fn(event)
            except Exception:
                log.exception("instrumentation subscriber %r failed on %s", fn, name)
