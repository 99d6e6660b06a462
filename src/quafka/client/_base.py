"""What every client shares: the async side's lazy cluster connection and lifecycle, and the sync
side's wrapping of an async client on a private event loop thread (`_sync.LoopThread`).

An async client subclasses `AsyncClient` (naming its config table and display name); its sync
twin subclasses `SyncClient` and forwards each method with ``self._run(self._async.method(...))``
(or ``self._iterate(...)`` for async generators). No protocol logic lives here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping
from typing import Any, ClassVar, TypeVar

from ._cluster import Cluster
from ._config import parse_config
from ._security import PLAINTEXT, security_settings
from ._ssl_context import build_ssl_context
from ._sync import LoopThread
from .errors import IllegalStateException

T = TypeVar("T")

__all__ = ["AsyncClient", "SyncClient"]


class AsyncClient:
    """A client that connects to the cluster on first use and closes with ``close()``."""

    CONFIG: ClassVar[Mapping[str, Any]]
    NAME: ClassVar[str]

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = parse_config(config, self.CONFIG, self.NAME)
        # security keys are checked and the TLS context built here: a bad one fails the constructor
        self.security = security_settings(self.config) if "security.protocol" in self.CONFIG else PLAINTEXT
        self._ssl_context = build_ssl_context(self.security.tls) if self.security.tls is not None else None
        self._cluster: Cluster | None = None
        self._closed = False

    async def _get_cluster(self) -> Cluster:
        if self._closed:
            raise IllegalStateException(f"the {self.NAME} is closed")
        if self._cluster is None:
            cluster = Cluster(self.config["bootstrap.servers"], self.config["client.id"],
                              self.config["request.timeout.ms"] / 1000, security=self.security,
                              ssl_context=self._ssl_context)
            await cluster.bootstrap()
            self._cluster = cluster
        return self._cluster

    async def close(self) -> None:
        self._closed = True
        if self._cluster is not None:
            await self._cluster.close()
            self._cluster = None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class SyncClient:
    """The blocking twin of an `AsyncClient`, run on its own event loop thread. Use ``with``."""

    ASYNC: ClassVar[type[AsyncClient]]

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._async = self.ASYNC(config)  # validates the config before a thread starts
        self.config = self._async.config
        self._loop = LoopThread(f"quafka-{self._async.NAME}")

    def _check_open(self) -> None:
        if self._loop.closed:
            raise IllegalStateException(f"the {self._async.NAME} is closed")

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop.closed:
            coro.close()
            self._check_open()
        return self._loop.run(coro)

    def _iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        self._check_open()
        return self._loop.iterate(agen)

    def close(self) -> None:
        if not self._loop.closed:
            self._loop.run(self._async.close())
            self._loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
