"""Share-group routes against a real broker over loopback (framework/share_worker.py): settlement,
dead letters written by the broker (share.version 2) or by the worker (share.version 1, as Apache
Kafka 4.2/4.3), backoff before a retry, lock renewal of long jobs and its limit, back-pressure,
graceful stop, async and process-pool consumers, and the RouteRunner testing helper. The broker's
record lock is 1 s here, so that renewals and expiries happen within a test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

from support import free_port, wait_until
from support.dlq import read_topic
from support.framework_jobs import (
    BROKER_CONFIG,
    JOURNAL,
    LOCK_MS,
    Jobs,
    create_topic,
    produce,
    share_group_from_earliest,
)

from quafka.client import Admin, ShareConsumer
from quafka.framework import App, Backoff, Consumer, Worker
from quafka.framework.testing import RouteRunner

BACKOFF = Backoff(initial_ms=300, multiplier=1.0, max_ms=300)
TESTS = Path(__file__).resolve().parents[1]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def start(broker, consumer=Jobs, *, topic=None, group=None, values=(), **settings):
    """A worker for one share route over a fresh topic (or ``topic`` of ``group`` again) holding
    ``values``; returns (worker, events, route)."""
    bs = broker.bootstrap_servers
    existing = topic is not None
    topic, group = topic or unique("jobs"), group or unique("workers")
    if not existing:
        create_topic(bs, topic)
        share_group_from_earliest(bs, group)
    produce(bs, topic, values)
    app = App({"bootstrap.servers": bs})
    settings = {"lock_duration_ms": LOCK_MS, "backoff_margin_ms": 200, "backoff": BACKOFF, **settings}
    app.share_group(group).topic(topic, consumer, **settings)
    events: list[tuple[float, str, dict]] = []
    lock = threading.Lock()

    def record(event):
        with lock:
            events.append((time.monotonic(), event.name, dict(event)))
    app.events.subscribe("*", record)
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=10)
    worker.start()
    return worker, events, app.validate()[0]


def settled(events, outcome=None) -> list[bytes]:
    return [e["message"].value for _, name, e in list(events) if name == "message.settled"
            and (outcome is None or e["outcome"] == outcome)]


def stop(worker) -> None:
    worker.stop()
    assert worker.wait() == 0


def test_accept_reject_and_broker_dead_letters(make_broker):
    broker = make_broker(config=BROKER_CONFIG)
    worker, events, route = start(broker, values=[b"a", b"poison", b"b"], concurrency=2, max_poll_records=1,
                                  dead_letter_topic=unique("dlq.jobs"))
    try:
        wait_until(lambda: len(settled(events)) == 3, 20, message="three settlements")
    finally:
        stop(worker)
    assert sorted(settled(events, "accepted")) == [b"a", b"b"] and settled(events, "rejected") == [b"poison"]
    assert worker.runtime.dead_letters.mode(route) == "broker" and worker.stats()[route.name]["dead_lettered"] == 1
    bs = broker.bootstrap_servers
    with Admin({"bootstrap.servers": bs}) as admin:  # the worker pointed the group at its topic
        assert admin.describe_configs("group", route.group)["errors.deadletterqueue.topic.name"] == \
            route.settings["dead_letter_topic"]
    with Admin({"bootstrap.servers": bs}) as admin:  # every record settled, the rejected one included
        assert admin.list_share_group_offsets(route.group, [route.topic])[(route.topic, 0)][0] == 3
    # one dead letter: the worker's (it says where it was written), then an ACCEPT, so that the
    # broker, whose dead-letter queue the group uses, does not write a second one
    [letter] = read_topic(bs, route.settings["dead_letter_topic"])
    headers = {k: v.decode() for k, v in letter.headers}
    assert headers["__dlq.errors.offset"] == "1" and headers["__dlq.errors.group"] == route.group
    assert headers["__dlq.errors.message"] == "Offset rejected by client." and headers["quafka.dlq.reason"] == "rejected"
    assert headers["quafka.error.route"] == route.name and headers["quafka.error.pid"] == str(os.getpid())


def test_worker_produces_dead_letters_when_the_broker_has_no_dlq(make_broker):
    broker = make_broker(config=BROKER_CONFIG)
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        assert admin.update_features({"share.version": 1}, upgrade_type="safe_downgrade") == {"share.version": None}
    value = unique("flaky").encode()
    worker, events, route = start(broker, values=[b"poison", value], max_poll_records=1, max_attempts=1,
                                  dead_letter_topic=unique("dlq.jobs"))
    try:
        wait_until(lambda: len(settled(events)) == 2, 20, message="two settlements")
    finally:
        stop(worker)
    assert worker.runtime.dead_letters.mode(route) == "produce"
    letters = {r.value: dict(r.headers) for r in read_topic(broker.bootstrap_servers, route.settings["dead_letter_topic"])}
    assert set(letters) == {b"poison", value}  # the worker copies key and value
    assert [k for k, _ in read_topic(broker.bootstrap_servers, route.settings["dead_letter_topic"])[0].headers][:6] == [
        "__dlq.errors.topic", "__dlq.errors.partition", "__dlq.errors.offset", "__dlq.errors.group",
        "__dlq.errors.delivery.count", "__dlq.errors.message"]
    assert letters[b"poison"]["__dlq.errors.message"] == b"Offset rejected by client."
    assert letters[value]["__dlq.errors.message"] == b"Offset delivery count exceeded the threshold."
    assert letters[value]["quafka.error.class"] == b"RuntimeError" and letters[value]["quafka.dlq.reason"] == b"max-attempts"
    assert letters[b"poison"]["quafka.dlq.reason"] == b"rejected" and "quafka.error.class" not in letters[b"poison"]


def test_a_failed_job_is_released_after_its_backoff_and_succeeds(make_broker):
    broker = make_broker(config=BROKER_CONFIG)
    value = unique("flaky").encode()
    worker, events, _ = start(broker, values=[value, b"after"], max_poll_records=1)
    try:
        wait_until(lambda: settled(events, "accepted") == [b"after", value] or len(settled(events, "accepted")) == 2,
                   20, message="both accepted")
    finally:
        stop(worker)
    runs = JOURNAL.by_value()[value]
    assert [attempt for attempt, _, _ in runs] == [1, 2]
    failed_at, retried_at = runs[0][2], runs[1][1]
    assert retried_at - failed_at >= BACKOFF.initial_ms / 1000  # released only once the backoff had passed
    assert [e["backoff_ms"] for _, name, e in events if name == "job.backoff"] == [300]


def test_a_job_three_times_the_lock_is_renewed_and_runs_once(make_broker):
    broker = make_broker(config=BROKER_CONFIG)
    value = f"slow:{3 * LOCK_MS}:{uuid.uuid4().hex[:6]}".encode()
    worker, events, _ = start(broker, values=[value], concurrency=2, max_poll_records=1)
    try:
        wait_until(lambda: settled(events, "accepted") == [value], 20, message="the slow job accepted")
    finally:
        stop(worker)
    assert [a for a, _, _ in JOURNAL.by_value()[value]] == [1]  # no other worker got it meanwhile
    renewals = [e for _, name, e in events if name == "job.renewed"]
    assert len(renewals) >= 3 and not [e for _, name, e in events if name == "job.renew_failed"]


def test_renewal_stops_at_max_renew_ms_and_the_record_moves_on(make_broker):
    broker = make_broker(config=BROKER_CONFIG)
    value = f"slow:{3 * LOCK_MS}:{uuid.uuid4().hex[:6]}".encode()
    worker, events, _ = start(broker, values=[value], concurrency=2, max_poll_records=1, max_renew_ms=LOCK_MS)
    try:
        wait_until(lambda: len(JOURNAL.by_value().get(value, [])) >= 2, 20, message="a second delivery")
    finally:
        stop(worker)
    # the first delivery's lock was renewed for max_renew_ms only: it expired and another worker got it
    assert sorted(a for a, _, _ in JOURNAL.by_value()[value])[:2] == [1, 2]


def test_back_pressure_releases_what_waits_behind_a_long_job(make_broker):
    broker = make_broker(config=BROKER_CONFIG)
    slow = f"slow:{3 * LOCK_MS}:{uuid.uuid4().hex[:6]}".encode()
    quick = [unique("quick").encode() for _ in range(2)]
    worker, events, _ = start(broker, values=[slow, *quick], concurrency=2, max_poll_records=3)
    try:
        wait_until(lambda: len(settled(events, "accepted")) == 3, 20, message="all accepted")
    finally:
        stop(worker)
    runs = JOURNAL.by_value()
    slow_end = runs[slow][0][2]
    for value in quick:  # done by the other worker long before the slow job ended
        assert runs[value][-1][2] < slow_end - LOCK_MS / 1000


def test_graceful_stop_finishes_the_running_job_and_releases_the_rest(make_broker):
    broker = make_broker(config=BROKER_CONFIG)
    slow = f"slow:{LOCK_MS // 2}:{uuid.uuid4().hex[:6]}".encode()
    waiting = unique("waiting").encode()
    worker, events, route = start(broker, values=[slow, waiting], max_poll_records=2)
    wait_until(lambda: any(name == "job.started" for _, name, _ in list(events)), 20, message="the first job")
    stop(worker)
    # released unstarted, once: at the stop (released-at-shutdown), or before it by the back-pressure
    # on a job past half its lock (released) when the machine is slow enough for that to come first
    assert settled(events, "accepted") == [slow]
    assert settled(events, "released") + settled(events, "released-at-shutdown") == [waiting]
    # a new worker gets the released record (its delivery count says it was delivered once before)
    again, events2, _ = start(broker, topic=route.topic, group=route.group, max_poll_records=2)
    try:
        wait_until(lambda: settled(events2, "accepted") == [waiting], 20, message="the released record again")
    finally:
        stop(again)


class AsyncJobs(Consumer):
    async def consume_one(self, message):
        import asyncio

        await asyncio.sleep(0.01)
        if message.value == b"no":
            self.reject(message)


def test_async_consumer(make_broker):
    broker = make_broker(config=BROKER_CONFIG)
    worker, events, route = start(broker, AsyncJobs, values=[b"yes", b"no"], max_poll_records=2)
    try:
        wait_until(lambda: len(settled(events)) == 2, 20, message="both settled")
    finally:
        stop(worker)
    assert route.executor == "async"
    assert settled(events, "accepted") == [b"yes"] and settled(events, "rejected") == [b"no"]


def test_process_pool_executor_runs_cpu_jobs_in_other_processes(make_broker, tmp_path):
    """Run through `quafka worker` in a child process: the pool's processes (and multiprocessing's
    resource tracker) end with it."""
    broker = make_broker(config=BROKER_CONFIG)
    bs, topic, group = broker.bootstrap_servers, unique("cpu"), unique("cpu-workers")
    create_topic(bs, topic)
    share_group_from_earliest(bs, group)
    produce(bs, topic, [b"a", b"b", b"reject-me"])
    journal = tmp_path / "journal"
    env = {**os.environ, "QUAFKA_BOOTSTRAP": bs, "FW_KIND": "cpu", "FW_TOPIC": topic, "FW_GROUP": group,
           "CPU_JOURNAL": str(journal)}
    worker = subprocess.Popen([sys.executable, "-m", "quafka", "worker", "support.framework_jobs:app"],
                              cwd=TESTS, env=env, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: journal.exists() and len(journal.read_text().splitlines()) == 3, 60,
                   message="three jobs run")
        with Admin({"bootstrap.servers": bs}) as admin:  # all three settled: the start offset passed them
            wait_until(lambda: admin.list_share_group_offsets(group, [topic])[(topic, 0)][0] == 3, 20,
                       message="all settled")
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err.decode(errors="replace")[-2000:]
    runs = [line.split() for line in journal.read_text().splitlines()]
    assert sorted(value for value, _, _ in runs) == ["a", "b", "reject-me"]
    assert all(name.startswith("SpawnProcess") for _, name, _ in runs)  # not the worker's own threads
    assert worker.pid not in {int(pid) for _, _, pid in runs}


class Anything(Consumer):
    def consume_one(self, message):
        pass


def test_a_message_that_does_not_deserialize_is_rejected(make_broker):
    broker = make_broker(config=BROKER_CONFIG)
    worker, events, _ = start(broker, Anything, values=[b'{"ok": 1}', b"{not json"], max_poll_records=1,
                              deserializer="json")
    try:
        wait_until(lambda: len(settled(events)) == 2, 20, message="both settled")
    finally:
        stop(worker)
    assert settled(events, "accepted") == [{"ok": 1}]  # the message's value, deserialized
    assert settled(events, "rejected") == [b"{not json"]


def test_route_runner_helper(make_broker):
    broker = make_broker(config=BROKER_CONFIG)
    app = App({"bootstrap.servers": "127.0.0.1:1"})  # the runner points the app at the broker it is given
    app.share_group(unique("helper")).topic(unique("jobs"), Jobs, max_poll_records=1, backoff=BACKOFF,
                                             lock_duration_ms=LOCK_MS, backoff_margin_ms=200)
    [route] = app.validate()
    with RouteRunner(app, route.name, broker.bootstrap_servers) as run:
        run.produce([b"ok", b"poison"])
        outcome = run.until_settled(2)
    assert sorted((m.value, o) for m, o in outcome) == [(b"ok", "accepted"), (b"poison", "rejected")]


def test_a_second_signal_forces_the_stop_and_the_broker_releases_the_running_record(make_broker, tmp_path):
    broker = make_broker(config=BROKER_CONFIG)
    bs, topic, group = broker.bootstrap_servers, unique("jobs"), unique("workers")
    create_topic(bs, topic)
    share_group_from_earliest(bs, group)
    produce(bs, topic, [b"slow:60000"])
    port = free_port()
    env = {**os.environ, "QUAFKA_BOOTSTRAP": bs, "FW_KIND": "jobs", "FW_TOPIC": topic, "FW_GROUP": group}
    worker = subprocess.Popen([sys.executable, "-m", "quafka", "worker", "support.framework_jobs:app",
                               "--metrics-port", str(port), "--shutdown-timeout", "60"],
                              cwd=TESTS, env=env, stderr=subprocess.PIPE)
    try:
        def running() -> bool:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            except OSError:
                return False
            return f'quafka_framework_messages_in_flight{{route="{group}/{topic}"}} 1' in text
        wait_until(running, 30, message="the slow job running")
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(line.decode() for line in worker.stderr), daemon=True)
        reader.start()
        worker.send_signal(signal.SIGTERM)  # graceful: it would wait for the 60 s job...
        wait_until(lambda: any("signal 15: stopping" in line for line in list(lines)), 10,
                   message="the first signal handled")  # (two signals at once would be handled as one)
        worker.send_signal(signal.SIGTERM)  # ...the second one does not
        worker.wait(20)
        reader.join(10)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 1, "".join(lines)[-2000:]
    assert any("forcing the stop" in line for line in lines)
    # the consumer was closed with the record unacknowledged: the broker released it at once
    config = {"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode": "explicit"}
    with ShareConsumer(config) as consumer:
        consumer.subscribe([topic])
        records = wait_until(lambda: consumer.poll(0.5), 10, message="the released record")
        assert [(r.value, r.delivery_count) for r in records] == [(b"slow:60000", 2)]
        consumer.acknowledge(records[0])


def test_a_refused_renewal_loses_the_record_to_another_worker_without_stopping(make_broker):
    """The group refuses RENEW (share.renew.acknowledge.enable=false): the long job's renewal
    fails, its lock expires and the other worker gets the record; the first worker's job ends,
    its acknowledgement is skipped (outcome lock-lost) and it keeps working."""
    broker = make_broker(config=BROKER_CONFIG)
    bs, topic, group = broker.bootstrap_servers, unique("jobs"), unique("workers")
    create_topic(bs, topic)
    share_group_from_earliest(bs, group, **{"share.renew.acknowledge.enable": "false"})
    value = f"slow:{2 * LOCK_MS}:{uuid.uuid4().hex[:6]}".encode()
    worker, events, _ = start(broker, topic=topic, group=group, values=[value, b"after"], concurrency=2,
                              max_poll_records=1)
    try:
        wait_until(lambda: "lock-lost" in [o for _, name, e in list(events) if name == "message.settled"
                                           for o in [e["outcome"]]], 20, message="the lost lock noticed")
        wait_until(lambda: b"after" in settled(events, "accepted"), 20, message="work going on")
    finally:
        stop(worker)  # status 0: nothing stopped the workers
    assert [name for _, name, _ in events if name == "job.renew_failed"]
    assert sorted(a for a, _, _ in JOURNAL.by_value()[value])[:2] == [1, 2]  # delivered again elsewhere
