"""ShareConsumer / AsyncShareConsumer: consume a share group as Kafka 4.2+'s KafkaShareConsumer does.

This module is the public API. ``AsyncShareConsumer`` is the asyncio consumer; ``ShareConsumer``
drives the same object from a private event loop thread. What happens behind the calls (the
event loop tasks, requests, fetches, acknowledgement sending) is the I/O driver's
(``_share_driver``, with ``_share_acknowledger``), itself built on sans-I/O modules as Kafka's Java
client is (``_share_request_manager``, ``_share_membership``, ``_share_acks``, ``_share_fetch``).

Acknowledgements ride on the next ShareFetch to the partition's leader, or go in a
ShareAcknowledge when no fetch is due (commits). Every acknowledgement gets exactly one outcome,
reported to the acknowledgement commit callback (and by ``commit_sync`` for the ones it sent),
which runs on the application's thread inside a later ``poll``, ``commit_sync``, ``commit_async``
or ``close``: success only when the leader's response names the partition with no error
(docs/client.md lists the failures).

quafka extension (documented in docs/client.md): ``acknowledge`` and the commit calls may be made
from a second thread while the owning thread is outside a consumer call; the calls are serialised
by an internal lock. This lets a background thread RENEW the locks of records under long
processing.

quafka extension: ``poll_batches`` returns the acquired records undecoded, one ``AcquiredBatches``
per partition (record bytes plus acquired offset ranges, picklable, ``records()`` decodes), and
``acknowledge_range`` acknowledges a range of delivered offsets at once; for consumers that decode
elsewhere (the Spark source fans the batches out to executors). A consumer uses either ``poll`` or
``poll_batches``, not both; explicit acknowledgement mode only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from ._base import SyncClient
from ._share_acknowledger import CommitCallback, now_ms
from ._share_acks import AcknowledgeType
from ._share_consumer_config import SHARE_CONSUMER_CONFIG, check_share_consumer_keys
from ._share_driver import Deserializer, ShareConsumerDriver
from ._share_fetch import AcquiredBatches
from .errors import IllegalStateException, KafkaException
from .records import Record, TopicPartition

__all__ = ["AcknowledgeType", "AsyncShareConsumer", "CommitCallback", "SHARE_CONSUMER_CONFIG", "ShareConsumer"]

_ACK_TYPES = frozenset(AcknowledgeType)


class AsyncShareConsumer(ShareConsumerDriver):
    """A share-group consumer on asyncio; see the module docstring. Use ``async with``."""

    CONFIG = SHARE_CONSUMER_CONFIG
    NAME = "ShareConsumer"

    def __init__(self, config: Mapping[str, Any], key_deserializer: Deserializer | None = None,
                 value_deserializer: Deserializer | None = None) -> None:
        check_share_consumer_keys(config)
        super().__init__(config, key_deserializer, value_deserializer)

    # ------------------------------------------------------------------ plain methods

    def subscribe(self, topics: Iterable[str]) -> None:
        """Subscribe to ``topics`` (replacing the subscription); an empty list unsubscribes."""
        topics = [topics] if isinstance(topics, str) else list(topics)
        for topic in topics:
            if not isinstance(topic, str) or not topic.strip():
                raise ValueError(f"topic names must be non-empty strings, got {topic!r}")
        self._check_usable()
        if not topics:
            self.unsubscribe()
            return
        self._membership.subscribe(frozenset(topics), now_ms())
        self._wake_heartbeat()
        try:  # join now, as Kafka's consumer does on subscribe (else the first poll starts it)
            asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._heartbeat_task is None:
            self._start_task = asyncio.ensure_future(self._start_quietly())

    def unsubscribe(self) -> None:
        """Leave the group (the next heartbeat says so) and drop the assignment."""
        self._check_usable()
        self._membership.unsubscribe(now_ms())
        self._set_assignment({})
        self._wake_heartbeat()

    def subscription(self) -> set[str]:
        return set(self._membership.subscription)

    def acknowledge(self, record_or_topic: Record | str, type_or_partition: Any = AcknowledgeType.ACCEPT,
                    offset: int | None = None, ack_type: int | None = None) -> None:
        """``acknowledge(record, type=ACCEPT)`` or ``acknowledge(topic, partition, offset, type)``."""
        if self._closed:
            raise IllegalStateException("the ShareConsumer is closed")
        if type(record_or_topic) is Record:
            # a plain tuple finds the TopicPartition keys (equal and hashed alike) and is cheaper
            tp = (record_or_topic.topic, record_or_topic.partition)
            offset, kind, by_record = record_or_topic.offset, type_or_partition, True
        else:
            if offset is None or ack_type is None:
                raise TypeError("acknowledge(topic, partition, offset, type) needs all four arguments")
            tp, kind, by_record = TopicPartition(record_or_topic, int(type_or_partition)), ack_type, False
        if kind not in _ACK_TYPES:
            raise ValueError(f"acknowledge type {kind!r} is not one of ACCEPT, RELEASE, REJECT, RENEW")
        with self._ack_lock:
            self._acks.acknowledge(tp, offset, kind, by_record=by_record)

    def acknowledge_range(self, topic: str, partition: int, first_offset: int, last_offset: int,
                          ack_type: int = AcknowledgeType.ACCEPT) -> None:
        """quafka extension: acknowledge the delivered offsets ``first_offset..last_offset`` of
        ``topic``-``partition`` at once (explicit mode; each must be delivered and unacknowledged)."""
        if self._closed:
            raise IllegalStateException("the ShareConsumer is closed")
        if ack_type not in _ACK_TYPES:
            raise ValueError(f"acknowledge type {ack_type!r} is not one of ACCEPT, RELEASE, REJECT, RENEW")
        if last_offset < first_offset:
            raise ValueError(f"last_offset {last_offset} is below first_offset {first_offset}")
        with self._ack_lock:
            self._acks.acknowledge_range(TopicPartition(topic, int(partition)), first_offset, last_offset, ack_type)

    def set_acknowledgement_commit_callback(self, callback: CommitCallback | None) -> None:
        """``callback(offsets: {TopicPartition: {offset}}, exception or None)`` per partition result."""
        self._callback = callback

    def acquisition_lock_timeout_ms(self) -> int | None:
        """The record lock duration the broker last reported (None before the first fetch)."""
        return self._requests.lock_timeout_ms

    def wakeup(self) -> None:
        """Make a blocking ``poll`` (or the next one) raise WakeupException. Any thread."""
        self._wakeup = True
        loop, event = self._loop, self._event
        if loop is not None and event is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:
                pass

    def metrics(self) -> dict[str, float]:
        """Kafka's consumer-share metrics by name (consumer-share-metrics, -coordinator-metrics,
        -fetch-manager-metrics)."""
        now = now_ms()
        s = self._sensors
        poll_interval, poll_idle, hb = s["poll-interval"], s["poll-idle"], s["heartbeat"]
        return {
            "last-poll-seconds-ago": (now - self._last_poll_ms) / 1000 if self._last_poll_ms is not None else -1.0,
            "time-between-poll-avg": poll_interval.avg(now),
            "time-between-poll-max": poll_interval.max(now),
            "poll-idle-ratio-avg": poll_idle.avg(now),
            "heartbeat-response-time-max": hb.max(now),
            "heartbeat-rate": hb.rate(now),
            "heartbeat-total": float(hb.count),
            "last-heartbeat-seconds-ago": ((now - self._last_heartbeat_ms) / 1000
                                           if self._last_heartbeat_ms is not None else -1.0),
            "rebalance-total": float(s["rebalance"].count),
            "rebalance-rate-per-hour": s["rebalance"].rate(now) * 3600,
            "fetch-size-avg": s["fetch-size"].avg(now),
            "fetch-size-max": s["fetch-size"].max(now),
            "records-per-request-avg": s["fetch-records"].avg(now),
            "records-per-request-max": s["fetch-records"].max(now),
            "fetch-latency-avg": s["fetch-latency"].avg(now),
            "fetch-latency-max": s["fetch-latency"].max(now),
            "fetch-rate": s["fetch-latency"].rate(now),
            "fetch-total": float(s["fetch-latency"].count),
            "bytes-consumed-rate": s["fetch-size"].value_rate(now),
            "bytes-consumed-total": float(self._bytes_consumed),
            "records-consumed-rate": s["fetch-records"].value_rate(now),
            "records-consumed-total": float(self._records_consumed),
            "acknowledgements-send-rate": s["ack-send"].value_rate(now),
            "acknowledgements-send-total": s["ack-send"].total,
            "acknowledgements-error-rate": s["ack-error"].value_rate(now),
            "acknowledgements-error-total": s["ack-error"].total,
        }

    # ------------------------------------------------------------------ async methods

    async def poll(self, timeout: float) -> list[Record]:
        """Records acquired for this member, waiting up to ``timeout`` seconds for some."""
        try:
            return await self._poll(timeout)
        finally:
            self._fire_callbacks()

    async def poll_batches(self, timeout: float) -> list[AcquiredBatches]:
        """quafka extension: as ``poll``, but the acquired records come undecoded, one
        ``AcquiredBatches`` per partition (explicit mode; acknowledge with ``acknowledge_range``)."""
        try:
            return await self._poll(timeout, raw=True)
        finally:
            self._fire_callbacks()

    async def commit_sync(self, timeout: float | None = None) -> dict[TopicPartition, KafkaException | None]:
        """Send the pending acknowledgements and wait: ``{partition: None or the exception}``."""
        try:
            return await self._commit_sync(timeout)
        finally:
            self._fire_callbacks()

    async def commit_async(self) -> None:
        """Send the pending acknowledgements without waiting; results reach the callback."""
        try:
            await self._commit_async()
        finally:
            self._fire_callbacks()

    async def close(self, timeout: float | None = None) -> None:
        """Commit what explicit mode acknowledged, release the rest, leave the group, disconnect."""
        try:
            await self._close(timeout)
        finally:
            self._fire_callbacks()


class ShareConsumer(SyncClient):
    """The blocking ShareConsumer: the same object as AsyncShareConsumer, driven from a private
    event loop thread. Use ``with``; see the module docstring."""

    ASYNC = AsyncShareConsumer

    def __init__(self, config: Mapping[str, Any], key_deserializer: Deserializer | None = None,
                 value_deserializer: Deserializer | None = None) -> None:
        self._async = AsyncShareConsumer(config, key_deserializer, value_deserializer)
        self.config = self._async.config
        from ._sync import LoopThread

        self._loop = LoopThread("quafka-ShareConsumer")

    async def _on_loop(self, fn, *args):
        return fn(*args)

    def subscribe(self, topics: Iterable[str]) -> None:
        topics = [topics] if isinstance(topics, str) else list(topics)
        self._run(self._on_loop(self._async.subscribe, topics))

    def unsubscribe(self) -> None:
        self._run(self._on_loop(self._async.unsubscribe))

    def subscription(self) -> set[str]:
        return self._async.subscription()

    def poll(self, timeout: float) -> list[Record]:
        try:
            return self._run(self._async._poll(timeout))
        finally:
            self._async._fire_callbacks()

    def poll_batches(self, timeout: float) -> list[AcquiredBatches]:
        try:
            return self._run(self._async._poll(timeout, raw=True))
        finally:
            self._async._fire_callbacks()

    def acknowledge(self, record_or_topic: Record | str, type_or_partition: Any = AcknowledgeType.ACCEPT,
                    offset: int | None = None, ack_type: int | None = None) -> None:
        self._async.acknowledge(record_or_topic, type_or_partition, offset, ack_type)

    def acknowledge_range(self, topic: str, partition: int, first_offset: int, last_offset: int,
                          ack_type: int = AcknowledgeType.ACCEPT) -> None:
        self._async.acknowledge_range(topic, partition, first_offset, last_offset, ack_type)

    def commit_sync(self, timeout: float | None = None) -> dict[TopicPartition, KafkaException | None]:
        try:
            return self._run(self._async._commit_sync(timeout))
        finally:
            self._async._fire_callbacks()

    def commit_async(self) -> None:
        try:
            self._run(self._async._commit_async())
        finally:
            self._async._fire_callbacks()

    def set_acknowledgement_commit_callback(self, callback: CommitCallback | None) -> None:
        self._async.set_acknowledgement_commit_callback(callback)

    def acquisition_lock_timeout_ms(self) -> int | None:
        return self._async.acquisition_lock_timeout_ms()

    def metrics(self) -> dict[str, float]:
        return self._async.metrics()

    def wakeup(self) -> None:
        self._async.wakeup()

    @property
    def member_id(self) -> str:
        return self._async.member_id

    def close(self, timeout: float | None = None) -> None:
        if self._loop.closed:
            return
        try:
            self._loop.run(self._async._close(timeout))
        finally:
            self._async._fire_callbacks()
            self._loop.close()
