"""quafka's delivery controls for a share group: what no Kafka release has (docs/share-groups.md,
"Extensions").

A `DeliveryPolicy` is a share group's `quafka.share.*` group configs, resolved by the shell and
given to each of its share partitions (`SharePartition.configure`). At its default every control is
off and a share partition behaves exactly as Kafka's.

- **Redelivery backoff** (`quafka.share.redelivery.backoff.*`): a record that becomes AVAILABLE
  again (a RELEASE, a lock expiry, a share session ending) waits `backoff_delay_ms` before it can be
  acquired again: `backoff_ms × multiplier^(deliveries − 1)`, with jitter, capped at
  `backoff_max_ms`. The due time is persisted with the record's state batch.
- **Delayed delivery** (`quafka.share.delivery.delay.enable`): a record whose headers say
  `quafka.deliver.after.ms` or `quafka.deliver.at.ms` is not acquired before that time
  (`delivery_due_ms` reads the header; the time is derived from the record again after a restart).
- **Key ordering** (`quafka.share.key.ordering`, `key_order`): at most one record per key in flight,
  in offset order; `on_failure` says what a key's later records do after one of its records failed.

Pure: no clock, no randomness. The jitter is a stable function of the group, the offset and the
delivery count, so the same release always gets the same delay (a replayed simulation too).
"""

from __future__ import annotations

from typing import NamedTuple

ON_FAILURE_CONTINUE = "continue"
ON_FAILURE_PARK = "park"
ON_FAILURE_DEAD_LETTER = "dead-letter"
ON_FAILURE_MODES = (ON_FAILURE_CONTINUE, ON_FAILURE_PARK, ON_FAILURE_DEAD_LETTER)

HEADER_DELIVER_AFTER_MS = "quafka.deliver.after.ms"
HEADER_DELIVER_AT_MS = "quafka.deliver.at.ms"
DELIVERY_HEADERS = (HEADER_DELIVER_AFTER_MS, HEADER_DELIVER_AT_MS)

# what `delivery_due_ms` made of a header (the shell counts the refused ones in a metric)
DUE_NONE, DUE_OK, DUE_CAPPED, DUE_BAD = "none", "ok", "capped", "bad"

_MASK64 = (1 << 64) - 1


class DeliveryPolicy(NamedTuple):
    """A share group's `quafka.share.*` settings (all off: Kafka's behaviour)."""

    backoff_ms: int = 0  # first redelivery delay; 0 = no backoff
    backoff_max_ms: int = 0  # cap of the delay
    backoff_multiplier: float = 1.0
    backoff_jitter: float = 0.0  # the delay varies by up to ± this fraction
    key_ordering: bool = False
    on_failure: str = ON_FAILURE_CONTINUE
    delayed_delivery: bool = False
    delivery_delay_max_ms: int = 0  # a header further ahead than this is capped to it
    jitter_seed: int = 0  # a stable number of the group (the shell derives it from the group id)
    dead_letters: bool = False  # the group has a DLQ (share.version 2 and a topic): where `dead-letter` sends

    @property
    def active(self) -> bool:
        """Whether any control is on (off: the share partition is exactly Kafka's)."""
        return self.backoff_ms > 0 or self.key_ordering or self.delayed_delivery

    @property
    def needs_record_meta(self) -> bool:
        """Whether acquiring new records needs their keys or headers (the shell reads them)."""
        return self.key_ordering or self.delayed_delivery


KAFKA = DeliveryPolicy()


def _mix(x: int) -> int:
    """splitmix64's finaliser: a stable, well-spread 64-bit function of `x`."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def backoff_delay_ms(policy: DeliveryPolicy, delivery_count: int, offset: int) -> int:
    """How long a record released after `delivery_count` deliveries waits (0: no backoff).

    first × multiplier^(delivery_count − 1), then jitter: × (1 + jitter × u) with u in [−1, 1)
    drawn from (group, offset, delivery count) by a stable function, then capped at the maximum.
    """
    if policy.backoff_ms <= 0:
        return 0
    exponent = max(delivery_count - 1, 0)
    cap = policy.backoff_max_ms if policy.backoff_max_ms > 0 else policy.backoff_ms
    delay = float(policy.backoff_ms)
    for _ in range(exponent):  # at most the delivery limit (≤ 25) steps; stop at the cap
        delay *= policy.backoff_multiplier
        if delay >= cap:
            break
    if policy.backoff_jitter > 0:
        u = _mix(_mix(policy.jitter_seed ^ (offset & _MASK64)) ^ delivery_count) / float(1 << 63) - 1.0
        delay *= 1.0 + policy.backoff_jitter * u
    return max(1, min(int(delay), cap))


def delivery_due_ms(headers: dict[str, bytes | None], timestamp_ms: int, max_delay_ms: int,
                    now_wall_ms: int) -> tuple[int, str]:
    """When a record carrying these headers may first be delivered, in wall-clock milliseconds
    (0: at once), and what was made of the header (DUE_*).

    `quafka.deliver.at.ms` is an epoch time; `quafka.deliver.after.ms` is relative to the record's
    timestamp (CreateTime as the producer set it, or LogAppendTime). A value that is not a decimal
    integer, or a negative delay, is ignored (DUE_BAD: delivered at once); a time further than
    `max_delay_ms` past now is capped there (DUE_CAPPED). When both are set, the later one wins.
    """
    due, outcome = 0, DUE_NONE
    for name in DELIVERY_HEADERS:
        raw = headers.get(name)
        if name not in headers:
            continue
        value = _parse_int(raw)
        if value is None or (name == HEADER_DELIVER_AFTER_MS and value < 0) or value < 0:
            outcome = DUE_BAD if outcome == DUE_NONE else outcome
            continue
        at = timestamp_ms + value if name == HEADER_DELIVER_AFTER_MS else value
        if outcome in (DUE_NONE, DUE_BAD):
            outcome = DUE_OK
        due = max(due, at)
    if due and max_delay_ms > 0 and due > now_wall_ms + max_delay_ms:
        return now_wall_ms + max_delay_ms, DUE_CAPPED
    return due, outcome


def _parse_int(raw: bytes | None) -> int | None:
    if raw is None or not 0 < len(raw) <= 20:
        return None
    try:
        text = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        return None
    if not text or not (text.isdigit() or (text[0] in "+-" and text[1:].isdigit())):
        return None
    return int(text)
