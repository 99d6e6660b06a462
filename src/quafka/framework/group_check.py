"""The group settings check: at start, each route is compared with the configs of its group on the
broker, because a share group's behaviour is the group's, not the app's. The issue that asked for
it: a group's ``share.delivery.count.limit`` of 2 against an app's ``max_attempts=3`` went
unnoticed; the broker archived (or dead-lettered) every failing job at delivery 2 while the
worker's log said nothing had been dead-lettered.

What is compared, for a share route (``check``; ``compare`` is the pure part):

- ``max_attempts`` against ``share.delivery.count.limit``: a limit below ``max_attempts`` means the
  broker ends a failing record's deliveries first;
- ``lock_duration_ms`` (and so the renewals, planned at half of it) against
  ``share.record.lock.duration.ms``;
- ``dead_letter_topic`` against ``errors.deadletterqueue.topic.name``, and, when the broker writes
  the route's dead letters, ``errors.deadletterqueue.copy.record.enable`` (off: letters without the
  record's key and value);
- ``share.assignment.interval.ms`` and ``share.heartbeat.interval.ms``: the wait of a worker that
  joins, explained in one line per group;
- ``share.auto.offset.reset``: ``latest`` (Kafka's default) is explained in one line per group;
- every config the route declares in ``group_configs``.

A consumer group's configs say little about a route: ``auto_offset_reset`` is the client's config,
not the group's, so only the declared ``group_configs`` (consumer.*) are compared.

A difference is one WARNING line naming the route, the config, both values and the command that
fixes it. ``apply`` (``quafka worker --apply-group-configs``) first logs each group's diff and
then sets the declared configs with IncrementalAlterConfigs. The configs read are kept per route
(``Runtime.group_configs``) for the workers and the health monitor.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from quafka.client import Admin, KafkaException

from .dead_letters import BROKER
from .routing import Route
from .settings import GROUP_CONFIG_TYPES, SHARE, RouteProblem, admin_config, group_config_text

__all__ = ["GroupConfigError", "apply", "check", "compare", "fix_command", "group_config_problems",
           "config_int", "join_wait_ms", "same_value"]

log = logging.getLogger("quafka.framework")

DELIVERY_LIMIT = "share.delivery.count.limit"
LOCK_DURATION = "share.record.lock.duration.ms"
ASSIGNMENT_INTERVAL = "share.assignment.interval.ms"
HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"
AUTO_OFFSET_RESET = "share.auto.offset.reset"
DLQ_TOPIC = "errors.deadletterqueue.topic.name"
DLQ_COPY = "errors.deadletterqueue.copy.record.enable"
# Kafka's defaults (and quafka's), for a listing that lacks them
DEFAULT_ASSIGNMENT_INTERVAL_MS = 1000
DEFAULT_HEARTBEAT_INTERVAL_MS = 5000


class GroupConfigError(RuntimeError):
    """The declared group configs could not be applied (``apply_group_configs``); raised at start."""


def same_value(name: str, current: str | None, wanted: Any) -> bool:
    """Whether a group's ``current`` value is the ``wanted`` one, compared as the config's type."""
    if current is None:
        return False
    text = group_config_text(wanted).strip()
    kind = GROUP_CONFIG_TYPES.get(name, "string")
    try:
        if kind in ("int", "long"):
            return int(current) == int(text)
        if kind == "double":
            return float(current) == float(text)
    except ValueError:
        return False
    if kind == "boolean":
        return current.strip().lower() == text.lower()
    return current == text


def fix_command(bootstrap: str, group: str, *, set_: Mapping[str, Any] | None = None,
                delete: Iterable[str] = ()) -> str:
    """The ``quafka configs`` command that sets (or deletes) a group's configs."""
    parts = ["quafka configs", f"--bootstrap-server {shlex.quote(bootstrap)}", "--entity-type groups",
             f"--entity-name {shlex.quote(group)}", "--alter"]
    if set_:
        pairs = []
        for name, value in set_.items():
            text = group_config_text(value)
            pairs.append(f"{name}=[{text}]" if "," in text else f"{name}={text}")  # kafka-configs' brackets
        parts.append(f"--add-config {shlex.quote(','.join(pairs))}")
    delete = list(delete)
    if delete:
        parts.append(f"--delete-config {','.join(delete)}")
    return " ".join(parts)


def join_wait_ms(configs: Mapping[str, str | None]) -> int:
    """How long a share-group worker that joins may wait for its first partitions: the group's
    target assignment is recomputed at most once per share.assignment.interval.ms (KIP-1263), and a
    member learns it at its next heartbeat."""
    return config_int(configs, ASSIGNMENT_INTERVAL, DEFAULT_ASSIGNMENT_INTERVAL_MS) + \
        config_int(configs, HEARTBEAT_INTERVAL, DEFAULT_HEARTBEAT_INTERVAL_MS)


def config_int(configs: Mapping[str, str | None], name: str, default: int) -> int:
    try:
        return int(configs.get(name) or default)
    except ValueError:
        return default


# ---------------------------------------------------------------------------- validation (no connection)

