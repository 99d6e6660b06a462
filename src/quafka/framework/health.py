"""Loud where it used to be silent: one monitor thread per worker process watches what the workers
cannot see from inside a poll, and says it in one log line per change.

- **A route whose topic does not exist.** A share or consumer group subscribed to a missing topic
  simply gets nothing, forever. Checked at start (``strict``: refuse to start, MissingTopicError)
  and then every ``TOPIC_CHECK_INTERVAL_S``: one WARNING per missing topic each time (a closer
  existing name is suggested), one INFO line when it appears.
- **The broker unreachable.** The clients retry on their own and log nothing the user sees. The
  monitor sends a Metadata request without topics (``Admin.describe_cluster``, the cheapest request
  that needs a working broker: a TCP connect alone succeeds against a broker that cannot answer)
  every ``PROBE_INTERVAL_S`` in which no worker's poll returned records (records fetched since the
  last look prove the broker answered: under load the probe is skipped, and costs the jobs nothing);
  one WARNING line when it first fails, one INFO line with the time it was out when it answers
  again — two lines per outage, whatever its length. A probe is one small request on a connection
  kept open; client error callbacks would not do: the share consumers' errors surface only inside
  the workers' polls, once per worker.
- **A worker without an assignment.** A share-group worker that joins waits for the group's next
  target assignment (at most one per ``share.assignment.interval.ms``) and for its own next
  heartbeat: about 5 s by default, during which nothing happens. After the assignment interval and
  ``ASSIGNMENT_MARGIN_S``, the workers of a route that have taken no record are looked up in the
  group's description (ShareGroupDescribe, by the consumers' member ids); if some have no
  partition, one INFO line per route says why. Share groups have room for any number of workers
  (every member gets partitions, shared when members outnumber them); a consumer group does not:
  after ``CONSUMER_ASSIGNMENT_WAIT_S`` a group with more members than the topic has partitions gets
  one WARNING line per route ("more workers than the group has room for").

The thread is a daemon (it ends with the process) and ``stop()`` ends it; an unexpected error in
it is logged (once per kind until a probe succeeds again), never raised.
"""

from __future__ import annotations

import difflib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from quafka.client import Admin, KafkaException

from .group_check import (
    ASSIGNMENT_INTERVAL,
    DEFAULT_ASSIGNMENT_INTERVAL_MS,
    HEARTBEAT_INTERVAL,
    admin_config,
    config_int,
    join_wait_ms,
)
from .routing import Route
from .settings import SHARE

__all__ = ["ASSIGNMENT_MARGIN_S", "CONSUMER_ASSIGNMENT_WAIT_S", "HealthMonitor", "MissingTopicError",
           "PROBE_INTERVAL_S", "PROBE_TIMEOUT_MS", "TOPIC_CHECK_INTERVAL_S", "missing_topics"]

log = logging.getLogger("quafka.framework")

PROBE_INTERVAL_S = 1.0  # the reachability probe
PROBE_TIMEOUT_MS = 5000  # a probe unanswered this long counts as unreachable (a busy broker answers sooner)
TOPIC_CHECK_INTERVAL_S = 60.0  # the missing-topic check, and its warning's repetition
ASSIGNMENT_MARGIN_S = 2.0  # after the group's assignment interval, before a worker's missing assignment is told
CONSUMER_ASSIGNMENT_WAIT_S = 15.0  # a consumer group's join and rebalance, before idle members are told


class MissingTopicError(RuntimeError):
    """A route's topic does not exist and the worker is strict (``--strict``); raised at start."""


