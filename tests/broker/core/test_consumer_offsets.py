"""The committed-offsets machine (broker/core/consumer_offsets.py): Kafka 4.2's offset-commit
validation for every kind and state of group (ClassicGroup.validateOffsetCommit,
OffsetMetadataManager.validateOffsetCommit, ShareGroup.validateOffsetCommit/Fetch/Delete), and
records-first: prepare_* change nothing, replay does."""

from __future__ import annotations

import pytest

from quafka.broker.core.consumer_offsets import (
    ClassicState,
    CommitPartition,
    CommitRequest,
    ConsumerOffsets,
    FetchedOffset,
    GroupKind,
    GroupView,
    NO_GROUP,
    validate_commit,
    validate_fetch,
)
from quafka.protocol.errors import ErrorCode as E
from quafka.protocol.offset_commit_records import OffsetCommitKey, OffsetCommitValue

SHARE = GroupView(GroupKind.SHARE)
EMPTY = GroupView(GroupKind.CLASSIC, ClassicState.EMPTY, generation=3)
STABLE = GroupView(GroupKind.CLASSIC, ClassicState.STABLE, generation=3, members={"m1": None, "m2": "i2"},
                   subscribed_topics=frozenset({"orders"}))
COMPLETING = GroupView(GroupKind.CLASSIC, ClassicState.COMPLETING_REBALANCE, generation=3, members={"m1": None})
PREPARING = GroupView(GroupKind.CLASSIC, ClassicState.PREPARING_REBALANCE, generation=3, members={"m1": None})
DEAD = GroupView(GroupKind.CLASSIC, ClassicState.DEAD)

SIMPLE = dict(generation=-1, member_id="")
MEMBER = dict(generation=3, member_id="m1")
STALE = dict(generation=2, member_id="m1")
STRANGER = dict(generation=3, member_id="nobody")
ANON_CURRENT = dict(generation=3, member_id="")
NEG_WITH_MEMBER = dict(generation=-1, member_id="m1")
STATIC = dict(generation=3, member_id="m2", group_instance_id="i2")
STATIC_FENCED = dict(generation=3, member_id="other", group_instance_id="i2")
STATIC_UNKNOWN = dict(generation=3, member_id="m9", group_instance_id="i9")

# (group, request, api version) -> error; every group kind/state against every request shape
TABLE = [
    (NO_GROUP, SIMPLE, 9, E.none), (NO_GROUP, MEMBER, 9, E.group_id_not_found),
    (NO_GROUP, MEMBER, 8, E.illegal_generation), (NO_GROUP, NEG_WITH_MEMBER, 9, E.none),
    (NO_GROUP, ANON_CURRENT, 2, E.illegal_generation),
    (SHARE, SIMPLE, 9, E.group_id_not_found), (SHARE, MEMBER, 8, E.group_id_not_found),
    (EMPTY, SIMPLE, 9, E.none), (EMPTY, NEG_WITH_MEMBER, 9, E.none), (EMPTY, MEMBER, 9, E.unknown_member_id),
    (EMPTY, ANON_CURRENT, 9, E.unknown_member_id),
    (STABLE, SIMPLE, 9, E.unknown_member_id), (STABLE, MEMBER, 9, E.none), (STABLE, STALE, 9, E.illegal_generation),
    (STABLE, STRANGER, 9, E.unknown_member_id), (STABLE, NEG_WITH_MEMBER, 9, E.illegal_generation),
    (STABLE, ANON_CURRENT, 9, E.unknown_member_id), (STABLE, STATIC, 9, E.none),
    (STABLE, STATIC_FENCED, 9, E.fenced_instance_id), (STABLE, STATIC_UNKNOWN, 9, E.unknown_member_id),
    (PREPARING, MEMBER, 9, E.none), (PREPARING, SIMPLE, 9, E.unknown_member_id),
    (COMPLETING, MEMBER, 9, E.rebalance_in_progress), (COMPLETING, STALE, 9, E.illegal_generation),
    (COMPLETING, SIMPLE, 9, E.unknown_member_id),
    (DEAD, SIMPLE, 9, E.coordinator_not_available), (DEAD, MEMBER, 9, E.coordinator_not_available),
]


@pytest.mark.parametrize("view, shape, version, expected", TABLE)
def test_commit_validation_table(view, shape, version, expected):
    assert validate_commit(view, CommitRequest("g", api_version=version, **shape)) is expected


