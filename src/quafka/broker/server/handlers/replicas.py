"""Where replicas live and who leads them: ElectLeaders (key 43, v0-v2), AlterPartitionReassignments
(key 45, v0-v1) and ListPartitionReassignments (key 46, v0), answered as Kafka's controller answers
them for a cluster of one broker.

A Kafka broker forwards all three to the controller (`KafkaApis`: forwardToController); quafka's one
node is its own controller. `ControllerApis.handleElectLeaders` and
`handleAlterPartitionReassignments` ask ALTER on the CLUSTER, `handleListPartitionReassignments`
DESCRIBE on the CLUSTER; without it the request's own error response carries
CLUSTER_AUTHORIZATION_FAILED at the top (ElectLeaders: from v1) and on every partition it names.

On one broker every partition has one replica, this node, which leads it and is its preferred
leader. So (`ReplicationControlManager`):

- ElectLeaders (`electLeaders`, `electLeader`): a partition named answers ELECTION_NOT_NEEDED for a
  preferred election (its leader is its preferred replica) and for an unclean one (it has a
  leader); an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION. Null partitions ask for every
  partition of every topic: each topic is listed, and partitions that need no election are left out
  (all of them here). An empty list is answered empty; an election type other than 0 and 1 is
  INVALID_REQUEST for the request and every partition (Kafka throws InvalidRequestException).
- AlterPartitionReassignments (`alterPartitionReassignment`, `validateManualPartitionAssignment`,
  `cancelPartitionReassignment`): the target [this node] is the current assignment: NONE, nothing
  changes. An empty target, a broker that is not registered (any other id), or this node twice is
  INVALID_REPLICA_ASSIGNMENT; null (cancel) is NO_REASSIGNMENT_IN_PROGRESS, since none ever is; an
  unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION. (v1's AllowReplicationFactorChange=false
  cannot refuse anything more: the one valid target has the current replication factor.)
- ListPartitionReassignments (`listPartitionReassignments`): no reassignment is ever in progress,
  so the answer lists none, for every topic or the ones named.
"""

from __future__ import annotations

import logging

from quafka.broker.core.acl_types import AclOperation
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize_cluster
from ..registry import handles
from ._util import NO_THROTTLE, item_class, make, response_class

log = logging.getLogger("quafka.server")

PREFERRED, UNCLEAN = 0, 1
CLUSTER_AUTHORIZATION_FAILED = "Cluster authorization failed."


def _partition_error(state, topic: str, partition: int) -> tuple[ErrorCode, str] | None:
    t = state.topics.get(topic)
    if t is None:
        return ErrorCode.unknown_topic_or_partition, f"No such topic as {topic}"
    if not 0 <= partition < len(t.partitions):
        return ErrorCode.unknown_topic_or_partition, f"No such partition as {topic}-{partition}"
    return None


# ----------------------------------------------------------------------------- ElectLeaders

def _election_results(resp_cls, req, error: ErrorCode, message: str):
    """ElectLeadersRequest.getErrorResponse: `error` for every partition named (none when null)."""
    result_cls = item_class(resp_cls, "replica_election_results")
    partition_cls = item_class(result_cls, "partition_result")
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=error, replica_election_results=tuple(
        make(result_cls, topic=t.topic, partition_result=tuple(
            make(partition_cls, partition_id=p, error_code=error, error_message=message) for p in t.partitions))
        for t in req.topic_partitions or ()))


