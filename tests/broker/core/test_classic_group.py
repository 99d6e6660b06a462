"""The classic group machine with virtual time: each (state, input) pair of JoinGroup, SyncGroup,
Heartbeat, LeaveGroup and the timers, plus the flows (MEMBER_ID_REQUIRED, a 3-member rebalance,
a 4th joining, leave, session expiry, static replacement, the initial delay, group.max.size)."""

from __future__ import annotations

import pytest

from quafka.broker.core.classic_group import ClassicGroupCoordinator, append_error_to_response_error
from quafka.broker.core.classic_group_model import (
    VALID_PREVIOUS_STATES,
    AppendGroupRecord,
    ArmTimer,
    CancelTimer,
    ClassicGroupConfig,
    JoinMember,
    JoinResponse,
    SyncResponse,
    heartbeat_timer_key,
    join_timer_key,
    sync_timer_key,
)
from quafka.broker.core.consumer_offsets import ClassicState, GroupKind
from quafka.protocol.classic_group_records import GroupMetadataValue, MemberMetadata
from quafka.protocol.errors import ErrorCode

G = "g"
PROTOCOLS = (("range", b"r"),)
SESSION_MS = 10_000
REBALANCE_MS = 30_000
DELAY_MS = 3_000


class Ids:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.n}"


class World:
    """A coordinator, a virtual clock, a token counter and what the shell would have seen."""

    def __init__(self, **config) -> None:
        config.setdefault("initial_rebalance_delay_ms", DELAY_MS)
        self.c = ClassicGroupCoordinator(Ids(), ClassicGroupConfig(**config))
        self.now = 0
        self.next_token = 100
        self.timers: dict[tuple, int] = {}
        self.appends: list[AppendGroupRecord] = []
        self.joins: dict[int, JoinResponse] = {}
        self.syncs: dict[int, SyncResponse] = {}

    def take(self, effects):
        for e in effects:
            if isinstance(e, ArmTimer):
                self.timers[e.key] = e.deadline_ms
            elif isinstance(e, CancelTimer):
                self.timers.pop(e.key, None)
            elif isinstance(e, AppendGroupRecord):
                self.appends.append(e)
            elif isinstance(e, JoinResponse):
                assert e.token not in self.joins, "a token answered twice"
                self.joins[e.token] = e
            elif isinstance(e, SyncResponse):
                assert e.token not in self.syncs, "a token answered twice"
                self.syncs[e.token] = e
        return effects

    def token(self) -> int:
        self.next_token += 1
        return self.next_token

    def join(self, member_id="", *, client="c", instance=None, protocols=PROTOCOLS, ptype="consumer",
             session=SESSION_MS, rebalance=REBALANCE_MS, version=9, group=G):
        t = self.token()
        self.take(self.c.join_group(token=t, group_id=group, member_id=member_id, protocol_type=ptype,
                                    protocols=protocols, session_timeout_ms=session, rebalance_timeout_ms=rebalance,
                                    group_instance_id=instance, client_id=client, client_host="/127.0.0.1",
                                    api_version=version, now_ms=self.now))
        return t

    def sync(self, member_id, generation, *, assignments=None, instance=None, ptype=None, pname=None, group=G):
        t = self.token()
        self.take(self.c.sync_group(token=t, group_id=group, member_id=member_id, generation_id=generation,
                                    group_instance_id=instance, protocol_type=ptype, protocol_name=pname,
                                    assignments=assignments, now_ms=self.now))
        return t

    def heartbeat(self, member_id, generation, instance=None, group=G):
        error, effects = self.c.heartbeat(group_id=group, member_id=member_id, generation_id=generation,
                                          group_instance_id=instance, now_ms=self.now)
        self.take(effects)
        return error

    def leave(self, *members, group=G):
        result, effects = self.c.leave_group(group_id=group, members=members, now_ms=self.now)
        self.take(effects)
        return result

    def complete_appends(self, error=ErrorCode.none):
        pending, self.appends = self.appends, []
        for a in pending:
            if a.append_id is not None:
                self.take(self.c.on_append_complete(a.append_id, error, self.now))

    def advance(self, ms):
        """Move the clock, firing due timers in deadline order."""
        target = self.now + ms
        while True:
            due = sorted((d, repr(k), k) for k, d in self.timers.items() if d <= target)
            if not due:
                break
            deadline, _, key = due[0]
            self.now = deadline
            del self.timers[key]
            self.take(self.c.on_timer(key, self.now))
        self.now = target

    def settle(self):
        """Let the initial rebalance delay run out (it is extended while members join)."""
        for _ in range(20):
            if self.state() is not ClassicState.PREPARING_REBALANCE:
                return
            self.advance(DELAY_MS)

    def state(self, group=G):
        return self.c.group(group).state

    def group(self, group=G):
        return self.c.group(group)

    # --- flows
    def new_member(self, client="c", **kw) -> str:
        """MEMBER_ID_REQUIRED, then the join with the id; returns (member id, token of the parked join)."""
        t = self.join(client=client, **kw)
        assert self.joins[t].error is ErrorCode.member_id_required
        member_id = self.joins[t].member_id
        return member_id, self.join(member_id, client=client, **kw)

    def stable_group(self, n=3, **kw):
        """n members join, the initial delay passes, everyone syncs; returns the member ids."""
        members = []
        for i in range(n):
            member_id, _ = self.new_member(client=f"c{i}", **kw)
            members.append(member_id)
        self.settle()
        assert self.state() is ClassicState.COMPLETING_REBALANCE
        gen = self.group().generation_id
        for m in members[1:]:
            self.sync(m, gen)
        self.sync(members[0], gen, assignments={m: m.encode() for m in members})
        self.complete_appends()
        assert self.state() is ClassicState.STABLE
        return members

    def preparing_group(self):
        """A stable group of 3 whose leader rejoined: PreparingRebalance, two members yet to rejoin."""
        members = self.stable_group(3)
        t = self.join(members[0])
        assert self.state() is ClassicState.PREPARING_REBALANCE
        self.complete_appends()
        return members, t

    def completing_group(self, **kw):
        """A group of 2 just moved to CompletingRebalance (nobody synced yet)."""
        members = []
        for i in range(2):
            members.append(self.new_member(client=f"c{i}", **kw)[0])
        self.settle()
        assert self.state() is ClassicState.COMPLETING_REBALANCE
        self.complete_appends()
        return members


