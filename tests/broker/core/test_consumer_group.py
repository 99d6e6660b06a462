"""The KIP-848 consumer-group machine: reconciliation (CurrentAssignmentBuilder), the assignors,
heartbeats, epochs and fencing, timers, static members, describe/list/delete, records."""

from uuid import UUID

import pytest

from quafka.broker.core.consumer_group import (
    ArmTimer,
    CancelTimer,
    ConsumerGroupCoordinator,
    GroupEmptied,
    MemberRemoved,
    rebalance_timer_key,
    session_timer_key,
)
from quafka.broker.core.consumer_group_assignors import MemberSpec, assign
from quafka.broker.core.consumer_group_images import ConsumerGroupImages, diff, image_of, restore_group
from quafka.broker.core.consumer_group_reconcile import (
    AssignmentState,
    FencedInUnknownState,
    MemberState,
    reconcile,
)
from quafka.protocol.consumer_group_records import decode_consumer_group_record, encode_consumer_group_record
from quafka.protocol.errors import ErrorCode

T = UUID(int=1)
U = UUID(int=2)
TOPICS = {"t": (T, 6), "u": (U, 4)}
S, REV, UNREL = MemberState.STABLE, MemberState.UNREVOKED_PARTITIONS, MemberState.UNRELEASED_PARTITIONS


def fs(*ps):
    return frozenset(ps)


# --------------------------------------------------------------------------- reconciliation


def rec(member, target, *, epoch=10, owned=None, owners=None, subscribed=(T,), changed=False):
    owners = owners or {}
    return reconcile(member, target_epoch=epoch, target=target, subscribed_topic_ids=set(subscribed),
                     subscription_changed=changed, owned=owned, partition_epoch=lambda t, p: owners.get((t, p), -1))


def test_stable_reconciled_is_unchanged():
    m = AssignmentState(S, 10, 9, {T: fs(0, 1)})
    assert rec(m, {T: fs(0, 1)}, owned={T: fs(0, 1)}) is m


def test_stable_new_epoch_only_additions_free():
    m = AssignmentState(S, 9, 8, {T: fs(0)})
    out = rec(m, {T: fs(0, 1)}, owned={T: fs(0)})
    assert out == AssignmentState(S, 10, 9, {T: fs(0, 1)}, {})


def test_stable_new_epoch_addition_still_owned_elsewhere_is_unreleased():
    m = AssignmentState(S, 9, 8, {T: fs(0)})
    out = rec(m, {T: fs(0, 1)}, owned={T: fs(0)}, owners={(T, 1): 9})
    assert out == AssignmentState(UNREL, 10, 9, {T: fs(0)}, {})


def test_stable_new_epoch_revocation_first():
    m = AssignmentState(S, 9, 8, {T: fs(0, 1, 2)})
    out = rec(m, {T: fs(0, 3)}, owned={T: fs(0, 1, 2)})
    # stays at its epoch (Kafka's updateMemberEpoch(memberEpoch) makes previous = current), gets nothing new
    assert out == AssignmentState(REV, 9, 9, {T: fs(0)}, {T: fs(1, 2)})


def test_stable_new_epoch_revocation_already_done_moves_on():
    m = AssignmentState(S, 9, 8, {T: fs(0, 1)})
    out = rec(m, {T: fs(0, 3)}, owned={T: fs(0)})
    assert out == AssignmentState(S, 10, 9, {T: fs(0, 3)}, {})


def test_stable_subscription_changed_same_epoch_revokes_dropped_topic():
    m = AssignmentState(S, 10, 9, {T: fs(0), U: fs(1)})
    out = rec(m, {T: fs(0), U: fs(1)}, owned={T: fs(0), U: fs(1)}, changed=True)
    assert out == AssignmentState(REV, 10, 9, {T: fs(0)}, {U: fs(1)})
    out = rec(m, {T: fs(0), U: fs(1)}, owned={T: fs(0)}, changed=True)  # already dropped by the client
    assert out == AssignmentState(S, 10, 9, {T: fs(0)}, {})


