"""Admin / AsyncAdmin against an embedded broker: each operation checked against the broker's state."""

from __future__ import annotations

import asyncio

import pytest
from support import produce_batch, wait_until
from support.share_client import ACCEPT, ShareClient, acquired_offsets, coalesce, produce

from quafka.client import Admin, AsyncAdmin, ConfigException, IllegalStateException, KafkaException, NewTopic
from quafka.protocol.errors import ErrorCode

BASE_TS = 1_700_000_000_000


def _topics(broker):
    return broker.call(lambda: {n: (t.topic_id, len(t.partitions), dict(t.configs))
                                for n, t in broker.server.state.topics.items()})


@pytest.fixture
def admin(broker):
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as a:
        yield a


def test_unknown_config_key():
    with pytest.raises(ConfigException) as info:
        Admin({"bootstrap.servers": "localhost:1", "no.such.key": 1})
    assert info.value.key == "no.such.key"
    with pytest.raises(ConfigException) as info:
        Admin({"bootstrap.servers": "localhost:1", "request.timeout.ms": 0})
    assert info.value.key == "request.timeout.ms"


def test_closed_admin_raises(broker):
    admin = Admin({"bootstrap.servers": broker.bootstrap_servers})
    admin.close()
    with pytest.raises(IllegalStateException):
        admin.list_topics()


def test_topic_lifecycle(broker, admin):
    ids = admin.create_topics({"a1": (3, 1)})
    ids.update(admin.create_topics([NewTopic("a2", 2, 1, {"retention.ms": "12345"})]))
    state = _topics(broker)
    assert state["a1"][:2] == (ids["a1"], 3)
    assert state["a2"][1] == 2 and state["a2"][2]["retention.ms"] == "12345"

    with pytest.raises(KafkaException) as info:
        admin.create_topics({"a1": (1, 1)})
    assert info.value.code == ErrorCode.topic_already_exists and "'a1'" in str(info.value)

    described = admin.describe_topics(["a1"])["a1"]
    assert described.topic_id == state["a1"][0]
    assert sorted(described.partitions) == [0, 1, 2]
    assert all(p.leader == broker.call(lambda: broker.server.state.node_id) for p in described.partitions.values())

    listed = admin.list_topics()
    assert {"a1", "a2"} <= set(listed) and not any(t.is_internal for t in listed.values())
    internal = {n for n, t in broker.call(lambda: dict(broker.server.state.topics)).items() if t.internal}
    assert internal <= set(admin.list_topics(include_internal=True))

    admin.create_partitions({"a1": 5})
    assert _topics(broker)["a1"][1] == 5
    assert sorted(admin.describe_topics(["a1"])["a1"].partitions) == list(range(5))
    with pytest.raises(KafkaException) as info:
        admin.create_partitions({"a1": 2})
    assert info.value.code == ErrorCode.invalid_partitions and "'a1'" in str(info.value)

    admin.delete_topics(["a2"])
    assert "a2" not in _topics(broker)
    with pytest.raises(KafkaException) as info:
        admin.describe_topics(["a2"])
    assert info.value.code == ErrorCode.unknown_topic_or_partition
    with pytest.raises(KafkaException) as info:
        admin.delete_topics(["a2"])
    assert info.value.code == ErrorCode.unknown_topic_or_partition and "'a2'" in str(info.value)


def test_list_offsets_matches_confluent(broker, admin):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin.create_topics({"lo": (2, 1)})
    for i in range(3):
        produce_batch(broker.bootstrap_servers, "lo", 4, partition=0, timestamp_ms=BASE_TS + i * 1000)
    produce_batch(broker.bootstrap_servers, "lo", 2, partition=1, timestamp_ms=BASE_TS)
    tps = [("lo", 0), ("lo", 1)]
    cases = {"earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest(),
             BASE_TS + 1000: OffsetSpec.for_timestamp(BASE_TS + 1000),
             BASE_TS + 500: OffsetSpec.for_timestamp(BASE_TS + 500),
             BASE_TS + 99_000: OffsetSpec.for_timestamp(BASE_TS + 99_000)}
    confluent = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for ours, theirs in cases.items():
        got = admin.list_offsets({tp: ours for tp in tps})
        futures = confluent.list_offsets({TopicPartition(t, p): theirs for t, p in tps})
        for tp_obj, future in futures.items():
            result = future.result(10)
            assert got[(tp_obj.topic, tp_obj.partition)] == (result.offset, result.timestamp), (ours, tp_obj)
    assert admin.list_offsets({("lo", 0): "latest"})[("lo", 0)][0] == 12
    with pytest.raises(KafkaException):
        admin.list_offsets({("lo", 0): "middle"})


