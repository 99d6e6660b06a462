"""The transaction APIs of the transaction coordinator: InitProducerId with a transactional id
(key 22, registered in produce.py, which passes such requests here), AddPartitionsToTxn (24, v0-5),
AddOffsetsToTxn (25, v0-4), EndTxn (26, v0-5), DescribeTransactions (65, v0) and ListTransactions
(66, v0-2).

Each follows Kafka's `KafkaApis` (handleInitProducerIdRequest, handleAddPartitionsToTxnRequest,
handleAddOffsetsToTxnRequest, handleEndTxnRequest, handleDescribeTransactionsRequest,
handleListTransactionsRequest): the ACL checks, the validation before the coordinator, and the
mapping of the coordinator's answer to the request version (`error_for_version`: PRODUCER_FENCED
becomes INVALID_PRODUCER_EPOCH for clients older than KIP-588). The coordinator is
`server.transactions` (server/transactions.py).

Transaction versions (KIP-890): EndTxn v5+ and AddPartitionsToTxn v5+ mean transaction version 2
(the epoch is bumped by every EndTxn), as KafkaApis decides from the request version.
"""

from __future__ import annotations

import datetime
import logging
import re

from quafka.broker.core.acl_types import AclOperation, ResourceType
from quafka.broker.core.transaction_coordinator import error_for_version
from quafka.broker.core.transaction_state import TV_0, TV_2
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize, authorize_cluster, filter_authorized
from ..registry import handles
from ..transactions import markers_writer
from ._util import NO_THROTTLE, item_class, make, make_items, response_class

log = logging.getLogger("quafka.transactions")

E = ErrorCode
EPOCH_START = datetime.datetime.fromtimestamp(0, datetime.timezone.utc)


def _ms(value) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else int(value)


def _coordinator(ctx):
    """The transaction coordinator shell, or None while the broker is starting."""
    transactions = getattr(ctx.server, "transactions", None)
    if transactions is None or not transactions.loaded:
        return None
    return transactions


# ----------------------------------------------------------------------------- InitProducerId


async def init_transactional_producer_id(ctx, req):
    """InitProducerId with a transactional id (KafkaApis.handleInitProducerIdRequest: WRITE on the
    TRANSACTIONAL_ID; TransactionCoordinator.handleInitProducerId)."""
    resp_cls = response_class(22, ctx.api_version)

    def answer(error: ErrorCode, producer_id: int = -1, producer_epoch: int = -1):
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=error_for_version("InitProducerId",
                    ctx.api_version, error), producer_id=producer_id, producer_epoch=producer_epoch,
                    ongoing_txn_producer_id=-1, ongoing_txn_producer_epoch=-1)

    txn_id = req.transactional_id
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return answer(E.transactional_id_authorization_failed)
    if getattr(req, "enable2_pc", False) or getattr(req, "keep_prepared_txn", False):
        # KIP-939 two-phase commit (transaction.two.phase.commit.enable is false by default in Kafka,
        # which then refuses enable2Pc the same way): not served
        log.info("InitProducerId for transactional id %s asks for two-phase commit (enable2Pc=%s, "
                 "keepPreparedTxn=%s): not served", txn_id, req.enable2_pc, req.keep_prepared_txn)
        return answer(E.transactional_id_authorization_failed)
    transactions = _coordinator(ctx)
    if transactions is None:
        return answer(E.coordinator_load_in_progress)
    expected = None
    if ctx.api_version >= 3 and (req.producer_id != -1 or req.producer_epoch != -1):
        expected = (int(req.producer_id), int(req.producer_epoch))
    transactions.coordinator.transaction_version_level = transactions._transaction_version_level()
    result = await transactions.run(transactions.coordinator.handle_init_producer_id(
        txn_id, _ms(req.transaction_timeout), expected, transactions._now_ms()))
    return answer(result.error, result.producer_id, result.producer_epoch)


# ----------------------------------------------------------------------------- AddPartitionsToTxn


def _partitions_of(topics) -> list[tuple[str, int]]:
    return [(t.name, int(p)) for t in topics for p in t.partitions]


