"""The range-based acknowledgement book: RangeMap (every operation, and against a dict-per-offset
model), ack_batches from ranges, the book against the former dict-per-offset book, the cost of a
10,000-offset range in range operations, the renewed-then-acknowledge_range regression, and the
renewing state of a sent RENEW (Kafka's ShareInFlightBatch renewingRecords/renewedRecords)."""

from __future__ import annotations

import sys
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import produce_batch, set_group_configs, wait_until

from quafka.client import _share_acks
from quafka.client._ranges import RangeMap
from quafka.client._share_acks import (
    UNACKNOWLEDGED,
    AcknowledgeType,
    Acknowledgements,
    ack_batches,
    ack_ranges,
    count_offsets,
)
from quafka.client.errors import IllegalStateException
from quafka.client.records import Record, TopicPartition

A = AcknowledgeType
TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


# ----------------------------------------------------------------------------- RangeMap


def _map(*ranges) -> RangeMap:
    return RangeMap(list(ranges))


def test_assign_into_an_empty_map_and_iterate():
    m = RangeMap()
    assert not m and len(m) == 0 and m.count == 0 and list(m) == []
    m.assign(3, 7, "a")
    assert m and len(m) == 1 and m.count == 5 and list(m) == [(3, 7, "a")]
    m.assign(9, 9, "a")  # not touching: a range of its own
    assert m.ranges() == [(3, 7, "a"), (9, 9, "a")] and m.count == 6
    m.assign(5, 4, "z")  # an empty range changes nothing
    assert m.ranges() == [(3, 7, "a"), (9, 9, "a")]


def test_assign_splits_a_range_in_the_middle_and_at_each_edge():
    m = _map((0, 9, "a"))
    m.assign(4, 5, "b")
    assert m.ranges() == [(0, 3, "a"), (4, 5, "b"), (6, 9, "a")] and m.count == 10
    m = _map((0, 9, "a"))
    m.assign(0, 2, "b")  # the left edge
    assert m.ranges() == [(0, 2, "b"), (3, 9, "a")]
    m = _map((0, 9, "a"))
    m.assign(7, 9, "b")  # the right edge
    assert m.ranges() == [(0, 6, "a"), (7, 9, "b")]
    m = _map((0, 9, "a"))
    m.assign(9, 12, "b")  # past the right edge
    assert m.ranges() == [(0, 8, "a"), (9, 12, "b")] and m.count == 13
    m = _map((5, 9, "a"))
    m.assign(2, 5, "b")  # before the left edge
    assert m.ranges() == [(2, 5, "b"), (6, 9, "a")] and m.count == 8


def test_assign_merges_touching_neighbours_of_equal_value_only():
    m = _map((0, 2, "a"), (6, 8, "a"))
    m.assign(3, 5, "a")  # touches both: one range
    assert m.ranges() == [(0, 8, "a")] and m.count == 9
    m = _map((0, 2, "a"), (6, 8, "b"))
    m.assign(3, 5, "a")  # joins the left one only
    assert m.ranges() == [(0, 5, "a"), (6, 8, "b")]
    m = _map((0, 2, "a"), (6, 8, "b"))
    m.assign(3, 5, "b")  # joins the right one only
    assert m.ranges() == [(0, 2, "a"), (3, 8, "b")]
    m = _map((0, 2, "a"), (6, 8, "b"))
    m.assign(3, 5, "c")  # touches both, joins neither
    assert m.ranges() == [(0, 2, "a"), (3, 5, "c"), (6, 8, "b")]
    m = _map((0, 3, "a"), (4, 5, "b"), (6, 9, "a"))
    m.assign(4, 5, "a")  # the hole closes
    assert m.ranges() == [(0, 9, "a")] and m.count == 10


def test_assign_over_many_ranges_replaces_them():
    m = _map((0, 1, "a"), (3, 4, "b"), (6, 7, "c"), (9, 10, "d"))
    m.assign(1, 9, "x")
    assert m.ranges() == [(0, 0, "a"), (1, 9, "x"), (10, 10, "d")] and m.count == 11


def test_fill_sets_only_the_gaps_and_merges():
    m = _map((2, 3, "a"), (6, 7, "b"))
    m.fill(0, 9, "a")
    assert m.ranges() == [(0, 5, "a"), (6, 7, "b"), (8, 9, "a")] and m.count == 10
    m = _map((0, 9, "b"))
    m.fill(3, 5, "a")  # all held: nothing changes
    assert m.ranges() == [(0, 9, "b")] and m.count == 10
    m = _map((0, 2, "a"))
    m.fill(3, 4, "a")  # right after an equal range: joins it
    assert m.ranges() == [(0, 4, "a")]
    m = _map((5, 6, "a"))
    m.fill(3, 4, "b")
    assert m.ranges() == [(3, 4, "b"), (5, 6, "a")] and m.count == 4


