"""ShareConsumer / AsyncShareConsumer: consume a share group as Kafka 4.2+'s KafkaShareConsumer does.

``AsyncShareConsumer`` is the asyncio consumer; ``ShareConsumer`` drives the same object from a
private event loop thread. The protocol decisions live in sans-I/O modules, as in Kafka's Java
client: the request manager (``_share_request_manager``, after ``ShareConsumeRequestManager``:
leaders, share sessions per leader (``_share_session``), which ShareFetch and ShareAcknowledge to
send and what their answers mean, with its single decisions in ``_share_requests``), membership
and heartbeats (``_share_membership``, after ``ShareMembershipManager``), the acknowledgement book
(``_share_acks``), decoding of acquired records (``_share_fetch``) and the config table
(``_share_consumer_config``). This module is the I/O driver: it owns the connections, tasks, locks
and clock, sends what they ask for and feeds back the answers.

Background work on the event loop: a heartbeat task (joins, keeps the membership, rejoins after
fencing, finds the coordinator again after NOT_COORDINATOR) and one ShareFetch at a time per leader
node. Records are fetched when ``poll`` finds the buffer empty; acknowledgements ride on the next
ShareFetch to the partition's leader, or go in a ShareAcknowledge when no fetch is due (commits).
Every acknowledgement's outcome reaches the acknowledgement commit callback, which runs on the
application's thread inside a later ``poll``, ``commit_sync``, ``commit_async`` or ``close``.

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
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from quafka.protocol.errors import ErrorCode

from ._base import AsyncClient, SyncClient
from ._cluster import BrokerInfo
from ._share_consumer_config import _CONSTRUCTOR_ONLY, ACQUIRE_MODES, REJECTED_CONFIGS, SHARE_CONSUMER_CONFIG
from ._metrics import Sensor
from ._share_acks import AckRange, AcknowledgeType, Acknowledgements, count_offsets
from ._share_fetch import AcquiredBatches, ShareFetchBuffer
from ._share_membership import COORDINATOR_ERRORS, MemberState, ShareMembership
from ._share_request_manager import ShareConsumeRequestManager, ShareFetchResult, duration_ms
from ._share_requests import commit_retries, retry_backoff_ms
from .errors import (
    ConfigException,
    IllegalStateException,
    KafkaConnectionError,
    KafkaException,
    KafkaTimeoutError,
    RecordDeserializationException,
    WakeupException,
    error_for_code,
)
from .records import Record, TopicPartition

__all__ = ["AcknowledgeType", "AsyncShareConsumer", "SHARE_CONSUMER_CONFIG", "ShareConsumer"]

SHARE_GROUP_HEARTBEAT_KEY = 76
SHARE_FETCH_KEY = 78
SHARE_ACKNOWLEDGE_KEY = 79
_ACK_TYPES = frozenset(AcknowledgeType)

Deserializer = Callable[[bytes | None], Any]
CommitCallback = Callable[[dict[TopicPartition, set[int]], KafkaException | None], None]


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class _Node:
    """One leader node's I/O: the lock that keeps one request of its share session in flight, and
    the ShareFetch task out to it (the session itself is the request manager's)."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.lock = asyncio.Lock()
        self.fetch_task: asyncio.Task | None = None


class AsyncShareConsumer(AsyncClient):
    """A share-group consumer on asyncio; see the module docstring. Use ``async with``."""

    CONFIG = SHARE_CONSUMER_CONFIG
    NAME = "ShareConsumer"

    def __init__(self, config: Mapping[str, Any], key_deserializer: Deserializer | None = None,
                 value_deserializer: Deserializer | None = None) -> None:
        for name in config:
            if name in REJECTED_CONFIGS:
                raise ConfigException(name, f"{name} is not supported by a share consumer: {REJECTED_CONFIGS[name]}")
            if name in _CONSTRUCTOR_ONLY:
                raise ConfigException(name, f"{name} is not a configuration key here: pass a callable as "
                                            f"{_CONSTRUCTOR_ONLY[name]}= to the constructor")
        super().__init__(config)
        mode = self.config["share.acknowledgement.mode"].lower()
        if mode not in ("implicit", "explicit"):
            raise ConfigException("share.acknowledgement.mode", f"share.acknowledgement.mode={mode!r} is not one of "
                                                                "implicit, explicit")
        acquire = self.config["share.acquire.mode"].lower()
        if acquire not in ACQUIRE_MODES:
            raise ConfigException("share.acquire.mode", f"share.acquire.mode={acquire!r} is not one of "
                                                        f"{', '.join(ACQUIRE_MODES)}")
        if self.config["security.protocol"].upper() != "PLAINTEXT":
            raise ConfigException("security.protocol", f"security.protocol={self.config['security.protocol']!r} is "
                                                        "not supported: quafka's client speaks PLAINTEXT only")
        self.config["share.acknowledgement.mode"], self.config["share.acquire.mode"] = mode, acquire
        self.explicit = mode == "explicit"
        self.record_limit = acquire == "record_limit"
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self.member_id = str(uuid.uuid4())
        self._membership = ShareMembership(self.config["group.id"], self.member_id, self.config["client.rack"],
                                           self.config["retry.backoff.ms"], self.config["retry.backoff.max.ms"])
        self._acks = Acknowledgements(self.explicit)
        self._ack_lock = threading.Lock()
        self._buffer = ShareFetchBuffer()
        self._raw: bool | None = None  # poll_batches() (True) or poll() (False), fixed by the first call
        cfg = self.config
        self._requests = ShareConsumeRequestManager(
            group_id=cfg["group.id"], member_id=self.member_id, topics={}, record_limit=self.record_limit,
            check_crcs=cfg["check.crcs"], max_wait_ms=cfg["fetch.max.wait.ms"], min_bytes=cfg["fetch.min.bytes"],
            max_bytes=cfg["fetch.max.bytes"], max_records=cfg["max.poll.records"],
            acquire_mode=ACQUIRE_MODES[acquire])
        self._nodes: dict[int, _Node] = {}
        self._coordinator_id: int | None = None
        self._fatal: KafkaException | None = None
        # acknowledgement results as ranges; the callback's offset sets are made only if there is one
        self._completions: deque[tuple[dict[TopicPartition, list[AckRange]], KafkaException | None]] = deque()
        self._callback: CommitCallback | None = None
        self._call_lock: asyncio.Lock | None = None
        self._start_lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None  # data arrived, wakeup, fatal error
        self._heartbeat_wake: asyncio.Event | None = None
        self._heartbeat_task: asyncio.Task | None = None
        self._start_task: asyncio.Future | None = None
        self._tasks: set[asyncio.Task] = set()
        self._wakeup = False
        self._metadata_ms = 0
        self._sensors = {name: Sensor() for name in (
            "poll-interval", "poll-idle", "heartbeat", "fetch-size", "fetch-records", "fetch-latency",
            "ack-send", "ack-error", "rebalance")}
        self._last_poll_ms: int | None = None
        self._last_heartbeat_ms: int | None = None
        self._poll_ended_ms: int | None = None
        self._bytes_consumed = 0
        self._records_consumed = 0

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
        self._membership.subscribe(frozenset(topics), _now_ms())
        self._wake_heartbeat()
        try:  # join now, as Kafka's consumer does on subscribe (else the first poll starts it)
            asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._heartbeat_task is None:
            self._start_task = asyncio.ensure_future(self._start_quietly())

    async def _start_quietly(self) -> None:
        try:
            await self._start()
        except KafkaException:
            pass  # the next poll() or commit starts again and raises what it meets

    def unsubscribe(self) -> None:
        """Leave the group (the next heartbeat says so) and drop the assignment."""
        self._check_usable()
        self._membership.unsubscribe(_now_ms())
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
        now = _now_ms()
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

    # ------------------------------------------------------------------ internals: lifecycle

    def _check_usable(self) -> None:
        if self._closed:
            raise IllegalStateException("the ShareConsumer is closed")

    def _wake_heartbeat(self) -> None:
        if self._heartbeat_wake is not None:
            self._heartbeat_wake.set()

    async def _start(self) -> None:
        self._check_usable()
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._event = asyncio.Event()
            self._heartbeat_wake = asyncio.Event()
            self._call_lock = asyncio.Lock()
            self._start_lock = asyncio.Lock()
        if self._wakeup:
            self._wakeup = False
            raise WakeupException("wakeup() was called")
        if self._heartbeat_task is None:
            async with self._start_lock:  # subscribe()'s start and a poll() may race
                self._requests.topics = (await self._get_cluster()).topics
                if self._heartbeat_task is None:
                    self._heartbeat_task = self._loop.create_task(self._heartbeat_loop(), name="quafka-share-heartbeat")

    def _spawn(self, coro) -> asyncio.Task:
        assert self._loop is not None
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _signal(self) -> None:
        if self._event is not None:
            self._event.set()

    def _raise_pending(self) -> None:
        if self._wakeup:
            self._wakeup = False
            raise WakeupException("wakeup() was called")
        if self._fatal is not None:
            raise self._fatal

    # ------------------------------------------------------------------ internals: poll

    async def _poll(self, timeout: float, raw: bool = False) -> list:
        if timeout is None or timeout < 0:
            raise ValueError(f"poll timeout must be a number of seconds >= 0, got {timeout!r}")
        if self._raw is None:
            if raw and not self.explicit:
                raise IllegalStateException("poll_batches() needs share.acknowledgement.mode=explicit")
            self._raw = self._requests.raw = raw
        elif self._raw != raw:
            used, called = ("poll_batches()", "poll()") if self._raw else ("poll()", "poll_batches()")
            raise IllegalStateException(f"this ShareConsumer uses {used}; {called} cannot be mixed with it")
        await self._start()
        assert self._call_lock is not None and self._event is not None
        async with self._call_lock:
            self._raise_pending()
            if not self._membership.subscription:
                raise IllegalStateException("the ShareConsumer is not subscribed to any topics: call subscribe() first")
            now = _now_ms()
            if self._last_poll_ms is not None:
                between = now - self._last_poll_ms
                self._sensors["poll-interval"].record(between, now)
                if self._poll_ended_ms is not None and between > 0:  # share of the time spent inside poll
                    self._sensors["poll-idle"].record((self._poll_ended_ms - self._last_poll_ms) / between, now)
            self._last_poll_ms = now
            try:
                return await self._poll_locked(timeout)
            finally:
                self._poll_ended_ms = _now_ms()

    async def _poll_locked(self, timeout: float) -> list[Record]:
        assert self._event is not None
        with self._ack_lock:
            if self.explicit:
                missing = self._acks.unacknowledged(limit=5)
                if missing:
                    missing_count = self._acks.unacknowledged_count()
                    shown = ", ".join(f"{tp.topic}-{tp.partition}@{o}" for tp, o in missing)
                    more = f" and {missing_count - 5} more" if missing_count > 5 else ""
                    raise IllegalStateException(
                        f"share.acknowledgement.mode=explicit: {missing_count} records of the previous poll are "
                        f"not acknowledged ({shown}{more}); acknowledge every record before the next poll()")
            else:
                self._acks.accept_delivered()
            self._acks.settle_failed()
            renewing = self._acks.has_pending(renew_only=True)
        deadline = time.monotonic() + timeout
        if renewing:
            await self._commit_pending(deadline=time.monotonic() + self.config["default.api.timeout.ms"] / 1000,
                                       is_renew=True)
        renewed = await self._take_renewed(deadline)
        if renewed:
            return self._deliver(renewed)
        if renewed is not None:  # renewals still unanswered at the deadline: no new records meanwhile
            return []
        self._flush_acks()
        while True:
            records = self._take_raw() if self._raw else self._take_records()
            if records:
                return records
            self._start_fetches()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            self._event.clear()
            if self._buffer:
                continue
            try:
                await asyncio.wait_for(self._event.wait(), remaining)
            except asyncio.TimeoutError:
                pass
            self._raise_pending()

    async def _take_renewed(self, deadline: float) -> list[Record] | None:
        """The renewed records for this poll to return; None when no renewal is outstanding (the
        poll returns fetched records). As Kafka's ShareConsumerImpl.collect: while a RENEW is
        outstanding (ShareFetch.hasRenewals: renewingRecords, e.g. sent by commit_async) the poll
        collects no new records; it returns the renewed ones (takeRenewedRecords) as soon as the
        broker confirms them, or [] if none is confirmed by ``deadline``. Records whose renewal
        fails are dropped (Acknowledgements.on_renew_failed); then the poll goes on fetching."""
        assert self._event is not None
        sent = False
        while True:
            with self._ack_lock:
                renewed = self._acks.take_renewed()
                in_flight = not renewed and self._acks.renewals_in_flight()
                acks = self._acks.take_pending() if in_flight and not sent and self._acks.has_pending() else {}
            if renewed:
                return renewed
            if not in_flight:
                return None
            if acks:  # no ShareFetch goes out meanwhile to carry them
                self._spawn(self._commit(acks, time.monotonic() + self.config["default.api.timeout.ms"] / 1000))
            sent = True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            self._event.clear()  # _ack_outcomes signals each answered renewal
            try:
                await asyncio.wait_for(self._event.wait(), remaining)
            except asyncio.TimeoutError:
                pass
            self._raise_pending()

    def _take_records(self) -> list[Record]:
        records, error = self._buffer.take(self.config["max.poll.records"] if self.record_limit else None)
        if error is not None:
            raise error
        if not records:
            return []
        if self._key_deserializer is not None or self._value_deserializer is not None:
            records = self._deserialize(records)
        return self._deliver(records)

    def _take_raw(self) -> list[AcquiredBatches]:
        """poll_batches: whole partitions, up to max.poll.records acquired offsets (at least one)."""
        limit = self.config["max.poll.records"] if self.record_limit else None
        out: list[AcquiredBatches] = []
        count = 0
        while self._buffer:
            items, _error = self._buffer.take(1)
            if not items:
                break
            item = items[0]
            if out and limit is not None and count + item.count > limit:
                self._buffer.push_front([item])
                break
            out.append(item)
            count += item.count
        with self._ack_lock:
            for item in out:
                self._acks.on_delivered_ranges((item.topic, item.partition), item.acquired)
        self._records_consumed += count
        return out

    def _deserialize(self, records: list[Record]) -> list[Record]:
        key_d, value_d = self._key_deserializer, self._value_deserializer
        out = []
        for i, r in enumerate(records):
            try:
                key = key_d(r.key) if key_d is not None else r.key
                value = value_d(r.value) if value_d is not None else r.value
            except Exception as exc:
                if out:  # hand out what came before; the next poll raises for this record
                    self._buffer.push_front(records[i:])
                    return out
                self._buffer.push_front(records[i + 1 :])
                tp = TopicPartition(r.topic, r.partition)
                with self._ack_lock:
                    self._acks.on_failed(tp, r.offset)
                raise RecordDeserializationException(
                    r.topic, r.partition, r.offset,
                    f"error deserializing the record at {r.topic}-{r.partition} offset {r.offset} "
                    f"({type(exc).__name__}: {exc}); it will be released unless acknowledged "
                    f"with acknowledge(topic, partition, offset, type)") from exc
            out.append(Record(r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, key, value, r.headers,
                              r.leader_epoch, r.delivery_count))
        return out

    def _deliver(self, records: list[Record]) -> list[Record]:
        with self._ack_lock:
            self._acks.on_delivered(records)
        self._records_consumed += len(records)
        return records

    # ------------------------------------------------------------------ internals: fetches

    def _node(self, node_id: int) -> _Node:
        node = self._nodes.get(node_id)
        if node is None:
            node = self._nodes[node_id] = _Node(node_id)
        return node

    def _start_fetches(self) -> None:
        targets = self._requests.fetches_to_start()
        if self._requests.metadata_stale:
            self._spawn(self._refresh_metadata())
        for node_id in targets:
            node = self._node(node_id)
            node.fetch_task = self._spawn(self._fetch(node))

    def _flush_acks(self) -> None:
        """poll(): pending acknowledgements are sent now, except those that the ShareFetch about
        to go to their leader will carry (an open session, no fetch already out, batch_optimized)."""
        with self._ack_lock:
            if not self._acks.has_pending():
                return
            tps = self._acks.pending_partitions()
        tps = self._requests.acks_to_send_now(tps, buffered=bool(self._buffer))
        if tps:
            with self._ack_lock:
                acks = self._acks.take_pending(tps)
            if acks:
                self._spawn(self._commit(acks, time.monotonic() + self.config["default.api.timeout.ms"] / 1000))

    def _take_acks(self, rides) -> dict[TopicPartition, list[AckRange]]:
        with self._ack_lock:
            return self._acks.take_pending({tp for tp in self._acks.pending_partitions() if rides(tp)})

    async def _fetch(self, node: _Node) -> None:
        requests = self._requests
        try:
            async with node.lock:
                request = requests.fetch_request(node.node_id, self._take_acks)
                if request is None:
                    return
                started = time.monotonic()
                try:
                    conn = await self._cluster.connection(node.node_id)
                    response = await conn.call(SHARE_FETCH_KEY, request.values, min_version=1, max_version=2)
                except KafkaException as exc:
                    result = requests.on_fetch_failed(request, exc)
                else:
                    # fractional milliseconds, as Kafka's fetch-latency (a fetch often takes less than 1 ms)
                    self._sensors["fetch-latency"].record((time.monotonic() - started) * 1000.0, _now_ms())
                    result = requests.on_fetch_response(request, response)
                self._apply_fetch_result(request.acks, result)
                if result.back_off:
                    await asyncio.sleep(self.config["retry.backoff.ms"] / 1000)
        finally:
            requests.on_fetch_done(node.node_id)
            self._signal()

    def _apply_fetch_result(self, acks: dict[TopicPartition, list[AckRange]], result: ShareFetchResult) -> None:
        """Carry out what a ShareFetch's answer means: learned brokers, the consumer's own
        acknowledgements, records for the buffer, failures for the next poll, the outcome of the
        acknowledgements that rode on it, metrics."""
        now = _now_ms()
        self._learn_brokers(result.brokers)
        if result.own_acks or result.released:
            with self._ack_lock:
                for tp, own in result.own_acks:
                    self._acks.add_pending(tp, own)
                for tp, ranges in result.released.items():
                    self._acks.add_pending_ranges(tp, ranges)
        for decoded in result.partitions:
            self._buffer.add(decoded)
        for tp, exc in result.failures:
            self._completions.append(({tp: []}, exc))
        if result.fatal is not None:
            self._fatal = result.fatal
        self._ack_outcomes(acks, result.ack_outcomes)
        if not result.back_off:
            self._bytes_consumed += result.bytes_count
            self._sensors["fetch-size"].record(result.bytes_count, now)
            self._sensors["fetch-records"].record(result.records_count, now)

    def _learn_brokers(self, brokers: Iterable[BrokerInfo]) -> None:
        if self._cluster is not None:
            for broker in brokers:
                self._cluster.brokers[broker.node_id] = broker

    async def _refresh_metadata(self) -> None:
        if self._cluster is None or self._closed:
            return
        self._requests.metadata_stale = False
        try:
            topics = sorted(self._membership.subscription | {tp.topic for tp in self._requests.assigned})
            await self._cluster.refresh_metadata(topics or None)
            self._metadata_ms = _now_ms()
            self._requests.on_metadata()
        except KafkaException:
            self._requests.metadata_stale = True

    # ------------------------------------------------------------------ internals: acknowledgements

    def _ack_outcomes(self, acks: Mapping[TopicPartition, list[AckRange]],
                      outcomes: Mapping[TopicPartition, KafkaException | None]) -> None:
        """Record the result of sent acknowledgements: renewals, metrics, the callback's queue."""
        now = _now_ms()
        for tp, ranges in acks.items():
            exc = outcomes.get(tp)
            renewed = [r for r in ranges if r[2] == AcknowledgeType.RENEW]
            if renewed:
                with self._ack_lock:
                    if exc is None:
                        self._acks.on_renewed(tp, renewed)
                    else:
                        self._acks.on_renew_failed(tp, renewed)
                self._signal()  # a poll may be waiting for this renewal (_take_renewed)
            count = count_offsets(ranges)
            self._sensors["ack-send"].record(count, now)
            if exc is not None:
                self._sensors["ack-error"].record(count, now)
            self._completions.append(({tp: ranges}, exc))

    def _fire_callbacks(self) -> None:
        """Run the acknowledgement commit callback for every result so far (the caller's thread)."""
        callback = self._callback
        while self._completions:
            acks, exc = self._completions.popleft()
            if callback is not None and any(acks.values()):
                callback({tp: {o for first, last, _ in ranges for o in range(first, last + 1)}
                          for tp, ranges in acks.items()}, exc)

    async def _commit_sync(self, timeout: float | None) -> dict[TopicPartition, KafkaException | None]:
        await self._start()
        assert self._call_lock is not None
        async with self._call_lock:
            self._raise_pending()
            seconds = self.config["default.api.timeout.ms"] / 1000 if timeout is None else timeout
            return await self._commit_pending(deadline=time.monotonic() + seconds)

    async def _commit_async(self) -> None:
        await self._start()
        assert self._call_lock is not None
        async with self._call_lock:
            self._raise_pending()
            acks = self._take_for_commit()
            if acks:
                self._spawn(self._commit(acks, time.monotonic() + self.config["default.api.timeout.ms"] / 1000))

    def _take_for_commit(self) -> dict[TopicPartition, list[AckRange]]:
        with self._ack_lock:
            if not self.explicit:
                self._acks.accept_delivered()
            self._acks.settle_failed()
            return self._acks.take_pending()

    async def _commit_pending(self, deadline: float,
                              is_renew: bool | None = None) -> dict[TopicPartition, KafkaException | None]:
        acks = self._take_for_commit()
        if not acks:
            return {}
        return await self._commit(acks, deadline, is_renew=is_renew)

    async def _commit(self, acks: dict[TopicPartition, list[AckRange]], deadline: float,
                      is_renew: bool | None = None) -> dict[TopicPartition, KafkaException | None]:
        """Send acknowledgements to each partition's leader with ShareAcknowledge, retrying
        retriable failures (a moved leader, a dropped connection) with exponential backoff until
        ``deadline``. A request still unanswered at the deadline gives KafkaTimeoutError here; its
        real outcome reaches the acknowledgement commit callback when it comes."""
        results: dict[TopicPartition, KafkaException | None] = {}
        remaining = dict(acks)
        attempt = 0
        while remaining:
            by_leader, outcomes = self._requests.commit_targets(remaining)
            sends: dict[asyncio.Task, dict[TopicPartition, list[AckRange]]] = {}
            for node_id, tps in by_leader.items():
                part = {tp: remaining[tp] for tp in tps}
                renew = any(r[2] == AcknowledgeType.RENEW for ranges in part.values() for r in ranges)
                task = self._spawn(self._acknowledge_on(self._node(node_id), part,
                                                        renew if is_renew is None else is_renew))
                sends[task] = part
            done, late = await asyncio.wait(sends, timeout=max(deadline - time.monotonic(), 0)) if sends else ((), ())
            for task in done:
                outcomes.update(self._send_result(task, sends[task]))
            for task in late:
                part = sends[task]
                for tp in part:
                    results[tp] = KafkaTimeoutError(
                        f"acknowledgements of {tp.topic}-{tp.partition} were not confirmed in time; the "
                        f"acknowledgement commit callback gets their outcome")
                task.add_done_callback(lambda t, part=part: self._ack_outcomes(part, self._send_result(t, part)))
            attempt += 1
            backoff = retry_backoff_ms(attempt, self.config["retry.backoff.ms"], self.config["retry.backoff.max.ms"]) / 1000
            retry, final = commit_retries(outcomes, now_ms=time.monotonic() * 1000, backoff_ms=backoff * 1000,
                                          deadline_ms=deadline * 1000, closing=self._closed_hard)
            results.update(final)
            finished = {tp: remaining[tp] for tp in outcomes if tp not in retry}
            self._ack_outcomes(finished, results)
            remaining = {tp: remaining[tp] for tp in retry}
            if remaining:
                await asyncio.sleep(backoff)
                await self._refresh_metadata()
        return results

    @staticmethod
    def _send_result(task: asyncio.Task, part: Mapping[TopicPartition, Any]) -> dict[TopicPartition, KafkaException | None]:
        if task.cancelled():
            return {tp: KafkaConnectionError("the acknowledgement request was abandoned (consumer closing)")
                    for tp in part}
        exc = task.exception()
        if exc is not None:
            error = exc if isinstance(exc, KafkaException) else KafkaException(f"{type(exc).__name__}: {exc}")
            return {tp: error for tp in part}
        return task.result()

    _closed_hard = False

    async def _acknowledge_on(self, node: _Node, acks: dict[TopicPartition, list[AckRange]], is_renew: bool,
                              closing: bool = False) -> dict[TopicPartition, KafkaException | None]:
        node_id, requests = node.node_id, self._requests
        async with node.lock:
            try:
                conn = await self._cluster.connection(node_id)
                opening = requests.open_session_request(node_id)
                if opening is not None:  # open an empty session to carry the acknowledgements
                    response = await conn.call(SHARE_FETCH_KEY, opening, min_version=1, max_version=2)
                    exc = requests.on_open_session_response(node_id, response)
                    if exc is not None:
                        return {tp: exc for tp in acks}
                values = requests.acknowledge_request(node_id, acks, is_renew=is_renew, closing=closing)
                response = await conn.call(SHARE_ACKNOWLEDGE_KEY, values, min_version=1, max_version=2)
            except KafkaException as exc:
                requests.on_request_failed(node_id)
                return {tp: exc for tp in acks}
            result = requests.on_acknowledge_response(node_id, acks, response)
            self._learn_brokers(result.brokers)
            return result.outcomes

    # ------------------------------------------------------------------ internals: membership

    async def _heartbeat_loop(self) -> None:
        assert self._heartbeat_wake is not None
        while not self._closed:
            now = _now_ms()
            if self._membership.heartbeat_due(now):
                await self._heartbeat()
                continue
            if self._requests.metadata_stale or now - self._metadata_ms > self.config["metadata.max.age.ms"]:
                await self._refresh_metadata()
            due = self._membership.next_due_ms()
            self._heartbeat_wake.clear()
            try:
                wait_s = None if due is None else max(due - _now_ms(), 0) / 1000
                await asyncio.wait_for(self._heartbeat_wake.wait(), wait_s)
            except asyncio.TimeoutError:
                pass

    async def _heartbeat(self) -> None:
        m = self._membership
        cluster = await self._get_cluster()
        started = time.monotonic()
        try:
            if self._coordinator_id is None:
                self._coordinator_id = await cluster.find_coordinator(self.config["group.id"])
            conn = await cluster.connection(self._coordinator_id)
            response = await conn.call(SHARE_GROUP_HEARTBEAT_KEY, m.heartbeat_values(), min_version=1, max_version=1)
        except KafkaException as exc:
            if isinstance(exc, KafkaConnectionError) or exc.code in COORDINATOR_ERRORS or exc.retriable:
                self._coordinator_id = None
                m.on_failure(_now_ms())
            else:
                self._fatal = exc
                m.on_response(exc.code or ErrorCode.unknown_server_error, exc.message, -1, 0, None, _now_ms())
                self._signal()
            return
        now = _now_ms()
        self._sensors["heartbeat"].record((time.monotonic() - started) * 1000.0, now)
        self._last_heartbeat_ms = now
        error = ErrorCode(response.error_code)
        if error in COORDINATOR_ERRORS:
            self._coordinator_id = None
        assignment = None
        if response.assignment is not None:
            assignment = {tp.topic_id: frozenset(tp.partitions) for tp in response.assignment.topic_partitions}
        changed = m.on_response(error, response.error_message, response.member_epoch,
                                duration_ms(response.heartbeat_interval), assignment, now)
        if m.state is MemberState.FATAL and m.fatal_error is not None and self._fatal is None:
            code, message = m.fatal_error
            self._fatal = error_for_code(code, f"ShareGroupHeartbeat for group {self.config['group.id']!r}"
                                               + (f" ({message})" if message else ""))
            self._signal()
        if changed:
            self._sensors["rebalance"].record(1, now)
            await self._apply_assignment(m.assignment)

    async def _apply_assignment(self, assignment: dict) -> None:
        resolved, complete = self._requests.resolve_assignment(assignment)
        if not complete:
            await self._refresh_metadata()
            resolved, complete = self._requests.resolve_assignment(assignment)
        if not complete and self._cluster is not None:  # a topic created since: look at every topic
            try:
                await self._cluster.refresh_metadata(None)
            except KafkaException:
                pass
            resolved, complete = self._requests.resolve_assignment(assignment)
        self._set_assignment(resolved)
        self._signal()

    def _set_assignment(self, resolved: dict[TopicPartition, tuple[uuid.UUID, int]]) -> None:
        revoked = self._requests.set_assignment(resolved)
        if revoked:
            dropped = self._buffer.drop(revoked)
            with self._ack_lock:
                for tp, offsets in dropped.items():
                    self._acks.add_pending_offsets(tp, offsets, AcknowledgeType.RELEASE)

    # ------------------------------------------------------------------ internals: close

    async def _close(self, timeout: float | None) -> None:
        if self._closed:
            return
        seconds = self.config["default.api.timeout.ms"] / 1000 if timeout is None else timeout
        deadline = time.monotonic() + seconds
        if self._loop is not None and self._cluster is not None:
            assert self._call_lock is not None
            try:
                await asyncio.wait_for(self._close_sessions_and_leave(deadline), max(deadline - time.monotonic(), 0))
            except (asyncio.TimeoutError, KafkaException):
                pass
        self._closed = True
        self._closed_hard = True
        tasks = [t for t in (self._start_task, self._heartbeat_task, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        await super().close()

    async def _close_sessions_and_leave(self, deadline: float) -> None:
        assert self._call_lock is not None
        async with self._call_lock:
            # one request per session: a parked ShareFetch is answered (within fetch.max.wait.ms)
            # before the session is closed; its acknowledgements' outcomes reach the callback and
            # what it acquired is released when the session closes
            fetches = [n.fetch_task for n in self._nodes.values() if n.fetch_task is not None and not n.fetch_task.done()]
            if fetches:
                await asyncio.wait(fetches, timeout=max(deadline - time.monotonic(), 0))
            with self._ack_lock:
                # explicit: what the application acknowledged is committed; implicit: the last
                # poll's records are released, not accepted. Either way only failed records and
                # the consumer's own GAP/REJECT/RELEASE join them; a pending RENEW is moot.
                self._acks.settle_failed()
                acks = {tp: kept for tp, ranges in self._acks.take_pending().items()
                        if (kept := [r for r in ranges if r[2] != AcknowledgeType.RENEW])}
            self._buffer.drop(self._buffer.partitions())  # released with the session
            by_leader, outcomes = self._requests.commit_targets(acks)
            node_ids = set(by_leader) | set(self._requests.open_sessions())
            results = await asyncio.gather(*(
                self._acknowledge_on(self._node(node_id), {tp: acks[tp] for tp in by_leader.get(node_id, ())},
                                     False, closing=True) for node_id in node_ids), return_exceptions=True)
            for part in results:
                if isinstance(part, dict):
                    outcomes.update(part)
            self._ack_outcomes(acks, outcomes)
            if self._membership.state in (MemberState.STABLE, MemberState.JOINING):
                self._membership.unsubscribe(_now_ms())
                if self._membership.state is MemberState.LEAVING:
                    await self._heartbeat()


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
