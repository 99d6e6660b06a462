"""Java .properties text, parsed as `java.util.Properties.load` reads it (what Kafka's tools and
broker read their config files with, and Spark its spark-defaults.conf), one parser for the
broker's `server.properties`, the tools' `--command-config` files and the Spark runner:

- `#` or `!` first on a line makes it a comment; blank lines are skipped;
- a key ends at the first unescaped `=`, `:` or whitespace; whitespace around the separator is
  skipped, so `key=value`, `key: value` and `key value` are one thing; a line with only a key
  gives it the empty value;
- a line ending in an odd number of backslashes continues on the next line (its leading
  whitespace dropped); a comment line never continues;
- the escapes backslash-t, -n, -r, -f and backslash-u followed by four hex digits (a code unit);
  a backslash before any other character is that character (so backslash before `=`, `:`, a
  space or another backslash puts that character in a key or value);
- keys and values are trimmed at the end (Kafka trims config values); the last of repeated keys wins.
"""

from __future__ import annotations

import re

__all__ = ["PropertiesError", "parse_properties"]


class PropertiesError(ValueError):
    """Malformed properties text: `key` is the entry's key, `text` the part that is malformed."""

    def __init__(self, key: str, text: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.text = text


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java .properties text: `#`/`!` comment lines, `key=value`, `key: value` or `key value`,
    backslash escapes and backslash line continuations. Keys and values are trimmed; the last of
    repeated keys wins."""
    props: dict[str, str] = {}
    lines = re.split(r"\r\n|\r|\n", text)
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(" \t\f")
            i += 1
        key, value = _split_property(line)
        props[_unescape(key, key)] = _unescape(key, _rstrip_unescaped(value))
    return props


def _continues(line: str) -> bool:
    n = len(line) - len(line.rstrip("\\"))
    return n % 2 == 1


def _split_property(line: str) -> tuple[str, str]:
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=: \t\f":
            break
        i += 1
    key, j = line[:i], i
    while j < n and line[j] in " \t\f":
        j += 1
    if j < n and line[j] in "=:":
        j += 1
        while j < n and line[j] in " \t\f":
            j += 1
    return key, line[j:]


def _rstrip_unescaped(value: str) -> str:
    while value and value[-1] in " \t\f":
        stripped = value[:-1]
        if _continues(stripped):  # the whitespace was escaped
            break
        value = stripped
    return value


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(key: str, text: str) -> str:
    if "\\" not in text:
        return text
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        c = text[i + 1]
        if c == "u":
            digits = text[i + 2 : i + 6]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise PropertiesError(key, text, "Malformed \\uxxxx encoding in the properties text")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(c, c))
            i += 2
    return "".join(out)