def test_remove_splits_at_the_edges():
    m = _map((0, 9, "a"))
    m.remove(3, 5)
    assert m.ranges() == [(0, 2, "a"), (6, 9, "a")] and m.count == 7
    m.remove(0, 0)
    assert m.ranges() == [(1, 2, "a"), (6, 9, "a")]
    m.remove(9, 20)
    assert m.ranges() == [(1, 2, "a"), (6, 8, "a")] and m.count == 5
    m.remove(3, 5)  # nothing there
    assert m.ranges() == [(1, 2, "a"), (6, 8, "a")]
    m.remove(0, 100)
    assert not m and m.count == 0


def test_replace_changes_a_value_and_merges():
    m = _map((0, 2, "u"), (3, 4, "a"), (5, 6, "u"), (8, 8, "u"))
    m.replace("u", "a")
    assert m.ranges() == [(0, 6, "a"), (8, 8, "a")] and m.count == 8
    m.replace("missing", "b")
    assert m.ranges() == [(0, 6, "a"), (8, 8, "a")]


def test_get_contains_covers_and_first_gap():
    m = _map((0, 2, "a"), (3, 4, "b"), (8, 9, "a"))
    assert [m.get(o) for o in range(11)] == ["a", "a", "a", "b", "b", None, None, None, "a", "a", None]
    assert m.get(-1, "none") == "none" and 4 in m and 5 not in m
    assert m.covers(0, 4) and m.covers(1, 3) and m.covers(8, 9)
    assert not m.covers(0, 8) and m.first_gap(0, 8) == 5
    assert m.first_gap(4, 9) == 5 and m.first_gap(5, 5) == 5 and m.first_gap(9, 10) == 10
    assert m.first_gap(-3, 2) == -3 and m.first_gap(2, 3) is None


def test_ranges_are_clipped_to_a_window():
    m = _map((0, 4, "a"), (6, 9, "b"), (12, 14, "c"))
    assert m.ranges(2, 7) == [(2, 4, "a"), (6, 7, "b")]
    assert m.ranges(5, 5) == [] and m.ranges(10, 11) == []
    assert m.ranges(13, None) == [(13, 14, "c")] and m.ranges(None, 0) == [(0, 0, "a")]
    assert m.ranges() == list(m)
    assert repr(_map((1, 2, "a"))) == "RangeMap([(1, 2, 'a')])"


def test_values_without_equality_merge_only_with_themselves():
    one, other = object(), object()
    m = _map((0, 2, one), (3, 5, other))
    assert len(m) == 2
    m.assign(6, 7, other)
    assert m.ranges() == [(0, 2, one), (3, 7, other)]


def test_clear_empties_the_map():
    m = _map((0, 2, "a"), (5, 6, "b"))
    m.clear()
    assert not m and m.count == 0 and m.ranges() == []


_VALUES = st.sampled_from(["a", "b", "c"])


@st.composite
def _window(draw):
    """A range of up to 10,000 offsets in 0..10,000: mostly short ones near each other (edges meet
    often), some long ones."""
    first = draw(st.one_of(st.integers(0, 40), st.integers(0, 10_000)))
    length = draw(st.one_of(st.integers(1, 8), st.integers(1, 10_000)))
    return first, first + length - 1


_OPS = st.lists(st.one_of(
    st.tuples(st.just("assign"), _window(), _VALUES),
    st.tuples(st.just("fill"), _window(), _VALUES),
    st.tuples(st.just("remove"), _window(), st.none()),
    st.tuples(st.just("replace"), st.tuples(_VALUES, _VALUES), st.none()),
), max_size=25)


def _model_runs(model: dict[int, str]) -> list[tuple[int, int, str]]:
    runs: list[tuple[int, int, str]] = []
    for offset in sorted(model):
        value = model[offset]
        if runs and runs[-1][1] + 1 == offset and runs[-1][2] == value:
            runs[-1] = (runs[-1][0], offset, value)
        else:
            runs.append((offset, offset, value))
    return runs


@settings(max_examples=60, deadline=None)
@given(ops=_OPS, probes=st.lists(_window(), min_size=1, max_size=5))
def test_range_map_agrees_with_a_dict_per_offset(ops, probes):
    m, model = RangeMap(), {}
    for op, arg, value in ops:
        if op == "assign":
            m.assign(*arg, value)
            model.update(dict.fromkeys(range(arg[0], arg[1] + 1), value))
        elif op == "fill":
            m.fill(*arg, value)
            for offset in range(arg[0], arg[1] + 1):
                model.setdefault(offset, value)
        elif op == "remove":
            m.remove(*arg)
            for offset in range(arg[0], arg[1] + 1):
                model.pop(offset, None)
        else:
            m.replace(*arg)
            model = {o: arg[1] if v == arg[0] else v for o, v in model.items()}
        assert m.ranges() == _model_runs(model)  # the same offsets and values, neighbours merged
        assert m.count == len(model)
    for first, last in probes:
        gap = next((o for o in range(first, last + 1) if o not in model), None)
        assert m.first_gap(first, last) == gap and m.covers(first, last) == (gap is None)
        assert m.ranges(first, last) == _model_runs({o: v for o, v in model.items() if first <= o <= last})
        assert m.get(first) == model.get(first) and (last in m) == (last in model)


# ----------------------------------------------------------------------------- ack_batches


