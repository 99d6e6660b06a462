"""Every page of the dashboard renders (200) against a live broker with a share group in the middle
of work, and its numbers are the Admin API's (read from the data-* attributes the pages carry
for the browser tests). Driven through httpx.ASGITransport: no browser, no HTTP server."""

from __future__ import annotations

import html
import re
from urllib.parse import quote

import pytest

from dashboard.conftest import DLQ, GROUP, TOPIC, XSS, Dash

from quafka.client import Admin


def attrs(page: str, css_class: str, name: str) -> list[str]:
    """The values of data-``name`` on the elements whose class list starts with ``css_class``."""
    return [html.unescape(v) for v in re.findall(
        rf'<[a-z]+ class="{css_class}[^"]*"[^>]*?\sdata-{name}="([^"]*)"', page)]


def test_every_page_renders_with_a_share_group_mid_work(scenario):
    dash = Dash(scenario.bootstrap)
    g = quote(GROUP, safe="")
    for url in ["/", f"/topic?name={TOPIC}", f"/share-group?group={g}", f"/share-group?group={g}&topic={TOPIC}&partition=0",
                f"/share-group?group={g}&topic={TOPIC}&partition=0&offset=1", "/consumer-group?group=nobody",
                f"/failures?group={g}", "/failures", "/workers"]:
        r = dash.get(url)
        assert r.status_code == 200, (url, r.text[:2000])
        assert r.headers["content-security-policy"].startswith("default-src 'none'")
        assert "Traceback" not in r.text


def test_share_group_page_numbers_equal_the_admin_api(scenario):
    page = Dash(scenario.bootstrap).get(f"/share-group?group={GROUP}").text
    with Admin({"bootstrap.servers": scenario.bootstrap}) as admin:
        described = admin.describe_share_groups([GROUP])[GROUP]
        offsets = admin.list_share_group_offsets(GROUP)
        view = admin.describe_in_flight(GROUP)[(TOPIC, 0)]
    assert sorted(attrs(page, "member", "client-id")) == sorted(m.client_id for m in described.members)
    assert attrs(page, "lag-row", "lag") == [str(offsets[(TOPIC, 0)][1])]
    assert attrs(page, "lag-row", "start") == [str(offsets[(TOPIC, 0)][0])]
    assert attrs(page, "window", "start") == [str(view.start_offset)]
    ranges = list(zip(attrs(page, "range", "first"), attrs(page, "range", "state")))
    assert ranges == [(str(r.first_offset), r.state) for r in view.ranges]
    # the strip: every acquired segment names a member of the group
    holders = set(attrs(page, "seg", "member")) - {""}
    assert holders and holders <= {m.member_id for m in described.members}
    assert 'id="strip"' in page and 'id="histogram"' in page and 'id="lock-expiries"' in page


def test_overview_lists_topics_and_groups_with_the_admin_numbers(scenario):
    page = Dash(scenario.bootstrap).get("/").text
    with Admin({"bootstrap.servers": scenario.bootstrap}) as admin:
        end = admin.list_offsets({(TOPIC, 0): "latest"})[(TOPIC, 0)][0]
        lag = admin.list_share_group_offsets(GROUP)[(TOPIC, 0)][1]
    rows = dict(zip(attrs(page, "topic", "topic"), attrs(page, "topic", "end-offset")))
    assert rows[TOPIC] == str(end) and DLQ in rows
    groups = dict(zip(attrs(page, "group", "group"), attrs(page, "group", "lag")))
    assert groups[GROUP] == str(lag) and XSS in groups
    assert 'data-quafka="true"' in page


def test_failures_page_groups_dead_letters_by_error_class(scenario):
    page = Dash(scenario.bootstrap).get(f"/failures?group={GROUP}").text
    with Admin({"bootstrap.servers": scenario.bootstrap}) as admin:
        letters = admin.list_dead_letters(GROUP, DLQ)
    assert letters and attrs(page, "letter", "dlq-offset") == [str(x.dlq_offset) for x in letters][::-1]
    assert attrs(page, "letter", "reason") == [x.reason for x in letters][::-1]
    # the scenario's group keeps headers only (errors.deadletterqueue.copy.record.enable=false): the
    # payload preview comes from the source record, and says so (a Jinja lookup of "copy" once found
    # dict.copy and showed a null key and value)
    assert not any(x.has_copy for x in letters)
    assert attrs(page, "value", "payload") == ["source"] * len(letters)
    assert page.count("(no copy: the source record)") == len(letters) and 'class="null"' not in page
    # the scenario rejects offset 1, produced as key b"k1", value b"job-1"
    assert [x.offset for x in letters] == [1] and 'data-payload="source"><span class="preview" ' in page
    assert '>job-1</span>' in page and '>k1</span>' in page


@pytest.mark.parametrize("url, reason", [("/topic", "needs ?name="), ("/share-group", "needs ?group="),
                                         ("/share-group?group=g&partition=x&topic=t", "partition must be an integer"),
                                         ("/share-group?group=g&offset=3", "offset=O needs topic=")])
def test_bad_parameters_are_a_400_saying_why(scenario, url, reason):
    r = Dash(scenario.bootstrap).get(url)
    assert r.status_code == 400 and reason in html.unescape(r.text)


def test_the_overview_lists_at_most_its_row_cap_of_topics_by_name_and_filters_them(scenario, monkeypatch):
    """A broker with thousands of topics: the overview lists the first OVERVIEW_TOPIC_ROWS by name
    (end offsets are asked for those only) and says how many there are; ?topics= narrows the list."""
    from quafka.dashboard import source

    monkeypatch.setattr(source, "OVERVIEW_TOPIC_ROWS", 1)
    with Admin({"bootstrap.servers": scenario.bootstrap}) as admin:
        names = sorted(admin.list_topics())
    assert len(names) >= 2 and TOPIC in names and DLQ in names
    dash = Dash(scenario.bootstrap)
    page = dash.get("/").text
    assert attrs(page, "topic", "topic") == names[:1]
    assert re.search(rf'id="topics-shown"[^>]*data-shown="1" data-matching="{len(names)}" data-total="{len(names)}"', page)
    narrowed = dash.get("/?topics=dlq").text
    assert attrs(narrowed, "topic", "topic") == [DLQ] and 'value="dlq"' in narrowed
    none = dash.get("/?topics=%3Cb%3Enothing").text
    assert attrs(none, "topic", "topic") == [] and "No topic name holds “&lt;b&gt;nothing”" in none
    assert "events?page=overview&amp;topics=dlq" in narrowed  # the live view keeps the filter
