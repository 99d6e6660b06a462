"""quafka's API extension: QuafkaDescribeInFlight (key 32000) and QuafkaAlterInFlight (key 32001),
v0 (`protocol/extensions.py`; docs/protocol.md, "quafka's API extension").

Describe shows a share group's in-flight windows as `core/in_flight.describe` sees them, with the
times made readable: a lock's time left in milliseconds, a due time as an epoch time, and each
holder's client id and host from the share group. With an offset it answers for that offset only
(the tools add what lies outside the window: below the start offset the record is settled, and
the group's dead-letter queue, named in the answer, tells whether it was dead-lettered).

Alter runs one force action on one share partition (`core/in_flight`), answered once its state
write is durable; `ValidateOnly` answers what it would change. Every applied action is logged.

Authorization (a quafka extension, so quafka's choice; docs/security.md): Describe needs DESCRIBE
on the GROUP and on each TOPIC, as DescribeShareGroupOffsets does (a topic named is answered
TOPIC_AUTHORIZATION_FAILED, with no topics named those the principal may not describe are left
out); Alter, a force action an operator takes, needs ALTER on the GROUP (an operation Kafka's
groups do not use, so no consumer's READ grant allows it) and READ on the TOPIC.

Errors, per level: a group that does not exist is GROUP_ID_NOT_FOUND; a topic that does not exist,
or a partition the topic lacks or the group has no share state for, UNKNOWN_TOPIC_OR_PARTITION with
a message; a bad range, action or row count INVALID_REQUEST with a message naming it.
"""

from __future__ import annotations

import logging

from quafka.broker.core import in_flight
from quafka.broker.core.acl_types import AclOperation, ResourceType
from quafka.protocol.share_state_records import ShareStateKey
from quafka.protocol.errors import ErrorCode
from quafka.protocol.extensions import (
    ACTION_ARCHIVE,
    ACTION_NAMES,
    ACTION_RELEASE,
    ACTION_RELEASE_KEY,
    QUAFKA_ALTER_IN_FLIGHT,
    QUAFKA_DESCRIBE_IN_FLIGHT,
    FailedKey,
    InFlightPartition,
    InFlightRow,
    InFlightTopic,
    QuafkaAlterInFlightResponse,
    QuafkaDescribeInFlightResponse,
)

from ..authorization import authorize, filter_authorized
from ..clock import monotonic_ms
from ..registry import handles

log = logging.getLogger("quafka.share")

MAX_ROWS_LIMIT = in_flight.MAX_ROWS
LOADING = "The coordinator is loading its state; retry."


async def _context(server, group_id: str, topic, index: int):
    """(share context, error, message) of one share partition of the group: it must have state."""
    if not 0 <= index < len(topic.partitions):
        return None, ErrorCode.unknown_topic_or_partition, f"topic {topic.name} has no partition {index}"
    manager = server.share_partitions
    ctx = manager.loaded(group_id, topic.topic_id, index)
    if ctx is None:
        if server.share_coordinator.coordinator.state(ShareStateKey(group_id, topic.topic_id, index)) is None:
            return None, ErrorCode.unknown_topic_or_partition, (
                f"group {group_id} has no share state for {topic.name}-{index} (it never fetched from it)")
        ctx = await manager.get(group_id, topic.topic_id, index)
        if ctx is None:
            return None, ErrorCode.kafka_storage_error, f"the share state of {topic.name}-{index} could not be read"
    else:
        manager.controls.prepare(ctx, server.state.group_config(group_id), monotonic_ms())
    return ctx, ErrorCode.none, None


def _group_error(server, group_id: str) -> tuple[ErrorCode, str | None]:
    if not server.coordinators_loaded:
        return ErrorCode.coordinator_load_in_progress, LOADING
    if not group_id:
        return ErrorCode.invalid_request, "GroupId must be set"
    if server.share_groups.coordinator.group(group_id) is None:
        return ErrorCode.group_id_not_found, f"Group {group_id} not found."
    return ErrorCode.none, None


# ----------------------------------------------------------------------------- describe


