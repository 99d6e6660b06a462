"""The share consumer's request decisions (client/_share_requests.py), pure: every (state, input)
pair of each decision, with no broker and no event loop. Kafka's ShareConsumeRequestManager makes
the same decisions."""

from __future__ import annotations

import itertools

import pytest

from quafka.client._share_requests import (
    LEADER_ERRORS,
    METADATA_ERRORS,
    SESSION_REFUSAL_ERRORS,
    PartitionErrorAction,
    acks_to_send_now,
    commit_retries,
    fetch_error_is_fatal,
    fetch_targets,
    leader_of,
    partition_error_action,
    retry_backoff_ms,
)
from quafka.client.errors import KafkaException
from quafka.protocol.errors import ErrorCode


# ----------------------------------------------------------------------------- leader_of

@pytest.mark.parametrize(("leader_id", "epoch", "hint", "expected"), [
    (1, 5, None, 1),            # the metadata's leader
    (None, -1, None, None),     # partition unknown: refresh
    (-1, 5, None, None),        # no leader now: refresh
    (1, 5, (2, 6), 2),          # a newer hint (CurrentLeader of a response) wins
    (1, 5, (2, 5), 1),          # a hint no newer than the metadata is stale
    (1, 7, (2, 6), 1),
    (None, -1, (3, 0), 3),      # the hint alone
    (-1, 5, (3, 4), None),      # an old hint for a leaderless partition: refresh
])
def test_leader_of(leader_id, epoch, hint, expected):
    assert leader_of(leader_id, epoch, hint) == expected


# ----------------------------------------------------------------------------- fetch_targets

@pytest.mark.parametrize(("leaders", "fetching", "expected"), [
    ({1, 2, 3}, set(), [1, 2, 3]),
    ({1, 2, 3}, {2}, [1, 3]),
    ({1, 2}, {1, 2}, []),
    (set(), set(), []),
    ({1}, {5}, [1]),             # a fetch out to a node that leads nothing now does not hold others back
])
def test_batch_optimized_fetches_from_every_idle_leader(leaders, fetching, expected):
    assert fetch_targets(leaders, fetching=fetching, record_limit=False, rotation=7) == (expected, 7)


def test_record_limit_fetches_from_one_broker_at_a_time_rotating():
    rotation, seen = 0, []
    for _ in range(6):
        targets, rotation = fetch_targets({3, 1, 2}, fetching=set(), record_limit=True, rotation=rotation)
        seen += targets
    assert seen == [1, 2, 3, 1, 2, 3] and rotation == 6


@pytest.mark.parametrize(("leaders", "fetching"), [({1, 2}, {1}), ({1, 2}, {9}), (set(), set())])
def test_record_limit_waits_while_any_fetch_is_out_or_nothing_is_led(leaders, fetching):
    assert fetch_targets(leaders, fetching=fetching, record_limit=True, rotation=4) == ([], 4)


# ----------------------------------------------------------------------------- acks_to_send_now

LEADERS = {"a": 1, "b": 2, "c": None}  # c: not assigned any more, or no known leader


@pytest.mark.parametrize(("session_open", "fetching", "buffered", "record_limit", "fetch_target"),
                         list(itertools.product((True, False), (set(), {1}), (False, True), (False, True),
                                                (None, 1, 2))))
def test_which_acknowledgements_go_out_now(session_open, fetching, buffered, record_limit, fetch_target):
    now = acks_to_send_now({"a", "b", "c"}, leader=LEADERS.get, session_open=lambda node: session_open,
                           fetching=fetching, buffered=buffered, record_limit=record_limit, fetch_target=fetch_target)
    assert "c" in now  # nothing will carry it
    if buffered or not session_open:
        assert now == {"a", "b", "c"}  # no ShareFetch will carry them
    elif record_limit:
        # only the one broker this round fetches from carries acknowledgements (if no fetch is out to it)
        carried = {tp for tp, node in LEADERS.items() if node is not None and node == fetch_target and node not in fetching}
        assert now == {"a", "b", "c"} - carried
    else:
        # carried by the ShareFetch about to go to each idle leader with an open session
        assert now == ({"a"} if 1 in fetching else set()) | {"c"}


