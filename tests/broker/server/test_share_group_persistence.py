"""Share groups survive a broker restart (issue acceptance point 5).

The group coordinator writes each share group to `__consumer_offsets` as records 10-15
(kafka-reference §3.3) and replays them on start-up; group configs live in the metadata log; the
share coordinator's state lives on `__share_group_state`. So after a graceful stop and after a
SIGKILL alike, ShareGroupDescribe shows the group exactly as before (epochs, members, member
epochs, assignments, subscriptions, client ids and hosts), its GROUP configs are back, a member
carries on heartbeating at its old epoch, and a member that never comes back is removed after
the group's `share.session.timeout.ms` (its timer is re-armed on load, as Kafka does).

An empty group that holds share state is not deleted by becoming empty: after a restart it is
listed as Empty and DescribeShareGroupOffsets still shows its start offsets.

Members are the kio `ShareClient` (client id "quafka-tests"); configs go through raw kio
IncrementalAlterConfigs/DescribeConfigs; `__consumer_offsets` is read back with a plain confluent
Consumer and decoded with `quafka.protocol.share_group_records`.
"""

from __future__ import annotations

import datetime

import pytest
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.list_groups.v5.request import ListGroupsRequest

from quafka.protocol.coordinator_record_codec import TopicPartitions
from quafka.protocol.share_group_records import (
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    SHARE_GROUP_MEMBER_METADATA,
    SHARE_GROUP_METADATA,
    SHARE_GROUP_STATE_PARTITION_METADATA,
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataValue,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataValue,
    TopicPartitionsInfo,
)
from support import RawClient, wait_until
from support.offset_admin import OffsetAdmin, group_records, latest_group_records
from support.share_client import (
    ACCEPT,
    RELEASE,
    ShareClient,
    acks_for,
    acquired_offsets,
    create_topic,
    produce,
)

pytestmark = pytest.mark.timeout(60)

GROUP = "persisted-share-group"
TOPIC = "persisted-topic"
GROUP_RESOURCE = 32
GROUP_CONFIG_SOURCE = 8  # DescribeConfigs ConfigSource GROUP_CONFIG
SESSION_TIMEOUT_MS = 3000
# Broker minimums low enough for a short share.session.timeout.ms / share.heartbeat.interval.ms.
SHORT_SESSION_BROKER = {"group.share.min.session.timeout.ms": "1000",
                        "group.share.min.heartbeat.interval.ms": "100"}
