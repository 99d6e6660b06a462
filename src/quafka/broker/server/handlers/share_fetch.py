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

from quafka.broker.core.acl_types import AclOperation, ResourceType
from quafka.broker.core.client_quotas import CONSUMER_BYTE_RATE
from quafka.protocol.errors import ErrorCode
from quafka.protocol.share_encoders import (
    ShareAcknowledgePartitionResult,
    ShareFetchPartitionResult,
    encode_share_acknowledge_response,
    encode_share_fetch_response,
)
from quafka.protocol.share_session_epoch import FINAL_EPOCH, INITIAL_EPOCH

from ..authorization import authorize, filter_authorized
from ..registry import handles
from ..share_partitions import FetchParams
from ..state import LEADER_EPOCH

MAX_MEMBER_ID_LENGTH = 36
MAX_ACK_TYPE = {1: 3, 2: 4}


def validate_ack_batches(batches, version: int, is_renew: bool) -> ErrorCode:
    """kafka-reference §2.4: the shape of a partition's acknowledgement batches."""
    previous_last = None
    max_type = MAX_ACK_TYPE[version]
    for b in batches:
        if b.first_offset > b.last_offset or b.first_offset < 0:
            return ErrorCode.invalid_request
        if previous_last is not None and b.first_offset < previous_last:
            # as Kafka's KafkaApis.validateAcknowledgementBatches: a batch may start at the previous
            # batch's last offset (the share partition then decides: INVALID_RECORD_STATE unless the
            # earlier batch renewed that offset)
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


async def _apply_acks(server, group_id, member_id, acks: dict, version: int, is_renew: bool,
                      group_config, denied_topic_ids: frozenset = frozenset()) -> dict[tuple, ErrorCode]:
    """Apply each partition's acknowledgements; their state writes run concurrently, as Kafka's
    `SharePartitionManager.acknowledge` starts every partition's `SharePartition.acknowledge` and
    waits for all their futures: with flush on, the writes share the share coordinator's fsync
    (one group commit) instead of one fsync round per partition."""
    results: dict[tuple, ErrorCode] = {}
    manager = server.share_partitions
    pending: list[tuple[tuple, object]] = []
    for key, batches in acks.items():
        if not batches:
            continue
        error = validate_ack_batches(batches, version, is_renew)
        if error == ErrorCode.none and denied_topic_ids and key[0] in denied_topic_ids:
            # KafkaApis.handleAcknowledgements: READ on the TOPIC, checked after the batches' shape
            error = ErrorCode.topic_authorization_failed
        elif error == ErrorCode.none:
            share_context = manager.loaded(group_id, key[0], key[1]) or await manager.get(group_id, key[0], key[1])
            if share_context is None:
                error = ErrorCode.unknown_topic_id if server.state.topics_by_id.get(key[0]) is None \
                    else ErrorCode.unknown_topic_or_partition
            else:
                pending.append((key, manager.acknowledge(
                    share_context, member_id, [(b.first_offset, b.last_offset, b.acknowledge_types) for b in batches],
                    group_config)))
                results[key] = ErrorCode.none  # its place in the answer; the outcome is filled in below
                continue
        results[key] = error
    if len(pending) == 1:  # the common case (one partition per request): no task
        key, applying = pending[0]
        results[key] = await applying
    elif pending:
        for (key, _), error in zip(pending, await asyncio.gather(*(applying for _, applying in pending))):
            results[key] = error
    return results


def _group_denied(ctx, req) -> bool:
    """KafkaApis.handleShareFetchRequest / handleShareAcknowledgeRequest (KIP-932): READ on the
    GROUP, asked before the member id is checked (a null group id is INVALID_REQUEST first)."""
    return ctx.server.authorizer is not None and req.group_id is not None and \
        not authorize(ctx, AclOperation.READ, ResourceType.GROUP, req.group_id)


def _denied_topic_ids(ctx, keys) -> frozenset:
    """The topic ids among `keys` ((topic id, partition) pairs) that name a topic the principal may
    not READ (KIP-932: ShareFetch and ShareAcknowledge need READ on each TOPIC); each topic asked
    once per request. Ids that name no topic are not in it (they are UNKNOWN_TOPIC_ID)."""
    by_id = ctx.server.state.topics_by_id
    names = {tid: by_id[tid].name for tid in {k[0] for k in keys} if tid in by_id}
    allowed = filter_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, names.values())
    return frozenset(tid for tid, name in names.items() if name not in allowed)