def group_config_problems(routes: Iterable[Route]) -> list[RouteProblem]:
    """Routes of one group that declare different values for one group config: one problem each
    (a group has one value; the second route's would silently win or lose)."""
    first: dict[tuple[str, str], tuple[Route, Any]] = {}
    problems = []
    for route in routes:
        for name, value in (route.settings.get("group_configs") or {}).items():
            other, theirs = first.setdefault((route.group, name), (route, value))
            if other is not route and not same_value(name, group_config_text(theirs), value):
                problems.append(RouteProblem(route.name, f"group_configs[{name!r}]", (
                    f"{group_config_text(value)!r} differs from route {other.name!r}'s {group_config_text(theirs)!r}; "
                    f"group {route.group!r} has one {name}")))
    return problems


def _declared_by_group(routes: Iterable[Route]) -> dict[str, tuple[dict[str, str], list[str]]]:
    """{group: (its declared configs, the names of the routes declaring them)}."""
    out: dict[str, tuple[dict[str, str], list[str]]] = {}
    for route in routes:
        declared = route.settings.get("group_configs") or {}
        if declared:
            configs, names = out.setdefault(route.group, ({}, []))
            configs.update({k: group_config_text(v).strip() for k, v in declared.items()})
            names.append(route.name)
    return out


# ---------------------------------------------------------------------------- apply (connects)

def apply(kafka: Mapping[str, Any], routes: Iterable[Route]) -> dict[str, dict[str, tuple[str | None, str]]]:
    """Set each group's declared configs (``--apply-group-configs``): the diff is logged first
    ("group G: share.delivery.count.limit 2 -> 5"), then applied with IncrementalAlterConfigs (the
    group's other configs stay). Returns {group: {config: (old, new)}}; GroupConfigError if the
    broker refuses."""
    by_group = _declared_by_group(routes)
    if not by_group:
        log.info("--apply-group-configs: no route declares group_configs; nothing to apply")
        return {}
    applied: dict[str, dict[str, tuple[str | None, str]]] = {}
    try:
        with Admin(admin_config(kafka)) as admin:
            for group, (declared, names) in by_group.items():
                current = admin.describe_configs("group", group)
                diff = {k: (current.get(k), v) for k, v in declared.items() if not same_value(k, current.get(k), v)}
                if not diff:
                    log.info("group %s: group configs already as declared (routes %s)", group, ", ".join(names))
                    continue
                log.info("group %s: %s (--apply-group-configs, routes %s)", group,
                         ", ".join(f"{k} {'(unset)' if old is None else old} -> {new}" for k, (old, new) in diff.items()),
                         ", ".join(names))
                try:
                    admin.alter_configs("group", group, set={k: new for k, (_old, new) in diff.items()})
                except KafkaException as exc:
                    raise GroupConfigError(f"group {group!r}: applying {', '.join(f'{k}={n}' for k, (_, n) in diff.items())} "
                                           f"(routes {', '.join(names)}): {exc}") from exc
                log.info("group %s: applied %d group config%s", group, len(diff), "" if len(diff) == 1 else "s")
                applied[group] = diff
    except KafkaException as exc:
        raise GroupConfigError(f"--apply-group-configs: cannot read the groups' configs: {exc}") from exc
    return applied


# ---------------------------------------------------------------------------- check (connects)

def check(kafka: Mapping[str, Any], routes: Iterable[Route],
          dead_letter_modes: Mapping[str, str] | None = None) -> dict[str, dict[str, str]]:
    """Read each route's group configs, log every difference (WARNING) and the explanations (INFO);
    returns {route name: its group's configs}, {} for a route whose group could not be read."""
    routes = list(routes)
    bootstrap = str(kafka["bootstrap.servers"])
    modes = dict(dead_letter_modes or {})
    by_group: dict[str, dict[str, str] | None] = {}
    out: dict[str, dict[str, str]] = {}
    try:
        with Admin(admin_config(kafka)) as admin:
            for route in routes:
                if route.group in by_group:
                    continue
                try:
                    read = admin.describe_configs("group", route.group)
                    by_group[route.group] = {k: v for k, v in read.items() if v is not None}
                except KafkaException as exc:
                    by_group[route.group] = None
                    log.warning("group %s: cannot read its configs (%s); the group settings check is skipped for "
                                "routes %s", route.group, exc,
                                ", ".join(r.name for r in routes if r.group == route.group))
    except KafkaException as exc:  # not even a connection
        log.warning("cannot read the groups' configs (%s); the group settings check is skipped", exc)
    explained: set[str] = set()
    for route in routes:
        configs = by_group.get(route.group)
        if configs is None:
            out[route.name] = {}
            continue
        out[route.name] = dict(configs)
        for line in compare(route, configs, bootstrap, modes.get(route.name)):
            log.warning("%s", line)
        if route.group_type == SHARE and route.group not in explained:
            explained.add(route.group)
            for line in explain(route.group, configs, bootstrap, route.settings.get("group_configs") or {}):
                log.info("%s", line)
    return out


