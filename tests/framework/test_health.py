"""Loud where it used to be silent (framework/health.py), against a real broker over loopback: a
route on a misspelled topic (a warning at start and at each check; strict refuses, in the API and
in `quafka worker --strict`), a broker stopped for 10 s and started again on the same port and data
directory (one line when it goes, one when it is back, with the time it was out), and workers
without an assignment (a share group's assignment interval; a consumer group with more members
than partitions). Each test reads the worker's log lines."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from support import free_port, wait_until
from support.framework_jobs import BROKER_CONFIG, Jobs, create_topic, share_group_from_earliest

from quafka.framework import App, Worker, health
from quafka.framework.health import MissingTopicError

TESTS = Path(__file__).resolve().parents[1]
FAST_GROUPS = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 500}
QUICK = {"heartbeat.interval.ms": 200, "session.timeout.ms": 6000}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def messages(caplog, containing: str) -> list[str]:
    return [r.getMessage() for r in list(caplog.records) if containing in r.getMessage()]


def misspelled(topic: str) -> str:
    return topic[1] + topic[0] + topic[2:]  # "orders-…" → "roders-…"


def stop(worker: Worker) -> None:
    worker.stop()
    assert worker.wait() == 0


def test_a_misspelled_topic_is_warned_at_start_and_at_each_check(make_broker, caplog, monkeypatch):
    monkeypatch.setattr(health, "TOPIC_CHECK_INTERVAL_S", 0.5)  # every minute, in production
    monkeypatch.setattr(health, "PROBE_INTERVAL_S", 0.1)
    caplog.set_level(logging.INFO, logger="quafka.framework")
    bs = make_broker(config=BROKER_CONFIG).bootstrap_servers
    topic, group = unique("orders"), unique("workers")
    create_topic(bs, topic)
    wrong = misspelled(topic)
    app = App({"bootstrap.servers": bs})
    app.share_group(group).topic(wrong, Jobs)
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=5)
    worker.start()
    try:
        line = (f"route {group}/{wrong}: topic {wrong!r} does not exist (did you mean {topic!r}?); the route's "
                "workers take nothing until it is created")
        assert messages(caplog, "does not exist")[0] == line  # at start, before the workers
        wait_until(lambda: len(messages(caplog, "does not exist")) >= 3, 10, message="the warning repeated")
        assert set(messages(caplog, "does not exist")) == {line}
        assert all(r.levelno == logging.WARNING for r in caplog.records if "does not exist" in r.getMessage())
        create_topic(bs, wrong)
        wait_until(lambda: messages(caplog, f"route {group}/{wrong}: topic {wrong!r} exists now"), 10,
                   message="the topic noticed")
        count = len(messages(caplog, "does not exist"))
        deadline = time.monotonic() + 1.5  # three more checks: the warning stopped
        wait_until(lambda: time.monotonic() > deadline, 5, interval_s=0.1, message="three checks")
        assert len(messages(caplog, "does not exist")) == count
    finally:
        stop(worker)


def test_strict_refuses_a_misspelled_topic_in_the_api_and_the_cli(make_broker, tmp_path):
    bs = make_broker(config=BROKER_CONFIG).bootstrap_servers
    topic, group = unique("orders"), unique("workers")
    create_topic(bs, topic)
    wrong = misspelled(topic)
    app = App({"bootstrap.servers": bs})
    app.share_group(group).topic(wrong, Jobs)
    worker = Worker(app, handle_signals=False, strict=True)
    with pytest.raises(MissingTopicError) as caught:
        worker.start()
    expected = (f"route {group}/{wrong}: topic {wrong!r} does not exist (did you mean {topic!r}?); strict mode refuses "
                "to start (create the topic, fix the route, or start without --strict)")
    assert str(caught.value) == expected
    assert worker.workers == []

    (tmp_path / "strict_app.py").write_text(
        "import os\nfrom quafka.framework import App, Consumer\n\n\nclass Jobs(Consumer):\n"
        "    def consume_one(self, message):\n        pass\n\n\n"
        "app = App({'bootstrap.servers': os.environ['BS']})\n"
        "app.share_group(os.environ['GROUP']).topic(os.environ['TOPIC'], Jobs)\n")
    env = {**os.environ, "BS": bs, "GROUP": group, "TOPIC": wrong, "PYTHONPATH": str(TESTS.parent / "src")}
    done = subprocess.run([sys.executable, "-m", "quafka", "worker", "strict_app:app", "--strict"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == f"Error: {expected}"
    assert "worker started" not in done.stderr


def test_a_broker_stopped_for_10_s_is_one_line_when_it_goes_and_one_when_it_is_back(make_broker, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="quafka.framework")
    port = free_port()
    config = {**BROKER_CONFIG, "listeners": f"PLAINTEXT://127.0.0.1:{port}"}
    data_dir = str(tmp_path / "data")
    broker = make_broker(data_dir=data_dir, config=config)
    bs = broker.bootstrap_servers
    topic, group = unique("jobs"), unique("workers")
    create_topic(bs, topic)
    share_group_from_earliest(bs, group)
    app = App({"bootstrap.servers": bs})
    app.share_group(group).topic(topic, Jobs, lock_duration_ms=1000, backoff_margin_ms=200)
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=5)
    worker.start()
    producer = Producer({"bootstrap.servers": bs})
    try:
        producer.produce(topic, b"before-the-outage")
        assert producer.flush(10) == 0
        wait_until(lambda: sum(w.done for w in worker.workers) == 1, 20, message="the job before the outage")
        broker.stop()
        stopped_at = time.monotonic()
        wait_until(lambda: messages(caplog, "broker unreachable"), 10, message="the unreachable line")
        wait_until(lambda: time.monotonic() - stopped_at >= 10, 15, interval_s=0.1, message="10 s of outage")
        make_broker(data_dir=data_dir, config=config)  # the same port and data
        [back] = wait_until(lambda: messages(caplog, "broker reachable again"), 15, message="the reachable line")
        producer.produce(topic, b"after-the-outage")  # and the workers work again
        assert producer.flush(10) == 0
        wait_until(lambda: sum(w.done for w in worker.workers) == 2, 30, message="the job after the outage")
    finally:
        stop(worker)
    [down] = messages(caplog, "broker unreachable")
    assert down.startswith(f"broker unreachable ({bs}): ")
    out_s = float(re.fullmatch(rf"broker reachable again after (\d+\.\d) s \({re.escape(bs)}\)", back).group(1))
    assert 9.0 <= out_s <= 20.0
    assert len(messages(caplog, "broker reachable again")) == 1


def test_share_workers_waiting_for_an_assignment_are_told_why(make_broker, caplog, monkeypatch):
    """Kafka's defaults (assignment interval 1 s, heartbeat 5 s): of three workers that join
    together, the first gets partitions at once and the others at their next heartbeat."""
    monkeypatch.setattr(health, "ASSIGNMENT_MARGIN_S", 0.5)
    caplog.set_level(logging.INFO, logger="quafka.framework")
    bs = make_broker().bootstrap_servers
    topic, group = unique("jobs"), unique("workers")
    create_topic(bs, topic)
    app = App({"bootstrap.servers": bs})
    app.share_group(group).topic(topic, Jobs, concurrency=3)
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=5)
    worker.start()
    try:
        [line] = wait_until(lambda: messages(caplog, "have no assignment"), 10, message="the assignment line")
    finally:
        stop(worker)
    found = re.fullmatch(rf"route {group}/{topic}: ([12]) of this process's 3 workers have no assignment (\d+\.\d) s "
                         rf"after start: group {group} recomputes its assignment at most once per "
                         r"share.assignment.interval.ms \(1000 ms\) and a member learns it at its next heartbeat "
                         r"\(share.heartbeat.interval.ms 5000 ms\), so a worker may wait up to 6.0 s \(a share group "
                         r"has room for any number of workers\)", line)
    assert found, line
    assert len(messages(caplog, "have no assignment")) == 1
    [latest] = messages(caplog, "share.auto.offset.reset is latest")  # the group was left at Kafka's default
    assert latest.startswith(f"group {group}: share.auto.offset.reset is latest: a partition the group has not read "
                             "before starts at its end")


def test_a_consumer_group_with_more_workers_than_partitions_says_so(make_broker, caplog, monkeypatch):
    monkeypatch.setattr(health, "CONSUMER_ASSIGNMENT_WAIT_S", 2.0)
    caplog.set_level(logging.INFO, logger="quafka.framework")
    bs = make_broker(config=FAST_GROUPS).bootstrap_servers
    topic, group = unique("orders"), unique("audit")
    create_topic(bs, topic, partitions=1)
    app = App({"bootstrap.servers": bs})
    app.consumer_group(group).topic(topic, Jobs, concurrency=3, kafka=QUICK)
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=5)
    worker.start()
    try:
        [line] = wait_until(lambda: messages(caplog, "more workers than the group has room for"), 20,
                            message="the idle-members line")
    finally:
        stop(worker)
    assert line == (f"route {group}/{topic}: group {group} has 3 members for the 1 partition of {topic}: 2 get no "
                    "partition (more workers than the group has room for: a consumer group gives each partition to "
                    "one member); add partitions or run fewer workers")


class _Busy:
    """A stand-in for a worker that has just fetched records (what HealthMonitor reads of one)."""
    route = consumer = None
    done = failed = dead_lettered = in_flight = 0

    def __init__(self) -> None:
        self.fetched_at = 0.0


def test_the_probe_is_skipped_while_workers_fetch_and_runs_when_they_stop(caplog):
    # records fetched since the last look prove the broker answers: under load no probe request
    # is sent (its cost would fall on the jobs, benchmarks/framework.py). The address refuses
    # connections, so a probe that runs says "broker unreachable".
    caplog.set_level(logging.INFO, logger="quafka.framework")
    busy = _Busy()
    monitor = health.HealthMonitor({"bootstrap.servers": f"127.0.0.1:{free_port()}"}, [], [busy], dict)
    monitor._next_topic_check = float("inf")  # the missing-topic check is another test's
    try:
        for _ in range(3):
            busy.fetched_at = time.monotonic()
            monitor._tick(time.monotonic())
        assert messages(caplog, "broker unreachable") == []
        assert monitor._admin is None  # no request was sent at all
        monitor._tick(time.monotonic())  # nothing fetched since the last look: the probe runs
        assert len(messages(caplog, "broker unreachable")) == 1
        busy.fetched_at = time.monotonic()  # while down, records fetched earlier do not hide the outage
        monitor._tick(time.monotonic())
        assert monitor._down_since is not None
        assert messages(caplog, "broker reachable again") == []
    finally:
        monitor.stop()