def _check_identity(req) -> str | None:
    if req.group_id is None or req.group_id == "":
        return "GroupId must be set"
    if not req.member_id or len(req.member_id) > MAX_MEMBER_ID_LENGTH:
        return f"MemberId must be 1 to {MAX_MEMBER_ID_LENGTH} characters"
    return None


def _carries_acks(req) -> bool:
    for topic in req.topics:
        for p in topic.partitions:
            if p.acknowledgement_batches:
                return True
    return False


class _Outcome:
    """What a ShareFetch/ShareAcknowledge answers, before encoding: a top-level error, or per
    partition (in request order, then any others) its error, acknowledgement error and records."""

    __slots__ = ("error", "message", "group_config", "order", "partition_errors", "ack_errors", "fetched")

    def __init__(self, error: ErrorCode = ErrorCode.none, message: str | None = None, group_config=None,
                 order: list | None = None, partition_errors: dict | None = None, ack_errors: dict | None = None,
                 fetched: dict | None = None) -> None:
        self.error, self.message, self.group_config = error, message, group_config
        self.order = order or []
        self.partition_errors = partition_errors or {}
        self.ack_errors = ack_errors or {}
        self.fetched = fetched or {}

    @property
    def lock_timeout_ms(self) -> int:
        """AcquisitionLockTimeoutMs: the lock the records of this response were acquired with
        (all of one `fill`, so one value; each acquisition reads the group's lock when it is made,
        as Kafka's `SharePartition.scheduleAcquisitionLockTimeout`), else the group's lock when the
        request arrived (what its RENEWs applied). The group config read at arrival is not the one the acquisition used
        when `share.record.lock.duration.ms` changed while the request waited for its
        acknowledgements' write or was parked: the client would count on a lock the records do
        not have, acknowledge after it expired, and have an ACCEPT of a record already given up
        at the delivery limit (and dead-lettered) answered NONE (simulator seed 500082)."""
        for got in self.fetched.values():
            return got.lock_duration_ms
        return self.group_config.record_lock_duration_ms if self.group_config is not None else 0

    def failed(self) -> bool:
        return bool(self.error) or any(e != ErrorCode.none for e in self.partition_errors.values())

    def ack_failed(self) -> bool:
        return bool(self.error) or any(e != ErrorCode.none for e in self.ack_errors.values())

    def keys(self) -> list:
        keys = list(self.order)
        seen = set(keys)
        for key in list(self.ack_errors) + list(self.fetched) + list(self.partition_errors):
            if key not in seen:
                keys.append(key)
                seen.add(key)
        return keys


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
        outcome = await _share_fetch(ctx, req)
    except BaseException:
        metrics.share_fetch_failed += 1
        if acks:
            metrics.share_ack_failed += 1
        raise
    if outcome.failed():
        metrics.share_fetch_failed += 1
    if acks and outcome.ack_failed():
        metrics.share_ack_failed += 1
    return _encode_fetch_response(ctx, outcome)


