"""The asyncio broker: listeners, connections, background tasks (retention, flush) and shutdown.

Start-up order: validate the configuration, replay durable metadata, open and recover every
partition log, then open the listeners. Shutdown closes the listeners, cancels connections and
closes the logs (writing their indexes).
"""

from __future__ import annotations

import asyncio
import logging

from quafka.broker import config as cfg
from quafka.broker.storage import LogEvent

from .clock import wall_clock_ms
from .connection import serve_connection
from .registry import HandlerSpec, advertised_ranges, load_handlers
from .state import BrokerState

log = logging.getLogger("quafka.server")

# Read buffer per connection before asyncio pauses reading: large enough that a typical ~1 MB
# produce request arrives without pause/resume cycles.
STREAM_LIMIT_BYTES = 4 * 1024 * 1024


class FetchPurgatory:
    """Long-polling fetches wait here until one of their partitions gets data or time runs out."""

    def __init__(self) -> None:
        self.parked = 0

    async def wait_for_append(self, logs: list, timeout_ms: int) -> None:
        if timeout_ms <= 0 or not logs:
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()

        def on_event(event: LogEvent) -> None:
            if not fut.done():
                fut.set_result(None)

        for plog in logs:
            plog.add_listener(on_event)
        self.parked += 1
        try:
            await asyncio.wait_for(fut, timeout_ms / 1000.0)
        except asyncio.TimeoutError:
            pass
        finally:
            self.parked -= 1
            for plog in logs:
                plog.remove_listener(on_event)


class BrokerServer:
    def __init__(self, config: cfg.BrokerConfig, *, memory: bool = False) -> None:
        self.config = config
        self.state = BrokerState(config, memory=memory, clock_ms=wall_clock_ms)
        self.registry: dict[int, HandlerSpec] = load_handlers()
        self.advertised_ranges = advertised_ranges()
        self.purgatory = FetchPurgatory()
        self._servers: list[asyncio.base_events.Server] = []
        self._connections: set[asyncio.Task] = set()
        self._tasks: list[asyncio.Task] = []
        self.bound: list[tuple[str, int]] = []
        self._stopped = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self.state.load()
        for _name, host, port in self.config.listeners:
            server = await asyncio.start_server(self._on_connection, host or None, port, reuse_address=True,
                                                limit=STREAM_LIMIT_BYTES)
            self._servers.append(server)
            sock = server.sockets[0].getsockname()
            self.bound.append((sock[0], sock[1]))
        self.state.advertised = self._advertised_endpoint()
        self._tasks.append(asyncio.create_task(self._retention_loop(), name="retention"))
        self._tasks.append(asyncio.create_task(self._flush_loop(), name="flush"))
        log.info(
            "quafka broker %d (cluster %s) listening on %s, data in %s",
            self.state.node_id, self.state.metadata.cluster_id,
            ", ".join(f"{h}:{p}" for h, p in self.bound), self.config.log_dir,
        )

    def _advertised_endpoint(self) -> tuple[str, int]:
        advertised = self.config.advertised_listeners
        bound_host, bound_port = self.bound[0]
        if advertised:
            _name, host, port = advertised[0]
            if port == 0:
                port = bound_port
            if not host or host in ("0.0.0.0", "::"):
                host = "127.0.0.1" if bound_host in ("0.0.0.0", "::") else bound_host
            return host, port
        host = bound_host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return host, bound_port

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for task in self._tasks:
            task.cancel()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._tasks, *self._connections, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        self.state.close()
        self._stopped.set()
        log.info("quafka broker %d stopped", self.state.node_id)

    @staticmethod
    def loop_time_ms() -> float:
        return asyncio.get_running_loop().time() * 1000.0

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await serve_connection(self, reader, writer)
        except asyncio.CancelledError:
            pass  # shutdown: the stream callback would log a cancelled task as an error
        finally:
            self._connections.discard(task)

    # ------------------------------------------------------------------ background work
    async def _retention_loop(self) -> None:
        while True:
            interval_ms = int(self.state.config.get("log.retention.check.interval.ms"))
            await asyncio.sleep(interval_ms / 1000.0)
            now_ms = wall_clock_ms()
            for topic in list(self.state.topics.values()):
                for part in topic.partitions:
                    try:
                        part.log.enforce_retention(now_ms)
                    except Exception:
                        log.exception("retention check failed for %s-%d", topic.name, part.index)

    async def _flush_loop(self) -> None:
        while True:
            interval_ms = min(
                int(self.state.config.get("log.flush.scheduler.interval.ms")),
                self._smallest_flush_ms(),
                1000,
            )
            await asyncio.sleep(max(interval_ms, 10) / 1000.0)
            now_ms = wall_clock_ms()
            for topic in list(self.state.topics.values()):
                for part in topic.partitions:
                    part.log.maybe_flush(now_ms)

    def _smallest_flush_ms(self) -> int:
        smallest = 2**63 - 1
        for topic in self.state.topics.values():
            if topic.partitions:
                smallest = min(smallest, topic.partitions[0].log.config.flush_ms)
        return smallest
