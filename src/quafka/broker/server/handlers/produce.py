"""Produce (key 0) and InitProducerId (key 22): the write path and the idempotent producer.

The write path keeps record batches opaque: each batch's 61-byte header and CRC32C are checked,
idempotent producers' sequences are checked against the partition's producer state, the base
offsets are stamped by the log, and the bytes are stored as they came (compressed or not) —
unless the topic's compression.type names a codec other than the batch's, when the batch is
rewritten into it first (quafka.protocol.compression, Kafka's LogValidator). The
response is written by a hand-made encoder (`quafka.protocol.hot_encoders`).

acks: 0 (no response), 1 and -1/all behave the same on one node: the response is sent once the
batch is in the segment file, and once fsynced (on the flusher's worker thread) when the append
reached flush.messages. A failed write or fsync answers KAFKA_STORAGE_ERROR (the log directory is
then offline: server.BrokerServer.on_log_dir_failure). Below the log directory's free-space
watermark (quafka.log.dir.min.free.*, server.disk_space) a produce is refused with
KAFKA_STORAGE_ERROR and a message saying so, before anything is written; nothing goes offline.

Transactions (KIP-98): a transactional batch (attribute bit 0x10) needs the request's
transactional id (Kafka's KafkaApis.handleProduceRequest answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED
to a request with transactional records and no id, or without WRITE on the TRANSACTIONAL_ID), a
producer id and sequence; it opens the producer's transaction in the partition's producer state
(the last stable offset stays at its first offset until the marker). Control batches (bit 0x20)
are written only by the coordinator: a client's is refused INVALID_RECORD, as Kafka's LogValidator
refuses control records from clients.

KIP-890 verification hook: before a transactional batch is appended, the transaction coordinator
confirms that the partition is part of the producer's ongoing transaction. The coordinator's shell
sets `server.transactions` to an object with

    async verify_produce(transactional_id: str, producer_id: int, producer_epoch: int,
                         topic_partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]

(Kafka: ReplicaManager.appendRecords -> AddPartitionsToTxnManager, a verify-only AddPartitionsToTxn;
an answer other than NONE refuses that partition with the error, e.g. INVALID_TXN_STATE). While
`server.transactions` is None (no coordinator yet) a request with a transactional id is refused
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as before transactions existed. A transactional
InitProducerId is the transaction coordinator's (handlers/transactions.py).
"""

from __future__ import annotations

from typing import Callable

from quafka.broker.core.acl_types import AclOperation, ResourceType
from quafka.broker.core.producer_state import Duplicate, Refused
from quafka.broker.storage.base import MAX_LONG
from quafka.protocol.errors import ErrorCode
from quafka.broker.core.client_quotas import PRODUCER_BYTE_RATE
from quafka.protocol.hot_encoders import ProducePartitionResult, encode_produce_response
from quafka.protocol.compression import needs_recompression, recompress_batch
from quafka.protocol.record_batch import (
    COMPRESSION_ZSTD, HEADER_SIZE, InvalidBatch, ValidatedBatch, iter_records, read_header, set_log_append_time,
    validate_batches,
)

from ..authorization import authorize, authorize_by_resource_type, authorize_cluster, filter_authorized
from ..connection import CloseConnection
from ..registry import handles
from ..clock import wall_clock_ms
from ..state import PartitionState, TopicState
from ._util import NO_THROTTLE, make, response_class
from .transactions import init_transactional_producer_id

_ERR_NONE = int(ErrorCode.none)
DUPLICATE: list = []  # record_errors of a duplicate's answer (identity-compared; encodes as none)


def _failed(index: int, error: ErrorCode, message: str | None, log_start_offset: int = -1) -> ProducePartitionResult:
    return ProducePartitionResult(index, int(error), -1, -1, log_start_offset, message, [])


