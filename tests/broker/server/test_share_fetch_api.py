"""Acceptance tests for the share-group fetch path: ShareFetch (78) and ShareAcknowledge (79) at v1
and v2, driven by the kio test client (tests/support/share_client.py) against an embedded broker.

What Kafka does is in /work/shared/docs/kafka-reference.md: §2.3-§2.5 (the RPCs, ack-batch rules,
session epochs), §4.1 (share-partition behaviour), §1.5 (group configs).

Criterion 8 -- malformed requests get Kafka's error codes and change nothing. Each case sets up a
member holding five acquired records (one producer batch, delivery count 1), sends the malformed
request and then checks, white-box, that every record is still ACQUIRED by the member with the same
delivery count and lock deadline and that the broker's share sessions are as before; and, black-box,
that the next correctly-numbered request releases the records (they come straight back with delivery
count 2, which shows they were still held at count 1) and that they can then be accepted.

For ack-batch shape errors the error is on the partition (ShareAcknowledge ErrorCode, ShareFetch
AcknowledgeErrorCode) and the request as a whole succeeds, so -- as in Kafka, where KafkaApis updates
the share session before it validates the batches -- the session epoch moves on by exactly one, like
after any successful request; for top-level errors the epoch does not move at all.

Criterion 9 -- v2 behaviour: RENEW, record_limit vs batch_optimized, delivery-count throttling, the
share-session cap, DeleteRecords past in-flight records, by_duration resets; plus release on
disconnect and parked (long-poll) ShareFetches completed by a produce or by a release.

Where the reference's wording leaves room, the tests follow Kafka's SharePartition (4.2+ trunk):
throttling starts once a record's delivery count is already >= max(2, ceil(limit/2)) (so with limit 5
a 16-record batch comes back 16, 16, 16, 8, 1 -- ShareConsumerTest.testFetchWithThrottledDelivery);
an acknowledgement batch wholly below the SPSO is skipped with NONE; an acknowledgement reaching past
the acquired records is INVALID_REQUEST.

No wall-clock assertions: waiting (for a lock to expire, a disconnect to be processed, a parked
fetch to be parked) is polling with a deadline.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from dataclasses import dataclass

import pytest
from kio.schema.errors import ErrorCode

from quafka.broker.core.record_state import RecordState
from quafka.broker.server.clock import monotonic_ms, wall_clock_ms
from support import produce_batch, set_group_configs, wait_until
from support.share_client import (
    ACCEPT,
    RELEASE,
    RENEW,
    ShareClient,
    acquired_offsets,
    create_topic,
    new_member_id,
    partition_errors,
    records_in,
)

pytestmark = pytest.mark.timeout(60)

GROUP = "share-fetch-api"
TOPIC = "sf-topic"
HELD = 5  # records the member holds in the criterion-8 set-ups (offsets 0..4, one producer batch)
LOCK_CONFIG = {"group.share.min.record.lock.duration.ms": 1000, "group.share.record.lock.duration.ms": 1000}

ACQUIRED = RecordState.ACQUIRED
AVAILABLE = RecordState.AVAILABLE

NONE = ErrorCode.none
INVALID_REQUEST = ErrorCode.invalid_request  # 42
INVALID_RECORD_STATE = ErrorCode.invalid_record_state  # 121
SHARE_SESSION_NOT_FOUND = ErrorCode.share_session_not_found  # 122
INVALID_SHARE_SESSION_EPOCH = ErrorCode.invalid_share_session_epoch  # 123
SHARE_SESSION_LIMIT_REACHED = ErrorCode.share_session_limit_reached  # 133
UNKNOWN_MEMBER_ID = ErrorCode.unknown_member_id  # 25
GROUP_ID_NOT_FOUND = ErrorCode.group_id_not_found  # 69


# ----------------------------------------------------------------------------- helpers

def share_state(broker, group: str, topic_id: uuid.UUID, partition: int = 0):
    """(SPSO, SPEO + 1, {offset: (state, delivery count, holder, lock deadline)}) of a share partition,
    read on the broker's loop thread."""
    def read():
        sp = broker.server.share_partitions.contexts[(group, topic_id, partition)].share_partition
        offsets = {}
        for run in sp.runs:
            for o in range(run.first, run.last + 1):
                offsets[o] = (run.state, run.delivery_count, run.member_id, run.deadline_ms)
        return sp.start_offset, sp.next_offset, offsets

    return broker.call(read)


def record_state(broker, group: str, topic_id: uuid.UUID, offset: int, partition: int = 0):
    """(state, delivery count, holder) of one offset, None outside the in-flight window."""
    return broker.call(lambda: broker.server.share_partitions.contexts[(group, topic_id, partition)].share_partition.record(offset))


def sessions(broker) -> dict[tuple[str, str], int]:
    """{(group, member): the epoch its next request must carry} for every share session on the broker."""
    return broker.call(lambda: {k: s.epoch for k, s in broker.server.share_sessions.sessions.items()})


@dataclass
class Held:
    """A member (`client`) holding records 0..HELD-1 of `topic` partition 0 in `group`."""

    broker: object
    client: ShareClient
    topic: str
    topic_id: uuid.UUID
    group: str
    version: int

    @property
    def tp(self):
        return (self.topic_id, 0)

    def acks(self, ack_type: int, first: int = 0, last: int = HELD - 1):
        return {self.tp: [(first, last, [ack_type])]}

    def state(self):
        return share_state(self.broker, self.group, self.topic_id)


