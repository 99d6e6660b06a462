"""ShareConsumer / AsyncShareConsumer (KIP-932 share groups) against an embedded broker.

Every test runs twice through the ``consumers`` fixture: with the blocking ``ShareConsumer`` (its own
event loop thread) and with an ``AsyncShareConsumer`` awaited on a private event loop owned by the
test's thread (tests/client/share_consumer_adapter.py). The module shares one embedded broker (record
locks down to 1 s allowed, 500 ms heartbeats); each test has its own topic and group. Every wait is a
poll loop with a deadline; the only sleeps are the "processing" of the background RENEW test.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid

import pytest
from client.share_consumer_adapter import ConsumerFactory
from support import produce_batch, set_group_configs, wait_until

from quafka import EmbeddedBroker
from quafka.client import (
    AcknowledgeType,
    Admin,
    AsyncShareConsumer,
    ConfigException,
    IllegalStateException,
    KafkaException,
    Record,
    ShareConsumer,
    TopicPartition,
    WakeupException,
)
from quafka.protocol.errors import ErrorCode

ACCEPT, RELEASE, REJECT, RENEW = (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT,
                                  AcknowledgeType.RENEW)

# A 1-2 s record lock needs the broker's lower bound lowered (Kafka's default minimum is 15 s). A member
# joining a group that got a target assignment less than share.assignment.interval.ms (1 s) ago gets its
# partitions with its next heartbeat: 500 ms instead of the default 5 s keeps two-member tests short.
BROKER_CONFIG = {"group.share.min.record.lock.duration.ms": 1000,
                 "group.share.heartbeat.interval.ms": 500, "group.share.min.heartbeat.interval.ms": 500}
EXPLICIT = {"share.acknowledgement.mode": "explicit"}
RENEW_WINDOW_S = 6.0

REJECTED_KEYS = {
    "auto.offset.reset": "earliest",
    "enable.auto.commit": "true",
    "group.instance.id": "instance-1",
    "isolation.level": "read_committed",
    "partition.assignment.strategy": "range",
    "interceptor.classes": "org.example.Interceptor",
    "session.timeout.ms": 45000,
    "heartbeat.interval.ms": 3000,
    "group.protocol": "consumer",
    "group.remote.assignor": "uniform",
}

SHARE_METRICS = [
    "last-poll-seconds-ago", "time-between-poll-avg", "time-between-poll-max", "poll-idle-ratio-avg",
    "heartbeat-response-time-max", "heartbeat-rate", "heartbeat-total", "last-heartbeat-seconds-ago",
    "rebalance-total", "rebalance-rate-per-hour", "fetch-size-avg", "fetch-size-max", "records-per-request-avg",
    "records-per-request-max", "fetch-latency-avg", "fetch-latency-max", "fetch-rate", "fetch-total",
    "bytes-consumed-total", "records-consumed-total", "acknowledgements-send-total", "acknowledgements-error-total",
]


# ----------------------------------------------------------------------------- fixtures and helpers

@pytest.fixture(params=["sync", "async"])
def consumers(request):
    """A factory of share consumers with one blocking interface, for the sync and the async class."""
    factory = ConsumerFactory(request.param)
    yield factory
    factory.close_all()


class Env:
    """One broker: unique topics and groups, producing, the share group's offsets through Admin."""

    def __init__(self, broker, create_topic) -> None:
        self.broker = broker
        self.bootstrap = broker.bootstrap_servers
        self._create_topic = create_topic
        self._admin: Admin | None = None

    def topic_and_group(self, partitions: int = 1, group_configs: dict | None = None) -> tuple[str, str]:
        suffix = uuid.uuid4().hex[:8]
        topic, group = f"sc-{suffix}", f"scg-{suffix}"
        self._create_topic(self.bootstrap, topic, partitions)
        set_group_configs(self.bootstrap, group, {"share.auto.offset.reset": "earliest", **(group_configs or {})})
        return topic, group

    def config(self, group: str, extra: dict | None = None) -> dict:
        return {"bootstrap.servers": self.bootstrap, "group.id": group, **(extra or {})}

    def produce(self, topic: str, count: int, partition: int = 0, tag: str = "v") -> int:
        return produce_batch(self.bootstrap, topic, count, partition=partition, tag=tag)

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            self._admin = Admin({"bootstrap.servers": self.bootstrap})
        return self._admin

    def share_offsets(self, group: str, topic: str) -> dict:
        return self.admin.list_share_group_offsets(group, [topic])

    def assigned_members(self, group: str, topic: str) -> int:
        """How many members of the group hold a partition of `topic`."""
        desc = self.admin.describe_share_groups([group])[group]
        return sum(1 for m in desc.members if m.assignment.get(topic))

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()


