"""The SimpleAssignor: coverage, balance within one, sharing when members outnumber partitions,
stickiness, heterogeneous subscriptions, determinism."""

from __future__ import annotations

import itertools
import uuid
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from quafka.broker.core.share_assignor import assign, balance

T1, T2, T3 = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)
TOPICS = {"t1": (T1, 6), "t2": (T2, 3), "t3": (T3, 1)}


def counts(result):
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def holders(result):
    out: Counter = Counter()
    for a in result.values():
        for tid, ps in a.items():
            out.update((tid, p) for p in ps)
    return out


def pairs(result):
    return {(m, tid, p) for m, a in result.items() for tid, ps in a.items() for p in ps}


def test_one_member_gets_every_partition_of_its_topics():
    assert assign({"a": ["t1", "t2"]}, TOPICS) == {"a": {T1: [0, 1, 2, 3, 4, 5], T2: [0, 1, 2]}}


def test_homogeneous_members_get_counts_that_differ_by_at_most_one():
    result = assign({m: ["t1", "t2"] for m in "abcd"}, TOPICS)
    assert sorted(counts(result).values()) == [2, 2, 2, 3]
    assert set(holders(result).values()) == {1} and len(holders(result)) == 9


def test_more_members_than_partitions_share_each_partition_ceil_m_over_p_times():
    result = assign({m: ["t2"] for m in "abcdefg"}, TOPICS)  # 7 members, 3 partitions
    assert set(holders(result).values()) == {3}  # ceil(7 / 3)
    assert set(counts(result).values()) <= {1, 2} and min(counts(result).values()) >= 1


def test_a_single_partition_is_shared_by_every_member():
    result = assign({m: ["t3"] for m in "abc"}, TOPICS)
    assert result == {m: {T3: [0]} for m in "abc"}


def test_topics_that_do_not_exist_are_ignored():
    assert assign({"a": ["t2", "missing"]}, TOPICS) == {"a": {T2: [0, 1, 2]}}
    assert assign({"a": ["missing"]}, TOPICS) == {"a": {}}


def test_nothing_moves_when_nothing_changes():
    members = {m: ["t1", "t2"] for m in "abc"}
    first = assign(members, TOPICS)
    assert assign(members, TOPICS, first) == first


def test_a_new_member_takes_partitions_only_from_members_above_the_new_quota():
    members = {m: ["t1"] for m in "ab"}
    before = assign(members, TOPICS)  # 3 + 3
    after = assign({**members, "c": ["t1"]}, TOPICS, before)
    assert counts(after) == {"a": 2, "b": 2, "c": 2}
    kept = pairs(before) & pairs(after)
    assert len(kept) == 4  # each old member keeps two of its three


def test_a_leaving_member_s_partitions_go_to_the_others_and_nothing_else_moves():
    members = {m: ["t1"] for m in "abc"}
    before = assign(members, TOPICS)
    del members["c"]
    after = assign(members, TOPICS, {m: before[m] for m in members})
    assert {(m, t, p) for m, t, p in pairs(before) if m != "c"} <= pairs(after)
    assert counts(after) == {"a": 3, "b": 3}


def test_partitions_of_an_unsubscribed_topic_are_dropped_from_the_current_assignment():
    before = {"a": {T1: [0, 1], T2: [0]}}
    assert assign({"a": ["t2"]}, TOPICS, before) == {"a": {T2: [0, 1, 2]}}


def test_partitions_beyond_the_partition_count_are_dropped():
    assert assign({"a": ["t3"]}, TOPICS, {"a": {T3: [0, 5]}}) == {"a": {T3: [0]}}


def test_heterogeneous_subscriptions_balance_each_topic_among_its_subscribers():
    result = assign({"m1": ["t1"], "m2": ["t2"], "m3": ["t1", "t2"]}, TOPICS)
    assert len(result["m1"][T1]) == 3 and len(result["m3"][T1]) == 3
    assert {len(result["m2"][T2]), len(result["m3"][T2])} == {1, 2}
    assert set(holders(result).values()) == {1} and len(holders(result)) == 9


