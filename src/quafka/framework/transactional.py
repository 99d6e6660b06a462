"""Consume-transform-produce, exactly once, on a consumer-group route with ``transactional=True``:
each worker thread owns one transactional ``confluent_kafka.Producer``, and each job (one
``consume(messages)`` call over one partition's messages of a poll, or one ``consume_one``) runs
inside one Kafka transaction (KIP-98):

    begin_transaction → the job, whose ``self.produce(...)`` calls go to this producer →
    send_offsets_to_transaction(the partition's next offset, consumer.consumer_group_metadata())
    → commit_transaction

so the job's output records and the consumed position become visible together, or not at all.
This is what Kafka's own pattern does (KafkaProducer.sendOffsetsToTransaction with
ConsumerGroupMetadata, KIP-447; Kafka Streams' StreamsProducer in exactly_once_v2). A job that
raises, or leaves a message to be tried again (release, pause, an unmarked message in manual
mode), has its transaction aborted: its output is discarded and its partition goes back to the
job's first message (seek), with the route's retry/backoff/max_attempts/dead-letter policy. So
does a job whose commit fails without fencing, or one of whose rejected messages could not be
dead-lettered (the message is tried again after DLQ_RETRY_MS, and the messages after it, whose
output was in the aborted transaction, with it). ``TransactionalJobs`` is that logic, mixed into
consumer_group_worker.ConsumerGroupWorkerThread.

The transactional.id is stable per worker slot: ``{prefix}-{host}-{process index}-{thread index}``
(prefix: the route's ``transactional_id``, default ``quafka-{group}-{topic}``; the process index is
the supervisor's ``QUAFKA_WORKER_INDEX``, 0 outside it). A process restarted in the same slot calls
InitProducerId with the same id, which fences its predecessor (PRODUCER_FENCED) and aborts the
transaction that a SIGKILL left open at once, instead of leaving it to hold the output partitions'
last stable offset until ``transaction.timeout.ms``. Zombies of other slots (a member that lost its
partitions) are fenced by the group generation carried in TxnOffsetCommit (KIP-447), so one id per
worker is enough, as Kafka Streams' exactly_once_v2 has one per thread.

A fenced producer (another process has this worker's id) is fatal for the worker thread: its error
names the id, and the worker process stops (status 1), as Kafka Streams treats ProducerFencedException
as the loss of its tasks. Dead letters are written by the route's dead-letter producer outside
the transaction: at-least-once.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaException, Producer, TopicPartition

from quafka.client import librdkafka_security_config

from .enqueue import _bytes, _headers
from .errors import describe
from .messages import Message
from .policies import VerdictKind, decide

__all__ = ["TransactionalJobs", "TransactionalOutput", "TransactionFenced", "transactional_id"]

TP = tuple[str, int]

log = logging.getLogger("quafka.framework")
INIT_TIMEOUT_S = 30.0
COMMIT_TIMEOUT_S = 30.0
COMMIT_ATTEMPTS = 3  # commit_transaction again while librdkafka says the error is retriable


class TransactionFenced(RuntimeError):
    """Another producer took this worker's transactional.id (a second process in the same slot, or
    this one was a zombie): the worker thread cannot go on."""


def transactional_id(route: Any, index: int, host: str | None = None, slot: str | None = None) -> str:
    """The stable transactional.id of worker ``index`` of ``route`` in this process's slot."""
    prefix = route.settings.get("transactional_id") or f"quafka-{route.group}-{route.topic}"
    host = host or socket.gethostname()
    slot = slot if slot is not None else os.environ.get("QUAFKA_WORKER_INDEX", "0")
    return f"{prefix}-{host}-{slot}-{index}"