def _commit(offsets: ConsumerOffsets, view: GroupView, now_ms: int = 1000, **kw):
    request = CommitRequest("g", partitions=(CommitPartition("orders", 0, 10, 4, "m"), CommitPartition("orders", 1, 20)),
                            **{**SIMPLE, **kw})
    plan = offsets.prepare_commit(request, view, now_ms)
    for key, value in plan.records:
        offsets.replay(key, value)
    return plan


def test_a_commit_changes_nothing_until_its_records_are_replayed():
    offsets = ConsumerOffsets()
    plan = offsets.prepare_commit(CommitRequest("g", partitions=(CommitPartition("orders", 0, 10),)), NO_GROUP, 1000)
    assert plan.errors == {("orders", 0): E.none}
    assert not offsets.has_offsets("g") and offsets.fetch("g", NO_GROUP, [("orders", 0)]) == {("orders", 0): FetchedOffset()}
    [(key, value)] = plan.records
    assert key == OffsetCommitKey("g", "orders", 0) and value == OffsetCommitValue(10, "", 1000)
    offsets.replay(key, value)
    assert offsets.group_ids() == ["g"]
    assert offsets.fetch("g", EMPTY) == {("orders", 0): FetchedOffset(10, -1, "")}


def test_refused_commits_write_nothing_and_answer_every_partition():
    offsets = ConsumerOffsets()
    plan = _commit(offsets, STABLE)
    assert plan.records == [] and set(plan.errors.values()) == {E.unknown_member_id} and len(plan.errors) == 2


def test_metadata_too_large_fails_only_its_partition():
    offsets = ConsumerOffsets(max_metadata_chars=4)
    request = CommitRequest("g", partitions=(CommitPartition("t", 0, 1, metadata="12345"), CommitPartition("t", 1, 2, metadata="1234"),
                                             CommitPartition("t", 2, 3, metadata=None)))
    plan = offsets.prepare_commit(request, NO_GROUP, 0)
    assert plan.errors == {("t", 0): E.offset_metadata_too_large, ("t", 1): E.none, ("t", 2): E.none}
    assert [key.partition for key, _ in plan.records] == [1, 2] and plan.records[1][1].metadata == ""


def test_retention_time_writes_an_expire_timestamp():
    offsets = ConsumerOffsets()
    plan = offsets.prepare_commit(CommitRequest("g", api_version=4, retention_time_ms=500,
                                                partitions=(CommitPartition("t", 0, 1),)), NO_GROUP, 1000)
    assert plan.records[0][1].expire_timestamp_ms == 1500


def test_fetch_unknown_group_partition_and_share_group_answer_minus_one():
    offsets = ConsumerOffsets()
    _commit(offsets, NO_GROUP)
    assert offsets.fetch("nobody", NO_GROUP, [("orders", 0)]) == {("orders", 0): FetchedOffset()}
    assert offsets.fetch("g", EMPTY, [("orders", 0), ("orders", 9)]) == {
        ("orders", 0): FetchedOffset(10, 4, "m"), ("orders", 9): FetchedOffset()}
    assert offsets.fetch("g", SHARE, [("orders", 0)]) == {("orders", 0): FetchedOffset()}
    assert offsets.fetch("g", SHARE) == {}
    assert offsets.fetch("g", EMPTY) == {("orders", 0): FetchedOffset(10, 4, "m"), ("orders", 1): FetchedOffset(20, -1, "")}


@pytest.mark.parametrize("view, expected", [(NO_GROUP, E.none), (EMPTY, E.none), (SHARE, E.group_id_not_found),
                                            (STABLE, E.non_empty_group), (DEAD, E.group_id_not_found)])
def test_delete_by_group_kind(view, expected):
    offsets = ConsumerOffsets()
    _commit(offsets, NO_GROUP)
    plan = offsets.prepare_delete("g", view, [("orders", 0), ("orders", 7)])
    assert plan.error is expected
    if expected is E.none:
        assert plan.errors == {("orders", 0): E.none, ("orders", 7): E.none}
        assert plan.records == [(OffsetCommitKey("g", "orders", 0), None)]  # nothing to remove at 7
        for key, value in plan.records:
            offsets.replay(key, value)
        assert set(offsets.committed("g")) == {("orders", 1)}
    else:
        assert plan.records == [] and plan.errors == {}


