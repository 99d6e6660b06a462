"""The consumer groups' server-side assignors (KIP-848, `group.consumer.assignors`): "uniform"
(the default) and "range", pure functions from the members' subscriptions, the topics and the
current target assignment to the next target assignment.

- `uniform` (Kafka's UniformAssignor): every partition of a subscribed topic goes to one of its
  subscribers, the members' partition counts are as even as the subscriptions allow (they differ by
  at most one when every member subscribes to the same topics), and stickiness: a member keeps what
  the current target gives it unless balance requires a move. Kafka's homogeneous and heterogeneous
  builders reach the same properties by other routes; where several assignments are equally good
  the one chosen here may differ from Kafka's. Not rack-aware.
- `range` (Kafka's RangeAssignor): per topic, its subscribers in order (static members first, by
  instance id, then the others by member id) get contiguous ranges, the first `P % N` one extra
  partition. With the same subscriptions and partition counts every member gets the same partition
  numbers of every topic (co-partitioning). Not sticky (neither is Kafka's).

Deterministic: members, topics and partitions are processed in sorted order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Mapping

__all__ = ["ASSIGNORS", "DEFAULT_ASSIGNOR", "MemberSpec", "RANGE", "UNIFORM", "assign"]

UNIFORM = "uniform"
RANGE = "range"
ASSIGNORS = (UNIFORM, RANGE)  # group.consumer.assignors' default; the first is the default one
DEFAULT_ASSIGNOR = UNIFORM

TopicId = Hashable
Topics = Mapping[str, tuple[TopicId, int]]  # topic name -> (topic id, partition count)
Target = dict[TopicId, frozenset[int]]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What an assignor sees of one member (Kafka's MemberSubscription + its current target)."""

    subscribed_topic_names: tuple[str, ...] = ()
    instance_id: str | None = None
    current: Mapping[TopicId, frozenset[int]] = field(default_factory=dict)


def assign(assignor: str, members: Mapping[str, MemberSpec], topics: Topics) -> dict[str, Target]:
    """The target assignment: member id -> {topic id: partitions} for every member (empty when it
    gets nothing). Topics a member subscribes to that do not exist are ignored."""
    if assignor == UNIFORM:
        return _uniform(members, topics)
    if assignor == RANGE:
        return _range(members, topics)
    raise ValueError(f"unknown assignor {assignor!r}")


def _subscriptions(members: Mapping[str, MemberSpec], topics: Topics) -> dict[str, list[str]]:
    return {m: sorted({t for t in spec.subscribed_topic_names if t in topics}) for m, spec in members.items()}


def _to_target(owned: Mapping[str, set[tuple[str, int]]], topics: Topics) -> dict[str, Target]:
    out: dict[str, Target] = {}
    for m, parts in owned.items():
        by_topic: dict[TopicId, set[int]] = {}
        for name, p in parts:
            by_topic.setdefault(topics[name][0], set()).add(p)
        out[m] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return out


# --------------------------------------------------------------------------- range


def _range(members: Mapping[str, MemberSpec], topics: Topics) -> dict[str, Target]:
    subs = _subscriptions(members, topics)
    order = sorted(members, key=lambda m: (0, members[m].instance_id, m) if members[m].instance_id is not None
                   else (1, "", m))
    owned: dict[str, set[tuple[str, int]]] = {m: set() for m in members}
    for topic in sorted({t for ts in subs.values() for t in ts}):
        subscribers = [m for m in order if topic in subs[m]]
        count = topics[topic][1]
        quota, extra = divmod(count, len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            n = quota + (1 if i < extra else 0)
            owned[m].update((topic, p) for p in range(start, start + n))
            start += n
    return _to_target(owned, topics)


# --------------------------------------------------------------------------- uniform


def _uniform(members: Mapping[str, MemberSpec], topics: Topics) -> dict[str, Target]:
    subs = _subscriptions(members, topics)
    member_ids = sorted(members)
    subscribers: dict[str, list[str]] = {}
    for m in member_ids:
        for t in subs[m]:
            subscribers.setdefault(t, []).append(m)
    names = {topic_id: name for name, (topic_id, _count) in topics.items()}

    owned: dict[str, set[tuple[str, int]]] = {m: set() for m in member_ids}
    owner: dict[tuple[str, int], str] = {}
    # 1. stickiness: keep every still-valid partition of the current target (first claim wins)
    for m in member_ids:
        for topic_id, parts in sorted(members[m].current.items(), key=lambda i: str(names.get(i[0], ""))):
            name = names.get(topic_id)
            if name is None or name not in subs[m]:
                continue
            for p in sorted(parts):
                if p < topics[name][1] and (name, p) not in owner:
                    owner[(name, p)] = m
                    owned[m].add((name, p))

    def load(m: str) -> tuple[int, str]:
        return len(owned[m]), m

    # 2. coverage: unowned partitions go to their least-loaded subscriber (the most constrained
    #    topics, those with the fewest subscribers, first)
    for topic in sorted(subscribers, key=lambda t: (len(subscribers[t]), t)):
        for p in range(topics[topic][1]):
            if (topic, p) not in owner:
                m = min(subscribers[topic], key=load)
                owner[(topic, p)] = m
                owned[m].add((topic, p))

    # 3. balance: move a partition from a member to a subscriber of its topic holding at least two
    #    fewer, until no such move exists (each move lowers the sum of squared loads: it ends)
    moved = True
    while moved:
        moved = False
        for m in sorted(member_ids, key=lambda x: (-len(owned[x]), x)):
            for part in sorted(owned[m], reverse=True):
                target = min(subscribers[part[0]], key=load)
                if len(owned[target]) <= len(owned[m]) - 2:
                    owned[m].discard(part)
                    owned[target].add(part)
                    owner[part] = target
                    moved = True
                    break
            if moved:
                break
    return _to_target(owned, topics)
