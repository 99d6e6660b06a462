"""Enqueueing jobs: ``App.enqueue`` produces a record to a route's topic, now or for later, with
confluent-kafka's Producer (quafka writes no producer), idempotent and ``acks=all``.

```python
app.enqueue("mail", {"to": "ann@example.com"})                  # returns once the job is durable
app.enqueue("mail", {"to": "bob@example.com"}, delay_ms=60_000)  # not delivered before a minute
app.enqueue("mail", {"to": "cy@example.com"}, at=datetime(2030, 1, 1, tzinfo=timezone.utc))
for job in many:                                                # a batch: one wait for all
    app.enqueue("mail", job, wait=False)
app.flush()                                                     # raises EnqueueError if any failed
```

Durability: ``enqueue`` returns when the broker has acknowledged the job (``acks=all``), with its
partition and offset — what a Sidekiq or Celery user expects of ``perform_async``/``delay``. With
``wait=False`` it returns at once, and ``flush()`` waits for every such job; a job whose write
failed is logged at once and raised by the next ``flush()``. A worker flushes at shutdown.

Delays: ``delay_ms`` sets the header ``quafka.deliver.after.ms`` (after the record's timestamp,
which ``enqueue`` sets when it produces), ``at`` the header ``quafka.deliver.at.ms`` (epoch ms). A
quafka broker honours them for the share groups with ``quafka.share.delivery.delay.enable=true``,
which a worker sets at start for its share routes (``delayed_delivery``, the default). The first
delayed job to a topic checks the groups of the app's routes that read it, before it is produced:
it turns delayed delivery on for a share route with ``delayed_delivery`` whose group lacks it (no
worker of the app has started yet), and logs once, naming each group, when the delay will not be
honoured — a broker without the extension (Apache Kafka), a route with
``delayed_delivery=False``, a consumer group (which reads in offset order), or no route of this
app reading the topic.

Values: bytes as they are, str as UTF-8, None as no value, anything else as JSON (a route with
``deserializer="json"`` reads it back).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from quafka.client import Admin, KafkaException

from .delivery_controls import DELAY_ENABLE, HEADER_DELIVER_AFTER_MS, HEADER_DELIVER_AT_MS, delivery_controls_listed
from .settings import admin_config

__all__ = ["EnqueueError", "Enqueued", "JobProducer", "delay_headers", "delivery_time"]

log = logging.getLogger("quafka.framework")
DEFAULT_TIMEOUT_S = 30.0
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_MS = dt.timedelta(milliseconds=1)

# (group type, group, delayed_delivery) of each route of the app that reads a topic
Readers = Callable[[str], list[tuple[str, str, bool]]]


class EnqueueError(RuntimeError):
    """A job was not written (or not acknowledged in time)."""


class Enqueued(NamedTuple):
    """Where a job was written, and when it may be delivered (``deliver_at_ms``: None = at once)."""
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    deliver_at_ms: int | None = None


def _epoch_ms(at: dt.datetime | int) -> int:
    if isinstance(at, dt.datetime):
        if at.tzinfo is None or at.utcoffset() is None:
            raise ValueError(f"at={at!r} has no time zone; give an aware datetime (datetime.now(timezone.utc) + "
                             "timedelta(...)) or epoch milliseconds")
        return -((_EPOCH - at) // _MS)  # rounded up: never before the time asked
    if isinstance(at, bool) or not isinstance(at, int):
        raise TypeError(f"at must be a datetime or epoch milliseconds (int); got {at!r}")
    return at


def delivery_time(delay_ms: int | float | None, at: dt.datetime | int | None) -> tuple[str, int] | None:
    """(the delivery header, its value in ms) for ``delay_ms`` or ``at`` (None: neither);
    ValueError for both, or a negative one; a fraction of a millisecond is rounded up."""
    if delay_ms is not None and at is not None:
        raise ValueError("give delay_ms or at, not both")
    if delay_ms is not None:
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, (int, float)):
            raise TypeError(f"delay_ms must be a number of milliseconds; got {delay_ms!r}")
        if delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0; got {delay_ms!r}")
        return HEADER_DELIVER_AFTER_MS, int(-(-delay_ms // 1))
    if at is not None:
        at_ms = _epoch_ms(at)
        if at_ms < 0:
            raise ValueError(f"at must not be before 1970; got {at!r}")
        return HEADER_DELIVER_AT_MS, at_ms
    return None


def delay_headers(timestamp_ms: int, when: tuple[str, int] | None) -> tuple[list[tuple[str, bytes]], int | None]:
    """The headers of ``when`` (``delivery_time``) on a record stamped ``timestamp_ms``, and the
    time the job may be delivered (None: at once)."""
    if when is None:
        return [], None
    name, ms = when
    return [(name, str(ms).encode())], timestamp_ms + ms if name == HEADER_DELIVER_AFTER_MS else ms


def _bytes(value: Any, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if what == "key":
        raise TypeError(f"key must be bytes, str or None; got {type(value).__name__}")
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _headers(headers: Mapping[str, Any] | Iterable[tuple[str, Any]] | None) -> list[tuple[str, bytes | None]]:
    items = headers.items() if isinstance(headers, Mapping) else (headers or ())
    return [(str(name), _bytes(value, "header")) for name, value in items]


class JobProducer:
    """The producer behind ``App.enqueue`` (one per App, made on first use, thread-safe)."""

    def __init__(self, kafka: Mapping[str, Any], readers: Readers, *,
                 detect: Callable[[Mapping[str, Any]], bool] = delivery_controls_listed) -> None:
        self._kafka = dict(kafka)
        self._readers = readers
        self._detect = detect
        self._producer = None
        self._lock = threading.Lock()
        self._checked: set[str] = set()  # topics whose delayed delivery was checked
        self._check_lock = threading.Lock()
        self._failures: list[str] = []  # wait=False jobs whose write failed, until flush()

    def _get(self):
        with self._lock:
            if self._producer is None:
                from confluent_kafka import Producer

                from quafka.client import librdkafka_security_config

                self._producer = Producer({**librdkafka_security_config(self._kafka), "enable.idempotence": True,
                                           "acks": "all", "linger.ms": 0})
            return self._producer

    def enqueue(self, topic: str, value: Any, key: Any = None, headers: Any = None, delay_ms: int | float | None = None,
                at: dt.datetime | int | None = None, *, wait: bool = True,
                timeout_s: float = DEFAULT_TIMEOUT_S) -> Enqueued | None:
        if not isinstance(topic, str) or not topic.strip():
            raise ValueError(f"topic must be a non-empty string; got {topic!r}")
        when = delivery_time(delay_ms, at)
        record_headers = _headers(headers)
        if when and any(name in (HEADER_DELIVER_AFTER_MS, HEADER_DELIVER_AT_MS) for name, _ in record_headers):
            raise ValueError("headers already carry a delivery time; give it there or as delay_ms/at, not both")
        payload, record_key = _bytes(value, "value"), _bytes(key, "key")
        if when and topic not in self._checked:
            self._check_delay_honoured(topic)
        producer = self._get()
        timestamp_ms = int(time.time() * 1000)  # the delay runs from here: after the checks and the connecting
        extra, deliver_at_ms = delay_headers(timestamp_ms, when)
        record_headers += extra
        done = threading.Event()
        outcome: list[Any] = []

        def on_delivery(err, msg) -> None:
            if wait:
                outcome.append((err, msg))
                done.set()
            elif err is not None:
                failure = f"job to {topic} (key {record_key!r}): {err}"
                log.error("enqueue: %s", failure)
                with self._lock:
                    self._failures.append(failure)

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                producer.produce(topic, value=payload, key=record_key, headers=record_headers,
                                 timestamp=timestamp_ms, on_delivery=on_delivery)
                break
            except BufferError:  # the producer's queue is full: let it drain
                if time.monotonic() >= deadline:
                    raise EnqueueError(f"job to {topic}: the producer's queue stayed full for {timeout_s} s") from None
                producer.poll(0.05)
        if not wait:
            producer.poll(0)  # serve the delivery reports that are in
            return None
        while not done.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise EnqueueError(f"job to {topic}: not acknowledged within {timeout_s} s (it may still be "
                                   "written)")
            producer.poll(min(remaining, 0.1))
        err, msg = outcome[0]
        if err is not None:
            raise EnqueueError(f"job to {topic} not enqueued: {err}")
        return Enqueued(topic, msg.partition(), msg.offset(), timestamp_ms, deliver_at_ms)

    def flush(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Wait until every job enqueued with ``wait=False`` is written; EnqueueError names those
        that failed (each was also logged when it failed) or how many are still unwritten."""
        with self._lock:
            producer = self._producer
        left = producer.flush(timeout_s) if producer is not None else 0
        with self._lock:
            failures, self._failures = self._failures, []
        if left or failures:
            parts = [f"{len(failures)} failed ({'; '.join(failures[:3])}{'; ...' if len(failures) > 3 else ''})"
                     ] if failures else []
            if left:
                parts.append(f"{left} not acknowledged within {timeout_s} s")
            raise EnqueueError("enqueued jobs: " + ", ".join(parts))

    # ------------------------------------------------------------------ delayed delivery

    def _check_delay_honoured(self, topic: str) -> None:
        """Once per topic: turn delayed delivery on for the app's share routes that ask for it and
        log, in one line, every group of the app reading ``topic`` that will not honour a delay."""
        with self._check_lock:
            if topic in self._checked:
                return
            self._checked.add(topic)
            readers = self._readers(topic)
            if not readers:
                log.warning("enqueue to %s with a delivery time: no route of this app reads %s; only share groups "
                            "with %s=true on a quafka broker will honour it, any other reader gets the job at once",
                            topic, topic, DELAY_ENABLE)
                return
            ignored = [f"consumer group {group} (it reads in offset order)" for kind, group, _ in readers
                       if kind == "consumer"]
            share = [(group, wants) for kind, group, wants in readers if kind == "share"]
            if share:
                try:
                    with Admin(admin_config(self._kafka)) as admin:
                        for group, wants in share:
                            why = self._share_group_ignores(admin, group, wants)
                            if why:
                                ignored.append(f"share group {group} ({why})")
                except KafkaException as exc:
                    log.warning("enqueue to %s with a delivery time: could not check whether share groups %s "
                                "honour it (%s); the job is enqueued anyway", topic,
                                ", ".join(g for g, _ in share), exc)
                    return
            if ignored:
                log.warning("enqueue to %s with a delivery time: the delay will not be honoured by %s: they get "
                            "the job at once", topic, "; ".join(ignored))

    def _share_group_ignores(self, admin: Admin, group: str, wants: bool) -> str | None:
        configs = admin.describe_configs("group", group)
        if not self._detect(configs):
            return "the broker has no delayed delivery: Apache Kafka, or a quafka before it"
        if str(configs.get(DELAY_ENABLE)).lower() == "true":
            return None
        if not wants:
            return f"{DELAY_ENABLE}=false and its route says delayed_delivery=False"
        admin.alter_configs("group", group, set={DELAY_ENABLE: "true"})
        log.info("group %s: set %s=true (a delayed job was enqueued to a topic its route reads)", group, DELAY_ENABLE)
        return None
