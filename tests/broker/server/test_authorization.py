"""Every API the broker serves, refused to a principal without the permission Kafka's KafkaApis (or,
for what a KRaft broker forwards, ControllerApis) asks for, and served once it is granted; KIP-932's
table row by row; the hot paths asking once per topic per request; docs/security.md's table.

`CASES` maps every API key in the handler registry to its case; `test_every_registered_api_has_a_case`
fails the suite when an API is added without one. The brokers run Kafka's StandardAuthorizer; the
client under test is User:ANONYMOUS from 127.0.0.1, granted permissions one at a time with CreateAcls
by an administrator connecting from 127.0.0.3 (support/acl_fixtures.py says why hosts).
"""

from __future__ import annotations

import logging
import os
import pathlib
import re
import uuid
from dataclasses import dataclass
from typing import Callable

import pytest

from support import RawClient, wait_until
from support.acl_fixtures import AUTHORIZER_CONFIG, CLIENT_HOST, Acl, AclEnv, kreq
from support.share_client import ACCEPT, ShareClient

from quafka.broker.core.acl_types import AclOperation as Op
from quafka.broker.core.acl_types import AclPermissionType as Perm
from quafka.broker.core.acl_types import PatternType as Pt
from quafka.broker.core.acl_types import ResourceType as Rt
from quafka.broker.server.authorization import SUPPORTED_OPERATIONS, operations_bit_field
from quafka.broker.server.embedded import EmbeddedBroker
from quafka.broker.server.handlers import load_handlers
from quafka.protocol.errors import ErrorCode as E
from quafka.protocol.record_batch import build_batch

CONFIG = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1,
          "share.coordinator.state.topic.num.partitions": 1, "auto.create.topics.enable": True}
SECURED = {**CONFIG, **AUTHORIZER_CONFIG}
ZERO = uuid.UUID(int=0)
DOCS = pathlib.Path(__file__).resolve().parents[3] / "docs" / "security.md"


class Env:
    def __init__(self, broker: EmbeddedBroker, acl: AclEnv) -> None:
        self.broker, self.acl = broker, acl
        self.raw = RawClient(broker.bootstrap_servers)

    def req(self, entity):
        return self.raw.request(entity)

    def ext(self, entity, resp_cls):
        """A request of quafka's API extension (kio's index does not know its keys)."""
        from kio.serial import entity_reader
        self.raw.send_frame(self.raw.encode(entity))
        frame = self.raw.recv_frame()
        _header, used = entity_reader(resp_cls.__header_schema__)(frame, 0)
        return entity_reader(resp_cls)(frame, used)[0]

    def grant(self, op: Op, rtype: Rt, name: str = "kafka-cluster") -> None:
        self.acl.grant(op, rtype, name)

    def topic(self, name: str, partitions: int = 1):
        state = self.broker.server.state
        return self.broker.call(lambda: state.topics.get(name) or state.create_topic(name, partitions, 1, {}))

    def exists(self, name: str) -> bool:
        return name in self.broker.server.state.topics

    def produce(self, topic: str, count: int = 3) -> None:
        """Records in `topic`, produced by the administrator."""
        resp = self.acl.admin.request(produce_req(topic, count))
        assert resp.responses[0].partition_responses[0].error_code == E.none

    def acl_lifted(self):
        return self.acl.lifted()


@pytest.fixture(scope="module")
def module_env():
    with EmbeddedBroker(config=SECURED) as broker:
        acl = AclEnv(broker)
        env = Env(broker, acl)
        yield env
        env.raw.close()
        acl.close()


@pytest.fixture
def env(module_env):
    module_env.acl.deny_all()
    return module_env


def produce_req(topic: str, count: int = 3, partition: int = 0):
    return kreq(0, 9, acks=-1, timeout=10000, topic_data=[{"name": topic, "partition_data": [
        {"index": partition, "records": build_batch([(None, b"v%d" % i) for i in range(count)])}]}])


def simple_commit(env: Env, group: str, topic: str, offset: int = 1):
    return env.req(kreq(8, 9, group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset}]}]))


def commit_errors(resp) -> set:
    return {p.error_code for t in resp.topics for p in t.partitions}


# ----------------------------------------------------------------------------- the table

@dataclass(frozen=True)
class Case:
    api: str
    needs: str
    refused: str
    run: Callable[[Env], None]


CASES: dict[int, Case] = {}


def case(key: int, api: str, needs: str, refused: str):
    def register(fn):
        CASES[key] = Case(api, needs, refused, fn)
        return fn
    return register


@case(0, "Produce", "WRITE on the TOPIC", "TOPIC_AUTHORIZATION_FAILED per partition (internal topics: "
      "INVALID_TOPIC_EXCEPTION once allowed)")
def _produce(env):
    env.topic("az-produce")
    resp = env.req(produce_req("az-produce"))
    assert resp.responses[0].partition_responses[0].error_code == E.topic_authorization_failed
    assert env.broker.server.state.topics["az-produce"].partitions[0].log.log_end_offset == 0
    env.grant(Op.WRITE, Rt.TOPIC, "az-produce")
    assert env.req(produce_req("az-produce")).responses[0].partition_responses[0].error_code == E.none


def test_transactional_produce_needs_write_on_the_transactional_id(env):
    """KafkaApis.handleProduceRequest: a request with transactional records needs WRITE on its
    TRANSACTIONAL_ID (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), besides WRITE on each TOPIC."""
    from support.txn import install_verifier, txn_batch

    env.topic("az-txp")
    env.grant(Op.WRITE, Rt.TOPIC, "az-txp")
    pid = env.req(kreq(22, 4, transactional_id=None, transaction_timeout=60000, producer_id=-1,
                       producer_epoch=-1)).producer_id
    install_verifier(env.broker)  # a coordinator that accepts every partition (the shared broker's: undone below)
    try:
        def ask():
            return env.req(kreq(0, 9, transactional_id="az-txid", acks=-1, timeout=10000, topic_data=[{
                "name": "az-txp", "partition_data": [{"index": 0, "records": txn_batch([b"v"], pid, 0)}]}])
            ).responses[0].partition_responses[0].error_code
        assert ask() == E.transactional_id_authorization_failed
        env.grant(Op.WRITE, Rt.TRANSACTIONAL_ID, "az-txid")
        assert ask() == E.none
    finally:
        env.broker.call(setattr, env.broker.server, "transactions", None)