def _dict_ack_batches(acks: dict[int, int]) -> list[tuple[int, int, tuple[int, ...]]]:
    """The former ack_batches, offset by offset: the reference."""
    out = []
    offsets = sorted(acks)
    i, n = 0, len(offsets)
    while i < n:
        j = i
        while j + 1 < n and offsets[j + 1] == offsets[j] + 1:
            j += 1
        types = [acks[o] for o in offsets[i : j + 1]]
        out.append((offsets[i], offsets[j], (types[0],) if len(set(types)) == 1 else tuple(types)))
        i = j + 1
    return out


def test_ack_batches_from_ranges():
    assert ack_batches([(1, 3, 1), (7, 7, 3)]) == [(1, 3, (1,)), (7, 7, (3,))]
    assert ack_batches([(1, 1, 1), (2, 2, 2), (3, 3, 1)]) == [(1, 3, (1, 2, 1))]
    assert ack_batches([(0, 9999, 1)]) == [(0, 9999, (1,))]
    assert ack_batches([(0, 1, 1), (2, 3, 4), (5, 5, 0)]) == [(0, 3, (1, 1, 4, 4)), (5, 5, (0,))]
    assert ack_batches([(0, 1, 2), (2, 3, 2)]) == [(0, 3, (2,))]  # unmerged equal neighbours: one type
    assert ack_batches([]) == [] and ack_batches({}) == []


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.integers(0, 60), st.integers(0, 4), max_size=40))
def test_ack_batches_of_ranges_match_the_offset_by_offset_batches(acks):
    ranges = ack_ranges(acks)
    assert sum(last - first + 1 for first, last, _ in ranges) == len(acks) == count_offsets(ranges)
    assert {o: t for first, last, t in ranges for o in range(first, last + 1)} == acks
    assert ack_batches(ranges) == ack_batches(acks) == _dict_ack_batches(acks)


# ----------------------------------------------------------------------------- the book


def _record(offset: int, tp: TopicPartition = TP, count: int = 1) -> Record:
    return Record(tp.topic, tp.partition, offset, 0, 0, None, b"v", [], 0, count)


def test_a_record_renewed_then_accepted_by_range_does_not_come_back():
    book = Acknowledgements(explicit=True)
    records = [_record(o) for o in range(4)]
    book.on_delivered(records)
    book.acknowledge_range(TP, 0, 3, A.RENEW)
    sent = book.take_pending()
    assert sent == {TP: [(0, 3, A.RENEW)]}
    book.on_renewed(TP, sent[TP])  # the broker confirmed: they would come back with the next poll
    book.acknowledge_range(TP, 1, 2, A.ACCEPT)  # ... but 1 and 2 are accepted first
    assert book.take_renewed() == [records[0], records[3]]
    book.acknowledge(TP, 0, A.ACCEPT, by_record=True)
    book.acknowledge(TP, 3, A.REJECT, by_record=True)
    assert book.take_pending() == {TP: [(0, 2, A.ACCEPT), (3, 3, A.REJECT)]}
    assert book.delivered == {} and book.records == {}


def test_records_accepted_by_range_while_their_renewal_is_out_do_not_come_back():
    book = Acknowledgements(explicit=True)
    records = [_record(o) for o in range(3)]
    book.on_delivered(records)
    book.acknowledge_range(TP, 0, 2, A.RENEW)
    sent = book.take_pending()
    book.acknowledge_range(TP, 0, 1, A.ACCEPT)  # before the broker answers the renewal
    book.on_renewed(TP, sent[TP])
    assert book.take_renewed() == [records[2]]


def test_a_failed_renewal_forgets_only_the_unacknowledged_records():
    book = Acknowledgements(explicit=True)
    book.on_delivered([_record(o) for o in range(4)])
    book.acknowledge_range(TP, 0, 3, A.RENEW)
    sent = book.take_pending()
    book.acknowledge(TP, 1, A.ACCEPT, by_record=True)
    book.on_renew_failed(TP, sent[TP])
    assert book.unacknowledged() == [] and [(f, l) for f, l, _ in book.delivered[TP]] == [(1, 1)]
    with pytest.raises(IllegalStateException, match="offset 0 is not a record delivered"):
        book.acknowledge(TP, 0, A.ACCEPT, by_record=True)
    assert book.take_pending() == {TP: [(1, 1, A.ACCEPT)]} and book.delivered == {}


def test_a_confirmed_renewal_followed_by_a_failed_one_does_not_hand_the_record_out_again():
    """Soak-test regression (broker restart between two RENEWs): the first renewal is confirmed, the
    second fails; the record is no longer held, so no poll returns it (it did, from ``renewed``) and
    acknowledging it is refused, as Kafka's ShareInFlightBatch.renew/acknowledge."""
    book = Acknowledgements(explicit=True)
    records = [_record(o) for o in range(3)]
    book.on_delivered(records)
    book.acknowledge_range(TP, 0, 2, A.RENEW)
    book.on_renewed(TP, book.take_pending()[TP])  # confirmed: would come back with the next poll
    book.acknowledge_range(TP, 0, 1, A.RENEW)  # renewed again before that poll (2 is left as it is)
    book.on_renew_failed(TP, book.take_pending()[TP])  # the session is gone
    assert book.take_renewed() == [records[2]]
    with pytest.raises(IllegalStateException, match="offset 0 is not a record delivered"):
        book.acknowledge(TP, 0, A.ACCEPT, by_record=True)
    assert [(f, l) for f, l, _ in book.delivered[TP]] == [(2, 2)]


