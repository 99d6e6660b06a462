"""The share consumer's request manager (client/_share_request_manager.py), pure: each node state
(share session closed or open × idle or fetching) against each input (a poll's fetch, a ShareFetch
answer with records, with a session error, a fatal or a retriable error, a failed send; per
partition an acknowledgement error, a leader error with and without CurrentLeader, a metadata
error, another error, a partition revoked while the fetch was out; the ShareAcknowledge path),
with no broker and no event loop. Kafka's ShareConsumeRequestManager makes the same decisions;
the driver's behaviour end to end is in test_share_consumer*.py (fake cluster) and the interop
tests (real broker)."""

from __future__ import annotations

import datetime
import uuid
from types import SimpleNamespace as NS

import pytest

from quafka.client._metadata import BrokerInfo, PartitionInfo, TopicInfo
from quafka.client._share_acks import AcknowledgeType
from quafka.client._share_fetch import AcquiredBatches
from quafka.client._share_request_manager import ShareConsumeRequestManager, duration_ms
from quafka.client.errors import KafkaException
from quafka.client.records import Record, TopicPartition
from quafka.protocol.errors import ErrorCode

from .fixture_batches import build

T = uuid.UUID(int=7)
TP0, TP1, TP_OTHER = TopicPartition("jobs", 0), TopicPartition("jobs", 1), TopicPartition("other", 0)
ACCEPT, RELEASE = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE


def topics(leader0: int = 1, leader1: int = 2) -> dict[str, TopicInfo]:
    return {"jobs": TopicInfo("jobs", T, {0: PartitionInfo(0, leader0, 5, ErrorCode.none),
                                          1: PartitionInfo(1, leader1, 3, ErrorCode.none)}, False)}


def manager(*, record_limit: bool = False, raw: bool = False, **kw) -> ShareConsumeRequestManager:
    m = ShareConsumeRequestManager(group_id="g", member_id="m", topics=kw.pop("topics", topics()),
                                   record_limit=record_limit, check_crcs=True, max_wait_ms=500, min_bytes=1,
                                   max_bytes=1 << 20, max_records=10, acquire_mode=1 if record_limit else 0)
    m.raw = raw
    m.set_assignment({TP0: (T, 0), TP1: (T, 1)})
    return m


def open_session(m: ShareConsumeRequestManager, node_id: int = 1) -> None:
    request = m.fetch_request(node_id, lambda rides: {})
    m.on_fetch_response(request, fetch_response())
    assert m.node(node_id).session.is_open


def batch(count: int) -> bytes:
    return build([(None, f"v{i}".encode(), [], 1000 + i) for i in range(count)])


def part(partition: int, *, records: bytes = b"", acquired=(), error=ErrorCode.none, ack_error=ErrorCode.none,
         leader=None):
    return NS(partition_index=partition, error_code=error, error_message=None, acknowledge_error_code=ack_error,
              acknowledge_error_message=None, current_leader=NS(leader_id=leader[0], leader_epoch=leader[1])
              if leader else NS(leader_id=-1, leader_epoch=-1),
              records=records, acquired_records=[NS(first_offset=f, last_offset=last, delivery_count=1)
                                                 for f, last in acquired])


def fetch_response(*parts, error=ErrorCode.none, topic_id=T, lock_ms=30_000, endpoints=()):
    return NS(error_code=error, error_message=None, acquisition_lock_timeout=datetime.timedelta(milliseconds=lock_ms),
              responses=[NS(topic_id=topic_id, partitions=list(parts))] if parts else [],
              node_endpoints=[NS(node_id=n, host="h", port=p, rack=None) for n, p in endpoints])


def ack_response(*parts, error=ErrorCode.none, lock_ms=30_000):
    return NS(error_code=error, error_message=None, acquisition_lock_timeout=datetime.timedelta(milliseconds=lock_ms),
              responses=[NS(topic_id=T, partitions=[NS(partition_index=p, error_code=e, error_message=None,
                                                       current_leader=NS(leader_id=hint[0], leader_epoch=hint[1])
                                                       if hint else NS(leader_id=-1, leader_epoch=-1))
                                                    for p, e, hint in parts])] if parts else [],
              node_endpoints=[])


# ----------------------------------------------------------------------------- leaders and fetch targets

