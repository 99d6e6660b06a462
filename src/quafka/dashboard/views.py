"""Pure view-models: what each page shows, computed from the Source's data (no I/O, no clock: the
sample's own time is passed in). The numbers of a page are computed here; the templates only
print them (escaped), and put the raw numbers in data-* attributes for the browser tests.

History keeps what the dashboard derives over time: records/s per topic from log-end-offset
deltas (works against Apache Kafka too: no broker metric needed) and each share group's lag over
time. It lives in the dashboard's memory only (lost on restart: the page says so).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from . import strip as strips
from .preview import display_text, preview_bytes, preview_headers
from .source import Unavailable, is_unavailable

__all__ = ["History", "consumer_group_view", "failures_view", "overview_view", "share_group_view",
           "topic_view"]

MIN_RATE_INTERVAL_MS = 500  # two offset samples closer than this give no new rate


class History:
    """Rates and lag series, fed by every sample (page loads and live samplers alike)."""

    def __init__(self, points: int) -> None:
        self.points = points
        self._offsets: tuple[int, dict[str, int]] | None = None
        self.rates: dict[str, float] = {}
        self._lag: dict[str, deque[tuple[int, dict[str, int]]]] = {}

    def record_offsets(self, t_ms: int, end_offsets: Mapping[tuple[str, int], int]) -> dict[str, float]:
        """Records/s per topic since the previous sample (the sum of its partitions' log-end-offset
        growth over the time between the two samples); topics first seen have no rate yet."""
        totals: dict[str, int] = {}
        for (topic, _), offset in end_offsets.items():
            totals[topic] = totals.get(topic, 0) + offset
        if self._offsets is not None:
            t0, before = self._offsets
            if t_ms - t0 < MIN_RATE_INTERVAL_MS:
                return self.rates
            seconds = (t_ms - t0) / 1000
            self.rates = {t: max(0, n - before[t]) / seconds for t, n in totals.items() if t in before}
        self._offsets = (t_ms, totals)
        return self.rates

    def record_lag(self, group: str, t_ms: int, lag: Mapping[str, int]) -> None:
        series = self._lag.setdefault(group, deque(maxlen=self.points))
        if series and series[-1][0] >= t_ms:
            return
        series.append((t_ms, dict(lag)))

    def lag_chart(self, group: str) -> dict[str, Any]:
        """uPlot's data: x in epoch seconds, one series per partition (null where it had no lag)."""
        series = list(self._lag.get(group, ()))
        names = sorted({name for _, lag in series for name in lag})
        return {"x": [t / 1000 for t, _ in series], "labels": names,
                "series": [[lag.get(name) for _, lag in series] for name in names]}


def _rows_or(value: Any, fn) -> Any:
    return value if is_unavailable(value) else fn(value)


def _lag_total(offsets: Any) -> int | None:
    if is_unavailable(offsets) or offsets is None:
        return None
    lags = [lag for _, lag in offsets.values()]
    return None if any(lag < 0 for lag in lags) else sum(lags)


def overview_view(data: Any, history: History, mode: str) -> dict[str, Any]:
    rates = {} if is_unavailable(data.end_offsets) else history.record_offsets(data.sample_ms, data.end_offsets)
    topics: Any = data.topics
    if not is_unavailable(topics):
        ends = {} if is_unavailable(data.end_offsets) else data.end_offsets
        topics = [{"name": name, "partitions": len(topics[name].partitions), "internal": topics[name].is_internal,
                   "end_offset": sum(ends.get((name, p), 0) for p in topics[name].partitions), "rate": rates.get(name)}
                  for name in data.topics_shown]
    groups: Any = data.groups
    if not is_unavailable(groups):
        rows = []
        for g in groups:
            row: dict[str, Any] = {"id": g.group_id, "type": g.type or "classic", "state": g.state, "members": None,
                                   "lag": None, "problem": None}
            if g.type == "share":
                desc, offsets = data.share.get(g.group_id), data.share_offsets.get(g.group_id)
                row["lag"] = _lag_total(offsets)
                if offsets is not None and not is_unavailable(offsets):
                    history.record_lag(g.group_id, data.sample_ms, _lag_by_partition(offsets))
            else:
                desc = data.consumer.get(g.group_id)
                offsets = data.consumer_offsets.get(g.group_id)
                if offsets is not None and not is_unavailable(offsets) and not is_unavailable(data.end_offsets):
                    row["lag"] = sum(max(0, data.end_offsets.get(tp, o) - o) for tp, (o, _) in offsets.items())
            if desc is not None and not is_unavailable(desc):
                row["members"] = len(desc.members)
                row["state"] = desc.state or row["state"]
            for part in (desc, offsets):
                if is_unavailable(part):
                    row["problem"] = part.reason
            rows.append(row)
        groups = rows
    listing = {"filter": data.topic_filter, "matching": data.topics_matching,
               "total": 0 if is_unavailable(data.topics) else len(data.topics)}
    return {"broker": _broker(data, mode), "topics": topics, "topic_listing": listing, "groups": groups,
            "log_dirs": _log_dirs(data.log_dirs), "sample_ms": data.sample_ms}


