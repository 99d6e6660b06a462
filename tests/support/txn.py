"""Helpers for the log side of transactions (tests only): raw transactional batches, markers
written on an embedded broker's loop, read_committed fetches and ListOffsets.

Until the transaction coordinator's shell is wired (issue 31), a test stands in for its produce
verification with `AcceptingVerifier` (every partition is in the transaction) and writes markers
with `quafka.broker.server.txn_markers.write_txn_markers`, the call the coordinator makes.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v5.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from quafka.protocol.errors import ErrorCode
from quafka.protocol.record_batch import TRANSACTIONAL_FLAG, build_batch

READ_UNCOMMITTED, READ_COMMITTED = 0, 1


class AcceptingVerifier:
    """server.transactions stand-in: every partition is part of the producer's transaction."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    async def verify_produce(self, transactional_id, producer_id, producer_epoch, topic_partitions):
        self.calls.append((transactional_id, producer_id, producer_epoch, tuple(topic_partitions)))
        return {tp: ErrorCode.none for tp in topic_partitions}


def init_producer_id(raw) -> int:
    resp = raw.request(InitProducerIdRequest(transactional_id=None, transaction_timeout=timedelta(seconds=60),
                                             producer_id=-1, producer_epoch=-1))
    assert resp.error_code == 0, resp
    return resp.producer_id


def txn_batch(values: list[bytes], producer_id: int, base_sequence: int, *, epoch: int = 0,
              transactional: bool = True, timestamp_ms: int = 1000) -> bytes:
    return build_batch([(None, v) for v in values], base_timestamp=timestamp_ms, producer_id=producer_id,
                       producer_epoch=epoch, base_sequence=base_sequence,
                       attributes=TRANSACTIONAL_FLAG if transactional else 0)


def produce(raw, topic: str, records: bytes, *, transactional_id: str | None = "tx", partition: int = 0):
    """One raw Produce v9 (acks=-1); returns the partition response."""
    req = ProduceRequest(transactional_id=transactional_id, acks=-1, timeout=timedelta(seconds=10), topic_data=(
        TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=partition, records=records),)),))
    return raw.request(req).responses[0].partition_responses[0]


def fetch(raw, topic: str, offset: int, isolation: int, *, max_wait_ms: int = 0, partition: int = 0,
          partition_max_bytes: int = 1 << 20):
    """One raw Fetch v12; returns the partition data."""
    req = FetchRequest(
        cluster_id=None, replica_id=-1, max_wait=timedelta(milliseconds=max_wait_ms), min_bytes=1,
        max_bytes=50 << 20, isolation_level=isolation, session_id=0, session_epoch=-1,
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=partition_max_bytes),)),),
        forgotten_topics_data=(), rack_id="")
    return raw.request(req).responses[0].partitions[0]


def list_offset(raw, topic: str, timestamp: int, isolation: int, *, partition: int = 0) -> int:
    req = ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=(ListOffsetsTopic(
        name=topic, partitions=(ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1,
                                                     timestamp=timestamp),)),))
    part = raw.request(req).topics[0].partitions[0]
    assert part.error_code == 0, part
    return part.offset


def write_markers(broker, producer_id: int, epoch: int, committed: bool, partitions, *,
                  coordinator_epoch: int = 0) -> dict:
    """write_txn_markers on an EmbeddedBroker's loop (what the coordinator's shell calls)."""
    from quafka.broker.server.txn_markers import write_txn_markers

    future = asyncio.run_coroutine_threadsafe(
        write_txn_markers(broker.server, producer_id, epoch, coordinator_epoch, committed, list(partitions)),
        broker._loop)
    return future.result(30)


def install_verifier(broker, verifier=None):
    verifier = verifier if verifier is not None else AcceptingVerifier()
    broker.call(setattr, broker.server, "transactions", verifier)
    return verifier
