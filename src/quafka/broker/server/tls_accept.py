"""The TLS handshake of a connection accepted on an SSL or SASL_SSL listener (see server/tls.py
for the contexts and the principal).

`TlsAcceptor` is the listener's protocol for the plain TCP connection: it runs `loop.start_tls` in
a task bounded by `quafka.ssl.handshake.timeout.ms`, and on success hands the TLS transport to a
`BrokerConnection` whose session carries the certificate's principal on an SSL listener (on
SASL_SSL the SASL exchange sets it, and the certificate plays no part in it). Bytes decrypted before the
handover (a client's first request may come in the same flight as its Finished message) are
buffered and replayed. A failure is logged at INFO with the peer, the listener and the reason, and
counted (`BrokerMetrics.tls_handshake_failures`); only that connection closes.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING

from .connection import BrokerConnection, _Resume
from .tls import NoMatchingRule, peer_principal_name

if TYPE_CHECKING:
    from quafka.broker.config import Listener

log = logging.getLogger("quafka.tls")


class _Buffer(asyncio.Protocol):
    """The application protocol during the handshake: keeps what arrives until the handover."""

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.eof = False
        self.lost: tuple[Exception | None] | None = None

    def data_received(self, data: bytes) -> None:
        self.data.append(bytes(data))

    def eof_received(self) -> bool:
        self.eof = True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = (exc,)


class TlsListener:
    """One SSL/SASL_SSL listener's context, rules and handshakes in progress."""

    def __init__(self, server, listener: "Listener", context: ssl.SSLContext, rules: tuple,
                 handshake_timeout_ms: int) -> None:
        self.server = server
        self.listener = listener
        self.context = context
        self.rules = rules
        self.timeout_s = handshake_timeout_ms / 1000.0
        self.handshakes: set[asyncio.Task] = set()

    def protocol(self) -> "TlsAcceptor":
        return TlsAcceptor(self)

    def close(self) -> list[asyncio.Task]:
        """The broker is stopping: cancel the handshakes in progress (the tasks to await)."""
        tasks = list(self.handshakes)
        for task in tasks:
            task.cancel()
        return tasks

    def failed(self, peer: str, reason: str, detail: str) -> None:
        metrics = self.server.metrics
        key = (self.listener.name, reason)
        metrics.tls_handshake_failures[key] = metrics.tls_handshake_failures.get(key, 0) + 1
        log.info("TLS handshake with %s on listener %s failed: %s", peer, self.listener.name, detail)