def test_a_closed_session_on_one_leader_only_sends_that_leaders_acknowledgements():
    now = acks_to_send_now({"a", "b"}, leader=LEADERS.get, session_open=lambda node: node == 1, fetching=set(),
                           buffered=False, record_limit=False)
    assert now == {"b"}


# ----------------------------------------------------------------------------- partition errors

ALL_ERRORS = [e for e in ErrorCode if e != ErrorCode.none]


@pytest.mark.parametrize("error", ALL_ERRORS, ids=[e.name for e in ALL_ERRORS])
@pytest.mark.parametrize("current_leader", [None, -1, 4])
def test_every_partition_error_has_one_action(error, current_leader):
    action = partition_error_action(error, current_leader)
    if error in LEADER_ERRORS:
        expected = PartitionErrorAction.USE_LEADER_HINT if current_leader == 4 else PartitionErrorAction.REFRESH_METADATA
    elif error in METADATA_ERRORS or error.retriable:
        expected = PartitionErrorAction.REFRESH_METADATA
    else:
        expected = PartitionErrorAction.FAIL
    assert action is expected


def test_known_partition_errors():
    assert partition_error_action(ErrorCode.not_leader_or_follower, 3) is PartitionErrorAction.USE_LEADER_HINT
    assert partition_error_action(ErrorCode.unknown_topic_id, None) is PartitionErrorAction.REFRESH_METADATA
    assert partition_error_action(ErrorCode.topic_authorization_failed, None) is PartitionErrorAction.FAIL
    assert partition_error_action(ErrorCode.kafka_storage_error, None) is PartitionErrorAction.REFRESH_METADATA


@pytest.mark.parametrize("error", list(ErrorCode), ids=[e.name for e in ErrorCode])
def test_which_fetch_errors_end_the_consumer(error):
    expected = error != ErrorCode.none and not error.retriable and error not in SESSION_REFUSAL_ERRORS
    assert fetch_error_is_fatal(error) is expected


def test_known_fetch_errors():
    assert fetch_error_is_fatal(ErrorCode.group_authorization_failed)
    assert fetch_error_is_fatal(ErrorCode.invalid_request)
    for error in (ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch,
                  ErrorCode.not_coordinator, ErrorCode.none):
        assert not fetch_error_is_fatal(error)


# ----------------------------------------------------------------------------- commit retries

@pytest.mark.parametrize(("attempt", "expected"), [(1, 100), (2, 200), (3, 400), (4, 800), (5, 1000), (9, 1000)])
def test_backoff_doubles_up_to_the_maximum(attempt, expected):
    assert retry_backoff_ms(attempt, 100, 1000) == expected


RETRIABLE = KafkaException("moved", ErrorCode.not_leader_or_follower)
FATAL = KafkaException("refused", ErrorCode.invalid_record_state)
# retriable codes, but the topic is gone: Kafka's ShareConsumeRequestManager.handlePartitionError
# does not retry them
DELETED_TOPIC = KafkaException("deleted", ErrorCode.unknown_topic_id)
DELETED_PARTITION = KafkaException("deleted", ErrorCode.unknown_topic_or_partition)


@pytest.mark.parametrize(("outcome", "time_left", "closing", "retried"), [
    (None, True, False, False),        # success: final
    (FATAL, True, False, False),       # not retriable: final
    (RETRIABLE, True, False, True),    # retriable, time left: again
    (RETRIABLE, False, False, False),  # retriable, the deadline comes first: final
    (RETRIABLE, True, True, False),    # retriable but the consumer is closing: final
    (None, False, True, False),
    (DELETED_TOPIC, True, False, False),      # a deleted topic: final at once
    (DELETED_PARTITION, True, False, False),
])
def test_commit_retries(outcome, time_left, closing, retried):
    retry, final = commit_retries({"tp": outcome}, now_ms=1000, backoff_ms=200,
                                  deadline_ms=1500 if time_left else 1100, closing=closing)
    assert (retry, final) == (({"tp"}, {}) if retried else (set(), {"tp": outcome}))