@pytest.fixture(scope="module")
def shared_broker():
    """One broker for the module (a start and a stop per test would cost a third of the time budget);
    the tests stay independent through their own topics and groups."""
    with EmbeddedBroker(config=BROKER_CONFIG) as broker:
        yield broker


@pytest.fixture
def env(shared_broker, create_topic):
    e = Env(shared_broker, create_topic)
    yield e
    e.close()


def keys(records) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in records]


def check_poll_shape(records: list[Record]) -> None:
    """A poll returns the records of each share partition in increasing offset order."""
    for tp in {(r.topic, r.partition) for r in records}:
        offsets = [r.offset for r in records if (r.topic, r.partition) == tp]
        assert offsets == sorted(set(offsets)), (tp, offsets)


def poll_nonempty(consumer, timeout_s: float = 10.0, poll_s: float = 0.5) -> list[Record]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        records = consumer.poll(poll_s)
        if records:
            check_poll_shape(records)
            return records
    raise AssertionError(f"no records within {timeout_s}s")


def collect(consumer, until, timeout_s: float = 10.0, poll_s: float = 0.3, ack=None) -> list[Record]:
    """Poll until `until(records so far)` holds; with `ack`, acknowledge every record (explicit mode)."""
    got: list[Record] = []
    deadline = time.monotonic() + timeout_s
    while not until(got):
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s; got {keys(got)}")
        records = consumer.poll(poll_s)
        check_poll_shape(records)
        if ack is not None:
            for r in records:
                consumer.acknowledge(r, ack)
        got.extend(records)
    return got


def settle(env: Env, consumer, group: str, topic: str, expected: dict, timeout_s: float = 10.0) -> None:
    """Poll `consumer` (which must receive nothing more) until the group's share offsets are `expected`."""
    stray: list[Record] = []

    def done():
        stray.extend(consumer.poll(0.1))
        return env.share_offsets(group, topic) == expected

    try:
        wait_until(done, timeout_s, 0, message=f"share offsets {expected}")
    finally:
        assert stray == [], f"records delivered again: {keys(stray)}"


# ----------------------------------------------------------------------------- configuration

def test_config_rejects_unknown_and_kafka_rejected_keys(consumers):
    base = {"bootstrap.servers": "127.0.0.1:1", "group.id": "cfg"}
    for key, value in {"no.such.key": "1", **REJECTED_KEYS}.items():
        with pytest.raises(ConfigException) as info:
            consumers({**base, key: value})
        assert info.value.key == key, (key, info.value)
        assert key in str(info.value)
    with pytest.raises(ConfigException) as info:
        consumers({**base, "share.acknowledgement.mode": "sometimes"})
    assert info.value.key == "share.acknowledgement.mode"
    with pytest.raises(ConfigException) as info:
        consumers({"bootstrap.servers": "127.0.0.1:1"})
    assert info.value.key == "group.id"
    # the mode is case-insensitive; a valid config constructs without connecting
    consumer = consumers({**base, "share.acknowledgement.mode": "EXPLICIT", "max.poll.records": 5})
    consumer.subscribe(["a", "b"])
    assert consumer.subscription() == {"a", "b"}
    consumer.unsubscribe()
    assert consumer.subscription() == set()
    consumer.close()
    # context managers
    if consumers.mode == "sync":
        with ShareConsumer(base) as plain:
            assert plain.subscription() == set()
    else:
        async def use():
            async with AsyncShareConsumer(base) as plain:
                return plain.subscription()

        assert consumers.run(use()) == set()


# ----------------------------------------------------------------------------- the KIP's three loops

