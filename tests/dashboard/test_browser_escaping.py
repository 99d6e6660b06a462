"""Strings from the broker render as text in the browser (issue 30, acceptance 3): a share group
whose id is `<img src=x onerror=alert(1)>`, a member whose client id is markup, and dead letters
and records whose keys, values and headers hold markup and invalid UTF-8. On every page that shows
them: the text on the page is the string itself, no element the markup would make exists, no
dialog was asked for and the console has no error (the `browser` fixture's check: a CSP violation
or a failed `<img src=x>` load would be there)."""

from __future__ import annotations

import urllib.parse

import pytest

from support import dashboard_scenario as s
from support import wait_until

pytestmark = pytest.mark.xdist_group("browser")  # one worker: one Chromium, one scenario broker

q = urllib.parse.quote
INJECTED = "img, svg:not(.strip):not(.histogram), script:not([src]), b, i, u, iframe, [onerror], [onload]"


def no_injected_elements(browser) -> None:
    """Only the page's own elements: no <img>, inline <script>, <b>/<i>/<u>, or handler attribute
    anywhere (the dashboard's templates use none of them; an escaping bug would add them)."""
    found = browser.driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.outerHTML.slice(0, 120))", INJECTED)
    assert found == [], found
    scripts = browser.driver.execute_script("return [...document.scripts].map(e => e.src)")
    assert all(src.startswith(browser.driver.current_url.split("/")[0] + "//") and "/static/" in src
               for src in scripts), scripts


def test_the_markup_group_id_and_client_id_show_as_text_on_the_overview_and_the_group_page(browser, dashboards):
    browser.open(dashboards.readonly + "/")
    links = browser.driver.execute_script(  # read at once: live updates replace the table
        "return [...document.querySelectorAll('#groups-table tr.group a')].map(a => [a.textContent, a.href])")
    [href] = [href for text, href in links if text == s.XSS_GROUP]
    assert urllib.parse.unquote(href.split("group=", 1)[1]) == s.XSS_GROUP
    no_injected_elements(browser)
    browser.assert_clean()

    clicked = browser.driver.execute_script(  # the group's own page, through the link the overview made
        "const a = [...document.querySelectorAll('#groups-table tr.group a')].find(a => a.textContent === arguments[0]);"
        "a.click(); return a.href", s.XSS_GROUP)
    assert clicked == href
    b_wait = browser.driver.execute_script
    wait_until(lambda: b_wait("return document.body.dataset.page") == "share-group"
               and b_wait("return document.readyState") == "complete", 10, 0.02, message="the group's page")
    heading = b_wait("const h = document.getElementById('group-id'); return [h.textContent, h.dataset.group]")
    assert heading == [s.XSS_GROUP, s.XSS_GROUP]
    members = b_wait("return [...document.querySelectorAll('#members-table tr.member')]"
                     ".map(r => [r.dataset.clientId, r.textContent])")
    assert len(members) == 1 and members[0][0] == s.XSS_CLIENT and s.XSS_CLIENT in members[0][1], members
    no_injected_elements(browser)


def letter_rows(browser) -> dict[tuple[str, int], dict]:
    """Every dead letter on the page: its data-* and the text of its cells, read at once."""
    rows = browser.driver.execute_script("""
        return [...document.querySelectorAll('tr.letter')].map(r => {
            const cell = (c) => { const e = r.querySelector(c); return e && [e.textContent, e.dataset.binary]; };
            return Object.assign({text: r.textContent, key: cell('td.key .preview'), value: cell('td.value .preview')},
                                 r.dataset);
        })""")
    return {(r["dlqTopic"], int(r["dlqOffset"])): r for r in rows}


def test_dead_letter_keys_values_and_headers_with_markup_and_invalid_utf8_show_as_text(browser, dashboards, admin):
    browser.open(f"{dashboards.readonly}/failures")
    no_injected_elements(browser)
    letters = letter_rows(browser)
    for d in admin.list_dead_letters(s.GROUP) + admin.list_dead_letters(s.XSS_GROUP):
        row = letters[(d.dlq_topic, d.dlq_offset)]
        for cell, data in (("key", d.key), ("value", d.value)):
            text, binary = row[cell]
            if _utf8(data):
                assert (text, binary) == (data.decode(), "false"), (cell, data)
            else:  # not UTF-8: shown as hex, never as markup
                assert (text, binary) == ("0x" + data.hex(), "true"), (cell, data)
    framework = next(d for d in admin.list_dead_letters(s.GROUP) if d.error_class is not None)
    row = letters[(framework.dlq_topic, framework.dlq_offset)]
    assert row["errorClass"] == framework.error_class and "<svg onload=alert(5)>" in row["text"]
    summaries = browser.driver.execute_script(
        "return [...document.querySelectorAll('details.error-class')].map(d => [d.dataset.errorClass, "
        "d.querySelector('summary').textContent])")
    assert any(cls == framework.error_class and "<svg onload=alert(5)>" in text for cls, text in summaries), summaries


def test_record_keys_values_and_headers_show_as_text_on_the_topic_page(browser, dashboards):
    def records() -> dict[int, dict]:
        rows = browser.driver.execute_script("""
            return [...document.querySelectorAll('tr.record')].map(r => ({
                offset: +r.dataset.offset, key: r.querySelector('td.key').textContent,
                value: r.querySelector('td.value').textContent,
                binary: (r.querySelector('td.key .preview') || {dataset: {}}).dataset.binary,
                headers: [...r.querySelectorAll('.header-name')].map(e => e.textContent)}))""")
        return {r["offset"]: r for r in rows}

    browser.open(f"{dashboards.readonly}/topic?name={s.TOPIC}")  # the newest records: 7 is among them
    no_injected_elements(browser)
    assert (records()[7]["binary"], records()[7]["key"]) == ("true", "0x" + s.BAD_UTF8_KEY.hex())
    browser.open(f"{dashboards.readonly}/topic?name={s.DLQ}")  # copies of the rejected records, the worker's letter
    no_injected_elements(browser)
    shown = records()
    assert (s.MARKUP_KEY.decode(), s.MARKUP_VALUE.decode()) in {(r["key"], r["value"]) for r in shown.values()}, shown
    assert any(s.MARKUP_HEADER[0] in r["headers"] for r in shown.values()), shown


def test_a_markup_group_id_in_the_url_of_a_group_that_does_not_exist_shows_as_text(browser, dashboards):
    evil = "</title><script>alert(9)</script>\u202e"
    for page in ("share-group", "consumer-group", "failures"):
        browser.open(f"{dashboards.readonly}/{page}?group={q(evil)}")
        no_injected_elements(browser)
        assert "alert(9)" in browser.text(), page


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


