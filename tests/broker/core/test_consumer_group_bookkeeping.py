"""The KIP-848 group's incremental books (issue 28, item 6): subscribed-topic and regex counts,
regex resolutions, the partition owners and the static members, kept member by member so that a
heartbeat that changes nothing costs O(1) in the group size.

Two kinds of test: operation counts (a steady heartbeat iterates no member and matches no regex;
a regex is matched against the topics once per metadata version, for all groups), and a randomized
sequence of joins, subscription changes, reconciliation, leaves, static rejoins, timeouts, topic
creation/deletion/growth and restores after which every book equals its from-scratch
recomputation. The seed is printed; rerun one with QUAFKA_SEED=<seed>."""

from __future__ import annotations

import os
import random
import re
from collections import Counter
from uuid import UUID

import pytest

from quafka.broker.core.consumer_group import ConsumerGroupCoordinator
from quafka.broker.core.consumer_group_images import ConsumerGroupImageTracker, diff, image_of, restore_group
from quafka.protocol.errors import ErrorCode


def _topics(names_and_counts: dict[str, int]) -> dict[str, tuple[UUID, int]]:
    return {name: (UUID(int=int(name[1:]) + 1), count) for name, count in names_and_counts.items()}


class _CountingMembers(dict):
    """A group's member dict that counts every walk over all its members."""

    walks = 0

    def values(self):
        type(self).walks += 1
        return super().values()

    def items(self):
        type(self).walks += 1
        return super().items()

    def __iter__(self):
        type(self).walks += 1
        return super().__iter__()


class _CountingPattern:
    calls = 0

    def __init__(self, pattern: re.Pattern) -> None:
        self._pattern = pattern

    def fullmatch(self, text: str):
        type(self).calls += 1
        return self._pattern.fullmatch(text)


def _stable_group(coordinator: ConsumerGroupCoordinator, group_id: str, members: int, **subscription) -> list[str]:
    ids = [f"{group_id}-m{i:03d}" for i in range(members)]
    now = 0
    for member_id in ids:
        result, _ = coordinator.heartbeat(group_id, member_id, 0, rebalance_timeout_ms=1000, topic_partitions={},
                                          now_ms=now, **subscription)
        assert result.error is ErrorCode.none, result
    group = coordinator.group(group_id)
    for _round in range(5):  # everyone reports what it owns until the group is stable
        for member_id in ids:
            m = group.members[member_id]
            coordinator.heartbeat(group_id, member_id, m.member_epoch,
                                  topic_partitions={t: sorted(ps) for t, ps in m.assigned.items()}, now_ms=now)
    assert group.state.value == "Stable"
    return ids


def test_a_steady_heartbeat_walks_no_member_and_matches_no_regex():
    """Fails before the fix: every heartbeat recomputed the subscription over all members (and
    matched each member's regex against every topic) and rebuilt the owner map."""
    coordinator = ConsumerGroupCoordinator(topics=_topics({f"t{i}": 2 for i in range(20)}))
    ids = _stable_group(coordinator, "g", 30, subscribed_topic_regex=r"t1\d*")
    group = coordinator.group("g")
    group.members = _CountingMembers(group.members)
    coordinator._patterns = {r: _CountingPattern(p) for r, p in coordinator._patterns.items()}
    _CountingMembers.walks = _CountingPattern.calls = 0
    rebalances, epoch = coordinator.rebalances, group.group_epoch
    for i, member_id in enumerate(ids * 3):
        result, _ = coordinator.heartbeat("g", member_id, group.members[member_id].member_epoch, now_ms=100 + i)
        assert result.error is ErrorCode.none and result.assignment is None
    assert (_CountingMembers.walks, _CountingPattern.calls) == (0, 0)
    assert (coordinator.rebalances, group.group_epoch) == (rebalances, epoch)  # nothing moved


