"""Share groups as a job queue (issue 13), with confluent-kafka's ShareConsumer and the kio test client.

- work spreads over every consumer: slow jobs, few records per poll, one partition;
- the order of service: an acknowledgement that frees records serves the partition's parked
  ShareFetches before the acknowledging request's own fetch (Kafka's
  `SharePartitionManager.acknowledge` → `completeDelayedShareFetchRequest`);
- a late acknowledgement, after another member's acceptance moved the start offset past the
  record, is skipped without error, as Kafka 4.2-4.4 (`SharePartition.acknowledge`: "All offsets in
  the acknowledgement batch are already archived"), and changes nothing;
- acknowledgement errors: INVALID_REQUEST past the end offset, INVALID_RECORD_STATE for records
  not acquired by the member; the start offset moving inside a batch applies the rest;
- a confluent ShareConsumer's close() is clean in librdkafka's log (no SHARE_SESSION_NOT_FOUND):
  the leave heartbeat does not end the member's share session (Kafka's `ShareSessionCache`);
- records a closing consumer had prefetched are released with their delivery count kept, and
  archived at the limit, as Kafka 4.2+ (KAFKA-19972, `DeliveryCountOps.NO_OP`);
- the last permitted delivery attempt comes alone (apache/kafka#20837);
- acquisition locks run on the monotonic clock: a wall-clock step expires nothing.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from confluent_kafka import ShareConsumer

from support import set_group_configs, wait_until
from support.share_client import (
    ACCEPT,
    RELEASE,
    ShareClient,
    acquired_offsets,
    create_topic,
    partition_errors,
    produce,
)

from quafka.broker.core.record_state import RecordState
from quafka.protocol.errors import ErrorCode

NONE = ErrorCode.none
SHORT_LOCK = {"group.share.min.record.lock.duration.ms": 1000}


def setup(broker, topic: str, group: str, **group_configs: str):
    topic_id = create_topic(broker.bootstrap_servers, topic, 1)
    set_group_configs(broker.bootstrap_servers, group, {"share.auto.offset.reset": "earliest", **group_configs})
    return topic_id


def share_partition(broker, group: str, topic_id):
    return broker.call(lambda: broker.server.share_partitions.contexts.get((group, topic_id, 0)))


def window(broker, group: str, topic_id) -> tuple[int, int, dict[int, tuple]]:
    """(start offset, next offset, {offset: (state, delivery count, holder)})."""
    def read():
        sp = broker.server.share_partitions.contexts[(group, topic_id, 0)].share_partition
        return sp.start_offset, sp.next_offset, {o: sp.record(o) for o in range(sp.start_offset, sp.next_offset)}
    return broker.call(read)


def member(broker, group: str, topic: str) -> ShareClient:
    client = ShareClient(broker.bootstrap_servers, group, timeout_s=60)
    assert client.join([topic]).error_code == NONE
    client.wait_for_assignment()
    return client


def fetch_until(client: ShareClient, *, what: str, timeout_s: float = 10, **kwargs):
    got = {}

    def attempt():
        resp = client.fetch(max_wait_ms=200, **kwargs)
        assert resp.error_code == NONE, resp
        got["resp"] = resp
        return acquired_offsets(resp)

    wait_until(attempt, timeout_s, 0, message=what)
    return got["resp"]


def only(acquired: dict) -> list[tuple[int, int]]:
    (offsets,) = acquired.values()
    return offsets


# ----------------------------------------------------------------------------- work spreads

def run_slow_jobs(bootstrap: str, topic: str, group: str, consumers: int, records: int, work_s: float,
                  max_poll_records: int) -> list[int]:
    """`consumers` confluent ShareConsumers (threads) join the group; once all are assigned the
    partition, `records` jobs are produced (in producer batches of min(max.poll.records, 50)) and the
    consumers start polling: they take the jobs, `work_s` each, and ACCEPT each on its own. Returns
    how many each handled."""
    counts = [0] * consumers
    done = threading.Event()
    lock = threading.Lock()
    total = [0]
    failures: list[str] = []
    ready = threading.Barrier(consumers + 1)
    go = threading.Event()

    def run(i: int) -> None:
        try:
            c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3,
                               "share.acknowledgement.mode": "explicit", "max.poll.records": max_poll_records})
            c.subscribe([topic])
            ready.wait(60)
            go.wait(120)
            while not done.is_set():
                for m in c.poll(0.1):
                    if m.error() is not None:
                        failures.append(str(m.error()))
                        continue
                    time.sleep(work_s)
                    c.acknowledge(m)
                    counts[i] += 1
                    with lock:
                        total[0] += 1
                        if total[0] >= records:
                            done.set()
            c.commit_sync(30)
            c.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(f"consumer {i}: {exc!r}")
            done.set()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(consumers)]
    for t in threads:
        t.start()
    ready.wait(60)
    with ShareClient(bootstrap, group) as describer:
        def all_assigned():
            (g,) = describer.describe([group]).groups
            return len(g.members) == consumers and all(m.assignment.topic_partitions for m in g.members)
        wait_until(all_assigned, 60, 0.05, message=f"{consumers} consumers assigned the partition")
    produce_in_batches(bootstrap, topic, records, min(max_poll_records, 50))
    go.set()
    done.wait(120)
    for t in threads:
        t.join(60)
    assert not failures, failures
    assert sum(counts) == records, counts
    return counts


def produce_in_batches(bootstrap: str, topic: str, records: int, batch_records: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100, "batch.num.messages": batch_records,
                         "log_level": 3})
    for i in range(records):
        producer.produce(topic, b"job-%d" % i, partition=0)
        if (i + 1) % batch_records == 0:
            producer.flush(30)
    assert producer.flush(30) == 0


@pytest.mark.parametrize("consumers, records, work_ms, max_poll_records", [
    (8, 4000, 1, 500),  # the second scenario (50-record batches): one consumer took all 4,000
    (8, 800, 5, 10),    # the first, smaller: 10-record batches, 10 per poll
    (8, 400, 1, 1),     # one record per poll and per batch
])
def test_slow_jobs_spread_over_every_consumer(broker, consumers, records, work_ms, max_poll_records):
    """Before issue 13 one consumer took most of the jobs: an acknowledgement released records to
    its own fetch first. Every consumer must handle at least half its fair share."""
    topic, group = f"jobs-{consumers}-{max_poll_records}", f"sg-jobs-{consumers}-{max_poll_records}"
    setup(broker, topic, group)
    counts = run_slow_jobs(broker.bootstrap_servers, topic, group, consumers, records, work_ms / 1000,
                           max_poll_records)
    fair = records / consumers
    assert min(counts) >= fair / 2, f"records per consumer: {counts} (fair share {fair:.0f})"


# ----------------------------------------------------------------------------- order of service

def park(broker, client: ShareClient, group: str, topic_id) -> tuple[threading.Thread, dict]:
    """Open `client`'s share session (nothing to acquire), then send a ShareFetch with MaxWaitMs 30 s
    on a thread and wait until it is parked; its response lands in the returned dict's "resp"."""
    client.fetch(max_wait_ms=0)
    parked: dict = {}
    waiter = threading.Thread(target=lambda: parked.update(resp=client.fetch(max_wait_ms=30_000)), daemon=True)
    waiter.start()
    wait_until(lambda: broker.call(lambda: broker.server.share_partitions.parked(group, topic_id, 0)) == 1, 10,
               message="the ShareFetch parked")
    return waiter, parked


