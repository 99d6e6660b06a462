"""The asyncio shell of the share-group coordinator: owns the `ShareGroupCoordinator` machine,
feeds it topic metadata, group configs and the clock, and carries out its effects.

Wiring (BrokerServer.__init__, after `self.state` and `self.timers` exist):

    self.timers = TimerService()
    self.share_groups = ShareGroupService(self)

- session timers go to `server.timers` (a `TimerService`; the service makes its own when the
  server has none), and a timer that fires calls the coordinator's `on_session_timeout`;
- topic events of `server.state.topic_listeners` (created, deleted, partitions added) become
  `on_topics_changed` with a snapshot of `server.state.topics`;
- each group's settings are `server.state.group_config(group_id)` (its GROUP configs resolved
  over the broker's `group.share.*` defaults); the group size cap is `group.share.max.size`;
- a member that leaves or is fenced is reported to `server.on_share_member_removed(group_id,
  member_id)` when the server has it (it closes the member's share sessions and releases its
  records), and a group that becomes empty to `server.on_share_group_emptied(group_id)` likewise.

Everything runs on the event loop thread.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Iterable

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
from quafka.protocol.errors import ErrorCode

from .timers import TimerService

if TYPE_CHECKING:
    from .server import BrokerServer

log = logging.getLogger("quafka.share_groups")

__all__ = ["ShareGroupService"]


class ShareGroupService:
    def __init__(self, server: "BrokerServer") -> None:
        self.server = server
        self.coordinator = ShareGroupCoordinator(settings=self._group_settings)
        self._own_timers: TimerService | None = None
        self._topics_loaded = False
        server.state.topic_listeners.append(self._on_topic_event)

    # ------------------------------------------------------------------ requests
    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, rack_id: str | None = None,
                  subscribed_topic_names: Iterable[str] | None = None, client_id: str = "",
                  client_host: str = "") -> HeartbeatResult:
        self._refresh()
        self.coordinator.max_group_size = int(self.server.state.config.get("group.share.max.size"))
        result, effects = self.coordinator.heartbeat(
            group_id, member_id, member_epoch, rack_id=rack_id, subscribed_topic_names=subscribed_topic_names,
            client_id=client_id, client_host=client_host, now_ms=self._now_ms())
        self._execute(effects)
        if result.error == ErrorCode.none and member_epoch in (0, -1):
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

    def delete_group(self, group_id: str) -> tuple[ErrorCode, str | None]:
        error, message, effects = self.coordinator.delete_group(group_id)
        self._execute(effects)
        return error, message

    # ------------------------------------------------------------------ events
    def _on_topic_event(self, event: str, topic_name: str) -> None:
        self._topics_loaded = False
        self._refresh()

    def _on_timer(self, group_id: str, member_id: str, now_ms: int) -> None:
        effects = self.coordinator.on_session_timeout(group_id, member_id, now_ms)
        if any(isinstance(e, MemberRemoved) for e in effects):
            log.info("share group %s: member %s fenced, its session timed out", group_id, member_id)
        self._execute(effects)

    # ------------------------------------------------------------------ internals
    def _group_settings(self, group_id: str) -> Any:
        return self.server.state.group_config(group_id)

    def _now_ms(self) -> int:
        return int(self.server.state.clock_ms())

    def _refresh(self) -> None:
        """Give the coordinator the current topic metadata (once loaded, then after each topic event)."""
        if self._topics_loaded or self.server.state.metadata is None:
            return
        topics = {name: (t.topic_id, len(t.partitions)) for name, t in self.server.state.topics.items()}
        self._execute(self.coordinator.on_topics_changed(topics, self._now_ms()))
        self._topics_loaded = True

    @property
    def timers(self) -> TimerService:
        timers = getattr(self.server, "timers", None)
        if timers is not None:
            return timers
        if self._own_timers is None:
            self._own_timers = TimerService()
        return self._own_timers

    def _execute(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, ArmTimer):
                _kind, group_id, member_id = effect.key
                self.timers.arm(effect.key, effect.deadline_ms,
                                lambda now_ms, g=group_id, m=member_id: self._on_timer(g, m, now_ms))
            elif isinstance(effect, CancelTimer):
                self.timers.cancel(effect.key)
            elif isinstance(effect, MemberRemoved):
                self._notify("on_share_member_removed", effect.group_id, effect.member_id)
            elif isinstance(effect, GroupEmptied):
                self._notify("on_share_group_emptied", effect.group_id)

    def _notify(self, hook_name: str, *args: str) -> None:
        hook = getattr(self.server, hook_name, None)
        if hook is None:
            return
        try:
            hook(*args)
        except Exception:  # noqa: BLE001 - one failing hook must not break the coordinator
            log.exception("%s%r failed", hook_name, args)

    def close(self) -> None:
        if self._own_timers is not None:
            self._own_timers.close()
