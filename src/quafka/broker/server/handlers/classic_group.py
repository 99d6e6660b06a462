"""Classic consumer groups: JoinGroup (key 11, v0-9), SyncGroup (14, v0-5), Heartbeat (12, v0-4),
LeaveGroup (13, v0-5) and DescribeGroups (15, v0-6), the versions Kafka 4.2 serves.

The coordinator is `server.classic_groups` (ClassicGroupService over the pure
ClassicGroupCoordinator); these handlers translate the wire versions:

- JoinGroup v0 has no rebalance timeout (the session timeout is used); v4+ gets MEMBER_ID_REQUIRED
  for a new member's first join, with the member id to join with (KIP-394);
- a group id that names a share group gets INCONSISTENT_GROUP_PROTOCOL from JoinGroup (Kafka's
  GroupMetadataManager: a non-classic group of that id) and GROUP_ID_NOT_FOUND from DescribeGroups
  v6 (earlier versions report it as Dead, as Kafka does for an id that is not a classic group);
- a KIP-848 consumer group's id: DescribeGroups answers the same; JoinGroup converts an empty
  consumer group to a classic group (GroupMetadataManager.classicGroupJoin) and takes the member
  into a non-empty one as a member using the classic protocol (classicGroupJoinToConsumerGroup);
  SyncGroup, Heartbeat and LeaveGroup for such a group are served by the consumer group too
  (server/consumer_groups.py, broker/core/consumer_group_migration.py);
- LeaveGroup v0-2 carries one member id and answers with its error at the top level; v3+ carries
  a batch of members (member id and/or group.instance.id) with an error each;
- until the coordinators have loaded, every request gets COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

import datetime
from dataclasses import replace

from quafka.broker.core.acl_types import AclOperation, ResourceType
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize, authorized_operations
from ..group_kinds import GroupKindOf, group_kind
from ..registry import handles
from ._util import AUTHORIZED_OPERATIONS_OMITTED, NO_THROTTLE, item_class, make, response_class
from .share_group import client_host

LOADING = ErrorCode.coordinator_load_in_progress


def _may_read_group(ctx, group_id: str) -> bool:
    """KafkaApis.handleJoinGroupRequest, handleSyncGroupRequest, handleHeartbeatRequest and
    handleLeaveGroupRequest: READ on the GROUP, else GROUP_AUTHORIZATION_FAILED."""
    return ctx.server.authorizer is None or authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id)


def _ms(value) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else int(value)


@handles(11, 0, 9)
async def handle_join_group(ctx, req):
    server = ctx.server
    resp_cls = response_class(11, ctx.api_version)
    member_cls = item_class(resp_cls, "members")

    def refuse(error: ErrorCode):
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=error, generation_id=-1, protocol_type=None,
                    protocol_name=None if ctx.api_version >= 7 else "", leader="", skip_assignment=False,
                    member_id=req.member_id, members=())

    if not _may_read_group(ctx, req.group_id):
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed,
                    generation_id=-1, protocol_type=None, protocol_name=None if ctx.api_version >= 7 else "",
                    leader="", skip_assignment=False, member_id="", members=())
    if not server.coordinators_loaded:
        return refuse(LOADING)
    kind = group_kind(server, req.group_id)
    if kind is GroupKindOf.SHARE:
        return refuse(ErrorCode.inconsistent_group_protocol)
    rebalance_timeout = getattr(req, "rebalance_timeout", None)
    if kind is GroupKindOf.CONSUMER:
        # a non-empty consumer group takes the member (classicGroupJoinToConsumerGroup); an empty one
        # becomes a classic group (maybeDeleteEmptyConsumerGroup)
        if server.consumer_groups.coordinator.group(req.group_id).members:
            instance_id = getattr(req, "group_instance_id", None)
            joined = await server.consumer_groups.classic_join(
                group_id=req.group_id, member_id=req.member_id, instance_id=instance_id,
                protocol_type=req.protocol_type, protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
                session_timeout_ms=_ms(req.session_timeout),
                rebalance_timeout_ms=-1 if rebalance_timeout is None else _ms(rebalance_timeout),
                client_id=ctx.client_id or "", client_host=client_host(ctx.peer),
                requires_known_member_id=ctx.api_version >= 4 and instance_id is None)
            protocol_name = joined.protocol_name
            if protocol_name is None and ctx.api_version < 7:
                protocol_name = ""
            return make(resp_cls, throttle_time=NO_THROTTLE, error_code=joined.error, generation_id=joined.generation_id,
                        protocol_type=joined.protocol_type, protocol_name=protocol_name, leader="",
                        skip_assignment=False, member_id=joined.member_id, members=())
        if not server.consumer_groups.convert_to_classic(req.group_id):
            return refuse(ErrorCode.not_coordinator)
    result = await server.classic_groups.join(
        group_id=req.group_id, member_id=req.member_id, protocol_type=req.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
        session_timeout_ms=_ms(req.session_timeout),
        rebalance_timeout_ms=-1 if rebalance_timeout is None else _ms(rebalance_timeout),
        group_instance_id=getattr(req, "group_instance_id", None), client_id=ctx.client_id or "",
        client_host=client_host(ctx.peer), api_version=ctx.api_version)
    members = tuple(make(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata)
                    for m in result.members)
    protocol_name = result.protocol_name
    if protocol_name is None and ctx.api_version < 7:
        protocol_name = ""  # not nullable before v7
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=result.error, generation_id=result.generation_id,
                protocol_type=result.protocol_type, protocol_name=protocol_name, leader=result.leader,
                skip_assignment=result.skip_assignment, member_id=result.member_id, members=members)


@handles(14, 0, 5)
async def handle_sync_group(ctx, req):
    server = ctx.server
    resp_cls = response_class(14, ctx.api_version)
    if not _may_read_group(ctx, req.group_id):
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed,
                    protocol_type=None, protocol_name=None, assignment=b"")
    if not server.coordinators_loaded:
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=LOADING, protocol_type=None,
                    protocol_name=None, assignment=b"")
    if group_kind(server, req.group_id) is GroupKindOf.CONSUMER:  # classicGroupSyncToConsumerGroup
        synced = server.consumer_groups.classic_sync(
            group_id=req.group_id, member_id=req.member_id, instance_id=getattr(req, "group_instance_id", None),
            generation_id=req.generation_id, protocol_type=getattr(req, "protocol_type", None),
            protocol_name=getattr(req, "protocol_name", None))
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=synced.error, protocol_type=synced.protocol_type,
                    protocol_name=synced.protocol_name, assignment=synced.assignment)
    result = await server.classic_groups.sync(
        group_id=req.group_id, member_id=req.member_id, generation_id=req.generation_id,
        group_instance_id=getattr(req, "group_instance_id", None), protocol_type=getattr(req, "protocol_type", None),
        protocol_name=getattr(req, "protocol_name", None),
        assignments={a.member_id: bytes(a.assignment) for a in req.assignments})
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=result.error, protocol_type=result.protocol_type,
                protocol_name=result.protocol_name, assignment=result.assignment)


@handles(12, 0, 4)
async def handle_heartbeat(ctx, req):
    server = ctx.server
    resp_cls = response_class(12, ctx.api_version)
    if not _may_read_group(ctx, req.group_id):
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed)
    if not server.coordinators_loaded:
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=LOADING)
    if group_kind(server, req.group_id) is GroupKindOf.CONSUMER:  # classicGroupHeartbeatToConsumerGroup
        error = server.consumer_groups.classic_heartbeat(
            group_id=req.group_id, member_id=req.member_id, instance_id=getattr(req, "group_instance_id", None),
            generation_id=req.generation_id)
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=error)
    error = server.classic_groups.heartbeat(group_id=req.group_id, member_id=req.member_id,
                                            generation_id=req.generation_id,
                                            group_instance_id=getattr(req, "group_instance_id", None))
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=error)


@handles(13, 0, 5)
async def handle_leave_group(ctx, req):
    server = ctx.server
    resp_cls = response_class(13, ctx.api_version)
    if not _may_read_group(ctx, req.group_id):
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed, members=())
    if ctx.api_version < 3:
        if not server.coordinators_loaded:
            return make(resp_cls, throttle_time=NO_THROTTLE, error_code=LOADING)
        if group_kind(server, req.group_id) is GroupKindOf.CONSUMER:  # classicGroupLeaveToConsumerGroup
            error = server.consumer_groups.classic_leave(req.group_id, [(req.member_id, None)])[0][2]
            return make(resp_cls, throttle_time=NO_THROTTLE, error_code=error)
        result = server.classic_groups.leave(req.group_id, [(req.member_id, None)])
        error = result.error if result.error is not ErrorCode.none else result.members[0].error
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=error)
    member_cls = item_class(resp_cls, "members")
    if not server.coordinators_loaded:
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=LOADING, members=())
    if group_kind(server, req.group_id) is GroupKindOf.CONSUMER:  # classicGroupLeaveToConsumerGroup
        left = server.consumer_groups.classic_leave(req.group_id,
                                                    [(m.member_id, m.group_instance_id) for m in req.members])
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, members=tuple(
            make(member_cls, member_id=m, group_instance_id=i, error_code=e) for m, i, e in left))
    result = server.classic_groups.leave(req.group_id, [(m.member_id, m.group_instance_id) for m in req.members])
    members = tuple(make(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=m.error)
                    for m in result.members)
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=result.error, members=members)


@handles(15, 0, 6)
async def handle_describe_groups(ctx, req):
    server = ctx.server
    resp_cls = response_class(15, ctx.api_version)
    group_cls = item_class(resp_cls, "groups")
    member_cls = item_class(group_cls, "members")
    groups = []
    for group_id in req.groups:
        common = dict(group_id=group_id, authorized_operations=AUTHORIZED_OPERATIONS_OMITTED, members=(),
                      protocol_type="", protocol_data="", error_message=None)
        # KafkaApis.handleDescribeGroupsRequest: DESCRIBE on each GROUP
        if server.authorizer is not None and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(make(group_cls, error_code=ErrorCode.group_authorization_failed, group_state="", **common))
            continue
        if not server.coordinators_loaded:
            groups.append(make(group_cls, error_code=LOADING, group_state="", **common))
            continue
        kind = group_kind(server, group_id)
        described = server.classic_groups.describe(group_id) if kind is GroupKindOf.CLASSIC else None
        if described is None or described.error is ErrorCode.group_id_not_found:
            if kind is GroupKindOf.SIMPLE:
                groups.append(make(group_cls, error_code=ErrorCode.none, group_state="Empty", **common))
            elif ctx.api_version >= 6:
                what = "not found" if kind in (None, GroupKindOf.CLASSIC) else "is not a classic group"
                groups.append(make(group_cls, error_code=ErrorCode.group_id_not_found, group_state="Dead",
                                   **{**common, "error_message": f"Group {group_id} {what}."}))
            else:
                groups.append(make(group_cls, error_code=ErrorCode.none, group_state="Dead", **common))
            continue
        members = tuple(make(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id,
                             client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                             member_assignment=m.assignment) for m in described.members)
        groups.append(make(group_cls, **{**common, "protocol_type": described.protocol_type,
                                         "protocol_data": described.protocol_data, "members": members,
                                         "error_message": described.message},
                           error_code=described.error, group_state=described.state))
    if ctx.api_version >= 3 and req.include_authorized_operations:  # of each group described without error
        groups = [replace(g, authorized_operations=authorized_operations(ctx, ResourceType.GROUP, g.group_id))
                  if g.error_code == ErrorCode.none else g for g in groups]
    return make(resp_cls, throttle_time=NO_THROTTLE, groups=tuple(groups))
