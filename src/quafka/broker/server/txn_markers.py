"""Writing COMMIT / ABORT markers into the partitions of a transaction (the log side of EndTxn).

The broker is its own WriteTxnMarkers target (Kafka's coordinator sends WriteTxnMarkersRequest to
each partition leader; KafkaApis.handleWriteTxnMarkersRequest appends the markers with
ReplicaManager.appendRecords, origin COORDINATOR). The transaction coordinator's shell calls:

    await write_txn_markers(server, producer_id, producer_epoch, coordinator_epoch, committed, partitions)
        -> {TopicPartition: ErrorCode}

`partitions` are `quafka.broker.core.transaction_state.TopicPartition` ((topic, partition)
tuples). Each gets one control batch (protocol.control_batches), appended through the partition's
log like a produced batch: the same segment rolls and flush settings (flush.messages is honoured
before returning, by the same flusher as Produce), listeners woken (a read_committed fetch
parked on the partition sees the last stable offset move), and the partition's producer state
(the producer's transaction closes, an ABORT enters the aborted-transaction index:
PartitionState.complete_txn). `__consumer_offsets` partitions get their marker the same way;
what it means for pending transactional offsets is the group coordinator's business.

Per partition the answer is:
- ErrorCode.none: written; or the topic or partition does not exist (Kafka drops markers for a
  deleted partition: handleWriteTxnMarkersRequest answers UNKNOWN_TOPIC_OR_PARTITION there and the
  coordinator's TransactionMarkerRequestCompletionHandler treats it as done; quafka answers none
  directly so the caller needs no special case);
- INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED: the partition's producer state holds a
  newer producer epoch / coordinator epoch (ProducerAppendInfo.appendEndTxnMarker), nothing
  written (the caller must not retry it as is);
- KAFKA_STORAGE_ERROR: the log directory is offline, the write or its fsync failed (retriable once
  the directory is back, i.e. after a restart: the coordinator then resumes the markers).

Every error is logged with the producer, the partition and the cause.

The produce side's hook for KIP-890 verification is in handlers/produce.py: `server.transactions`
(None until the coordinator shell is wired) with `await server.transactions.verify_produce(
transactional_id, producer_id, producer_epoch, topic_partitions) -> {TopicPartition: ErrorCode}`.
"""

from __future__ import annotations

import logging
from typing import Iterable

from quafka.broker.storage.base import MAX_LONG
from quafka.protocol.control_batches import end_txn_marker_batch
from quafka.protocol.errors import ErrorCode
from quafka.protocol.record_batch import read_header

from ._services import BrokerServices
from .clock import wall_clock_ms
from .state import PartitionState

log = logging.getLogger("quafka.transactions")

__all__ = ["write_txn_markers", "append_txn_marker"]


def append_txn_marker(part: PartitionState, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      committed: bool, now_ms: int) -> ErrorCode:
    """Append one marker to `part` (synchronously, on the loop) and apply it to its producer
    state. The caller flushes if flush.messages is reached. Errors are logged here."""
    name = f"{part.topic.name}-{part.index}"
    what = "COMMIT" if committed else "ABORT"
    plog = part.log
    refused = part.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
    if refused is not None:
        log.warning("%s marker of producer %d (epoch %d, coordinator epoch %d) refused on %s: %s", what, producer_id,
                    producer_epoch, coordinator_epoch, name, refused.message)
        return refused.error_code
    if not plog.health.online:
        log.error("%s marker of producer %d (epoch %d) not written to %s: its log directory is offline", what,
                  producer_id, producer_epoch, name)
        return ErrorCode.kafka_storage_error
    buf = bytearray(end_txn_marker_batch(producer_id, producer_epoch, coordinator_epoch, committed, now_ms))
    try:
        info = plog.append(buf, [(0, read_header(buf, 0))], now_ms, defer_flush=True)
        part.complete_txn(producer_id, producer_epoch, coordinator_epoch, info.first_offset, committed)
    except OSError as exc:  # the log directory is offline now (server.on_log_dir_failure)
        log.error("%s marker of producer %d (epoch %d) could not be written to %s: %s", what, producer_id,
                  producer_epoch, name, exc)
        return ErrorCode.kafka_storage_error
    return ErrorCode.none


async def write_txn_markers(server: BrokerServices, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                            committed: bool, partitions: Iterable[tuple[str, int]]) -> dict:
    """Write a COMMIT (`committed`) or ABORT marker of `producer_id` at `producer_epoch` into each
    of `partitions`; return {TopicPartition: ErrorCode} (see the module docstring)."""
    state = server.state
    now_ms = wall_clock_ms()
    results: dict = {}
    flushes: list[tuple[tuple[str, int], PartitionState, int]] = []
    for tp in partitions:
        topic_name, index = tp
        topic = state.topics.get(topic_name)
        if topic is None or not 0 <= index < len(topic.partitions):
            log.info("%s marker of producer %d dropped for %s-%d: the partition does not exist (deleted)",
                     "COMMIT" if committed else "ABORT", producer_id, topic_name, index)
            results[tp] = ErrorCode.none
            continue
        part = topic.partitions[index]
        error = append_txn_marker(part, producer_id, producer_epoch, coordinator_epoch, committed, now_ms)
        results[tp] = error
        plog = part.log
        if error == ErrorCode.none and plog.config.flush_messages < MAX_LONG and \
                plog.unflushed_records >= plog.config.flush_messages:
            flushes.append((tp, part, plog.log_end_offset))
    for tp, part, end_offset in flushes:  # flush.messages reached: durable before answering, as Produce
        try:
            await server.flusher.flush(part.log, end_offset)
        except OSError as exc:
            log.error("marker of producer %d on %s-%d written but its flush failed: %s", producer_id,
                      part.topic.name, part.index, exc)
            results[tp] = ErrorCode.kafka_storage_error
    return results