def _client_add_errors(ctx, txn_id: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode] | None:
    """KafkaApis.handleAddPartitionsToTxnRequest (a client's request): WRITE on the
    TRANSACTIONAL_ID; WRITE on each TOPIC; partitions that do not exist. None when every partition
    may go to the coordinator; else the answer (others OPERATION_NOT_ATTEMPTED)."""
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return {tp: E.transactional_id_authorization_failed for tp in tps}
    writable = filter_authorized(ctx, AclOperation.WRITE, ResourceType.TOPIC, [t for t, _ in tps])
    topics = ctx.server.state.topics
    errors = {}
    for topic, partition in tps:
        if topic not in writable:
            errors[(topic, partition)] = E.topic_authorization_failed
        elif topic not in topics or not 0 <= partition < len(topics[topic].partitions):
            errors[(topic, partition)] = E.unknown_topic_or_partition
    if not errors:
        return None
    return {tp: errors.get(tp, E.operation_not_attempted) for tp in tps}


def _topic_results(cls, field: str, errors: dict[tuple[str, int], ErrorCode]):
    topic_cls = item_class(cls, field)
    by_topic: dict[str, list] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": error})
    return tuple(make(topic_cls, name=topic, results_by_partition=make_items(topic_cls, "results_by_partition", ps))
                 for topic, ps in by_topic.items())


async def _add_partitions(ctx, transactions, txn_id: str, producer_id: int, producer_epoch: int,
                          tps: list[tuple[str, int]], verify_only: bool, client_transaction_version: int):
    coordinator = transactions.coordinator
    if verify_only:
        result = coordinator.handle_verify_partitions(txn_id, producer_id, producer_epoch, tps).result
    else:
        result = await transactions.run(coordinator.handle_add_partitions(
            txn_id, producer_id, producer_epoch, tps, transactions._now_ms(), client_transaction_version))
    errors = dict(result.partition_errors) or {tp: result.error for tp in tps}
    return {tp: error_for_version("AddPartitionsToTxn", ctx.api_version, errors.get(tp, result.error)) for tp in tps}


@handles(24, 0, 5)
async def handle_add_partitions_to_txn(ctx, req):
    resp_cls = response_class(24, ctx.api_version)
    transactions = _coordinator(ctx)
    if ctx.api_version <= 3:
        txn_id = req.v3_and_below_transactional_id
        tps = _partitions_of(req.v3_and_below_topics)
        errors = _client_add_errors(ctx, txn_id, tps)
        if errors is None:
            if transactions is None:
                errors = {tp: E.coordinator_load_in_progress for tp in tps}
            else:
                errors = await _add_partitions(ctx, transactions, txn_id, int(req.v3_and_below_producer_id),
                                               int(req.v3_and_below_producer_epoch), tps, False, TV_0)
        return make(resp_cls, throttle_time=NO_THROTTLE,
                    results_by_topic_v3_and_below=_topic_results(resp_cls, "results_by_topic_v3_and_below", errors))
    # v4+: a partition leader's batched request (KIP-890): CLUSTER_ACTION on the CLUSTER
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=E.cluster_authorization_failed,
                    results_by_transaction=())
    result_cls = item_class(resp_cls, "results_by_transaction")
    results = []
    for txn in req.transactions:
        tps = _partitions_of(txn.topics)
        if transactions is None:
            errors = {tp: E.coordinator_load_in_progress for tp in tps}
        else:
            errors = await _add_partitions(ctx, transactions, txn.transactional_id, int(txn.producer_id),
                                           int(txn.producer_epoch), tps, bool(txn.verify_only),
                                           TV_2 if ctx.api_version >= 5 else TV_0)
        results.append(make(result_cls, transactional_id=txn.transactional_id,
                            topic_results=_topic_results(result_cls, "topic_results", errors)))
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=E.none, results_by_transaction=tuple(results))


# ----------------------------------------------------------------------------- AddOffsetsToTxn


