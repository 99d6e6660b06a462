"""Admin.list_dead_letters and Admin.redrive_dead_letters against an embedded broker, on dead
letters written by hand with confluent-kafka's Producer (quafka's and Apache Kafka's headers),
checked by reading the target topics back with PartitionReader."""

from __future__ import annotations

import pytest

from support.dlq import DIED_AT, DLQ, letter, produce_messages, read_topic

from quafka.client import Admin, KafkaException
from quafka.client.dead_letters import PartitionProgress, advance, format_redriven, parse_redriven, progress_group
from quafka.protocol import dead_letter_headers as h
from quafka.protocol.errors import ErrorCode

@pytest.fixture
def env(broker):
    """Sources orders (2 partitions) and old (its records deleted), a DLQ of 2 partitions, retry."""
    bs = broker.bootstrap_servers
    admin = Admin({"bootstrap.servers": bs})
    admin.create_topics({"orders": (2, 1), "old": (1, 1), DLQ: (2, 1), "retry": (1, 1)})
    orders = produce_messages(bs, [("orders", p, f"k{p}{i}".encode(), f"o{p}{i}".encode(), [("trace", f"t{p}{i}".encode())])
                          for p in (0, 1) for i in range(3)])
    assert orders[0] == ("orders", 0, 0) and orders[3] == ("orders", 1, 0)
    produce_messages(bs, [("old", 0, None, b"gone", [])] * 2)
    admin.delete_records({("old", 0): 2})
    produce_messages(bs, [
        letter(0, ("orders", 0, 0), count=1, message=h.MESSAGE_CLIENT_REJECT, reason=h.REASON_REJECTED),  # p0@0
        letter(0, ("orders", 0, 1), reason=h.REASON_RELEASED_AT_LIMIT, key=b"ck", value=b"copy"),  # p0@1
        letter(0, ("orders", 0, 2), group="other"),                                                 # p0@2
        letter(0, ("orders", 1, 2)),  # p0@3: Apache Kafka's delivery limit, no reason header
        letter(1, ("orders", 1, 0), count=2, message=h.MESSAGE_CLIENT_REJECT),  # p1@0: Apache Kafka's reject
        (DLQ, 1, None, b"not a dead letter", [("x", b"y")]),                    # p1@1
        letter(1, ("old", 0, 0), reason=h.REASON_LOCK_EXPIRED_AT_LIMIT),        # p1@2: source deleted
    ])
    try:
        yield bs, admin
    finally:
        admin.close()


def test_list_dead_letters_filters_reasons_and_the_group_config(env):
    bs, admin = env
    letters = admin.list_dead_letters("g", DLQ)
    assert [(x.dlq_partition, x.dlq_offset) for x in letters] == [(0, 0), (0, 1), (0, 3), (1, 0), (1, 2)]
    assert [(x.topic, x.partition, x.offset, x.delivery_count, x.reason, x.has_copy) for x in letters] == [
        ("orders", 0, 0, 1, "rejected", False), ("orders", 0, 1, 5, "released-at-limit", True),
        ("orders", 1, 2, 5, "delivery-limit", False), ("orders", 1, 0, 2, "rejected", False),
        ("old", 0, 0, 5, "lock-expired-at-limit", False)]
    first = letters[1]
    assert (first.group, first.dlq_topic, first.timestamp_ms, first.died_at) == (
        "g", DLQ, DIED_AT, "2023-11-14T22:13:20.123Z")
    assert (first.key, first.value, first.message) == (b"ck", b"copy", h.MESSAGE_DELIVERY_COUNT_EXCEEDED)
    assert first.to_json()["key"] == "ck" and first.to_json()["copy"] is True

    assert [x.dlq_offset for x in admin.list_dead_letters("g", DLQ, topic="old")] == [2]
    assert [x.offset for x in admin.list_dead_letters("other", DLQ)] == [2]
    assert admin.list_dead_letters("nobody", DLQ) == []

    # without a DLQ topic named: the group's errors.deadletterqueue.topic.name, or a clear error
    with pytest.raises(KafkaException) as info:
        admin.list_dead_letters("g")
    assert info.value.message == ("Share group g has no dead-letter queue topic "
                                  "(errors.deadletterqueue.topic.name is not set).")
    admin.alter_configs("group", "g", {"errors.deadletterqueue.topic.name": DLQ})
    assert admin.list_dead_letters("g") == letters


