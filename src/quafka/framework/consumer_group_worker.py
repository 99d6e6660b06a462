"""A consumer-group route's workers: each is one ``confluent_kafka.Consumer`` (one member of the
route's group, manual commits) on its own thread, running one job at a time; ``concurrency`` of
them per process. Kafka gives each partition to one member, and a member's jobs run one after the
other on its thread, so the records of a partition are processed in order, one at a time — the
ordering comes from one member per worker thread, not from any locking.

A worker's cycle: resume the partitions whose backoff has passed → poll (``poll`` for the first
record, then what is already fetched, up to ``max_poll_records``: a poll returns as soon as there
is something, it does not wait to fill the batch) → group the records by partition, keeping their
order → run the jobs (``consume(messages)`` once per partition, or ``consume_one`` per message) →
carry out each message's verdict → commit the partitions that advanced (synchronously) → poll.
A job runs on the worker's thread (on an event loop for ``async def`` consumers) or in the
process pool (``executor="process"``); either way the thread waits for it before the next one.

Verdicts (policies.py) on a consumer group:

- ACCEPT: consumed; the partition's commit moves past it.
- REJECT: dead-lettered when the route has a ``dead_letter_topic`` (the worker produces it, with
  Kafka's six ``__dlq.errors.*`` headers, and waits for the acknowledgement), then skipped like
  ACCEPT. If the dead letter cannot be written, the message is tried again after ``DLQ_RETRY_MS``
  (seek back and pause): it is never skipped without its dead letter.
- RELEASE: seek the partition back to the message; it is processed again at once.
- BACKOFF(ms): seek back to the message and pause the partition; it resumes when the backoff has
  passed (other partitions go on meanwhile). ``pause(message, ms)`` in a consumer gives this.

After the first RELEASE or BACKOFF in a partition the batch's later messages of that partition are
not processed (nor committed): they come again after the seek, in order. ``delivery_attempt`` is
the partition's retry counter (the seed's): 1 on first delivery, +1 each time the partition goes
back to a failed message, back to 1 once it moves past it or is revoked; all the messages of a
batch have the same. A message released or backed off at ``max_attempts`` is rejected instead, as
a share group's delivery count limit does (so that a message is not retried forever).

``ack_mode="manual"``: only the messages the consumer marks (``mark_as_consumed``) are consumed; an
unmarked one gets the RELEASE verdict (policies.unsettled), so the partition's commit stops before
the first unmarked message of a batch and the partition goes back to it (the commit is the highest
offset below which every message is marked; marked messages after an unmarked one are processed
again). ``seek`` in a consumer moves the partition's fetch position once the job has returned (the
rest of the batch's messages of that partition are dropped); it does not move the commit.

Rebalances: the partitions are assigned ``cooperative-sticky`` unless the route's ``kafka`` says
otherwise, so a member joining or leaving moves only the partitions it must. The rebalance
callbacks run inside the poll, that is between two jobs of this thread, so a revoked partition has
no job running: its finished offsets are committed, its retry counter and pause dropped, and the
consumer's ``revoked(partitions)`` called. (A job longer than the consumer's
``max.poll.interval.ms``, a Kafka consumer config the route's ``kafka`` may set, loses the
member's partitions.)

Shutdown: ``stop`` ends the poll loop after the running job (a waiting poll returns within
``POLL_TIMEOUT_S``); the messages of the batch that did not start are neither processed nor
committed; what finished is committed; ``shutdown()``; close (leaves the group). ``force_close``
closes the consumer from the stopping thread at the deadline; the running job's messages are then
not committed and come again to the partition's next owner.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaException as ConfluentKafkaException
from confluent_kafka import TopicPartition

from quafka.client import librdkafka_security_config
from quafka.protocol import dead_letter_headers as dlh

from .consumers import bind, call
from .dead_letters import DeadLetterRetriable
from .errors import (OUTCOME_DEAD_LETTERED, OUTCOME_REJECTED, OUTCOME_RETRIED, ErrorInfo, describe)
from .messages import Message
from .policies import EXHAUSTED, REJECT, Verdict, VerdictKind, decide
from .transactional import TransactionalJobs, TransactionalOutput, transactional_id

if TYPE_CHECKING:
    from .worker import Runtime

__all__ = ["ConsumerGroupWorkerThread"]

log = logging.getLogger("quafka.framework")
POLL_TIMEOUT_S = 1.0  # the longest a poll waits; also how soon a stop is seen while idle
DLQ_RETRY_MS = 1000  # the pause before trying again a message whose dead letter could not be written
FORCE_CLOSE_LOCK_S = 2.0

TP = tuple[str, int]


class _Closed(RuntimeError):
    """The consumer was closed under the worker (force_close)."""


class ConsumerGroupWorkerThread(TransactionalJobs, threading.Thread):
    """One worker thread of one consumer-group route, one consumer (``Worker`` is the process that runs the
    threads of every route)."""

    def __init__(self, route, runtime: Runtime, index: int) -> None:
        super().__init__(name=f"quafka-worker-{route.name}-{index}", daemon=True)
        self.route, self.runtime, self.index = route, runtime, index
        self.lock = threading.RLock()  # the consumer's calls: this thread's and force_close's
        self.consumer: KafkaConsumer | None = None
        self.error: BaseException | None = None
        self.done = self.failed = self.dead_lettered = self.renewed = 0
        self.in_flight = 0
        self.fetched_at = 0.0  # when a poll last returned records (monotonic s; health.py reads it)
        self.outcomes = dict.fromkeys(("accepted", OUTCOME_RETRIED, "released", OUTCOME_REJECTED,
                                       OUTCOME_DEAD_LETTERED), 0)  # messages by outcome (the worker's summary)
        self._assigned: set[TP] = set()  # kept by the rebalance callbacks
        self._stopping = threading.Event()
        self._forced = False
        self._closing = False
        self._instance = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._key_d, self._value_d = route.deserializers()
        self._retry: dict[TP, tuple[int, int]] = {}  # partition → (offset of the failed message, next attempt)
        self._paused: dict[TP, tuple[float, int]] = {}  # partition → (resume at, monotonic s; offset)
        self._uncommitted: dict[TP, int] = {}  # partition → next offset, processed, not yet committed
        self._halted: set[TP] = set()  # partitions whose rest of the current batch is dropped
        self._sought: dict[TP, int] = {}  # seeks asked by the consumer during the running job
        self._resume_asked: set[TP] = set()
        self._in_job = False
        self.output: TransactionalOutput | None = None  # transactional=True: the job's producer (transactional.py)
        self._went_back: set[TP] = set()  # partitions sent back to a message (_go_back) since last cleared

    # ------------------------------------------------------------------ thread

    def run(self) -> None:
        try:
            self._run()
        except _Closed:
            log.info("route %s worker %d: consumer closed at the deadline", self.route.name, self.index)
        except BaseException as exc:  # noqa: BLE001 - reported to the worker, which stops the process
            if self._forced:
                log.info("route %s worker %d: ended after the forced close: %s", self.route.name, self.index, exc)
                return
            self.error = exc
            log.error("route %s worker %d stopped: %s\n%s", self.route.name, self.index, exc, traceback.format_exc())
            self.runtime.events.publish("worker.error", route=self.route.name, error=exc, kind="crash")
            self.runtime.worker_failed(self)

    def stop(self) -> None:
        """Begin a graceful stop: the poll loop ends after the running job (a poll in progress
        returns within POLL_TIMEOUT_S)."""
        self._stopping.set()

    def _should_stop(self) -> bool:
        return self._stopping.is_set() or self.runtime.stopping.is_set()

    def _config(self) -> dict[str, Any]:
        route = self.route
        config = {**self.runtime.kafka, "partition.assignment.strategy": "cooperative-sticky",
                  **route.settings["kafka"], "group.id": route.group, "enable.auto.commit": False,
                  "auto.offset.reset": route.settings["auto_offset_reset"], "enable.partition.eof": False}
        config.setdefault("client.id", self.runtime.client_id(route, self.index))
        if route.settings["transactional"]:  # only committed input (Kafka: isolation.level, KIP-98)
            config["isolation.level"] = "read_committed"
        return librdkafka_security_config(config)  # the Java client's security names in librdkafka's

    def _run(self) -> None:
        route = self.route
        instance = bind(route.consumer, "consumer")()
        instance.route = route
        instance._hooks = self
        instance._max_backoff_ms = route.max_backoff_ms()
        self._instance = instance
        if route.executor == "async":
            self._loop = asyncio.new_event_loop()
        method = route.entry_point
        self.consumer = consumer = KafkaConsumer(self._config())
        try:
            if route.settings["transactional"]:
                self.output = TransactionalOutput(self.runtime.kafka, transactional_id(route, self.index),
                                                  route.name)
                self.output.start()
            consumer.subscribe([route.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                               on_lost=self._on_lost)
            instance.initialized()
            while not self._should_stop():
                self._resume_due()
                records = self._poll()
                if records:
                    self._process(instance, method, records)
                self._commit()
        finally:
            try:
                if not self._forced:
                    self._commit()
                instance.shutdown()
            finally:
                if self.output is not None:
                    self.output.close()
                self._close()

    def _close(self) -> None:
        with self.lock:
            consumer, self.consumer = self.consumer, None
            self._closing = True
            if consumer is not None:
                try:
                    consumer.close()  # the last revocation runs in here (commits, no revoked() call)
                except (ConfluentKafkaException, RuntimeError) as exc:
                    log.warning("route %s worker %d: close: %s", self.route.name, self.index, exc)
        if self._loop is not None:
            self._loop.close()

    def _consumer(self) -> KafkaConsumer:
        consumer = self.consumer
        if consumer is None:
            raise _Closed("the consumer is closed")
        return consumer

    # ------------------------------------------------------------------ polling

    def _poll(self) -> list:
        """The next records: wait up to POLL_TIMEOUT_S (less when a pause ends sooner) for one,
        then take what is already fetched, up to max_poll_records."""
        timeout = POLL_TIMEOUT_S
        if self._paused:
            timeout = max(0.0, min(timeout, min(until for until, _ in self._paused.values()) - time.monotonic()))
        limit = self.route.settings["max_poll_records"]
        with self.lock:
            consumer = self._consumer()
            first = consumer.poll(timeout)
            if first is None:
                return []
            polled = [first]
            if limit > 1:
                polled.extend(consumer.consume(num_messages=limit - 1, timeout=0))
        records = []
        assigned = self._assigned
        for record in polled:
            err = record.error()
            if err is None:
                # a rebalance inside consume() may have revoked the partition of a record polled
                # before it: the partition's next owner processes it
                if (record.topic(), record.partition()) in assigned:
                    records.append(record)
                continue
            if err.fatal():
                raise ConfluentKafkaException(err)
            log.warning("route %s worker %d: %s", self.route.name, self.index, err)
            self.runtime.events.publish("worker.error", route=self.route.name, error=ConfluentKafkaException(err),
                                        kind="poll")
        if records:
            self.fetched_at = time.monotonic()
        return records

    def _resume_due(self) -> None:
        asked, self._resume_asked = self._resume_asked, set()
        if not self._paused:
            return
        now = time.monotonic()
        due = [tp for tp, (until, _) in self._paused.items() if until <= now or tp in asked]
        if not due:
            return
        with self.lock:
            consumer = self._consumer()
            for tp in due:
                _, offset = self._paused.pop(tp)
                partition = TopicPartition(tp[0], tp[1], offset)
                try:
                    consumer.resume([partition])
                    consumer.seek(partition)  # the fetch goes on from the message, whatever was fetched before the pause
                except ConfluentKafkaException as exc:  # revoked meanwhile
                    log.warning("route %s worker %d: resume of %s-%d dropped: %s", self.route.name, self.index,
                                tp[0], tp[1], exc)

    def _commit(self) -> None:
        if not self._uncommitted:
            return
        pending = dict(self._uncommitted)
        offsets = [TopicPartition(t, p, o) for (t, p), o in pending.items()]
        try:
            with self.lock:
                results = self._consumer().commit(offsets=offsets, asynchronous=False)
        except ConfluentKafkaException as exc:  # kept: committed with the next batch, or at the revocation
            log.warning("route %s worker %d: commit of %s failed: %s", self.route.name, self.index, offsets, exc)
            self.runtime.events.publish("worker.error", route=self.route.name, error=exc, kind="commit")
            return
        failed = {(r.topic, r.partition) for r in results or () if r.error is not None}
        for tp, offset in pending.items():
            if tp not in failed and self._uncommitted.get(tp) == offset:
                del self._uncommitted[tp]
        if failed:
            log.warning("route %s worker %d: commit failed for %s", self.route.name, self.index, sorted(failed))

    # ------------------------------------------------------------------ rebalances (inside poll, between jobs)

    def _on_assign(self, _consumer, partitions: list) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        for tp in tps:
            self._forget(tp)
        self._assigned.update(tps)
        log.info("route %s worker %d: assigned %s", self.route.name, self.index, tps)
        events = self.runtime.events
        if events.wants("rebalance"):
            events.publish("rebalance", route=self.route.name, assigned=tps, revoked=[])

    def _on_revoke(self, consumer, partitions: list) -> None:
        self._revoked(consumer, partitions, lost=False)

    def _on_lost(self, consumer, partitions: list) -> None:
        self._revoked(consumer, partitions, lost=True)

    def _revoked(self, consumer, partitions: list, lost: bool) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        if not tps:
            return
        pending = [TopicPartition(t, p, self._uncommitted[(t, p)]) for t, p in tps if (t, p) in self._uncommitted]
        if pending and not lost:
            try:
                consumer.commit(offsets=pending, asynchronous=False)
            except ConfluentKafkaException as exc:  # the next owner processes them again
                log.warning("route %s worker %d: commit at revocation failed: %s", self.route.name, self.index, exc)
        paused = [TopicPartition(t, p) for t, p in tps if (t, p) in self._paused]
        if paused:
            try:
                consumer.resume(paused)  # a partition assigned again later starts unpaused
            except ConfluentKafkaException:
                pass
        for tp in tps:
            self._forget(tp)
            self._uncommitted.pop(tp, None)
            self._assigned.discard(tp)
        log.info("route %s worker %d: %s %s", self.route.name, self.index, "lost" if lost else "revoked", tps)
        events = self.runtime.events
        if not self._closing and self._instance is not None:
            try:
                self._instance.revoked(tps)
            except Exception as exc:  # noqa: BLE001 - the consumer's hook must not break the rebalance
                log.exception("route %s worker %d: revoked(%s) raised", self.route.name, self.index, tps)
                events.publish("worker.error", route=self.route.name, error=exc, kind="hook")
        if events.wants("rebalance"):
            events.publish("rebalance", route=self.route.name, assigned=[], revoked=tps)

    def _forget(self, tp: TP) -> None:
        self._retry.pop(tp, None)
        self._paused.pop(tp, None)
        self._halted.discard(tp)

    # ------------------------------------------------------------------ jobs

    def _process(self, instance, method: str, records: list) -> None:
        """Run the jobs of one poll, partition by partition, each partition's records in order."""
        by_partition: dict[TP, list] = {}
        for record in records:
            by_partition.setdefault((record.topic(), record.partition()), []).append(record)
        self._halted = set()
        for tp, partition_records in by_partition.items():
            if self._should_stop():
                return
            if tp in self._paused:  # fetched before the pause: it comes again
                continue
            self._process_partition(instance, method, tp, partition_records)

    def _process_partition(self, instance, method: str, tp: TP, records: list) -> None:
        i = 0
        while i < len(records) and tp not in self._halted:
            if self._should_stop():
                return
            chunk = records[i:] if method == "consume" else records[i:i + 1]
            attempt = self._attempt(tp, chunk[0].offset())
            messages: list[Message] = []
            for record in chunk:
                try:
                    messages.append(self._message(record, attempt))
                except Exception as exc:  # noqa: BLE001 - it cannot be processed: reject it, after those before it
                    if not messages:
                        self._settle_failed_decode(tp, record, attempt, exc)
                        i += 1
                    break
            if messages:
                self._run_job(instance, method, tp, messages)
                i += len(messages)

    def _attempt(self, tp: TP, offset: int) -> int:
        retry = self._retry.get(tp)
        if retry is None:
            return 1
        if offset <= retry[0]:
            return retry[1]
        del self._retry[tp]
        return 1

    def _message(self, record, attempt: int) -> Message:
        raw_key, raw_value = record.key(), record.value()
        key = raw_key if self._key_d is None else self._key_d(raw_key)
        value = raw_value if self._value_d is None else self._value_d(raw_value)
        return Message(record.topic(), record.partition(), record.offset(), record.timestamp()[1], key, value,
                       list(record.headers() or ()), attempt, raw_key, raw_value)

    def _run_job(self, instance, method: str, tp: TP, messages: list[Message]) -> None:
        events, route = self.runtime.events, self.route
        arg = messages if method == "consume" else messages[0]
        self.in_flight += len(messages)
        if events.wants("job.started"):
            events.publish("job.started", route=route.name, messages=messages)
        started = time.monotonic()
        error: BaseException | None = None
        settled: dict = {}
        output = self.output
        if output is not None:
            output.begin()  # raises to the thread only when the producer is unusable (fenced)
        self._in_job = True
        try:
            if route.executor == "process":  # seek() there has no worker to ask (TypeError); resume() is a no-op
                settled, error = self.runtime.process_jobs.run(route, method, arg)
            else:
                call(instance, method, arg, self._loop)
        except Exception as exc:  # the route's error policy decides
            error = exc
        finally:
            self._in_job = False
            self.in_flight -= len(messages)
        duration = time.monotonic() - started
        settled = {**settled, **instance._take_settled()}
        if output is not None:
            self._end_transaction(output, tp, messages, settled, error, duration)
            return
        if error is None:
            self.done += 1
            if events.wants("job.finished"):
                events.publish("job.finished", route=route.name, messages=messages, duration_s=duration)
        else:
            self.failed += 1
        verdicts = decide(messages, settled, error is not None, route.settings)
        info = None if error is None else describe(error)
        if error is not None and events.wants("job.failed"):
            events.publish("job.failed", route=route.name, messages=messages, duration_s=duration, error=error,
                           verdicts=[v.kind.value for _, v in verdicts], error_id=info.error_id)
        self._settle_all(tp, verdicts, info)

    def _settle_all(self, tp: TP, verdicts: list[tuple[Message, Verdict]], info: ErrorInfo | None) -> None:
        for message, verdict in verdicts:
            if tp not in self._halted:
                self._settle(tp, message, verdict, info)
        sought, self._sought = self._sought, {}
        for (topic, partition), offset in sought.items():
            self._apply_seek((topic, partition), offset)

    def _settle(self, tp: TP, message: Message, verdict: Verdict, info: ErrorInfo | None,
                reason: str | None = None) -> None:
        """Carry out ``verdict`` (``info``: the job's failure); a RELEASE or BACKOFF halts the
        partition for the rest of the batch."""
        kind = verdict.kind
        settings = self.route.settings
        if kind in (VerdictKind.RELEASE, VerdictKind.BACKOFF) and message.delivery_attempt >= settings["max_attempts"]:
            # the consumer's own release/pause at the last attempt: given up, as a share group's
            # delivery limit does (the retry policy's verdict is EXHAUSTED already)
            verdict, kind = EXHAUSTED, VerdictKind.REJECT
        if kind is VerdictKind.ACCEPT:
            self._advance(tp, message.offset + 1)
            self._published(message, "accepted")
            return
        if kind is VerdictKind.REJECT:
            outcome = OUTCOME_DEAD_LETTERED if verdict.exhausted else OUTCOME_REJECTED
            detail = ""
            topic = settings["dead_letter_topic"]
            if topic:
                reason = reason or (dlh.REASON_MAX_ATTEMPTS if verdict.exhausted else dlh.REASON_REJECTED)
                try:
                    written, detail = self.runtime.dead_letters.write(self.route, message, reason=reason, info=info)
                except DeadLetterRetriable as exc:  # not skipped without its dead letter
                    log.error("route %s: %s; %s-%d@%d is tried again in %d ms", self.route.name, exc, message.topic,
                              message.partition, message.offset, DLQ_RETRY_MS)
                    self.runtime.events.publish("worker.error", route=self.route.name, error=exc, kind="dead_letter")
                    self._go_back(tp, message, DLQ_RETRY_MS, same_attempt=True)
                    self._published(message, "released")
                    return
                if written:
                    self.dead_lettered += 1
            else:
                detail = "skipped: the route has no dead_letter_topic"
                if info is None:
                    log.warning("route %s: %s-%d@%d rejected (no dead_letter_topic): skipped", self.route.name,
                                message.topic, message.partition, message.offset)
            self._advance(tp, message.offset + 1)
            self._published(message, outcome, info, detail)
            return
        outcome = OUTCOME_RETRIED if info is not None else "released"
        if kind is VerdictKind.RELEASE:
            self._go_back(tp, message, 0)
            self._published(message, outcome, info, "tried again at once")
            return
        events = self.runtime.events
        if events.wants("job.backoff"):
            events.publish("job.backoff", route=self.route.name, message=message, backoff_ms=verdict.backoff_ms,
                           waiter="worker")
        self._go_back(tp, message, verdict.backoff_ms)
        self._published(message, OUTCOME_RETRIED, info, f"partition paused {verdict.backoff_ms} ms")

    def _settle_failed_decode(self, tp: TP, record, attempt: int, exc: Exception) -> None:
        self.failed += 1
        message = Message(record.topic(), record.partition(), record.offset(), record.timestamp()[1], record.key(),
                          record.value(), list(record.headers() or ()), attempt, record.key(), record.value())
        self._settle(tp, message, REJECT, describe(exc), reason=dlh.REASON_DESERIALIZE_FAILED)

    def _published(self, message: Message, outcome: str, info: ErrorInfo | None = None, detail: str = "") -> None:
        self.outcomes[outcome] += 1
        if info is not None:
            self.runtime.failures.record(self.route.name, message, info, outcome, self.route.settings["max_attempts"],
                                         detail)
        events = self.runtime.events
        if events.wants("message.settled"):
            events.publish("message.settled", route=self.route.name, message=message, outcome=outcome)

    def _advance(self, tp: TP, next_offset: int) -> None:
        if next_offset > self._uncommitted.get(tp, -1):
            self._uncommitted[tp] = next_offset
        retry = self._retry.get(tp)
        if retry is not None and retry[0] < next_offset:
            del self._retry[tp]

    def _go_back(self, tp: TP, message: Message, pause_ms: int, same_attempt: bool = False) -> None:
        """Process ``message`` again: now, or after ``pause_ms`` with its partition paused
        (``same_attempt``: its dead letter failed, the job is not run again for it)."""
        self._retry[tp] = (message.offset, message.delivery_attempt + (0 if same_attempt else 1))
        self._halted.add(tp)
        self._went_back.add(tp)
        partition = TopicPartition(tp[0], tp[1], message.offset)
        with self.lock:
            consumer = self._consumer()
            try:
                if pause_ms > 0:
                    consumer.pause([partition])
                    self._paused[tp] = (time.monotonic() + pause_ms / 1000, message.offset)
                consumer.seek(partition)
            except ConfluentKafkaException as exc:  # revoked meanwhile: its next owner has it
                self._paused.pop(tp, None)
                log.warning("route %s worker %d: %s-%d is no longer assigned (%s); its next owner processes "
                            "offset %d", self.route.name, self.index, tp[0], tp[1], exc, message.offset)

    def _apply_seek(self, tp: TP, offset: int) -> None:
        self._retry.pop(tp, None)
        self._halted.add(tp)
        if tp in self._paused:
            self._paused[tp] = (self._paused[tp][0], offset)
        with self.lock:
            try:
                self._consumer().seek(TopicPartition(tp[0], tp[1], offset))
            except ConfluentKafkaException as exc:  # revoked meanwhile
                log.warning("route %s worker %d: seek of %s-%d to %d dropped: %s", self.route.name, self.index,
                            tp[0], tp[1], offset, exc)

    # ------------------------------------------------------------------ hooks for consumers

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """The consumer's ``seek``: during a job, applied when it returns; else at once."""
        if self._in_job:
            self._sought[(topic, partition)] = offset
        else:
            self._apply_seek((topic, partition), offset)

    def resume(self, topic: str, partition: int) -> None:
        """The consumer's ``resume``: end the partition's pause before the next poll."""
        self._resume_asked.add((topic, partition))

    def renew(self, messages: list[Message], records: list | None = None) -> bool:
        """Consumer groups have no acquisition locks."""
        return False

    def force_close(self) -> None:
        """The stop's deadline passed (or a second signal) while a job still runs: close the
        consumer from the stopping thread; what was not committed goes to the next owner."""
        self._forced = True
        acquired = self.lock.acquire(timeout=FORCE_CLOSE_LOCK_S)
        if not acquired:
            log.warning("route %s worker %d: the consumer is busy; not closed", self.route.name, self.index)
            return
        try:
            consumer, self.consumer = self.consumer, None
            self._closing = True
            if consumer is not None:
                consumer.close()
        except Exception as exc:  # noqa: BLE001 - closing at the end: report, go on
            log.warning("route %s worker %d: forced close: %s", self.route.name, self.index, exc)
        finally:
            self.lock.release()