def errors_of(world, tokens):
    return [world.joins[t].error for t in tokens]


# =========================================================================== the flows


def test_member_id_required_then_join_with_the_given_id():
    w = World()
    t = w.join(client="cli")
    r = w.joins[t]
    assert r.error is ErrorCode.member_id_required and r.member_id == "cli-1"
    assert w.timers[heartbeat_timer_key(G, "cli-1")] == SESSION_MS  # pending member's session
    assert w.state() is ClassicState.EMPTY
    assert "cli-1" in w.group().pending_join_members
    t2 = w.join("cli-1", client="cli")
    assert t2 not in w.joins  # parked until the join phase completes
    assert w.state() is ClassicState.PREPARING_REBALANCE
    assert w.timers[join_timer_key(G)] == DELAY_MS


def test_join_v3_gets_a_member_id_without_member_id_required():
    w = World()
    t = w.join(version=3)
    assert t not in w.joins
    assert list(w.group().members) == ["c-1"]


def test_new_group_appends_an_empty_group_record():
    w = World()
    w.now = 7
    w.join()
    assert w.appends[0].value == GroupMetadataValue("", 0, None, None, 7, ())


def test_three_member_rebalance_to_stable_with_deferred_responses():
    w = World()
    m = []
    tokens = []
    for i in range(3):
        member_id, t = w.new_member(client=f"c{i}")
        m.append(member_id)
        tokens.append(t)
    assert not any(t in w.joins for t in tokens)
    w.settle()
    assert w.state() is ClassicState.COMPLETING_REBALANCE
    assert w.group().generation_id == 1
    leader = w.joins[tokens[0]]
    assert leader.error is ErrorCode.none and leader.leader == m[0] and leader.protocol_name == "range"
    assert leader.protocol_type == "consumer" and leader.generation_id == 1
    assert leader.members == tuple(JoinMember(x, None, b"r") for x in m)
    assert w.joins[tokens[1]].members == () and w.joins[tokens[1]].leader == m[0]
    assert w.timers[sync_timer_key(G)] == w.now + REBALANCE_MS
    s1, s2 = w.sync(m[1], 1), w.sync(m[2], 1)
    assert s1 not in w.syncs and s2 not in w.syncs
    s0 = w.sync(m[0], 1, assignments={m[0]: b"a0", m[1]: b"a1"})
    assert sync_timer_key(G) not in w.timers
    # the assignment waits for its record
    assert w.state() is ClassicState.COMPLETING_REBALANCE and s0 not in w.syncs
    record = w.appends[-1].value
    assert [x.assignment for x in record.members] == [b"a0", b"a1", b""]
    assert record.generation == 1 and record.leader == m[0] and record.protocol == "range"
    w.complete_appends()
    assert w.state() is ClassicState.STABLE
    assert w.syncs[s0] == SyncResponse(s0, ErrorCode.none, "consumer", "range", b"a0")
    assert w.syncs[s1].assignment == b"a1" and w.syncs[s2].assignment == b""
    assert w.heartbeat(m[1], 1) is ErrorCode.none


def test_a_fourth_member_joining_a_stable_group_rebalances():
    w = World()
    m = w.stable_group(3)
    d, t = w.new_member(client="d")
    assert w.state() is ClassicState.PREPARING_REBALANCE
    assert w.timers[join_timer_key(G)] == w.now + REBALANCE_MS
    # the others learn of it by heartbeat and rejoin
    assert w.heartbeat(m[1], 1) is ErrorCode.rebalance_in_progress
    rejoin = [w.join(x) for x in m]
    assert w.state() is ClassicState.COMPLETING_REBALANCE
    assert w.group().generation_id == 2
    assert len(w.joins[rejoin[0]].members) == 4
    assert w.joins[t].error is ErrorCode.none and w.joins[t].member_id == d


def test_a_member_that_does_not_rejoin_is_removed_when_the_join_phase_times_out():
    w = World()
    m = w.stable_group(3, session=60_000)
    w.join(m[0])
    w.join(m[1])
    w.advance(REBALANCE_MS)
    assert w.state() is ClassicState.COMPLETING_REBALANCE
    assert list(w.group().members) == [m[0], m[1]]
    assert heartbeat_timer_key(G, m[2]) not in w.timers


def test_leave_rebalances_and_last_leave_empties_the_group():
    w = World()
    m = w.stable_group(2)
    result = w.leave((m[1], None))
    assert result.error is ErrorCode.none and result.members[0].error is ErrorCode.none
    assert w.state() is ClassicState.PREPARING_REBALANCE
    assert heartbeat_timer_key(G, m[1]) not in w.timers
    w.join(m[0])
    assert w.state() is ClassicState.COMPLETING_REBALANCE
    w.sync(m[0], 2, assignments={m[0]: b"all"})
    w.complete_appends()
    w.now += 5
    w.leave((m[0], None))
    assert w.state() is ClassicState.EMPTY
    assert w.group().generation_id == 3 and w.group().protocol_name is None
    record = w.appends[-1].value
    assert record.members == () and record.protocol is None and record.generation == 3
    view = w.c.to_view(G)
    assert view.kind is GroupKind.CLASSIC and view.state is ClassicState.EMPTY and view.empty_since_ms == w.now


def test_leave_batch_with_per_member_errors():
    w = World()
    m = w.stable_group(2)
    result = w.leave((m[0], None), ("nobody", None), ("", "unknown-instance"))
    assert [r.error for r in result.members] == [ErrorCode.none, ErrorCode.unknown_member_id,
                                                 ErrorCode.unknown_member_id]