def test_redrive_dry_run_then_to_another_topic_once(env):
    bs, admin = env
    with pytest.raises(KafkaException) as info:  # a target topic that does not exist: nothing is sent
        admin.redrive_dead_letters("g", DLQ, to_topic="nowhere")
    assert info.value.code == ErrorCode.unknown_topic_or_partition

    plan = admin.redrive_dead_letters("g", DLQ, to_topic="retry", dry_run=True)
    assert [(i.letter.dlq_partition, i.letter.dlq_offset, i.status, i.payload) for i in plan.planned] == [
        (0, 0, "send", "source"), (0, 1, "send", "dlq-copy"), (0, 3, "send", "source"), (1, 0, "send", "source"),
        (1, 2, "source-missing", "source")]
    assert (len(plan.sent), len(plan.skipped_missing), plan.skipped_already_redriven) == (4, 1, [])
    assert read_topic(bs, "retry") == []  # a dry run sends nothing ...
    assert admin.list_consumer_group_offsets(progress_group("g")) == {}  # ... and records nothing

    result = admin.redrive_dead_letters("g", DLQ, to_topic="retry")
    assert [i.status for i in result.planned] == ["sent", "sent", "sent", "sent", "source-missing"]
    records = read_topic(bs, "retry")
    got = sorted((r.key, r.value, r.headers) for r in records)

    def redrive_headers(p, o):
        return [(h.HEADER_REDRIVE_TOPIC, DLQ.encode()), (h.HEADER_REDRIVE_PARTITION, str(p).encode()),
                (h.HEADER_REDRIVE_OFFSET, str(o).encode())]

    assert got == sorted([
        (b"k00", b"o00", [("trace", b"t00")] + redrive_headers(0, 0)),  # the original, its headers carried
        (b"ck", b"copy", redrive_headers(0, 1)),                         # the DLQ's copy
        (b"k12", b"o12", [("trace", b"t12")] + redrive_headers(0, 3)),
        (b"k10", b"o10", [("trace", b"t10")] + redrive_headers(1, 0)),
    ])
    # progress: both partitions done to their end (a letter whose source is gone is handled: it can
    # never be redriven, and must not hold the committed offset back)
    assert admin.list_consumer_group_offsets(progress_group("g")) == {(DLQ, 0): (4, ""), (DLQ, 1): (3, "")}

    again = admin.redrive_dead_letters("g", DLQ, to_topic="retry")
    assert (again.sent, len(again.skipped_already_redriven), len(again.skipped_missing)) == ([], 5, 0)
    assert len(read_topic(bs, "retry")) == 4


def test_redrive_overlapping_offset_ranges_to_the_source_topics(env):
    bs, admin = env
    before = len(read_topic(bs, "orders"))
    first = admin.redrive_dead_letters("g", DLQ, offsets=(1, 1))
    assert [(i.letter.dlq_partition, i.letter.dlq_offset, i.status, i.target_topic) for i in first.planned] == [
        (0, 1, "sent", "orders")]
    assert admin.list_consumer_group_offsets(progress_group("g")) == {(DLQ, 0): (0, "redriven:1-2")}

    second = admin.redrive_dead_letters("g", DLQ, offsets=(0, 3))
    assert [(i.letter.dlq_partition, i.letter.dlq_offset, i.status) for i in second.planned] == [
        (0, 0, "sent"), (0, 1, "already-redriven"), (0, 3, "sent"), (1, 0, "sent"), (1, 2, "source-missing")]
    third = admin.redrive_dead_letters("g", DLQ)
    assert third.sent == [] and len(third.skipped_already_redriven) == 5  # the source-missing one is handled

    records = read_topic(bs, "orders")
    added = [r for r in records if any(n == h.HEADER_REDRIVE_OFFSET for n, _ in r.headers)]
    assert len(records) == before + 4 == 10
    assert sorted((r.key, r.value) for r in added) == [(b"ck", b"copy"), (b"k00", b"o00"), (b"k10", b"o10"),
                                                     (b"k12", b"o12")]


