"""Route settings, declared once: name, type, default, which group types take it, the Kafka config it
maps to, and the rules between settings. ``validate_route`` checks one route's settings as a whole
before anything connects and returns every problem, each naming the route and the key.

Share-group routes and consumer-group routes take different settings: a setting that applies to
one group type only is refused on the other, with the reason (the seed's strategy split: a share
group has no offsets to reset, a consumer group has no acquisition locks).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from quafka.client import SECURITY_KEYS, AsyncShareConsumer
from quafka.client.errors import ConfigException

from .policies import Backoff

__all__ = [
    "BackoffExceedsLockDuration", "DESERIALIZERS", "GROUP_CONFIG_TYPES", "ROUTE_SETTINGS", "RouteConfigError",
    "RouteProblem", "Setting", "group_config_text", "settings_table", "validate_route",
]

SHARE, CONSUMER = "share", "consumer"
BOTH = frozenset({SHARE, CONSUMER})
# the broker's ranges of quafka.share.redelivery.backoff.max.ms and .multiplier (a route whose backoff
# the broker is to wait out must fit them; delivery_controls.py sets them)
BROKER_BACKOFF_MAX_MS = 7 * 86_400_000
BROKER_BACKOFF_MAX_MULTIPLIER = 100.0


class RouteConfigError(ValueError):
    """A route's settings cannot hold; raised before any connection. ``problems`` lists each."""

    def __init__(self, problems: list[RouteProblem]) -> None:
        self.problems = problems
        lines = [str(p) for p in problems]
        super().__init__(lines[0] if len(lines) == 1 else f"{len(lines)} route problems:\n  " + "\n  ".join(lines))


class BackoffExceedsLockDuration(RouteConfigError):
    """A backoff the worker is to wait out (``backoff_mode="pause"``, or ``pause(message, ms)``)
    longer than the acquisition lock minus the safety margin: the record's lock would expire (and
    another consumer get it) before the backoff ends (Karafka's seed design)."""


@dataclass(frozen=True)
class RouteProblem:
    route: str
    key: str
    message: str
    backoff: bool = False  # a BackoffExceedsLockDuration

    def __str__(self) -> str:
        return f"route {self.route!r}: {self.key}: {self.message}"


def _bytes(data: bytes | None) -> bytes | None:
    return data


def _utf8(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8")


def _json(data: bytes | None) -> Any:
    return None if data is None else json.loads(data)


DESERIALIZERS: dict[str, Callable[[bytes | None], Any]] = {"bytes": _bytes, "utf-8": _utf8, "json": _json}


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    groups: frozenset[str]
    doc: str
    kafka: str = ""  # the Kafka config it sets or stands for
    check: Callable[[Any], str | None] | None = None  # a message when the value is not allowed
    why_not: str = ""  # why a group type does not take it


def _int_at_least(low: int) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            return f"must be an integer >= {low}, got {value!r}"
        return None
    return check


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}; got {value!r}"
    return check


def _deserializer(value: Any) -> str | None:
    if callable(value) or value in DESERIALIZERS:
        return None
    return f"must be a callable or one of {', '.join(DESERIALIZERS)}; got {value!r}"


def _backoff(value: Any) -> str | None:
    return None if value is None or isinstance(value, Backoff) else f"must be a Backoff(...) or None; got {value!r}"


def _optional_topic(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value.strip() and not value.startswith("__")):
        return None
    return f"must be a topic name (not starting with __) or None; got {value!r}"


def _mapping(value: Any) -> str | None:
    return None if isinstance(value, Mapping) else f"must be a dict of Kafka configs; got {type(value).__name__}"


