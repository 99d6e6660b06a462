"""Consumer-group offsets: OffsetCommit (key 8, v2-10), OffsetFetch (key 9, v1-10) and
OffsetDelete (key 47, v0), the versions Kafka 4.2 serves (KIP-896 removed the older ones).

What is checked here, before the coordinator (`ConsumerOffsetsService`), as Kafka's `KafkaApis`
does: an empty group id (INVALID_GROUP_ID), the coordinator still loading
(COORDINATOR_LOAD_IN_PROGRESS), and each partition of a commit: a topic or partition that does not
exist gets UNKNOWN_TOPIC_OR_PARTITION (v10, by topic id: UNKNOWN_TOPIC_ID) and is not passed on.
OffsetCommit has no top-level error: a group-level error is answered on every partition.
OffsetFetch answers -1 with no error for partitions and groups that have no offset; `topics` null
(v2+) means every partition the group has an offset for. RequireStable (v7+): a partition with a
pending transactional offset (TxnOffsetCommit whose transaction has not ended) answers
UNSTABLE_OFFSET_COMMIT, as Kafka's OffsetMetadataManager.fetchOffsets does.
"""

from __future__ import annotations

import datetime
import uuid

from quafka.broker.core.acl_types import AclOperation, ResourceType
from quafka.broker.core.consumer_offsets import CommitPartition, CommitRequest, validate_fetch
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize, filter_authorized
from ..registry import handles
from ._util import NO_THROTTLE, item_class, make, response_class

ZERO_UUID = uuid.UUID(int=0)


def _refusal(server, group_id: str) -> ErrorCode | None:
    if not group_id:
        return ErrorCode.invalid_group_id
    if not server.coordinators_loaded:
        return ErrorCode.coordinator_load_in_progress
    return None


def _ms(value) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else int(value)


def _topic_name(server, topic, by_id: bool) -> tuple[str | None, uuid.UUID]:
    if by_id:
        found = server.state.topics_by_id.get(topic.topic_id)
        return (found.name if found else None), topic.topic_id
    found = server.state.topics.get(topic.name)
    return topic.name, (found.topic_id if found else ZERO_UUID)


@handles(8, 2, 10)
async def handle_offset_commit(ctx, req):
    server = ctx.server
    by_id = ctx.api_version >= 10
    resp_cls = response_class(8, ctx.api_version)
    topic_cls = item_class(resp_cls, "topics")
    part_cls = item_class(topic_cls, "partitions")
    refusal = _refusal(server, req.group_id)
    errors: dict[tuple[str, int], ErrorCode] = {}
    valid: list[CommitPartition] = []
    group_denied = readable = None
    if server.authorizer is not None:
        # KafkaApis.handleOffsetCommitRequest: READ on the GROUP (else GROUP_AUTHORIZATION_FAILED on
        # every partition), then READ on each TOPIC (after an unknown topic id, before an unknown name)
        group_denied = not authorize(ctx, AclOperation.READ, ResourceType.GROUP, req.group_id)
        readable = filter_authorized(ctx, AclOperation.READ, ResourceType.TOPIC,
                                     [_topic_name(server, t, by_id)[0] for t in req.topics])
    for t in req.topics:
        name, topic_id = _topic_name(server, t, by_id)
        topic = server.state.topics.get(name) if name is not None else None
        for p in t.partitions:
            key = (name if name is not None else str(t.topic_id), p.partition_index)
            if group_denied:
                errors[key] = ErrorCode.group_authorization_failed
            elif by_id and name is None:
                errors[key] = ErrorCode.unknown_topic_id
            elif readable is not None and name not in readable:
                errors[key] = ErrorCode.topic_authorization_failed
            elif topic is None:
                errors[key] = ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition
            elif not 0 <= p.partition_index < len(topic.partitions):
                errors[key] = ErrorCode.unknown_topic_or_partition
            elif refusal is not None:
                errors[key] = refusal
            else:
                valid.append(CommitPartition(name, p.partition_index, p.committed_offset,
                                             getattr(p, "committed_leader_epoch", -1), p.committed_metadata,
                                             topic_id if by_id else ZERO_UUID))
    if valid:
        request = CommitRequest(req.group_id, req.generation_id_or_member_epoch, req.member_id or "",
                                getattr(req, "group_instance_id", None), ctx.api_version,
                                _ms(getattr(req, "retention_time", -1)), tuple(valid))
        errors.update(await server.consumer_offsets.commit(request))
    topics = []
    for t in req.topics:
        name, topic_id = _topic_name(server, t, by_id)
        parts = tuple(make(part_cls, partition_index=p.partition_index,
                           error_code=errors[(name if name is not None else str(t.topic_id), p.partition_index)])
                      for p in t.partitions)
        topics.append(make(topic_cls, name=t.name if not by_id else None, topic_id=topic_id, partitions=parts))
    return make(resp_cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _fetch_group(ctx, group_id: str, topics, by_id: bool, topic_cls, part_cls, member_id: str | None = None,
                 member_epoch: int = -1, require_stable: bool = False) -> tuple[ErrorCode, tuple]:
    """(group error, topics) of one group of an OffsetFetch; v9+ carries the member id and epoch of a
    consumer-group member, checked as ConsumerGroup.validateOffsetFetch does."""
    server = ctx.server
    checked = server.authorizer is not None
    # KafkaApis.handleOffsetFetchRequest: DESCRIBE on the GROUP
    if checked and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed, ()
    refusal = _refusal(server, group_id)
    if refusal is not None:
        return refusal, ()
    member_error = validate_fetch(server.consumer_offsets.view(group_id), member_id, member_epoch)
    if member_error is not ErrorCode.none:
        return member_error, ()
    if topics is None:
        fetched = server.consumer_offsets.fetch(group_id, None, require_stable)
        wanted: dict[str, list[int]] = {}
        for (name, partition) in fetched:
            wanted.setdefault(name, []).append(partition)
        # KafkaApis.fetchAllOffsetsForGroup: the topics the principal may not DESCRIBE are left out
        describable = filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, wanted)
        requested = [(name, server.state.topics[name].topic_id if name in server.state.topics else ZERO_UUID, ps)
                     for name, ps in sorted(wanted.items()) if name in describable]
        denied: set = set()
    else:
        requested = []
        for t in topics:
            name, topic_id = _topic_name(server, t, by_id)
            requested.append((name, topic_id, list(t.partition_indexes)))
        # KafkaApis.fetchOffsetsForGroup: a topic the principal may not DESCRIBE gets
        # TOPIC_AUTHORIZATION_FAILED (after an unknown topic id) and is not looked up
        denied = set() if not checked else {name for name, _id, _ps in requested if name is not None} - \
            filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                              [name for name, _id, _ps in requested if name is not None])
        known = [(name, p) for name, _id, ps in requested if name is not None and name not in denied for p in ps]
        fetched = server.consumer_offsets.fetch(group_id, known, require_stable)
    out = []
    for name, topic_id, partitions in requested:
        parts = []
        for p in partitions:
            if name is None:  # v10: an unknown topic id
                parts.append(make(part_cls, partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                                  metadata="", error_code=ErrorCode.unknown_topic_id))
                continue
            if name in denied:
                parts.append(make(part_cls, partition_index=p, committed_offset=-1, committed_leader_epoch=-1,
                                  metadata="", error_code=ErrorCode.topic_authorization_failed))
                continue
            offset = fetched[(name, p)]
            parts.append(make(part_cls, partition_index=p, committed_offset=offset.offset,
                              committed_leader_epoch=offset.leader_epoch, metadata=offset.metadata,
                              error_code=offset.error))
        out.append(make(topic_cls, name=name or "", topic_id=topic_id, partitions=tuple(parts)))
    return ErrorCode.none, tuple(out)


