"""The share-group offset admin APIs on the wire (issue acceptance point 6), through the kio helpers
of tests/support/offset_admin.py: DescribeShareGroupOffsets v0-v1 (key 90), AlterShareGroupOffsets
v0 (91), DeleteShareGroupOffsets v0 (92) and DeleteGroups v0-v2 (42) for share groups.

What Kafka does is in /work/shared/docs/kafka-reference.md §2.6 (the APIs), §3.1/§3.3 (the records
they leave on `__share_group_state` and `__consumer_offsets`) and §7 (lag = log end offset - start
offset - delivery complete count, KIP-1226).

Members are the kio `ShareClient`; "what the next consumer receives first" is checked with a
confluent `ShareConsumer`. Internal topics are read back with a plain confluent `Consumer`.
"""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.list_groups.v5.request import ListGroupsRequest

from quafka.protocol.share_group_records import (
    SHARE_GROUP_METADATA,
    SHARE_GROUP_STATE_PARTITION_METADATA,
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
    TopicInfo,
)
from quafka.protocol.share_state_records import SHARE_SNAPSHOT
from support import RawClient, wait_until
from support.offset_admin import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    OffsetAdmin,
    PartitionOffsets,
    alter_errors,
    delete_errors,
    group_records,
    latest_group_records,
    partition_offsets,
    share_state_records,
)
from support.share_client import (
    ACCEPT,
    RELEASE,
    ShareClient,
    acquired_offsets,
    coalesce,
    create_topic,
    produce,
)

pytestmark = pytest.mark.timeout(60)

GROUP = "offset-admin-group"
TOPIC = "offset-admin-topic"
NONE = ErrorCode.none
GROUP_ID_NOT_FOUND = ErrorCode.group_id_not_found  # 69
NON_EMPTY_GROUP = ErrorCode.non_empty_group  # 68
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.unknown_topic_or_partition  # 3
GROUP_RESOURCE = 32


# ----------------------------------------------------------------------------- helpers

def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    with RawClient(bootstrap) as raw:
        resp = raw.request(IncrementalAlterConfigsRequest(resources=(AlterConfigsResource(
            resource_type=GROUP_RESOURCE, resource_name=group,
            configs=tuple(AlterableConfig(name=k, config_operation=0, value=v) for k, v in configs.items())),),
            validate_only=False))
    assert resp.responses[0].error_code == NONE, resp


def listed_groups(bootstrap: str) -> list[str]:
    with RawClient(bootstrap) as raw:
        resp = raw.request(ListGroupsRequest(states_filter=(), types_filter=()))
    return [g.group_id for g in resp.groups]


def describe_group(bootstrap: str, group: str = GROUP):
    with ShareClient(bootstrap, group) as client:
        (g,) = client.describe().groups
    return g


def wait_empty(bootstrap: str, group: str = GROUP) -> None:
    wait_until(lambda: describe_group(bootstrap, group).group_state == "Empty", 10,
               message=f"group {group} to be empty")


def fetch_n(client: ShareClient, topic_id, n: int, partition: int = 0) -> list[int]:
    """Fetch until `n` records of the partition are acquired; their offsets (not acknowledged)."""
    got: list[int] = []

    def step():
        resp = client.fetch(max_wait_ms=100)
        assert resp.error_code == NONE, resp
        got.extend(o for o, _count in acquired_offsets(resp).get((topic_id, partition), ()))
        return len(got) >= n

    wait_until(step, 10, 0, message=f"{n} records acquired")
    assert len(got) == n, got
    return got


def consume_all(client: ShareClient, topic_id, n: int, partition: int = 0) -> None:
    """Fetch `n` records and accept them all."""
    offsets = fetch_n(client, topic_id, n, partition)
    resp = client.acknowledge({(topic_id, partition): coalesce(offsets, ACCEPT)})
    assert [p.error_code for t in resp.responses for p in t.partitions] == [NONE], resp