def test_a_regex_is_matched_once_per_metadata_version_for_all_groups():
    """Fails before the fix: each member's regex was matched against every topic at each use."""
    topics = {f"t{i}": 1 for i in range(40)}
    coordinator = ConsumerGroupCoordinator(topics=_topics(topics))
    for group_id in ("a", "b", "c"):
        _stable_group(coordinator, group_id, 5, subscribed_topic_regex=r"t\d")
    coordinator._patterns = {r: _CountingPattern(p) for r, p in coordinator._patterns.items()}
    _CountingPattern.calls = 0
    epochs = [coordinator.group(g).group_epoch for g in "abc"]
    topics["t41"] = 1
    coordinator.on_topics_changed(_topics(topics), now_ms=10)
    assert _CountingPattern.calls == len(topics)  # one regex, three groups, 15 members: one pass
    assert [coordinator.group(g).group_epoch for g in "abc"] == epochs  # t41 does not match t\d
    topics["t7"] = 3
    coordinator.on_topics_changed(_topics(topics), now_ms=11)
    assert [coordinator.group(g).group_epoch for g in "abc"] == [e + 1 for e in epochs]  # t7 grew
    assert coordinator.group("a").subscribed_metadata["t7"][1] == 3


# --------------------------------------------------------------------------- randomized


def _from_scratch(coordinator: ConsumerGroupCoordinator, group) -> dict:
    """Every book of `group`, recomputed from its members and the current topics."""
    topics = coordinator._topics
    regex_counts = Counter(m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex)
    resolved = {r: frozenset(t for t in topics if re.fullmatch(r, t)) for r in regex_counts}
    topic_counts = Counter(t for m in group.members.values() for t in m.subscribed_topic_names)
    for r in regex_counts:
        topic_counts.update(resolved[r])
    owners = {(t, p): m.member_id for m in group.members.values()
              for part_map in (m.assigned, m.pending_revocation) for t, ps in part_map.items() for p in ps}
    return {
        "counts": (dict(topic_counts), dict(regex_counts), resolved),
        "owners": owners,
        "epochs": group.partition_epochs(),
        "static": {m.instance_id: m.member_id for m in group.members.values() if m.instance_id is not None},
        "metadata": {t: topics[t] for t in sorted(topic_counts) if t in topics},
    }


def _books(group) -> dict:
    return {
        "counts": group.subscriptions.counts(),
        "owners": dict(group.owners),
        "epochs": {tp: group.partition_epoch(*tp) for tp in group.owners},
        "static": dict(group.static_members),
        "metadata": dict(group.subscribed_metadata),
    }


def _check(coordinator: ConsumerGroupCoordinator, tracker: ConsumerGroupImageTracker, where: str) -> None:
    for group_id in coordinator.group_ids():
        # the records the shell appends, rendered for the touched members only, are the full diff's
        group = coordinator.group(group_id)
        full = diff(tracker.get(group_id) or {}, image_of(group))
        assert tracker.records(group_id, group) == full, f"{where}: records of group {group_id}"
        tracker.written(group_id)
        assert tracker.get(group_id) == image_of(group), f"{where}: image of group {group_id}"
        assert group.touched == set()
        group = coordinator.group(group_id)
        expected, actual = _from_scratch(coordinator, group), _books(group)
        if not group.members:  # an empty group keeps its last metadata until a member comes
            expected.pop("metadata"), actual.pop("metadata")
        assert actual == expected, f"{where}: group {group_id}"
        owned = [tp for m in group.members.values() for pm in (m.assigned, m.pending_revocation)
                 for t, ps in pm.items() for tp in ((t, p) for p in ps)]
        assert len(owned) == len(set(owned)), f"{where}: a partition owned twice in group {group_id}"


SEEDS = [int(os.environ["QUAFKA_SEED"])] if "QUAFKA_SEED" in os.environ else list(range(12))


