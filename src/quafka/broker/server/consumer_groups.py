"""The asyncio shell of KIP-848 consumer groups (`group.protocol=consumer`): owns the pure
`ConsumerGroupCoordinator` (broker/core/consumer_group.py), feeds it topic metadata, group configs
and the clock, appends its records to `__consumer_offsets` and carries out its effects.

Records first, as the share-group shell (share_groups.py): each change is made in the machine,
turned into records by diffing the group's image against the image last written
(broker/core/consumer_group_images.py) and appended before timers are armed or the request is
answered. A failed append reloads the group from the image last written — what a restart would
replay — and the request gets NOT_COORDINATOR (Kafka's answer to a coordinator write that failed
with KAFKA_STORAGE_ERROR). With flush enabled for `__consumer_offsets` the answer waits for the
fsync on the flusher's thread.

Group ids are one namespace (Kafka's GroupMetadataManager.getOrMaybeCreateConsumerGroup):

- a share group's id: GROUP_ID_NOT_FOUND "Group G is not a consumer group.";
- an empty classic group (or a simple group, which exists only through its offsets) is converted
  when a member joins with epoch 0: the classic group's tombstone is written first, then the
  consumer group's records; committed offsets stay (`maybeDeleteEmptyClassicGroup`);
- a classic group with members is converted online when `group.consumer.migration.policy` allows
  the upgrade (upgrade, bidirectional: Kafka's default), else GROUP_ID_NOT_FOUND: the classic group
  leaves its machine (parked JoinGroups and SyncGroups get REBALANCE_IN_PROGRESS), the consumer
  group is built from it (broker/core/consumer_group_migration.py) and its tombstone and the
  consumer group's records go in one append; a failed append puts the classic group back.

Classic members inside a consumer group are served here too (`classic_join`, `classic_sync`,
`classic_heartbeat`, `classic_leave`, called by handlers/classic_group.py); when the last member
using the consumer protocol leaves and classic members remain, the machine hands back a
`Downgraded` effect (policy downgrade or bidirectional): the consumer group's tombstones and the
classic group's GroupMetadata record go in one append, then the classic machine adopts the group
and starts a rebalance.

Settings: session timeout and heartbeat interval per group (`consumer.session.timeout.ms`,
`consumer.heartbeat.interval.ms` group configs over the broker's `group.consumer.*` defaults);
`group.consumer.max.size` and `group.consumer.assignors` are read on every heartbeat, and with an
authorizer `group.consumer.regex.refresh.interval.ms`.

With an authorizer, a heartbeat carries the member's DESCRIBE decision for topics (`describable`,
over the request's session) into the machine, which filters the topics the group's regexes resolve
to (Kafka's TopicRegexResolver.filterTopicDescribeAuthorizedTopics; consumer_group.py
`_refresh_regexes` says when). Without one the machine never asks.

Everything runs on the event loop thread.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from quafka.broker._config_types import consumer_assignor_names
from quafka.broker.core.consumer_group import (
    ArmTimer,
    CancelTimer,
    ConsumerGroupCoordinator,
    DescribedGroup,
    Downgraded,
    Effect,
    GroupEmptied,
    HeartbeatResult,
    MemberRemoved,
    MigrationPolicy,
)
from quafka.broker.core.consumer_group_migration import ClassicJoinResult, ClassicSyncResult
from quafka.broker.core.consumer_group_images import ConsumerGroupImages, ConsumerGroupImageTracker, restore_group
from quafka.broker.core.consumer_offsets import GroupKind, GroupView
from quafka.protocol.classic_group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    encode_group_metadata_key,
    encode_group_metadata_value,
)
from quafka.protocol.coordinator_record_codec import CONSUMER_OFFSETS_TOPIC
from quafka.protocol.consumer_group_records import decode_consumer_group_record, encode_consumer_group_record
from quafka.protocol.errors import ErrorCode

from ._services import BrokerServices
from .coordinator_shell import NOT_STORED, CoordinatorShell
from .internal_log import append_records, group_offsets_log, verified_records

if TYPE_CHECKING:
    from .classic_groups import ClassicGroupService
    from .share_groups import ShareGroupService

log = logging.getLogger("quafka.consumer_groups")

__all__ = ["ConsumerGroupService"]



@dataclass(frozen=True, slots=True)
class _Settings:
    session_timeout_ms: int
    heartbeat_interval_ms: int


class ConsumerGroupsBroker(BrokerServices, Protocol):
    """What the consumer-group (KIP-848) coordinator uses of the broker: the other group kinds,
    whose ids it must not take."""

    classic_groups: ClassicGroupService | None
    share_groups: ShareGroupService | None
    authorizer: object | None


class ConsumerGroupService(CoordinatorShell):
    _log = log

    server: ConsumerGroupsBroker

    def __init__(self, server: "ConsumerGroupsBroker") -> None:
        super().__init__(server)
        self.coordinator = ConsumerGroupCoordinator(settings=self._group_settings)
        self.coordinator.authorize_regex_topics = server.authorizer is not None
        self._images = ConsumerGroupImageTracker()  # what the records on __consumer_offsets say, per group
        self._topics_loaded = False
        self.loaded = False
        server.state.topic_listeners.append(self._on_topic_event)

    # ------------------------------------------------------------------ requests
    async def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, instance_id: str | None = None,
                        rack_id: str | None = None, rebalance_timeout_ms: int = -1,
                        subscribed_topic_names: Iterable[str] | None = None, subscribed_topic_regex: str | None = None,
                        server_assignor: str | None = None, topic_partitions=None, client_id: str = "",
                        client_host: str = "", describable: Callable[[str], bool] | None = None) -> HeartbeatResult:
        self._refresh()
        self._configure()
        refusal = self._refuse_other_kind(group_id, member_epoch)
        if refusal is not None:
            return refusal
        config = self.server.state.config
        self.coordinator.assignors = tuple(consumer_assignor_names(config.get("group.consumer.assignors")))
        if describable is not None:
            self.coordinator.regex_refresh_interval_ms = int(config.get("group.consumer.regex.refresh.interval.ms"))
        existed = self.coordinator.group(group_id) is not None
        upgraded = None  # the classic group's record, while it is being converted online
        if not existed and member_epoch == 0 and self._classic_members(group_id):
            upgraded = self._upgrade(group_id)
            if isinstance(upgraded, HeartbeatResult):
                return upgraded
            existed = True
        result, effects = self.coordinator.heartbeat(
            group_id, member_id, member_epoch, instance_id=instance_id, rack_id=rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms, subscribed_topic_names=subscribed_topic_names,
            subscribed_topic_regex=subscribed_topic_regex, server_assignor=server_assignor,
            topic_partitions=topic_partitions, client_id=client_id, client_host=client_host, now_ms=self._now_ms(),
            describable=describable)
        if result.error != ErrorCode.none:  # refused: nothing changed
            log.debug("consumer group %s: heartbeat of member %s (epoch %d) refused: %s %s", group_id, member_id,
                      member_epoch, result.error.name, result.message)
            self._execute(effects)
            if upgraded is not None:
                self._undo_upgrade(group_id, upgraded)
            return result
        try:
            if upgraded is not None:
                try:
                    end = self._append(group_id, before=[(encode_group_metadata_key(GroupMetadataKey(group_id)),
                                                          None)])
                except OSError:
                    self._undo_upgrade(group_id, upgraded)
                    raise
                log.info("group %s: converted the classic group with %d member(s) to a consumer group online "
                         "(group.consumer.migration.policy=%s)", group_id, len(upgraded.members),
                         self.coordinator.migration_policy.value)
            elif not existed and self.server.classic_groups.has_group(group_id):
                # an empty classic group becomes this consumer group: its tombstone first
                if self.server.classic_groups.delete_group(group_id) is not ErrorCode.none:
                    self._reload(group_id)  # the new group goes again: nothing of it was written
                    raise OSError("the classic group's tombstone could not be written")
                log.info("group %s: converted the empty classic group to a consumer group", group_id)
                end = self._append(group_id)
            else:
                end = self._append(group_id, effects=effects)
        except OSError:
            return HeartbeatResult(ErrorCode.not_coordinator, NOT_STORED)
        self._execute(effects)
        try:
            await self._durable(group_id, end)
        except OSError:
            return HeartbeatResult(ErrorCode.not_coordinator, NOT_STORED)
        if member_epoch in (0, -1, -2):
            what = {0: "joined", -1: "left", -2: "left (static, keeps its partitions)"}[member_epoch]
            log.info("consumer group %s: member %s %s (member epoch %d)", group_id, member_id, what,
                     result.member_epoch)
        return result

    def _refuse_other_kind(self, group_id: str, member_epoch: int) -> HeartbeatResult | None:
        """GroupMetadataManager.getOrMaybeCreateConsumerGroup for an id that is another kind of group."""
        if self.coordinator.group(group_id) is not None:
            return None
        share_groups = self.server.share_groups
        if share_groups is not None and share_groups.coordinator.group(group_id) is not None:
            return HeartbeatResult(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        classic = self.server.classic_groups
        if classic is not None and classic.has_group(group_id):
            if member_epoch != 0:
                return HeartbeatResult(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
            group = classic.coordinator.group(group_id)
            if group is not None and group.members:
                reason = self.coordinator.upgrade_refusal(group)
                if reason is not None:
                    log.info("%s", reason)
                    return HeartbeatResult(ErrorCode.group_id_not_found, reason)
        return None

    def _classic_members(self, group_id: str) -> bool:
        classic = self.server.classic_groups
        group = classic.coordinator.group(group_id) if classic is not None else None
        return group is not None and bool(group.members)

    def _upgrade(self, group_id: str) -> GroupMetadataValue | HeartbeatResult:
        """GroupMetadataManager.convertToConsumerGroup: the classic group leaves its machine and the
        consumer group is built from it; the classic group's last image, to put it back if the
        records cannot be written."""
        classic = self.server.classic_groups
        image = classic.coordinator.image(group_id)
        group, effects = classic.coordinator.surrender(group_id, self._now_ms())
        classic._execute(effects)
        assert group is not None and image is not None, group_id
        try:
            self._execute(self.coordinator.adopt_classic(group, self._now_ms()))
        except ValueError as exc:
            log.warning("group %s: cannot upgrade the classic group to a consumer group, its embedded consumer "
                        "protocol is malformed: %s", group_id, exc)
            classic._execute(classic.coordinator.restore(group_id, image, self._now_ms()))
            return HeartbeatResult(ErrorCode.group_id_not_found, (
                f"Cannot upgrade the classic group {group_id} to consumer group because the embedded consumer "
                f"protocol is malformed."))
        return image

    def _undo_upgrade(self, group_id: str, image: GroupMetadataValue) -> None:
        self._execute(self.coordinator.unload(group_id))
        classic = self.server.classic_groups
        classic._execute(classic.coordinator.restore(group_id, image, self._now_ms()))

    def _configure(self) -> None:
        config = self.server.state.config
        self.coordinator.max_group_size = int(config.get("group.consumer.max.size"))
        self.coordinator.migration_policy = MigrationPolicy(str(config.get("group.consumer.migration.policy")).lower())
        self.coordinator.classic_max_size = int(config.get("group.max.size"))

    # ------------------------------------------------------------------ classic members (online migration)
    async def classic_join(self, *, group_id: str, member_id: str, instance_id: str | None, protocol_type: str,
                           protocols, session_timeout_ms: int, rebalance_timeout_ms: int, client_id: str,
                           client_host: str, requires_known_member_id: bool) -> ClassicJoinResult:
        self._refresh()
        self._configure()
        config = self.server.state.config
        low, high = int(config.get("group.min.session.timeout.ms")), int(config.get("group.max.session.timeout.ms"))
        if not low <= session_timeout_ms <= high:  # GroupCoordinatorService.joinGroup, for every group type
            return ClassicJoinResult(ErrorCode.invalid_session_timeout, None, member_id)
        result, effects = self.coordinator.classic_join(
            group_id=group_id, member_id=member_id, instance_id=instance_id, protocol_type=protocol_type,
            protocols=protocols, session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
            client_id=client_id, client_host=client_host, requires_known_member_id=requires_known_member_id,
            new_member_id=new_member_id(), now_ms=self._now_ms())
        if result.error is not ErrorCode.none:
            self._execute(effects)
            return result
        try:
            end = self._append(group_id, effects=effects)
        except OSError:
            return ClassicJoinResult(ErrorCode.not_coordinator, NOT_STORED, result.member_id)
        self._execute(effects)
        try:
            await self._durable(group_id, end)
        except OSError:
            return ClassicJoinResult(ErrorCode.not_coordinator, NOT_STORED, result.member_id)
        log.info("consumer group %s: classic member %s joined (generation %d)", group_id, result.member_id,
                 result.generation_id)
        return result

    def classic_sync(self, *, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                     protocol_type: str | None, protocol_name: str | None) -> ClassicSyncResult:
        result, effects = self.coordinator.classic_sync(
            group_id=group_id, member_id=member_id, instance_id=instance_id, generation_id=generation_id,
            protocol_type=protocol_type, protocol_name=protocol_name, now_ms=self._now_ms())
        self._execute(effects)
        return result

    def classic_heartbeat(self, *, group_id: str, member_id: str, instance_id: str | None,
                          generation_id: int) -> ErrorCode:
        error, effects = self.coordinator.classic_heartbeat(group_id=group_id, member_id=member_id,
                                                            instance_id=instance_id, generation_id=generation_id,
                                                            now_ms=self._now_ms())
        self._execute(effects)
        return error

    def classic_leave(self, group_id: str,
                      members: Iterable[tuple[str, str | None]]) -> list[tuple[str, str | None, ErrorCode]]:
        results, effects = self.coordinator.classic_leave(group_id, list(members))
        if effects:
            try:
                end = self._append(group_id)
            except OSError:
                return [(m, i, ErrorCode.not_coordinator) for m, i, _e in results]
            self._execute(effects)
            if end is not None:
                self._spawn(self._durable(group_id, end), f"consumer group {group_id} classic members left")
        return results

    def describe(self, group_ids: Iterable[str]) -> list[DescribedGroup]:
        self._refresh()
        return self.coordinator.describe(group_ids)

    def list_groups(self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()) -> list[tuple[str, str]]:
        return self.coordinator.list_groups(states_filter, types_filter)

    def has_group(self, group_id: str) -> bool:
        return self.coordinator.group(group_id) is not None

    def view(self, group_id: str) -> GroupView:
        """For consumer_offsets.py: members, their epochs and subscribed topics."""
        offsets_view = self.coordinator.offsets_view(group_id)
        assert offsets_view is not None, group_id
        return GroupView(GroupKind.CONSUMER, members=dict(offsets_view.instance_ids),
                         subscribed_topics=offsets_view.subscribed_topics,
                         member_epochs=dict(offsets_view.member_epochs),
                         classic_members=offsets_view.classic_members)

    def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups: an empty group's records are tombstoned (its offsets are the caller's)."""
        error, _message, effects = self.coordinator.delete_group(group_id)
        if error is not ErrorCode.none:
            return error
        self._execute(effects)
        try:
            end = self._append(group_id)
        except OSError:
            return ErrorCode.not_coordinator
        if end is not None:
            self._spawn(self._durable(group_id, end), f"consumer group {group_id} deleted")
        log.info("consumer group %s deleted", group_id)
        return ErrorCode.none

    def delete_if_empty(self, group_id: str) -> None:
        """An Empty group whose offsets all expired goes (GroupMetadataManager.maybeDeleteGroup)."""
        group = self.coordinator.group(group_id)
        if group is not None and not group.members:
            self.delete_group(group_id)

    def convert_to_classic(self, group_id: str) -> bool:
        """A classic JoinGroup for an empty consumer group: the consumer group goes first
        (GroupMetadataManager.maybeDeleteEmptyConsumerGroup); False if it could not be stored."""
        if self.delete_group(group_id) is not ErrorCode.none:
            return False
        log.info("group %s: converted the empty consumer group to a classic group", group_id)
        return True

    # ------------------------------------------------------------------ records on __consumer_offsets
    def _append(self, group_id: str, *, before: list[tuple[bytes, bytes | None]] = (),  # type: ignore[assignment]
                effects: list[Effect] = ()) -> int | None:  # type: ignore[assignment]
        """Append the records that bring `__consumer_offsets` in line with the group in the machine
        (after `before`, records of another group kind; a Downgraded effect in `effects` adds the
        classic group's GroupMetadata record after the tombstones); the log end offset to make
        durable, or None when nothing changed. A failed append reloads the group from its records
        and the OSError propagates."""
        try:
            plog = group_offsets_log(self.server.state, group_id)
            if not plog.health.online:
                raise plog.health.offline_error()
            records = self._images.records(group_id, self.coordinator.group(group_id))
            after = [(encode_group_metadata_key(GroupMetadataKey(e.group_id)), encode_group_metadata_value(e.value))
                     for e in effects if isinstance(e, Downgraded)]
            if not records and not before and not after:
                self._images.written(group_id)
                return None
            end = append_records(plog, [*before, *(encode_consumer_group_record(r) for r in records), *after],
                                 self._now_ms())
        except OSError as exc:
            log.error("consumer group %s: appending its records failed (%s); reloaded from its records", group_id, exc)
            self._reload(group_id)
            raise
        self._images.written(group_id)
        return end

    def _reload(self, group_id: str) -> None:
        self._execute(self.coordinator.unload(group_id))
        image = self._images.get(group_id)
        if image:
            self._execute(self.coordinator.restore(restore_group(group_id, image), self._now_ms()))

    def _commit_in_background(self, group_id: str) -> None:
        try:
            end = self._append(group_id)
        except OSError:
            return
        if end is not None:
            self._spawn(self._durable(group_id, end), f"consumer group {group_id} records")

    def load(self) -> None:
        """Replay the consumer-group records of `__consumer_offsets`: groups, members, epochs, target
        and current assignments come back; members get fresh session timers (Kafka's onLoaded)."""
        topic = self.server.state.topics.get(CONSUMER_OFFSETS_TOPIC)
        self._refresh()
        if topic is not None:
            images = ConsumerGroupImages()
            for part in topic.partitions:
                for _offset, record in verified_records(part.log, decode_consumer_group_record):
                    images.replay(record)
            now_ms = self._now_ms()
            for group_id, image in sorted(images.groups().items()):
                self._execute(self.coordinator.restore(restore_group(group_id, image), now_ms))
                self._images.set(group_id, image)
                self._commit_in_background(group_id)  # a group epoch bumped by restore is stored
            if images.groups():
                log.info("loaded %d consumer group(s) from %s", len(images.groups()), CONSUMER_OFFSETS_TOPIC)
        self.loaded = True

    # ------------------------------------------------------------------ events
    def _on_topic_event(self, _event: str, _topic_name: str) -> None:
        self._topics_loaded = False
        self._refresh()

    def _on_timer(self, key: tuple, now_ms: int) -> None:
        kind, group_id, member_id = key
        effects = self.coordinator.on_timer(key, now_ms)
        if any(isinstance(e, MemberRemoved) for e in effects):
            reason = "session timed out" if kind == "consumer-group-session" else "did not revoke in its rebalance timeout"
            log.info("consumer group %s: member %s fenced, its %s", group_id, member_id, reason)
        try:
            end = self._append(group_id, effects=effects)
        except OSError:
            return  # reloaded: the member is back with fresh timers
        self._execute(effects)
        if end is not None:
            self._spawn(self._durable(group_id, end), f"consumer group {group_id} records")

    # ------------------------------------------------------------------ internals
    def _group_settings(self, group_id: str) -> _Settings:
        config = self.server.state.group_config(group_id)
        return _Settings(config.consumer_session_timeout_ms, config.consumer_heartbeat_interval_ms)

    def _refresh(self) -> None:
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
                self.timers.arm(effect.key, effect.deadline_ms, lambda now_ms, k=effect.key: self._on_timer(k, now_ms))
            elif isinstance(effect, CancelTimer):
                self.timers.cancel(effect.key)
            elif isinstance(effect, GroupEmptied):
                log.info("consumer group %s is empty", effect.group_id)
            elif isinstance(effect, Downgraded):  # its records are written (_append)
                classic = self.server.classic_groups
                classic._execute(classic.coordinator.adopt(effect.group_id, effect.value, self._now_ms()))
                log.info("group %s: converted the consumer group to a classic group online, its %d remaining "
                         "member(s) use the classic protocol (group.consumer.migration.policy=%s)", effect.group_id,
                         len(effect.value.members), self.coordinator.migration_policy.value)

def new_member_id() -> str:
    """ConsumerGroupHeartbeat v0: the coordinator makes the member id (Uuid.randomUuid().toString())."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