class TransactionalOutput:
    """One worker thread's transactional producer: ``begin`` / ``produce`` / ``commit`` / ``abort``."""

    def __init__(self, kafka: Mapping[str, Any], txn_id: str, route_name: str) -> None:
        self.transactional_id = txn_id
        self.route_name = route_name
        # retry.backoff.ms: right after a commit, the coordinator answers the next transaction's
        # AddOffsetsToTxn CONCURRENT_TRANSACTIONS until the markers are written; librdkafka waits
        # retry.backoff.ms (100 ms) before trying again, which made each job cost ~100 ms (the Java
        # producer's TransactionManager retries that case after 20 ms). linger.ms 0: the commit
        # flushes anyway.
        config = {"retry.backoff.ms": 10, "linger.ms": 0, **kafka, "transactional.id": txn_id,
                  "enable.idempotence": True, "acks": "all"}
        self._producer = Producer(librdkafka_security_config(config))
        self._errors: list[str] = []
        self.open = False
        self.produced = 0  # records produced in the open transaction

    def start(self) -> None:
        """InitProducerId: fences a predecessor with this id and aborts its open transaction."""
        try:
            self._producer.init_transactions(INIT_TIMEOUT_S)
        except KafkaException as exc:
            raise self._fenced_or(exc, "init_transactions") from exc
        log.info("route %s: transactional producer %r ready", self.route_name, self.transactional_id)

    def begin(self) -> None:
        self._errors.clear()
        self.produced = 0
        self._producer.begin_transaction()
        self.open = True

    def produce(self, topic: str, value: Any, key: Any = None, headers: Any = None, partition: int | None = None) -> None:
        if not self.open:
            raise RuntimeError("produce() is for the running job of a transactional route (the transaction "
                               "is opened before the job and committed after it)")
        kwargs: dict[str, Any] = {"key": _bytes(key, "key"), "on_delivery": self._delivered}
        if headers:
            kwargs["headers"] = _headers(headers)
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                self._producer.produce(topic, _bytes(value, "value"), **kwargs)
                break
            except BufferError:
                self._producer.poll(0.1)  # the local queue is full: serve delivery reports
        self.produced += 1

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}: {err}")

    def commit(self, offsets: Iterable[tuple[str, int, int]], group_metadata: Any) -> str | None:
        """Add the consumed positions and commit; None when committed, else why it was aborted
        (the caller goes back to the job's first message). Raises TransactionFenced."""
        try:
            self._producer.send_offsets_to_transaction([TopicPartition(t, p, o) for t, p, o in offsets],
                                                       group_metadata, COMMIT_TIMEOUT_S)
            for attempt in range(COMMIT_ATTEMPTS):
                try:
                    self._producer.commit_transaction(COMMIT_TIMEOUT_S)
                    break
                except KafkaException as exc:
                    if not exc.args[0].retriable() or attempt == COMMIT_ATTEMPTS - 1:
                        raise
        except KafkaException as exc:
            error = exc.args[0]
            if error.fatal():
                self.open = False
                raise self._fenced_or(exc, "commit") from exc
            why = f"{error}" + (f"; first undelivered record: {self._errors[0]}" if self._errors else "")
            self.abort(why)
            return why
        self.open = False
        return None

    def abort(self, why: str) -> None:
        """Discard the open transaction's records (``why`` is logged)."""
        if not self.open:
            return
        self.open = False
        log.info("route %s: transaction of %r aborted (%d record(s) discarded): %s", self.route_name,
                 self.transactional_id, self.produced, why)
        try:
            self._producer.abort_transaction(COMMIT_TIMEOUT_S)
        except KafkaException as exc:
            raise self._fenced_or(exc, "abort") from exc

    def close(self) -> None:
        if self.open:
            try:
                self.abort("the worker stops")
            except (KafkaException, TransactionFenced) as exc:
                log.warning("route %s: abort at close: %s", self.route_name, exc)
        self._producer.flush(5)

    def _fenced_or(self, exc: KafkaException, what: str) -> Exception:
        error = exc.args[0]
        if error.fatal():
            return TransactionFenced(f"route {self.route_name}: {what}: the transactional producer "
                                     f"{self.transactional_id!r} can no longer be used ({error}); another "
                                     "process runs with this transactional.id (give each process its own "
                                     "QUAFKA_WORKER_INDEX or route transactional_id), or this one was a zombie")
        return exc