def open_session(client: ShareClient, topic_id: uuid.UUID, *, version: int, **kw):
    """An epoch-0 ShareFetch for partition 0 of `topic_id` that finds nothing (default reset: latest)."""
    resp = client.fetch([(topic_id, 0)], version=version, epoch=0, max_wait_ms=0, **kw)
    assert resp.error_code == NONE, resp
    assert client.session_epoch == 1
    return resp


def hold_records(broker, version: int, *, group: str = GROUP, topic: str = TOPIC, count: int = HELD) -> Held:
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, topic)
    client = ShareClient(bootstrap, group)
    open_session(client, topic_id, version=version)
    assert produce_batch(bootstrap, topic, count) == 0
    resp = client.fetch(version=version, max_wait_ms=5000)
    assert resp.error_code == NONE, resp
    assert acquired_offsets(resp) == {(topic_id, 0): [(o, 1) for o in range(count)]}, resp
    held = Held(broker, client, topic, topic_id, group, version)
    _start, _end, offsets = held.state()
    assert {o: v[:3] for o, v in offsets.items()} == {o: (ACQUIRED, 1, client.member_id) for o in range(count)}
    return held


def assert_still_held(held: Held, before, sessions_before, *, epoch_moved: bool) -> None:
    """White-box: the share partition is exactly as `before` (states, counts, holders, lock deadlines)
    and the share sessions are as `sessions_before` -- except that our member's epoch moved on by one
    if the request was a (top-level) success."""
    assert held.state() == before
    expected = dict(sessions_before)
    key = (held.group, held.client.member_id)
    if epoch_moved:
        expected[key] = sessions_before[key] + 1
    assert sessions(held.broker) == expected
    assert held.client.session_epoch == expected[key]


def release_reacquire_accept(held: Held) -> None:
    """Black-box: the next correctly-numbered ShareFetch releases the member's records (the release
    succeeds only if the member still holds them) and re-acquires them at delivery count 2 (so they
    were at 1); a ShareAcknowledge then accepts them and the share partition moves past them."""
    c = held.client
    resp = c.fetch(version=held.version, acks=held.acks(RELEASE), max_wait_ms=5000)
    assert resp.error_code == NONE, resp
    assert partition_errors(resp)[held.tp] == (NONE, NONE), resp
    assert acquired_offsets(resp) == {held.tp: [(o, 2) for o in range(HELD)]}, resp
    resp = c.acknowledge(held.acks(ACCEPT), version=held.version)
    assert resp.error_code == NONE, resp
    assert partition_errors(resp) == {held.tp: (NONE, None)}, resp
    start, _end, offsets = held.state()
    assert start == HELD and not offsets


def no_partition_data(resp) -> bool:
    return resp.responses == ()


# ----------------------------------------------------------------------------- criterion 8: ack-batch shapes

def _shape_cases(version: int) -> dict[str, tuple[list, bool]]:
    """name -> (ack batches for partition 0, is_renew_ack). A valid batch comes first where possible, so
    that applying batches before validating all of them would show."""
    max_type = 3 if version == 1 else 4
    cases = {
        "first_after_last": ([(0, 0, [ACCEPT]), (3, 1, [ACCEPT])], False),
        "first_after_last_alone": ([(4, 0, [ACCEPT])], False),
        "overlapping": ([(0, 2, [ACCEPT]), (1, 4, [ACCEPT])], False),
        "unordered": ([(3, 4, [ACCEPT]), (0, 1, [ACCEPT])], False),
        "types_too_few": ([(0, 4, [ACCEPT, ACCEPT])], False),
        "types_too_many": ([(0, 1, [ACCEPT]), (2, 4, [ACCEPT] * 4)], False),
        "types_empty": ([(0, 1, [ACCEPT]), (2, 4, [])], False),
        "type_negative": ([(0, 1, [ACCEPT]), (2, 4, [-1])], False),
        "type_above_version_range": ([(0, 1, [ACCEPT]), (2, 4, [max_type + 1])], False),
        "per_offset_type_above_version_range": ([(0, 4, [ACCEPT, ACCEPT, max_type + 1, ACCEPT, ACCEPT])], False),
    }
    if version == 2:
        cases["renew_without_is_renew_ack"] = ([(0, 4, [RENEW])], False)
        cases["per_offset_renew_without_is_renew_ack"] = ([(0, 4, [ACCEPT, RENEW, ACCEPT, ACCEPT, ACCEPT])], False)
        cases["renew_request_type_above_range"] = ([(0, 4, [5])], True)
    return cases


SHAPE_PARAMS = [pytest.param(v, via, name, id=f"v{v}-{via}-{name}")
                for v in (1, 2) for via in ("ShareAcknowledge", "ShareFetch") for name in _shape_cases(v)]


@pytest.mark.parametrize("version,via,case", SHAPE_PARAMS)
def test_malformed_ack_batches_get_invalid_request_and_change_nothing(broker, version, via, case):
    held = hold_records(broker, version)
    batches, renew = _shape_cases(version)[case]
    before, sessions_before = held.state(), sessions(broker)
    c = held.client
    if via == "ShareAcknowledge":
        resp = c.acknowledge({held.tp: batches}, version=version, is_renew_ack=renew)
        assert resp.error_code == NONE, resp
        assert partition_errors(resp) == {held.tp: (INVALID_REQUEST, None)}, resp
    else:
        kw = dict(max_wait_ms=0)
        if renew:
            kw.update(max_wait_ms=0, min_bytes=0, max_bytes=0, max_records=0)
        resp = c.fetch(version=version, acks={held.tp: batches}, is_renew_ack=renew, **kw)
        assert resp.error_code == NONE, resp
        assert partition_errors(resp) == {held.tp: (NONE, INVALID_REQUEST)}, resp
        assert acquired_offsets(resp) == {}, resp
    assert_still_held(held, before, sessions_before, epoch_moved=True)
    release_reacquire_accept(held)