def first_offset_a_share_consumer_gets(bootstrap: str, group: str = GROUP, topic: str = TOPIC) -> int:
    """The offset of the first record a fresh confluent ShareConsumer of the group receives
    (nothing acknowledged; the consumer leaves the group on close)."""
    from confluent_kafka import ShareConsumer

    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit", "log_level": 3})
    try:
        consumer.subscribe([topic])
        got: list[int] = []

        def poll():
            for msg in consumer.poll(0.2) or ():
                if msg.error() is None:
                    got.append(msg.offset())
            return got

        wait_until(poll, 15, 0, message="a record for the share consumer")
        return min(got)
    finally:
        consumer.close()
        wait_empty(bootstrap, group)


def partition_summary(offsets: dict) -> dict:
    return {k: (v.start_offset, v.lag, v.error_code) for k, v in offsets.items()}


# ----------------------------------------------------------------------------- DescribeShareGroupOffsets

def test_describe_shows_the_start_offset_and_a_lag_that_follows_acceptance_production_and_release(broker):
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC, 1)
    set_group_configs(bootstrap, GROUP, {"share.auto.offset.reset": "earliest"})
    produce(bootstrap, TOPIC, [b"a%d" % i for i in range(100)])
    member = ShareClient(bootstrap, GROUP)
    member.join([TOPIC])
    with OffsetAdmin(bootstrap) as admin:
        # initialised by the join, start offset not yet resolved
        assert partition_summary(admin.offsets(GROUP)) == {(TOPIC, 0): (-1, -1, NONE)}

        consume_all(member, topic_id, 100)
        group = admin.describe(GROUP, {TOPIC: [0]})
        (topic,) = group.topics
        assert (topic.topic_name, topic.topic_id) == (TOPIC, topic_id)
        assert partition_offsets(group) == {(TOPIC, 0): PartitionOffsets(100, 0, 0, NONE)}

        produce(bootstrap, TOPIC, [b"b%d" % i for i in range(100)])
        assert partition_offsets(admin.describe(GROUP)) == {(TOPIC, 0): PartitionOffsets(100, 0, 100, NONE)}
        # v0 has the same start offset and no lag field
        assert admin.offsets(GROUP, version=0) == {(TOPIC, 0): PartitionOffsets(100, 0, None, NONE)}

        # 10 % of the next 100 released, the other 90 accepted
        offsets = fetch_n(member, topic_id, 100)
        assert offsets == list(range(100, 200))
        released, accepted = offsets[40:50], offsets[:40] + offsets[50:]
        resp = member.acknowledge({(topic_id, 0): sorted(coalesce(released, RELEASE) + coalesce(accepted, ACCEPT))})
        assert [p.error_code for t in resp.responses for p in t.partitions] == [NONE], resp
        # start offset: the first released record (140); delivery complete: the 50 accepted above it;
        # lag = 200 - 140 - 50 = 10, the released records
        assert admin.offsets(GROUP) == {(TOPIC, 0): PartitionOffsets(140, 0, 200 - 140 - 50, NONE)}
        assert admin.offsets(GROUP, version=0) == {(TOPIC, 0): PartitionOffsets(140, 0, None, NONE)}

        # the released records come back; accepting them completes the partition
        again = fetch_n(member, topic_id, 10)
        assert again == released
        member.acknowledge({(topic_id, 0): coalesce(again, ACCEPT)})
        assert admin.offsets(GROUP) == {(TOPIC, 0): PartitionOffsets(200, 0, 0, NONE)}
    member.close()


def test_describe_with_null_topics_lists_every_topic_the_group_holds_share_state_for(broker):
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "two-partitions", 2)
    create_topic(bootstrap, "one-partition", 1)
    create_topic(bootstrap, "not-subscribed", 3)
    member = ShareClient(bootstrap, GROUP)
    member.join(["two-partitions", "one-partition"])
    with OffsetAdmin(bootstrap) as admin:
        group = admin.describe(GROUP, None)
        assert group.error_code == NONE
        assert sorted((t.topic_name, tuple(p.partition_index for p in t.partitions)) for t in group.topics) == [
            ("one-partition", (0,)), ("two-partitions", (0, 1))]
        # several groups in one request, null and explicit topics side by side
        resp = admin.describe_groups({GROUP: None, "no-such-group": None})
        assert [(g.group_id, g.error_code) for g in resp.groups] == [(GROUP, NONE),
                                                                    ("no-such-group", GROUP_ID_NOT_FOUND)]
    member.close()


