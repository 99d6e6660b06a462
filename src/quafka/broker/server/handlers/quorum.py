"""DescribeQuorum (key 55), v0-v2: the KRaft metadata quorum, which on quafka is one voter.

A Kafka broker forwards DescribeQuorum to the controller (`KafkaApis`: forwardToController), which
asks DESCRIBE on the CLUSTER (`ControllerApis.handleDescribeQuorum`; without it the answer is the
top-level CLUSTER_AUTHORIZATION_FAILED) and has its Raft client answer
(`KafkaRaftClient.handleDescribeQuorumRequest`): a request that names anything but the one
partition `__cluster_metadata`-0 gets UNKNOWN_TOPIC_OR_PARTITION for each partition it names;
otherwise the leader describes the quorum (`RaftUtil.singletonDescribeQuorumResponse`). The
error answer's other fields are the message's defaults, 0 (`DescribeQuorumRequest.getPartitionLevelErrorResponse`).

quafka's single broker is its own controller, so the quorum is one voter, this node, which leads
it; there are no observers (a combined broker-controller is a voter, not an observer). Leader epoch
1: the one election a lone voter ever wins (quafka never holds another). quafka keeps its metadata
in a journal (server/metadata_store.py), not a Raft log with offsets, so the high watermark and the
voter's log end offset are -1, the protocol's "unknown". The leader's last fetch and last caught-up
timestamps are now, as Kafka reports them for the leader. v2: the voter's directory id is the zero
UUID (a voter without one, as with Kafka's static `controller.quorum.voters`), and its endpoints
are the broker's advertised listeners, where its controller APIs are served.
"""

from __future__ import annotations

import uuid

from quafka.broker.core.acl_types import AclOperation
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize_cluster
from ..clock import wall_clock_ms
from ..registry import handles
from ._util import item_class, make, response_class

METADATA_TOPIC = "__cluster_metadata"
QUORUM_LEADER_EPOCH = 1
UNKNOWN_OFFSET = -1
NO_DIRECTORY_ID = uuid.UUID(int=0)


def _names_the_metadata_partition(req) -> bool:
    """Kafka's `RaftUtil.hasValidTopicPartition` for DescribeQuorum: exactly one topic, the metadata
    topic, with exactly one partition, 0."""
    return len(req.topics) == 1 and req.topics[0].topic_name == METADATA_TOPIC and \
        len(req.topics[0].partitions) == 1 and req.topics[0].partitions[0].partition_index == 0


@handles(55, 0, 2)
async def handle_describe_quorum(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(55, ctx.api_version)
    topic_cls = item_class(resp_cls, "topics")
    partition_cls = item_class(topic_cls, "partitions")
    replica_cls = item_class(partition_cls, "current_voters")
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return make(resp_cls, error_code=ErrorCode.cluster_authorization_failed,
                    error_message="Cluster authorization failed.", topics=(), nodes=())
    if not _names_the_metadata_partition(req):
        return make(resp_cls, error_code=ErrorCode.none, error_message=None, nodes=(), topics=tuple(
            make(topic_cls, topic_name=t.topic_name, partitions=tuple(
                make(partition_cls, partition_index=p.partition_index, error_code=ErrorCode.unknown_topic_or_partition,
                     error_message="This server does not host this topic-partition.", leader_id=0, leader_epoch=0,
                     high_watermark=0, current_voters=(), observers=())
                for p in t.partitions))
            for t in req.topics))
    node_id = state.node_id
    now_ms = wall_clock_ms()
    voter = make(replica_cls, replica_id=node_id, replica_directory_id=NO_DIRECTORY_ID, log_end_offset=UNKNOWN_OFFSET,
                 last_fetch_timestamp=now_ms, last_caught_up_timestamp=now_ms)
    partition = make(partition_cls, partition_index=0, error_code=ErrorCode.none, error_message=None,
                     leader_id=node_id, leader_epoch=QUORUM_LEADER_EPOCH, high_watermark=UNKNOWN_OFFSET,
                     current_voters=(voter,), observers=())
    nodes = ()
    if ctx.api_version >= 2:
        node_cls = item_class(resp_cls, "nodes")
        listener_cls = item_class(node_cls, "listeners")
        listeners = tuple(make(listener_cls, name=name, host=host, port=port)
                          for name, (host, port) in sorted(state.advertised_by_listener.items()))
        nodes = (make(node_cls, node_id=node_id, listeners=listeners),)
    return make(resp_cls, error_code=ErrorCode.none, error_message=None, nodes=nodes,
                topics=(make(topic_cls, topic_name=METADATA_TOPIC, partitions=(partition,)),))
