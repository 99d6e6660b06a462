"""Reading and writing the coordinators' internal topics (`__share_group_state`,
`__consumer_offsets`): records appended as one batch per write, and replay that verifies every
batch before any of its records is applied.

A batch whose CRC fails, or one whose records do not decode, is dropped as a whole and logged
(topic, partition, offsets, size): replay never applies what it could not verify, and never stops
the broker from starting over it.
"""

from __future__ import annotations

import logging
import struct
from typing import Callable, Iterator, Sequence, TypeVar

from quafka.broker.storage import Log
from quafka.protocol.coordinator_record_codec import CONSUMER_OFFSETS_TOPIC, CorruptRecord, UnknownRecordType
from quafka.protocol.partition_placement import group_partition
from quafka.protocol.record_batch import (
    TRANSACTIONAL_FLAG,
    BatchHeader,
    batch_crc_ok,
    build_batch,
    iter_headers,
    iter_records,
    read_header,
)

log = logging.getLogger("quafka.internal_log")

T = TypeVar("T")

__all__ = ["CONTROL_ABORT", "CONTROL_COMMIT", "append_records", "consumer_offsets_configs", "ensure_compacted",
           "ensure_consumer_offsets_compacted", "group_offsets_log", "verified_batches", "verified_records"]


def append_records(plog: Log, encoded: Sequence[tuple[bytes, bytes | None]], now_ms: int,
                   producer: tuple[int, int] | None = None) -> int:
    """Append (key, value) records as one uncompressed batch, without the log's own fsync (the
    caller decides when to fsync); returns the log end offset after it. `producer` (producer id,
    epoch) makes it a transactional batch (TxnOffsetCommit: Kafka's CoordinatorRuntime writes the
    records of a transactional offset commit so, with no sequence)."""
    if producer is None:
        buf = bytearray(build_batch(list(encoded), base_timestamp=now_ms))
    else:
        buf = bytearray(build_batch(list(encoded), base_timestamp=now_ms, producer_id=producer[0],
                                    producer_epoch=producer[1], attributes=TRANSACTIONAL_FLAG))
    plog.append(buf, [(0, read_header(buf))], now_ms, defer_flush=True)
    return plog.log_end_offset


def consumer_offsets_configs(state) -> dict[str, str]:
    """The topic configs `__consumer_offsets` is created with, as Kafka's GroupCoordinator creates
    it: compacted (the coordinators' records are keyed, latest wins, tombstones delete), its
    segment size from `offsets.topic.segment.bytes`."""
    return {"cleanup.policy": "compact", "segment.bytes": str(int(state.config.get("offsets.topic.segment.bytes")))}


def ensure_consumer_offsets_compacted(state) -> None:
    """An existing `__consumer_offsets` created before quafka compacted it (retention.ms=-1,
    cleanup.policy delete) becomes compacted: its history then shrinks to the live keys."""
    ensure_compacted(state, CONSUMER_OFFSETS_TOPIC, consumer_offsets_configs(state))


def ensure_compacted(state, topic_name: str, compacted_configs: dict[str, str]) -> None:
    """An existing internal topic created before quafka compacted it (retention.ms=-1,
    cleanup.policy delete) gets `compacted_configs` (cleanup.policy=compact, ...): its history
    then shrinks to the live keys. Nothing when the topic is absent or already compacted."""
    topic = state.topics.get(topic_name)
    if topic is None or "compact" in topic.configs.get("cleanup.policy", ""):
        return
    configs = {k: v for k, v in topic.configs.items() if k != "retention.ms"}
    configs.update(compacted_configs)
    state.set_topic_configs(topic_name, configs)
    log.info("%s: set %s (it was created without compaction)", topic_name,
             ", ".join(f"{k}={v}" for k, v in sorted(compacted_configs.items())))


def group_offsets_log(state, group_id: str) -> Log:
    """The `__consumer_offsets` partition a group's records live in (Kafka's placement: the
    group id's hash modulo the partition count), creating the topic with
    `offsets.topic.num.partitions` partitions on first use."""
    n = int(state.config.get("offsets.topic.num.partitions"))
    topic = state.ensure_internal_topic(CONSUMER_OFFSETS_TOPIC, n, consumer_offsets_configs(state))
    return topic.partitions[group_partition(group_id, len(topic.partitions))].log


def verified_records(plog: Log, decode: Callable[[bytes, bytes | None], T], *,
                     chunk_bytes: int = 1 << 20) -> Iterator[tuple[int, T]]:
    """(offset, decoded record) of every record from the log start offset to the log end, batch
    by batch; records of unknown types (other coordinators' records) and control batches
    (transaction markers) are skipped."""
    for header, records in verified_batches(plog, decode, chunk_bytes=chunk_bytes):
        if not header.is_control:
            yield from records


CONTROL_ABORT, CONTROL_COMMIT = 0, 1  # ControlRecordType: the int16 after the version in a control key


def verified_batches(plog: Log, decode: Callable[[bytes, bytes | None], T], *,
                     chunk_bytes: int = 1 << 20) -> Iterator[tuple[BatchHeader, list]]:
    """(batch header, records) of every batch that passes its CRC, from the log start offset to
    the log end: for a data batch its decoded records as (offset, record); for a control batch
    (`header.is_control`) one (offset, control type) — CONTROL_COMMIT or CONTROL_ABORT — from its
    control record's key (Kafka's ControlRecordType). What a loader of transactional records
    needs: the producer id of each batch and the markers that end its transactions
    (Kafka's CoordinatorLoaderImpl)."""
    offset, end = plog.log_start_offset, plog.log_end_offset
    where = f"{plog.topic}-{plog.partition}"
    while offset < end:
        data = plog.read(offset, chunk_bytes, min_one_batch=True)
        if not data:
            return
        next_offset = offset
        for pos, header in iter_headers(data):
            next_offset = header.last_offset + 1
            if header.last_offset < offset:
                continue
            size = header.batch_length + 12
            if not batch_crc_ok(data, pos, header):
                log.error("%s: batch at offsets %d-%d fails its CRC; dropped (%d bytes)", where,
                          header.base_offset, header.last_offset, size)
                continue
            decoded: list = []
            try:
                for record in iter_records(data[pos:pos + size]):
                    if record.offset < offset or record.key is None:
                        continue
                    if header.is_control:
                        if len(record.key) >= 4:
                            decoded.append((record.offset, struct.unpack_from(">h", record.key, 2)[0]))
                        continue
                    try:
                        decoded.append((record.offset, decode(record.key, record.value)))
                    except UnknownRecordType:
                        continue
            except (CorruptRecord, ValueError) as exc:
                log.error("%s: batch at offsets %d-%d does not decode (%s); dropped (%d bytes)", where,
                          header.base_offset, header.last_offset, exc, size)
                continue
            yield header, decoded
        if next_offset <= offset:
            return
        offset = next_offset
