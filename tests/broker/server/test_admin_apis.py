"""The admin APIs a one-broker cluster answers (issue 31), over loopback TCP with third-party admin
clients: kafka-python's KafkaAdminClient (describe_topic_partitions, alter_replica_log_dirs,
describe_metadata_quorum, elect_leaders, alter/list_partition_reassignments,
list_config_resources) and confluent-kafka's AdminClient.elect_leaders; raw kio requests for what
neither client sends (a bad cursor, a foreign quorum partition, v0 of ListConfigResources).

Each answer is Kafka's for a cluster of one broker; the handler modules cite the Kafka code they
follow (handlers/describe_topic_partitions.py, log_dirs.py, quorum.py, replicas.py,
config_resources.py). Permissions are covered in test_authorization.py.
"""

from __future__ import annotations

import os

import pytest
from confluent_kafka import ElectionType, KafkaError
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition, TopicPartitionReplica
from kafka import errors as Errors
from kafka.admin import KafkaAdminClient

from support import RawClient
from support.acl_fixtures import kreq

from quafka.client import Admin
from quafka.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.timeout(60)

ADMIN_KEYS = {34: (1, 2), 43: (0, 2), 45: (0, 1), 46: (0, 0), 55: (0, 2), 74: (0, 1), 75: (0, 0)}


@pytest.fixture(scope="module")
def cluster():
    from quafka import EmbeddedBroker
    with EmbeddedBroker() as broker:
        with Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
            admin.create_topics({"pages-a": (5, 1), "pages-b": (2, 1), "pages-c": (1, 1)})
        client = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        try:
            yield broker, client
        finally:
            client.close()


@pytest.fixture
def raw(cluster):
    with RawClient(cluster[0].bootstrap_servers) as client:
        yield client


def test_api_versions_advertise_the_admin_apis(raw):
    resp = raw.request(kreq(18, 3, client_software_name="t", client_software_version="1"))
    versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert {k: versions.get(k) for k in ADMIN_KEYS} == ADMIN_KEYS


# ----------------------------------------------------------------------------- DescribeTopicPartitions