def test_describe_reports_an_unknown_group_and_unknown_topics_and_partitions(broker):
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC, 1)
    member = ShareClient(bootstrap, GROUP)
    member.join([TOPIC])
    with OffsetAdmin(bootstrap) as admin:
        missing = admin.describe("no-such-group", {TOPIC: [0]})
        assert (missing.group_id, missing.error_code, missing.topics) == ("no-such-group", GROUP_ID_NOT_FOUND, ())
        assert admin.describe("no-such-group", version=0).error_code == GROUP_ID_NOT_FOUND

        group = admin.describe(GROUP, {"no-such-topic": [0], TOPIC: [0, 7]})
        assert group.error_code == NONE
        assert {t.topic_name: t.topic_id for t in group.topics}[TOPIC] == topic_id
        assert partition_summary(partition_offsets(group)) == {
            ("no-such-topic", 0): (-1, -1, UNKNOWN_TOPIC_OR_PARTITION),
            (TOPIC, 0): (-1, -1, NONE),
            (TOPIC, 7): (-1, -1, UNKNOWN_TOPIC_OR_PARTITION)}
        # a topic the group never subscribed to: no state yet, start offset -1 and no error
        create_topic(bootstrap, "other", 1)
        assert partition_summary(admin.offsets(GROUP, {"other": [0]})) == {("other", 0): (-1, -1, NONE)}
    member.close()


# ----------------------------------------------------------------------------- AlterShareGroupOffsets

def test_alter_to_an_explicit_offset_earliest_and_latest_moves_where_the_next_consumer_starts(broker):
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC, 1)
    set_group_configs(bootstrap, GROUP, {"share.auto.offset.reset": "earliest"})
    produce(bootstrap, TOPIC, [b"r%d" % i for i in range(100)])
    with ShareClient(bootstrap, GROUP) as member:
        member.join([TOPIC])
        consume_all(member, topic_id, 100)
        assert member.leave().error_code == NONE

    with OffsetAdmin(bootstrap) as admin:
        assert admin.offsets(GROUP)[(TOPIC, 0)].start_offset == 100
        epoch = describe_group(bootstrap).group_epoch
        state_epochs = [r.value.state_epoch for r in share_state_records(bootstrap, GROUP, topic_id, 0)
                        if r.record_type == SHARE_SNAPSHOT]

        resp = admin.alter(GROUP, {TOPIC: {0: 42}})
        assert (resp.error_code, resp.error_message) == (NONE, None)
        assert [(t.topic_name, t.topic_id) for t in resp.responses] == [(TOPIC, topic_id)]
        assert alter_errors(resp) == {(TOPIC, 0): NONE}
        assert admin.offsets(GROUP) == {(TOPIC, 0): PartitionOffsets(42, 0, 100 - 42, NONE)}
        # the group epoch moved on, and the share partition was re-initialised with a new state epoch
        assert describe_group(bootstrap).group_epoch == epoch + 1
        snapshot = [r for r in share_state_records(bootstrap, GROUP, topic_id, 0)
                    if r.record_type == SHARE_SNAPSHOT][-1].value
        assert (snapshot.start_offset, snapshot.state_batches) == (42, ())
        assert snapshot.state_epoch > max(state_epochs)
        assert first_offset_a_share_consumer_gets(bootstrap) == 42

        earliest = admin.list_offset(TOPIC, 0, EARLIEST_TIMESTAMP)
        assert earliest == 0
        assert alter_errors(admin.alter(GROUP, {TOPIC: {0: earliest}})) == {(TOPIC, 0): NONE}
        assert admin.offsets(GROUP)[(TOPIC, 0)].start_offset == 0
        assert first_offset_a_share_consumer_gets(bootstrap) == 0

        latest = admin.list_offset(TOPIC, 0, LATEST_TIMESTAMP)
        assert latest == 100
        assert alter_errors(admin.alter(GROUP, {TOPIC: {0: latest}})) == {(TOPIC, 0): NONE}
        assert admin.offsets(GROUP) == {(TOPIC, 0): PartitionOffsets(100, 0, 0, NONE)}
        produce(bootstrap, TOPIC, [b"after-latest"])
        assert first_offset_a_share_consumer_gets(bootstrap) == 100