@pytest.mark.parametrize("fetching", [False, True])
@pytest.mark.parametrize("record_limit", [False, True])
def test_fetches_to_start_per_node_state(fetching, record_limit):
    m = manager(record_limit=record_limit)
    if fetching:
        m.node(1).fetching = True
    targets = m.fetches_to_start()
    if record_limit:  # one broker at a time, only when none is out
        assert targets == ([] if fetching else [1])
    else:
        assert targets == ([2] if fetching else [1, 2])
    assert all(m.node(n).fetching for n in targets)
    m.on_fetch_done(1)
    assert not m.node(1).fetching


def test_a_partition_without_a_leader_is_not_fetched_and_asks_for_metadata():
    m = manager(topics=topics(leader0=-1))
    assert m.fetches_to_start() == [2]
    assert m.metadata_stale


def test_leader_hint_wins_until_the_metadata_catches_up():
    m = manager()
    open_session(m)
    m.on_fetch_response(m.fetch_request(1, lambda rides: {}),
                        fetch_response(part(0, error=ErrorCode.not_leader_or_follower, leader=(2, 6))))
    assert m.leader_of(TP0) == 2 and m.leader_hints == {TP0: (2, 6)}
    m.on_metadata()  # metadata still at epoch 5: the hint stays
    assert m.leader_hints == {TP0: (2, 6)}
    m.topics["jobs"].partitions[0] = PartitionInfo(0, 3, 6, ErrorCode.none)
    m.on_metadata()
    assert m.leader_hints == {} and m.leader_of(TP0) == 3


# ----------------------------------------------------------------------------- the fetch request

@pytest.mark.parametrize("session_open", [False, True])
def test_fetch_request_per_session_state(session_open):
    m = manager()
    if session_open:
        open_session(m)
    asked = []

    def take(rides):
        asked.append({tp: rides(tp) for tp in (TP0, TP1, TP_OTHER)})
        return {TP0: [(3, 4, ACCEPT)]}

    request = m.fetch_request(1, take)
    assert request is not None and request.node_id == 1
    values = request.values
    if session_open:  # acknowledgements of the partitions node 1 leads ride on it; nothing new to name
        assert asked == [{TP0: True, TP1: False, TP_OTHER: False}]
        assert request.acks == {TP0: [(3, 4, ACCEPT)]}
        assert values["share_session_epoch"] == 1
        assert values["topics"][0]["partitions"][0]["acknowledgement_batches"] == [
            {"first_offset": 3, "last_offset": 4, "acknowledge_types": (ACCEPT,)}]
    else:  # the opening fetch carries no acknowledgements and names every wanted partition
        assert asked == [] and request.acks == {}
        assert values["share_session_epoch"] == 0
        assert [p["partition_index"] for p in values["topics"][0]["partitions"]] == [0]
    assert (values["max_wait"], values["max_records"], values["share_acquire_mode"]) == (500, 10, 0)


def test_fetch_request_to_a_node_that_leads_nothing_is_none_and_takes_no_acks():
    m = manager()
    assert m.fetch_request(9, lambda rides: pytest.fail("no acknowledgements may be taken")) is None


def test_a_revoked_partition_is_forgotten_by_the_next_fetch():
    m = manager(topics=topics(leader1=1))
    open_session(m)
    m.set_assignment({TP0: (T, 0)})
    values = m.fetch_request(1, lambda rides: {}).values
    assert values["topics"] == [] and values["forgotten_topics_data"] == [{"topic_id": T, "partitions": [1]}]


@pytest.mark.parametrize(("buffered", "session_open", "fetching", "expected"), [
    (False, True, False, set()),          # both ride on the fetch about to go
    (False, False, False, {TP0}),         # no open session to ride on: sent now
    (False, True, True, {TP0}),           # a fetch already out: sent now
    (True, True, False, {TP0}),           # records buffered: the poll does not fetch
])
def test_acks_to_send_now_per_node_state(buffered, session_open, fetching, expected):
    m = manager()
    if session_open:
        open_session(m)
    m.node(1).fetching = fetching
    assert m.acks_to_send_now({TP0}, buffered=buffered) == expected
    assert m.acks_to_send_now({TP_OTHER}, buffered=False) == {TP_OTHER}  # not assigned: sent now


