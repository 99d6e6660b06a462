"""The record-state transition table (kafka-reference §4.1) as a total function."""

import itertools

import pytest

from quafka.broker.core.record_state import (
    ACK_ACCEPT,
    ACK_EVENTS,
    ACK_GAP,
    ACK_REJECT,
    ACK_RELEASE,
    ACK_RENEW,
    TRANSITIONS,
    Event,
    IllegalTransition,
    RecordState,
    next_state,
    persisted_state,
)

A, Q, K, G, X = (RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED,
                 RecordState.ARCHIVING, RecordState.ARCHIVED)
ALL_PAIRS = list(itertools.product(RecordState, Event))


@pytest.mark.parametrize(("state", "event"), ALL_PAIRS, ids=[f"{s.name}-{e.name}" for s, e in ALL_PAIRS])
def test_every_state_and_event_gives_the_table_entry_or_illegal_transition(state, event):
    try:
        result = next_state(state, event)
    except IllegalTransition as exc:
        assert (state, event) not in TRANSITIONS
        assert exc.state is state and exc.event is event
        assert state.name in str(exc)
    else:
        assert TRANSITIONS[(state, event)] is result
        assert isinstance(result, RecordState)


def test_table_only_mentions_known_states_and_events():
    for (state, event), target in TRANSITIONS.items():
        assert isinstance(state, RecordState) and isinstance(event, Event) and isinstance(target, RecordState)


def test_acquire_moves_available_to_acquired():
    assert next_state(A, Event.ACQUIRE) is Q


def test_release_returns_an_acquired_record_to_available():
    assert next_state(Q, Event.RELEASE) is A
    assert next_state(Q, Event.LOCK_EXPIRED) is A


def test_release_or_lock_expiry_at_the_delivery_limit_archives():
    assert next_state(Q, Event.RELEASE_AT_LIMIT) is X
    assert next_state(Q, Event.LOCK_EXPIRED_AT_LIMIT) is X


def test_reject_and_gap_archive_an_acquired_record():
    assert next_state(Q, Event.REJECT) is X
    assert next_state(Q, Event.GAP) is X


def test_accept_acknowledges_an_acquired_record():
    assert next_state(Q, Event.ACCEPT) is K


def test_renew_keeps_an_acquired_record_acquired():
    assert next_state(Q, Event.RENEW) is Q


@pytest.mark.parametrize("event", [Event.ACCEPT, Event.RELEASE, Event.RELEASE_AT_LIMIT, Event.REJECT, Event.GAP,
                                   Event.RENEW, Event.LOCK_EXPIRED, Event.LOCK_EXPIRED_AT_LIMIT,
                                   *sorted((Event.REJECT_TO_DLQ, Event.RELEASE_AT_LIMIT_TO_DLQ, Event.LOCK_EXPIRED_AT_LIMIT_TO_DLQ), key=lambda e: e.name)])
def test_an_available_record_cannot_be_acknowledged_released_renewed_or_expired(event):
    with pytest.raises(IllegalTransition):
        next_state(A, event)


@pytest.mark.parametrize("state", [Q, K, G, X])
def test_only_an_available_record_can_be_acquired(state):
    with pytest.raises(IllegalTransition):
        next_state(state, Event.ACQUIRE)


@pytest.mark.parametrize("state", [K, X])
def test_terminal_states_take_no_event_but_the_start_offset_passing(state):
    assert state.terminal
    for event in Event:
        if event is Event.START_OFFSET_MOVED:
            assert next_state(state, event) is state
        else:
            with pytest.raises(IllegalTransition):
                next_state(state, event)


def test_only_acknowledged_and_archived_are_terminal():
    assert {s for s in RecordState if s.terminal} == {K, X}


def test_the_start_offset_passing_archives_every_non_terminal_state():
    for state in (A, Q, G):
        assert next_state(state, Event.START_OFFSET_MOVED) is X


