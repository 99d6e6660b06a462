"""The scripted share-group scenario of the dashboard's browser tests (support/dashboard_scenario.py)
holds every state the in-flight strip draws at once, as the Admin API reports it — checked before
any browser is involved, so that a browser test's failure is the dashboard's, not the scenario's."""

from __future__ import annotations

import pytest

from quafka.client import Admin
from support import dashboard_scenario as s

pytestmark = pytest.mark.xdist_group("browser")  # one worker: one Chromium, one scenario broker

def test_the_orders_window_holds_every_state_at_once_with_two_holders(scenario_broker):
    s.verify(scenario_broker.bootstrap_servers, payments=False)  # the action tests change payments
    with Admin({"bootstrap.servers": scenario_broker.bootstrap_servers}) as admin:
        view = admin.describe_in_flight(s.GROUP, [s.TOPIC])[(s.TOPIC, 0)]
    states = {(r.state, r.wait_reason) for r in view.ranges}
    assert states == {("ACQUIRED", ""), ("AVAILABLE", "backoff"), ("ACKNOWLEDGED", ""), ("ARCHIVED", ""),
                      ("AVAILABLE", "")}, states
    holders = {r.client_id for r in view.ranges if r.state == "ACQUIRED"}
    assert holders == {"worker-a", "worker-b"}
    waiting = [r for r in view.ranges if r.wait_reason == "backoff"]
    assert all(r.due_at_ms is not None and r.delivery_count == 1 for r in waiting), waiting
    released = [r for r in view.ranges if r.state == "AVAILABLE" and not r.wait_reason]
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in released] == [(11, 12, 1)], released


def test_dead_letters_hold_markup_and_invalid_utf8_and_the_xss_group_has_one(scenario_broker):
    with Admin({"bootstrap.servers": scenario_broker.bootstrap_servers}) as admin:
        letters = admin.list_dead_letters(s.GROUP)
        [xss] = admin.list_dead_letters(s.XSS_GROUP)
        groups = {g.group_id for g in admin.list_groups()}
    payloads = [d.key for d in letters] + [d.value for d in letters]
    assert any(b"<" in p for p in payloads)
    invalid = [p for p in payloads if p is not None and not _is_utf8(p)]
    assert invalid, payloads
    framework = letters[-1]
    assert s.MARKUP_HEADER in framework.headers, framework.headers
    assert not _is_utf8(dict(framework.headers)["quafka.error.message"])
    assert (xss.group, xss.key) == (s.XSS_GROUP, b"<u>pay-1</u>")
    assert {s.GROUP, s.XSS_GROUP} <= groups


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
