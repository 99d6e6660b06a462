"""DashboardServer: the dashboard's HTTP server (uvicorn, h11) on an event loop that already runs
— the broker's own (``quafka.dashboard.listener``) or ``quafka dashboard``'s.

    server = DashboardServer(settings)
    await server.start()          # bound: server.url, server.port (port 0 picks a free one)
    ...
    await server.close()          # ends the live streams, stops uvicorn, closes the client

Embedding uvicorn 0.54 in a process that owns its signals: ``Server.serve`` wraps itself in
``capture_signals``, which installs ``signal.signal`` handlers for SIGINT/SIGTERM (replacing the
broker's ``loop.add_signal_handler`` ones) and re-raises the signal on exit. The subclass below
makes it a no-op, so SIGTERM still reaches the broker (tests/dashboard/test_server.py checks that
``quafka broker`` with the dashboard on exits 0 on SIGTERM). The socket is bound here and handed
to ``serve(sockets=...)``, so the port is known at once. uvicorn never configures logging
(``log_config=None``); its logger ``uvicorn.error`` goes through the process's logging.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

from .settings import DashboardSettings
from .source import Source

__all__ = ["DashboardServer", "DashboardThread"]

log = logging.getLogger("quafka.dashboard")


def _embedded_server_class():
    import uvicorn

    class EmbeddedUvicorn(uvicorn.Server):
        """uvicorn.Server that leaves signals to its host and says when it is listening."""

        def __init__(self, config: uvicorn.Config) -> None:
            super().__init__(config)
            self.ready = asyncio.Event()

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets=sockets)
            self.ready.set()

    return EmbeddedUvicorn


class DashboardServer:
    def __init__(self, settings: DashboardSettings, source: Source | None = None) -> None:
        self.settings = settings
        self._source = source
        self.host, self.port = settings.host, settings.port
        self.app = None
        self.shutdown = asyncio.Event()
        self._uvicorn = None
        self._task: asyncio.Task | None = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else ("::1" if self.host == "::" else self.host)
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}/"

    async def start(self) -> "DashboardServer":
        import uvicorn

        from .app import create_app

        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.create_server((self.host, self.port), family=family, reuse_port=False)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self.shutdown = asyncio.Event()
        source = self._source or Source(self.settings)
        self._source = source
        self.app = create_app(self.settings, source, self.shutdown)
        config = uvicorn.Config(self.app, loop="none", http="h11", ws="none", lifespan="off", log_config=None,
                                server_header=False, access_log=False, timeout_graceful_shutdown=2,
                                proxy_headers=False)
        self._uvicorn = _embedded_server_class()(config)
        self._task = asyncio.create_task(self._uvicorn.serve(sockets=[sock]), name="dashboard http")
        ready = asyncio.ensure_future(self._uvicorn.ready.wait())
        await asyncio.wait((ready, self._task), return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            ready.cancel()
            sock.close()
            error = self._task.exception() if not self._task.cancelled() else None
            raise OSError(f"the dashboard's HTTP server did not start on {self.url}: {error!r}")
        if self.settings.beyond_loopback:
            log.warning("dashboard: listening on %s, beyond loopback: anyone who reaches it reads (and, with "
                        "actions on, acts) as the dashboard's broker login; prefer 127.0.0.1 behind a proxy "
                        "that authenticates", self.settings.host)
        log.info("dashboard: %s (%s, actions %s)", self.url, self.settings.mode,
                 "on" if self.settings.actions_enabled else "off: read-only")
        return self

    @property
    def hub(self):
        return None if self.app is None else self.app.state.dashboard.hub

    async def close(self) -> None:
        """End every live stream, stop serving, close the broker connection. Idempotent."""
        self.shutdown.set()
        if self.app is not None:
            await self.app.state.dashboard.hub.close()
        if self._uvicorn is not None and self._task is not None:
            self._uvicorn.should_exit = True
            try:
                await self._task
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - reported, the broker goes on stopping
                log.warning("dashboard: the HTTP server stopped with %r", exc)
            self._task = None
        if self._source is not None:
            await self._source.close()


class DashboardThread:
    """A DashboardServer on its own event loop in a background thread, for a program that has no
    loop of its own to lend (``quafka demo`` next to an EmbeddedBroker; tests).

        with DashboardThread(settings) as dashboard:
            print(dashboard.url)
    """

    def __init__(self, settings: DashboardSettings) -> None:
        self.server = DashboardServer(settings)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> "DashboardThread":
        import threading

        ready = threading.Event()

        async def main() -> None:
            self._stop = asyncio.Event()
            try:
                await self.server.start()
            except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
                self._error = exc
                ready.set()
                return
            ready.set()
            await self._stop.wait()
            await self.server.close()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(main())
            finally:
                self._loop.close()

        self._thread = threading.Thread(target=run, name="quafka-dashboard", daemon=True)
        self._thread.start()
        ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error
        return self

    def stop(self) -> None:
        if self._thread is not None and self._thread.is_alive() and self._loop is not None and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join()

    def __enter__(self) -> "DashboardThread":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