def compare(route: Route, configs: Mapping[str, str], bootstrap: str, dead_letter_mode: str | None = None) -> list[str]:
    """The WARNING lines for ``route`` against its group's ``configs`` (pure)."""
    group, settings = route.group, route.settings
    declared = {k: group_config_text(v).strip() for k, v in (settings.get("group_configs") or {}).items()}
    lines = []
    for name, wanted in declared.items():
        current = configs.get(name)
        if name not in configs:
            lines.append(f"route {route.name}: group_configs sets {name}={wanted}, but the broker of group {group} does not "
                         f"list it (an Apache Kafka broker has no quafka.* configs); it cannot be applied")
        elif not same_value(name, current, wanted):
            lines.append(f"route {route.name}: group_configs sets {name}={wanted} but group {group} has "
                         f"{name}={current}; fix: {fix_command(bootstrap, group, set_={name: wanted})}, or start "
                         "the worker with --apply-group-configs")
    if route.group_type != SHARE:
        return lines  # auto_offset_reset is the consumer's config, not the group's
    limit = configs.get(DELIVERY_LIMIT)
    if DELIVERY_LIMIT not in declared and limit is not None and limit.isdigit() and settings["max_attempts"] > int(limit):
        lines.append(f"route {route.name}: max_attempts {settings['max_attempts']} exceeds {DELIVERY_LIMIT} "
                     f"{limit} of group {group}: the broker gives a record up at delivery {limit}, so the worker "
                     f"gives a failing job up there (its dead letter says why), before the route's last "
                     f"attempts; fix: "
                     f"{fix_command(bootstrap, group, set_={DELIVERY_LIMIT: settings['max_attempts']})}")
    lock = configs.get(LOCK_DURATION)
    route_lock = settings["lock_duration_ms"]
    if LOCK_DURATION not in declared and lock is not None and lock.isdigit() and int(lock) != route_lock:
        if int(lock) < route_lock:
            why = ("records are locked for less than the route plans: renewals follow the broker's lock only from "
                   "the first fetch on" if settings["renew"] else
                   f"with renew=False a job running past {lock} ms loses its record to another worker")
        else:
            why = (f"a record of a crashed worker comes back only after {lock} ms, and backoffs the worker waits "
                   f"out stay capped to the route's {route_lock} ms")
        lines.append(f"route {route.name}: lock_duration_ms {route_lock} differs from {LOCK_DURATION} {lock} of "
                     f"group {group}: {why}; fix: {fix_command(bootstrap, group, set_={LOCK_DURATION: route_lock})} "
                     f"(or lock_duration_ms={lock} on the route)")
    dlq, route_dlq = configs.get(DLQ_TOPIC) or "", settings["dead_letter_topic"]
    if DLQ_TOPIC not in declared and dlq and dlq != route_dlq:
        if route_dlq is None:
            fix = f"{fix_command(bootstrap, group, delete=[DLQ_TOPIC])} (or dead_letter_topic={dlq!r} on the route)"
        else:
            fix = fix_command(bootstrap, group, set_={DLQ_TOPIC: route_dlq})
        lines.append(f"route {route.name}: dead_letter_topic {route_dlq!r} differs from {DLQ_TOPIC} {dlq!r} of "
                     f"group {group}: the broker writes the group's rejected and exhausted records to {dlq!r}; fix: {fix}")
    if dead_letter_mode == BROKER and DLQ_COPY not in declared and (configs.get(DLQ_COPY) or "false").lower() != "true":
        lines.append(f"route {route.name}: {DLQ_COPY} of group {group} is {configs.get(DLQ_COPY) or 'false'}, so the "
                     f"dead letters the broker writes for this route carry the source topic, partition and offset "
                     f"but not the record's key and value; fix: {fix_command(bootstrap, group, set_={DLQ_COPY: 'true'})}")
    return lines


def explain(group: str, configs: Mapping[str, str], bootstrap: str, declared: Mapping[str, Any]) -> list[str]:
    """The INFO lines a share group gets once at start: the join wait, and ``latest`` as where a
    new partition starts (pure)."""
    lines = [f"group {group}: a worker that joins may wait up to {join_wait_ms(configs) / 1000:.1f} s for its "
             f"partitions: the group's assignment is recomputed at most once per {ASSIGNMENT_INTERVAL} "
             f"({config_int(configs, ASSIGNMENT_INTERVAL, DEFAULT_ASSIGNMENT_INTERVAL_MS)} ms) and a member learns it at "
             f"its next heartbeat ({HEARTBEAT_INTERVAL} {config_int(configs, HEARTBEAT_INTERVAL, DEFAULT_HEARTBEAT_INTERVAL_MS)}"
             " ms)"]
    if AUTO_OFFSET_RESET not in declared and (configs.get(AUTO_OFFSET_RESET) or "latest") == "latest":
        lines.append(f"group {group}: {AUTO_OFFSET_RESET} is latest: a partition the group has not read before "
                     "starts at its end, so records written before the group's first worker joined are not "
                     f"delivered; to start at the beginning: "
                     f"{fix_command(bootstrap, group, set_={AUTO_OFFSET_RESET: 'earliest'})}")
    return lines
