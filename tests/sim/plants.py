"""Deliberately planted bugs, to show that the simulator finds them (`--plant NAME`).

Each is a monkeypatch inside the simulation process, undone when the run ends:

- ``ack-before-append``: `ShareCoordinatorService.write` answers success at once and performs the real
  write 50 ms – 2 s later (or never, if the broker crashes first), so a ShareAcknowledge /
  piggy-backed acknowledgement is answered before its share-state records are appended.
  Expected: ``redelivered-after-ack`` after a crash.
- ``forget-accept-on-restart``: `ShareCoordinatorService.read` (the share partition loading its state,
  as after a restart) turns ACKNOWLEDGED state batches back into AVAILABLE, so an ACCEPT that was
  made durable is forgotten. Expected: ``redelivered-after-ack``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from typing import Callable

from quafka.broker.server.share_coordinator import ShareCoordinatorService
from quafka.protocol.errors import ErrorCode

ACKNOWLEDGED, AVAILABLE = 2, 0

PLANTS = ("ack-before-append", "forget-accept-on-restart")


def install(name: str, world) -> Callable[[], None]:
    if name == "ack-before-append":
        return _ack_before_append(random.Random(world.seed ^ 0xB06))
    if name == "forget-accept-on-restart":
        return _forget_accept_on_restart()
    raise ValueError(f"unknown plant {name!r}; known: {', '.join(PLANTS)}")


def _ack_before_append(rng: random.Random) -> Callable[[], None]:
    original = ShareCoordinatorService.write

    def write(self, key, **kwargs):
        loop = asyncio.get_running_loop()
        answered = loop.create_future()
        answered.set_result(ErrorCode.none)

        def later() -> None:
            result = original(self, key, **kwargs)
            if isinstance(result, asyncio.Future):
                result.add_done_callback(lambda f: f.cancelled() or f.exception())
            elif asyncio.iscoroutine(result):
                task = loop.create_task(result)
                task.add_done_callback(lambda f: f.cancelled() or f.exception())

        loop.call_later(rng.uniform(0.05, 2.0), later)
        return answered

    ShareCoordinatorService.write = write

    def undo() -> None:
        ShareCoordinatorService.write = original

    return undo


def _forget_accept_on_restart() -> Callable[[], None]:
    original = ShareCoordinatorService.read

    def forget(result):
        batches = getattr(result, "state_batches", None)
        if not batches:
            return result
        changed = tuple(b._replace(delivery_state=AVAILABLE) if b.delivery_state == ACKNOWLEDGED else b
                        for b in batches)
        return dataclasses.replace(result, state_batches=changed)

    def read(self, key, *args, **kwargs):
        result = original(self, key, *args, **kwargs)
        if isinstance(result, asyncio.Future):
            out = asyncio.get_running_loop().create_future()

            def relay(f: asyncio.Future) -> None:
                if f.cancelled():
                    out.cancel()
                elif f.exception() is not None:
                    out.set_exception(f.exception())
                else:
                    out.set_result(forget(f.result()))

            result.add_done_callback(relay)
            return out
        if asyncio.iscoroutine(result):
            async def wrapped():
                return forget(await result)
            return wrapped()
        return forget(result)

    ShareCoordinatorService.read = read

    def undo() -> None:
        ShareCoordinatorService.read = original

    return undo
