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

import heapq
from collections import Counter
from typing import Any, Callable, Collection, Hashable, Iterable, Mapping

from ._maxflow import MaxFlow

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
    each member base or base + 1 of the S = s * P slots (exactly S mod M members get base + 1), no
    member twice on a partition, keeping as many of the pairs `held` gives as such an assignment can.

    Two maximum flows. Keep: source -> member (capacity base), source -> EXTRA (S mod M) -> member (1),
    member -> partition (1, only for pairs held now), partition -> sink (s). A balanced assignment's
    held pairs are always such a flow, so a maximum one keeps the most any balanced assignment can.
    Complete: fill the members' and partitions' remaining room with pairs not kept, greedily (with
    M <= P, s = 1: the partitions left have no member yet, a plain round-robin always works) or, if
    the greedy fill gets stuck, with a second maximum flow, which always saturates. Whatever the
    completion, it adds no held pair (the result's held pairs would be a larger keep flow), so the
    number of pairs kept is the optimum."""
    result: dict[str, set[_Partition]] = {m: set() for m in members}
    if not members or not partitions:
        return result
    sharing = -(-len(members) // len(partitions))
    base, extra = divmod(sharing * len(partitions), len(members))
    valid = set(partitions)
    current = {m: sorted(set(held.get(m, ())) & valid) for m in members}

    # Keep: nodes 0 source, 1 sink, 2 EXTRA, then the members, then the partitions held by someone.
    held_partitions = sorted({p for m in members for p in current[m]})
    flow = MaxFlow(3 + len(members) + len(held_partitions))
    member_node = {m: 3 + i for i, m in enumerate(members)}
    partition_node = {p: 3 + len(members) + i for i, p in enumerate(held_partitions)}
    for m in members:
        flow.add_edge(0, member_node[m], base)
    if extra:
        flow.add_edge(0, 2, extra)
        for m in members:
            flow.add_edge(2, member_node[m], 1)
    edges = {(m, p): flow.add_edge(member_node[m], partition_node[p], 1) for m in members for p in current[m]}
    for p in held_partitions:
        flow.add_edge(partition_node[p], 1, sharing)
    flow.max_flow(0, 1)
    for (m, p), edge in edges.items():
        if flow.flow(edge):
            result[m].add(p)

    # The members still free to take base + 1: the extra slots the keep left unused.
    spare = extra - sum(1 for m in members if len(result[m]) > base)
    count = Counter(p for m in members for p in result[m])
    if sharing == 1:
        _fill_round_robin(members, [p for p in partitions if not count[p]], result, base, spare)
    else:
        _complete(members, partitions, result, count, sharing, base, spare)
    return result


def _quotas(members: list[str], result: Mapping[str, set[_Partition]], base: int, spare: int) -> dict[str, int]:
    """Fixed quotas for a greedy fill: base + 1 for the members already above base, and for the
    `spare` others keeping the most (then the lowest ids); base for the rest."""
    quota = {m: base + (1 if len(result[m]) > base else 0) for m in members}
    for m in sorted((m for m in members if len(result[m]) <= base), key=lambda m: (-len(result[m]), m))[:spare]:
        quota[m] = base + 1
    return quota


def _fill_round_robin(members: list[str], free: list[_Partition], result: dict[str, set[_Partition]],
                      base: int, spare: int) -> None:
    """One member per partition: hand the `free` partitions out, each to the member furthest below
    its quota (then the lowest id)."""
    filled = _greedy(members, [(p, 1) for p in free], result, _quotas(members, result, base, spare))
    assert filled, "the quotas add up to the partitions"


def _greedy(members: list[str], needs: list[tuple[_Partition, int]], result: dict[str, set[_Partition]],
            quota: Mapping[str, int]) -> bool:
    """Give each partition its needed members, each time the member furthest below its quota (then
    the lowest id) that does not hold it yet. Changes `result` only if it succeeds (returns True)."""
    added: list[tuple[str, _Partition]] = []
    heap = [(len(result[m]) - quota[m], m) for m in members if len(result[m]) < quota[m]]
    heapq.heapify(heap)
    for p, need in needs:
        skipped = []
        while need:
            if not heap:
                return False
            deficit, m = heapq.heappop(heap)
            if p in result[m]:  # (a member picked for p waits in `skipped` until p is done)
                skipped.append((deficit, m))
                continue
            added.append((m, p))
            need -= 1
            if deficit + 1 < 0:
                skipped.append((deficit + 1, m))
        for entry in skipped:
            heapq.heappush(heap, entry)
    for m, p in added:
        result[m].add(p)
    return True


def _complete(members: list[str], partitions: list[_Partition], result: dict[str, set[_Partition]],
              count: Mapping[_Partition, int], sharing: int, base: int, spare: int) -> None:
    """Shared partitions (M > P): fill every partition up to `sharing` members and every member up
    to its quota, with no member twice on a partition. Greedily if that works (it nearly always
    does); otherwise with a maximum flow over the (member, partition) pairs not already in `result`,
    where `spare` of the members at or below `base` may take one more (through the EXTRA node)."""
    open_partitions = [p for p in partitions if count[p] < sharing]
    if not open_partitions:
        return
    if _greedy(members, [(p, sharing - count[p]) for p in open_partitions], result,
               _quotas(members, result, base, spare)):
        return
    flow = MaxFlow(3 + len(members) + len(open_partitions))
    member_node = {m: 3 + i for i, m in enumerate(members)}
    partition_node = {p: 3 + len(members) + i for i, p in enumerate(open_partitions)}
    needed = 0
    for m in members:
        room = base - len(result[m])
        if room > 0:
            flow.add_edge(0, member_node[m], room)
            needed += room
    if spare:
        flow.add_edge(0, 2, spare)
        needed += spare
        for m in members:
            if len(result[m]) <= base:
                flow.add_edge(2, member_node[m], 1)
    edges = {(m, p): flow.add_edge(member_node[m], partition_node[p], 1)
             for m in members if len(result[m]) <= base for p in open_partitions if p not in result[m]}
    for p in open_partitions:
        flow.add_edge(partition_node[p], 1, sharing - count[p])
    if flow.max_flow(0, 1) != needed:  # cannot happen: see balance(); a guard against a wrong result
        raise AssertionError("share assignor: no balanced completion of the kept assignment")
    for (m, p), edge in edges.items():
        if flow.flow(edge):
            result[m].add(p)