def test_a_sent_renewal_is_renewing_not_unacknowledged_until_the_poll_hands_it_out_again():
    """Regression (RENEW, commit, poll raised "1 records of the previous poll are not acknowledged"):
    as Kafka's ShareInFlightBatch, sending a RENEW moves the record from in flight to renewing
    (takeAcknowledgedRecords: inFlightRecords → renewingRecords), the broker's confirmation makes it
    renewed (renew: → renewedRecords), and the next poll hands it out again, in flight
    (takeRenewals: → inFlightRecords). Only then does explicit mode's poll check count it."""
    book = Acknowledgements(explicit=True)
    records = [_record(o, count=2) for o in range(3)]
    book.on_delivered(records)
    book.acknowledge(TP, 0, A.RENEW, by_record=True)
    book.acknowledge_range(TP, 1, 2, A.ACCEPT)
    assert book.unacknowledged() == [] and not book.renewals_in_flight()
    sent = book.take_pending()  # commit_sync / commit_async
    assert sent == {TP: [(0, 0, A.RENEW), (1, 2, A.ACCEPT)]}
    assert list(book.delivered[TP]) == [(0, 0, _share_acks.RENEWING)] and book.records[TP].ranges()[0][:2] == (0, 0)
    # renewing (commit_async: not answered yet): the poll's check passes, nothing to hand out yet
    assert book.unacknowledged() == [] and book.unacknowledged_count() == 0
    assert book.renewals_in_flight() and book.take_renewed() == [] and book.renewals_in_flight()
    book.on_renewed(TP, [r for r in sent[TP] if r[2] == A.RENEW])  # confirmed: renewed
    assert book.unacknowledged() == [] and not book.renewals_in_flight()
    [again] = book.take_renewed()  # the next poll returns it: the same record, same delivery count
    assert again is records[0] and again.delivery_count == 2
    book.on_delivered([again])
    assert book.unacknowledged() == [(TP, 0)] and not book.renewals_in_flight()  # in flight again
    assert book.take_renewed() == []
    book.acknowledge(TP, 0, A.ACCEPT, by_record=True)
    assert book.take_pending() == {TP: [(0, 0, A.ACCEPT)]}
    assert book.delivered == {} and book.records == {} and book.renewed == {}


def test_a_renewing_record_whose_renewal_fails_is_dropped_and_no_longer_in_flight():
    book = Acknowledgements(explicit=True)
    book.on_delivered([_record(0), _record(1)])
    book.acknowledge_range(TP, 0, 1, A.RENEW)
    sent = book.take_pending()
    assert book.unacknowledged() == [] and book.renewals_in_flight()
    book.on_renew_failed(TP, sent[TP])
    assert not book.renewals_in_flight() and book.take_renewed() == [] and book.delivered == {}
    with pytest.raises(IllegalStateException, match="offset 1 is not a record delivered"):
        book.acknowledge(TP, 1, A.ACCEPT, by_record=True)


def test_an_undecoded_renewal_goes_back_to_the_application():
    """poll_batches keeps no Record to hand out again: a sent RENEW of undecoded offsets leaves them
    unacknowledged (the application still holds them), not renewing."""
    book = Acknowledgements(explicit=True)
    book.on_delivered_ranges(TP, [(0, 4, 1)])
    book.acknowledge_range(TP, 0, 4, A.RENEW)
    book.on_renewed(TP, book.take_pending()[TP])
    assert book.unacknowledged_count() == 5 and not book.renewals_in_flight() and book.take_renewed() == []


def test_renew_by_range_keeps_the_renewed_records():
    book = Acknowledgements(explicit=True)
    records = [_record(o) for o in range(3)]
    book.on_delivered(records)
    book.acknowledge_range(TP, 0, 2, A.RENEW)
    book.on_renewed(TP, book.take_pending()[TP])
    book.acknowledge_range(TP, 0, 2, A.RENEW)  # renewed again before the poll: still handed out
    assert book.take_renewed() == records


def test_records_come_in_runs_and_the_latest_delivery_is_handed_out_again():
    book = Acknowledgements(explicit=True)
    first = [_record(0), _record(1), _record(5), _record(0, TP1), _record(6)]
    book.on_delivered(first)
    first.clear()  # the application owns the list it got
    assert [(f, l) for f, l, _ in book.delivered[TP]] == [(0, 1), (5, 6)]
    assert len(book.records[TP]) == 3  # runs 0-1, 5, 6 (5 and 6 came in separate runs)
    again = _record(5, count=2)
    book.on_delivered([again])
    for offset in (0, 1, 5, 6):
        book.acknowledge(TP, offset, A.RENEW, by_record=True)
    book.acknowledge(TP1, 0, A.ACCEPT, by_record=True)
    sent = book.take_pending()
    assert sent == {TP: [(0, 1, A.RENEW), (5, 6, A.RENEW)], TP1: [(0, 0, A.ACCEPT)]}
    book.on_renewed(TP, sent[TP])
    assert book.take_renewed() == [_record(0), _record(1), again, _record(6)]


