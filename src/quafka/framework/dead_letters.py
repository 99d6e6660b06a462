"""Dead letters of the framework's routes: a job the framework gives up on (its code rejected it,
or it failed on the route's last attempt) reaches the route's ``dead_letter_topic`` exactly once,
written by the worker, saying why:

- Kafka's six ``__dlq.errors.*`` headers (KIP-1191's, as the broker writes them), quafka's
  ``quafka.dlq.reason`` (``rejected``, ``max-attempts``, ``deserialize-failed``), then the
  ``quafka.error.*`` headers (class, message, a bounded traceback, attempts, route, worker host and
  pid, and the error id of the worker's log line; protocol/dead_letter_headers.py), then the
  original record's own headers (so that a redrive gives them back), with the original key and
  value, on partition *source partition mod DLQ partitions* as Kafka does;
- only then is the record settled, so a crash in between can leave one duplicate dead letter,
  never a lost one. The worker waits for its letter's own delivery report (not a flush of every
  letter of the process).

Who else writes dead letters: on a share group where the broker has KIP-1191's dead-letter queue
(share.version 2, or ``dead_letter_mode="broker"``), the worker sets the group's
``errors.deadletterqueue.topic.name`` to the route's topic and opts the topic in, so that the
broker writes the letters of what the worker never saw fail (a record whose worker died at every
delivery, a lock that expired at the delivery limit). The broker cannot know an exception, so for
what the worker gives up on it writes the letter itself and then ACCEPTs the record: a REJECT
would make the broker write a second letter (``settle_as``). Without the broker's DLQ (Apache Kafka
4.2/4.3, share.version 1, consumer groups) it REJECTs (archives) the share record, or commits past
the consumer-group record. The same code works against Apache Kafka: it only produces.

A letter that can never be written as it is (too large for the topic, the traceback of a 5 MB
message; refused for good) is written smaller: a minimal form (the error cut short, no copied
headers), then headers only (no payload, as the broker does for a record too large to copy);
DeadLetterFailed when even that is refused. Transient failures (the cluster unreachable, no
acknowledgement within ``SEND_TIMEOUT_S``) raise DeadLetterRetriable: the record must come back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from quafka.client import Admin, KafkaException, NewTopic
from quafka.client.dead_letters import DLQ_TOPIC_CONFIG
from quafka.client.errors import ErrorCode
from quafka.protocol import dead_letter_headers as h

from .errors import ErrorInfo, worker_identity
from .instrumentation import EventBus
from .messages import Message
from .routing import Route
from .settings import admin_config

__all__ = ["BROKER", "DeadLetterError", "DeadLetterFailed", "DeadLetterRetriable", "DeadLetters", "PRODUCE"]

BROKER, PRODUCE = "broker", "produce"
GROUP_ENABLE = "errors.deadletterqueue.group.enable"
PREFIX_CONFIG = "errors.deadletterqueue.topic.name.prefix"
log = logging.getLogger("quafka.framework")
SEND_TIMEOUT_S = 30.0  # a dead letter not acknowledged by then is failed by the producer itself
MINIMAL_MESSAGE_CHARS = 200
# headers of the original record not copied into its dead letter (they describe an earlier letter)
_DEAD_LETTER_PREFIXES = ("__dlq.errors.", "quafka.dlq.", "quafka.error.")


class DeadLetterError(RuntimeError):
    """A route's dead-letter set-up cannot work against this cluster (raised at start-up)."""


class DeadLetterRetriable(RuntimeError):
    """A dead letter was not written, and may be later (the cluster is unreachable, say)."""


class DeadLetterFailed(RuntimeError):
    """No form of a dead letter can ever be written (the topic refuses it)."""


