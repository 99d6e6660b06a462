"""One timer service on the event loop for the core's deadlines (lock expiry, session timeouts).

The core never sleeps: it returns "arm a timer at t for key k" and "cancel k" effects, and this
service calls back when a deadline passes. Keys are any hashable; arming an existing key replaces
its deadline. Deadlines are milliseconds of the service's clock (the same clock the core gets as
now_ms): the wall clock by default, `monotonic_ms` for acquisition locks.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from typing import Callable, Hashable

from .clock import wall_clock_ms

log = logging.getLogger("quafka.timers")


class TimerService:
    def __init__(self, clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        self._clock_ms = clock_ms
        self._deadlines: dict[Hashable, tuple[int, int, Callable[[int], None]]] = {}
        self._heap: list[tuple[int, int, Hashable]] = []
        self._seq = itertools.count()
        self._handle: asyncio.TimerHandle | None = None
        self._handle_due: int | None = None

    def arm(self, key: Hashable, deadline_ms: int, callback: Callable[[int], None]) -> None:
        """Call `callback(now_ms)` once at or after `deadline_ms` unless re-armed or cancelled."""
        seq = next(self._seq)
        self._deadlines[key] = (deadline_ms, seq, callback)
        heapq.heappush(self._heap, (deadline_ms, seq, key))
        self._schedule()

    def cancel(self, key: Hashable) -> None:
        self._deadlines.pop(key, None)

    def deadline_of(self, key: Hashable) -> int | None:
        entry = self._deadlines.get(key)
        return entry[0] if entry else None

    def __len__(self) -> int:
        return len(self._deadlines)

    def _schedule(self) -> None:
        while self._heap:
            due, seq, key = self._heap[0]
            entry = self._deadlines.get(key)
            if entry is None or entry[1] != seq:  # cancelled or re-armed: drop the stale heap entry
                heapq.heappop(self._heap)
                continue
            break
        else:
            if self._handle is not None:
                self._handle.cancel()
                self._handle = None
            return
        if self._handle is not None and self._handle_due is not None and self._handle_due <= due:
            return
        if self._handle is not None:
            self._handle.cancel()
        loop = asyncio.get_running_loop()
        delay_s = max(0.0, (due - self._clock_ms()) / 1000.0)
        self._handle_due = due
        self._handle = loop.call_later(delay_s, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._handle_due = None
        now_ms = self._clock_ms()
        while self._heap and self._heap[0][0] <= now_ms:
            due, seq, key = heapq.heappop(self._heap)
            entry = self._deadlines.get(key)
            if entry is None or entry[1] != seq:
                continue
            del self._deadlines[key]
            try:
                entry[2](now_ms)
            except Exception:  # one failing callback must not stop the others
                log.exception("timer callback for %r failed", key)
        self._schedule()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._deadlines.clear()
        self._heap.clear()