def test_implicit_batch_loop_consumes_everything(env, consumers):
    """poll / process / poll: each poll accepts the previous batch; at the end the share group's start
    offset is the log end with no lag. Records come per partition in offset order, delivery_count 1."""
    topic, group = env.topic_and_group(partitions=2)
    for partition in (0, 1):
        for _ in range(3):
            env.produce(topic, 20, partition=partition)
    consumer = consumers(env.config(group, {"max.poll.records": 25}))
    consumer.subscribe([topic])
    assert consumer.subscription() == {topic}

    seen: list[Record] = []
    polls_with_records = 0
    deadline = time.monotonic() + 15
    while len(seen) < 120:
        assert time.monotonic() < deadline, f"consumed only {len(seen)} of 120"
        records = consumer.poll(0.5)
        check_poll_shape(records)
        polls_with_records += bool(records)
        seen.extend(records)  # "process" — the next poll accepts them

    assert polls_with_records >= 2  # whole batches of 20: at least max.poll.records=25 records a fetch
    assert all(r.delivery_count == 1 for r in seen)
    assert all(r.topic == topic for r in seen)
    for partition in (0, 1):
        offsets = [r.offset for r in seen if r.partition == partition]
        assert offsets == list(range(60)), offsets  # increasing across polls, each exactly once
    assert {r.value for r in seen if r.partition == 0} == {f"v{i}".encode() for i in range(20)}
    settle(env, consumer, group, topic, {(topic, 0): (60, 0), (topic, 1): (60, 0)})


def test_explicit_per_record_with_reject(env, consumers):
    """Explicit mode, one acknowledgement per record: REJECTed records are archived, ACCEPTed ones are
    done; none is ever delivered again."""
    topic, group = env.topic_and_group()
    env.produce(topic, 15)
    env.produce(topic, 15)
    consumer = consumers(env.config(group, {**EXPLICIT, "max.poll.records": 10}))
    consumer.subscribe([topic])

    seen: list[Record] = []
    deadline = time.monotonic() + 15
    while len(seen) < 30:
        assert time.monotonic() < deadline, f"consumed only {len(seen)} of 30"
        records = consumer.poll(0.5)
        check_poll_shape(records)
        for r in records:
            consumer.acknowledge(r, REJECT if r.offset % 4 == 0 else ACCEPT)
        seen.extend(records)
    assert [r.offset for r in seen] == list(range(30))
    assert all(r.delivery_count == 1 for r in seen)
    result = consumer.commit_sync(5.0)
    assert set(result.values()) <= {None}, result
    settle(env, consumer, group, topic, {(topic, 0): (30, 0)})


def test_explicit_break_mid_batch_then_release(env, consumers):
    """Explicit mode, the loop breaks on an error mid-batch: the next poll raises
    IllegalStateException; the application RELEASEs the rest, which later polls deliver again with
    delivery_count + 1, while the records it had ACCEPTed never come back."""
    topic, group = env.topic_and_group()
    env.produce(topic, 20)
    consumer = consumers(env.config(group, EXPLICIT))
    consumer.subscribe([topic])

    batch = poll_nonempty(consumer)
    assert len(batch) >= 2, keys(batch)
    assert all(r.delivery_count == 1 for r in batch)
    processed = len(batch) // 2
    for r in batch[:processed]:
        consumer.acknowledge(r, ACCEPT)
    # ... record `processed` fails: break out of the loop, leaving the rest unacknowledged
    with pytest.raises(IllegalStateException):
        consumer.poll(0.5)
    for r in batch[processed:]:
        consumer.acknowledge(r, RELEASE)

    released = {r.offset: r.delivery_count for r in batch[processed:]}
    again = collect(consumer, lambda got: released.keys() <= {r.offset for r in got}, ack=ACCEPT)
    accepted = {r.offset for r in batch[:processed]}
    assert not accepted & {r.offset for r in again}, keys(again)
    for r in again:
        assert r.delivery_count == released.get(r.offset, 0) + 1, (r.offset, r.delivery_count)
    consumed = accepted | {r.offset for r in again}
    if len(consumed) < 20:  # the first poll did not return the whole batch: take the rest
        more = collect(consumer, lambda got: consumed | {r.offset for r in got} >= set(range(20)), ack=ACCEPT)
        assert all(r.delivery_count == 1 for r in more) and not consumed & {r.offset for r in more}
    assert set(consumer.commit_sync(5.0).values()) <= {None}
    settle(env, consumer, group, topic, {(topic, 0): (20, 0)})


# ----------------------------------------------------------------------------- commit results