def test_delete_of_an_unknown_group_and_of_a_subscribed_topic():
    offsets = ConsumerOffsets()
    assert offsets.prepare_delete("nobody", NO_GROUP, [("t", 0)]).error is E.group_id_not_found
    _commit(offsets, NO_GROUP)
    empty_subscribed = GroupView(GroupKind.CLASSIC, ClassicState.EMPTY, subscribed_topics=frozenset({"orders"}))
    plan = offsets.prepare_delete("g", empty_subscribed, [("orders", 0)])
    assert plan.errors == {("orders", 0): E.group_subscribed_to_topic} and plan.records == []


def test_deleting_the_last_offset_removes_the_simple_group():
    offsets = ConsumerOffsets()
    _commit(offsets, NO_GROUP)
    for key, value in offsets.prepare_delete_group("g"):
        offsets.replay(key, value)
    assert offsets.group_ids() == [] and not offsets.has_offsets("g")


def test_expiry_of_simple_groups_from_the_commit_time():
    offsets = ConsumerOffsets()
    _commit(offsets, NO_GROUP, now_ms=1000)
    assert offsets.expired(now_ms=1000 + 9_999, retention_ms=10_000) == []
    due = offsets.expired(now_ms=1000 + 10_000, retention_ms=10_000)
    assert due == [(OffsetCommitKey("g", "orders", 0), None), (OffsetCommitKey("g", "orders", 1), None)]
    assert offsets.has_offsets("g")  # computed, not applied


def test_expiry_keeps_a_live_groups_offsets_and_counts_from_empty_since():
    offsets = ConsumerOffsets()
    _commit(offsets, NO_GROUP, now_ms=1000)
    assert offsets.expired(10**9, 10_000, {"g": STABLE}) == []
    emptied = GroupView(GroupKind.CLASSIC, ClassicState.EMPTY, empty_since_ms=50_000)
    assert offsets.expired(59_999, 10_000, {"g": emptied}) == []
    assert len(offsets.expired(60_000, 10_000, {"g": emptied})) == 2


def test_an_expire_timestamp_wins_over_retention():
    offsets = ConsumerOffsets()
    plan = offsets.prepare_commit(CommitRequest("g", api_version=2, retention_time_ms=100,
                                                partitions=(CommitPartition("t", 0, 1),)), NO_GROUP, 1000)
    offsets.replay(*plan.records[0])
    assert offsets.expired(1099, retention_ms=10**9) == []
    assert offsets.expired(1100, retention_ms=10**9) == [(OffsetCommitKey("g", "t", 0), None)]


def test_replay_is_idempotent_and_last_record_wins():
    offsets = ConsumerOffsets()
    key = OffsetCommitKey("g", "t", 0)
    for value in (OffsetCommitValue(1), OffsetCommitValue(5), None, None, OffsetCommitValue(7)):
        offsets.replay(key, value)
    assert offsets.committed("g") == {("t", 0): OffsetCommitValue(7)}


# ---- KIP-848 consumer groups (ConsumerGroup.validateOffsetCommit / validateOffsetFetch / offsetExpirationCondition)

CONSUMER = GroupView(GroupKind.CONSUMER, members={"m1": None, "m2": "i2"}, member_epochs={"m1": 5, "m2": 7},
                     subscribed_topics=frozenset({"orders"}))
CONSUMER_EMPTY = GroupView(GroupKind.CONSUMER)


@pytest.mark.parametrize("view, request_fields, expected", [
    (CONSUMER_EMPTY, dict(generation=-1, member_id=""), E.none),  # an admin client on an empty group
    (CONSUMER, dict(generation=-1, member_id=""), E.unknown_member_id),  # ... not on a group with members
    (CONSUMER, dict(generation=5, member_id="m1"), E.none),
    (CONSUMER, dict(generation=4, member_id="m1"), E.stale_member_epoch),
    (CONSUMER, dict(generation=6, member_id="m1"), E.stale_member_epoch),
    (CONSUMER, dict(generation=5, member_id="nobody"), E.unknown_member_id),
    (CONSUMER, dict(generation=5, member_id="m1", api_version=8), E.unsupported_version),
    (CONSUMER_EMPTY, dict(generation=1, member_id="gone"), E.unknown_member_id),
])
def test_consumer_group_commit_validation(view, request_fields, expected):
    request = CommitRequest("g", partitions=(CommitPartition("orders", 0, 1),), **request_fields)
    assert validate_commit(view, request) is expected


