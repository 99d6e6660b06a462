"""quafka.dashboard.strip: the in-flight window as a strip, the delivery-count histogram and the lock
expiries (pure). Hypothesis properties print their falsifying example and a reproduction blob on
failure (``print_blob``); rerun one with ``@reproduce_failure`` or ``--hypothesis-seed``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quafka.client import InFlightPartitionView, InFlightRange
from quafka.dashboard.strip import STATES, LockExpiry, build_strip, delivery_histogram, lock_expiries, state_token

SETTINGS = settings(max_examples=300, deadline=None, print_blob=True)


def row(first, last, state, *, count=1, member=None, lock=None, due=None, wait="", blocked=False):
    return InFlightRange(first, last, state, count, member, f"client-{member}" if member else None,
                         "/127.0.0.1" if member else None, lock, due, wait, blocked, False, None)


def window(*ranges, start=0, end=9, truncated=False):
    return InFlightPartitionView("jobs", 0, start, end, start, end + 1, 0, 200, 0, 0, 0, False, truncated, None,
                                 tuple(ranges), ())


# the scripted scenario of the acceptance 2: acquired by two members, released (backoff),
# rejected (archived), delivery time, acknowledged
SCENARIO = window(
    row(0, 1, "ACKNOWLEDGED"),
    row(2, 3, "ACQUIRED", member="a", lock=30_000),
    row(4, 4, "AVAILABLE", count=1, wait="backoff", due=1_000_000),
    row(5, 5, "ARCHIVED", count=1),
    row(6, 7, "ACQUIRED", member="b", lock=5_000, count=2),
    row(8, 8, "AVAILABLE", count=0, wait="delivery-time", due=2_000_000),
    row(9, 9, "ACQUIRED", member="a", lock=30_000),
)


def test_state_tokens():
    assert [state_token(r) for r in SCENARIO.ranges] == [
        "acknowledged", "acquired", "waiting-backoff", "archived", "acquired", "waiting-delivery", "acquired"]
    assert state_token(row(0, 0, "AVAILABLE")) == "available"
    assert state_token(row(0, 0, "ARCHIVING")) == "archiving"
    with pytest.raises(ValueError, match="'PARKED'"):
        state_token(row(3, 4, "PARKED"))


def test_the_scenario_is_drawn_exactly_with_member_slots():
    strip = build_strip(SCENARIO, 100)
    assert [(s.first_offset, s.last_offset, s.state, s.member_id, s.member_index, s.x, s.width, s.mixed)
            for s in strip.segments] == [
        (0, 1, "acknowledged", None, None, 0.0, 20.0, False),
        (2, 3, "acquired", "a", 0, 20.0, 20.0, False),
        (4, 4, "waiting-backoff", None, None, 40.0, 10.0, False),
        (5, 5, "archived", None, None, 50.0, 10.0, False),
        (6, 7, "acquired", "b", 1, 60.0, 20.0, False),
        (8, 8, "waiting-delivery", None, None, 80.0, 10.0, False),
        (9, 9, "acquired", "a", 0, 90.0, 10.0, False),
    ]
    assert strip.members == (("a", "client-a", "/127.0.0.1"), ("b", "client-b", "/127.0.0.1"))
    assert dict(strip.counts) == {"acquired": 5, "archiving": 0, "waiting-backoff": 1, "waiting-delivery": 1,
                                  "available": 0, "archived": 1, "acknowledged": 2}
    assert [s for s, _ in strip.counts] == list(STATES)
    assert strip.segments[4].title == ("offsets 6-7: acquired by b (client-b@127.0.0.1); lock left 5.0s; delivered 2 "
                                       "times")
    assert strip.segments[2].title == ("offset 4: available, waiting for its redelivery backoff; due "
                                       "1970-01-01T00:16:40.000Z; delivered 1 time")
    assert (strip.topic, strip.partition, strip.start_offset, strip.end_offset, strip.width_px, strip.truncated) == (
        "jobs", 0, 0, 9, 100, False)


def test_adjacent_ranges_merge_only_when_nothing_shown_differs():
    same = window(row(0, 2, "ACKNOWLEDGED"), row(3, 5, "ACKNOWLEDGED"), row(6, 6, "ACQUIRED", member="a", lock=9),
                  row(7, 7, "ACQUIRED", member="a", lock=9), row(8, 8, "ACQUIRED", member="a", lock=10),
                  row(9, 9, "ACQUIRED", member="b", lock=10))
    assert [(s.first_offset, s.last_offset) for s in build_strip(same, 10).segments] == [(0, 5), (6, 7), (8, 8), (9, 9)]
    # a gap between two equal ranges is not bridged: it is not drawn
    gap = window(row(0, 2, "ARCHIVED"), row(5, 9, "ARCHIVED"))
    assert [(s.first_offset, s.last_offset, s.x, s.width) for s in build_strip(gap, 10).segments] == [
        (0, 2, 0.0, 3.0), (5, 9, 5.0, 5.0)]
    deliveries = window(row(0, 4, "AVAILABLE", count=1), row(5, 9, "AVAILABLE", count=2))
    assert len(build_strip(deliveries, 10).segments) == 2


def test_a_big_window_is_drawn_in_columns_with_the_dominant_state():
    # 1000 offsets on 10 columns of 100: one acquired record among acknowledged ones takes its column
    big = window(row(0, 449, "ACKNOWLEDGED"), row(450, 450, "ACQUIRED", member="m", lock=100),
                 row(451, 999, "ACKNOWLEDGED"), end=999)
    strip = build_strip(big, 10)
    assert [(s.first_offset, s.last_offset, s.state, s.mixed, s.x, s.width) for s in strip.segments] == [
        (0, 399, "acknowledged", False, 0.0, 4.0),
        (400, 499, "acquired", True, 4.0, 1.0),
        (500, 999, "acknowledged", False, 5.0, 5.0),
    ]
    mixed = strip.segments[1]
    assert (mixed.member_id, mixed.member_index, mixed.delivery_count) == ("m", 0, 1)
    assert mixed.title == ("offsets 400-499 (3 ranges): acquired 1, acknowledged 99; held by m (client-m@127.0.0.1); "
                           "delivered up to 1 time")
    # two holders in one column: the column is acquired, held by no one member
    two = build_strip(window(row(0, 0, "ACQUIRED", member="a"), row(1, 1, "ACQUIRED", member="b", count=3),
                             end=99), 10)
    assert [(s.state, s.member_id, s.member_index, s.delivery_count, s.mixed) for s in two.segments] == [
        ("acquired", None, None, 3, True)]
    assert two.segments[0].title.endswith("held by several members; delivered up to 3 times")
    assert two.members == (("a", "client-a", "/127.0.0.1"), ("b", "client-b", "/127.0.0.1"))


def test_member_slots_wrap_after_eight():
    ranges = [row(i, i, "ACQUIRED", member=f"m{i}") for i in range(10)]
    strip = build_strip(window(*ranges), 10)
    assert [s.member_index for s in strip.segments] == [0, 1, 2, 3, 4, 5, 6, 7, 0, 1]
    assert len(strip.members) == 10


def test_empty_window_truncation_and_ranges_outside():
    assert build_strip(window(start=5, end=4), 10).segments == ()
    cut = build_strip(window(row(0, 3, "ACQUIRED", member="a"), truncated=True), 10)
    assert cut.truncated and [(s.first_offset, s.last_offset) for s in cut.segments] == [(0, 3)]
    # a range reaching past the window is clipped when drawn and counted whole
    out = build_strip(window(row(8, 12, "ARCHIVED")), 10)
    assert [(s.first_offset, s.last_offset, s.x, s.width) for s in out.segments] == [(8, 9, 8.0, 2.0)]
    assert dict(out.counts)["archived"] == 5
    with pytest.raises(ValueError, match="width_px"):
        build_strip(SCENARIO, 0)


def test_delivery_histogram_counts_unsettled_records():
    assert delivery_histogram(SCENARIO) == ((0, 1), (1, 4), (2, 2))
    assert delivery_histogram(window(row(0, 9, "ACKNOWLEDGED"))) == ()
    assert delivery_histogram(window(row(0, 4, "ARCHIVING", count=5))) == ((5, 5),)


def test_lock_expiries_soonest_first():
    assert lock_expiries(SCENARIO, 1_000) == (
        LockExpiry(6, 7, "b", "client-b", 6_000), LockExpiry(2, 3, "a", "client-a", 31_000),
        LockExpiry(9, 9, "a", "client-a", 31_000))
    assert lock_expiries(SCENARIO, 1_000, limit=1) == (LockExpiry(6, 7, "b", "client-b", 6_000),)
    assert lock_expiries(window(row(0, 0, "ACQUIRED", member="a")), 0) == ()  # no lock returned
    with pytest.raises(ValueError, match="limit"):
        lock_expiries(SCENARIO, 0, limit=-1)


# ----------------------------------------------------------------------------- properties

KINDS = [("ACQUIRED", ""), ("ARCHIVING", ""), ("AVAILABLE", "backoff"), ("AVAILABLE", "delivery-time"),
         ("AVAILABLE", ""), ("ARCHIVED", ""), ("ACKNOWLEDGED", "")]


@st.composite
def windows(draw):
    start = draw(st.integers(0, 10_000))
    pieces = draw(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 400), st.sampled_from(KINDS),
                                     st.sampled_from([None, "a", "b", "c"]), st.integers(0, 5)), max_size=40))
    ranges, at = [], start
    for gap, length, (state, wait), member, count in pieces:
        at += gap
        held = member if state == "ACQUIRED" else None
        ranges.append(row(at, at + length - 1, state, count=count, member=held, lock=1000 if held else None,
                          due=5 if wait else None, wait=wait))
        at += length
    end = max(at - 1 + draw(st.integers(0, 50)), start)
    return window(*ranges, start=start, end=end)


@SETTINGS
@given(windows(), st.integers(1, 1500))
def test_segments_are_sorted_disjoint_and_inside(view, width_px):
    strip = build_strip(view, width_px)
    span = view.end_offset - view.start_offset + 1
    previous_end, previous_last = 0.0, view.start_offset - 1
    for s in strip.segments:
        assert s.state in STATES and s.width >= 1 - 1e-9
        assert s.x >= previous_end - 1e-9 and s.x + s.width <= width_px + 1e-9
        assert previous_last < s.first_offset <= s.last_offset <= view.end_offset
        previous_end, previous_last = s.x + s.width, s.last_offset
    if span > width_px:  # downsampled: whole columns, at most one segment each
        assert len(strip.segments) <= width_px
        assert all(s.x == int(s.x) and s.width == int(s.width) for s in strip.segments)
    assert dict(strip.counts) == {
        t: sum(r.last_offset - r.first_offset + 1 for r in view.ranges if state_token(r) == t) for t in STATES}


@SETTINGS
@given(windows(), st.integers(1, 1500))
def test_every_returned_offset_is_in_exactly_one_segment_when_not_downsampled(view, width_px):
    span = view.end_offset - view.start_offset + 1
    strip = build_strip(view, max(width_px, span))
    covered = [o for s in strip.segments for o in range(s.first_offset, s.last_offset + 1)]
    returned = [o for r in view.ranges for o in range(r.first_offset, r.last_offset + 1)]
    assert covered == returned
    scale = strip.width_px / span
    for s in strip.segments:
        assert s.x == pytest.approx((s.first_offset - view.start_offset) * scale)
        assert s.width == pytest.approx((s.last_offset - s.first_offset + 1) * scale)
        assert not s.mixed
        members = {(r.member_id, state_token(r)) for r in view.ranges
                   if r.first_offset <= s.last_offset and r.last_offset >= s.first_offset}
        assert members == {(s.member_id, s.state)}


@SETTINGS
@given(windows(), st.integers(1, 300))
def test_downsampled_columns_keep_the_most_important_state(view, width_px):
    strip = build_strip(view, width_px)
    for s in strip.segments:
        inside = [state_token(r) for r in view.ranges
                  if r.first_offset <= s.last_offset and r.last_offset >= s.first_offset]
        assert s.state == min(inside, key=STATES.index)
        if s.mixed:
            assert len(inside) > 1 and s.width == 1
        else:
            assert set(inside) == {s.state}
    histogram = delivery_histogram(view)
    assert [c for c, _ in histogram] == sorted({r.delivery_count for r in view.ranges
                                                if r.state not in ("ACKNOWLEDGED", "ARCHIVED")})
