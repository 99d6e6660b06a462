"""Acceptance: share groups (KIP-932) with confluent-kafka 2.16.1's ShareConsumer against quafka.

1. implicit mode, 8 consumers, 50,000 records on one partition: each record delivered exactly once;
2. explicit mode with a 2 s lock: ACCEPT/RELEASE/REJECT/unacknowledged records go where Kafka sends them;
3. a record released on every delivery is delivered share.delivery.count.limit times, then archived;
4. an acknowledgement after the lock expired is reported as INVALID_RECORD_STATE by commit_sync();
5. SIGKILL of a consumer holding records (default 30 s lock) hands them to another consumer at once.

Group configs go through confluent's AdminClient; ShareGroupDescribe (absent from AdminClient)
through the test-side kio client. Broker-side record states are read on the broker's loop thread.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, Producer, ShareConsumer, TopicPartition

from support import set_group_configs, wait_until
from support.share_client import ShareClient, create_topic, produce

from quafka.broker.core.record_state import RecordState

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_share_consumer_child.py")


# ----------------------------------------------------------------------------- helpers

def share_consumer(bootstrap: str, group: str, mode: str) -> ShareConsumer:
    return ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                          "share.acknowledgement.mode": mode, "log_level": 3})


def setup_topic(broker, topic: str, group: str, extra_group_configs: dict[str, str] | None = None) -> None:
    create_topic(broker.bootstrap_servers, topic, 1)
    set_group_configs(broker.bootstrap_servers, group,
                      {"share.auto.offset.reset": "earliest", **(extra_group_configs or {})})


def produce_one_batch(bootstrap: str, topic: str, n: int) -> None:
    """`n` records in a single producer batch (one ProduceRequest, base offset 0)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "batch.num.messages": n,
                         "acks": "all", "log_level": 3})
    for i in range(n):
        producer.produce(topic, value=b"r%d" % i, partition=0)
    assert producer.flush(10) == 0


def share_state(broker, group: str, topic: str, offset: int, partition: int = 0):
    """(RecordState, delivery count, member id) of one offset in the group's share partition, or
    None outside the in-flight window / before the share partition exists."""
    def read():
        for (g, _tid, p), ctx in broker.server.share_partitions.contexts.items():
            if g == group and p == partition and ctx.topic.name == topic:
                return ctx.share_partition.record(offset)
        return None
    return broker.call(read)


def share_start_offset(broker, group: str, topic: str, partition: int = 0):
    def read():
        for (g, _tid, p), ctx in broker.server.share_partitions.contexts.items():
            if g == group and p == partition and ctx.topic.name == topic:
                return ctx.share_partition.start_offset
        return None
    return broker.call(read)


def describe_members(client: ShareClient, group: str) -> list:
    resp = client.describe([group])
    described = resp.groups[0]
    return list(described.members) if described.error_code == 0 else []


