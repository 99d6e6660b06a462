"""ShareFetch (key 78) and ShareAcknowledge (key 79), v1–v2.

A ShareFetch carries the share session epoch (kafka-reference §2.5), piggybacked acknowledgements
for records fetched earlier, and asks for new records from the session's partitions. The broker
applies the acknowledgements (per partition, atomically; errors in AcknowledgeErrorCode), then
acquires records for the member and returns the stored batches that hold them together with the
AcquiredRecords ranges (clients deliver only those offsets). When nothing can be acquired the
request parks until new data, a release, a lock expiry or MaxWaitMs. With IsRenewAck (v2) the
request only acknowledges (renews) and fetches nothing.

ShareAcknowledge carries acknowledgements only (commitSync/commitAsync, and close at epoch -1).
"""

from __future__ import annotations

import asyncio
import datetime

from quafka.protocol.errors import ErrorCode

from ..clock import wall_clock_ms
from ..registry import handles
from ..state import LEADER_EPOCH
from ._util import NO_THROTTLE, item_class, make, response_class

MAX_MEMBER_ID_LENGTH = 36
MAX_ACK_TYPE = {1: 3, 2: 4}
INITIAL_EPOCH, FINAL_EPOCH = 0, -1


def validate_ack_batches(batches, version: int, is_renew: bool) -> ErrorCode:
    """kafka-reference §2.4: the shape of a partition's acknowledgement batches."""
    previous_last = None
    max_type = MAX_ACK_TYPE[version]
    for b in batches:
        if b.first_offset > b.last_offset or b.first_offset < 0:
            return ErrorCode.invalid_request
        if previous_last is not None and b.first_offset <= previous_last:
            return ErrorCode.invalid_request
        types = b.acknowledge_types
        size = b.last_offset - b.first_offset + 1
        if not types or (len(types) != 1 and len(types) != size):
            return ErrorCode.invalid_request
        for t in types:
            if t < 0 or t > max_type or (t == 4 and not is_renew):
                return ErrorCode.invalid_request
        previous_last = b.last_offset
    return ErrorCode.none


def _lock_timeout(group_config) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=group_config.record_lock_duration_ms)


def _request_acks(req) -> tuple[dict, list]:
    """{(topic id, partition): [ack batches]} merged by topic id (librdkafka may repeat a topic),
    and the partitions in request order."""
    acks: dict[tuple, list] = {}
    order: list[tuple] = []
    for topic in req.topics:
        for p in topic.partitions:
            key = (topic.topic_id, p.partition_index)
            if key not in acks:
                acks[key] = []
                order.append(key)
            acks[key].extend(p.acknowledgement_batches)
    return acks, order


async def _apply_acks(server, group_id, member_id, acks: dict, version: int, is_renew: bool, group_config,
                      now_ms: int) -> dict[tuple, ErrorCode]:
    results: dict[tuple, ErrorCode] = {}
    manager = server.share_partitions
    for key, batches in acks.items():
        if not batches:
            continue
        error = validate_ack_batches(batches, version, is_renew)
        if error == ErrorCode.none:
            ctx = manager.get(group_id, key[0], key[1])
            if ctx is None:
                error = ErrorCode.unknown_topic_id if server.state.topics_by_id.get(key[0]) is None \
                    else ErrorCode.unknown_topic_or_partition
            else:
                error = await manager.acknowledge(
                    ctx, member_id, [(b.first_offset, b.last_offset, b.acknowledge_types) for b in batches],
                    group_config, now_ms)
        results[key] = error
    return results


def _check_identity(req) -> str | None:
    if req.group_id is None or req.group_id == "":
        return "GroupId must be set"
    if not req.member_id or len(req.member_id) > MAX_MEMBER_ID_LENGTH:
        return f"MemberId must be 1 to {MAX_MEMBER_ID_LENGTH} characters"
    return None


def _response(resp_cls, group_config, by_topic: dict | None = None, error: ErrorCode = ErrorCode.none,
              message: str | None = None):
    """A ShareFetch/ShareAcknowledge response: {topic id: [partition entries]} or a top-level error."""
    topic_cls = item_class(resp_cls, "responses")
    return make(
        resp_cls, throttle_time=NO_THROTTLE, error_code=error, error_message=message,
        acquisition_lock_timeout=_lock_timeout(group_config) if group_config else datetime.timedelta(0),
        responses=tuple(make(topic_cls, topic_id=tid, partitions=tuple(parts)) for tid, parts in (by_topic or {}).items()),
        node_endpoints=(),
    )


def _top_level_error(resp_cls, error: ErrorCode, message: str | None, group_config):
    return _response(resp_cls, group_config, error=error, message=message)