@handles(25, 0, 4)
async def handle_add_offsets_to_txn(ctx, req):
    """KafkaApis.handleAddOffsetsToTxnRequest: WRITE on the TRANSACTIONAL_ID, READ on the GROUP;
    the group's `__consumer_offsets` partition joins the transaction."""
    resp_cls = response_class(25, ctx.api_version)

    def answer(error: ErrorCode):
        return make(resp_cls, throttle_time=NO_THROTTLE,
                    error_code=error_for_version("AddOffsetsToTxn", ctx.api_version, error))

    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return answer(E.transactional_id_authorization_failed)
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, req.group_id):
        return answer(E.group_authorization_failed)
    transactions = _coordinator(ctx)
    if transactions is None:
        return answer(E.coordinator_load_in_progress)
    result = await transactions.run(transactions.coordinator.handle_add_offsets(
        req.transactional_id, int(req.producer_id), int(req.producer_epoch), req.group_id, transactions._now_ms()))
    return answer(result.error)


# ----------------------------------------------------------------------------- EndTxn


@handles(26, 0, 5)
async def handle_end_txn(ctx, req):
    """KafkaApis.handleEndTxnRequest: WRITE on the TRANSACTIONAL_ID; v5+ is transaction version 2
    (the answer carries the bumped producer epoch)."""
    resp_cls = response_class(26, ctx.api_version)

    def answer(error: ErrorCode, producer_id: int = -1, producer_epoch: int = -1):
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=error_for_version("EndTxn", ctx.api_version, error),
                    producer_id=producer_id, producer_epoch=producer_epoch)

    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return answer(E.transactional_id_authorization_failed)
    transactions = _coordinator(ctx)
    if transactions is None:
        return answer(E.coordinator_load_in_progress)
    version = TV_2 if ctx.api_version >= 5 else TV_0
    result = await transactions.run(transactions.coordinator.handle_end_txn(
        req.transactional_id, int(req.producer_id), int(req.producer_epoch), bool(req.committed), version,
        transactions._now_ms()))
    return answer(result.error, result.producer_id, result.producer_epoch)


# ----------------------------------------------------------------------------- Describe / List


@handles(65, 0, 0)
async def handle_describe_transactions(ctx, req):
    """KafkaApis.handleDescribeTransactionsRequest: DESCRIBE on each TRANSACTIONAL_ID; the
    partitions of topics the principal may not DESCRIBE are left out."""
    resp_cls = response_class(65, ctx.api_version)
    state_cls = item_class(resp_cls, "transaction_states")
    transactions = _coordinator(ctx)
    out = []
    for txn_id in req.transactional_ids:
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            out.append(_described(state_cls, txn_id, E.transactional_id_authorization_failed))
            continue
        if transactions is None:
            out.append(_described(state_cls, txn_id, E.coordinator_load_in_progress))
            continue
        d = transactions.coordinator.describe_transaction(txn_id)
        if d.error is not E.none:
            out.append(_described(state_cls, txn_id, d.error))
            continue
        visible = filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, [t for t, _ in d.topics])
        topics = make_items(state_cls, "topics", [{"topic": t, "partitions": ps} for t, ps in d.topics if t in visible])
        out.append(make(state_cls, error_code=E.none, transactional_id=txn_id, transaction_state=d.state,
                        transaction_timeout=datetime.timedelta(milliseconds=d.transaction_timeout_ms),
                        transaction_start_time=_time(d.transaction_start_time_ms), producer_id=d.producer_id,
                        producer_epoch=d.producer_epoch, topics=topics))
    return make(resp_cls, throttle_time=NO_THROTTLE, transaction_states=tuple(out))


def _time(ms: int):
    """kio's TZAware for an int64 time; -1 (no transaction running) is kept as -1 ms."""
    return EPOCH_START + datetime.timedelta(milliseconds=ms)


def _described(state_cls, txn_id: str, error: ErrorCode):
    """An id answered with an error: the other fields at the schema's defaults (0, ""), as Kafka's
    handleDescribeTransactions leaves them."""
    return make(state_cls, error_code=error, transactional_id=txn_id, transaction_state="",
                transaction_timeout=datetime.timedelta(0), transaction_start_time=_time(0), producer_id=0,
                producer_epoch=0, topics=())


