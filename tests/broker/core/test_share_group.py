"""The share-group coordinator machine, driven with virtual time: one rule per test."""

from __future__ import annotations

import uuid

import pytest

from quafka.broker.core.share_group import (
    ArmTimer,
    CancelTimer,
    GroupEmptied,
    MemberRemoved,
    ShareGroupCoordinator,
    StaticGroupSettings,
    session_timer_key,
)
from quafka.protocol.errors import ErrorCode

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
TOPICS = {"t1": (T1, 4), "t2": (T2, 2)}
SETTINGS = StaticGroupSettings(session_timeout_ms=45000, heartbeat_interval_ms=5000, assignment_interval_ms=0)


def coordinator(max_group_size=200, settings=SETTINGS, topics=TOPICS):
    return ShareGroupCoordinator(max_group_size=max_group_size, settings=lambda g: settings, topics=topics)


def join(c, member, topics=("t1",), group="g", now_ms=0, **kw):
    return c.heartbeat(group, member, 0, subscribed_topic_names=list(topics), now_ms=now_ms, **kw)


def beat(c, member, epoch, group="g", now_ms=0, topics=None):
    return c.heartbeat(group, member, epoch, subscribed_topic_names=topics, now_ms=now_ms)


def total(assignment):
    return sum(len(ps) for ps in assignment.values())


# --------------------------------------------------------------------------- joining


def test_a_join_creates_the_group_and_returns_the_whole_assignment_at_epoch_one():
    c = coordinator()
    result, effects = join(c, "m1", client_id="cid", client_host="/10.0.0.1")
    assert result.error == ErrorCode.none
    assert (result.member_id, result.member_epoch, result.heartbeat_interval_ms) == ("m1", 1, 5000)
    assert result.assignment == {T1: [0, 1, 2, 3]}
    assert effects == [ArmTimer(session_timer_key("g", "m1"), 45000)]
    assert c.is_member("g", "m1") and not c.is_member("g", "m2")


def test_the_assignment_is_not_repeated_when_unchanged():
    c = coordinator()
    join(c, "m1")
    result, _ = beat(c, "m1", 1, now_ms=5000)
    assert result.error == ErrorCode.none and result.member_epoch == 1 and result.assignment is None


def test_a_second_member_bumps_the_group_epoch_and_the_first_gets_its_new_assignment_at_its_next_heartbeat():
    c = coordinator()
    join(c, "m1")
    second, _ = join(c, "m2", now_ms=10)
    assert second.member_epoch == 2 and total(second.assignment) == 2
    first, _ = beat(c, "m1", 1, now_ms=20)
    assert first.member_epoch == 2 and total(first.assignment) == 2
    assert set(first.assignment[T1]) | set(second.assignment[T1]) == {0, 1, 2, 3}
    assert c.group("g").group_epoch == 2 and c.group("g").assignment_epoch == 2


def test_more_members_than_partitions_share_partitions():
    c = coordinator()
    results = [join(c, f"m{i}", topics=("t2",), now_ms=i)[0] for i in range(3)]
    for i in range(3):
        results[i], _ = beat(c, f"m{i}", results[i].member_epoch, now_ms=10 + i)
    held = [p for i in range(3) for p in c.assignment("g", f"m{i}").get(T2, ())]
    assert sorted(set(held)) == [0, 1] and len(held) == 4  # ceil(3 / 2) = 2 members per partition


def test_a_join_without_subscribed_topics_is_an_invalid_request():
    c = coordinator()
    for topics in (None, []):
        result, effects = c.heartbeat("g", "m1", 0, subscribed_topic_names=topics, now_ms=0)
        assert result.error == ErrorCode.invalid_request
        assert result.message == "SubscribedTopicNames must be set in first request."
        assert effects == []
    assert c.group("g") is None


@pytest.mark.parametrize("group, member, rack, message", [
    ("g", "", None, "MemberId can't be empty."),
    ("g", "x" * 37, None, "MemberId can't be longer than 36 characters."),
    ("", "m1", None, "GroupId can't be empty."),
    ("g", "m1", "", "RackId can't be empty."),
])
def test_malformed_heartbeats_are_invalid_requests(group, member, rack, message):
    c = coordinator()
    result, _ = c.heartbeat(group, member, 0, rack_id=rack, subscribed_topic_names=["t1"], now_ms=0)
    assert (result.error, result.message) == (ErrorCode.invalid_request, message)


def test_a_member_id_of_36_characters_is_accepted():
    result, _ = join(coordinator(), "x" * 36)
    assert result.error == ErrorCode.none


