"""The asyncio shell of classic consumer groups: owns the `ClassicGroupCoordinator` machine
(broker/core/classic_group.py) and carries out its effects.

- A JoinGroup or SyncGroup is parked under a token (an int) with a future; the machine answers it
  with a JoinResponse/SyncResponse effect, at once or when the join or sync phase completes.
- Timers (member sessions, the join phase and the initial rebalance delay, the sync phase) go to
  the server's `TimerService`; a timer that fires calls the machine's `on_timer`.
- AppendGroupRecord effects append Kafka's GroupMetadata record (type 2; a tombstone when the group
  is deleted) to the group's partition of `__consumer_offsets`. The machine waits for some of them
  (the leader's SyncGroup, a static member's rejoin): their outcome is reported back with
  `on_append_complete` on the next loop iteration — after the fsync when flush is enabled for the
  topic — NONE, or NOT_COORDINATOR when the append failed (Kafka maps KAFKA_STORAGE_ERROR so).
  This is Kafka's order for classic groups (GroupMetadataManager: the group changes, the record is
  written, and the parked SyncGroups are answered once the write is committed).
- On start-up the GroupMetadata records are replayed (`load`): the last value of each group is
  restored (Stable with members, else Empty) and members get fresh session timers.

Everything runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from quafka.broker.core.classic_group import (
    AppendGroupRecord,
    ArmTimer,
    CancelTimer,
    ClassicGroupConfig,
    ClassicGroupCoordinator,
    DescribedClassicGroup,
    Effect,
    JoinResponse,
    LeaveResult,
    ListedClassicGroup,
    SyncResponse,
)
from quafka.broker.core.consumer_offsets import GroupView
from quafka.broker.storage.base import MAX_LONG
from quafka.protocol.classic_group_records import (
    GroupMetadataKey,
    decode_group_metadata_record,
    encode_group_metadata_key,
    encode_group_metadata_value,
)
from quafka.protocol.coordinator_record_codec import CONSUMER_OFFSETS_TOPIC
from quafka.protocol.errors import ErrorCode

from .coordinator_shell import CoordinatorShell
from .internal_log import append_records, group_offsets_log, verified_records

if TYPE_CHECKING:
    from ._services import BrokerServices

log = logging.getLogger("quafka.classic_groups")

__all__ = ["ClassicGroupService"]


class ClassicGroupService(CoordinatorShell):
    _log = log

    def __init__(self, server: "BrokerServices") -> None:
        super().__init__(server)
        self.coordinator = ClassicGroupCoordinator(new_member_id=lambda prefix: f"{prefix}-{uuid.uuid4()}",
                                                   config=self._config())
        self._tokens = itertools.count(1)
        self._parked: dict[int, asyncio.Future] = {}
        self.loaded = False

    def _config(self) -> ClassicGroupConfig:
        config = self.server.state.config
        return ClassicGroupConfig(
            min_session_timeout_ms=int(config.get("group.min.session.timeout.ms")),
            max_session_timeout_ms=int(config.get("group.max.session.timeout.ms")),
            initial_rebalance_delay_ms=int(config.get("group.initial.rebalance.delay.ms")),
            max_size=int(config.get("group.max.size")))

    # ------------------------------------------------------------------ requests
    async def join(self, *, group_id: str, member_id: str, protocol_type: str, protocols: Sequence[tuple[str, bytes]],
                   session_timeout_ms: int, rebalance_timeout_ms: int, group_instance_id: str | None,
                   client_id: str, client_host: str, api_version: int) -> JoinResponse:
        token, future = self._park()
        self._execute(self.coordinator.join_group(
            token=token, group_id=group_id, member_id=member_id, protocol_type=protocol_type, protocols=protocols,
            session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
            group_instance_id=group_instance_id, client_id=client_id, client_host=client_host,
            api_version=api_version, now_ms=self._now_ms()))
        return await self._answer(token, future)

    async def sync(self, *, group_id: str, member_id: str, generation_id: int, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: Mapping[str, bytes]) -> SyncResponse:
        token, future = self._park()
        self._execute(self.coordinator.sync_group(
            token=token, group_id=group_id, member_id=member_id, generation_id=generation_id,
            group_instance_id=group_instance_id, protocol_type=protocol_type, protocol_name=protocol_name,
            assignments=assignments, now_ms=self._now_ms()))
        return await self._answer(token, future)

    def heartbeat(self, *, group_id: str, member_id: str, generation_id: int,
                  group_instance_id: str | None) -> ErrorCode:
        error, effects = self.coordinator.heartbeat(group_id=group_id, member_id=member_id,
                                                    generation_id=generation_id, group_instance_id=group_instance_id,
                                                    now_ms=self._now_ms())
        self._execute(effects)
        return error

    def leave(self, group_id: str, members: Iterable[tuple[str, str | None]]) -> LeaveResult:
        result, effects = self.coordinator.leave_group(group_id=group_id, members=list(members), now_ms=self._now_ms())
        self._execute(effects)
        return result

    def describe(self, group_id: str) -> DescribedClassicGroup:
        return self.coordinator.describe(group_id)

    def list_groups(self, states_filter: Iterable[str] = ()) -> list[ListedClassicGroup]:
        return self.coordinator.list_groups(states_filter)

    def has_group(self, group_id: str) -> bool:
        return self.coordinator.group(group_id) is not None

    def view(self, group_id: str) -> GroupView:
        return self.coordinator.to_view(group_id)

    def delete_if_empty(self, group_id: str) -> None:
        """An Empty group whose offsets all expired goes (its tombstone is appended)."""
        self._execute(self.coordinator.maybe_delete_empty(group_id, self._now_ms()))

    def delete_group(self, group_id: str) -> ErrorCode:
        error, effects = self.coordinator.delete(group_id, self._now_ms())
        self._execute(effects)
        return error

    # ------------------------------------------------------------------ parked requests
    def _park(self) -> tuple[int, asyncio.Future]:
        token = next(self._tokens)
        future = asyncio.get_running_loop().create_future()
        self._parked[token] = future
        return token, future

    async def _answer(self, token: int, future: asyncio.Future):
        try:
            return await future
        finally:
            self._parked.pop(token, None)

    def _resolve(self, token: int, response) -> None:
        future = self._parked.pop(token, None)
        if future is not None and not future.done():
            future.set_result(response)

    # ------------------------------------------------------------------ effects
    def _execute(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, (JoinResponse, SyncResponse)):
                self._resolve(effect.token, effect)
            elif isinstance(effect, ArmTimer):
                key = effect.key
                self.timers.arm(key, effect.deadline_ms, lambda now_ms, k=key: self._on_timer(k, now_ms))
            elif isinstance(effect, CancelTimer):
                self.timers.cancel(effect.key)
            elif isinstance(effect, AppendGroupRecord):
                self._append(effect)

    def _on_timer(self, key: tuple, now_ms: int) -> None:
        self._execute(self.coordinator.on_timer(key, now_ms))

    def _append(self, effect: AppendGroupRecord) -> None:
        error = ErrorCode.none
        end = None
        plog = None
        try:
            plog = group_offsets_log(self.server.state, effect.group_id)
            if not plog.health.online:
                raise plog.health.offline_error()
            encoded = [(encode_group_metadata_key(GroupMetadataKey(effect.group_id)),
                        encode_group_metadata_value(effect.value))]
            end = append_records(plog, encoded, self._now_ms())
        except OSError as exc:
            log.error("classic group %s: appending its metadata record failed (%s)", effect.group_id, exc)
            error = ErrorCode.not_coordinator
        if effect.append_id is None:
            if end is not None and plog is not None and plog.config.flush_messages < MAX_LONG:
                self._spawn(self.server.flusher.flush(plog, end), f"classic group {effect.group_id} record")
            return
        self._spawn(self._complete_append(effect.append_id, error, plog, end),
                    f"classic group {effect.group_id} record")

    async def _complete_append(self, append_id: int, error: ErrorCode, plog, end: int | None) -> None:
        """Report an append's outcome to the machine on a later loop iteration (never inside the
        machine call that asked for it), after the fsync when flush is on."""
        await asyncio.sleep(0)
        if error is ErrorCode.none and plog is not None and end is not None and plog.config.flush_messages < MAX_LONG:
            try:
                await self.server.flusher.flush(plog, end)
            except OSError:
                error = ErrorCode.not_coordinator
        self._execute(self.coordinator.on_append_complete(append_id, error, self._now_ms()))

    # ------------------------------------------------------------------ start-up
    def load(self) -> None:
        """Replay the GroupMetadata records of `__consumer_offsets`: the last value of each group."""
        topic = self.server.state.topics.get(CONSUMER_OFFSETS_TOPIC)
        if topic is not None:
            last: dict[str, object] = {}
            for part in topic.partitions:
                for _offset, (key, value) in verified_records(part.log, decode_group_metadata_record):
                    last[key.group_id] = value
            now_ms = self._now_ms()
            for group_id, value in sorted(last.items()):
                self._execute(self.coordinator.restore(group_id, value, now_ms))
            restored = [g for g, v in last.items() if v is not None]
            if restored:
                log.info("loaded %d classic group(s) from %s", len(restored), CONSUMER_OFFSETS_TOPIC)
        self.loaded = True

    # ------------------------------------------------------------------ internals
    def close(self) -> None:
        for future in self._parked.values():
            if not future.done():
                future.cancel()
        super().close()
