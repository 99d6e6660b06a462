"""Every acknowledgement handed to the ShareConsumer gets exactly one outcome, and a success only
when the leader's response names the partition with error code NONE.

Kafka's ShareConsumeRequestManager is the reference: acknowledgements whose partition a ShareFetch
or ShareAcknowledge response leaves out fail with InvalidRecordStateException ("invalid response
from broker": handleShareFetchSuccess for those left in flight, AcknowledgeRequestState's
processingComplete / processPendingInFlightAcknowledgements); a ShareFetch that fails with an
error that is not a KafkaException fails its acknowledgements with UNKNOWN_SERVER_ERROR
(handleShareFetchFailure); acknowledgements whose deadline passes get REQUEST_TIMED_OUT
(AcknowledgeRequestState.handleAcknowledgeTimedOut).

Against the scripted fake cluster (tests/client/fake_cluster.py) for what a real broker does not do
on demand: answers that omit a partition, an AcknowledgeErrorCode the client does not know (the
fetch's answer cannot be made sense of), a leader that stops answering while close() waits.
Against a real embedded broker for a topic deleted while the acknowledgements of its records ride
on a parked ShareFetch (UNKNOWN_TOPIC_ID, answered after the client's metadata forgot the topic).
"""

from __future__ import annotations

import time
import uuid

import pytest
from support import produce_batch, set_group_configs, wait_until

from client.fake_cluster import SHARE_ACKNOWLEDGE, SHARE_FETCH, FakeCluster
from quafka import EmbeddedBroker
from quafka.client import AcknowledgeType, Admin, KafkaException, ShareConsumer, TopicPartition
from quafka.protocol.errors import ErrorCode

TOPIC, GROUP = "t", "outcomes-group"
TP = TopicPartition(TOPIC, 0)


def fake_config(fake: FakeCluster, **extra) -> dict:
    return {"bootstrap.servers": fake.bootstrap_servers, "group.id": GROUP, "share.acknowledgement.mode": "explicit",
            "fetch.max.wait.ms": 100, "request.timeout.ms": 3000, "default.api.timeout.ms": 3000,
            "retry.backoff.ms": 20, "retry.backoff.max.ms": 100, **extra}


class Outcomes:
    """The acknowledgement commit callback's reports: (partition, offset) -> [exception or None]."""

    def __init__(self, consumer: ShareConsumer) -> None:
        self.by_offset: dict[tuple[TopicPartition, int], list[KafkaException | None]] = {}
        consumer.set_acknowledgement_commit_callback(self._callback)

    def _callback(self, offsets: dict, exception) -> None:
        for tp, offs in offsets.items():
            for offset in offs:
                self.by_offset.setdefault((tp, offset), []).append(exception)

    def of(self, tp: TopicPartition, offsets) -> list[list[KafkaException | None]]:
        return [self.by_offset.get((tp, o), []) for o in offsets]