@pytest.mark.parametrize("rotation", [0, 1])
def test_record_limit_acks_ride_on_the_fetch_to_this_rounds_broker(rotation):
    m = manager(record_limit=True)
    open_session(m, 1)
    open_session(m, 2)
    m.rotation = rotation
    target = [1, 2][rotation % 2]  # the broker fetches_to_start picks next
    sent_now = m.acks_to_send_now({TP0, TP1}, buffered=False)
    assert sent_now == ({TP1} if target == 1 else {TP0})
    assert m.fetches_to_start() == [target]


# ----------------------------------------------------------------------------- the fetch answer

ERROR_INPUTS = {
    "session not found": (ErrorCode.share_session_not_found, False),
    "invalid session epoch": (ErrorCode.invalid_share_session_epoch, False),
    "retriable": (ErrorCode.request_timed_out, False),
    "fatal": (ErrorCode.group_authorization_failed, True),
}


@pytest.mark.parametrize("session_open", [False, True])
@pytest.mark.parametrize("name", list(ERROR_INPUTS))
def test_top_level_fetch_error_per_session_state(session_open, name):
    error, fatal = ERROR_INPUTS[name]
    m = manager()
    if session_open:
        open_session(m)
    epoch = m.node(1).session.epoch
    request = m.fetch_request(1, lambda rides: {TP0: [(0, 0, ACCEPT)]})
    result = m.on_fetch_response(request, fetch_response(error=error))
    assert result.back_off and result.partitions == [] and result.brokers == []
    assert (result.fatal is not None) == fatal
    expected_outcomes = {TP0} if session_open else set()
    assert set(result.ack_outcomes) == expected_outcomes
    assert all(isinstance(e, KafkaException) and e.code == error for e in result.ack_outcomes.values())
    if error in (ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch):
        assert m.node(1).session.epoch == 0  # starts again
    else:
        assert m.node(1).session.epoch == epoch  # a refused request leaves the session as it was


@pytest.mark.parametrize("session_open", [False, True])
def test_failed_send_resets_the_session_and_backs_off(session_open):
    m = manager()
    if session_open:
        open_session(m)
    request = m.fetch_request(1, lambda rides: {TP0: [(0, 1, RELEASE)]})
    lost = KafkaException("connection lost", ErrorCode.network_exception)
    result = m.on_fetch_failed(request, lost)
    assert result.back_off and m.metadata_stale and m.node(1).session.epoch == 0
    assert result.ack_outcomes == ({TP0: lost} if session_open else {})


@pytest.mark.parametrize("session_open", [False, True])
def test_records_are_decoded_and_the_session_moves_on(session_open):
    m = manager()
    if session_open:
        open_session(m)
    epoch = m.node(1).session.epoch
    request = m.fetch_request(1, lambda rides: {TP0: [(9, 9, ACCEPT)]})
    result = m.on_fetch_response(request, fetch_response(part(0, records=batch(3), acquired=[(0, 2)]),
                                                         lock_ms=15_000, endpoints=[(4, 9094)]))
    assert not result.back_off and result.fatal is None and result.failures == []
    [decoded] = result.partitions
    assert [r.offset for r in decoded.items] == [0, 1, 2] and all(isinstance(r, Record) for r in decoded.items)
    assert result.records_count == 3 and result.bytes_count == len(batch(3))
    assert m.lock_timeout_ms == 15_000 and result.brokers == [BrokerInfo(4, "h", 9094, None)]
    assert m.node(1).session.epoch == epoch + 1 and m.node(1).session.partitions == {(T, 0)}
    assert result.ack_outcomes == ({TP0: None} if session_open else {})


def test_raw_mode_keeps_the_batches_undecoded():
    m = manager(raw=True)
    result = m.on_fetch_response(m.fetch_request(1, lambda rides: {}),
                                 fetch_response(part(0, records=batch(4), acquired=[(1, 2)])))
    [decoded] = result.partitions
    [item] = decoded.items
    assert isinstance(item, AcquiredBatches) and item.count == 2 and result.records_count == 2
    assert item.acquired == [(1, 2, 1)] and result.own_acks == []