def test_delete_records(broker, admin):
    admin.create_topics({"dr": (1, 1)})
    produce_batch(broker.bootstrap_servers, "dr", 5, partition=0)
    produce_batch(broker.bootstrap_servers, "dr", 5, partition=0)
    assert admin.delete_records({("dr", 0): 5}) == {("dr", 0): 5}
    assert broker.call(lambda: broker.server.state.topics["dr"].partitions[0].log.log_start_offset) == 5
    assert admin.list_offsets({("dr", 0): "earliest"})[("dr", 0)][0] == 5
    with pytest.raises(KafkaException) as info:
        admin.delete_records({("dr", 0): 99})
    assert info.value.code == ErrorCode.offset_out_of_range and "dr-0" in str(info.value)


def test_async_admin(broker):
    async def main():
        async with AsyncAdmin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
            await admin.create_topics({"as": (1, 1)}, timeout=5.0)
            produce_batch(broker.bootstrap_servers, "as", 3)
            return await admin.describe_topics(["as"]), await admin.list_offsets({("as", 0): "latest"})

    described, offsets = asyncio.run(main())
    assert sorted(described["as"].partitions) == [0]
    assert offsets[("as", 0)][0] == 3


def test_configs(broker, admin):
    admin.create_topics([NewTopic("cf", 1, 1, {"retention.ms": "1000"})])
    assert admin.describe_configs("topic", "cf")["retention.ms"] == "1000"
    admin.alter_configs("topic", "cf", set={"segment.bytes": "2000000"}, delete=["retention.ms"])
    state = broker.call(lambda: dict(broker.server.state.topics["cf"].configs))
    assert state.get("segment.bytes") == "2000000" and "retention.ms" not in state
    described = admin.describe_configs("topic", "cf")
    assert described["segment.bytes"] == "2000000" and described["retention.ms"] != "1000"

    node = broker.call(lambda: broker.server.state.node_id)
    assert "log.retention.hours" in admin.describe_configs("broker", str(node))

    admin.alter_configs("group", "cg", set={"share.auto.offset.reset": "earliest"})
    assert broker.call(lambda: broker.server.state.group_configs("cg"))["share.auto.offset.reset"] == "earliest"
    assert admin.describe_configs("group", "cg")["share.auto.offset.reset"] == "earliest"
    # many resources in one DescribeConfigs, only the keys asked for; an unknown topic fails alone
    assert admin.describe_configs_of("group", ["cg", "other"], ["share.auto.offset.reset"]) == {
        "cg": {"share.auto.offset.reset": "earliest"}, "other": {"share.auto.offset.reset": "latest"}}

    with pytest.raises(KafkaException) as info:
        admin.describe_configs("topic", "missing-topic")
    assert info.value.code == ErrorCode.unknown_topic_or_partition and "'missing-topic'" in str(info.value)
    with pytest.raises(KafkaException) as info:
        admin.alter_configs("topic", "cf", set={"no.such.config": "1"})
    assert info.value.code == ErrorCode.invalid_config and "'cf'" in str(info.value)
    with pytest.raises(KafkaException):
        admin.describe_configs("cluster", "x")


def _consume(member: ShareClient, topic_id, n: int) -> None:
    got: list[int] = []

    def step():
        resp = member.fetch(max_wait_ms=100)
        got.extend(o for o, _ in acquired_offsets(resp).get((topic_id, 0), ()))
        return len(got) >= n

    wait_until(step, 10, 0, message=f"{n} records acquired")
    resp = member.acknowledge({(topic_id, 0): coalesce(got, ACCEPT)})
    assert [p.error_code for t in resp.responses for p in t.partitions] == [ErrorCode.none]


