"""Dead-letter records of share groups (broker/core/dead_letters.py), against Kafka 4.4's
ShareGroupDLQStateManager: headers and their order, the partition, copying and its size rule, the
validation order and texts, packing into produce batches (notes/kip-1191-dlq-in-kafka-source.md)."""

from __future__ import annotations

import pytest

from quafka.broker.core.dead_letters import (
    RECORD_BATCH_OVERHEAD,
    DeadLetterCause,
    DlqTopicView,
    SourceRecord,
    dead_letter_partition,
    dead_letters,
    header_map,
    infer_cause,
    pack,
    validate_dlq_topic,
)

OPTED_IN = DlqTopicView(exists=True, opted_in=True, partitions=2)


def test_headers_in_kafkas_order_as_decimal_text():
    [r] = dead_letters(group_id="workers", topic="jobs", partition=3, first_offset=42, last_offset=42,
                       delivery_count=5, cause=DeadLetterCause.DELIVERY_COUNT_EXCEEDED, dlq_partitions=2, now_ms=1234)
    assert r.headers == (("__dlq.errors.topic", b"jobs"), ("__dlq.errors.partition", b"3"),
                         ("__dlq.errors.offset", b"42"), ("__dlq.errors.group", b"workers"),
                         ("__dlq.errors.delivery.count", b"5"),
                         ("__dlq.errors.message", b"Offset delivery count exceeded the threshold."))
    assert (r.partition, r.timestamp_ms, r.key, r.value) == (1, 1234, None, None)  # 3 % 2; headers only


def test_one_record_per_offset_and_no_message_without_a_cause():
    records = dead_letters(group_id="g", topic="t", partition=0, first_offset=10, last_offset=12, delivery_count=1,
                           cause=None, dlq_partitions=1, now_ms=0)
    assert [header_map(r.headers)["__dlq.errors.offset"] for r in records] == ["10", "11", "12"]
    assert all("__dlq.errors.message" not in header_map(r.headers) for r in records)
    with pytest.raises(ValueError, match="bad offset range"):
        dead_letters(group_id="g", topic="t", partition=0, first_offset=5, last_offset=4, delivery_count=1,
                     cause=None, dlq_partitions=1, now_ms=0)


def test_copy_takes_key_and_value_only_and_falls_back_to_headers_when_too_large_or_gone():
    sources = {0: SourceRecord(b"k", b"v"), 1: SourceRecord(None, b"x" * 200), 2: None}
    records = dead_letters(group_id="g", topic="t", partition=0, first_offset=0, last_offset=2, delivery_count=1,
                           cause=DeadLetterCause.CLIENT_REJECT, dlq_partitions=1, now_ms=0, copy=True,
                           source=sources.get, max_message_bytes=100)
    assert [(r.key, r.value) for r in records] == [(b"k", b"v"), (None, None), (None, None)]
    not_copied = dead_letters(group_id="g", topic="t", partition=0, first_offset=0, last_offset=0, delivery_count=1,
                              cause=None, dlq_partitions=1, now_ms=0, copy=False, source=sources.get)
    assert (not_copied[0].key, not_copied[0].value) == (None, None)


@pytest.mark.parametrize("topic, view, auto_create, prefix, expected", [
    ("", OPTED_IN, False, "dlq.", "Configured DLQ topic name in share group: g is empty."),
    ("__dlq", OPTED_IN, False, "", "Configured DLQ topic name in share group: g cannot start with __, topic: __dlq."),
    ("dlq.x", DlqTopicView(True, False), False, "dlq.",
     "DLQ is not enabled on configured DLQ topic for share group: g, topic: dlq.x."),
    ("dlq.x", DlqTopicView(False, False), False, "dlq.",
     "DLQ topic does not exist and auto create is disabled on cluster for share group: g, topic: dlq.x."),
    ("dlq.x", DlqTopicView(False, False), True, "dlq.", None),
    ("wrong.x", OPTED_IN, False, "dlq.", "Configured DLQ topic name does not comply with the DLQ topic prefix in "
                                         "share group: g, topic: wrong.x, prefix: dlq.."),
    ("wrong.x", DlqTopicView(True, False), False, "dlq.",  # opt-in is checked before the prefix
     "DLQ is not enabled on configured DLQ topic for share group: g, topic: wrong.x."),
    ("wrong.x", OPTED_IN, False, "", None),  # an empty prefix allows any name
    ("dlq.x", OPTED_IN, False, "dlq.", None),
])
def test_validation_order_and_messages(topic, view, auto_create, prefix, expected):
    assert validate_dlq_topic("g", topic, view, auto_create=auto_create, prefix=prefix) == expected


def test_partition_is_the_source_index_modulo_the_dlq_count():
    assert [dead_letter_partition(p, 3) for p in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    with pytest.raises(ValueError):
        dead_letter_partition(0, 0)


def test_cause_of_a_record_found_archiving_at_start_up():
    assert infer_cause(5, 5) is DeadLetterCause.DELIVERY_COUNT_EXCEEDED
    assert infer_cause(2, 5) is DeadLetterCause.CLIENT_REJECT


def test_packing_keeps_order_respects_the_limit_and_sends_an_oversized_record_alone():
    records = dead_letters(group_id="g", topic="t", partition=0, first_offset=0, last_offset=9, delivery_count=1,
                           cause=DeadLetterCause.CLIENT_REJECT, dlq_partitions=1, now_ms=0)
    one = records[0].size_bytes()
    batches = pack(records, RECORD_BATCH_OVERHEAD + 3 * one)
    assert [len(b) for b in batches] == [3, 3, 3, 1]
    assert [r for b in batches for r in b] == records
    assert [len(b) for b in pack(records, 10)] == [1] * 10  # each alone: the broker decides
