"""The sync API's engine: a private event loop in a daemon thread.

A sync class owns one ``LoopThread`` and the async object it wraps; each sync method submits the
matching coroutine with ``run`` (``asyncio.run_coroutine_threadsafe`` and a blocking wait), and a
sync generator steps an async generator with ``iterate``. No protocol logic lives here.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["LoopThread"]


class LoopThread:
    """An asyncio event loop running in its own daemon thread until ``close()``."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def closed(self) -> bool:
        return self.loop.is_closed()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (its exception is re-raised here)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a sync client method was called from its own event loop thread")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:
            # Interrupted while waiting (KeyboardInterrupt, a test timeout): cancel the coroutine so
            # it does not run on unseen, holding a generator or a connection's turn.
            future.cancel()
            raise

    async def _aclose(self, agen: Any) -> None:
        # An __anext__ cancelled by ``run`` may still be unwinding; aclose() refuses until it is done.
        for _ in range(200):
            try:
                await agen.aclose()
                return
            except RuntimeError as exc:
                if "already running" not in str(exc):
                    raise
                await asyncio.sleep(0.005)

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        """A sync generator over an async generator; closing it closes the async one."""
        try:
            while True:
                try:
                    item = self.run(agen.__anext__())
                except StopAsyncIteration:
                    return
                yield item
        finally:
            if getattr(agen, "aclose", None) is not None and not self.loop.is_closed():
                self.run(self._aclose(agen))

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()
