"""Fetch (key 1): reading whole record batches, with long polling.

A fetch returns, per partition, the stored batches from the one that contains the fetch offset,
bounded by the partition's and the request's max bytes — except that the first batch of the
first partition with data is returned whole even when it is larger (KIP-74), so a consumer can
always make progress. When fewer than MinBytes are available the request waits in the purgatory
until one of its partitions gets an append or MaxWaitMs passes.

isolation_level (KIP-98): every partition reports its last stable offset (the first offset of the
earliest open transaction, else the high watermark: PartitionState.last_stable_offset). At
read_committed (1) a fetch returns only whole batches below the LSO (Kafka's UnifiedLog.read with
FetchIsolation.TXN_COMMITTED), and the aborted transactions overlapping the returned batches, each
(producer id, first offset), from the segments' aborted-transaction indexes (Kafka's
LocalLog.collectAbortedTransactions: last offset >= the fetch offset, first offset below the
offset after the last returned batch); the consumer drops those producers' records up to their
ABORT markers. A parked read_committed fetch is woken by appends, so a marker that moves the LSO
completes it. read_uncommitted (0) is unchanged apart from the reported LSO.

Fetch sessions (KIP-227) are declined: quafka answers every full fetch with session id 0, which
tells the client to keep sending full requests; an incremental request (non-zero session id) gets
FETCH_SESSION_ID_NOT_FOUND. Topic ids are used from v13, as the protocol says.
"""

from __future__ import annotations

from quafka.broker.core.acl_types import AclOperation, ResourceType
from quafka.protocol.errors import ErrorCode
from quafka.broker.core.client_quotas import CONSUMER_BYTE_RATE
from quafka.protocol.hot_encoders import FetchPartitionResult, encode_fetch_response
from quafka.protocol.record_batch import COMPRESSION_ZSTD, iter_headers

from ..authorization import filter_authorized
from ..registry import handles
from ..state import LEADER_EPOCH

_NONE = int(ErrorCode.none)
READ_COMMITTED = 1


def _read_all(state, req, version: int, isolation: int, cap: int, readable: set | None = None):
    """One pass over the requested partitions: (topics for the encoder, bytes, logs, error seen).
    The response holds at most MaxBytes, capped by the broker's `fetch.max.bytes` (Kafka's
    `KafkaApis.handleFetchRequest`: min(fetchRequest.maxBytes, config.fetchMaxBytes))."""
    remaining = min(req.max_bytes, cap) if req.max_bytes > 0 else cap
    total = 0
    first_data = True
    logs = []
    out = []
    errors = False
    committed = isolation == READ_COMMITTED
    for ft in req.topics:
        if version >= 13:
            topic = state.topics_by_id.get(ft.topic_id)
            missing = ErrorCode.unknown_topic_id
        else:
            topic = state.topics.get(ft.topic)
            missing = ErrorCode.unknown_topic_or_partition
        parts = []
        if readable is not None and (topic is not None or version < 13) and \
                (topic.name if topic is not None else ft.topic) not in readable:
            # KafkaApis.handleFetchRequest: READ on the TOPIC, after an unknown topic id
            # (UNKNOWN_TOPIC_ID) and before an unknown name (UNKNOWN_TOPIC_OR_PARTITION)
            parts = [FetchPartitionResult(fp.partition, int(ErrorCode.topic_authorization_failed), -1, -1, -1, b"",
                                          None, -1) for fp in ft.partitions]
            out.append((getattr(ft, "topic", None), getattr(ft, "topic_id", None), parts))
            errors = True
            continue
        for fp in ft.partitions:
            index = fp.partition
            if topic is None or not 0 <= index < len(topic.partitions):
                code = missing if topic is None else ErrorCode.unknown_topic_or_partition
                parts.append(FetchPartitionResult(index, int(code), -1, -1, -1, b"", None, -1))
                errors = True
                continue
            if version < 10 and topic.compression is not None and topic.compression.codec == COMPRESSION_ZSTD:
                # KafkaApis.handleFetchRequest (maybeConvertFetchedData): a zstd topic is not served
                # below Fetch v10, the version that says a client reads zstd
                parts.append(FetchPartitionResult(index, int(ErrorCode.unsupported_compression_type), -1, -1, -1,
                                                  b"", None, -1))
                errors = True
                continue
            part = topic.partitions[index]
            plog = part.log
            start = plog.log_start_offset
            end = plog.log_end_offset
            lso = part.last_stable_offset
            leader_epoch = getattr(fp, "current_leader_epoch", -1)
            if leader_epoch > LEADER_EPOCH:
                parts.append(FetchPartitionResult(index, int(ErrorCode.unknown_leader_epoch), end, lso, start,
                                                  b"", None, -1))
                errors = True
                continue
            offset = fp.fetch_offset
            if offset < start or offset > end:
                parts.append(FetchPartitionResult(index, int(ErrorCode.offset_out_of_range), end, lso, start,
                                                  b"", None, -1))
                errors = True
                continue
            logs.append(plog)
            data = b""
            readable_end = lso if committed else end
            if offset < readable_end and (remaining > 0 or first_data):
                limit = min(fp.partition_max_bytes, remaining)
                try:
                    data = plog.read(offset, max(limit, 0), min_one_batch=first_data)
                except OSError:  # the log directory is offline now (server.on_log_dir_failure)
                    logs.pop()
                    parts.append(FetchPartitionResult(index, int(ErrorCode.kafka_storage_error), -1, -1, -1,
                                                      b"", None, -1))
                    errors = True
                    continue
                if committed and readable_end < end:
                    data = _below(data, readable_end)
                if data:
                    first_data = False
                    total += len(data)
                    remaining -= len(data)
            aborted = None
            if committed:
                # entries overlapping [offset, end), then those that begin before the end of the data
                # (the same set as collecting up to that bound: an entry after one whose LSO reached
                # it begins at or after it); the batches are walked only when there is an entry
                found = part.aborted_transactions(offset, end) if data else ()
                upper = _next_offset(data) if found else 0
                aborted = [(t.producer_id, t.first_offset) for t in found if t.first_offset < upper]
            parts.append(FetchPartitionResult(index, _NONE, end, lso, start, data, aborted, -1))
        out.append((getattr(ft, "topic", None), getattr(ft, "topic_id", None), parts))
    return out, total, logs, errors


