"""The asyncio broker: listeners, connections, background tasks (retention, flush) and shutdown.

Start-up order: validate the configuration, replay durable metadata, open and recover every
partition log, then open the listeners. Shutdown closes the listeners, cancels connections and
closes the logs (writing their indexes).
"""

from __future__ import annotations

import asyncio
import logging

from quafka.broker import config as cfg
from quafka.broker.storage import LogDirHealth, LogEvent
from quafka.protocol.extensions import VERSION_RANGES as EXTENSION_VERSION_RANGES

from .authorizer import make_authorizer
from .clock import wall_clock_ms
from quafka.broker.core.share_session import ShareSessionCache

from .connection import BrokerConnection
from .connection_limits import ConnectionLimits
from .quotas import QuotaService
from .disk_space import DiskSpaceMonitor
from .flusher import LogFlusher
from .log_cleaner import LogCleanerService
from .metrics import BrokerMetrics, MetricsServer, parse_metrics_listener
from .handlers import advertised_ranges, load_handlers
from .registry import HandlerSpec
from .sasl_authenticator import SaslService
from .classic_groups import ClassicGroupService
from .consumer_groups import ConsumerGroupService
from .consumer_offsets import ConsumerOffsetsService
from .share_groups import ShareGroupService
from .share_partitions import SharePartitionManager
from .share_coordinator import ShareCoordinatorService
from .transactions import TransactionCoordinatorService
from .state import BrokerState
from .tls import listener_contexts
from .tls_accept import TlsListener
from .timers import TimerService

log = logging.getLogger("quafka.server")

# A broker halting on a failed log directory lets requests in flight answer for at most this long.
HALT_DRAIN_S = 1.0


def security_summary(config: cfg.BrokerConfig, authorizer: bool) -> str:
    """One line saying how the listeners are protected, for the start-up log: a broker reachable
    with no authentication and no authorizer says so (docs/security.md)."""
    protocols = sorted({lst.security_protocol for lst in config.listeners})
    authenticated = [p for p in protocols if p.startswith("SASL_")]
    parts = [f"listeners {', '.join(protocols)}"]
    if not authenticated and not any(p == "SSL" and _client_auth(config) for p in protocols):
        parts.append("no authentication (every client is User:ANONYMOUS)")
    parts.append("ACLs enforced (authorizer.class.name)" if authorizer else
                 "no authorizer: every client may do everything")
    return "; ".join(parts) + " — docs/security.md"


def _client_auth(config: cfg.BrokerConfig) -> bool:
    try:
        return str(config.get("ssl.client.auth")).lower() == "required"
    except KeyError:
        return False


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
            await asyncio.wait((fut,), timeout=timeout_ms / 1000.0)  # not wait_for: see SharePartitionManager.wait
        finally:
            self.parked -= 1
            for plog in logs:
                plog.remove_listener(on_event)