GROUP_CONFIGS = {"share.assignment.interval.ms": "0", "share.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                 "share.heartbeat.interval.ms": "500", "share.auto.offset.reset": "earliest"}


# ----------------------------------------------------------------------------- helpers

def alter_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    with RawClient(bootstrap) as raw:
        resp = raw.request(IncrementalAlterConfigsRequest(resources=(AlterConfigsResource(
            resource_type=GROUP_RESOURCE, resource_name=group,
            configs=tuple(AlterableConfig(name=k, config_operation=0, value=v) for k, v in configs.items())),),
            validate_only=False))
    assert resp.responses[0].error_code == ErrorCode.none, resp


def group_config_entries(bootstrap: str, group: str) -> dict[str, tuple[str | None, int]]:
    """{name: (value, config source)} of DescribeConfigs for a GROUP resource."""
    with RawClient(bootstrap) as raw:
        resp = raw.request(DescribeConfigsRequest(resources=(DescribeConfigsResource(
            resource_type=GROUP_RESOURCE, resource_name=group, configuration_keys=None),),
            include_synonyms=False, include_documentation=False))
    (result,) = resp.results
    assert result.error_code == ErrorCode.none, result
    return {c.name: (c.value, c.config_source) for c in result.configs}


def describe_loaded(client: ShareClient, group: str = GROUP):
    """ShareGroupDescribe, retried while the coordinators are still loading after a start."""
    def attempt():
        (g,) = client.describe([group]).groups
        return None if g.error_code == ErrorCode.coordinator_load_in_progress else g
    return wait_until(attempt, 10, 0.02, message="the group coordinator to finish loading")


def group_view(g) -> tuple:
    """Everything ShareGroupDescribe says about a group, in a comparable shape."""
    members = tuple(sorted(
        (m.member_id, m.member_epoch, m.client_id, m.client_host, m.rack_id, tuple(m.subscribed_topic_names),
         tuple(sorted((tp.topic_id, tp.topic_name, tuple(sorted(tp.partitions)))
                      for tp in m.assignment.topic_partitions)))
        for m in g.members))
    return (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name, members)


def list_share_groups(bootstrap: str) -> list[tuple[str, str, str]]:
    with RawClient(bootstrap) as raw:
        resp = raw.request(ListGroupsRequest(states_filter=(), types_filter=()))
    assert resp.error_code == ErrorCode.none, resp
    return [(g.group_id, g.group_state, g.group_type) for g in resp.groups]


def add_partitions(bootstrap: str, topic: str, count: int) -> None:
    with RawClient(bootstrap) as raw:
        resp = raw.request(CreatePartitionsRequest(
            topics=(CreatePartitionsTopic(name=topic, count=count, assignments=None),),
            timeout=datetime.timedelta(seconds=10), validate_only=False))
    assert [r.error_code for r in resp.results] == [ErrorCode.none], resp


def join_two_members(bootstrap: str) -> tuple[ShareClient, ShareClient]:
    """Two kio members of GROUP subscribed to TOPIC (2 partitions), one partition each."""
    a, b = ShareClient(bootstrap, GROUP), ShareClient(bootstrap, GROUP)
    assert a.join([TOPIC]).error_code == ErrorCode.none
    assert b.join([TOPIC], rack_id="rack-b").error_code == ErrorCode.none
    one_each = lambda assignment: sum(len(ps) for ps in assignment.values()) == 1  # noqa: E731
    a.wait_for_assignment(one_each)
    b.wait_for_assignment(one_each)
    return a, b


def consume_and_accept(client: ShareClient, topic_id, expected: dict[int, int]) -> None:
    """Fetch until `expected` ({partition: record count}) records are acquired, accepting each batch."""
    got: dict[int, int] = {}

    def step():
        resp = client.fetch(max_wait_ms=100)
        assert resp.error_code == ErrorCode.none, resp
        acks = acks_for(resp)
        if acks:
            assert client.acknowledge(acks).error_code == ErrorCode.none
        for (tid, p), offsets in acquired_offsets(resp).items():
            assert tid == topic_id
            got[p] = got.get(p, 0) + len(offsets)
        return got == expected

    wait_until(step, 10, 0, message=f"records {expected} acquired and accepted")


# ----------------------------------------------------------------------------- tests

@pytest.mark.parametrize("restart", ["graceful stop", "SIGKILL"])
def test_the_group_its_members_their_assignments_and_its_configs_are_back_after_a_restart(
        tmp_path, broker_process, restart):
    broker = broker_process(str(tmp_path / "data"), overrides=SHORT_SESSION_BROKER)
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC, 2)
    alter_group_configs(bootstrap, GROUP, GROUP_CONFIGS)
    a, b = join_two_members(bootstrap)
    before = describe_loaded(a)
    assert (before.group_state, before.group_epoch, before.assignment_epoch, len(before.members)) == (
        "Stable", 2, 2, 2)
    assert sorted(p for m in before.members for tp in m.assignment.topic_partitions for p in tp.partitions) == [0, 1]
    a_epoch, a_assignment = a.member_epoch, a.assignment
    assert b.heartbeat(None).error_code == ErrorCode.none  # b's last heartbeat ever

    if restart == "SIGKILL":
        broker.kill()
    else:
        assert broker.stop() == 0
    broker.start()
    a.disconnect()
    b.disconnect()

    after = describe_loaded(a)
    assert group_view(after) == group_view(before)
    assert {m.member_id: (m.client_id, m.client_host, m.rack_id) for m in after.members} == {
        a.member_id: ("quafka-tests", "/127.0.0.1", None), b.member_id: ("quafka-tests", "/127.0.0.1", "rack-b")}
    configs = group_config_entries(bootstrap, GROUP)
    assert {k: configs[k] for k in GROUP_CONFIGS} == {k: (v, GROUP_CONFIG_SOURCE) for k, v in GROUP_CONFIGS.items()}

    # a carries on at its old epoch, without re-joining
    resumed = a.heartbeat(None)
    assert (resumed.error_code, resumed.member_epoch) == (ErrorCode.none, a_epoch)
    assert a.assignment == a_assignment

    # b never heartbeats again: removed after the group's 3 s session timeout (the broker default is 45 s)
    def b_removed():
        assert a.heartbeat(None).error_code == ErrorCode.none
        g = describe_loaded(a)
        return [m.member_id for m in g.members] == [a.member_id] and g
    gone = wait_until(b_removed, 10, 0.2, message="b's session to time out")
    assert gone.group_epoch == before.group_epoch + 1
    assert a.wait_for_assignment(lambda asg: sorted(asg.get(topic_id, ())) == [0, 1]) == {topic_id: [0, 1]}
    assert a.member_epoch == gone.group_epoch
    assert b.heartbeat(None).error_code == ErrorCode.unknown_member_id
    a.close()
    b.close()
    # the removal is on __consumer_offsets too: b's member records are tombstoned
    latest = latest_group_records(group_records(bootstrap, GROUP))
    for record_type in (SHARE_GROUP_MEMBER_METADATA, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
                        SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT):
        assert latest[(record_type, (GROUP, b.member_id))] is None
        assert latest[(record_type, (GROUP, a.member_id))] is not None
    assert latest[(SHARE_GROUP_METADATA, (GROUP,))].epoch == gone.group_epoch