# Kafka's group configs (kafka-configs --entity-type groups) and quafka's share-group extensions,
# with their types: the names a route's ``group_configs`` may declare. The framework may not import
# the broker, so they are listed here; tests/framework/test_group_check.py checks them against the
# broker's GROUP_KEYS. consumer.* apply to consumer groups, the others to share groups.
GROUP_CONFIG_TYPES: dict[str, str] = {
    "consumer.session.timeout.ms": "int", "consumer.heartbeat.interval.ms": "int",
    "share.session.timeout.ms": "int", "share.heartbeat.interval.ms": "int", "share.record.lock.duration.ms": "int",
    "share.auto.offset.reset": "string", "share.isolation.level": "string", "share.delivery.count.limit": "int",
    "share.partition.max.record.locks": "int", "share.renew.acknowledge.enable": "boolean",
    "share.assignment.interval.ms": "int", "share.assignor.offload.enable": "boolean",
    "errors.deadletterqueue.topic.name": "string", "errors.deadletterqueue.copy.record.enable": "boolean",
    "quafka.share.redelivery.backoff.ms": "long", "quafka.share.redelivery.backoff.max.ms": "long",
    "quafka.share.redelivery.backoff.multiplier": "double", "quafka.share.redelivery.backoff.jitter": "double",
    "quafka.share.delivery.delay.enable": "boolean", "quafka.share.delivery.delay.max.ms": "long",
    "quafka.share.key.ordering": "boolean", "quafka.share.key.ordering.on.failure": "string",
}
# group configs the framework sets itself from other route settings (delivery_controls.py)
_FRAMEWORK_GROUP_CONFIGS = {
    "quafka.share.redelivery.backoff.ms": "backoff", "quafka.share.redelivery.backoff.max.ms": "backoff",
    "quafka.share.redelivery.backoff.multiplier": "backoff", "quafka.share.redelivery.backoff.jitter": "backoff",
    "quafka.share.delivery.delay.enable": "delayed_delivery",
}


