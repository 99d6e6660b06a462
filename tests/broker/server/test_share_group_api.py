"""ShareGroupHeartbeat, ShareGroupDescribe, ListGroups and GROUP configs on the wire, against a
real broker: raw kio requests, and librdkafka's ShareConsumer joining through the heartbeat."""

from __future__ import annotations

import threading
import uuid

import pytest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest

from support import RawClient, wait_until

GROUP_RESOURCE = 32
SET, DELETE = 0, 1
INT32_MIN = -2147483648


def create_topic(broker, name, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)


def topic_id(broker, name) -> uuid.UUID:
    return broker.call(lambda: broker.server.state.topics[name].topic_id)


def heartbeat(raw, member, epoch, topics=None, group="g", rack=None):
    return raw.request(ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch, rack_id=rack,
                                                  subscribed_topic_names=None if topics is None else tuple(topics)))


def describe(raw, *groups, operations=False):
    return raw.request(ShareGroupDescribeRequest(group_ids=groups, include_authorized_operations=operations)).groups


def list_groups(raw, version=5, **filters):
    import importlib

    module = importlib.import_module(f"kio.schema.list_groups.v{version}.request")
    return raw.request(module.ListGroupsRequest(**filters))


def assigned(response):
    if response.assignment is None:
        return None
    return {tp.topic_id: sorted(tp.partitions) for tp in response.assignment.topic_partitions}


def alter_group(raw, group, *configs):
    req = IncrementalAlterConfigsRequest(resources=(AlterConfigsResource(
        resource_type=GROUP_RESOURCE, resource_name=group,
        configs=tuple(AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in configs)),),
        validate_only=False)
    return raw.request(req).responses[0]


def describe_group_configs(raw, group, keys=None):
    req = DescribeConfigsRequest(resources=(DescribeConfigsResource(
        resource_type=GROUP_RESOURCE, resource_name=group, configuration_keys=keys),),
        include_synonyms=True, include_documentation=False)
    return raw.request(req).results[0]


# --------------------------------------------------------------------------- heartbeat


def test_a_join_gets_the_assignment_keyed_by_topic_id_and_later_heartbeats_do_not_repeat_it(broker):
    create_topic(broker, "t", 3)
    with RawClient(broker.bootstrap_servers) as raw:
        joined = heartbeat(raw, "m1", 0, ["t"])
        assert (joined.error_code, joined.member_id, joined.member_epoch) == (0, "m1", 1)
        assert joined.heartbeat_interval.total_seconds() == 5.0
        assert assigned(joined) == {topic_id(broker, "t"): [0, 1, 2]}
        again = heartbeat(raw, "m1", 1)
        assert again.error_code == 0 and again.member_epoch == 1 and again.assignment is None


def test_two_members_split_the_partitions(broker):
    create_topic(broker, "t", 4)
    with RawClient(broker.bootstrap_servers) as raw:
        alter_group(raw, "g", ("share.assignment.interval.ms", SET, "0"))
        heartbeat(raw, "m1", 0, ["t"])
        second = heartbeat(raw, "m2", 0, ["t"])
        first = heartbeat(raw, "m1", 1)
        tid = topic_id(broker, "t")
        assert len(assigned(first)[tid]) == 2 and len(assigned(second)[tid]) == 2
        assert sorted(assigned(first)[tid] + assigned(second)[tid]) == [0, 1, 2, 3]


def test_heartbeat_errors_on_the_wire(broker):
    create_topic(broker, "t", 1)
    with RawClient(broker.bootstrap_servers) as raw:
        no_topics = heartbeat(raw, "m1", 0, None)
        assert (no_topics.error_code, no_topics.error_message) == (42, "SubscribedTopicNames must be set in first request.")
        assert heartbeat(raw, "", 0, ["t"]).error_code == 42
        assert heartbeat(raw, "m" * 37, 0, ["t"]).error_code == 42
        assert heartbeat(raw, "m1", 0, ["t"], group="").error_code == 42
        assert heartbeat(raw, "m1", 4, group="nope").error_code == 69  # GROUP_ID_NOT_FOUND
        heartbeat(raw, "m1", 0, ["t"])
        assert heartbeat(raw, "m2", 1).error_code == 25  # UNKNOWN_MEMBER_ID
        fenced = heartbeat(raw, "m1", 7)
        assert fenced.error_code == 110 and fenced.member_id is None  # FENCED_MEMBER_EPOCH


def test_a_member_leaves_with_epoch_minus_one_and_the_group_becomes_empty(broker):
    create_topic(broker, "t", 1)
    with RawClient(broker.bootstrap_servers) as raw:
        heartbeat(raw, "m1", 0, ["t"])
        left = heartbeat(raw, "m1", -1)
        assert (left.error_code, left.member_id, left.member_epoch) == (0, "m1", -1)
        (group,) = describe(raw, "g")
        assert group.group_state == "Empty" and group.members == ()
        assert group.group_epoch == group.assignment_epoch == 2


