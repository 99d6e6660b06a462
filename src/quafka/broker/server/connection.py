"""One client connection: read frames, dispatch to handlers, write responses in request order.

Requests on one connection are served one at a time, as Kafka does (it mutes a channel until its
response is sent), so responses leave in request order. Bad input closes only this connection:

- a size prefix below 8 bytes or above `socket.request.max.bytes`;
- an API key or version that was not advertised (ApiVersions above the served range gets the v0
  UNSUPPORTED_VERSION reply instead, so the client can retry with a version we serve);
- a body that does not decode.

Each such close is logged with the peer, the API key and the version.

The connection is an `asyncio.Protocol`, not a stream reader and a task: frames are cut from the
bytes as they arrive, and a handler is first run right there, inside `data_received`. Most
requests (a produce, an acknowledgement, a fetch that finds records) complete without waiting for
anything, so they are answered without a task, a future or a trip through the event loop — on
the job-queue path, where every job is its own request, that per-request machinery was a large
part of the broker's CPU (docs/benchmarks.md, "One job, one request"). A handler that does wait
(a parked ShareFetch, a write waiting for its fsync) is finished in a task from where it stopped
(`_Resume`), and the connection reads no further request until it has answered. Bytes that arrive
meanwhile are buffered; past `READ_HIGH_WATER_BYTES` the transport stops reading, and while the
transport's write buffer is above `WRITE_HIGH_WATER_BYTES` no request is served (Kafka's muted
channel), so a client that does not read its responses cannot grow the broker's memory.

A closed connection closes the member's share sessions (`BrokerServer.on_connection_closed`) the
moment it is seen to close — the end of the stream read (`eof_received`: a client that shuts its
side down has gone, as Kafka's Selector closes a channel whose read returns -1) or the transport
lost — even while a request of it is in flight, as Kafka's SocketServer calls its
`ConnectionDisconnectListener`s: a parked ShareFetch then answers empty instead of acquiring
records for a client that cannot receive them. The handler in flight is never cancelled (its
state write must complete); once it has finished, the connection's sessions are swept once more,
in case it opened one after the close.

Quotas and limits (server/quotas.py, server/connection_limits.py): a connection past
max.connections, listener.name.<listener>.max.connections or max.connections.per.ip is closed as
soon as it is accepted; one that sends nothing for connections.max.idle.ms is closed by the
limits' sweep. A response whose request broke a client quota carries the throttle time, and the
connection is then muted — it reads and serves nothing more — for that long (Kafka's
`ClientQuotaManager.throttle` muting the channel); when no quota is configured the only cost is
one attribute check per response.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from time import perf_counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from quafka.protocol.errors import ProtocolError
from quafka.protocol.framing import api_versions_fallback_response, decode_request, encode_response, peek_header

from ._services import BrokerServices
from .metrics import api_name
from .sasl_authenticator import SaslAuthenticator
from .session import ClientSession

if TYPE_CHECKING:
    from quafka.broker.core.share_session import ShareSessionCache
    from quafka.broker.storage import LogDirHealth

    from .registry import HandlerSpec

log = logging.getLogger("quafka.connection")
# Kafka's kafka.request.logger: at DEBUG, one line per answered request with its principal
request_log = logging.getLogger("quafka.request")

API_VERSIONS_KEY = 18
_SIZE = struct.Struct(">i")
WRITE_HIGH_WATER_BYTES = 4 * 1024 * 1024
READ_HIGH_WATER_BYTES = 4 * 1024 * 1024


class CloseConnection(Exception):
    """Raised by a handler that has done its work but must close the connection (logged)."""


class RequestBroker(BrokerServices, Protocol):
    """The broker as a connection and the request handlers (through `RequestContext.server`) see it.
    The services are typed loosely: the handlers sit between this module and them (the dead-letter
    writer produces through handlers/produce.py, which imports this module), so naming their classes
    here would close an import cycle."""

    registry: dict[int, HandlerSpec]
    advertised_ranges: list[tuple[int, int, int]]
    connections: set[BrokerConnection]
    requests_in_flight: int
    unserved_requests_logged: set[tuple]
    failed_log_dir: LogDirHealth | None
    share_sessions: ShareSessionCache
    purgatory: Any  # server.FetchPurgatory
    share_partitions: Any  # share_partitions.SharePartitionManager
    share_coordinator: Any  # share_coordinator.ShareCoordinatorService | None
    share_groups: Any  # share_groups.ShareGroupService | None
    consumer_offsets: Any  # consumer_offsets.ConsumerOffsetsService | None
    classic_groups: Any  # classic_groups.ClassicGroupService | None
    consumer_groups: Any  # consumer_groups.ConsumerGroupService | None
    authorizer: Any  # authorization.py: None, or an authorizer with authorize(session, op, type, name)
    sasl: Any  # sasl_authenticator.SaslService

    @property
    def coordinators_loaded(self) -> bool: ...

    async def wait_loaded(self) -> None: ...

    def close_share_session(self, group_id: str, member_id: str) -> None: ...

    def on_connection_closed(self, connection: object) -> None: ...

    def loop_time_ms(self) -> float: ...


@dataclass(slots=True)
class RequestContext:
    server: "RequestBroker"
    peer: str
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header: Any
    connection: object = None  # identifies the connection (share sessions are tied to it)
    session: ClientSession = None  # type: ignore[assignment]  # listener, protocol and principal
    request_bytes: int = 0  # the request's size (producer_byte_rate counts it)
    throttle_ms: int = 0  # set by a handler whose bandwidth quota throttles the response (quotas.py)
    busy_ms: float = -1.0  # time served before the handler's first wait (-1: it did not wait)


class _Resume:
    """Await a handler coroutine that has already run up to its first wait (`first`, what it
    yielded): a task running `await _Resume(coro, first)` hands `first` and each later yield to the
    event loop as if it ran the coroutine itself, sends the results back in, throws cancellation
    in, and returns the coroutine's return value."""

    __slots__ = ("coro", "first")

    def __init__(self, coro, first) -> None:
        self.coro = coro
        self.first = first

    def __await__(self):
        coro, value = self.coro, self.first
        self.first = None
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - thrown in by the task (cancellation): pass it on
                try:
                    value = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


