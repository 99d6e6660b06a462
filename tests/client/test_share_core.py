"""The share consumer's sans-I/O parts without sockets: membership transitions (every state and
input), share-session epochs, the acknowledgement book, ack batches, and acquired-record decoding."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from quafka.client._share_acks import GAP, AcknowledgeType, Acknowledgements, ack_batches
from quafka.client._share_fetch import RECORD_COLUMNS, ShareFetchBuffer, decode_acquired, raw_acquired
from quafka.client._share_membership import INPUTS, TRANSITIONS, MemberState, ShareMembership
from quafka.client._share_session import ShareSession
from quafka.client.errors import CorruptRecordException, IllegalStateException
from quafka.client.records import Record, TopicPartition
from quafka.protocol import record_batch as rb
from quafka.protocol.errors import ErrorCode
from quafka.protocol.share_session_epoch import INT32_MAX, next_epoch

A = AcknowledgeType
TP = TopicPartition("t", 0)
TOPIC_ID = uuid.UUID(int=7)


# ----------------------------------------------------------------------------- membership


def _member(state: MemberState) -> ShareMembership:
    m = ShareMembership("g", "m-1", None, retry_backoff_ms=100, retry_backoff_max_ms=1000)
    if state is MemberState.UNSUBSCRIBED:
        return m
    m.subscribe(frozenset({"t"}), 0)
    if state is MemberState.JOINING:
        return m
    m.on_response(ErrorCode.none, None, 1, 5000, {TOPIC_ID: frozenset({0})}, 0)
    if state is MemberState.STABLE:
        return m
    if state is MemberState.LEAVING:
        m.unsubscribe(0)
        return m
    m.on_response(ErrorCode.group_max_size_reached, "full", -1, 0, None, 0)
    assert state is MemberState.FATAL
    return m


def _apply(m: ShareMembership, event: str) -> None:
    if event == "subscribe":
        m.subscribe(frozenset({"t", "u"}), 10)
    elif event == "unsubscribe":
        m.unsubscribe(10)
    elif event == "ok":
        m.on_response(ErrorCode.none, None, 3, 5000, None, 10)
    elif event == "left":
        m.on_response(ErrorCode.none, None, -1, 0, None, 10)
    elif event == "fenced":
        m.on_response(ErrorCode.fenced_member_epoch, None, -1, 0, None, 10)
    elif event == "coordinator":
        m.on_response(ErrorCode.not_coordinator, None, -1, 0, None, 10)
    elif event == "retriable":
        m.on_failure(10)
    elif event == "fatal":
        m.on_response(ErrorCode.group_authorization_failed, None, -1, 0, None, 10)


@pytest.mark.parametrize("state", list(MemberState))
@pytest.mark.parametrize("event", INPUTS)
def test_every_membership_state_and_input_follows_the_table(state, event):
    m = _member(state)
    assert m.state is state
    if event == "left" and state is not MemberState.LEAVING:
        assert (state, event) not in TRANSITIONS  # "left" is what any answer means while LEAVING
        return
    if state is MemberState.LEAVING and event not in ("subscribe", "unsubscribe"):
        expected = TRANSITIONS[(state, "left")]  # the leave heartbeat is sent once, whatever the answer
    else:
        expected = TRANSITIONS.get((state, event), state)
    _apply(m, event)
    assert m.state is expected


def test_join_sends_the_subscription_then_heartbeats_send_none_until_it_changes():
    m = _member(MemberState.JOINING)
    first = m.heartbeat_values()
    assert first["member_epoch"] == 0 and first["subscribed_topic_names"] == ("t",)
    assert m.heartbeat_due(0)
    changed = m.on_response(ErrorCode.none, None, 4, 2000, {TOPIC_ID: frozenset({0, 1})}, 100)
    assert changed and m.assignment == {TOPIC_ID: frozenset({0, 1})} and m.member_epoch == 4
    assert m.heartbeat_values()["subscribed_topic_names"] is None
    assert not m.heartbeat_due(2099) and m.heartbeat_due(2100)
    assert not m.on_response(ErrorCode.none, None, 4, 2000, None, 2100)  # null assignment: unchanged
    m.subscribe(frozenset({"t", "u"}), 2200)
    assert m.heartbeat_due(2200) and m.heartbeat_values()["subscribed_topic_names"] == ("t", "u")


def test_fencing_drops_the_assignment_and_rejoins_at_epoch_zero_with_the_same_member_id():
    m = _member(MemberState.STABLE)
    assert m.on_response(ErrorCode.unknown_member_id, None, -1, 0, None, 50)
    values = m.heartbeat_values()
    assert (m.state, m.assignment, values["member_epoch"], values["member_id"]) == (MemberState.JOINING, {}, 0, "m-1")
    assert values["subscribed_topic_names"] == ("t",)


def test_retries_back_off_exponentially_up_to_the_maximum():
    m = _member(MemberState.STABLE)
    dues = []
    for _ in range(6):
        m.on_failure(0)
        dues.append(m.next_due_ms())
    assert dues == [100, 200, 400, 800, 1000, 1000]


def test_leaving_sends_epoch_minus_one_without_the_subscription():
    m = _member(MemberState.LEAVING)
    values = m.heartbeat_values()
    assert values["member_epoch"] == -1 and values["subscribed_topic_names"] is None and m.heartbeat_due(0)


def test_fatal_errors_are_kept_for_the_application():
    m = _member(MemberState.FATAL)
    assert m.fatal_error == (ErrorCode.group_max_size_reached, "full") and not m.heartbeat_due(10**9)


# ----------------------------------------------------------------------------- share sessions


def test_session_epochs_open_increment_wrap_reset_and_close():
    s = ShareSession(1)
    wanted = {(TOPIC_ID, 0), (TOPIC_ID, 1)}
    first = s.fetch_values("g", "m", wanted, {}, max_wait_ms=500, min_bytes=1, max_bytes=100, max_records=10,
                           batch_size=10, acquire_mode=0)
    assert first["share_session_epoch"] == 0 and len(first["topics"][0]["partitions"]) == 2
    with pytest.raises(ValueError):
        s.fetch_values("g", "m", wanted, {(TOPIC_ID, 0): [(0, 1, (1,))]}, max_wait_ms=0, min_bytes=0, max_bytes=0,
                       max_records=0, batch_size=0, acquire_mode=0)
    s.on_response(ErrorCode.none)
    assert s.epoch == 1
    second = s.fetch_values("g", "m", {(TOPIC_ID, 1)}, {(TOPIC_ID, 1): [(5, 6, (1,))]}, max_wait_ms=500,
                            min_bytes=1, max_bytes=100, max_records=10, batch_size=10, acquire_mode=0)
    assert second["share_session_epoch"] == 1
    assert second["forgotten_topics_data"] == [{"topic_id": TOPIC_ID, "partitions": [0]}]
    assert second["topics"][0]["partitions"][0]["acknowledgement_batches"] == [
        {"first_offset": 5, "last_offset": 6, "acknowledge_types": (1,)}]
    s.on_response(ErrorCode.none)
    assert s.partitions == {(TOPIC_ID, 1)} and s.epoch == 2
    renew = s.acknowledge_values("g", "m", {(TOPIC_ID, 1): [(5, 5, (4,))]}, is_renew=True)
    assert renew["is_renew_ack"] and renew["share_session_epoch"] == 2
    s.on_response(ErrorCode.invalid_share_session_epoch)
    assert (s.epoch, s.partitions) == (0, set())
    with pytest.raises(ValueError):
        s.acknowledge_values("g", "m", {})
    assert next_epoch(INT32_MAX) == 1
    s.epoch = 9
    closing = s.acknowledge_values("g", "m", {}, closing=True)
    assert closing["share_session_epoch"] == -1
    s.on_response(ErrorCode.none)
    assert s.epoch == 0


def test_a_renew_only_fetch_asks_for_no_records():
    s = ShareSession(1)
    s.on_response(ErrorCode.none)
    v = s.fetch_values("g", "m", set(), {(TOPIC_ID, 0): [(1, 1, (4,))]}, max_wait_ms=500, min_bytes=1, max_bytes=9,
                       max_records=5, batch_size=5, acquire_mode=1, is_renew=True)
    assert (v["max_bytes"], v["min_bytes"], v["max_records"], v["max_wait"]) == (0, 0, 0, 0)  # max_wait in ms


# ----------------------------------------------------------------------------- acknowledgements


def _record(offset: int, tp: TopicPartition = TP, count: int = 1) -> Record:
    return Record(tp.topic, tp.partition, offset, 0, 0, None, b"v", [], 0, count)


def test_ack_batches_merge_consecutive_offsets_and_send_one_type_when_they_agree():
    assert ack_batches({3: 1, 1: 1, 2: 1, 7: 3}) == [(1, 3, (1,)), (7, 7, (3,))]
    assert ack_batches({1: 1, 2: 2, 3: 1}) == [(1, 3, (1, 2, 1))]
    assert ack_batches({}) == []


def test_explicit_mode_tracks_unacknowledged_records_and_refuses_strangers():
    book = Acknowledgements(explicit=True)
    book.on_delivered([_record(0), _record(1), _record(2)])
    book.acknowledge(TP, 0, A.ACCEPT, by_record=True)
    assert book.unacknowledged() == [(TP, 1), (TP, 2)]
    with pytest.raises(IllegalStateException, match="offset 9"):
        book.acknowledge(TP, 9, A.ACCEPT, by_record=True)
    book.acknowledge(TP, 1, A.REJECT, by_record=True)
    book.acknowledge(TP, 2, A.RELEASE, by_record=True)
    book.acknowledge(TP, 2, A.ACCEPT, by_record=True)  # the last type before sending wins
    assert book.take_pending() == {TP: [(0, 0, A.ACCEPT), (1, 1, A.REJECT), (2, 2, A.ACCEPT)]}
    assert book.unacknowledged() == [] and book.delivered == {}
    with pytest.raises(IllegalStateException):
        book.acknowledge(TP, 0, A.ACCEPT, by_record=True)  # already committed


def test_implicit_mode_accepts_delivered_records_and_refuses_acknowledge():
    book = Acknowledgements(explicit=False)
    book.on_delivered([_record(5), _record(6)])
    with pytest.raises(IllegalStateException, match="explicit"):
        book.acknowledge(TP, 5, A.ACCEPT, by_record=True)
    book.accept_delivered()
    assert book.take_pending() == {TP: [(5, 6, A.ACCEPT)]}


def test_failed_records_are_released_unless_acknowledged_by_offset():
    book = Acknowledgements(explicit=False)
    book.on_failed(TP, 4)
    book.on_failed(TopicPartition("t", 1), 8)
    book.acknowledge(TP, 4, A.REJECT, by_record=False)
    with pytest.raises(IllegalStateException, match="renewed"):
        book.acknowledge(TP, 4, A.RENEW, by_record=False)
    book.settle_failed()
    assert book.take_pending() == {TP: [(4, 4, A.REJECT)], TopicPartition("t", 1): [(8, 8, A.RELEASE)]}


def test_renewed_records_stay_delivered_and_come_back_unless_acknowledged_meanwhile():
    book = Acknowledgements(explicit=True)
    r0, r1 = _record(0), _record(1)
    book.on_delivered([r0, r1])
    book.acknowledge(TP, 0, A.RENEW, by_record=True)
    book.acknowledge(TP, 1, A.RENEW, by_record=True)
    assert book.has_pending(renew_only=True)
    sent = book.take_pending()
    assert sent == {TP: [(0, 1, A.RENEW)]} and [(f, l) for f, l, _ in book.delivered[TP]] == [(0, 1)]
    book.acknowledge(TP, 1, A.ACCEPT, by_record=True)  # acknowledged while the renewal was out
    book.on_renewed(TP, sent[TP])
    assert book.take_renewed() == [r0] and book.unacknowledged() == [(TP, 0)]
    book.on_renew_failed(TP, [(0, 0, A.RENEW)])
    assert book.unacknowledged() == []


def test_drop_partitions_forgets_their_delivered_records():
    book = Acknowledgements(explicit=True)
    other = TopicPartition("t", 1)
    book.on_delivered([_record(0), _record(0, other)])
    book.drop_partitions({other})
    assert book.unacknowledged() == [(TP, 0)]


# ----------------------------------------------------------------------------- decoding acquired records


def _acq(first, last, count=1):
    return SimpleNamespace(first_offset=first, last_offset=last, delivery_count=count)


def _batch(base: int, n: int, **kw) -> bytes:
    data = bytearray(rb.build_batch([(None, f"v{base + i}".encode()) for i in range(n)], base_timestamp=1000, **kw))
    rb.stamp_base_offset(data, 0, base)
    return bytes(data)


def _control(base: int) -> bytes:
    data = bytearray(_batch(base, 1))
    attributes = int.from_bytes(data[21:23], "big") | rb.CONTROL_FLAG | rb.TRANSACTIONAL_FLAG
    data[21:23] = attributes.to_bytes(2, "big")
    import crc32c
    data[17:21] = crc32c.crc32c(bytes(data[21:])).to_bytes(4, "big")
    return bytes(data)


def test_only_acquired_offsets_become_records_with_their_delivery_counts():
    data = _batch(0, 10)
    out = decode_acquired(TP, data, [_acq(2, 4, 1), _acq(7, 8, 3)], check_crcs=True)
    assert [(r.offset, r.delivery_count, r.value) for r in out.items] == [
        (2, 1, b"v2"), (3, 1, b"v3"), (4, 1, b"v4"), (7, 3, b"v7"), (8, 3, b"v8")]
    assert out.acks == {}


def test_control_batches_are_gaps_and_uncovered_offsets_are_released():
    data = _batch(0, 3) + _control(3) + _batch(4, 2)
    out = decode_acquired(TP, data, [_acq(0, 8)], check_crcs=True)
    assert [r.offset for r in out.items] == [0, 1, 2, 4, 5]
    assert out.acks == {3: GAP, 6: A.RELEASE, 7: A.RELEASE, 8: A.RELEASE}


def test_a_corrupt_batch_is_rejected_and_raised_in_its_place():
    good, bad = _batch(0, 2), bytearray(_batch(2, 2))
    bad[17] ^= 0xFF  # the stored CRC no longer matches
    out = decode_acquired(TP, good + bytes(bad) + _batch(4, 1), [_acq(0, 4)], check_crcs=True)
    assert [type(i).__name__ for i in out.items] == ["Record", "Record", "CorruptRecordException", "Record"]
    assert out.acks == {2: A.REJECT, 3: A.REJECT}
    unchecked = decode_acquired(TP, good + bytes(bad), [_acq(0, 3)], check_crcs=False)
    assert [r.offset for r in unchecked.items] == [0, 1, 2, 3] and unchecked.acks == {}


def test_buffer_hands_out_records_then_raises_an_error_that_comes_first():
    buffer = ShareFetchBuffer()
    bad = bytearray(_batch(2, 1))
    bad[17] ^= 0xFF
    buffer.add(decode_acquired(TP, _batch(0, 2) + bytes(bad) + _batch(3, 1), [_acq(0, 3)], check_crcs=True))
    records, error = buffer.take(None)
    assert [r.offset for r in records] == [0, 1] and error is None
    records, error = buffer.take(None)
    assert records == [] and isinstance(error, CorruptRecordException)
    buffer.push_front([_record(9)])
    records, error = buffer.take(1)
    assert [r.offset for r in records] == [9]
    assert buffer.drop({TP}) == {TP: [3]} and not buffer


# ----------------------------------------------------------------------------- configuration


def test_kafka_socket_and_metric_keys_are_accepted_and_an_unknown_security_protocol_is_not():
    from quafka.client import AsyncShareConsumer, ConfigException

    base = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}
    consumer = AsyncShareConsumer(dict(base, **{"receive.buffer.bytes": "65536", "security.protocol": "plaintext",
                                                "client.dns.lookup": "use_all_dns_ips",
                                                "metrics.recording.level": "DEBUG"}))
    assert consumer.config["receive.buffer.bytes"] == 65536
    with pytest.raises(ConfigException) as info:
        AsyncShareConsumer(dict(base, **{"security.protocol": "KERBEROS"}))
    assert info.value.key == "security.protocol" and "SASL_SSL" in str(info.value)


def test_a_batch_the_response_carries_twice_gives_its_records_once():
    data = _batch(0, 5) + _batch(0, 5) + _batch(5, 3)  # a broker that sent the first batch twice
    out = decode_acquired(TP, data, [_acq(1, 1, 2), _acq(3, 3, 2), _acq(6, 6, 1)], check_crcs=True)
    assert [(r.offset, r.delivery_count) for r in out.items] == [(1, 2), (3, 2), (6, 1)] and out.acks == {}
    overlapping = _batch(0, 5) + _batch(3, 4)  # a later batch that starts inside an earlier one
    out = decode_acquired(TP, overlapping, [_acq(0, 6)], check_crcs=True)
    assert [r.offset for r in out.items] == [0, 1, 2, 3, 4, 5, 6] and out.acks == {}


# ----------------------------------------------------------------------------- undecoded (poll_batches)


def test_raw_acquired_keeps_covered_ranges_and_releases_the_rest():
    data = _batch(0, 3) + _control(3) + _batch(4, 2)  # offsets 0..5
    item, releases = raw_acquired(TP, data, [_acq(1, 4, 2), _acq(5, 8, 1)])
    assert item.acquired == [(1, 4, 2), (5, 5, 1)] and item.count == 5
    assert releases == {6: A.RELEASE, 7: A.RELEASE, 8: A.RELEASE}  # no batch carried them
    assert [(r.offset, r.delivery_count) for r in item.records()] == [(1, 2), (2, 2), (4, 2), (5, 1)]  # 3: control
    assert raw_acquired(TP, b"", [_acq(0, 1)]) == (None, {0: A.RELEASE, 1: A.RELEASE})
    assert raw_acquired(TP, data, []) == (None, {})


@pytest.mark.parametrize("max_count", [1, 3, 4, 7, 100])
def test_split_cuts_at_batch_boundaries_and_covers_every_offset_once(max_count):
    data = _batch(0, 4) + _batch(4, 4) + _batch(8, 4) + _batch(0, 4) + _batch(12, 4)  # one batch sent twice
    item, _ = raw_acquired(TP, data, [_acq(1, 9, 1), _acq(10, 15, 2)])
    pieces = item.split(max_count)
    offsets = [o for p in pieces for o in p.offsets()]
    assert offsets == item.offsets() == list(range(1, 16))
    records = [(r.offset, r.delivery_count, r.value) for p in pieces for r in p.records()]
    assert records == [(r.offset, r.delivery_count, r.value) for r in item.records()]
    assert all(p.data for p in pieces) and (len(pieces) == 1) == (max_count >= 15)


def test_split_groups_whole_batches_until_the_count_is_reached():
    data = _batch(0, 4) + _batch(4, 4) + _batch(8, 4) + _batch(0, 4) + _batch(12, 4)
    item, _ = raw_acquired(TP, data, [_acq(1, 9, 1), _acq(10, 15, 2)])
    # 1..3 is short of 4, so the second batch joins it; the repeated batch 0..3 adds nothing new
    assert [p.acquired for p in item.split(4)] == [[(1, 7, 1)], [(8, 9, 1), (10, 11, 2)], [(12, 15, 2)]]


def test_split_shares_a_big_batch_among_pieces():
    item, _ = raw_acquired(TP, _batch(0, 10) + _batch(10, 2), [_acq(1, 11, 1)])
    pieces = item.split(3)
    assert [p.acquired for p in pieces] == [[(1, 3, 1)], [(4, 6, 1)], [(7, 9, 1)], [(10, 11, 1)]]
    assert [r.offset for p in pieces for r in p.records()] == list(range(1, 12))


def test_acknowledge_range_needs_delivered_offsets_and_explicit_mode():
    book = Acknowledgements(explicit=True)
    book.on_delivered_ranges(TP, [(0, 4, 1), (7, 8, 2)])
    assert len(book.unacknowledged()) == 7
    with pytest.raises(IllegalStateException, match="offset 5"):
        book.acknowledge_range(TP, 3, 7, A.ACCEPT)  # 5 and 6 were never delivered
    book.acknowledge_range(TP, 0, 4, A.ACCEPT)
    book.acknowledge_range(TP, 7, 8, A.RENEW)
    assert book.unacknowledged() == []
    assert book.take_pending() == {TP: [(0, 4, A.ACCEPT), (7, 8, A.RENEW)]}
    book.on_renewed(TP, [(7, 8, A.RENEW)])
    assert book.take_renewed() == []  # undecoded: nothing to hand out again
    book.acknowledge_range(TP, 7, 8, A.ACCEPT)  # renewed records stay delivered
    with pytest.raises(IllegalStateException, match="explicit"):
        Acknowledgements(explicit=False).acknowledge_range(TP, 0, 0, A.ACCEPT)


@pytest.mark.parametrize("data, acquired", [
    (_batch(0, 4) + _batch(4, 4), [(0, 7, 1)]),  # whole batches in one range: the fast path
    (_batch(0, 4) + _batch(4, 4), [(0, 3, 1), (4, 7, 3)]),  # a range per batch
    (_batch(0, 3) + _control(3) + _batch(4, 2), [(0, 5, 1)]),  # a control batch
    (_batch(0, 8), [(2, 4, 1), (6, 6, 2)]),  # partly acquired batch
    (_batch(0, 4) + _batch(0, 4) + _batch(4, 2), [(0, 5, 1)]),  # a repeated batch
    (_batch(0, 4) + _batch(4, 4) + _batch(8, 4), [(0, 9, 1)]),  # whole batches, then a cut one (record_limit)
    (_batch(0, 4) + _batch(4, 4) + _batch(4, 4) + _batch(8, 2), [(1, 9, 2)]),  # cut, whole, repeated, whole
])
def test_columns_are_the_records_transposed(data, acquired):
    item, _ = raw_acquired(TP, data, [_acq(*a) for a in acquired])
    records = item.records()
    cols = item.columns()
    def row(values):  # headers: a list in a Record, a sequence of (key, value) in the columns
        return tuple(list(v) if name == "headers" else v for name, v in zip(RECORD_COLUMNS, values))

    assert [row(getattr(r, name) for name in RECORD_COLUMNS) for r in records] == [row(v) for v in zip(*cols.values())]
    assert list(cols) == list(RECORD_COLUMNS)


def test_columns_raise_for_a_corrupt_batch():
    bad = bytearray(_batch(2, 2))
    bad[17] ^= 0xFF
    item, _ = raw_acquired(TP, _batch(0, 2) + bytes(bad), [_acq(0, 3)])
    with pytest.raises(CorruptRecordException, match="CRC"):
        item.columns()
    assert item.columns(check_crcs=False)["offset"] == [0, 1, 2, 3]


# ----------------------------------------------------------------------------- the batch cache

def _compacted(base: int, n: int, rng) -> bytes:
    """A batch of offsets base..base+n-1 from which compaction removed some records (offset deltas
    with holes; the last offset delta still names the batch's end)."""
    import struct

    import crc32c

    from quafka.protocol.varint import write_varlong

    kept = sorted({0, n - 1} | {i for i in range(n) if rng.random() < 0.6})
    body = bytearray()
    for delta in kept:
        record = bytearray([0])
        for number in (0, delta):
            write_varlong(record, number)
        write_varlong(record, -1)  # no key
        value = f"v{base + delta}".encode()
        write_varlong(record, len(value))
        record += value
        write_varlong(record, 0)  # no headers
        write_varlong(body, len(record))
        body += record
    after_crc = struct.pack(">hiqqqhii", 0, n - 1, 1000, 1000, -1, -1, -1, len(kept)) + bytes(body)
    return struct.pack(">qiibI", base, 9 + len(after_crc), -1, 2, crc32c.crc32c(after_crc)) + after_crc


def _random_response(rng) -> tuple[bytes, list]:
    """Batches back to back (sometimes a repeated or overlapping one, a control batch), and random
    acquired ranges with delivery counts inside and around them."""
    parts, base = [], rng.randrange(0, 50)
    start = base
    for _ in range(rng.randrange(1, 5)):
        kind = rng.random()
        if kind < 0.1:
            parts.append(_control(base))
            base += 1
        elif kind < 0.2 and parts:
            parts.append(parts[-1])  # the broker sent a batch twice
        elif kind < 0.45:
            n = rng.randrange(2, 40)
            parts.append(_compacted(base, n, rng))
            base += n
        else:
            n = rng.randrange(1, 40)
            parts.append(_batch(base, n))
            base += n
    acquired, offset = [], start - rng.randrange(0, 3)
    while offset < base + 2:
        offset += rng.randrange(0, 6)
        last = offset + rng.randrange(0, 8)
        acquired.append(_acq(offset, last, rng.randrange(1, 5)))
        offset = last + 1
    return b"".join(parts), acquired


def test_the_batch_cache_decodes_exactly_as_without_it():
    """A partly acquired batch is decoded once and then sliced: the result is the same as decoding
    it afresh, cold and warm, for random responses (each failure names its seed)."""
    import random

    from quafka.client._share_fetch import BatchCache

    for seed in range(300):
        rng = random.Random(seed)
        cache = BatchCache(max_batches=3)
        for _ in range(4):  # the same batches come back with other acquired ranges, as in record_limit mode
            data, acquired = _random_response(rng) if _ == 0 else (data, _random_response(rng)[1])
            plain = decode_acquired(TP, data, acquired, check_crcs=True)
            cached = decode_acquired(TP, data, acquired, check_crcs=True, cache=cache)
            assert cached == plain, f"seed {seed}"


def test_the_batch_cache_is_bounded_and_keyed_on_the_batch():
    from quafka.client._share_fetch import BatchCache

    cache = BatchCache(max_batches=2)
    calls = []
    for key in ("a", "b", "a", "c", "b"):
        cache.records(key, lambda key=key: calls.append(key) or [])
    assert calls == ["a", "b", "c", "b"]  # "a" was used again before "c" came, so "b" was the oldest
