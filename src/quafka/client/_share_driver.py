"""The share consumer's I/O driver, on asyncio: the state behind ``AsyncShareConsumer`` (the public
API, ``share_consumer``), its event loop tasks, and the flow of poll, fetch, membership and close.

The protocol decisions live in sans-I/O modules, as in Kafka's Java client: the request manager
(``_share_request_manager``, after ``ShareConsumeRequestManager``: leaders, share sessions per
leader (``_share_session``), which ShareFetch and ShareAcknowledge to send and what their answers
mean, with its single decisions in ``_share_requests``), membership and heartbeats
(``_share_membership``, after ``ShareMembershipManager``), the acknowledgement book
(``_share_acks``), decoding of acquired records (``_share_fetch``) and the config table
(``_share_consumer_config``). This module owns the connections' use, the tasks, locks and clock:
it sends what they ask for and feeds back the answers. Sending acknowledgements and reporting
their outcomes is its base class's (``_share_acknowledger``).

Background work on the event loop: a heartbeat task (joins, keeps the membership, rejoins after
fencing, finds the coordinator again after NOT_COORDINATOR) and one ShareFetch at a time per leader
node. Records are fetched when ``poll`` finds the buffer empty; acknowledgements ride on the next
ShareFetch to the partition's leader, or go in a ShareAcknowledge when no fetch is due (commits).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from quafka.protocol.errors import ErrorCode

from ._metrics import Sensor
from ._share_acknowledger import SHARE_FETCH_KEY, LeaderNode, ShareAcknowledger, now_ms, unexpected_error
from ._share_acks import AckRange, AcknowledgeType, Acknowledgements
from ._share_consumer_config import ACQUIRE_MODES, share_consumer_modes
from ._share_fetch import AcquiredBatches, ShareFetchBuffer
from ._share_membership import COORDINATOR_ERRORS, MemberState, ShareMembership
from ._share_request_manager import ShareConsumeRequestManager, ShareFetchResult, duration_ms
from .errors import (
    AuthenticationException,
    IllegalStateException,
    KafkaConnectionError,
    KafkaException,
    RecordDeserializationException,
    WakeupException,
    error_for_code,
)
from .records import Record, TopicPartition

__all__ = ["Deserializer", "ShareConsumerDriver"]

SHARE_GROUP_HEARTBEAT_KEY = 76

Deserializer = Callable[[bytes | None], Any]


class ShareConsumerDriver(ShareAcknowledger):
    """The I/O driver of a share consumer; see the module docstring. ``AsyncShareConsumer`` is its
    public face."""

    def __init__(self, config: Mapping[str, Any], key_deserializer: Deserializer | None = None,
                 value_deserializer: Deserializer | None = None) -> None:
        super().__init__(config)
        mode, acquire = share_consumer_modes(self.config)
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
        self._coordinator_id: int | None = None
        self._fatal: KafkaException | None = None
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

    # ------------------------------------------------------------------ lifecycle

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

    async def _start_quietly(self) -> None:
        try:
            await self._start()
        except KafkaException:
            pass  # the next poll() or commit starts again and raises what it meets

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

    # ------------------------------------------------------------------ poll

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
            now = now_ms()
            if self._last_poll_ms is not None:
                between = now - self._last_poll_ms
                self._sensors["poll-interval"].record(between, now)
                if self._poll_ended_ms is not None and between > 0:  # share of the time spent inside poll
                    self._sensors["poll-idle"].record((self._poll_ended_ms - self._last_poll_ms) / between, now)
            self._last_poll_ms = now
            try:
                return await self._poll_locked(timeout)
            finally:
                self._poll_ended_ms = now_ms()

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
                acks = self._take_pending() if in_flight and not sent and self._acks.has_pending() else {}
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

    # ------------------------------------------------------------------ fetches

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
                acks = self._take_pending(tps)
            if acks:
                self._spawn(self._commit(acks, time.monotonic() + self.config["default.api.timeout.ms"] / 1000))

    def _take_acks(self, rides) -> dict[TopicPartition, list[AckRange]]:
        with self._ack_lock:
            return self._take_pending({tp for tp in self._acks.pending_partitions() if rides(tp)})

    async def _fetch(self, node: LeaderNode) -> None:
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
                    # fractional milliseconds, as Kafka's fetch-latency (a fetch often takes less than 1 ms)
                    self._sensors["fetch-latency"].record((time.monotonic() - started) * 1000.0, now_ms())
                    result = requests.on_fetch_response(request, response)
                except Exception as exc:  # noqa: BLE001 - a KafkaException, or logged by unexpected_error
                    # not only a lost connection or a timeout: an answer the client cannot make sense
                    # of fails the fetch too, so that the acknowledgements riding on it get an outcome
                    result = requests.on_fetch_failed(request, unexpected_error(f"ShareFetch to node {node.node_id}",
                                                                                exc))
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
        self._ack_outcomes(acks, result.ack_outcomes)  # first: nothing below may keep them from their outcome
        now = now_ms()
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
        if not result.back_off:
            self._bytes_consumed += result.bytes_count
            self._sensors["fetch-size"].record(result.bytes_count, now)
            self._sensors["fetch-records"].record(result.records_count, now)

    async def _refresh_metadata(self) -> None:
        if self._cluster is None or self._closed:
            return
        self._requests.metadata_stale = False
        try:
            topics = sorted(self._membership.subscription | {tp.topic for tp in self._requests.assigned})
            await self._cluster.refresh_metadata(topics or None)
            self._metadata_ms = now_ms()
            self._requests.on_metadata()
        except AuthenticationException as exc:  # fatal, as for a fetch (on_fetch_failed)
            self._fatal = self._fatal or exc
            self._signal()
        except KafkaException:
            self._requests.metadata_stale = True

    # ------------------------------------------------------------------ membership

    async def _heartbeat_loop(self) -> None:
        assert self._heartbeat_wake is not None
        while not self._closed:
            now = now_ms()
            if self._membership.heartbeat_due(now):
                await self._heartbeat()
                continue
            if self._requests.metadata_stale or now - self._metadata_ms > self.config["metadata.max.age.ms"]:
                await self._refresh_metadata()
            due = self._membership.next_due_ms()
            self._heartbeat_wake.clear()
            try:
                wait_s = None if due is None else max(due - now_ms(), 0) / 1000
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
                m.on_failure(now_ms())
            else:
                self._fatal = exc
                m.on_response(exc.code or ErrorCode.unknown_server_error, exc.message, -1, 0, None, now_ms())
                self._signal()
            return
        now = now_ms()
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

    # ------------------------------------------------------------------ close

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
        await asyncio.sleep(0)  # the done callbacks of the cancelled requests report their outcomes first
        self._settle_abandoned()
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
                # the consumer's own GAP/REJECT/RELEASE join them; a pending RENEW is moot (it
                # fails: the records are released with the session).
                self._acks.settle_failed()
                taken = self._take_pending()
            acks = {tp: kept for tp, ranges in taken.items()
                    if (kept := [r for r in ranges if r[2] != AcknowledgeType.RENEW])}
            moot = {tp: renews for tp, ranges in taken.items()
                    if (renews := [r for r in ranges if r[2] == AcknowledgeType.RENEW])}
            self._ack_outcomes(moot, {tp: KafkaException(
                f"RENEW of {tp.topic}-{tp.partition} not sent: the consumer is closing, its share sessions "
                f"release the records") for tp in moot})
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
                self._membership.unsubscribe(now_ms())
                if self._membership.state is MemberState.LEAVING:
                    await self._heartbeat()
