"""Writing share groups' dead letters (KIP-1191, Kafka 4.4): the shell of the `DeadLetterWrite`
effect of a share partition.

A share partition whose group has a dead-letter queue (`share.version` 2 and the group config
`errors.deadletterqueue.topic.name` set) persists rejected and exhausted records as ARCHIVING;
once that is durable it asks for their DLQ write. This module carries it out, then tells the share
partition (`on_dead_letters_done`), which archives the records whether the write succeeded or not,
as Kafka's `SharePartition.initiateDLQAndArchive` does ("Failed to write to DLQ, proceeding to
ARCHIVED regardless."):

1. The DLQ topic is checked as Kafka's `ShareGroupDLQStateManager` does before every write
   (`core.dead_letters.validate_dlq_topic`: name set, not `__`, an existing topic opted in with
   `errors.deadletterqueue.group.enable`, a missing one only with
   `errors.deadletterqueue.auto.create.topics.enable`, the `errors.deadletterqueue.topic.name.prefix`).
   A failure is logged and the records are archived with no DLQ copy; no retry.
2. A missing topic is created with the broker's default partition count and
   `errors.deadletterqueue.group.enable=true`, `message.timestamp.type=CreateTime`
   (`ShareGroupDLQStateManager.createTopicBuilder`).
3. With `errors.deadletterqueue.copy.record.enable` the source records are read from the local log
   (key and value copied; one too large for the DLQ topic goes headers-only).
4. The records (`core.dead_letters.dead_letters`, one per source offset, partition = source
   partition modulo the DLQ's count) are appended to the DLQ partition through the Produce path
   (`produce_to_partition`: the same validation, uncompressed, no producer id, as Kafka's DLQ
   produce), packed into batches of at most the DLQ topic's `max.message.bytes`.
5. The DLQ partition follows the flush policy, with one ordering rule: when the share-state
   writes are fsynced (flush enabled for `__share_group_state`), it is fsynced before the share
   partition archives the records, so a dead letter whose ARCHIVED state survives a machine crash
   survives it too; else it is fsynced only when its own `flush.messages` is reached, as a
   Produce is. Either way the dead letters are in the segment file before ARCHIVED is appended,
   so after a SIGKILL each archived record's dead letter is there.

Where quafka differs (docs/dead-letters.md):
- Kafka produces over the network with up to 5 attempts; quafka appends to its own log, where a
  failure is a disk fault (the broker stops; the records stay ARCHIVING and are written at restart).
- After a crash, records found ARCHIVING are written again (Kafka re-writes them, so the DLQ may
  hold a record twice); quafka first looks through the last `RECOVERY_SCAN_RECORDS` records of the
  DLQ partition for dead letters of the same group, topic, partition and state epoch, and skips
  offsets already there, so a crash between the DLQ write and the ARCHIVED write duplicates
  nothing (unless the DLQ's partition count changed meanwhile, or more records were written to
  that DLQ partition since).
- A batch the DLQ log refuses does not stop the others of the write (Kafka's stops there).
- The headers `quafka.dlq.reason` and `quafka.dlq.state.epoch` follow Kafka's six.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Iterator

from quafka.broker.core.dead_letters import (
    DlqTopicView,
    SourceRecord,
    cause_of,
    dead_letter_partition,
    dead_letters,
    pack,
    validate_dlq_topic,
)
from quafka.broker.core.share_partition import DeadLetterWrite
from quafka.broker.storage.base import MAX_LONG
from quafka.protocol.dead_letter_headers import (
    HEADER_GROUP,
    HEADER_OFFSET,
    HEADER_PARTITION,
    HEADER_STATE_EPOCH,
    HEADER_TOPIC,
    REASON_RECOVERED,
)
from quafka.protocol.errors import ErrorCode
from quafka.protocol.record_batch import LOG_OVERHEAD, Record, build_batch, iter_headers, iter_records

from .clock import wall_clock_ms
from .handlers.produce import produce_to_partition
from .state import OperationError

if TYPE_CHECKING:
    from quafka.broker.storage import Log

    from quafka.broker.config import ShareGroupConfig

    from ._services import BrokerServices
    from .share_partitions import ShareContext, SharePartitionManager
    from .state import TopicState

log = logging.getLogger("quafka.dlq")

READ_BYTES = 1024 * 1024  # per read of the source log (Kafka's DLQ_MAX_FETCH_BYTES)
RECOVERY_SCAN_RECORDS = 100_000  # how far back a recovered write looks for copies already written
CHUNK_RECORDS = 500  # source offsets read, built and appended at a time (bounds memory with copies)
PRODUCE_VERSION = 13
DLQ_TOPIC_CONFIGS = {"errors.deadletterqueue.group.enable": "true", "message.timestamp.type": "CreateTime"}


class DeadLetterWriter:
    def __init__(self, server: "BrokerServices", manager: "SharePartitionManager") -> None:
        self.server = server
        self.manager = manager
        self._tasks: set[asyncio.Task] = set()
        # the last write submitted per share partition (group, topic id, partition), across loads
        # of it: the next one waits for it (see `submit`)
        self._last: dict[tuple, asyncio.Task] = {}
        self._closed = False

    def enabled(self, group_id: str, group_config: "ShareGroupConfig | None" = None) -> bool:
        """The group's rejected and exhausted records go to a DLQ (Kafka's
        `SharePartition.isDLQEnabledForGroup`: share.version >= 2 and a DLQ topic configured).
        Cheap: asked at every acknowledgement."""
        state = self.server.state
        if group_config is None:
            group_config = state.group_config(group_id)
        return bool(group_config.dlq_topic_name) and state.share_version >= 2

    def submit(self, ctx: "ShareContext", writes: list[DeadLetterWrite]) -> None:
        """Write these dead letters of one share partition (one task), then archive them with one
        share-state write.

        The writes of one share partition run one after the other, also across its loads: a
        share partition dropped and read again (AlterShareGroupOffsets, a fenced state epoch,
        DeleteShareGroupOffsets) while a write was in flight finds those records still ARCHIVING
        and writes them again (`resume_dead_letters`) — after the write in flight, so that its
        look through the DLQ partition (`_written_before`) sees what that write appended, and
        each record reaches the DLQ once. (Two such looks side by side each missed the other's
        dead letters.)"""
        if self._closed or not writes:
            return  # the broker is stopping: they stay ARCHIVING and are written at restart
        key = ctx.key
        task = asyncio.get_running_loop().create_task(self._run(ctx, writes, self._last.get(key)))
        self._last[key] = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda t: self._last.pop(key) if self._last.get(key) is t else None)

    async def _run(self, ctx: "ShareContext", writes: list[DeadLetterWrite], before: asyncio.Task | None) -> None:
        if before is not None and not before.done():
            await asyncio.wait((before,))  # (its failures are its own: logged there)
        try:
            await self.write(ctx, writes)
        except asyncio.CancelledError:
            raise  # the broker is stopping: the records stay ARCHIVING and are written at restart
        except OSError as exc:  # the log directory failed; the broker stops: written at restart
            log.error("DLQ write for %s %s-%d failed: %s", ctx.group_id, ctx.topic.name, ctx.index, exc)
            return
        except Exception:
            log.exception("DLQ write for %s %s-%d failed, proceeding to ARCHIVED regardless",
                          ctx.group_id, ctx.topic.name, ctx.index)
        if self.manager.contexts.get(ctx.key) is ctx and not self._closed:
            self.manager.execute(ctx, ctx.share_partition.on_dead_letters_done([(w.first_offset, w.last_offset) for w in writes]))

    async def write(self, ctx: "ShareContext", writes: list[DeadLetterWrite]) -> int:
        """Write the dead letters of `writes`; the number of records appended (0 when the DLQ
        configuration refused them, which is logged)."""
        state = self.server.state
        metrics = self.server.metrics
        group_id = ctx.group_id
        group_config = state.group_config(group_id)
        name = group_config.dlq_topic_name
        topic = state.topics.get(name) if name else None
        view = DlqTopicView(exists=topic is not None, opted_in=topic is not None and topic.dlq_enabled,
                            partitions=len(topic.partitions) if topic is not None else 0)
        why = validate_dlq_topic(group_id, name, view,
                                 auto_create=bool(state.config.get("errors.deadletterqueue.auto.create.topics.enable")),
                                 prefix=str(state.config.get("errors.deadletterqueue.topic.name.prefix") or ""))
        if why is not None:
            log.warning("%s Offsets %s of %s-%d are archived without a dead letter.", why,
                        ", ".join(f"{w.first_offset}-{w.last_offset}" for w in writes), ctx.topic.name, ctx.index)
            return 0
        if topic is None:
            try:
                topic = state.create_topic(name, -1, -1, dict(DLQ_TOPIC_CONFIGS))
                log.info("created DLQ topic %s for share group %s", name, group_id)
            except OperationError as exc:
                topic = state.topics.get(name)  # created meanwhile (TOPIC_ALREADY_EXISTS) or refused
                if topic is None:
                    log.warning("creating DLQ topic %s for share group %s failed: %s", name, group_id, exc)
                    return 0
        part = topic.partitions[dead_letter_partition(ctx.index, len(topic.partitions))]
        already: set[int] = set()
        if any(w.reason == REASON_RECOVERED for w in writes):
            already = await self._written_before(part.log, ctx)
        copy = group_config.dlq_copy_record_enable
        written = 0
        for write in writes:
            cause = cause_of(write.reason, write.delivery_count, group_config.delivery_count_limit)
            for first in range(write.first_offset, write.last_offset + 1, CHUNK_RECORDS):
                last = min(first + CHUNK_RECORDS - 1, write.last_offset)
                source = _source_records(ctx.log, first, last) if copy else None
                letters = dead_letters(
                    group_id=group_id, topic=ctx.topic.name, partition=ctx.index, first_offset=first,
                    last_offset=last, delivery_count=write.delivery_count, cause=cause,
                    dlq_partitions=len(topic.partitions), now_ms=wall_clock_ms(), copy=copy,
                    source=source.get if source is not None else None, max_message_bytes=topic.max_message_bytes,
                    reason=write.reason, state_epoch=ctx.state_epoch)
                if already:
                    letters = [d for offset, d in zip(range(first, last + 1), letters) if offset not in already]
                written += self._append(ctx, topic, part, letters)
        if written:
            if self._must_flush(part.log, ctx):
                await self.server.flusher.flush(part.log, part.log.log_end_offset)
            metrics.count_dlq(group_id, records=written)
        if already:
            log.info("%d dead letter(s) of %s %s-%d were in %s-%d before a restart: not written again",
                     sum(1 for w in writes for o in range(w.first_offset, w.last_offset + 1) if o in already),
                     group_id, ctx.topic.name, ctx.index, topic.name, part.index)
        return written

    def _must_flush(self, dlq_log: "Log", ctx: "ShareContext") -> bool:
        """Whether the dead letters just appended are fsynced before the share partition archives
        their records: when the DLQ partition's own `flush.messages` is reached (as a Produce), or
        when the share-state writes of the share partition are fsynced (flush enabled for its
        `__share_group_state` partition) — the ARCHIVED state will then survive a machine crash,
        and its dead letter must too, so it must reach the disk first. Otherwise (flush off, the
        default) nothing is fsynced: the dead letters are in the segment file before ARCHIVED is
        appended, so after a SIGKILL both are there, and a machine crash may lose either, as it may
        lose any unflushed write."""
        flush_messages = dlq_log.config.flush_messages
        if flush_messages < MAX_LONG and dlq_log.unflushed_records >= flush_messages:
            return True
        return self.server.share_coordinator.state_flush_enabled(ctx.state_key)

    def _append(self, ctx: "ShareContext", topic: "TopicState", part, letters: list) -> int:
        """Append packed batches of dead letters; the records appended. A batch the log refuses
        (MESSAGE_TOO_LARGE, ...) is counted as failed and the next one is tried: its records are
        archived without a dead letter (Kafka gives up the rest of the write there)."""
        written = 0
        for batch in pack(letters, topic.max_message_bytes):
            records = build_batch([(d.key, d.value, list(d.headers)) for d in batch],
                                  base_timestamp=batch[0].timestamp_ms)
            self.server.metrics.count_dlq(ctx.group_id, produce_requests=1)
            result = produce_to_partition(topic, part, records, wall_clock_ms(), PRODUCE_VERSION)
            if result.error_code == ErrorCode.kafka_storage_error:
                raise OSError(result.error_message)
            if result.error_code != 0:
                self.server.metrics.count_dlq(ctx.group_id, failed_produce_requests=1)
                log.warning("writing %d dead letter(s) of %s %s-%d to %s-%d failed: %s %s; archived without a "
                            "dead letter", len(batch), ctx.group_id, ctx.topic.name, ctx.index, topic.name,
                            part.index, ErrorCode(result.error_code).name, result.error_message)
                continue
            written += len(batch)
        return written

    async def _written_before(self, dlq_log: "Log", ctx: "ShareContext") -> set[int]:
        """Source offsets of this share partition (and state epoch) with a dead letter among the
        last `RECOVERY_SCAN_RECORDS` records of the DLQ partition: written before a crash that
        left them ARCHIVING. One scan per recovery, yielding to the event loop as it goes."""
        start = max(dlq_log.log_start_offset, dlq_log.log_end_offset - RECOVERY_SCAN_RECORDS)
        wanted = {HEADER_TOPIC: ctx.topic.name.encode(), HEADER_PARTITION: str(ctx.index).encode(),
                  HEADER_GROUP: ctx.group_id.encode(), HEADER_STATE_EPOCH: str(ctx.state_epoch).encode()}
        found: set[int] = set()
        for n, record in enumerate(_records(dlq_log, start, dlq_log.log_end_offset - 1), 1):
            headers = dict(record.headers)
            if all(headers.get(k) == v for k, v in wanted.items()):
                try:
                    found.add(int(headers.get(HEADER_OFFSET) or b"-1"))
                except ValueError:
                    pass
            if n % 1000 == 0:
                await asyncio.sleep(0)
        return found

    def close(self) -> None:
        self._closed = True
        for task in self._tasks:
            task.cancel()


def _records(plog: "Log", first: int, last: int) -> Iterator[Record]:
    """The records of `plog` with offsets in [first, last] (a local read, batch by batch)."""
    offset = first
    while offset <= last and offset < plog.log_end_offset:
        offset = max(offset, plog.log_start_offset)
        data = plog.read_batches(offset, READ_BYTES, last).data
        view = memoryview(data)
        before = offset
        for pos, header in iter_headers(data):
            for record in iter_records(view[pos:pos + header.batch_length + LOG_OVERHEAD]):
                if first <= record.offset <= last:
                    yield record
            offset = header.last_offset + 1
        if offset == before:  # nothing read (the log end, or a partial batch)
            return


def _source_records(plog: "Log", first: int, last: int) -> dict[int, SourceRecord]:
    """Key and value of the source records [first, last] still in the log (gone ones are absent:
    their dead letters keep headers only)."""
    return {r.offset: SourceRecord(_bytes(r.key), _bytes(r.value)) for r in _records(plog, first, last)}


def _bytes(part) -> bytes | None:
    return None if part is None else bytes(part)

