"""Routes, declared then validated then run: an ``App`` holds share-group and consumer-group routes,
each mapping one topic of one group to a consumer class with its settings.

```python
app = App({"bootstrap.servers": "127.0.0.1:9092"})
app.share_group("job-workers").topic("jobs", JobConsumer, concurrency=4, max_poll_records=1,
                                     dead_letter_topic="dlq.jobs")
app.consumer_group("audit").topic("orders", AuditConsumer, auto_offset_reset="earliest")
app.validate()   # every problem of every route, before anything connects
```

A route's name is ``group/topic``. ``validate`` raises ``RouteConfigError`` (or its subclass
``BackoffExceedsLockDuration``) listing each problem with the route and the key.

``enqueue`` produces a job to a topic, now or later (enqueue.py):

```python
app.enqueue("jobs", {"id": 7}, delay_ms=30_000)   # durable when it returns; delivered after 30 s
```
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from quafka.client import SECURITY_KEYS, librdkafka_security_config
from quafka.client.errors import ConfigException

from .consumers import Consumer, ConsumerGroupConsumer, ShareGroupConsumer, entry_point, is_async
from .delivery_controls import group_problems
from .enqueue import DEFAULT_TIMEOUT_S, Enqueued, JobProducer
from .instrumentation import EventBus
from .settings import (
    CONSUMER,
    DESERIALIZERS,
    ROUTE_SETTINGS,
    SHARE,
    BackoffExceedsLockDuration,
    RouteConfigError,
    RouteProblem,
    validate_route,
)

__all__ = ["App", "Route"]

_CLIENT_KEYS = {"bootstrap.servers", "client.id", "request.timeout.ms", "retry.backoff.ms", "retry.backoff.max.ms",
                "socket.connection.setup.timeout.ms", "metadata.max.age.ms", *SECURITY_KEYS}


@dataclass(frozen=True)
class Route:
    group_type: str  # "share" or "consumer"
    group: str
    topic: str
    consumer: type
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.group}/{self.topic}"

    @property
    def entry_point(self) -> str:
        return entry_point(self.consumer)

    @property
    def executor(self) -> str:
        return "async" if is_async(self.consumer) else self.settings["executor"]

    def deserializers(self):
        def pick(value):
            if callable(value):
                return value
            return None if value == "bytes" else DESERIALIZERS[value]
        return pick(self.settings["key_deserializer"]), pick(self.settings["deserializer"])

    def max_backoff_ms(self) -> int:
        if self.group_type != SHARE:
            return 2**62
        return self.settings["lock_duration_ms"] - self.settings["backoff_margin_ms"]


class _GroupBuilder:
    def __init__(self, app: App, group_type: str, group: str) -> None:
        self._app, self._group_type, self._group = app, group_type, group

    def topic(self, topic: str, consumer: type, **settings: Any) -> _GroupBuilder:
        """Route ``topic`` of this group to ``consumer`` with ``settings`` (see settings.ROUTE_SETTINGS)."""
        self._app._declared.append((self._group_type, self._group, topic, consumer, dict(settings)))
        self._app._routes = None  # validated again
        return self


class App:
    """A worker application: the Kafka connection settings and the routes. Routes are checked by
    ``validate()`` (also run by the worker before it connects)."""

    def __init__(self, kafka: Mapping[str, Any] | None = None, *, name: str = "quafka-app") -> None:
        self.kafka = dict(kafka or {})
        self.name = name
        self.events = EventBus()
        self._declared: list[tuple[str, str, str, type, dict[str, Any]]] = []
        self._routes: list[Route] | None = None
        self._jobs: JobProducer | None = None  # enqueue's producer, made on first use
        self._jobs_lock = threading.Lock()

    def share_group(self, group: str) -> _GroupBuilder:
        return _GroupBuilder(self, SHARE, group)

    def consumer_group(self, group: str) -> _GroupBuilder:
        return _GroupBuilder(self, CONSUMER, group)

    def validate(self) -> list[Route]:
        """Every route with its full settings; raises RouteConfigError with every problem."""
        problems: list[RouteProblem] = []
        routes: list[Route] = []
        seen: dict[tuple[str, str], str] = {}
        if "bootstrap.servers" not in self.kafka:
            problems.append(RouteProblem("(app)", "bootstrap.servers", "App(kafka={...}) needs bootstrap.servers"))
        for key in self.kafka:
            if key not in _CLIENT_KEYS:
                problems.append(RouteProblem("(app)", key, "App(kafka=...) takes connection settings only "
                                             f"({', '.join(sorted(_CLIENT_KEYS))}); put consumer configs in a "
                                             "route's kafka={...}"))
        try:  # the security keys, as quafka's client and the confluent-kafka ones will take them
            librdkafka_security_config({k: v for k, v in self.kafka.items() if k in SECURITY_KEYS})
        except ConfigException as exc:
            problems.append(RouteProblem("(app)", exc.key, exc.message))
        group_types: dict[str, str] = {}
        whole: list[Route] = []  # the routes whose own settings hold
        for group_type, group, topic, consumer, settings in self._declared:
            name = f"{group}/{topic}"
            if not isinstance(group, str) or not group.strip():
                problems.append(RouteProblem(name, "group", f"must be a non-empty string, got {group!r}"))
            if not isinstance(topic, str) or not topic.strip():
                problems.append(RouteProblem(name, "topic", f"must be a non-empty string, got {topic!r}"))
            if group_types.setdefault(group, group_type) != group_type:
                problems.append(RouteProblem(name, "group", f"{group!r} is declared as both a share group and a "
                                                            "consumer group; Kafka refuses one name for both"))
            if (group, topic) in seen:
                problems.append(RouteProblem(name, "topic", "is routed twice in this group"))
            seen[(group, topic)] = name
            problems.extend(self._consumer_problems(name, group_type, consumer))
            full, found = validate_route(name, group_type, settings)
            problems.extend(found)
            if not found and full["dead_letter_topic"] == topic:
                problems.append(RouteProblem(name, "dead_letter_topic", "is the route's own topic: its dead letters "
                                                                        "would come back to it"))
            if not found and isinstance(consumer, type) and entry_point(consumer):
                coroutine = is_async(consumer)
                if full["executor"] == "async" and not coroutine:
                    problems.append(RouteProblem(name, "executor", f"'async' needs an async def {entry_point(consumer)}"
                                                                   f"; {consumer.__name__}'s is a plain function"))
                elif full["executor"] == "process" and coroutine:
                    problems.append(RouteProblem(name, "executor", f"'process' cannot run {consumer.__name__}'s async "
                                                                   "def methods; leave executor out (async is chosen)"))
            routes.append(Route(group_type, group, topic, consumer, full))
            if not found:
                whole.append(routes[-1])
        problems.extend(group_problems(whole))  # the routes of one group must agree
        from .group_check import group_config_problems  # (it imports this module)

        problems.extend(group_config_problems(whole))  # on the group configs they declare too
        if not self._declared:
            problems.append(RouteProblem("(app)", "routes", "no routes: declare share_group(...).topic(...) or "
                                                            "consumer_group(...).topic(...)"))
        if problems:
            error = BackoffExceedsLockDuration if all(p.backoff for p in problems) else RouteConfigError
            raise error(problems)
        self._routes = routes
        return routes

    # ------------------------------------------------------------------ enqueueing jobs

    def enqueue(self, topic: str, value: Any, key: Any = None, headers: Any = None, delay_ms: int | None = None,
                at: dt.datetime | int | None = None, *, wait: bool = True,
                timeout_s: float = DEFAULT_TIMEOUT_S) -> Enqueued | None:
        """Produce a job to ``topic`` (idempotent, acks=all); returns where it was written once the
        broker has acknowledged it (EnqueueError if not within ``timeout_s``). ``delay_ms`` (after
        now) or ``at`` (an aware datetime, or epoch ms) hold its delivery back on share groups that
        honour delivery times (a route's ``delayed_delivery``); giving both, or a negative one, is a
        ValueError. ``wait=False`` returns None at once: ``flush()`` then waits for every such job.
        Values: bytes, str (UTF-8), None, or anything JSON can write."""
        return self._job_producer().enqueue(topic, value, key, headers, delay_ms, at, wait=wait, timeout_s=timeout_s)

    def flush(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Wait until every job enqueued with ``wait=False`` is written; EnqueueError if one failed."""
        if self._jobs is not None:
            self._jobs.flush(timeout_s)

    def _job_producer(self) -> JobProducer:
        with self._jobs_lock:
            if self._jobs is None:
                self._jobs = JobProducer(self.kafka, self._readers)
            return self._jobs

    def _readers(self, topic: str) -> list[tuple[str, str, bool]]:
        """(group type, group, delayed_delivery) of each declared route reading ``topic`` (declared,
        not validated: an app that only enqueues may declare no routes at all)."""
        default = ROUTE_SETTINGS["delayed_delivery"].default
        return [(kind, group, settings.get("delayed_delivery", default) is not False)
                for kind, group, each, _, settings in self._declared if each == topic]

    @staticmethod
    def _consumer_problems(name: str, group_type: str, consumer: Any) -> list[RouteProblem]:
        if not isinstance(consumer, type) or not issubclass(consumer, Consumer):
            return [RouteProblem(name, "consumer", f"must be a subclass of quafka.framework.Consumer, got {consumer!r}")]
        wrong = ConsumerGroupConsumer if group_type == SHARE else ShareGroupConsumer
        if issubclass(consumer, wrong):
            return [RouteProblem(name, "consumer", f"{consumer.__name__} is a {wrong.__name__}; a {group_type}-group "
                                                   "route needs Consumer or "
                                                   f"{'ShareGroupConsumer' if group_type == SHARE else 'ConsumerGroupConsumer'}")]
        if not entry_point(consumer):
            return [RouteProblem(name, "consumer", f"{consumer.__name__} defines neither consume(messages) nor "
                                                   "consume_one(message)")]
        return []

    def routes(self, include: Iterable[str] | None = None) -> list[Route]:
        """The validated routes, only those matching ``include`` (``group/topic`` patterns, or group
        names) when given."""
        routes = self._routes if self._routes is not None else self.validate()
        patterns = list(include or [])
        if not patterns:
            return routes
        chosen = [r for r in routes if any(fnmatch.fnmatchcase(r.name, p) or fnmatch.fnmatchcase(r.group, p)
                                           for p in patterns)]
        if not chosen:
            raise RouteConfigError([RouteProblem("(app)", "--include-routes", f"{patterns} match no route; routes: "
                                                 f"{', '.join(r.name for r in routes)}")])
        return chosen