def test_unrevoked_waits_while_owning_or_unknown():
    m = AssignmentState(REV, 9, 9, {T: fs(0)}, {T: fs(1)})
    assert rec(m, {T: fs(0, 3)}, owned={T: fs(0, 1)}) is m
    assert rec(m, {T: fs(0, 3)}, owned=None) is m


def test_unrevoked_revoked_moves_to_target():
    m = AssignmentState(REV, 9, 9, {T: fs(0)}, {T: fs(1)})
    assert rec(m, {T: fs(0, 3)}, owned={T: fs(0)}) == AssignmentState(S, 10, 9, {T: fs(0, 3)}, {})


def test_unrevoked_subscription_change_adds_to_pending():
    m = AssignmentState(REV, 9, 9, {T: fs(0), U: fs(2)}, {T: fs(1)})
    out = rec(m, {T: fs(0, 3)}, owned={T: fs(0, 1), U: fs(2)}, changed=True)
    assert out == AssignmentState(REV, 9, 9, {T: fs(0)}, {T: fs(1), U: fs(2)})


def test_unreleased_gets_partition_once_released():
    m = AssignmentState(UNREL, 10, 9, {T: fs(0)})
    # still waiting (Kafka's updateMemberEpoch at the same epoch makes previous = current)
    assert rec(m, {T: fs(0, 1)}, owned={T: fs(0)}, owners={(T, 1): 9}) == AssignmentState(UNREL, 10, 10, {T: fs(0)})
    assert rec(m, {T: fs(0, 1)}, owned={T: fs(0)}) == AssignmentState(S, 10, 10, {T: fs(0, 1)}, {})


def test_unknown_state_fences_unless_owning_nothing():
    m = AssignmentState(MemberState.UNKNOWN, 9, 8, {T: fs(0)})
    with pytest.raises(FencedInUnknownState):
        rec(m, {T: fs(0)}, owned={T: fs(0)})
    with pytest.raises(FencedInUnknownState):
        rec(m, {T: fs(0)}, owned=None)
    assert rec(m, {T: fs(0)}, owned={}).state == S


def test_own_pending_revocation_is_not_unreleased():
    # a partition this member is itself revoking and that the target gives back is not "unreleased"
    m = AssignmentState(REV, 9, 9, {}, {T: fs(1)})
    assert rec(m, {T: fs(1)}, owned={}, owners={(T, 1): 9}) == AssignmentState(S, 10, 9, {T: fs(1)}, {})


# --------------------------------------------------------------------------- assignors


def sizes(target):
    return sorted(sum(len(ps) for ps in a.values()) for a in target.values())


def test_uniform_balanced_homogeneous():
    members = {m: MemberSpec(("t",)) for m in "abc"}
    target = assign("uniform", members, {"t": (T, 7)})
    assert sizes(target) == [2, 2, 3]
    assert set().union(*(a[T] for a in target.values())) == set(range(7))


def test_uniform_sticky():
    before = assign("uniform", {m: MemberSpec(("t",)) for m in "abc"}, {"t": (T, 6)})
    members = {m: MemberSpec(("t",), None, before[m]) for m in "abc"}
    members["d"] = MemberSpec(("t",))
    after = assign("uniform", members, {"t": (T, 6)})
    assert sizes(after) == [1, 1, 2, 2]
    kept = sum(len(after[m].get(T, set()) & before[m][T]) for m in "abc")
    assert kept == 5  # only the one partition d needs moved
    again = assign("uniform", {m: MemberSpec(("t",), None, after[m]) for m in "abcd"}, {"t": (T, 6)})
    assert again == after


