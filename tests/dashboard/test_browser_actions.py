"""Actions in the browser (issue 30, acceptance 1 and 5): with actions enabled, clicking redrive and
force release, through the confirmation page, changes the broker as the Admin API shows; without
`quafka.dashboard.actions.enable`, no page offers an action and every action URL refuses.

The actions work on the second share group of the scenario (XSS_GROUP on `payments`), so the
orders group's window, which the strip tests check, stays as scripted."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request

import pytest

from quafka.client import PartitionReader

from support import dashboard_scenario as s
from support import wait_until

pytestmark = pytest.mark.xdist_group("browser")  # one worker: one Chromium, one scenario broker

q = urllib.parse.quote
PAGES = ("/", f"/topic?name={s.TOPIC}", f"/share-group?group={q(s.GROUP)}&topic={s.TOPIC}&partition=0",
         f"/share-group?group={q(s.XSS_GROUP)}&topic={s.PAYMENTS}&partition=0", f"/consumer-group?group={s.AUDIT_GROUP}",
         "/failures", f"/failures?group={q(s.XSS_GROUP)}", "/workers")
OFFERS = "a.action, .actions, a[href*='/actions/'], form[action*='/actions/'], form[method=post]"


def offered(browser) -> list[str]:
    return browser.driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.outerHTML.slice(0, 160))", OFFERS)


def click(browser, selector: str, text: str | None = None) -> None:
    """Click the first element matching `selector` (whose text is `text`), found and clicked in one
    script (a live update may replace it between two WebDriver calls), then wait for the new page."""
    before = browser.driver.execute_script("return performance.timeOrigin")
    found = browser.driver.execute_script(
        "const e = [...document.querySelectorAll(arguments[0])].find(e => arguments[1] === null ||"
        " e.textContent.trim() === arguments[1]); if (e) e.click(); return !!e", selector, text)
    assert found, (selector, text, browser.driver.current_url)
    wait_until(lambda: browser.driver.execute_script("return performance.timeOrigin") != before
               and browser.driver.execute_script("return document.readyState") == "complete", 10, 0.02,
               message=f"the page after clicking {selector}")


def test_a_read_only_dashboard_offers_no_action_and_refuses_every_action_url(browser, dashboards):
    for page in PAGES:
        browser.open(dashboards.readonly + page)
        assert browser.driver.execute_script("return document.body.dataset.actions") == "off", page
        assert offered(browser) == [], page
        browser.assert_clean()
    for url in (f"/actions/redrive?group={q(s.XSS_GROUP)}",
                f"/actions/in-flight?group={q(s.XSS_GROUP)}&topic={s.PAYMENTS}&partition=0&first=0&last=0&action=release"):
        browser.open(dashboards.readonly + url)
        error = browser.driver.execute_script(
            "const e = document.getElementById('error'); return e && [e.dataset.status, document.body.innerText]")
        assert error[0] == "403" and "quafka.dashboard.actions.enable" in error[1], error
        assert offered(browser) == []
        browser.driver.get_log("browser")  # the 403 itself is logged by Chromium as a failed load
        for method in ("GET", "POST"):
            request = urllib.request.Request(dashboards.readonly + url.split("?")[0], method=method,
                                             data=b"" if method == "POST" else None)
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 403, (method, url)
    with pytest.raises(urllib.error.HTTPError) as refused:  # even with every field the page would post
        urllib.request.urlopen(urllib.request.Request(
            dashboards.readonly + "/actions/in-flight", method="POST",
            data=urllib.parse.urlencode({"group": s.XSS_GROUP, "topic": s.PAYMENTS, "partition": 0, "first": 0,
                                         "last": 0, "action": "release"}).encode()), timeout=10)
    assert refused.value.code == 403


def test_clicking_force_release_through_the_confirmation_releases_the_records(browser, dashboards, admin):
    held = [r for r in admin.describe_in_flight(s.XSS_GROUP, [s.PAYMENTS])[(s.PAYMENTS, 0)].ranges
            if r.state == "ACQUIRED"]
    first = held[0]
    browser.open(f"{dashboards.actions}/share-group?group={q(s.XSS_GROUP)}&topic={s.PAYMENTS}&partition=0")
    click(browser, f'#ranges tr.range[data-first="{first.first_offset}"] a.action.release')
    assert browser.driver.execute_script("return document.getElementById('action').dataset.action") == "in-flight"
    dry_run = browser.driver.execute_script("return +document.getElementById('dry-run').dataset.count")
    assert dry_run == first.last_offset - first.first_offset + 1
    # the dry run changed nothing
    assert admin.describe_in_flight(s.XSS_GROUP, [s.PAYMENTS], offset=first.first_offset)[
        (s.PAYMENTS, 0)].ranges[0].state == "ACQUIRED"
    browser.screenshot("confirm")
    click(browser, "#confirm-button")
    assert "/share-group?" in browser.driver.current_url, browser.text()
    [now] = admin.describe_in_flight(s.XSS_GROUP, [s.PAYMENTS], offset=first.first_offset)[(s.PAYMENTS, 0)].ranges
    assert (now.state, now.wait_reason, now.member_id) == ("AVAILABLE", "", None), now
    others = [r for r in admin.describe_in_flight(s.XSS_GROUP, [s.PAYMENTS])[(s.PAYMENTS, 0)].ranges
              if r.state == "ACQUIRED"]
    assert [(r.first_offset, r.last_offset) for r in others] == [(r.first_offset, r.last_offset) for r in held[1:]]


def test_clicking_redrive_through_the_confirmation_sends_the_dead_letter_back_once(browser, dashboards, admin,
                                                                                   scenario_broker):
    [letter] = admin.list_dead_letters(s.XSS_GROUP)
    end_before = admin.list_offsets({(s.PAYMENTS, 0): "latest"})[(s.PAYMENTS, 0)][0]
    browser.open(f"{dashboards.actions}/failures?group={q(s.XSS_GROUP)}")
    click(browser, f'tr.letter[data-dlq-offset="{letter.dlq_offset}"] a.action.redrive-one')
    plan = browser.driver.execute_script(
        "return [...document.querySelectorAll('#plan tr.planned')].map(r => [+r.dataset.dlqOffset, r.dataset.status])")
    assert plan == [[letter.dlq_offset, "send"]]
    assert admin.list_offsets({(s.PAYMENTS, 0): "latest"})[(s.PAYMENTS, 0)][0] == end_before  # dry run only
    click(browser, "#confirm-button")
    assert "/failures" in browser.driver.current_url
    assert admin.list_offsets({(s.PAYMENTS, 0): "latest"})[(s.PAYMENTS, 0)][0] == end_before + 1
    # the dead letter's copy is the new record of payments, naming the letter it came from
    with PartitionReader({"bootstrap.servers": scenario_broker.bootstrap_servers}) as reader:
        [record] = reader.read(s.PAYMENTS, 0, end_before)
    assert (record.key, record.value) == (letter.key, letter.value)
    assert dict(record.headers)["quafka.redrive.dlq.offset"] == str(letter.dlq_offset).encode()
    [again] = admin.redrive_dead_letters(s.XSS_GROUP, None, dry_run=True).planned
    assert again.status == "already-redriven", again
    # asked again, the confirmation page says it was sent already
    browser.open(f"{dashboards.actions}/actions/redrive?group={q(s.XSS_GROUP)}")
    plan = browser.driver.execute_script(
        "return [...document.querySelectorAll('#plan tr.planned')].map(r => r.dataset.status)")
    assert plan == ["already-redriven"]
