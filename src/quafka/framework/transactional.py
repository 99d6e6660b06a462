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
job's first message (seek), with the route's retry/backoff/max_attempts/dead-letter policy.

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

__all__ = ["TransactionalOutput", "TransactionFenced", "transactional_id"]

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
