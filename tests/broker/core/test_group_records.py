"""The share-group coordinator's records on __consumer_offsets: images, diffs, replay, restore."""

from __future__ import annotations

import os
import random
import uuid

import pytest

from quafka.broker.core.group_records import (
    GroupImages,
    ShareGroupImageTracker,
    StatePartitionMetadata,
    diff,
    image_of,
    restore_group,
)
from quafka.broker.core.share_group import ShareGroupCoordinator, StaticGroupSettings
from quafka.protocol.share_group_records import (
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    SHARE_GROUP_MEMBER_METADATA,
    SHARE_GROUP_METADATA,
    SHARE_GROUP_STATE_PARTITION_METADATA,
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
    decode_group_record,
    encode_group_record,
)

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
TOPICS = {"a": (T1, 3), "b": (T2, 2)}
SETTINGS = StaticGroupSettings(session_timeout_ms=45000, heartbeat_interval_ms=5000, assignment_interval_ms=0)


def coordinator() -> ShareGroupCoordinator:
    return ShareGroupCoordinator(settings=lambda _g: SETTINGS, topics=TOPICS)


def through_the_wire(records):
    """Encode and decode each record, as the broker writes and replays them."""
    return [decode_group_record(*encode_group_record(r)) for r in records]


def comparable(group):
    return (group.group_id, group.group_epoch, group.assignment_epoch,
            {m: (x.member_epoch, x.previous_member_epoch, x.rack_id, x.client_id, x.client_host,
                 x.subscribed_topic_names, {t: tuple(sorted(p)) for t, p in x.assignment.items() if p})
             for m, x in group.members.items()},
            {m: {t: tuple(sorted(p)) for t, p in a.items() if p} for m, a in group.target.items()})


def test_a_joined_member_writes_every_share_group_record_type():
    c = coordinator()
    c.heartbeat("g", "m1", 0, subscribed_topic_names=["a"], client_id="c1", client_host="/127.0.0.1", now_ms=0)
    meta = StatePartitionMetadata(initialized={T1: ("a", frozenset({0, 1, 2}))})
    records = diff({}, image_of(c.group("g"), meta))
    assert [r.record_type for r in records] == [
        SHARE_GROUP_MEMBER_METADATA, SHARE_GROUP_METADATA, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
        SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
        SHARE_GROUP_STATE_PARTITION_METADATA]
    assert records[0].value.client_id == "c1" and records[0].value.subscribed_topic_names == ("a",)
    assert records[1].value.epoch == 1
    assert records[4].value.member_epoch == 1
    assert records[4].value.assigned_partitions[0].partitions == (0, 1, 2)
    assert records[5].value.initialized_topics[0].partitions == (0, 1, 2)


def test_an_unchanged_group_writes_nothing_and_a_left_member_is_tombstoned():
    c = coordinator()
    c.heartbeat("g", "m1", 0, subscribed_topic_names=["a"], now_ms=0)
    c.heartbeat("g", "m2", 0, subscribed_topic_names=["a"], now_ms=0)
    before = image_of(c.group("g"), None)
    assert diff(before, image_of(c.group("g"), None)) == []
    c.heartbeat("g", "m2", -1, now_ms=1)
    records = diff(before, image_of(c.group("g"), None))
    tombstones = {(r.record_type, tuple(r.key)) for r in records if r.value is None}
    assert tombstones == {(SHARE_GROUP_MEMBER_METADATA, ("g", "m2")), (SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, ("g", "m2")),
                          (SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, ("g", "m2"))}


def test_a_deleted_group_is_all_tombstones_with_its_metadata_last():
    c = coordinator()
    c.heartbeat("g", "m1", 0, subscribed_topic_names=["a"], now_ms=0)
    c.heartbeat("g", "m1", -1, now_ms=1)
    before = image_of(c.group("g"), StatePartitionMetadata(initialized={T1: ("a", frozenset({0}))}))
    c.delete_group("g")
    records = diff(before, image_of(c.group("g"), None))
    assert records and all(r.value is None for r in records)
    assert records[-1].record_type == SHARE_GROUP_METADATA
    images = GroupImages()
    for r in through_the_wire(diff({}, before) + records):
        images.replay(r)
    assert images.groups() == {}