PAST_ACQUIRED = {
    "last_offset_past_acquired": [(0, HELD + 4, [ACCEPT])],
    "batch_wholly_past_acquired": [(0, HELD - 1, [ACCEPT]), (HELD + 1, HELD + 3, [ACCEPT])],
}


@pytest.mark.parametrize("version,via,case", [
    pytest.param(v, via, name, id=f"v{v}-{via}-{name}")
    for v in (1, 2) for via in ("ShareAcknowledge", "ShareFetch") for name in PAST_ACQUIRED])
def test_ack_past_the_acquired_records_gets_invalid_request_and_changes_nothing(broker, version, via, case):
    """Offsets beyond the share partition's acquired records: Kafka's SharePartition.acknowledge fails
    the partition's acknowledgement with InvalidRequestException ("Batch record not found. The last /
    first offset in request is past acquired records.", fetchSubMapForAcknowledgementBatch), so the
    partition gets INVALID_REQUEST, and the whole acknowledgement (valid batches too) is rolled back."""
    held = hold_records(broker, version)
    before, sessions_before = held.state(), sessions(broker)
    acks = {held.tp: PAST_ACQUIRED[case]}
    if via == "ShareAcknowledge":
        resp = held.client.acknowledge(acks, version=version)
        assert resp.error_code == NONE, resp
        assert partition_errors(resp) == {held.tp: (INVALID_REQUEST, None)}, resp
    else:
        resp = held.client.fetch(version=version, acks=acks, max_wait_ms=0)
        assert resp.error_code == NONE, resp
        assert partition_errors(resp) == {held.tp: (NONE, INVALID_REQUEST)}, resp
    assert_still_held(held, before, sessions_before, epoch_moved=True)
    release_reacquire_accept(held)


# ----------------------------------------------------------------------------- criterion 8: request-level errors

LONG_MEMBER_ID = "m" * 37  # MemberId must be 1..36 characters


def _fetch(h: Held, **kw):
    kw.setdefault("max_wait_ms", 0)
    return h.client.fetch(version=h.version, **kw)


def _ack(h: Held, acks=None, **kw):
    return h.client.acknowledge(h.acks(ACCEPT) if acks is None else acks, version=h.version, **kw)


def _stranger(h: Held, member_id: str | None = None) -> ShareClient:
    """Another connection of the same group, as a member with no share session."""
    return ShareClient(h.broker.bootstrap_servers, h.group, member_id=member_id or new_member_id())


def _heartbeat_unknown_member(h: Held):
    with _stranger(h) as s:
        return s.heartbeat([h.topic], epoch=5)


def _join_group(h: Held) -> None:
    """The holding member joins the group (ShareGroupHeartbeat at epoch 0), so that the group exists."""
    resp = h.client.join([h.topic])
    assert resp.error_code == NONE, resp


def _renew_fetch_with_limits(field: str):
    def send(h: Held):
        kw = dict(max_wait_ms=0, min_bytes=0, max_bytes=0, max_records=0)
        kw[field] = 1 if field != "max_wait_ms" else 100
        return _fetch(h, acks=h.acks(RENEW), is_renew_ack=True, **kw)
    return send


def _fetch_unknown_member(h: Held):
    with _stranger(h) as s:
        return s.fetch(version=h.version, epoch=1, acks=h.acks(ACCEPT), max_wait_ms=0)


def _ack_unknown_member(h: Held):
    with _stranger(h) as s:
        return s.acknowledge(h.acks(ACCEPT), version=h.version, epoch=1)


def _close_unknown_member(h: Held):
    with _stranger(h) as s:
        return s.acknowledge(h.acks(ACCEPT), version=h.version, epoch=-1)


def _fetch_close_unknown_member(h: Held):
    # no partitions listed: Kafka answers INVALID_REQUEST to a final-epoch ShareFetch that lists some
    with _stranger(h) as s:
        return s.fetch(version=h.version, epoch=-1, max_wait_ms=0)