def missing_topics(routes: Iterable[Route], existing: Iterable[str]) -> dict[str, str]:
    """{route name: the line saying its topic does not exist} for the routes whose topic is not in
    ``existing`` (a close existing name is suggested)."""
    existing = sorted(existing)
    out = {}
    for route in routes:
        if route.topic in existing:
            continue
        close = difflib.get_close_matches(route.topic, [t for t in existing if not t.startswith("__")], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        out[route.name] = f"route {route.name}: topic {route.topic!r} does not exist{hint}"
    return out


class HealthMonitor:
    """The monitor of one worker process. ``check_topics_at_start`` runs in the starting thread;
    ``start()`` begins the watch; ``stop()`` ends it (any thread; a no-op if never started).

    ``workers`` is the process's list of workers (read, never changed: each has ``route``,
    ``consumer``, ``done``, ``failed``, ``dead_lettered``, ``in_flight``, ``fetched_at``);
    ``group_configs`` returns the configs read at start by route name (Runtime.group_configs)."""

    def __init__(self, kafka: Mapping[str, Any], routes: Sequence[Route], workers: Sequence[Any],
                 group_configs: Callable[[], Mapping[str, Mapping[str, str | None]]]) -> None:
        self._thread = threading.Thread(target=self._run, name="quafka-health", daemon=True)
        self._kafka = dict(kafka)
        self._bootstrap = str(kafka.get("bootstrap.servers", ""))
        self._routes = list(routes)
        self._workers = workers
        self._group_configs = group_configs
        self._stopped = threading.Event()
        self._admin: Admin | None = None
        self._down_since: float | None = None  # monotonic time of the first failed probe of an outage
        self._last_look = time.monotonic()  # the previous tick: records fetched after it prove the broker answers
        self._missing: set[str] = set()  # route names whose topic was missing at the last check
        self._next_topic_check = 0.0
        self._started_at = time.monotonic()
        self._told: set[str] = set()  # routes whose assignment was looked at (once each)
        self._busy: set[int] = set()  # ids of workers that have taken a record
        self._errors_logged: set[str] = set()

    # ------------------------------------------------------------------ control

    def check_topics_at_start(self, strict: bool) -> None:
        """Warn for each route whose topic does not exist; ``strict``: raise MissingTopicError
        instead (also when the topics cannot be listed)."""
        try:
            existing = self._admin_client().list_topics()
        except KafkaException as exc:
            if strict:
                raise MissingTopicError(f"cannot check that the routes' topics exist: broker unreachable "
                                        f"({self._bootstrap}): {exc}") from exc
            self._went_down(exc)
            return
        finally:
            self._close_admin()  # the thread opens its own (a start that fails later leaves nothing open)
        missing = missing_topics(self._routes, existing)
        if missing and strict:
            raise MissingTopicError("; ".join(missing.values()) + "; strict mode refuses to start (create the topic, "
                                    "fix the route, or start without --strict)")
        self._report_topics(missing)
        self._next_topic_check = time.monotonic() + TOPIC_CHECK_INTERVAL_S

    def start(self) -> None:
        self._started_at = time.monotonic()
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout_s: float = 1.0) -> None:
        """End the watch; waits up to ``timeout_s`` (a probe in progress may take longer: the
        thread is a daemon and ends on its own after it)."""
        self._stopped.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._close_admin()

    # ------------------------------------------------------------------ thread

    def _run(self) -> None:
        try:
            while not self._stopped.wait(PROBE_INTERVAL_S):
                try:
                    self._tick(time.monotonic())
                except Exception as exc:  # noqa: BLE001 - the monitor must not die; said once per kind
                    kind = type(exc).__name__
                    if kind not in self._errors_logged:
                        self._errors_logged.add(kind)
                        log.exception("health monitor: %s (the watch goes on)", exc)
        finally:
            self._close_admin()

    def _tick(self, now: float) -> None:
        last_look, self._last_look = self._last_look, now
        fetched = self._down_since is None and any(
            getattr(w, "fetched_at", 0.0) > last_look for w in list(self._workers))
        if not fetched:  # no worker heard from the broker since the last look: ask it
            try:
                self._admin_client().describe_cluster()
            except KafkaException as exc:
                if self._down_since is None:
                    self._went_down(exc)
                return
        if self._down_since is not None:
            log.info("broker reachable again after %.1f s (%s)", time.monotonic() - self._down_since, self._bootstrap)
            self._down_since = None
            self._errors_logged.clear()
        if now >= self._next_topic_check:
            self._next_topic_check = now + TOPIC_CHECK_INTERVAL_S
            self._report_topics(missing_topics(self._routes, self._admin_client().list_topics()))
        self._watch_assignments(now)

    def _went_down(self, exc: BaseException) -> None:
        self._down_since = time.monotonic()
        log.warning("broker unreachable (%s): %s", self._bootstrap, exc)

    def _report_topics(self, missing: Mapping[str, str]) -> None:
        for name, line in missing.items():
            log.warning("%s; the route's workers take nothing until it is created", line)
        for route in self._routes:
            if route.name in self._missing and route.name not in missing:
                log.info("route %s: topic %r exists now", route.name, route.topic)
        self._missing = set(missing)

    # ------------------------------------------------------------------ assignments

    def _watch_assignments(self, now: float) -> None:
        for worker in list(self._workers):
            if id(worker) not in self._busy and (worker.done or worker.failed or worker.dead_lettered
                                                 or worker.in_flight):
                self._busy.add(id(worker))
        configs = self._group_configs()
        for route in self._routes:
            if route.name in self._told or route.name in self._missing:
                continue
            group_configs = configs.get(route.name) or {}
            if route.group_type == SHARE:
                wait_s = config_int(group_configs, ASSIGNMENT_INTERVAL, DEFAULT_ASSIGNMENT_INTERVAL_MS) / 1000 \
                    + ASSIGNMENT_MARGIN_S
            else:
                wait_s = CONSUMER_ASSIGNMENT_WAIT_S
            if now - self._started_at < wait_s:
                continue
            if route.group_type == SHARE:
                self._told.add(route.name)
                self._share_assignment(route, group_configs, now)
            elif self._consumer_assignment(route, now, settled_only=now - self._started_at < 3 * wait_s):
                self._told.add(route.name)

    def _share_assignment(self, route: Route, configs: Mapping[str, str | None], now: float) -> None:
        workers = [w for w in self._workers if w.route.name == route.name]
        idle = [w for w in workers if id(w) not in self._busy]
        if not idle:
            return
        try:
            described = self._admin_client().describe_share_groups([route.group])[route.group]
            assigned = {m.member_id for m in described.members if m.assignment.get(route.topic)}
        except KafkaException:
            assigned = set()  # no member has joined yet (GROUP_ID_NOT_FOUND)
        unassigned = []
        for worker in idle:
            consumer = worker.consumer
            if consumer is None or consumer.member_id not in assigned:
                unassigned.append(worker)
        if unassigned:
            log.info("route %s: %d of this process's %d workers have no assignment %.1f s after start: group %s "
                     "recomputes its assignment at most once per %s (%d ms) and a member learns it at its next "
                     "heartbeat (%s %s ms), so a worker may wait up to %.1f s (a share group has room for any "
                     "number of workers)", route.name, len(unassigned), len(workers), now - self._started_at,
                     route.group, ASSIGNMENT_INTERVAL, config_int(configs, ASSIGNMENT_INTERVAL, DEFAULT_ASSIGNMENT_INTERVAL_MS),
                     HEARTBEAT_INTERVAL, configs.get(HEARTBEAT_INTERVAL) or "5000", join_wait_ms(configs) / 1000)

    def _consumer_assignment(self, route: Route, now: float, settled_only: bool) -> bool:
        """Look at a consumer group's members; False (look again later) while ``settled_only``
        and the group is rebalancing."""
        admin = self._admin_client()
        try:
            described = admin.describe_consumer_groups([route.group])[route.group]
            partitions = len(admin.describe_topics([route.topic])[route.topic].partitions)
        except KafkaException as exc:
            log.info("route %s: cannot describe group %s to check its workers' assignments: %s", route.name,
                     route.group, exc)
            return True
        if settled_only and described.state != "Stable":
            return False
        members = len(described.members)
        without = [m for m in described.members if not m.assignment.get(route.topic)]
        if members > partitions and without:
            log.warning("route %s: group %s has %d members for the %d partition%s of %s: %d get no partition (more "
                        "workers than the group has room for: a consumer group gives each partition to one member); "
                        "add partitions or run fewer workers", route.name, route.group, members, partitions,
                        "" if partitions == 1 else "s", route.topic, len(without))
        elif without:
            log.info("route %s: %d of group %s's %d members have no partition of %s %.1f s after start (group "
                     "state %s: a rebalance in progress)", route.name, len(without), route.group, members,
                     route.topic, now - self._started_at, described.state)
        return True

    # ------------------------------------------------------------------ the admin client

    def _admin_client(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(admin_config(self._kafka, PROBE_TIMEOUT_MS))
        return self._admin

    def _close_admin(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                admin.close()
            except Exception as exc:  # noqa: BLE001 - closing at the end; said, not raised
                log.info("health monitor: closing its admin client: %s", exc)

