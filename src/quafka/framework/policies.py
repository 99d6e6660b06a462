"""What happens to a message, decided without I/O: the backoff before a retry, and the verdict on a
message whose job raised or that the consumer did not settle. The workers carry the verdicts out
(share groups: acknowledge; consumer groups: seek, pause, commit). Every (setting, attempt) pair
is tested in tests/framework/test_policies.py.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

__all__ = ["EXHAUSTED", "Backoff", "Verdict", "effective_max_attempts", "VerdictKind", "decide", "on_failure", "unsettled"]


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: ``initial_ms`` before the second attempt, times ``multiplier`` after
    each further failure, at most ``max_ms``."""
    initial_ms: int = 1000
    multiplier: float = 2.0
    max_ms: int = 10_000

    def __post_init__(self) -> None:
        if self.initial_ms < 0 or self.max_ms < self.initial_ms or self.multiplier < 1:
            raise ValueError(f"Backoff needs 0 <= initial_ms <= max_ms and multiplier >= 1; got {self}")

    def delay_ms(self, attempt: int) -> int:
        """The wait after failed attempt ``attempt`` (1, 2, ...)."""
        return int(min(self.initial_ms * self.multiplier ** max(attempt - 1, 0), self.max_ms))


class VerdictKind(enum.Enum):
    ACCEPT = "accept"      # done (consumer group: mark consumed)
    RELEASE = "release"    # try again now (another worker may get it)
    BACKOFF = "backoff"    # try again after backoff_ms
    REJECT = "reject"      # never again; dead-lettered when the route has a dead-letter topic


class Verdict(NamedTuple):
    kind: VerdictKind
    backoff_ms: int = 0
    exhausted: bool = False  # REJECT: the job failed on its last attempt (else the consumer's code rejected it)


ACCEPT, RELEASE, REJECT = Verdict(VerdictKind.ACCEPT), Verdict(VerdictKind.RELEASE), Verdict(VerdictKind.REJECT)
EXHAUSTED = Verdict(VerdictKind.REJECT, 0, True)  # dead-lettered after max_attempts (reason max-attempts)


def on_failure(on_error: str, attempt: int, max_attempts: int, backoff: Backoff | None) -> Verdict:
    """The verdict on a message whose job raised at delivery attempt ``attempt``: rejected at once
    (``on_error="reject"``: the code's choice), given up on its last attempt (EXHAUSTED), or tried
    again."""
    if on_error == "reject":
        return REJECT
    if attempt >= max_attempts:
        return EXHAUSTED
    if on_error == "release" or backoff is None:
        return RELEASE
    delay = backoff.delay_ms(attempt)
    return Verdict(VerdictKind.BACKOFF, delay) if delay > 0 else RELEASE


def unsettled(ack_mode: str) -> Verdict:
    """The verdict on a message the consumer left unsettled when its job returned."""
    return ACCEPT if ack_mode == "auto" else RELEASE


def decide(messages: Iterable[Any], settled: Mapping[tuple[str, int, int], Verdict], failed: bool,
           settings: Mapping[str, Any]) -> list[tuple[Any, Verdict]]:
    """Each message of a job with its verdict: what the consumer settled, else ``unsettled`` (the
    job returned) or ``on_failure`` at the message's delivery attempt (the job raised)."""
    out = []
    for message in messages:
        verdict = settled.get((message.topic, message.partition, message.offset))
        if verdict is None:
            verdict = on_failure(settings["on_error"], message.delivery_attempt, settings["max_attempts"],
                                 settings["backoff"]) if failed else unsettled(settings["ack_mode"])
        out.append((message, verdict))
    return out


DELIVERY_LIMIT = "share.delivery.count.limit"


def effective_max_attempts(route: Any, group_configs: Mapping[str, Mapping[str, Any]]) -> int:
    """The attempts a share route really has: its ``max_attempts``, or fewer when its group's
    ``share.delivery.count.limit`` (read at start) is lower — the broker gives the record up at
    that delivery, so the worker must treat it as the last one and write the dead letter itself."""
    attempts = route.settings["max_attempts"]
    if route.group_type != "share":
        return attempts
    limit = (group_configs.get(route.name) or {}).get(DELIVERY_LIMIT)
    try:
        return min(attempts, int(limit)) if limit is not None else attempts
    except (TypeError, ValueError):
        return attempts