def test_commit_callback_gets_commit_async_and_poll_sent_results(env, consumers):
    topic, group = env.topic_and_group()
    tp = TopicPartition(topic, 0)
    calls: list[tuple[dict, KafkaException | None, int]] = []
    consumer = consumers(env.config(group, EXPLICIT))
    consumer.set_acknowledgement_commit_callback(
        lambda offsets, exc: calls.append(({k: set(v) for k, v in offsets.items()}, exc, threading.get_ident())))
    consumer.subscribe([topic])

    # commit_async: its result reaches the callback during a later call
    env.produce(topic, 10)
    first = poll_nonempty(consumer)
    for r in first:
        consumer.acknowledge(r, ACCEPT)
    consumer.commit_async()
    later: list[Record] = []

    def callback_called():
        records = consumer.poll(0.1)
        for r in records:
            consumer.acknowledge(r, ACCEPT)
        later.extend(records)
        return calls

    wait_until(callback_called, 10, 0, message="the callback with the commit_async result")
    assert calls[0][0] == {tp: {r.offset for r in first}} and calls[0][1] is None, calls
    # poll-sent: the acknowledgements of the next batch go out with a poll
    env.produce(topic, 5)
    want = set(range(15))
    collect(consumer, lambda got: {r.offset for r in first + later + got} >= want, ack=ACCEPT)
    wait_until(lambda: consumer.poll(0.1) == [] and set().union(*(c[0].get(tp, set()) for c in calls)) >= want,
               10, 0, message="callbacks for every acknowledged offset")
    assert all(len(c[0]) == 1 for c in calls), calls  # one call per partition result
    assert all(c[1] is None for c in calls), calls
    assert {c[2] for c in calls} == {threading.get_ident()}  # on the application's thread
    seen_offsets = [o for c in calls for o in sorted(c[0][tp])]
    assert sorted(seen_offsets) == list(range(15))  # each acknowledged offset reported once


def test_ack_after_lock_expiry_gives_invalid_record_state(env, consumers):
    topic, group = env.topic_and_group(group_configs={"share.record.lock.duration.ms": "1000"})
    tp = TopicPartition(topic, 0)
    env.produce(topic, 4)
    calls: list[tuple[dict, KafkaException | None]] = []
    slow = consumers(env.config(group, EXPLICIT))
    slow.set_acknowledgement_commit_callback(
        lambda offsets, exc: calls.append(({k: set(v) for k, v in offsets.items()}, exc)))
    slow.subscribe([topic])
    held = poll_nonempty(slow)
    assert len(held) >= 3, keys(held)
    assert slow.acquisition_lock_timeout_ms() == 1000

    # the lock expires: another member of the group gets the records, on their second delivery (and
    # holds them: it is not polled again, so its implicit acceptance is not sent)
    other = consumers(env.config(group))
    other.subscribe([topic])
    got = collect(other, lambda got: {r.offset for r in held} <= {r.offset for r in got})
    assert {r.offset: r.delivery_count for r in got if r.offset in {h.offset for h in held}} == \
        {r.offset: 2 for r in held}

    # commit_sync: the result says which partition failed, and why
    slow.acknowledge(held[0], ACCEPT)
    result = slow.commit_sync(5.0)
    assert list(result) == [tp] and isinstance(next(iter(result)), TopicPartition), result
    assert isinstance(result[tp], KafkaException) and result[tp].code == ErrorCode.invalid_record_state, result

    # commit_async, then a poll-sent acknowledgement: both failures reach the callback
    slow.acknowledge(held[1], ACCEPT)
    slow.commit_async()
    for r in held[2:]:
        slow.acknowledge(r, ACCEPT)
    by_async, by_poll = {held[1].offset}, {r.offset for r in held[2:]}

    def failed_callbacks():
        for r in slow.poll(0.1):  # only if the other member's lock expired too: not what is tested here
            slow.acknowledge(r, RELEASE)
        return ([c for c in calls if c[0].get(tp) == by_async], [c for c in calls if c[0].get(tp) == by_poll])

    wait_until(lambda: all(failed_callbacks()), 10, 0, message="the callbacks with INVALID_RECORD_STATE")
    for matching in failed_callbacks():
        offsets, exc = matching[0]
        assert list(offsets) == [tp]
        assert isinstance(exc, KafkaException) and exc.code == ErrorCode.invalid_record_state, exc


# ----------------------------------------------------------------------------- RENEW

RENEW_CONSUMER = {**EXPLICIT, "share.acquire.mode": "record_limit", "max.poll.records": 1}


