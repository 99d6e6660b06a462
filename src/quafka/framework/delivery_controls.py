"""The broker's delivery controls as a framework app uses them: quafka's share-group extension
(docs/share-groups.md, "Extensions"), which no Kafka release has.

- **Redelivery backoff.** A share route's ``backoff`` becomes its group's
  ``quafka.share.redelivery.backoff.*`` (``backoff_mode`` "auto" or "broker"): a failed message is
  RELEASEd at once, and the broker does not deliver it again before ``backoff.delay_ms(attempt)``
  has passed — minutes or hours if need be, far beyond the acquisition lock, and across broker
  restarts. The worker meanwhile fetches other records. ``max_attempts`` is unchanged: the
  record's delivery count, which the broker keeps, is the attempt.
- **Delayed delivery.** A share route with ``delayed_delivery`` (the default) turns on its group's
  ``quafka.share.delivery.delay.enable`` at start, so that a job enqueued with
  ``App.enqueue(..., delay_ms=...)`` or ``at=...`` (enqueue.py) is not delivered before its time.

Detection: a broker has the extension when DescribeConfigs of the group lists
``quafka.share.redelivery.backoff.ms`` (Apache Kafka refuses the key as an unknown group config and
does not list it). Against such a broker the framework changes nothing: backoffs are the worker's
pause (hold the record under its lock, then release it, as the seed describes), capped to the lock,
and each share route says so in one log line at start.

The group is one: routes sharing a share group must agree on the backoff the broker applies to
all of the group's records and on delayed delivery (``group_problems``, part of ``App.validate``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from quafka.client import Admin, KafkaException

from .policies import Backoff
from .settings import SHARE, RouteProblem
from .settings import admin_config

if TYPE_CHECKING:
    from .routing import Route

__all__ = [
    "BACKOFF_JITTER", "BACKOFF_MAX_MS", "BACKOFF_MS", "BACKOFF_MULTIPLIER", "BROKER", "DELAY_ENABLE",
    "DeliveryControls", "DeliveryControlsError", "HEADER_DELIVER_AFTER_MS", "HEADER_DELIVER_AT_MS", "WORKER",
    "delivery_controls_listed", "group_problems", "redelivery_backoff", "redelivery_configs",
]

log = logging.getLogger("quafka.framework")

BACKOFF_MS = "quafka.share.redelivery.backoff.ms"
BACKOFF_MAX_MS = "quafka.share.redelivery.backoff.max.ms"
BACKOFF_MULTIPLIER = "quafka.share.redelivery.backoff.multiplier"
BACKOFF_JITTER = "quafka.share.redelivery.backoff.jitter"
DELAY_ENABLE = "quafka.share.delivery.delay.enable"
HEADER_DELIVER_AFTER_MS = "quafka.deliver.after.ms"  # decimal ms after the record's timestamp
HEADER_DELIVER_AT_MS = "quafka.deliver.at.ms"  # decimal epoch ms

BROKER, WORKER = "broker", "worker"  # who waits out a route's backoffs


class DeliveryControlsError(RuntimeError):
    """A route's delivery controls cannot be set up against this cluster (raised at start-up)."""


def delivery_controls_listed(group_configs: Mapping[str, Any]) -> bool:
    """Whether a group's DescribeConfigs listing comes from a broker with quafka's delivery controls."""
    return BACKOFF_MS in group_configs


def redelivery_backoff(settings: Mapping[str, Any]) -> Backoff | None:
    """The backoff a share route wants between a failure and the next delivery (None: at once).
    Only the ``retry`` policy waits; ``release`` and ``reject`` mean "at once" and "never"."""
    backoff = settings["backoff"]
    if settings["on_error"] != "retry" or backoff is None or backoff.initial_ms <= 0:
        return None
    return backoff