def _failed(resp, field: str) -> bool:
    """The response carries an error: top level, or `field` of any partition."""
    if resp.error_code:
        return True
    for topic in resp.responses:
        for p in topic.partitions:
            if getattr(p, field):
                return True
    return False


def _carries_acks(req) -> bool:
    for topic in req.topics:
        for p in topic.partitions:
            if p.acknowledgement_batches:
                return True
    return False


@handles(78, 1, 2)
async def handle_share_fetch(ctx, req):
    """ShareFetch, counted for BrokerTopicMetrics (Total/Failed ShareFetchRequestsPerSec, and the
    ShareAcknowledgement pair when it carries acknowledgements)."""
    metrics = ctx.server.metrics
    metrics.share_fetch_requests += 1
    acks = _carries_acks(req)
    if acks:
        metrics.share_ack_requests += 1
    try:
        resp = await _share_fetch(ctx, req)
    except BaseException:
        metrics.share_fetch_failed += 1
        if acks:
            metrics.share_ack_failed += 1
        raise
    if _failed(resp, "error_code"):
        metrics.share_fetch_failed += 1
    if acks and _failed(resp, "acknowledge_error_code"):
        metrics.share_ack_failed += 1
    return resp


async def _share_fetch(ctx, req):
    server = ctx.server
    state = server.state
    version = ctx.api_version
    resp_cls = response_class(78, version)
    problem = _check_identity(req)
    if problem:
        return _top_level_error(resp_cls, ErrorCode.invalid_request, problem, None)
    group_id, member_id = req.group_id, req.member_id
    if not server.coordinators_loaded:  # share state is being replayed: served once it is back
        await server.wait_loaded()
    group_config = state.group_config(group_id)
    is_renew = bool(getattr(req, "is_renew_ack", False))
    epoch = req.share_session_epoch
    max_wait_ms = int(req.max_wait.total_seconds() * 1000)
    if is_renew and (req.max_bytes or req.min_bytes or req.max_records or max_wait_ms):
        return _top_level_error(resp_cls, ErrorCode.invalid_request,
                                "a renew-only ShareFetch needs MaxBytes, MinBytes, MaxRecords and MaxWaitMs of 0",
                                group_config)
    acks, order = _request_acks(req)
    cache = server.share_sessions
    if epoch == INITIAL_EPOCH:
        if any(acks.values()):
            return _top_level_error(resp_cls, ErrorCode.invalid_request,
                                    "acknowledgements cannot be sent on the initial share session epoch", group_config)
        session, _replaced = cache.open(group_id, member_id, ctx.connection)
        if session is None:
            await asyncio.sleep(max(max_wait_ms, 0) / 1000.0)
            session, _replaced = cache.open(group_id, member_id, ctx.connection)
            if session is None:
                return _top_level_error(resp_cls, ErrorCode.share_session_limit_reached,
                                        f"the share session cache is full ({cache.max_sessions} sessions)",
                                        group_config)
    else:
        session, error = cache.check(group_id, member_id, epoch)
        if session is None:
            return _top_level_error(resp_cls, error, None, group_config)
    now_ms = wall_clock_ms()
    partition_errors: dict[tuple, ErrorCode] = {}
    if epoch != FINAL_EPOCH:
        for key in order:
            topic = state.topics_by_id.get(key[0])
            if topic is None:
                partition_errors[key] = ErrorCode.unknown_topic_id
            elif not 0 <= key[1] < len(topic.partitions):
                partition_errors[key] = ErrorCode.unknown_topic_or_partition
            else:
                session.add([key])
        for forgotten in req.forgotten_topics_data:
            session.forget([(forgotten.topic_id, p) for p in forgotten.partitions])
    ack_errors = await _apply_acks(server, group_id, member_id, acks, version, is_renew, group_config, now_ms)
    fetched: dict[tuple, object] = {}
    if epoch == FINAL_EPOCH:
        server.close_share_session(group_id, member_id)
    else:
        cache.advance(session)
        if not is_renew:
            fetched = await _fetch(server, session, member_id, req, version, group_config, max_wait_ms)
    return _fetch_response(resp_cls, state, order, partition_errors, ack_errors, fetched, group_config)


