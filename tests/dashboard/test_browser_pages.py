"""Every page of the dashboard in headless Chromium against a live broker whose share groups are in
the middle of their work (support/dashboard_scenario.py), and the numbers on each page equal the
Admin API's (issue 30, acceptance 1). The numbers are read from the data-* attributes the
templates put next to the text (src/quafka/dashboard/templates); the browser fixture fails a test
on any dialog or console error.

Screenshots for docs/dashboard.md are taken here (support/browser.py, `Browser.screenshot`)."""

from __future__ import annotations

import urllib.parse

import pytest
from confluent_kafka import Producer
from selenium.webdriver.common.by import By

from support import dashboard_scenario as s
from support import wait_until

pytestmark = pytest.mark.xdist_group("browser")  # one worker: one Chromium, one scenario broker

q = urllib.parse.quote


def rows(browser, selector: str) -> list[dict[str, str]]:
    """The data-* attributes of every element matching `selector`."""
    return browser.driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => Object.assign({}, e.dataset))", selector)


def live(browser) -> None:
    """The page's live stream delivered a sample (server-sent events; `data-sample-seq` is bumped
    by static/app.js on each)."""
    seq = browser.driver.find_element(By.TAG_NAME, "body").get_attribute("data-sample-seq")
    wait_until(lambda: browser.driver.find_element(By.TAG_NAME, "body").get_attribute("data-sample-seq") != seq,
               10, 0.05, message="a live update")


def test_overview_lists_topics_and_groups_with_the_admins_offsets_members_and_lag(browser, dashboards, admin):
    browser.open(dashboards.readonly + "/")
    topics = {r["topic"]: r for r in rows(browser, "#topics-table tr.topic")}
    groups = {r["group"]: r for r in rows(browser, "#groups-table tr.group")}
    ends = admin.list_offsets({(t, 0): "latest" for t in (s.TOPIC, s.DLQ, s.PAYMENTS, s.PAYMENTS_DLQ)})
    for topic in (s.TOPIC, s.DLQ, s.PAYMENTS, s.PAYMENTS_DLQ):
        assert (topics[topic]["partitions"], int(topics[topic]["endOffset"])) == ("1", ends[(topic, 0)][0]), topic
    described = admin.describe_share_groups([s.GROUP, s.XSS_GROUP])
    for group in (s.GROUP, s.XSS_GROUP):
        lag = sum(lag for _, lag in admin.list_share_group_offsets(group).values())
        assert groups[group]["type"] == "share"
        assert (int(groups[group]["members"]), int(groups[group]["lag"])) == (len(described[group].members), lag)
    assert groups[s.AUDIT_GROUP]["lag"] == str(ends[(s.TOPIC, 0)][0] - s.AUDIT_COMMITTED)
    assert browser.data("broker")["quafka"] == "true"
    browser.screenshot("overview")


def test_share_group_page_shows_the_admins_members_lag_and_windows_and_updates_live(browser, dashboards, admin,
                                                                                  scenario_broker):
    browser.open(f"{dashboards.readonly}/share-group?group={q(s.GROUP)}")
    members = sorted((m["memberId"], m["clientId"]) for m in rows(browser, "#members-table tr.member"))
    described = admin.describe_share_groups([s.GROUP])[s.GROUP]
    assert members == sorted((m.member_id, m.client_id) for m in described.members)
    assert {m["host"] for m in rows(browser, "#members-table tr.member")} == {m.client_host for m in described.members}
    summary = browser.data("sg-summary")
    assert (summary["state"], summary["dlq"]) == (described.state, s.DLQ)

    [window] = rows(browser, "#windows-table tr.window")
    view = admin.describe_in_flight(s.GROUP)[(s.TOPIC, 0)]
    assert ((int(window["start"]), int(window["end"]), int(window["inFlight"]), int(window["waitingBackoff"]))
            == (view.start_offset, view.end_offset, view.in_flight_count, view.waiting_backoff_count))

    def lag_on_page() -> tuple[int, int]:
        [row] = rows(browser, "#lag-table tr.lag-row")
        return int(row["start"]), int(row["lag"])

    assert lag_on_page() == admin.list_share_group_offsets(s.GROUP)[(s.TOPIC, 0)]
    live(browser)
    browser.driver.execute_script("window.__same_document = true")  # gone if the page reloads
    # the broker moves on: two more orders; the page follows without a reload
    producer = Producer({"bootstrap.servers": scenario_broker.bootstrap_servers})
    for i in range(2):
        producer.produce(s.TOPIC, f"late-order-{i}".encode(), partition=0)
    assert producer.flush(10) == 0
    expected = admin.list_share_group_offsets(s.GROUP)[(s.TOPIC, 0)]
    wait_until(lambda: lag_on_page() == expected, 10, 0.05, message=f"the page's lag to become {expected}")
    assert browser.driver.execute_script("return window.__same_document") is True