def test_a_topic_created_after_the_join_is_assigned_at_the_next_heartbeat(broker):
    with RawClient(broker.bootstrap_servers) as raw:
        joined = heartbeat(raw, "m1", 0, ["later"])
        assert joined.error_code == 0 and assigned(joined) == {}
        create_topic(broker, "later", 2)
        after = heartbeat(raw, "m1", joined.member_epoch)
        assert after.member_epoch == joined.member_epoch + 1
        assert assigned(after) == {topic_id(broker, "later"): [0, 1]}


def test_the_group_size_cap_refuses_one_member_too_many(make_broker):
    broker = make_broker(config={"group.share.max.size": 1, "group.share.max.share.sessions": 1})
    create_topic(broker, "t", 1)
    with RawClient(broker.bootstrap_servers) as raw:
        assert heartbeat(raw, "m1", 0, ["t"]).error_code == 0
        refused = heartbeat(raw, "m2", 0, ["t"])
        assert refused.error_code == 81 and "maximum capacity of 1 members" in refused.error_message


def test_a_member_that_stops_heartbeating_is_removed_after_its_session_timeout(make_broker):
    broker = make_broker(config={"group.share.min.session.timeout.ms": 200, "group.share.session.timeout.ms": 300,
                                 "group.share.min.heartbeat.interval.ms": 50, "group.share.heartbeat.interval.ms": 100})
    create_topic(broker, "t", 1)
    with RawClient(broker.bootstrap_servers) as raw:
        joined = heartbeat(raw, "m1", 0, ["t"])
        assert joined.heartbeat_interval.total_seconds() == 0.1
        wait_until(lambda: describe(raw, "g")[0].group_state == "Empty", 10, message="session expiry")
        assert describe(raw, "g")[0].members == ()
        assert heartbeat(raw, "m1", 1).error_code == 25
        assert heartbeat(raw, "m1", 0, ["t"]).error_code == 0  # rejoins with the same id


# --------------------------------------------------------------------------- describe and list


def test_describe_shows_members_with_client_host_rack_and_assignment(broker):
    create_topic(broker, "t", 2)
    with RawClient(broker.bootstrap_servers) as raw:
        heartbeat(raw, "m1", 0, ["t"], rack="r1")
        group, missing = describe(raw, "g", "missing", operations=True)
        assert (group.error_code, group.group_state, group.group_epoch, group.assignment_epoch,
                group.assignor_name) == (0, "Stable", 1, 1, "simple")
        assert group.authorized_operations == 3400  # READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
        (member,) = group.members
        assert (member.member_id, member.rack_id, member.member_epoch, member.client_id, member.client_host) == (
            "m1", "r1", 1, "quafka-tests", "/127.0.0.1")
        assert member.subscribed_topic_names == ("t",)
        (tp,) = member.assignment.topic_partitions
        assert (tp.topic_id, tp.topic_name, tp.partitions) == (topic_id(broker, "t"), "t", (0, 1))
        assert (missing.error_code, missing.error_message) == (69, "Group missing not found.")
        assert describe(raw, "g")[0].authorized_operations == INT32_MIN


def test_list_groups_reports_share_groups_and_honours_filters(broker):
    create_topic(broker, "t", 1)
    with RawClient(broker.bootstrap_servers) as raw:
        heartbeat(raw, "m1", 0, ["t"], group="busy")
        heartbeat(raw, "m1", 0, ["t"], group="idle")
        heartbeat(raw, "m1", -1, group="idle")
        every = list_groups(raw, states_filter=(), types_filter=())
        assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in every.groups] == [
            ("busy", "share", "Stable", "share"), ("idle", "share", "Empty", "share")]
        assert [g.group_id for g in list_groups(raw, states_filter=("empty",), types_filter=()).groups] == ["idle"]
        assert [g.group_id for g in list_groups(raw, states_filter=(), types_filter=("Share",)).groups] == [
            "busy", "idle"]
        assert list_groups(raw, states_filter=(), types_filter=("consumer",)).groups == ()
        assert [g.group_id for g in list_groups(raw, version=4, states_filter=("Stable",)).groups] == ["busy"]
        old = list_groups(raw, version=0)
        assert old.error_code == 0 and [(g.group_id, g.protocol_type) for g in old.groups] == [
            ("busy", "share"), ("idle", "share")]


# --------------------------------------------------------------------------- group configs


def test_group_configs_are_described_for_any_group_with_broker_defaults(broker):
    with RawClient(broker.bootstrap_servers) as raw:
        result = describe_group_configs(raw, "never-seen")
        assert result.error_code == 0
        entries = {c.name: c for c in result.configs}
        lock = entries["share.record.lock.duration.ms"]
        assert (lock.value, lock.config_source, lock.read_only) == ("30000", 5, False)
        assert [(s.name, s.source) for s in lock.synonyms] == [("group.share.record.lock.duration.ms", 5)]
        assert entries["share.auto.offset.reset"].value == "latest"
        assert describe_group_configs(raw, "").error_code == 42