def produce_to_partition(topic: TopicState, part: PartitionState, records, now_ms: int,
                         version: int, admit: Callable[[int], str | None] | None = None, *,
                         transactional_id: str | None = None) -> ProducePartitionResult:
    """Validate and append one partition's records. `admit(nbytes)` (the free-space watermark,
    server.disk_space) is asked just before the append — after validation and after a retried
    batch was recognised as a duplicate, which costs no space — and its message refuses the
    append with KAFKA_STORAGE_ERROR. The Produce handler passes it; dead-letter writes do not.
    `transactional_id`: the request's; a transactional batch needs one (and was verified by the
    handler)."""
    index = part.index
    plog = part.log
    if topic.internal:  # only the coordinators write __share_group_state and __consumer_offsets
        return _failed(index, ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {topic.name}",
                       plog.log_start_offset)
    if records is None:
        return _failed(index, ErrorCode.invalid_record, "produce request has null records", plog.log_start_offset)
    try:
        batches = validate_batches(records, topic.max_message_bytes)
    except InvalidBatch as exc:
        return _failed(index, exc.error_code, exc.message, plog.log_start_offset)
    if len(batches) != 1:
        return _failed(index, ErrorCode.invalid_record,
                       f"Produce requests with version {version} are only allowed to contain exactly one record batch",
                       plog.log_start_offset)
    pos, h = batches[0]
    transactional = h.is_transactional
    if h.is_control:  # LogValidator: clients are not allowed to write control records
        return _failed(index, ErrorCode.invalid_record, "Clients are not allowed to write control records",
                       plog.log_start_offset)
    if transactional:
        if transactional_id is None:  # KafkaApis.handleProduceRequest (hasTransactionalRecords)
            return _failed(index, ErrorCode.transactional_id_authorization_failed,
                           "transactional records need the produce request's transactional id", plog.log_start_offset)
        if h.producer_id < 0 or h.base_sequence < 0:
            return _failed(index, ErrorCode.invalid_record,
                           "a transactional batch needs a producer id and a base sequence", plog.log_start_offset)
    if topic.compacted and (refusal := _keyless_record(records, pos, h, topic.name, index)) is not None:
        return _failed(index, ErrorCode.invalid_record, refusal, plog.log_start_offset)
    if h.compression == COMPRESSION_ZSTD and version < 7:
        return _failed(index, ErrorCode.unsupported_compression_type,
                       "zstd-compressed batches need Produce v7 or later", plog.log_start_offset)
    if not plog.health.online:  # a retry after a failed write or fsync: nothing is stored any more
        return _failed(index, ErrorCode.kafka_storage_error,
                       f"The log directory of {topic.name}-{index} is offline", -1)
    idempotent = h.producer_id >= 0 and h.base_sequence >= 0
    if idempotent:
        outcome = part.producers.check(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                                       transactional)
        if isinstance(outcome, Duplicate):  # (the handler waits for its fsync if it is not durable yet)
            return ProducePartitionResult(index, _ERR_NONE, outcome.first_offset, -1, plog.log_start_offset, None,
                                          DUPLICATE)
        if isinstance(outcome, Refused):
            return _failed(index, outcome.error_code, outcome.message, plog.log_start_offset)
    if topic.compression is not None and needs_recompression(h, topic.compression):
        # compression.type names another codec: LogValidator.validateMessagesAndAssignOffsetsCompressed
        try:
            buf = recompress_batch(records, topic.compression)
        except InvalidBatch as exc:
            return _failed(index, exc.error_code, exc.message, plog.log_start_offset)
        if len(buf) > topic.max_message_bytes:  # UnifiedLog.append checks the rewritten size again
            return _failed(index, ErrorCode.message_too_large,
                           f"record batch is {len(buf)} bytes once compressed with {topic.compression.name}, above "
                           f"the maximum of {topic.max_message_bytes} bytes (max.message.bytes)", plog.log_start_offset)
        h = read_header(buf, 0)
        batches = [ValidatedBatch(0, h)]
    else:
        buf = bytearray(records)
    if admit is not None and (refusal := admit(len(buf))) is not None:
        return _failed(index, ErrorCode.kafka_storage_error, refusal, plog.log_start_offset)
    append_time = -1
    if topic.log_append_time:
        append_time = now_ms
        set_log_append_time(buf, pos, h.batch_length + 12, now_ms)
    try:
        info = plog.append(buf, batches, now_ms, defer_flush=True)
    except OSError as exc:  # the log directory is offline now (server.on_log_dir_failure)
        return _failed(index, ErrorCode.kafka_storage_error, f"Writing to {topic.name}-{index} failed: {exc}",
                       -1)
    if idempotent:
        part.producers.record(h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                              info.first_offset, info.last_offset, append_time if append_time >= 0 else h.max_timestamp,
                              transactional)
    return ProducePartitionResult(index, _ERR_NONE, info.first_offset, append_time, info.log_start_offset, None, [])


