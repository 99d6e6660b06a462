"""KIP-848 consumer groups: ConsumerGroupHeartbeat (key 68, v0-1) and ConsumerGroupDescribe
(key 69, v0-1), the versions Kafka 4.2 serves.

The coordinator is `server.consumer_groups` (ConsumerGroupService over the pure
ConsumerGroupCoordinator). Version differences:

- ConsumerGroupHeartbeat v0: a member joining with an empty member id gets one made by the
  coordinator; v1 (KIP-1082) requires the client to make it, so an empty id is INVALID_REQUEST;
  v1 adds SubscribedTopicRegex (resolved by the coordinator against every topic name, full
  matches; an invalid one gets INVALID_REGULAR_EXPRESSION); an empty regex, which librdkafka sends
  with a list of names, means none (as Kafka reads it);
- ConsumerGroupDescribe v1 adds each member's MemberType (1: a consumer-protocol member).

A group id that names another kind of group (group_kinds.py) gets GROUP_ID_NOT_FOUND "Group G is
not a consumer group." from both, as Kafka answers; an empty classic or simple group is converted
by a member's first heartbeat (consumer_groups.py). Until the coordinators have loaded, both answer
COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

import datetime
import functools
from typing import Callable

from quafka.broker.core.acl_types import AclOperation, ResourceType
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize, authorized_operations, filter_authorized
from ..consumer_groups import new_member_id
from ..group_kinds import GroupKindOf, group_kind
from ..registry import handles
from ._util import AUTHORIZED_OPERATIONS_OMITTED, NO_THROTTLE, item_class, make, response_class
from .share_group import LOADING, client_host, hide_undescribable_topics


def _ms(value) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else int(value)


@handles(68, 0, 1)
async def handle_consumer_group_heartbeat(ctx, req):
    resp_cls = response_class(68, ctx.api_version)

    def answer(error: ErrorCode, message: str | None, member_id: str | None = None, member_epoch: int = 0,
               heartbeat_interval_ms: int = 0, assignment=None):
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=error, error_message=message, member_id=member_id,
                    member_epoch=member_epoch, heartbeat_interval=datetime.timedelta(milliseconds=heartbeat_interval_ms),
                    assignment=assignment)

    describable: Callable[[str], bool] | None = None
    authorizer = ctx.server.authorizer
    if authorizer is not None:
        # KafkaApis.handleConsumerGroupHeartbeat: READ on the GROUP, then DESCRIBE on every subscribed
        # topic named (TOPIC_AUTHORIZATION_FAILED, no message, when one is not). The topics the group's
        # regexes resolve to are filtered by the DESCRIBE permission of the member whose heartbeat
        # resolves them (TopicRegexResolver.filterTopicDescribeAuthorizedTopics, which asks with
        # logIfDenied=false: a topic left out is not an audited denial)
        session = ctx.session
        describable = functools.partial(authorizer.authorize, session, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                        log_denied=False)

        if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, req.group_id):
            return answer(ErrorCode.group_authorization_failed, None)
        if req.subscribed_topic_names:
            wanted = set(req.subscribed_topic_names)
            if len(filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, wanted)) < len(wanted):
                return answer(ErrorCode.topic_authorization_failed, None)
    if not ctx.server.coordinators_loaded:
        return answer(ErrorCode.coordinator_load_in_progress, LOADING)
    member_id = req.member_id
    if ctx.api_version == 0 and not member_id and req.member_epoch == 0:
        member_id = new_member_id()  # v0: the coordinator names a joining member
    owned = None if req.topic_partitions is None else {
        tp.topic_id: tuple(int(p) for p in tp.partitions) for tp in req.topic_partitions}
    result = await ctx.server.consumer_groups.heartbeat(
        req.group_id, member_id, int(req.member_epoch), instance_id=req.instance_id, rack_id=req.rack_id,
        rebalance_timeout_ms=_ms(req.rebalance_timeout), subscribed_topic_names=req.subscribed_topic_names,
        subscribed_topic_regex=getattr(req, "subscribed_topic_regex", None) or None, server_assignor=req.server_assignor,
        topic_partitions=owned, client_id=ctx.client_id or "", client_host=client_host(ctx.peer),
        describable=describable)
    assignment = None
    if result.assignment is not None:
        assignment_cls = item_class(resp_cls, "assignment")
        tp_cls = item_class(assignment_cls, "topic_partitions")
        assignment = make(assignment_cls, topic_partitions=tuple(
            make(tp_cls, topic_id=topic_id, partitions=tuple(partitions))
            for topic_id, partitions in sorted(result.assignment.items(), key=lambda kv: str(kv[0]))))
    return answer(result.error, result.message, result.member_id, result.member_epoch, result.heartbeat_interval_ms,
                  assignment)


@handles(69, 0, 1)
async def handle_consumer_group_describe(ctx, req):
    server = ctx.server
    resp_cls = response_class(69, ctx.api_version)
    group_cls = item_class(resp_cls, "groups")
    member_cls = item_class(group_cls, "members")
    assignment_cls = item_class(member_cls, "assignment")
    tp_cls = item_class(assignment_cls, "topic_partitions")

    def refused(group_id: str, error: ErrorCode, message: str):
        return make(group_cls, error_code=error, error_message=message, group_id=group_id, group_state="",
                    group_epoch=0, assignment_epoch=0, assignor_name="", members=(),
                    authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)

    def render(parts):
        return make(assignment_cls, topic_partitions=tuple(
            make(tp_cls, topic_id=topic_id, topic_name=name, partitions=partitions) for topic_id, name, partitions in parts))

    groups = []
    for group_id in req.group_ids:
        # KafkaApis.handleConsumerGroupDescribe: DESCRIBE on each GROUP
        if server.authorizer is not None and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(refused(group_id, ErrorCode.group_authorization_failed, None))
            continue
        if not server.coordinators_loaded:
            groups.append(refused(group_id, ErrorCode.coordinator_load_in_progress, LOADING))
            continue
        kind = group_kind(server, group_id)
        if kind not in (None, GroupKindOf.CONSUMER):
            groups.append(refused(group_id, ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group."))
            continue
        [g] = server.consumer_groups.describe([group_id])
        members = tuple(
            make(member_cls, member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                 member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                 subscribed_topic_names=m.subscribed_topic_names, subscribed_topic_regex=m.subscribed_topic_regex,
                 assignment=render(m.assignment), target_assignment=render(m.target_assignment),
                 **({"member_type": m.member_type} if ctx.api_version >= 1 else {}))
            for m in g.members)
        ok = g.error == ErrorCode.none
        operations = authorized_operations(ctx, ResourceType.GROUP, g.group_id) \
            if ok and req.include_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED
        groups.append(make(group_cls, error_code=g.error, error_message=g.message, group_id=g.group_id,
                           group_state=g.state, group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch,
                           assignor_name=g.assignor_name, members=members, authorized_operations=operations))
    # KafkaApis.handleConsumerGroupDescribe: a group whose members' assignments or target
    # assignments name a topic the principal may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED
    groups = hide_undescribable_topics(ctx, groups, ("assignment", "target_assignment"))
    return make(resp_cls, throttle_time=NO_THROTTLE, groups=tuple(groups))
