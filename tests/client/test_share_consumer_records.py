"""ShareConsumer on the records it is given (issue 5, acceptance point 4).

- records produced by confluent-kafka in every codec, and batches built here in Java's formats
  (xerial-framed snappy, lz4 frame) plus transaction markers, are delivered intact with
  delivery_count 1; control records never reach the application and are acknowledged as GAP;
- a deserializer that raises: RecordDeserializationException naming topic/partition/offset, the
  record is RELEASEd (or REJECTed on request) and archived at the delivery limit;
- a batch failing its CRC: CorruptRecordException and its records REJECTed; with check.crcs=false
  the same batch is delivered.
"""

from __future__ import annotations

import functools
import re
import time

import pytest
from client.fixture_batches import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    append_to_log,
    break_crc,
    build,
    control_batch,
    produce_raw,
)
from support import produce_batch, set_group_configs, wait_until

from quafka import EmbeddedBroker
from quafka.client import (
    TIMESTAMP_CREATE_TIME,
    AcknowledgeType,
    Admin,
    CorruptRecordException,
    Record,
    RecordDeserializationException,
    ShareConsumer,
    TopicPartition,
)
from quafka.protocol.errors import ErrorCode

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
MODES = ["implicit", "explicit"]
BASE_TS = 1_700_000_000_000
POLL_S = 0.2
DEADLINE_S = 10.0


# ----------------------------------------------------------------------------- helpers

@pytest.fixture(scope="module")
def broker():
    """One broker for the module; every test has its own topic and group."""
    with EmbeddedBroker() as b:
        yield b


def _setup(broker, create_topic, name: str, **group_configs: str) -> tuple[str, str]:
    """A fresh topic and a share group reading it from the earliest offset."""
    topic, group = f"t-{name}", f"g-{name}"
    create_topic(broker.bootstrap_servers, topic)
    set_group_configs(broker.bootstrap_servers, group, {"share.auto.offset.reset": "earliest",
                                                       "share.assignment.interval.ms": "0", **group_configs})
    return topic, group


def _consumer(broker, group: str, mode: str = "implicit", value_deserializer=None, **config) -> ShareConsumer:
    conf = {"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "share.acknowledgement.mode": mode,
            "fetch.max.wait.ms": 100}
    conf.update(config)
    return ShareConsumer(conf, value_deserializer=value_deserializer)


def _next_poll(consumer: ShareConsumer, timeout_s: float = DEADLINE_S) -> list[Record]:
    """Poll until a poll returns records (or raises: the exception propagates)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        records = consumer.poll(POLL_S)
        if records:
            return records
    raise AssertionError(f"no records within {timeout_s}s")


def _ack_all(consumer: ShareConsumer, records: list[Record], mode: str) -> None:
    if mode == "explicit":
        for r in records:
            consumer.acknowledge(r, AcknowledgeType.ACCEPT)


def _poll_all(consumer: ShareConsumer, count: int, mode: str) -> list[Record]:
    """Records of polls until `count` arrived (accepting them in explicit mode)."""
    out: list[Record] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(out) < count:
        assert time.monotonic() < deadline, f"only {len(out)} of {count} records arrived: {out}"
        records = consumer.poll(POLL_S)
        _ack_all(consumer, records, mode)
        out.extend(records)
    return out


def _window(broker, group: str, topic: str, partition: int = 0) -> tuple[int, int] | None:
    """(start offset, in-flight count) of the group's share partition, read on the broker."""
    def read():
        for (g, _tid, p), ctx in broker.server.share_partitions.contexts.items():
            if g == group and p == partition and ctx.topic.name == topic:
                return ctx.share_partition.start_offset, ctx.share_partition.in_flight_count
        return None

    return broker.call(read)


def _settle(broker, consumer: ShareConsumer, group: str, topic: str, end_offset: int, mode: str) -> None:
    """Commit; the group's start offset (Admin.list_share_group_offsets) reaches `end_offset` and
    nothing stays in flight. Polls on meanwhile, and none may return a record."""
    result = consumer.commit_sync(5.0)
    assert all(v is None for v in result.values()), result
    assert set(result) <= {TopicPartition(topic, 0)}, result
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        def settled():
            start = admin.list_share_group_offsets(group, [topic])[(topic, 0)][0]
            if start == end_offset and _window(broker, group, topic) == (end_offset, 0):
                return True
            extra = consumer.poll(0.05)
            assert extra == [], f"unexpected records after everything was acknowledged: {extra}"
            if mode == "explicit":
                consumer.commit_sync(5.0)
            return False

        wait_until(settled, 5.0, 0, message=f"{group}'s start offset at {end_offset} with nothing in flight "
                   f"(now {admin.list_share_group_offsets(group, [topic])}, window {_window(broker, group, topic)})")


