"""Consumer classes and helpers for the framework's tests. They live in an importable module
(``support.framework_jobs``) so that a process-pool executor can import them in its processes."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import threading
import time
from collections import defaultdict

from confluent_kafka import Producer

from quafka.client import Admin, NewTopic
from quafka.framework import App, Backoff, Consumer

LOCK_MS = 1000  # the embedded broker's record lock in these tests (its minimum allowed is lowered to it)
# a worker joining a group gets its assignment at once rather than at its next heartbeat (KIP-1263's
# share.assignment.interval.ms would hold a second assignment back for 1 s)
BROKER_CONFIG = {"group.share.min.record.lock.duration.ms": LOCK_MS, "group.share.record.lock.duration.ms": LOCK_MS,
                 "group.share.assignment.interval.ms": 0}


class Journal:
    """What jobs saw, across threads: (value, delivery attempt, start, end) per run."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[tuple[bytes, int, float, float]] = []

    def add(self, value: bytes, attempt: int, started: float) -> None:
        with self.lock:
            self.runs.append((value, attempt, started, time.monotonic()))

    def values(self) -> list[bytes]:
        with self.lock:
            return [r[0] for r in self.runs]

    def by_value(self) -> dict[bytes, list[tuple[int, float, float]]]:
        out: dict[bytes, list] = defaultdict(list)
        with self.lock:
            for value, attempt, started, ended in self.runs:
                out[value].append((attempt, started, ended))
        return dict(out)


JOURNAL = Journal()


class Jobs(Consumer):
    """poison → reject; flaky → fails on its first delivery; slow:<ms> → sleeps; else done."""

    def consume_one(self, message):
        started = time.monotonic()
        value = message.value
        if value == b"poison":
            self.reject(message)
        elif value.startswith(b"flaky") and message.delivery_attempt == 1:
            JOURNAL.add(value, message.delivery_attempt, started)
            raise RuntimeError(f"{value!r} failed on its first delivery")
        elif value.startswith(b"slow:"):
            time.sleep(int(value.split(b":")[1]) / 1000)
        JOURNAL.add(value, message.delivery_attempt, started)


class CpuJobs(Consumer):
    """A CPU-bound job for the process executor: the record's value hashed 20,000 times; notes
    which process ran it in the file $CPU_JOURNAL."""

    def consume_one(self, message):
        digest = message.value
        for _ in range(20_000):
            digest = hashlib.sha256(digest).digest()
        if message.value == b"reject-me":
            self.reject(message)
        with open(os.environ["CPU_JOURNAL"], "a") as journal:
            journal.write(f"{message.value.decode()} {multiprocessing.current_process().name} {os.getpid()}\n")


def env_app() -> App:
    """The apps tests/framework/test_share_worker.py runs with `quafka worker support.framework_jobs:app`,
    configured from the environment: FW_KIND=cpu (CpuJobs on a process pool) or jobs (Jobs)."""
    app = App({"bootstrap.servers": os.environ["QUAFKA_BOOTSTRAP"]})
    if os.environ["FW_KIND"] == "cpu":
        app.share_group(os.environ["FW_GROUP"]).topic(os.environ["FW_TOPIC"], CpuJobs, concurrency=2,
                                                      max_poll_records=1, executor="process")
    else:
        app.share_group(os.environ["FW_GROUP"]).topic(os.environ["FW_TOPIC"], Jobs, max_poll_records=1,
                                                      lock_duration_ms=LOCK_MS, backoff_margin_ms=200,
                                                      backoff=Backoff(300, 1.0, 300))
    return app


if "FW_KIND" in os.environ:
    app = env_app()


def create_topic(bootstrap: str, topic: str, partitions: int = 1, configs: dict | None = None) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, partitions, 1, dict(configs or {}))])


def share_group_from_earliest(bootstrap: str, group: str, **configs: str) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.alter_configs("group", group, set={"share.auto.offset.reset": "earliest", **configs})


def produce(bootstrap: str, topic: str, values, partition: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for value in values:
        if partition is None:
            producer.produce(topic, value=value)
        else:
            producer.produce(topic, value=value, partition=partition)
        producer.poll(0)
    assert producer.flush(30) == 0