def test_share_groups(broker, admin):
    bootstrap = broker.bootstrap_servers
    ids = admin.create_topics({"sg": (1, 1), "other": (1, 1)})
    admin.alter_configs("group", "g1", set={"share.auto.offset.reset": "earliest"})
    produce(bootstrap, "sg", [b"m%d" % i for i in range(30)])
    member = ShareClient(bootstrap, "g1")
    member.join(["sg"])
    try:
        assert ("g1", "share", "Stable") in admin.list_groups()
        assert admin.list_groups(types=["share"], states=["stable"]) == [("g1", "share", "Stable")]
        assert admin.list_groups(types=["consumer"]) == []

        desc = admin.describe_share_groups(["g1"])["g1"]
        assert desc.state == "Stable" and desc.assignor
        assert desc.group_epoch >= 1 and desc.assignment_epoch == desc.group_epoch
        [m] = desc.members
        assert m.member_id == member.member_id and m.subscribed_topics == ("sg",)
        assert m.assignment == {"sg": (0,)} and m.client_id

        assert admin.list_share_group_offsets("g1") == {("sg", 0): (-1, -1)}
        _consume(member, ids["sg"], 30)
        assert admin.list_share_group_offsets("g1") == {("sg", 0): (30, 0)}
        produce(bootstrap, "sg", [b"n%d" % i for i in range(10)])
        assert admin.list_share_group_offsets("g1", ["sg"]) == {("sg", 0): (30, 10)}
        # many groups in one request: each its own answer, an unknown group's error beside the others'
        batched = admin.list_share_groups_offsets(["g1", "no-such-group"])
        assert list(batched) == ["g1", "no-such-group"] and batched["g1"] == {("sg", 0): (30, 10)}
        assert isinstance(batched["no-such-group"], KafkaException)
        assert batched["no-such-group"].code == ErrorCode.group_id_not_found

        with pytest.raises(KafkaException) as info:
            admin.alter_share_group_offsets("g1", {("sg", 0): 5})
        assert info.value.code == ErrorCode.non_empty_group and "'g1'" in str(info.value)
        assert admin.list_share_group_offsets("g1") == {("sg", 0): (30, 10)}
        assert admin.delete_groups(["g1"])["g1"].code == ErrorCode.non_empty_group
    finally:
        member.leave()
        member.close()
    wait_until(lambda: admin.describe_share_groups(["g1"])["g1"].state == "Empty", 10)

    admin.alter_share_group_offsets("g1", {("sg", 0): 5})
    assert admin.list_share_group_offsets("g1")[("sg", 0)][0] == 5
    admin.alter_share_group_offsets("g1", {("sg", 0): "earliest"})
    assert admin.list_share_group_offsets("g1")[("sg", 0)][0] == 0
    admin.alter_share_group_offsets("g1", {("sg", 0): "latest"})
    assert admin.list_share_group_offsets("g1")[("sg", 0)] == (40, 0)
    admin.alter_share_group_offsets("g1", {("sg", 0): ("timestamp", 0)})
    assert admin.list_share_group_offsets("g1")[("sg", 0)][0] == 0
    admin.alter_share_group_offsets("g1", {("sg", 0): ("timestamp", 2**62)})  # past every record: the log end
    assert admin.list_share_group_offsets("g1")[("sg", 0)][0] == 40
    with pytest.raises(KafkaException):
        admin.alter_share_group_offsets("g1", {("sg", 0): "soon"})

    admin.delete_share_group_offsets("g1", ["sg"])
    assert ("sg", 0) not in admin.list_share_group_offsets("g1")
    results = admin.delete_groups(["g1", "nope"])
    assert results["g1"] is None
    result = results["nope"]
    assert result is not None and result.code == ErrorCode.group_id_not_found and "'nope'" in str(result)
    assert "g1" not in [g.group_id for g in admin.list_groups()]
    for call in (lambda: admin.describe_share_groups(["g1"]), lambda: admin.list_share_group_offsets("g1"),
                 lambda: admin.delete_share_group_offsets("g1", ["sg"])):
        with pytest.raises(KafkaException) as info:
            call()
        assert info.value.code == ErrorCode.group_id_not_found and "'g1'" in str(info.value)


def test_group_call_finds_the_coordinator_again_after_not_coordinator(broker, monkeypatch):
    """A NOT_COORDINATOR answer sends the request again to the coordinator found anew."""
    from types import SimpleNamespace

    from quafka.client import admin as admin_module

    monkeypatch.setattr(admin_module, "RETRY_BACKOFF_S", 0.001)

    async def main():
        async with AsyncAdmin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
            real = admin._coordinator
            lookups = []

            class Stale:
                async def call(self, api_key, values, **kw):
                    stale = SimpleNamespace(group_id="x", error_code=ErrorCode.not_coordinator)
                    return SimpleNamespace(results=[stale])

            async def coordinator(group_id):
                lookups.append(group_id)
                return Stale() if len(lookups) == 1 else await real(group_id)

            admin._coordinator = coordinator
            result = await admin.delete_groups(["x"])
            return lookups, result

    lookups, result = asyncio.run(main())
    assert lookups == ["x", "x"]
    assert result["x"].code == ErrorCode.group_id_not_found