def test_session_expiry_removes_the_member_and_rebalances():
    w = World()
    m = w.stable_group(3)
    # m0 and m1 heartbeat, m2 goes silent
    w.advance(SESSION_MS // 2)
    assert w.heartbeat(m[0], 1) is ErrorCode.none
    assert w.heartbeat(m[1], 1) is ErrorCode.none
    w.advance(SESSION_MS // 2)
    assert m[2] not in w.group().members
    assert w.state() is ClassicState.PREPARING_REBALANCE


def test_static_member_replacement_fences_the_old_member_id():
    w = World()
    a, _ = w.join(instance="ia", client="ca"), None
    b = w.join(instance="ib", client="cb")
    w.settle()
    ma, mb = w.joins[a].member_id, w.joins[b].member_id
    assert (ma, mb) == ("ia-1", "ib-2")
    w.sync(mb, 1)
    w.sync(ma, 1, assignments={ma: b"A", mb: b"B"})
    w.complete_appends()
    # ib restarts and rejoins with no member id, same metadata: no rebalance (it is not the leader)
    t = w.join(instance="ib", client="cb")
    assert w.state() is ClassicState.STABLE
    new_b = "ib-3"
    assert w.appends[-1].append_id is not None
    assert [x.member_id for x in w.appends[-1].value.members] == [ma, new_b]
    assert t not in w.joins  # waits for the record
    w.complete_appends()
    r = w.joins[t]
    assert r.error is ErrorCode.none and r.member_id == new_b and r.generation_id == 1 and not r.skip_assignment
    assert w.group().members[new_b].assignment == b"B"
    # the old id is fenced
    assert w.heartbeat(mb, 1, instance="ib") is ErrorCode.fenced_instance_id
    s = w.sync(mb, 1, instance="ib")
    assert w.syncs[s].error is ErrorCode.fenced_instance_id
    assert w.heartbeat(new_b, 1, instance="ib") is ErrorCode.none


def test_static_leader_rejoining_in_stable_with_same_protocol_skips_assignment():
    w = World()
    a = w.join(instance="ia")
    w.advance(DELAY_MS)
    ma = w.joins[a].member_id
    w.sync(ma, 1, assignments={ma: b"A"})
    w.complete_appends()
    t = w.join(instance="ia")
    assert w.state() is ClassicState.STABLE
    w.complete_appends()
    r = w.joins[t]
    assert r.skip_assignment and r.leader == r.member_id and len(r.members) == 1


def test_static_rejoin_whose_record_fails_reverts_to_the_old_member_id():
    w = World()
    a = w.join(instance="ia")
    w.advance(DELAY_MS)
    ma = w.joins[a].member_id
    w.sync(ma, 1, assignments={ma: b"A"})
    w.complete_appends()
    t = w.join(instance="ia")
    w.complete_appends(ErrorCode.not_leader_or_follower)
    assert w.joins[t].error is ErrorCode.not_coordinator and w.joins[t].member_id == ""
    assert list(w.group().members) == [ma] and w.group().static_members == {"ia": ma}
    assert w.heartbeat(ma, 1, instance="ia") is ErrorCode.none


def test_static_rejoin_changing_the_protocol_rebalances():
    w = World()
    both = (("range", b"r"), ("rr", b"x"))
    a = w.join(instance="ia", protocols=both)
    b = w.join(instance="ib", protocols=both)
    w.settle()
    ma, mb = w.joins[a].member_id, w.joins[b].member_id
    w.sync(ma, 1, assignments={})
    w.complete_appends()
    assert w.group().protocol_name == "range"
    w.join(instance="ib", protocols=(("rr", b"x"),))  # only rr is common now
    assert w.state() is ClassicState.PREPARING_REBALANCE
    assert mb not in w.group().members and w.group().static_members["ib"] != mb


def test_initial_rebalance_delay_is_extended_while_members_join():
    w = World()
    m0, t0 = w.new_member(client="a")
    w.advance(DELAY_MS - 1)
    m1, t1 = w.new_member(client="b")
    w.advance(1)  # first delay passes; a member was added: extend
    assert w.state() is ClassicState.PREPARING_REBALANCE
    assert w.timers[join_timer_key(G)] == 2 * DELAY_MS
    w.advance(DELAY_MS)
    assert w.state() is ClassicState.COMPLETING_REBALANCE
    assert errors_of(w, [t0, t1]) == [ErrorCode.none, ErrorCode.none]


def test_initial_rebalance_delay_is_bounded_by_the_rebalance_timeout():
    w = World()
    w.new_member(client="a", rebalance=4_000)
    for _ in range(10):
        w.advance(1_000)
        if w.state() is not ClassicState.PREPARING_REBALANCE:
            break
        w.new_member(client="x", rebalance=4_000)
    assert w.state() is ClassicState.COMPLETING_REBALANCE
    assert w.now <= DELAY_MS + 4_000


def test_group_max_size_rejects_a_new_member_in_stable():
    w = World(max_size=2)
    w.stable_group(2)
    t = w.join(client="third")  # stable and full: refused before it gets a member id
    assert w.joins[t].error is ErrorCode.group_max_size_reached and w.joins[t].member_id == ""


def test_group_max_size_counts_awaiting_members_in_preparing_rebalance():
    w = World(max_size=2)
    ids = [w.new_member(client=f"c{i}")[0] for i in range(2)]
    assert w.state() is ClassicState.PREPARING_REBALANCE and w.group().num_awaiting_join() == 2
    t = w.join(client="third")
    assert w.joins[t].error is ErrorCode.group_max_size_reached and w.joins[t].member_id == ""
    # a member already awaiting is still accepted
    t2 = w.join(ids[0], client="c0")
    assert t2 not in w.joins


def test_group_max_size_lets_a_pending_member_in_while_empty():
    w = World(max_size=1)
    t = w.join()
    pending = w.joins[t].member_id
    t2 = w.join(pending)
    assert t2 not in w.joins and w.state() is ClassicState.PREPARING_REBALANCE


def test_invalid_session_timeout():
    w = World()
    t = w.join(session=1)
    assert w.joins[t].error is ErrorCode.invalid_session_timeout
    t = w.join(session=1_800_001)
    assert w.joins[t].error is ErrorCode.invalid_session_timeout
    assert w.c.group(G) is None


def test_empty_group_id_is_invalid():
    w = World()
    t = w.join(group="")
    assert w.joins[t].error is ErrorCode.invalid_group_id


def test_known_member_id_to_an_unknown_group_is_unknown_member():
    w = World()
    t = w.join("m-1")
    assert w.joins[t].error is ErrorCode.unknown_member_id and w.joins[t].member_id == "m-1"


def test_protocol_vote_picks_the_protocol_most_members_prefer():
    w = World()
    w.new_member(client="a", protocols=(("range", b"1"), ("rr", b"2")))
    w.new_member(client="b", protocols=(("rr", b"3"), ("range", b"4")))
    w.new_member(client="c", protocols=(("rr", b"5"), ("sticky", b"6"), ("range", b"7")))
    w.settle()
    assert w.group().protocol_name == "rr"


def test_join_with_an_unsupported_protocol_is_inconsistent():
    w = World()
    w.stable_group(2)
    t = w.join(protocols=(("other", b""),))
    assert w.joins[t].error is ErrorCode.inconsistent_group_protocol
    t = w.join(ptype="connect")
    assert w.joins[t].error is ErrorCode.inconsistent_group_protocol


def test_join_with_an_empty_protocol_type_into_an_empty_group_is_inconsistent():
    w = World()
    t = w.join(ptype="")
    assert w.joins[t].error is ErrorCode.inconsistent_group_protocol


# =========================================================================== JoinGroup per state


def test_join_existing_member_in_empty_is_unknown_member():
    w = World()
    m = w.stable_group(1)
    w.leave((m[0], None))
    assert w.state() is ClassicState.EMPTY
    t = w.join(m[0])
    assert w.joins[t].error is ErrorCode.unknown_member_id


def test_join_existing_member_in_preparing_rebalance_parks_and_completes_when_all_joined():
    w = World()
    m, t0 = w.preparing_group()
    t1 = w.join(m[1])
    assert t1 not in w.joins and w.state() is ClassicState.PREPARING_REBALANCE
    t2 = w.join(m[2])
    assert errors_of(w, [t0, t1, t2]) == [ErrorCode.none] * 3
    assert w.state() is ClassicState.COMPLETING_REBALANCE


def test_join_existing_member_in_completing_rebalance_with_same_metadata_gets_the_generation_again():
    w = World()
    m = w.completing_group()
    t = w.join(m[0])
    r = w.joins[t]
    assert r.error is ErrorCode.none and r.generation_id == 1 and len(r.members) == 2
    assert w.state() is ClassicState.COMPLETING_REBALANCE


def test_join_existing_member_in_completing_rebalance_with_new_metadata_rebalances():
    w = World()
    m = w.completing_group()
    s = w.sync(m[1], 1)
    t = w.join(m[0], protocols=(("range", b"new"),))
    assert w.state() is ClassicState.PREPARING_REBALANCE
    assert w.syncs[s].error is ErrorCode.rebalance_in_progress
    assert t not in w.joins


def test_join_follower_in_stable_with_same_metadata_gets_current_generation():
    w = World()
    m = w.stable_group(2)
    t = w.join(m[1])
    assert w.state() is ClassicState.STABLE
    assert w.joins[t].error is ErrorCode.none and w.joins[t].members == () and w.joins[t].generation_id == 1


def test_join_follower_in_stable_with_new_metadata_rebalances():
    w = World()
    m = w.stable_group(2)
    w.join(m[1], protocols=(("range", b"changed"),))
    assert w.state() is ClassicState.PREPARING_REBALANCE


def test_join_leader_in_stable_always_rebalances():
    w = World()
    m = w.stable_group(2)
    w.join(m[0])
    assert w.state() is ClassicState.PREPARING_REBALANCE


def test_join_unknown_member_id_is_unknown_member():
    w = World()
    w.stable_group(2)
    t = w.join("stranger")
    assert w.joins[t].error is ErrorCode.unknown_member_id


# =========================================================================== SyncGroup per state


def test_sync_unknown_group_or_empty_group_is_unknown_member():
    w = World()
    s = w.sync("m", 0)
    assert w.syncs[s].error is ErrorCode.unknown_member_id
    w.join()
    s = w.sync("m", 0)
    assert w.syncs[s].error is ErrorCode.unknown_member_id


def test_sync_in_preparing_rebalance_is_rebalance_in_progress():
    w = World()
    m, _ = w.preparing_group()
    s = w.sync(m[1], 1)
    assert w.syncs[s].error is ErrorCode.rebalance_in_progress


def test_sync_errors_unknown_member_illegal_generation_inconsistent_protocol():
    w = World()
    m = w.completing_group()
    assert w.syncs[w.sync("stranger", 1)].error is ErrorCode.unknown_member_id
    assert w.syncs[w.sync(m[1], 0)].error is ErrorCode.illegal_generation
    assert w.syncs[w.sync(m[1], 1, ptype="connect")].error is ErrorCode.inconsistent_group_protocol
    assert w.syncs[w.sync(m[1], 1, pname="rr")].error is ErrorCode.inconsistent_group_protocol
    s = w.sync(m[1], 1, ptype="consumer", pname="range")
    assert s not in w.syncs


def test_sync_in_stable_returns_the_assignment():
    w = World()
    m = w.stable_group(2)
    s = w.sync(m[1], 1)
    assert w.syncs[s] == SyncResponse(s, ErrorCode.none, "consumer", "range", m[1].encode())


def test_sync_record_failure_answers_with_the_mapped_error_and_rebalances():
    w = World()
    m = w.completing_group()
    s1 = w.sync(m[1], 1)
    s0 = w.sync(m[0], 1, assignments={m[0]: b"x"})
    w.complete_appends(ErrorCode.request_timed_out)
    assert w.syncs[s0].error is ErrorCode.coordinator_not_available
    assert w.syncs[s1].error is ErrorCode.coordinator_not_available
    assert w.state() is ClassicState.PREPARING_REBALANCE


def test_sync_record_completing_after_a_new_rebalance_does_nothing():
    w = World()
    m = w.completing_group()
    s0 = w.sync(m[0], 1, assignments={})
    w.join(m[1], protocols=(("range", b"new"),))  # rebalance before the append completes
    assert w.syncs[s0].error is ErrorCode.rebalance_in_progress
    w.complete_appends()
    assert w.state() is ClassicState.PREPARING_REBALANCE


# =========================================================================== Heartbeat per state


def test_heartbeat_unknown_group_is_unknown_member():
    w = World()
    assert w.heartbeat("m", 0) is ErrorCode.unknown_member_id


def test_heartbeat_in_empty_is_unknown_member():
    w = World()
    w.join()
    assert w.heartbeat("c-1", 0) is ErrorCode.unknown_member_id


def test_heartbeat_in_preparing_rebalance_is_rebalance_in_progress_and_keeps_the_session():
    w = World()
    m, _ = w.preparing_group()
    assert w.heartbeat(m[1], 1) is ErrorCode.rebalance_in_progress
    assert w.timers[heartbeat_timer_key(G, m[1])] == w.now + SESSION_MS


def test_heartbeat_in_completing_rebalance_and_stable_is_fine():
    w = World()
    m = w.completing_group()
    assert w.heartbeat(m[0], 1) is ErrorCode.none
    w2 = World()
    m2 = w2.stable_group(1)
    assert w2.heartbeat(m2[0], 1) is ErrorCode.none


def test_heartbeat_errors():
    w = World()
    m = w.stable_group(2)
    assert w.heartbeat(m[0], 0) is ErrorCode.illegal_generation
    assert w.heartbeat("stranger", 1) is ErrorCode.unknown_member_id
    assert w.heartbeat(m[0], 1, instance="nope") is ErrorCode.unknown_member_id


# =========================================================================== LeaveGroup per state


def test_leave_unknown_group_is_unknown_member():
    w = World()
    assert w.leave(("m", None)).error is ErrorCode.unknown_member_id


def test_leave_in_empty_removes_a_pending_member():
    w = World()
    t = w.join()
    pending = w.joins[t].member_id
    result = w.leave((pending, None))
    assert result.members[0].error is ErrorCode.none
    assert not w.group().pending_join_members
    assert heartbeat_timer_key(G, pending) not in w.timers


def test_leave_in_preparing_rebalance_completes_the_join_when_the_rest_have_joined():
    w = World()
    m, t0 = w.preparing_group()
    w.join(m[1])
    w.leave((m[2], None))
    assert w.state() is ClassicState.COMPLETING_REBALANCE
    assert w.joins[t0].members == tuple(JoinMember(x, None, b"r") for x in m[:2])


def test_leave_of_a_parked_member_answers_its_join_with_unknown_member():
    w = World()
    m, t0 = w.preparing_group()
    w.leave((m[0], None))
    assert w.joins[t0].error is ErrorCode.unknown_member_id


def test_leave_in_completing_rebalance_rebalances():
    w = World()
    m = w.completing_group()
    s = w.sync(m[0], 1, assignments={})
    w.leave((m[1], None))
    assert w.syncs[s].error is ErrorCode.rebalance_in_progress
    # the remaining member has not rejoined: the join phase waits for it
    assert w.state() is ClassicState.PREPARING_REBALANCE


def test_leave_static_member_by_instance_id_only():
    w = World()
    a = w.join(instance="ia")
    w.advance(DELAY_MS)
    ma = w.joins[a].member_id
    w.sync(ma, 1, assignments={})
    w.complete_appends()
    result = w.leave(("", "ia"))
    assert result.members[0].error is ErrorCode.none
    assert w.state() is ClassicState.EMPTY


def test_leave_static_member_with_wrong_member_id_is_fenced():
    w = World()
    a = w.join(instance="ia")
    w.advance(DELAY_MS)
    w.sync(w.joins[a].member_id, 1, assignments={})
    w.complete_appends()
    assert w.leave(("other", "ia")).members[0].error is ErrorCode.fenced_instance_id


# =========================================================================== timers per state


def test_pending_member_that_never_joins_expires():
    w = World()
    t = w.join()
    pending = w.joins[t].member_id
    w.advance(SESSION_MS)
    assert pending not in w.group().pending_join_members


def test_pending_member_expiry_in_preparing_rebalance_completes_the_join():
    w = World()
    m, t0 = w.preparing_group()
    w.join(m[1])
    w.join(m[2])  # completes: all joined
    w.sync(m[1], 2)
    w.sync(m[2], 2)
    w.sync(m[0], 2, assignments={})
    w.complete_appends()
    # a pending member blocks the completion of the next join phase until it expires
    t = w.join(client="late")
    w.join(m[0])
    w.join(m[1])
    w.join(m[2])
    assert w.state() is ClassicState.PREPARING_REBALANCE
    w.advance(SESSION_MS)
    assert w.state() is ClassicState.COMPLETING_REBALANCE
    assert w.joins[t].error is ErrorCode.member_id_required


def test_new_member_expires_after_the_new_member_join_timeout():
    w = World(new_member_join_timeout_ms=5_000)
    m = w.stable_group(1, session=60_000, rebalance=120_000)
    d, t = w.new_member(client="d")
    assert w.timers[heartbeat_timer_key(G, d)] == w.now + 5_000
    # m0 has not rejoined yet; the new member's parked join times out
    w.advance(5_000)
    assert w.joins[t].error is ErrorCode.unknown_member_id and w.joins[t].member_id == ""
    assert list(w.group().members) == [m[0]] and w.state() is ClassicState.PREPARING_REBALANCE


def test_awaiting_member_is_not_expired_while_parked():
    w = World()
    m, t0 = w.preparing_group()
    w.advance(SESSION_MS)  # m0 parked in join: satisfied
    assert m[0] in w.group().members


def test_join_timeout_removes_dynamic_members_that_did_not_rejoin_and_elects_a_joined_leader():
    w = World()
    m = w.stable_group(2, session=60_000)
    x, t = w.new_member(client="x")
    w.advance(REBALANCE_MS)
    assert w.state() is ClassicState.COMPLETING_REBALANCE
    assert list(w.group().members) == [x] and w.group().leader_id == x
    assert w.joins[t].leader == x and len(w.joins[t].members) == 1 and m


def test_join_timeout_with_nobody_rejoined_keeps_static_members_and_rearms():
    w = World()
    a = w.join(instance="ia", session=60_000)
    b = w.join(instance="ib", session=60_000)
    w.settle()
    ma, mb = w.joins[a].member_id, w.joins[b].member_id
    w.sync(mb, 1)
    w.sync(ma, 1, assignments={})
    w.complete_appends()
    w.leave((ma, "ia"))
    assert w.state() is ClassicState.PREPARING_REBALANCE and w.group().leader_id == mb
    w.advance(REBALANCE_MS)
    assert w.state() is ClassicState.PREPARING_REBALANCE
    assert list(w.group().members) == [mb]
    assert w.timers[join_timer_key(G)] == w.now + REBALANCE_MS
    t = w.join(mb, instance="ib", session=60_000)
    assert w.joins[t].error is ErrorCode.none and w.state() is ClassicState.COMPLETING_REBALANCE


def test_sync_timeout_removes_members_that_did_not_sync():
    w = World()
    m = w.completing_group(session=60_000)
    w.sync(m[0], 1, assignments={})
    w.complete_appends()
    assert w.state() is ClassicState.STABLE
    w.advance(REBALANCE_MS)
    # m1 never sent SyncGroup: removed, and the group rebalances
    assert m[1] not in w.group().members
    assert w.state() is ClassicState.PREPARING_REBALANCE


def test_sync_timer_cancelled_once_everyone_synced():
    w = World()
    m = w.completing_group()
    w.sync(m[1], 1)
    w.sync(m[0], 1, assignments={})
    assert sync_timer_key(G) not in w.timers


def test_stale_timer_fire_does_nothing():
    w = World()
    m = w.stable_group(1)
    assert w.take(w.c.on_timer(join_timer_key(G), w.now)) == []
    assert w.take(w.c.on_timer(heartbeat_timer_key("other", "x"), w.now)) == []
    early = w.c.on_timer(heartbeat_timer_key(G, m[0]), w.now)  # before its deadline: re-armed
    assert early == [ArmTimer(heartbeat_timer_key(G, m[0]), w.timers[heartbeat_timer_key(G, m[0])])]


# =========================================================================== describe, list, delete


def test_describe_includes_metadata_only_in_stable():
    w = World()
    m = w.completing_group()
    d = w.c.describe(G)
    assert d.state == "CompletingRebalance" and d.protocol_data == "" and d.members[0].metadata == b""
    w.sync(m[0], 1, assignments={m[0]: b"a"})
    w.complete_appends()
    d = w.c.describe(G)
    assert d.state == "Stable" and d.protocol_type == "consumer" and d.protocol_data == "range"
    assert d.members[0].metadata == b"r" and d.members[0].assignment == b"a"
    assert d.members[0].client_host == "/127.0.0.1"
    missing = w.c.describe("nope")
    assert missing.error is ErrorCode.group_id_not_found and missing.state == "Dead"


def test_list_groups_with_state_filter():
    w = World()
    w.stable_group(1)
    w.join(group="h")
    assert [(g.group_id, g.state, g.protocol_type) for g in w.c.list_groups()] == [
        ("g", "Stable", "consumer"), ("h", "Empty", "")]
    assert [g.group_id for g in w.c.list_groups(["empty"])] == ["h"]


def test_delete_rules():
    w = World()
    w.stable_group(1)
    assert w.c.delete(G, w.now)[0] is ErrorCode.non_empty_group
    assert w.c.delete("nope", w.now)[0] is ErrorCode.group_id_not_found
    m = w.group().leader_id
    w.leave((m, None))
    error, effects = w.c.delete(G, w.now)
    assert error is ErrorCode.none
    assert AppendGroupRecord(G, None, None) in effects
    assert w.c.group(G) is None
    assert w.c.to_view(G).kind is GroupKind.NONE


# =========================================================================== durability


def test_image_and_restore_bring_back_a_stable_group_with_sessions():
    w = World()
    m = w.stable_group(2)
    image = w.c.image(G)
    assert image.generation == 1 and image.leader == m[0]
    assert image.members[1] == MemberMetadata(m[1], None, "c1", "/127.0.0.1", REBALANCE_MS, SESSION_MS, b"r",
                                              m[1].encode())
    w2 = World()
    w2.now = 1_000
    effects = w2.take(w2.c.restore(G, image, w2.now))
    assert w2.state() is ClassicState.STABLE
    assert ArmTimer(heartbeat_timer_key(G, m[0]), 1_000 + SESSION_MS) in effects
    assert w2.heartbeat(m[1], 1) is ErrorCode.none
    s = w2.sync(m[1], 1)
    assert w2.syncs[s].assignment == m[1].encode()
    assert w2.c.image(G) == image
    # an unresponsive restored group loses its members to session expiry
    w2.advance(SESSION_MS)
    assert w2.state() is ClassicState.EMPTY and w2.group().generation_id == 2


def test_restore_of_an_empty_group_and_a_tombstone():
    w = World()
    w.take(w.c.restore(G, GroupMetadataValue("consumer", 4, None, None, 77, ()), 0))
    assert w.state() is ClassicState.EMPTY and w.group().generation_id == 4
    assert w.c.to_view(G).empty_since_ms == 77
    w.take(w.c.restore(G, None, 0))
    assert w.c.group(G) is None


def test_restore_of_a_group_over_max_size_rebalances():
    w = World(max_size=1)
    members = tuple(MemberMetadata(f"m{i}", None, "c", "h", 100, SESSION_MS, b"r", b"") for i in range(2))
    w.take(w.c.restore(G, GroupMetadataValue("consumer", 1, "range", "m0", 5, members), 0))
    assert w.state() is ClassicState.PREPARING_REBALANCE


def test_restore_of_version_0_uses_session_timeout_as_rebalance_timeout():
    w = World()
    members = (MemberMetadata("m0", None, "c", "h", -1, SESSION_MS, b"r", b""),)
    w.take(w.c.restore(G, GroupMetadataValue("consumer", 1, "range", "m0", -1, members), 0))
    assert w.group().members["m0"].rebalance_timeout_ms == SESSION_MS
    assert w.group().state_timestamp_ms is None


def test_new_group_record_failure_removes_the_group():
    w = World()
    t = w.join(version=3)
    w.complete_appends(ErrorCode.not_enough_replicas)
    assert w.joins[t].error is ErrorCode.coordinator_not_available
    assert w.c.group(G) is None
    assert not w.timers


def test_to_view_reports_members_and_generation():
    w = World()
    m = w.stable_group(2)
    view = w.c.to_view(G)
    assert view.state is ClassicState.STABLE and view.generation == 1
    assert view.members == {m[0]: None, m[1]: None} and view.empty_since_ms is None


def test_unload_answers_parked_requests_with_not_coordinator():
    w = World()
    m, t0 = w.preparing_group()
    w.take(w.c.unload(G, w.now))
    assert w.joins[t0].error is ErrorCode.not_coordinator
    assert w.c.group(G) is None and not w.timers


# =========================================================================== tables


def test_transition_table_matches_kafka():
    assert VALID_PREVIOUS_STATES[ClassicState.STABLE] == {ClassicState.COMPLETING_REBALANCE}
    assert VALID_PREVIOUS_STATES[ClassicState.EMPTY] == {ClassicState.PREPARING_REBALANCE}
    assert VALID_PREVIOUS_STATES[ClassicState.DEAD] == set(ClassicState)


@pytest.mark.parametrize("error,expected", [
    (ErrorCode.unknown_topic_or_partition, ErrorCode.coordinator_not_available),
    (ErrorCode.kafka_storage_error, ErrorCode.not_coordinator),
    (ErrorCode.record_list_too_large, ErrorCode.unknown_server_error),
    (ErrorCode.invalid_request, ErrorCode.invalid_request),
])
def test_append_error_mapping(error, expected):
    assert append_error_to_response_error(error) is expected


# =========================================================================== the (state, input) matrix

STATES = ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]


def in_state(name):
    """A group in the named state; returns (world, leader, follower, generation). Sessions are
    long, so that only the timers a test fires matter. Dead: the group was deleted."""
    w = World()
    if name == "CompletingRebalance":
        m = w.completing_group(session=60_000)
        return w, m[0], m[1], 1
    m = w.stable_group(2, session=60_000)
    if name == "PreparingRebalance":
        w.join(m[0], session=60_000)
        w.complete_appends()
    elif name in ("Empty", "Dead"):
        w.leave((m[0], None), (m[1], None))
        w.complete_appends()
        if name == "Dead":
            w.take(w.c.delete(G, w.now)[1])
    assert (w.c.group(G).state.value if w.c.group(G) else "Dead") == name
    gen = w.c.group(G).generation_id if w.c.group(G) else 0
    return w, m[0], m[1], gen


@pytest.mark.parametrize("state,expected", list(zip(STATES, [
    ErrorCode.unknown_member_id, ErrorCode.rebalance_in_progress, ErrorCode.none, ErrorCode.none,
    ErrorCode.unknown_member_id])))
def test_matrix_heartbeat(state, expected):
    w, leader, follower, gen = in_state(state)
    assert w.heartbeat(follower, gen) is expected


@pytest.mark.parametrize("state,expected", list(zip(STATES, [
    ErrorCode.unknown_member_id, ErrorCode.rebalance_in_progress, None, ErrorCode.none,
    ErrorCode.unknown_member_id])))
def test_matrix_sync_from_follower(state, expected):
    w, leader, follower, gen = in_state(state)
    s = w.sync(follower, gen)
    assert (w.syncs[s].error if s in w.syncs else None) is expected


@pytest.mark.parametrize("state,expected,next_generation,next_state", [
    ("Empty", ErrorCode.unknown_member_id, None, ClassicState.EMPTY),
    # the last member to rejoin completes the join phase
    ("PreparingRebalance", ErrorCode.none, 2, ClassicState.COMPLETING_REBALANCE),
    ("CompletingRebalance", ErrorCode.none, 1, ClassicState.COMPLETING_REBALANCE),
    ("Stable", ErrorCode.none, 1, ClassicState.STABLE),
    ("Dead", ErrorCode.unknown_member_id, None, None),
])
def test_matrix_join_existing_follower_with_same_metadata(state, expected, next_generation, next_state):
    w, leader, follower, gen = in_state(state)
    t = w.join(follower, session=60_000)
    assert w.joins[t].error is expected
    if next_generation is not None:
        assert w.joins[t].generation_id == next_generation
    if next_state is not None:
        assert w.state() is next_state


@pytest.mark.parametrize("state", STATES)
def test_matrix_join_new_member_gets_member_id_required(state):
    w, *_ = in_state(state)
    t = w.join(client="new")
    assert w.joins[t].error is ErrorCode.member_id_required
    assert w.joins[t].member_id in w.group().pending_join_members


@pytest.mark.parametrize("state,member_error,next_state", [
    ("Empty", ErrorCode.unknown_member_id, ClassicState.EMPTY),
    ("PreparingRebalance", ErrorCode.none, ClassicState.COMPLETING_REBALANCE),  # the leader had rejoined
    ("CompletingRebalance", ErrorCode.none, ClassicState.PREPARING_REBALANCE),
    ("Stable", ErrorCode.none, ClassicState.PREPARING_REBALANCE),
])
def test_matrix_leave_of_the_follower(state, member_error, next_state):
    w, leader, follower, gen = in_state(state)
    result = w.leave((follower, None))
    assert result.error is ErrorCode.none and result.members[0].error is member_error
    assert w.state() is next_state


def test_matrix_leave_dead_group():
    w, leader, follower, gen = in_state("Dead")
    assert w.leave((follower, None)).error is ErrorCode.unknown_member_id


@pytest.mark.parametrize("state,next_state", [
    ("PreparingRebalance", ClassicState.COMPLETING_REBALANCE),  # the follower had not rejoined
    ("CompletingRebalance", ClassicState.PREPARING_REBALANCE),
    ("Stable", ClassicState.PREPARING_REBALANCE),
])
def test_matrix_session_expiry_of_the_follower(state, next_state):
    w, leader, follower, gen = in_state(state)
    w.heartbeat(leader, gen)  # keeps the leader's session fresh
    w.now += 1
    key = heartbeat_timer_key(G, follower)
    w.now = w.timers[key]
    del w.timers[key]
    w.take(w.c.on_timer(key, w.now))
    assert follower not in w.group().members
    assert w.state() is next_state


def test_matrix_session_expiry_in_empty_removes_a_pending_member():
    w, *_ = in_state("Empty")
    t = w.join(client="p")
    pending = w.joins[t].member_id
    w.advance(SESSION_MS)
    assert pending not in w.group().pending_join_members and w.state() is ClassicState.EMPTY


def test_matrix_timers_of_a_dead_group_do_nothing():
    w, leader, follower, gen = in_state("Dead")
    for key in (heartbeat_timer_key(G, follower), join_timer_key(G), sync_timer_key(G)):
        assert w.c.on_timer(key, w.now + 10**9) == []


@pytest.mark.parametrize("state", ["Empty", "CompletingRebalance", "Stable"])
def test_matrix_join_timer_outside_preparing_rebalance_is_stale(state):
    w, *_ = in_state(state)
    assert join_timer_key(G) not in w.timers
    assert w.c.on_timer(join_timer_key(G), w.now + 10**9) == []


def test_matrix_join_timer_in_preparing_rebalance_completes_the_join():
    w, leader, follower, gen = in_state("PreparingRebalance")
    deadline = w.timers[join_timer_key(G)]
    w.now = deadline
    del w.timers[join_timer_key(G)]
    w.take(w.c.on_timer(join_timer_key(G), w.now))
    assert w.state() is ClassicState.COMPLETING_REBALANCE and list(w.group().members) == [leader]


@pytest.mark.parametrize("state", ["Empty", "PreparingRebalance", "Stable"])
def test_matrix_sync_timer_outside_completing_rebalance_is_stale(state):
    w, *_ = in_state(state)
    assert sync_timer_key(G) not in w.timers
    assert w.c.on_timer(sync_timer_key(G), w.now + 10**9) == []


def test_matrix_sync_timer_in_completing_rebalance_removes_members_that_did_not_sync():
    w, leader, follower, gen = in_state("CompletingRebalance")
    s = w.sync(leader, gen, assignments={})  # the leader synced, its record is still being written
    w.now = w.timers[sync_timer_key(G)]
    del w.timers[sync_timer_key(G)]
    w.take(w.c.on_timer(sync_timer_key(G), w.now))
    assert list(w.group().members) == [leader]
    assert w.syncs[s].error is ErrorCode.rebalance_in_progress
    assert w.state() is ClassicState.PREPARING_REBALANCE


# =========================================================================== static members, more


def static_stable(w, *instances, **kw):
    tokens = [w.join(instance=i, client=f"c-{i}", **kw) for i in instances]
    w.settle()
    ids = [w.joins[t].member_id for t in tokens]
    for m, i in list(zip(ids, instances))[1:]:
        w.sync(m, 1, instance=i)
    w.sync(ids[0], 1, instance=instances[0], assignments={m: m.encode() for m in ids})
    w.complete_appends()
    assert w.state() is ClassicState.STABLE
    return ids


def test_static_follower_rejoin_before_v9_answers_with_the_current_leader_and_no_members():
    w = World()
    ma, mb = static_stable(w, "ia", "ib")
    t = w.join(instance="ia", client="c-ia", version=8)  # the leader itself, JoinGroup v8
    w.complete_appends()
    r = w.joins[t]
    assert r.error is ErrorCode.none and r.leader == ma and r.members == () and not r.skip_assignment
    assert r.member_id != ma and w.group().leader_id == r.member_id


def test_static_rejoin_in_completing_rebalance_fences_the_parked_sync_and_rebalances():
    w = World()
    ta = w.join(instance="ia", session=60_000)
    tb = w.join(instance="ib", session=60_000)
    w.settle()
    mb = w.joins[tb].member_id
    s = w.sync(mb, 1, instance="ib")
    t = w.join(instance="ib", session=60_000)
    assert w.syncs[s].error is ErrorCode.fenced_instance_id
    assert w.state() is ClassicState.PREPARING_REBALANCE
    assert t not in w.joins and ta in w.joins


def test_static_rejoin_in_preparing_rebalance_fences_the_parked_join():
    w = World()
    ma, mb, mc = static_stable(w, "ia", "ib", "ic", session=60_000)
    w.join(ma, instance="ia", client="c-ia", session=60_000)  # the leader rejoins: PreparingRebalance
    old = w.join(mb, instance="ib", client="c-ib", session=60_000)  # parked: ic has not rejoined
    assert old not in w.joins
    t = w.join(instance="ib", client="c-ib", session=60_000)  # ib restarts: a new member id replaces mb
    assert w.joins[old].error is ErrorCode.fenced_instance_id and w.joins[old].member_id == mb
    assert mb not in w.group().members and t not in w.joins
    w.join(mc, instance="ic", client="c-ic", session=60_000)
    assert w.state() is ClassicState.COMPLETING_REBALANCE
    assert w.joins[t].error is ErrorCode.none and w.joins[t].member_id == w.group().static_members["ib"]


def test_static_member_joining_with_a_stale_member_id_is_fenced():
    w = World()
    ma, mb = static_stable(w, "ia", "ib")
    t = w.join("ib-old", instance="ib")
    assert w.joins[t].error is ErrorCode.fenced_instance_id


def test_static_member_replaced_during_preparing_rebalance_is_fenced_on_heartbeat():
    w = World()
    ma, mb = static_stable(w, "ia", "ib", session=60_000)
    w.join(ma, instance="ia", session=60_000)  # PreparingRebalance, ib not rejoined yet
    w.complete_appends()
    assert w.state() is ClassicState.PREPARING_REBALANCE
    # ib's old incarnation is not parked; a second incarnation arrives with no member id
    t = w.join(instance="ib", session=60_000)
    assert w.joins[t].error is ErrorCode.none  # all joined now
    assert w.heartbeat(mb, 2, instance="ib") is ErrorCode.fenced_instance_id
