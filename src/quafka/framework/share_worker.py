"""A share-group route's workers: each is one ``ShareConsumer`` (explicit acknowledgement,
``record_limit`` acquisition, so a poll takes at most ``max_poll_records``) on its own thread,
running one job at a time; ``concurrency`` of them per process. Any record may run on any worker
of any process: the share group hands records to whichever member fetches.

A worker's cycle: poll → run the jobs (``consume(messages)`` once, or ``consume_one`` per message)
→ settle each message as it finishes (ACCEPT, RELEASE, REJECT; the acknowledgements ride on the next
fetch) → if a message was paused, wait until the backoff has passed, then RELEASE it (the seed's
pause: no fetching meanwhile) → poll.

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
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

from quafka.client import AcknowledgeType, KafkaException, ShareConsumer, WakeupException

from .consumers import bind, call
from .messages import Message
from .policies import Verdict, VerdictKind, decide

if TYPE_CHECKING:
    from .worker import Runtime

__all__ = ["ShareWorker"]

log = logging.getLogger("quafka.framework")
_ACK = {VerdictKind.ACCEPT: AcknowledgeType.ACCEPT, VerdictKind.RELEASE: AcknowledgeType.RELEASE,
        VerdictKind.REJECT: AcknowledgeType.REJECT}
_OUTCOME = {VerdictKind.ACCEPT: "accepted", VerdictKind.RELEASE: "released", VerdictKind.REJECT: "rejected"}
POLL_TIMEOUT_S = 1.0


class Job:
    """Messages running (or held by a pause) on a worker, as the renewer sees them."""
    __slots__ = ("worker", "messages", "records", "started", "lock_from", "held")

    def __init__(self, worker: ShareWorker, messages: list[Message], records: list, started: float,
                 lock_from: float, held: bool = False) -> None:
        self.worker, self.messages, self.records = worker, messages, records
        self.started, self.lock_from, self.held = started, lock_from, held


class ShareWorker(threading.Thread):
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
        self._waiting: list[tuple[Message, Any, float]] = []  # unstarted: (message, record, lock_from)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._key_d, self._value_d = route.deserializers()
        self._lock_warned = False

    # ------------------------------------------------------------------ thread

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - reported to the worker, which stops the process
            self.error = exc
            log.error("route %s worker %d stopped: %s\n%s", self.route.name, self.index, exc, traceback.format_exc())
            self.runtime.events.publish("worker.error", route=self.route.name, error=exc)
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
        config.setdefault("client.id", f"quafka-worker-{route.group}")
        return config

    def _run(self) -> None:
        route, runtime = self.route, self.runtime
        instance = bind(route.consumer, "share")()
        instance.route = route
        instance._hooks = self
        instance._max_backoff_ms = route.max_backoff_ms()
        if route.executor == "async":
            self._loop = asyncio.new_event_loop()
        method = route.entry_point
        self.consumer = consumer = ShareConsumer(self._config())
        try:
            consumer.subscribe([route.topic])
            instance.initialized()
            while not runtime.stopping.is_set():
                try:
                    with self.lock:
                        records = consumer.poll(POLL_TIMEOUT_S)
                except WakeupException:
                    continue
                if not records:
                    continue
                self._observe_lock()
                polled = time.monotonic()
                held = self._process(instance, method, records, polled)
                if held:
                    self._hold(held)
        finally:
            try:
                instance.shutdown()
            finally:
                self._close()

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
        key_d, value_d = self._key_d, self._value_d
        pairs = []
        for record in records:
            try:
                pairs.append((Message.from_record(record, key_d, value_d), record))
            except Exception as exc:  # a message that does not deserialize cannot be processed: reject it
                self._settle_failed_decode(record, exc)
        held: list[tuple[Message, Any, int, float]] = []
        if method == "consume":
            if pairs:
                self._run_job(instance, method, pairs, polled, held)
            return held
        self._waiting = [(m, r, polled) for m, r in pairs]
        try:
            while self._waiting:
                with self.lock:
                    if not self._waiting:
                        break
                    message, record, lock_from = self._waiting.pop(0)
                    stopping = self.runtime.stopping.is_set()
                    too_late = (time.monotonic() - lock_from) * 1000 >= self.lock_ms - self.margin_ms
                    if stopping or too_late:
                        self._ack(message, record, AcknowledgeType.RELEASE, "released")
                        continue
                self._run_job(instance, method, [(message, record)], lock_from, held)
        finally:
            self._waiting = []
        return held

    def _run_job(self, instance, method: str, pairs: list[tuple[Message, Any]], lock_from: float,
                 held: list[tuple[Message, Any, int, float]]) -> None:
        events, route = self.runtime.events, self.route
        messages = [m for m, _ in pairs]
        arg = messages if method == "consume" else messages[0]
        started = time.monotonic()
        job = Job(self, messages, [r for _, r in pairs], started, lock_from)
        self.in_flight += len(messages)
        if events.wants("job.started"):
            events.publish("job.started", route=route.name, messages=messages)
        renewer = self.runtime.renewer
        renewer.add(job)
        error: BaseException | None = None
        settled: dict = {}
        try:
            if route.executor == "process":
                settled, error = self.runtime.process_jobs.run(route, method, arg)
            else:
                call(instance, method, arg, self._loop)
        except Exception as exc:  # the route's error policy decides
            error = exc
        finally:
            renewer.remove(job)
            self.in_flight -= len(messages)
        duration = time.monotonic() - started
        settled = {**settled, **instance._take_settled()}
        if error is None:
            self.done += 1
            if events.wants("job.finished"):
                events.publish("job.finished", route=route.name, messages=messages, duration_s=duration)
        else:
            self.failed += 1
        verdicts = decide(messages, settled, error is not None, route.settings)
        if error is not None and events.wants("job.failed"):
            events.publish("job.failed", route=route.name, messages=messages, duration_s=duration, error=error,
                           verdicts=[v.kind.value for _, v in verdicts])
        for (message, verdict), record in zip(verdicts, (r for _, r in pairs)):
            if verdict.kind is VerdictKind.BACKOFF:
                held.append((message, record, verdict.backoff_ms, job.lock_from))
                continue
            self._settle(message, record, verdict, error)

    def _settle(self, message: Message, record, verdict: Verdict, error: BaseException | None) -> None:
        outcome = _OUTCOME[verdict.kind]
        if verdict.kind is VerdictKind.REJECT and self.route.settings["dead_letter_topic"]:
            sink = self.runtime.dead_letters
            if sink.mode(self.route) == "produce":
                settings = self.route.settings
                # Kafka's two causes: the client rejected it, or its deliveries ran out (here: the
                # route's max_attempts, after failures)
                exhausted = (error is not None and settings["on_error"] != "reject"
                             and message.delivery_attempt >= settings["max_attempts"])
                try:
                    sink.produce(self.route, message, rejected=not exhausted,
                                 error=None if error is None else f"{type(error).__name__}: {error}")
                except KafkaException as exc:  # nothing is lost: the record comes back
                    log.error("route %s: %s; releasing the record instead", self.route.name, exc)
                    self.runtime.events.publish("worker.error", route=self.route.name, error=exc)
                    with self.lock:
                        self._ack(message, record, AcknowledgeType.RELEASE, "released")
                    return
            outcome = "dead-lettered"
            self.dead_lettered += 1
        with self.lock:
            self._ack(message, record, _ACK[verdict.kind], outcome)

    def _ack(self, message: Message, record, ack_type: int, outcome: str) -> None:
        self.consumer.acknowledge(record, ack_type)
        events = self.runtime.events
        if events.wants("message.settled"):
            events.publish("message.settled", route=self.route.name, message=message, outcome=outcome)

    def _settle_failed_decode(self, record, exc: Exception) -> None:
        log.error("route %s: %s-%d@%d does not deserialize (%s); rejecting it", self.route.name, record.topic,
                  record.partition, record.offset, exc)
        message = Message(record.topic, record.partition, record.offset, record.timestamp, record.key, record.value,
                          record.headers, record.delivery_count or 1, record.key, record.value)
        self._settle(message, record, Verdict(VerdictKind.REJECT), exc)

    # ------------------------------------------------------------------ pause

    def _hold(self, held: list[tuple[Message, Any, int, float]]) -> None:
        """The seed's pause: fetch nothing until the longest backoff has passed, keeping the held
        records' locks (the renewer renews them if need be), then release them."""
        now = time.monotonic()
        events = self.runtime.events
        for message, _record, backoff_ms, _ in held:
            if events.wants("job.backoff"):
                events.publish("job.backoff", route=self.route.name, message=message, backoff_ms=backoff_ms)
        job = Job(self, [h[0] for h in held], [h[1] for h in held], now, min(h[3] for h in held), held=True)
        self.runtime.renewer.add(job)
        try:
            until = now + max(h[2] for h in held) / 1000
            while not self.runtime.stopping.is_set():
                remaining = until - time.monotonic()
                if remaining <= 0:
                    break
                self.runtime.stopping.wait(remaining)
        finally:
            self.runtime.renewer.remove(job)
        with self.lock:
            for message, record, _, _ in held:
                self._ack(message, record, AcknowledgeType.RELEASE, "backoff")

    # ------------------------------------------------------------------ hooks for consumers and the renewer

    def renew(self, messages: list[Message], records: list | None = None) -> bool:
        """RENEW these messages' locks now (from the job's thread or the renewer); True if the
        broker confirmed every one."""
        consumer = self.consumer
        if consumer is None:
            return False
        if records is None:
            records = self._records_of(messages)
        with self.lock:
            for record in records:
                consumer.acknowledge(record, AcknowledgeType.RENEW)
            results = self._commit(True, self.lock_ms / 2000)
        errors = [e for e in results.values() if e is not None]
        self.renewed += 1
        events = self.runtime.events
        name = "job.renew_failed" if errors else "job.renewed"
        if events.wants(name):
            events.publish(name, route=self.route.name, messages=messages, error=errors[0] if errors else None)
        return not errors

    def _records_of(self, messages: list[Message]) -> list:
        wanted = {m.coordinates for m in messages}
        job = self.runtime.renewer.job_of(self)
        if job is None:
            return []
        return [r for r in job.records if (r.topic, r.partition, r.offset) in wanted]

    def release_waiting(self) -> int:
        """Back-pressure: the running job outgrew half the lock; release the messages of its batch
        that have not started, so that other workers take them. Called by the renewer."""
        with self.lock:
            waiting, self._waiting = self._waiting, []
            for message, record, _ in waiting:
                self._ack(message, record, AcknowledgeType.RELEASE, "released")
            if waiting:
                self._commit(False)
        return len(waiting)

    def force_close(self) -> None:
        """The stop's deadline passed (or a second signal) while a job still runs: close the
        consumer from the stopping thread; the broker releases what was not acknowledged."""
        consumer, self.consumer = self.consumer, None
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

    def seek(self, topic: str, partition: int, offset: int) -> None:  # pragma: no cover - share routes have none
        raise AttributeError("seek() applies to consumer-group routes")

    def resume(self, topic: str, partition: int) -> None:  # pragma: no cover
        raise AttributeError("resume() applies to consumer-group routes")