@handles(66, 0, 2)
async def handle_list_transactions(ctx, req):
    """KafkaApis.handleListTransactionsRequest: the transactional ids the principal may DESCRIBE,
    filtered by state, producer id, (v1, KIP-994) running longer than DurationFilter ms and (v2,
    KIP-1152) a transactional id regular expression."""
    resp_cls = response_class(66, ctx.api_version)
    transactions = _coordinator(ctx)
    if transactions is None:
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=E.coordinator_load_in_progress,
                    unknown_state_filters=(), transaction_states=())
    pattern = getattr(req, "transactional_id_pattern", None)
    matcher = None
    if pattern:
        try:
            matcher = re.compile(pattern)
        except re.error:
            return make(resp_cls, throttle_time=NO_THROTTLE, error_code=E.invalid_regular_expression,
                        unknown_state_filters=(), transaction_states=())
    listed = transactions.coordinator.list_transactions(
        [int(p) for p in req.producer_id_filters], list(req.state_filters),
        int(getattr(req, "duration_filter", -1)), transactions._now_ms())
    rows = [r for r in listed.transaction_states if matcher is None or matcher.fullmatch(r[0])]
    allowed = filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, [r[0] for r in rows])
    items = [{"transactional_id": t, "producer_id": p, "transaction_state": s} for t, p, s in rows if t in allowed]
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=listed.error,
                unknown_state_filters=listed.unknown_state_filters,
                transaction_states=make_items(resp_cls, "transaction_states", items))


# ----------------------------------------------------------------------------- TxnOffsetCommit


@handles(28, 0, 5)
async def handle_txn_offset_commit(ctx, req):
    """KafkaApis.handleTxnOffsetCommitRequest: WRITE on the TRANSACTIONAL_ID, READ on the GROUP,
    READ on each TOPIC; a partition that does not exist gets UNKNOWN_TOPIC_OR_PARTITION. The
    group's `__consumer_offsets` partition must be in the producer's ongoing transaction (KIP-890
    part 1 verification, added implicitly with transaction version 2: TxnOffsetCommit v5); then the
    group coordinator validates the member (OffsetMetadataManager.validateTransactionalOffsetCommit)
    and writes the offsets, pending until the transaction ends (ConsumerOffsetsService.txn_commit)."""
    from quafka.broker.core.consumer_offsets import CommitPartition, CommitRequest
    from quafka.protocol.coordinator_record_codec import CONSUMER_OFFSETS_TOPIC
    from quafka.protocol.partition_placement import group_partition

    server = ctx.server
    resp_cls = response_class(28, ctx.api_version)
    topic_cls = item_class(resp_cls, "topics")
    tps = [(t.name, int(p.partition_index)) for t in req.topics for p in t.partitions]
    errors: dict[tuple[str, int], ErrorCode] = {}

    def answer():
        by_topic: dict[str, list] = {}
        for (topic, partition), error in errors.items():
            by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": error})
        return make(resp_cls, throttle_time=NO_THROTTLE, topics=tuple(
            make(topic_cls, name=t, partitions=make_items(topic_cls, "partitions", ps)) for t, ps in by_topic.items()))

    def fail_all(error: ErrorCode):
        errors.update({tp: error for tp in tps})
        return answer()

    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return fail_all(E.transactional_id_authorization_failed)
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, req.group_id):
        return fail_all(E.group_authorization_failed)
    readable = filter_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, [t for t, _ in tps])
    topics = server.state.topics
    valid = []
    for t in req.topics:
        for p in t.partitions:
            tp = (t.name, int(p.partition_index))
            if t.name not in readable:
                errors[tp] = E.topic_authorization_failed
            elif t.name not in topics or not 0 <= tp[1] < len(topics[t.name].partitions):
                errors[tp] = E.unknown_topic_or_partition
            else:
                errors[tp] = E.none
                valid.append(CommitPartition(t.name, tp[1], int(p.committed_offset),
                                             int(getattr(p, "committed_leader_epoch", -1)),
                                             p.committed_metadata, topics[t.name].topic_id))
    if not valid:
        return answer()
    transactions = _coordinator(ctx)
    if transactions is None or not server.coordinators_loaded:
        return fail_all(E.coordinator_load_in_progress)
    if not req.group_id:
        return fail_all(E.invalid_group_id)
    offsets_tp = (CONSUMER_OFFSETS_TOPIC, group_partition(req.group_id, transactions.coordinator.offsets_num_partitions))
    verified = await transactions.verify_produce(req.transactional_id, int(req.producer_id), int(req.producer_epoch),
                                                 [offsets_tp], transaction_version=TV_2 if ctx.api_version >= 5 else TV_0,
                                                 for_produce=False)
    error = verified.get(offsets_tp, E.none)
    if error is not E.none:
        for p in valid:
            errors[(p.topic, p.partition)] = error
        return answer()
    request = CommitRequest(req.group_id, int(getattr(req, "generation_id", -1)), getattr(req, "member_id", ""),
                            getattr(req, "group_instance_id", None), api_version=9, partitions=tuple(valid))
    errors.update(await server.consumer_offsets.txn_commit(request, int(req.producer_id), int(req.producer_epoch)))
    return answer()