def test_renewed_records_keep_a_tuple_of_their_own():
    book = Acknowledgements(explicit=True)
    records = [_record(o) for o in range(100)]
    book.on_delivered(records)
    book.acknowledge_range(TP, 0, 98, A.ACCEPT)
    book.acknowledge(TP, 99, A.RENEW, by_record=True)
    book.take_pending()
    [(first, last, run)] = book.records[TP].ranges()
    assert (first, last) == (99, 99) and run.records == (records[99],)  # the poll's other 99 may go


def test_unacknowledged_with_a_limit_and_a_count():
    book = Acknowledgements(explicit=True)
    book.on_delivered_ranges(TP, [(0, 9_999, 1)])
    book.on_delivered_ranges(TP1, [(5, 6, 1)])
    book.acknowledge_range(TP, 2, 9_998, A.ACCEPT)
    assert book.unacknowledged_count() == 5
    assert book.unacknowledged(limit=3) == [(TP, 0), (TP, 1), (TP, 9_999)]
    assert book.unacknowledged() == [(TP, 0), (TP, 1), (TP, 9_999), (TP1, 5), (TP1, 6)]


def test_pending_partitions_and_add_pending_forms():
    book = Acknowledgements(explicit=False)
    assert book.pending_partitions() == set() and not book.has_pending()
    book.add_pending(TP, {3: 0, 1: 0, 2: 3})
    book.add_pending_offsets(TP1, [9, 7, 8, 11], A.RELEASE)
    book.add_pending_ranges(TP1, [(12, 12, A.RELEASE)])
    book.add_pending(TP, {})
    assert book.pending_partitions() == {TP, TP1}
    assert book.take_pending({TP1}) == {TP1: [(7, 9, A.RELEASE), (11, 12, A.RELEASE)]}
    assert book.take_pending() == {TP: [(1, 1, 0), (2, 2, 3), (3, 3, 0)]}


def test_a_raw_delivery_forgets_the_records_of_its_offsets():
    book = Acknowledgements(explicit=True)
    book.on_delivered([_record(0), _record(1)])
    book.on_delivered_ranges(TP, [(1, 3, 1)])
    book.acknowledge_range(TP, 0, 3, A.RENEW)
    book.on_renewed(TP, book.take_pending()[TP])
    assert book.take_renewed() == [_record(0)]


def test_implicit_mode_accepts_ranges_and_keeps_failed_records_apart():
    book = Acknowledgements(explicit=False)
    book.on_delivered([_record(o) for o in range(5)])
    book.on_failed(TP, 5)
    with pytest.raises(IllegalStateException, match="explicit"):
        book.acknowledge_range(TP, 0, 4, A.ACCEPT)
    with pytest.raises(IllegalStateException, match="cannot be renewed"):
        book.acknowledge(TP, 5, A.RENEW, by_record=False)
    book.accept_delivered()
    book.settle_failed()
    assert book.take_pending() == {TP: [(0, 4, A.ACCEPT), (5, 5, A.RELEASE)]}
    assert book.delivered == {} and book.failed == {}


def test_drop_partitions_forgets_delivered_acknowledged_and_renewed():
    book = Acknowledgements(explicit=True)
    book.on_delivered([_record(0), _record(0, TP1), _record(1, TP1)])
    book.acknowledge(TP1, 0, A.RENEW, by_record=True)
    book.on_renewed(TP1, book.take_pending()[TP1])
    book.acknowledge(TP1, 1, A.ACCEPT, by_record=True)
    book.drop_partitions({TP1})
    assert book.take_renewed() == [] and book.take_pending() == {}
    assert book.unacknowledged() == [(TP, 0)]