@handles(QUAFKA_DESCRIBE_IN_FLIGHT, 0, 0)
async def handle_describe_in_flight(ctx, req):
    server = ctx.server
    if server.authorizer is not None and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, req.group_id):
        return QuafkaDescribeInFlightResponse(error_code=ErrorCode.group_authorization_failed)
    error, message = _group_error(server, req.group_id)
    if error == ErrorCode.none and not 1 <= req.max_rows <= MAX_ROWS_LIMIT:
        error, message = ErrorCode.invalid_request, f"MaxRows must be 1 to {MAX_ROWS_LIMIT}, not {req.max_rows}"
    if error == ErrorCode.none and req.offset < -1:
        error, message = ErrorCode.invalid_request, f"Offset must be -1 (the windows) or an offset, not {req.offset}"
    if error != ErrorCode.none:
        return QuafkaDescribeInFlightResponse(error_code=error, error_message=message)
    group_id = req.group_id
    state = server.state
    if req.topics:
        wanted = [(t.topic_name, list(t.partitions)) for t in req.topics]
    else:  # every share partition the group holds state for
        by_id = state.topics_by_id
        keys = server.share_coordinator.coordinator.keys(group_id)
        names: dict[str, list[int]] = {}
        for key in keys:
            if key.topic_id in by_id:
                names.setdefault(by_id[key.topic_id].name, []).append(key.partition)
        wanted = sorted(names.items())
    describable = filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, [n for n, _ps in wanted])
    if not req.topics:
        wanted = [(n, ps) for n, ps in wanted if n in describable]
    group = server.share_groups.coordinator.group(group_id)
    topics = []
    for name, partitions in wanted:
        if name not in describable:
            topics.append(InFlightTopic(topic_name=name, error_code=ErrorCode.topic_authorization_failed))
            continue
        topic = state.topics.get(name)
        if topic is None:
            topics.append(InFlightTopic(topic_name=name, error_code=ErrorCode.unknown_topic_or_partition,
                                        error_message=f"topic {name} does not exist"))
            continue
        if not partitions:
            partitions = [k.partition for k in server.share_coordinator.coordinator.keys(group_id)
                          if k.topic_id == topic.topic_id]
        results = []
        for index in sorted(set(partitions)):
            share_ctx, error, message = await _context(server, group_id, topic, index)
            if share_ctx is None:
                results.append(InFlightPartition(partition_index=index, error_code=error, error_message=message))
                continue
            results.append(_describe_partition(server, group, share_ctx, req.offset, req.max_rows))
        topics.append(InFlightTopic(topic_name=name, partitions=tuple(results)))
    return QuafkaDescribeInFlightResponse(topics=tuple(topics))


def _describe_partition(server, group, share_ctx, offset: int, max_rows: int) -> InFlightPartition:
    sp = share_ctx.share_partition
    now_ms = monotonic_ms()
    if offset >= 0:
        view = in_flight.describe(sp, offset, offset, max_rows=1, now_ms=now_ms)
    else:
        view = in_flight.describe(sp, max_rows=max_rows, now_ms=now_ms)
    to_wall = server.share_partitions.controls.to_wall
    members = group.members if group is not None else {}
    rows = []
    for r in view.rows:
        member = members.get(r.member_id) if r.member_id else None
        rows.append(InFlightRow(
            first_offset=r.first_offset, last_offset=r.last_offset, state=int(r.state), delivery_count=r.delivery_count,
            member_id=r.member_id, client_id=member.client_id if member else None,
            client_host=member.client_host if member else None,
            lock_remaining_ms=max(r.lock_deadline_ms - now_ms, 0) if r.member_id else -1,
            due_at_ms=to_wall(r.due_ms) if r.due_ms else -1, wait_reason=r.wait, blocked=r.blocked,
            pending=r.pending, key=r.key))
    group_config = server.state.group_config(share_ctx.group_id)
    return InFlightPartition(
        partition_index=share_ctx.index, start_offset=view.start_offset, end_offset=view.end_offset,
        log_start_offset=share_ctx.log.log_start_offset, log_end_offset=share_ctx.log.log_end_offset,
        in_flight_count=view.in_flight_count, waiting_backoff_count=view.waiting_backoff_count,
        waiting_delivery_count=view.waiting_delivery_count, blocked_count=view.blocked_count,
        max_record_locks=group_config.partition_max_record_locks, key_ordering=sp.policy.key_ordering,
        truncated=view.truncated,
        dead_letter_topic=group_config.dlq_topic_name if server.share_partitions.dead_letters.enabled(
            share_ctx.group_id, group_config) else None,
        rows=tuple(rows),
        failed_keys=tuple(FailedKey(key=f.key, failed_offset=f.failed_offset, waiting_offsets=f.waiting_offsets)
                          for f in view.failed_keys))


