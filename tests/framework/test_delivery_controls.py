"""The broker's delivery controls as the framework uses them (framework/delivery_controls.py and
enqueue.py), against a real broker over loopback: a share route's backoff becomes its group's
redelivery backoff and the broker waits it out past the lock; ``App.enqueue`` with a delay is not
processed before its time; what happens against a broker without the extension; enqueue's
checks, batching and failures.

The embedded broker's record lock is 1 s here (the least it is configured to allow), so that "a
backoff longer than the lock" takes a second and a half."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid

import pytest

from support import wait_until
from support.framework_jobs import BROKER_CONFIG, JOURNAL, LOCK_MS, Jobs, create_topic, produce, share_group_from_earliest

from quafka.client import Admin
from quafka.framework import App, Backoff, Consumer, DeliveryControlsError, EnqueueError, Worker
from quafka.framework.delivery_controls import DeliveryControls, delivery_controls_listed
from quafka.framework.enqueue import delay_headers, delivery_time

NOWHERE = {"bootstrap.servers": "127.0.0.1:1"}  # nothing listens: what is refused must not connect
BACKOFF_KEYS = ("quafka.share.redelivery.backoff.ms", "quafka.share.redelivery.backoff.max.ms",
                "quafka.share.redelivery.backoff.multiplier", "quafka.share.redelivery.backoff.jitter")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Events:
    """Every event of an app, with the monotonic time it was published."""

    def __init__(self, app: App) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[float, str, dict]] = []
        app.events.subscribe("*", self._on)

    def _on(self, event) -> None:
        with self.lock:
            self.seen.append((time.monotonic(), event.name, dict(event)))

    def named(self, name: str) -> list[tuple[float, dict]]:
        with self.lock:
            return [(t, e) for t, n, e in self.seen if n == name]

    def outcomes(self, value) -> list[str]:
        return [e["outcome"] for _, e in self.named("message.settled") if e["message"].value == value]


def share_app(bs: str, group: str, topic: str, consumer=Jobs, **settings) -> App:
    app = App({"bootstrap.servers": bs})
    app.share_group(group).topic(topic, consumer, **{"max_poll_records": 1, "lock_duration_ms": LOCK_MS,
                                                     "backoff_margin_ms": 200, **settings})
    return app


def fresh_route(broker) -> tuple[str, str, str]:
    bs, topic, group = broker.bootstrap_servers, unique("jobs"), unique("workers")
    create_topic(bs, topic)
    share_group_from_earliest(bs, group)
    return bs, topic, group


def group_configs(bs: str, group: str) -> dict[str, str | None]:
    with Admin({"bootstrap.servers": bs}) as admin:
        return admin.describe_configs("group", group)


def stop(worker: Worker) -> None:
    worker.stop()
    assert worker.wait() == 0


# ----------------------------------------------------------------------------- redelivery backoff


def test_a_routes_backoff_becomes_the_groups_and_the_broker_waits_it_out_past_the_lock(make_broker):
    broker = make_broker(config=BROKER_CONFIG)
    bs, topic, group = fresh_route(broker)
    value = unique("flaky").encode()
    produce(bs, topic, [value])
    app = share_app(bs, group, topic, backoff=Backoff(initial_ms=1500, multiplier=1.0, max_ms=1500))
    events = Events(app)
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=10)
    worker.start()
    try:
        wait_until(lambda: events.outcomes(value) == ["retried", "accepted"], 20, message="failed, then accepted")
    finally:
        stop(worker)
    configs = group_configs(bs, group)
    assert [configs[k] for k in BACKOFF_KEYS] == ["1500", "1500", "1.0", "0.0"]
    [(failed_attempt, _, failed_end), (retry_attempt, retry_start, _)] = JOURNAL.by_value()[value]
    assert (failed_attempt, retry_attempt) == (1, 2)  # the broker's delivery count is the attempt
    [released_at] = [t for t, e in events.named("message.settled") if e["outcome"] == "retried"]
    [(_, backoff)] = events.named("job.backoff")
    assert (backoff["backoff_ms"], backoff["waiter"]) == (1500, "broker")
    assert released_at - failed_end < 0.5  # released at once: no worker held it for the backoff
    gap_s = retry_start - released_at  # the RELEASE reached the broker after this event was published
    print(f"released {released_at - failed_end:.3f} s after the failure; delivered again {gap_s:.3f} s later "
          f"(backoff 1.5 s, lock {LOCK_MS / 1000} s)")
    assert 1.5 <= gap_s < 1.5 + 2.0 and gap_s > LOCK_MS / 1000


class AlwaysFails(Consumer):
    def consume_one(self, message):
        JOURNAL.add(message.value, message.delivery_attempt, time.monotonic())
        raise RuntimeError("not today")


def test_max_attempts_counts_the_brokers_deliveries_and_each_wait_grows(make_broker):
    broker = make_broker(config=BROKER_CONFIG)
    bs, topic, group = fresh_route(broker)
    value = unique("doomed").encode()
    produce(bs, topic, [value])
    app = share_app(bs, group, topic, AlwaysFails, backoff=Backoff(initial_ms=300, multiplier=2.0, max_ms=1000),
                    max_attempts=3)
    events = Events(app)
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=10)
    worker.start()
    try:
        wait_until(lambda: events.outcomes(value) == ["retried", "retried", "dead-lettered"], 20,
                   message="two retries, then given up")
    finally:
        stop(worker)
    runs = JOURNAL.by_value()[value]
    assert [attempt for attempt, _, _ in runs] == [1, 2, 3]
    gaps = [later[1] - earlier[2] for earlier, later in zip(runs, runs[1:])]
    print(f"gaps between deliveries: {[round(g, 3) for g in gaps]} s (backoffs 0.3 s, 0.6 s)")
    assert gaps[0] >= 0.3 and gaps[1] >= 0.6
    assert [e["backoff_ms"] for _, e in events.named("job.backoff")] == [300, 600]


# ----------------------------------------------------------------------------- without the extension


def kafka_like(configs) -> bool:
    """The detection's answer for a broker without quafka's delivery controls. quafka's broker
    always has them and no Apache Kafka runs in this suite, so the answer is injected at the one
    place the framework asks (DeliveryControls' detect); everything after it runs for real against
    the broker. The detection itself is tested below on both listings."""
    return False


def test_without_the_extension_the_worker_pauses_within_the_lock_and_says_so_once_per_route(make_broker, caplog):
    broker = make_broker(config=BROKER_CONFIG)
    bs, topic, group = fresh_route(broker)
    other = unique("mail")
    create_topic(bs, other)
    value = unique("flaky").encode()
    produce(bs, topic, [value])
    backoff = Backoff(initial_ms=1500, multiplier=1.0, max_ms=1500)  # longer than the 1 s lock allows
    app = share_app(bs, group, topic, backoff=backoff)
    app.share_group(group).topic(other, Jobs, max_poll_records=1, lock_duration_ms=LOCK_MS, backoff_margin_ms=200,
                                 backoff=backoff)
    events = Events(app)
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=10)
    worker.runtime.delivery_controls = DeliveryControls(app.kafka, detect=kafka_like)
    with caplog.at_level(logging.INFO, logger="quafka.framework"):
        worker.start()
        try:
            wait_until(lambda: events.outcomes(value) == ["retried", "accepted"], 20, message="failed, then accepted")
        finally:
            stop(worker)
    lines = {route: [r for r in caplog.records if r.getMessage().startswith(f"route {route}: the broker has no")]
             for route in (f"{group}/{topic}", f"{group}/{other}")}
    assert {route: len(found) for route, found in lines.items()} == {f"{group}/{topic}": 1, f"{group}/{other}": 1}
    [line] = lines[f"{group}/{topic}"]
    assert line.levelno == logging.WARNING
    assert "1000 ms acquisition lock" in line.getMessage() and "capped at 800 ms" in line.getMessage()
    assert "cannot wait its max_ms 1500 ms" in line.getMessage()
    configs = group_configs(bs, group)  # untouched: Kafka would refuse the keys
    assert configs["quafka.share.redelivery.backoff.ms"] == "0"
    assert configs["quafka.share.delivery.delay.enable"] == "false"
    [(_, backoff_event)] = events.named("job.backoff")
    assert (backoff_event["backoff_ms"], backoff_event["waiter"]) == (800, "worker")  # the cap, held by the worker
    [(_, _, failed_end), (_, retry_start, _)] = JOURNAL.by_value()[value]
    assert retry_start - failed_end >= 0.8


def test_backoff_mode_broker_refuses_to_start_without_the_extension(make_broker):
    broker = make_broker(config=BROKER_CONFIG)
    bs, topic, group = fresh_route(broker)
    app = share_app(bs, group, topic, backoff_mode="broker")
    worker = Worker(app, handle_signals=False)
    worker.runtime.delivery_controls = DeliveryControls(app.kafka, detect=kafka_like)  # as above
    with pytest.raises(DeliveryControlsError, match=rf"route '{group}/{topic}': backoff_mode='broker' but the "
                                                    "broker has no redelivery backoff"):
        worker.start()
    worker.stop()
    worker.wait()


def test_the_extension_is_detected_by_the_groups_config_listing(make_broker):
    broker = make_broker()
    assert delivery_controls_listed(group_configs(broker.bootstrap_servers, unique("any")))
    # what Apache Kafka 4.4 lists for a group (kafka-reference.md, 1.5): no quafka.* key
    kafka = dict.fromkeys(["share.session.timeout.ms", "share.heartbeat.interval.ms", "share.record.lock.duration.ms",
                           "share.auto.offset.reset", "share.isolation.level", "share.delivery.count.limit",
                           "share.partition.max.record.locks", "share.renew.acknowledge.enable",
                           "share.assignment.interval.ms", "share.assignor.offload.enable",
                           "errors.deadletterqueue.topic.name", "errors.deadletterqueue.copy.record.enable",
                           "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"], "")
    assert not delivery_controls_listed(kafka)


def test_backoff_mode_pause_leaves_the_group_alone_and_holds_the_record(make_broker):
    broker = make_broker(config=BROKER_CONFIG)
    bs, topic, group = fresh_route(broker)
    value = unique("flaky").encode()
    produce(bs, topic, [value])
    app = share_app(bs, group, topic, backoff=Backoff(300, 1.0, 300), backoff_mode="pause")
    events = Events(app)
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=10)
    worker.start()
    try:
        wait_until(lambda: events.outcomes(value) == ["retried", "accepted"], 20, message="failed, then accepted")
    finally:
        stop(worker)
    assert [group_configs(bs, group)[k] for k in BACKOFF_KEYS] == ["0", "3600000", "2.0", "0.0"]  # the defaults
    assert [(e["backoff_ms"], e["waiter"]) for _, e in events.named("job.backoff")] == [(300, "worker")]


# ----------------------------------------------------------------------------- enqueue


def test_a_delayed_job_is_processed_no_earlier_than_its_delay(make_broker):
    broker = make_broker(config=BROKER_CONFIG)
    bs, topic, group = fresh_route(broker)
    app = share_app(bs, group, topic)  # delayed_delivery (the default): the worker turns it on at start
    events = Events(app)
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=10)
    worker.start()
    later, at, now = (unique(name).encode() for name in ("later", "at", "now"))
    wall_minus_monotonic = time.time() - time.monotonic()  # the journal's times are monotonic
    warm = unique("warm")
    create_topic(bs, warm)
    app.enqueue(warm, b"connect")  # the producer's first connection is not part of what is measured
    try:
        before = time.monotonic()
        enqueued_later = app.enqueue(topic, later, delay_ms=800)
        returned = time.monotonic()
        enqueued_at = app.enqueue(topic, at, at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(milliseconds=600))
        app.enqueue(topic, now)
        wait_until(lambda: len(events.named("message.settled")) == 3, 20, message="three jobs done")
    finally:
        stop(worker)
    assert enqueued_later.deliver_at_ms == enqueued_later.timestamp_ms + 800 and enqueued_later.offset == 0
    runs = JOURNAL.by_value()
    started = {value: runs[value][0][1] + wall_minus_monotonic for value in (later, at, now)}  # epoch s
    waited = {value: started[value] - enqueued.timestamp_ms / 1000
              for value, enqueued in ((later, enqueued_later), (at, enqueued_at))}
    print(f"delay_ms=800 ran {waited[later]:.3f} s after its timestamp (enqueue took {returned - before:.3f} s); "
          f"at=now+600 ms ran {waited[at]:.3f} s after its timestamp")
    # (the two clocks are read a few µs apart: allow 2 ms)
    assert started[later] >= enqueued_later.deliver_at_ms / 1000 - 0.002
    assert started[at] >= enqueued_at.deliver_at_ms / 1000 - 0.002
    # the job was in the broker well before its time: the broker held it back, nothing slower did
    assert returned + wall_minus_monotonic < enqueued_later.deliver_at_ms / 1000 - 0.5
    assert started[now] < started[at] < started[later]  # the job enqueued last, at once, ran first
    assert group_configs(bs, group)["quafka.share.delivery.delay.enable"] == "true"


def test_a_delayed_enqueue_before_any_worker_started_turns_delayed_delivery_on(make_broker, caplog):
    broker = make_broker(config=BROKER_CONFIG)
    bs, topic, group = fresh_route(broker)
    app = share_app(bs, group, topic)  # declared, never run here: an app that only enqueues
    assert group_configs(bs, group)["quafka.share.delivery.delay.enable"] == "false"
    with caplog.at_level(logging.INFO, logger="quafka.framework"):
        app.enqueue(topic, b"later", delay_ms=60_000)
    assert group_configs(bs, group)["quafka.share.delivery.delay.enable"] == "true"
    assert [r.getMessage() for r in caplog.records if "delay" in r.getMessage()] == [
        f"group {group}: set quafka.share.delivery.delay.enable=true (a delayed job was enqueued to a topic its "
        "route reads)"]


def test_a_delay_some_readers_cannot_honour_is_logged_once(make_broker, caplog):
    broker = make_broker(config=BROKER_CONFIG)
    bs, topic, group = fresh_route(broker)
    app = share_app(bs, group, topic, delayed_delivery=False)
    app.consumer_group(unique("audit")).topic(topic, Jobs)
    nobody = unique("unread")
    create_topic(bs, nobody)
    with caplog.at_level(logging.INFO, logger="quafka.framework"):
        for _ in range(2):
            app.enqueue(topic, b"x", delay_ms=100)
            app.enqueue(nobody, b"y", delay_ms=100)
        app.enqueue(topic, b"z")  # no delay: nothing to check
    lines = [r.getMessage() for r in caplog.records if "will not be honoured" in r.getMessage()
             or "no route of this app reads" in r.getMessage()]
    assert len(lines) == 2, lines
    assert f"share group {group} (quafka.share.delivery.delay.enable=false and its route says " \
           "delayed_delivery=False)" in lines[0] and "consumer group audit-" in lines[0]
    assert lines[1].startswith(f"enqueue to {nobody} with a delivery time: no route of this app reads {nobody}")
    assert group_configs(bs, group)["quafka.share.delivery.delay.enable"] == "false"  # the route said no


def test_enqueue_without_waiting_then_flush_writes_every_job(make_broker):
    broker = make_broker(config=BROKER_CONFIG)
    bs, topic = broker.bootstrap_servers, unique("bulk")
    create_topic(bs, topic)
    app = App({"bootstrap.servers": bs})
    started = time.perf_counter()
    for i in range(2000):
        assert app.enqueue(topic, {"n": i}, key=f"k{i % 7}", wait=False) is None
    app.flush()
    elapsed = time.perf_counter() - started
    with Admin({"bootstrap.servers": bs}) as admin:
        assert admin.list_offsets({(topic, 0): "latest"})[(topic, 0)][0] == 2000
    print(f"2000 jobs enqueued with wait=False and one flush in {elapsed:.3f} s")


def test_a_job_the_broker_refuses_raises_with_wait_and_at_flush_without(make_broker, caplog):
    broker = make_broker(config=BROKER_CONFIG)
    bs, topic = broker.bootstrap_servers, unique("small")
    create_topic(bs, topic, configs={"max.message.bytes": "1000"})
    app = App({"bootstrap.servers": bs})
    with pytest.raises(EnqueueError, match=rf"job to {topic} not enqueued: .*MSG_SIZE_TOO_LARGE"):
        app.enqueue(topic, b"x" * 5000)
    with caplog.at_level(logging.ERROR, logger="quafka.framework"):
        app.enqueue(topic, b"y" * 5000, wait=False)
        with pytest.raises(EnqueueError, match=r"enqueued jobs: 1 failed \(job to .*MSG_SIZE_TOO_LARGE"):
            app.flush()
    assert [r for r in caplog.records if r.getMessage().startswith(f"enqueue: job to {topic}")]  # logged when it failed
    app.enqueue(topic, b"fits", wait=False)
    app.flush()  # a failure is reported once
    with Admin({"bootstrap.servers": bs}) as admin:
        assert admin.list_offsets({(topic, 0): "latest"})[(topic, 0)][0] == 1


@pytest.mark.parametrize(("kwargs", "error", "text"), [
    ({"delay_ms": 100, "at": 10**12}, ValueError, "give delay_ms or at, not both"),
    ({"delay_ms": -1}, ValueError, "delay_ms must be >= 0"),
    ({"at": -5}, ValueError, "at must not be before 1970"),
    ({"at": dt.datetime(2030, 1, 1)}, ValueError, "has no time zone"),
    ({"delay_ms": True}, TypeError, "delay_ms must be a number"),
    ({"at": "tomorrow"}, TypeError, "at must be a datetime or epoch milliseconds"),
    ({"delay_ms": 5, "headers": {"quafka.deliver.at.ms": b"1"}}, ValueError, "headers already carry a delivery time"),
    ({"key": 42}, TypeError, "key must be bytes, str or None"),
])
def test_enqueue_refuses_bad_arguments_before_connecting(kwargs, error, text):
    app = App(NOWHERE)
    with pytest.raises(error, match=text):
        app.enqueue("jobs", b"x", **kwargs)


def test_delivery_times_round_up_and_say_when():
    after = delivery_time(800, None)
    assert delay_headers(1_000, after) == ([("quafka.deliver.after.ms", b"800")], 1_800)
    assert delivery_time(0.2, None) == ("quafka.deliver.after.ms", 1)
    at = dt.datetime(2030, 1, 1, 0, 0, 0, 1500, tzinfo=dt.timezone.utc)  # 1.5 ms past the second
    at_ms = int(dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc).timestamp()) * 1000 + 2
    assert delay_headers(1_000, delivery_time(None, at)) == ([("quafka.deliver.at.ms", str(at_ms).encode())], at_ms)
    assert delivery_time(None, at_ms) == ("quafka.deliver.at.ms", at_ms)
    assert delay_headers(1_000, delivery_time(None, None)) == ([], None)