def test_a_release_serves_the_parked_fetch_before_the_releasing_members_own_fetch(broker):
    topic, group = "served-first", "sg-served-first"
    topic_id = setup(broker, topic, group)
    tp = (topic_id, 0)
    a, b = member(broker, group, topic), member(broker, group, topic)
    produce(broker.bootstrap_servers, topic, [b"job-%d" % i for i in range(5)])
    assert only(acquired_offsets(fetch_until(a, what="A acquires the jobs"))) == [(o, 1) for o in range(5)]
    waiter, parked = park(broker, b, group, topic_id)
    # A releases everything and asks for more in the same ShareFetch: B, waiting, is served first
    resp = a.fetch(acks={tp: [(0, 4, [RELEASE])]}, max_wait_ms=0)
    assert partition_errors(resp)[tp] == (NONE, NONE), resp
    assert acquired_offsets(resp) == {}, "the releasing member's own fetch took what it had released"
    waiter.join(10)
    assert not waiter.is_alive(), "B's parked ShareFetch was not completed by A's release"
    assert only(acquired_offsets(parked["resp"])) == [(o, 2) for o in range(5)]


def test_an_acceptance_that_makes_room_in_the_window_serves_the_parked_fetch_first(make_broker):
    broker = make_broker(config={"group.share.partition.max.record.locks": 100})
    topic, group = "window-room", "sg-window-room"
    topic_id = setup(broker, topic, group)
    tp = (topic_id, 0)
    a, b = member(broker, group, topic), member(broker, group, topic)
    produce_in_batches(broker.bootstrap_servers, topic, 150, 1)  # one-record batches
    first = only(acquired_offsets(fetch_until(a, what="A fills the window")))
    assert first == [(o, 1) for o in range(100)]  # share.partition.max.record.locks: the window is full
    waiter, parked = park(broker, b, group, topic_id)
    resp = a.fetch(acks={tp: [(0, 99, [ACCEPT])]}, max_wait_ms=0)
    assert partition_errors(resp)[tp] == (NONE, NONE), resp
    assert acquired_offsets(resp) == {}, "the accepting member's own fetch took the room it made"
    waiter.join(10)
    assert not waiter.is_alive(), "B's parked ShareFetch was not completed by A's acceptance"
    assert only(acquired_offsets(parked["resp"])) == [(o, 1) for o in range(100, 150)]


