"""One blocking interface over quafka's ShareConsumer and AsyncShareConsumer, for the share consumer tests.

``ConsumerFactory("sync")`` builds ``SyncShareConsumerAdapter``s: thin wrappers of the blocking
``ShareConsumer`` (which runs its own event loop thread). ``ConsumerFactory("async")`` builds
``AsyncShareConsumerAdapter``s: an ``AsyncShareConsumer`` created inside, and driven by, ONE private
event loop that belongs to the factory and runs only on the test's thread — ``poll``,
``commit_sync``, ``commit_async`` and ``close`` are awaited with ``loop.run_until_complete``; the
plain methods (``acknowledge``, ``subscribe``, ``metrics``, ``wakeup`` ...) are called directly.
Every consumer of one factory shares that loop, so whichever consumer the test drives, the
background work of all of them (heartbeats, in-flight acknowledgements) progresses.

``factory.close_all()`` (the fixture's teardown) closes every consumer not closed yet, then the
loop. The raw consumer is ``adapter.raw``; ``adapter.run(coro)`` runs a coroutine on the factory's
loop (async mode only), for scenarios written with ``await`` (the RENEW task variant).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Callable, Coroutine

from quafka.client import AsyncShareConsumer, ShareConsumer

__all__ = ["AsyncShareConsumerAdapter", "ConsumerFactory", "SyncShareConsumerAdapter"]


class SyncShareConsumerAdapter:
    """The blocking ShareConsumer, method for method."""

    mode = "sync"

    def __init__(self, config: dict, key_deserializer: Callable | None = None,
                 value_deserializer: Callable | None = None) -> None:
        self.raw = ShareConsumer(config, key_deserializer=key_deserializer, value_deserializer=value_deserializer)
        self.closed = False

    def subscribe(self, topics):
        return self.raw.subscribe(topics)

    def unsubscribe(self):
        return self.raw.unsubscribe()

    def subscription(self):
        return self.raw.subscription()

    def poll(self, timeout: float):
        return self.raw.poll(timeout)

    def acknowledge(self, *args, **kwargs):
        return self.raw.acknowledge(*args, **kwargs)

    def commit_sync(self, timeout: float | None = None):
        return self.raw.commit_sync() if timeout is None else self.raw.commit_sync(timeout)

    def commit_async(self):
        return self.raw.commit_async()

    def set_acknowledgement_commit_callback(self, callback):
        return self.raw.set_acknowledgement_commit_callback(callback)

    def acquisition_lock_timeout_ms(self):
        return self.raw.acquisition_lock_timeout_ms()

    def metrics(self):
        return self.raw.metrics()

    def wakeup(self):
        return self.raw.wakeup()

    def close(self, timeout: float | None = None):
        self.closed = True
        return self.raw.close() if timeout is None else self.raw.close(timeout)


class AsyncShareConsumerAdapter:
    """An AsyncShareConsumer awaited on the factory's private loop by the calling (test) thread."""

    mode = "async"

    def __init__(self, loop: asyncio.AbstractEventLoop, config: dict, key_deserializer: Callable | None = None,
                 value_deserializer: Callable | None = None) -> None:
        self.loop = loop

        async def build() -> AsyncShareConsumer:  # created inside the running loop, as the API asks
            return AsyncShareConsumer(config, key_deserializer=key_deserializer, value_deserializer=value_deserializer)

        self.raw = loop.run_until_complete(build())
        self.closed = False

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def subscribe(self, topics):
        return self.raw.subscribe(topics)

    def unsubscribe(self):
        return self.raw.unsubscribe()

    def subscription(self):
        return self.raw.subscription()

    def poll(self, timeout: float):
        return self.run(self.raw.poll(timeout))

    def acknowledge(self, *args, **kwargs):
        return self.raw.acknowledge(*args, **kwargs)

    def commit_sync(self, timeout: float | None = None):
        return self.run(self.raw.commit_sync() if timeout is None else self.raw.commit_sync(timeout))

    def commit_async(self):
        return self.run(self.raw.commit_async())

    def set_acknowledgement_commit_callback(self, callback):
        return self.raw.set_acknowledgement_commit_callback(callback)

    def acquisition_lock_timeout_ms(self):
        return self.raw.acquisition_lock_timeout_ms()

    def metrics(self):
        return self.raw.metrics()

    def wakeup(self):
        return self.raw.wakeup()

    def close(self, timeout: float | None = None):
        self.closed = True
        return self.run(self.raw.close() if timeout is None else self.raw.close(timeout))


class ConsumerFactory:
    """``factory(config, key_deserializer=None, value_deserializer=None)`` -> an adapter of ``mode``."""

    def __init__(self, mode: str) -> None:
        assert mode in ("sync", "async"), mode
        self.mode = mode
        self.loop: asyncio.AbstractEventLoop | None = asyncio.new_event_loop() if mode == "async" else None
        self.made: list[SyncShareConsumerAdapter | AsyncShareConsumerAdapter] = []

    def __call__(self, config: dict, key_deserializer: Callable | None = None,
                 value_deserializer: Callable | None = None):
        if self.mode == "sync":
            consumer = SyncShareConsumerAdapter(config, key_deserializer, value_deserializer)
        else:
            consumer = AsyncShareConsumerAdapter(self.loop, config, key_deserializer, value_deserializer)
        self.made.append(consumer)
        return consumer

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run a coroutine on the private loop (async mode only)."""
        assert self.loop is not None, "run() is for the async mode"
        return self.loop.run_until_complete(coro)

    def close_all(self) -> None:
        for consumer in reversed(self.made):
            if not consumer.closed:
                with contextlib.suppress(Exception):
                    consumer.close(5.0)
        if self.loop is not None and not self.loop.is_closed():
            loop = self.loop
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                with contextlib.suppress(Exception):
                    loop.run_until_complete(asyncio.wait(pending, timeout=5))
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