def pages(client, topics, limit):
    """Every page kafka-python's describe_topic_partitions returns, following NextCursor."""
    got, cursor = [], None
    while True:
        page = client.describe_topic_partitions(topics, response_partition_limit=limit, cursor=cursor)
        got.append([(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in page["topics"]])
        cursor = page["next_cursor"]
        if cursor is None:
            return got
        got[-1].append(("cursor", (cursor["topic_name"], cursor["partition_index"])))


def test_describe_topic_partitions_pages_through_the_cursor(cluster):
    broker, client = cluster
    assert pages(client, ["pages-b", "pages-a"], 3) == [
        [("pages-a", [0, 1, 2]), ("cursor", ("pages-a", 3))],
        [("pages-a", [3, 4]), ("pages-b", [0]), ("cursor", ("pages-b", 1))],
        [("pages-b", [1])],
    ]
    # a page filled exactly at a topic's end points the cursor at the next topic's partition 0
    assert pages(client, ["pages-a", "pages-b"], 5) == [
        [("pages-a", [0, 1, 2, 3, 4]), ("cursor", ("pages-b", 0))], [("pages-b", [0, 1])]]


def test_describe_topic_partitions_describes_each_partition_of_one_node(cluster):
    broker, client = cluster
    node = broker.server.state.node_id
    [topic] = client.describe_topic_partitions(["pages-c"])["topics"]
    assert (topic["error_code"], topic["is_internal"]) == (0, False)
    assert topic["topic_id"] == broker.server.state.topics["pages-c"].topic_id
    assert topic["topic_authorized_operations"] > 0  # always filled in: no authorizer allows everything
    [p] = topic["partitions"]
    assert (p["leader_id"], p["leader_epoch"], p["replica_nodes"], p["isr_nodes"], p["offline_replicas"]) == \
        (node, 0, [node], [node], [])


def test_describe_topic_partitions_all_topics_and_errors(cluster, raw):
    _broker, client = cluster
    everything = client.describe_topic_partitions([])
    assert {"pages-a", "pages-b", "pages-c"} <= {t["name"] for t in everything["topics"]}
    assert [t["name"] for t in everything["topics"]] == sorted(t["name"] for t in everything["topics"])
    named = client.describe_topic_partitions(["no-such-topic", "bad/name"])["topics"]
    assert {t["name"]: (t["error_code"], t["partitions"]) for t in named} == {
        "no-such-topic": (E.unknown_topic_or_partition, []), "bad/name": (E.invalid_topic_exception, [])}
    # the cursor's topic must be among those named, and its partition not negative
    for cursor in ({"topic_name": "pages-c", "partition_index": 0}, {"topic_name": "pages-a", "partition_index": -1}):
        resp = raw.request(kreq(75, 0, topics=[{"name": "pages-a"}], response_partition_limit=10, cursor=cursor))
        assert [(t.name, t.error_code, t.partitions) for t in resp.topics] == [("pages-a", E.invalid_request, ())]
    # a limit of 0 still describes one partition (Kafka: at least 1)
    resp = raw.request(kreq(75, 0, topics=[{"name": "pages-c"}], response_partition_limit=0, cursor=None))
    assert [len(t.partitions) for t in resp.topics] == [1] and resp.next_cursor is None


# ----------------------------------------------------------------------------- AlterReplicaLogDirs

def test_alter_replica_log_dirs_with_one_log_directory(cluster):
    broker, client = cluster
    path = os.path.abspath(broker.data_dir)
    node = broker.server.state.node_id
    got = client.alter_replica_log_dirs({
        TopicPartitionReplica("pages-a", 0, node): path,          # where it already is: nothing to move
        TopicPartitionReplica("pages-a", 9, node): path,          # no such replica here
        TopicPartitionReplica("pages-b", 0, node): path + "-elsewhere"})  # not a configured log directory
    assert got == {TopicPartitionReplica("pages-a", 0, node): Errors.NoError,
                   TopicPartitionReplica("pages-a", 9, node): Errors.ReplicaNotAvailableError,
                   TopicPartitionReplica("pages-b", 0, node): Errors.LogDirNotFoundError}
    assert os.path.isdir(os.path.join(path, "pages-a-0"))


def test_alter_replica_log_dirs_refuses_a_name_too_long_for_a_future_log(cluster, raw):
    path = os.path.abspath(cluster[0].data_dir)
    resp = raw.request(kreq(34, 2, dirs=[{"path": path, "topics": [{"name": "t" * 249, "partitions": [0]}]}]))
    assert [(r.topic_name, [p.error_code for p in r.partitions]) for r in resp.results] == \
        [("t" * 249, [E.invalid_topic_exception])]


# ----------------------------------------------------------------------------- DescribeQuorum

def test_describe_metadata_quorum_is_one_voter_leading(cluster, raw):
    broker, client = cluster
    node = broker.server.state.node_id
    quorum = client.describe_metadata_quorum()
    [topic] = quorum["topics"]
    [part] = topic["partitions"]
    assert (topic["topic_name"], part["partition_index"], part["error"]) == ("__cluster_metadata", 0, None)
    assert (part["leader_id"], part["leader_epoch"], part["high_watermark"]) == (node, 1, -1)
    assert [v["replica_id"] for v in part["current_voters"]] == [node] and part["observers"] == []
    [voter] = part["current_voters"]
    assert voter["last_caught_up_timestamp"] > 0 and voter["replica_directory_id"] is None  # the zero UUID
    host, port = broker.server.state.advertised
    [n] = quorum["nodes"]
    assert n["node_id"] == node and (host, port) in {(listener["host"], listener["port"]) for listener in n["listeners"]}
    # any other partition: UNKNOWN_TOPIC_OR_PARTITION for each partition named
    resp = raw.request(kreq(55, 2, topics=[{"topic_name": "__cluster_metadata", "partitions": [
        {"partition_index": 1}]}]))
    assert resp.error_code == E.none
    assert [(p.partition_index, p.error_code) for t in resp.topics for p in t.partitions] == \
        [(1, E.unknown_topic_or_partition)]
    v0 = raw.request(kreq(55, 0, topics=[{"topic_name": "__cluster_metadata", "partitions": [
        {"partition_index": 0}]}]))
    assert [v.replica_id for v in v0.topics[0].partitions[0].current_voters] == [node]


# ----------------------------------------------------------------------------- ElectLeaders

def test_elect_leaders_is_never_needed_on_one_broker(cluster):
    broker, client = cluster
    confluent = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for election in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        got = confluent.elect_leaders(election, [CTopicPartition("pages-b", 0), CTopicPartition("pages-b", 7)]).result(
            timeout=10)
        codes = {(tp.topic, tp.partition): e.code() for tp, e in got.items()}
        assert codes == {("pages-b", 0): KafkaError.ELECTION_NOT_NEEDED,
                         ("pages-b", 7): KafkaError.UNKNOWN_TOPIC_OR_PART}
    # kafka-python names every partition it knows of; ELECTION_NOT_NEEDED is not an error to it
    named = client.elect_leaders(0, ["pages-a"])
    assert {(r.topic, p.partition_id, p.error_code) for r in named.replica_election_results
            for p in r.partition_result} == {("pages-a", i, E.election_not_needed) for i in range(5)}


def test_elect_leaders_for_every_partition_lists_each_topic_and_no_partition(cluster, raw):
    """Null partitions: every topic, and the partitions that need no election (all) left out."""
    resp = raw.request(kreq(43, 2, election_type=0, topic_partitions=None, timeout=1000))
    assert resp.error_code == E.none
    results = {r.topic: r.partition_result for r in resp.replica_election_results}
    assert {"pages-a", "pages-b", "pages-c"} <= set(results) and not any(results.values())


def test_elect_leaders_unknown_election_type_is_invalid(cluster, raw):
    resp = raw.request(kreq(43, 2, election_type=5, topic_partitions=[{"topic": "pages-a", "partitions": [0]}],
                            timeout=1000))
    assert resp.error_code == E.invalid_request
    assert resp.replica_election_results[0].partition_result[0].error_code == E.invalid_request


# ----------------------------------------------------------------------------- reassignments

def test_partition_reassignments_on_one_broker(cluster):
    broker, client = cluster
    node = broker.server.state.node_id
    got = client.alter_partition_reassignments({
        TopicPartition("pages-a", 0): [node],          # the current assignment: done at once
        TopicPartition("pages-a", 1): [node + 1],      # no such broker
        TopicPartition("pages-a", 2): [node, node],    # twice
        TopicPartition("pages-a", 3): None,            # cancel: none in progress
        TopicPartition("pages-x", 0): [node]})
    assert got == {TopicPartition("pages-a", 0): None,
                   TopicPartition("pages-a", 1): Errors.InvalidReplicationAssignmentError,
                   TopicPartition("pages-a", 2): Errors.InvalidReplicationAssignmentError,
                   TopicPartition("pages-a", 3): Errors.NoReassignmentInProgressError,
                   TopicPartition("pages-x", 0): Errors.UnknownTopicOrPartitionError}
    assert client.list_partition_reassignments() == {}
    assert client.list_partition_reassignments({"pages-a": [0, 1]}) == {}


# ----------------------------------------------------------------------------- ListConfigResources

def test_list_config_resources(cluster, raw):
    broker, client = cluster
    with Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        admin.alter_configs("group", "lcr-group", {"share.record.lock.duration.ms": "20000"})
    got = client.list_config_resources()
    assert got["group"] == ["lcr-group"] and got["broker"] == [str(broker.server.state.node_id)]
    assert {"pages-a", "pages-b", "pages-c"} <= set(got["topic"]) and got.keys() == {"group", "broker", "topic"}
    assert client.list_config_resources(["TOPIC"]).keys() == {"topic"}
    # a type the version does not know: UNSUPPORTED_VERSION; v0 lists client-metrics resources (none)
    assert raw.request(kreq(74, 1, resource_types=[64])).error_code == E.unsupported_version
    v0 = raw.request(kreq(74, 0))
    assert (v0.error_code, v0.config_resources) == (E.none, ())
