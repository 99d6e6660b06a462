"""A job processor on a share group, with retries that wait in the broker, delayed jobs and dead
letters (quafka.framework).

Each job is a JSON object ``{"id": 7, "kind": "ok"}`` on the topic ``jobs``. Kinds:

- ``ok``: done at once;
- ``flaky``: fails on its first delivery (a transient error). The route's backoff is 30 s, twice
  the group's 15 s acquisition lock: on quafka the worker releases the job at once and the broker
  holds it back for the backoff (the group's ``quafka.share.redelivery.backoff.*``, which the
  framework sets from the route), while the worker goes on with other jobs; on Apache Kafka the
  worker holds it under its lock instead, the backoff capped to the lock (a line in the log says so);
- ``long``: runs three times the acquisition lock; the worker renews the lock until it is done;
- ``poison``: cannot be processed; the consumer rejects it and it goes to the dead-letter topic
  ``dlq.jobs`` at once;
- ``bad``: raises ``ValueError("bad size")`` at every delivery (a bug, or data the code cannot
  handle): each failed attempt is logged with its traceback, and after the third (``max_attempts``)
  the job goes to ``dlq.jobs`` with the error in its headers (``quafka.error.class``,
  ``quafka.error.message``, ``quafka.error.traceback``);
- ``welcome``: done, and enqueues a ``reminder`` job for the same id, to be delivered a minute
  later (``app.enqueue(..., delay_ms=...)``: the worker turned on the group's
  ``quafka.share.delivery.delay.enable`` at start);
- ``reminder``: done, not before its time.

Run it (the group reads from the earliest offset and locks a record for 15 s):

    quafka configs --bootstrap-server 127.0.0.1:9092 --alter --entity-type groups --entity-name job-workers \\
        --add-config share.auto.offset.reset=earliest,share.record.lock.duration.ms=15000
    QUAFKA_BOOTSTRAP=127.0.0.1:9092 quafka worker examples.job_processor:app --processes 4 --concurrency 4

Settings from the environment: ``QUAFKA_BOOTSTRAP`` (default 127.0.0.1:9092), ``JOBS_TOPIC``
(jobs), ``JOBS_GROUP`` (job-workers), ``JOBS_DLQ`` (dlq.jobs), ``JOBS_LOCK_MS`` (15000: the
group's lock, which the long jobs run three times over), ``JOBS_BACKOFF_MS`` (30000: the first
retry's wait), ``JOBS_REMINDER_MS`` (60000: how long after a welcome its reminder comes) and
``JOBS_JOURNAL`` (a directory: when set, each process appends what it did to ``<pid>.log`` there,
one line per run — the tests read it).
"""

from __future__ import annotations

import os
import time

from quafka.framework import App, Backoff, Consumer

LOCK_MS = int(os.environ.get("JOBS_LOCK_MS", "15000"))
BACKOFF_MS = int(os.environ.get("JOBS_BACKOFF_MS", "30000"))
REMINDER_MS = int(os.environ.get("JOBS_REMINDER_MS", "60000"))
JOURNAL_DIR = os.environ.get("JOBS_JOURNAL")
TOPIC = os.environ.get("JOBS_TOPIC", "jobs")


class TransientError(Exception):
    """A failure worth retrying (a timeout of a downstream service, say)."""


class JobConsumer(Consumer):
    def initialized(self):
        self.journal = open(os.path.join(JOURNAL_DIR, f"{os.getpid()}.log"), "a") if JOURNAL_DIR else None

    def consume_one(self, message):
        started = time.time()
        job = message.value
        if job["kind"] == "poison":
            self.reject(message)  # never retried: to the dead-letter topic
            self._note("rejected", job, message, started)
            return
        if job["kind"] == "flaky" and message.delivery_attempt == 1:
            self._note("failed", job, message, started)
            raise TransientError(f"job {job['id']}: the service timed out")
        if job["kind"] == "bad":
            self._note("failed", job, message, started)
            raise ValueError("bad size")  # at every delivery: dead-lettered after max_attempts
        if job["kind"] == "long":
            time.sleep(3 * LOCK_MS / 1000)  # the worker renews the lock meanwhile
        if job["kind"] == "welcome":
            # durable when enqueue returns; should this job fail after it, the retry enqueues again
            app.enqueue(TOPIC, {"id": job["id"], "kind": "reminder"}, delay_ms=REMINDER_MS)
        self._note("done", job, message, started)  # accepted when consume_one returns

    def _note(self, what, job, message, started):
        if self.journal is not None:
            self.journal.write(f"{what} {job['id']} {job['kind']} {message.delivery_attempt} {started:.6f} "
                               f"{time.time():.6f} {message.timestamp}\n")
            self.journal.flush()

    def shutdown(self):
        if self.journal is not None:
            self.journal.close()


app = App({"bootstrap.servers": os.environ.get("QUAFKA_BOOTSTRAP", "127.0.0.1:9092")}, name="job-processor")
app.share_group(os.environ.get("JOBS_GROUP", "job-workers")).topic(
    TOPIC, JobConsumer,
    concurrency=4,
    max_poll_records=1,                      # one job at a time per worker: work spreads over every worker
    deserializer="json",
    lock_duration_ms=LOCK_MS,
    backoff=Backoff(initial_ms=BACKOFF_MS, multiplier=2.0, max_ms=8 * BACKOFF_MS),  # the broker waits it out
    backoff_margin_ms=500,
    max_attempts=3,                          # a job that fails three times goes to the dead-letter topic
    dead_letter_topic=os.environ.get("JOBS_DLQ", "dlq.jobs"),
)