def _keyless_record(records, pos: int, h, topic: str, index: int) -> str | None:
    """A compacted topic takes only records with a key (Kafka's LogValidator.validateKey): the
    refusal's message, or None. Costs a pass over the records (decompressing the batch), on
    compacted topics only, as in Kafka."""
    try:
        keyless = any(record.key is None for record in iter_records(memoryview(records)[pos:pos + h.batch_length + 12]))
    except (ValueError, IndexError) as exc:
        return f"the batch's records do not decode: {exc}"
    if keyless:
        return f"Compacted topic cannot accept message without key in topic partition {topic}-{index}."
    return None


@handles(0, 3, 13)
async def handle_produce(ctx, req):
    state = ctx.server.state
    version = ctx.api_version
    acks = req.acks
    now_ms = wall_clock_ms()
    topics_out = []
    refuse: tuple[ErrorCode, str] | None = None
    flushes: list[tuple[int, list, PartitionState, int]] = []
    admit = ctx.server.disk_space.admit  # below the free-space watermark: KAFKA_STORAGE_ERROR, retriable
    if acks not in (-1, 0, 1):
        refuse = (ErrorCode.invalid_required_acks, f"acks must be -1, 0 or 1, got {acks}")
    elif req.transactional_id is not None:
        if getattr(ctx.server, "transactions", None) is None:
            refuse = (ErrorCode.transactional_id_authorization_failed,
                      "quafka serves no transaction coordinator yet: transactional producers are refused")
        elif not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
            refuse = (ErrorCode.transactional_id_authorization_failed, None)
    writable = None  # with an authorizer: the topics the principal may WRITE, each asked once per request
    if refuse is None and ctx.server.authorizer is not None:
        # KafkaApis.handleProduceRequest: WRITE on each TOPIC (filterByAuthorized), after a topic id
        # that names no topic (v13) got UNKNOWN_TOPIC_ID and before a name that names none gets
        # UNKNOWN_TOPIC_OR_PARTITION
        by_id = state.topics_by_id
        writable = filter_authorized(ctx, AclOperation.WRITE, ResourceType.TOPIC, [
            (by_id[td.topic_id].name if td.topic_id in by_id else None) if version >= 13 else td.name
            for td in req.topic_data])
    verified: dict = {}  # KIP-890: after authorization, before anything is appended
    if refuse is None and req.transactional_id is not None:
        verified = await _verify_transactional(ctx, req, version, writable)
    for td in req.topic_data:
        if version >= 13:
            topic = state.topics_by_id.get(td.topic_id)
            missing = ErrorCode.unknown_topic_id
        else:
            topic = state.topics.get(td.name)
            missing = ErrorCode.unknown_topic_or_partition
        parts_out = []
        if writable is not None and (topic is not None or version < 13) and \
                (topic.name if topic is not None else td.name) not in writable:
            parts_out = [_failed(pd.index, ErrorCode.topic_authorization_failed, None) for pd in td.partition_data]
            topics_out.append((getattr(td, "name", None), getattr(td, "topic_id", None), parts_out))
            continue
        for pd in td.partition_data:
            if refuse is not None:
                parts_out.append(_failed(pd.index, refuse[0], refuse[1]))
                continue
            part = None
            if topic is not None and 0 <= pd.index < len(topic.partitions):
                part = topic.partitions[pd.index]
            if part is None:
                parts_out.append(_failed(pd.index, missing if topic is None else ErrorCode.unknown_topic_or_partition,
                                         "This server does not host this topic-partition."))
                continue
            verdict = verified.get((topic.name, pd.index))
            if verdict is not None and verdict != ErrorCode.none:
                parts_out.append(_failed(pd.index, verdict, f"the partition is not in the producer's transaction "
                                         f"(transaction coordinator: {ErrorCode(verdict).name})",
                                         part.log.log_start_offset))
                continue
            result = produce_to_partition(topic, part, pd.records, now_ms, version, admit,
                                          transactional_id=req.transactional_id)
            plog = part.log
            if result.error_code == _ERR_NONE and plog.config.flush_messages < MAX_LONG and (
                    plog.unflushed_records >= plog.config.flush_messages
                    # a retried batch whose first answer may still be waiting for its fsync
                    or (result.record_errors is DUPLICATE and result.base_offset >= plog.flushed_offset)):
                flushes.append((len(parts_out), parts_out, part, plog.log_end_offset))
            parts_out.append(result)
        topics_out.append((getattr(td, "name", None), getattr(td, "topic_id", None), parts_out))
    for position, parts_out, part, end_offset in flushes:  # flush.messages reached: answered once fsynced
        try:
            await ctx.server.flusher.flush(part.log, end_offset)
        except OSError as exc:
            parts_out[position] = _failed(part.index, ErrorCode.kafka_storage_error,
                                          f"Flushing {part.topic.name}-{part.index} failed: {exc}")
    quotas = ctx.server.quotas
    throttle_ms = quotas.record(ctx, PRODUCER_BYTE_RATE, ctx.request_bytes) if quotas.active else 0
    ctx.throttle_ms = throttle_ms  # Kafka: quotas.produce.maybeRecordAndGetThrottleTimeMs(request.sizeInBytes)
    if acks == 0:
        failed = [p for _n, _i, parts in topics_out for p in parts if p.error_code != _ERR_NONE]
        if failed:
            # the client expects no response; as Kafka, close the connection so it notices
            raise CloseConnection(f"acks=0 produce failed with error {failed[0].error_code}: {failed[0].error_message}")
        return None
    return encode_produce_response(version, ctx.correlation_id, topics_out, throttle_time_ms=throttle_ms)