def test_alter_creates_a_group_that_does_not_exist_and_the_altered_offsets_survive_a_restart(
        tmp_path, make_broker):
    data_dir = str(tmp_path / "data")
    broker = make_broker(data_dir=data_dir)
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, TOPIC, 1)
    produce(bootstrap, TOPIC, [b"r%d" % i for i in range(50)])
    with OffsetAdmin(bootstrap) as admin:
        resp = admin.alter("brand-new", {TOPIC: {0: 7, 3: 1}, "no-such-topic": {0: 0}})
        assert resp.error_code == NONE
        assert alter_errors(resp) == {(TOPIC, 0): NONE, (TOPIC, 3): UNKNOWN_TOPIC_OR_PARTITION,
                                      ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}
        # never read by a share-partition leader yet: leader epoch -1
        assert admin.offsets("brand-new") == {(TOPIC, 0): PartitionOffsets(7, -1, 50 - 7, NONE)}
    created = describe_group(bootstrap, "brand-new")
    assert (created.error_code, created.group_state, created.members) == (NONE, "Empty", ())
    assert "brand-new" in listed_groups(bootstrap)

    broker.stop()
    broker = make_broker(data_dir=data_dir)
    bootstrap = broker.bootstrap_servers
    restarted = describe_group(bootstrap, "brand-new")
    assert (restarted.error_code, restarted.group_state, restarted.group_epoch) == (
        NONE, "Empty", created.group_epoch)
    with OffsetAdmin(bootstrap) as admin:
        assert admin.offsets("brand-new") == {(TOPIC, 0): PartitionOffsets(7, -1, 50 - 7, NONE)}
    assert first_offset_a_share_consumer_gets(bootstrap, "brand-new") == 7


def test_alter_on_a_group_with_a_member_is_refused_with_non_empty_group_and_changes_nothing(broker):
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC, 1)
    set_group_configs(bootstrap, GROUP, {"share.auto.offset.reset": "earliest"})
    produce(bootstrap, TOPIC, [b"r%d" % i for i in range(20)])
    member = ShareClient(bootstrap, GROUP)
    member.join([TOPIC])
    consume_all(member, topic_id, 20)
    epoch = describe_group(bootstrap).group_epoch
    state_records = len(share_state_records(bootstrap, GROUP, topic_id, 0))
    with OffsetAdmin(bootstrap) as admin:
        resp = admin.alter(GROUP, {TOPIC: {0: 3}})
        assert resp.error_code == NON_EMPTY_GROUP and resp.error_message
        assert alter_errors(resp) == {(TOPIC, 0): NON_EMPTY_GROUP}
        assert admin.offsets(GROUP) == {(TOPIC, 0): PartitionOffsets(20, 0, 0, NONE)}
    assert describe_group(bootstrap).group_epoch == epoch
    assert len(share_state_records(bootstrap, GROUP, topic_id, 0)) == state_records
    # the member carries on where it was
    produce(bootstrap, TOPIC, [b"next"])
    assert fetch_n(member, topic_id, 1) == [20]
    member.close()


# ----------------------------------------------------------------------------- DeleteShareGroupOffsets

