"""Share-group offset admin: DescribeShareGroupOffsets (key 90, v0-v1), AlterShareGroupOffsets
(key 91, v0) and DeleteShareGroupOffsets (key 92, v0), as Kafka 4.2-4.4 serve them.

- Describe reads the share coordinator's summary of each share partition (ReadShareGroupState-
  Summary): the start offset (SPSO) as last made durable, the leader epoch and, from v1, the lag
  of KIP-1226: log end offset - start offset - DeliveryCompleteCount (-1 when unknown). A share
  partition with no state yet has start offset -1. Topics null means every topic the group has
  share state for.
- Alter is for empty groups only (NON_EMPTY_GROUP otherwise, for the whole request): the group
  epoch moves on and each share partition is re-initialised with a new state epoch at the given
  start offset (the caller resolves earliest/latest/timestamps to offsets). A group that does not
  exist is created empty, as Kafka does.
- Delete is for empty groups only: the group's share state for each topic is tombstoned.
"""

from __future__ import annotations

import uuid

from quafka.broker.core.acl_types import AclOperation, ResourceType
from quafka.protocol.share_state_records import ShareStateKey
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize, filter_authorized
from ..registry import handles
from ._util import NO_THROTTLE, item_class, make, response_class

ZERO_UUID = uuid.UUID(int=0)
LOADING = "The coordinator is loading its state; retry."


def _lag(log_end_offset: int, start_offset: int, delivery_complete_count: int) -> int:
    if start_offset < 0 or delivery_complete_count < 0:
        return -1
    return max(log_end_offset - start_offset - delivery_complete_count, 0)


@handles(90, 0, 1)
async def handle_describe_share_group_offsets(ctx, req):
    server = ctx.server
    resp_cls = response_class(90, ctx.api_version)
    group_cls = item_class(resp_cls, "groups")
    topic_cls = item_class(group_cls, "topics")
    part_cls = item_class(topic_cls, "partitions")
    groups = []
    checked = server.authorizer is not None
    for g in req.groups:
        # KafkaApis.handleDescribeShareGroupOffsetsRequest (KIP-932): DESCRIBE on the GROUP
        if checked and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id):
            groups.append(make(group_cls, group_id=g.group_id, topics=(),
                               error_code=ErrorCode.group_authorization_failed, error_message=None))
            continue
        if not server.coordinators_loaded:
            groups.append(make(group_cls, group_id=g.group_id, topics=(),
                               error_code=ErrorCode.coordinator_load_in_progress, error_message=LOADING))
            continue
        if server.share_groups.coordinator.group(g.group_id) is None:
            groups.append(make(group_cls, group_id=g.group_id, topics=(), error_code=ErrorCode.group_id_not_found,
                               error_message=f"Group {g.group_id} not found."))
            continue
        if g.topics is None:  # every topic the group holds share state for
            meta = server.share_groups.state_metadata.get(g.group_id)
            by_id = server.state.topics_by_id
            wanted = [(by_id[t].name, sorted(ps)) for t, (_n, ps) in sorted((meta.initialized if meta else {}).items())
                      if t in by_id]
        else:
            wanted = [(t.topic_name, list(t.partitions)) for t in g.topics]
        # and DESCRIBE on each TOPIC: with every topic asked for, those it may not are left out; named,
        # they are answered TOPIC_AUTHORIZATION_FAILED (describeShareGroupOffsetsForGroup)
        describable = filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, [n for n, _ps in wanted])
        if g.topics is None:
            wanted = [(n, ps) for n, ps in wanted if n in describable]
        topics = []
        for name, partitions in wanted:
            if name not in describable:
                topics.append(make(topic_cls, topic_name=name, topic_id=ZERO_UUID, partitions=tuple(
                    make(part_cls, partition_index=p, start_offset=-1, leader_epoch=-1, lag=-1,
                         error_code=ErrorCode.topic_authorization_failed, error_message=None) for p in partitions)))
                continue
            topic = server.state.topics.get(name)
            parts = []
            for p in partitions:
                if topic is None or not 0 <= p < len(topic.partitions):
                    parts.append(make(part_cls, partition_index=p, start_offset=-1, leader_epoch=-1, lag=-1,
                                      error_code=ErrorCode.unknown_topic_or_partition,
                                      error_message="This server does not host this topic-partition."))
                    continue
                try:
                    summary = await server.share_coordinator.read_summary(ShareStateKey(g.group_id, topic.topic_id, p))
                except OSError:  # its fsync failed: the log directory is offline
                    parts.append(make(part_cls, partition_index=p, start_offset=-1, leader_epoch=-1, lag=-1,
                                      error_code=ErrorCode.kafka_storage_error,
                                      error_message="The share state could not be made durable."))
                    continue
                if summary.error == ErrorCode.none:
                    start, epoch = summary.start_offset, summary.leader_epoch
                    lag = _lag(topic.partitions[p].log.log_end_offset, start, summary.delivery_complete_count)
                    error = ErrorCode.none
                elif summary.error == ErrorCode.unknown_topic_or_partition:  # no state yet
                    start, epoch, lag, error = -1, -1, -1, ErrorCode.none
                else:
                    start, epoch, lag, error = -1, -1, -1, summary.error
                parts.append(make(part_cls, partition_index=p, start_offset=start, leader_epoch=epoch, lag=lag,
                                  error_code=error, error_message=None))
            topics.append(make(topic_cls, topic_name=name, topic_id=topic.topic_id if topic else ZERO_UUID,
                               partitions=tuple(parts)))
        groups.append(make(group_cls, group_id=g.group_id, topics=tuple(topics), error_code=ErrorCode.none,
                           error_message=None))
    return make(resp_cls, throttle_time=NO_THROTTLE, groups=tuple(groups))