def test_heterogeneous_assignment_is_sticky():
    members = {"m1": ["t1"], "m2": ["t2"], "m3": ["t1", "t2"]}
    first = assign(members, TOPICS)
    assert assign(members, TOPICS, first) == first


def test_only_assignable_partitions_are_assigned():
    result = assign({"a": ["t1"]}, TOPICS, assignable=lambda tid, p: p % 2 == 0)
    assert result == {"a": {T1: [0, 2, 4]}}


def test_the_result_does_not_depend_on_input_order():
    a = assign({"b": ["t2", "t1"], "a": ["t1", "t2"]}, TOPICS)
    b = assign({"a": ["t1", "t2"], "b": ["t1", "t2"]}, dict(reversed(list(TOPICS.items()))))
    assert a == b


def test_a_leave_with_shared_partitions_keeps_the_most_pairs_balance_allows():
    # M 7 -> 6 over P = 6 (member-6 left), one member per partition after. A greedy keep gave
    # 3 -> {1} and 5 -> {5} (5 pairs kept) where 3 -> {5} and 5 -> {1} keep one pair each (6 kept).
    parts = [("t", p) for p in range(6)]
    before = {0: {0, 4}, 1: {3, 5}, 2: {0}, 3: {1, 5}, 4: {2, 4}, 5: {1, 3}}
    held = {f"member-{i}": {("t", p) for p in ps} for i, ps in before.items()}
    members = sorted(held)
    result = balance(members, parts, held)
    assert sorted(Counter(p for ps in result.values() for p in ps).values()) == [1] * 6
    assert sum(len(result[m] & held[m]) for m in members) == 6
    assert {m: {p for _t, p in ps} for m, ps in result.items()} == {
        "member-0": {4}, "member-1": {3}, "member-2": {0}, "member-3": {5}, "member-4": {2}, "member-5": {1}}


def test_balance_shares_a_partition_held_twice_when_members_shrink():
    # After a period with more members than partitions, p0 is held by both remaining members.
    held = {"a": {("t", 0)}, "b": {("t", 0), ("t", 1)}}
    result = balance(["a", "b"], [("t", 0), ("t", 1)], held)
    assert result == {"a": {("t", 0)}, "b": {("t", 1)}}


# --------------------------------------------------------------------------- properties

member_ids = st.lists(st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=9, unique=True)
partition_counts = st.lists(st.integers(1, 7), min_size=1, max_size=3)


def _topics(sizes):
    return {f"t{i}": (uuid.UUID(int=i + 1), n) for i, n in enumerate(sizes)}