def test_acquired_offsets_no_batch_covers_are_released_by_the_consumer_itself():
    m = manager()
    result = m.on_fetch_response(m.fetch_request(1, lambda rides: {}),
                                 fetch_response(part(0, records=batch(3), acquired=[(0, 5)])))
    assert result.records_count == 3
    assert result.own_acks == [(TP0, {3: RELEASE, 4: RELEASE, 5: RELEASE})]  # they come back


@pytest.mark.parametrize("raw", [False, True])
def test_records_of_a_partition_revoked_while_the_fetch_was_out_are_released(raw):
    m = manager(raw=raw)
    request = m.fetch_request(1, lambda rides: {})
    m.set_assignment({TP1: (T, 1)})
    result = m.on_fetch_response(request, fetch_response(part(0, records=batch(4), acquired=[(0, 1), (3, 3)])))
    assert result.partitions == [] and result.records_count == 0
    assert result.released == {TP0: [(0, 1, RELEASE), (3, 3, RELEASE)]}


PARTITION_INPUTS = {
    # name: (error, CurrentLeader, hint kept, metadata stale, failure for the application)
    "leader moved, hint": (ErrorCode.not_leader_or_follower, (2, 6), True, False, False),
    "fenced epoch, hint": (ErrorCode.fenced_leader_epoch, (2, 6), True, False, False),
    "leader moved, no hint": (ErrorCode.not_leader_or_follower, None, False, True, False),
    "unknown topic id": (ErrorCode.unknown_topic_id, None, False, True, False),
    "leader not available": (ErrorCode.leader_not_available, None, False, True, False),
    "retriable": (ErrorCode.request_timed_out, None, False, True, False),
    "not retriable": (ErrorCode.topic_authorization_failed, None, False, False, True),
}


@pytest.mark.parametrize("name", list(PARTITION_INPUTS))
def test_partition_error_of_a_fetch(name):
    error, hint, hinted, stale, failed = PARTITION_INPUTS[name]
    m = manager()
    open_session(m)
    m.metadata_stale = False
    result = m.on_fetch_response(m.fetch_request(1, lambda rides: {}),
                                 fetch_response(part(0, error=error, leader=hint)))
    assert result.partitions == [] and not result.back_off
    assert (TP0 in m.leader_hints) == hinted and m.metadata_stale == stale
    assert [(tp, e.code) for tp, e in result.failures] == ([(TP0, error)] if failed else [])


@pytest.mark.parametrize("ack_error", [ErrorCode.none, ErrorCode.invalid_record_state])
def test_acknowledgement_outcome_rides_back_on_the_fetch(ack_error):
    m = manager()
    open_session(m)
    request = m.fetch_request(1, lambda rides: {TP0: [(5, 6, ACCEPT)]})
    result = m.on_fetch_response(request, fetch_response(part(0, ack_error=ack_error)))
    outcome = result.ack_outcomes[TP0]
    assert (outcome is None) if ack_error == ErrorCode.none else outcome.code == ack_error


def test_a_topic_id_unknown_to_the_metadata_asks_for_a_refresh():
    m = manager()
    open_session(m)
    m.metadata_stale = False
    result = m.on_fetch_response(m.fetch_request(1, lambda rides: {}),
                                 fetch_response(part(0, records=batch(1), acquired=[(0, 0)]), topic_id=uuid.uuid4()))
    assert result.partitions == [] and m.metadata_stale


# ----------------------------------------------------------------------------- acknowledgements

@pytest.mark.parametrize("session_open", [False, True])
def test_acknowledge_opens_a_session_only_when_none_is_open(session_open):
    m = manager()
    if session_open:
        open_session(m)
        assert m.open_session_request(1) is None
    else:
        opening = m.open_session_request(1)
        assert opening["share_session_epoch"] == 0 and opening["topics"] == [] and opening["max_records"] == 0
        assert m.on_open_session_response(1, fetch_response()) is None
    values = m.acknowledge_request(1, {TP0: [(1, 2, ACCEPT)]}, is_renew=False)
    assert values["share_session_epoch"] == 1
    assert values["topics"][0]["partitions"] == [{"partition_index": 0, "acknowledgement_batches": [
        {"first_offset": 1, "last_offset": 2, "acknowledge_types": (ACCEPT,)}]}]