class TransactionalJobs:
    """The transactional part of consumer_group_worker.ConsumerGroupWorkerThread (a mixin: it uses
    the worker's consumer, partitions state and settling)."""

    output: TransactionalOutput | None
    _went_back: set[TP]

    def produce(self, topic: str, value: Any, key: Any = None, headers: Any = None,
                partition: int | None = None) -> None:
        """The consumer's ``produce``: into the running job's transaction."""
        if self.output is None:
            raise RuntimeError(f"produce() needs transactional=True on route {self.route.name} (its output is then "
                               "committed with the consumed offsets, exactly once)")
        if not self._in_job:
            raise RuntimeError("produce() is for the running job (called from consume or consume_one)")
        self.output.produce(topic, value, key, headers, partition)

    def _end_transaction(self, output: TransactionalOutput, tp: TP, messages: list[Message], settled: dict,
                         error: BaseException | None, duration: float) -> None:
        """A transactional job's end (transactional.py): commit its output with the partition's next
        offset when every message is consumed or rejected; else abort, and the partition goes back
        to the job's first message under the route's policy (the aborted output of the messages
        marked consumed is made again)."""
        events, route = self.runtime.events, self.route
        if error is not None:  # nothing it produced stays: a message it marked consumed is not
            settled = {k: v for k, v in settled.items() if v.kind is not VerdictKind.ACCEPT}
        verdicts = decide(messages, settled, error is not None, route.settings)
        info = None if error is None else describe(error)
        if error is None:
            self.done += 1
        else:
            self.failed += 1
            if events.wants("job.failed"):
                events.publish("job.failed", route=route.name, messages=messages, duration_s=duration, error=error,
                               verdicts=[v.kind.value for _, v in verdicts], error_id=info.error_id)
        retry = next((v for _, v in verdicts if v.kind in (VerdictKind.RELEASE, VerdictKind.BACKOFF)), None)
        if error is None and retry is not None:  # e.g. an unmarked message: the whole job again
            verdicts = [(messages[0], retry)]
        if error is not None or retry is not None:
            output.abort(f"{route.name} {tp[0]}-{tp[1]}@{messages[0].offset}: "
                         + (f"the job raised {type(error).__name__}" if error is not None else "a message to retry"))
            self._settle_all(tp, verdicts, info)
            return
        before = self._uncommitted.get(tp)
        self._went_back.discard(tp)
        self._settle_all(tp, verdicts, info)
        if tp in self._went_back:  # a dead letter that could not be written: the message comes again,
            # and so do those after it, whose output is in this transaction: the whole job again
            output.abort("a dead letter could not be written")
            self._restore(tp, before)
            self._back_to(tp, messages[0].offset)
            return
        next_offset = self._uncommitted.get(tp)
        if next_offset is None:  # nothing advanced: nothing to commit, nothing to keep
            output.abort("the job's partition did not advance")
            return
        if events.wants("job.finished"):
            events.publish("job.finished", route=route.name, messages=messages, duration_s=duration)
        with self.lock:
            metadata = self._consumer().consumer_group_metadata()
        why = output.commit([(tp[0], tp[1], next_offset)], metadata)
        if why is None:
            if self._uncommitted.get(tp) == next_offset:
                del self._uncommitted[tp]
            return
        log.warning("route %s worker %d: transaction for %s-%d@%d..%d aborted: %s; the partition goes back to %d",
                    route.name, self.index, tp[0], tp[1], messages[0].offset, messages[-1].offset, why,
                    messages[0].offset)
        self.runtime.events.publish("worker.error", route=route.name, error=RuntimeError(why), kind="transaction")
        self._restore(tp, before)
        self._go_back(tp, messages[0], 0, same_attempt=True)

    def _restore(self, tp: TP, before: int | None) -> None:
        """The partition's commit position as it was before the aborted job settled its messages."""
        if before is None:
            self._uncommitted.pop(tp, None)
        else:
            self._uncommitted[tp] = before

    def _back_to(self, tp: TP, offset: int) -> None:
        """A transactional job aborted after its partition went back to one of its later messages:
        go back to its first, ``offset``, keeping the retry counter and any pause."""
        if tp in self._paused:
            self._paused[tp] = (self._paused[tp][0], offset)
        with self.lock:
            try:
                self._consumer().seek(TopicPartition(tp[0], tp[1], offset))
            except KafkaException as exc:  # revoked meanwhile: its next owner has it
                log.warning("route %s worker %d: %s-%d is no longer assigned (%s); its next owner processes "
                            "offset %d", self.route.name, self.index, tp[0], tp[1], exc, offset)