def fetch_req(topic: str, version: int = 12, topic_id=None):
    t = {"topic": topic} if version < 13 else {"topic_id": topic_id}
    return kreq(1, version, max_wait=0, max_bytes=1 << 20, topics=[{**t, "partitions": [
        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}])


@case(1, "Fetch", "READ on the TOPIC", "TOPIC_AUTHORIZATION_FAILED per partition (an unknown topic id: "
      "UNKNOWN_TOPIC_ID first)")
def _fetch(env):
    env.topic("az-fetch")
    env.produce("az-fetch")
    part = env.req(fetch_req("az-fetch")).responses[0].partitions[0]
    assert part.error_code == E.topic_authorization_failed and not part.records
    unknown = env.req(fetch_req("", 13, uuid.uuid4())).responses[0].partitions[0]
    assert unknown.error_code == E.unknown_topic_id
    env.grant(Op.READ, Rt.TOPIC, "az-fetch")
    part = env.req(fetch_req("az-fetch")).responses[0].partitions[0]
    assert part.error_code == E.none and part.records


@case(2, "ListOffsets", "DESCRIBE on the TOPIC", "TOPIC_AUTHORIZATION_FAILED per partition")
def _list_offsets(env):
    env.topic("az-lo")
    env.produce("az-lo")

    def ask():
        return env.req(kreq(2, 7, replica_id=-1, topics=[{"name": "az-lo", "partitions": [
            {"partition_index": 0, "timestamp": -1}]}])).topics[0].partitions[0]
    assert ask().error_code == E.topic_authorization_failed
    env.grant(Op.DESCRIBE, Rt.TOPIC, "az-lo")
    got = ask()
    assert got.error_code == E.none and got.offset == 3


def metadata_req(*names, auto_create=False, version=12, include_ops=False):
    topics = None if names == (None,) else [{"name": n} for n in names]
    return kreq(3, version, topics=topics, allow_auto_topic_creation=auto_create,
                include_topic_authorized_operations=include_ops)


@case(3, "Metadata", "DESCRIBE on the TOPIC; auto-creation: CREATE on the CLUSTER or the TOPIC",
      "TOPIC_AUTHORIZATION_FAILED for a topic named (existing or not); left out of an all-topics answer")
def _metadata(env):
    env.topic("az-md")
    [named, missing] = env.req(metadata_req("az-md", "az-md-none")).topics
    assert named.error_code == missing.error_code == E.topic_authorization_failed  # existence not disclosed
    assert named.topic_id in (None, ZERO) and not named.partitions
    assert "az-md" not in {t.name for t in env.req(metadata_req(None)).topics}
    env.grant(Op.DESCRIBE, Rt.TOPIC, "az-md")
    [named] = env.req(metadata_req("az-md", include_ops=True)).topics
    assert named.error_code == E.none and len(named.partitions) == 1
    assert named.topic_authorized_operations == operations_bit_field([Op.DESCRIBE])
    assert "az-md" in {t.name for t in env.req(metadata_req(None)).topics}
    # auto-creation needs CREATE besides DESCRIBE
    env.grant(Op.DESCRIBE, Rt.TOPIC, "az-md-auto")
    [auto] = env.req(metadata_req("az-md-auto", auto_create=True)).topics
    assert auto.error_code == E.topic_authorization_failed and not env.exists("az-md-auto")
    env.grant(Op.CREATE, Rt.TOPIC, "az-md-auto")
    [auto] = env.req(metadata_req("az-md-auto", auto_create=True)).topics
    assert auto.error_code == E.none and env.exists("az-md-auto")


@case(8, "OffsetCommit", "READ on the GROUP, READ on the TOPIC",
      "GROUP_AUTHORIZATION_FAILED on every partition; TOPIC_AUTHORIZATION_FAILED per partition")
def _offset_commit(env):
    env.topic("az-oc")
    assert commit_errors(simple_commit(env, "az-oc-g", "az-oc")) == {E.group_authorization_failed}
    env.grant(Op.READ, Rt.GROUP, "az-oc-g")
    assert commit_errors(simple_commit(env, "az-oc-g", "az-oc")) == {E.topic_authorization_failed}
    env.grant(Op.READ, Rt.TOPIC, "az-oc")
    assert commit_errors(simple_commit(env, "az-oc-g", "az-oc")) == {E.none}


@case(9, "OffsetFetch", "DESCRIBE on the GROUP, DESCRIBE on the TOPIC",
      "GROUP_AUTHORIZATION_FAILED for the group; TOPIC_AUTHORIZATION_FAILED per partition named, "
      "left out when all are asked for")
def _offset_fetch(env):
    env.topic("az-of")
    with env.acl_lifted():
        assert commit_errors(simple_commit(env, "az-of-g", "az-of", 2)) == {E.none}

    def ask(topics):
        return env.req(kreq(9, 8, groups=[{"group_id": "az-of-g", "topics": topics}])).groups[0]
    named = [{"name": "az-of", "partition_indexes": [0]}]
    assert ask(named).error_code == E.group_authorization_failed
    env.grant(Op.DESCRIBE, Rt.GROUP, "az-of-g")
    got = ask(named)
    assert got.error_code == E.none and got.topics[0].partitions[0].error_code == E.topic_authorization_failed
    assert got.topics[0].partitions[0].committed_offset == -1
    assert ask(None).topics == ()
    env.grant(Op.DESCRIBE, Rt.TOPIC, "az-of")
    assert ask(named).topics[0].partitions[0].committed_offset == 2
    assert [t.name for t in ask(None).topics] == ["az-of"]


@case(10, "FindCoordinator", "DESCRIBE on the GROUP (key type 0) or the TRANSACTIONAL_ID (1); "
      "CLUSTER_ACTION on the CLUSTER (2, brokers only)",
      "GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED per key")
def _find_coordinator(env):
    def ask(key_type, key):
        return env.req(kreq(10, 6, key_type=key_type, coordinator_keys=[key])).coordinators[0]
    assert ask(0, "az-fc").error_code == E.group_authorization_failed
    assert ask(1, "az-tx").error_code == E.transactional_id_authorization_failed
    assert ask(2, "az-fc:x:0").error_code == E.cluster_authorization_failed
    env.grant(Op.DESCRIBE, Rt.GROUP, "az-fc")
    env.grant(Op.DESCRIBE, Rt.TRANSACTIONAL_ID, "az-tx")
    found = ask(0, "az-fc")
    assert found.error_code == E.none and found.node_id == env.broker.server.state.node_id
    assert ask(1, "az-tx").error_code == E.coordinator_not_available  # no transactions in quafka


def join(env, group: str, member_id: str = ""):
    return env.req(kreq(11, 5, group_id=group, session_timeout=10000, rebalance_timeout=10000, member_id=member_id,
                        protocol_type="consumer", protocols=[{"name": "range", "metadata": b""}]))


def joined_member(env, group: str):
    """A classic group member that joined and synced (READ on the group lifted for the set-up)."""
    with env.acl_lifted():
        first = join(env, group)
        assert first.error_code == E.member_id_required
        second = join(env, group, first.member_id)
        assert second.error_code == E.none, second
        synced = env.req(sync_req(group, second.member_id, second.generation_id))
        assert synced.error_code == E.none
    return second.member_id, second.generation_id


def sync_req(group, member_id, generation):
    return kreq(14, 5, group_id=group, generation_id=generation, member_id=member_id, protocol_type="consumer",
                protocol_name="range", assignments=[{"member_id": member_id, "assignment": b""}])


@case(11, "JoinGroup", "READ on the GROUP", "GROUP_AUTHORIZATION_FAILED")
def _join_group(env):
    refused = join(env, "az-jg")
    assert refused.error_code == E.group_authorization_failed and refused.member_id == ""
    env.grant(Op.READ, Rt.GROUP, "az-jg")
    first = join(env, "az-jg")
    assert first.error_code == E.member_id_required
    assert join(env, "az-jg", first.member_id).error_code == E.none


@case(12, "Heartbeat", "READ on the GROUP", "GROUP_AUTHORIZATION_FAILED")
def _heartbeat(env):
    member, generation = joined_member(env, "az-hb")
    req = kreq(12, 4, group_id="az-hb", generation_id=generation, member_id=member)
    assert env.req(req).error_code == E.group_authorization_failed
    env.grant(Op.READ, Rt.GROUP, "az-hb")
    assert env.req(req).error_code == E.none


@case(13, "LeaveGroup", "READ on the GROUP", "GROUP_AUTHORIZATION_FAILED")
def _leave_group(env):
    member, _generation = joined_member(env, "az-lg")
    req = kreq(13, 5, group_id="az-lg", members=[{"member_id": member}])
    assert env.req(req).error_code == E.group_authorization_failed
    env.grant(Op.READ, Rt.GROUP, "az-lg")
    resp = env.req(req)
    assert resp.error_code == E.none and resp.members[0].error_code == E.none


@case(14, "SyncGroup", "READ on the GROUP", "GROUP_AUTHORIZATION_FAILED")
def _sync_group(env):
    member, generation = joined_member(env, "az-sg")
    assert env.req(sync_req("az-sg", member, generation)).error_code == E.group_authorization_failed
    env.grant(Op.READ, Rt.GROUP, "az-sg")
    assert env.req(sync_req("az-sg", member, generation)).error_code == E.none


@case(15, "DescribeGroups", "DESCRIBE on the GROUP", "GROUP_AUTHORIZATION_FAILED per group")
def _describe_groups(env):
    joined_member(env, "az-dg")

    def ask():
        return env.req(kreq(15, 5, groups=["az-dg"], include_authorized_operations=True)).groups[0]
    refused = ask()
    assert refused.error_code == E.group_authorization_failed and refused.members == ()
    env.grant(Op.DESCRIBE, Rt.GROUP, "az-dg")
    got = ask()
    assert got.error_code == E.none and len(got.members) == 1
    assert got.authorized_operations == operations_bit_field([Op.DESCRIBE])


@case(16, "ListGroups", "DESCRIBE on the CLUSTER (every group) or on each GROUP",
      "nothing: the groups the principal may not describe are left out")
def _list_groups(env):
    joined_member(env, "az-lsg")
    joined_member(env, "az-lsg-other")

    def listed():
        resp = env.req(kreq(16, 5))
        assert resp.error_code == E.none
        return {g.group_id for g in resp.groups}
    assert "az-lsg" not in listed()
    env.grant(Op.DESCRIBE, Rt.GROUP, "az-lsg")
    assert listed() == {"az-lsg"}
    env.grant(Op.DESCRIBE, Rt.CLUSTER)
    assert {"az-lsg", "az-lsg-other"} <= listed()


@case(18, "ApiVersions", "nothing", "never refused")
def _api_versions(env):
    resp = env.req(kreq(18, 3, client_software_name="t", client_software_version="1"))
    assert resp.error_code == E.none and len(resp.api_keys) == len(load_handlers())


@case(19, "CreateTopics", "CREATE on the CLUSTER or the TOPIC; its configs in the answer: DESCRIBE_CONFIGS "
      "on the TOPIC", "TOPIC_AUTHORIZATION_FAILED per topic (TopicConfigErrorCode TOPIC_AUTHORIZATION_FAILED "
      "without DESCRIBE_CONFIGS)")
def _create_topics(env):
    def create(name):
        return env.req(kreq(19, 7, topics=[{"name": name, "num_partitions": 1, "replication_factor": -1}],
                            timeout=10000)).topics[0]
    refused = create("az-ct")
    assert refused.error_code == E.topic_authorization_failed and not env.exists("az-ct")
    env.grant(Op.CREATE, Rt.TOPIC, "az-ct")
    made = create("az-ct")
    assert made.error_code == E.none and env.exists("az-ct")
    assert made.topic_config_error_code == E.topic_authorization_failed and made.configs == ()
    env.grant(Op.CREATE, Rt.CLUSTER)
    env.grant(Op.DESCRIBE_CONFIGS, Rt.TOPIC, "az-ct2")
    made = create("az-ct2")
    assert made.error_code == E.none and made.topic_config_error_code == E.none and made.configs


@case(20, "DeleteTopics", "DELETE on the CLUSTER or the TOPIC", "TOPIC_AUTHORIZATION_FAILED per topic "
      "(named by id without DESCRIBE: answered without the name)")
def _delete_topics(env):
    topic = env.topic("az-dt")

    def delete(**t):
        return env.req(kreq(20, 6, topics=[t], timeout=10000)).responses[0]
    refused = delete(name="az-dt")
    assert refused.error_code == E.topic_authorization_failed and env.exists("az-dt")
    by_id = delete(topic_id=topic.topic_id)
    assert by_id.error_code == E.topic_authorization_failed and by_id.name is None
    env.grant(Op.DELETE, Rt.TOPIC, "az-dt")
    assert delete(name="az-dt").error_code == E.none and not env.exists("az-dt")


@case(21, "DeleteRecords", "DELETE on the TOPIC", "TOPIC_AUTHORIZATION_FAILED per partition (internal topics: "
      "INVALID_TOPIC_EXCEPTION once allowed)")
def _delete_records(env):
    env.topic("az-dr")
    env.produce("az-dr")

    def delete(topic):
        return env.req(kreq(21, 2, timeout=10000, topics=[{"name": topic, "partitions": [
            {"partition_index": 0, "offset": 2}]}])).topics[0].partitions[0]
    assert delete("az-dr").error_code == E.topic_authorization_failed
    env.grant(Op.DELETE, Rt.TOPIC, "az-dr")
    got = delete("az-dr")
    assert got.error_code == E.none and got.low_watermark == 2


@case(22, "InitProducerId", "IDEMPOTENT_WRITE on the CLUSTER, or WRITE on any TOPIC (transactional ids: "
      "WRITE on the TRANSACTIONAL_ID; quafka has no transactions)",
      "CLUSTER_AUTHORIZATION_FAILED (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)")
def _init_producer_id(env):
    def ask(txn=None):
        return env.req(kreq(22, 4, transactional_id=txn, transaction_timeout=60000, producer_id=-1,
                            producer_epoch=-1))
    assert ask().error_code == E.cluster_authorization_failed
    env.grant(Op.WRITE, Rt.TOPIC, "anything")
    got = ask()
    assert got.error_code == E.none and got.producer_id >= 0
    env.acl.deny_all()
    env.grant(Op.IDEMPOTENT_WRITE, Rt.CLUSTER)
    assert ask().error_code == E.none
    assert ask("az-txn").error_code == E.transactional_id_authorization_failed


ANY_ACL = {"pattern_type_filter": int(Pt.ANY), "operation": int(Op.ANY), "permission_type": int(Perm.ANY)}


@case(29, "DescribeAcls", "DESCRIBE on the CLUSTER", "CLUSTER_AUTHORIZATION_FAILED")
def _describe_acls(env):
    env.grant(Op.READ, Rt.TOPIC, "az-da")

    def describe():
        return env.req(kreq(29, 3, resource_type_filter=int(Rt.TOPIC), resource_name_filter="az-da", **ANY_ACL))
    refused = describe()
    assert refused.error_code == E.cluster_authorization_failed and refused.resources == ()
    env.grant(Op.DESCRIBE, Rt.CLUSTER)
    got = describe()
    assert got.error_code == E.none
    assert [(r.resource_name, [(a.host, a.operation) for a in r.acls]) for r in got.resources] == [
        ("az-da", [(CLIENT_HOST, Op.READ)])]


@case(30, "CreateAcls", "ALTER on the CLUSTER", "CLUSTER_AUTHORIZATION_FAILED per creation")
def _create_acls(env):
    acl = Acl(Op.READ, Rt.TOPIC, "az-ca")  # for the client's host: deny_all removes it afterwards

    def create():
        return env.req(kreq(30, 3, creations=[acl.creation()])).results[0]
    refused = create()
    assert refused.error_code == E.cluster_authorization_failed and not env.acl.exists(acl)
    env.grant(Op.DESCRIBE, Rt.CLUSTER)  # DESCRIBE does not imply ALTER
    assert create().error_code == E.cluster_authorization_failed
    env.grant(Op.ALTER, Rt.CLUSTER)
    assert create().error_code == E.none and env.acl.exists(acl)


@case(31, "DeleteAcls", "ALTER on the CLUSTER", "CLUSTER_AUTHORIZATION_FAILED per filter")
def _delete_acls(env):
    acl = Acl(Op.READ, Rt.TOPIC, "az-dla")
    env.acl.create(acl)

    def delete():
        return env.req(kreq(31, 3, filters=[acl.filter()])).filter_results[0]
    refused = delete()
    assert refused.error_code == E.cluster_authorization_failed and refused.matching_acls == ()
    assert env.acl.exists(acl)
    env.grant(Op.ALTER, Rt.CLUSTER)
    got = delete()
    assert got.error_code == E.none and [m.resource_name for m in got.matching_acls] == ["az-dla"]
    assert not env.acl.exists(acl)


def describe_configs(env, *resources):
    return env.req(kreq(32, 4, resources=[{"resource_type": t, "resource_name": n, "configuration_keys": None}
                                          for t, n in resources])).results


@case(32, "DescribeConfigs", "DESCRIBE_CONFIGS on the TOPIC, the GROUP, or the CLUSTER for a broker",
      "TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED per resource")
def _describe_configs(env):
    env.topic("az-dc")
    node = str(env.broker.server.state.node_id)
    wanted = [(2, "az-dc"), (4, node), (32, "az-dc-g")]
    assert [r.error_code for r in describe_configs(env, *wanted)] == [
        E.topic_authorization_failed, E.cluster_authorization_failed, E.group_authorization_failed]
    env.grant(Op.DESCRIBE_CONFIGS, Rt.TOPIC, "az-dc")
    env.grant(Op.DESCRIBE_CONFIGS, Rt.CLUSTER)
    env.grant(Op.DESCRIBE_CONFIGS, Rt.GROUP, "az-dc-g")
    results = describe_configs(env, *wanted)
    assert [r.error_code for r in results] == [E.none] * 3 and all(r.configs for r in results)


def _alter_configs_case(env, key: int, version: int, topic: str, entry: dict):
    env.topic(topic)
    node = str(env.broker.server.state.node_id)
    extra = {"validate_only": False}

    def alter():
        return [r.error_code for r in env.req(kreq(key, version, resources=[
            {"resource_type": 2, "resource_name": topic, "configs": [{"name": "retention.ms", "value": "600000",
                                                                       **entry}]},
            {"resource_type": 4, "resource_name": node, "configs": []},
            {"resource_type": 32, "resource_name": topic + "-g", "configs": []}], **extra)).responses]
    assert alter() == [E.topic_authorization_failed, E.cluster_authorization_failed, E.group_authorization_failed]
    assert "retention.ms" not in env.broker.server.state.topics[topic].configs
    env.grant(Op.ALTER_CONFIGS, Rt.TOPIC, topic)
    env.grant(Op.ALTER_CONFIGS, Rt.CLUSTER)
    env.grant(Op.ALTER_CONFIGS, Rt.GROUP, topic + "-g")
    assert alter() == [E.none] * 3
    assert env.broker.server.state.topics[topic].configs["retention.ms"] == "600000"


@case(33, "AlterConfigs", "ALTER_CONFIGS on the TOPIC, the GROUP, or the CLUSTER for a broker",
      "TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED per resource")
def _alter_configs(env):
    _alter_configs_case(env, 33, 2, "az-ac", {})


@case(34, "AlterReplicaLogDirs", "ALTER on the CLUSTER", "CLUSTER_AUTHORIZATION_FAILED per partition")
def _alter_replica_log_dirs(env):
    env.topic("az-arld")
    path = os.path.abspath(env.broker.data_dir)

    def alter():
        return [p.error_code for r in env.req(kreq(34, 2, dirs=[{"path": path, "topics": [
            {"name": "az-arld", "partitions": [0]}]}])).results for p in r.partitions]
    assert alter() == [E.cluster_authorization_failed]
    env.grant(Op.DESCRIBE, Rt.CLUSTER)  # DESCRIBE does not imply ALTER
    assert alter() == [E.cluster_authorization_failed]
    env.grant(Op.ALTER, Rt.CLUSTER)
    assert alter() == [E.none]


@case(35, "DescribeLogDirs", "DESCRIBE on the CLUSTER", "CLUSTER_AUTHORIZATION_FAILED (v3+) and no log directory")
def _describe_log_dirs(env):
    env.topic("az-logdirs")
    refused = env.req(kreq(35, 4, topics=None))
    assert refused.error_code == E.cluster_authorization_failed and refused.results == ()
    assert env.req(kreq(35, 1, topics=None)).results == ()  # v1-2 have no error code: nothing is described
    env.grant(Op.DESCRIBE, Rt.TOPIC, "az-logdirs")  # a topic's DESCRIBE is not the cluster's
    assert env.req(kreq(35, 4, topics=None)).error_code == E.cluster_authorization_failed
    env.grant(Op.DESCRIBE, Rt.CLUSTER)
    allowed = env.req(kreq(35, 4, topics=[{"topic": "az-logdirs", "partitions": [0]}]))
    assert allowed.error_code == E.none
    [result] = allowed.results
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [("az-logdirs", [0])]


@case(37, "CreatePartitions", "ALTER on the TOPIC", "TOPIC_AUTHORIZATION_FAILED per topic")
def _create_partitions(env):
    env.topic("az-cp")

    def grow():
        return env.req(kreq(37, 3, topics=[{"name": "az-cp", "count": 2, "assignments": None}], timeout=10000,
                            validate_only=False)).results[0].error_code
    assert grow() == E.topic_authorization_failed
    assert len(env.broker.server.state.topics["az-cp"].partitions) == 1
    env.grant(Op.ALTER, Rt.TOPIC, "az-cp")
    assert grow() == E.none and len(env.broker.server.state.topics["az-cp"].partitions) == 2


@case(42, "DeleteGroups", "DELETE on the GROUP (any group type)", "GROUP_AUTHORIZATION_FAILED per group")
def _delete_groups(env):
    env.topic("az-dlg")
    with env.acl_lifted():
        assert commit_errors(simple_commit(env, "az-dlg-g", "az-dlg")) == {E.none}

    def delete():
        return env.req(kreq(42, 2, groups_names=["az-dlg-g"])).results[0].error_code
    assert delete() == E.group_authorization_failed
    assert "az-dlg-g" in env.broker.server.consumer_offsets.simple_group_ids()
    env.grant(Op.DELETE, Rt.GROUP, "az-dlg-g")
    assert delete() == E.none


@case(43, "ElectLeaders", "ALTER on the CLUSTER", "CLUSTER_AUTHORIZATION_FAILED for the request (v1+) and per "
      "partition")
def _elect_leaders(env):
    env.topic("az-el")

    def elect():
        resp = env.req(kreq(43, 2, election_type=0, topic_partitions=[{"topic": "az-el", "partitions": [0]}],
                            timeout=1000))
        return resp.error_code, resp.replica_election_results[0].partition_result[0].error_code
    assert elect() == (E.cluster_authorization_failed, E.cluster_authorization_failed)
    env.grant(Op.DESCRIBE, Rt.CLUSTER)
    assert elect() == (E.cluster_authorization_failed, E.cluster_authorization_failed)
    env.grant(Op.ALTER, Rt.CLUSTER)
    assert elect() == (E.none, E.election_not_needed)


@case(44, "IncrementalAlterConfigs", "ALTER_CONFIGS on the TOPIC, the GROUP, or the CLUSTER for a broker",
      "TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED per resource")
def _incremental_alter_configs(env):
    _alter_configs_case(env, 44, 1, "az-iac", {"config_operation": 0})


@case(45, "AlterPartitionReassignments", "ALTER on the CLUSTER", "CLUSTER_AUTHORIZATION_FAILED for the "
      "request and per partition")
def _alter_partition_reassignments(env):
    env.topic("az-apr")
    node = env.broker.server.state.node_id

    def alter():
        resp = env.req(kreq(45, 1, timeout=1000, allow_replication_factor_change=True, topics=[
            {"name": "az-apr", "partitions": [{"partition_index": 0, "replicas": [node]}]}]))
        return resp.error_code, resp.responses[0].partitions[0].error_code
    assert alter() == (E.cluster_authorization_failed, E.cluster_authorization_failed)
    env.grant(Op.DESCRIBE, Rt.CLUSTER)
    assert alter() == (E.cluster_authorization_failed, E.cluster_authorization_failed)
    env.grant(Op.ALTER, Rt.CLUSTER)
    assert alter() == (E.none, E.none)


@case(46, "ListPartitionReassignments", "DESCRIBE on the CLUSTER", "CLUSTER_AUTHORIZATION_FAILED")
def _list_partition_reassignments(env):
    env.topic("az-lpr")

    def ask():
        return env.req(kreq(46, 0, timeout=1000, topics=[{"name": "az-lpr", "partition_indexes": [0]}]))
    refused = ask()
    assert refused.error_code == E.cluster_authorization_failed
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in refused.topics] == [("az-lpr", [0])]
    env.grant(Op.DESCRIBE, Rt.CLUSTER)
    got = ask()
    assert got.error_code == E.none and got.topics == ()