# ----------------------------------------------------------------------------- acknowledgement errors

def lose_lock_and_let_b_accept(broker, topic: str, group: str, topic_id):
    """A acquires offsets 0-4, its 1 s lock runs out, B acquires them (delivery 2) and accepts them
    all: the start offset moves to 5. Returns (a, b)."""
    tp = (topic_id, 0)
    produce(broker.bootstrap_servers, topic, [b"job-%d" % i for i in range(5)])
    a, b = member(broker, group, topic), member(broker, group, topic)
    assert only(acquired_offsets(fetch_until(a, what="A acquires"))) == [(o, 1) for o in range(5)]
    wait_until(lambda: window(broker, group, topic_id)[2][2][0] == RecordState.AVAILABLE, 10,
               message="A's lock to expire")
    assert only(acquired_offsets(fetch_until(b, what="B acquires"))) == [(o, 2) for o in range(5)]
    resp = b.acknowledge({tp: [(0, 4, [ACCEPT])]})
    assert partition_errors(resp)[tp] == (NONE, None), resp
    assert window(broker, group, topic_id)[0] == 5
    return a, b


def test_a_late_acknowledgement_below_the_start_offset_is_skipped_as_kafka(make_broker):
    """Kafka 4.2-4.4 `SharePartition.acknowledge`: `if (batch.lastOffset() < startOffset) continue;`
    — no error, nothing changes; B's acceptance stands and nothing is delivered again."""
    broker = make_broker(config=SHORT_LOCK)
    topic, group = "late-ack", "sg-late-ack"
    topic_id = setup(broker, topic, group, **{"share.record.lock.duration.ms": "1000"})
    tp = (topic_id, 0)
    a, b = lose_lock_and_let_b_accept(broker, topic, group, topic_id)
    resp = a.acknowledge({tp: [(2, 2, [ACCEPT])]})
    assert resp.error_code == NONE and partition_errors(resp)[tp] == (NONE, None), resp
    resp = a.fetch(acks={tp: [(0, 4, [RELEASE])]}, max_wait_ms=0)  # not even a RELEASE undoes it
    assert partition_errors(resp)[tp] == (NONE, NONE) and acquired_offsets(resp) == {}, resp
    assert window(broker, group, topic_id) == (5, 5, {})
    assert acquired_offsets(b.fetch(max_wait_ms=300)) == {}