class _DictBook:
    """The former book, offset by offset (dicts), with acknowledge_range's renewed fix and Kafka's
    renewing state (a sent RENEW of a decoded record is not unacknowledged until handed out again):
    the reference of the model test."""

    def __init__(self, explicit: bool) -> None:
        self.explicit = explicit
        self.delivered: dict = {}
        self.acked: dict = {}
        self.failed: dict = {}
        self.pending: dict = {}
        self.renewed: list = []
        self.renewing: dict = {}  # tp → offsets whose RENEW was sent (records only), not handed out again

    def _forget_renewed(self, tp, offsets):
        self.renewed = [r for r in self.renewed if not (r.offset in offsets and (r.topic, r.partition) == tp)]

    def on_delivered(self, records):
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            self.delivered.setdefault(tp, {})[r.offset] = r
            self.renewing.get(tp, set()).discard(r.offset)
            self._forget_renewed(tp, {r.offset})

    def on_delivered_ranges(self, tp, ranges):
        current = self.delivered.setdefault(tp, {})
        for first, last, _count in ranges:
            current.update(dict.fromkeys(range(first, last + 1)))
            self.renewing.get(tp, set()).difference_update(range(first, last + 1))
            self._forget_renewed(tp, set(range(first, last + 1)))

    def acknowledge_range(self, tp, first, last, ack_type):
        if not self.explicit:
            raise IllegalStateException("acknowledge_range() needs share.acknowledgement.mode=explicit")
        delivered = self.delivered.get(tp)
        missing = next((o for o in range(first, last + 1) if delivered is None or o not in delivered), None)
        if missing is not None:
            raise _share_acks._not_delivered(tp, missing, "poll_batches()")
        self.acked.setdefault(tp, {}).update(dict.fromkeys(range(first, last + 1), ack_type))
        self.renewing.get(tp, set()).difference_update(range(first, last + 1))
        if ack_type != A.RENEW:
            self.renewed = [r for r in self.renewed
                            if not (first <= r.offset <= last and (r.topic, r.partition) == tp)]

    def on_failed(self, tp, offset):
        self.failed.setdefault(tp, {})[offset] = A.RELEASE

    def acknowledge(self, tp, offset, ack_type, *, by_record):
        failed = self.failed.get(tp)
        if failed is not None and offset in failed and not by_record:
            if ack_type == A.RENEW:
                raise IllegalStateException(f"{tp[0]}-{tp[1]} offset {offset} failed deserialization "
                                            f"and cannot be renewed; acknowledge it ACCEPT, RELEASE or REJECT")
            failed[offset] = ack_type
            return
        if not self.explicit:
            raise IllegalStateException("acknowledge() needs share.acknowledgement.mode=explicit; in implicit mode "
                                        "the next poll() or commit accepts the delivered records")
        delivered = self.delivered.get(tp)
        if delivered is None or offset not in delivered:
            raise _share_acks._not_delivered(tp, offset, "poll()")
        self.acked.setdefault(tp, {})[offset] = ack_type
        self.renewing.get(tp, set()).discard(offset)
        if ack_type != A.RENEW:
            self.renewed = [r for r in self.renewed if not (r.offset == offset and (r.topic, r.partition) == tp)]

    def unacknowledged(self):
        return [(tp, o) for tp, records in self.delivered.items() for o in records
                if o not in self.acked.get(tp, {}) and o not in self.renewing.get(tp, set())]

    def renewals_in_flight(self):
        renewed = {(TopicPartition(r.topic, r.partition), r.offset) for r in self.renewed}
        return any((tp, o) not in renewed for tp, offsets in self.renewing.items() for o in offsets)

    def accept_delivered(self):
        for tp, records in self.delivered.items():
            acked = self.acked.setdefault(tp, {})
            for offset in records:
                acked.setdefault(offset, A.ACCEPT)

    def settle_failed(self):
        for tp, failed in self.failed.items():
            self.pending.setdefault(tp, {}).update(failed)
        self.failed.clear()

    def add_pending(self, tp, acks):
        if acks:
            self.pending.setdefault(tp, {}).update(acks)

    def _move_acked(self):
        for tp, acked in self.acked.items():
            if acked:
                self.pending.setdefault(tp, {}).update(acked)
                delivered = self.delivered.get(tp, {})
                for offset, ack_type in acked.items():
                    if ack_type != A.RENEW:
                        delivered.pop(offset, None)
                    elif delivered.get(offset) is not None:  # a record: renewing until handed out again
                        self.renewing.setdefault(tp, set()).add(offset)
                if not delivered:
                    self.delivered.pop(tp, None)
        self.acked.clear()

    def has_pending(self, renew_only=False):
        self._move_acked()
        if renew_only:
            return any(t == A.RENEW for acks in self.pending.values() for t in acks.values())
        return any(self.pending.values())

    def take_pending(self, partitions=None):
        self._move_acked()
        out = {}
        for tp in list(self.pending):
            if partitions is None or tp in partitions:
                acks = self.pending.pop(tp)
                if acks:
                    out[tp] = acks
        return out

    def on_renewed(self, tp, offsets):
        delivered = self.delivered.get(tp, {})
        renewing = self.renewing.get(tp, set())
        for offset in sorted(offsets):
            if offset in renewing:
                self.renewed.append(delivered[offset])

    def on_renew_failed(self, tp, offsets):
        # no longer held: not handed out again, even if an earlier renewal was confirmed
        self.renewed = [r for r in self.renewed if not (r.offset in offsets and (r.topic, r.partition) == tp)]
        delivered = self.delivered.get(tp, {})
        acked = self.acked.get(tp, {})
        for offset in offsets:
            if offset not in acked:
                delivered.pop(offset, None)
                self.renewing.get(tp, set()).discard(offset)
        if not delivered:
            self.delivered.pop(tp, None)

    def take_renewed(self):
        out, self.renewed = self.renewed, []
        for r in out:  # in flight again
            self.renewing.get(TopicPartition(r.topic, r.partition), set()).discard(r.offset)
        return out

    def drop_partitions(self, partitions):
        for tp in partitions:
            self.delivered.pop(tp, None)
            self.acked.pop(tp, None)
            self.renewing.pop(tp, None)
        self.renewed = [r for r in self.renewed if TopicPartition(r.topic, r.partition) not in partitions]