def test_an_empty_group_with_share_state_is_kept_and_listed_as_empty_after_a_restart(tmp_path, make_broker):
    data_dir = str(tmp_path / "data")
    broker = make_broker(data_dir=data_dir)
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC, 2)
    alter_group_configs(bootstrap, GROUP, {"share.auto.offset.reset": "earliest"})
    produce(bootstrap, TOPIC, [b"p0-%d" % i for i in range(10)], partition=0)
    produce(bootstrap, TOPIC, [b"p1-%d" % i for i in range(5)], partition=1)
    member = ShareClient(bootstrap, GROUP)
    member.join([TOPIC])
    consume_and_accept(member, topic_id, {0: 10, 1: 5})
    # and on partition 0 a gap: 10..19 delivered, 12 and 13 released, the rest accepted
    produce(bootstrap, TOPIC, [b"p0-%d" % i for i in range(10, 20)], partition=0)
    got: list[int] = []
    wait_until(lambda: got.extend(o for o, _ in acquired_offsets(member.fetch(max_wait_ms=100)).get(
        (topic_id, 0), ())) or len(got) == 10, 10, 0, message="records 10..19")
    assert got == list(range(10, 20))
    resp = member.acknowledge({(topic_id, 0): [(10, 11, [ACCEPT]), (12, 13, [RELEASE]), (14, 19, [ACCEPT])]})
    assert resp.error_code == ErrorCode.none
    assert member.leave().error_code == ErrorCode.none
    empty = describe_loaded(member)
    assert (empty.group_state, empty.members) == ("Empty", ())
    member.close()

    broker.stop()
    broker = make_broker(data_dir=data_dir)
    bootstrap = broker.bootstrap_servers

    with ShareClient(bootstrap, GROUP) as client:
        after = describe_loaded(client)
    assert group_view(after) == group_view(empty)
    assert (GROUP, "Empty", "share") in list_share_groups(bootstrap)
    with OffsetAdmin(bootstrap) as admin:
        offsets = admin.offsets(GROUP)
    # partition 0: start offset 12 (the first released record), 6 records accepted above it:
    # lag = 20 - 12 - 6 = 2
    assert {k: (v.start_offset, v.lag, v.error_code) for k, v in offsets.items()} == {
        (TOPIC, 0): (12, 2, ErrorCode.none), (TOPIC, 1): (5, 0, ErrorCode.none)}
    # and the state is really used: a new member gets the released records (second delivery) and
    # what was produced since, nothing else
    produce(bootstrap, TOPIC, [b"late"], partition=1)
    with ShareClient(bootstrap, GROUP) as late:
        late.join([TOPIC])
        got = {}

        def fetched():
            for tp, offs in acquired_offsets(late.fetch(max_wait_ms=100)).items():
                got.setdefault(tp, []).extend(offs)
            return len(got.get((topic_id, 0), ())) + len(got.get((topic_id, 1), ())) >= 3
        wait_until(fetched, 10, 0, message="the released records and the one produced after the restart")
        assert got == {(topic_id, 0): [(12, 2), (13, 2)], (topic_id, 1): [(5, 1)]}