# ----------------------------------------------------------------------------- WriteTxnMarkers


@handles(27, 1, 2)
async def handle_write_txn_markers(ctx, req):
    """KafkaApis.handleWriteTxnMarkersRequest: CLUSTER_ACTION on the CLUSTER (the transaction
    coordinator of another broker, or `Admin.abortTransaction` for a hanging transaction). Each
    marker's control batch is appended through the log side (server/txn_markers.py); one on a
    `__consumer_offsets` partition also settles the producer's pending transactional offsets there
    (GroupCoordinator.onTransactionCompleted). A partition that does not exist gets
    UNKNOWN_TOPIC_OR_PARTITION."""
    from quafka.protocol.coordinator_record_codec import CONSUMER_OFFSETS_TOPIC

    server = ctx.server
    resp_cls = response_class(27, ctx.api_version)
    marker_cls = item_class(resp_cls, "markers")
    topic_cls = item_class(marker_cls, "topics")
    allowed = authorize_cluster(ctx, AclOperation.CLUSTER_ACTION)
    out = []
    for marker in req.markers:
        tps = [(t.name, int(p)) for t in marker.topics for p in t.partition_indexes]
        errors: dict[tuple[str, int], ErrorCode] = {}
        if not allowed:
            errors = {tp: E.cluster_authorization_failed for tp in tps}
        else:
            topics = server.state.topics
            present = [tp for tp in tps if tp[0] in topics and 0 <= tp[1] < len(topics[tp[0]].partitions)]
            errors = {tp: E.unknown_topic_or_partition for tp in tps if tp not in present}
            write_txn_markers = markers_writer()
            if present and write_txn_markers is None:
                log.warning("WriteTxnMarkers: no control-batch writer in this build (txn_markers)")
                errors.update({tp: E.unknown_server_error for tp in present})
                present = []
            if present:
                written = await write_txn_markers(server, int(marker.producer_id), int(marker.producer_epoch),
                                                  int(marker.coordinator_epoch), bool(marker.transaction_result),
                                                  present)
                for tp in present:
                    errors[tp] = written.get(tp, E.none)
                    if errors[tp] is E.none and tp[0] == CONSUMER_OFFSETS_TOPIC and server.consumer_offsets:
                        server.consumer_offsets.on_txn_marker(tp[1], int(marker.producer_id),
                                                              bool(marker.transaction_result))
                log.info("WriteTxnMarkers: %s marker of producer %d epoch %d on %s", "COMMIT" if
                         marker.transaction_result else "ABORT", marker.producer_id, marker.producer_epoch,
                         ", ".join(f"{t}-{p}: {errors[(t, p)].name}" for t, p in present))
        by_topic: dict[str, list] = {}
        for (topic, partition), error in errors.items():
            by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": error})
        out.append(make(marker_cls, producer_id=marker.producer_id, topics=tuple(
            make(topic_cls, name=t, partitions=make_items(topic_cls, "partitions", ps)) for t, ps in by_topic.items())))
    return make(resp_cls, markers=tuple(out))