_TPS = st.sampled_from([TP, TP, TP, TP1])
_OFFSET = st.integers(0, 12)
_TYPE = st.sampled_from(list(A))
_SPAN = st.tuples(_OFFSET, st.integers(0, 6)).map(lambda s: (s[0], s[0] + s[1]))

_DELIVER = st.tuples(st.just("deliver"), _TPS, st.lists(_SPAN, min_size=1, max_size=3))
_ACK_DELIVERED = st.tuples(st.just("acknowledge_delivered"), _TPS, _TYPE)
_SEND = st.tuples(st.just("send"), st.just(None), st.tuples(st.sets(_TPS), st.sampled_from(["ok", "failed", "later"])))
_ANSWER = st.tuples(st.just("answer"), st.just(None), st.booleans())
_POLL = st.tuples(st.just("poll"), st.just(None), st.none())

# the operations renewals need come more often (repeated: one_of picks its branches alike)
_BOOK_OPS = st.lists(st.one_of(
    _DELIVER, _DELIVER, _ACK_DELIVERED, _ACK_DELIVERED, _ACK_DELIVERED, _SEND, _SEND, _SEND, _ANSWER, _POLL, _POLL,
    st.tuples(st.just("acknowledge"), _TPS, st.tuples(_OFFSET, _TYPE, st.booleans())),
    st.tuples(st.just("acknowledge_range"), _TPS, st.tuples(_SPAN, _TYPE)),
    st.tuples(st.just("on_failed"), _TPS, _OFFSET),
    st.tuples(st.just("add_pending"), _TPS, st.dictionaries(_OFFSET, st.integers(0, 3), max_size=4)),
    st.tuples(st.just("drop"), st.sets(_TPS), st.none()),
), min_size=20, max_size=60)


def _as_dict(pending):
    return {tp: {o: t for first, last, t in ranges for o in range(first, last + 1)} for tp, ranges in pending.items()}


def _answer_renewals(book, ref, outstanding, ok: bool) -> None:
    name = "on_renewed" if ok else "on_renew_failed"
    for tp, renews in outstanding:
        getattr(book, name)(tp, renews)
        getattr(ref, name)(tp, {o for first, last, _ in renews for o in range(first, last + 1)})
    outstanding.clear()


def _renewed_key(records):
    return sorted({(r.partition, r.offset, r.delivery_count) for r in records})


@settings(max_examples=300, deadline=None)
@given(explicit=st.booleans(), raw=st.booleans(), ops=_BOOK_OPS)
def test_the_book_agrees_with_the_offset_by_offset_book(explicit, raw, ops):
    book, ref = Acknowledgements(explicit), _DictBook(explicit)
    generation = 0
    outstanding = []  # renewals sent, not answered yet

    def both(name, *args, **kwargs):
        results = []
        for target in (book, ref):
            try:
                results.append((getattr(target, name)(*args, **kwargs), None))
            except IllegalStateException as exc:
                results.append((None, str(exc)))
        assert results[0][1] == results[1][1], (name, args, results)
        return results[0][0], results[1][0]

    for op, tp, arg in ops:
        if op == "deliver":
            generation += 1
            if raw:
                both("on_delivered_ranges", tp, [(first, last, generation) for first, last in arg])
            else:
                records = [_record(o, tp, generation) for first, last in arg for o in range(first, last + 1)]
                both("on_delivered", records)
        elif op == "acknowledge":
            offset, kind, by_record = arg
            both("acknowledge", tp, offset, kind, by_record=by_record)
        elif op == "acknowledge_delivered":  # every delivered record of tp, one by one
            for offset in sorted(ref.delivered.get(tp, ())):
                both("acknowledge", tp, offset, arg, by_record=True)
        elif op == "acknowledge_range":
            (first, last), kind = arg
            both("acknowledge_range", tp, first, last, kind)
        elif op == "on_failed":
            both("on_failed", tp, arg)
        elif op == "add_pending":
            both("add_pending", tp, arg)
        elif op == "send":  # a commit: take (some of) the pending acknowledgements
            partitions, answer = arg
            if not explicit:
                both("accept_delivered")
            both("settle_failed")
            assert book.has_pending() == ref.has_pending()
            assert book.has_pending(renew_only=True) == ref.has_pending(renew_only=True)
            assert book.pending_partitions() == {t for t, acks in ref.pending.items() if acks}
            sent, ref_sent = both("take_pending", partitions or None)
            assert _as_dict(sent) == ref_sent
            for t, ranges in sent.items():
                renews = [r for r in ranges if r[2] == A.RENEW]
                if renews:
                    outstanding.append((t, renews))
            if answer != "later":
                _answer_renewals(book, ref, outstanding, answer == "ok")
        elif op == "answer":  # the broker answers the renewals sent
            _answer_renewals(book, ref, outstanding, arg)
        elif op == "poll":
            renewed = book.take_renewed()
            assert _renewed_key(renewed) == _renewed_key(ref.take_renewed())
            both("on_delivered", renewed)
        else:
            both("drop_partitions", tp)
        assert sorted(book.unacknowledged()) == sorted(ref.unacknowledged())
        assert book.unacknowledged_count() == len(ref.unacknowledged())
        assert book.renewals_in_flight() == ref.renewals_in_flight()