def poll_batch(consumer: ShareConsumer, timeout_s: float, poll_s: float = 0.2) -> list:
    """Poll until one poll returns messages (error-free ones only; errors fail), or [] at `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msgs = list(consumer.poll(poll_s))
        errors = [m.error() for m in msgs if m.error() is not None]
        assert not errors, errors
        if msgs:
            return msgs
    return []


def seen(msgs) -> list[tuple[int, int]]:
    return [(m.offset(), m.delivery_count()) for m in msgs]


def ack_all(consumer: ShareConsumer, msgs, ack_type=AcknowledgeType.ACCEPT) -> None:
    for m in msgs:
        consumer.acknowledge(m, ack_type)


def error_code(result) -> int | None:
    if isinstance(result, KafkaException):
        return result.args[0].code()
    return None


# ----------------------------------------------------------------------------- 1. implicit, 8 consumers

RECORDS = 50_000
CONSUMERS = 8


def test_implicit_mode_eight_consumers_each_record_exactly_once(broker):
    bootstrap, topic, group = broker.bootstrap_servers, "implicit-8", "sg-implicit-8"
    setup_topic(broker, topic, group)

    stop = threading.Event()
    lock = threading.Lock()
    received: list[list[tuple[int, int]]] = [[] for _ in range(CONSUMERS)]
    distinct: set[int] = set()
    commit_results: list[dict | None] = [None] * CONSUMERS
    failures: list[str] = []

    def run(i: int) -> None:
        try:
            consumer = share_consumer(bootstrap, group, "implicit")
            consumer.subscribe([topic])
            while not stop.is_set():
                for msg in consumer.poll(0.1):
                    if msg.error() is not None:
                        failures.append(f"consumer {i}: {msg.error()}")
                        continue
                    received[i].append((msg.offset(), msg.delivery_count()))
                    with lock:
                        distinct.add(msg.offset())
                    time.sleep(0.001)  # the per-record work
            commit_results[i] = consumer.commit_sync(30.0)
            consumer.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            failures.append(f"consumer {i}: {exc!r}")

    threads = [threading.Thread(target=run, args=(i,), name=f"share-consumer-{i}") for i in range(CONSUMERS)]
    for t in threads:
        t.start()
    try:
        with ShareClient(bootstrap, group) as admin_client:
            wait_until(lambda: len(describe_members(admin_client, group)) == CONSUMERS or failures, 30, 0.1,
                       message="all 8 share consumers in ShareGroupDescribe")
        assert not failures, failures

        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 50,
                             "acks": "all", "log_level": 3})
        for i in range(RECORDS):
            while True:
                try:
                    producer.produce(topic, value=b"value-%d" % i, partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
        assert producer.flush(60) == 0

        wait_until(lambda: len(distinct) >= RECORDS or failures, 90, 0.05,
                   message=f"{RECORDS} distinct offsets received")
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not any(t.is_alive() for t in threads), "a consumer thread did not finish commit_sync()/close()"
    assert not failures, failures

    deliveries = [d for per_consumer in received for d in per_consumer]
    offsets = [o for o, _ in deliveries]
    assert sorted(set(offsets)) == list(range(RECORDS))
    duplicates = len(offsets) - len(set(offsets))
    assert duplicates == 0, f"{duplicates} deliveries of already-delivered offsets"
    counts = {c for _, c in deliveries}
    assert counts == {1}, f"delivery counts seen: {sorted(counts)}"
    busy = [len(r) for r in received]
    assert sum(1 for n in busy if n) >= 4, f"records per consumer: {busy}"
    for i, result in enumerate(commit_results):
        assert result is not None and all(v is None for v in result.values()), (i, result)
    # every record was accepted: the share-partition start offset moved past all of them
    wait_until(lambda: share_start_offset(broker, group, topic) == RECORDS, 5,
               message="share-partition start offset at the log end")


# ----------------------------------------------------------------------------- 2. explicit, lock 2 s

def test_explicit_mode_accept_release_reject_and_lock_expiry(make_broker):
    broker = make_broker(config={"group.share.min.record.lock.duration.ms": 1000,
                                 "group.share.record.lock.duration.ms": 2000})
    bootstrap, topic, group = broker.bootstrap_servers, "explicit-ack", "sg-explicit"
    # B must be assigned on its first heartbeat, well inside A's 2 s lock: with the default
    # share.assignment.interval.ms (1 s, KIP-1263) a member joining within 1 s of the last target
    # assignment waits for its next heartbeat (5 s) — as in Kafka.
    setup_topic(broker, topic, group, {"share.assignment.interval.ms": "0"})
    produce_one_batch(bootstrap, topic, 10)
    tp = TopicPartition(topic, 0)

    a = share_consumer(bootstrap, group, "explicit")
    b = share_consumer(bootstrap, group, "explicit")
    try:
        a.subscribe([topic])
        msgs = poll_batch(a, 15)
        assert seen(msgs) == [(o, 1) for o in range(10)]
        by_offset = {m.offset(): m for m in msgs}
        for o in (0, 1, 5):
            a.acknowledge(by_offset[o], AcknowledgeType.ACCEPT)
        a.acknowledge(by_offset[3], AcknowledgeType.RELEASE)
        a.acknowledge(by_offset[6], AcknowledgeType.REJECT)
        result = a.commit_sync(10.0)
        assert set(result) == {tp} and result[tp] is None, result
        # A never polls again; B joins and fetches.

        b.subscribe([topic])
        b_seen: list[tuple[int, int]] = []
        first = poll_batch(b, 15)
        b_seen += seen(first)
        assert seen(first) == [(3, 2)], (
            f"B's first receipt {seen(first)}; expected only the released offset 3 before A's lock expired")
        ack_all(b, first)

        second = poll_batch(b, 15)  # A's 2 s lock on 2, 4, 7, 8, 9 expires meanwhile
        b_seen += seen(second)
        assert seen(second) == [(o, 2) for o in (2, 4, 7, 8, 9)], seen(second)
        ack_all(b, second)
        result = b.commit_sync(10.0)
        assert set(result) == {tp} and result[tp] is None, result

        # nothing else comes back: 0, 1, 5 were accepted and 6 rejected
        tail = poll_batch(b, 1.0)
        b_seen += seen(tail)
        assert not {o for o, _ in b_seen} & {0, 1, 5, 6}, b_seen
        assert tail == []
        assert share_start_offset(broker, group, topic) == 10
    finally:
        b.close()
        a.close()


# ----------------------------------------------------------------------------- 3. delivery count limit

def test_record_released_every_time_is_delivered_delivery_count_limit_times(broker):
    limit = 3
    bootstrap, topic, group = broker.bootstrap_servers, "release-loop", "sg-release-loop"
    setup_topic(broker, topic, group, {"share.delivery.count.limit": str(limit)})
    produce(bootstrap, topic, [b"poison"])

    consumer = share_consumer(bootstrap, group, "explicit")
    try:
        consumer.subscribe([topic])
        counts = []
        while len(counts) < limit:
            msgs = poll_batch(consumer, 15)
            assert [m.offset() for m in msgs] == [0], seen(msgs)
            counts.append(msgs[0].delivery_count())
            consumer.acknowledge(msgs[0], AcknowledgeType.RELEASE)
        assert counts == list(range(1, limit + 1))

        # The last RELEASE goes with the next poll: the record is archived and never comes back.
        polls, again = 0, []
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            again += seen(consumer.poll(0.2))
            polls += 1
        assert again == [] and polls >= 5, (again, polls)
        # archived (terminal), so the share-partition start offset moved past it
        assert share_start_offset(broker, group, topic) == 1, share_state(broker, group, topic, 0)

        # The partition moves on: a new record is delivered (once), offset 0 still is not.
        produce(bootstrap, topic, [b"next"])
        msgs = poll_batch(consumer, 10)
        assert seen(msgs) == [(1, 1)], seen(msgs)
        ack_all(consumer, msgs)
        result = consumer.commit_sync(10.0)
        assert all(v is None for v in result.values()), result
    finally:
        consumer.close()


# ----------------------------------------------------------------------------- 4. ack after lock expiry

def test_ack_after_lock_expired_reports_invalid_record_state(make_broker):
    broker = make_broker(config={"group.share.min.record.lock.duration.ms": 1000,
                                 "group.share.record.lock.duration.ms": 1000})
    bootstrap, topic, group = broker.bootstrap_servers, "late-ack", "sg-late-ack"
    setup_topic(broker, topic, group)
    produce(bootstrap, topic, [b"late"])
    tp = TopicPartition(topic, 0)

    callbacks: list = []
    consumer = share_consumer(bootstrap, group, "explicit")
    try:
        consumer.set_acknowledgement_commit_callback(lambda offsets, exc: callbacks.append((offsets, exc)))
        consumer.subscribe([topic])
        msgs = poll_batch(consumer, 15)
        assert seen(msgs) == [(0, 1)]
        wait_until(lambda: (share_state(broker, group, topic, 0) or (None,))[0] == RecordState.AVAILABLE, 10,
                   message="the acquisition lock on offset 0 to expire")

        consumer.acknowledge(msgs[0], AcknowledgeType.ACCEPT)
        result = consumer.commit_sync(10.0)
        assert set(result) == {tp}, result
        assert error_code(result[tp]) == KafkaError.INVALID_RECORD_STATE, result
        assert callbacks and error_code(callbacks[-1][1]) == KafkaError.INVALID_RECORD_STATE, callbacks
        assert share_state(broker, group, topic, 0)[:2] == (RecordState.AVAILABLE, 1)

        # The record was never accepted: it is delivered again.
        msgs = poll_batch(consumer, 10)
        assert seen(msgs) == [(0, 2)]
        ack_all(consumer, msgs)
        result = consumer.commit_sync(10.0)
        assert result[tp] is None, result
    finally:
        consumer.close()


# ----------------------------------------------------------------------------- 5. SIGKILL of a holder

def test_sigkilled_consumer_records_go_to_another_consumer(broker, tmp_path):
    bootstrap, topic, group = broker.bootstrap_servers, "killed-holder", "sg-killed"
    # The second consumer must hold its assignment before the kill, so the 5 s bound measures the
    # hand-over only: with share.assignment.interval.ms=0 it is assigned on its first heartbeat
    # (otherwise it could wait for its next heartbeat, 5 s later — as in Kafka).
    setup_topic(broker, topic, group, {"share.assignment.interval.ms": "0"})
    produce_one_batch(bootstrap, topic, 5)

    stderr = open(tmp_path / "child.stderr", "wb")
    child = subprocess.Popen([sys.executable, CHILD, bootstrap, group, topic],
                             stdout=subprocess.PIPE, stderr=stderr)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in child.stdout], daemon=True).start()
    other = share_consumer(bootstrap, group, "explicit")
    try:
        try:
            line = lines.get(timeout=30)
        except queue.Empty:
            raise AssertionError(f"the child printed nothing; stderr: {(tmp_path / 'child.stderr').read_bytes()!r}")
        held = [tuple(x) for x in json.loads(line)["held"]]
        assert held == [(o, 1) for o in range(5)], held
        child_member = share_state(broker, group, topic, 0)[2]
        assert all(share_state(broker, group, topic, o) == (RecordState.ACQUIRED, 1, child_member)
                   for o in range(5))

        # The second consumer joins while the child holds every record: it gets nothing yet.
        other.subscribe([topic])
        early: list = []
        with ShareClient(bootstrap, group) as client:
            def both_assigned():
                early.extend(seen(other.poll(0.1)))
                members = describe_members(client, group)
                return len(members) == 2 and all(
                    [(tp.topic_name, tuple(tp.partitions)) for tp in m.assignment.topic_partitions]
                    == [(topic, (0,))] for m in members)
            wait_until(both_assigned, 20, 0, message="both consumers assigned the partition (ShareGroupDescribe)")
        assert early == []

        child.send_signal(signal.SIGKILL)
        child.wait(10)
        got: list = []
        deadline = time.monotonic() + 5.0  # acceptance bound (the lock is 30 s)
        while len(got) < 5 and time.monotonic() < deadline:
            msgs = list(other.poll(0.1))
            got += seen(msgs)
            ack_all(other, msgs)
        assert sorted(got) == [(o, 2) for o in range(5)], got
        result = other.commit_sync(10.0)
        assert all(v is None for v in result.values()), result
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        stderr.close()
        other.close()
