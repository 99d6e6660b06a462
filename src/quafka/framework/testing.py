"""Testing helpers for framework consumers (like karafka-testing): no threads, sleeps or polling in
the test.

In memory — the consumer runs on the calling thread, its verdicts are worked out exactly as a
worker works them out (policies.decide), and nothing connects:

```python
from quafka.framework.testing import consume, message

outcome = consume(JobConsumer, [message(b"ok"), message(b"poison"), message(b"flaky", delivery_attempt=5)],
                  max_attempts=5)
assert outcome.accepted == [b"ok"] and outcome.rejected == [b"poison", b"flaky"]
```

Against a broker (an ``EmbeddedBroker``, or any reached through bootstrap.servers) — the route's
real workers run until the messages produced are settled:

```python
with EmbeddedBroker() as broker, RouteRunner(app, "job-workers/jobs", broker.bootstrap_servers) as run:
    run.produce([b"ok", b"poison"])
    settled = run.until_settled(2)          # [(message, outcome), ...] in settling order
```
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from quafka.client import Admin, NewTopic

from .consumers import bind, call
from .instrumentation import Event
from .messages import Message
from .policies import Verdict, VerdictKind, decide
from .routing import App, Route
from .settings import RouteConfigError, RouteProblem, validate_route

__all__ = ["Outcome", "RouteRunner", "consume", "message"]


def message(value: Any = b"", key: Any = None, *, topic: str = "test", partition: int = 0, offset: int | None = None,
            delivery_attempt: int = 1, headers: Iterable[tuple[str, bytes | None]] = (),
            timestamp: int = 0) -> Message:
    """A message as a worker would hand it over (offsets count up from 0 when not given)."""
    global _next_offset
    if offset is None:
        offset, _next_offset = _next_offset, _next_offset + 1
    raw_key = key if isinstance(key, (bytes, type(None))) else None
    raw_value = value if isinstance(value, (bytes, type(None))) else None
    return Message(topic, partition, offset, timestamp, key, value, list(headers), delivery_attempt, raw_key, raw_value)


_next_offset = 0


@dataclass
class Outcome:
    """What a consumer did with the messages: verdicts in order, the errors it raised, the
    renewals and seeks it asked for."""
    verdicts: list[tuple[Message, Verdict]] = field(default_factory=list)
    errors: list[tuple[list[Message], BaseException]] = field(default_factory=list)
    renewed: list[Message] = field(default_factory=list)
    seeks: list[tuple[str, int, int]] = field(default_factory=list)
    dead_letter_topic: str | None = None

    def _values(self, kind: VerdictKind) -> list[Any]:
        return [m.value for m, v in self.verdicts if v.kind is kind]

    @property
    def accepted(self) -> list[Any]:
        """Values accepted (share) or marked consumed (consumer group)."""
        return self._values(VerdictKind.ACCEPT)

    @property
    def released(self) -> list[Any]:
        return self._values(VerdictKind.RELEASE)

    @property
    def rejected(self) -> list[Any]:
        return self._values(VerdictKind.REJECT)

    @property
    def dead_lettered(self) -> list[Any]:
        """Rejected values that the route's dead-letter topic gets."""
        return self.rejected if self.dead_letter_topic else []

    @property
    def backoffs(self) -> list[tuple[Any, int]]:
        return [(m.value, v.backoff_ms) for m, v in self.verdicts if v.kind is VerdictKind.BACKOFF]


class _Hooks:
    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome

    def renew(self, messages: list[Message]) -> bool:
        self.outcome.renewed.extend(messages)
        return True

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self.outcome.seeks.append((topic, partition, offset))

    def resume(self, topic: str, partition: int) -> None:
        pass


def consume(consumer: type, messages: Iterable[Message], *, group_type: str = "share", **settings: Any) -> Outcome:
    """Run ``consumer`` on ``messages`` in memory with the route ``settings``; raises
    RouteConfigError for settings a route would refuse. ``consume(messages)`` gets them as one
    batch; ``consume_one`` gets them one by one."""
    name = f"test/{consumer.__name__}"
    problems = App._consumer_problems(name, group_type, consumer)
    full, found = validate_route(name, group_type, settings)
    if problems or found:
        raise RouteConfigError(problems + found)
    route = Route(group_type, "test", consumer.__name__, consumer, full)
    outcome = Outcome(dead_letter_topic=full["dead_letter_topic"])
    instance = bind(consumer, group_type)()
    instance.route, instance._hooks, instance._max_backoff_ms = route, _Hooks(outcome), route.max_backoff_ms()
    loop = None
    if route.executor == "async":
        import asyncio

        loop = asyncio.new_event_loop()
    messages = list(messages)
    method = route.entry_point
    jobs = [messages] if method == "consume" else [[m] for m in messages]
    try:
        instance.initialized()
        for job in jobs:
            failed = False
            try:
                call(instance, method, job if method == "consume" else job[0], loop)
            except Exception as exc:  # the route's error policy decides, as in a worker
                failed = True
                outcome.errors.append((job, exc))
            outcome.verdicts.extend(decide(job, instance._take_settled(), failed, full))
        instance.shutdown()
    finally:
        if loop is not None:
            loop.close()
    return outcome


