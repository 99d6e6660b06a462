"""The timer service: deadlines fire in order, re-arming replaces, cancel removes, and a failing
callback does not stop the others."""

from __future__ import annotations

import asyncio

from quafka.broker.server.clock import wall_clock_ms
from quafka.broker.server.timers import TimerService


def run(coro):
    return asyncio.run(coro)


def test_timers_fire_in_deadline_order_and_rearm_replaces():
    async def main():
        timers = TimerService()
        fired = []
        done = asyncio.Event()
        now = wall_clock_ms()
        timers.arm("b", now + 20, lambda t: fired.append("b"))
        timers.arm("a", now + 10, lambda t: fired.append("a"))
        timers.arm("c", now + 5, lambda t: fired.append("c-old"))
        timers.arm("c", now + 30, lambda t: (fired.append("c"), done.set()))
        timers.arm("gone", now + 1, lambda t: fired.append("gone"))
        timers.cancel("gone")
        await asyncio.wait_for(done.wait(), 5)
        assert fired == ["a", "b", "c"]
        assert len(timers) == 0

    run(main())


def test_a_failing_callback_does_not_stop_the_others():
    async def main():
        timers = TimerService()
        done = asyncio.Event()
        now = wall_clock_ms()

        def boom(_t):
            raise RuntimeError("boom")

        timers.arm("x", now, boom)
        timers.arm("y", now, lambda t: done.set())
        await asyncio.wait_for(done.wait(), 5)

    run(main())