def _group_refusal(server, group_id: str, *, must_exist: bool) -> tuple[ErrorCode, str] | None:
    if not server.coordinators_loaded:
        return ErrorCode.coordinator_load_in_progress, LOADING
    if not group_id:
        return ErrorCode.invalid_group_id, "The group id must not be empty."
    group = server.share_groups.coordinator.group(group_id)
    if group is None and must_exist:
        return ErrorCode.group_id_not_found, f"Group {group_id} not found."
    if group is not None and group.members:
        return ErrorCode.non_empty_group, (f"The share group {group_id} has {len(group.members)} member(s); "
                                           "offsets can be changed only for an empty group.")
    return None


@handles(91, 0, 0)
async def handle_alter_share_group_offsets(ctx, req):
    server = ctx.server
    resp_cls = response_class(91, ctx.api_version)
    topic_cls = item_class(resp_cls, "responses")
    part_cls = item_class(topic_cls, "partitions")
    # KafkaApis.handleAlterShareGroupOffsetsRequest: READ on the GROUP (KIP-932), then READ on each
    # TOPIC (kafka-reference §2.9), TOPIC_AUTHORIZATION_FAILED on its partitions
    if server.authorizer is not None and not authorize(ctx, AclOperation.READ, ResourceType.GROUP, req.group_id):
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed,
                    error_message=None, responses=())
    readable = filter_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, [t.topic_name for t in req.topics])
    refusal = _group_refusal(server, req.group_id, must_exist=False)
    responses = []
    valid: list[tuple] = []
    for t in req.topics:
        topic = server.state.topics.get(t.topic_name)
        parts, offsets = [], {}
        for p in t.partitions:
            error, message = ErrorCode.none, None
            if t.topic_name not in readable:
                error = ErrorCode.topic_authorization_failed
            elif refusal is not None:
                error, message = refusal
            elif topic is None or not 0 <= p.partition_index < len(topic.partitions):
                error, message = ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
            elif p.start_offset < 0:
                error, message = ErrorCode.invalid_request, f"StartOffset must be >= 0, got {p.start_offset}."
            else:
                offsets[p.partition_index] = p.start_offset
            parts.append(make(part_cls, partition_index=p.partition_index, error_code=error, error_message=message))
        if offsets and topic is not None:
            valid.append((topic, offsets))
        responses.append(make(topic_cls, topic_name=t.topic_name, topic_id=topic.topic_id if topic else ZERO_UUID,
                              partitions=tuple(parts)))
    for topic, offsets in valid:
        stored = await server.share_groups.reset_offsets(req.group_id, topic.topic_id, topic.name, offsets)
        if stored != ErrorCode.none and refusal is None:
            refusal = (stored, "The group coordinator could not store the new offsets; retry.")
    error, message = refusal if refusal is not None else (ErrorCode.none, None)
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=error, error_message=message,
                responses=tuple(responses))


@handles(92, 0, 0)
async def handle_delete_share_group_offsets(ctx, req):
    server = ctx.server
    resp_cls = response_class(92, ctx.api_version)
    topic_cls = item_class(resp_cls, "responses")
    # KafkaApis.handleDeleteShareGroupOffsetsRequest: DELETE on the GROUP, then READ on each TOPIC
    # (kafka-reference §2.9; KIP-932's table says READ on the GROUP: the reference wins)
    if server.authorizer is not None and not authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, req.group_id):
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed,
                    error_message=None, responses=())
    refusal = _group_refusal(server, req.group_id, must_exist=True)
    if refusal is not None:
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=refusal[0], error_message=refusal[1],
                    responses=())
    meta = server.share_groups.state_metadata.get(req.group_id)
    held = set(meta.initialized) | set(meta.initializing) if meta else set()
    responses, doomed = [], []
    readable = filter_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, [t.topic_name for t in req.topics])
    for t in req.topics:
        topic = server.state.topics.get(t.topic_name)
        if t.topic_name not in readable:
            responses.append(make(topic_cls, topic_name=t.topic_name, topic_id=ZERO_UUID,
                                  error_code=ErrorCode.topic_authorization_failed, error_message=None))
            continue
        if topic is None:
            error, message = ErrorCode.unknown_topic_or_partition, "This server does not host this topic."
        elif topic.topic_id not in held:
            error, message = (ErrorCode.unknown_topic_or_partition,
                              f"The share group {req.group_id} has no offsets for topic {t.topic_name}.")
        else:
            error, message = ErrorCode.none, None
            doomed.append(topic.topic_id)
        responses.append(make(topic_cls, topic_name=t.topic_name, topic_id=topic.topic_id if topic else ZERO_UUID,
                              error_code=error, error_message=message))
    error, message = ErrorCode.none, None
    if doomed:
        error = await server.share_groups.delete_offsets(req.group_id, doomed)
        if error != ErrorCode.none:
            message = "The group coordinator could not store the deletion; retry."
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=error, error_message=message,
                responses=tuple(responses))