def test_uniform_heterogeneous_covers_and_balances():
    members = {"a": MemberSpec(("t",)), "b": MemberSpec(("u",)), "c": MemberSpec(("t", "u"))}
    target = assign("uniform", members, TOPICS)
    assert set(target["a"]) <= {T} and set(target["b"]) <= {U}
    assert sorted(p for m in target.values() for p in m.get(T, ())) == list(range(6))
    assert sorted(p for m in target.values() for p in m.get(U, ())) == list(range(4))
    assert sizes(target) == [3, 3, 4]


def test_range_contiguous_copartitioned_static_first():
    members = {"m1": MemberSpec(("t", "v")), "m0": MemberSpec(("t", "v"), "i9"), "m2": MemberSpec(("t", "v"), "i1")}
    V = UUID(int=3)
    target = assign("range", members, {"t": (T, 5), "v": (V, 5)})
    # static members first by instance id (m2 "i1", m0 "i9"), then m1
    assert target["m2"] == {T: fs(0, 1), V: fs(0, 1)}
    assert target["m0"] == {T: fs(2, 3), V: fs(2, 3)}
    assert target["m1"] == {T: fs(4), V: fs(4)}


def test_unknown_topics_ignored_and_unknown_assignor():
    assert assign("uniform", {"a": MemberSpec(("nope",))}, TOPICS) == {"a": {}}
    with pytest.raises(ValueError):
        assign("sticky", {}, TOPICS)


# --------------------------------------------------------------------------- the coordinator


class Cluster:
    """Clients that behave like Kafka's consumer: they own what the last assignment gave them and
    report it; the invariant (no partition owned twice) is checked after every heartbeat."""

    def __init__(self, coordinator=None, **kwargs):
        self.c = coordinator or ConsumerGroupCoordinator(topics=TOPICS, **kwargs)
        self.epoch = {}
        self.owned = {}
        self.now = 0

    def join(self, m, topics=("t",), **kw):
        return self.hb(m, 0, subscribed_topic_names=list(topics), rebalance_timeout_ms=kw.pop("rebalance_timeout_ms",
                                                                                                  30000), **kw)

    def hb(self, m, epoch=None, **kw):
        epoch = self.epoch.get(m, 0) if epoch is None else epoch
        owned = {t: sorted(ps) for t, ps in self.owned.get(m, {}).items()}
        kw.setdefault("topic_partitions", {} if epoch == 0 else owned)
        result, effects = self.c.heartbeat("g", m, epoch, now_ms=self.now, **kw)
        if result.error == ErrorCode.none:
            self.epoch[m] = result.member_epoch
            if result.assignment is not None:
                self.owned[m] = {t: set(ps) for t, ps in result.assignment.items()}
        self.check()
        return result, effects

    def check(self):
        seen = {}
        group = self.c.group("g")
        for m in (group.members if group else {}):
            mem = group.members[m]
            for parts in (mem.assigned, mem.pending_revocation):
                for t, ps in parts.items():
                    for p in ps:
                        assert (t, p) not in seen, f"{(t, p)} owned by {seen[(t, p)]} and {m}"
                        seen[(t, p)] = m
        clients = {}
        for m, parts in self.owned.items():
            for t, ps in parts.items():
                for p in ps:
                    assert (t, p) not in clients, f"clients {clients[(t, p)]} and {m} both hold {(t, p)}"
                    clients[(t, p)] = m

    def settle(self, rounds=6):
        for _ in range(rounds):
            for m in sorted(self.epoch):
                if m in self.c.group("g").members:
                    self.hb(m)

    def counts(self):
        return {m: sum(len(ps) for ps in self.owned.get(m, {}).values()) for m in self.c.group("g").members}


def test_three_members_six_partitions_two_each():
    cl = Cluster()
    for m in "abc":
        r, effects = cl.join(m)
        assert r.error == ErrorCode.none and r.heartbeat_interval_ms == 5000
        assert ArmTimer(session_timer_key("g", m), 45000) in effects
    cl.settle()
    assert cl.counts() == {"a": 2, "b": 2, "c": 2}
    group = cl.c.group("g")
    assert group.state.value == "Stable" and group.group_epoch == group.assignment_epoch == 3
    assert all(m.member_epoch == 3 and m.state == S for m in group.members.values())


