"""The free-space watermark's decision (`broker.core.disk_watermark`), driven directly: the
threshold is the larger of the two settings, 0 turns it off, the directory goes below under the
threshold and comes back only above threshold + margin, and each crossing is one Transition."""

from __future__ import annotations

import pytest

from quafka.broker.core.disk_watermark import (
    MAX_RESUME_MARGIN_BYTES,
    DiskWatermark,
    Reading,
    Transition,
    resume_margin,
    threshold_bytes,
)

MIB = 1 << 20
GIB = 1 << 30


@pytest.mark.parametrize("total, min_bytes, percent, expected", [
    (100 * GIB, 256 * MIB, 1.0, GIB),  # 1 % of 100 GiB is more than 256 MiB
    (10 * GIB, 256 * MIB, 1.0, 256 * MIB),  # 1 % of 10 GiB (102 MiB) is less
    (48 * MIB, 8 * MIB, 25.0, 12 * MIB),
    (48 * MIB, 0, 25.0, 12 * MIB),
    (48 * MIB, 8 * MIB, 0.0, 8 * MIB),
    (48 * MIB, 0, 0.0, 0),  # off
    (0, 0, 50.0, 0),  # a file system reporting no size, percent only: off rather than refusing everything
])
def test_the_threshold_is_the_larger_of_the_two_settings(total, min_bytes, percent, expected):
    assert threshold_bytes(total, min_bytes, percent) == expected


def test_the_resume_margin_is_five_percent_of_the_threshold_capped():
    assert resume_margin(0) == 0
    assert resume_margin(20 * MIB) == MIB
    assert resume_margin(100 * GIB) == MAX_RESUME_MARGIN_BYTES


def test_below_under_the_threshold_and_back_only_above_threshold_plus_margin():
    w = DiskWatermark()
    total = 100 * MIB
    assert w.admits() and w.observe(Reading(50 * MIB, total), 10 * MIB, 0.0) is None
    assert w.admits()
    assert w.observe(Reading(10 * MIB, total), 10 * MIB, 0.0) is None  # at the threshold: not below
    started = w.observe(Reading(10 * MIB - 1, total), 10 * MIB, 0.0)
    resume = 10 * MIB + 10 * MIB // 20
    assert started == Transition(True, 10 * MIB - 1, 10 * MIB, resume)
    assert not w.admits()
    # hovering around the threshold changes nothing: no flapping, no repeated transitions
    for free in (10 * MIB, 10 * MIB + 1, resume - 1, 5 * MIB):
        assert w.observe(Reading(free, total), 10 * MIB, 0.0) is None
        assert not w.admits()
    cleared = w.observe(Reading(resume, total), 10 * MIB, 0.0)
    assert cleared == Transition(False, resume, 10 * MIB, resume)
    assert w.admits()
    assert w.observe(Reading(resume - 1, total), 10 * MIB, 0.0) is None  # above the threshold: still admits


def test_settings_are_taken_at_each_observation():
    """Dynamic configs: lowering the threshold below the free space clears; 0 turns it off at once."""
    w = DiskWatermark()
    total = 100 * MIB
    assert w.observe(Reading(5 * MIB, total), 10 * MIB, 0.0).below
    assert w.observe(Reading(5 * MIB, total), 0, 20.0) is None  # 20 MiB by percent: still below
    assert w.threshold == 20 * MIB
    cleared = w.observe(Reading(5 * MIB, total), 0, 0.0)
    assert cleared == Transition(False, 5 * MIB, 0, 0) and w.admits()
    assert w.observe(Reading(0, total), 0, 0.0) is None and w.admits()  # off: even an empty disk admits


def test_the_estimate_asks_for_a_measurement_only_near_the_threshold_while_admitting():
    w = DiskWatermark()
    w.observe(Reading(50 * MIB, 100 * MIB), 10 * MIB, 0.0)
    assert w.measure_under == 10 * MIB
    w.observe(Reading(5 * MIB, 100 * MIB), 10 * MIB, 0.0)
    assert w.measure_under == -1  # below: the produce path does not measure; timed checks do
    w.observe(Reading(50 * MIB, 100 * MIB), 0, 0.0)
    assert w.measure_under == -1  # off: never measured for the produce path
