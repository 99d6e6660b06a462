"""The dashboard's safety (issue 30, acceptance 3 and 5) without a browser: read-only by default
(no action offered, every /actions/* refused), CSRF and DNS-rebinding refusals, escaping of broker
strings (a group id that is markup; keys, values and headers with markup and invalid UTF-8), and a
real action (force release) changing the broker as the Admin API then shows."""

from __future__ import annotations

import html
import re
from urllib.parse import quote

import pytest

from dashboard.conftest import GROUP, MARKUP_KEY, MARKUP_VALUE, TOPIC, XSS, Dash
from support import wait_until

from quafka.client import Admin
from quafka.dashboard.csrf import COOKIE, FIELD

PAGES = ["/", f"/topic?name={TOPIC}", f"/share-group?group={GROUP}", f"/share-group?group={GROUP}&topic={TOPIC}&partition=0",
         f"/failures?group={GROUP}", "/failures", "/workers", "/consumer-group?group=x"]
ACTIONS = [f"/actions/in-flight?group={GROUP}&topic={TOPIC}&partition=0&first=3&last=3&action=release",
           f"/actions/redrive?group={GROUP}", "/actions/nonsense"]


def test_read_only_by_default_offers_no_action_and_refuses_every_action_url(scenario):
    dash = Dash(scenario.bootstrap)

    async def go(client, _app):
        pages = [await client.get(url) for url in PAGES]
        gets = [await client.get(url) for url in ACTIONS]
        posts = [await client.post(url.split("?")[0], data={"group": GROUP}) for url in ACTIONS]
        return pages, gets, posts

    pages, gets, posts = dash.run(go)
    for page in pages:
        assert page.status_code == 200 and "/actions/" not in page.text and 'data-actions="off"' in page.text
    for refused in gets + posts:
        assert refused.status_code == 403, refused.text
        assert "quafka.dashboard.actions.enable=true" in refused.text and "--enable-actions" in refused.text
    with Admin({"bootstrap.servers": scenario.bootstrap}) as admin:  # nothing changed: offset 3 still held
        [row] = admin.describe_in_flight(GROUP, {TOPIC: [0]}, offset=3)[(TOPIC, 0)].ranges
    assert row.state == "ACQUIRED"


def test_with_actions_on_the_pages_offer_them(scenario):
    page = Dash(scenario.bootstrap, actions_enabled=True).get(f"/share-group?group={GROUP}").text
    assert 'class="action release"' in page and 'class="action archive"' in page


def _confirm(client, url):
    async def go():
        page = await client.get(url)
        token = re.search(rf'name="{FIELD}" value="([^"]+)"', page.text).group(1)
        fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page.text))
        return page, token, {k: html.unescape(v) for k, v in fields.items()}
    return go()


@pytest.mark.parametrize("case", ["no token", "bad token", "no cookie", "cross-site", "other origin"])
def test_csrf_refusals(scenario, case):
    dash = Dash(scenario.bootstrap, actions_enabled=True)
    url = f"/actions/in-flight?group={GROUP}&topic={TOPIC}&partition=0&first=4&last=4&action=release"

    async def go(client, _app):
        page, token, fields = await _confirm(client, url)
        assert page.status_code == 200 and COOKIE in page.headers["set-cookie"]
        headers = {}
        if case == "no token":
            fields.pop(FIELD)
        elif case == "bad token":
            fields[FIELD] = "0" * 64
        elif case == "no cookie":
            client.cookies.clear()
        elif case == "cross-site":
            headers["Sec-Fetch-Site"] = "cross-site"
        elif case == "other origin":
            headers["Origin"] = "http://evil.example"
        return await client.post("/actions/in-flight", data=fields, headers=headers)

    refused = dash.run(go)
    assert refused.status_code == 403 and "Refused" in refused.text, refused.text
    with Admin({"bootstrap.servers": scenario.bootstrap}) as admin:
        [row] = admin.describe_in_flight(GROUP, {TOPIC: [0]}, offset=4)[(TOPIC, 0)].ranges
    assert row.state == "ACQUIRED"


def test_a_foreign_host_header_is_refused(scenario):
    """DNS rebinding: a page of evil.example resolving to 127.0.0.1 sends Host: evil.example."""
    r = Dash(scenario.bootstrap).get("/", headers={"Host": "evil.example:8080"})
    assert r.status_code == 400
    assert Dash(scenario.bootstrap).get("/", headers={"Host": "localhost:8080"}).status_code == 200


def test_markup_and_invalid_utf8_from_the_broker_render_as_text(scenario):
    dash = Dash(scenario.bootstrap, recent_records=20)  # the topic page shows offset 0 (the markup record) too
    overview = dash.get("/").text
    group_page = dash.get(f"/share-group?group={quote(XSS, safe='')}").text
    topic_page = dash.get(f"/topic?name={TOPIC}").text
    for text in (overview, group_page, topic_page):
        assert "<img" not in text and "<script>" not in text and "<b>" not in text and "<i>" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in overview and "&lt;img src=x onerror=alert(1)&gt;" in group_page
    assert f'href="/share-group?group={quote(XSS, safe="")}"' in overview  # ids travel quoted in URLs
    assert "&lt;script&gt;client&lt;/script&gt;" in group_page  # a client id with markup
    # the markup value as text; the key (invalid UTF-8) as hex; the header name escaped, its bytes as hex
    assert html.escape(MARKUP_VALUE.decode(), quote=False) in topic_page.replace("&#39;", "'")
    assert "0x" + MARKUP_KEY.hex() in topic_page
    assert "&lt;i&gt;h&lt;/i&gt;" in topic_page and 'data-binary="true"' in topic_page


def test_a_confirmed_force_release_changes_the_broker(scenario):
    dash = Dash(scenario.bootstrap, actions_enabled=True)
    url = f"/actions/in-flight?group={GROUP}&topic={TOPIC}&partition=0&first=5&last=5&action=release"

    async def go(client, _app):
        page, _, fields = await _confirm(client, url)
        assert 'data-count="1"' in page.text  # the dry run: one record would be released
        return await client.post("/actions/in-flight", data=fields,
                                 headers={"Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "same-origin"})

    with Admin({"bootstrap.servers": scenario.bootstrap}) as admin:
        [before] = admin.describe_in_flight(GROUP, {TOPIC: [0]}, offset=5)[(TOPIC, 0)].ranges
        assert before.state == "ACQUIRED"
        done = dash.run(go)
        assert done.status_code == 303 and done.headers["location"] == f"/share-group?group={GROUP}&topic={TOPIC}&partition=0"

        def released():
            [row] = admin.describe_in_flight(GROUP, {TOPIC: [0]}, offset=5)[(TOPIC, 0)].ranges
            return row.state == "AVAILABLE" and row.member_id is None

        wait_until(released, 10, message="offset 5 released")
