"""PartitionReader: plain Fetch by offset from one partition, with no group.

``read(topic, partition, start_offset, end_offset=None, max_bytes=None)`` yields the records of
``[start_offset, end_offset)``; with ``end_offset=None`` it stops at the high watermark that the
first Fetch response reports (records produced afterwards are not waited for). When
``end_offset`` lies beyond the high watermark the reader long-polls until the records arrive.
``max_bytes`` overrides ``max.partition.fetch.bytes`` for one read: the bytes asked for per Fetch.
An offset below the log start offset (or beyond the log end) raises KafkaException with
OFFSET_OUT_OF_RANGE. Retriable errors (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_ID, ...) refresh
the metadata and retry up to 5 times with a growing backoff; a dropped connection surfaces as a
retriable KafkaConnectionError. Control batches are skipped; ``check.crcs`` (default true) verifies each
batch. Reads use isolation level read_uncommitted, as Kafka's consumer does by default.

``AsyncPartitionReader`` is the asyncio reader (``async for record in reader.read(...)``);
``PartitionReader`` is the same object driven from a private event loop thread.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator, Iterator
from typing import Any

from quafka.protocol.errors import ErrorCode

from ._base import AsyncClient, SyncClient
from ._config import Key
from ._security import SECURITY_CONFIG
from .errors import KafkaException, error_for_code
from quafka.protocol.record_batch import iter_headers

from .records import Record, decode_batches

__all__ = ["AsyncPartitionReader", "PartitionReader", "READER_CONFIG"]

FETCH_KEY = 1
FETCH_MIN_VERSION = 4
READ_UNCOMMITTED = 0
LONG_POLL_MS = 500
MAX_RETRIES = 5
RETRY_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms default

READER_CONFIG: dict[str, Key] = {
    "bootstrap.servers": Key.required(str),
    "client.id": Key(str, "quafka-reader"),
    "request.timeout.ms": Key(int, 30000, 1),
    "fetch.max.bytes": Key(int, 52428800, 1),
    "max.partition.fetch.bytes": Key(int, 1048576, 1),
    "check.crcs": Key(bool, True),
    **SECURITY_CONFIG,  # security.protocol, ssl.*, sasl.* (_security)
}


def fetch_values(topic: str, topic_id: Any, partition: int, offset: int, *, max_wait_ms: int, max_bytes: int,
                 partition_max_bytes: int) -> dict[str, Any]:
    """The fields of a sessionless one-partition Fetch request, for every version (see build_entity)."""
    return {
        "cluster_id": None,
        "replica_id": -1,
        "replica_state": {"replica_id": -1, "replica_epoch": -1},
        "max_wait": datetime.timedelta(milliseconds=max_wait_ms),
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "isolation_level": READ_UNCOMMITTED,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [{
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": partition_max_bytes}]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


class AsyncPartitionReader(AsyncClient):
    """Reads partitions by offset with Fetch; see the module docstring. Use ``async with``."""

    CONFIG = READER_CONFIG
    NAME = "PartitionReader"

    async def read(self, topic: str, partition: int, start_offset: int, end_offset: int | None = None,
                   max_bytes: int | None = None) -> AsyncIterator[Record]:
        """Yield the records of ``topic``-``partition`` from ``start_offset`` to ``end_offset``
        (exclusive; None: the high watermark)."""
        async for chunk in self.read_chunks(topic, partition, start_offset, end_offset, max_bytes):
            for record in chunk:
                yield record

    async def read_chunks(self, topic: str, partition: int, start_offset: int, end_offset: int | None = None,
                          max_bytes: int | None = None) -> AsyncIterator[list[Record]]:
        """As ``read``, one list of records per Fetch response (what the sync reader hands across
        threads: one hop per response, not per record)."""
        async for chunk in self._fetch_loop(topic, partition, start_offset, end_offset, max_bytes, raw=False):
            yield chunk

    async def read_raw(self, topic: str, partition: int, start_offset: int, end_offset: int | None = None,
                       max_bytes: int | None = None) -> AsyncIterator[tuple[bytes, int, int]]:
        """quafka extension: as ``read_chunks`` undecoded, per Fetch response ``(record batches,
        first, last)``: the complete v2 batches as the broker sent them (they may begin before
        ``start_offset``, and hold control batches) and the offsets of the read they cover — for a
        caller that decodes in bulk (``quafka.spark.record_columns``)."""
        async for chunk in self._fetch_loop(topic, partition, start_offset, end_offset, max_bytes, raw=True):
            yield chunk

    async def _fetch_loop(self, topic: str, partition: int, start_offset: int, end_offset: int | None,
                          max_bytes: int | None, *, raw: bool) -> AsyncIterator[Any]:
        if start_offset < 0:
            raise KafkaException(f"start_offset must be >= 0, got {start_offset}", ErrorCode.offset_out_of_range)
        if end_offset is not None and end_offset <= start_offset:
            return
        cluster = await self._get_cluster()
        partition_max_bytes = self.config["max.partition.fetch.bytes"] if max_bytes is None else max_bytes
        offset, stop, retries, high_watermark = start_offset, end_offset, 0, None
        while stop is None or offset < stop:
            # long-poll only while waiting for records beyond the high watermark
            waiting = end_offset is not None and (high_watermark is None or offset >= high_watermark)
            info = await cluster.topic(topic)
            conn = await cluster.leader_connection(topic, partition)
            response = await conn.call(FETCH_KEY, fetch_values(
                topic, info.topic_id, partition, offset, max_wait_ms=LONG_POLL_MS if waiting else 0,
                max_bytes=self.config["fetch.max.bytes"], partition_max_bytes=partition_max_bytes),
                min_version=FETCH_MIN_VERSION)
            where = f"Fetch of {topic}-{partition} at offset {offset}"
            top_error = getattr(response, "error_code", ErrorCode.none)
            part = response.responses[0].partitions[0] if response.responses else None
            error = top_error if top_error != ErrorCode.none else (part.error_code if part else ErrorCode.unknown_server_error)
            if error != ErrorCode.none:
                error = ErrorCode(error)
                if (error.retriable or error == ErrorCode.unknown_topic_id) and retries < MAX_RETRIES:
                    retries += 1
                    await asyncio.sleep(RETRY_BACKOFF_S * retries)
                    await cluster.refresh_metadata([topic])
                    continue
                if error == ErrorCode.offset_out_of_range:
                    raise KafkaException(f"{where}: OFFSET_OUT_OF_RANGE (error code 1): the offset is outside "
                                         f"the partition's log", error)
                raise error_for_code(error, where)
            retries = 0
            high_watermark = part.high_watermark
            if stop is None:
                stop = part.high_watermark
                if offset >= stop:
                    return
            if raw:
                next_offset = None
                for _pos, header in iter_headers(part.records or b""):
                    next_offset = header.last_offset + 1
                if next_offset is not None and next_offset > offset:
                    yield (bytes(part.records), offset, min(next_offset, stop) - 1)
                    if next_offset >= stop:
                        return
                    offset = next_offset
                    continue
                if part.records and offset < part.high_watermark:
                    raise _batch_too_large(where, partition_max_bytes)
                continue
            records, next_offset = decode_batches(topic, partition, part.records,
                                                  check_crcs=self.config["check.crcs"], min_offset=offset)
            if records and records[-1].offset >= stop:
                records = [r for r in records if r.offset < stop]
                if records:
                    yield records
                return
            if records:
                yield records
            if next_offset is not None:
                offset = max(offset, next_offset)
            elif part.records and offset < part.high_watermark:
                raise _batch_too_large(where, partition_max_bytes)


def _batch_too_large(where: str, partition_max_bytes: int) -> KafkaException:
    return KafkaException(f"{where}: the next record batch is larger than the {partition_max_bytes} bytes asked for; "
                          f"raise max.partition.fetch.bytes or max_bytes", ErrorCode.record_list_too_large)


class PartitionReader(SyncClient):
    """The blocking PartitionReader: ``for record in reader.read(...)``. Use ``with``."""

    ASYNC = AsyncPartitionReader

    def read(self, topic: str, partition: int, start_offset: int, end_offset: int | None = None,
             max_bytes: int | None = None) -> Iterator[Record]:
        return _flatten(self.read_chunks(topic, partition, start_offset, end_offset, max_bytes))

    def read_chunks(self, topic: str, partition: int, start_offset: int, end_offset: int | None = None,
                    max_bytes: int | None = None) -> Iterator[list[Record]]:
        return self._iterate(self._async.read_chunks(topic, partition, start_offset, end_offset, max_bytes))

    def read_raw(self, topic: str, partition: int, start_offset: int, end_offset: int | None = None,
                 max_bytes: int | None = None) -> Iterator[tuple[bytes, int, int]]:
        return self._iterate(self._async.read_raw(topic, partition, start_offset, end_offset, max_bytes))


def _flatten(chunks: Iterator[list[Record]]) -> Iterator[Record]:
    try:
        for chunk in chunks:
            yield from chunk
    finally:
        chunks.close()  # closes the async generator on the loop (an abandoned read)