def _renew_setup(env, consumers):
    topic, group = env.topic_and_group(group_configs={"share.record.lock.duration.ms": "2000"})
    env.produce(topic, 1)
    owner = consumers(env.config(group, RENEW_CONSUMER))
    owner.subscribe([topic])
    [record] = poll_nonempty(owner)
    assert (record.offset, record.delivery_count) == (0, 1)
    assert owner.acquisition_lock_timeout_ms() == 2000
    other = consumers(env.config(group))
    other.subscribe([topic])
    return topic, group, owner, record, other


def _renew_finish(env, group, topic, owner, record, other, other_seen, assigned_at):
    tp = TopicPartition(topic, 0)
    assert assigned_at is not None and assigned_at < RENEW_WINDOW_S - 2.5, \
        f"the second member was assigned only at {assigned_at}s"
    owner.acknowledge(record, ACCEPT)
    assert owner.commit_sync(5.0) == {tp: None}
    assert owner.poll(0.3) == []
    other_seen += other.poll(0.3)
    assert other_seen == [], f"the second consumer received {keys(other_seen)}"
    settle(env, other, group, topic, {(topic, 0): (1, 0)})
    assert owner.poll(0.1) == []


def test_renew_keeps_the_record_across_polls(env, consumers):
    """RENEW then poll about once a second for RENEW_WINDOW_S (2.5 lock durations of 2 s): every poll
    returns the same record with the same delivery count; after ACCEPT it is never delivered again,
    and the second member of the group, assigned the partition and polling all along, never gets it."""
    topic, group, owner, record, other = _renew_setup(env, consumers)
    other_seen: list[Record] = []
    assigned_at = None
    polls = 0
    start = time.monotonic()
    while time.monotonic() - start < RENEW_WINDOW_S:
        tick = time.monotonic()
        owner.acknowledge(record, RENEW)
        again = owner.poll(1.5)
        assert [(r.offset, r.delivery_count, r.value) for r in again] == \
            [(record.offset, record.delivery_count, record.value)], keys(again)
        polls += 1
        other_seen += other.poll(max(0.05, 0.9 - (time.monotonic() - tick)))
        if assigned_at is None and env.assigned_members(group, topic) == 2:
            assigned_at = time.monotonic() - start
    assert polls >= 4
    _renew_finish(env, group, topic, owner, record, other, other_seen, assigned_at)


def _renew_then_commit_setup(env, consumers):
    """Two records; the owner (one record per poll) holds offset 0."""
    topic, group = env.topic_and_group()
    env.produce(topic, 2)
    owner = consumers(env.config(group, RENEW_CONSUMER))
    owner.subscribe([topic])
    [record] = poll_nonempty(owner)
    assert (record.offset, record.delivery_count) == (0, 1)
    return topic, owner, record


def _accept_and_get_the_next_record(topic, owner, record):
    tp = TopicPartition(topic, 0)
    owner.acknowledge(record, ACCEPT)
    assert owner.commit_sync(5.0) == {tp: None}
    [following] = poll_nonempty(owner)
    assert (following.offset, following.delivery_count) == (1, 1)
    owner.acknowledge(following, ACCEPT)
    assert owner.commit_sync(5.0) == {tp: None}
    assert owner.poll(0.3) == []


def test_renew_commit_sync_then_poll_returns_the_renewed_record(env, consumers):
    """Regression: RENEW, commit_sync, poll raised IllegalStateException ("1 records of the previous
    poll are not acknowledged"). As Kafka's client (KAFKA-19845: commitSync moves the record from
    ShareInFlightBatch.inFlightRecords to renewingRecords, the confirmation to renewedRecords, and
    ShareConsumerImpl.collect's takeRenewedRecords hands it out again), the poll returns the renewed
    record, same delivery count, before any new record; after ACCEPT the next record comes."""
    topic, owner, record = _renew_then_commit_setup(env, consumers)
    tp = TopicPartition(topic, 0)
    owner.acknowledge(record, RENEW)
    assert owner.commit_sync(5.0) == {tp: None}
    again = owner.poll(5.0)
    assert [(r.offset, r.delivery_count, r.value) for r in again] == \
        [(record.offset, record.delivery_count, record.value)], keys(again)
    with pytest.raises(IllegalStateException, match="not acknowledged"):  # in flight again
        owner.poll(0.1)
    _accept_and_get_the_next_record(topic, owner, record)