def test_offset_and_topic_calls_follow_a_moved_leader_or_controller(broker, monkeypatch, create_topic):
    """NOT_LEADER_OR_FOLLOWER from a stale leader and NOT_CONTROLLER from a stale controller send
    the request again after a metadata refresh (the first answer of each API here is the stale one)."""
    from types import SimpleNamespace

    from quafka.client import admin as admin_module

    monkeypatch.setattr(admin_module, "RETRY_BACKOFF_S", 0.001)
    create_topic(broker.bootstrap_servers, "moved", 1)
    keys = admin_module.LIST_OFFSETS_KEY, admin_module.CREATE_TOPICS_KEY

    async def main():
        async with AsyncAdmin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
            cluster = await admin._get_cluster()
            real_connection, real_refresh = cluster.connection, cluster.refresh_metadata
            events = []

            async def refresh(topics=None):
                events.append(("refresh", topics))
                await real_refresh(topics)

            class StaleOnce:
                def __init__(self, conn):
                    self.conn = conn

                async def call(self, api_key, values, **kw):
                    if api_key in keys and ("stale", api_key) not in events:
                        events.append(("stale", api_key))
                        if api_key == admin_module.LIST_OFFSETS_KEY:
                            part = SimpleNamespace(partition_index=0, error_code=ErrorCode.not_leader_or_follower,
                                                   offset=-1, timestamp=-1)
                            return SimpleNamespace(topics=[SimpleNamespace(name="moved", partitions=[part])])
                        return SimpleNamespace(topics=[SimpleNamespace(name="fresh", error_code=ErrorCode.not_controller,
                                                                       error_message=None)])
                    if api_key in keys:
                        events.append(("real", api_key))
                    return await self.conn.call(api_key, values, **kw)

            async def connection(node_id):
                return StaleOnce(await real_connection(node_id))

            cluster.refresh_metadata, cluster.connection = refresh, connection
            offsets = await admin.list_offsets({("moved", 0): "latest"})
            created = await admin.create_topics([admin_module.NewTopic("fresh", 2)])
            return offsets, created, events

    offsets, created, events = asyncio.run(main())
    assert offsets == {("moved", 0): (0, -1)} and "fresh" in created
    lo, ct = keys
    # the client bootstraps without topics (Cluster.bootstrap): the first use of "moved" describes it
    assert events[:4] == [("refresh", ["moved"]), ("stale", lo), ("refresh", ["moved"]), ("real", lo)]
    assert events[4:7] == [("stale", ct), ("refresh", []), ("real", ct)]


def test_config_entries_cluster_description_and_coordinator(broker, admin):
    """The entries behind kafka-configs' describe (sources and synonyms), the cluster's brokers and
    a group's coordinator, through the public Admin API."""
    admin.alter_configs("group", "cfg-g", {"share.auto.offset.reset": "earliest"})
    entries = {e.name: e for e in admin.describe_config_entries("group", "cfg-g")}
    reset = entries["share.auto.offset.reset"]
    assert (reset.value, reset.source, reset.is_default) == ("earliest", 8, False)
    assert entries["share.record.lock.duration.ms"].is_default
    cluster = admin.describe_cluster()
    [node] = cluster.brokers
    assert cluster.controller_id == node.node_id and f"{node.host}:{node.port}" == broker.bootstrap_servers
    assert admin.find_coordinator("cfg-g") == node
    broker_entries = admin.describe_config_entries("broker", "")  # the cluster-wide default resource
    assert all(isinstance(e.name, str) for e in broker_entries)
    with pytest.raises(KafkaException, match="not in the cluster"):
        admin.describe_config_entries("broker", "99")


def share_group_describes(broker) -> int:
    return sum(n for (key, _version), n in broker.server.metrics.requests.items() if key == 77)


def test_share_groups_are_described_in_one_request_per_coordinator_with_authorized_operations(broker, admin):
    """One ShareGroupDescribe carries every group of its coordinator (as Kafka's
    DescribeShareGroupsHandler batches them); the authorized operations are decoded to ACL
    operation names when asked for (without an authorizer: every operation a GROUP has, Kafka's
    AclEntry.supportedOperations)."""
    admin.create_topics({"batch": (1, 1)})
    members = [ShareClient(broker.bootstrap_servers, group) for group in ("ga", "gb", "gc")]
    try:
        for member in members:
            member.join(["batch"])
        before = share_group_describes(broker)
        described = admin.describe_share_groups(["gc", "ga", "gb", "ga"])
        assert share_group_describes(broker) == before + 1
        assert list(described) == ["gc", "ga", "gb"]
        assert {g: d.members[0].member_id for g, d in described.items()} == {m.group_id: m.member_id for m in members}
        assert all(d.authorized_operations is None for d in described.values())

        asked = admin.describe_share_groups(["ga"], include_authorized_operations=True)["ga"]
        assert asked.authorized_operations == {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}

        with pytest.raises(KafkaException) as info:  # the first group in error is named, as before
            admin.describe_share_groups(["ga", "nope", "gb"])
        assert info.value.code == ErrorCode.group_id_not_found and "'nope'" in str(info.value)
    finally:
        for member in members:
            member.leave()
            member.close()
