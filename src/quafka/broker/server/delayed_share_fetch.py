"""Parked ShareFetch requests (Kafka's `DelayedShareFetch` in its purgatory).

A ShareFetch that finds nothing to acquire parks here, watched under every share partition of its
share session (keys are (group id, topic id, partition), so an event in one group never disturbs
another's fetches). When records may have become acquirable in a share partition (an
acknowledgement or release committed, a lock expired, records were appended, the start offset
moved), the shell calls `complete(key, ...)`: the partition's parked fetches are tried oldest first,
synchronously, each acquiring for its own member, until the partition has nothing more to hand out.
A parked fetch completes as soon as it acquired anything; it is never woken only to find nothing.

This is what Kafka does in `SharePartitionManager.acknowledge` (→
`ReplicaManager.completeDelayedShareFetchRequest`, `DelayedShareFetch.tryComplete`): the
partition's waiting fetches are served before the acknowledging request's own fetch runs, so the
member that acknowledges does not take first what its acknowledgement freed, and work spreads over
every consumer.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Hashable


class DelayedShareFetch:
    """One parked ShareFetch: `try_fill()` acquires for it and returns what it got (empty: nothing)."""

    __slots__ = ("keys", "try_fill", "future")

    def __init__(self, keys: list[Hashable], try_fill: Callable[[], dict]) -> None:
        self.keys = keys
        self.try_fill = try_fill
        self.future: asyncio.Future = asyncio.get_running_loop().create_future()


class ShareFetchPurgatory:
    def __init__(self) -> None:
        self._watchers: dict[Hashable, dict[DelayedShareFetch, None]] = {}  # insertion order: oldest first
        self._completing: set[Hashable] = set()

    def parked(self, key: Hashable) -> int:
        """How many fetches wait on this share partition."""
        return len(self._watchers.get(key, ()))

    def operation_count(self) -> int:
        """How many fetches are parked (each counted once, whatever it watches)."""
        return len({id(op) for ops in self._watchers.values() for op in ops})

    def watch(self, op: DelayedShareFetch) -> None:
        for key in op.keys:
            self._watchers.setdefault(key, {})[op] = None

    def unwatch(self, op: DelayedShareFetch) -> None:
        for key in op.keys:
            ops = self._watchers.get(key)
            if ops is not None:
                ops.pop(op, None)
                if not ops:
                    del self._watchers[key]

    def complete(self, key: Hashable, acquirable: Callable[[], bool]) -> int:
        """Serve the fetches parked on `key`, oldest first, while `acquirable()` holds; returns
        how many completed. Re-entrant calls for a key being served return at once (the outer
        loop goes on while records remain)."""
        ops = self._watchers.get(key)
        if not ops or key in self._completing:
            return 0
        self._completing.add(key)
        completed = 0
        try:
            for op in list(ops):  # each parked fetch is tried at most once per call
                if not acquirable():
                    break
                if op.future.done():  # timed out or cancelled meanwhile
                    self.unwatch(op)
                    continue
                try:
                    got = op.try_fill()
                except Exception as exc:  # noqa: BLE001 - that fetch fails, not the request serving it
                    self.unwatch(op)
                    op.future.set_exception(exc)
                    continue
                if got:
                    self.unwatch(op)
                    op.future.set_result(got)
                    completed += 1
        finally:
            self._completing.discard(key)
        return completed

    def wake_all(self, key: Hashable) -> None:
        """Complete the fetches on `key` with nothing (their session closed, or shutdown)."""
        for op in list(self._watchers.get(key, ())):
            self.unwatch(op)
            if not op.future.done():
                op.future.set_result({})