def test_topic_page_shows_the_admins_offsets_and_the_newest_records(browser, dashboards, admin):
    browser.open(f"{dashboards.readonly}/topic?name={q(s.TOPIC)}")
    start, end = (admin.list_offsets({(s.TOPIC, 0): spec})[(s.TOPIC, 0)][0] for spec in ("earliest", "latest"))

    def on_page() -> tuple[int, int]:
        [partition] = rows(browser, "#partitions-table tr.partition")
        return int(partition["start"]), int(partition["end"])

    # a page shows a snapshot at most one cadence old (5 s here; an earlier test loaded this page
    # before records were produced), and its live updates bring it to the broker's numbers
    wait_until(lambda: on_page() == (start, end), 10, 0.05, message=f"the topic page to show offsets {start}-{end}")
    offsets = [int(r["offset"]) for r in rows(browser, "#records tr.record")]
    assert offsets and max(offsets) == end - 1 and len(offsets) <= 10, offsets
    browser.screenshot("topic")


def test_consumer_group_page_shows_the_committed_offset_and_lag(browser, dashboards, admin):
    browser.open(f"{dashboards.readonly}/consumer-group?group={q(s.AUDIT_GROUP)}")
    [row] = rows(browser, "#cg-offsets-table tr.offset-row")
    end = admin.list_offsets({(s.TOPIC, 0): "latest"})[(s.TOPIC, 0)][0]
    assert (row["topic"], int(row["committed"]), int(row["end"]), int(row["lag"])) == (
        s.TOPIC, admin.list_consumer_group_offsets(s.AUDIT_GROUP)[(s.TOPIC, 0)][0], end, end - s.AUDIT_COMMITTED)
    assert browser.driver.find_elements(By.CSS_SELECTOR, "#cg-members-table tr.member") == []


def test_failures_page_lists_every_dead_letter_of_each_group(browser, dashboards, admin):
    browser.open(f"{dashboards.readonly}/failures")
    groups = {g["group"]: g for g in rows(browser, ".dlq-group")}
    for group in (s.GROUP, s.XSS_GROUP):
        letters = admin.list_dead_letters(group)
        on_page = [r for r in rows(browser, "tr.letter") if r["dlqTopic"] == letters[0].dlq_topic]
        assert int(groups[group]["letters"]) == len(letters)
        assert sorted((int(r["dlqOffset"]), r["topic"], int(r["offset"])) for r in on_page) == sorted(
            (d.dlq_offset, d.topic, d.offset) for d in letters)
    classes = {c["errorClass"]: int(c["count"]) for c in rows(browser, f'.dlq-group[data-group="{s.GROUP}"] details')}
    assert sum(classes.values()) == len(admin.list_dead_letters(s.GROUP)), classes
    browser.open(f"{dashboards.readonly}/failures?group={q(s.GROUP)}")
    assert [g["group"] for g in rows(browser, ".dlq-group")] == [s.GROUP]
    browser.screenshot("failures")


def test_workers_page_loads(browser, dashboards):
    browser.open(f"{dashboards.readonly}/workers")
    assert browser.driver.find_element(By.TAG_NAME, "body").get_attribute("data-page") == "workers"
    assert browser.driver.find_element(By.TAG_NAME, "h1").text