def test_group_configs_are_set_validated_deleted_and_applied_to_the_heartbeat_interval(broker):
    create_topic(broker, "t", 1)
    with RawClient(broker.bootstrap_servers) as raw:
        ok = alter_group(raw, "g", ("share.heartbeat.interval.ms", SET, "6000"),
                         ("share.auto.offset.reset", SET, "by_duration:PT1M"))
        assert ok.error_code == 0
        entry = next(c for c in describe_group_configs(raw, "g", ("share.heartbeat.interval.ms",)).configs)
        assert (entry.value, entry.config_source) == ("6000", 8)  # GROUP_CONFIG
        assert broker.call(lambda: broker.server.state.group_config("g").auto_offset_reset_duration_ms) == 60000
        assert heartbeat(raw, "m1", 0, ["t"]).heartbeat_interval.total_seconds() == 6.0
        out_of_range = alter_group(raw, "g", ("share.session.timeout.ms", SET, "1000"))
        assert out_of_range.error_code == 40 and "45000 to 60000" in out_of_range.error_message
        unknown = alter_group(raw, "g", ("share.bogus", SET, "1"))
        assert unknown.error_code == 40 and "Unknown group config name: share.bogus" in unknown.error_message
        assert alter_group(raw, "g", ("share.heartbeat.interval.ms", SET, None)).error_code == 42
        assert alter_group(raw, "g", ("share.heartbeat.interval.ms", DELETE, None)).error_code == 0
        entry = next(c for c in describe_group_configs(raw, "g", ("share.heartbeat.interval.ms",)).configs)
        assert (entry.value, entry.config_source) == ("5000", 5)
        assert heartbeat(raw, "m1", 1).heartbeat_interval.total_seconds() == 5.0


# --------------------------------------------------------------------------- librdkafka


@pytest.mark.timeout(60)
def test_librdkafka_share_consumer_joins_and_is_assigned_every_partition(broker):
    from confluent_kafka import ShareConsumer

    create_topic(broker, "lt", 3)
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "lg",
                              "client.id": "librdkafka-share"})
    stop = threading.Event()

    def poll_loop():
        while not stop.is_set():
            try:
                consumer.poll(0.2)
            except Exception:  # noqa: BLE001 - ShareFetch may not be served: the client logs errors
                pass

    consumer.subscribe(["lt"])
    thread = threading.Thread(target=poll_loop, daemon=True)
    thread.start()
    try:
        with RawClient(broker.bootstrap_servers) as raw:
            def joined():
                (group,) = describe(raw, "lg")
                return group if group.error_code == 0 and group.members else None

            group = wait_until(joined, 30, message="the ShareConsumer to join")
            (member,) = group.members
            assert member.client_id == "librdkafka-share" and len(member.member_id) <= 36
            assert member.subscribed_topic_names == ("lt",)
            (tp,) = member.assignment.topic_partitions
            assert (tp.topic_name, sorted(tp.partitions)) == ("lt", [0, 1, 2])
    finally:
        stop.set()
        thread.join(10)
        consumer.close()
    with RawClient(broker.bootstrap_servers) as raw:
        wait_until(lambda: describe(raw, "lg")[0].group_state == "Empty", 20, message="the consumer to leave")


def test_legacy_alter_configs_replaces_a_group_s_whole_set(broker):
    from kio.schema.alter_configs.v2.request import AlterableConfig as Legacy
    from kio.schema.alter_configs.v2.request import AlterConfigsRequest, AlterConfigsResource as LegacyResource

    with RawClient(broker.bootstrap_servers) as raw:
        alter_group(raw, "g", ("share.delivery.count.limit", SET, "3"))
        resp = raw.request(AlterConfigsRequest(resources=(LegacyResource(
            resource_type=GROUP_RESOURCE, resource_name="g",
            configs=(Legacy(name="share.isolation.level", value="read_committed"),)),), validate_only=False))
        assert resp.responses[0].error_code == 0
    assert broker.call(lambda: broker.server.state.group_configs("g")) == {"share.isolation.level": "read_committed"}


def test_confluent_admin_sets_and_describes_group_configs(broker):
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    resource = ConfigResource(ResourceType.GROUP, "cg", incremental_configs=[
        ConfigEntry("share.record.lock.duration.ms", "20000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(10)
    described = admin.describe_configs([ConfigResource(ResourceType.GROUP, "cg")])
    (configs,) = [f.result(10) for f in described.values()]
    assert configs["share.record.lock.duration.ms"].value == "20000"
    assert configs["share.session.timeout.ms"].value == "45000"
    assert broker.call(lambda: broker.server.state.group_config("cg").record_lock_duration_ms) == 20000