def _check_homogeneous(result, topics):
    total = sum(n for _id, n in topics.values())
    m = len(result)
    got = holders(result)
    assert len(got) == total  # coverage
    sharing = -(-m // total)
    assert set(got.values()) == {sharing}  # each partition ceil(M/P) members
    c = counts(result)
    assert max(c.values()) - min(c.values()) <= 1  # balance
    if m >= total:
        assert min(c.values()) >= 1


@settings(max_examples=300, deadline=None)
@given(member_ids, partition_counts, st.data())
def test_property_balance_coverage_and_stickiness_when_one_member_joins_or_leaves(members, sizes, data):
    topics = _topics(sizes)
    names = list(topics)
    before = assign({m: names for m in members}, topics)
    _check_homogeneous(before, topics)
    assert assign({m: names for m in members}, topics, before) == before  # stable
    if data.draw(st.booleans()) or len(members) == 1:
        new = data.draw(st.text("xyz", min_size=1, max_size=2).filter(lambda s: s not in members))
        after_members = members + [new]
    else:
        leaving = data.draw(st.sampled_from(members))
        after_members = [m for m in members if m != leaving]
    current = {m: before[m] for m in after_members if m in before}
    after = assign({m: names for m in after_members}, topics, current)
    _check_homogeneous(after, topics)
    total = sum(n for _id, n in topics.values())
    if len(after_members) <= total and len(members) <= total:
        # One owner per partition before and after: the most that can be kept is, for each member,
        # min(what it held, its quota), with the larger quotas on the largest holdings.
        base, extra = divmod(total, len(after_members))
        held = sorted((len(pairs({m: current.get(m, {})})) for m in after_members), reverse=True)
        best = sum(min(h, base + (1 if i < extra else 0)) for i, h in enumerate(held))
        assert len(pairs(after) & pairs(before)) == best


@settings(max_examples=200, deadline=None)
@given(member_ids, partition_counts, st.data())
def test_property_heterogeneous_assignments_cover_each_topic_and_balance_within_it(members, sizes, data):
    topics = _topics(sizes)
    subs = {m: data.draw(st.lists(st.sampled_from(list(topics)), min_size=1, unique=True)) for m in members}
    result = assign(subs, topics)
    assert assign(subs, topics, result) == result
    if len({tuple(sorted(s)) for s in subs.values()}) == 1:
        _check_homogeneous(result, {t: topics[t] for t in subs[members[0]]})
        return
    for name, (tid, n) in topics.items():
        subscribers = [m for m in members if name in subs[m]]
        if not subscribers:
            assert all(tid not in result[m] for m in members)
            continue
        per_member = [len(result[m].get(tid, [])) for m in subscribers]
        assert max(per_member) - min(per_member) <= 1
        got = Counter(p for m in subscribers for p in result[m].get(tid, []))
        assert set(got) == set(range(n)) and set(got.values()) == {-(-len(subscribers) // n)}


@settings(max_examples=300, deadline=None)
@given(member_ids, partition_counts, st.data())
def test_property_any_current_assignment_still_gives_coverage_and_balance(members, sizes, data):
    topics = _topics(sizes)
    every = [(tid, p) for tid, n in topics.values() for p in range(n + 1)]  # one invalid partition each
    current = {}
    for m in members:
        chosen = data.draw(st.lists(st.sampled_from(every), max_size=8, unique=True))
        current[m] = {}
        for tid, p in chosen:
            current[m].setdefault(tid, []).append(p)
    result = assign({m: list(topics) for m in members}, topics, current)
    _check_homogeneous(result, topics)


# --------------------------------------------------------------------------- stickiness: the optimum

def _slots(m, p):
    sharing = -(-m // p)
    base, extra = divmod(sharing * p, m)
    return sharing, base, extra


def _best_kept_brute_force(members, parts, held):
    """The most pairs of `held` any balanced assignment keeps, by trying every balanced assignment."""
    sharing, base, extra = _slots(len(members), len(parts))
    sizes = [base, base + 1] if extra else [base]
    options = [frozenset(c) for k in sizes for c in itertools.combinations(parts, k)]
    best = -1
    for choice in itertools.product(options, repeat=len(members)):
        if sum(len(c) > base for c in choice) != extra:
            continue
        per_partition = Counter(q for c in choice for q in c)
        if any(per_partition[q] != sharing for q in parts):
            continue
        best = max(best, sum(len(c & held.get(m, set())) for m, c in zip(members, choice)))
    assert best >= 0
    return best


def _best_kept_min_cost_flow(members, parts, held):
    """The same as a min-cost flow (successive shortest paths, Bellman-Ford): source -> member
    (capacity base at cost -BIG, forcing every member's base quota; plus 1 at cost 0 when there are
    extra slots) -> partition (1, cost -1 where held) -> sink (sharing), of value sharing * P."""
    m, p = len(members), len(parts)
    sharing, base, extra = _slots(m, p)
    big = 10 * (m * p + 1)
    n, src, sink = m + p + 2, 0, m + p + 1
    graph = [[] for _ in range(n)]  # [to, capacity, cost, reverse index]

    def add(u, v, cap, cost):
        graph[u].append([v, cap, cost, len(graph[v])])
        graph[v].append([u, 0, -cost, len(graph[u]) - 1])

    for i, member in enumerate(members, 1):
        add(src, i, base, -big)
        if extra:
            add(src, i, 1, 0)
        for j, q in enumerate(parts):
            add(i, m + 1 + j, 1, -1 if q in held.get(member, ()) else 0)
    for j in range(p):
        add(m + 1 + j, sink, sharing, 0)
    cost = 0
    for _ in range(sharing * p):
        dist, via = [None] * n, [None] * n
        dist[src] = 0
        for _round in range(n):
            changed = False
            for u in range(n):
                if dist[u] is None:
                    continue
                for idx, (v, cap, c, _rev) in enumerate(graph[u]):
                    if cap > 0 and (dist[v] is None or dist[u] + c < dist[v]):
                        dist[v], via[v], changed = dist[u] + c, (u, idx), True
            if not changed:
                break
        v = sink
        while v != src:
            u, idx = via[v]
            graph[u][idx][1] -= 1
            graph[v][graph[u][idx][3]][1] += 1
            v = u
        cost += dist[sink]
    return -(cost + big * base * m)


def _check_balanced_and_optimal(members, parts, held, best_kept):
    result = balance(members, parts, held)
    sharing, base, extra = _slots(len(members), len(parts))
    per_partition = Counter(q for ps in result.values() for q in ps)
    assert set(per_partition) == set(parts) and set(per_partition.values()) == {sharing}
    assert sorted(len(result[m]) for m in members) == sorted([base] * (len(members) - extra) + [base + 1] * extra)
    kept = sum(len(result[m] & set(held.get(m, ()))) for m in members)
    assert kept == best_kept(members, parts, held)
    assert balance(members, parts, held) == result  # deterministic
    return result


def _held(data, members, parts, max_size):
    every = parts + [("t", 99)]  # and one partition that no longer exists
    return {m: set(data.draw(st.lists(st.sampled_from(every), max_size=max_size, unique=True))) for m in members}


small_members = st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4, unique=True).map(sorted)


@settings(max_examples=300, deadline=None)
@given(small_members, st.integers(1, 4), st.data())
def test_property_kept_pairs_are_the_brute_force_optimum_for_any_current_assignment(members, p, data):
    parts = [("t", q) for q in range(p)]
    _check_balanced_and_optimal(members, parts, _held(data, members, parts, 3), _best_kept_brute_force)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text("abcdefgh", min_size=1, max_size=2), min_size=1, max_size=10, unique=True).map(sorted),
       st.integers(1, 7), st.data())
def test_property_kept_pairs_are_the_min_cost_flow_optimum_for_any_current_assignment(members, p, data):
    parts = [("t", q) for q in range(p)]
    _check_balanced_and_optimal(members, parts, _held(data, members, parts, 4), _best_kept_min_cost_flow)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 7), st.lists(st.tuples(st.booleans(), st.integers(0, 11)), min_size=1, max_size=14))
def test_property_joins_and_leaves_keep_the_optimum_with_more_or_fewer_members_than_partitions(p, steps):
    # Joins and leaves one at a time from the assignor's own previous output: M <= P and M > P.
    parts = [("t", q) for q in range(p)]
    pool = [f"m{i:02d}" for i in range(12)]
    members, previous = [], {}
    for join, pick in steps:
        absent = [m for m in pool if m not in members]
        if members and (not join or not absent):
            members.remove(members[pick % len(members)])
        else:
            members.append(absent[pick % len(absent)])
        if not members:
            previous = {}
            continue
        members.sort()
        held = {m: previous.get(m, set()) for m in members}
        previous = _check_balanced_and_optimal(members, parts, held, _best_kept_min_cost_flow)
