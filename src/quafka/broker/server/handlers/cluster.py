"""DescribeCluster (key 60) and FindCoordinator (key 10).

On one node the broker is the controller, the coordinator of every group and the transaction
coordinator of every transactional id (server/transactions.py). Any other key type is refused at
once with INVALID_REQUEST, which clients do not retry.
"""

from __future__ import annotations

from quafka.broker.core.acl_types import CLUSTER_NAME, AclOperation, ResourceType
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize, authorize_cluster, authorized_operations
from ..registry import handles
from ._util import AUTHORIZED_OPERATIONS_OMITTED, NO_THROTTLE, item_class, make, response_class

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2


@handles(60, 0, 2)
async def handle_describe_cluster(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(60, ctx.api_version)
    broker_cls = item_class(resp_cls, "brokers")
    host, port = state.endpoint_for(ctx.session.listener_name)
    endpoint_type = getattr(req, "endpoint_type", 1)
    if endpoint_type != 1:
        return make(
            resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.unsupported_endpoint_type,
            error_message=f"Endpoint type {endpoint_type} is not supported: quafka serves brokers (1) only",
            endpoint_type=endpoint_type, cluster_id=state.metadata.cluster_id, controller_id=-1, brokers=(),
            cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        )
    # AuthHelper.computeDescribeClusterResponse: no permission needed; the cluster's authorized
    # operations when asked for, 0 without DESCRIBE on the CLUSTER
    operations = AUTHORIZED_OPERATIONS_OMITTED
    if getattr(req, "include_cluster_authorized_operations", False):
        operations = authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME) \
            if authorize_cluster(ctx, AclOperation.DESCRIBE) else 0
    return make(
        resp_cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=1,
        cluster_id=state.metadata.cluster_id,
        controller_id=state.node_id,
        brokers=(make(broker_cls, broker_id=state.node_id, host=host, port=port, rack=None, is_fenced=False),),
        cluster_authorized_operations=operations,
    )


def _coordinator_for(ctx, key_type: int, key: str) -> tuple[ErrorCode, str | None]:
    # KafkaApis.getCoordinator: DESCRIBE on the GROUP or on the TRANSACTIONAL_ID of the key; a share
    # coordinator (brokers only) needs CLUSTER_ACTION on the CLUSTER
    if ctx.server.authorizer is not None:
        if key_type == KEY_TYPE_GROUP and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key):
            return ErrorCode.group_authorization_failed, None
        if key_type == KEY_TYPE_TRANSACTION and \
                not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return ErrorCode.transactional_id_authorization_failed, None
        if key_type == KEY_TYPE_SHARE and ctx.api_version >= 6 and not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
            return ErrorCode.cluster_authorization_failed, None
    if key_type == KEY_TYPE_SHARE and ctx.api_version < 6:
        return ErrorCode.invalid_request, "key type SHARE (2) needs FindCoordinator v6 or later"
    if key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, KEY_TYPE_SHARE):
        # fail fast: a key type quafka cannot serve gets a non-retriable error at once (Kafka's
        # FindCoordinatorRequest.CoordinatorType.forId throws, and KafkaApis answers INVALID_REQUEST)
        return ErrorCode.invalid_request, f"Unknown coordinator key type {key_type}"
    return ErrorCode.none, None


@handles(10, 0, 6)
async def handle_find_coordinator(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(10, ctx.api_version)
    host, port = state.endpoint_for(ctx.session.listener_name)
    key_type = getattr(req, "key_type", KEY_TYPE_GROUP)
    if ctx.api_version < 4:
        error, message = _coordinator_for(ctx, key_type, req.key)
        ok = error == ErrorCode.none
        return make(
            resp_cls, throttle_time=NO_THROTTLE, error_code=error, error_message=message,
            node_id=state.node_id if ok else -1, host=host if ok else "", port=port if ok else -1,
        )
    coord_cls = item_class(resp_cls, "coordinators")
    out = []
    for key in req.coordinator_keys:
        error, message = _coordinator_for(ctx, key_type, key)
        ok = error == ErrorCode.none
        out.append(make(
            coord_cls, key=key, node_id=state.node_id if ok else -1, host=host if ok else "",
            port=port if ok else -1, error_code=error, error_message=message,
        ))
    return make(resp_cls, throttle_time=NO_THROTTLE, coordinators=tuple(out))
