"""The classic group's counts kept member by member (issue 28, item 6): members awaiting a JoinGroup
response and the members supporting each protocol (Kafka's ClassicGroup
numMembersAwaitingJoinResponse / supportedProtocols), so that a rebalance costs O(members), not
O(members²). An operation count, and a randomized run (seed printed; rerun with QUAFKA_SEED=<seed>)
after which the counts equal their recomputation."""

from __future__ import annotations

import os
import random
from collections import Counter

import pytest

from quafka.broker.core.classic_group import ClassicGroupConfig, ClassicGroupCoordinator
from quafka.broker.core.classic_group_model import ArmTimer, AppendGroupRecord, join_timer_key
from quafka.protocol.errors import ErrorCode

G = "g"


class _CountingMembers(dict):
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


class _World:
    def __init__(self) -> None:
        ids = iter(range(10**6))
        self.c = ClassicGroupCoordinator(lambda prefix: f"{prefix}-{next(ids)}",
                                         ClassicGroupConfig(initial_rebalance_delay_ms=0))
        self.now = 0
        self.tokens = iter(range(1, 10**6))
        self.timers: dict[tuple, int] = {}

    def take(self, effects) -> list:
        for e in effects:
            if isinstance(e, ArmTimer):
                self.timers[e.key] = e.deadline_ms
            elif isinstance(e, AppendGroupRecord) and e.append_id is not None:
                self.take(self.c.on_append_complete(e.append_id, ErrorCode.none, self.now))
        return effects

    def join(self, member_id: str = "", protocols=(("range", b"r"), ("sticky", b"s")), instance=None) -> list:
        return self.take(self.c.join_group(token=next(self.tokens), group_id=G, member_id=member_id,
                                           protocol_type="consumer", protocols=protocols, session_timeout_ms=10_000,
                                           rebalance_timeout_ms=30_000, group_instance_id=instance, api_version=3,
                                           now_ms=self.now))

    def sync_all(self) -> None:
        group = self.c.group(G)
        for member_id in list(group.members):
            assignments = {m: b"a" for m in group.members} if group.is_leader(member_id) else None
            self.take(self.c.sync_group(token=next(self.tokens), group_id=G, member_id=member_id,
                                        generation_id=group.generation_id, assignments=assignments, now_ms=self.now))

    def fire_due(self) -> None:
        for key, deadline in sorted(self.timers.items(), key=repr):
            if deadline <= self.now:
                del self.timers[key]
                self.take(self.c.on_timer(key, self.now))


def test_rejoining_members_walk_no_member_until_the_last():
    """Fails before the fix: every JoinGroup counted the members supporting its protocols and
    those that had rejoined over all members (O(members²) per rebalance)."""
    w = _World()
    for _ in range(40):
        w.join()
    while w.c.group(G).state.value == "PreparingRebalance":
        w.take(w.c.on_timer(join_timer_key(G), w.now))
    w.sync_all()
    group = w.c.group(G)
    assert group.state.value == "Stable"
    ids = list(group.members)
    w.join(group.leader_id)  # the leader's JoinGroup starts a rebalance
    group.members = _CountingMembers(group.members)
    _CountingMembers.walks = 0
    for member_id in ids[1:-1]:
        w.join(member_id)
    assert _CountingMembers.walks == 0
    w.join(ids[-1])  # the last one completes the join phase: one pass over the members
    assert group.state.value == "CompletingRebalance" and group.generation_id == 2


def _check(group, where: str) -> None:
    expected_protocols = Counter(name for m in group.members.values() for name in m.protocol_names())
    assert group.awaiting_join == sum(m.is_awaiting_join for m in group.members.values()), where
    assert dict(group.supported_protocols) == dict(expected_protocols), where


SEEDS = [int(os.environ["QUAFKA_SEED"])] if "QUAFKA_SEED" in os.environ else list(range(10))


@pytest.mark.parametrize("seed", SEEDS)
def test_counts_equal_a_recomputation(seed):
    print(f"seed {seed} (rerun: QUAFKA_SEED={seed})")
    rng = random.Random(seed)
    w = _World()
    choices = [(("range", b"r"),), (("range", b"r"), ("sticky", b"s")), (("sticky", b"s"), ("range", b"x"))]
    for step in range(300):
        w.now += rng.randint(0, 4000)
        group = w.c.group(G)
        members = list(group.members) if group is not None else []
        op = rng.random()
        if op < 0.25 or not members:
            instance = f"i{rng.randint(0, 4)}" if rng.random() < 0.3 else None
            w.join(protocols=rng.choice(choices), instance=instance)
        elif op < 0.55:
            member_id = rng.choice(members)
            w.join(member_id, protocols=rng.choice(choices), instance=group.members[member_id].group_instance_id)
        elif op < 0.7:
            w.sync_all()
        elif op < 0.8:
            member_id = rng.choice(members)
            w.take(w.c.leave_group(group_id=G, members=[(member_id, group.members[member_id].group_instance_id)],
                                   now_ms=w.now)[1])
        elif op < 0.9:
            member_id = rng.choice(members)
            w.take(w.c.heartbeat(group_id=G, member_id=member_id, generation_id=group.generation_id,
                                 group_instance_id=group.members[member_id].group_instance_id, now_ms=w.now)[1])
        else:
            w.now += 40_000
            w.fire_due()
        group = w.c.group(G)
        if group is not None:
            _check(group, f"seed {seed} step {step}")