class BrokerServer:
    def __init__(self, config: cfg.BrokerConfig, *, memory: bool = False, log_store=None,
                 metadata_store=None) -> None:
        self.config = config
        self.metrics = BrokerMetrics()
        self.metrics_server: MetricsServer | None = None
        self.state = BrokerState(config, memory=memory, clock_ms=wall_clock_ms, log_store=log_store,
                                 metadata_store=metadata_store)
        self.registry: dict[int, HandlerSpec] = load_handlers()
        self.advertised_ranges = advertised_ranges()
        if not self._api_extension_enabled():  # quafka.api.extension.enable=false: as Apache Kafka
            self.registry = {k: s for k, s in self.registry.items() if k not in EXTENSION_VERSION_RANGES}
            self.advertised_ranges = [r for r in self.advertised_ranges if r[0] not in EXTENSION_VERSION_RANGES]
        self.purgatory = FetchPurgatory()
        self.timers = TimerService()
        self.flusher = LogFlusher()
        self.failed_log_dir: LogDirHealth | None = None  # set when the log directory failed
        # the free-space watermark of the log directory (none for memory stores)
        self.disk_space = DiskSpaceMonitor(getattr(self.state.log_store, "log_dir", None), lambda: self.state.config)
        self._halting: asyncio.Task | None = None
        self.requests_in_flight = 0  # handlers running (connection.py); a halt lets them answer
        self.unserved_requests_logged: set[tuple] = set()  # (client id, software, API key) warned once
        self.share_sessions = ShareSessionCache(self._max_share_sessions())
        self.share_partitions = SharePartitionManager(self)
        self.share_coordinator: ShareCoordinatorService | None = None
        self.share_groups: ShareGroupService | None = None
        self.consumer_offsets: ConsumerOffsetsService | None = None
        self.classic_groups: ClassicGroupService | None = None
        self.consumer_groups: ConsumerGroupService | None = None
        self.transactions: TransactionCoordinatorService | None = None  # transactions.py
        self.log_cleaner: LogCleanerService | None = None  # compaction (log_cleaner.py)
        self.quotas = QuotaService(self.state, wall_clock_ms)  # client quotas (quotas.py)
        self.connection_limits = ConnectionLimits(self.state)  # max.connections* (connection_limits.py)
        # authorization.py: None allows everything (no authorizer.class.name); else authorizer.py's
        self.authorizer = make_authorizer(config, self.state, self.metrics)
        self.tls_listeners: dict[str, TlsListener] = {}  # SSL/SASL_SSL listeners by name (tls_accept.py)
        self.sasl = SaslService(self)  # SASL listeners' settings and credential lookups (sasl_authenticator.py)
        self._loaded = asyncio.Event()
        self._stopping = False
        self._servers: list[asyncio.base_events.Server] = []
        self.connections: set[BrokerConnection] = set()  # open client connections (connection.py)
        self._tasks: list[asyncio.Task] = []
        self.bound: list[tuple[str, int]] = []
        self._stopped = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle
    def _api_extension_enabled(self) -> bool:
        if self.config.get("quafka.api.extension.enable"):
            return True
        log.info("quafka.api.extension.enable=false: quafka's API extension (keys %s) is neither advertised nor "
                 "served", ", ".join(str(k) for k in sorted(EXTENSION_VERSION_RANGES)))
        return False

    def _max_share_sessions(self) -> int:
        try:
            return int(self.config.get("group.share.max.share.sessions"))
        except KeyError:
            return 2000

    async def start(self) -> None:
        """Replay the metadata and open the logs, open the listeners, then replay the coordinators'
        internal topics (requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS); returns when loaded."""
        self._build_tls()  # before anything opens: a key store that does not load refuses the start
        self.state.log_store.health.listeners.append(self.on_log_dir_failure)
        self.state.load()
        self.disk_space.check()  # before the listeners open: a produce never meets an unmeasured disk
        try:
            await self._start_after_load()
        except BaseException:
            # close what load opened (and its directory lock), so a retry in this process can start
            await self._close_services()
            self.state.close()
            raise

    async def _start_after_load(self) -> None:
        self.share_coordinator = ShareCoordinatorService(self)
        self.share_groups = ShareGroupService(self)
        self.consumer_offsets = ConsumerOffsetsService(self)
        self.classic_groups = ClassicGroupService(self)
        self.consumer_groups = ConsumerGroupService(self)
        self.transactions = TransactionCoordinatorService(self)
        self.state.topic_listeners.append(self._on_topic_event)
        self.state.group_config_listeners.append(self.share_partitions.on_group_config_changed)
        await self._start_metrics()
        self.quotas.load()
        for listener in self.config.listeners:
            tls = self.tls_listeners.get(listener.name)
            if tls is not None:  # SSL, SASL_SSL: the TLS handshake first (tls_accept.py)
                factory = tls.protocol
            else:
                factory = lambda lst=listener: BrokerConnection(self, lst.name, lst.security_protocol)  # noqa: E731
            server = await asyncio.get_running_loop().create_server(
                factory, listener.host or None, listener.port, reuse_address=True)
            self._servers.append(server)
            sock = server.sockets[0].getsockname()
            self.bound.append((sock[0], sock[1]))
        self.state.advertised_by_listener = self._advertised_endpoints()
        self.state.advertised = next(iter(self.state.advertised_by_listener.values()))
        self._tasks.append(asyncio.create_task(self._retention_loop(), name="retention"))
        self._tasks.append(asyncio.create_task(self._flush_loop(), name="flush"))
        self._tasks.append(asyncio.create_task(self.connection_limits.run_idle_sweep(self.connections),
                                               name="idle-connections"))
        self._tasks.append(asyncio.create_task(self.disk_space.run(lambda: self.failed_log_dir is not None),
                                               name="free-space"))
        await self.share_coordinator.load()
        self.share_groups.load()
        self.classic_groups.load()
        self.consumer_groups.load()
        self.consumer_offsets.load()
        await self.transactions.load()
        self.log_cleaner = LogCleanerService(self)
        self.log_cleaner.start()
        self._loaded.set()
        log.info(
            "quafka broker %d (cluster %s) listening on %s, data in %s",
            self.state.node_id, self.state.metadata.cluster_id,
            ", ".join(f"{lst.security_protocol} {h}:{p}" for lst, (h, p) in zip(self.config.listeners, self.bound)),
            self.config.log_dir,
        )
        log.info("security: %s", security_summary(self.config, self.authorizer is not None))

    async def _start_metrics(self) -> None:
        try:
            endpoint = parse_metrics_listener(str(self.config.get("metrics.listener") or ""))
        except KeyError:
            endpoint = None
        if endpoint is None:
            return
        metrics_server = MetricsServer(self)
        try:
            await metrics_server.start(*endpoint)
        except OSError as exc:
            raise OSError(exc.errno, f"metrics.listener: cannot listen on {endpoint[0]}:{endpoint[1]}: "
                                     f"{exc.strerror or exc}") from exc
        self.metrics_server = metrics_server

    @property
    def metrics_port(self) -> int | None:
        """The bound port of the metrics listener (None when metrics.listener is empty)."""
        return self.metrics_server.port if self.metrics_server is not None else None

    def _build_tls(self) -> None:
        """The SSLContext of each SSL/SASL_SSL listener (tls.py); raises ConfigError naming the key
        of a store that does not load."""
        timeout_ms = int(self.config.get("quafka.ssl.handshake.timeout.ms"))
        by_name = {lst.name: lst for lst in self.config.listeners}
        self.tls_listeners = {name: TlsListener(self, by_name[name], ctx, rules, timeout_ms)
                              for name, (ctx, rules) in listener_contexts(self.config).items()}

    def _advertised_endpoints(self) -> dict[str, tuple[str, int]]:
        """Each listener's advertised endpoint, by listener name, in advertised order (Kafka's
        Metadata answers a request with the endpoints of the listener it came in on). A listener
        that advertised.listeners leaves out is advertised at its bound address."""
        bound = {lst.name: self.bound[i] for i, lst in enumerate(self.config.listeners)}
        out: dict[str, tuple[str, int]] = {}
        for lst in self.config.advertised_listeners:
            bound_host, bound_port = bound.get(lst.name, self.bound[0])
            host, port = lst.host, lst.port
            if port == 0:
                port = bound_port
            if not host or host in ("0.0.0.0", "::"):
                host = "127.0.0.1" if bound_host in ("0.0.0.0", "::", "") else bound_host
            out[lst.name] = (host, port)
        for name, (host, port) in bound.items():
            if name not in out:
                out[name] = ("127.0.0.1" if host in ("0.0.0.0", "::", "") else host, port)
        return out

    @property
    def coordinators_loaded(self) -> bool:
        """The share coordinator and the group coordinator have replayed their internal topics."""
        return self._loaded.is_set()

    async def wait_loaded(self) -> None:
        await self._loaded.wait()

    # ------------------------------------------------------------------ share sessions
    def _on_topic_event(self, event: str, topic_name: str) -> None:
        if event == "deleted":
            live = {t.topic_id for t in self.state.topics.values()}
            for topic_id in {c.topic_id for c in self.share_partitions.contexts.values()} - live:
                self.share_partitions.drop_topic(topic_id)
            self.disk_space.recheck()  # its segments are gone: produces may resume at once

    def close_share_session(self, group_id: str, member_id: str) -> None:
        """Close a member's share session and release every record it holds in the group."""
        session = self.share_sessions.close(group_id, member_id)
        if session is not None:
            self.share_partitions.session_ended(session)
        self.share_partitions.release_member(group_id, member_id)

    def on_connection_closed(self, connection: object) -> None:
        """A dropped connection closes its share sessions and releases their records at once —
        called as soon as the connection is seen to close, even while one of its requests is still
        in flight (Kafka's `ShareSessionCache.ClientConnectionDisconnectListener`): a parked
        ShareFetch of the session is woken with nothing instead of acquiring for a client that has
        gone, and records a completed fetch acquired but never sent go back undelivered
        (`SharePartitionManager.session_ended`)."""
        if self._stopping:
            return
        for session in self.share_sessions.remove_connection(connection):
            self.share_partitions.session_ended(session)
            self.share_partitions.release_member(session.group_id, session.member_id)

    # ------------------------------------------------------------------ a failed log directory
    def on_log_dir_failure(self, health: LogDirHealth) -> None:
        """A storage call failed (ENOSPC, EIO, a read-only or vanished directory): the log
        directory is offline, its partitions answer KAFKA_STORAGE_ERROR and the coordinators
        NOT_COORDINATOR (Kafka's CoordinatorOperationExceptionHelper). quafka has one log
        directory, which also holds the metadata, so — as Kafka's ReplicaManager.handleLogDirFailure
        halts a broker whose metadata log directory (or last log directory) failed — the broker
        stops: the request that hit the failure is answered first, then the listeners close.
        Nothing is written to the directory again; the next start recovers it like after a
        crash, once the disk is healthy."""
        self.failed_log_dir = health
        self.metrics.log_dir_failures += 1
        log.error("log directory %s failed (%s: %s); it is offline and the broker is stopping, as Kafka stops "
                  "when its last log directory fails. Fix the disk and start the broker again: it recovers "
                  "the directory as after a crash.", health.path, health.where, health.failure)
        if self._halting is None and not self._stopping:
            try:
                self._halting = asyncio.get_running_loop().create_task(self.stop(), name="halt")
            except RuntimeError:  # not on the loop (start-up): the caller's exception stops it
                pass

    async def _let_requests_answer(self, timeout_s: float) -> None:
        """Before a halt cancels the connections: let the requests being served (the one that met
        the failure among them) write their answers — errors, by now — for at most `timeout_s`."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.requests_in_flight > 0 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.005)

    @property
    def halted(self) -> bool:
        """The broker stopped because its log directory failed (`quafka broker` exits with 1)."""
        return self.failed_log_dir is not None

    async def stop(self) -> None:
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        if self.failed_log_dir is not None:  # halting: no new connections; answer what is in flight
            for server in self._servers:
                server.close()
            await self._let_requests_answer(HALT_DRAIN_S)
        self.timers.close()
        self.share_partitions.close()
        await self._close_services()
        in_flight = [task for task in (c.abort() for c in list(self.connections)) if task is not None]
        for tls in self.tls_listeners.values():
            in_flight += tls.close()
        await asyncio.gather(*self._tasks, *in_flight, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        await self.flusher.close()
        self.state.close()
        self._stopped.set()
        log.info("quafka broker %d stopped", self.state.node_id)

    async def _close_services(self) -> None:
        """The coordinators' background work, the listeners, the metrics listener and the
        background tasks (cancelled; the caller gathers them)."""
        if self.share_groups is not None:
            self.share_groups.close()
        if self.consumer_offsets is not None:
            self.consumer_offsets.close()
        if self.classic_groups is not None:
            self.classic_groups.close()
        if self.consumer_groups is not None:
            self.consumer_groups.close()
        if self.log_cleaner is not None:
            await self.log_cleaner.close()
        if self.share_coordinator is not None:
            await self.share_coordinator.close()
        if self.transactions is not None:
            await self.transactions.close()
        for server in self._servers:
            server.close()
        if self.metrics_server is not None:
            await self.metrics_server.close()
        for task in self._tasks:
            task.cancel()

    @staticmethod
    def loop_time_ms() -> float:
        return asyncio.get_running_loop().time() * 1000.0

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    # ------------------------------------------------------------------ background work
    async def _retention_loop(self) -> None:
        while True:
            interval_ms = int(self.state.config.get("log.retention.check.interval.ms"))
            await asyncio.sleep(interval_ms / 1000.0)
            now_ms = wall_clock_ms()
            deleted = False
            for topic in list(self.state.topics.values()):
                for part in topic.partitions:
                    try:
                        deleted = part.log.enforce_retention(now_ms) or deleted
                    except Exception:
                        log.exception("retention check failed for %s-%d", topic.name, part.index)
            if deleted:
                self.disk_space.recheck()

    async def _flush_loop(self) -> None:
        """Start the flushes that flush.ms makes due (on the flusher's worker). A failure here is
        a storage failure like any other (the flusher logged it, counted it and took the log
        directory offline); anything else is logged and counted, and the loop goes on."""
        while True:
            interval_ms = min(
                int(self.state.config.get("log.flush.scheduler.interval.ms")),
                self._smallest_flush_ms(),
                1000,
            )
            await asyncio.sleep(max(interval_ms, 10) / 1000.0)
            if self.failed_log_dir is not None:
                return
            try:
                now_ms = wall_clock_ms()
                for topic in list(self.state.topics.values()):
                    for part in topic.partitions:
                        if part.log.flush_due(now_ms):
                            self.flusher.flush_in_background(part.log)
            except OSError:
                pass  # begin_flush failed: the directory is offline (on_log_dir_failure)
            except Exception:
                self.metrics.flush_loop_errors += 1
                log.exception("the flush scheduler failed; it goes on at its next interval")

    def _smallest_flush_ms(self) -> int:
        smallest = 2**63 - 1
        for topic in self.state.topics.values():
            if topic.partitions:
                smallest = min(smallest, topic.partitions[0].log.config.flush_ms)
        return smallest