@case(47, "OffsetDelete", "DELETE on the GROUP, READ on the TOPIC",
      "GROUP_AUTHORIZATION_FAILED for the request; TOPIC_AUTHORIZATION_FAILED per partition")
def _offset_delete(env):
    env.topic("az-od")
    with env.acl_lifted():
        assert commit_errors(simple_commit(env, "az-od-g", "az-od")) == {E.none}

    def delete():
        return env.req(kreq(47, 0, group_id="az-od-g", topics=[{"name": "az-od", "partitions": [
            {"partition_index": 0}]}]))
    assert delete().error_code == E.group_authorization_failed
    env.grant(Op.DELETE, Rt.GROUP, "az-od-g")
    got = delete()
    assert got.error_code == E.none and got.topics[0].partitions[0].error_code == E.topic_authorization_failed
    env.grant(Op.READ, Rt.TOPIC, "az-od")
    assert delete().topics[0].partitions[0].error_code == E.none


@case(48, "DescribeClientQuotas", "DESCRIBE_CONFIGS on the CLUSTER", "CLUSTER_AUTHORIZATION_FAILED")
def _describe_client_quotas(env):
    def describe():
        return env.req(kreq(48, 1, components=[], strict=False))
    refused = describe()
    assert refused.error_code == E.cluster_authorization_failed and refused.entries is None
    env.grant(Op.DESCRIBE_CONFIGS, Rt.CLUSTER)
    assert describe().error_code == E.none


