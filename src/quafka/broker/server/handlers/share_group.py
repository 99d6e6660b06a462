"""ShareGroupHeartbeat (key 76, v1), ShareGroupDescribe (key 77, v1), ListGroups (key 16, v0-v5)
and DeleteGroups (key 42, v0-v2).

The coordinator is `server.share_groups` (a `ShareGroupService`). On one node this broker is the
coordinator of every group, so the COORDINATOR errors never occur. With an authorizer each API
checks what Kafka's KafkaApis checks (KIP-932's table; docs/security.md). ListGroups reports share groups with protocol type and group type
"share" (Kafka's spelling), KIP-848 consumer groups with type and protocol type "consumer", classic
groups with type "classic", and simple consumer groups — groups that exist only through offsets
committed with generation -1 (consumers using `assign()`) — as Kafka does: type "classic", state
"Empty", protocol type "".

Until the coordinators have replayed their internal topics after a start, every one of these
answers COORDINATOR_LOAD_IN_PROGRESS (retriable; clients retry).

DeleteGroups deletes empty groups of every type: classic and consumer groups with their committed
offsets, and share groups, whose share state is tombstoned on `__share_group_state` and their records
on `__consumer_offsets`; the group is gone (GROUP_ID_NOT_FOUND afterwards).
A group with members gets NON_EMPTY_GROUP. A simple consumer group is deleted by tombstoning its
committed offsets.

The client host is the peer address as Kafka prints an InetAddress ("/127.0.0.1").
"""

from __future__ import annotations

import datetime
from dataclasses import replace

from quafka.broker.core.acl_types import CLUSTER_NAME, AclOperation, ResourceType
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize, authorized_operations, filter_authorized
from ..group_kinds import GroupKindOf, group_kind
from ..registry import handles
from ._util import AUTHORIZED_OPERATIONS_OMITTED, NO_THROTTLE, item_class, make, response_class

SHARE = "share"
UNDESCRIBABLE_TOPICS = "The group has described topic(s) that the client is not authorized to describe."
LOADING = "The coordinator is loading its state; retry."


def client_host(peer: str) -> str:
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host.strip("[]")


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def hide_undescribable_topics(ctx, groups: list, assignment_fields: tuple[str, ...]) -> list:
    """With an authorizer, a described group whose members' assignments name a topic the principal
    may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED with no members (KafkaApis.
    handleShareGroupDescribe and handleConsumerGroupDescribe); each topic is asked once."""
    if ctx.server.authorizer is None:
        return groups

    def names(group):
        return {tp.topic_name for m in group.members for f in assignment_fields
                for tp in getattr(m, f).topic_partitions}

    allowed = filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, {n for g in groups for n in names(g)})
    return [replace(g, error_code=ErrorCode.topic_authorization_failed, error_message=UNDESCRIBABLE_TOPICS,
                    members=()) if names(g) - allowed else g for g in groups]


@handles(76, 1, 1)
async def handle_share_group_heartbeat(ctx, req):
    resp_cls = response_class(76, ctx.api_version)
    if ctx.server.authorizer is not None:
        # KafkaApis.handleShareGroupHeartbeat (KIP-932): READ on the GROUP, then DESCRIBE on every
        # subscribed topic named (TOPIC_AUTHORIZATION_FAILED, no message, when one is not)
        error = None
        if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, req.group_id):
            error = ErrorCode.group_authorization_failed
        elif req.subscribed_topic_names:
            wanted = set(req.subscribed_topic_names)
            if len(filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, wanted)) < len(wanted):
                error = ErrorCode.topic_authorization_failed
        if error is not None:
            return make(resp_cls, throttle_time=NO_THROTTLE, error_code=error, error_message=None, member_id=None,
                        member_epoch=0, heartbeat_interval=_ms(0), assignment=None)
    if not ctx.server.coordinators_loaded:
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.coordinator_load_in_progress,
                    error_message=LOADING, member_id=None, member_epoch=0, heartbeat_interval=_ms(0),
                    assignment=None)
    if group_kind(ctx.server, req.group_id) not in (None, GroupKindOf.SHARE):
        # a consumer group of that id (GroupMetadataManager.getOrMaybeCreateShareGroup)
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_id_not_found,
                    error_message=f"Group {req.group_id} is not a share group.", member_id=None, member_epoch=0,
                    heartbeat_interval=_ms(0), assignment=None)
    result = await ctx.server.share_groups.heartbeat(
        req.group_id, req.member_id, req.member_epoch, rack_id=req.rack_id,
        subscribed_topic_names=req.subscribed_topic_names, client_id=ctx.client_id or "",
        client_host=client_host(ctx.peer))
    assignment = None
    if result.assignment is not None:
        assignment_cls = item_class(resp_cls, "assignment")
        tp_cls = item_class(assignment_cls, "topic_partitions")
        assignment = make(assignment_cls, topic_partitions=tuple(
            make(tp_cls, topic_id=topic_id, partitions=tuple(partitions))
            for topic_id, partitions in sorted(result.assignment.items(), key=lambda kv: str(kv[0]))))
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=result.error, error_message=result.message,
                member_id=result.member_id, member_epoch=result.member_epoch,
                heartbeat_interval=_ms(result.heartbeat_interval_ms), assignment=assignment)