def _below(data: bytes, stop_offset: int) -> bytes:
    """The whole batches at the start of `data` whose base offset is below `stop_offset` (the LSO
    is always a batch's base offset or the log end)."""
    for pos, header in iter_headers(data):
        if header.base_offset >= stop_offset:
            return data[:pos]
    return data


def _next_offset(data: bytes) -> int:
    """The offset after the last batch of `data`."""
    last = 0
    for _pos, header in iter_headers(data):
        last = header.next_offset
    return last


@handles(1, 4, 16)
async def handle_fetch(ctx, req):
    state = ctx.server.state
    version = ctx.api_version
    session_id = getattr(req, "session_id", 0)
    if session_id != 0:
        return encode_fetch_response(version, ctx.correlation_id, [], error_code=int(ErrorCode.fetch_session_id_not_found),
                                     session_id=0)
    isolation = getattr(req, "isolation_level", 0)
    cap = state.config.get("fetch.max.bytes")
    quotas = ctx.server.quotas
    if quotas.active:  # Kafka: MaxBytes capped to what one quota window allows (getMaxValueInQuotaWindow)
        cap = quotas.fetch_max_bytes(ctx, cap)
    readable = None  # with an authorizer: the topics the principal may READ, each asked once per request
    if ctx.server.authorizer is not None:
        # KafkaApis.handleFetchRequest (a consumer's fetch; quafka has no followers): READ on each TOPIC
        by_id = state.topics_by_id
        readable = filter_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, [
            (by_id[ft.topic_id].name if ft.topic_id in by_id else None) if version >= 13 else ft.topic
            for ft in req.topics])
    topics, total, logs, errors = _read_all(state, req, version, isolation, cap, readable)
    wait_ms = int(req.max_wait.total_seconds() * 1000)
    min_bytes = min(req.min_bytes, state.config.get("fetch.max.bytes"))  # Kafka: min(minBytes, fetchMaxBytes)
    if total < min_bytes and wait_ms > 0 and not errors and logs:
        loop = ctx.server.loop_time_ms
        deadline = loop() + wait_ms
        while True:
            await ctx.server.purgatory.wait_for_append(logs, deadline - loop())
            topics, total, logs, errors = _read_all(state, req, version, isolation, cap, readable)
            if total >= min_bytes or errors or loop() >= deadline:
                break
    if quotas.active:
        # Kafka's handleFetchRequest: record the response's bytes; a throttled fetch is answered
        # empty with the throttle time and its bytes taken back (the consumer fetches them again)
        throttle_ms = quotas.record(ctx, CONSUMER_BYTE_RATE, total)
        if throttle_ms > 0:
            quotas.unrecord(ctx, CONSUMER_BYTE_RATE, total)
            ctx.throttle_ms = throttle_ms
            return encode_fetch_response(version, ctx.correlation_id, [], throttle_time_ms=throttle_ms, session_id=0)
    return encode_fetch_response(version, ctx.correlation_id, topics, session_id=0)