def test_delete_offsets_of_an_empty_group_tombstones_the_share_state_and_record_15_forgets_the_topic(
        tmp_path, make_broker):
    data_dir = str(tmp_path / "data")
    broker = make_broker(data_dir=data_dir)
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC, 2)
    kept_id = create_topic(bootstrap, "kept", 1)
    set_group_configs(bootstrap, GROUP, {"share.auto.offset.reset": "earliest"})
    produce(bootstrap, TOPIC, [b"r%d" % i for i in range(10)], partition=0)
    member = ShareClient(bootstrap, GROUP)
    member.join([TOPIC, "kept"])
    consume_all(member, topic_id, 10, partition=0)
    with OffsetAdmin(bootstrap) as admin:
        # a live group is refused
        refused = admin.delete(GROUP, [TOPIC])
        assert (refused.error_code, refused.responses) == (NON_EMPTY_GROUP, ())
        assert admin.offsets(GROUP, {TOPIC: [0]})[(TOPIC, 0)].start_offset == 10

        assert member.leave().error_code == NONE
        resp = admin.delete(GROUP, [TOPIC, "no-such-topic"])
        assert resp.error_code == NONE
        assert delete_errors(resp) == {TOPIC: NONE, "no-such-topic": UNKNOWN_TOPIC_OR_PARTITION}
        assert [t.topic_id for t in resp.responses if t.topic_name == TOPIC] == [topic_id]

        # gone from describe: absent for null topics, start offset -1 when asked for
        assert {t.topic_name for t in admin.describe(GROUP).topics} == {"kept"}
        assert partition_summary(admin.offsets(GROUP, {TOPIC: [0, 1]})) == {
            (TOPIC, 0): (-1, -1, NONE), (TOPIC, 1): (-1, -1, NONE)}
        # deleting again: the group holds no offsets for the topic any more
        assert delete_errors(admin.delete(GROUP, [TOPIC])) == {TOPIC: UNKNOWN_TOPIC_OR_PARTITION}
        assert admin.delete("no-such-group", [TOPIC]).error_code == GROUP_ID_NOT_FOUND

    # a tombstone for each partition on __share_group_state; the other topic's state is untouched
    for p in (0, 1):
        records = share_state_records(bootstrap, GROUP, topic_id, p)
        assert records and records[-1].value is None, records
    kept = share_state_records(bootstrap, GROUP, kept_id, 0)
    assert kept and all(r.value is not None for r in kept)
    # record 15: the topic went through DeletingTopics and is no longer listed
    records = group_records(bootstrap, GROUP)
    metadata = [r.value for r in records if r.record_type == SHARE_GROUP_STATE_PARTITION_METADATA]
    assert any(v is not None and TopicInfo(topic_id, TOPIC) in v.deleting_topics for v in metadata)
    latest = latest_group_records(records)[(SHARE_GROUP_STATE_PARTITION_METADATA, (GROUP,))]
    assert [t.topic_name for t in latest.initialized_topics] == ["kept"]
    assert (latest.initializing_topics, latest.deleting_topics) == ((), ())

    member.close()

    # so it stays after a restart
    broker.stop()
    broker = make_broker(data_dir=data_dir)
    bootstrap = broker.bootstrap_servers
    with OffsetAdmin(bootstrap) as admin:
        assert {t.topic_name for t in admin.describe(GROUP).topics} == {"kept"}
        assert partition_summary(admin.offsets(GROUP, {TOPIC: [0]})) == {(TOPIC, 0): (-1, -1, NONE)}

    # the group is still there; a member joining again starts by share.auto.offset.reset
    with ShareClient(bootstrap, GROUP) as again:
        again.join([TOPIC])
        assert fetch_n(again, topic_id, 10) == list(range(10))


# ----------------------------------------------------------------------------- DeleteGroups