def test_an_epoch_below_minus_one_is_an_invalid_request():
    c = coordinator()
    join(c, "m1")
    result, _ = beat(c, "m1", -2)
    assert (result.error, result.message) == (ErrorCode.invalid_request, "MemberEpoch is invalid.")


def test_a_join_beyond_the_maximum_group_size_is_refused_but_existing_members_carry_on():
    c = coordinator(max_group_size=2)
    join(c, "m1")
    join(c, "m2")
    result, effects = join(c, "m3")
    assert result.error == ErrorCode.group_max_size_reached
    assert "maximum capacity of 2 members" in result.message and effects == []
    assert beat(c, "m1", 1)[0].error == ErrorCode.none
    assert join(c, "m2")[0].error == ErrorCode.none  # a member already in may rejoin


def test_rack_client_id_and_client_host_are_recorded():
    c = coordinator()
    join(c, "m1", rack_id="r1", client_id="app", client_host="/127.0.0.1")
    (described,) = c.describe(["g"])
    member = described.members[0]
    assert (member.rack_id, member.client_id, member.client_host) == ("r1", "app", "/127.0.0.1")


# --------------------------------------------------------------------------- epochs


def test_a_heartbeat_from_an_unknown_member_gets_unknown_member_id():
    c = coordinator()
    join(c, "m1")
    result, _ = beat(c, "stranger", 1)
    assert result.error == ErrorCode.unknown_member_id
    assert result.message == "Member stranger is not a member of group g."


def test_a_heartbeat_to_an_unknown_group_gets_group_id_not_found():
    result, _ = beat(coordinator(), "m1", 3)
    assert (result.error, result.message) == (ErrorCode.group_id_not_found, "Group g not found.")


def test_an_epoch_ahead_of_the_member_s_is_fenced():
    c = coordinator()
    join(c, "m1")
    result, _ = beat(c, "m1", 5)
    assert result.error == ErrorCode.fenced_member_epoch and "greater member epoch (5)" in result.message


def test_an_epoch_behind_the_member_s_is_fenced_unless_it_is_the_previous_one():
    c = coordinator()
    join(c, "m1")
    join(c, "m2")
    assert beat(c, "m1", 1)[0].member_epoch == 2  # m1 moves 1 -> 2
    lost, _ = beat(c, "m1", 1)  # the response that moved it on was lost
    assert lost.error == ErrorCode.none and lost.member_epoch == 2 and lost.assignment is not None
    join(c, "m3")
    beat(c, "m1", 2)  # m1 moves 2 -> 3
    stale, _ = beat(c, "m1", 1)
    assert stale.error == ErrorCode.fenced_member_epoch and "previous member epoch (2)" in stale.message


def test_a_member_may_rejoin_at_epoch_zero_with_the_same_id_and_gets_its_assignment_again():
    c = coordinator()
    join(c, "m1")
    again, _ = join(c, "m1", now_ms=100)
    assert again.error == ErrorCode.none and again.member_epoch == 1
    assert again.assignment == {T1: [0, 1, 2, 3]}
    assert c.group("g").group_epoch == 1  # same subscription: nothing to reassign


def test_a_member_fenced_by_its_session_timeout_may_rejoin_at_epoch_zero():
    c = coordinator()
    join(c, "m1")
    c.on_session_timeout("g", "m1", 45000)
    assert beat(c, "m1", 1, now_ms=45001)[0].error == ErrorCode.unknown_member_id
    result, _ = join(c, "m1", now_ms=45002)
    assert result.error == ErrorCode.none and result.member_epoch == 3 and total(result.assignment) == 4


# --------------------------------------------------------------------------- subscriptions and metadata


def test_a_subscription_change_bumps_the_group_epoch_and_reassigns():
    c = coordinator()
    join(c, "m1")
    result, _ = beat(c, "m1", 1, topics=["t1", "t2"])
    assert result.member_epoch == 2 and result.assignment == {T1: [0, 1, 2, 3], T2: [0, 1]}


def test_a_null_subscription_means_unchanged():
    c = coordinator()
    join(c, "m1", topics=("t1", "t2"))
    result, _ = beat(c, "m1", 1, topics=None)
    assert result.member_epoch == 1 and c.group("g").members["m1"].subscribed_topic_names == ("t1", "t2")


def test_a_subscription_to_a_topic_that_does_not_exist_yet_is_assigned_when_it_is_created():
    c = coordinator(topics={})
    first, _ = join(c, "m1", topics=("later",))
    assert first.error == ErrorCode.none and first.assignment == {}
    t = uuid.UUID(int=9)
    c.on_topics_changed({"later": (t, 2)}, now_ms=10)
    assert c.group("g").group_epoch == 2
    result, _ = beat(c, "m1", 1, now_ms=20)
    assert result.member_epoch == 2 and result.assignment == {t: [0, 1]}


