"""Consumer-group routes against a real broker over loopback (framework/consumer_group_worker.py),
with confluent-kafka consumers: every record once and in order per partition with two members,
retry with backoff keeping the partition's order, dead letters after max_attempts, the consumer's
pause, manual marking, and the share-only methods refused."""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import Producer
from support import wait_until
from support.dlq import read_topic

from quafka.client import Admin
from quafka.framework import App, Backoff, Consumer, Worker
from quafka.protocol import dead_letter_headers as h

TOPIC = "orders"
FAST = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 500}
QUICK = {"heartbeat.interval.ms": 200, "session.timeout.ms": 6000}  # rebalances within a test


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def broker_with_topic(make_broker, partitions: int = 3) -> str:
    bs = make_broker(config=FAST).bootstrap_servers
    with Admin({"bootstrap.servers": bs}) as admin:
        admin.create_topics({TOPIC: (partitions, 1)})
    return bs


def produce(bs: str, records: list[tuple[int, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bs})
    for partition, value in records:
        producer.produce(TOPIC, value, partition=partition)
    assert producer.flush(10) == 0


def app_with(bs: str, group: str, consumer: type, **settings) -> tuple[App, list]:
    """An app with one consumer-group route on TOPIC; returns it and the events it publishes."""
    app = App({"bootstrap.servers": bs})
    app.consumer_group(group).topic(TOPIC, consumer, auto_offset_reset="earliest", kafka=QUICK, **settings)
    events: list[tuple[str, dict]] = []
    app.events.subscribe("*", lambda e: events.append((e.name, dict(e))))
    return app, events


def run(app: App, condition, timeout_s: float = 20.0, message: str = "the records") -> Worker:
    worker = Worker(app, handle_signals=False, log_interval_s=1, shutdown_timeout_s=10)
    worker.start()
    try:
        wait_until(condition, timeout_s, message=message)
    finally:
        worker.stop()
        assert worker.wait() == 0
    return worker


def committed(bs: str, group: str) -> dict[int, int]:
    with Admin({"bootstrap.servers": bs}) as admin:
        offsets = admin.list_consumer_group_offsets(group)
    return {p: offset for (topic, p), (offset, _meta) in offsets.items() if topic == TOPIC and offset >= 0}


def outcomes(events: list, value: bytes) -> list[str]:
    return [e["outcome"] for name, e in list(events) if name == "message.settled" and e["message"].value == value]


class Journal:
    """(partition, offset, value, delivery attempt, monotonic time, thread) per message a job got."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[tuple[int, int, bytes, int, float, str]] = []

    def add(self, m) -> None:
        with self.lock:
            self.rows.append((m.partition, m.offset, m.value, m.delivery_attempt, time.monotonic(),
                              threading.current_thread().name))

    def values(self, partition: int | None = None) -> list[bytes]:
        with self.lock:
            return [r[2] for r in self.rows if partition is None or r[0] == partition]

    def runs(self, value: bytes) -> list[tuple[int, float]]:
        """(attempt, time) of each run of ``value``."""
        with self.lock:
            return [(r[3], r[4]) for r in self.rows if r[2] == value]


def test_two_members_process_every_record_once_in_partition_order_and_commit_the_log_end(make_broker):
    bs = broker_with_topic(make_broker)
    first = [(p, f"{p}:{i}".encode()) for i in range(30) for p in range(3)]
    produce(bs, first)
    journal, batches = Journal(), []

    class Orders(Consumer):
        def consume(self, messages):
            batches.append([(m.partition, m.offset) for m in messages])
            for m in messages:
                journal.add(m)

    group = unique("totals")
    app, events = app_with(bs, group, Orders, concurrency=2, max_poll_records=7)
    assigned: dict[str, set] = {}  # worker thread → its partitions (rebalance events come on the member's thread)

    def rebalance(event) -> None:
        mine = assigned.setdefault(threading.current_thread().name, set())
        mine |= set(event["assigned"])
        mine -= set(event["revoked"])
    app.events.subscribe("rebalance", rebalance)
    worker = Worker(app, handle_signals=False, log_interval_s=1, shutdown_timeout_s=10)
    worker.start()
    try:
        wait_until(lambda: len(journal.values()) >= 90, 20, message="the first 90 records")
        wait_until(lambda: sorted(len(ps) for ps in assigned.values()) == [1, 2], 20,
                   message="the partitions spread over both members")
        before = len(journal.rows)
        produce(bs, [(p, f"{p}:{i}".encode()) for i in range(30, 60) for p in range(3)])
        wait_until(lambda: len(journal.values()) >= 180, 20, message="all 180 records")
        wait_until(lambda: committed(bs, group) == {0: 60, 1: 60, 2: 60}, 10, message="the log end committed")
        stats = worker.stats()[f"{group}/{TOPIC}"]
    finally:
        worker.stop()
        assert worker.wait() == 0
    for p in range(3):
        values = journal.values(p)
        assert values == [f"{p}:{i}".encode() for i in range(60)]  # once each, in order
    assert all(len({p for p, _ in batch}) == 1 for batch in batches)  # a job gets one partition's records
    assert all(len(batch) <= 7 for batch in batches)
    later = journal.rows[before:]
    threads = {p: {r[5] for r in later if r[0] == p} for p in range(3)}
    assert all(len(names) == 1 for names in threads.values())  # one member per partition
    assert len(set().union(*threads.values())) == 2  # and both members had partitions
    assert stats["done"] == len(batches) and stats["failed"] == 0 and stats["in_flight"] == 0
    assert any(name == "rebalance" and e["assigned"] for name, e in events)
    assert committed(bs, group) == {0: 60, 1: 60, 2: 60}


def test_a_failed_message_is_retried_after_the_backoff_before_the_rest_of_its_partition(make_broker):
    bs = broker_with_topic(make_broker)
    produce(bs, [(0, b"a"), (0, b"flaky"), (0, b"b"), (0, b"c"), (1, b"x"), (1, b"y")])
    journal = Journal()

    class Orders(Consumer):
        def consume_one(self, message):
            journal.add(message)
            if message.value == b"flaky" and message.delivery_attempt == 1:
                raise RuntimeError("the ledger is unavailable")

    group = unique("retry")
    app, events = app_with(bs, group, Orders, backoff=Backoff(initial_ms=200, multiplier=2, max_ms=400))
    worker = run(app, lambda: {b"c", b"y"} <= set(journal.values()))
    p0 = [(r[2], r[3]) for r in journal.rows if r[0] == 0]
    assert p0 == [(b"a", 1), (b"flaky", 1), (b"flaky", 2), (b"b", 1), (b"c", 1)]
    (_, failed_at), (_, retried_at) = journal.runs(b"flaky")
    assert retried_at - failed_at >= 0.2
    assert journal.values(1) == [b"x", b"y"]
    assert outcomes(events, b"flaky") == ["retried", "accepted"]
    stats = worker.stats()[f"{group}/{TOPIC}"]
    assert stats["failed"] == 1 and stats["done"] == 6 and stats["renewed"] == 0
    assert committed(bs, group) == {0: 4, 1: 2}


def test_a_poison_message_is_dead_lettered_after_max_attempts_and_the_partition_moves_on(make_broker):
    bs = broker_with_topic(make_broker)
    produce(bs, [(0, b"a"), (0, b"poison"), (0, b"b")])
    journal = Journal()

    class Orders(Consumer):
        def consume_one(self, message):
            journal.add(message)
            if message.value == b"poison":
                raise ValueError("cannot parse the order")

    group = unique("poison")
    app, events = app_with(bs, group, Orders, max_attempts=2, dead_letter_topic="dlq.orders",
                           backoff=Backoff(initial_ms=100, multiplier=1, max_ms=100))
    worker = run(app, lambda: b"b" in journal.values())
    assert journal.values(0) == [b"a", b"poison", b"poison", b"b"]
    assert [a for a, _ in journal.runs(b"poison")] == [1, 2]
    assert outcomes(events, b"poison") == ["retried", "dead-lettered"]
    assert worker.stats()[f"{group}/{TOPIC}"]["dead_lettered"] == 1
    letters = read_topic(bs, "dlq.orders")
    assert [r.value for r in letters] == [b"poison"]
    headers = [(name, value.decode()) for name, value in letters[0].headers]
    assert headers[:6] == [(h.HEADER_TOPIC, TOPIC), (h.HEADER_PARTITION, "0"), (h.HEADER_OFFSET, "1"),
                           (h.HEADER_GROUP, group), (h.HEADER_DELIVERY_COUNT, "2"),
                           (h.HEADER_MESSAGE, h.MESSAGE_DELIVERY_COUNT_EXCEEDED)]
    assert dict(headers)["quafka.error.class"] == "ValueError"
    assert dict(headers)["quafka.error.message"] == "cannot parse the order"
    assert dict(headers)[h.HEADER_REASON] == h.REASON_MAX_ATTEMPTS
    assert "Traceback (most recent call last)" in dict(headers)["quafka.error.traceback"]
    assert committed(bs, group) == {0: 3}


def test_pause_delays_the_message_and_its_partition(make_broker):
    bs = broker_with_topic(make_broker)
    produce(bs, [(0, b"wait"), (0, b"next")])
    journal = Journal()

    class Orders(Consumer):
        def consume_one(self, message):
            journal.add(message)
            if message.value == b"wait" and message.delivery_attempt == 1:
                self.pause(message, 300)

    group = unique("pause")
    app, events = app_with(bs, group, Orders)
    run(app, lambda: b"next" in journal.values())
    assert [(r[2], r[3]) for r in journal.rows] == [(b"wait", 1), (b"wait", 2), (b"next", 1)]
    (_, paused_at), (_, again_at) = journal.runs(b"wait")
    assert again_at - paused_at >= 0.3
    assert journal.runs(b"next")[0][1] >= again_at
    assert outcomes(events, b"wait") == ["retried", "accepted"]
    assert [e["backoff_ms"] for name, e in events if name == "job.backoff"] == [300]
    assert committed(bs, group) == {0: 2}


def test_manual_mode_commits_only_marked_messages_and_goes_back_to_the_first_unmarked(make_broker):
    bs = broker_with_topic(make_broker)
    produce(bs, [(0, f"m{i}".encode()) for i in range(5)])
    journal = Journal()

    class Orders(Consumer):
        def consume(self, messages):
            for m in messages:
                journal.add(m)
                if not (m.value == b"m2" and m.delivery_attempt == 1):
                    self.mark_as_consumed(m)

    group = unique("manual")
    app, events = app_with(bs, group, Orders, ack_mode="manual")
    run(app, lambda: committed(bs, group) == {0: 5}, message="offset 5 committed")
    assert [a for a, _ in journal.runs(b"m2")] == [1, 2]
    assert outcomes(events, b"m2") == ["released", "accepted"]
    accepted = [e["message"].value for name, e in events if name == "message.settled" and e["outcome"] == "accepted"]
    assert accepted == [f"m{i}".encode() for i in range(5)]  # each once, in order
    runs_m3 = journal.runs(b"m3")
    assert runs_m3[-1][0] == 2 or len(runs_m3) == 1  # processed again after m2 when it came in m2's batch


def test_share_only_methods_refuse_with_the_reason_on_a_consumer_group_route(make_broker):
    bs = broker_with_topic(make_broker, partitions=1)
    produce(bs, [(0, b"one")])
    errors: list[str] = []

    class Orders(Consumer):
        def consume_one(self, message):
            for name in ("accept", "release", "reject", "renew"):
                try:
                    getattr(self, name)(message)
                except AttributeError as exc:
                    errors.append(str(exc))

    group = unique("refuse")
    app, _ = app_with(bs, group, Orders)
    run(app, lambda: len(errors) == 4)
    assert errors[0].startswith("accept() applies to share-group routes; Orders runs on a consumer-group route")
    assert all("mark_as_consumed" in e for e in errors)
    assert committed(bs, group) == {0: 1}


def test_a_graceful_stop_lets_the_running_job_finish_and_commits_only_what_finished(make_broker):
    bs = broker_with_topic(make_broker, partitions=1)
    produce(bs, [(0, f"m{i}".encode()) for i in range(5)])
    journal, started, finish = Journal(), threading.Event(), threading.Event()

    class Orders(Consumer):
        def consume_one(self, message):
            journal.add(message)
            if message.value == b"m1":
                started.set()
                assert finish.wait(10)

    group = unique("stop")
    app, events = app_with(bs, group, Orders, max_poll_records=10)
    worker = Worker(app, handle_signals=False, log_interval_s=1, shutdown_timeout_s=10)
    worker.start()
    try:
        wait_until(started.is_set, 20, message="m1 running")
        worker.stop()  # while m1 runs
    finally:
        finish.set()
        assert worker.wait() == 0
    assert journal.values() == [b"m0", b"m1"]  # m2.. were polled with m1 but not started
    assert outcomes(events, b"m1") == ["accepted"]
    assert committed(bs, group) == {0: 2}
