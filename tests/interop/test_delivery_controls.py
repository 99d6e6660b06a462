"""quafka's delivery controls with unmodified Kafka clients (issue 25, acceptance 1-3): confluent-
kafka's ShareConsumer and Producer, no quafka code in the consumer; the group configs set with
confluent's AdminClient.

1. Redelivery backoff: 200 ms doubling — a record released four times comes back no earlier than
   200, 400, 800 and 1,600 ms after each release (printed); a 10-minute backoff survives a SIGKILL
   restart with its remaining delay.
2. Delayed delivery: records whose `quafka.deliver.after.ms` header puts them 1-5 s ahead are never
   delivered before their time, also across a SIGKILL restart, and none is lost. (How late they come
   is a measurement: benchmarks/delivery_controls.py, docs/benchmarks.md.)
3. Key ordering: 8 consumers, 100 keys, 50,000 records, jobs of 0-5 ms, 5 % released once: for every
   key no two processing intervals overlap and the accepted order is the offset order; with `park`, a
   key whose record was rejected delivers nothing more until an operator releases it, while the
   other keys flow.

Randomized parts print their seed; rerun one with QUAFKA_SEED=<seed>.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import defaultdict

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer

from quafka.client import Admin
from support import set_group_configs, wait_until
from support.share_client import create_topic

SEED = int(os.environ.get("QUAFKA_SEED", random.randrange(1 << 30)))


def consumer(bootstrap: str, group: str, **extra) -> ShareConsumer:
    return ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit",
                          "log_level": 3, **extra})


def poll_one(c: ShareConsumer, timeout_s: float = 15.0):
    """The next message (polling with a deadline), and when it arrived (monotonic s)."""
    found: list = []
    wait_until(lambda: found.extend(m for m in c.poll(0.05) if m.error() is None) or found, timeout_s, 0,
               message="a message")
    assert len(found) == 1, found
    return found[0], time.monotonic()


# ---------------------------------------------------------------------------------- 1. backoff


def test_a_released_record_comes_back_no_earlier_than_each_doubled_backoff(broker):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "backoff")
    set_group_configs(bootstrap, "backoff", {"share.auto.offset.reset": "earliest",
                                             "quafka.share.redelivery.backoff.ms": "200",
                                             "quafka.share.redelivery.backoff.multiplier": "2",
                                             "quafka.share.redelivery.backoff.max.ms": "10000"})
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("backoff", b"flaky job")
    assert producer.flush(10) == 0
    c = consumer(bootstrap, "backoff")
    c.subscribe(["backoff"])
    try:
        gaps_ms = []
        message, _ = poll_one(c)
        for _ in range(4):
            c.acknowledge(message, AcknowledgeType.RELEASE)
            released = time.monotonic()  # before the broker sees the release: its due time is later
            c.commit_sync()
            message, arrived = poll_one(c)
            gaps_ms.append((arrived - released) * 1000)
        c.acknowledge(message, AcknowledgeType.ACCEPT)
        c.commit_sync()
    finally:
        c.close()
    print("redelivered after (ms):", [round(g) for g in gaps_ms], "backoff (ms): [200, 400, 800, 1600]")
    for gap, backoff in zip(gaps_ms, (200, 400, 800, 1600)):
        assert gap >= backoff, (gaps_ms, backoff)


def test_a_ten_minute_backoff_survives_a_sigkill_restart_with_its_remaining_delay(tmp_path, broker_process):
    data = str(tmp_path / "data")
    b = broker_process(data)
    bootstrap = b.bootstrap_servers
    create_topic(bootstrap, "retry")
    set_group_configs(bootstrap, "retry", {"share.auto.offset.reset": "earliest",
                                           "quafka.share.redelivery.backoff.ms": "600000"})
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("retry", b"job")
    assert producer.flush(10) == 0
    c = consumer(bootstrap, "retry")
    c.subscribe(["retry"])
    message, _ = poll_one(c)
    c.acknowledge(message, AcknowledgeType.RELEASE)
    released_ms = time.time() * 1000
    c.commit_sync()
    c.close()
    b.kill()
    b2 = broker_process(data, port=b.port)
    with Admin({"bootstrap.servers": b2.bootstrap_servers}) as admin:
        [row] = admin.describe_in_flight("retry")[("retry", 0)].ranges
    left_ms = row.due_at_ms - time.time() * 1000
    print(f"after the restart: {row.state}, waiting for {row.wait_reason}, {left_ms / 1000:.1f} s left of 600 s")
    assert (row.state, row.wait_reason, row.delivery_count) == ("AVAILABLE", "backoff", 1)
    assert released_ms + 599_000 <= row.due_at_ms <= released_ms + 601_000
    c = consumer(b2.bootstrap_servers, "retry")
    c.subscribe(["retry"])
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert not [m for m in c.poll(0.2) if m.error() is None], "redelivered before its backoff"
    finally:
        c.close()


# ---------------------------------------------------------------------------------- 2. delayed delivery


def _produce_delayed(bootstrap: str, topic: str, count: int, rng: random.Random) -> dict[bytes, int]:
    """`count` records due 1-5 s ahead; {value: due epoch ms} from each record's own timestamp."""
    delays: dict[bytes, int] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    sent: list = []

    def delivered(err, msg):
        assert err is None, err
        sent.append(msg)

    for i in range(count):
        value, delay_ms = f"job-{i}".encode(), rng.randrange(1000, 5000)
        delays[value] = delay_ms
        producer.produce(topic, value, headers={"quafka.deliver.after.ms": str(delay_ms).encode()},
                         on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(10) == 0
    assert len(sent) == count
    return {msg.value(): msg.timestamp()[1] + delays[msg.value()] for msg in sent}


def _collect(bootstrap: str, group: str, topic: str, wanted: int, timeout_s: float) -> dict[bytes, list[float]]:
    """{value: [arrival epoch ms, ...]} until `wanted` distinct values arrived (each ACCEPTed)."""
    arrivals: dict[bytes, list[float]] = defaultdict(list)
    c = consumer(bootstrap, group)
    c.subscribe([topic])
    try:
        def step() -> bool:
            for m in c.poll(0.05):
                if m.error() is None:
                    arrivals[m.value()].append(time.time() * 1000)
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
            c.commit_sync()
            return len(arrivals) >= wanted

        wait_until(step, timeout_s, 0, message=f"{wanted} delayed records")
    finally:
        c.close()
    return arrivals


def test_delayed_records_are_never_delivered_before_their_time(broker):
    print(f"seed {SEED}")
    rng = random.Random(SEED)
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "later")
    set_group_configs(bootstrap, "later", {"share.auto.offset.reset": "earliest",
                                           "quafka.share.delivery.delay.enable": "true"})
    due = _produce_delayed(bootstrap, "later", 100, rng)
    arrivals = _collect(bootstrap, "later", "later", len(due), 20)
    late_ms = sorted(arrivals[v][0] - due[v] for v in due)
    print(f"lateness after due (ms): min {late_ms[0]:.0f}, median {late_ms[len(late_ms) // 2]:.0f}, "
          f"max {late_ms[-1]:.0f}")
    assert all(len(a) == 1 for a in arrivals.values())
    assert late_ms[0] >= 0, "a record was delivered before its time"