@pytest.mark.parametrize("seed", range(25))
def test_replayed_records_restore_the_live_group(seed):
    rng = random.Random(seed)
    c = coordinator()
    written = {}
    images = GroupImages()
    members = [f"m{i}" for i in range(5)]
    epochs: dict[str, int] = {}
    for step in range(40):
        member = rng.choice(members)
        action = rng.random()
        if member not in epochs or action < 0.15:
            subscribed = rng.choice([["a"], ["b"], ["a", "b"]])
            result, _ = c.heartbeat("g", member, 0, subscribed_topic_names=subscribed, client_id=member,
                                    rack_id=rng.choice([None, "r1"]), now_ms=step)
        elif action < 0.3:
            result, _ = c.heartbeat("g", member, -1, now_ms=step)
            epochs.pop(member, None)
            result = None
        else:
            result, _ = c.heartbeat("g", member, epochs[member], now_ms=step)
        if result is not None and result.error == 0:
            epochs[member] = result.member_epoch
        meta = StatePartitionMetadata(initialized={T1: ("a", frozenset(range(rng.randint(0, 3))))})
        image = image_of(c.group("g"), meta)
        for r in through_the_wire(diff(written, image)):
            images.replay(r)
        written = image
        restored, restored_meta = restore_group("g", images.groups()["g"])
        assert comparable(restored) == comparable(c.group("g")), f"seed {seed} step {step}"
        assert restored_meta == meta or (meta.is_empty() and restored_meta.is_empty()), f"seed {seed} step {step}"


def test_a_restored_group_rearms_every_member_session_and_keeps_serving_old_epochs():
    c = coordinator()
    first, _ = c.heartbeat("g", "m1", 0, subscribed_topic_names=["a"], now_ms=0)
    image = image_of(c.group("g"), None)
    images = GroupImages()
    for r in through_the_wire(diff({}, image)):
        images.replay(r)
    group, _meta = restore_group("g", images.groups()["g"])
    fresh = coordinator()
    effects = fresh.restore(group, now_ms=1000)
    assert [e.deadline_ms for e in effects] == [1000 + SETTINGS.session_timeout_ms]
    again, _ = fresh.heartbeat("g", "m1", first.member_epoch, now_ms=1001)
    assert again.error == 0 and again.member_epoch == first.member_epoch


TRACKER_SEEDS = [int(os.environ["QUAFKA_SEED"])] if "QUAFKA_SEED" in os.environ else list(range(10))


@pytest.mark.parametrize("seed", TRACKER_SEEDS)
def test_the_tracker_appends_what_the_full_diff_would(seed):
    """ShareGroupImageTracker renders only the members a change touched (issue 28): its records
    equal diff(last image, image_of(group)) after joins, heartbeats, subscription changes, leaves,
    session timeouts, new target assignments, topic changes, state metadata changes and reloads.
    Rerun one seed with QUAFKA_SEED=<seed>."""
    print(f"seed {seed} (rerun: QUAFKA_SEED={seed})")
    rng = random.Random(seed)
    settings = StaticGroupSettings(session_timeout_ms=45000, heartbeat_interval_ms=5000, assignment_interval_ms=3)
    c = ShareGroupCoordinator(settings=lambda _g: settings, topics=TOPICS)
    tracker = ShareGroupImageTracker()
    topics = dict(TOPICS)
    epochs: dict[str, int] = {}
    meta = None
    for step in range(200):
        now = step * 1000
        member = f"m{rng.randint(0, 6)}"
        action = rng.random()
        if member not in epochs or action < 0.1:
            result, _ = c.heartbeat("g", member, 0, subscribed_topic_names=rng.choice([["a"], ["b"], ["a", "b"]]),
                                    client_id=member, now_ms=now)
        elif action < 0.2:
            result, _ = c.heartbeat("g", member, epochs[member], now_ms=now,
                                    subscribed_topic_names=rng.choice([["a"], ["b"], ["a", "b"]]))
        elif action < 0.3:
            c.heartbeat("g", member, -1, now_ms=now)
            result = None
            epochs.pop(member)
        elif action < 0.37:
            c.on_session_timeout("g", member, now + 10**6)
            result = None
            epochs.pop(member)
        elif action < 0.45:
            topics["b"] = (T2, topics["b"][1] + 1) if rng.random() < 0.7 else topics["b"]
            topics.pop("a", None) if rng.random() < 0.2 else topics.setdefault("a", (T1, 3))
            c.on_topics_changed(topics, now)
            result = None
        elif action < 0.5:
            meta = StatePartitionMetadata(initialized={T1: ("a", frozenset(range(rng.randint(0, 3))))})
            result = None
        elif action < 0.55 and c.group("g") is not None:
            image = tracker.get("g")
            c.unload("g")
            if image:
                c.restore(restore_group("g", image)[0], now)
            result = None
        else:
            result, _ = c.heartbeat("g", member, epochs[member], client_id=member, now_ms=now)
        if result is not None and result.error == 0:
            epochs[member] = result.member_epoch
        elif result is not None:
            epochs.pop(member, None)
        group = c.group("g")
        full = diff(tracker.get("g") or {}, image_of(group, meta))
        assert tracker.records("g", group, meta) == full, f"seed {seed} step {step}"
        tracker.written("g")
        assert (tracker.get("g") or {}) == image_of(group, meta), f"seed {seed} step {step}"