def test_fourth_member_revocation_before_assignment():
    cl = Cluster()
    for m in "abc":
        cl.join(m)
    cl.settle()
    before = {m: set(cl.owned[m][T]) for m in "abc"}
    r, _ = cl.join("d")
    assert r.member_epoch == 4 and r.assignment == {}  # everything d is to get is still owned
    group = cl.c.group("g")
    assert group.members["d"].state == UNREL and group.state.value == "Reconciling"
    revoking = [m for m in "abc" if cl.hb(m)[0] and group.members[m].state == REV]
    assert revoking  # the members losing a partition stay at epoch 3 until they revoke it
    assert all(group.members[m].member_epoch == 3 for m in revoking)
    cl.settle()
    assert sorted(cl.counts().values()) == [1, 1, 2, 2]
    assert group.state.value == "Stable"
    moved = sum(len(before[m] - cl.owned[m].get(T, set())) for m in "abc")
    assert moved == 1  # d gets one partition, taken from one member: nothing else moves


def test_rebalance_timer_armed_while_revoking_and_fences():
    cl = Cluster()
    cl.join("a", rebalance_timeout_ms=1000)
    cl.settle()
    cl.now = 100
    cl.join("b")
    r, effects = cl.hb("a")
    assert ArmTimer(rebalance_timer_key("g", "a"), 1100) in effects
    key = rebalance_timer_key("g", "a")
    assert cl.c.on_timer(key, 500) == [ArmTimer(key, 1100)]
    effects = cl.c.on_timer(key, 1100)
    assert MemberRemoved("g", "a", "rebalance timeout") in effects
    assert CancelTimer(session_timer_key("g", "a")) in effects
    cl.owned.pop("a"), cl.epoch.pop("a")  # the fenced client drops its partitions
    # b now gets everything
    cl.settle()
    assert cl.counts() == {"b": 6}


def test_rebalance_timer_cancelled_after_revocation():
    cl = Cluster()
    cl.join("a")
    cl.settle()
    cl.join("b")
    cl.hb("a")
    assert cl.c.group("g").members["a"].state == REV
    _, effects = cl.hb("a")
    assert CancelTimer(rebalance_timer_key("g", "a")) in effects


def test_leave_returns_partitions():
    cl = Cluster()
    for m in "abc":
        cl.join(m)
    cl.settle()
    r, effects = cl.hb("c", -1)
    assert (r.error, r.member_id, r.member_epoch) == (ErrorCode.none, "c", -1)
    assert MemberRemoved("g", "c", "left") in effects and CancelTimer(session_timer_key("g", "c")) in effects
    del cl.owned["c"], cl.epoch["c"]
    assert cl.c.group("g").group_epoch == 4
    cl.settle()
    assert cl.counts() == {"a": 3, "b": 3}
    assert cl.hb("c", -1)[0].error == ErrorCode.unknown_member_id


def test_last_leave_empties_group_and_delete():
    cl = Cluster()
    cl.join("a")
    assert cl.c.delete_group("g")[0] == ErrorCode.non_empty_group
    _, effects = cl.hb("a", -1)
    assert GroupEmptied("g") in effects
    assert cl.c.list_groups() == [("g", "Empty")]
    assert cl.c.delete_group("g") == (ErrorCode.none, None, [])
    assert cl.c.delete_group("g")[0] == ErrorCode.group_id_not_found


def test_session_expiry():
    cl = Cluster()
    cl.join("a")
    cl.join("b")
    key = session_timer_key("g", "a")
    cl.now = 10000
    cl.hb("a")
    assert cl.c.on_timer(key, 45000) == [ArmTimer(key, 55000)]
    effects = cl.c.on_timer(key, 55000)
    assert MemberRemoved("g", "a", "session timeout") in effects
    assert "a" not in cl.c.group("g").members
    assert cl.c.on_timer(key, 60000) == []


