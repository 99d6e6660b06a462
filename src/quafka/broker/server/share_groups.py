"""The asyncio shell of the share-group coordinator: owns the `ShareGroupCoordinator` machine,
feeds it topic metadata, group configs and the clock, and carries out its effects.

Wiring (BrokerServer.start, after `self.state` is loaded):

- session timers go to `server.timers` (a `TimerService`; the service makes its own when the
  server has none), and a timer that fires calls the coordinator's `on_session_timeout`;
- topic events of `server.state.topic_listeners` (created, deleted, partitions added) become
  `on_topics_changed` with a snapshot of `server.state.topics`;
- each group's settings are `server.state.group_config(group_id)` (its GROUP configs resolved
  over the broker's `group.share.*` defaults); the group size cap is `group.share.max.size`;
- a member that leaves or is fenced keeps its share session and the records it holds, as in
  Kafka (the leave heartbeat and session-timeout fencing only write the group's records; the
  share session ends at its final epoch, a new epoch 0, or when its connection drops —
  `SharePartitionManager.releaseSession`, `ShareSessionCache`): librdkafka sends the leave
  heartbeat and the final-epoch ShareAcknowledge on two connections, often in that order, and
  the acknowledgement must still find the session. A group that becomes empty is logged; its
  share partitions keep their state (Kafka does nothing more).

Records on `__consumer_offsets`, and what a failed append does. Every change to a group is made in
the machine, turned into records (`diff` of the group's image against the image last written) and
appended before anything else happens: before timers are armed, before the request is answered,
before the share coordinator is asked to initialise or delete state. If the append fails, the group
is reloaded from its records — the image last written, exactly what a restart would replay — so
memory is never ahead of the log (Kafka's CoordinatorRuntime likewise reverts its in-memory
timeline to the last written offset when a write fails: SnapshottableCoordinator.revertLastWrittenOffset).
The request then gets NOT_COORDINATOR, Kafka's answer to a coordinator write that failed with
KAFKA_STORAGE_ERROR (CoordinatorOperationExceptionHelper.handleOperationException). With flush
enabled for `__consumer_offsets`, the answer also waits for the fsync, on the flusher's worker
thread — never on the event loop.

Everything runs on the event loop thread.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any, Iterable, Protocol

from quafka.broker.core.group_records import GroupImages, ShareGroupImageTracker, StatePartitionMetadata, restore_group
from quafka.broker.core.share_group import (
    ArmTimer,
    CancelTimer,
    DescribedGroup,
    Effect,
    GroupEmptied,
    HeartbeatResult,
    MemberRemoved,
    ShareGroupCoordinator,
)
from quafka.broker.storage import Log
from quafka.protocol.coordinator_record_codec import CONSUMER_OFFSETS_TOPIC
from quafka.protocol.share_group_records import decode_group_record, encode_group_record
from quafka.protocol.share_state_records import ShareStateKey
from quafka.protocol.errors import ErrorCode

from ._services import BrokerServices
from .coordinator_shell import NOT_STORED, CoordinatorShell
from .internal_log import append_records, group_offsets_log, verified_records

if TYPE_CHECKING:
    from .share_coordinator import ShareCoordinatorService
    from .share_partitions import SharePartitionManager

log = logging.getLogger("quafka.share_groups")

__all__ = ["ShareGroupService"]




class ShareGroupsBroker(BrokerServices, Protocol):
    """What the share-group coordinator uses of the broker."""

    share_partitions: SharePartitionManager
    share_coordinator: ShareCoordinatorService | None


class ShareGroupService(CoordinatorShell):
    _log = log

    server: ShareGroupsBroker

    def __init__(self, server: "ShareGroupsBroker") -> None:
        super().__init__(server)
        self.coordinator = ShareGroupCoordinator(settings=self._group_settings)
        self._topics_loaded = False
        self.state_metadata: dict[str, StatePartitionMetadata] = {}
        self._images = ShareGroupImageTracker()  # what the records on __consumer_offsets say, per group
        self._initializing: set[str] = set()  # groups whose share state is being initialised
        self.loaded = False
        server.state.topic_listeners.append(self._on_topic_event)

    # ------------------------------------------------------------------ requests
    async def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, rack_id: str | None = None,
                        subscribed_topic_names: Iterable[str] | None = None, client_id: str = "",
                        client_host: str = "") -> HeartbeatResult:
        self._refresh()
        self.coordinator.max_group_size = int(self.server.state.config.get("group.share.max.size"))
        result, effects = self.coordinator.heartbeat(
            group_id, member_id, member_epoch, rack_id=rack_id, subscribed_topic_names=subscribed_topic_names,
            client_id=client_id, client_host=client_host, now_ms=self._now_ms())
        if result.error != ErrorCode.none:  # refused: nothing changed
            self._execute(effects)
            return result
        try:
            end = self._append(group_id)
        except OSError:
            return HeartbeatResult(ErrorCode.not_coordinator, NOT_STORED)
        self._execute(effects)
        try:
            await self._durable(group_id, end)
            await self._maybe_initialize(group_id)
        except OSError:
            return HeartbeatResult(ErrorCode.not_coordinator, NOT_STORED)
        if member_epoch in (0, -1):
            log.info("share group %s: member %s %s (member epoch %d)", group_id, member_id,
                     "joined" if member_epoch == 0 else "left", result.member_epoch)
        return result

    def describe(self, group_ids: Iterable[str]) -> list[DescribedGroup]:
        self._refresh()
        return self.coordinator.describe(group_ids)

    def list_groups(self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()) -> list[tuple[str, str]]:
        """(group id, state) of each share group passing the filters."""
        return self.coordinator.list_groups(states_filter, types_filter)

    def is_member(self, group_id: str, member_id: str) -> bool:
        return self.coordinator.is_member(group_id, member_id)

    def assignment(self, group_id: str, member_id: str) -> dict[Any, tuple[int, ...]] | None:
        """The member's assigned partitions (topic id -> partitions), or None if it is not a member."""
        return self.coordinator.assignment(group_id, member_id)

    async def delete_group(self, group_id: str) -> tuple[ErrorCode, str | None]:
        """DeleteGroups for a share group: only an empty group; its share state is tombstoned
        first (state metadata moves to DeletingTopics), then the group's records."""
        group = self.coordinator.group(group_id)
        if group is None:
            return ErrorCode.group_id_not_found, f"Group {group_id} not found."
        if group.members:
            return ErrorCode.non_empty_group, "The group is not empty."
        meta = self.state_metadata.setdefault(group_id, StatePartitionMetadata())
        try:
            await self._delete_state(group_id, list(meta.initialized) + list(meta.initializing))
            share_coordinator = self.server.share_coordinator
            for key in share_coordinator.coordinator.keys(group_id):  # state made by fetches alone, too
                await share_coordinator.delete(key)
        except OSError:
            return ErrorCode.not_coordinator, NOT_STORED
        if self.coordinator.group(group_id) is None:  # deleted meanwhile
            return ErrorCode.group_id_not_found, f"Group {group_id} not found."
        self.server.share_partitions.drop_group(group_id)
        error, message, effects = self.coordinator.delete_group(group_id)
        if error != ErrorCode.none:  # a member joined meanwhile
            return error, message
        self.state_metadata.pop(group_id, None)
        try:
            end = self._append(group_id)
            self._execute(effects)
            await self._durable(group_id, end)
        except OSError:
            return ErrorCode.not_coordinator, NOT_STORED
        log.info("share group %s deleted", group_id)
        return error, message

    # ------------------------------------------------------------------ share-partition state
    async def _maybe_initialize(self, group_id: str) -> None:
        """Initialise the share-coordinator state of subscribed partitions the group has none for
        (KIP-932: a new topic starts at -1, resolved by share.auto.offset.reset on first use;
        partitions added to a topic the group knows start at 0), recording it in record 15
        (initializing first, initialized once the share coordinator stored it — Kafka's order)."""
        group = self.coordinator.group(group_id)
        if group is None or not group.subscribed_metadata or group_id in self._initializing:
            return
        meta = self.state_metadata.setdefault(group_id, StatePartitionMetadata())
        todo: dict[uuid.UUID, tuple[str, list[int], bool]] = {}
        for name, (topic_id, count) in group.subscribed_metadata.items():
            known = topic_id in meta.initialized
            have = meta.initialized_partitions(topic_id)
            missing = [p for p in range(count) if p not in have]
            if missing:
                todo[topic_id] = (name, missing, known)
        if not todo:
            return
        self._initializing.add(group_id)
        try:
            for topic_id, (name, missing, _known) in todo.items():
                old = meta.initializing.get(topic_id, (name, frozenset()))[1]
                meta.initializing[topic_id] = (name, old | frozenset(missing))
            await self._durable(group_id, self._append(group_id))
            share_coordinator = self.server.share_coordinator
            for topic_id, (name, missing, known) in todo.items():
                for p in missing:
                    key = ShareStateKey(group_id, topic_id, p)
                    await share_coordinator.initialize_if_absent(key, state_epoch=group.group_epoch,
                                                           start_offset=0 if known else -1)
                meta = self.state_metadata.setdefault(group_id, StatePartitionMetadata())
                meta.initializing.pop(topic_id, None)
                meta.initialized[topic_id] = (name, meta.initialized_partitions(topic_id) | frozenset(missing))
                await self._durable(group_id, self._append(group_id))
        finally:
            self._initializing.discard(group_id)

    async def _delete_state(self, group_id: str, topic_ids: list[uuid.UUID]) -> None:
        """Tombstone the share state of the group's partitions of these topics (record 15 lists
        them as deleting until the tombstones are written)."""
        meta = self.state_metadata.setdefault(group_id, StatePartitionMetadata())
        topic_ids = list(dict.fromkeys(topic_ids))
        for topic_id in topic_ids:
            entry = meta.initialized.get(topic_id) or meta.initializing.get(topic_id)
            meta.deleting[topic_id] = entry[0] if entry else meta.deleting.get(topic_id, "")
            meta.initialized.pop(topic_id, None)
            meta.initializing.pop(topic_id, None)
        await self._durable(group_id, self._append(group_id))
        share_coordinator = self.server.share_coordinator
        for key in share_coordinator.coordinator.keys(group_id):
            if key.topic_id in topic_ids:
                await share_coordinator.delete(key)
        self.server.share_partitions.drop_group(group_id, set(topic_ids))
        meta = self.state_metadata.setdefault(group_id, StatePartitionMetadata())
        for topic_id in topic_ids:
            meta.deleting.pop(topic_id, None)
        await self._durable(group_id, self._append(group_id))

    async def delete_offsets(self, group_id: str, topic_ids: list[uuid.UUID]) -> ErrorCode:
        """DeleteShareGroupOffsets; NOT_COORDINATOR when the change could not be stored."""
        try:
            await self._delete_state(group_id, topic_ids)
        except OSError:
            return ErrorCode.not_coordinator
        return ErrorCode.none

    async def reset_offsets(self, group_id: str, topic_id: uuid.UUID, topic_name: str,
                            offsets: dict[int, int]) -> ErrorCode:
        """AlterShareGroupOffsets on an empty group: a new group epoch (stored first), then each
        share partition re-initialised with a new state epoch at the given start offset.
        NOT_COORDINATOR when a change could not be stored."""
        try:
            self.coordinator.ensure_group(group_id)
            self.coordinator.bump_group_epoch(group_id)
            await self._durable(group_id, self._append(group_id))
            group = self.coordinator.group(group_id)
            if group is None:
                return ErrorCode.group_id_not_found
            share_coordinator = self.server.share_coordinator
            self.server.share_partitions.drop_partitions(group_id, topic_id, offsets)
            for p, start in offsets.items():
                key = ShareStateKey(group_id, topic_id, p)
                current = share_coordinator.coordinator.state(key)
                state_epoch = max(group.group_epoch, (current.state_epoch + 1) if current is not None else 0)
                await share_coordinator.initialize(key, state_epoch=state_epoch, start_offset=start)
            # again: a ShareFetch may have loaded one while an fsync was awaited
            self.server.share_partitions.drop_partitions(group_id, topic_id, offsets)
            meta = self.state_metadata.setdefault(group_id, StatePartitionMetadata())
            meta.initialized[topic_id] = (topic_name, meta.initialized_partitions(topic_id) | frozenset(offsets))
            await self._durable(group_id, self._append(group_id))
        except OSError:
            return ErrorCode.not_coordinator
        return ErrorCode.none

    # ------------------------------------------------------------------ records on __consumer_offsets
    def _offsets_log(self, group_id: str) -> Log:
        return group_offsets_log(self.server.state, group_id)

    def _append(self, group_id: str) -> int | None:
        """Append the records that bring `__consumer_offsets` in line with the group as it is in
        the machine now (in the segment file before this returns); the log end offset to make
        durable, or None when nothing changed. If the append fails, the group is reloaded from
        its records (`_reload`) and the OSError propagates: memory never runs ahead of the log."""
        try:
            # the log first: creating __consumer_offsets notifies topic listeners, which append too
            plog = self._offsets_log(group_id)
            if not plog.health.online:  # e.g. the topic's creation ran a nested append that failed
                raise plog.health.offline_error()
            records = self._images.records(group_id, self.coordinator.group(group_id),
                                           self.state_metadata.get(group_id))
            if not records:
                self._images.written(group_id)
                return None
            end = append_records(plog, [encode_group_record(r) for r in records], self._now_ms())
        except OSError as exc:
            log.error("share group %s: appending its records failed (%s); reloaded from its records", group_id, exc)
            self._reload(group_id)
            raise
        self._images.written(group_id)
        return end

    def _reload(self, group_id: str) -> None:
        """Make the group in memory what its records say (the image last written), as a restart
        would: members keep ids, epochs and assignments and get fresh session timers."""
        self._execute(self.coordinator.unload(group_id))
        image = self._images.get(group_id)
        if image:
            group, meta = restore_group(group_id, image)
            self._execute(self.coordinator.restore(group, self._now_ms()))
            self.state_metadata[group_id] = meta
        else:
            self.state_metadata.pop(group_id, None)

    def _commit_in_background(self, group_id: str) -> None:
        """Append now (memory reverts if that fails) and fsync in the background: for changes no
        request waits for (session timeouts, topic metadata)."""
        try:
            end = self._append(group_id)
        except OSError:
            return
        if end is not None:
            self._spawn(self._durable(group_id, end), f"share group {group_id} records")

    def load(self) -> None:
        """Replay the share-group records of `__consumer_offsets`: groups, members, epochs,
        assignments and state metadata come back; members get fresh session timers."""
        topic = self.server.state.topics.get(CONSUMER_OFFSETS_TOPIC)
        self._refresh()
        if topic is not None:
            images = GroupImages()
            for part in topic.partitions:
                for _offset, record in verified_records(part.log, decode_group_record):
                    images.replay(record)
            now_ms = self._now_ms()
            for group_id, image in sorted(images.groups().items()):
                group, meta = restore_group(group_id, image)
                self._execute(self.coordinator.restore(group, now_ms))
                self.state_metadata[group_id] = meta
                self._images.set(group_id, image)  # what is stored; a new epoch of restore is appended:
                self._commit_in_background(group_id)
            if images.groups():
                log.info("loaded %d share group(s) from %s", len(images.groups()), CONSUMER_OFFSETS_TOPIC)
        self.loaded = True

    # ------------------------------------------------------------------ events
    def _on_topic_event(self, event: str, topic_name: str) -> None:
        self._topics_loaded = False
        self._refresh()
        if event == "deleted":
            live = {t.topic_id for t in self.server.state.topics.values()}
            for group_id, meta in list(self.state_metadata.items()):
                gone = [t for t in list(meta.initialized) + list(meta.initializing) if t not in live]
                if gone:
                    self._spawn(self._delete_state(group_id, gone), f"share group {group_id}: deleted topics")

    def _on_timer(self, group_id: str, member_id: str, now_ms: int) -> None:
        effects = self.coordinator.on_session_timeout(group_id, member_id, now_ms)
        if any(isinstance(e, MemberRemoved) for e in effects):
            log.info("share group %s: member %s fenced, its session timed out", group_id, member_id)
        try:
            end = self._append(group_id)
        except OSError:
            return  # reloaded: the member is back with a fresh session timer
        self._execute(effects)
        if end is not None:
            self._spawn(self._durable(group_id, end), f"share group {group_id} records")

    # ------------------------------------------------------------------ internals
    def _group_settings(self, group_id: str) -> Any:
        return self.server.state.group_config(group_id)

    def _refresh(self) -> None:
        """Give the coordinator the current topic metadata (once loaded, then after each topic event)."""
        if self._topics_loaded or self.server.state.metadata is None:
            return
        topics = {name: (t.topic_id, len(t.partitions)) for name, t in self.server.state.topics.items()}
        self._execute(self.coordinator.on_topics_changed(topics, self._now_ms()))
        self._topics_loaded = True
        if self.loaded:  # a subscribed topic changed: the bumped group epochs are stored now
            for group_id in self.coordinator.group_ids():
                self._commit_in_background(group_id)

    def _execute(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, ArmTimer):
                _kind, group_id, member_id = effect.key
                self.timers.arm(effect.key, effect.deadline_ms,
                                lambda now_ms, g=group_id, m=member_id: self._on_timer(g, m, now_ms))
            elif isinstance(effect, CancelTimer):
                self.timers.cancel(effect.key)
            elif isinstance(effect, MemberRemoved):
                pass  # the member's share session and held records are untouched (module docstring)
            elif isinstance(effect, GroupEmptied):
                log.info("share group %s is empty; its share partitions keep their state", effect.group_id)