@case(49, "AlterClientQuotas", "ALTER_CONFIGS on the CLUSTER", "CLUSTER_AUTHORIZATION_FAILED per entry")
def _alter_client_quotas(env):
    def alter():
        return env.req(kreq(49, 1, validate_only=True, entries=[{
            "entity": [{"entity_type": "client-id", "entity_name": "az-q"}],
            "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}])).entries[0].error_code
    assert alter() == E.cluster_authorization_failed
    env.grant(Op.ALTER_CONFIGS, Rt.CLUSTER)
    assert alter() == E.none


@case(17, "SaslHandshake", "nothing", "never refused (ILLEGAL_SASL_STATE on a listener without SASL)")
def _sasl_handshake(env):
    assert env.req(kreq(17, 1, mechanism="PLAIN")).error_code == E.illegal_sasl_state


@case(36, "SaslAuthenticate", "nothing", "never refused (ILLEGAL_SASL_STATE on a listener without SASL)")
def _sasl_authenticate(env):
    assert env.req(kreq(36, 2, auth_bytes=b"")).error_code == E.illegal_sasl_state


@case(50, "DescribeUserScramCredentials", "DESCRIBE on the CLUSTER", "CLUSTER_AUTHORIZATION_FAILED")
def _describe_user_scram_credentials(env):
    assert env.req(kreq(50, 0, users=None)).error_code == E.cluster_authorization_failed
    env.grant(Op.DESCRIBE, Rt.CLUSTER)
    assert env.req(kreq(50, 0, users=None)).error_code == E.none


@case(51, "AlterUserScramCredentials", "ALTER on the CLUSTER", "CLUSTER_AUTHORIZATION_FAILED per user")
def _alter_user_scram_credentials(env):
    def alter():
        return env.req(kreq(51, 0, deletions=[], upsertions=[{"name": "az-scram", "mechanism": 1,
                       "iterations": 4096, "salt": b"salt", "salted_password": b"p" * 32}])).results[0]
    assert alter().error_code == E.cluster_authorization_failed
    assert env.broker.server.state.metadata.scram_credential("az-scram", "SCRAM-SHA-256") is None
    env.grant(Op.ALTER, Rt.CLUSTER)
    assert alter().error_code == E.none


@case(55, "DescribeQuorum", "DESCRIBE on the CLUSTER", "CLUSTER_AUTHORIZATION_FAILED")
def _describe_quorum(env):
    def ask():
        return env.req(kreq(55, 2, topics=[{"topic_name": "__cluster_metadata", "partitions": [
            {"partition_index": 0}]}]))
    refused = ask()
    assert refused.error_code == E.cluster_authorization_failed and refused.topics == ()
    env.grant(Op.DESCRIBE_CONFIGS, Rt.CLUSTER)
    assert ask().error_code == E.cluster_authorization_failed
    env.grant(Op.DESCRIBE, Rt.CLUSTER)
    got = ask()
    assert got.error_code == E.none
    assert got.topics[0].partitions[0].leader_id == env.broker.server.state.node_id


@case(57, "UpdateFeatures", "ALTER on the CLUSTER", "CLUSTER_AUTHORIZATION_FAILED")
def _update_features(env):
    level = env.broker.server.state.feature_level("share.version")

    def update():
        return env.req(kreq(57, 1, timeout=10000, validate_only=True, feature_updates=[
            {"feature": "share.version", "max_version_level": level, "upgrade_type": 1}]))
    assert update().error_code == E.cluster_authorization_failed
    env.grant(Op.ALTER, Rt.CLUSTER)
    got = update()
    assert got.error_code == E.none and got.results[0].error_code == E.none


@case(60, "DescribeCluster", "nothing (its authorized operations: DESCRIBE on the CLUSTER)", "never refused")
def _describe_cluster(env):
    got = env.req(kreq(60, 1, include_cluster_authorized_operations=True))
    assert got.error_code == E.none and got.brokers and got.cluster_authorized_operations == 0
    env.grant(Op.DESCRIBE, Rt.CLUSTER)
    got = env.req(kreq(60, 1, include_cluster_authorized_operations=True))
    assert got.cluster_authorized_operations == operations_bit_field([Op.DESCRIBE])


@case(61, "DescribeProducers", "READ on the TOPIC", "TOPIC_AUTHORIZATION_FAILED per partition")
def _describe_producers(env):
    env.topic("az-dp")

    def ask():
        return [p.error_code for t in env.req(kreq(61, 0, topics=[{"name": "az-dp", "partition_indexes": [0]}])).topics
                for p in t.partitions]
    assert ask() == [E.topic_authorization_failed]
    env.grant(Op.DESCRIBE, Rt.TOPIC, "az-dp")  # DESCRIBE is not enough (KafkaApis asks READ)
    assert ask() == [E.topic_authorization_failed]
    env.grant(Op.READ, Rt.TOPIC, "az-dp")
    assert ask() == [E.none]


@case(74, "ListConfigResources", "DESCRIBE_CONFIGS on the CLUSTER", "CLUSTER_AUTHORIZATION_FAILED")
def _list_config_resources(env):
    env.topic("az-lcr")

    def ask():
        return env.req(kreq(74, 1, resource_types=[2]))
    refused = ask()
    assert refused.error_code == E.cluster_authorization_failed and refused.config_resources == ()
    env.grant(Op.DESCRIBE, Rt.CLUSTER)
    assert ask().error_code == E.cluster_authorization_failed
    env.grant(Op.DESCRIBE_CONFIGS, Rt.CLUSTER)
    got = ask()
    assert got.error_code == E.none and ("az-lcr", 2) in {(r.resource_name, r.resource_type)
                                                          for r in got.config_resources}


@case(75, "DescribeTopicPartitions", "DESCRIBE on the TOPIC", "TOPIC_AUTHORIZATION_FAILED for a topic named "
      "(existing or not), after the described ones; left out of an all-topics answer")
def _describe_topic_partitions(env):
    env.topic("az-dtp", 2)

    def ask(*names):
        return env.req(kreq(75, 0, topics=[{"name": n} for n in names], response_partition_limit=100, cursor=None))
    named = ask("az-dtp", "az-dtp-none").topics
    assert [(t.name, t.error_code, t.partitions) for t in named] == [
        ("az-dtp", E.topic_authorization_failed, ()), ("az-dtp-none", E.topic_authorization_failed, ())]
    assert {t.topic_id for t in named} <= {None, ZERO}  # existence not disclosed
    assert "az-dtp" not in {t.name for t in ask().topics}
    env.grant(Op.DESCRIBE, Rt.TOPIC, "az-dtp")
    [got, missing] = ask("az-dtp-none", "az-dtp").topics  # described first, refused after
    assert (got.name, got.error_code, len(got.partitions)) == ("az-dtp", E.none, 2)
    assert got.topic_authorized_operations == operations_bit_field([Op.DESCRIBE])
    assert (missing.name, missing.error_code) == ("az-dtp-none", E.topic_authorization_failed)
    assert "az-dtp" in {t.name for t in ask().topics}


def consumer_heartbeat(env, group, topic, member_id, epoch=0):
    return env.req(kreq(68, 1, group_id=group, member_id=member_id, member_epoch=epoch, rebalance_timeout=10000,
                        subscribed_topic_names=[topic], server_assignor=None, topic_partitions=[]))


@case(68, "ConsumerGroupHeartbeat", "READ on the GROUP, DESCRIBE on each subscribed TOPIC named",
      "GROUP_AUTHORIZATION_FAILED; TOPIC_AUTHORIZATION_FAILED")
def _consumer_group_heartbeat(env):
    env.topic("az-cgh")
    member = str(uuid.uuid4())[:22]
    assert consumer_heartbeat(env, "az-cgh-g", "az-cgh", member).error_code == E.group_authorization_failed
    env.grant(Op.READ, Rt.GROUP, "az-cgh-g")
    assert consumer_heartbeat(env, "az-cgh-g", "az-cgh", member).error_code == E.topic_authorization_failed
    env.grant(Op.DESCRIBE, Rt.TOPIC, "az-cgh")
    got = consumer_heartbeat(env, "az-cgh-g", "az-cgh", member)
    assert got.error_code == E.none and got.member_epoch > 0


@case(69, "ConsumerGroupDescribe", "DESCRIBE on the GROUP; DESCRIBE on every TOPIC its members are assigned",
      "GROUP_AUTHORIZATION_FAILED; TOPIC_AUTHORIZATION_FAILED for the group")
def _consumer_group_describe(env):
    env.topic("az-cgd")
    with env.acl_lifted():
        member = str(uuid.uuid4())[:22]
        assert consumer_heartbeat(env, "az-cgd-g", "az-cgd", member).error_code == E.none
        wait_until(lambda: consumer_heartbeat(env, "az-cgd-g", "az-cgd", member, 1).assignment is not None or True)

    def describe():
        return env.req(kreq(69, 1, group_ids=["az-cgd-g"], include_authorized_operations=True)).groups[0]
    assert describe().error_code == E.group_authorization_failed
    env.grant(Op.DESCRIBE, Rt.GROUP, "az-cgd-g")
    hidden = describe()
    assert hidden.error_code == E.topic_authorization_failed and hidden.members == ()
    env.grant(Op.DESCRIBE, Rt.TOPIC, "az-cgd")
    got = describe()
    assert got.error_code == E.none and len(got.members) == 1
    assert got.authorized_operations == operations_bit_field([Op.DESCRIBE])


# ----------------------------------------------------------------------------- share groups (KIP-932)

def share_member(env, group: str, topic: str) -> ShareClient:
    """A share-group member assigned `topic` (READ on the group and DESCRIBE on the topic lifted)."""
    member = ShareClient(env.broker.bootstrap_servers, group)
    with env.acl_lifted():
        assert member.join([topic]).error_code == E.none
        member.wait_for_assignment()
    return member


@case(76, "ShareGroupHeartbeat", "READ on the GROUP, DESCRIBE on each subscribed TOPIC named",
      "GROUP_AUTHORIZATION_FAILED; TOPIC_AUTHORIZATION_FAILED")
def _share_group_heartbeat(env):
    env.topic("az-sgh")
    with ShareClient(env.broker.bootstrap_servers, "az-sgh-g") as member:
        assert member.join(["az-sgh"]).error_code == E.group_authorization_failed
        env.grant(Op.READ, Rt.GROUP, "az-sgh-g")
        assert member.join(["az-sgh"]).error_code == E.topic_authorization_failed
        env.grant(Op.DESCRIBE, Rt.TOPIC, "az-sgh")
        got = member.join(["az-sgh"])
        assert got.error_code == E.none and got.member_epoch > 0


@case(77, "ShareGroupDescribe", "DESCRIBE on the GROUP; DESCRIBE on every TOPIC its members are assigned",
      "GROUP_AUTHORIZATION_FAILED; TOPIC_AUTHORIZATION_FAILED for the group")
def _share_group_describe(env):
    env.topic("az-sgd")
    with share_member(env, "az-sgd-g", "az-sgd") as member:
        assert member.describe().groups[0].error_code == E.group_authorization_failed
        env.grant(Op.DESCRIBE, Rt.GROUP, "az-sgd-g")
        hidden = member.describe().groups[0]
        assert hidden.error_code == E.topic_authorization_failed and hidden.members == ()
        env.grant(Op.DESCRIBE, Rt.TOPIC, "az-sgd")
        got = member.describe(include_authorized_operations=True).groups[0]
        assert got.error_code == E.none and len(got.members) == 1
        assert got.authorized_operations == operations_bit_field([Op.DESCRIBE])


@case(78, "ShareFetch", "READ on the GROUP, READ on the TOPIC",
      "GROUP_AUTHORIZATION_FAILED for the request; TOPIC_AUTHORIZATION_FAILED per partition (and per "
      "acknowledged partition)")
def _share_fetch(env):
    topic = env.topic("az-sf")
    with share_member(env, "az-sf-g", "az-sf") as member:
        assert member.fetch(max_wait_ms=0).error_code == E.group_authorization_failed
        env.grant(Op.READ, Rt.GROUP, "az-sf-g")
        got = member.fetch(max_wait_ms=0)
        assert got.error_code == E.none, got
        [part] = [p for t in got.responses for p in t.partitions]
        assert part.error_code == E.topic_authorization_failed and not part.acquired_records
        env.produce("az-sf")  # once the share partition began (at the end: share.auto.offset.reset latest)
        assert not member.fetch(max_wait_ms=0).responses[0].partitions[0].acquired_records
        env.grant(Op.READ, Rt.TOPIC, "az-sf")
        got = member.fetch(max_wait_ms=5000)
        [part] = [p for t in got.responses for p in t.partitions]
        assert part.error_code == E.none and part.acquired_records
        assert got.responses[0].topic_id == topic.topic_id


@case(79, "ShareAcknowledge", "READ on the GROUP, READ on the TOPIC",
      "GROUP_AUTHORIZATION_FAILED for the request; TOPIC_AUTHORIZATION_FAILED per partition")
def _share_acknowledge(env):
    topic = env.topic("az-sa")
    with share_member(env, "az-sa-g", "az-sa") as member:
        with env.acl_lifted():
            member.fetch(max_wait_ms=0)  # the share partition begins at the log end
            env.produce("az-sa", 2)
            got = member.fetch(max_wait_ms=5000)
            assert got.error_code == E.none and got.responses[0].partitions[0].acquired_records
        acks = {(topic.topic_id, 0): [(0, 0, ACCEPT)]}
        assert member.acknowledge(acks).error_code == E.group_authorization_failed
        env.grant(Op.READ, Rt.GROUP, "az-sa-g")
        got = member.acknowledge(acks)
        assert got.error_code == E.none
        assert got.responses[0].partitions[0].error_code == E.topic_authorization_failed
        env.grant(Op.READ, Rt.TOPIC, "az-sa")
        got = member.acknowledge(acks)
        assert got.error_code == E.none and got.responses[0].partitions[0].error_code == E.none


def empty_share_group(env, group: str, topic: str) -> None:
    """A share group with share state for `topic` and no members."""
    member = share_member(env, group, topic)
    with env.acl_lifted():
        member.fetch(max_wait_ms=0)  # the share partition begins at the log end
        env.produce(topic, 1)
        got = member.fetch(max_wait_ms=5000)
        assert got.error_code == E.none and got.responses[0].partitions[0].acquired_records
        member.leave()
    member.close()


@case(90, "DescribeShareGroupOffsets", "DESCRIBE on the GROUP, DESCRIBE on the TOPIC",
      "GROUP_AUTHORIZATION_FAILED for the group; TOPIC_AUTHORIZATION_FAILED per partition named, left out "
      "when all are asked for")
def _describe_share_group_offsets(env):
    env.topic("az-dso")
    empty_share_group(env, "az-dso-g", "az-dso")

    def ask(topics):
        return env.req(kreq(90, 1, groups=[{"group_id": "az-dso-g", "topics": topics}])).groups[0]
    named = [{"topic_name": "az-dso", "partitions": [0]}]
    assert ask(named).error_code == E.group_authorization_failed
    env.grant(Op.DESCRIBE, Rt.GROUP, "az-dso-g")
    got = ask(named)
    assert got.error_code == E.none and got.topics[0].partitions[0].error_code == E.topic_authorization_failed
    assert ask(None).topics == ()
    env.grant(Op.DESCRIBE, Rt.TOPIC, "az-dso")
    assert ask(named).topics[0].partitions[0].error_code == E.none
    assert [t.topic_name for t in ask(None).topics] == ["az-dso"]


@case(91, "AlterShareGroupOffsets", "READ on the GROUP, READ on the TOPIC",
      "GROUP_AUTHORIZATION_FAILED for the request; TOPIC_AUTHORIZATION_FAILED per partition")
def _alter_share_group_offsets(env):
    env.topic("az-aso")
    empty_share_group(env, "az-aso-g", "az-aso")

    def alter():
        return env.req(kreq(91, 0, group_id="az-aso-g", topics=[{"topic_name": "az-aso", "partitions": [
            {"partition_index": 0, "start_offset": 1}]}]))
    assert alter().error_code == E.group_authorization_failed
    env.grant(Op.READ, Rt.GROUP, "az-aso-g")
    got = alter()
    assert got.responses[0].partitions[0].error_code == E.topic_authorization_failed
    env.grant(Op.READ, Rt.TOPIC, "az-aso")
    got = alter()
    assert got.error_code == E.none and got.responses[0].partitions[0].error_code == E.none


@case(92, "DeleteShareGroupOffsets", "DELETE on the GROUP, READ on the TOPIC",
      "GROUP_AUTHORIZATION_FAILED for the request; TOPIC_AUTHORIZATION_FAILED per topic")
def _delete_share_group_offsets(env):
    env.topic("az-dso2")
    empty_share_group(env, "az-dso2-g", "az-dso2")

    def delete():
        return env.req(kreq(92, 0, group_id="az-dso2-g", topics=[{"topic_name": "az-dso2"}]))
    assert delete().error_code == E.group_authorization_failed
    env.grant(Op.READ, Rt.GROUP, "az-dso2-g")  # KIP-932's table says READ; Kafka asks DELETE
    assert delete().error_code == E.group_authorization_failed
    env.grant(Op.DELETE, Rt.GROUP, "az-dso2-g")
    got = delete()
    assert got.error_code == E.none and got.responses[0].error_code == E.topic_authorization_failed
    env.grant(Op.READ, Rt.TOPIC, "az-dso2")
    got = delete()
    assert got.error_code == E.none and got.responses[0].error_code == E.none


@case(32000, "QuafkaDescribeInFlight (extension)", "DESCRIBE on the GROUP, DESCRIBE on the TOPIC",
      "GROUP_AUTHORIZATION_FAILED for the request; TOPIC_AUTHORIZATION_FAILED per topic named, left out "
      "when all are asked for")
def _describe_in_flight(env):
    from quafka.protocol.extensions import (DescribeInFlightTopic, QuafkaDescribeInFlightRequest,
                                            QuafkaDescribeInFlightResponse)
    env.topic("az-dif")
    empty_share_group(env, "az-dif-g", "az-dif")

    def ask(topics=()):
        return env.ext(QuafkaDescribeInFlightRequest(group_id="az-dif-g", topics=topics),
                       QuafkaDescribeInFlightResponse)
    assert ask().error_code == E.group_authorization_failed
    env.grant(Op.DESCRIBE, Rt.GROUP, "az-dif-g")
    got = ask()
    assert got.error_code == E.none and got.topics == ()
    named = ask((DescribeInFlightTopic(topic_name="az-dif", partitions=(0,)),))
    assert named.topics[0].error_code == E.topic_authorization_failed
    env.grant(Op.DESCRIBE, Rt.TOPIC, "az-dif")
    got = ask()
    assert [t.topic_name for t in got.topics] == ["az-dif"] and got.topics[0].error_code == E.none


@case(32001, "QuafkaAlterInFlight (extension)", "ALTER on the GROUP, READ on the TOPIC",
      "GROUP_AUTHORIZATION_FAILED; TOPIC_AUTHORIZATION_FAILED")
def _alter_in_flight(env):
    from quafka.protocol.extensions import ACTION_RELEASE, QuafkaAlterInFlightRequest, QuafkaAlterInFlightResponse
    env.topic("az-aif")
    empty_share_group(env, "az-aif-g", "az-aif")

    def alter():
        return env.ext(QuafkaAlterInFlightRequest(group_id="az-aif-g", topic_name="az-aif", partition_index=0,
                                                  first_offset=0, last_offset=0, action=ACTION_RELEASE,
                                                  validate_only=True), QuafkaAlterInFlightResponse)
    assert alter().error_code == E.group_authorization_failed
    env.grant(Op.READ, Rt.GROUP, "az-aif-g")  # a consumer's grant does not allow force actions
    env.grant(Op.DESCRIBE, Rt.GROUP, "az-aif-g")
    assert alter().error_code == E.group_authorization_failed
    env.grant(Op.ALTER, Rt.GROUP, "az-aif-g")
    assert alter().error_code == E.topic_authorization_failed
    env.grant(Op.READ, Rt.TOPIC, "az-aif")
    assert alter().error_code == E.none


# ----------------------------------------------------------------------------- the tests

def test_every_registered_api_has_a_case():
    """A handler registered without a case here fails the suite (and the docs table misses it)."""
    assert sorted(load_handlers()) == sorted(CASES)


@pytest.mark.parametrize("api_key", sorted(CASES), ids=lambda k: f"{k}-{CASES[k].api.split()[0]}")
def test_api_refused_without_permission_and_served_with_it(env, api_key):
    CASES[api_key].run(env)


# KIP-932's "Access control" table as kafka-reference §2.9 states it (it wins over the KIP where they
# differ: DeleteShareGroupOffsets needs DELETE on the group), plus the group APIs share groups use.
KIP_932_TABLE = [
    (76, "READ on the GROUP, DESCRIBE on each subscribed TOPIC named"),
    (77, "DESCRIBE on the GROUP; DESCRIBE on every TOPIC its members are assigned"),
    (78, "READ on the GROUP, READ on the TOPIC"),
    (79, "READ on the GROUP, READ on the TOPIC"),
    (90, "DESCRIBE on the GROUP, DESCRIBE on the TOPIC"),
    (91, "READ on the GROUP, READ on the TOPIC"),
    (92, "DELETE on the GROUP, READ on the TOPIC"),
    (42, "DELETE on the GROUP (any group type)"),
    (16, "DESCRIBE on the CLUSTER (every group) or on each GROUP"),
]


def _delete_share_group(env):
    env.topic("az-k-dg")
    empty_share_group(env, "az-k-dg-g", "az-k-dg")

    def delete():
        return env.req(kreq(42, 2, groups_names=["az-k-dg-g"])).results[0].error_code
    env.grant(Op.READ, Rt.GROUP, "az-k-dg-g")
    env.grant(Op.DESCRIBE, Rt.GROUP, "az-k-dg-g")
    assert delete() == E.group_authorization_failed
    assert env.broker.server.share_groups.coordinator.group("az-k-dg-g") is not None
    env.grant(Op.DELETE, Rt.GROUP, "az-k-dg-g")
    assert delete() == E.none
    assert env.broker.server.share_groups.coordinator.group("az-k-dg-g") is None


def _list_share_groups(env):
    env.topic("az-k-lg")
    with share_member(env, "az-k-lg-g", "az-k-lg"):
        def listed():
            return {g.group_id: g.group_type for g in env.req(kreq(16, 5, types_filter=["share"])).groups}
        assert "az-k-lg-g" not in listed()
        env.grant(Op.DESCRIBE, Rt.GROUP, "az-k-lg-g")
        assert listed() == {"az-k-lg-g": "share"}


KIP_932_RUNS = {42: _delete_share_group, 16: _list_share_groups}


@pytest.fixture(scope="module")
def kip_broker():
    """A broker of its own, so the rows' groups do not meet the ones of the per-API cases."""
    with EmbeddedBroker(config=SECURED) as broker:
        acl = AclEnv(broker)
        env = Env(broker, acl)
        yield env
        env.raw.close()
        acl.close()


@pytest.mark.parametrize("api_key,needs", KIP_932_TABLE, ids=[str(k) for k, _n in KIP_932_TABLE])
def test_kip_932_table_row(kip_broker, api_key, needs):
    """One row of KIP-932's table: the permission the case checks is the one the table names."""
    kip_broker.acl.deny_all()
    assert CASES[api_key].needs == needs
    KIP_932_RUNS.get(api_key, CASES[api_key].run)(kip_broker)


# ----------------------------------------------------------------------------- internal topics, hot paths

def test_internal_topics_refuse_produce_and_delete_records_even_when_allowed(env):
    """ReplicaManager.appendToLocalLog / deleteRecordsOnLocalLog: an internal topic takes neither,
    whatever the ACLs; without WRITE/DELETE the answer is the authorization error first."""
    env.topic("az-it")
    with share_member(env, "az-it-g", "az-it"):
        pass
    for name in ("__consumer_offsets", "__share_group_state"):
        assert env.req(produce_req(name)).responses[0].partition_responses[0].error_code == \
            E.topic_authorization_failed
    env.grant(Op.ALL, Rt.TOPIC, "*")
    for name in ("__share_group_state",):
        assert env.req(produce_req(name)).responses[0].partition_responses[0].error_code == \
            E.invalid_topic_exception
        got = env.req(kreq(21, 2, timeout=10000, topics=[{"name": name, "partitions": [
            {"partition_index": 0, "offset": 0}]}])).topics[0].partitions[0]
        assert got.error_code == E.invalid_topic_exception


AUDIT = re.compile(r"operation = (\w+) from host = " + re.escape(CLIENT_HOST) +
                   r" on resource = (\w+):LITERAL:(\S+) based on")


def questions(caplog) -> list:
    """What the authorizer was asked for the client (its audit lines at DEBUG), then forgotten."""
    asked = [(Op[m[1]], Rt[m[2].upper()], m[3]) for r in caplog.records
             if r.name == "quafka.authorizer" and (m := AUDIT.search(r.getMessage()))]
    caplog.clear()
    return asked


def test_hot_paths_ask_once_per_topic_per_request(env, caplog):
    """Produce, Fetch, ShareFetch and ShareAcknowledge ask the authorizer once per topic, however
    many partitions the request carries (counted from the authorizer's audit lines)."""
    topic = env.topic("az-hot", 3)
    env.grant(Op.ALL, Rt.TOPIC, "az-hot")
    env.grant(Op.ALL, Rt.GROUP, "az-hot-g")
    caplog.set_level(logging.DEBUG, logger="quafka.authorizer")
    parts = [{"index": i, "records": build_batch([(None, b"v")])} for i in range(3)]
    caplog.clear()
    resp = env.req(kreq(0, 9, acks=-1, timeout=10000, topic_data=[{"name": "az-hot", "partition_data": parts}]))
    assert {p.error_code for p in resp.responses[0].partition_responses} == {E.none}
    assert questions(caplog) == [(Op.WRITE, Rt.TOPIC, "az-hot")]
    resp = env.req(kreq(1, 12, max_wait=0, max_bytes=1 << 20, topics=[{"topic": "az-hot", "partitions": [
        {"partition": i, "fetch_offset": 0, "partition_max_bytes": 1 << 20} for i in range(3)]}]))
    assert all(p.records for p in resp.responses[0].partitions)
    assert questions(caplog) == [(Op.READ, Rt.TOPIC, "az-hot")]
    with ShareClient(env.broker.bootstrap_servers, "az-hot-g") as member:
        member.join(["az-hot"])
        member.wait_for_assignment(lambda a: len(a.get(topic.topic_id, [])) == 3)
        member.fetch(max_wait_ms=0)  # opens the session
        caplog.clear()
        got = member.fetch(max_wait_ms=2000)
        assert got.error_code == E.none
        assert questions(caplog) == [(Op.READ, Rt.GROUP, "az-hot-g"), (Op.READ, Rt.TOPIC, "az-hot")]
        acks = {(topic.topic_id, i): [(0, 0, ACCEPT)] for i in range(3)}
        member.acknowledge(acks)
        assert questions(caplog) == [(Op.READ, Rt.GROUP, "az-hot-g"), (Op.READ, Rt.TOPIC, "az-hot")]


def test_a_regex_subscription_is_assigned_only_the_topics_the_member_may_describe(env):
    """ConsumerGroupHeartbeat with SubscribedTopicRegex: the topics the regex resolves to are filtered
    by the member's DESCRIBE permission (TopicRegexResolver.filterTopicDescribeAuthorizedTopics, with
    the heartbeating member's context: GroupMetadataManager.maybeUpdateRegularExpressions). A DESCRIBE
    granted later is assigned at the group's next resolution, which a created topic brings (as in
    Kafka, the grant alone does not)."""
    for name in ("azrx-a", "azrx-b"):
        env.topic(name, 2)
    topic_id = {n: env.broker.server.state.topics[n].topic_id for n in ("azrx-a", "azrx-b")}
    env.grant(Op.READ, Rt.GROUP, "azrx-g")
    env.grant(Op.DESCRIBE, Rt.TOPIC, "azrx-a")
    member = str(uuid.uuid4())[:22]
    owned: dict = {}
    epoch = 0

    def heartbeat():
        nonlocal epoch
        got = env.req(kreq(68, 1, group_id="azrx-g", member_id=member, member_epoch=epoch,
                           rebalance_timeout=10000, subscribed_topic_names=None if epoch else [],
                           subscribed_topic_regex="azrx-.*" if epoch == 0 else None, server_assignor=None,
                           topic_partitions=[{"topic_id": t, "partitions": sorted(ps)} for t, ps in owned.items()]))
        assert got.error_code == E.none, got
        epoch = got.member_epoch
        if got.assignment is not None:
            owned.clear()
            owned.update({tp.topic_id: set(tp.partitions) for tp in got.assignment.topic_partitions})
        return {t: len(ps) for t, ps in owned.items() if ps}

    assert heartbeat() == {topic_id["azrx-a"]: 2}
    # a second heartbeat: if the join created __consumer_offsets, this one resolves again (filtered)
    assert heartbeat() == {topic_id["azrx-a"]: 2}
    env.grant(Op.DESCRIBE, Rt.TOPIC, "azrx-b")
    assert heartbeat() == {topic_id["azrx-a"]: 2}  # no resolution yet: an ACL change brings none
    env.topic("azrx-c", 1)  # a topic created (not describable): the group's regexes resolve again
    wait_until(lambda: heartbeat() == {topic_id["azrx-a"]: 2, topic_id["azrx-b"]: 2},
               message="azrx-b assigned once the regex resolved again")
    [group] = env.broker.call(env.broker.server.consumer_groups.describe, ["azrx-g"])
    assert {n for _t, n, _ps in group.members[0].assignment} == {"azrx-a", "azrx-b"}


def test_without_an_authorizer_authorized_operations_are_all_supported_ones(make_broker):
    """Kafka's AuthHelper.authorizedOperations with no authorizer: every operation the resource type
    supports (quafka answered INT32_MIN before)."""
    broker = make_broker(config=CONFIG)
    with RawClient(broker.bootstrap_servers) as raw:
        got = raw.request(kreq(60, 1, include_cluster_authorized_operations=True))
        assert got.cluster_authorized_operations == operations_bit_field(SUPPORTED_OPERATIONS[Rt.CLUSTER])
        broker.call(lambda: broker.server.state.create_topic("ops", 1, 1, {}))
        [t] = raw.request(metadata_req("ops", include_ops=True)).topics
        assert t.topic_authorized_operations == operations_bit_field(SUPPORTED_OPERATIONS[Rt.TOPIC])


# ----------------------------------------------------------------------------- docs/security.md

SECTION = "## Authorization: what each API needs"


def render_table() -> str:
    lines = ["| API (key) | Needs | Without it |", "|---|---|---|"]
    for key in sorted(CASES):
        c = CASES[key]
        lines.append(f"| {c.api} ({key}) | {c.needs} | {c.refused} |")
    return "\n".join(lines)


def test_docs_table_matches_the_cases():
    """docs/security.md's table is this module's CASES (rendered by render_table)."""
    text = DOCS.read_text()
    assert SECTION in text
    section = text.split(SECTION, 1)[1]
    lines = section[section.index("| API (key) |"):].splitlines()
    table = "\n".join(lines[:next((i for i, line in enumerate(lines) if not line.startswith("|")), len(lines))])
    expected = render_table()
    assert table == expected, f"docs/security.md's table is stale; it should read:\n{expected}"