def test_delayed_records_survive_a_sigkill_restart_none_lost_none_early(tmp_path, broker_process):
    print(f"seed {SEED}")
    rng = random.Random(SEED)
    data = str(tmp_path / "data")
    b = broker_process(data, overrides={"log.flush.interval.messages": "1"})
    bootstrap = b.bootstrap_servers
    create_topic(bootstrap, "later")
    set_group_configs(bootstrap, "later", {"share.auto.offset.reset": "earliest",
                                           "quafka.share.delivery.delay.enable": "true"})
    due = _produce_delayed(bootstrap, "later", 40, rng)
    # a consumer fetched once before the crash: the records sat in the window, waiting
    c = consumer(bootstrap, "later")
    c.subscribe(["later"])
    early = [m for m in c.poll(0.5) if m.error() is None]
    c.close()
    assert not early
    b.kill()
    b2 = broker_process(data, port=b.port, overrides={"log.flush.interval.messages": "1"})
    arrivals = _collect(b2.bootstrap_servers, "later", "later", len(due), 20)
    assert set(arrivals) == set(due)
    assert all(arrivals[v][0] >= due[v] for v in due), "a record was delivered before its time"


# ---------------------------------------------------------------------------------- 3. key ordering

KEYS, RECORDS, CONSUMERS = 100, 50_000, 8
# a small poll, as docs/job-queues.md advises for jobs, so that one consumer does not take a record of
# every free key at once while the others wait (with key ordering MaxRecords is a hard cap)
JOB_CONSUMER = {"max.poll.records": 10}