async def _verify_transactional(ctx, req, version: int, writable: set | None) -> dict:
    """Ask the coordinator (server.transactions.verify_produce, see the module docstring) about
    every partition of the request that exists, may be written (`writable`: None without an
    authorizer) and holds a transactional batch, once per (producer id, epoch). Returns
    {(topic, partition): ErrorCode}; partitions not asked are absent.

    After the (last) answer the handler appends without yielding to the loop, so no other request
    runs in between (Kafka's VerificationGuard covers the threads that could); a request with
    batches of several producers (no client sends one) is verified one producer at a time."""
    state = ctx.server.state
    groups: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for td in req.topic_data:
        topic = state.topics_by_id.get(td.topic_id) if version >= 13 else state.topics.get(td.name)
        if topic is None or topic.internal or (writable is not None and topic.name not in writable):
            continue
        for pd in td.partition_data:
            if not 0 <= pd.index < len(topic.partitions):
                continue
            records = pd.records
            if records is None or len(records) < HEADER_SIZE:
                continue
            h = read_header(records, 0)
            if h.is_transactional and not h.is_control and h.producer_id >= 0:
                groups.setdefault((h.producer_id, h.producer_epoch), []).append((topic.name, pd.index))
    verdicts: dict = {}
    for (producer_id, producer_epoch), tps in groups.items():
        # Produce v12+ is transaction version 2: the partition joins the transaction implicitly
        # (AddPartitionsToTxnManager.produceRequestVersionToTransactionSupportedOperation)
        verdicts.update(await ctx.server.transactions.verify_produce(req.transactional_id, producer_id,
                                                                     producer_epoch, tps, 2 if version >= 12 else None))
    return verdicts


@handles(22, 0, 6)
async def handle_init_producer_id(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(22, ctx.api_version)
    if req.transactional_id is not None:  # the transaction coordinator's (handlers/transactions.py)
        return await init_transactional_producer_id(ctx, req)
    # KafkaApis.handleInitProducerIdRequest: an idempotent producer needs IDEMPOTENT_WRITE on the
    # CLUSTER or WRITE on any TOPIC (authorizeByResourceType), else CLUSTER_AUTHORIZATION_FAILED
    if ctx.server.authorizer is not None and not authorize_cluster(ctx, AclOperation.IDEMPOTENT_WRITE) and \
            not authorize_by_resource_type(ctx, AclOperation.WRITE, ResourceType.TOPIC):
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    producer_id=-1, producer_epoch=-1)
    # An idempotent producer (re)initialising gets a fresh id at epoch 0, as Kafka does for
    # non-transactional producers.
    producer_id = state.allocate_producer_id()
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, producer_id=producer_id,
                producer_epoch=0)