def test_renew_commit_async_then_poll_returns_the_record_once_renewed(env, consumers):
    """RENEW, commit_async, poll: the RENEW may still be in flight (Kafka's renewingRecords): the poll
    does not refuse it, returns no new record meanwhile, and returns the renewed record, same
    delivery count, once the broker confirms the renewal (the callback reports it)."""
    topic, owner, record = _renew_then_commit_setup(env, consumers)
    tp = TopicPartition(topic, 0)
    reported: list[tuple[dict, Exception | None]] = []
    owner.set_acknowledgement_commit_callback(lambda offsets, exc: reported.append((offsets, exc)))
    owner.acknowledge(record, RENEW)
    owner.commit_async()
    again = owner.poll(5.0)
    assert [(r.offset, r.delivery_count, r.value) for r in again] == \
        [(record.offset, record.delivery_count, record.value)], keys(again)
    _accept_and_get_the_next_record(topic, owner, record)
    assert reported and reported[0] == ({tp: {0}}, None), reported


def test_renew_from_background(env, consumers):
    """While the application processes one record for RENEW_WINDOW_S, RENEW + commit_sync from a
    background thread (sync class) or a background task (async class) every 0.7 s keep it locked;
    then the application ACCEPTs and commits, and the record is never delivered again."""
    topic, group, owner, record, other = _renew_setup(env, consumers)
    tp = TopicPartition(topic, 0)
    results: list[dict] = []
    state = {"assigned_at": None}
    start = time.monotonic()

    def note_assignment():
        if state["assigned_at"] is None and env.assigned_members(group, topic) == 2:
            state["assigned_at"] = time.monotonic() - start

    if consumers.mode == "sync":
        stop = threading.Event()
        errors: list[BaseException] = []

        def renewer():
            try:
                while not stop.is_set():
                    owner.acknowledge(record, RENEW)
                    results.append(owner.commit_sync(5.0))
                    stop.wait(0.7)
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                errors.append(exc)

        thread = threading.Thread(target=renewer, name="renewer", daemon=True)
        thread.start()
        other_seen: list[Record] = []
        try:
            # "processing" on the owner's thread, outside its consumer calls; the other member polls
            while time.monotonic() - start < RENEW_WINDOW_S:
                other_seen += other.poll(0.5)
                note_assignment()
        finally:
            stop.set()
            thread.join(10)
        assert not thread.is_alive()
        assert not errors, errors
    else:
        async def scenario():
            stop = asyncio.Event()

            async def renewer():
                while not stop.is_set():
                    owner.raw.acknowledge(record, RENEW)
                    results.append(await owner.raw.commit_sync(5.0))
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(stop.wait(), 0.7)

            task = asyncio.create_task(renewer())
            seen: list[Record] = []
            try:
                while time.monotonic() - start < RENEW_WINDOW_S:
                    seen += await other.raw.poll(0.5)
                    note_assignment()
            finally:
                stop.set()
                await task
            return seen

        other_seen = consumers.run(scenario())

    assert len(results) >= 6, results
    assert all(r == {tp: None} for r in results), results
    _renew_finish(env, group, topic, owner, record, other, other_seen, state["assigned_at"])


# ----------------------------------------------------------------------------- wakeup and close

def test_wakeup(env, consumers):
    topic, group = env.topic_and_group()
    consumer = consumers(env.config(group))
    consumer.subscribe([topic])
    assert consumer.poll(0.2) == []

    consumer.wakeup()
    with pytest.raises(WakeupException):
        consumer.poll(5)
    assert consumer.poll(0.1) == []  # the wakeup is used up

    timer = threading.Timer(0.3, consumer.wakeup)
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(WakeupException):
            consumer.poll(30)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 3

    env.produce(topic, 3)  # still usable after a wakeup
    got = collect(consumer, lambda got: len(got) >= 3)
    assert [r.offset for r in got] == [0, 1, 2]


def test_close_implicit_releases_the_last_poll(env, consumers):
    topic, group = env.topic_and_group()
    env.produce(topic, 10)
    first = consumers(env.config(group))
    first.subscribe([topic])
    held = poll_nonempty(first)
    first.close()

    second = consumers(env.config(group))
    second.subscribe([topic])
    got = collect(second, lambda got: {r.offset for r in got} >= set(range(10)))
    held_offsets = {r.offset for r in held}
    assert sorted(r.offset for r in got) == list(range(10))
    assert {r.offset: r.delivery_count for r in got} == {o: 2 if o in held_offsets else 1 for o in range(10)}
    settle(env, second, group, topic, {(topic, 0): (10, 0)})


