"""Where a batch read starts and ends: the options of Spark's Kafka source, parsed and checked at
query start, resolved against the partitions' offsets at planning time.

Each side (``starting`` / ``ending``) takes, highest precedence first, as Spark's Kafka source does:

- ``startingTimestamp`` / ``endingTimestamp``: one timestamp (epoch ms) for every partition;
- ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``: JSON ``{"topic": {"0": ms}}``
  naming every partition of the subscribed topics;
- ``startingOffsets`` / ``endingOffsets``: ``earliest`` / ``latest`` or JSON
  ``{"topic": {"0": offset}}`` (``-2`` earliest, ``-1`` latest; partitions not named take the
  default: earliest for the start, latest for the end). ``latest`` cannot start and ``earliest``
  cannot end a batch read.

A timestamp resolves through ListOffsets to the first offset whose timestamp is at least it. When
no record is that new, an end becomes the latest offset, and a start follows
``startingOffsetsByTimestampStrategy``: ``error`` (the default) fails the query naming the
partition, ``latest`` starts at the latest offset. Resolved offsets are clamped to the partition's
``[log start offset, high watermark]``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from .options import OptionError, Options

__all__ = ["EARLIEST", "LATEST", "OffsetSpec", "parse_spec"]

EARLIEST = -2
LATEST = -1
TP = tuple[str, int]


@dataclass(frozen=True)
class OffsetSpec:
    """One side of a batch read, as the options gave it."""

    side: str  # "starting" | "ending"
    default: int  # EARLIEST or LATEST, for partitions no JSON names
    offsets: Mapping[TP, int] = field(default_factory=dict)
    timestamp: int | None = None  # {side}Timestamp
    timestamps: Mapping[TP, int] | None = None  # {side}OffsetsByTimestamp
    strategy: str = "error"  # startingOffsetsByTimestampStrategy

    @property
    def by_time_option(self) -> str:
        return f"{self.side}Timestamp" if self.timestamp is not None else f"{self.side}OffsetsByTimestamp"

    def check_partitions(self, partitions: Mapping[str, Iterable[int]]) -> None:
        """Every partition the spec names exists; a by-timestamp map names all of them."""
        for (topic, p) in self.offsets:
            if p not in set(partitions.get(topic, ())):
                raise OptionError(f"option '{self.side}Offsets' names partition {topic}-{p}, which does not exist")
        if self.timestamp is None and self.timestamps is not None:
            name = f"{self.side}OffsetsByTimestamp"
            wanted = {(t, p) for t, ps in partitions.items() for p in ps}
            for tp in sorted(set(self.timestamps) - wanted):
                raise OptionError(f"option {name!r} names partition {tp[0]}-{tp[1]}, which does not exist")
            missing = sorted(wanted - set(self.timestamps))
            if missing:
                named = ", ".join(f"{t}-{p}" for t, p in missing)
                raise OptionError(f"option {name!r} must name every partition of the subscribed topics; "
                                  f"missing: {named}")

    def time_lookups(self, tps: Iterable[TP]) -> dict[TP, int]:
        """The ListOffsets-by-timestamp requests this side needs."""
        if self.timestamp is not None:
            return {tp: self.timestamp for tp in tps}
        if self.timestamps is not None:
            return {tp: self.timestamps[tp] for tp in tps}
        return {}

    def resolve(self, tp: TP, low: int, high: int, by_time: Callable[[TP], int | None]) -> int:
        """The offset this side gives ``tp``, whose offsets are ``[low, high)``; ``by_time(tp)``
        is ListOffsets' answer for this side's timestamp (-1: no record that new)."""
        if self.timestamp is not None or self.timestamps is not None:
            found = by_time(tp)
            if found is None or found < 0:
                if self.side == "starting" and self.strategy == "error":
                    ts = self.timestamp if self.timestamp is not None else self.timestamps[tp]
                    raise OptionError(
                        f"option {self.by_time_option!r}: no record of {tp[0]}-{tp[1]} has a timestamp at or "
                        f"after {ts}; set startingOffsetsByTimestampStrategy=latest to start at the latest offset")
                return high
            return min(max(found, low), high)
        offset = self.offsets.get(tp, self.default)
        return low if offset == EARLIEST else high if offset == LATEST else min(max(offset, low), high)


def _timestamp(name: str, value: object, where: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise OptionError(f"option {name!r}{where}: {value!r} is not a timestamp (epoch milliseconds)")
    try:
        ms = int(value)
    except ValueError:
        raise OptionError(f"option {name!r}{where}: {value!r} is not a timestamp (epoch milliseconds)") from None
    if ms < 0:
        raise OptionError(f"option {name!r}{where}: {ms} is negative; timestamps are epoch milliseconds")
    return ms


def _json_map(options: Options, name: str, topics: list[str], example: str) -> dict[TP, object]:
    raw = options.get(name) or ""
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise OptionError(f"option {name!r}={raw!r} must be a JSON object {example}")
    out: dict[TP, object] = {}
    for topic, parts in parsed.items():
        if topic not in topics:
            raise OptionError(f"option {name!r} names topic {topic!r}, which option 'subscribe' does not")
        if not isinstance(parts, dict):
            raise OptionError(f"option {name!r}: the value of topic {topic!r} must be a JSON object")
        for p, value in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise OptionError(f"option {name!r}: partition {p!r} of {topic!r} is not an integer") from None
            out[(topic, partition)] = value
    return out


def parse_spec(options: Options, side: str, topics: list[str]) -> OffsetSpec:
    """The ``side`` ("starting" or "ending") of a batch read from the options (OptionError names
    the option that is wrong)."""
    default, refused = (EARLIEST, LATEST) if side == "starting" else (LATEST, EARLIEST)
    strategy = "error"
    if side == "starting":
        strategy = (options.get("startingOffsetsByTimestampStrategy") or "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise OptionError(f"option 'startingOffsetsByTimestampStrategy'={strategy!r}: "
                              "allowed are 'error' and 'latest'")
    global_name = f"{side}Timestamp"
    if options.has(global_name):
        return OffsetSpec(side, default, timestamp=_timestamp(global_name, (options.get(global_name) or "").strip()),
                          strategy=strategy)
    by_name = f"{side}OffsetsByTimestamp"
    if options.has(by_name):
        raw = _json_map(options, by_name, topics, '{"topic": {"0": 1700000000000}}')
        stamps = {tp: _timestamp(by_name, v, f" for {tp[0]}-{tp[1]}") for tp, v in raw.items()}
        return OffsetSpec(side, default, timestamps=stamps, strategy=strategy)
    name = f"{side}Offsets"
    text = (options.get(name) or "").strip()
    if not text:
        return OffsetSpec(side, default)
    words = {"earliest": EARLIEST, "latest": LATEST}
    if text.lower() in words:
        if words[text.lower()] == refused:
            raise OptionError(f"option {name!r}={text!r} is not allowed for a batch read")
        return OffsetSpec(side, words[text.lower()])
    if not text.startswith("{"):
        raise OptionError(f"option {name!r}={text!r} is neither 'earliest', 'latest' nor JSON "
                          '{"topic": {"partition": offset}}')
    offsets: dict[TP, int] = {}
    for (topic, p), offset in _json_map(options, name, topics, '{"topic": {"0": offset}}').items():
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST:
            raise OptionError(f"option {name!r}: offset {offset!r} of {topic}-{p} is not an offset, -1 or -2")
        if offset == refused:
            raise OptionError(f"option {name!r}: offset {offset} of {topic}-{p} is not allowed for a batch read")
        offsets[(topic, p)] = offset
    return OffsetSpec(side, default, offsets=offsets)