def redelivery_configs(backoff: Backoff | None) -> dict[str, str]:
    """The group configs that make the broker wait out ``backoff`` (None: turn the backoff off).
    Jitter is 0: the route's Backoff has none, and the waits the worker reports are then exact."""
    if backoff is None:
        return {BACKOFF_MS: "0"}
    return {BACKOFF_MS: str(backoff.initial_ms), BACKOFF_MAX_MS: str(backoff.max_ms),
            BACKOFF_MULTIPLIER: repr(float(backoff.multiplier)), BACKOFF_JITTER: "0.0"}


def _group_plan(settings: Mapping[str, Any]) -> tuple[str, dict[str, str] | None]:
    """What a share route asks of its group's redelivery backoff: ("pause", None) leaves it to the
    operator; otherwise (mode, the configs)."""
    mode = settings["backoff_mode"]
    if mode == "pause":
        return "pause", None
    return "broker-side", redelivery_configs(redelivery_backoff(settings))


def _describe_plan(settings: Mapping[str, Any]) -> str:
    if settings["backoff_mode"] == "pause":
        return "backoff_mode='pause'"
    backoff = redelivery_backoff(settings)
    if backoff is None:
        return f"no backoff (backoff={settings['backoff']!r}, on_error={settings['on_error']!r})"
    return f"backoff={backoff!r}"


def group_problems(routes: Iterable[Route]) -> list[RouteProblem]:
    """Share routes of one group that ask different things of the group's delivery controls (the
    broker holds back every record of the group alike): one problem per later route."""
    first: dict[str, Route] = {}
    problems = []
    for route in routes:
        if route.group_type != SHARE:
            continue
        other = first.setdefault(route.group, route)
        if other is route:
            continue
        mine, theirs = route.settings, other.settings
        if _group_plan(mine) != _group_plan(theirs):
            key = "backoff_mode" if (mine["backoff_mode"] == "pause") != (theirs["backoff_mode"] == "pause") \
                else "backoff"
            problems.append(RouteProblem(route.name, key, (
                f"{_describe_plan(mine)} differs from route {other.name!r}'s {_describe_plan(theirs)}; routes of "
                f"share group {route.group!r} share its redelivery backoff ({BACKOFF_MS}), so they must declare "
                "the same backoff, on_error='retry' or not, and backoff_mode")))
        if mine["delayed_delivery"] != theirs["delayed_delivery"]:
            problems.append(RouteProblem(route.name, "delayed_delivery", (
                f"{mine['delayed_delivery']} differs from route {other.name!r}'s {theirs['delayed_delivery']}; "
                f"{DELAY_ENABLE} is one setting of share group {route.group!r}")))
    return problems


def _same(current: str | None, wanted: str) -> bool:
    if current is None:
        return False
    try:
        return float(current) == float(wanted)
    except ValueError:
        return current.strip().lower() == wanted.lower()


