"""The dashboard's pages: their URL parameters, the data each loads, and the fragments (elements
with a fixed id, each rendered from the template ``_<id>.html``) that live updates replace.

A page GET and a live sampler go through the same ``load`` so that both show the same numbers.
Ids of groups and topics travel in query parameters (they may hold any character, '/' too).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from . import views
from .source import Source
from .workers import workers_view

__all__ = ["BadRequest", "PAGES", "Page", "Snapshots", "live_key", "load", "parse_params"]


class BadRequest(ValueError):
    """A page parameter that is missing or malformed (answered 400 with the reason)."""


@dataclass(frozen=True)
class Page:
    name: str
    template: str
    title: str
    fragments: tuple[str, ...]
    params: tuple[str, ...]  # accepted query parameters, in URL order
    fast: bool  # live cadence: the group cadence (1 s) when True, else the overview cadence (5 s)


PAGES: dict[str, Page] = {p.name: p for p in (
    Page("overview", "overview.html", "Overview", ("broker", "topics", "groups", "disk"), ("topics",), False),
    Page("topic", "topic.html", "Topic", ("partitions", "configs", "records"), ("name",), False),
    Page("share-group", "share_group.html", "Share group",
         ("sg-summary", "members", "lag", "lag-chart", "windows", "strip-panel"),
         ("group", "topic", "partition", "offset"), True),
    Page("consumer-group", "consumer_group.html", "Consumer group", ("cg-summary", "cg-members", "cg-offsets"),
         ("group",), True),
    Page("failures", "failures.html", "Failures", ("failures",), ("group",), False),
    Page("workers", "workers.html", "Workers", ("workers",), (), False),
)}


def _int(params: Mapping[str, str], name: str, minimum: int = 0) -> int | None:
    text = params.get(name)
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, got {text!r}") from None
    if value < minimum:
        raise BadRequest(f"{name} must be >= {minimum}, got {value}")
    return value


def parse_params(page: Page, query: Mapping[str, str]) -> dict[str, Any]:
    """The page's parameters from a query string, checked; BadRequest says what is wrong."""
    out: dict[str, Any] = {}
    if page.name == "overview":
        out["topics"] = query.get("topics") or None  # a part of a topic name: the topics panel shows those
    elif page.name == "topic":
        if not query.get("name"):
            raise BadRequest("the topic page needs ?name=TOPIC")
        out["name"] = query["name"]
    elif page.name in ("share-group", "consumer-group"):
        if not query.get("group"):
            raise BadRequest(f"the {page.title.lower()} page needs ?group=GROUP")
        out["group"] = query["group"]
        if page.name == "share-group":
            out["topic"] = query.get("topic") or None
            out["partition"] = _int(query, "partition")
            out["offset"] = _int(query, "offset")
            if out["offset"] is not None and (out["topic"] is None or out["partition"] is None):
                raise BadRequest("offset=O needs topic= and partition= too")
            if (out["topic"] is None) != (out["partition"] is None):
                raise BadRequest("topic= and partition= go together")
    elif page.name == "failures":
        out["group"] = query.get("group") or None
    return out


def query_string(page: Page, params: Mapping[str, Any]) -> str:
    return urlencode([(k, params[k]) for k in page.params if params.get(k) is not None])


def live_key(page: Page, params: Mapping[str, Any]) -> str:
    """The sampler key: the page and its parameters (the offset lookup is not live: left out)."""
    return page.name + "?" + query_string(page, {k: v for k, v in params.items() if k != "offset"})


async def load(page: Page, source: Source, history: views.History, params: Mapping[str, Any],
               live: bool = False) -> dict[str, Any]:
    """The template context of one page (its own fresh sample)."""
    s = source.settings
    if page.name == "overview":
        return views.overview_view(await source.overview(params.get("topics"), live=live), history, s.mode)
    if page.name == "topic":
        return views.topic_view(await source.topic(params["name"]), s.key_preview_bytes, s.value_preview_bytes)
    if page.name == "share-group":
        selected = None if params.get("topic") is None else (params["topic"], params["partition"])
        locate = None if live or params.get("offset") is None else (params["topic"], params["partition"],
                                                                   params["offset"])
        data = await source.share_group(params["group"], locate)
        return views.share_group_view(data, history, selected)
    if page.name == "consumer-group":
        return views.consumer_group_view(await source.consumer_group(params["group"]))
    if page.name == "failures":
        return views.failures_view(await source.failures(params.get("group")), s.value_preview_bytes)
    if page.name == "workers":
        return workers_view(await source.workers())
    raise BadRequest(f"no page {page.name!r}")


MAX_SNAPSHOTS = 256


class Snapshots:
    """The newest context of each page key, shared by page GETs and live samplers, so that a page
    costs the broker one load per cadence however many viewers load or watch it (five tabs
    reloading the overview of a broker with 1,000 topics are one Metadata, one ListOffsets and one
    DescribeLogDirs every 5 s, not five). A load younger than ``max_age_s`` is reused; loads of
    one key are one at a time (the second caller waits for the first and reuses its result).
    ``invalidate`` drops every snapshot: after an action the next page shows the broker's new state."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[str, tuple[float, int, dict[str, Any]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._generation = 0  # raised by invalidate: a load that started before it is not kept
        self.loads = 0  # loads done (tests and benchmarks read it)

    async def get(self, key: str, max_age_s: float, loader: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            entry = self._entries.get(key)
            if entry is not None and entry[1] == self._generation and self._clock() - entry[0] <= max_age_s:
                return entry[2]
            generation = self._generation
            ctx = await loader()
            self.loads += 1
            if generation == self._generation:
                self._entries.pop(key, None)
                self._entries[key] = (self._clock(), generation, ctx)  # newest last
                self._prune()
            return ctx

    def _prune(self) -> None:
        """At most MAX_SNAPSHOTS keys (any URL makes one): the least recently loaded go first."""
        for key in list(self._entries)[:max(0, len(self._entries) - MAX_SNAPSHOTS)]:
            del self._entries[key]
        for key in [k for k, lock in self._locks.items() if k not in self._entries and not lock.locked()]:
            del self._locks[key]

    def invalidate(self) -> None:
        self._generation += 1
        self._entries.clear()