# name -> (send(held) -> response, expected top-level error, first version it applies to)
REQUEST_CASES = {
    # acks on an epoch-0 ShareFetch (the member re-opening its session with acks): INVALID_REQUEST
    "fetch_acks_at_epoch_0": (lambda h: _fetch(h, partitions=[h.tp], epoch=0, acks=h.acks(ACCEPT)), INVALID_REQUEST, 1),
    # ShareAcknowledge cannot open a session
    "ack_at_epoch_0": (lambda h: _ack(h, epoch=0), INVALID_SHARE_SESSION_EPOCH, 1),
    "ack_at_epoch_0_without_acks": (lambda h: _ack(h, acks={}, epoch=0), INVALID_SHARE_SESSION_EPOCH, 1),
    # wrong epochs on the member's own session
    "fetch_epoch_ahead": (lambda h: _fetch(h, epoch=h.client.session_epoch + 1, acks=h.acks(ACCEPT)),
                          INVALID_SHARE_SESSION_EPOCH, 1),
    "fetch_epoch_stale": (lambda h: _fetch(h, epoch=h.client.session_epoch - 1, acks=h.acks(ACCEPT)),
                          INVALID_SHARE_SESSION_EPOCH, 1),
    "fetch_epoch_negative": (lambda h: _fetch(h, epoch=-2, acks=h.acks(ACCEPT)), INVALID_SHARE_SESSION_EPOCH, 1),
    "ack_epoch_ahead": (lambda h: _ack(h, epoch=h.client.session_epoch + 1), INVALID_SHARE_SESSION_EPOCH, 1),
    "ack_epoch_stale": (lambda h: _ack(h, epoch=h.client.session_epoch - 1), INVALID_SHARE_SESSION_EPOCH, 1),
    "ack_epoch_int32_max": (lambda h: _ack(h, epoch=2**31 - 1), INVALID_SHARE_SESSION_EPOCH, 1),
    # no session for the key
    "fetch_unknown_member": (_fetch_unknown_member, SHARE_SESSION_NOT_FOUND, 1),
    "ack_unknown_member": (_ack_unknown_member, SHARE_SESSION_NOT_FOUND, 1),
    "ack_close_unknown_member": (_close_unknown_member, SHARE_SESSION_NOT_FOUND, 1),
    "fetch_close_unknown_member": (_fetch_close_unknown_member, SHARE_SESSION_NOT_FOUND, 1),
    "fetch_other_group": (lambda h: _fetch(h, group_id=h.group + "-other", acks=h.acks(ACCEPT)),
                          SHARE_SESSION_NOT_FOUND, 1),
    "ack_other_group": (lambda h: _ack(h, group_id=h.group + "-other"), SHARE_SESSION_NOT_FOUND, 1),
    # member ids: non-empty and at most 36 characters
    "fetch_empty_member_id": (lambda h: _fetch(h, member_id="", acks=h.acks(ACCEPT)), INVALID_REQUEST, 1),
    "fetch_long_member_id": (lambda h: _fetch(h, member_id=LONG_MEMBER_ID, acks=h.acks(ACCEPT)), INVALID_REQUEST, 1),
    "fetch_null_member_id": (lambda h: _fetch(h, member_id=None, acks=h.acks(ACCEPT)), INVALID_REQUEST, 1),
    "open_with_empty_member_id": (lambda h: _fetch(h, partitions=[h.tp], epoch=0, member_id=""), INVALID_REQUEST, 1),
    "open_with_long_member_id": (lambda h: _fetch(h, partitions=[h.tp], epoch=0, member_id=LONG_MEMBER_ID),
                                 INVALID_REQUEST, 1),
    "ack_empty_member_id": (lambda h: _ack(h, member_id=""), INVALID_REQUEST, 1),
    "ack_long_member_id": (lambda h: _ack(h, member_id=LONG_MEMBER_ID), INVALID_REQUEST, 1),
    "ack_null_member_id": (lambda h: _ack(h, member_id=None), INVALID_REQUEST, 1),
    "fetch_null_group_id": (lambda h: _fetch(h, group_id=None, acks=h.acks(ACCEPT)), INVALID_REQUEST, 1),
    # a renew-only ShareFetch needs MaxBytes, MinBytes, MaxRecords and MaxWaitMs of 0 (v2)
    "renew_fetch_with_max_bytes": (_renew_fetch_with_limits("max_bytes"), INVALID_REQUEST, 2),
    "renew_fetch_with_min_bytes": (_renew_fetch_with_limits("min_bytes"), INVALID_REQUEST, 2),
    "renew_fetch_with_max_records": (_renew_fetch_with_limits("max_records"), INVALID_REQUEST, 2),
    "renew_fetch_with_max_wait": (_renew_fetch_with_limits("max_wait_ms"), INVALID_REQUEST, 2),
    # ShareGroupHeartbeat at an epoch other than 0 from a member the group does not know (the group
    # exists: the holding member joined it); with no such group at all Kafka says GROUP_ID_NOT_FOUND
    "heartbeat_unknown_member_nonzero_epoch": (_heartbeat_unknown_member, UNKNOWN_MEMBER_ID, 1),
    "heartbeat_nonzero_epoch_unknown_group": (_heartbeat_unknown_member, GROUP_ID_NOT_FOUND, 1),
}
# run before the snapshot of the state that must not change
REQUEST_PREPARE = {"heartbeat_unknown_member_nonzero_epoch": _join_group}

REQUEST_PARAMS = [pytest.param(v, name, id=f"v{v}-{name}")
                  for v in (1, 2) for name, (_s, _e, since) in REQUEST_CASES.items() if v >= since]


@pytest.mark.parametrize("version,case", REQUEST_PARAMS)
def test_request_level_errors_get_kafka_codes_and_change_nothing(broker, version, case):
    held = hold_records(broker, version)
    send, expected, _since = REQUEST_CASES[case]
    if case in REQUEST_PREPARE:
        REQUEST_PREPARE[case](held)
    before, sessions_before = held.state(), sessions(broker)
    epoch_before = held.client.session_epoch
    resp = send(held)
    assert resp.error_code == expected, resp
    if hasattr(resp, "responses"):  # ShareFetch / ShareAcknowledge: nothing per partition
        assert no_partition_data(resp), resp
    assert held.client.session_epoch == epoch_before
    assert_still_held(held, before, sessions_before, epoch_moved=False)
    release_reacquire_accept(held)


def test_member_id_of_36_characters_is_accepted(broker):
    """The upper bound of the member-id rule is inclusive (1..36 characters)."""
    topic_id = create_topic(broker.bootstrap_servers, TOPIC)
    client = ShareClient(broker.bootstrap_servers, GROUP, member_id="x" * 36)
    for version in (1, 2):
        client.reset_session()
        open_session(client, topic_id, version=version)
        resp = client.acknowledge({}, version=version)
        assert resp.error_code == NONE, resp