def test_added_partitions_bump_the_group_epoch_and_are_assigned():
    c = coordinator()
    join(c, "m1")
    c.on_topics_changed({**TOPICS, "t1": (T1, 6)}, now_ms=10)
    result, _ = beat(c, "m1", 1, now_ms=20)
    assert result.member_epoch == 2 and result.assignment == {T1: [0, 1, 2, 3, 4, 5]}


def test_a_deleted_topic_is_taken_out_of_the_assignment():
    c = coordinator()
    join(c, "m1", topics=("t1", "t2"))
    c.on_topics_changed({"t1": TOPICS["t1"]}, now_ms=10)
    result, _ = beat(c, "m1", 1, now_ms=20)
    assert result.assignment == {T1: [0, 1, 2, 3]}


def test_metadata_of_unsubscribed_topics_does_not_bump_the_group_epoch():
    c = coordinator()
    join(c, "m1")
    c.on_topics_changed({**TOPICS, "other": (uuid.UUID(int=7), 3)}, now_ms=10)
    assert c.group("g").group_epoch == 1


def test_the_assignment_interval_defers_a_new_target_until_it_has_passed():
    c = coordinator(settings=StaticGroupSettings(assignment_interval_ms=1000))
    join(c, "m1", now_ms=0)
    second, _ = join(c, "m2", now_ms=100)
    assert second.member_epoch == 1 and second.assignment == {}  # the old target, where m2 has nothing
    assert c.group("g").group_epoch == 2 and c.group("g").assignment_epoch == 1
    assert beat(c, "m2", 1, now_ms=500)[0].assignment is None
    later, _ = beat(c, "m2", 1, now_ms=1000)
    assert later.member_epoch == 2 and total(later.assignment) == 2


# --------------------------------------------------------------------------- leaving and timeouts


def test_a_member_leaves_with_epoch_minus_one():
    c = coordinator()
    join(c, "m1")
    join(c, "m2")
    result, effects = beat(c, "m2", -1, now_ms=10)
    assert (result.error, result.member_id, result.member_epoch) == (ErrorCode.none, "m2", -1)
    assert effects == [CancelTimer(session_timer_key("g", "m2")), MemberRemoved("g", "m2", "left")]
    assert c.group("g").group_epoch == 3
    first, _ = beat(c, "m1", 1, now_ms=20)
    assert first.member_epoch == 3 and total(first.assignment) == 4


def test_leaving_an_unknown_group_or_as_an_unknown_member_is_an_error():
    c = coordinator()
    assert beat(c, "m1", -1)[0].error == ErrorCode.group_id_not_found
    join(c, "m1")
    assert beat(c, "m2", -1)[0].error == ErrorCode.unknown_member_id


def test_when_the_last_member_leaves_the_group_is_empty_and_its_epochs_match():
    c = coordinator()
    join(c, "m1")
    _, effects = beat(c, "m1", -1)
    assert effects[-1] == GroupEmptied("g")
    group = c.group("g")
    assert group.state.value == "Empty" and group.group_epoch == group.assignment_epoch == 2


def test_each_heartbeat_rearms_the_session_timer():
    c = coordinator()
    join(c, "m1", now_ms=0)
    _, effects = beat(c, "m1", 1, now_ms=30000)
    assert effects == [ArmTimer(session_timer_key("g", "m1"), 75000)]
    assert c.on_session_timeout("g", "m1", 45000) == [ArmTimer(session_timer_key("g", "m1"), 75000)]
    assert c.is_member("g", "m1")


def test_an_expired_session_removes_the_member_and_reassigns_its_partitions():
    c = coordinator()
    join(c, "m1")
    join(c, "m2")
    beat(c, "m1", 1, now_ms=40000)
    effects = c.on_session_timeout("g", "m2", 45000)
    assert MemberRemoved("g", "m2", "session timeout") in effects and not c.is_member("g", "m2")
    result, _ = beat(c, "m1", 2, now_ms=45001)
    assert result.member_epoch == 3 and total(result.assignment) == 4


def test_a_session_timeout_for_a_member_that_already_left_does_nothing():
    c = coordinator()
    join(c, "m1")
    beat(c, "m1", -1)
    assert c.on_session_timeout("g", "m1", 45000) == []