@handles(77, 1, 1)
async def handle_share_group_describe(ctx, req):
    resp_cls = response_class(77, ctx.api_version)
    group_cls = item_class(resp_cls, "groups")
    member_cls = item_class(group_cls, "members")
    assignment_cls = item_class(member_cls, "assignment")
    tp_cls = item_class(assignment_cls, "topic_partitions")
    groups = []

    def refused(group_id: str, error: ErrorCode, message: str | None):
        return make(group_cls, error_code=error, error_message=message, group_id=group_id, group_state="",
                    group_epoch=0, assignment_epoch=0, assignor_name="", members=(),
                    authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)

    group_ids = list(req.group_ids)
    if ctx.server.authorizer is not None:
        # KafkaApis.handleShareGroupDescribe (KIP-932): DESCRIBE on each GROUP
        groups = [refused(g, ErrorCode.group_authorization_failed, None) for g in group_ids
                  if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g)]
        denied = {g.group_id for g in groups}
        group_ids = [g for g in group_ids if g not in denied]
    if not ctx.server.coordinators_loaded:
        groups += [refused(g, ErrorCode.coordinator_load_in_progress, LOADING) for g in group_ids]
        return make(resp_cls, throttle_time=NO_THROTTLE, groups=tuple(groups))
    for g in ctx.server.share_groups.describe(group_ids) if group_ids else ():
        if g.error is ErrorCode.group_id_not_found and group_kind(ctx.server, g.group_id) is not None:
            g = replace(g, message=f"Group {g.group_id} is not a share group.")  # ShareGroup lookup in Kafka
        members = tuple(
            make(member_cls, member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                 client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=m.subscribed_topic_names,
                 assignment=make(assignment_cls, topic_partitions=tuple(
                     make(tp_cls, topic_id=topic_id, topic_name=name, partitions=partitions)
                     for topic_id, name, partitions in m.assignment)))
            for m in g.members)
        ok = g.error == ErrorCode.none
        operations = authorized_operations(ctx, ResourceType.GROUP, g.group_id) \
            if ok and req.include_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED
        groups.append(make(group_cls, error_code=g.error, error_message=g.message, group_id=g.group_id,
                           group_state=g.state, group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch,
                           assignor_name=g.assignor_name, members=members, authorized_operations=operations))
    # KafkaApis.handleShareGroupDescribe: no assigned topic the principal may not DESCRIBE is shown
    groups = hide_undescribable_topics(ctx, groups, ("assignment",))
    return make(resp_cls, throttle_time=NO_THROTTLE, groups=tuple(groups))


@handles(16, 0, 5)
async def handle_list_groups(ctx, req):
    resp_cls = response_class(16, ctx.api_version)
    group_cls = item_class(resp_cls, "groups")
    if not ctx.server.coordinators_loaded:
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.coordinator_load_in_progress, groups=())
    states_filter = getattr(req, "states_filter", ()) or ()
    types_filter = getattr(req, "types_filter", ()) or ()
    listed = [(group_id, SHARE, state, SHARE)
              for group_id, state in ctx.server.share_groups.list_groups(states_filter, types_filter)]
    # simple consumer groups (they only commit offsets): type classic, state Empty, no protocol type
    states = {s.strip().lower() for s in states_filter}
    types = {t.strip().lower() for t in types_filter}
    listed += [(group_id, "consumer", state, "consumer")
               for group_id, state in ctx.server.consumer_groups.list_groups(states_filter, types_filter)]
    if not types or "classic" in types:
        listed += [(g.group_id, g.protocol_type, g.state, "classic")
                   for g in ctx.server.classic_groups.list_groups(states_filter)]
        if not states or "empty" in states:
            listed += [(group_id, "", "Empty", "classic") for group_id in ctx.server.consumer_offsets.simple_group_ids()]
    if ctx.server.authorizer is not None and \
            not authorize(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        # KafkaApis.handleListGroupsRequest: every group with DESCRIBE on the CLUSTER, else only the
        # groups the principal may DESCRIBE (the others are left out without an error)
        listed = [g for g in listed if authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g[0])]
    groups = tuple(make(group_cls, group_id=group_id, protocol_type=protocol_type, group_state=state, group_type=kind)
                   for group_id, protocol_type, state, kind in sorted(listed))
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=groups)


@handles(42, 0, 2)
async def handle_delete_groups(ctx, req):
    resp_cls = response_class(42, ctx.api_version)
    result_cls = item_class(resp_cls, "results")
    results = []
    for group_id in req.groups_names:
        if ctx.server.authorizer is not None and \
                not authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, group_id):
            # KafkaApis.handleDeleteGroupsRequest: DELETE on each GROUP, of every type (KIP-932 for share
            # groups)
            error = ErrorCode.group_authorization_failed
        elif not ctx.server.coordinators_loaded:
            error = ErrorCode.coordinator_load_in_progress
        elif not group_id:
            error = ErrorCode.invalid_group_id
        else:
            kind = group_kind(ctx.server, group_id)
            if kind in (GroupKindOf.CLASSIC, GroupKindOf.CONSUMER):  # only an empty one; its offsets go too
                coordinator = ctx.server.classic_groups if kind is GroupKindOf.CLASSIC else ctx.server.consumer_groups
                error = coordinator.delete_group(group_id)
                if error is ErrorCode.none and ctx.server.consumer_offsets.offsets.has_offsets(group_id):
                    error = await ctx.server.consumer_offsets.delete_group(group_id)
            elif kind is GroupKindOf.SIMPLE:
                error = await ctx.server.consumer_offsets.delete_group(group_id)
            else:
                error, _message = await ctx.server.share_groups.delete_group(group_id)
        results.append(make(result_cls, group_id=group_id, error_code=error))
    return make(resp_cls, throttle_time=NO_THROTTLE, results=tuple(results))