# ----------------------------------------------------------------------------- criterion 9: RENEW

def _renew(held: Held, via: str):
    """Send a RENEW of all held records; return the partition's ack error."""
    c = held.client
    if via == "ShareAcknowledge":
        resp = c.acknowledge(held.acks(RENEW), version=2, is_renew_ack=True)
        assert resp.error_code == NONE, resp
        return partition_errors(resp)[held.tp][0]
    resp = c.fetch(version=2, acks=held.acks(RENEW), is_renew_ack=True, max_wait_ms=0, min_bytes=0, max_bytes=0,
                   max_records=0)
    assert resp.error_code == NONE, resp
    assert acquired_offsets(resp) == {}, resp  # a renew-only ShareFetch skips the fetch
    error, ack_error = partition_errors(resp)[held.tp]
    assert error == NONE, resp
    return ack_error


@pytest.mark.parametrize("via", ["ShareAcknowledge", "ShareFetch"])
def test_renew_keeps_records_past_their_original_deadline(make_broker, via):
    broker = make_broker(config=LOCK_CONFIG)
    held = hold_records(broker, 2)
    # more data in the log: a renew-only ShareFetch must still acquire none of it
    assert produce_batch(broker.bootstrap_servers, TOPIC, 3, tag="later") == HELD
    _start, _end, offsets = held.state()
    original_deadline = max(v[3] for v in offsets.values())
    member = held.client.member_id
    last_deadline = original_deadline
    give_up = time.monotonic() + 15
    # renew well within the 1 s lock until the broker's lock clock (monotonic) is clearly past the original deadline
    while monotonic_ms() <= original_deadline + 500:
        assert time.monotonic() < give_up, "renewals did not carry the records past their original deadline"
        assert _renew(held, via) == NONE
        _start, _end, offsets = held.state()
        assert all(v[:3] == (ACQUIRED, 1, member) for o, v in offsets.items() if o < HELD), offsets
        deadlines = {offsets[o][3] for o in range(HELD)}
        assert len(deadlines) == 1 and min(deadlines) >= last_deadline
        last_deadline = min(deadlines)
        time.sleep(0.15)  # pacing between renewals (well under the lock duration)
    # past the original deadline the records are still the member's, and accepting them works
    assert last_deadline > original_deadline
    assert all(record_state(broker, GROUP, held.topic_id, o) == (ACQUIRED, 1, member) for o in range(HELD))
    resp = held.client.acknowledge(held.acks(ACCEPT), version=2)
    assert resp.error_code == NONE and partition_errors(resp) == {held.tp: (NONE, None)}, resp
    # and the records produced meanwhile come next, at delivery count 1
    resp = held.client.fetch(version=2, max_wait_ms=5000)
    assert acquired_offsets(resp) == {held.tp: [(HELD + i, 1) for i in range(3)]}, resp


@pytest.mark.parametrize("via", ["ShareAcknowledge", "ShareFetch"])
def test_renew_after_lock_expiry_gets_invalid_record_state(make_broker, via):
    broker = make_broker(config=LOCK_CONFIG)
    held = hold_records(broker, 2)
    wait_until(lambda: all(record_state(broker, GROUP, held.topic_id, o) == (AVAILABLE, 1, None)
                           for o in range(HELD)), 10, message="the acquisition lock to expire")
    assert _renew(held, via) == INVALID_RECORD_STATE
    # nothing was renewed or re-acquired: the records are still available, at delivery count 1
    assert all(record_state(broker, GROUP, held.topic_id, o) == (AVAILABLE, 1, None) for o in range(HELD))
    # an ACCEPT after expiry fails too; the next fetch redelivers them (count 2)
    resp = held.client.acknowledge(held.acks(ACCEPT), version=2)
    assert partition_errors(resp) == {held.tp: (INVALID_RECORD_STATE, None)}, resp
    resp = held.client.fetch(version=2, max_wait_ms=5000)
    assert acquired_offsets(resp) == {held.tp: [(o, 2) for o in range(HELD)]}, resp


@pytest.mark.parametrize("via", ["ShareAcknowledge", "ShareFetch"])
def test_renew_disabled_by_group_config_gets_invalid_record_state(make_broker, via):
    broker = make_broker(config=LOCK_CONFIG)
    set_group_configs(broker.bootstrap_servers, GROUP, {"share.renew.acknowledge.enable": "false"})
    held = hold_records(broker, 2)
    before = held.state()
    assert _renew(held, via) == INVALID_RECORD_STATE
    assert held.state() == before  # same holder, count and lock deadline
    resp = held.client.acknowledge(held.acks(ACCEPT), version=2)
    assert resp.error_code == NONE and partition_errors(resp) == {held.tp: (NONE, None)}, resp


# ----------------------------------------------------------------------------- criterion 9: acquire modes

def test_record_limit_splits_a_batch_and_batch_optimized_returns_it_whole(broker):
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC)
    tp = (topic_id, 0)
    limited = ShareClient(bootstrap, "record-limit-group")
    whole = ShareClient(bootstrap, "batch-optimized-group")
    open_session(limited, topic_id, version=2, share_acquire_mode=1)
    open_session(whole, topic_id, version=2)
    assert produce_batch(bootstrap, TOPIC, 10) == 0

    got = []
    for expected in ([0, 1, 2], [3, 4, 5], [6, 7, 8], [9]):
        resp = limited.fetch(version=2, share_acquire_mode=1, max_records=3, batch_size=3, max_wait_ms=5000)
        assert resp.error_code == NONE, resp
        assert acquired_offsets(resp) == {tp: [(o, 1) for o in expected]}, resp
        assert [r.offset for r in records_in(resp)[tp]] == expected
        got.extend(expected)
    assert got == list(range(10))

    resp = whole.fetch(version=2, share_acquire_mode=0, max_records=3, batch_size=3, max_wait_ms=5000)
    assert resp.error_code == NONE, resp
    assert sorted(acquired_offsets(resp)[tp]) == [(o, 1) for o in range(10)], resp
    assert [r.value for r in records_in(resp)[tp]] == [f"v{i}".encode() for i in range(10)]