def test_static_member_leave_and_rejoin_keeps_assignment():
    cl = Cluster()
    cl.join("a", instance_id="ia")
    cl.join("b", instance_id="ib")
    cl.settle()
    owned_a = cl.owned["a"]
    epoch = cl.c.group("g").group_epoch
    r, effects = cl.hb("a", -2, instance_id="ia")
    assert (r.error, r.member_epoch, effects) == (ErrorCode.none, -2, [])
    group = cl.c.group("g")
    assert group.members["a"].member_epoch == -2 and group.group_epoch == epoch
    cl.settle()
    assert cl.counts()["b"] == 3  # b does not get a's partitions
    cl.owned.pop("a"), cl.epoch.pop("a")
    r, effects = cl.join("a2", instance_id="ia")
    assert r.error == ErrorCode.none and r.member_epoch == epoch
    assert {t: set(ps) for t, ps in r.assignment.items()} == owned_a
    assert "a" not in group.members and MemberRemoved("g", "a", "replaced by static member a2") in effects
    assert group.group_epoch == epoch  # no rebalance


def test_static_member_errors():
    cl = Cluster()
    cl.join("a", instance_id="ia")
    assert cl.join("x", instance_id="ia")[0].error == ErrorCode.unreleased_instance_id
    assert cl.hb("x", 1, instance_id="ia")[0].error == ErrorCode.fenced_instance_id
    assert cl.hb("a", 1, instance_id="nope")[0].error == ErrorCode.unknown_member_id
    assert cl.hb("a", -2)[0].error == ErrorCode.invalid_request  # InstanceId can't be null
    assert cl.hb("a", -2, instance_id="nope")[0].error == ErrorCode.unknown_member_id


def test_static_member_session_expiry_after_leave():
    cl = Cluster()
    cl.join("a", instance_id="ia")
    cl.hb("a", -2, instance_id="ia")
    assert MemberRemoved("g", "a", "session timeout") in cl.c.on_timer(session_timer_key("g", "a"), 45000)


def test_fencing_with_stale_epochs():
    cl = Cluster()
    for m in "abc":
        cl.join(m)
        cl.settle()
    group = cl.c.group("g")
    a = group.members["a"]
    assert (a.member_epoch, a.previous_member_epoch) == (3, 2)
    assert cl.hb("a", 4)[0].error == ErrorCode.fenced_member_epoch  # greater
    assert cl.hb("a", 1)[0].error == ErrorCode.fenced_member_epoch  # smaller, not the previous one
    assert cl.hb("zz", 2)[0].error == ErrorCode.unknown_member_id
    assert cl.c.heartbeat("other", "a", 1, now_ms=0)[0].error == ErrorCode.group_id_not_found
    assert cl.hb("a")[0].error == ErrorCode.none


def test_previous_epoch_accepted_only_with_subset_owned():
    cl = Cluster()
    cl.join("a")
    cl.join("b")
    cl.settle()
    a = cl.c.group("g").members["a"]
    prev = a.previous_member_epoch
    assert prev == a.member_epoch - 1
    assert cl.hb("a", prev, topic_partitions={T: sorted(a.assigned[T])})[0].error == ErrorCode.none
    assert cl.hb("a", prev, topic_partitions=None)[0].error == ErrorCode.fenced_member_epoch
    other = sorted(cl.c.group("g").members["b"].assigned[T])
    assert cl.hb("a", prev, topic_partitions={T: other})[0].error == ErrorCode.fenced_member_epoch


def test_max_size():
    cl = Cluster(max_group_size=2)
    cl.join("a")
    cl.join("b")
    r, _ = cl.join("c")
    assert r.error == ErrorCode.group_max_size_reached
    assert cl.hb("a")[0].error == ErrorCode.none  # members already in are fine