def _broker(data: Any, mode: str) -> dict[str, Any]:
    cluster = data.cluster
    out: dict[str, Any] = {"mode": mode, "quafka": data.quafka, "cluster": cluster}
    if not is_unavailable(cluster):
        out["cluster"] = {"id": cluster.cluster_id or "", "controller": cluster.controller_id,
                          "brokers": [{"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                                      for b in cluster.brokers]}
    return out


def _log_dirs(value: Any) -> Any:
    """DescribeLogDirs rows (Admin.describe_log_dirs: one per broker and path): the size of the
    partitions in it, the file system's usable and total bytes (None before DescribeLogDirs v4)."""
    if value is None or is_unavailable(value):
        return value
    return [{"broker": d.broker_id, "path": d.path, "total": d.total_bytes, "usable": d.usable_bytes,
             "size": d.size_bytes, "partitions": len(d.partitions),
             "error": None if d.error_code == 0 else f"error code {d.error_code}"} for d in value]


def _lag_by_partition(offsets: Mapping[tuple[str, int], tuple[int, int]]) -> dict[str, int]:
    return {f"{t}-{p}": lag for (t, p), (_, lag) in sorted(offsets.items()) if lag >= 0}


def topic_view(data: Any, key_bytes: int, value_bytes: int) -> dict[str, Any]:

    partitions: Any = data.description
    if partitions is not None and not is_unavailable(partitions):
        early = {} if is_unavailable(data.earliest) else data.earliest
        late = {} if is_unavailable(data.latest) else data.latest
        partitions = [{"partition": p, "leader": d.leader, "leader_epoch": d.leader_epoch,
                       "start": early.get(p), "end": late.get(p),
                       "records": None if p not in early or p not in late else late[p] - early[p]}
                      for p, d in sorted(partitions.partitions.items())]
    configs = _rows_or(data.configs, lambda entries: [
        {"name": e.name, "value": "(sensitive)" if e.sensitive else e.value, "default": e.is_default}
        for e in sorted(entries, key=lambda e: (e.is_default, e.name))])
    records = {}
    for p, recs in sorted(data.records.items()):
        records[p] = recs if is_unavailable(recs) else [
            {"offset": r.offset, "timestamp": r.timestamp, "key": preview_bytes(r.key, key_bytes),
             "value": preview_bytes(r.value, value_bytes), "headers": preview_headers(r.headers)}
            for r in reversed(recs)]
    return {"name": data.name, "display": display_text(data.name), "missing": data.description is None,
            "problem": data.description if is_unavailable(data.description) else None,
            "partitions": partitions, "configs": configs, "records": records, "sample_ms": data.sample_ms}


def share_group_view(data: Any, history: History, selected: tuple[str, int] | None,
                     strip_width: int = 1000, ranges_shown: int = 200) -> dict[str, Any]:

    desc = data.description
    members: Any = desc
    if desc is not None and not is_unavailable(desc):
        members = [{"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host, "rack": m.rack_id,
                    "epoch": m.member_epoch, "subscribed": list(m.subscribed_topics),
                    "assignment": [f"{t}-{p}" for t, ps in sorted(m.assignment.items()) for p in ps]}
                   for m in desc.members]
    offsets = data.offsets
    lag_rows: Any = offsets
    if not is_unavailable(offsets):
        history.record_lag(data.group, data.sample_ms, _lag_by_partition(offsets))
        lag_rows = [{"topic": t, "partition": p, "start": start, "lag": lag if lag >= 0 else None}
                    for (t, p), (start, lag) in sorted(offsets.items())]
    in_flight = data.in_flight
    windows: Any = in_flight
    panel: dict[str, Any] | None = None
    if not is_unavailable(in_flight):
        windows = [{"topic": v.topic, "partition": v.partition, "start": v.start_offset, "end": v.end_offset,
                    "in_flight": v.in_flight_count, "max_locks": v.max_record_locks,
                    "backoff": v.waiting_backoff_count, "delivery_time": v.waiting_delivery_count,
                    "blocked": v.blocked_count, "truncated": v.truncated, "dlq": v.dead_letter_topic,
                    "selected": (v.topic, v.partition) == selected}
                   for (_, _), v in sorted(in_flight.items())]
        chosen = in_flight.get(selected) if selected else None
        if chosen is None and in_flight and selected is None:
            chosen = in_flight[sorted(in_flight)[0]]
        if chosen is not None:
            for w in windows:
                w["selected"] = (w["topic"], w["partition"]) == (chosen.topic, chosen.partition)
            panel = {"view": chosen, "strip": strips.build_strip(chosen, strip_width),
                     "histogram": strips.delivery_histogram(chosen),
                     "expiries": strips.lock_expiries(chosen, data.sample_ms),
                     "ranges": chosen.ranges[:ranges_shown], "more_ranges": max(0, len(chosen.ranges) - ranges_shown)}
    configs = data.configs
    return {"group": data.group, "display": display_text(data.group),
            "missing": desc is None, "state": None if desc is None or is_unavailable(desc) else desc.state,
            "epoch": None if desc is None or is_unavailable(desc) else desc.group_epoch,
            "members": members, "lag": lag_rows, "lag_total": _lag_total(offsets),
            "chart": json.dumps(history.lag_chart(data.group), separators=(",", ":")),
            "windows": windows, "panel": panel, "located": data.located,
            "dlq": None if is_unavailable(configs) else (configs or {}).get("errors.deadletterqueue.topic.name"),
            "sample_ms": data.sample_ms}


def consumer_group_view(data: Any) -> dict[str, Any]:

    desc = data.description
    members: Any = desc
    if desc is not None and not is_unavailable(desc):
        members = [{"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host,
                    "instance": m.group_instance_id,
                    "assignment": [f"{t}-{p}" for t, ps in sorted(m.assignment.items()) for p in ps]}
                   for m in desc.members]
    rows: Any = data.committed
    if not is_unavailable(rows):
        latest = {} if is_unavailable(data.latest) else data.latest
        rows = [{"topic": t, "partition": p, "committed": o, "end": latest.get((t, p)),
                 "lag": None if (t, p) not in latest else max(0, latest[(t, p)] - o)}
                for (t, p), (o, _) in sorted(rows.items())]
    return {"group": data.group, "display": display_text(data.group), "missing": desc is None,
            "state": None if desc is None or is_unavailable(desc) else desc.state,
            "protocol": None if desc is None or is_unavailable(desc) else desc.assignment_strategy,
            "type": None if desc is None or is_unavailable(desc) else desc.type,
            "members": members, "offsets": rows, "latest_problem": data.latest if is_unavailable(data.latest) else None,
            "lag_total": None if is_unavailable(rows) else sum(r["lag"] or 0 for r in rows),
            "sample_ms": data.sample_ms}


def failures_view(data: Any, value_bytes: int) -> dict[str, Any]:

    groups = []
    for gid, letters in sorted(data.letters.items()):
        entry: dict[str, Any] = {"group": gid, "display": display_text(gid), "problem": None, "classes": [],
                                 "source_problem": data.source_problems.get(gid)}
        if is_unavailable(letters):
            entry["problem"] = letters
        else:
            by_class: dict[str, list[Any]] = {}
            for letter in letters:
                name = letter.error_class or f"(broker: {letter.reason or 'unknown'})"
                by_class.setdefault(name, []).append(letter)
            entry["count"] = len(letters)
            entry["classes"] = [
                {"name": name, "count": len(items), "latest": max(x.timestamp_ms for x in items),
                 "letters": [{"dlq_topic": x.dlq_topic, "dlq_partition": x.dlq_partition, "dlq_offset": x.dlq_offset,
                              "topic": x.topic, "partition": x.partition, "offset": x.offset,
                              "delivery_count": x.delivery_count, "reason": x.reason or "",
                              "error_class": x.error_class or "", "message": x.error_message or x.message or "",
                              "died_at": x.died_at, "timestamp_ms": x.timestamp_ms, "route": x.route or "",
                              "key": preview_bytes(x.key, 256), "value": preview_bytes(x.value, value_bytes),
                              "has_copy": x.has_copy, "source": _source_preview(data, x, value_bytes)}
                             for x in sorted(items, key=lambda x: -x.timestamp_ms)]}
                for name, items in sorted(by_class.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
        groups.append(entry)
    return {"groups": groups, "problem": data.groups if is_unavailable(data.groups) else None,
            "sample_ms": data.sample_ms}


def unavailable_reason(values: Iterable[Any]) -> Unavailable | None:
    for v in values:
        if is_unavailable(v):
            return v
    return None


def _source_preview(data: Any, letter: Any, value_bytes: int) -> dict[str, Any] | None:
    """A headers-only letter's payload, from its source record: {"state": "read", key, value} /
    {"state": "gone"} (no longer in the log) / None (not read yet, or the letter holds a copy)."""
    if letter.has_copy:
        return None
    key = (letter.topic, letter.partition, letter.offset)
    if key not in data.sources:
        return None
    record = data.sources[key]
    if record is None:
        return {"state": "gone"}
    return {"state": "read", "key": preview_bytes(record.key, 256), "value": preview_bytes(record.value, value_bytes)}