async def _share_fetch(ctx, req) -> _Outcome:
    server = ctx.server
    state = server.state
    version = ctx.api_version
    if _group_denied(ctx, req):
        return _Outcome(ErrorCode.group_authorization_failed, None)
    problem = _check_identity(req)
    if problem:
        return _Outcome(ErrorCode.invalid_request, problem)
    group_id, member_id = req.group_id, req.member_id
    if not server.coordinators_loaded:  # share state is being replayed: served once it is back
        await server.wait_loaded()
    group_config = state.group_config(group_id)
    is_renew = bool(getattr(req, "is_renew_ack", False))
    epoch = req.share_session_epoch
    max_wait_ms = int(req.max_wait.total_seconds() * 1000)
    if is_renew and (req.max_bytes or req.min_bytes or req.max_records or max_wait_ms):
        return _Outcome(ErrorCode.invalid_request,
                        "a renew-only ShareFetch needs MaxBytes, MinBytes, MaxRecords and MaxWaitMs of 0", group_config)
    acks, order = _request_acks(req)
    cache = server.share_sessions
    if epoch == INITIAL_EPOCH:
        if any(acks.values()):
            return _Outcome(ErrorCode.invalid_request, "acknowledgements cannot be sent on the initial share session "
                                                       "epoch", group_config)
        session, replaced = cache.open(group_id, member_id, ctx.connection)
        if session is None:
            await asyncio.sleep(max(max_wait_ms, 0) / 1000.0)
            session, replaced = cache.open(group_id, member_id, ctx.connection)
            if session is None:
                return _Outcome(ErrorCode.share_session_limit_reached,
                                f"the share session cache is full ({cache.max_sessions} sessions)", group_config)
        if replaced is not None:  # its parked fetch, if any, answers empty
            server.share_partitions.session_ended(replaced)
    else:
        session, error = cache.check(group_id, member_id, epoch)
        if session is None:
            return _Outcome(error, None, group_config)
    partition_errors: dict[tuple, ErrorCode] = {}
    denied: frozenset = frozenset()
    if server.authorizer is not None:  # KafkaApis.handleShareFetchRequest: READ on each TOPIC of the
        # request and of the session (a permission revoked stops the session's fetches from that topic)
        denied = _denied_topic_ids(ctx, [*order, *(session.partitions if epoch != FINAL_EPOCH else ())])
    if epoch != FINAL_EPOCH:
        for key in order:
            topic = state.topics_by_id.get(key[0])
            if topic is None:
                partition_errors[key] = ErrorCode.unknown_topic_id
            elif denied and key[0] in denied:  # kept in the session, as Kafka's share session keeps it
                partition_errors[key] = ErrorCode.topic_authorization_failed
                if 0 <= key[1] < len(topic.partitions):
                    session.add([key])
            elif not 0 <= key[1] < len(topic.partitions):
                partition_errors[key] = ErrorCode.unknown_topic_or_partition
            else:
                session.add([key])
        for forgotten in req.forgotten_topics_data:
            session.forget([(forgotten.topic_id, p) for p in forgotten.partitions])
        if denied:  # the session's other partitions of those topics answer it too
            for key in session.partitions:
                if key[0] in denied:
                    partition_errors.setdefault(key, ErrorCode.topic_authorization_failed)
    ack_errors = await _apply_acks(server, group_id, member_id, acks, version, is_renew, group_config, denied)
    fetched: dict = {}
    if epoch == FINAL_EPOCH:
        server.close_share_session(group_id, member_id)
    else:
        cache.advance(session)
        if not is_renew:
            fetched = await _fetch(server, session, member_id, req, max_wait_ms, ctx, denied)
    if server.failed_log_dir is not None:  # the log directory failed: every partition of the session is
        # offline, listed in this request or not (an incremental ShareFetch lists none)
        for key in [*order, *(session.partitions if epoch != FINAL_EPOCH else ())]:
            if key not in fetched:
                partition_errors.setdefault(key, ErrorCode.kafka_storage_error)
    return _Outcome(ErrorCode.none, None, group_config, order, partition_errors, ack_errors, fetched)


async def _fetch(server, session, member_id: str, req, max_wait_ms: int, ctx, denied: frozenset) -> dict:
    """Acquire now; else park until records can be acquired or MaxWaitMs passes; nothing from the
    topics in `denied` (the principal may not READ them)."""
    manager = server.share_partitions
    cap = server.state.config.get("fetch.max.bytes")
    if server.quotas.active:  # Kafka: capped to what one quota window allows (getMaxValueInQuotaWindow)
        cap = server.quotas.fetch_max_bytes(ctx, cap)
    params = FetchParams(
        max_records=req.max_records if req.max_records > 0 else 500,
        record_limit=getattr(req, "share_acquire_mode", 0) == 1,
        # capped by the broker's fetch.max.bytes, as Kafka's KafkaApis.handleShareFetchRequest does
        max_bytes=min(req.max_bytes, cap) if req.max_bytes > 0 else cap,
        denied_topic_ids=denied,
    )
    if not manager.all_loaded(session.group_id, session.partitions):  # only a first use awaits
        await manager.load(session.group_id, session.partitions)
    if not server.share_sessions.is_live(session):
        # the session ended while the acknowledgements or the load above waited (its connection
        # dropped, or it was closed or replaced): acquire nothing for a client that has gone
        return {}
    fetched = manager.fill(session, member_id, params)
    if fetched or max_wait_ms <= 0 or server.failed_log_dir is not None:  # a failed read is answered now
        return fetched
    return await manager.wait(session, member_id, params, max_wait_ms)