@handles(9, 1, 10)
async def handle_offset_fetch(ctx, req):
    by_id = ctx.api_version >= 10
    resp_cls = response_class(9, ctx.api_version)
    if ctx.api_version >= 8:
        group_cls = item_class(resp_cls, "groups")
        topic_cls = item_class(group_cls, "topics")
        part_cls = item_class(topic_cls, "partitions")
        groups = []
        for g in req.groups:
            error, topics = _fetch_group(ctx, g.group_id, g.topics, by_id, topic_cls, part_cls,
                                         getattr(g, "member_id", None), int(getattr(g, "member_epoch", -1)),
                                         bool(req.require_stable))
            groups.append(make(group_cls, group_id=g.group_id, topics=topics, error_code=error))
        return make(resp_cls, throttle_time=NO_THROTTLE, groups=tuple(groups))
    topic_cls = item_class(resp_cls, "topics")
    part_cls = item_class(topic_cls, "partitions")
    error, topics = _fetch_group(ctx, req.group_id, req.topics, False, topic_cls, part_cls,
                                 require_stable=bool(getattr(req, "require_stable", False)))
    if error is not ErrorCode.none and ctx.api_version < 2:  # v1 has no top-level error: per partition
        topics = tuple(make(topic_cls, name=t.name, partitions=tuple(
            make(part_cls, partition_index=p, committed_offset=-1, metadata="", error_code=error)
            for p in t.partition_indexes)) for t in (req.topics or ()))
    return make(resp_cls, throttle_time=NO_THROTTLE, topics=topics, error_code=error)


@handles(47, 0, 0)
async def handle_offset_delete(ctx, req):
    server = ctx.server
    resp_cls = response_class(47, ctx.api_version)
    topic_cls = item_class(resp_cls, "topics")
    part_cls = item_class(topic_cls, "partitions")
    # KafkaApis.handleOffsetDeleteRequest: DELETE on the GROUP, then READ on each TOPIC
    if server.authorizer is not None and not authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, req.group_id):
        return make(resp_cls, error_code=ErrorCode.group_authorization_failed, throttle_time=NO_THROTTLE, topics=())
    refusal = _refusal(server, req.group_id)
    if refusal is not None:
        return make(resp_cls, error_code=refusal, throttle_time=NO_THROTTLE, topics=())
    errors: dict[tuple[str, int], ErrorCode] = {}
    valid: list[tuple[str, int]] = []
    readable = filter_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, [t.name for t in req.topics])
    for t in req.topics:
        topic = server.state.topics.get(t.name)
        for p in t.partitions:
            if t.name not in readable:
                errors[(t.name, p.partition_index)] = ErrorCode.topic_authorization_failed
            elif topic is None or not 0 <= p.partition_index < len(topic.partitions):
                errors[(t.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
            else:
                valid.append((t.name, p.partition_index))
    plan = await server.consumer_offsets.delete(req.group_id, valid)
    if plan.error is not ErrorCode.none:
        return make(resp_cls, error_code=plan.error, throttle_time=NO_THROTTLE, topics=())
    errors.update(plan.errors)
    topics = tuple(make(topic_cls, name=t.name, partitions=tuple(
        make(part_cls, partition_index=p.partition_index, error_code=errors[(t.name, p.partition_index)])
        for p in t.partitions)) for t in req.topics)
    return make(resp_cls, error_code=ErrorCode.none, throttle_time=NO_THROTTLE, topics=topics)
