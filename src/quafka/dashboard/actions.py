"""The dashboard's actions: redrive dead letters, and force release / archive in-flight records.

Each goes through the Admin call the CLI uses (``quafka share-groups --redrive-dead-letters`` →
``AsyncAdmin.redrive_dead_letters``; ``quafka share-groups --release/--archive`` →
``AsyncAdmin.alter_in_flight``), so the broker authorizes it as the dashboard's login. A GET shows
a confirmation page with what it would do (``dry_run=True`` / ``validate_only=True``: the broker
answers without changing anything); the POST (CSRF-checked by app.py) executes it. With actions
off (the default) app.py refuses every /actions/* before this module is reached.

``in-flight`` takes ``action=release|archive``: the force actions Admin.alter_in_flight has for
offset ranges ("release-key" takes a key, which a URL form does not carry well; the CLI has it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .source import Source, Unavailable, is_unavailable

__all__ = ["ACTIONS", "ActionRequest", "back_url", "execute", "parse_action", "plan"]

ACTIONS = ("redrive", "in-flight")
IN_FLIGHT_ACTIONS = ("release", "archive")


class ActionError(ValueError):
    """A malformed action request (answered 400 with the reason)."""


@dataclass(frozen=True)
class ActionRequest:
    name: str
    group: str
    topic: str | None = None
    partition: int | None = None  # in-flight: the share partition; redrive: the DLQ partition
    first: int | None = None
    last: int | None = None
    action: str | None = None  # in-flight: release or archive

    def fields(self) -> list[tuple[str, str]]:
        """The request as form fields (the confirmation page posts them back)."""
        out = [("group", self.group)]
        for name in ("topic", "partition", "first", "last", "action"):
            value = getattr(self, name)
            if value is not None:
                out.append((name, str(value)))
        return out

    @property
    def title(self) -> str:
        if self.name == "redrive":
            where = "" if self.first is None else (
                f" (DLQ offsets {self.first}-{self.last}" + ("" if self.partition is None else
                                                             f" of partition {self.partition}") + ")")
            return f"Redrive the dead letters of share group {self.group}{where}"
        return (f"Force {self.action} offsets {self.first}-{self.last} of {self.topic}-{self.partition} "
                f"in share group {self.group}")


def _int(params: Mapping[str, str], name: str, required: bool) -> int | None:
    text = (params.get(name) or "").strip()
    if not text:
        if required:
            raise ActionError(f"{name} is required")
        return None
    try:
        value = int(text)
    except ValueError:
        raise ActionError(f"{name} must be an integer, got {text!r}") from None
    if value < 0:
        raise ActionError(f"{name} must be >= 0, got {value}")
    return value


def parse_action(name: str, params: Mapping[str, str]) -> ActionRequest:
    if name not in ACTIONS:
        raise ActionError(f"no action {name!r} (actions: {', '.join(ACTIONS)})")
    group = params.get("group") or ""
    if not group:
        raise ActionError("group is required")
    if name == "redrive":
        partition, first, last = (_int(params, n, False) for n in ("partition", "first", "last"))
        if (first is None) != (last is None):
            raise ActionError("first and last DLQ offsets go together")
        if partition is not None and first is None:
            raise ActionError("a DLQ partition needs first and last offsets")
        if first is not None and last is not None and last < first:
            raise ActionError(f"last ({last}) is before first ({first})")
        return ActionRequest(name, group, partition=partition, first=first, last=last)
    topic = params.get("topic") or ""
    if not topic:
        raise ActionError("topic is required")
    action = params.get("action") or ""
    if action not in IN_FLIGHT_ACTIONS:
        raise ActionError(f"action must be one of {', '.join(IN_FLIGHT_ACTIONS)}, got {action!r}")
    partition, first, last = (_int(params, n, True) for n in ("partition", "first", "last"))
    assert first is not None and last is not None
    if last < first:
        raise ActionError(f"last ({last}) is before first ({first})")
    return ActionRequest(name, group, topic, partition, first, last, action)


def _offsets(req: ActionRequest) -> Any:
    if req.first is None:
        return None
    if req.partition is None:
        return (req.first, req.last)
    return {req.partition: (req.first, req.last)}


async def _run(source: Source, req: ActionRequest, dry: bool) -> Any:
    if req.name == "redrive":
        return await source.call(f"redrive of group {req.group!r}", lambda a: a.redrive_dead_letters(
            req.group, None, offsets=_offsets(req), dry_run=dry))
    return await source.call(f"force {req.action} in group {req.group!r}", lambda a: a.alter_in_flight(
        req.group, req.topic, req.partition, req.action, first_offset=req.first, last_offset=req.last,
        validate_only=dry))


def _summary(req: ActionRequest, result: Any, dry: bool) -> dict[str, Any]:
    if is_unavailable(result):
        return {"problem": result, "rows": [], "text": ""}
    would = "would " if dry else ""
    if req.name == "redrive":
        rows = [{"dlq_partition": i.letter.dlq_partition, "dlq_offset": i.letter.dlq_offset, "topic": i.letter.topic,
                 "partition": i.letter.partition, "offset": i.letter.offset, "to": i.target_topic,
                 "payload": i.payload, "status": i.status} for i in result.planned]
        text = (f"{len(result.sent)} dead letter(s) {would}{'be ' if dry else ''}sent to "
                f"{'their source topics' if rows else 'nowhere'}; {len(result.skipped_already_redriven)} already "
                f"redriven, {len(result.skipped_missing)} whose source record is gone")
        return {"problem": None, "rows": rows, "text": text, "count": len(result.sent)}
    text = (f"{result.changed} record(s) {would}{'be ' if dry else ''}{req.action}d; {result.skipped} skipped "
            f"(settled, on their way to the DLQ, or being written); {result.not_fetched} past the end offset")
    return {"problem": None, "rows": [], "text": text, "count": result.changed}


async def plan(source: Source, req: ActionRequest) -> dict[str, Any]:
    """What the action would do (dry run / validate only)."""
    return _summary(req, await _run(source, req, True), True)


async def execute(source: Source, req: ActionRequest) -> dict[str, Any]:
    return _summary(req, await _run(source, req, False), False)


def back_url(req: ActionRequest) -> str:
    from urllib.parse import urlencode

    if req.name == "redrive":
        return "/failures?" + urlencode({"group": req.group})
    return "/share-group?" + urlencode({"group": req.group, "topic": req.topic, "partition": req.partition})


def unavailable(result: dict[str, Any]) -> Unavailable | None:
    return result.get("problem")