@pytest.mark.parametrize("kwargs, epoch, error", [
    (dict(member_id=""), 0, ErrorCode.invalid_request),
    (dict(group_id=""), 0, ErrorCode.invalid_request),
    (dict(rebalance_timeout_ms=-1), 0, ErrorCode.invalid_request),
    (dict(topic_partitions={T: [0]}), 0, ErrorCode.invalid_request),
    (dict(topic_partitions=None), 0, ErrorCode.invalid_request),
    (dict(subscribed_topic_names=None), 0, ErrorCode.invalid_request),
    (dict(subscribed_topic_names=None, subscribed_topic_regex="t[*"), 0, ErrorCode.invalid_regular_expression),
    (dict(server_assignor="sticky"), 0, ErrorCode.unsupported_assignor),
    (dict(instance_id=""), 0, ErrorCode.invalid_request),
    (dict(rack_id=""), 0, ErrorCode.invalid_request),
    (dict(), -3, ErrorCode.invalid_request),
])
def test_validation(kwargs, epoch, error):
    c = ConsumerGroupCoordinator(topics=TOPICS)
    args = dict(group_id="g", member_id="m", subscribed_topic_names=["t"], rebalance_timeout_ms=1000,
                topic_partitions={})
    args.update(kwargs)
    r, effects = c.heartbeat(args.pop("group_id"), args.pop("member_id"), epoch, now_ms=0, **args)
    assert (r.error, effects) == (error, [])
    assert c.group("g") is None


def test_subscription_change_and_topic_changes():
    cl = Cluster()
    cl.join("a", topics=("t", "u"))
    cl.settle()
    assert cl.counts() == {"a": 10}
    r, _ = cl.hb("a", subscribed_topic_names=["t"])
    assert cl.c.group("g").group_epoch == 2
    cl.settle()
    assert set(cl.owned["a"]) == {T}
    cl.c.on_topics_changed({"t": (T, 8), "u": (U, 4)}, 0)
    assert cl.c.group("g").state.value == "Assigning"
    cl.settle()
    assert cl.counts() == {"a": 8} and cl.c.group("g").group_epoch == 3


def test_range_assignor_chosen_by_members():
    cl = Cluster()
    cl.join("a", server_assignor="range")
    cl.join("b", server_assignor="range")
    cl.settle()
    assert cl.owned["a"] == {T: {0, 1, 2}} and cl.owned["b"] == {T: {3, 4, 5}}
    assert cl.c.describe(["g"])[0].assignor_name == "range"


def test_assignment_sent_only_when_changed_or_full_request():
    cl = Cluster()
    cl.join("a")
    r, _ = cl.hb("a")
    assert r.assignment is None
    r, _ = cl.hb("a", rebalance_timeout_ms=1000, subscribed_topic_names=["t"])
    assert r.assignment == {T: [0, 1, 2, 3, 4, 5]}


def test_describe_and_list():
    cl = Cluster()
    cl.join("a", client_id="cli", client_host="/1.2.3.4", rack_id="r1", instance_id="i")
    cl.join("b")
    d = cl.c.describe(["g", "nope", ""])
    assert d[0].state == "Reconciling" and d[0].group_epoch == 2 and d[0].assignor_name == "uniform"
    a = d[0].members[0]
    assert (a.member_id, a.instance_id, a.rack_id, a.client_id, a.client_host, a.member_type) == \
        ("a", "i", "r1", "cli", "/1.2.3.4", 1)
    assert a.assignment == ((T, "t", (0, 1, 2, 3, 4, 5)),) and len(a.target_assignment[0][2]) == 3
    assert d[1].error == ErrorCode.group_id_not_found and d[2].error == ErrorCode.invalid_group_id
    assert cl.c.list_groups(["reconciling"]) == [("g", "Reconciling")]
    assert cl.c.list_groups(["stable"]) == [] and cl.c.list_groups([], ["classic"]) == []
    cl.settle()
    assert cl.c.list_groups([], ["Consumer"]) == [("g", "Stable")]