@handles(43, 0, 2)
async def handle_elect_leaders(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(43, ctx.api_version)
    if not authorize_cluster(ctx, AclOperation.ALTER):
        return _election_results(resp_cls, req, ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED)
    election_type = getattr(req, "election_type", PREFERRED)
    if req.topic_partitions is not None and not req.topic_partitions:
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, replica_election_results=())
    if election_type not in (PREFERRED, UNCLEAN):
        log.info("ElectLeaders from %s: unknown election type %d", ctx.peer, election_type)
        return _election_results(resp_cls, req, ErrorCode.invalid_request, f"Unknown election type {election_type}")
    result_cls = item_class(resp_cls, "replica_election_results")
    partition_cls = item_class(result_cls, "partition_result")
    if req.topic_partitions is None:
        # every partition of every topic; those that need no election (all, on one broker) left out
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, replica_election_results=tuple(
            make(result_cls, topic=name, partition_result=()) for name in sorted(state.topics)))
    results = []
    for t in req.topic_partitions:
        partitions = []
        for p in t.partitions:
            error, message = _partition_error(state, t.topic, p) or \
                (ErrorCode.election_not_needed, "Leader election not needed for topic partition.")
            partitions.append(make(partition_cls, partition_id=p, error_code=error, error_message=message))
        results.append(make(result_cls, topic=t.topic, partition_result=tuple(partitions)))
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, replica_election_results=tuple(results))


# ----------------------------------------------------------------------------- reassignments

def _reassignment_error(state, topic: str, partition: int, replicas) -> tuple[ErrorCode, str | None]:
    missing = _partition_error(state, topic, partition)
    if missing is not None:
        return missing
    if replicas is None:
        return ErrorCode.no_reassignment_in_progress, "No partition reassignment is in progress."
    if not replicas:
        return ErrorCode.invalid_replica_assignment, "The manual partition assignment includes an empty replica list."
    previous = None
    for broker_id in sorted(replicas):
        if broker_id != state.node_id:
            return ErrorCode.invalid_replica_assignment, (
                f"The manual partition assignment includes broker {broker_id}, but no such broker is registered.")
        if broker_id == previous:
            return ErrorCode.invalid_replica_assignment, (
                f"The manual partition assignment includes the broker {previous} more than once.")
        previous = broker_id
    return ErrorCode.none, None


@handles(45, 0, 1)
async def handle_alter_partition_reassignments(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(45, ctx.api_version)
    topic_cls = item_class(resp_cls, "responses")
    partition_cls = item_class(topic_cls, "partitions")
    allow_rf_change = getattr(req, "allow_replication_factor_change", True)
    authorized = authorize_cluster(ctx, AclOperation.ALTER)
    responses = []
    for t in req.topics:
        partitions = []
        for p in t.partitions:
            if authorized:
                error, message = _reassignment_error(state, t.name, p.partition_index, p.replicas)
                if error != ErrorCode.none:
                    log.info("AlterPartitionReassignments from %s: %s-%d to %s: %s", ctx.peer, t.name,
                             p.partition_index, p.replicas, error.name)
            else:
                error, message = ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED
            partitions.append(make(partition_cls, partition_index=p.partition_index, error_code=error,
                                   error_message=message))
        responses.append(make(topic_cls, name=t.name, partitions=tuple(partitions)))
    top = ErrorCode.none if authorized else ErrorCode.cluster_authorization_failed
    return make(resp_cls, throttle_time=NO_THROTTLE, allow_replication_factor_change=allow_rf_change, error_code=top,
                error_message=None if authorized else CLUSTER_AUTHORIZATION_FAILED, responses=tuple(responses))


@handles(46, 0, 0)
async def handle_list_partition_reassignments(ctx, req):
    resp_cls = response_class(46, ctx.api_version)
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        # ListPartitionReassignmentsRequest.getErrorResponse: the partitions named, with no replicas
        topic_cls = item_class(resp_cls, "topics")
        partition_cls = item_class(topic_cls, "partitions")
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    error_message=CLUSTER_AUTHORIZATION_FAILED, topics=tuple(
                        make(topic_cls, name=t.name, partitions=tuple(
                            make(partition_cls, partition_index=p, replicas=(), adding_replicas=(),
                                 removing_replicas=()) for p in t.partition_indexes))
                        for t in req.topics or ()))
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, topics=())
