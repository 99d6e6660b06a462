"""The consumer base class and its two strategies (the seed's split of BaseConsumer): a route's
consumer class is bound to the strategy of its group type, so the methods that apply exist and the
others do not (calling one says why).

- every consumer: ``consume(messages)`` (a batch) and/or ``consume_one(message)``, ``initialized()``,
  ``shutdown()``; either may be ``async def``.
- share-group routes: ``accept``, ``release``, ``reject``, ``renew``, ``pause(message, backoff_ms)``
  (hold the record and stop fetching until the worker's jobs are done and the backoff has passed,
  then release it; the backoff must end inside the lock. The retry policy's backoffs are the
  broker's where it has quafka's redelivery backoff: delivery_controls.py).
- consumer-group routes: ``mark_as_consumed``, ``seek``, ``pause(message, backoff_ms)`` (go back to
  the message and pause its partition for the backoff), ``resume``, the ``revoked(partitions)``
  hook, and ``produce`` on ``transactional=True`` routes (transactional.py).

A message the consumer does not settle is settled by the route's ``ack_mode`` when the job returns;
an exception is handled by its error policy (policies.py).
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Protocol

from .messages import Message
from .policies import ACCEPT, REJECT, RELEASE, Verdict, VerdictKind
from .settings import BackoffExceedsLockDuration, RouteProblem

__all__ = ["Consumer", "ConsumerGroupConsumer", "ShareGroupConsumer", "bind", "is_async"]

SHARE_ONLY = {"accept", "release", "reject", "renew"}
CONSUMER_ONLY = {"mark_as_consumed", "seek", "resume", "revoked", "produce"}


class WorkerHooks(Protocol):
    """What a consumer asks its worker for while a job runs."""

    def renew(self, messages: list[Message]) -> bool: ...

    def seek(self, topic: str, partition: int, offset: int) -> None: ...

    def resume(self, topic: str, partition: int) -> None: ...

    def produce(self, topic: str, value: Any, key: Any = None, headers: Any = None,
                partition: int | None = None) -> None: ...


class Consumer:
    """Subclass it and define ``consume(self, messages)`` or ``consume_one(self, message)``."""

    route: Any = None  # the Route this instance serves (set by the worker)
    _hooks: WorkerHooks | None = None
    _max_backoff_ms: int = 0
    group_type = ""

    _settled: dict = {}  # never written: each instance gets its own on its first settlement (a
    # subclass's __init__ need not call super().__init__())

    def initialized(self) -> None:
        """Called once, before the first job, on the thread that runs the jobs."""

    def shutdown(self) -> None:
        """Called once when the worker stops, after the last job."""

    def _settle(self, message: Message, verdict: Verdict) -> None:
        settled = self.__dict__.get("_settled")
        if settled is None:
            settled = self.__dict__["_settled"] = {}
        settled[(message.topic, message.partition, message.offset)] = verdict

    def _take_settled(self) -> dict[tuple[str, int, int], Verdict]:
        return self.__dict__.pop("_settled", None) or {}

    def __getattr__(self, name: str) -> Any:
        if name in SHARE_ONLY and self.group_type == "consumer":
            raise AttributeError(f"{name}() applies to share-group routes; {type(self).__name__} runs on a "
                                 "consumer-group route (use mark_as_consumed, seek, pause)")
        if name in CONSUMER_ONLY and self.group_type == "share":
            raise AttributeError(f"{name}() applies to consumer-group routes; {type(self).__name__} runs on a "
                                 "share-group route (use accept, release, reject, pause)")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class ShareGroupConsumer(Consumer):
    group_type = "share"

    def accept(self, message: Message) -> None:
        """Done: the record is never delivered again."""
        self._settle(message, ACCEPT)

    def release(self, message: Message) -> None:
        """Give the record back now; any consumer of the group may get it (delivery_attempt + 1)."""
        self._settle(message, RELEASE)

    def reject(self, message: Message) -> None:
        """Unprocessable: archived (and dead-lettered when the route has a dead-letter topic)."""
        self._settle(message, REJECT)

    def renew(self, message: Message) -> bool:
        """Restart the record's acquisition lock now (RENEW, KIP-1222); False if the broker refused.
        Long jobs are renewed on their own (route setting ``renew``); this is for explicit control."""
        if self._hooks is None:
            return False
        return self._hooks.renew([message])

    def pause(self, message: Message, backoff_ms: int) -> None:
        """Hold the record, fetch nothing more until this worker's jobs are done and ``backoff_ms``
        has passed, then release it (delayed redelivery)."""
        if backoff_ms > self._max_backoff_ms:
            lock = self.route.settings["lock_duration_ms"] if self.route is not None else 0
            margin = self.route.settings["backoff_margin_ms"] if self.route is not None else 0
            raise BackoffExceedsLockDuration([RouteProblem(
                self.route.name if self.route is not None else "?", "pause",
                f"backoff {backoff_ms} ms exceeds max {self._max_backoff_ms} ms (lock: {lock} ms, buffer: "
                f"{margin} ms)", backoff=True)])
        self._settle(message, Verdict(VerdictKind.BACKOFF, int(backoff_ms)))


class ConsumerGroupConsumer(Consumer):
    group_type = "consumer"

    def revoked(self, partitions: list[tuple[str, int]]) -> None:
        """Partitions taken from this worker by a rebalance (after their running jobs ended)."""

    def mark_as_consumed(self, message: Message) -> None:
        """Consumed: the partition's commit moves past it once every earlier message of the batch
        is settled too (``ack_mode="manual"``: an unmarked message is processed again)."""
        self._settle(message, ACCEPT)

    def seek(self, message_or_topic: Message | str, partition: int | None = None, offset: int | None = None) -> None:
        """Continue the partition from a message, or from ``(topic, partition, offset)``."""
        if isinstance(message_or_topic, Message):
            topic, partition, offset = message_or_topic.coordinates
        else:
            topic = message_or_topic
        if partition is None or offset is None or self._hooks is None:
            raise TypeError("seek(message) or seek(topic, partition, offset)")
        self._hooks.seek(topic, partition, offset)

    def pause(self, message: Message, backoff_ms: int) -> None:
        """Go back to ``message`` and pause its partition for ``backoff_ms`` (then it resumes)."""
        self._settle(message, Verdict(VerdictKind.BACKOFF, int(backoff_ms)))

    def resume(self, topic: str, partition: int) -> None:
        """End a pause early."""
        if self._hooks is not None:
            self._hooks.resume(topic, partition)

    def produce(self, topic: str, value: Any, key: Any = None, headers: Any = None,
                partition: int | None = None) -> None:
        """Produce an output record inside the job's transaction (route ``transactional=True``):
        it is visible to read_committed consumers only with the job's consumed offsets, exactly
        once (Karafka's ``transaction { produce; mark_as_consumed }``, Kafka's
        KafkaProducer.sendOffsetsToTransaction). Values as ``App.enqueue``: bytes, str, None or
        JSON; ``headers`` a dict or (name, value) pairs."""
        if self._hooks is None:
            raise RuntimeError("produce() is for the running job of a transactional route")
        self._hooks.produce(topic, value, key, headers, partition)


_STRATEGIES = {"share": ShareGroupConsumer, "consumer": ConsumerGroupConsumer}
_bound: dict[tuple[type, str], type] = {}


def bind(cls: type, group_type: str) -> type:
    """``cls`` with the methods of ``group_type``'s strategy (cached)."""
    key = (cls, group_type)
    bound = _bound.get(key)
    if bound is None:
        strategy = _STRATEGIES[group_type]
        bound = cls if issubclass(cls, strategy) else type(cls.__name__, (cls, strategy), {"__module__": cls.__module__,
                                                                                            "__qualname__": cls.__qualname__})
        _bound[key] = bound
    return bound


def is_async(cls: type) -> bool:
    return any(inspect.iscoroutinefunction(getattr(cls, name, None)) for name in ("consume", "consume_one"))


def entry_point(cls: type) -> str:
    """``consume_one`` when the class defines it (and not ``consume``), else ``consume``."""
    has_one = callable(getattr(cls, "consume_one", None))
    has_batch = callable(getattr(cls, "consume", None))
    if has_batch:
        return "consume"
    if has_one:
        return "consume_one"
    return ""


def call(instance: Consumer, method: str, arg: Any, loop: asyncio.AbstractEventLoop | None) -> None:
    """Run one job: the consumer's method on ``arg``, on ``loop`` when it is a coroutine."""
    result = getattr(instance, method)(arg)
    if inspect.isawaitable(result):
        assert loop is not None
        loop.run_until_complete(result)

