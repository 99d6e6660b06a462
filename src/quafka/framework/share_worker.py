"""A share-group route's workers: each is one ``ShareConsumer`` (explicit acknowledgement,
``record_limit`` acquisition, so a poll takes at most ``max_poll_records``) on its own thread,
running one job at a time; ``concurrency`` of them per process. Any record may run on any worker
of any process: the share group hands records to whichever member fetches.

A worker's cycle: poll → run the jobs (``consume(messages)`` once, or ``consume_one`` per message)
→ settle each message as it finishes (ACCEPT, RELEASE, REJECT; the acknowledgements ride on the next
fetch) → if a message was paused, wait until the backoff has passed, then RELEASE it (the seed's
pause: no fetching meanwhile) → poll.

Backoffs: where the broker waits them out (delivery_controls.py: the group's redelivery backoff is
the route's), a message that failed under the ``retry`` policy is RELEASEd at once with the outcome
``backoff`` and the worker goes on; the broker delivers it again after its backoff. Otherwise it is
paused as above, its backoff capped to the lock. A consumer's own ``pause(message, backoff_ms)`` is
always the worker's pause.

Locks: the process's ``Renewer`` renews a job's records once it has run half the lock (and the
records a pause holds), from its own thread, while this thread is inside the job — quafka's
client allows acknowledge and commit from a second thread then (docs/client.md, "renewing from a
background thread"); ``self.lock`` keeps those calls apart from this thread's own. Back-pressure:
a message whose lock has less than the safety margin left is released instead of started, and
when a job outgrows half the lock the messages of its batch that have not started are released at
once, so another worker takes them; no record is started after its lock could have expired.

Shutdown: stop polling (``wakeup``), let the running job finish, release what did not start,
close (which commits the acknowledgements and leaves the group).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from collections import deque
import time
import traceback
from typing import TYPE_CHECKING, Any

from quafka.client import (AcknowledgeType, IllegalStateException, KafkaException, KafkaTimeoutError, ShareConsumer,
                           WakeupException)

from .consumers import bind
from .dead_letters import DeadLetterRetriable
from .delivery_controls import BROKER, WORKER
from .errors import (OUTCOME_DEAD_LETTERED, OUTCOME_LOCK_LOST, OUTCOME_REJECTED, OUTCOME_RELEASED_AT_SHUTDOWN,
                     OUTCOME_RETRIED, ErrorInfo, describe)
from .messages import Message
from .policies import Verdict, VerdictKind, decide, effective_max_attempts
from quafka.protocol import dead_letter_headers as dlh

if TYPE_CHECKING:
    from .worker import Runtime

__all__ = ["ShareWorkerThread"]

log = logging.getLogger("quafka.framework")
_ACK = {VerdictKind.ACCEPT: AcknowledgeType.ACCEPT, VerdictKind.RELEASE: AcknowledgeType.RELEASE,
        VerdictKind.REJECT: AcknowledgeType.REJECT}
_OUTCOME = {VerdictKind.ACCEPT: "accepted", VerdictKind.RELEASE: "released", VerdictKind.REJECT: OUTCOME_REJECTED}
OUTCOMES = ("accepted", OUTCOME_RETRIED, "released", OUTCOME_REJECTED, OUTCOME_DEAD_LETTERED,
            OUTCOME_RELEASED_AT_SHUTDOWN, OUTCOME_LOCK_LOST)
POLL_TIMEOUT_S = 1.0
_new_tuple = tuple.__new__


def _undecoded(record) -> Message:
    """A record as a Message with its key and value as bytes (one never started, or not deserializable)."""
    return Message(record.topic, record.partition, record.offset, record.timestamp, record.key, record.value,
                   record.headers, record.delivery_count or 1, record.key, record.value)


class Job:
    """Messages running (or held by a pause) on a worker, as the renewer sees them."""
    __slots__ = ("worker", "messages", "records", "started", "lock_from", "held", "given_up", "released_waiting")

    def __init__(self, worker: ShareWorkerThread, messages: list[Message], records: list, started: float,
                 lock_from: float, held: bool = False) -> None:
        self.worker, self.messages, self.records = worker, messages, records
        self.started, self.lock_from, self.held = started, lock_from, held
        self.given_up = False  # renewals stopped (max_renew_ms, or one failed)
        self.released_waiting = False  # back-pressure applied once


class ShareWorkerThread(threading.Thread):
    """One worker thread of one share-group route, one consumer (``Worker`` is the process that runs the
    threads of every route)."""

    def __init__(self, route, runtime: Runtime, index: int) -> None:
        super().__init__(name=f"quafka-worker-{route.name}-{index}", daemon=True)
        self.route, self.runtime, self.index = route, runtime, index
        settings = route.settings
        self.lock = threading.RLock()  # the consumer's calls: this thread's and the renewer's
        self.lock_ms = settings["lock_duration_ms"]
        self.margin_ms = settings["backoff_margin_ms"]
        self.consumer: ShareConsumer | None = None
        self.error: BaseException | None = None
        self.done = self.failed = self.dead_lettered = self.renewed = 0
        self.in_flight = 0
        self.outcomes = dict.fromkeys(OUTCOMES, 0)  # messages by outcome (the worker's summary)
        self.settings = settings  # the route's, max_attempts capped by the group's delivery limit (_run)
        self._waiting: deque = deque()  # the records of the poll not started yet (consume_one)
        self.fetched_at = 0.0  # when the last poll's records were acquired (monotonic s; health.py reads it)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._key_d, self._value_d = route.deserializers()
        self._method = route.entry_point
        self._one = self._method == "consume_one"
        self._executor = route.executor
        self._accept_unsettled = settings["ack_mode"] == "auto"
        self._entry = None  # the consumer instance's entry point, bound in _run
        self.job: Job | None = None  # the running job (the renewer reads it)
        self._lost: set[tuple[str, int, int]] = set()  # records whose renewal failed: not ours any more
        self.held_job: Job | None = None  # records a pause holds
        self._lock_warned = False
        # the broker waits out the retry policy's backoffs (release at once), or this worker does (pause)
        self._broker_backoff = runtime.delivery_controls.waiter(route) == BROKER

    # ------------------------------------------------------------------ thread

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - reported to the worker, which stops the process
            self.error = exc
            log.error("route %s worker %d stopped: %s\n%s", self.route.name, self.index, exc, traceback.format_exc())
            self.runtime.events.publish("worker.error", route=self.route.name, error=exc, kind="crash")
            self.runtime.worker_failed(self)

    def stop(self) -> None:
        consumer = self.consumer
        if consumer is not None:
            consumer.wakeup()  # a blocking poll returns now; _commit absorbs a wakeup meant for it

    def _commit(self, sync: bool, timeout_s: float | None = None):
        """commit_sync / commit_async; a pending wakeup() (meant for the poll) does not fail them."""
        for attempt in (1, 2):
            try:
                return self.consumer.commit_sync(timeout_s) if sync else self.consumer.commit_async()
            except WakeupException:
                if attempt == 2:
                    raise
        return None

    def _config(self) -> dict[str, Any]:
        route = self.route
        config = {**self.runtime.kafka, "share.acquire.mode": "record_limit", **route.settings["kafka"],
                  "group.id": route.group, "share.acknowledgement.mode": "explicit",
                  "max.poll.records": route.settings["max_poll_records"]}
        config.setdefault("client.id", self.runtime.client_id(route, self.index))
        return config

    def _run(self) -> None:
        route, runtime = self.route, self.runtime
        instance = bind(route.consumer, "share")()
        instance.route = route
        instance._hooks = self
        instance._max_backoff_ms = route.max_backoff_ms()
        self.settings = {**route.settings, "max_attempts": effective_max_attempts(route, runtime.group_configs)}
        if self._executor == "async":
            self._loop = asyncio.new_event_loop()
        method = self._method
        self._entry = getattr(instance, method)
        self.consumer = consumer = ShareConsumer(self._config())
        consumer.set_acknowledgement_commit_callback(self._on_acknowledged)
        try:
            consumer.subscribe([route.topic])
            instance.initialized()
            while not runtime.stopping.is_set():
                try:
                    with self.lock:
                        records = consumer.poll(POLL_TIMEOUT_S)
                except WakeupException:
                    continue
                except KafkaException as exc:
                    if not exc.retriable:
                        raise
                    # the broker cannot be reached (the process's health monitor says so, once):
                    # poll again in a while rather than end the worker
                    log.debug("route %s worker %d: poll: %s", route.name, self.index, exc)
                    runtime.stopping.wait(POLL_TIMEOUT_S)
                    continue
                if not records:
                    continue
                self._observe_lock()
                polled = self.fetched_at = time.monotonic()
                held = self._process(instance, method, records, polled)
                if held:
                    self._hold(held)
        finally:
            try:
                instance.shutdown()
            finally:
                self._close()

    def _on_acknowledged(self, offsets: dict, error: Exception | None) -> None:
        """The broker's answer to acknowledgements: a failed one (its lock expired, its session
        ended) is said, never silent — the broker delivers those records again."""
        if error is None:
            return
        where = ", ".join(f"{tp[0]}-{tp[1]}@{sorted(o)[0]}" + (f"..{sorted(o)[-1]}" if len(o) > 1 else "")
                          for tp, o in offsets.items())
        log.warning("route %s worker %d: the broker did not take the acknowledgement of %s (%s); it delivers "
                    "them again", self.route.name, self.index, where, error)
        self.runtime.events.publish("worker.error", route=self.route.name, error=error, kind="acknowledge")

    def _close(self) -> None:
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            try:
                with self.lock:
                    consumer.close()
            except KafkaException as exc:
                log.warning("route %s worker %d: close: %s", self.route.name, self.index, exc)
        if self._loop is not None:
            self._loop.close()

    def _observe_lock(self) -> None:
        actual = self.consumer.acquisition_lock_timeout_ms() if self.consumer is not None else None
        if actual and actual != self.lock_ms:
            if actual < self.lock_ms and not self._lock_warned:
                self._lock_warned = True
                log.warning("route %s: the broker's acquisition lock is %d ms, shorter than lock_duration_ms %d; "
                            "renewals and backoffs follow the broker's", self.route.name, actual, self.lock_ms)
            self.lock_ms = actual
            # a lock shorter than the route expected: keep the margin a quarter of it at most, or no
            # record could start in time
            self.margin_ms = min(self.route.settings["backoff_margin_ms"], actual // 4)

    # ------------------------------------------------------------------ jobs

    def _process(self, instance, method: str, records: list, polled: float) -> list[tuple[Message, Any, int, float]]:
        """Run the jobs of one poll; returns the messages a pause holds, with their backoff."""
        held: list[tuple[Message, Any, int, float]] = []
        if method == "consume":
            messages, kept = [], []
            for record in records:
                message = self._message(record)
                if message is not None:
                    messages.append(message)
                    kept.append(record)
            if messages:
                self._run_job(instance, messages, kept, polled, held)
            return held
        # one job per record; the renewer may take the ones still waiting (release_waiting): each
        # is popped by exactly one of the two threads (deque.popleft is atomic), so none is both
        # started and released
        waiting = self._waiting = deque(records)
        stopping = self.runtime.stopping
        latest_start = polled + (self.lock_ms - self.margin_ms) / 1000  # later, the lock could expire first
        monotonic, make = time.monotonic, self._message
        try:
            while waiting:
                try:
                    record = waiting.popleft()
                except IndexError:  # the renewer released the rest
                    break
                if stopping.is_set() or monotonic() >= latest_start:
                    self._release_unstarted(record, OUTCOME_RELEASED_AT_SHUTDOWN if stopping.is_set() else "released")
                    continue
                message = make(record)
                if message is not None:
                    self._run_one(instance, message, record, polled, held)
        finally:
            self._waiting = deque()
        return held

    def _message(self, record) -> Message | None:
        """The record as a Message; None (and rejected) when it does not deserialize."""
        key, value = record.key, record.value
        try:
            if self._key_d is not None:
                key = self._key_d(key)
            if self._value_d is not None:
                value = self._value_d(value)
        except Exception as exc:  # a message that does not deserialize cannot be processed: reject it
            self._settle_failed_decode(record, exc)
            return None
        # tuple.__new__ directly: the NamedTuple's own __new__ is a Python function (a third of the
        # framework's cost per job in benchmarks/framework.py)
        return _new_tuple(Message, (record.topic, record.partition, record.offset, record.timestamp, key, value,
                                    record.headers, record.delivery_count or 1, record.key, record.value))

    def _release_unstarted(self, record, outcome: str = "released") -> None:
        message = _undecoded(record)
        with self.lock:
            self._ack(message, record, AcknowledgeType.RELEASE, outcome)

    def _run_one(self, instance, message: Message, record, lock_from: float,
                 held: list[tuple[Message, Any, int, float]]) -> None:
        """``consume_one`` on one message: the common case (thread executor, nobody listening,
        the message accepted) without the lists and lookups of ``_run_job``, which does the rest."""
        if self._loop is not None or self._executor == "process" or self.runtime.events.wanted:
            self._run_job(instance, [message], [record], lock_from, held)
            return
        job = self.job = Job(self, (message,), (record,), time.monotonic(), lock_from)  # the renewer watches it
        renewer = self.runtime.renewer
        if lock_from + self.lock_ms / 2000 < renewer.next_check:
            renewer.wake()
        self.in_flight += 1
        try:
            self._entry(message)
        except Exception:  # the error policy: the general path settles it
            self.job = None
            self.in_flight -= 1
            self._after_job(instance, [message], [record], job, sys.exc_info()[1], None, held)
            return
        self.job = None
        self.in_flight -= 1
        if instance._settled or not self._accept_unsettled:
            self._after_job(instance, [message], [record], job, None, None, held)
            return
        self.done += 1
        with self.lock:
            if self._lost:
                self._ack(message, record, AcknowledgeType.ACCEPT, "accepted")
            else:
                try:
                    self.consumer.acknowledge(record, AcknowledgeType.ACCEPT)
                except IllegalStateException:  # its lock was lost: _ack says so, and goes on
                    self._ack(message, record, AcknowledgeType.ACCEPT, "accepted")
                else:
                    self.outcomes["accepted"] += 1

    def _run_job(self, instance, messages: list[Message], records: list, lock_from: float,
                 held: list[tuple[Message, Any, int, float]]) -> None:
        """One job: the consumer's entry point on ``messages``, then each message settled. Kept
        lean: it runs per message for ``consume_one`` (benchmarks/framework.py measures it)."""
        events = self.runtime.events
        wanted = events.wanted
        started = time.monotonic()
        job = self.job = Job(self, messages, records, started, lock_from)  # the renewer watches it
        renewer = self.runtime.renewer
        if lock_from + self.lock_ms / 2000 < renewer.next_check:
            renewer.wake()  # a lock short enough to need renewing before the renewer looks again
        count = len(messages)
        self.in_flight += count
        if wanted and "job.started" in wanted:
            events.publish("job.started", route=self.route.name, messages=messages)
        error: BaseException | None = None
        settled: dict | None = None
        try:
            arg = messages[0] if self._one else messages
            if self._loop is not None:
                self._loop.run_until_complete(self._entry(arg))
            elif self._executor == "process":
                settled, error = self.runtime.process_jobs.run(self.route, self._method, arg)
            else:
                self._entry(arg)
        except Exception as exc:  # the route's error policy decides
            error = exc
        finally:
            self.job = None
            self.in_flight -= count
        self._after_job(instance, messages, records, job, error, settled, held)

    def _after_job(self, instance, messages: list[Message], records: list, job: Job, error: BaseException | None,
                   settled: dict | None, held: list[tuple[Message, Any, int, float]]) -> None:
        """Settle each message of a job that ended (``error``: what it raised)."""
        events = self.runtime.events
        wanted = events.wanted
        started = job.started
        if instance._settled:
            settled = {**(settled or {}), **instance._take_settled()}
        if error is None:
            self.done += 1
            if wanted and "job.finished" in wanted:
                events.publish("job.finished", route=self.route.name, messages=messages,
                               duration_s=time.monotonic() - started)
            if not settled and self._accept_unsettled:  # the usual case: every message accepted
                with self.lock:
                    for message, record in zip(messages, records):
                        self._ack(message, record, AcknowledgeType.ACCEPT, "accepted")
                return
        else:
            self.failed += 1
        route, settings = self.route, self.settings
        verdicts = decide(messages, settled or {}, error is not None, settings)
        info = None if error is None else describe(error)
        if error is not None and "job.failed" in wanted:
            events.publish("job.failed", route=route.name, messages=messages, duration_s=time.monotonic() - started,
                           error=error, verdicts=[v.kind.value for _, v in verdicts], error_id=info.error_id)
        for (message, verdict), record in zip(verdicts, records):
            if verdict.kind is VerdictKind.BACKOFF:
                if settled and message.coordinates in settled:  # the consumer's own pause(message, ms)
                    backoff_ms = verdict.backoff_ms
                elif self._broker_backoff:
                    self._release_for_backoff(message, record, verdict.backoff_ms, info)
                    continue
                else:  # the retry policy's backoff, waited out here: within the lock (delivery_controls.py)
                    backoff_ms = min(verdict.backoff_ms, route.max_backoff_ms())
                held.append((message, record, backoff_ms, job.lock_from))
                self._hold_visible(message, record, job.lock_from)
                if info is not None:
                    self._failed(message, info, OUTCOME_RETRIED, f"held {backoff_ms} ms by the worker, then released")
                continue
            self._settle(message, record, verdict, info, lock_from=job.lock_from)

    def _failed(self, message: Message, info: ErrorInfo, outcome: str, detail: str = "") -> None:
        self.runtime.failures.record(self.route.name, message, info, outcome, self.settings["max_attempts"], detail)

    def _release_for_backoff(self, message: Message, record, backoff_ms: int, info: ErrorInfo | None) -> None:
        """Release now; the broker holds the record back for the group's redelivery backoff, which
        is the route's (``backoff_ms``: its wait at this delivery count)."""
        events = self.runtime.events
        if events.wants("job.backoff"):
            events.publish("job.backoff", route=self.route.name, message=message, backoff_ms=backoff_ms,
                           waiter=BROKER)
        with self.lock:
            self._ack(message, record, AcknowledgeType.RELEASE, OUTCOME_RETRIED, info,
                      f"the broker holds it back {backoff_ms} ms")

    def _settle(self, message: Message, record, verdict: Verdict, info: ErrorInfo | None,
                reason: str | None = None, lock_from: float | None = None) -> None:
        """Carry out ``verdict``; ``info``: the job's failure. A REJECT with a dead-letter topic
        writes the letter first (dead_letters.py): then ACCEPT where the broker would write a
        second one, else REJECT. A letter that cannot be written now releases the record (it
        comes back); one that can never be written is said, and the record settled without it."""
        kind = verdict.kind
        outcome = _OUTCOME[kind]
        ack_type = _ACK[kind]
        detail = ""
        if kind is VerdictKind.RELEASE and info is not None:
            outcome = OUTCOME_RETRIED
        elif kind is VerdictKind.REJECT:
            outcome = OUTCOME_DEAD_LETTERED if verdict.exhausted else OUTCOME_REJECTED
            if self.route.settings["dead_letter_topic"]:
                sink = self.runtime.dead_letters
                reason = reason or (dlh.REASON_MAX_ATTEMPTS if verdict.exhausted else dlh.REASON_REJECTED)
                # the record stays ours while its letter is written: the renewer watches it as a job
                self.job = Job(self, (message,), (record,), time.monotonic(),
                               self.fetched_at if lock_from is None else lock_from)
                self.runtime.renewer.wake()
                try:
                    written, detail = sink.write(self.route, message, reason=reason, info=info)
                except DeadLetterRetriable as exc:  # the record comes back; its letter is tried again then
                    self.job = None
                    log.error("route %s: %s; releasing %s-%d@%d instead (it comes back)", self.route.name, exc,
                              message.topic, message.partition, message.offset)
                    self.runtime.events.publish("worker.error", route=self.route.name, error=exc, kind="dead_letter")
                    with self.lock:
                        self._ack(message, record, AcknowledgeType.RELEASE, "released", info,
                                  "its dead letter could not be written")
                    return
                self.job = None
                if written:
                    self.dead_lettered += 1
                    if sink.settle_as(self.route) == "accept":
                        ack_type = AcknowledgeType.ACCEPT
            elif info is None:
                log.warning("route %s: %s-%d@%d rejected (no dead_letter_topic): archived", self.route.name,
                            message.topic, message.partition, message.offset)
        with self.lock:
            self._ack(message, record, ack_type, outcome, info, detail)

    def _ack(self, message: Message, record, ack_type: int, outcome: str, info: ErrorInfo | None = None,
             detail: str = "") -> str:
        """Acknowledge; the outcome it had (``lock-lost`` when the record is no longer ours). A
        failed job's message (``info``) is recorded as a failure before ``message.settled``."""
        if self._lost and (record.topic, record.partition, record.offset) in self._lost:
            self._lost.discard((record.topic, record.partition, record.offset))
            log.warning("route %s: %s-%d@%d: its lock was lost (a renewal failed), so it cannot be %s; the broker "
                        "delivers it again", self.route.name, record.topic, record.partition, record.offset, outcome)
            outcome = OUTCOME_LOCK_LOST
        else:
            try:
                self.consumer.acknowledge(record, ack_type)
            except (IllegalStateException, AttributeError) as exc:  # lock lost, or closed by a forced stop
                log.warning("route %s: %s-%d@%d could not be acknowledged (%s); the broker delivers it again",
                            self.route.name, record.topic, record.partition, record.offset, exc)
                outcome = OUTCOME_LOCK_LOST
        self.outcomes[outcome] += 1
        if info is not None:
            self._failed(message, info, outcome, detail)
        events = self.runtime.events
        if events.wants("message.settled"):
            events.publish("message.settled", route=self.route.name, message=message, outcome=outcome)
        return outcome

    def _settle_failed_decode(self, record, exc: Exception) -> None:
        self.failed += 1
        self._settle(_undecoded(record), record, Verdict(VerdictKind.REJECT), describe(exc),
                     reason=dlh.REASON_DESERIALIZE_FAILED)

    # ------------------------------------------------------------------ pause

    def _hold_visible(self, message: Message, record, lock_from: float) -> None:
        """A message held for a backoff is the renewer's to watch at once, while the poll's later
        jobs still run (its lock runs from its acquisition, not from the end of the poll)."""
        with self.lock:
            job = self.held_job
            if job is None:
                self.held_job = Job(self, [message], [record], time.monotonic(), lock_from, held=True)
            else:
                job.messages.append(message)
                job.records.append(record)
                job.lock_from = min(job.lock_from, lock_from)
        self.runtime.renewer.wake()

    def _hold(self, held: list[tuple[Message, Any, int, float]]) -> None:
        """The seed's pause: fetch nothing until the longest backoff has passed, keeping the held
        records' locks (the renewer renews them if need be), then release them."""
        now = time.monotonic()
        events = self.runtime.events
        for message, _record, backoff_ms, _ in held:
            if events.wants("job.backoff"):
                events.publish("job.backoff", route=self.route.name, message=message, backoff_ms=backoff_ms,
                               waiter=WORKER)
        self._send_settled()
        try:
            until = now + max(h[2] for h in held) / 1000
            while not self.runtime.stopping.is_set():
                remaining = until - time.monotonic()
                if remaining <= 0:
                    break
                self.runtime.stopping.wait(remaining)
        finally:
            self.held_job = None
        with self.lock:
            for message, record, _, _ in held:
                self._ack(message, record, AcknowledgeType.RELEASE, OUTCOME_RETRIED)

    def _send_settled(self) -> None:
        """Send the acknowledgements of the jobs that finished before a wait in which nothing is
        fetched (they would ride on the next fetch): an ACCEPT held back past its lock would let
        an accepted job run again. Its failure is said by _on_acknowledged."""
        try:
            with self.lock:
                self._commit(True, max(self.lock_ms / 4000, 0.5))
        except (KafkaException, IllegalStateException) as exc:
            log.warning("route %s worker %d: sending the acknowledgements before a backoff failed: %s",
                        self.route.name, self.index, exc)

    # ------------------------------------------------------------------ hooks for consumers and the renewer

    def renew(self, messages: list[Message], records: list | None = None, job: Job | None = None) -> bool:
        """RENEW these messages' locks now (from the job's thread, or the renewer for ``job``);
        True if the broker confirmed every one. The renewer's RENEW is sent only while ``job`` is
        still this worker's running or held job (checked under the lock the worker's own
        acknowledgements take), so it never overwrites the job's final acknowledgement."""
        consumer = self.consumer
        if consumer is None:
            return False
        if records is None:
            records = self._records_of(messages)
        with self.lock:
            if job is not None and job is not self.job and job is not self.held_job:
                return True  # the job ended meanwhile: nothing to renew
            try:
                for record in records:
                    consumer.acknowledge(record, AcknowledgeType.RENEW)
            except IllegalStateException as exc:  # the client no longer holds it (its lock was lost)
                errors: list = [exc]
            else:
                results = self._commit(True, self.lock_ms / 2000)
                wanted = {(r.topic, r.partition) for r in records}
                errors = [e for tp, e in results.items() if e is not None and tuple(tp) in wanted]
                late = [e for e in errors if isinstance(e, KafkaTimeoutError)]
                if late and len(late) == len(errors):
                    # not answered in time (a busy broker): not a failure. Its answer comes later;
                    # if the renewal failed then, the client drops the records and their
                    # acknowledgement fails (said in _ack); treating it as lost here would keep
                    # the job's ACCEPT from the broker, and a job that was done would run again
                    log.warning("route %s: a lock renewal of %s was not answered within %.1f s; it is renewed "
                                "again at the next turn", self.route.name, [m.coordinates for m in messages],
                                self.lock_ms / 2000)
                    errors = []
            if errors:  # the client dropped these records: their acknowledgement can only fail now
                self._lost.update((r.topic, r.partition, r.offset) for r in records)
        self.renewed += 1
        events = self.runtime.events
        name = "job.renew_failed" if errors else "job.renewed"
        if events.wants(name):
            events.publish(name, route=self.route.name, messages=messages, error=errors[0] if errors else None)
        return not errors

    def _records_of(self, messages: list[Message]) -> list:
        wanted = {m.coordinates for m in messages}
        job = self.job
        if job is None:
            return []
        return [r for r in job.records if (r.topic, r.partition, r.offset) in wanted]

    def release_waiting(self, job: Job) -> int:
        """Back-pressure: ``job`` outgrew half the lock; release the messages of its poll that have
        not started, so that other workers take them. Called by the renewer; nothing happens when
        the job has ended meanwhile (its poll's waiting records may be the next job's)."""
        with self.lock:  # no poll can start while it is held: _waiting is the job's poll's
            if job is not self.job:
                return 0
            waiting = self._waiting
        released = 0
        while True:
            try:
                record = waiting.popleft()
            except IndexError:
                break
            self._release_unstarted(record)
            released += 1
        if released:
            with self.lock:
                self._commit(False)
        return released

    def force_close(self) -> None:
        """The stop's deadline passed (or a second signal) while a job still runs: close the
        consumer from the stopping thread; the broker releases what was not acknowledged."""
        consumer = self.consumer
        if consumer is None:
            return
        acquired = self.lock.acquire(timeout=2.0)
        try:
            consumer.close(timeout=5.0)
        except Exception as exc:  # noqa: BLE001 - closing at the end: report, go on
            log.warning("route %s worker %d: forced close: %s", self.route.name, self.index, exc)
        finally:
            if acquired:
                self.lock.release()