def test_acknowledgement_errors_past_the_end_and_for_records_not_held(make_broker):
    broker = make_broker(config=SHORT_LOCK)
    topic, group = "ack-errors", "sg-ack-errors"
    topic_id = setup(broker, topic, group, **{"share.record.lock.duration.ms": "1000"})
    tp = (topic_id, 0)
    produce(broker.bootstrap_servers, topic, [b"job-%d" % i for i in range(5)])
    a, b = member(broker, group, topic), member(broker, group, topic)
    fetch_until(a, what="A acquires")
    b.fetch(max_wait_ms=0)
    # past the end offset: never acquired ("The last offset in request is past acquired records")
    resp = a.acknowledge({tp: [(3, 7, [ACCEPT])]})
    assert partition_errors(resp)[tp] == (ErrorCode.invalid_request, None), resp
    # in the window but held by A, not B
    resp = b.acknowledge({tp: [(1, 1, [ACCEPT])]})
    assert partition_errors(resp)[tp] == (ErrorCode.invalid_record_state, None), resp
    # an error anywhere in the partition's batches applies none of them
    resp = a.acknowledge({tp: [(0, 0, [ACCEPT]), (4, 6, [ACCEPT])]})
    assert partition_errors(resp)[tp] == (ErrorCode.invalid_request, None), resp
    # batches sharing an offset pass Kafka's request validation (KafkaApis.validateAcknowledgementBatches);
    # the share partition applies them in turn: the shared offset was just accepted
    resp = a.acknowledge({tp: [(0, 2, [ACCEPT]), (2, 3, [ACCEPT])]})
    assert partition_errors(resp)[tp] == (ErrorCode.invalid_record_state, None), resp
    assert window(broker, group, topic_id)[2][0] == (RecordState.ACQUIRED, 1, a.member_id)
    resp = a.acknowledge({tp: [(0, 2, [ACCEPT]), (3, 4, [ACCEPT])]})
    assert partition_errors(resp)[tp] == (NONE, None), resp


def test_a_batch_straddling_the_moved_start_offset_applies_from_the_start_offset(make_broker):
    """`fetchSubMapForAcknowledgementBatch` / `checkForStartOffsetWithinBatch`: the offsets below the
    start offset are ignored, the rest are acknowledged."""
    broker = make_broker(config=SHORT_LOCK)
    topic, group = "straddle", "sg-straddle"
    topic_id = setup(broker, topic, group, **{"share.record.lock.duration.ms": "1000"})
    tp = (topic_id, 0)
    produce(broker.bootstrap_servers, topic, [b"job-%d" % i for i in range(5)])
    a, b = member(broker, group, topic), member(broker, group, topic)
    fetch_until(a, what="A acquires")
    wait_until(lambda: window(broker, group, topic_id)[2][0][0] == RecordState.AVAILABLE, 10,
               message="A's lock to expire")
    fetch_until(b, what="B acquires")
    resp = b.acknowledge({tp: [(0, 2, [ACCEPT]), (3, 4, [RELEASE])]})
    assert partition_errors(resp)[tp] == (NONE, None), resp
    assert only(acquired_offsets(fetch_until(a, what="A acquires 3-4 again"))) == [(3, 3), (4, 3)]
    resp = a.acknowledge({tp: [(0, 4, [ACCEPT])]})  # 0-2 are below the start offset 3
    assert partition_errors(resp)[tp] == (NONE, None), resp
    assert window(broker, group, topic_id) == (5, 5, {})