# ----------------------------------------------------------------------------- criterion 9: throttling

@pytest.mark.parametrize("version", [1, 2])
def test_acquisitions_halve_near_the_delivery_limit_and_the_last_attempt_is_alone(make_broker, version):
    """kafka-reference §4.1 Throttling, as Kafka implements it (SharePartition.shouldThrottleRecordsDelivery
    and acquireSubsetBatchRecords; ShareConsumerTest.testFetchWithThrottledDelivery): records whose
    delivery count is already >= max(2, ceil(limit/2)) = 3 are throttled on their next acquisition, which
    takes (records in the in-flight batch) >> (count - 3 + 1) of them; a record on its last attempt
    (count limit-1 = 4) is acquired alone. So a 16-record batch released after every delivery comes back
    16, 16, 16 (deliveries 1-3), 8 (delivery 4), then 1 (delivery 5, the last)."""
    broker = make_broker(config={"group.share.delivery.count.limit": 5})
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC)
    tp = (topic_id, 0)
    client = ShareClient(bootstrap, GROUP)
    open_session(client, topic_id, version=version)
    assert produce_batch(bootstrap, TOPIC, 16) == 0

    deliveries = []
    acks = None
    for _ in range(5):
        resp = client.fetch(version=version, acks=acks, max_records=16, batch_size=16, max_wait_ms=5000)
        assert resp.error_code == NONE, resp
        if acks:
            assert partition_errors(resp)[tp][1] == NONE, resp
        got = acquired_offsets(resp)[tp]
        counts = {c for _o, c in got}
        assert len(counts) == 1, got
        deliveries.append((len(got), counts.pop()))
        assert [o for o, _c in got] == list(range(len(got)))  # always from the partition's first offset
        acks = {tp: [(got[0][0], got[-1][0], [RELEASE])]}  # release everything this delivery acquired
    assert deliveries == [(16, 1), (16, 2), (16, 3), (8, 4), (1, 5)]

    # releasing the record at the limit archives it (the SPSO moves past it); the next record on its
    # last attempt is again acquired alone
    resp = client.fetch(version=version, acks=acks, max_records=16, batch_size=16, max_wait_ms=5000)
    assert partition_errors(resp)[tp][1] == NONE, resp
    assert share_state(broker, GROUP, topic_id)[0] == 1
    assert acquired_offsets(resp) == {tp: [(1, 5)]}, resp


# ----------------------------------------------------------------------------- criterion 9: session cap

def test_share_session_cap_refuses_a_third_session_until_one_closes(make_broker):
    # group.share.max.share.sessions must be >= group.share.max.size (a start-up check, as in Kafka)
    broker = make_broker(config={"group.share.max.share.sessions": 2, "group.share.max.size": 2})
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC)
    a, b, c, d = (ShareClient(bootstrap, GROUP) for _ in range(4))
    open_session(a, topic_id, version=2)
    open_session(b, topic_id, version=1)

    for version in (1, 2):
        resp = c.fetch([(topic_id, 0)], version=version, epoch=0, max_wait_ms=200)
        assert resp.error_code == SHARE_SESSION_LIMIT_REACHED, resp
        assert no_partition_data(resp), resp
        assert c.session_epoch == 0
    assert set(sessions(broker)) == {(GROUP, a.member_id), (GROUP, b.member_id)}
    # the live sessions were not disturbed
    assert a.acknowledge({}, version=2).error_code == NONE
    assert b.fetch(version=1, max_wait_ms=0).error_code == NONE

    # a closes its session: c gets one
    assert a.close_session(version=2).error_code == NONE
    open_session(c, topic_id, version=2)
    resp = d.fetch([(topic_id, 0)], version=2, epoch=0, max_wait_ms=200)
    assert resp.error_code == SHARE_SESSION_LIMIT_REACHED, resp

    # b's connection drops: its session goes with it, and d gets one
    b.disconnect()
    wait_until(lambda: (GROUP, b.member_id) not in sessions(broker), 10, message="b's session to be removed")
    open_session(d, topic_id, version=1)
    for client in (a, b, c, d):
        client.close()


# ----------------------------------------------------------------------------- criterion 9: DeleteRecords