def test_archiving_ends_archived_when_the_dead_letter_is_written():
    assert next_state(G, Event.DEAD_LETTER_DONE) is X
    for state in (A, Q, K, X):
        with pytest.raises(IllegalTransition):
            next_state(state, Event.DEAD_LETTER_DONE)


_TO_DLQ_EVENTS = {Event.REJECT_TO_DLQ, Event.RELEASE_AT_LIMIT_TO_DLQ, Event.LOCK_EXPIRED_AT_LIMIT_TO_DLQ}
# quafka's extensions: an operator's force archive (of an acquired or available record) and a key's
# later record following a dead-lettered one (an available record)
_EXTENSION_TO_DLQ = {(Q, Event.FORCE_ARCHIVE_TO_DLQ), (A, Event.FORCE_ARCHIVE_TO_DLQ), (A, Event.KEY_FAILED_TO_DLQ)}


def test_only_the_dead_letter_events_enter_archiving_and_kafkas_only_from_acquired():
    entering = {(s, e) for (s, e), t in TRANSITIONS.items() if t is G}
    assert entering == {(Q, e) for e in _TO_DLQ_EVENTS} | _EXTENSION_TO_DLQ


def test_force_actions_move_acquired_and_available_records_only():
    for state in (A, Q):
        assert next_state(state, Event.FORCE_RELEASE) is A
        assert next_state(state, Event.FORCE_ARCHIVE) is X
        assert next_state(state, Event.FORCE_ARCHIVE_TO_DLQ) is G
    for state in (K, G, X):
        for event in (Event.FORCE_RELEASE, Event.FORCE_ARCHIVE, Event.FORCE_ARCHIVE_TO_DLQ):
            with pytest.raises(IllegalTransition):
                next_state(state, event)


def test_a_key_follows_its_failed_record_only_from_available():
    assert next_state(A, Event.KEY_FAILED) is X
    assert next_state(A, Event.KEY_FAILED_TO_DLQ) is G
    for state in (Q, K, G, X):
        for event in (Event.KEY_FAILED, Event.KEY_FAILED_TO_DLQ):
            with pytest.raises(IllegalTransition):
                next_state(state, event)


@pytest.mark.parametrize("event", sorted(_TO_DLQ_EVENTS, key=lambda e: e.name))
def test_a_dead_letter_event_is_illegal_outside_acquired(event):
    for state in (A, K, G, X):
        with pytest.raises(IllegalTransition):
            next_state(state, event)


def test_archiving_is_not_terminal_and_takes_only_the_dead_letter_done_or_the_start_offset():
    assert not G.terminal
    legal = {e for e in Event if (G, e) in TRANSITIONS}
    assert legal == {Event.DEAD_LETTER_DONE, Event.START_OFFSET_MOVED}


def test_same_state_transitions_are_limited_to_renew_the_start_offset_passing_and_force_release():
    same = {(s, e) for (s, e), t in TRANSITIONS.items() if s is t}
    assert same == {(Q, Event.RENEW), (K, Event.START_OFFSET_MOVED), (X, Event.START_OFFSET_MOVED),
                    (A, Event.FORCE_RELEASE)}


def test_ack_types_map_to_their_events():
    assert (ACK_GAP, ACK_ACCEPT, ACK_RELEASE, ACK_REJECT, ACK_RENEW) == (0, 1, 2, 3, 4)
    assert ACK_EVENTS == {0: Event.GAP, 1: Event.ACCEPT, 2: Event.RELEASE, 3: Event.REJECT, 4: Event.RENEW}


def test_acquired_is_persisted_as_available_and_everything_else_as_itself():
    assert persisted_state(Q) is A
    for state in (A, K, G, X):
        assert persisted_state(state) is state


def test_state_ids_are_the_wire_ids():
    assert [int(s) for s in (A, Q, K, G, X)] == [0, 1, 2, 3, 4]
