"""Safe, size-limited previews of what the broker hands over: record keys, values and headers (bytes,
or None for Kafka's null) and ids and names (group ids, topic names, member and client ids, header
names), for the dashboard's pages.

A preview is text a person can read and nothing else:

- At most ``limit`` bytes are looked at (``truncated`` says there were more; ``size`` is the full
  length). A cut can fall inside a multi-byte UTF-8 character: the incomplete tail (at most 3
  bytes) is left out rather than shown as an error.
- The bytes are decoded as UTF-8, strictly; anything that is not valid UTF-8 is shown as
  ``0x``-hex of the bytes looked at (``binary``), as `quafka share-groups` shows such keys.
- Control characters (C0, DEL, C1), Unicode format characters (category Cf: the bidirectional
  embeddings, overrides and isolates U+202A-U+202E and U+2066-U+2069, U+200B-U+200F, U+FEFF, ...),
  line and paragraph separators and lone surrogates are replaced with a visible escape,
  ``\\uXXXX`` (``\\UXXXXXXXX`` above U+FFFF): a group id holding U+202E could otherwise show its
  text reversed and pass for another, and a value holding ESC or NUL could hide what follows.
  A value's line feeds and tabs are kept (a multi-line value reads as lines in a ``<pre>``); an id
  keeps none.
- Kafka's null (a record without a key, a header without a value) is ``null=True`` with the text
  ``NULL_TEXT``, told apart from an empty value (``size`` 0, text "").

The text is still HTML: the templates escape it (autoescape), this module does not - escaping is
the template's job, and escaping twice would show ``&amp;lt;`` to the reader. Kafka's own tools
print keys and values as they are (``kafka-console-consumer.sh``, ``DefaultMessageFormatter``),
which a terminal survives; a browser page that other people open is what needs the care here.

Pure: no I/O, clock or randomness.
"""

from __future__ import annotations

import codecs
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ELLIPSIS", "NULL_TEXT", "Preview", "display_text", "preview_bytes", "preview_headers", "visible"]

#: the text of Kafka's null (no key, no value); the template styles it apart by ``Preview.null``
NULL_TEXT = "(null)"
#: what ends a cut id or name
ELLIPSIS = "\u2026"
#: Unicode general categories replaced with a visible escape: controls, format characters (bidi
#: controls, zero-width characters, BOM), surrogates, line and paragraph separators
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
#: the longest incomplete UTF-8 sequence a cut can leave at the end (a 4-byte character less one)
_MAX_CUT_TAIL = 3


@dataclass(frozen=True)
class Preview:
    """What a page shows of a key, a value or a header value."""

    text: str  # safe to print (still HTML-escaped by the template): UTF-8 text, or hex "0x..."
    binary: bool  # not valid UTF-8 -> hex
    truncated: bool  # more than `limit` bytes
    null: bool  # None (Kafka null), shown as a distinct token
    size: int  # full length in bytes (0 for null)


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _hidden(ch: str) -> bool:
    return unicodedata.category(ch) in _HIDDEN_CATEGORIES


def visible(text: str, keep_layout: bool = False) -> str:
    """``text`` with every control, format and separator character replaced by ``\\uXXXX``;
    ``keep_layout`` keeps line feeds and tabs as they are."""
    if text.isprintable():  # no Cc, Cf, Cs, Zl or Zp (str.isprintable refuses them all)
        return text
    kept = "\n\t" if keep_layout else ""
    return "".join(_escape(ch) if ch not in kept and _hidden(ch) else ch for ch in text)


def _decode_prefix(chunk: bytes, cut: bool) -> str | None:
    """The chunk as strict UTF-8 text, or None when it is not UTF-8. ``cut``: the chunk is the
    start of longer data, so an incomplete character at its end (at most 3 bytes) is dropped."""
    # the incremental decoder keeps an incomplete character's bytes back when not final (at most
    # _MAX_CUT_TAIL of them) and raises at the first byte that no UTF-8 text can hold
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        return decoder.decode(chunk, final=not cut)
    except UnicodeDecodeError:
        return None


def preview_bytes(data: bytes | None, limit: int = 1024) -> Preview:
    """A key's or a value's preview: at most ``limit`` bytes, as text when they are UTF-8, else as
    hex. Only the bytes looked at decide: a value whose first ``limit`` bytes are UTF-8 and whose
    rest is not is shown as (truncated) text."""
    if limit < 0:
        raise ValueError(f"limit must be >= 0, not {limit}")
    if data is None:
        return Preview(NULL_TEXT, binary=False, truncated=False, null=True, size=0)
    data = bytes(data)
    size = len(data)
    truncated = size > limit
    chunk = data[:limit]
    text = _decode_prefix(chunk, truncated)
    if text is None:
        return Preview("0x" + chunk.hex(), binary=True, truncated=truncated, null=False, size=size)
    return Preview(visible(text, keep_layout=True), binary=False, truncated=truncated, null=False, size=size)


def display_text(text: str, limit: int = 200) -> str:
    """An id or a name (group id, topic name, member id, client id, host, header name) for display:
    controls and bidi/format characters made visible as ``\\uXXXX`` (line feeds and tabs too), cut
    to at most ``limit`` characters of what is shown, ending in an ellipsis when cut. An escape is
    never cut in the middle. For URLs use the raw id (``urllib.parse.quote(id, safe="")``), never
    this."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, not {limit}")
    pieces: list[str] = []
    shown = 0
    for i, ch in enumerate(text):
        piece = _escape(ch) if _hidden(ch) else ch
        # the last piece may take the place the ellipsis would have needed only when nothing follows
        room = limit if i == len(text) - 1 else limit - 1
        if shown + len(piece) > room:
            return "".join(pieces) + ELLIPSIS
        pieces.append(piece)
        shown += len(piece)
    return "".join(pieces)


def _header_name(name: str | bytes | None) -> str:
    if name is None:
        return NULL_TEXT
    if isinstance(name, (bytes, bytearray)):
        # the wire's header keys are strings; a reader that handed bytes gets them decoded leniently
        # (undecodable bytes as U+FFFD, which is printable and marks the spot)
        name = bytes(name).decode("utf-8", "replace")
    return display_text(name)


def preview_headers(headers: Iterable[tuple[str | bytes | None, bytes | None]] | None, limit_each: int = 256,
                    max_headers: int = 64) -> tuple[tuple[str, Preview], ...]:
    """A record's headers, in order, as ``(name for display, value preview)``: at most
    ``max_headers`` of them (a caller showing "N more" compares with ``len(headers)``), each value
    cut at ``limit_each`` bytes. Names go through ``display_text``; a header may repeat a name."""
    if max_headers < 0:
        raise ValueError(f"max_headers must be >= 0, not {max_headers}")
    out: list[tuple[str, Preview]] = []
    for name, value in headers or ():
        if len(out) >= max_headers:
            break
        out.append((_header_name(name), preview_bytes(value, limit_each)))
    return tuple(out)
