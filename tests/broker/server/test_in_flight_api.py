"""quafka's API extension over the wire (QuafkaDescribeInFlight / QuafkaAlterInFlight,
protocol/extensions.py) through quafka.client.Admin against a real broker: what the view shows of
a scripted window, dry runs that change nothing, and every refusal with its message."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from quafka.client import AcknowledgeType, Admin, KafkaException, ShareConsumer
from support import set_group_configs, wait_until
from support.share_client import create_topic

pytestmark = pytest.mark.timeout(60)

TOPIC = "inflight"


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]], headers=None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for key, value in records:
        producer.produce(topic, value, key=key, headers=headers)
    assert producer.flush(10) == 0


def take(consumer: ShareConsumer, wanted: int) -> list:
    got: list = []
    wait_until(lambda: got.extend(consumer.poll(0.5)) or len(got) >= wanted, 15, 0,
               message=f"{wanted} records")
    return got


def test_the_view_shows_holders_lock_time_due_times_and_keys(broker):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, TOPIC)
    set_group_configs(bootstrap, "view", {"share.auto.offset.reset": "earliest",
                                          "quafka.share.redelivery.backoff.ms": "600000",
                                          "quafka.share.key.ordering": "true"})
    produce(bootstrap, TOPIC, [(b"a", b"0"), (b"b", b"1"), (b"a", b"2")])
    with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "view", "client.id": "worker-7",
                        "share.acknowledgement.mode": "explicit", "max.poll.records": 10}) as consumer:
        consumer.subscribe([TOPIC])
        got = take(consumer, 2)
        assert sorted(r.offset for r in got) == [0, 1]  # 2 waits behind 0 (key a)
        consumer.acknowledge(next(r for r in got if r.offset == 1), AcknowledgeType.RELEASE)
        released_at_ms = time.time() * 1000
        consumer.commit_sync(5)
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            view = admin.describe_in_flight("view")[(TOPIC, 0)]
            assert (view.start_offset, view.end_offset, view.in_flight_count) == (0, 2, 3)
            assert (view.waiting_backoff_count, view.blocked_count, view.key_ordering) == (1, 1, True)
            rows = {r.first_offset: r for r in view.ranges}
            held = rows[0]
            assert (held.state, held.delivery_count, held.client_id, held.key) == ("ACQUIRED", 1, "worker-7", b"a")
            assert held.member_id and held.client_host
            assert 0 < held.lock_remaining_ms <= 30_000
            waiting = rows[1]
            assert (waiting.state, waiting.wait_reason, waiting.key, waiting.member_id) == (
                "AVAILABLE", "backoff", b"b", None)
            assert released_at_ms + 590_000 <= waiting.due_at_ms <= released_at_ms + 601_000
            assert (rows[2].state, rows[2].blocked, rows[2].key) == ("AVAILABLE", True, b"a")
            # "where is my record": the one row holding the offset; nothing outside the window
            assert [r.first_offset for r in admin.describe_in_flight("view", offset=2)[(TOPIC, 0)].ranges] == [2]
            assert admin.describe_in_flight("view", offset=7)[(TOPIC, 0)].ranges == ()


def test_a_dry_run_changes_nothing_and_a_force_release_frees_at_once(broker):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, TOPIC)
    set_group_configs(bootstrap, "dry", {"share.auto.offset.reset": "earliest",
                                         "quafka.share.redelivery.backoff.ms": "600000"})
    produce(bootstrap, TOPIC, [(None, b"x")] * 4)
    with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "dry",
                        "share.acknowledgement.mode": "explicit"}) as consumer, \
            Admin({"bootstrap.servers": bootstrap}) as admin:
        consumer.subscribe([TOPIC])
        for record in take(consumer, 4):
            consumer.acknowledge(record, AcknowledgeType.RELEASE)
        consumer.commit_sync(5)
        assert not consumer.poll(0.5)  # all wait ten minutes
        before = admin.describe_in_flight("dry")[(TOPIC, 0)]
        dry = admin.alter_in_flight("dry", TOPIC, 0, "release", first_offset=0, last_offset=9, validate_only=True)
        assert (dry.changed, dry.skipped, dry.not_fetched) == (4, 0, 6)
        assert admin.describe_in_flight("dry")[(TOPIC, 0)] == before
        done = admin.alter_in_flight("dry", TOPIC, 0, "release", first_offset=0, last_offset=3,
                                     reset_delivery_count=True)
        assert (done.changed, done.skipped) == (4, 0)
        again = take(consumer, 4)
        assert sorted(r.offset for r in again) == [0, 1, 2, 3]
        assert {r.delivery_count for r in again} == {1}  # counts were reset


@pytest.mark.parametrize(("call", "error"), [
    (lambda a: a.describe_in_flight("no-such-group"), "GROUP_ID_NOT_FOUND"),
    (lambda a: a.describe_in_flight("bad", ["no-such-topic"]), "no-such-topic does not exist"),
    (lambda a: a.describe_in_flight("bad", {TOPIC: [5]}), f"topic {TOPIC} has no partition 5"),
    (lambda a: a.describe_in_flight("bad", max_rows=0), "MaxRows must be 1 to"),
    (lambda a: a.describe_in_flight("bad", offset=-5), "Offset must be -1"),
    (lambda a: a.alter_in_flight("bad", TOPIC, 0, "release", first_offset=9, last_offset=3),
     "invalid offset range 9-3"),
    (lambda a: a.alter_in_flight("bad", TOPIC, 0, "archive", first_offset=-2, last_offset=3),
     "invalid offset range -2-3"),
    (lambda a: a.alter_in_flight("bad", TOPIC, 0, "release-key"), "releasing a key needs the key"),
    (lambda a: a.alter_in_flight("bad", TOPIC, 0, "release-key", key=b"k"), "is not parked"),
    (lambda a: a.alter_in_flight("no-such-group", TOPIC, 0, "release", first_offset=0, last_offset=0),
     "GROUP_ID_NOT_FOUND"),
    (lambda a: a.alter_in_flight("bad", "no-such-topic", 0, "release", first_offset=0, last_offset=0),
     "no-such-topic does not exist"),
])
def test_bad_requests_are_refused_with_a_message_naming_the_problem(broker, call, error):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, TOPIC)
    set_group_configs(bootstrap, "bad", {"share.auto.offset.reset": "earliest"})
    produce(bootstrap, TOPIC, [(None, b"x")])
    with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "bad"}) as consumer, \
            Admin({"bootstrap.servers": bootstrap}) as admin:
        consumer.subscribe([TOPIC])
        take(consumer, 1)  # the group exists and has state for partition 0
        with pytest.raises(KafkaException, match=error):
            call(admin)
        assert admin.describe_in_flight("bad")[(TOPIC, 0)].in_flight_count == 1  # the broker serves on


def test_a_partition_the_group_never_fetched_is_named(broker):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, TOPIC, partitions=2)
    set_group_configs(bootstrap, "half", {"share.auto.offset.reset": "earliest"})
    produce(bootstrap, TOPIC, [(None, b"x")])
    with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "half"}) as consumer, \
            Admin({"bootstrap.servers": bootstrap}) as admin:
        consumer.subscribe([TOPIC])
        take(consumer, 1)
        states = admin.describe_in_flight("half")
        wait_until(lambda: len(admin.describe_in_flight("half")) == 2, 10, 0.05,
                   message="both partitions initialised by the group")
        assert set(states) <= {(TOPIC, 0), (TOPIC, 1)}
        create_topic(bootstrap, "other")
        with pytest.raises(KafkaException, match="has no share state for other-0"):
            admin.describe_in_flight("half", {"other": [0]})