def test_delete_groups_refuses_a_live_group_and_deletes_an_empty_one_for_good(tmp_path, make_broker):
    data_dir = str(tmp_path / "data")
    broker = make_broker(data_dir=data_dir)
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC, 2)
    set_group_configs(bootstrap, GROUP, {"share.auto.offset.reset": "earliest"})
    produce(bootstrap, TOPIC, [b"r%d" % i for i in range(10)], partition=1)
    member = ShareClient(bootstrap, GROUP)
    member.join([TOPIC])
    consume_all(member, topic_id, 10, partition=1)
    with OffsetAdmin(bootstrap) as admin:
        assert admin.delete_groups([GROUP, ""]) == {GROUP: NON_EMPTY_GROUP, "": ErrorCode.invalid_group_id}
        assert describe_group(bootstrap).group_state == "Stable"
        assert admin.offsets(GROUP, {TOPIC: [1]})[(TOPIC, 1)].start_offset == 10

        assert member.leave().error_code == NONE
        for version in (0, 1):
            assert admin.delete_groups(["no-such-group"], version=version) == {"no-such-group": GROUP_ID_NOT_FOUND}
        assert admin.delete_groups([GROUP, "no-such-group"]) == {GROUP: NONE, "no-such-group": GROUP_ID_NOT_FOUND}

        assert describe_group(bootstrap).error_code == GROUP_ID_NOT_FOUND
        assert GROUP not in listed_groups(bootstrap)
        assert admin.describe(GROUP).error_code == GROUP_ID_NOT_FOUND
        assert admin.delete_groups([GROUP]) == {GROUP: GROUP_ID_NOT_FOUND}
    member.close()

    # tombstones: each share partition on __share_group_state, the group's records on __consumer_offsets
    for p in (0, 1):
        records = share_state_records(bootstrap, GROUP, topic_id, p)
        assert records and records[-1].value is None, records
    latest = latest_group_records(group_records(bootstrap, GROUP))
    assert latest[(SHARE_GROUP_METADATA, (GROUP,))] is None
    assert latest[(SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, (GROUP,))] is None
    assert latest.get((SHARE_GROUP_STATE_PARTITION_METADATA, (GROUP,))) is None
    assert all(v is None for v in latest.values()), latest

    broker.stop()
    broker = make_broker(data_dir=data_dir)
    bootstrap = broker.bootstrap_servers
    assert describe_group(bootstrap).error_code == GROUP_ID_NOT_FOUND
    assert GROUP not in listed_groups(bootstrap)
    with OffsetAdmin(bootstrap) as admin:
        assert admin.describe(GROUP).error_code == GROUP_ID_NOT_FOUND
    assert broker.call(lambda: broker.server.share_coordinator.coordinator.keys(GROUP)) == []


def test_a_group_id_used_again_after_delete_groups_starts_fresh(broker):
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC, 1)
    produce(bootstrap, TOPIC, [b"r%d" % i for i in range(100)])
    with OffsetAdmin(bootstrap) as admin:
        # the old group: explicit offsets at 42, records 42.. delivered but never acknowledged
        assert alter_errors(admin.alter(GROUP, {TOPIC: {0: 42}})) == {(TOPIC, 0): NONE}
        with ShareClient(bootstrap, GROUP) as old:
            old.join([TOPIC])
            assert fetch_n(old, topic_id, 58)[0] == 42
            assert old.leave().error_code == NONE
        assert admin.offsets(GROUP) == {(TOPIC, 0): PartitionOffsets(42, 0, 58, NONE)}
        old_epoch = describe_group(bootstrap).group_epoch

        assert admin.delete_groups([GROUP]) == {GROUP: NONE}

        # the new group: share.auto.offset.reset (latest, the default) applies again
        with ShareClient(bootstrap, GROUP) as new:
            joined = new.join([TOPIC])
            assert joined.error_code == NONE
            fresh = describe_group(bootstrap)
            assert (fresh.group_epoch, fresh.assignment_epoch, [m.member_id for m in fresh.members]) == (
                1, 1, [new.member_id])
            assert fresh.group_epoch < old_epoch
            assert partition_summary(admin.offsets(GROUP)) == {(TOPIC, 0): (-1, -1, NONE)}
            assert acquired_offsets(new.fetch(max_wait_ms=50)) == {}
            produce(bootstrap, TOPIC, [b"new"])
            assert fetch_n(new, topic_id, 1) == [100]
            assert new.acknowledge({(topic_id, 0): coalesce([100], ACCEPT)}).error_code == NONE
            assert admin.offsets(GROUP) == {(TOPIC, 0): PartitionOffsets(101, 0, 0, NONE)}