def test_records_round_trip_and_restore():
    cl = Cluster()
    for m in "abc":
        cl.join(m, instance_id="i" + m if m == "a" else None)
    cl.settle()
    cl.join("d")
    cl.hb("a")  # some member now revoking
    group = cl.c.group("g")
    image = image_of(group)
    records = diff({}, image)
    replay = ConsumerGroupImages()
    for record in records:
        replay.replay(decode_consumer_group_record(*encode_consumer_group_record(record)))
    assert replay.groups() == {"g": image}
    restored = restore_group("g", image)
    assert image_of(restored) == image
    c2 = ConsumerGroupCoordinator(topics=TOPICS)
    effects = c2.restore(restored, 1000)
    assert ArmTimer(session_timer_key("g", "d"), 46000) in effects
    assert c2.describe(["g"]) == cl.c.describe(["g"])
    # removing a member: tombstones, then the group goes
    cl.hb("d", -1)
    tombstones = [r for r in diff(image, image_of(cl.c.group("g"))) if r.value is None]
    assert {(r.record_type, tuple(r.key)) for r in tombstones} == {(5, ("g", "d")), (7, ("g", "d")), (8, ("g", "d"))}
    gone = diff(image, image_of(None))
    assert all(r.value is None for r in gone) and gone[-1].record_type == 3


def test_offsets_view():
    cl = Cluster()
    assert cl.c.offsets_view("g") is None
    cl.join("a", instance_id="ia")
    view = cl.c.offsets_view("g")
    assert (view.state.value, view.member_epochs, view.instance_ids, view.subscribed_topics) == \
        ("Stable", {"a": 1}, {"a": "ia"}, frozenset({"t"}))


def test_a_regex_subscription_resolves_to_every_matching_topic_and_follows_topic_changes():
    """GroupMetadataManager.refreshRegularExpressions: full matches over every topic name; a topic
    created later that matches joins the subscription (a new group epoch), names and a regex add up."""
    c = ConsumerGroupCoordinator(topics={"orders-eu": (T, 6), "orders-us": (U, 4), "audit": ("A", 2)})
    r, _ = c.heartbeat("g", "m", 0, subscribed_topic_names=[], subscribed_topic_regex="orders-.*",
                       rebalance_timeout_ms=1000, topic_partitions={}, now_ms=0)
    assert r.error == ErrorCode.none
    assert {t: len(ps) for t, ps in r.assignment.items()} == {T: 6, U: 4}
    assert c.offsets_view("g").subscribed_topics == {"orders-eu", "orders-us"}
    [d] = c.describe(["g"])
    assert d.members[0].subscribed_topic_regex == "orders-.*"
    epoch = c.group("g").group_epoch
    c.on_topics_changed({"orders-eu": (T, 6), "orders-us": (U, 4), "audit": ("A", 2), "orders-jp": ("J", 1)}, 10)
    assert c.group("g").group_epoch == epoch + 1  # the new matching topic
    r, _ = c.heartbeat("g", "m", r.member_epoch, now_ms=20)
    assert "J" in r.assignment
    c.on_topics_changed({"orders-eu": (T, 6), "orders-us": (U, 4), "audit": ("A", 2), "orders-jp": ("J", 1),
                         "xorders-1": ("X", 1)}, 30)
    assert c.group("g").group_epoch == epoch + 1  # "orders-.*" must match the whole name
    r, _ = c.heartbeat("g", "m", r.member_epoch, subscribed_topic_names=["audit"], now_ms=40)
    assert c.offsets_view("g").subscribed_topics == {"orders-eu", "orders-us", "orders-jp", "audit"}
    r, _ = c.heartbeat("g", "m", r.member_epoch, subscribed_topic_regex="", now_ms=50)  # "" clears the regex
    assert c.offsets_view("g").subscribed_topics == {"audit"}