class BrokerConnection(asyncio.Protocol):
    """One client connection (see the module docstring)."""

    def __init__(self, server: "RequestBroker", listener_name: str = "PLAINTEXT",
                 security_protocol: str = "PLAINTEXT") -> None:
        self.server = server
        self.session = ClientSession(listener_name, security_protocol,
                                     authenticated=not security_protocol.startswith("SASL_"))
        self.registry = server.registry
        self.max_request_bytes = int(server.state.config.get("socket.request.max.bytes"))
        self.max_request_key = "socket.request.max.bytes"
        # SASL listeners: requests pass the authenticator's gate (sasl_authenticator.py) until the connection
        # has authenticated for good; None on other listeners, so the gate costs one attribute read
        self.sasl: SaslAuthenticator | None = None
        if security_protocol.startswith("SASL_"):
            self.sasl = self.session.authenticator = SaslAuthenticator(self, server)
            self.max_request_bytes = int(server.state.config.get("sasl.server.max.receive.size"))
            self.max_request_key = "sasl.server.max.receive.size, before authentication"
        self.observe = server.metrics.observe_request
        self.by_principal = server.metrics.requests_by_principal
        # read once per connection (the hot path pays one attribute test): a level set later
        # applies to connections opened after it
        self.log_requests = request_log.isEnabledFor(logging.DEBUG)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.token = object()  # RequestContext.connection: share sessions are tied to it
        self.software = ""  # the client's software name and version, from its ApiVersions (v3+)
        self.buffer = bytearray()
        self.task: asyncio.Task | None = None  # the request in flight, when its handler waits
        self.closing = False  # no more requests are served (bad input, lost, or the broker stopping)
        self.lost = False
        self.write_paused = False
        self.read_paused = False
        self.gone = False  # on_connection_closed has run
        self.quotas = getattr(server, "quotas", None) or _NO_QUOTAS
        self.muted = False  # throttled by a client quota: nothing is read or served until unmuted
        self.idle_ticks = 0  # sweeps of the connection limits since bytes last arrived
        self.refused = False  # closed on accept by a connection limit (never counted as open)
        self.counted = False  # counted in by the connection limits (tls_accept.py counts before the handshake)

    # ------------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport) -> None:  # uvloop's transports are not asyncio.Transport subclasses
        self.transport = transport
        peername = transport.get_extra_info("peername")
        self.peer = f"{peername[0]}:{peername[1]}" if isinstance(peername, tuple) else str(peername)
        self.session.client_host = str(peername[0]) if isinstance(peername, tuple) else str(peername)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER_BYTES)
        limits = getattr(self.server, "connection_limits", None)
        if limits is not None and not self.counted and not limits.try_open(
                self.peer, self.session.client_host, self.session.listener_name):
            self.refused = True
            self.closing = True
            self.gone = True
            transport.abort()
            return
        self.counted = limits is not None
        self.server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.idle_ticks = 0
        buffer = self.buffer
        if not buffer and self.task is None and not self.write_paused and not self.muted and len(data) >= 4:
            # the common case: the bytes hold whole frames and nothing waits before them
            size = _SIZE.unpack_from(data, 0)[0]
            if len(data) == 4 + size:
                if self._size_ok(size):
                    self._serve_frame(data[4:])
                return
        buffer += data
        self._serve_buffered()

    def eof_received(self) -> bool:
        self._disconnected()
        return False  # close the transport (connection_lost follows)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disconnected()

    def _disconnected(self) -> None:
        if self.lost:
            return
        self.lost = True
        self.closing = True
        self.buffer.clear()
        if self.task is None:
            self._gone()
        else:  # a request is in flight: its sessions end now, the sweep is repeated once it finishes
            self.server.on_connection_closed(self.token)

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.task is None:
            self._serve_buffered()

    # ------------------------------------------------------------------ serving
    def _size_ok(self, size: int) -> bool:
        if 8 <= size <= self.max_request_bytes:
            return True
        log.warning("closing connection from %s: request size %d is outside [8, %d] (%s)",
                    self.peer, size, self.max_request_bytes, self.max_request_key)
        self.close()
        return False

    def _serve_buffered(self) -> None:
        """Serve the buffered frames, one at a time, until one waits, the writes back up or the
        buffer holds no whole frame."""
        buffer = self.buffer
        pos = 0
        try:
            while not self.closing and self.task is None and not self.write_paused and not self.muted:
                if len(buffer) - pos < 4:
                    break
                size = _SIZE.unpack_from(buffer, pos)[0]
                if not self._size_ok(size):
                    return
                end = pos + 4 + size
                if len(buffer) < end:
                    break
                frame = bytes(buffer[pos + 4:end])
                pos = end
                self._serve_frame(frame)
        finally:
            if pos and not self.lost:
                del buffer[:pos]
        self._flow_control()

    def _flow_control(self) -> None:
        """Stop reading while the client does not read its answers, or while a request waits and
        the bytes behind it pile up; read again once they are served. A connection that is not
        busy always reads: the buffer then holds only the start of the next request, which may be
        as large as socket.request.max.bytes and must arrive whole."""
        transport = self.transport
        if transport is None or self.lost:
            return
        backlog = self.write_paused or self.muted or (self.task is not None
                                                     and len(self.buffer) > READ_HIGH_WATER_BYTES)
        if backlog and not self.read_paused:
            self.read_paused = True
            transport.pause_reading()
        elif not backlog and self.read_paused:
            self.read_paused = False
            transport.resume_reading()

    def on_authenticated(self) -> None:
        """The SASL exchange succeeded: requests may be as large as any client's."""
        self.max_request_bytes = int(self.server.state.config.get("socket.request.max.bytes"))
        self.max_request_key = "socket.request.max.bytes"

    def _serve_frame(self, frame: bytes) -> None:
        if self.sasl is not None and self.sasl.gate(frame):
            return
        started = perf_counter()
        server = self.server
        api_key, api_version, correlation_id = peek_header(frame)
        spec = self.registry.get(api_key)
        if spec is None or not spec.min_version <= api_version <= spec.max_version:
            if api_key == API_VERSIONS_KEY and spec is not None and api_version > spec.max_version:
                self.transport.write(api_versions_fallback_response(correlation_id, server.advertised_ranges))
                return
            _log_unserved(server, self.peer, frame, api_key, api_version, spec is None, self.software)
            self.close()
            return
        try:
            header, body = decode_request(frame)
        except ProtocolError as exc:
            log.warning("closing connection from %s: malformed request (API key %d version %d): %s",
                        self.peer, api_key, api_version, exc)
            self.close()
            return
        ctx = RequestContext(server, self.peer, api_key, api_version, correlation_id,
                             getattr(header, "client_id", None), header, self.token, self.session, len(frame))
        if api_key == API_VERSIONS_KEY and getattr(body, "client_software_name", None):
            self.software = f"{body.client_software_name} {body.client_software_version}"
        server.requests_in_flight += 1
        coro = spec.handler(ctx, body)
        try:
            first = coro.send(None)
        except StopIteration as stop:
            server.requests_in_flight -= 1
            self._answer(ctx, stop.value, started)
            return
        except BaseException as exc:
            server.requests_in_flight -= 1
            if not isinstance(exc, Exception):
                raise
            self._failed(ctx, exc)
            return
        ctx.busy_ms = (perf_counter() - started) * 1000.0
        self.task = asyncio.get_running_loop().create_task(self._finish(ctx, coro, first, started))

    async def _finish(self, ctx: RequestContext, coro, first, started: float) -> None:
        """The rest of a handler that waits: answer it, then serve what arrived meanwhile."""
        try:
            try:
                response = await _Resume(coro, first)
            finally:
                self.server.requests_in_flight -= 1
        except asyncio.CancelledError:  # the broker is stopping
            self.task = None
            self.close()
            if self.lost:
                self._gone()
            raise
        except Exception as exc:  # noqa: BLE001 - logged, the connection closed
            self.task = None
            self._failed(ctx, exc)
        else:
            self.task = None
            self._answer(ctx, response, started)
        if self.lost:
            self._gone()
        elif self.buffer:
            self._serve_buffered()
        else:
            self._flow_control()

    def _answer(self, ctx: RequestContext, response: Any, started: float) -> None:
        throttle_ms = 0
        if self.quotas.active:
            response, throttle_ms = self.quotas.on_response(ctx, response, started)
        if response is not None:
            if not isinstance(response, (bytes, bytearray)):
                try:
                    response = encode_response(ctx.correlation_id, response)
                except Exception:  # noqa: BLE001 - a response we cannot encode: logged, connection closed
                    log.exception("closing connection from %s: the response to API key %d version %d does not "
                                  "encode", self.peer, ctx.api_key, ctx.api_version)
                    self.close()
                    return
            if not self.lost:
                self.transport.write(response)
        elapsed_ms = (perf_counter() - started) * 1000.0
        self.observe(ctx.api_key, ctx.api_version, elapsed_ms)
        session = self.session
        key = (session.principal_type, session.principal_name, session.listener_name, ctx.api_key)
        by_principal = self.by_principal
        by_principal[key] = by_principal.get(key, 0) + 1
        if self.log_requests:
            request_log.debug("Completed request: %s v%d correlation_id=%d client_id=%r principal=%s listener=%s "
                              "(%s) from %s in %.3f ms, throttle %d ms", api_name(ctx.api_key), ctx.api_version,
                              ctx.correlation_id, ctx.client_id, session.principal, session.listener_name,
                              session.security_protocol, self.peer, elapsed_ms, throttle_ms)
        if throttle_ms > 0 and not self.lost:
            self._mute(throttle_ms)

    def _mute(self, throttle_ms: int) -> None:
        """Read and serve nothing from this client for `throttle_ms` (its response is sent)."""
        self.muted = True
        self._flow_control()
        asyncio.get_running_loop().call_later(throttle_ms / 1000.0, self._unmute)

    def _unmute(self) -> None:
        self.muted = False
        if self.lost or self.closing:
            return
        if self.task is None:
            self._serve_buffered()
        else:
            self._flow_control()

    def _failed(self, ctx: RequestContext, exc: Exception) -> None:
        if isinstance(exc, ProtocolError):
            log.warning("closing connection from %s: invalid request (API key %d version %d): %s",
                        self.peer, ctx.api_key, ctx.api_version, exc)
        elif isinstance(exc, CloseConnection):
            log.info("closing connection from %s after API key %d version %d: %s",
                     self.peer, ctx.api_key, ctx.api_version, exc)
        else:
            log.error("closing connection from %s after an internal error (API key %d version %d)",
                      self.peer, ctx.api_key, ctx.api_version, exc_info=exc)
        self.close()

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Serve nothing more; the transport sends what it holds, then closes (connection_lost)."""
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> asyncio.Task | None:
        """The broker is stopping: cancel the request in flight and close; the task to await."""
        task = self.task
        if task is not None:
            task.cancel()
        self.close()
        return task

    def _gone(self) -> None:
        if self.gone:
            return
        self.gone = True
        self.server.connections.discard(self)
        limits = getattr(self.server, "connection_limits", None)
        if limits is not None:
            if self.counted:
                limits.release(self.session.client_host, self.session.listener_name)
        self.server.on_connection_closed(self.token)


class _NoQuotas:
    active = False


_NO_QUOTAS = _NoQuotas()


def _log_unserved(server: "RequestBroker", peer: str, frame: bytes, api_key: int, api_version: int,
                  unknown_key: bool, software: str) -> None:
    """A request for an API (or a version) this broker does not serve closes the connection, as
    Kafka does; the first one per client and API is logged as a warning naming the API, the client
    id and its software (from ApiVersions), so that a user sees why that client gets nothing. Later
    ones are logged at debug level."""
    client_id = _client_id(frame)
    key = (client_id, software, api_key)
    seen = server.unserved_requests_logged
    level = logging.DEBUG if key in seen else logging.WARNING
    if len(seen) < 10_000:
        seen.add(key)
    served = server.registry.get(api_key)
    what = f"{api_name(api_key)} (API key {api_key} version {api_version})"
    what += (", an API this broker does not serve" if unknown_key else
             f", a version this broker does not serve (it serves {served.min_version}-{served.max_version})")
    log.log(level, "closing connection from %s: client %r (%s) sent %s",
            peer, client_id, software or "software not given", what)


def _client_id(frame: bytes) -> str | None:
    """The client id of a request header (v1+: after key, version and correlation id, an int16
    length and the bytes); None when absent or unreadable."""
    if len(frame) < 10:
        return None
    length = struct.unpack_from(">h", frame, 8)[0]
    if length < 0 or 10 + length > len(frame):
        return None
    return frame[10:10 + length].decode("utf-8", "replace")
