"""The in-flight strip matches the scripted scenario (issue 30, acceptance 2): records acquired by
two members, released, rejected (archived through the DLQ), accepted and waiting for their
redelivery backoff — checked in the DOM (each segment's data-* attributes against the Admin's
`describe_in_flight` and against the script), and in the screenshot the test saves (the colour
drawn under each segment is the fill its state's CSS gives it)."""

from __future__ import annotations

import urllib.parse

import pytest
from selenium.webdriver.common.by import By

from support import dashboard_scenario as s
from support import wait_until
from support.browser import png_pixels

pytestmark = pytest.mark.xdist_group("browser")  # one worker: one Chromium, one scenario broker

# the strip's state for each (Admin state, wait reason) (quafka.dashboard.strip.STATES)
STRIP_STATE = {("ACQUIRED", ""): "acquired", ("AVAILABLE", ""): "available", ("AVAILABLE", "backoff"): "waiting-backoff",
               ("AVAILABLE", "delivery-time"): "waiting-delivery", ("ACKNOWLEDGED", ""): "acknowledged",
               ("ARCHIVED", ""): "archived", ("ARCHIVING", ""): "archiving"}


def segments(browser) -> list[dict]:
    return browser.driver.execute_script("""
        return [...document.querySelectorAll('#strip rect.seg')].map(r => {
            const box = r.getBoundingClientRect(), strip = document.getElementById('strip').getBoundingClientRect();
            return Object.assign({left: box.left - strip.left, width: box.width, top: box.top - strip.top,
                                  height: box.height, fill: getComputedStyle(r).fill, cls: r.getAttribute('class')},
                                 r.dataset);
        })""")


def by_offset(segs: list[dict]) -> dict[int, tuple[str, str | None]]:
    out = {}
    for g in segs:
        for o in range(int(g["first"]), int(g["last"]) + 1):
            out[o] = (g["state"], g["clientId"] or None)
    return out


def test_the_strip_draws_the_scripted_window_state_by_state_and_holder_by_holder(browser, dashboards, admin):
    browser.open(f"{dashboards.readonly}/share-group?group={urllib.parse.quote(s.GROUP)}"
                 f"&topic={s.TOPIC}&partition=0")
    segs = segments(browser)
    view = admin.describe_in_flight(s.GROUP, [s.TOPIC])[(s.TOPIC, 0)]
    expected = {o: (STRIP_STATE[(state, wait)], holder) for o, (state, wait, holder) in s.EXPECTED.items()}
    assert by_offset(segs) == expected
    assert by_offset(segs) == {o: (STRIP_STATE[(st, w)], h) for o, (st, w, h) in s.offset_states(view).items()}
    assert all(g["mixed"] == "false" for g in segs), segs  # 13 offsets in 1,000 px: nothing downsampled
    caption = browser.data("strip-caption")
    assert (int(caption["start"]), int(caption["end"])) == (view.start_offset, view.end_offset)

    # each holder has its own colour slot; the legend names both
    slots = {g["clientId"]: next(c for c in g["cls"].split() if c[:1] == "m" and c[1:].isdigit())
             for g in segs if g["state"] == "acquired"}
    assert set(slots) == {"worker-a", "worker-b"} and len(set(slots.values())) == 2, slots
    legend = browser.driver.execute_script(
        "return [...document.querySelectorAll('#strip-legend li.holder')].map(e => e.dataset.clientId)")
    assert sorted(legend) == ["worker-a", "worker-b"]
    counts = {li["state"]: int(li["records"]) for li in browser.driver.execute_script(
        "return [...document.querySelectorAll('#strip-legend li[data-records]')].map(e => Object.assign({}, e.dataset))")}
    want = dict.fromkeys(STRIP_STATE.values(), 0)  # every state in the legend, 0 when absent
    for state, _ in expected.values():
        want[state] = want.get(state, 0) + 1
    assert counts == want

    # the ranges table and the histogram say the same as the Admin
    table = browser.driver.execute_script(
        "return [...document.querySelectorAll('#ranges tr.range')].map(e => Object.assign({}, e.dataset))")
    assert [(int(r["first"]), int(r["last"]), r["state"], int(r["deliveryCount"]), r["clientId"] or None,
             r["waitReason"]) for r in table] == [
        (r.first_offset, r.last_offset, r.state, r.delivery_count, r.client_id, r.wait_reason) for r in view.ranges]
    unsettled = [r for r in view.ranges if r.state in ("ACQUIRED", "AVAILABLE")]
    histogram = browser.driver.execute_script(
        "return [...document.querySelectorAll('#histogram-table tr.hist-row')].map(e => [+e.dataset.deliveryCount, +e.dataset.records])")
    assert histogram == [[1, sum(r.last_offset - r.first_offset + 1 for r in unsettled)]]
    expiries = browser.driver.execute_script(
        "return [...document.querySelectorAll('#lock-expiries-table tr.expiry')].map(e => +e.dataset.first)")
    assert sorted(expiries) == [r.first_offset for r in view.ranges if r.state == "ACQUIRED"]

    # the screenshot: under each segment, the colour its state's CSS fill gives it
    image = png_pixels(browser.png("strip"))
    for g in segs:
        x, y = int(g["left"] + g["width"] / 2), int(g["top"] + g["height"] / 2)
        fill = tuple(int(v) for v in g["fill"][g["fill"].index("(") + 1:g["fill"].index(")")].split(",")[:3])
        got = image.rgb(min(x, image.width - 1), min(y, image.height - 1))
        assert max(abs(a - b) for a, b in zip(got, fill)) <= 8, (g["first"], g["state"], got, fill)
    fills = {g["state"] + (g["clientId"] or ""): g["fill"] for g in segs}
    assert len(set(fills.values())) == len(fills), fills  # every state and holder its own colour
    browser.screenshot("strip", "strip-panel")
    # the whole page once the lag chart has two samples to draw (the same picture every run)
    wait_until(lambda: browser.driver.execute_script("return !!document.querySelector('#lag-chart-plot canvas')"),
               10, 0.05, message="the lag chart")
    browser.screenshot("share-group", full_page=True)


def test_where_is_record_o_finds_a_dead_record_in_the_window_and_its_dead_letter(browser, dashboards, admin):
    dead = next(o for o, (state, _, _) in s.EXPECTED.items() if state == "ARCHIVED")
    browser.open(f"{dashboards.readonly}/share-group?group={urllib.parse.quote(s.GROUP)}"
                 f"&topic={s.TOPIC}&partition=0&offset={dead}")
    located = browser.driver.find_element(By.ID, "located")
    row = located.find_element(By.CSS_SELECTOR, "p.row")
    assert (row.get_attribute("data-state"), int(row.get_attribute("data-first"))) == ("ARCHIVED", dead)
    letter = next(d for d in admin.list_dead_letters(s.GROUP) if d.offset == dead)
    shown = located.find_element(By.CSS_SELECTOR, "p.letter")
    assert int(shown.get_attribute("data-dlq-offset")) == letter.dlq_offset