def test_confluent_commit_sync_of_a_late_acknowledgement_reports_no_error(make_broker):
    broker = make_broker(config=SHORT_LOCK)
    topic, group = "late-ack-confluent", "sg-late-ack-confluent"
    topic_id = setup(broker, topic, group, **{"share.record.lock.duration.ms": "1000"})
    tp = (topic_id, 0)
    produce(broker.bootstrap_servers, topic, [b"job-%d" % i for i in range(5)])
    a = ShareConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "log_level": 3,
                       "share.acknowledgement.mode": "explicit"})
    try:
        a.subscribe([topic])
        msgs: list = []
        wait_until(lambda: msgs.extend(a.poll(0.2)) or msgs, 30, 0, message="A polls the jobs")
        assert [m.offset() for m in msgs] == list(range(5))
        wait_until(lambda: window(broker, group, topic_id)[2][0][0] == RecordState.AVAILABLE, 10,
                   message="A's lock to expire")
        b = member(broker, group, topic)
        assert only(acquired_offsets(fetch_until(b, what="B acquires"))) == [(o, 2) for o in range(5)]
        assert partition_errors(b.acknowledge({tp: [(0, 4, [ACCEPT])]}))[tp] == (NONE, None)
        for m in msgs:
            a.acknowledge(m)
        result = a.commit_sync(30)
        assert [(k.topic, k.partition, v) for k, v in result.items()] == [(topic, 0, None)], result
    finally:
        a.close()
    assert window(broker, group, topic_id) == (5, 5, {})


# ----------------------------------------------------------------------------- close

class LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def capturing_consumer(bootstrap: str, group: str, mode: str, capture: LogCapture, **extra) -> ShareConsumer:
    logger = logging.getLogger(f"librdkafka-{group}-{id(capture)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(capture)
    return ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": mode,
                          "logger": logger, "log_level": 7, "debug": "cgrp", **extra})


@pytest.mark.parametrize("mode, acknowledged", [("explicit", 5), ("explicit", 0), ("implicit", 0)])
def test_a_confluent_share_consumer_closes_cleanly_and_releases_what_it_held(broker, mode, acknowledged):
    topic, group = f"close-{mode}-{acknowledged}", f"sg-close-{mode}-{acknowledged}"
    topic_id = setup(broker, topic, group)
    produce(broker.bootstrap_servers, topic, [b"job-%d" % i for i in range(20)])
    capture = LogCapture()
    consumer = capturing_consumer(broker.bootstrap_servers, group, mode, capture)
    consumer.subscribe([topic])
    msgs: list = []
    wait_until(lambda: msgs.extend(consumer.poll(0.2)) or msgs, 30, 0, message="records polled")
    assert len(msgs) == 20
    for m in msgs[:acknowledged]:
        consumer.acknowledge(m)
    consumer.close()
    leaving = [line for line in capture.lines if "share session leave" in line]
    assert leaving, "librdkafka's close sequence was not captured (cgrp debug lines)"
    errors = [line for line in capture.lines
              if "reply error" in line or "SHARE_SESSION_NOT_FOUND" in line or "share session was not found" in line]
    assert errors == [], errors
    # the records it held and did not acknowledge were released, their delivery count kept
    start, end, records = window(broker, group, topic_id)
    assert (start, end) == (acknowledged, 20)
    assert all(records[o] == (RecordState.AVAILABLE, 1, None) for o in range(acknowledged, 20)), records