def _as_tuples(records: list[Record]) -> list[tuple]:
    return [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in records]


def _check_delivered(records: list[Record], topic: str, expected: list[tuple]) -> None:
    """Offsets, keys, values, headers, timestamps as expected; first delivery; one partition."""
    assert _as_tuples(records) == expected
    assert all(r.topic == topic and r.partition == 0 for r in records)
    assert all(r.timestamp_type == TIMESTAMP_CREATE_TIME for r in records)
    assert [r.delivery_count for r in records] == [1] * len(records)


def _fixture_records(tag: str, count: int, ts: int) -> list[tuple]:
    """(key, value, headers, timestamp) with null keys/values, duplicate and null headers."""
    out = []
    for i in range(count):
        key = None if i == 1 else f"{tag}-key-{i}".encode()
        value = None if i == 2 else f"{tag}-value-{i}-".encode() * (3 + i)
        headers = [] if i % 2 == 0 else [("trace", f"{tag}{i}".encode()), ("none", None), ("trace", b"\x00\xff")]
        out.append((key, value, headers, ts + 10 * i + (7 if i == 3 else 0)))
    return out


# ----------------------------------------------------------------------------- codecs

def _produce_confluent(bootstrap: str, topic: str, codec: str, count: int) -> list[tuple]:
    """Produce with confluent-kafka; return (offset, key, value, headers, timestamp) as delivered."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
    delivered = []

    def on_delivery(headers, err, msg):
        assert err is None, err
        delivered.append((msg.offset(), msg.key(), msg.value(), headers, msg.timestamp()[1]))

    for key, value, headers, ts in _fixture_records(codec, count, BASE_TS):
        producer.produce(topic, key=key, value=value, headers=headers, timestamp=ts, partition=0,
                         on_delivery=functools.partial(on_delivery, headers))
    assert producer.flush(10) == 0
    return sorted(delivered)


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_records_arrive_intact_in_every_codec(broker, create_topic, codec):
    topic, group = _setup(broker, create_topic, f"codec-{codec}")
    expected = _produce_confluent(broker.bootstrap_servers, topic, codec, 8)
    assert [e[0] for e in expected] == list(range(8))
    with _consumer(broker, group) as consumer:
        consumer.subscribe([topic])
        records = _poll_all(consumer, 8, "implicit")
        _check_delivered(records, topic, expected)
        _settle(broker, consumer, group, topic, 8, "implicit")


@pytest.mark.parametrize("mode", MODES)
def test_java_format_batches_arrive_intact_and_control_records_are_gap_acknowledged(broker, create_topic, mode):
    """Xerial snappy [0..4], lz4 frame [5..8], a COMMIT marker [9], zstd [10..12], an ABORT marker
    [13], gzip [14..15]: every acquired offset is covered; 9 and 13 never reach the application."""
    topic, group = _setup(broker, create_topic, f"java-{mode}")
    bootstrap = broker.bootstrap_servers
    layout = [("snappy", _fixture_records("xs", 5, BASE_TS)), ("lz4", _fixture_records("lz", 4, BASE_TS + 100)),
              CONTROL_COMMIT, ("zstd", _fixture_records("zs", 3, BASE_TS + 200)), CONTROL_ABORT,
              ("gzip", _fixture_records("gz", 2, BASE_TS + 300))]
    expected = []
    next_offset = 0
    for item in layout:
        if isinstance(item, int):
            assert append_to_log(broker, topic, control_batch(item, timestamp=BASE_TS + 250)) == next_offset
            next_offset += 1
            continue
        codec, records = item
        assert produce_raw(bootstrap, topic, build(records, codec=codec)) == next_offset
        expected += [(next_offset + i, k, v, h, ts) for i, (k, v, h, ts) in enumerate(records)]
        next_offset += len(records)
    assert next_offset == 16
    with _consumer(broker, group, mode) as consumer:
        consumer.subscribe([topic])
        records = _poll_all(consumer, len(expected), mode)
        _check_delivered(records, topic, expected)
        assert {9, 13}.isdisjoint(r.offset for r in records)
        # the markers were GAP-acknowledged: the start offset moves past them, nothing in flight
        _settle(broker, consumer, group, topic, 16, mode)


def test_a_trailing_control_batch_alone_is_acknowledged_as_gap(broker, create_topic):
    """A marker alone after the records reaches no application and the start offset moves past it
    (quafka's broker archives markers when it reaches them; against Kafka, which hands them out,
    the client acknowledges their offsets as GAP)."""
    topic, group = _setup(broker, create_topic, "trailing-marker")
    produce_raw(broker.bootstrap_servers, topic, build(_fixture_records("a", 2, BASE_TS), codec="snappy"))
    with _consumer(broker, group) as consumer:
        consumer.subscribe([topic])
        first = _poll_all(consumer, 2, "implicit")
        assert [r.offset for r in first] == [0, 1]
        assert append_to_log(broker, topic, control_batch(CONTROL_COMMIT, timestamp=BASE_TS)) == 2
        _settle(broker, consumer, group, topic, 3, "implicit")


# ----------------------------------------------------------------------------- deserialization failures

def _failing_on(bad: set[bytes], enabled: dict):
    def deserialize(data: bytes | None):
        if enabled["on"] and data in bad:
            raise ValueError(f"cannot deserialize {data!r}")
        return data.decode()

    return deserialize


def _check_names(exc: RecordDeserializationException, topic: str, partition: int, offset: int) -> None:
    assert (exc.topic, exc.partition, exc.offset) == (topic, partition, offset)
    message = str(exc)
    assert topic in message, message
    assert (f"{topic}-{partition}" in message or re.search(rf"partition\D{{0,3}}{partition}\b", message)), message
    assert re.search(rf"offset\D{{0,3}}{offset}\b", message), message


@pytest.mark.parametrize("mode", MODES)
def test_a_record_failing_deserialization_raises_and_comes_back_released(broker, create_topic, mode):
    topic, group = _setup(broker, create_topic, f"deser-release-{mode}")
    produce_batch(broker.bootstrap_servers, topic, 5, tag="v")
    failing = {"on": True}
    with _consumer(broker, group, mode, value_deserializer=_failing_on({b"v2"}, failing)) as consumer:
        consumer.subscribe([topic])
        before = _next_poll(consumer)
        assert [(r.offset, r.value, r.delivery_count) for r in before] == [(0, "v0", 1), (1, "v1", 1)]
        _ack_all(consumer, before, mode)
        with pytest.raises(RecordDeserializationException) as info:
            consumer.poll(POLL_S)
        _check_names(info.value, topic, 0, 2)
        failing["on"] = False
        after = _next_poll(consumer)
        assert [(r.offset, r.value, r.delivery_count) for r in after] == [(3, "v3", 1), (4, "v4", 1)]
        _ack_all(consumer, after, mode)
        again = _next_poll(consumer)  # the bad record was RELEASEd: delivered a second time
        assert [(r.offset, r.value, r.delivery_count) for r in again] == [(2, "v2", 2)]
        _ack_all(consumer, again, mode)
        _settle(broker, consumer, group, topic, 5, mode)


@pytest.mark.parametrize("mode", MODES)
def test_a_record_failing_deserialization_rejected_by_the_application_is_never_seen_again(broker, create_topic,
                                                                                         mode):
    topic, group = _setup(broker, create_topic, f"deser-reject-{mode}")
    produce_batch(broker.bootstrap_servers, topic, 5, tag="v")
    with _consumer(broker, group, mode, value_deserializer=_failing_on({b"v2"}, {"on": True})) as consumer:
        consumer.subscribe([topic])
        before = _next_poll(consumer)
        assert [r.offset for r in before] == [0, 1]
        _ack_all(consumer, before, mode)
        with pytest.raises(RecordDeserializationException) as info:
            consumer.poll(POLL_S)
        _check_names(info.value, topic, 0, 2)
        consumer.acknowledge(topic, 0, 2, AcknowledgeType.REJECT)  # allowed in implicit mode too
        after = _next_poll(consumer)
        assert [(r.offset, r.value, r.delivery_count) for r in after] == [(3, "v3", 1), (4, "v4", 1)]
        _ack_all(consumer, after, mode)
        produce_batch(broker.bootstrap_servers, topic, 1, tag="s")  # offset 5: the next thing to arrive
        sentinel = _next_poll(consumer)
        assert [(r.offset, r.value, r.delivery_count) for r in sentinel] == [(5, "s0", 1)]
        _ack_all(consumer, sentinel, mode)
        _settle(broker, consumer, group, topic, 6, mode)


@pytest.mark.parametrize("mode", MODES)
def test_a_record_that_always_fails_deserialization_is_archived_at_the_delivery_limit(broker, create_topic, mode):
    topic, group = _setup(broker, create_topic, f"deser-limit-{mode}", **{"share.delivery.count.limit": "2"})
    produce_batch(broker.bootstrap_servers, topic, 3, tag="v")
    events: list[tuple] = []
    sentinel_sent = False
    with _consumer(broker, group, mode, value_deserializer=_failing_on({b"v1"}, {"on": True})) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while not any(e == ("record", 3, 1) for e in events):
            assert time.monotonic() < deadline, events
            try:
                records = consumer.poll(POLL_S)
            except RecordDeserializationException as exc:
                _check_names(exc, topic, 0, 1)
                events.append(("failed", exc.offset))
                continue
            _ack_all(consumer, records, mode)
            events += [("record", r.offset, r.delivery_count) for r in records]
            if not sentinel_sent and events.count(("failed", 1)) == 2:
                # delivery 2 of 2 failed: offset 1 is archived, the next thing to arrive is offset 3
                produce_batch(broker.bootstrap_servers, topic, 1, tag="s")
                sentinel_sent = True
        assert events == [("record", 0, 1), ("failed", 1), ("record", 2, 1), ("failed", 1), ("record", 3, 1)]
        _settle(broker, consumer, group, topic, 4, mode)


# ----------------------------------------------------------------------------- CRC

def _layout_with_broken_crc(broker, topic: str) -> list[tuple]:
    """[0..2] produced, [3..5] with a broken CRC (payload intact) appended to the log, [6..7]
    produced. Returns (offset, key, value, headers, timestamp) of all eight records."""
    good_a = _fixture_records("a", 3, BASE_TS)
    corrupt = _fixture_records("c", 3, BASE_TS + 100)
    good_b = _fixture_records("b", 2, BASE_TS + 200)
    assert produce_raw(broker.bootstrap_servers, topic, build(good_a, codec="lz4")) == 0
    assert append_to_log(broker, topic, break_crc(build(corrupt, codec="snappy"))) == 3
    assert produce_raw(broker.bootstrap_servers, topic, build(good_b)) == 6
    return [(o, k, v, h, ts) for o, (k, v, h, ts) in enumerate(good_a + corrupt + good_b)]


@pytest.mark.parametrize("mode", MODES)
def test_a_batch_failing_its_crc_raises_corrupt_record_and_its_records_are_rejected(broker, create_topic, mode):
    topic, group = _setup(broker, create_topic, f"crc-{mode}")
    expected = _layout_with_broken_crc(broker, topic)
    with _consumer(broker, group, mode) as consumer:
        consumer.subscribe([topic])
        before = _next_poll(consumer)
        _check_delivered(before, topic, expected[:3])
        _ack_all(consumer, before, mode)
        with pytest.raises(CorruptRecordException) as info:
            consumer.poll(POLL_S)
        assert info.value.code == ErrorCode.corrupt_message and not info.value.retriable
        after = _next_poll(consumer)
        _check_delivered(after, topic, expected[6:])
        _ack_all(consumer, after, mode)
        produce_batch(broker.bootstrap_servers, topic, 1, tag="s")  # offset 8: the next thing to arrive
        sentinel = _next_poll(consumer)
        assert [(r.offset, r.value, r.delivery_count) for r in sentinel] == [(8, b"s0", 1)]
        _ack_all(consumer, sentinel, mode)
        _settle(broker, consumer, group, topic, 9, mode)


def test_with_check_crcs_false_a_batch_with_a_broken_crc_is_delivered(broker, create_topic):
    topic, group = _setup(broker, create_topic, "crc-unchecked")
    expected = _layout_with_broken_crc(broker, topic)
    with _consumer(broker, group, "explicit", **{"check.crcs": False}) as consumer:
        consumer.subscribe([topic])
        records = _poll_all(consumer, 8, "explicit")
        _check_delivered(records, topic, expected)
        _settle(broker, consumer, group, topic, 8, "explicit")