async def _fetch(server, session, member_id: str, req, version: int, group_config, max_wait_ms: int) -> dict:
    manager = server.share_partitions
    record_limit = getattr(req, "share_acquire_mode", 0) == 1
    max_records = req.max_records if req.max_records > 0 else 500
    batch_size = req.batch_size if req.batch_size > 0 else max_records
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000.0
    while True:
        fetched: dict[tuple, object] = {}
        remaining_records = max_records
        remaining_bytes = req.max_bytes if req.max_bytes > 0 else 0x7FFFFFFF
        keys = session.rotated()
        for key in keys:
            if remaining_records <= 0 or remaining_bytes <= 0:
                break
            ctx = manager.get(session.group_id, key[0], key[1])
            if ctx is None:
                continue
            got = manager.fetch(ctx, member_id, max_records=remaining_records, batch_size=batch_size,
                                record_limit=record_limit, max_bytes=remaining_bytes, group_config=group_config,
                                now_ms=wall_clock_ms())
            if got is not None:
                fetched[key] = got
                remaining_records -= sum(r.last_offset - r.first_offset + 1 for r in got.acquired)
                remaining_bytes -= len(got.records)
        if fetched:
            return fetched
        timeout_ms = (deadline - loop.time()) * 1000.0
        if timeout_ms <= 0 or (session.group_id, session.member_id) not in server.share_sessions.sessions:
            return fetched
        await manager.wait(keys, timeout_ms)


def _fetch_response(resp_cls, state, order, partition_errors, ack_errors, fetched, group_config):
    topic_cls = item_class(resp_cls, "responses")
    part_cls = item_class(topic_cls, "partitions")
    leader_cls = item_class(part_cls, "current_leader")
    acquired_cls = item_class(part_cls, "acquired_records")
    leader = make(leader_cls, leader_id=state.node_id, leader_epoch=LEADER_EPOCH)
    keys = list(order)
    for key in list(ack_errors) + list(fetched):
        if key not in keys:
            keys.append(key)
    by_topic: dict = {}
    for key in keys:
        got = fetched.get(key)
        error = partition_errors.get(key, ErrorCode.none)
        ack_error = ack_errors.get(key)
        if got is None and error == ErrorCode.none and ack_error is None:
            continue
        by_topic.setdefault(key[0], []).append(make(
            part_cls,
            partition_index=key[1],
            error_code=error,
            error_message=None,
            acknowledge_error_code=int(ack_error) if ack_error is not None else 0,
            acknowledge_error_message=None,
            current_leader=leader,
            records=got.records if got is not None else b"",
            acquired_records=tuple(make(acquired_cls, first_offset=r.first_offset, last_offset=r.last_offset,
                                        delivery_count=r.delivery_count) for r in got.acquired) if got else (),
        ))
    return _response(resp_cls, group_config, by_topic)


@handles(79, 1, 2)
async def handle_share_acknowledge(ctx, req):
    """ShareAcknowledge, counted for BrokerTopicMetrics (Total/Failed ShareAcknowledgementRequestsPerSec)."""
    metrics = ctx.server.metrics
    metrics.share_ack_requests += 1
    try:
        resp = await _share_acknowledge(ctx, req)
    except BaseException:
        metrics.share_ack_failed += 1
        raise
    if _failed(resp, "error_code"):
        metrics.share_ack_failed += 1
    return resp


async def _share_acknowledge(ctx, req):
    server = ctx.server
    state = server.state
    version = ctx.api_version
    resp_cls = response_class(79, version)
    problem = _check_identity(req)
    if problem:
        return _top_level_error(resp_cls, ErrorCode.invalid_request, problem, None)
    group_id, member_id = req.group_id, req.member_id
    if not server.coordinators_loaded:
        await server.wait_loaded()
    group_config = state.group_config(group_id)
    epoch = req.share_session_epoch
    if epoch == INITIAL_EPOCH:
        return _top_level_error(resp_cls, ErrorCode.invalid_share_session_epoch,
                                "ShareAcknowledge cannot open a share session (epoch 0)", group_config)
    session, error = server.share_sessions.check(group_id, member_id, epoch)
    if session is None:
        return _top_level_error(resp_cls, error, None, group_config)
    is_renew = bool(getattr(req, "is_renew_ack", False))
    acks, order = _request_acks(req)
    ack_errors = await _apply_acks(server, group_id, member_id, acks, version, is_renew, group_config,
                                   wall_clock_ms())
    if epoch == FINAL_EPOCH:
        server.close_share_session(group_id, member_id)
    else:
        server.share_sessions.advance(session)
    topic_cls = item_class(resp_cls, "responses")
    part_cls = item_class(topic_cls, "partitions")
    leader_cls = item_class(part_cls, "current_leader")
    leader = make(leader_cls, leader_id=state.node_id, leader_epoch=LEADER_EPOCH)
    by_topic: dict = {}
    for key in order:
        if key in ack_errors:
            by_topic.setdefault(key[0], []).append(make(part_cls, partition_index=key[1], error_code=ack_errors[key],
                                                        error_message=None, current_leader=leader))
    return _response(resp_cls, group_config, by_topic)