def poll_records(consumer: ShareConsumer, count: int, timeout_s: float = 10.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        assert time.monotonic() < deadline, f"{len(got)} of {count} records within {timeout_s}s"
        got.extend(consumer.poll(0.1))
    return got


def poll_until(consumer: ShareConsumer, condition, timeout_s: float, what: str) -> None:
    """Poll (which runs the callback) until ``condition()``; nothing more may be delivered."""
    def step():
        assert consumer.poll(0.05) == []
        return condition()

    wait_until(step, timeout_s, 0, message=what)


def assert_one_failure(outcomes: Outcomes, tp: TopicPartition, offsets, code: ErrorCode) -> None:
    reports = outcomes.of(tp, offsets)
    assert all(len(r) == 1 for r in reports), f"not exactly one outcome per offset: {reports}"
    for [exc] in reports:
        assert isinstance(exc, KafkaException) and exc.code == code, f"expected {code.name}, got {exc!r}"


# ------------------------------------------------------------------------------ omitted partitions


def test_an_acknowledgement_whose_partition_a_share_acknowledge_answer_omits_fails():
    with FakeCluster(partitions=1) as fake:
        fake.produce(0, 5)
        consumer = ShareConsumer(fake_config(fake))
        try:
            outcomes = Outcomes(consumer)
            consumer.subscribe([TOPIC])
            records = poll_records(consumer, 5)
            for r in records:
                consumer.acknowledge(r, AcknowledgeType.ACCEPT)
            fake.omit_partitions(fake.leader(0), {0})
            result = consumer.commit_sync(3.0)
            assert [r.info.get("omitted") for r in fake.requests(SHARE_ACKNOWLEDGE)] == [[0]]
            assert set(result) == {TP}
            assert isinstance(result[TP], KafkaException), f"omitted partition reported as {result[TP]!r}"
            assert result[TP].code == ErrorCode.invalid_record_state, result[TP]
            assert "did not include the partition" in result[TP].message
            assert_one_failure(outcomes, TP, range(5), ErrorCode.invalid_record_state)
        finally:
            consumer.close(3.0)


def test_an_acknowledgement_riding_on_a_share_fetch_whose_answer_omits_its_partition_fails():
    with FakeCluster(partitions=1) as fake:
        fake.produce(0, 5)
        consumer = ShareConsumer(fake_config(fake))
        try:
            outcomes = Outcomes(consumer)
            consumer.subscribe([TOPIC])
            records = poll_records(consumer, 5)
            for r in records:
                consumer.acknowledge(r, AcknowledgeType.ACCEPT)
            after = fake.omit_partitions(fake.leader(0), {0})
            poll_until(consumer, lambda: all(outcomes.of(TP, range(5))), 5.0, "the outcome of every acknowledgement")
            [carrier] = [r for r in fake.requests(SHARE_FETCH, after=after) if r.acks]
            assert carrier.info.get("omitted") == [0] and sorted(a.offset for a in fake.accepted) == list(range(5))
            assert_one_failure(outcomes, TP, range(5), ErrorCode.invalid_record_state)
        finally:
            consumer.close(3.0)


# ------------------------------------------------------------------------------ non-Kafka errors


def test_acknowledgements_riding_on_a_share_fetch_whose_answer_cannot_be_understood_fail():
    """An AcknowledgeErrorCode the client's ErrorCode does not know fails the whole ShareFetch with
    a ValueError, not a KafkaException: its acknowledgements used to vanish with the fetch task."""
    with FakeCluster(partitions=1) as fake:
        fake.produce(0, 5)
        consumer = ShareConsumer(fake_config(fake))
        try:
            outcomes = Outcomes(consumer)
            consumer.subscribe([TOPIC])
            records = poll_records(consumer, 5)
            for r in records:
                consumer.acknowledge(r, AcknowledgeType.ACCEPT)
            after = fake.unknown_ack_error(fake.leader(0))
            poll_until(consumer, lambda: all(outcomes.of(TP, range(5))), 5.0, "the outcome of every acknowledgement")
            assert [r.info.get("unknown_ack_error") for r in fake.requests(SHARE_FETCH, after=after) if r.acks] == [32000]
            assert_one_failure(outcomes, TP, range(5), ErrorCode.unknown_server_error)
            [[exc]] = outcomes.of(TP, [0])
            assert "ValueError" in exc.message, exc
            # the consumer goes on: the fetch failed, not the consumer
            fake.unknown_ack_error(fake.leader(0), None)
            fake.produce(0, 2)
            again = poll_records(consumer, 1)
            assert {r.offset for r in again} <= set(range(7))
        finally:
            consumer.close(3.0)


# ------------------------------------------------------------------------------ the close deadline


def test_acknowledgements_riding_on_a_share_fetch_cut_off_by_the_close_deadline_time_out():
    with FakeCluster(partitions=1) as fake:
        fake.produce(0, 5)
        consumer = ShareConsumer(fake_config(fake, **{"fetch.max.wait.ms": 5000}))
        closed = False
        try:
            outcomes = Outcomes(consumer)
            consumer.subscribe([TOPIC])
            records = poll_records(consumer, 5)
            for r in records:
                consumer.acknowledge(r, AcknowledgeType.ACCEPT)
            after = fake.hang_node(fake.leader(0))
            assert consumer.poll(0.2) == []  # the acknowledgements ride on a ShareFetch the leader never answers
            wait_until(lambda: any(r.acks for r in fake.requests(SHARE_FETCH, after=after)), 5, 0.01,
                       message="the ShareFetch carrying the acknowledgements")
            started = time.monotonic()
            consumer.close(1.0)
            closed = True
            assert time.monotonic() - started < 3.0
            assert_one_failure(outcomes, TP, range(5), ErrorCode.request_timed_out)
        finally:
            fake.hang_node(fake.leader(0), False)
            if not closed:
                consumer.close(1.0)


def test_a_commit_async_cut_off_by_the_close_deadline_times_out():
    with FakeCluster(partitions=1) as fake:
        fake.produce(0, 5)
        consumer = ShareConsumer(fake_config(fake, **{"default.api.timeout.ms": 10_000}))
        closed = False
        try:
            outcomes = Outcomes(consumer)
            consumer.subscribe([TOPIC])
            records = poll_records(consumer, 5)
            for r in records:
                consumer.acknowledge(r, AcknowledgeType.ACCEPT)
            after = fake.hang_node(fake.leader(0))
            consumer.commit_async()
            wait_until(lambda: fake.requests(SHARE_ACKNOWLEDGE, after=after), 5, 0.01,
                       message="the ShareAcknowledge of commit_async")
            consumer.close(1.0)
            closed = True
            reports = outcomes.of(TP, range(5))
            assert all(len(r) == 1 for r in reports), f"not exactly one outcome per offset: {reports}"
            assert all(isinstance(exc, KafkaException) for [exc] in reports), reports
        finally:
            fake.hang_node(fake.leader(0), False)
            if not closed:
                consumer.close(1.0)


# ------------------------------------------------------------------------------ a real broker

BROKER_CONFIG = {"group.share.heartbeat.interval.ms": 500, "group.share.min.heartbeat.interval.ms": 500}


@pytest.fixture(scope="module")
def deleted_topic_broker():
    with EmbeddedBroker(config=BROKER_CONFIG) as broker:
        yield broker


def consume_then_delete(broker, consumer_config: dict, commit=None):
    """Topics A (3 records) and B (none); the consumer receives and ACCEPTs A's records, then A is
    deleted. Yields (consumer, outcomes, A's partition) with A gone."""
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:8]
    topic_a, topic_b, group = f"gone-{suffix}", f"kept-{suffix}", f"g-{suffix}"
    admin = Admin({"bootstrap.servers": bootstrap})
    admin.create_topics({topic_a: (1, 1), topic_b: (1, 1)})
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    produce_batch(bootstrap, topic_a, 3)
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit", **consumer_config})
    outcomes = Outcomes(consumer)
    consumer.subscribe([topic_a, topic_b])
    records = poll_records(consumer, 3, timeout_s=20)
    tp_a = TopicPartition(topic_a, 0)
    assert {(r.topic, r.partition) for r in records} == {tp_a}
    for r in records:
        consumer.acknowledge(r, AcknowledgeType.ACCEPT)
    admin.delete_topics([topic_a])
    admin.close()
    return consumer, outcomes, tp_a