def test_opening_a_session_can_fail():
    m = manager()
    m.open_session_request(1)
    exc = m.on_open_session_response(1, fetch_response(error=ErrorCode.share_session_limit_reached))
    assert exc.code == ErrorCode.share_session_limit_reached and not m.node(1).session.is_open


def test_acknowledge_without_an_open_session_is_refused():
    with pytest.raises(ValueError, match="open share session"):
        manager().acknowledge_request(1, {TP0: [(1, 1, ACCEPT)]}, is_renew=False)


ACK_INPUTS = {
    # name: (top-level error, partition error, CurrentLeader, outcome error, hint, session epoch after)
    "ok": (ErrorCode.none, ErrorCode.none, None, None, False, 2),
    "record state": (ErrorCode.none, ErrorCode.invalid_record_state, None, ErrorCode.invalid_record_state, False, 2),
    "leader moved": (ErrorCode.none, ErrorCode.not_leader_or_follower, (2, 6), ErrorCode.not_leader_or_follower,
                     True, 2),
    "session lost": (ErrorCode.share_session_not_found, None, None, ErrorCode.share_session_not_found, False, 0),
    "refused": (ErrorCode.invalid_request, None, None, ErrorCode.invalid_request, False, 1),
}


@pytest.mark.parametrize("name", list(ACK_INPUTS))
def test_acknowledge_answer(name):
    top, part_error, hint, outcome_error, hinted, epoch_after = ACK_INPUTS[name]
    m = manager()
    open_session(m)
    acks = {TP0: [(1, 2, ACCEPT)]}
    m.acknowledge_request(1, acks, is_renew=False)
    parts = [(0, part_error, hint)] if part_error is not None else []
    result = m.on_acknowledge_response(1, acks, ack_response(*parts, error=top, lock_ms=20_000))
    outcome = result.outcomes[TP0]
    assert (outcome is None) if outcome_error is None else outcome.code == outcome_error
    assert (TP0 in m.leader_hints) == hinted
    assert m.node(1).session.epoch == epoch_after
    assert m.lock_timeout_ms == (20_000 if top == ErrorCode.none else 30_000)


def test_closing_acknowledge_ends_the_session():
    m = manager()
    open_session(m)
    values = m.acknowledge_request(1, {}, is_renew=False, closing=True)
    assert values["share_session_epoch"] == -1
    m.on_acknowledge_response(1, {}, ack_response())
    assert not m.node(1).session.is_open and m.open_sessions() == []


def test_a_failed_acknowledge_resets_the_session():
    m = manager()
    open_session(m)
    m.on_request_failed(1)
    assert not m.node(1).session.is_open


def test_a_lock_timeout_of_zero_is_not_taken():
    m = manager()
    open_session(m)
    m.acknowledge_request(1, {}, is_renew=True)
    m.on_acknowledge_response(1, {}, ack_response(lock_ms=0))
    assert m.lock_timeout_ms == 30_000


def test_commit_targets_split_by_leader_and_fail_the_leaderless():
    m = manager(topics=topics(leader1=-1))
    by_leader, failed = m.commit_targets({TP0, TP1, TP_OTHER})
    assert by_leader == {1: {TP0}}
    assert {tp: e.code for tp, e in failed.items()} == {TP1: ErrorCode.leader_not_available,
                                                        TP_OTHER: ErrorCode.leader_not_available}


def test_wire_acks_use_the_topic_id_of_an_unassigned_but_known_partition():
    m = manager()
    m.set_assignment({})
    assert m.wire_acks({TP0: [(1, 1, RELEASE)], TP_OTHER: [(0, 0, RELEASE)]}) == {(T, 0): [(1, 1, (RELEASE,))]}


# ----------------------------------------------------------------------------- assignment

def test_assignment_resolution_and_revocation():
    m = manager()
    resolved, complete = m.resolve_assignment({T: [0], uuid.UUID(int=8): [0]})
    assert resolved == {TP0: (T, 0)} and not complete and m.metadata_stale
    assert m.set_assignment(resolved) == {TP1}
    assert m.set_assignment({TP0: (T, 0), TP1: (T, 1)}) == set()


def test_duration_ms_takes_timedeltas_and_numbers():
    assert duration_ms(datetime.timedelta(seconds=1.5)) == 1500 and duration_ms(250) == 250