def _encode_fetch_response(ctx, outcome: _Outcome) -> bytes:
    leader_id = ctx.server.state.node_id
    by_topic: dict = {}
    throttle_ms = 0
    quotas = ctx.server.quotas
    if quotas.active and outcome.fetched:
        # consumer_byte_rate counts the records sent (Kafka's handleShareFetchRequest). Deviation
        # (server/quotas.py): a throttled response still carries the records it acquired.
        size = sum(len(got.records) for got in outcome.fetched.values())
        throttle_ms = ctx.throttle_ms = quotas.record(ctx, CONSUMER_BYTE_RATE, size)
    if not outcome.error:
        fetched, ack_errors, partition_errors = outcome.fetched, outcome.ack_errors, outcome.partition_errors
        for key in outcome.keys():
            got = fetched.get(key)
            error = partition_errors.get(key, ErrorCode.none)
            ack_error = ack_errors.get(key)
            if got is None and error == ErrorCode.none and ack_error is None:
                continue
            by_topic.setdefault(key[0], []).append(ShareFetchPartitionResult(
                key[1], error, ack_error or 0, leader_id, LEADER_EPOCH,
                got.records if got is not None else b"", got.acquired if got is not None else ()))
    return encode_share_fetch_response(ctx.api_version, ctx.correlation_id, list(by_topic.items()),
                                       error_code=outcome.error, error_message=outcome.message,
                                       acquisition_lock_timeout_ms=outcome.lock_timeout_ms,
                                       throttle_time_ms=throttle_ms)


@handles(79, 1, 2)
async def handle_share_acknowledge(ctx, req):
    """ShareAcknowledge, counted for BrokerTopicMetrics (Total/Failed ShareAcknowledgementRequestsPerSec)."""
    metrics = ctx.server.metrics
    metrics.share_ack_requests += 1
    try:
        outcome = await _share_acknowledge(ctx, req)
    except BaseException:
        metrics.share_ack_failed += 1
        raise
    if outcome.ack_failed():
        metrics.share_ack_failed += 1
    leader_id = ctx.server.state.node_id
    by_topic: dict = {}
    if not outcome.error:
        for key in outcome.order:
            if key in outcome.ack_errors:
                by_topic.setdefault(key[0], []).append(
                    ShareAcknowledgePartitionResult(key[1], outcome.ack_errors[key], leader_id, LEADER_EPOCH))
    return encode_share_acknowledge_response(ctx.api_version, ctx.correlation_id, list(by_topic.items()),
                                             error_code=outcome.error, error_message=outcome.message,
                                             acquisition_lock_timeout_ms=outcome.lock_timeout_ms)


async def _share_acknowledge(ctx, req) -> _Outcome:
    server = ctx.server
    state = server.state
    version = ctx.api_version
    if _group_denied(ctx, req):
        return _Outcome(ErrorCode.group_authorization_failed, None)
    problem = _check_identity(req)
    if problem:
        return _Outcome(ErrorCode.invalid_request, problem)
    group_id, member_id = req.group_id, req.member_id
    if not server.coordinators_loaded:
        await server.wait_loaded()
    group_config = state.group_config(group_id)
    epoch = req.share_session_epoch
    if epoch == INITIAL_EPOCH:
        return _Outcome(ErrorCode.invalid_share_session_epoch, "ShareAcknowledge cannot open a share session (epoch 0)",
                        group_config)
    session, error = server.share_sessions.check(group_id, member_id, epoch)
    if session is None:
        return _Outcome(error, None, group_config)
    is_renew = bool(getattr(req, "is_renew_ack", False))
    acks, order = _request_acks(req)
    # KafkaApis.handleShareAcknowledgeRequest: READ on each TOPIC acknowledged
    denied = _denied_topic_ids(ctx, order) if server.authorizer is not None else frozenset()
    ack_errors = await _apply_acks(server, group_id, member_id, acks, version, is_renew, group_config, denied)
    if epoch == FINAL_EPOCH:
        server.close_share_session(group_id, member_id)
    else:
        server.share_sessions.advance(session)
    return _Outcome(ErrorCode.none, None, group_config, order, ack_errors=ack_errors)