@pytest.mark.parametrize("version", [1, 2])
def test_delete_records_past_in_flight_records_archives_them(broker, version):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC)
    tp = (topic_id, 0)
    client = ShareClient(bootstrap, GROUP)
    open_session(client, topic_id, version=version)
    assert produce_batch(bootstrap, TOPIC, 5) == 0
    assert produce_batch(bootstrap, TOPIC, 5) == 5
    resp = client.fetch(version=version, max_wait_ms=5000)
    assert acquired_offsets(resp) == {tp: [(o, 1) for o in range(10)]}, resp

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(TOPIC, 0, 7)]).values():
        assert future.result(timeout=10).low_watermark == 7
    del admin

    # records below the new log start left the in-flight window (archived, never redelivered)
    wait_until(lambda: share_state(broker, GROUP, topic_id)[0] == 7, 10, message="the SPSO to follow the log start")
    start, end, offsets = share_state(broker, GROUP, topic_id)
    assert (start, end) == (7, 10)
    assert {o: v[:3] for o, v in offsets.items()} == {o: (ACQUIRED, 1, client.member_id) for o in (7, 8, 9)}
    # the member's ack of them has no effect. Kafka skips an acknowledgement batch that lies wholly below
    # the SPSO ("All offsets in the acknowledgement batch are already archived", SharePartition.acknowledge)
    # and answers NONE for it
    resp = client.acknowledge({tp: [(0, 6, [ACCEPT])]}, version=version)
    assert resp.error_code == NONE and partition_errors(resp) == {tp: (NONE, None)}, resp
    assert share_state(broker, GROUP, topic_id) == (start, end, offsets)
    # releasing what remains: the next fetch starts at the new log start
    resp = client.fetch(version=version, acks={tp: [(7, 9, [RELEASE])]}, max_wait_ms=5000)
    assert partition_errors(resp)[tp] == (NONE, NONE), resp
    assert acquired_offsets(resp) == {tp: [(7, 2), (8, 2), (9, 2)]}, resp
    assert [r.offset for r in records_in(resp)[tp]] == [7, 8, 9]


# ----------------------------------------------------------------------------- criterion 9: by_duration