def test_a_commit_of_a_deleted_topic_fails_at_once_with_unknown_topic_id(deleted_topic_broker):
    """Kafka does not retry UNKNOWN_TOPIC_ID / UNKNOWN_TOPIC_OR_PARTITION answers to
    ShareAcknowledge (ShareConsumeRequestManager.handlePartitionError). The client retried them
    (they are retriable codes), dropped the topic from its metadata meanwhile, and after the whole
    commit timeout reported LEADER_NOT_AVAILABLE ("no known leader") instead of what the broker said."""
    consumer, outcomes, tp_a = consume_then_delete(deleted_topic_broker, {"retry.backoff.ms": 50})
    try:
        started = time.monotonic()
        result = consumer.commit_sync(8.0)
        took = time.monotonic() - started
        assert set(result) == {tp_a}
        assert isinstance(result[tp_a], KafkaException) and result[tp_a].code == ErrorCode.unknown_topic_id, result
        assert took < 4.0, f"commit_sync took {took:.1f}s: the deleted topic's acknowledgements were retried"
        assert_one_failure(outcomes, tp_a, range(3), ErrorCode.unknown_topic_id)
    finally:
        consumer.close(5.0)


def test_acknowledgements_of_a_deleted_topic_riding_on_a_parked_share_fetch_fail(deleted_topic_broker):
    """The acknowledgements ride on a ShareFetch that parks (topic B has nothing to give); the
    answer names A's partition with UNKNOWN_TOPIC_ID, whatever the client's metadata knows of A by
    then (a regression guard: on one broker the answer comes before any metadata refresh, on the
    same connection)."""
    consumer, outcomes, tp_a = consume_then_delete(deleted_topic_broker, {"fetch.max.wait.ms": 2000,
                                                                         "metadata.max.age.ms": 100})
    try:
        wait_until(lambda: consumer.poll(0.2) == [] and all(outcomes.of(tp_a, range(3))), 15, 0,
                   message="the outcome of every acknowledgement of the deleted topic")
        assert_one_failure(outcomes, tp_a, range(3), ErrorCode.unknown_topic_id)
    finally:
        consumer.close(5.0)
