"""Virtual time for the simulator: an asyncio event loop whose clock only moves when nothing is
runnable, and the broker's clocks reading the same virtual time.

`VirtualLoop` is asyncio's selector loop with a selector that never waits: when the loop has no
ready callback, `select(timeout)` moves the virtual clock to the next scheduled timer and returns
at once (no real sleeping), so a lock that expires after 30 s of virtual time costs nothing. When
nothing is ready and no timer is scheduled the simulation is stuck, which is reported.

`run_in_executor` runs the function inline on the loop thread and returns a completed future:
there are no threads in a simulation (an fsync worker would make the order of completions depend
on the operating system's scheduler).
"""

from __future__ import annotations

import asyncio
import selectors

from quafka.broker.server import clock

# Virtual time starts here: 2025-01-01T00:00:00Z as the wall clock, an arbitrary monotonic base.
WALL_EPOCH_NS = 1_735_689_600_000_000_000
MONOTONIC_EPOCH_NS = 1_000_000_000_000


class SimulationStuck(RuntimeError):
    """Nothing is runnable and no timer is scheduled: every task waits for something that never comes."""


class _VirtualSelector(selectors.SelectSelector):
    """Keeps registrations (the loop's self-pipe, listening sockets nobody connects to) but never
    waits: `select` advances the virtual clock to the next timer instead."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualLoop | None = None

    def select(self, timeout=None):
        loop = self.loop
        assert loop is not None
        if timeout is None:
            raise SimulationStuck("no runnable task and no timer: the simulation cannot make progress")
        if timeout > 0:
            scheduled = loop._scheduled  # noqa: SLF001 - asyncio's timer heap
            target = scheduled[0].when() if scheduled else loop._now + timeout
            loop._now = max(loop._now, target, loop._now + timeout)
        return []


class VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._now = 0.0
        selector = _VirtualSelector()
        super().__init__(selector=selector)
        selector.loop = self

    def time(self) -> float:
        return self._now

    def now_ms(self) -> int:
        return int(self._now * 1000.0 + 1e-6)

    def run_in_executor(self, executor, func, *args):  # noqa: D401 - asyncio's signature
        """Inline: the simulation has no threads."""
        fut = self.create_future()
        try:
            fut.set_result(func(*args))
        except BaseException as exc:  # noqa: BLE001 - delivered through the future like a worker's
            fut.set_exception(exc)
        return fut


def install_clock(loop: VirtualLoop) -> None:
    """Make the broker's wall and monotonic clocks read the loop's virtual time."""
    def wall_ns() -> int:
        return WALL_EPOCH_NS + int(loop._now * 1e9 + 0.5)

    def monotonic_ns() -> int:
        return MONOTONIC_EPOCH_NS + int(loop._now * 1e9 + 0.5)

    clock.set_clock_source(wall_ns, monotonic_ns)


def uninstall_clock() -> None:
    clock.set_clock_source(None, None)