@pytest.mark.parametrize("member_id, epoch, expected", [
    (None, -1, E.none), ("", -1, E.none), ("m1", 5, E.none), ("m1", 4, E.stale_member_epoch),
    ("nobody", 5, E.unknown_member_id),
])
def test_consumer_group_fetch_validation(member_id, epoch, expected):
    assert validate_fetch(CONSUMER, member_id, epoch) is expected
    assert validate_fetch(STABLE, member_id, epoch) is E.none  # classic groups check nothing on fetch


def test_consumer_group_offsets_expire_from_commit_time_except_subscribed_topics():
    machine = ConsumerOffsets()
    for topic in ("orders", "old"):
        machine.replay(OffsetCommitKey("g", topic, 0), OffsetCommitValue(10, "", 1_000, -1, -1))
    records = machine.expired(now_ms=1_000 + 60_000, retention_ms=60_000, views={"g": CONSUMER})
    assert records == [(OffsetCommitKey("g", "old", 0), None)]  # "orders" is subscribed: kept
    assert machine.expired(now_ms=1_000 + 59_999, retention_ms=60_000, views={"g": CONSUMER}) == []


def test_consumer_group_offset_delete_refuses_only_subscribed_topics():
    machine = ConsumerOffsets()
    for topic in ("orders", "old"):
        machine.replay(OffsetCommitKey("g", topic, 0), OffsetCommitValue(10, "", 1_000, -1, -1))
    plan = machine.prepare_delete("g", CONSUMER, [("orders", 0), ("old", 0)])
    assert plan.error is E.none
    assert plan.errors == {("orders", 0): E.group_subscribed_to_topic, ("old", 0): E.none}
    assert plan.records == [(OffsetCommitKey("g", "old", 0), None)]


TXN_CONSUMER = GroupView(GroupKind.CONSUMER, member_epochs={"m1": 4})


@pytest.mark.parametrize("view, shape, expected", [
    (NO_GROUP, SIMPLE, E.none), (NO_GROUP, MEMBER, E.illegal_generation), (STABLE, MEMBER, E.none),
    (STABLE, STALE, E.illegal_generation), (STABLE, STRANGER, E.unknown_member_id),
    (TXN_CONSUMER, dict(generation=4, member_id="m1"), E.none),
    (TXN_CONSUMER, dict(generation=3, member_id="m1"), E.illegal_generation),  # a stale member epoch
    (SHARE, SIMPLE, E.group_id_not_found),  # ShareGroup.validateOffsetCommit
])
def test_transactional_commit_validation(view, shape, expected):
    """OffsetMetadataManager.validateTransactionalOffsetCommit: no group with a generation, and a
    stale member epoch (STALE_MEMBER_EPOCH for OffsetCommit), answer ILLEGAL_GENERATION."""
    request = CommitRequest("g", partitions=(CommitPartition("t", 0, 1),), **shape)
    plan = ConsumerOffsets().prepare_txn_commit(request, view, now_ms=1)
    assert plan.errors == {("t", 0): expected}
    assert bool(plan.records) == (expected is E.none)


def test_transactional_offsets_are_pending_until_their_producers_marker():
    """Pending per (offsets partition, producer id) until its marker (replayEndTransactionMarker):
    COMMIT makes them the group's offsets, ABORT drops them; RequireStable sees them meanwhile."""
    offsets = ConsumerOffsets()
    offsets.replay(OffsetCommitKey("g", "t", 0), OffsetCommitValue(3))
    offsets.replay_transactional(0, 100, OffsetCommitKey("g", "t", 0), OffsetCommitValue(9))
    offsets.replay_transactional(0, 200, OffsetCommitKey("g", "t", 1), OffsetCommitValue(4))
    assert offsets.fetch("g", NO_GROUP, [("t", 0)]) == {("t", 0): FetchedOffset(3)}
    assert offsets.fetch("g", NO_GROUP, [("t", 0), ("t", 2)], require_stable=True) == {
        ("t", 0): FetchedOffset(error=E.unstable_offset_commit), ("t", 2): FetchedOffset()}
    assert offsets.replay_end_transaction(1, 100, committed=True) == 0  # another partition's marker
    assert offsets.replay_end_transaction(0, 100, committed=True) == 1
    assert offsets.fetch("g", NO_GROUP, [("t", 0)], require_stable=True) == {("t", 0): FetchedOffset(9)}
    assert offsets.replay_end_transaction(0, 200, committed=False) == 1
    assert offsets.fetch("g", NO_GROUP, [("t", 1)], require_stable=True) == {("t", 1): FetchedOffset()}
    assert offsets.pending_producers() == []