# ----------------------------------------------------------------------------- alter


@handles(QUAFKA_ALTER_IN_FLIGHT, 0, 0)
async def handle_alter_in_flight(ctx, req):
    server = ctx.server
    if server.authorizer is not None:
        if not authorize(ctx, AclOperation.ALTER, ResourceType.GROUP, req.group_id):
            return QuafkaAlterInFlightResponse(error_code=ErrorCode.group_authorization_failed)
        if not authorize(ctx, AclOperation.READ, ResourceType.TOPIC, req.topic_name):
            return QuafkaAlterInFlightResponse(error_code=ErrorCode.topic_authorization_failed)
    error, message = _group_error(server, req.group_id)
    if error == ErrorCode.none and req.action not in ACTION_NAMES:
        error, message = ErrorCode.invalid_request, f"unknown action {req.action} (0 release, 1 archive, 2 release-key)"
    if error == ErrorCode.none and req.action == ACTION_RELEASE_KEY and req.key is None:
        error, message = ErrorCode.invalid_request, "releasing a key needs the key"
    topic = server.state.topics.get(req.topic_name) if error == ErrorCode.none else None
    if error == ErrorCode.none and topic is None:
        error, message = ErrorCode.unknown_topic_or_partition, f"topic {req.topic_name} does not exist"
    share_ctx = None
    if error == ErrorCode.none:
        share_ctx, error, message = await _context(server, req.group_id, topic, req.partition_index)
    if error != ErrorCode.none:
        return QuafkaAlterInFlightResponse(error_code=error, error_message=message)
    action = ACTION_NAMES[req.action]
    if req.validate_only:
        result = in_flight.preview(share_ctx.share_partition, req.first_offset, req.last_offset,
                                   key=req.key if req.action == ACTION_RELEASE_KEY else None)
    else:
        dlq = server.share_partitions.dead_letters.enabled(req.group_id)
        if req.action == ACTION_RELEASE:
            def operation(sp, now_ms):
                return in_flight.force_release(sp, req.first_offset, req.last_offset,
                                               reset_delivery_count=req.reset_delivery_count, now_ms=now_ms)
        elif req.action == ACTION_ARCHIVE:
            def operation(sp, now_ms):
                return in_flight.force_archive(sp, req.first_offset, req.last_offset, now_ms=now_ms, dlq_enabled=dlq)
        else:
            def operation(sp, now_ms):
                return in_flight.release_key(sp, bytes(req.key), now_ms)
        result = await server.share_partitions.force(share_ctx, operation)
        if result.error == ErrorCode.none:
            server.share_partitions.controls.count_force(share_ctx.key, action, result.changed)
            what = f"key {bytes(req.key)!r}" if req.action == ACTION_RELEASE_KEY else \
                f"offsets {req.first_offset}-{req.last_offset}"
            log.info("force %s on share group %s, %s-%d, %s (client %r at %s): %d records changed, %d skipped, "
                     "%d not fetched yet, %d keys released", action, req.group_id, req.topic_name, req.partition_index,
                     what, ctx.client_id, ctx.peer, result.changed, result.skipped, result.not_fetched,
                     result.keys_released)
    return QuafkaAlterInFlightResponse(
        error_code=result.error, error_message=result.message, changed_count=result.changed,
        skipped_count=result.skipped, not_fetched_count=result.not_fetched, keys_released=result.keys_released)
