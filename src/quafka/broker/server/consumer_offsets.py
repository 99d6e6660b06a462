"""The asyncio shell of consumer groups' committed offsets: owns the `ConsumerOffsets` machine
(broker/core/consumer_offsets.py), appends the records it computes to `__consumer_offsets`, replays
them, and expires old offsets.

Records first, as the share coordinators: a commit, an OffsetDelete or an expiry computes its
records, appends them to the group's partition of `__consumer_offsets` (Kafka's placement) and
only then replays them into the machine, with no await in between; the answer waits for the fsync
when flush is enabled for the topic. A failed append changes nothing in memory and the request
gets NOT_COORDINATOR, Kafka's answer to a coordinator write that failed with KAFKA_STORAGE_ERROR
(`CoordinatorOperationExceptionHelper`). On start-up the offset-commit records of every partition
are replayed (`load`); the share-group records of the same topic are the share-group
coordinator's and are skipped here, as it skips these.

Which group an id names (`view`): a share group of the share-group coordinator, else a classic
group of the classic group coordinator (members, generation, state), else a consumer group of the
KIP-848 coordinator (members and their epochs, subscribed topics), else none — a commit with
generation -1 then makes a *simple* group that exists through its offsets, as in Kafka.

Expiry runs every `offsets.retention.check.interval.ms`: offsets older than
`offsets.retention.minutes` (from their commit time for simple groups) are tombstoned.

Transactional offsets (TxnOffsetCommit): written in a transactional batch of the producer and
pending until its COMMIT or ABORT marker on the same partition (`on_txn_marker`, called by the
transaction coordinator once the marker is written; on start-up the markers are replayed with the
batches, as Kafka's CoordinatorLoaderImpl does).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Iterable, Protocol

from quafka.broker.core.consumer_offsets import (
    NO_GROUP,
    CommitRequest,
    ConsumerOffsets,
    DeletePlan,
    FetchedOffset,
    GroupKind,
    GroupView,
    OffsetRecord,
    TopicPartition,
)
from quafka.protocol.coordinator_record_codec import CONSUMER_OFFSETS_TOPIC
from quafka.protocol.errors import ErrorCode
from quafka.protocol.offset_commit_records import (
    decode_offset_commit_record,
    encode_offset_commit_key,
    encode_offset_commit_value,
)

from ._services import BrokerServices
from .coordinator_shell import CoordinatorShell
from .internal_log import (
    CONTROL_COMMIT, append_records, ensure_consumer_offsets_compacted, group_offsets_log, verified_batches,
)

if TYPE_CHECKING:
    from .classic_groups import ClassicGroupService
    from .consumer_groups import ConsumerGroupService
    from .share_groups import ShareGroupService

log = logging.getLogger("quafka.consumer_offsets")

__all__ = ["ConsumerOffsetsService"]

SHARE_VIEW = GroupView(GroupKind.SHARE)


class ConsumerOffsetsBroker(BrokerServices, Protocol):
    """What the offsets coordinator uses of the broker: the group coordinators, which own the
    groups it stores offsets for."""

    consumer_groups: ConsumerGroupService | None
    classic_groups: ClassicGroupService | None
    share_groups: ShareGroupService | None


class ConsumerOffsetsService(CoordinatorShell):
    _log = log

    server: ConsumerOffsetsBroker

    def __init__(self, server: "ConsumerOffsetsBroker") -> None:
        super().__init__(server)
        self.offsets = ConsumerOffsets(max_metadata_chars=int(server.state.config.get("offset.metadata.max.bytes")))
        self.loaded = False
        self._expiry_task: asyncio.Task | None = None

    # ------------------------------------------------------------------ groups
    def view(self, group_id: str) -> GroupView:
        share_groups = self.server.share_groups
        if share_groups is not None and share_groups.coordinator.group(group_id) is not None:
            return SHARE_VIEW
        classic_groups = self.server.classic_groups
        if classic_groups is not None and classic_groups.has_group(group_id):
            return classic_groups.view(group_id)
        consumer_groups = self.server.consumer_groups
        if consumer_groups is not None and consumer_groups.has_group(group_id):
            return consumer_groups.view(group_id)
        return NO_GROUP

    def simple_group_ids(self) -> list[str]:
        """Groups that exist only through their committed offsets (type classic, state Empty)."""
        return [g for g in self.offsets.group_ids() if self.view(g).kind is GroupKind.NONE]

    # ------------------------------------------------------------------ requests
    async def commit(self, request: CommitRequest) -> dict[TopicPartition, ErrorCode]:
        plan = self.offsets.prepare_commit(request, self.view(request.group_id), self._now_ms())
        if plan.records:
            try:
                end = self._write(request.group_id, plan.records)
                self.server.metrics.offset_commits += len(plan.records)
                await self._durable(request.group_id, end)
            except OSError:
                return {tp: ErrorCode.not_coordinator if error is ErrorCode.none else error
                        for tp, error in plan.errors.items()}
        return plan.errors

    def fetch(self, group_id: str, partitions: Iterable[TopicPartition] | None,
              require_stable: bool = False) -> dict[TopicPartition, FetchedOffset]:
        return self.offsets.fetch(group_id, self.view(group_id), partitions, require_stable)

    async def txn_commit(self, request: CommitRequest, producer_id: int,
                         producer_epoch: int) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: the records go in a transactional batch of the producer on the group's
        partition, pending until the producer's marker there (`on_txn_marker`)."""
        plan = self.offsets.prepare_txn_commit(request, self.view(request.group_id), self._now_ms())
        if plan.records:
            try:
                end = self._write(request.group_id, plan.records, (producer_id, producer_epoch))
                await self._durable(request.group_id, end)
            except OSError:
                return {tp: ErrorCode.not_coordinator if error is ErrorCode.none else error
                        for tp, error in plan.errors.items()}
        return plan.errors

    def on_txn_marker(self, offsets_partition: int, producer_id: int, committed: bool) -> None:
        """The producer's COMMIT/ABORT marker is in `__consumer_offsets` partition
        `offsets_partition` (written by the transaction coordinator): settle its pending offsets."""
        count = self.offsets.replay_end_transaction(offsets_partition, producer_id, committed)
        if count:
            log.info("%s-%d: %d transactional offset(s) of producer %d %s", CONSUMER_OFFSETS_TOPIC,
                     offsets_partition, count, producer_id, "committed" if committed else "aborted")

    async def delete(self, group_id: str, partitions: Iterable[TopicPartition]) -> DeletePlan:
        plan = self.offsets.prepare_delete(group_id, self.view(group_id), list(partitions))
        if plan.records:
            try:
                end = self._write(group_id, plan.records)
                self.server.metrics.offset_deletions += len(plan.records)
                await self._durable(group_id, end)
            except OSError:
                return DeletePlan(ErrorCode.not_coordinator, {}, [])
        return plan

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a simple group: tombstones for every offset it has."""
        records = self.offsets.prepare_delete_group(group_id)
        if not records:
            return ErrorCode.group_id_not_found
        try:
            await self._durable(group_id, self._write(group_id, records))
        except OSError:
            return ErrorCode.not_coordinator
        return ErrorCode.none

    # ------------------------------------------------------------------ records
    def _write(self, group_id: str, records: list[OffsetRecord], producer: tuple[int, int] | None = None) -> int:
        """Append, then replay (no await between): the log end offset to make durable. An append
        that fails raises OSError and leaves the machine untouched. `producer` (id, epoch): a
        transactional batch, whose offsets stay pending."""
        plog = group_offsets_log(self.server.state, group_id)
        if not plog.health.online:
            raise plog.health.offline_error()
        encoded = [(encode_offset_commit_key(key), encode_offset_commit_value(value)) for key, value in records]
        try:
            end = append_records(plog, encoded, self._now_ms(), producer)
        except OSError as exc:
            log.error("group %s: appending %d offset record(s) failed (%s)", group_id, len(records), exc)
            raise
        for key, value in records:
            if producer is None:
                self.offsets.replay(key, value)
            else:
                self.offsets.replay_transactional(plog.partition, producer[0], key, value)
        return end

    def load(self) -> None:
        """Replay the offset-commit records of `__consumer_offsets`."""
        topic = self.server.state.topics.get(CONSUMER_OFFSETS_TOPIC)
        if topic is not None:
            for part in topic.partitions:
                for header, records in verified_batches(part.log, decode_offset_commit_record):
                    if header.is_control:  # a transaction marker (CoordinatorLoaderImpl)
                        for _offset, control_type in records:
                            self.offsets.replay_end_transaction(part.index, header.producer_id,
                                                                control_type == CONTROL_COMMIT)
                    elif header.is_transactional:
                        for _offset, (key, value) in records:
                            self.offsets.replay_transactional(part.index, header.producer_id, key, value)
                    else:
                        for _offset, (key, value) in records:
                            self.offsets.replay(key, value)
            if self.offsets.group_ids():
                log.info("loaded the committed offsets of %d group(s) from %s", len(self.offsets.group_ids()),
                         CONSUMER_OFFSETS_TOPIC)
        ensure_consumer_offsets_compacted(self.server.state)
        self.loaded = True
        self._expiry_task = asyncio.get_running_loop().create_task(self._expiry_loop(), name="offset expiry")

    # ------------------------------------------------------------------ expiry
    def expire_now(self) -> int:
        """Tombstone the offsets due to expire; the number of offsets removed. Offsets of simple
        groups expire from their commit time, those of an Empty classic group from the time it
        became empty; a classic group with members keeps them (OffsetExpirationConditionImpl). A
        classic group left Empty with no offsets is then deleted (GroupMetadataManager.maybeDeleteGroup)."""
        config = self.server.state.config
        retention_ms = int(config.get("offsets.retention.minutes")) * 60_000
        views = {group_id: self.view(group_id) for group_id in self.offsets.group_ids()}
        records = self.offsets.expired(self._now_ms(), retention_ms, views)
        by_group: dict[str, list[OffsetRecord]] = {}
        for key, value in records:
            if views[key.group_id].kind is not GroupKind.SHARE:  # share groups have none here
                by_group.setdefault(key.group_id, []).append((key, value))
        removed = 0
        for group_id, group_records in by_group.items():
            try:
                self._write(group_id, group_records)
            except OSError:
                continue
            removed += len(group_records)
            self.server.metrics.offset_expirations += len(group_records)
            log.info("group %s: %d committed offset(s) expired", group_id, len(group_records))
            if self.offsets.has_offsets(group_id):
                continue
            kind = views[group_id].kind
            if kind is GroupKind.CLASSIC and self.server.classic_groups is not None:
                self.server.classic_groups.delete_if_empty(group_id)
            elif kind is GroupKind.CONSUMER and self.server.consumer_groups is not None:
                self.server.consumer_groups.delete_if_empty(group_id)
        return removed

    async def _expiry_loop(self) -> None:
        while True:
            interval_s = int(self.server.state.config.get("offsets.retention.check.interval.ms")) / 1000
            await asyncio.sleep(interval_s)
            try:
                self.expire_now()
            except Exception:  # noqa: BLE001 - the loop must go on; the failure is logged
                log.exception("offset expiry failed")

    def close(self) -> None:
        if self._expiry_task is not None:
            self._expiry_task.cancel()
        super().close()