# ----------------------------------------------------------------------------- cost in range operations


class _Counting:
    """Counts calls of RangeMap's methods and the Python lines run in the book and RangeMap."""

    def __init__(self, monkeypatch) -> None:
        self.calls = 0
        self.lines = 0
        for name in ("assign", "fill", "remove", "replace", "ranges", "first_gap", "get", "__contains__",
                     "__iter__", "_splice"):
            original = getattr(RangeMap, name)

            def counted(*args, _original=original, **kwargs):
                self.calls += 1
                return _original(*args, **kwargs)

            monkeypatch.setattr(RangeMap, name, counted)
        self._files = {_share_acks.__file__, sys.modules[RangeMap.__module__].__file__}

    def run(self, fn):
        """fn(), counting the lines it runs in the book's modules (a per-offset loop would show)."""
        def tracer(frame, event, _arg):
            if frame.f_code.co_filename not in self._files:
                return None

            def local(_frame, event, _arg):
                if event == "line":
                    self.lines += 1
                return local
            return local

        previous = sys.gettrace()
        sys.settrace(tracer)
        try:
            return fn()
        finally:
            sys.settrace(previous)


def _deliver_acknowledge_send(size: int, monkeypatch) -> tuple[int, int, Acknowledgements, list]:
    counting = _Counting(monkeypatch)
    book = Acknowledgements(explicit=True)

    def scenario():
        book.on_delivered_ranges(TP, [(1_000, 1_000 + size - 1, 1)])
        assert book.unacknowledged(limit=5)
        assert book.unacknowledged_count() == size
        book.acknowledge_range(TP, 1_000, 1_000 + size - 1, A.ACCEPT)
        assert book.unacknowledged(limit=5) == []
        assert book.has_pending()
        pending = book.take_pending()
        return ack_batches(pending[TP])

    batches = counting.run(scenario)
    monkeypatch.undo()
    return counting.calls, counting.lines, book, batches


def test_a_10000_offset_range_costs_the_same_range_operations_as_a_10_offset_one(monkeypatch):
    small_calls, small_lines, _, small_batches = _deliver_acknowledge_send(10, monkeypatch)
    calls, lines, book, batches = _deliver_acknowledge_send(10_000, monkeypatch)
    assert small_batches == [(1_000, 1_009, (A.ACCEPT,))] and batches == [(1_000, 10_999, (A.ACCEPT,))]
    assert calls == small_calls and lines == small_lines  # independent of the range's size
    assert calls < 40
    assert book.delivered == {} and book.pending == {}


def test_records_of_a_10000_offset_poll_cost_two_range_operations_per_run(monkeypatch):
    counts = []
    for size in (10, 10_000):
        records = [_record(o) for o in range(size)]
        counting = _Counting(monkeypatch)
        book = Acknowledgements(explicit=True)
        book.on_delivered(records)  # one pass over the records to find the runs; a fill and an assign
        book.acknowledge_range(TP, 0, size - 1, A.RENEW)
        sent = book.take_pending()
        book.on_renewed(TP, sent[TP])
        assert len(book.delivered[TP]) == len(book.records[TP]) == len(book.renewed[TP]) == 1
        book.acknowledge_range(TP, 0, size - 1, A.ACCEPT)
        assert book.take_pending() == {TP: [(0, size - 1, A.ACCEPT)]} and book.take_renewed() == []
        counts.append(counting.calls)
        monkeypatch.undo()
    assert counts[0] == counts[1] < 60


# ----------------------------------------------------------------------------- against a broker


@pytest.fixture(scope="module")
def bootstrap():
    from quafka import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker.bootstrap_servers


def test_consumer_does_not_hand_out_again_a_renewed_record_accepted_by_range(bootstrap):
    """RENEW, commit (the broker confirms the renewal), then acknowledge_range ACCEPT and commit:
    the next poll must not return the records again (it did, when acknowledge_range left them in
    the book's renewed set)."""
    from quafka.client import Admin, ShareConsumer

    topic, group = f"sa-{uuid.uuid4().hex[:8]}", f"sag-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({topic: (1, 1)})
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest", "share.assignment.interval.ms": "0"})
    produce_batch(bootstrap, topic, 3)
    config = {"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"}
    with ShareConsumer(config) as consumer:
        consumer.subscribe([topic])
        records = wait_until(lambda: consumer.poll(0.5), 20, message="records")
        offsets = [r.offset for r in records]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
        for record in records:
            consumer.acknowledge(record, A.RENEW)
        assert set(consumer.commit_sync(10).values()) == {None}
        consumer.acknowledge_range(topic, 0, offsets[0], offsets[-1], A.ACCEPT)
        assert set(consumer.commit_sync(10).values()) == {None}
        assert consumer.poll(0.5) == []


def test_unacknowledged_constant_is_no_wire_type():
    assert UNACKNOWLEDGED not in {0, *A}