class TlsAcceptor(asyncio.Protocol):
    def __init__(self, tls: TlsListener) -> None:
        self.tls = tls
        self.peer = "?"
        self.host = "?"
        self.limits = None  # the connection limits this connection is counted in, until handed over

    def connection_made(self, transport) -> None:
        peername = transport.get_extra_info("peername")
        self.peer = f"{peername[0]}:{peername[1]}" if isinstance(peername, tuple) else str(peername)
        self.host = str(peername[0]) if isinstance(peername, tuple) else str(peername)
        # counted against the connection limits now, before the handshake (Kafka's Acceptor)
        limits = getattr(self.tls.server, "connection_limits", None)
        if limits is not None and not limits.try_open(self.peer, self.host, self.tls.listener.name):
            transport.abort()
            return
        self.limits = limits
        # Run the handshake coroutine up to its first wait right here: start_tls swaps the
        # transport's protocol for its TLS protocol before it waits, so no byte the client sends
        # can reach this plain protocol (with a task, uvloop may deliver the ClientHello first).
        coro = self._handshake(transport)
        try:
            first = coro.send(None)
        except StopIteration:
            return
        task = asyncio.get_running_loop().create_task(_finish(coro, first), name=f"tls {self.peer}")
        self.tls.handshakes.add(task)
        task.add_done_callback(self.tls.handshakes.discard)

    def data_received(self, data: bytes) -> None:  # never called: start_tls took the transport over
        log.error("TLS listener %s: %d bytes from %s reached the plain protocol; closing", self.tls.listener.name,
                  len(data), self.peer)

    def connection_lost(self, exc: Exception | None) -> None:
        pass  # start_tls sees it and fails

    async def _handshake(self, transport) -> None:
        handed_over = False
        try:
            handed_over = await self._handshake_and_hand_over(transport)
        finally:
            if not handed_over and self.limits is not None:
                self.limits.release(self.host, self.tls.listener.name)

    async def _handshake_and_hand_over(self, transport) -> bool:
        """The handshake; True once a BrokerConnection owns the connection (and its count)."""
        tls = self.tls
        buffer = _Buffer()
        try:
            tls_transport = await asyncio.get_running_loop().start_tls(
                transport, buffer, tls.context, server_side=True, ssl_handshake_timeout=tls.timeout_s)
        except asyncio.CancelledError:
            transport.abort()
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is this connection's alone: logged, counted
            transport.abort()
            reason, detail = _classify(exc, tls.timeout_s)
            tls.failed(self.peer, reason, detail)
            return False
        if tls_transport is None:  # the peer went away as the handshake ended
            transport.abort()
            tls.failed(self.peer, "connection_closed", "the client closed the connection")
            return False
        ssl_object = tls_transport.get_extra_info("ssl_object")
        listener = tls.listener
        principal = None
        if listener.security_protocol != "SASL_SSL":
            try:
                principal = peer_principal_name(ssl_object, tls.rules)
            except NoMatchingRule as exc:
                tls_transport.abort()
                tls.failed(self.peer, "principal_mapping", f"ssl.principal.mapping.rules: {exc}")
                return False
            except ValueError as exc:
                tls_transport.abort()
                tls.failed(self.peer, "bad_certificate", f"the client certificate does not parse: {exc}")
                return False
        # on SASL_SSL the principal is the SASL authorization id, set once SaslAuthenticate succeeds
        # (SaslServerAuthenticator builds it from a SaslAuthenticationContext, for which
        # DefaultKafkaPrincipalBuilder.build neither reads the certificate nor applies the mapping rules)
        conn = BrokerConnection(tls.server, listener.name, listener.security_protocol)
        if principal is not None:
            conn.session.principal_name = principal
        conn.counted = self.limits is not None  # its close releases the count taken at accept
        metrics = tls.server.metrics
        metrics.tls_handshakes[listener.name] = metrics.tls_handshakes.get(listener.name, 0) + 1
        if log.isEnabledFor(logging.DEBUG):
            cipher = ssl_object.cipher() if ssl_object is not None else None
            log.debug("TLS connection from %s on listener %s: %s %s, principal %s", self.peer, listener.name,
                      ssl_object.version() if ssl_object is not None else "?", cipher[0] if cipher else "?",
                      conn.session.principal)
        tls_transport.set_protocol(conn)
        conn.connection_made(tls_transport)
        for data in buffer.data:
            conn.data_received(data)
        if buffer.lost is not None:
            conn.connection_lost(buffer.lost[0])
        elif buffer.eof:
            conn.eof_received()
            tls_transport.close()
        return True


async def _finish(coro, first) -> None:
    await _Resume(coro, first)


def _classify(exc: BaseException, timeout_s: float) -> tuple[str, str]:
    """(a metric label, a log detail) for a failed handshake."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        message = exc.verify_message or str(exc)
        reason = "expired_certificate" if "expired" in message else "untrusted_certificate"
        return reason, f"the client certificate was refused: {message}"
    if isinstance(exc, ssl.SSLError):
        code = (exc.reason or type(exc).__name__).lower()
        if code == "peer_did_not_return_a_certificate":
            return "no_client_certificate", "the client sent no certificate and ssl.client.auth=required"
        if "alert" in code:
            return code, f"the client ended the handshake with an alert ({exc.reason}): it did not accept the " \
                         "broker's certificate or parameters"
        return code, f"{exc.reason or exc} (not a TLS client, or no protocol or cipher suite in common?)"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or (
            isinstance(exc, ConnectionAbortedError) and "longer than" in str(exc)):
        return "timeout", f"no complete handshake within {timeout_s:g} s (quafka.ssl.handshake.timeout.ms)"
    if isinstance(exc, (ConnectionError, EOFError)):
        return "connection_closed", f"the client closed the connection during the handshake ({type(exc).__name__})"
    return type(exc).__name__.lower(), f"{type(exc).__name__}: {exc}"
