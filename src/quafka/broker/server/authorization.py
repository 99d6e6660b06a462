"""The entry points handlers call to authorize an action (Kafka's `AuthHelper`).

With no authorizer configured (`authorizer.class.name` empty, Kafka's default) every action is
allowed and the check costs one attribute read. The authorizer itself (ACL bindings from the
metadata journal, `super.users`, `allow.everyone.if.no.acl.found`) lives in `server.authorizer`;
it answers `authorize(session, operation, resource_type, name)` for one LITERAL resource name and
`authorize_by_resource_type(session, operation, resource_type)` (Kafka's
`Authorizer.authorizeByResourceType`: may the principal do `operation` on at least one resource of
the type, through any ACL).

The helpers mirror `AuthHelper`'s: `authorize` (one resource), `authorize_cluster` (the cluster
resource, `kafka-cluster`), `filter_authorized` (the names of a request that are allowed, each
distinct name asked once however many partitions carry it: Kafka's `filterByAuthorized`),
`authorized_operations` (the bit field of DescribeGroups, ShareGroupDescribe, Metadata and
DescribeCluster: Kafka's `authorizedOperations`). What every API checks is listed in
docs/security.md ("Authorization: what each API needs").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from quafka.broker.core.acl_types import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from .connection import RequestContext

__all__ = ["SUPPORTED_OPERATIONS", "authorize", "authorize_by_resource_type", "authorize_cluster",
           "authorized_operations", "filter_authorized", "operations_bit_field"]

# The operations each resource type has (Kafka's AclEntry.supportedOperations): what an
# authorized-operations bit field is made of.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


def operations_bit_field(operations: Iterable[AclOperation]) -> int:
    """Kafka's `Utils.to32BitField`: bit `code` set for each operation."""
    field = 0
    for op in operations:
        field |= 1 << int(op)
    return field


def authorize(ctx: "RequestContext", operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    """Whether the request's principal may do `operation` on the resource `name`."""
    authorizer = ctx.server.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize(ctx.session, operation, resource_type, name)


def authorize_cluster(ctx: "RequestContext", operation: AclOperation) -> bool:
    """`operation` on the cluster resource (Kafka's `AuthHelper.authorizeClusterOperation`, which
    throws ClusterAuthorizationException; callers answer CLUSTER_AUTHORIZATION_FAILED)."""
    return authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def authorize_by_resource_type(ctx: "RequestContext", operation: AclOperation, resource_type: ResourceType) -> bool:
    """May the principal do `operation` on some resource of `resource_type` (Kafka's
    `AuthHelper.authorizeByResourceType`; InitProducerId asks it for WRITE on any topic)."""
    authorizer = ctx.server.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize_by_resource_type(ctx.session, operation, resource_type)


def filter_authorized(ctx: "RequestContext", operation: AclOperation, resource_type: ResourceType,
                      names: Iterable[str | None]) -> set:
    """The names among `names` the principal may do `operation` on, each distinct name asked once
    (Kafka's `AuthHelper.filterByAuthorized`). Without an authorizer: all of them. A None name (a
    topic id that names no topic) is never authorized: callers answer it as unknown first."""
    authorizer = ctx.server.authorizer
    distinct = set(names)
    if authorizer is None:
        return distinct
    session = ctx.session
    return {n for n in distinct if n is not None and authorizer.authorize(session, operation, resource_type, n)}


def authorized_operations(ctx: "RequestContext", resource_type: ResourceType, name: str) -> int:
    """The bit field of the operations the principal may do on the resource (Kafka's
    `AuthHelper.authorizedOperations`): every supported one without an authorizer."""
    supported = SUPPORTED_OPERATIONS[resource_type]
    authorizer = ctx.server.authorizer
    if authorizer is None:
        return operations_bit_field(supported)
    session = ctx.session
    return operations_bit_field(op for op in supported if authorizer.authorize(session, op, resource_type, name))