class RouteRunner:
    """Run one route of ``app`` against a broker until what the test produced is settled. Creates
    the topic if missing and starts from the earliest offset (a share group gets
    ``share.auto.offset.reset=earliest``, a consumer-group route ``auto_offset_reset="earliest"``
    unless it sets one), so that records produced before the workers join are delivered."""

    def __init__(self, app: App, route_name: str, bootstrap_servers: str, *, partitions: int = 1) -> None:
        self.app = App({**app.kafka, "bootstrap.servers": bootstrap_servers}, name=app.name)
        # a consumer-group route starts from the earliest offset unless it says otherwise, so that
        # what the test produced before the worker joined is consumed (as for share groups below)
        self.app._declared = [(kind, group, topic, consumer, {"auto_offset_reset": "earliest", **settings}
                               if kind == "consumer" else settings) for kind, group, topic, consumer, settings in
                              app._declared]
        self.app.events = app.events
        routes = {r.name: r for r in self.app.routes()}
        if route_name not in routes:
            raise RouteConfigError([RouteProblem("(app)", "route", f"{route_name!r} is not a route of the app; "
                                                                   f"routes: {', '.join(routes)}")])
        self.route = routes[route_name]
        self.bootstrap_servers = bootstrap_servers
        self.partitions = partitions
        self._settled: list[tuple[Message, str]] = []
        self._changed = threading.Condition()
        self._worker = None
        self._producer = None

    def __enter__(self) -> RouteRunner:
        with Admin({"bootstrap.servers": self.bootstrap_servers}) as admin:
            if self.route.topic not in admin.list_topics():
                admin.create_topics([NewTopic(self.route.topic, self.partitions, 1)])
            if self.route.group_type == "share":
                admin.alter_configs("group", self.route.group, set={"share.auto.offset.reset": "earliest"})
        self.app.events.subscribe("message.settled", self._on_settled)
        return self

    def _on_settled(self, event: Event) -> None:
        if event["route"] == self.route.name:
            with self._changed:
                self._settled.append((event["message"], event["outcome"]))
                self._changed.notify_all()

    def produce(self, values: Iterable[Any], *, key: bytes | None = None, partition: int | None = None,
                headers: Mapping[str, bytes] | None = None) -> None:
        """Produce each value (bytes or str) to the route's topic and wait until it is written."""
        from confluent_kafka import Producer

        if self._producer is None:
            self._producer = Producer({"bootstrap.servers": self.bootstrap_servers, "linger.ms": 0})
        for value in values:
            extra = {} if partition is None else {"partition": partition}
            self._producer.produce(self.route.topic, value=value, key=key, headers=dict(headers or {}), **extra)
        if self._producer.flush(30):
            raise TimeoutError("produce: not acknowledged within 30 s")

    def until_settled(self, count: int, timeout_s: float = 30.0) -> list[tuple[Message, str]]:
        """Run the route's workers (once started they keep running) until ``count`` settlements
        in all (a message paused with a backoff counts once for the backoff and again when it is
        settled later); returns every (message, outcome) so far. TimeoutError names what was settled."""
        if self._worker is None:
            from .worker import Worker

            self._worker = Worker(self.app, include_routes=[self.route.name], handle_signals=False,
                                  log_interval_s=3600, shutdown_timeout_s=10)
            self._worker.start()
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while len(self._settled) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._worker.runtime.failed.is_set():
                    raise TimeoutError(f"{len(self._settled)} of {count} messages settled in {timeout_s} s: "
                                       f"{[(m.value, o) for m, o in self._settled]}")
                self._changed.wait(remaining)
            return list(self._settled)

    def __exit__(self, *exc: object) -> None:
        self.app.events.unsubscribe(self._on_settled)
        if self._worker is not None:
            self._worker.stop()
            self._worker.wait()
        if self._producer is not None:
            self._producer.flush(10)
