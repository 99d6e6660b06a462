"""The share groups' SimpleAssignor (Kafka 4.2+): a pure function from (members' subscriptions,
topic metadata, current assignment) to the target assignment.

Rules, in order of priority (as Kafka's SimpleHomogeneous/HeterogeneousAssignmentBuilder):

1. Coverage: every assignable partition of a subscribed topic has a member.
2. Balance: the members' partition counts differ by at most one. With more members than partitions
   (M > P) a partition is shared: each gets ceil(M / P) members and every member gets at least one.
3. Stickiness: as much of the current assignment is kept as balance allows; nothing moves unless
   balance requires it.

When every member subscribes to the same topics (the homogeneous case) all their partitions are one
pool. Otherwise (heterogeneous) each topic is balanced on its own among its subscribers, as Kafka
does: if M1 subscribes to T1, M2 to T2 and M3 to both, M3 gets half of T1 and half of T2.

Deterministic for any input: members, topics and partitions are processed in sorted order and no
set of strings is ever iterated unsorted (Python's string hashing is salted per process). Kafka's
builders iterate Java HashMaps instead, so where several assignments are equally good the one chosen
may differ from Kafka's; the rules above hold either way. Not rack-aware (neither is Kafka's).

Topic ids are opaque here (uuid.UUID in the server): hashable and orderable, never created.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Collection, Hashable, Iterable, Mapping

__all__ = ["ASSIGNOR_NAME", "Assignment", "assign"]

ASSIGNOR_NAME = "simple"

TopicId = Hashable
Assignment = dict[TopicId, list[int]]  # topic id -> sorted partitions
_Partition = tuple[str, int]  # (topic name, partition): sorts deterministically


def assign(
    members: Mapping[str, Iterable[str]],
    topics: Mapping[str, tuple[TopicId, int]],
    current: Mapping[str, Mapping[TopicId, Iterable[int]]] | None = None,
    assignable: Callable[[TopicId, int], bool] | None = None,
) -> dict[str, Assignment]:
    """The target assignment of a share group.

    - `members`: member id -> subscribed topic names (topics missing from `topics` are ignored);
    - `topics`: topic name -> (topic id, partition count);
    - `current`: member id -> {topic id: partitions} now held (anything no longer valid is dropped);
    - `assignable`: optional filter of the partitions that may be assigned (e.g. initialised ones).

    Returns member id -> {topic id: sorted partitions} for every member (an empty dict when it gets
    nothing); topics with no partition for a member are left out.
    """
    current = current or {}
    ids = {name: topic_id for name, (topic_id, _count) in topics.items()}
    names_by_id = {topic_id: name for name, topic_id in ids.items()}
    subscriptions = {m: sorted({t for t in subs if t in topics}) for m, subs in members.items()}
    member_ids = sorted(members)

    def partitions_of(topic: str) -> list[_Partition]:
        topic_id, count = topics[topic]
        return [(topic, p) for p in range(count) if assignable is None or assignable(topic_id, p)]

    held: dict[str, set[_Partition]] = {}
    for m in member_ids:
        mine: set[_Partition] = set()
        for topic_id, parts in (current.get(m) or {}).items():
            name = names_by_id.get(topic_id)
            if name is not None:
                mine.update((name, p) for p in parts)
        held[m] = mine

    result: dict[str, set[_Partition]] = {m: set() for m in member_ids}
    distinct = {tuple(s) for s in subscriptions.values()}
    if len(distinct) == 1:
        pool = [p for topic in sorted(next(iter(distinct))) for p in partitions_of(topic)]
        result.update(balance(member_ids, pool, held))
    else:
        for topic in sorted({t for subs in subscriptions.values() for t in subs}):
            subscribers = [m for m in member_ids if topic in subscriptions[m]]
            pool = partitions_of(topic)
            topic_held = {m: {p for p in held[m] if p[0] == topic} for m in subscribers}
            for m, parts in balance(subscribers, pool, topic_held).items():
                result[m] |= parts
    return {m: _by_topic_id(result[m], ids) for m in member_ids}


def _by_topic_id(parts: Collection[_Partition], ids: Mapping[str, Any]) -> Assignment:
    out: dict[Any, list[int]] = {}
    for name, p in sorted(parts):
        out.setdefault(ids[name], []).append(p)
    return out


def balance(members: list[str], partitions: list[_Partition],
            held: Mapping[str, Collection[_Partition]]) -> dict[str, set[_Partition]]:
    """Spread `partitions` over `members` (both sorted): each partition gets s = ceil(M / P) members,
    each member base or base + 1 of the s * P slots, keeping what `held` already gives where it can."""
    result: dict[str, set[_Partition]] = {m: set() for m in members}
    if not members or not partitions:
        return result
    sharing = -(-len(members) // len(partitions))
    base, extra = divmod(sharing * len(partitions), len(members))
    valid = set(partitions)
    current = {m: sorted(set(held.get(m, ())) & valid) for m in members}
    # The larger quotas go to the members holding the most, so that the most is kept.
    by_holdings = sorted(members, key=lambda m: (-len(current[m]), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_holdings)}
    contention = Counter(p for m in members for p in current[m])
    count: Counter[_Partition] = Counter()
    # Keep: members with the fewest options first, each keeping its least contended partitions first.
    for m in sorted(members, key=lambda m: (len(current[m]), m)):
        for p in sorted(current[m], key=lambda p: (contention[p], p)):
            if len(result[m]) >= quota[m]:
                break
            if count[p] < sharing:
                result[m].add(p)
                count[p] += 1
    # Fill: every partition up to `sharing` members, from the members furthest below their quota.
    for p in partitions:
        while count[p] < sharing:
            takers = [m for m in members if len(result[m]) < quota[m] and p not in result[m]]
            if takers:
                m = min(takers, key=lambda m: (len(result[m]) - quota[m], m))
                result[m].add(p)
            elif not _swap_in(p, members, result, quota):
                break  # cannot happen for consistent quotas; kept as a guard against looping
            count[p] += 1
    return result


def _swap_in(p: _Partition, members: list[str], result: dict[str, set[_Partition]],
             quota: Mapping[str, int]) -> bool:
    """Every member with room already holds p: a full member y without p hands one of its partitions
    q to a member u with room that lacks q, and takes p instead. Counts stay within quotas."""
    for u in members:
        if len(result[u]) >= quota[u]:
            continue
        for y in members:
            if p in result[y] or y == u:
                continue
            for q in sorted(result[y] - result[u]):
                result[y].discard(q)
                result[u].add(q)
                result[y].add(p)
                return True
    return False
