"""The review's races in the workers (issue 26), each reproduced against a real broker (1 s locks):

1. a worker's backoff held back the ACCEPTs of jobs already done in the same poll, so with
   ``renew=False`` their locks expired and accepted jobs ran again;
2. a consumer-group partition revoked inside ``consume()`` (a rebalance while the worker takes
   what is already fetched) made the worker seek a partition it no longer had and die;
3. one renewer renewed every worker in turn, so one slow renewal expired the other workers' locks;
4. a renewal answered late (a busy broker: the client's wait ends first) was taken for a lost lock,
   so the job's ACCEPT was never sent and a job that was done ran again.

Each test fails on the code before its fix."""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer, TopicPartition
from support import wait_until
from support.framework_jobs import BROKER_CONFIG, JOURNAL, LOCK_MS, Jobs, create_topic, produce, share_group_from_earliest

from quafka.client import Admin, KafkaTimeoutError
from quafka.framework import App, Backoff, Consumer, Worker
from quafka.framework import consumer_group_worker, share_worker


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def share_app(bs: str, values, **settings) -> tuple[App, str, list]:
    topic, group = unique("jobs"), unique("workers")
    create_topic(bs, topic)
    share_group_from_earliest(bs, group)
    produce(bs, topic, values)
    app = App({"bootstrap.servers": bs})
    app.share_group(group).topic(topic, Jobs, **{"lock_duration_ms": LOCK_MS, "backoff_margin_ms": 200, **settings})
    settled: list[tuple[bytes, str]] = []
    app.events.subscribe("message.settled", lambda e: settled.append((e["message"].value, e["outcome"])))
    return app, f"{group}/{topic}", settled


def start_offset(bs: str, route: str) -> int:
    group, topic = route.split("/")
    with Admin({"bootstrap.servers": bs}) as admin:
        return admin.list_share_group_offsets(group, [topic])[(topic, 0)][0]


def test_a_backoff_in_the_worker_sends_the_accepts_of_finished_jobs_first(make_broker):
    broker = make_broker(config=BROKER_CONFIG)
    done, flaky = f"slow:400:{uuid.uuid4().hex[:8]}".encode(), unique("flaky").encode()
    # one poll of two: the first job takes 0.4 s and is accepted, the second fails and is held for
    # 0.7 s by the worker, so the poll's locks (1 s, not renewed) expire during the hold
    app, route, settled = share_app(broker.bootstrap_servers, [done, flaky], max_poll_records=2, renew=False,
                                    backoff_mode="pause", backoff=Backoff(700, 1.0, 700))
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=10)
    worker.start()
    try:
        wait_until(lambda: (flaky, "accepted") in settled, 20, message="the flaky job retried and done")
        wait_until(lambda: start_offset(broker.bootstrap_servers, route) == 2, 20, message="both acknowledged")
    finally:
        worker.stop()
        assert worker.wait() == 0
    runs = JOURNAL.by_value()
    assert [attempt for attempt, _, _ in runs[done]] == [1]  # accepted once, never run again
    assert [attempt for attempt, _, _ in runs[flaky]] == [1, 2]


class _RebalancingConsumer(KafkaConsumer):
    """confluent-kafka's Consumer, with the one thing a real rebalance does inside ``consume()``:
    the revocation of a partition whose records were already returned by the ``poll`` before it."""

    revoke: TopicPartition | None = None

    def subscribe(self, topics, **callbacks):
        self._on_revoke = callbacks.get("on_revoke")
        return super().subscribe(topics, **callbacks)

    def consume(self, num_messages=1, timeout=-1):
        records = super().consume(num_messages=num_messages, timeout=timeout)
        tp, type(self).revoke = type(self).revoke, None
        if tp is not None:
            self.incremental_unassign([tp])
            self._on_revoke(self, [tp])
        return records


class FailsOnPartitionZero(Consumer):
    seen: list[tuple[int, bytes]] = []

    def consume_one(self, message):
        self.seen.append((message.partition, message.value))
        if message.partition == 0:
            raise RuntimeError("try again later")  # a backoff: seek back and pause the partition


