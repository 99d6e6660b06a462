"""Dead letters of the framework's routes. A share-group route uses the broker's dead-letter queue
where the broker has one (share.version 2, KIP-1191): the worker makes sure the group's
``errors.deadletterqueue.topic.name`` names the route's topic and that the topic opts in, and then
a REJECT is all it sends; the broker writes the dead letter with Kafka's headers. Against a broker
without it (Apache Kafka 4.2/4.3, or share.version 1), and for consumer-group routes, the worker
produces the dead letter itself, with the same six headers (client/dead_letters.dead_letter_headers),
the original key and value, on partition *source partition mod DLQ partitions* as Kafka does, and
only then settles the message — so a crash in between can leave one duplicate dead letter, never
a lost one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from quafka.client import Admin, KafkaException, NewTopic
from quafka.client.dead_letters import DLQ_TOPIC_CONFIG, dead_letter_headers
from quafka.client.errors import ErrorCode

from .instrumentation import EventBus
from .messages import Message
from .routing import Route

__all__ = ["BROKER", "DeadLetterError", "DeadLetters", "PRODUCE"]

BROKER, PRODUCE = "broker", "produce"
GROUP_ENABLE = "errors.deadletterqueue.group.enable"
PREFIX_CONFIG = "errors.deadletterqueue.topic.name.prefix"
log = logging.getLogger("quafka.framework")


class DeadLetterError(RuntimeError):
    """A route's dead-letter set-up cannot work against this cluster (raised at start-up)."""


class DeadLetters:
    """The dead-letter sink of one worker process; ``prepare`` connects (after validation)."""

    def __init__(self, kafka: Mapping[str, Any], events: EventBus) -> None:
        self._kafka = dict(kafka)
        self._events = events
        self._modes: dict[str, str] = {}
        self._partitions: dict[str, int] = {}
        self._producer = None
        self._lock = threading.Lock()

    def prepare(self, routes: Iterable[Route]) -> dict[str, str]:
        """Decide, per route with a dead-letter topic, who writes its dead letters; set up the
        group config and the topic as needed. Returns {route name: "broker" | "produce"}."""
        routes = [r for r in routes if r.settings["dead_letter_topic"]]
        if not routes:
            return {}
        with Admin(self._kafka) as admin:
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
                self._ensure_topic(admin, topic, {})
                self._partitions[topic] = len(admin.describe_topics([topic])[topic].partitions)
                self._modes[route.name] = PRODUCE
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

    def produce(self, route: Route, message: Message, *, rejected: bool, error: str | None) -> None:
        """Write ``message``'s dead letter and wait until it is acknowledged (acks=all)."""
        topic = route.settings["dead_letter_topic"]
        headers = dead_letter_headers(message.topic, message.partition, message.offset, route.group,
                                      message.delivery_attempt, rejected=rejected,
                                      reason="rejected" if rejected else "max-attempts", error=error)
        failure: list[Any] = []
        with self._lock:
            if self._producer is None:
                from confluent_kafka import Producer

                self._producer = Producer({**self._kafka, "enable.idempotence": True, "acks": "all", "linger.ms": 0})
            producer = self._producer
        producer.produce(topic, key=message.raw_key, value=message.raw_value, headers=headers,
                         partition=message.partition % self._partitions.get(topic, 1),
                         on_delivery=lambda err, _msg: failure.append(err) if err is not None else None)
        remaining = producer.flush(30)
        if remaining or failure:
            raise KafkaException(f"dead letter of {message.topic}-{message.partition}@{message.offset} to {topic} "
                                 f"failed: {failure[0] if failure else 'not acknowledged within 30 s'}")
        self._events.publish("dead_letter.produced", route=route.name, message=message, topic=topic)

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(10)
                self._producer = None