def test_auto_offset_reset_by_duration_starts_at_the_first_record_within_the_duration(broker):
    from confluent_kafka import Producer

    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC)
    tp = (topic_id, 0)
    set_group_configs(bootstrap, GROUP, {"share.auto.offset.reset": "by_duration:PT1M"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    now = wall_clock_ms()
    for i in range(3):
        producer.produce(TOPIC, value=b"old%d" % i, partition=0, timestamp=now - 120_000)
    assert producer.flush(10) == 0
    for i in range(3):
        producer.produce(TOPIC, value=b"new%d" % i, partition=0, timestamp=wall_clock_ms())
    assert producer.flush(10) == 0
    del producer

    client = ShareClient(bootstrap, GROUP)
    resp = client.fetch([tp], version=2, epoch=0, max_wait_ms=5000)
    assert resp.error_code == NONE, resp
    assert acquired_offsets(resp) == {tp: [(3, 1), (4, 1), (5, 1)]}, resp
    assert [r.value for r in records_in(resp)[tp]] == [b"new0", b"new1", b"new2"]


# ----------------------------------------------------------------------------- disconnect and long poll

WAKE_DEADLINE_S = 5  # a parked ShareFetch has MaxWaitMs 30 s: only a wake-up can complete it within this


def park_fetch(broker, client: ShareClient, tp, version: int):
    """Send a ShareFetch with MaxWaitMs 30 s on a thread and wait (white-box) until it is parked."""
    result: dict = {}

    def run():
        try:
            result["resp"] = client.fetch(version=version, max_wait_ms=30_000)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_until(lambda: broker.call(lambda: broker.server.share_partitions.parked(GROUP, *tp) > 0), 10,
               message="the ShareFetch to park")
    return thread, result


def completed(thread: threading.Thread, result: dict, what: str):
    thread.join(WAKE_DEADLINE_S)
    assert not thread.is_alive(), f"the parked ShareFetch was not completed by {what} (MaxWaitMs is 30 s)"
    assert "error" not in result, result
    return result["resp"]


def runs_of(broker, group: str, topic_id: uuid.UUID, partition: int = 0):
    """[(first, last, state, delivery count, holder, write pending)] of a share partition's runs."""
    def read():
        sp = broker.server.share_partitions.contexts[(group, topic_id, partition)].share_partition
        return [(r.first, r.last, r.state, r.delivery_count, r.member_id, bool(r.pending)) for r in sp.runs]
    return broker.call(read)


@pytest.mark.parametrize("version", [1, 2])
def test_dropped_connection_releases_the_members_records_at_once(broker, version):
    held = hold_records(broker, version)  # default lock: 30 s, far beyond this test's deadlines
    member = held.client.member_id
    other = ShareClient(broker.bootstrap_servers, GROUP)
    open_session(other, held.topic_id, version=version)
    held.client.disconnect()
    # released at once (not by lock expiry): available again, delivery count kept, no holder, durable
    wait_until(lambda: runs_of(broker, GROUP, held.topic_id) == [(0, HELD - 1, AVAILABLE, 1, None, False)], 10,
               message="the dropped member's records to be released")
    assert (GROUP, member) not in sessions(broker)
    resp = other.fetch(version=version, max_wait_ms=5000)
    assert resp.error_code == NONE, resp
    assert acquired_offsets(resp) == {held.tp: [(o, 2) for o in range(HELD)]}, resp
    assert all(record_state(broker, GROUP, held.topic_id, o) == (ACQUIRED, 2, other.member_id) for o in range(HELD))


RELEASES = {
    "disconnect": lambda h: h.client.disconnect(),
    "close_session": lambda h: h.client.close_session(version=h.version),
    "release_ack": lambda h: h.client.acknowledge(h.acks(RELEASE), version=h.version),
    "lock_expiry": lambda h: None,
}


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("how", list(RELEASES))
def test_parked_share_fetch_is_completed_when_held_records_are_released(make_broker, how, version):
    """kafka-reference §4.1 Fetch: a parked fetch completes on an ack, a session release (close or
    disconnect) or a lock expiry that makes records acquirable again -- not only at MaxWaitMs."""
    broker = make_broker(config=LOCK_CONFIG if how == "lock_expiry" else None)
    held = hold_records(broker, version)
    other = ShareClient(broker.bootstrap_servers, GROUP, timeout_s=60)
    open_session(other, held.topic_id, version=version)
    thread, result = park_fetch(broker, other, held.tp, version)
    RELEASES[how](held)
    resp = completed(thread, result, how)
    assert resp.error_code == NONE, resp
    assert acquired_offsets(resp) == {held.tp: [(o, 2) for o in range(HELD)]}, resp


class PersistGate:
    """Holds every share-state write of the broker until `open()` (white-box: wraps the broker's
    wait for durability, LogFlusher.flush, on the broker's loop), so that a release stays pending while a
    ShareFetch looks at it."""

    def __init__(self, broker) -> None:
        self.broker = broker

        def install():
            share_state = broker.server.share_coordinator
            flusher = broker.server.flusher
            self.event = asyncio.Event()
            durable = flusher.flush

            async def gated(*args, **kwargs):
                await self.event.wait()
                return await durable(*args, **kwargs)

            flusher.flush = gated
            # every write takes the queued round (the one that waits for durability), not the
            # synchronous round of a partition with nothing in flight and nothing to fsync
            share_state.flush_enabled = lambda plog: True

        broker.call(install)

    def open(self) -> None:
        self.broker.call(self.event.set)


@pytest.mark.parametrize("how", ["disconnect", "close_session", "lock_expiry"])
def test_parked_share_fetch_is_woken_when_a_release_becomes_durable(make_broker, how):
    """A release (session close, disconnect, lock expiry) is written to the share state before the
    records can be acquired again. A ShareFetch that looks while that write is in flight parks; it must
    be completed when the write completes -- not left to run out its MaxWaitMs."""
    broker = make_broker(config=LOCK_CONFIG if how == "lock_expiry" else None)
    held = hold_records(broker, 2)
    other = ShareClient(broker.bootstrap_servers, GROUP, timeout_s=60)
    open_session(other, held.topic_id, version=2)
    gate = PersistGate(broker)
    thread, result = park_fetch(broker, other, held.tp, 2)
    RELEASES[how](held)
    # the release happened (no holder any more) and the fetch, woken by it, looked and parked again
    wait_until(lambda: record_state(broker, GROUP, held.topic_id, 0)[2] is None, 10, message="the release")
    wait_until(lambda: not thread.is_alive()
               or broker.call(lambda: broker.server.share_partitions.parked(GROUP, *held.tp) > 0), 10,
               message="the ShareFetch to park again")
    gate.open()
    resp = completed(thread, result, f"the {how} release becoming durable")
    assert resp.error_code == NONE, resp
    assert acquired_offsets(resp) == {held.tp: [(o, 2) for o in range(HELD)]}, resp


@pytest.mark.parametrize("version", [1, 2])
def test_parked_share_fetch_is_completed_by_a_produce(broker, version):
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC)
    tp = (topic_id, 0)
    client = ShareClient(bootstrap, GROUP, timeout_s=60)
    open_session(client, topic_id, version=version)
    thread, result = park_fetch(broker, client, tp, version)
    assert produce_batch(bootstrap, TOPIC, 3) == 0
    resp = completed(thread, result, "the produce")
    assert resp.error_code == NONE, resp
    assert acquired_offsets(resp) == {tp: [(0, 1), (1, 1), (2, 1)]}, resp
    assert [r.value for r in records_in(resp)[tp]] == [b"v0", b"v1", b"v2"]


@pytest.mark.parametrize("version", [1, 2])
def test_a_share_fetch_reports_the_lock_its_records_were_acquired_with(make_broker, version):
    """AcquisitionLockTimeoutMs is the lock the response's records hold. A ShareFetch parked while
    the group's share.record.lock.duration.ms is lowered acquires, when a produce wakes it, with the
    new duration (each acquisition takes the group's lock when it is made: Kafka's
    `SharePartition.scheduleAcquisitionLockTimeout` reads the group config for each acquisition's
    `AcquisitionLockTimerTask`): the response must say so, not the duration of when the request
    arrived. Told
    30 s, a client acknowledges after the real 1 s lock ran out (simulator seed 500082: an ACCEPT
    answered NONE of a record the lock expiry had given up at the delivery limit and dead-lettered)."""
    broker = make_broker(config={"group.share.min.record.lock.duration.ms": 1000})
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC)
    tp = (topic_id, 0)
    client = ShareClient(bootstrap, GROUP, timeout_s=60)
    assert open_session(client, topic_id, version=version).acquisition_lock_timeout.total_seconds() == 30
    thread, result = park_fetch(broker, client, tp, version)
    set_group_configs(bootstrap, GROUP, {"share.record.lock.duration.ms": "1000"})
    assert produce_batch(bootstrap, TOPIC, 3) == 0
    resp = completed(thread, result, "the produce")
    answered_ms = monotonic_ms()
    assert resp.error_code == NONE, resp
    assert acquired_offsets(resp) == {tp: [(0, 1), (1, 1), (2, 1)]}, resp
    assert resp.acquisition_lock_timeout.total_seconds() * 1000 == 1000, resp.acquisition_lock_timeout
    _, _, offsets = share_state(broker, GROUP, topic_id)
    for offset in range(3):
        state, count, holder, deadline_ms = offsets[offset]
        assert (state, count, holder) == (ACQUIRED, 1, client.member_id)
        assert deadline_ms <= answered_ms + 1000, (offset, deadline_ms - answered_ms)  # the 1 s lock, not 30 s