def test_close_explicit_commits_acknowledged_and_releases_the_rest(env, consumers):
    topic, group = env.topic_and_group()
    env.produce(topic, 10)
    first = consumers(env.config(group, EXPLICIT))
    first.subscribe([topic])
    held = poll_nonempty(first)
    assert len(held) >= 2, keys(held)
    acked = {r.offset for r in held[: len(held) // 2]}
    for r in held[: len(held) // 2]:
        first.acknowledge(r, ACCEPT)
    first.close()

    second = consumers(env.config(group))
    second.subscribe([topic])
    rest = set(range(10)) - acked
    got = collect(second, lambda got: {r.offset for r in got} >= rest)
    assert sorted(r.offset for r in got) == sorted(rest)  # the accepted ones are not redelivered
    released = {r.offset for r in held} - acked
    assert {r.offset: r.delivery_count for r in got} == {o: 2 if o in released else 1 for o in rest}
    settle(env, second, group, topic, {(topic, 0): (10, 0)})


# ----------------------------------------------------------------------------- metrics

def test_metrics_change_under_load(env, consumers):
    topic, group = env.topic_and_group()
    consumer = consumers(env.config(group, {"max.poll.records": 20}))
    consumer.subscribe([topic])
    before = consumer.metrics()
    assert set(SHARE_METRICS) <= set(before), sorted(set(SHARE_METRICS) - set(before))
    assert all(isinstance(before[name], (int, float)) for name in SHARE_METRICS)
    assert before["records-consumed-total"] == 0

    for _ in range(4):
        env.produce(topic, 25)
    got = collect(consumer, lambda got: len(got) >= 100, poll_s=0.2)
    assert len(got) == 100
    assert set(consumer.commit_sync(5.0).values()) <= {None}
    consumer.poll(0.05)
    after = consumer.metrics()

    assert after["records-consumed-total"] == 100
    assert after["bytes-consumed-total"] > before["bytes-consumed-total"]
    assert after["fetch-total"] > before["fetch-total"] and after["fetch-total"] >= 1
    assert after["fetch-rate"] > 0 and after["fetch-latency-max"] > 0
    assert after["fetch-size-max"] > 0 and after["records-per-request-max"] >= 20
    assert after["heartbeat-total"] >= 1 and after["heartbeat-response-time-max"] > 0
    assert after["rebalance-total"] >= 1
    assert after["acknowledgements-send-total"] >= 100
    assert after["acknowledgements-error-total"] == 0
    assert after["time-between-poll-max"] > 0
    assert 0 <= after["last-poll-seconds-ago"] < 5
    assert 0 < after["poll-idle-ratio-avg"] <= 1


# ----------------------------------------------------------------------------- acknowledge() misuse

def test_acknowledge_misuse_raises_illegal_state(env, consumers):
    topic, implicit_group = env.topic_and_group()
    env.produce(topic, 3)
    implicit = consumers(env.config(implicit_group))
    implicit.subscribe([topic])
    [first, *_] = poll_nonempty(implicit)
    with pytest.raises(IllegalStateException):
        implicit.acknowledge(first)
    with pytest.raises(IllegalStateException):
        implicit.acknowledge(first, ACCEPT)
    with pytest.raises(IllegalStateException):
        implicit.acknowledge(topic, 0, first.offset, ACCEPT)

    explicit_group = f"{implicit_group}-x"
    set_group_configs(env.bootstrap, explicit_group, {"share.auto.offset.reset": "earliest"})
    explicit = consumers(env.config(explicit_group, EXPLICIT))
    explicit.subscribe([topic])
    got = poll_nonempty(explicit)
    never = got[0]._replace(offset=999)
    with pytest.raises(IllegalStateException):
        explicit.acknowledge(never, ACCEPT)
    with pytest.raises(IllegalStateException):
        explicit.acknowledge(topic, 0, 999, ACCEPT)
    for r in got:
        explicit.acknowledge(r)  # ACCEPT by default
    assert set(explicit.commit_sync(5.0).values()) <= {None}
    with pytest.raises(IllegalStateException):  # already committed
        explicit.acknowledge(got[0], ACCEPT)
