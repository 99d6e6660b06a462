"""quafka.dashboard.preview: what a page may show of keys, values, headers, ids and names (pure).
Hypothesis properties print their falsifying example and a reproduction blob on failure
(``print_blob``); rerun one with ``@reproduce_failure`` or ``--hypothesis-seed``."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quafka.dashboard.preview import (
    ELLIPSIS,
    NULL_TEXT,
    Preview,
    display_text,
    preview_bytes,
    preview_headers,
    visible,
)

SETTINGS = settings(max_examples=300, deadline=None, print_blob=True)
HIDDEN = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def test_text_markup_stays_text():
    assert preview_bytes(b"<script>alert(1)</script>") == Preview("<script>alert(1)</script>", False, False, False, 25)


def test_null_is_not_empty():
    assert preview_bytes(None) == Preview(NULL_TEXT, binary=False, truncated=False, null=True, size=0)
    assert preview_bytes(b"") == Preview("", binary=False, truncated=False, null=False, size=0)


def test_invalid_utf8_is_hex():
    assert preview_bytes(b"ok\xff\xfe") == Preview("0x6f6bfffe", binary=True, truncated=False, null=False, size=4)
    assert preview_bytes(b"\xc3\x28").text == "0xc328"  # a lead byte without its continuation
    assert preview_bytes(b"\xed\xa0\x80").binary  # an encoded surrogate is not UTF-8


def test_a_cut_inside_a_character_backs_off_instead_of_turning_hex():
    euro = "\u20ac".encode()  # 3 bytes
    for cut in (1, 2):
        assert preview_bytes(b"ab" + euro + b"cd", 2 + cut) == Preview("ab", False, True, False, 7)
    assert preview_bytes(b"ab" + euro + b"cd", 5) == Preview("ab\u20ac", False, True, False, 7)
    emoji = "\U0001f600".encode()  # 4 bytes: the cut may leave 3 of them
    assert preview_bytes(emoji * 2, 7) == Preview("\U0001f600", False, True, False, 8)
    # the same incomplete character at the very end of the data is not a cut: the data is not UTF-8
    assert preview_bytes(b"ab" + euro[:2]).binary
    # an invalid byte just before the cut is not mistaken for a cut character
    assert preview_bytes(b"ab\xff" + b"cd", 3).binary


def test_binary_hex_and_size_limits():
    data = bytes(range(255, -1, -1)) * 10
    p = preview_bytes(data, 16)
    assert p == Preview("0x" + bytes(range(255, 239, -1)).hex(), binary=True, truncated=True, null=False, size=2560)
    # valid UTF-8 made of controls is text, every control shown as an escape
    assert preview_bytes(bytes(range(4))) == Preview("\\u0000\\u0001\\u0002\\u0003", False, False, False, 4)
    assert preview_bytes(b"x" * 1024).truncated is False and preview_bytes(b"x" * 1025).truncated is True
    assert preview_bytes(b"x" * 1025).text == "x" * 1024
    with pytest.raises(ValueError, match="limit"):
        preview_bytes(b"x", -1)


def test_controls_and_bidi_become_visible_in_values_but_lines_and_tabs_stay():
    raw = "a\x00b\x1b[31mc\u202eevil\u2066\u200b\ufeff\x85\u2028\r\n\tz".encode()
    assert preview_bytes(raw).text == "a\\u0000b\\u001b[31mc\\u202eevil\\u2066\\u200b\\ufeff\\u0085\\u2028\\u000d\n\tz"
    assert preview_bytes("\U000e0041".encode()).text == "\\U000e0041"  # a tag character (format, above U+FFFF)


def test_display_text_escapes_ids_and_cuts_them():
    group = "<img src=x onerror=alert(1)>"
    assert display_text(group) == group  # markup is the template's to escape; nothing hidden here
    assert display_text("orders\u202egnp.exe") == "orders\\u202egnp.exe"
    assert display_text("a\nb\tc") == "a\\u000ab\\u0009c"  # an id keeps no layout
    assert display_text("x" * 200) == "x" * 200
    assert display_text("x" * 201) == "x" * 199 + ELLIPSIS
    assert display_text("abcd\u202e", 6) == "abcd" + ELLIPSIS  # an escape is never cut in half
    assert display_text("ab\u202e", 8) == "ab\\u202e"
    with pytest.raises(ValueError, match="limit"):
        display_text("x", 0)


def test_headers_in_order_limited_and_names_escaped():
    headers = [("trace", b"t-1"), ("evil\u202ename", b"<b>"), ("bin", b"\xff"), ("trace", None)]
    assert preview_headers(headers) == (
        ("trace", Preview("t-1", False, False, False, 3)), ("evil\\u202ename", Preview("<b>", False, False, False, 3)),
        ("bin", Preview("0xff", True, False, False, 1)), ("trace", Preview(NULL_TEXT, False, False, True, 0)))
    many = [(f"h{i}", b"v" * 300) for i in range(100)]
    shown = preview_headers(many, limit_each=10, max_headers=64)
    assert len(shown) == 64 and shown[-1][0] == "h63"
    assert all(p.truncated and p.text == "v" * 10 and p.size == 300 for _, p in shown)
    assert preview_headers(None) == () and preview_headers([(b"raw\xff", b"v")])[0][0] == "raw\ufffd"


def _no_hidden(text: str, keep: str = "") -> bool:
    return all(ch in keep or unicodedata.category(ch) not in HIDDEN for ch in text)


def _incomplete(tail: bytes) -> bool:
    """``tail`` is the start of a UTF-8 character, cut short (Python's own decoder says so)."""
    try:
        tail.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.reason == "unexpected end of data" and exc.start == 0
    return False


def _reference(data: bytes, limit: int) -> tuple[str, bool]:
    chunk = data[:limit]
    backs = range(4) if len(data) > limit else range(1)
    for back in backs:
        if back > len(chunk) or (back and not _incomplete(chunk[len(chunk) - back:])):
            continue
        try:
            text = chunk[:len(chunk) - back].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return "".join(ch if ch in "\n\t" or unicodedata.category(ch) not in HIDDEN else "\\u%04x" % ord(ch)
                       if ord(ch) <= 0xFFFF else "\\U%08x" % ord(ch) for ch in text), False
    return "0x" + chunk.hex(), True


@SETTINGS
@given(st.one_of(st.binary(max_size=64), st.text(max_size=32).map(str.encode)), st.integers(min_value=0, max_value=80))
def test_any_bytes_give_a_safe_preview(data, limit):
    p = preview_bytes(data, limit)
    assert (p.size, p.truncated, p.null) == (len(data), len(data) > limit, False)
    assert _no_hidden(p.text, "\n\t")
    assert (p.text, p.binary) == _reference(data, limit)


@SETTINGS
@given(st.text(max_size=64), st.integers(min_value=0, max_value=70))
def test_utf8_text_is_never_shown_as_hex(text, limit):
    p = preview_bytes(text.encode(), limit)
    assert not p.binary


@SETTINGS
@given(st.text(max_size=300), st.integers(min_value=1, max_value=250))
def test_display_text_is_bounded_and_hides_nothing(text, limit):
    shown = display_text(text, limit)
    assert len(shown) <= limit
    assert _no_hidden(shown)
    whole = visible(text)
    assert shown == whole or (shown.endswith(ELLIPSIS) and whole.startswith(shown[:-1]) and len(whole) >= limit)
    if text.isprintable() and len(text) <= limit:
        assert shown == text
