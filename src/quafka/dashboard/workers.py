"""The workers page: quafka.framework workers' metrics, scraped from their ``/metrics`` URLs
(``quafka dashboard --worker-metrics URL``; ``quafka worker --metrics-port``), summed per route.

The Prometheus text format (0.0.4) is parsed here by a small parser of the lines the dashboard
needs (``name{labels} value``; comments skipped; label values with \\\\, \\" and \\n escapes)
rather than with prometheus-client: that would become a dependency of every broker install for one
page, and its parser accepts far more than the framework's exporter (quafka/framework/metrics.py)
writes. Series the page does not know are ignored. Rates are derived by the dashboard from two
scrapes (the exporter has counters only).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from .source import is_unavailable

__all__ = ["parse_exposition", "workers_view"]

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _unescape(text: str) -> str:
    return re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m.group(0)], text)


def parse_exposition(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of each sample line; malformed lines raise ValueError naming them."""
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            raise ValueError(f"line {number} is not a Prometheus sample: {line[:120]!r}")
        name, _, body, value, _ = m.groups()
        labels: dict[str, str] = {}
        if body:
            pos = 0
            while pos < len(body):
                lm = _LABEL.match(body, pos)
                if lm is None:
                    raise ValueError(f"line {number}: bad labels {body[:120]!r}")
                labels[lm.group(1)] = _unescape(lm.group(2))
                pos = lm.end()
        try:
            number_value = float(value)
        except ValueError:
            raise ValueError(f"line {number}: bad value {value!r}") from None
        yield name, labels, number_value


_PREFIX = "quafka_framework_"


def _route_summary(text: str) -> dict[str, dict[str, Any]]:
    routes: dict[str, dict[str, Any]] = {}

    def route(name: str) -> dict[str, Any]:
        return routes.setdefault(name, {"route": name, "group": "", "topic": "", "group_type": "",
                                        "finished": 0.0, "failed": 0.0, "in_flight": 0.0, "workers": 0.0,
                                        "renewals_ok": 0.0, "renewals_failed": 0.0, "dead_letters": 0.0,
                                        "outcomes": {}, "failures": {}})

    for name, labels, value in parse_exposition(text):
        if not name.startswith(_PREFIX) or "route" not in labels:
            continue
        r = route(labels["route"])
        short = name[len(_PREFIX):]
        if short == "jobs_total":
            r["finished" if labels.get("status") == "finished" else "failed"] += value
        elif short == "messages_total":
            outcome = labels.get("outcome", "?")
            r["outcomes"][outcome] = r["outcomes"].get(outcome, 0.0) + value
        elif short == "failures_total":
            cls = labels.get("error_class", "?")
            r["failures"][cls] = r["failures"].get(cls, 0.0) + value
        elif short == "messages_in_flight":
            r["in_flight"] += value
        elif short == "workers":
            r["workers"] += value
        elif short == "renewals_total":
            r["renewals_ok" if labels.get("result") == "ok" else "renewals_failed"] += value
        elif short == "dead_letters_produced_total":
            r["dead_letters"] += value
        elif short == "route_info":
            r.update(group=labels.get("group", ""), topic=labels.get("topic", ""),
                     group_type=labels.get("group_type", ""))
    return routes


def workers_view(data: Any) -> dict[str, Any]:
    """Per scraped URL: its routes (jobs finished/failed, messages by outcome, failures by error
    class, in flight, worker threads, renewals) or why it could not be read."""
    endpoints = []
    for url, text in data.scrapes.items():
        entry: dict[str, Any] = {"url": url, "problem": None, "routes": []}
        if is_unavailable(text):
            entry["problem"] = text.reason
        else:
            try:
                routes = _route_summary(text)
            except ValueError as exc:
                entry["problem"] = f"{url} is not a Prometheus text exposition: {exc}"
            else:
                entry["routes"] = [dict(r, outcomes=sorted(r["outcomes"].items()),
                                        failures=sorted(r["failures"].items(), key=lambda kv: (-kv[1], kv[0])))
                                   for _, r in sorted(routes.items())]
                if not routes:
                    entry["problem"] = f"{url} exposes no quafka_framework_* series (is it a quafka worker?)"
        endpoints.append(entry)
    return {"endpoints": endpoints, "sample_ms": data.sample_ms}
