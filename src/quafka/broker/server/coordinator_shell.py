"""What the asyncio shells of the group coordinators share (share_groups.py, classic_groups.py,
consumer_groups.py, consumer_offsets.py): the server's timers, background work no request waits
for, the clock, and making an append to a group's `__consumer_offsets` partition durable.

Everything runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from quafka.broker.storage.base import MAX_LONG

from .internal_log import group_offsets_log
from .timers import TimerService

if TYPE_CHECKING:
    from ._services import BrokerServices

__all__ = ["NOT_STORED", "CoordinatorShell"]

# the message of NOT_COORDINATOR when a coordinator's append failed (its change was not made)
NOT_STORED = "The group coordinator could not store the change (its log directory failed); retry."


class CoordinatorShell:
    """Base of a coordinator's shell; `_log` names the coordinator in what it logs."""

    _log = logging.getLogger("quafka.coordinator")

    def __init__(self, server: "BrokerServices") -> None:
        self.server = server
        self._own_timers: TimerService | None = None
        self._tasks: set[asyncio.Task] = set()

    @property
    def timers(self) -> TimerService:
        """The server's TimerService (the shell makes its own when the server has none)."""
        timers = getattr(self.server, "timers", None)
        if timers is not None:
            return timers
        if self._own_timers is None:
            self._own_timers = TimerService()
        return self._own_timers

    def _now_ms(self) -> int:
        return int(self.server.state.clock_ms())

    async def _durable(self, group_id: str, end_offset: int | None) -> None:
        """With flush enabled for `__consumer_offsets`: wait until `end_offset` of the group's
        partition is fsynced (on the flusher's thread). None: nothing was appended."""
        if end_offset is None:
            return
        plog = group_offsets_log(self.server.state, group_id)
        if plog.config.flush_messages < MAX_LONG:
            await self.server.flusher.flush(plog, end_offset)

    def _spawn(self, coro, name: str) -> None:
        """Run work no request waits for; a failure is logged (storage failures were already)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and not isinstance(exc, OSError):
            self._log.error("%s failed", task.get_name(), exc_info=exc)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._own_timers is not None:
            self._own_timers.close()