class DeadLetters:
    """The dead-letter sink of one worker process; ``prepare`` connects (after validation)."""

    def __init__(self, kafka: Mapping[str, Any], events: EventBus) -> None:
        self._kafka = dict(kafka)
        self._events = events
        self._modes: dict[str, str] = {}
        self._partitions: dict[str, int] = {}
        self._producer = None
        self._lock = threading.Lock()
        self._identity = worker_identity()

    def prepare(self, routes: Iterable[Route]) -> dict[str, str]:
        """Decide, per route with a dead-letter topic, who writes its dead letters; set up the
        group config and the topic as needed. Returns {route name: "broker" | "produce"}."""
        routes = [r for r in routes if r.settings["dead_letter_topic"]]
        if not routes:
            return {}
        with Admin(admin_config(self._kafka)) as admin:
            share_version = None
            for route in routes:
                topic = route.settings["dead_letter_topic"]
                mode = route.settings["dead_letter_mode"]
                if route.group_type == "share" and mode in ("auto", BROKER):
                    if share_version is None:
                        features = admin.describe_features()
                        share_version = features.finalized.get("share.version", (0, 0))[1]
                    reason = self._broker_unusable(admin, share_version, topic)
                    if reason is None:
                        self._use_broker(admin, route, topic)
                        self._modes[route.name] = BROKER
                        continue
                    if mode == BROKER:
                        raise DeadLetterError(f"route {route.name!r}: dead_letter_mode='broker' but {reason}")
                    log.info("route %s: the worker produces dead letters itself (%s)", route.name, reason)
                self._modes[route.name] = PRODUCE
            for route in routes:  # the worker writes the letters of what it gives up on, in both modes
                topic = route.settings["dead_letter_topic"]
                if self._modes[route.name] == PRODUCE:  # (the broker mode made it opt in)
                    self._ensure_topic(admin, topic, {})
                self._partitions[topic] = len(admin.describe_topics([topic])[topic].partitions)
        self._get_producer()  # connected before the first letter, which runs against its record's lock
        return dict(self._modes)

    @staticmethod
    def _broker_unusable(admin: Admin, share_version: int, topic: str) -> str | None:
        if share_version < 2:
            return f"the cluster's share.version is {share_version} (the broker's dead-letter queue needs 2)"
        prefix = admin.describe_configs("broker", "").get(PREFIX_CONFIG) or ""
        if prefix and not topic.startswith(prefix):
            return f"the broker's {PREFIX_CONFIG} is {prefix!r} and {topic!r} does not start with it"
        return None

    def _use_broker(self, admin: Admin, route: Route, topic: str) -> None:
        current = admin.describe_configs("group", route.group).get(DLQ_TOPIC_CONFIG) or ""
        if current and current != topic:
            raise DeadLetterError(f"route {route.name!r}: dead_letter_topic is {topic!r} but group {route.group!r} "
                                  f"has {DLQ_TOPIC_CONFIG}={current!r}; make them agree")
        self._ensure_topic(admin, topic, {GROUP_ENABLE: "true"})
        if admin.describe_configs("topic", topic).get(GROUP_ENABLE) != "true":
            admin.alter_configs("topic", topic, set={GROUP_ENABLE: "true"})
            log.info("topic %s: set %s=true (dead-letter topic of route %s)", topic, GROUP_ENABLE, route.name)
        if not current:
            admin.alter_configs("group", route.group, set={DLQ_TOPIC_CONFIG: topic})
            log.info("group %s: set %s=%s (route %s)", route.group, DLQ_TOPIC_CONFIG, topic, route.name)

    @staticmethod
    def _ensure_topic(admin: Admin, topic: str, configs: Mapping[str, str]) -> None:
        if topic in admin.list_topics():
            return
        try:
            admin.create_topics([NewTopic(topic, 1, -1, dict(configs))])  # -1: the broker's default replication
        except KafkaException as exc:
            if exc.code != ErrorCode.topic_already_exists:  # another worker process created it meanwhile
                raise

    def mode(self, route: Route) -> str | None:
        return self._modes.get(route.name)

    def settle_as(self, route: Route) -> str:
        """How a share record is acknowledged once the worker has written its dead letter: ACCEPT
        where the broker writes dead letters for this group (a REJECT would make it write a
        second one), REJECT elsewhere (the record is archived; no broker DLQ to write again)."""
        return "accept" if self._modes.get(route.name) == BROKER else "reject"

    def produce(self, route: Route, message: Message, *, reason: str, info: ErrorInfo | None) -> str:
        """Write ``message``'s dead letter and wait for its own acknowledgement (acks=all).
        Returns which form was written: "full" (payload, the original headers, the error with its
        traceback), "minimal" (payload, Kafka's headers, the reason, the error cut short) or
        "headers-only" (no payload; the broker's own fallback for a record too large to copy).
        A smaller form is tried only when the larger one can never be written (too large, or
        refused for good). Raises DeadLetterRetriable when the cluster may take it later (the
        record must come back), DeadLetterFailed when no form can ever be written."""
        topic = route.settings["dead_letter_topic"]
        partition = message.partition % self._partitions.get(topic, 1)
        host, pid = self._identity
        error: list[tuple[str, str]] = [(h.HEADER_ERROR_ATTEMPTS, str(message.delivery_attempt)),
                                        (h.HEADER_ERROR_ROUTE, route.name), (h.HEADER_ERROR_HOST, host),
                                        (h.HEADER_ERROR_PID, str(pid))]
        short = list(error)
        if info is not None:
            error = [(h.HEADER_ERROR_CLASS, info.error_class), (h.HEADER_ERROR_MESSAGE, info.message),
                     (h.HEADER_ERROR_TRACEBACK, info.traceback), (h.HEADER_ERROR_ID, info.error_id), *error]
            short = [(h.HEADER_ERROR_CLASS, info.error_class), (h.HEADER_ERROR_MESSAGE, info.message[:MINIMAL_MESSAGE_CHARS]),
                     (h.HEADER_ERROR_ID, info.error_id), *short]
        # Kafka's two causes: the client rejected it, or its deliveries ran out (the route's last attempt)
        cause = h.MESSAGE_DELIVERY_COUNT_EXCEEDED if reason == h.REASON_MAX_ATTEMPTS else h.MESSAGE_CLIENT_REJECT

        def headers(extra: list[tuple[str, str]], original: bool) -> list[tuple[str, bytes | None]]:
            out = h.dead_letter_headers(message.topic, message.partition, message.offset, route.group,
                                        message.delivery_attempt, cause, reason=reason, extra=tuple(extra))
            if original:  # kept, so that a redrive gives the job its headers back
                out.extend((name, value) for name, value in message.headers or ()
                           if not name.startswith(_DEAD_LETTER_PREFIXES))
            return out

        forms = (("full", message.raw_key, message.raw_value, headers(error, True)),
                 ("minimal", message.raw_key, message.raw_value, headers(short, False)),
                 ("headers-only", None, None, headers(short, False)))
        where = f"{message.topic}-{message.partition}@{message.offset}"
        problems = []
        for form, key, value, hdrs in forms:
            problem = self._send(topic, partition, key, value, hdrs)
            if problem is None:
                if form != "full":
                    log.error("route %s: the dead letter of %s was written to %s in %s form (%s)", route.name, where,
                              topic, form, "; ".join(problems))
                self._events.publish("dead_letter.produced", route=route.name, message=message, topic=topic)
                return form
            retriable, text = problem
            if retriable:
                raise DeadLetterRetriable(f"dead letter of {where} to {topic} failed: {text}")
            problems.append(f"{form}: {text}")
        raise DeadLetterFailed(f"dead letter of {where} to {topic} cannot be written: {'; '.join(problems)}")

    def write(self, route: Route, message: Message, *, reason: str, info: ErrorInfo | None) -> tuple[bool, str]:
        """``produce``, for a worker giving a message up: (written, what to say of it). Raises
        DeadLetterRetriable only (the worker makes the record come back); a letter that can never
        be written, or a bug, is logged and published here, never raised into a worker."""
        try:
            form = self.produce(route, message, reason=reason, info=info)
        except DeadLetterRetriable:
            raise
        except Exception as exc:  # noqa: BLE001 - DeadLetterFailed, or a bug: it must not end a worker
            log.error("route %s: %s; %s-%d@%d is settled without its dead letter", route.name,
                      exc if isinstance(exc, DeadLetterFailed) else f"the dead letter failed: {exc!r}",
                      message.topic, message.partition, message.offset)
            self._events.publish("worker.error", route=route.name, error=exc, kind="dead_letter")
            return False, "without its dead letter"
        topic = route.settings["dead_letter_topic"]
        return True, f"dead letter written to {topic}" + (f" ({form} form)" if form != "full" else "")

    def _get_producer(self):
        with self._lock:
            if self._producer is None:
                from confluent_kafka import Producer

                from quafka.client import librdkafka_security_config

                self._producer = Producer({**librdkafka_security_config(self._kafka), "enable.idempotence": True,
                                           "acks": "all", "linger.ms": 0,
                                           "delivery.timeout.ms": int(SEND_TIMEOUT_S * 1000)})
                self._producer.list_topics(timeout=10)  # metadata (and a connection) now, not at the first letter
            return self._producer

    def _send(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
              headers: list) -> tuple[bool, str] | None:
        """None when written; else (retriable, why)."""
        from confluent_kafka import KafkaError
        from confluent_kafka import KafkaException as ConfluentKafkaException

        producer = self._get_producer()
        done = threading.Event()
        result: list[Any] = []

        def delivered(err, _msg) -> None:
            result.append(err)
            done.set()
        try:
            producer.produce(topic, key=key, value=value, headers=headers, partition=partition, on_delivery=delivered)
        except BufferError as exc:  # the producer's queue is full: later
            return True, f"the producer's queue is full ({exc})"
        except ConfluentKafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            return _classify(err, str(exc))
        except Exception as exc:  # noqa: BLE001 - a header or payload the producer refuses: never writable
            return False, f"{type(exc).__name__}: {exc}"
        deadline = time.monotonic() + SEND_TIMEOUT_S + 5
        while not done.is_set():
            if time.monotonic() >= deadline:
                return True, f"not acknowledged within {SEND_TIMEOUT_S:.0f} s"
            producer.poll(0.05)  # serves every letter's callback; each waits for its own
        err = result[0]
        return None if err is None else _classify(err, str(err))

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(10)
                self._producer = None


def _classify(err: Any, text: str) -> tuple[bool, str]:
    """(retriable, text) of a producer error: too large, refused or unknown are final."""
    if err is None:
        return False, text
    code = err.code()
    if code in _FINAL_CODES or (code not in _TRANSIENT_CODES and not err.retriable()):
        return False, text
    return True, text


def _codes(*names: str) -> frozenset:
    from confluent_kafka import KafkaError

    return frozenset(getattr(KafkaError, n) for n in names if hasattr(KafkaError, n))


_FINAL_CODES = _codes("_MSG_SIZE_TOO_LARGE", "MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_RECORD",
                      "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "_UNKNOWN_TOPIC",
                      "UNKNOWN_TOPIC_OR_PART", "TOPIC_EXCEPTION", "_INVALID_ARG", "INVALID_REQUIRED_ACKS",
                      "POLICY_VIOLATION")
_TRANSIENT_CODES = _codes("_MSG_TIMED_OUT", "_TIMED_OUT", "_TRANSPORT", "_ALL_BROKERS_DOWN", "REQUEST_TIMED_OUT",
                          "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "LEADER_NOT_AVAILABLE",
                          "NOT_LEADER_FOR_PARTITION", "_QUEUE_FULL", "NETWORK_EXCEPTION")