def test_a_partition_revoked_inside_consume_does_not_kill_the_consumer_group_worker(make_broker, monkeypatch):
    broker = make_broker()
    bs = broker.bootstrap_servers
    topic, group = unique("orders"), unique("audit")
    create_topic(bs, topic, partitions=2)
    producer = Producer({"bootstrap.servers": bs})
    for i in range(5):
        producer.produce(topic, value=f"p0-{i}".encode(), partition=0)
        producer.produce(topic, value=f"p1-{i}".encode(), partition=1)
    assert producer.flush(10) == 0
    monkeypatch.setattr(consumer_group_worker, "KafkaConsumer", _RebalancingConsumer)
    _RebalancingConsumer.revoke = TopicPartition(topic, 0)
    FailsOnPartitionZero.seen = []
    app = App({"bootstrap.servers": bs})
    app.consumer_group(group).topic(topic, FailsOnPartitionZero, auto_offset_reset="earliest", max_poll_records=10,
                                    backoff=Backoff(100, 1.0, 100))
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=10)
    worker.start()
    try:
        wait_until(lambda: sum(1 for p, _ in FailsOnPartitionZero.seen if p == 1) == 5, 30,
                   message="partition 1 processed")
        assert all(w.is_alive() for w in worker.workers)
    finally:
        worker.stop()
        status = worker.wait()
    assert status == 0  # before the fix: _UNKNOWN_PARTITION from the seek killed the thread, status 1
    # the records of the revoked partition returned by that poll were left to its next owner
    assert _RebalancingConsumer.revoke is None


def test_a_renewal_stuck_for_half_the_lock_does_not_expire_other_workers_locks(make_broker, monkeypatch):
    broker = make_broker(config=BROKER_CONFIG)
    slow = [f"slow:2600:{uuid.uuid4().hex[:8]}".encode() for _ in range(2)]
    app, route, settled = share_app(broker.bootstrap_servers, slow, max_poll_records=1, concurrency=2)
    original = share_worker.ShareWorkerThread.renew
    first = threading.Lock()

    def first_answer_is_slow(self, messages, records=None, job=None):
        ok = original(self, messages, records, job)
        if first.acquire(blocking=False):  # the first renewal's answer takes longer than half the lock
            time.sleep(0.6 * LOCK_MS / 1000)
        return ok
    monkeypatch.setattr(share_worker.ShareWorkerThread, "renew", first_answer_is_slow)
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=10)
    worker.start()
    try:
        wait_until(lambda: sorted(v for v, o in settled) == sorted(slow), 30, message="both long jobs settled")
    finally:
        worker.stop()
        assert worker.wait() == 0
    runs = JOURNAL.by_value()
    (_, start_a, end_a), (_, start_b, end_b) = runs[slow[0]][0], runs[slow[1]][0]
    assert start_a < end_b and start_b < end_a  # they ran at the same time, on the two workers
    assert sorted(settled) == sorted((v, "accepted") for v in slow)  # no lock lost
    assert [len(runs[v]) for v in slow] == [1, 1]


def test_a_renewal_answered_late_is_not_a_lost_lock(make_broker, monkeypatch):
    broker = make_broker(config=BROKER_CONFIG)
    job = f"slow:2200:{uuid.uuid4().hex[:8]}".encode()
    app, route, settled = share_app(broker.bootstrap_servers, [job], max_poll_records=1)
    original = share_worker.ShareWorkerThread._commit
    late = threading.Event()

    def answered_late(self, sync, timeout_s=None):
        results = original(self, sync, timeout_s)
        if sync and results:  # as the client says when its wait ends before the broker's answer
            late.set()
            return {tp: KafkaTimeoutError("not confirmed in time") for tp in results}
        return results
    monkeypatch.setattr(share_worker.ShareWorkerThread, "_commit", answered_late)
    worker = Worker(app, handle_signals=False, shutdown_timeout_s=10)
    worker.start()
    try:
        wait_until(lambda: settled, 20, message="the job settled")
    finally:
        worker.stop()
        assert worker.wait() == 0
    assert late.is_set()
    assert settled == [(job, "accepted")]  # before the fix: lock-lost, and the job ran again
    assert len(JOURNAL.by_value()[job]) == 1