class DeliveryControls:
    """The delivery controls of one worker process's share routes; ``prepare`` connects (after
    validation) and sets the groups' configs. ``detect`` decides from a group's DescribeConfigs
    listing whether the broker has the extension (``delivery_controls_listed``)."""

    def __init__(self, kafka: Mapping[str, Any], *,
                 detect: Callable[[Mapping[str, Any]], bool] = delivery_controls_listed) -> None:
        self._kafka = dict(kafka)
        self._detect = detect
        self._waiters: dict[str, str] = {}

    def waiter(self, route: Route) -> str:
        """Who waits out ``route``'s backoffs: BROKER (release at once) or WORKER (the pause)."""
        return self._waiters.get(route.name, WORKER)

    def prepare(self, routes: Iterable[Route]) -> dict[str, str]:
        """Set each share group's redelivery backoff and delayed delivery from its routes where the
        broker has them; returns {route name: BROKER | WORKER} for the share routes."""
        by_group: dict[str, list[Route]] = {}
        for route in routes:
            if route.group_type == SHARE:
                by_group.setdefault(route.group, []).append(route)
        if not by_group:
            return {}
        with Admin(admin_config(self._kafka)) as admin:
            for group, group_routes in by_group.items():
                self._prepare_group(admin, group, group_routes)
        return dict(self._waiters)

    def _prepare_group(self, admin: Admin, group: str, routes: list[Route]) -> None:
        try:
            current = admin.describe_configs("group", group)
        except KafkaException as exc:  # e.g. a Kafka cluster that does not let this user describe groups
            if any(r.settings["backoff_mode"] == "broker" for r in routes):
                raise DeliveryControlsError(f"group {group!r}: its configs could not be described ({exc}); "
                                            "backoff_mode='broker' needs to see the redelivery backoff") from exc
            log.warning("group %s: its configs could not be described (%s); taking the broker to have no "
                        "delivery controls, as before them", group, exc)
            current = {}
        if not self._detect(current):
            for route in routes:
                if route.settings["backoff_mode"] == "broker":
                    raise DeliveryControlsError(
                        f"route {route.name!r}: backoff_mode='broker' but the broker has no redelivery backoff "
                        f"(group {group!r} does not list {BACKOFF_MS}: Apache Kafka, or a quafka before it)")
                self._waiters[route.name] = WORKER
                self._log_fallback(route)
            return
        lead = routes[0].settings  # validation made the group's routes agree
        wanted: dict[str, str] = {}
        if lead["backoff_mode"] != "pause":
            wanted.update(redelivery_configs(redelivery_backoff(lead)))
        if lead["delayed_delivery"]:
            wanted[DELAY_ENABLE] = "true"
        changes = {k: v for k, v in wanted.items() if not _same(current.get(k), v)}
        if changes:
            try:
                admin.alter_configs("group", group, set=changes)  # incremental: the group's other configs stay
            except KafkaException as exc:
                raise DeliveryControlsError(f"group {group!r}: setting {changes} for routes "
                                            f"{', '.join(r.name for r in routes)}: {exc}") from exc
            log.info("group %s: set %s (routes %s)", group,
                     ", ".join(f"{k}={v} (was {current.get(k)})" for k, v in changes.items()),
                     ", ".join(r.name for r in routes))
        for route in routes:
            settings = route.settings
            if settings["backoff_mode"] == "pause":
                self._waiters[route.name] = WORKER
                if not _same(current.get(BACKOFF_MS), "0"):
                    log.warning("route %s: backoff_mode='pause', but group %s has %s=%s: the broker holds each "
                                "record the worker releases back for that long too", route.name, group, BACKOFF_MS,
                                current.get(BACKOFF_MS))
                continue
            self._waiters[route.name] = BROKER
            backoff = redelivery_backoff(settings)
            if backoff is not None:
                log.info("route %s: retries wait in the broker (group %s: %s=%d, %s=%d, %s=%s): a failed message "
                         "is released at once and delivered again after its backoff, even past the %d ms lock",
                         route.name, group, BACKOFF_MS, backoff.initial_ms, BACKOFF_MAX_MS, backoff.max_ms,
                         BACKOFF_MULTIPLIER, float(backoff.multiplier), settings["lock_duration_ms"])

    @staticmethod
    def _log_fallback(route: Route) -> None:
        """The one line a share route logs against a broker without redelivery backoff."""
        settings = route.settings
        backoff = redelivery_backoff(settings)
        if settings["backoff_mode"] == "pause" or backoff is None:
            return  # nothing asked of the broker
        lock, longest = settings["lock_duration_ms"], route.max_backoff_ms()
        why = (f"the broker has no redelivery backoff ({BACKOFF_MS} is not a group config there: Apache Kafka, or "
               f"a quafka before it), so the worker holds a failed message under its {lock} ms acquisition lock "
               f"for the backoff, then releases it")
        if backoff.max_ms > longest:
            log.warning("route %s: %s; backoffs are capped at %d ms (lock_duration_ms %d - backoff_margin_ms %d): "
                        "%r cannot wait its max_ms %d ms", route.name, why, longest, lock,
                        settings["backoff_margin_ms"], backoff, backoff.max_ms)
        else:
            log.info("route %s: %s (backoffs up to %d ms fit; this route's longest is %d ms)", route.name, why,
                     longest, backoff.max_ms)