def test_the_group_is_written_to_consumer_offsets_as_records_10_to_15(make_broker):
    broker = make_broker()
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC, 2)
    alter_group_configs(bootstrap, GROUP, {"share.assignment.interval.ms": "0"})
    a, b = join_two_members(bootstrap)
    described = describe_loaded(a)
    a.close()
    b.close()

    records = group_records(bootstrap, GROUP)
    latest = latest_group_records(records)
    members = {m.member_id: m for m in described.members}
    assert set(members) == {a.member_id, b.member_id}

    group_meta = latest[(SHARE_GROUP_METADATA, (GROUP,))]
    assert group_meta.epoch == described.group_epoch
    assert group_meta.metadata_hash != 0  # the subscribed topics' digest (KIP-1101's MetadataHash)
    assert latest[(SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, (GROUP,))] == ShareGroupTargetAssignmentMetadataValue(
        described.assignment_epoch)
    for member_id, m in members.items():
        (tp,) = m.assignment.topic_partitions
        partitions = (TopicPartitions(topic_id, tuple(tp.partitions)),)
        assert latest[(SHARE_GROUP_MEMBER_METADATA, (GROUP, member_id))] == ShareGroupMemberMetadataValue(
            m.rack_id, "quafka-tests", "/127.0.0.1", (TOPIC,))
        assert latest[(SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, (GROUP, member_id))] == \
            ShareGroupTargetAssignmentMemberValue(partitions)
        current = latest[(SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, (GROUP, member_id))]
        assert isinstance(current, ShareGroupCurrentMemberAssignmentValue)
        assert (current.member_epoch, current.state, current.assigned_partitions) == (m.member_epoch, 0, partitions)
        assert current.previous_member_epoch < current.member_epoch
    assert latest[(SHARE_GROUP_STATE_PARTITION_METADATA, (GROUP,))] == ShareGroupStatePartitionMetadataValue(
        initializing_topics=(), initialized_topics=(TopicPartitionsInfo(topic_id, TOPIC, (0, 1)),),
        deleting_topics=())
    # the topic was listed as initializing before it was initialized
    state_metadata = [r.value for r in records if r.record_type == SHARE_GROUP_STATE_PARTITION_METADATA]
    assert state_metadata[0] == ShareGroupStatePartitionMetadataValue(
        initializing_topics=(TopicPartitionsInfo(topic_id, TOPIC, (0, 1)),), initialized_topics=(),
        deleting_topics=())
    assert {r.record_type for r in records} == {10, 11, 12, 13, 14, 15}
    assert all(r.value is not None for r in records)  # nothing of a live group is tombstoned


def test_partitions_added_to_a_subscribed_topic_are_still_assigned_when_a_restart_comes_first(
        tmp_path, make_broker):
    """New partitions of a subscribed topic move the group epoch on, so the next heartbeat assigns
    them. If the broker restarts before that heartbeat, the change must not be forgotten: Kafka keeps
    the subscribed topics' metadata hash in record 11 and bumps the group epoch on the first
    heartbeat after loading when it no longer matches."""
    data_dir = str(tmp_path / "data")
    broker = make_broker(data_dir=data_dir)
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC, 1)
    alter_group_configs(bootstrap, GROUP, {"share.assignment.interval.ms": "0"})
    member = ShareClient(bootstrap, GROUP)
    member.join([TOPIC])
    assert member.assignment == {topic_id: [0]}
    add_partitions(bootstrap, TOPIC, 2)

    broker.stop()
    broker = make_broker(data_dir=data_dir)
    member.bootstrap = broker.bootstrap_servers
    member.disconnect()
    describe_loaded(member)

    def both_assigned():
        assert member.heartbeat(None).error_code == ErrorCode.none
        return sorted(member.assignment.get(topic_id, ())) == [0, 1]
    wait_until(both_assigned, 3, 0.05, message=(
        f"partition 1, added before the restart, to be assigned (group epoch stays "
        f"{describe_loaded(member).group_epoch}, assignment {member.assignment})"))
    with OffsetAdmin(broker.bootstrap_servers) as admin:
        assert sorted(admin.offsets(GROUP)) == [(TOPIC, 0), (TOPIC, 1)]
    member.close()
