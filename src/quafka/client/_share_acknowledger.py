"""The share consumer's acknowledgement sending and outcomes, on asyncio: ShareAcknowledge to each
partition's leader with retries until the commit deadline (``commit_sync``, ``commit_async``, and
acknowledgements that no ShareFetch is about to carry), and the outcome of every acknowledgement
sent, by whatever request, queued for the acknowledgement commit callback (run on the
application's thread by ``_fire_callbacks``) and fed back to the acknowledgement book (renewals).

A base class of the driver (``_share_driver.ShareConsumerDriver``), which sets up the state it
shares (the request manager, the acknowledgement book and its lock, the leader nodes, the sensors)
and provides the loop helpers (``_spawn``, ``_signal``, ``_start``, ``_refresh_metadata``). After
Kafka's ShareConsumeRequestManager (AcknowledgeRequestState, ResultHandler): the request decisions
themselves are the request manager's (``_share_request_manager``) and ``_share_requests``'.

Every acknowledgement handed to the client gets exactly one outcome. When it leaves the book for
a request (``_take_pending``) it is entered in the unsettled ledger; ``_ack_outcomes`` reports it
and takes it out, and refuses (logs) a second report. Success only when the leader's response
names the partition with error code NONE (the request manager fails the partitions a response
omits, as Kafka's ShareConsumeRequestManager.handleShareFetchSuccess and
AcknowledgeRequestState.processingComplete do with InvalidRecordStateException); a request that
fails with an error that is not a KafkaException fails its acknowledgements with
UNKNOWN_SERVER_ERROR (as handleShareFetchFailure does); and what is still unsettled when ``close``
gives up (its deadline cancelled the requests) is reported with KafkaTimeoutError
(REQUEST_TIMED_OUT, as AcknowledgeRequestState.handleAcknowledgeTimedOut reports acknowledgements
whose deadline passed) by ``_settle_abandoned``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from quafka.protocol.errors import ErrorCode

from ._base import AsyncClient
from ._cluster import BrokerInfo
from ._metrics import Sensor
from ._share_acks import AckRange, AcknowledgeType, Acknowledgements, count_offsets
from ._share_request_manager import ShareConsumeRequestManager
from ._share_requests import commit_retries, retry_backoff_ms
from .errors import KafkaConnectionError, KafkaException, KafkaTimeoutError, error_for_code
from .records import TopicPartition

__all__ = ["CommitCallback", "LeaderNode", "SHARE_ACKNOWLEDGE_KEY", "SHARE_FETCH_KEY", "ShareAcknowledger",
           "now_ms", "unexpected_error"]

logger = logging.getLogger("quafka.client.share_consumer")

SHARE_FETCH_KEY = 78
SHARE_ACKNOWLEDGE_KEY = 79

CommitCallback = Callable[[dict[TopicPartition, set[int]], KafkaException | None], None]
Acks = dict[TopicPartition, list[AckRange]]
Outcomes = dict[TopicPartition, KafkaException | None]


def now_ms() -> int:
    return int(time.monotonic() * 1000)


def unexpected_error(what: str, exc: BaseException) -> KafkaException:
    """The KafkaException that fails the acknowledgements of a request which failed with an error
    that is not a KafkaException (a bug, a response the client cannot make sense of): logged with
    its traceback, reported as UNKNOWN_SERVER_ERROR, as Kafka's
    ShareConsumeRequestManager.handleShareFetchFailure does for a non-KafkaException."""
    if isinstance(exc, KafkaException):
        return exc
    logger.warning("%s failed: %s: %s", what, type(exc).__name__, exc, exc_info=exc)
    return KafkaException(f"{what} failed: {type(exc).__name__}: {exc}", ErrorCode.unknown_server_error)


class LeaderNode:
    """One leader node's I/O: the lock that keeps one request of its share session in flight, and
    the ShareFetch task out to it (the session itself is the request manager's)."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.lock = asyncio.Lock()
        self.fetch_task: asyncio.Task | None = None


class ShareAcknowledger(AsyncClient):
    """Sends acknowledgements and reports their outcomes; see the module docstring."""

    # set up by the driver's __init__
    explicit: bool
    _requests: ShareConsumeRequestManager
    _acks: Acknowledgements
    _ack_lock: threading.Lock
    _sensors: dict[str, Sensor]
    _call_lock: asyncio.Lock | None

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        # acknowledgement results as ranges; the callback's offset sets are made only if there is one
        self._completions: deque[tuple[Acks, KafkaException | None]] = deque()
        self._callback: CommitCallback | None = None
        self._nodes: dict[int, LeaderNode] = {}
        self._closed_hard = False
        # acknowledgements taken from the book for a request, by partition, until their outcome
        self._unsettled: dict[TopicPartition, list[AckRange]] = {}

    def _node(self, node_id: int) -> LeaderNode:
        node = self._nodes.get(node_id)
        if node is None:
            node = self._nodes[node_id] = LeaderNode(node_id)
        return node

    # ------------------------------------------------------------------ provided by the driver

    def _spawn(self, coro) -> asyncio.Task:
        raise NotImplementedError

    def _signal(self) -> None:
        raise NotImplementedError

    def _raise_pending(self) -> None:
        raise NotImplementedError

    async def _start(self) -> None:
        raise NotImplementedError

    async def _refresh_metadata(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ acknowledgements

    def _learn_brokers(self, brokers: Iterable[BrokerInfo]) -> None:
        if self._cluster is not None:
            for broker in brokers:
                self._cluster.brokers[broker.node_id] = broker

    def _take_pending(self, partitions: set[TopicPartition] | None = None) -> Acks:
        """Take pending acknowledgements from the book to send (the caller holds ``_ack_lock``);
        they are unsettled until ``_ack_outcomes`` reports them."""
        acks = self._acks.take_pending(partitions)
        for tp, ranges in acks.items():
            self._unsettled.setdefault(tp, []).extend(ranges)
        return acks

    def _ack_outcomes(self, acks: Mapping[TopicPartition, list[AckRange]],
                      outcomes: Mapping[TopicPartition, KafkaException | None]) -> None:
        """Record the outcome of sent acknowledgements: renewals, metrics, the callback's queue.
        A partition missing from ``outcomes`` failed (its request said nothing about it); ranges
        that already had their outcome are not reported again."""
        now = now_ms()
        for tp, ranges in acks.items():
            ranges = self._settle(tp, ranges)
            if not ranges:
                continue
            if tp in outcomes:
                exc = outcomes[tp]
            else:
                exc = error_for_code(ErrorCode.invalid_record_state, f"acknowledging {tp.topic}-{tp.partition}: "
                                                                     "no outcome was received")
                logger.warning("acknowledgements of %s-%s got no outcome from their request", tp.topic, tp.partition)
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

    def _settle(self, tp: TopicPartition, ranges: list[AckRange]) -> list[AckRange]:
        """The ``ranges`` of ``tp`` still unsettled, now settled; a range reported before is left
        out (and logged: it would be a second outcome)."""
        unsettled = self._unsettled.get(tp)
        kept = []
        for r in ranges:
            if unsettled and r in unsettled:
                unsettled.remove(r)
                kept.append(r)
            else:
                logger.error("a second outcome for the acknowledgement %s of %s-%s was dropped", r, tp.topic,
                             tp.partition)
        if unsettled is not None and not unsettled:
            del self._unsettled[tp]
        return kept

    def _settle_abandoned(self) -> None:
        """At the end of ``close``: acknowledgements still in the book (never sent) or unsettled
        (their requests were cancelled by the close deadline) fail with KafkaTimeoutError."""
        with self._ack_lock:
            self._take_pending()
        abandoned = {tp: list(ranges) for tp, ranges in self._unsettled.items()}
        self._ack_outcomes(abandoned, {tp: KafkaTimeoutError(
            f"acknowledgements of {tp.topic}-{tp.partition} had no answer when the consumer closed (close "
            f"timeout): whether the broker applied them is unknown") for tp in abandoned})

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
            return self._take_pending()

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
        try:
            return await self._commit_rounds(remaining, results, deadline, is_renew)
        except Exception as exc:  # noqa: BLE001 - reported as each partition's outcome, logged
            error = unexpected_error("ShareAcknowledge", exc)
            self._ack_outcomes(remaining, {tp: error for tp in remaining})
            results.update({tp: error for tp in remaining if tp not in results})
            return results

    async def _commit_rounds(self, remaining: Acks, results: Outcomes, deadline: float,
                             is_renew: bool | None) -> Outcomes:
        """``_commit``'s rounds; ``remaining`` holds, in place, the partitions not finished yet."""
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
            for tp in [tp for tp in remaining if tp not in retry]:
                del remaining[tp]
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
            error = unexpected_error("ShareAcknowledge", exc)
            return {tp: error for tp in part}
        return task.result()

    async def _acknowledge_on(self, node: LeaderNode, acks: dict[TopicPartition, list[AckRange]], is_renew: bool,
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
            except Exception as exc:  # noqa: BLE001 - a KafkaException, or logged by unexpected_error
                requests.on_request_failed(node_id)
                error = unexpected_error(f"ShareAcknowledge to node {node_id}", exc)
                return {tp: error for tp in acks}
            try:
                result = requests.on_acknowledge_response(node_id, acks, response)
            except Exception as exc:  # noqa: BLE001 - an answer the client cannot make sense of
                requests.on_request_failed(node_id)
                error = unexpected_error(f"ShareAcknowledge to node {node_id}", exc)
                return {tp: error for tp in acks}
            self._learn_brokers(result.brokers)
            return result.outcomes