def test_prefetched_records_keep_their_delivery_count_and_are_archived_at_the_limit(make_broker):
    """Kafka 4.2+ releases a closed session's records with `DeliveryCountOps.NO_OP` (KAFKA-19972,
    apache/kafka#21092, reverting 4.1's DECREASE): a consumer that crashes or restarts in a loop
    cannot have the same records delivered forever."""
    broker = make_broker(config={"group.share.delivery.count.limit": 2})
    topic, group = "prefetched", "sg-prefetched"
    topic_id = setup(broker, topic, group)
    produce(broker.bootstrap_servers, topic, [b"job-%d" % i for i in range(10)])
    for delivery in (1, 2):
        consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "log_level": 3,
                                  "share.acknowledgement.mode": "explicit"})
        consumer.subscribe([topic])
        msgs: list = []
        wait_until(lambda: msgs.extend(consumer.poll(0.2)) or msgs, 30, 0, message=f"delivery {delivery}")
        assert [(m.offset(), m.delivery_count()) for m in msgs] == [(o, delivery) for o in range(10)]
        consumer.close()  # nothing acknowledged: everything it held is released
    # released at the limit: archived, the start offset passes them, nobody gets them again
    wait_until(lambda: window(broker, group, topic_id)[:2] == (10, 10), 10, message="the records archived")
    last = member(broker, group, topic)
    assert acquired_offsets(last.fetch(max_wait_ms=300)) == {}


# ----------------------------------------------------------------------------- throttling

def test_the_last_permitted_delivery_comes_alone(broker):
    """Limit 5, one batch of 8 released on every delivery: deliveries 1-3 take the whole batch;
    from the 3rd on (max(2, ceil(5/2))) each attempt takes half as many as the one before, from the
    lowest offset; the 5th and last attempt of a record comes alone (Kafka 4.2
    `SharePartition.acquire` / `acquireSubsetBatchRecords`, apache/kafka#20837); then archived."""
    topic, group = "last-attempt", "sg-last-attempt"
    topic_id = setup(broker, topic, group)
    tp = (topic_id, 0)
    produce_in_batches(broker.bootstrap_servers, topic, 8, 8)
    client = member(broker, group, topic)
    seen = [only(acquired_offsets(fetch_until(client, what="the first delivery")))]
    while seen[-1]:
        resp = client.fetch(acks={tp: [(o, o, [RELEASE]) for o, _ in seen[-1]]}, max_wait_ms=300)
        assert partition_errors(resp)[tp][1] == NONE, resp
        got = acquired_offsets(resp)
        seen.append(only(got) if got else [])
        assert len(seen) < 20, seen
    whole = [[(o, d) for o in range(8)] for d in (1, 2, 3)]
    assert seen == whole + [[(o, 4) for o in range(4)]] + [[(o, 5)] for o in range(4)] \
        + [[(o, 4) for o in range(4, 8)]] + [[(o, 5)] for o in range(4, 8)] + [[]], seen
    assert window(broker, group, topic_id) == (8, 8, {})  # released at the limit: archived


# ----------------------------------------------------------------------------- monotonic locks

def test_a_wall_clock_step_does_not_expire_acquisition_locks(broker, monkeypatch):
    import quafka.broker.server.clock as clock

    topic, group = "clock-step", "sg-clock-step"
    topic_id = setup(broker, topic, group)
    tp = (topic_id, 0)
    produce(broker.bootstrap_servers, topic, [b"job-%d" % i for i in range(3)])
    a, b = member(broker, group, topic), member(broker, group, topic)
    assert only(acquired_offsets(fetch_until(a, what="A acquires"))) == [(o, 1) for o in range(3)]

    # the wall clock an hour ahead (NTP stepping a drifted clock); the monotonic clock unchanged
    monkeypatch.setattr(clock, "_wall_ns", lambda: time.time_ns() + 3600 * 10**9)
    assert clock.wall_clock_ms() > int(time.time() * 1000) + 3_000_000
    assert acquired_offsets(b.fetch(max_wait_ms=300)) == {}  # still A's: the 30 s lock holds
    resp = a.acknowledge({tp: [(0, 2, [ACCEPT])]})
    assert partition_errors(resp)[tp] == (NONE, None), resp
    assert window(broker, group, topic_id) == (3, 3, {})
