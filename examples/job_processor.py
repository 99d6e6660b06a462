"""A job processor on a share group, with retries, backoff and dead letters (quafka.framework).

Each job is a JSON object ``{"id": 7, "kind": "ok"}`` on the topic ``jobs``. Kinds:

- ``ok``: done at once;
- ``flaky``: fails on its first delivery (a transient error); the route's policy holds it for the
  backoff, releases it, and the next delivery succeeds;
- ``long``: runs three times the acquisition lock; the worker renews the lock until it is done;
- ``poison``: cannot be processed; the consumer rejects it and it goes to the dead-letter topic
  ``dlq.jobs`` (written by the broker on share.version 2, else by the worker).

Run it (the group reads from the earliest offset; the lock is the group's share.record.lock.duration.ms):

    quafka configs --bootstrap-server 127.0.0.1:9092 --alter --entity-type groups --entity-name job-workers \\
        --add-config share.auto.offset.reset=earliest
    QUAFKA_BOOTSTRAP=127.0.0.1:9092 quafka worker examples.job_processor:app --processes 4 --concurrency 4

Settings from the environment: ``QUAFKA_BOOTSTRAP`` (default 127.0.0.1:9092), ``JOBS_TOPIC``
(jobs), ``JOBS_GROUP`` (job-workers), ``JOBS_DLQ`` (dlq.jobs), ``JOBS_LOCK_MS`` (30000: the group's lock, which the long
jobs run three times over) and ``JOBS_JOURNAL`` (a directory: when set, each process appends what
it did to ``<pid>.log`` there, one line per run — the tests read it).
"""

from __future__ import annotations

import os
import time

from quafka.framework import App, Backoff, Consumer

LOCK_MS = int(os.environ.get("JOBS_LOCK_MS", "30000"))
JOURNAL_DIR = os.environ.get("JOBS_JOURNAL")


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
        if job["kind"] == "long":
            time.sleep(3 * LOCK_MS / 1000)  # the worker renews the lock meanwhile
        self._note("done", job, message, started)  # accepted when consume_one returns

    def _note(self, what, job, message, started):
        if self.journal is not None:
            self.journal.write(f"{what} {job['id']} {job['kind']} {message.delivery_attempt} {started:.6f} "
                               f"{time.time():.6f}\n")
            self.journal.flush()

    def shutdown(self):
        if self.journal is not None:
            self.journal.close()


app = App({"bootstrap.servers": os.environ.get("QUAFKA_BOOTSTRAP", "127.0.0.1:9092")}, name="job-processor")
app.share_group(os.environ.get("JOBS_GROUP", "job-workers")).topic(
    os.environ.get("JOBS_TOPIC", "jobs"), JobConsumer,
    concurrency=4,
    max_poll_records=1,                      # one job at a time per worker: work spreads over every worker
    deserializer="json",
    lock_duration_ms=LOCK_MS,
    backoff=Backoff(initial_ms=100, multiplier=2.0, max_ms=min(2_000, LOCK_MS - 500)),
    backoff_margin_ms=500,
    max_attempts=5,
    dead_letter_topic=os.environ.get("JOBS_DLQ", "dlq.jobs"),
)