def group_config_text(value: Any) -> str:
    """A declared group config value as the broker takes it (True → "true")."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _group_config_value_problem(name: str, value: Any) -> str | None:
    kind = GROUP_CONFIG_TYPES[name]
    if isinstance(value, bool):
        return None if kind == "boolean" else f"{name}: must be a {kind}, got {value!r}"
    if not isinstance(value, (str, int)):
        return f"{name}: must be a string or an integer, got {type(value).__name__} {value!r}"
    text = str(value).strip()
    try:
        if kind in ("int", "long"):
            int(text)
        elif kind == "double":
            float(text)
        elif kind == "boolean" and text.lower() not in ("true", "false"):
            raise ValueError
    except ValueError:
        return f"{name}: must be a {kind}, got {value!r}"
    return None


def _group_configs(value: Any) -> str | None:
    if not isinstance(value, Mapping):
        return f"must be a dict of group configs (name -> value); got {type(value).__name__}"
    for name, each in value.items():
        if name not in GROUP_CONFIG_TYPES:
            close = difflib.get_close_matches(str(name), GROUP_CONFIG_TYPES, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; group configs: {', '.join(GROUP_CONFIG_TYPES)}"
            return f"{name!r} is not a group config" + hint
        if name in _FRAMEWORK_GROUP_CONFIGS:
            return f"{name} is set by the framework from the route's {_FRAMEWORK_GROUP_CONFIGS[name]}"
        problem = _group_config_value_problem(name, each)
        if problem is not None:
            return problem
    return None


_SHARE_ONLY = "applies to share-group routes only: a consumer group has no acquisition locks"
_CONSUMER_ONLY = "applies to consumer-group routes only: a share group has no offsets or partitions of its own"

ROUTE_SETTINGS: dict[str, Setting] = {s.name: s for s in [
    Setting("concurrency", 1, BOTH, "Workers of this route per process: share-group consumers each "
            "running one job at a time (any record on any worker); for a consumer group, threads that "
            "keep each partition's records in order.", check=_int_at_least(1)),
    Setting("executor", "thread", BOTH, "Where jobs run: `thread`, `process` (a process pool, for CPU-bound "
            "jobs; the consumer class must be importable) or `async` (`async def consume`; chosen on its own "
            "when the consumer's methods are coroutines).", check=_one_of("thread", "process", "async")),
    Setting("max_poll_records", 500, BOTH, "Records a worker takes per poll.", kafka="max.poll.records",
            check=_int_at_least(1)),
    Setting("ack_mode", "auto", BOTH, "`auto`: a message the consumer did not settle is accepted (share) or "
            "marked consumed (consumer group) when `consume` returns; `manual`: only what it settles is, and "
            "an unsettled share message is released.", check=_one_of("auto", "manual")),
    Setting("backoff", Backoff(), BOTH, "Wait before a failed message is tried again (exponential; "
            "Backoff(initial_ms, multiplier, max_ms)). None: try again at once. On a share route the broker "
            "waits it out where it can (`backoff_mode`); routes of one share group declare the same one.",
            check=_backoff),
    Setting("max_attempts", 5, BOTH, "Deliveries of a failing message before it is rejected (and "
            "dead-lettered when the route has a dead-letter topic).", kafka="share.delivery.count.limit",
            check=_int_at_least(1)),
    Setting("on_error", "retry", BOTH, "What an exception in consume does: `retry` (back off, then try "
            "again until max_attempts), `reject` (at once) or `release` (try again at once, until max_attempts).",
            check=_one_of("retry", "reject", "release")),
    Setting("dead_letter_topic", None, BOTH, "Topic for messages that failed max_attempts times or were "
            "rejected. Share groups use the broker's dead-letter queue where it has one (share.version 2, "
            "KIP-1191), else the framework produces the same headers.", kafka="errors.deadletterqueue.topic.name",
            check=_optional_topic),
    Setting("dead_letter_mode", "auto", BOTH, "`auto`, `broker` (require the broker's DLQ) or `produce` "
            "(always produce from the worker).", check=_one_of("auto", "broker", "produce")),
    Setting("deserializer", "bytes", BOTH, "Value deserializer: a callable, or `bytes`, `utf-8`, `json`.",
            check=_deserializer),
    Setting("key_deserializer", "bytes", BOTH, "Key deserializer, as `deserializer`.", check=_deserializer),
    Setting("kafka", {}, BOTH, "Extra client configs for this route's consumers (checked against the "
            "client's config table for share routes).", check=_mapping),
    Setting("lock_duration_ms", 30_000, frozenset({SHARE}), "The acquisition lock the route expects "
            "(the group's share.record.lock.duration.ms); renewals and the worker's pauses are planned within it.",
            kafka="share.record.lock.duration.ms", check=_int_at_least(1000), why_not=_SHARE_ONLY),
    Setting("backoff_margin_ms", 1000, frozenset({SHARE}), "Safety margin kept between a backoff's end "
            "and the lock's expiry (Karafka's share_backoff_buffer).", check=_int_at_least(0), why_not=_SHARE_ONLY),
    Setting("backoff_mode", "auto", frozenset({SHARE}), "Who waits out a retry's backoff. `auto`: the broker "
            "where it has quafka's redelivery backoff (the group's quafka.share.redelivery.backoff.* are set "
            "from `backoff` at start, a failed message is released at once and not redelivered before its "
            "backoff, which may outlast the lock), else the worker as with `pause`, the backoff capped to the "
            "lock; `broker`: the broker, or refuse to start; `pause`: the worker holds the record under its "
            "lock, then releases it (the backoff must fit in the lock).",
            kafka="quafka.share.redelivery.backoff.ms", check=_one_of("auto", "broker", "pause"),
            why_not=_SHARE_ONLY + " (a consumer group's retry pauses its partition, for as long as the backoff)"),
    Setting("delayed_delivery", True, frozenset({SHARE}), "Honour the delivery times of jobs enqueued with "
            "`App.enqueue(..., delay_ms=/at=)`: the group's quafka.share.delivery.delay.enable is set to true "
            "when the worker starts (a quafka broker). False: leave it as it is.",
            kafka="quafka.share.delivery.delay.enable",
            check=lambda v: None if isinstance(v, bool) else f"must be true or false; got {v!r}", why_not=_SHARE_ONLY),
    Setting("delivery_count_limit", 5, frozenset({SHARE}), "The group's share.delivery.count.limit the "
            "route expects; max_attempts may not exceed it (the broker archives the record first).",
            kafka="share.delivery.count.limit", check=_int_at_least(2), why_not=_SHARE_ONLY),
    Setting("renew", True, frozenset({SHARE}), "Renew the lock of a job that runs past half of it (RENEW, "
            "KIP-1222).", check=lambda v: None if isinstance(v, bool) else f"must be true or false; got {v!r}",
            why_not=_SHARE_ONLY),
    Setting("max_renew_ms", 0, frozenset({SHARE}), "Stop renewing a job's lock after this long (0: while "
            "the job runs); the broker then gives the record to another consumer.", check=_int_at_least(0),
            why_not=_SHARE_ONLY),
    Setting("group_configs", {}, BOTH, "Group configs this route's group should have (name → value, e.g. "
            "`{'share.delivery.count.limit': 5}`; consumer.* names on consumer groups, the others on share groups). "
            "At start a group that differs gets a warning naming both values; `quafka worker --apply-group-configs` "
            "sets them (IncrementalAlterConfigs). Routes of one group must agree. A declared "
            "share.delivery.count.limit or share.record.lock.duration.ms is also the route's delivery_count_limit "
            "or lock_duration_ms.", kafka="kafka-configs --entity-type groups", check=_group_configs),
    Setting("transactional", False, frozenset({CONSUMER}), "Consume-transform-produce exactly once: each job "
            "runs in a Kafka transaction; what it produces with `self.produce(...)` is committed together with "
            "the partition's consumed offset (send_offsets_to_transaction), or aborted when the job fails; the "
            "route reads at isolation.level=read_committed. One transactional producer per worker thread; "
            "costs one transaction (about 4 extra round trips) per job.", kafka="transactional.id",
            check=lambda v: None if isinstance(v, bool) else f"must be true or false; got {v!r}",
            why_not=_CONSUMER_ONLY + " (a share group cannot commit its acknowledgements in a transaction)"),
    Setting("transactional_id", None, frozenset({CONSUMER}), "Prefix of the workers' transactional.id "
            "(default `quafka-{group}-{topic}`; each worker adds `-{host}-{QUAFKA_WORKER_INDEX}-{thread}`). Two "
            "processes with one id fence each other: give independent processes distinct prefixes.",
            kafka="transactional.id",
            check=lambda v: None if v is None or (isinstance(v, str) and v.strip())
            else f"must be a non-empty string or None; got {v!r}", why_not=_CONSUMER_ONLY),
    Setting("auto_offset_reset", "latest", frozenset({CONSUMER}), "Where a consumer group without committed "
            "offsets starts.", kafka="auto.offset.reset", check=_one_of("earliest", "latest"),
            why_not=_CONSUMER_ONLY + " (set share.auto.offset.reset on the group instead)"),
]}


def _share_kafka_problems(route: str, kafka: Mapping[str, Any]) -> list[RouteProblem]:
    problems = []
    for name in kafka:
        if name in ("group.id", "share.acknowledgement.mode", "max.poll.records"):
            problems.append(RouteProblem(route, f"kafka[{name!r}]", "is set by the framework from the route "
                                                                    "(group name, explicit acknowledgement, "
                                                                    "max_poll_records)"))
    if problems:
        return problems
    try:
        AsyncShareConsumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "validate", **kafka})  # the client's own checks; it does not connect
    except ConfigException as exc:
        problems.append(RouteProblem(route, f"kafka[{exc.key!r}]", exc.message))
    except (ValueError, TypeError) as exc:
        problems.append(RouteProblem(route, "kafka", str(exc)))
    return problems


def _declared_group_config_problems(route: str, group_type: str, given: Mapping[str, Any],
                                    full: dict[str, Any]) -> list[RouteProblem]:
    """A route's ``group_configs`` against its group type and its other settings. A declared
    share.delivery.count.limit / share.record.lock.duration.ms becomes the route's
    delivery_count_limit / lock_duration_ms unless those are given (then they must agree)."""
    declared = full["group_configs"]
    problems = []
    for name in declared:
        share_name = not name.startswith("consumer.")
        if share_name != (group_type == SHARE):
            problems.append(RouteProblem(route, f"group_configs[{name!r}]", f"is a {'share' if share_name else 'consumer'}"
                                         f"-group config; this is a {group_type}-group route"))
    if problems or group_type != SHARE:
        return problems
    for config, setting in (("share.delivery.count.limit", "delivery_count_limit"),
                            ("share.record.lock.duration.ms", "lock_duration_ms")):
        if config not in declared:
            continue
        value = int(str(declared[config]).strip())
        if setting not in given:
            full[setting] = value
        elif given[setting] != value:
            problems.append(RouteProblem(route, f"group_configs[{config!r}]", f"{value} differs from the route's "
                                         f"{setting} {given[setting]}; declare one, or the same value in both"))
    dlq = declared.get("errors.deadletterqueue.topic.name")
    if dlq is not None and full["dead_letter_topic"] is not None and str(dlq) != full["dead_letter_topic"]:
        problems.append(RouteProblem(route, "group_configs['errors.deadletterqueue.topic.name']",
                                     f"{dlq!r} differs from the route's dead_letter_topic {full['dead_letter_topic']!r}"))
    return problems


def validate_route(route: str, group_type: str, settings: Mapping[str, Any]) -> tuple[dict[str, Any], list[RouteProblem]]:
    """(the route's full settings, every problem) for ``settings`` given on a ``group_type`` route."""
    problems: list[RouteProblem] = []
    full: dict[str, Any] = {}
    for key, value in settings.items():
        setting = ROUTE_SETTINGS.get(key)
        if setting is None:
            close = difflib.get_close_matches(key, ROUTE_SETTINGS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(sorted(ROUTE_SETTINGS))}"
            problems.append(RouteProblem(route, key, "is not a route setting" + hint))
            continue
        if group_type not in setting.groups:
            problems.append(RouteProblem(route, key, setting.why_not))
            continue
        message = setting.check(value) if setting.check is not None else None
        if message is not None:
            problems.append(RouteProblem(route, key, message))
            continue
        full[key] = value
    for name, setting in ROUTE_SETTINGS.items():
        if group_type in setting.groups:
            full.setdefault(name, setting.default)
    if problems:
        return full, problems
    problems.extend(_declared_group_config_problems(route, group_type, settings, full))
    if problems:
        return full, problems
    if group_type == SHARE:
        lock, margin = full["lock_duration_ms"], full["backoff_margin_ms"]
        backoff = full["backoff"]
        if margin >= lock:
            problems.append(RouteProblem(route, "backoff_margin_ms", f"{margin} ms leaves nothing of the "
                                                                     f"{lock} ms lock"))
        elif backoff is not None and full["backoff_mode"] == "pause" and backoff.max_ms > lock - margin:
            problems.append(RouteProblem(
                route, "backoff", f"max_ms {backoff.max_ms} exceeds the longest backoff a lock allows, "
                                  f"{lock - margin} ms (lock_duration_ms {lock} - backoff_margin_ms {margin}); "
                                  "backoff_mode='auto' lets the broker wait it out",
                backoff=True))
        if backoff is not None and full["backoff_mode"] != "pause":
            if backoff.max_ms > BROKER_BACKOFF_MAX_MS:
                problems.append(RouteProblem(route, "backoff", f"max_ms {backoff.max_ms} exceeds 7 days "
                                             f"({BROKER_BACKOFF_MAX_MS} ms), the most the broker holds a record back "
                                             "(quafka.share.redelivery.backoff.max.ms)"))
            if backoff.multiplier > BROKER_BACKOFF_MAX_MULTIPLIER:
                problems.append(RouteProblem(route, "backoff", f"multiplier {backoff.multiplier} exceeds "
                                             f"{BROKER_BACKOFF_MAX_MULTIPLIER}, the broker's largest "
                                             "(quafka.share.redelivery.backoff.multiplier)"))
        if full["max_attempts"] > full["delivery_count_limit"]:
            problems.append(RouteProblem(route, "max_attempts", f"{full['max_attempts']} exceeds "
                                         f"delivery_count_limit {full['delivery_count_limit']}: the broker "
                                         "archives the record before the last attempts"))
        problems.extend(_share_kafka_problems(route, full["kafka"]))
    if group_type == CONSUMER:
        for name in full["kafka"]:
            if name in ("group.id", "enable.auto.commit", "auto.offset.reset", "enable.partition.eof"):
                problems.append(RouteProblem(route, f"kafka[{name!r}]", "is set by the framework (group name, manual "
                                                                        "commits, auto_offset_reset)"))
    if group_type == CONSUMER and full["transactional"]:
        if full["executor"] == "process":
            problems.append(RouteProblem(route, "executor", "'process' cannot produce into the worker's transaction; "
                                                            "use thread or async with transactional=True"))
        level = str(full["kafka"].get("isolation.level", "read_committed"))
        if level != "read_committed":
            problems.append(RouteProblem(route, "kafka['isolation.level']", f"{level!r}: a transactional route reads "
                                         "at read_committed (it would otherwise consume aborted records)"))
    if group_type == CONSUMER and full["transactional_id"] is not None and not full["transactional"]:
        problems.append(RouteProblem(route, "transactional_id", "needs transactional=True"))
    if full["dead_letter_mode"] == "broker" and group_type == CONSUMER:
        problems.append(RouteProblem(route, "dead_letter_mode", "`broker` applies to share groups only; a "
                                                                "consumer group's dead letters are produced"))
    if full["dead_letter_mode"] != "auto" and full["dead_letter_topic"] is None:
        problems.append(RouteProblem(route, "dead_letter_mode", "needs dead_letter_topic"))
    return full, problems


ADMIN_TIMEOUT_MS = 10_000


def admin_config(kafka: Mapping[str, Any], timeout_ms: int = ADMIN_TIMEOUT_MS) -> dict[str, Any]:
    """The Admin client's config from the app's connection settings (Admin takes only these keys:
    bootstrap.servers, client.id and the security keys)."""
    config = {"bootstrap.servers": kafka["bootstrap.servers"], "request.timeout.ms": timeout_ms}
    config.update((k, v) for k, v in kafka.items() if k == "client.id" or k in SECURITY_KEYS)
    return config


TABLE_BEGIN, TABLE_END = "<!-- routes-table:begin -->", "<!-- routes-table:end -->"


def settings_table() -> str:
    """The route settings as docs/framework.md shows them (between its routes-table markers);
    ``python -m quafka.framework.settings --write-docs docs/framework.md`` rewrites it there."""
    lines = [TABLE_BEGIN, "| setting | default | routes | Kafka config | what it does |", "|---|---|---|---|---|"]
    for setting in ROUTE_SETTINGS.values():
        groups = ", ".join(g for g in (SHARE, CONSUMER) if g in setting.groups)
        kafka = f"`{setting.kafka}`" if setting.kafka else ""
        lines.append(f"| `{setting.name}` | `{setting.default!r}` | {groups} | {kafka} | {setting.doc} |")
    lines.append(TABLE_END)
    return "\n".join(lines)


if __name__ == "__main__":
    import re
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "--write-docs":
        sys.exit("usage: python -m quafka.framework.settings --write-docs docs/framework.md")
    with open(sys.argv[2]) as f:
        text = f.read()
    pattern = re.compile(re.escape(TABLE_BEGIN) + ".*?" + re.escape(TABLE_END), re.S)
    with open(sys.argv[2], "w") as f:
        f.write(pattern.sub(lambda _m: settings_table(), text, count=1))