def test_key_ordering_never_overlaps_a_key_and_accepts_each_key_in_offset_order(broker):
    print(f"seed {SEED}")
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "ordered")
    set_group_configs(bootstrap, "ordered", {"share.auto.offset.reset": "earliest",
                                             "quafka.share.key.ordering": "true"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    key_rng = random.Random(SEED)
    for i in range(RECORDS):
        producer.produce("ordered", str(i).encode(), key=b"key-%d" % key_rng.randrange(KEYS))
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    spans: dict[bytes, list[tuple[float, float, int]]] = defaultdict(list)  # key -> (start, end, offset)
    accepted: dict[bytes, list[int]] = defaultdict(list)
    lock = threading.Lock()
    done = threading.Event()
    failures: list[BaseException] = []

    def work(index: int) -> None:
        rng = random.Random(f"{SEED}-{index}")
        c = consumer(bootstrap, "ordered", **JOB_CONSUMER)
        c.subscribe(["ordered"])
        try:
            while not done.is_set():
                for m in c.poll(0.1):
                    if m.error() is not None:
                        continue
                    start = time.monotonic()
                    time.sleep(rng.random() * 0.005)
                    end = time.monotonic()
                    release = m.delivery_count() == 1 and rng.random() < 0.05
                    c.acknowledge(m, AcknowledgeType.RELEASE if release else AcknowledgeType.ACCEPT)
                    with lock:
                        spans[m.key()].append((start, end, m.offset()))
                        if not release:
                            accepted[m.key()].append(m.offset())
                c.commit_async()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)
        finally:
            c.close()

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(CONSUMERS)]
    started = time.monotonic()
    for t in threads:
        t.start()
    try:
        wait_until(lambda: sum(map(len, accepted.values())) >= RECORDS or failures, 300, 0.2,
                   message=f"{RECORDS} records accepted")
    finally:
        done.set()
        for t in threads:
            t.join(30)
    elapsed = time.monotonic() - started
    assert not failures, failures
    print(f"{RECORDS} records, {KEYS} keys, {CONSUMERS} consumers: {elapsed:.1f} s, "
          f"{RECORDS / elapsed:.0f} records/s")
    assert sum(map(len, accepted.values())) == RECORDS
    for key, offsets in accepted.items():
        assert offsets == sorted(offsets), f"{key!r} accepted out of offset order"
        assert len(set(offsets)) == len(offsets), f"{key!r} accepted twice"
    for key, intervals in spans.items():
        intervals.sort()
        for (s1, e1, o1), (s2, _e2, o2) in zip(intervals, intervals[1:]):
            assert e1 <= s2, f"{key!r}: offsets {o1} and {o2} were processed at the same time"


def test_park_holds_a_rejected_keys_later_records_until_it_is_released(broker):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "parked")
    set_group_configs(bootstrap, "parked", {"share.auto.offset.reset": "earliest",
                                            "quafka.share.key.ordering": "true",
                                            "quafka.share.key.ordering.on.failure": "park"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i, key in enumerate([b"poison", b"other", b"poison", b"other", b"poison", b"third"]):
        producer.produce("parked", str(i).encode(), key=key)
    assert producer.flush(10) == 0
    seen: dict[int, bytes] = {}
    c = consumer(bootstrap, "parked")
    c.subscribe(["parked"])
    try:
        def step() -> bool:
            for m in c.poll(0.1):
                if m.error() is None:
                    seen[m.offset()] = m.key()
                    c.acknowledge(m, AcknowledgeType.REJECT if m.offset() == 0 else AcknowledgeType.ACCEPT)
            c.commit_sync()
            return set(seen) >= {0, 1, 3, 5}

        wait_until(step, 15, 0, message="the other keys flow")
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            step()
        assert sorted(seen) == [0, 1, 3, 5], "a parked key delivered a record"
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            view = admin.describe_in_flight("parked")[("parked", 0)]
            assert [(f.key, f.failed_offset, f.waiting_offsets) for f in view.failed_keys] == [(b"poison", 0, (2, 4))]
            admin.alter_in_flight("parked", "parked", 0, "release-key", key=b"poison")
        wait_until(lambda: step() or set(seen) == {0, 1, 2, 3, 4, 5}, 15, 0, message="the released key flows")
    finally:
        c.close()