def test_the_group_s_session_timeout_and_heartbeat_interval_come_from_its_settings():
    settings = {"a": StaticGroupSettings(50000, 6000, 0), "b": StaticGroupSettings(45000, 5000, 0)}
    c = ShareGroupCoordinator(settings=lambda g: settings[g], topics=TOPICS)
    result, effects = join(c, "m1", group="a", now_ms=1)
    assert result.heartbeat_interval_ms == 6000 and effects == [ArmTimer(session_timer_key("a", "m1"), 50001)]


# --------------------------------------------------------------------------- describe, list, delete


def test_describe_lists_state_epochs_assignor_and_members_with_topic_names():
    c = coordinator()
    join(c, "m2", topics=("t2", "t1"), client_id="c2", client_host="/h2")
    join(c, "m1", topics=("t1",), client_id="c1", client_host="/h1")
    beat(c, "m2", 1)
    (group,) = c.describe(["g"])
    assert (group.error, group.state, group.group_epoch, group.assignment_epoch, group.assignor_name) == (
        ErrorCode.none, "Stable", 2, 2, "simple")
    assert [m.member_id for m in group.members] == ["m1", "m2"]
    m2 = group.members[1]
    assert m2.subscribed_topic_names == ("t1", "t2") and m2.member_epoch == 2
    assert [(tid, name) for tid, name, _ps in m2.assignment] == [(T1, "t1"), (T2, "t2")]


def test_describe_of_an_unknown_or_empty_group_id_is_an_error_per_group():
    c = coordinator()
    join(c, "m1")
    missing, empty, found = c.describe(["nope", "", "g"])
    assert (missing.error, missing.message) == (ErrorCode.group_id_not_found, "Group nope not found.")
    assert empty.error == ErrorCode.invalid_group_id
    assert found.error == ErrorCode.none


def test_list_groups_honours_state_and_type_filters_case_insensitively():
    c = coordinator()
    join(c, "m1", group="busy")
    join(c, "m1", group="idle")
    beat(c, "m1", -1, group="idle")
    assert c.list_groups() == [("busy", "Stable"), ("idle", "Empty")]
    assert c.list_groups(states_filter=["EMPTY"]) == [("idle", "Empty")]
    assert c.list_groups(types_filter=["Share"]) == [("busy", "Stable"), ("idle", "Empty")]
    assert c.list_groups(types_filter=["consumer", "classic"]) == []


def test_only_an_empty_group_can_be_deleted():
    c = coordinator()
    join(c, "m1")
    assert c.delete_group("g")[0] == ErrorCode.non_empty_group
    beat(c, "m1", -1)
    assert c.delete_group("g")[0] == ErrorCode.none and c.group("g") is None
    assert c.delete_group("g")[0] == ErrorCode.group_id_not_found


# --------------------------------------------------------------------------- restore (start-up)


def _replayed(c, group_id="g"):
    """The group as a restart gets it back: rendered to its records' image and restored."""
    from quafka.broker.core.group_records import image_of, restore_group

    group, _meta = restore_group(group_id, image_of(c.group(group_id), None))
    return group


def test_restore_keeps_the_epoch_when_the_subscribed_topics_are_as_stored():
    c = coordinator()
    join(c, "m1")
    stored = _replayed(c)
    assert stored.metadata_hash != 0
    again = coordinator()
    effects = again.restore(stored, now_ms=100)
    assert again.group("g").group_epoch == 1
    assert effects == [ArmTimer(session_timer_key("g", "m1"), 100 + 45000)]


def test_restore_bumps_the_epoch_when_a_subscribed_topic_changed_before_the_crash():
    """A topic deleted and re-created (a new id) whose epoch bump was not stored before a crash:
    the stored MetadataHash no longer matches, so restore moves the epoch and the member's next
    heartbeat gets the new topic's partitions (before, the group was never reassigned)."""
    c = coordinator()
    join(c, "m1")
    stored = _replayed(c)
    T3 = uuid.UUID(int=3)
    again = coordinator(topics={"t1": (T3, 4), "t2": (T2, 2)})
    again.restore(stored, now_ms=100)
    assert again.group("g").group_epoch == 2
    result, _ = beat(again, "m1", 1, now_ms=200)
    assert result.error == ErrorCode.none and result.member_epoch == 2 and result.assignment == {T3: [0, 1, 2, 3]}


def test_unload_cancels_the_members_session_timers():
    c = coordinator()
    join(c, "m1")
    join(c, "m2")
    assert c.unload("g") == [CancelTimer(session_timer_key("g", "m1")), CancelTimer(session_timer_key("g", "m2"))]
    assert c.group("g") is None and c.unload("g") == []