def test_redriven_metadata_ranges_merge_and_advance():
    assert parse_redriven("redriven:20-22,12-15,16,30") == [(12, 16), (20, 22), (30, 30)]
    assert parse_redriven("") == [] and parse_redriven("other") == []
    assert format_redriven([(5, 5), (1, 3), (4, 4), (9, 12)]) == "redriven:1-5,9-12"
    assert format_redriven([]) == ""
    # the group's letters at 2, 5, 7, 9, 11 (the other offsets hold other groups' letters), read to 13
    letters = [2, 5, 7, 9, 11]
    nothing = PartitionProgress()
    assert advance(nothing, letters, [7], 13) == (2, "redriven:6-8")  # the range stretches to the pending ones
    assert advance(nothing, letters, [2, 5], 13) == (7, "")
    assert advance(nothing, letters, [11], 13) == (2, "redriven:10-12")
    some = PartitionProgress(2, ((6, 8),))
    assert some.done(1) and some.done(7) and not some.done(2) and not some.done(9)
    assert advance(some, letters, [9], 13) == (2, "redriven:6-10")
    assert advance(some, letters, [2, 5, 9, 11], 13) == (13, "")


def fetches(broker) -> int:
    return sum(n for (key, _version), n in broker.server.metrics.requests.items() if key == 1)


def test_list_dead_letters_with_a_limit_reads_only_the_newest_letters(broker):
    """``limit``: the newest letters of each DLQ partition, read backwards from its end in growing
    windows — here the DLQ (30 letters of 100 KB, interleaved with another group's) takes several
    1 MiB Fetch responses to read whole, the newest two take one."""
    bs = broker.bootstrap_servers
    with Admin({"bootstrap.servers": bs}) as admin:
        admin.create_topics({"orders": (1, 1), DLQ: (2, 1)})
        big = b"x" * 100_000
        produce_messages(bs, [letter(0, ("orders", 0, i), group="g" if i % 3 else "other", value=big)
                              for i in range(45)] + [letter(1, ("orders", 0, 99))])
        before = fetches(broker)
        everything = admin.list_dead_letters("g", DLQ)
        assert fetches(broker) - before >= 5  # 4.5 MB in DLQ partition 0, 1 MiB per response
        assert len(everything) == 31 and [x.dlq_partition for x in everything].count(1) == 1

        before = fetches(broker)
        newest = admin.list_dead_letters("g", DLQ, limit=2)
        assert fetches(broker) - before == 2  # one per DLQ partition
        assert [(x.dlq_partition, x.dlq_offset) for x in newest] == [(0, 43), (0, 44), (1, 0)]
        assert newest[:2] == everything[28:30] and newest[2] == everything[30]

        # windows grow back past the other group's letters; the answer is always the tail of the full one
        for limit in (1, 5, 17, 30, 100):
            got = admin.list_dead_letters("g", DLQ, limit=limit)
            assert [x for x in got if x.dlq_partition == 0] == everything[:30][-limit:], limit
        assert admin.list_dead_letters("g", DLQ, limit=0) == []
        assert [x.offset for x in admin.list_dead_letters("other", DLQ, limit=3)] == [36, 39, 42]
        with pytest.raises(KafkaException, match="limit must be None or an int >= 0"):
            admin.list_dead_letters("g", DLQ, limit=-1)
