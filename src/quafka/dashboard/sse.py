"""Server-sent events (the HTML living standard's "text/event-stream"), written by hand.

Why not sse-starlette: it patches uvicorn's exit handler at import and keeps process-global state
(docs/dashboard.md, "Why these libraries"); the broker process may run several dashboards.

Framing: an event is ``event: NAME`` then one ``data: LINE`` per line of its payload, then a blank
line. The stream's parser ends a line at CRLF, at a lone CR and at a lone LF, so a payload is split
on all three: a broker string holding a CR can never start a field (an ``event:`` or ``id:`` line)
of its own. Event names come from the dashboard's fixed fragment ids and are checked anyway. A
comment (``: keepalive``) is written every ``keepalive_s`` seconds of silence so that proxies and
the browser keep the connection; the stream ends when the dashboard shuts down.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

__all__ = ["KEEPALIVE", "frame", "split_lines", "stream"]

KEEPALIVE = b": keepalive\n\n"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` as the event-stream parser sees them (CRLF, CR and LF all end one)."""
    return _LINE_BREAK.split(text)


def frame(event: str, data: str) -> bytes:
    """One event: the name, every line of ``data`` as its own ``data:`` field, a blank line."""
    if not _NAME.match(event):
        raise ValueError(f"event name {event!r} is not a dashboard fragment id")
    lines = "".join(f"data: {line}\n" for line in split_lines(data))
    return f"event: {event}\n{lines}\n".encode()


async def stream(queue: asyncio.Queue, shutdown: asyncio.Event, keepalive_s: float,
                 first: bytes = b"") -> AsyncIterator[bytes]:
    """The bytes of one SSE response: ``first`` (e.g. a ``retry:`` field), then every item put on
    ``queue`` (already framed; None ends the stream: the client was too slow), a keepalive comment
    after ``keepalive_s`` of silence, until ``shutdown`` is set."""
    if first:
        yield first
    stop = asyncio.ensure_future(shutdown.wait())
    get: asyncio.Future | None = None
    try:
        while not shutdown.is_set():
            get = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait((get, stop), timeout=keepalive_s, return_when=asyncio.FIRST_COMPLETED)
            if get not in done:
                get.cancel()
                if stop in done:
                    return
                yield KEEPALIVE
                continue
            item = get.result()
            if item is None:
                return
            yield item
    finally:  # the client left (the generator is closed) or the dashboard stops: leave nothing pending
        stop.cancel()
        if get is not None and not get.done():
            get.cancel()