@pytest.mark.parametrize("seed", SEEDS)
def test_incremental_books_equal_a_recomputation(seed):
    print(f"seed {seed} (rerun: QUAFKA_SEED={seed})")
    rng = random.Random(seed)
    topic_sizes = {f"t{i}": rng.randint(1, 4) for i in range(8)}
    coordinator = ConsumerGroupCoordinator(topics=_topics(topic_sizes))
    tracker = ConsumerGroupImageTracker()
    regexes = [r"t[0-3]", r"t\d", r"t1\d*", r"x.*", r"t[2468]"]
    now = 0
    member_seq = 0
    for step in range(250):
        now += rng.randint(1, 400)
        where = f"seed {seed} step {step}"
        group_id = rng.choice(["g1", "g2"])
        group = coordinator.group(group_id)
        members = sorted(group.members) if group is not None else []
        op = rng.random()

        def subscription() -> dict:
            kind = rng.random()
            names = rng.sample(sorted(topic_sizes) + ["missing"], rng.randint(0, 3))
            if kind < 0.4:
                return {"subscribed_topic_names": names, "subscribed_topic_regex": ""}
            if kind < 0.8:
                return {"subscribed_topic_names": [], "subscribed_topic_regex": rng.choice(regexes)}
            return {"subscribed_topic_names": names, "subscribed_topic_regex": rng.choice(regexes)}

        if op < 0.2 or not members:  # a member joins (maybe static, maybe replacing a static one)
            member_seq += 1
            instance = f"i{rng.randint(0, 5)}" if rng.random() < 0.4 else None
            coordinator.heartbeat(group_id, f"m{member_seq}", 0, instance_id=instance, rebalance_timeout_ms=500,
                                  topic_partitions={}, now_ms=now, **subscription())
        elif op < 0.5:  # a member heartbeats, reporting what it owns (reconciliation moves on)
            m = group.members[rng.choice(members)]
            owned = {t: sorted(ps) for t, ps in m.assigned.items()} if rng.random() < 0.8 else None
            coordinator.heartbeat(group_id, m.member_id, m.member_epoch, instance_id=m.instance_id,
                                  topic_partitions=owned, client_id=rng.choice(["c1", "c2"]),
                                  rack_id=rng.choice([None, "r1", "r2"]), now_ms=now)
        elif op < 0.62:  # a member changes its subscription
            m = group.members[rng.choice(members)]
            coordinator.heartbeat(group_id, m.member_id, m.member_epoch, instance_id=m.instance_id,
                                  topic_partitions={t: sorted(ps) for t, ps in m.assigned.items()}, now_ms=now,
                                  **subscription())
        elif op < 0.7:  # a member leaves (a static one maybe with -2, keeping its place)
            m = group.members[rng.choice(members)]
            epoch = -2 if m.instance_id is not None and rng.random() < 0.5 else -1
            coordinator.heartbeat(group_id, m.member_id, epoch, instance_id=m.instance_id, now_ms=now)
        elif op < 0.78:  # timers fire late: session or rebalance timeouts fence
            m = group.members[rng.choice(members)]
            kind = rng.choice(["consumer-group-session", "consumer-group-rebalance"])
            coordinator.on_timer((kind, group_id, m.member_id), now + 10**6)
        elif op < 0.9:  # topics are created, deleted or grow
            change = rng.random()
            if change < 0.4:
                topic_sizes[f"t{rng.randint(0, 25)}"] = rng.randint(1, 4)
            elif change < 0.7 and topic_sizes:
                topic_sizes.pop(rng.choice(sorted(topic_sizes)))
            elif topic_sizes:
                name = rng.choice(sorted(topic_sizes))
                topic_sizes[name] += 1
            coordinator.on_topics_changed(_topics(topic_sizes), now)
        else:  # the group is reloaded from its records (a failed append, a restart)
            image = image_of(group)
            coordinator.unload(group_id)
            coordinator.restore(restore_group(group_id, image), now)
        _check(coordinator, tracker, where)
