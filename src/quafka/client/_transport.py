"""The asyncio transport: one TCP connection to one broker, on top of the sans-I/O WireConnection.

``BrokerConnection.connect()`` opens the socket and negotiates versions with ApiVersions (v3,
falling back to v0 when the broker answers UNSUPPORTED_VERSION). ``request(entity)`` pipelines:
any number of requests may be in flight; a reader task feeds received bytes to the wire core and
resolves each request's future by correlation id. When the connection drops (EOF, socket error,
undecodable bytes) every pending request fails with a retriable KafkaConnectionError naming the
broker; a request that outlives ``request_timeout`` fails with KafkaTimeoutError and the
connection is closed (its answer could otherwise never be told apart), as Kafka's clients do.

To send a request at the best version: ``version = conn.version_for(api_key, min_version,
max_version)`` (the highest both the broker and kio support, within the caller's range), then
``await conn.request(build_entity(request_class(api_key, version), values))``; or in one step
``await conn.call(api_key, values, min_version=..., max_version=...)``.

Security (`_security.SecuritySettings`): with TLS the socket is wrapped by the given
``ssl.SSLContext`` (the broker's host name checked unless ssl.endpoint.identification.algorithm is
none); with SASL the connection authenticates after ApiVersions (`_sasl`) before ``connect()``
returns. A TLS handshake failure raises SslAuthenticationException (so does a TLS 1.3 connection
that the broker ends before its first answer: how a listener with ssl.client.auth=required refuses
a client without a certificate, the client's side of the handshake having completed) and a refused SASL
authentication SaslAuthenticationException: neither is retriable (Kafka's clients stop on an
AuthenticationException rather than reconnect). When the broker gives the SASL session a lifetime
(KIP-368), the connection re-authenticates on the first request after a random 85-95% of it, as
Kafka's ``SaslClientAuthenticator.ReauthInfo`` picks the moment: requests already in flight are
answered first, new ones wait for the re-authentication. A failure to connect is logged at INFO:
the exception raised to the caller carries the same message (a tool prints it as its one line of
error); a TLS or re-authentication failure of an open connection is logged at WARNING.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from quafka.protocol.errors import ErrorCode
from quafka.protocol.share_request_encoders import SHARE_FETCH_REQUEST_VERSIONS, encode_share_fetch_request

from ._sasl import authenticate
from ._security import PLAINTEXT, SecuritySettings
from ._wire import API_VERSIONS_KEY, WireConnection, WireError, api_name, build_entity, kio_version_range, request_class
from .errors import (
    AuthenticationException,
    KafkaConnectionError,
    KafkaException,
    KafkaTimeoutError,
    SslAuthenticationException,
    error_for_code,
)

SHARE_FETCH_KEY = 78

__all__ = ["BrokerConnection", "CLIENT_SOFTWARE_NAME", "CLIENT_SOFTWARE_VERSION"]

CLIENT_SOFTWARE_NAME = "quafka-python"
CLIENT_SOFTWARE_VERSION = "0.1.0"
_READ_CHUNK_BYTES = 1 << 16
#: KIP-368 re-authentication moment: this share of the session lifetime plus up to _REAUTH_JITTER
#: more (Kafka's SaslClientAuthenticator.ReauthInfo: 85% + random 10%)
_REAUTH_AT, _REAUTH_JITTER = 0.85, 0.10

log = logging.getLogger(__name__)


def _tls_error(address: str, exc: BaseException) -> SslAuthenticationException:
    """A TLS failure as one line: the verification message when the broker's certificate was refused."""
    detail = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or str(exc) or type(exc).__name__
    if isinstance(exc, ssl.SSLCertVerificationError):
        what = f"the broker's certificate was refused: {detail}"
    else:
        what = f"{detail} (a broker that refuses the client's certificate, or a listener that is not SSL, " \
               "ends the handshake this way)"
    return SslAuthenticationException(f"TLS handshake with broker {address} failed: {what}")


def _refused_after_handshake(address: str, detail: str) -> SslAuthenticationException:
    """The broker ended a TLS 1.3 connection before its first answer: how a listener with
    ssl.client.auth=required refuses a client without an acceptable certificate (the client's
    side of a TLS 1.3 handshake completes before the broker checks the certificate)."""
    return SslAuthenticationException(
        f"TLS handshake with broker {address} failed: the broker {detail} right after the TLS 1.3 handshake, "
        "before answering any request: it refused the client's certificate (a listener with "
        "ssl.client.auth=required needs ssl.certificate.location and ssl.key.location, or ssl.keystore.location, "
        "signed by a CA the broker trusts)")


class BrokerConnection:
    """One connection to ``host:port``; ``node_id`` is informational (-1 for a bootstrap address)."""

    def __init__(self, host: str, port: int, client_id: str | None = "quafka", *, node_id: int = -1,
                 request_timeout: float = 30.0, connect_timeout: float | None = None,
                 security: SecuritySettings = PLAINTEXT, ssl_context: ssl.SSLContext | None = None) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.node_id = node_id
        self.request_timeout = request_timeout
        self.connect_timeout = request_timeout if connect_timeout is None else connect_timeout
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._wire = WireConnection(client_id)
        self._pending: dict[int, asyncio.Future] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task | None = None
        self._closed_error: KafkaException | None = None
        self._connected = False
        self._answered = False  # a response arrived (Kafka's SslTransportLayer: past POST_HANDSHAKE)
        self.security = security
        self._ssl_context = ssl_context
        if security.tls is not None and ssl_context is None:
            raise KafkaException(f"security.protocol={security.protocol} needs a TLS context")
        self._reauth_at: float | None = None  # time.monotonic() from which the next request re-authenticates
        self._reauth_task: asyncio.Task | None = None
        self.authentications = 0  # SASL authentications of this connection (re-authentications included)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __repr__(self) -> str:
        return f"BrokerConnection({self.address}, node_id={self.node_id})"

    @property
    def connected(self) -> bool:
        return self._connected and self._closed_error is None

    # ------------------------------------------------------------------ lifecycle

    async def connect(self) -> "BrokerConnection":
        """Open the connection and negotiate API versions. Raises KafkaConnectionError."""
        if self._connected:
            return self
        tls = {} if self.security.tls is None else {"ssl": self._ssl_context, "server_hostname": self.host,
                                                     "ssl_handshake_timeout": self.connect_timeout}
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, **tls), self.connect_timeout)
        except asyncio.TimeoutError:
            raise KafkaConnectionError(
                f"could not connect to broker {self.address}: no answer within {self.connect_timeout}s") from None
        except ssl.SSLError as exc:
            error = _tls_error(self.address, exc)
            log.info("%s", error.message)
            raise error from None
        except (ConnectionResetError, BrokenPipeError) as exc:
            if self.security.tls is None:
                raise KafkaConnectionError(f"could not connect to broker {self.address}: {exc}") from exc
            error = _tls_error(self.address, exc)
            log.info("%s", error.message)
            raise error from None
        except OSError as exc:
            raise KafkaConnectionError(f"could not connect to broker {self.address}: {exc}") from exc
        self._connected = True
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop(), name=f"quafka-read-{self.address}")
        try:
            await self._negotiate_versions()
            if self.security.sasl is not None:
                await self._authenticate()
        except AuthenticationException as exc:
            log.info("%s", exc.message)
            await self.close()
            raise
        except BaseException:
            await self.close()
            raise
        return self

    async def _authenticate(self) -> None:
        """SASL handshake and authentication (`_sasl`); schedules the KIP-368 re-authentication."""
        assert self.security.sasl is not None
        lifetime_ms = await authenticate(self.address, self.security.sasl, self.version_for, self._sasl_request)
        self.authentications += 1
        if lifetime_ms > 0:
            share = _REAUTH_AT + random.random() * _REAUTH_JITTER
            self._reauth_at = time.monotonic() + lifetime_ms * share / 1000
            log.debug("broker %s: SASL session lifetime %d ms, re-authenticating after %.0f ms",
                      self.address, lifetime_ms, lifetime_ms * share)
        else:
            self._reauth_at = None

    async def _sasl_request(self, entity: Any) -> Any:
        api_key, version = type(entity).__api_key__, type(entity).__version__
        return await self._request(api_key, version, lambda: self._wire.send(entity), None, gate=False)

    async def _reauthenticate(self) -> None:
        """Wait for the requests in flight, then authenticate again; a failure closes the connection."""
        in_flight = [f for f in self._pending.values() if not f.done()]
        if in_flight:
            await asyncio.wait(in_flight)
        try:
            await self._authenticate()
        except AuthenticationException as exc:
            log.warning("re-authentication failed, closing the connection: %s", exc.message)
            self._fail(exc)
            raise
        finally:
            self._reauth_task = None

    async def _negotiate_versions(self) -> None:
        response = await self.request(ApiVersionsRequest(client_software_name=CLIENT_SOFTWARE_NAME,
                                                         client_software_version=CLIENT_SOFTWARE_VERSION))
        if response.error_code == ErrorCode.unsupported_version:
            response = await self.request(ApiVersionsRequestV0())
        if response.error_code != ErrorCode.none:
            raise error_for_code(response.error_code, f"ApiVersions to broker {self.address}")
        self.api_versions = {a.api_key: (a.min_version, a.max_version) for a in response.api_keys}

    async def close(self) -> None:
        """Close the connection; pending requests fail with KafkaConnectionError."""
        self._fail(KafkaConnectionError(f"connection to broker {self.address} was closed by the client"))
        if self._read_task is not None and self._read_task is not asyncio.current_task():
            self._read_task.cancel()
            try:
                await self._read_task
            except (asyncio.CancelledError, Exception):
                pass
        self._read_task = None
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except (OSError, asyncio.CancelledError):
                pass
            self._writer = None

    def _fail(self, error: KafkaException) -> None:
        if self._closed_error is None:
            self._closed_error = error
        self._wire.fail_all()
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)
        if self._writer is not None:
            self._writer.close()

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                try:
                    data = await self._reader.read(_READ_CHUNK_BYTES)
                except ConnectionResetError:
                    if self._refused_by_tls_1_3():
                        raise _refused_after_handshake(self.address, "reset the connection") from None
                    raise
                if not data:
                    if self._refused_by_tls_1_3():
                        raise _refused_after_handshake(self.address, "closed the connection")
                    raise KafkaConnectionError(f"connection to broker {self.address} was closed by the broker")
                for correlation_id, response in self._wire.receive_bytes(data):
                    self._answered = True
                    future = self._pending.pop(correlation_id, None)
                    if future is not None and not future.done():
                        future.set_result(response)
        except asyncio.CancelledError:
            raise
        except ssl.SSLError as exc:
            error = _tls_error(self.address, exc)
            log.warning("%s", error.message)
            self._fail(error)
        except SslAuthenticationException as exc:
            self._fail(exc)  # connect() logs it
        except WireError as exc:
            self._fail(KafkaConnectionError(f"broker {self.address} sent bytes that cannot be decoded, "
                                            f"connection closed: {exc}"))
        except KafkaConnectionError as exc:
            self._fail(exc)
        except OSError as exc:
            self._fail(KafkaConnectionError(f"connection to broker {self.address} failed: {exc}"))
        except Exception as exc:  # never leave pending requests waiting on a dead reader
            self._fail(KafkaConnectionError(f"connection to broker {self.address} failed: "
                                            f"{type(exc).__name__}: {exc}"))

    def _refused_by_tls_1_3(self) -> bool:
        """A TLS 1.3 connection that ends before any answer: Kafka's SslTransportLayer reports an
        SSL failure while in its POST_HANDSHAKE state (TLS 1.3, no application data read yet) as
        an SslAuthenticationException. A Python broker (asyncio) closes such a connection without
        sending its alert first, so the end of the stream in that state counts the same."""
        if self.security.tls is None or self._answered or self._writer is None:
            return False
        ssl_object = self._writer.get_extra_info("ssl_object")
        return ssl_object is not None and ssl_object.version() == "TLSv1.3"

    # ------------------------------------------------------------------ versions

    def version_for(self, api_key: int, min_version: int | None = None, max_version: int | None = None) -> int:
        """The highest version of ``api_key`` that the broker and kio support within the range.

        Raises KafkaException (UNSUPPORTED_VERSION) naming the three ranges when they do not meet.
        """
        kio_low, kio_high = kio_version_range(api_key)
        broker = self.api_versions.get(api_key)
        low = max(kio_low, min_version if min_version is not None else kio_low)
        high = min(kio_high, max_version if max_version is not None else kio_high)
        if broker is not None:
            low, high = max(low, broker[0]), min(high, broker[1])
        if broker is None or low > high:
            served = f"v{broker[0]}-v{broker[1]}" if broker else "no version"
            wanted = f"v{min_version if min_version is not None else '*'}-v{max_version if max_version is not None else '*'}"
            raise KafkaException(
                f"broker {self.address} serves {served} of {api_name(api_key)}, kio knows v{kio_low}-v{kio_high}, "
                f"the client needs {wanted}: no version in common", ErrorCode.unsupported_version)
        return high

    # ------------------------------------------------------------------ requests

    async def request(self, entity: Any, timeout: float | None = None) -> Any:
        """Send one kio request entity and return its response entity.

        Raises KafkaConnectionError when the connection is (or becomes) unusable and
        KafkaTimeoutError after ``timeout`` (default ``request_timeout``) seconds.
        """
        api_key, version = type(entity).__api_key__, type(entity).__version__
        return await self._request(api_key, version, lambda: self._wire.send(entity), timeout)

    async def _request(self, api_key: int, version: int, encode: Callable[[], tuple[int, bytes]],
                       timeout: float | None, *, gate: bool = True) -> Any:
        """Send the frame `encode()` makes (correlation id, frame) and await its response. With
        ``gate`` (every request but the SASL ones), a due re-authentication runs first."""
        if not self._connected:
            raise KafkaConnectionError(f"connection to broker {self.address} is not open: call connect() first")
        if gate and self._closed_error is None and (
                self._reauth_task is not None or (self._reauth_at is not None and time.monotonic() >= self._reauth_at)):
            if self._reauth_task is None:
                self._reauth_at = None
                self._reauth_task = asyncio.get_running_loop().create_task(
                    self._reauthenticate(), name=f"quafka-reauth-{self.address}")
            await asyncio.shield(self._reauth_task)
        if self._closed_error is not None:
            raise self._closed_error.copy()
        assert self._writer is not None
        served = self.api_versions.get(api_key)
        if api_key != API_VERSIONS_KEY and not (served and served[0] <= version <= served[1]):
            # Kafka closes a connection that sends an unadvertised version; refuse it here instead
            raise KafkaException(f"broker {self.address} does not serve {api_name(api_key)} v{version} "
                                 f"(it serves {f'v{served[0]}-v{served[1]}' if served else 'no version'})",
                                 ErrorCode.unsupported_version)
        correlation_id, frame = encode()
        future = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = future
        try:
            self._writer.write(frame)
            await self._writer.drain()
        except (OSError, RuntimeError) as exc:
            self._fail(KafkaConnectionError(f"could not send to broker {self.address}: {exc}"))
        timeout = self.request_timeout if timeout is None else timeout
        label = f"{api_name(api_key)} v{version}"
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except asyncio.CancelledError:
            self._pending.pop(correlation_id, None)  # its response will be read and dropped
            future.cancel()
            raise
        except asyncio.TimeoutError:
            self._pending.pop(correlation_id, None)
            future.cancel()
            self._fail(KafkaConnectionError(f"connection to broker {self.address} closed after a request timed out"))
            raise KafkaTimeoutError(f"{label} to broker {self.address} got no response within {timeout}s "
                                    f"(request.timeout.ms); the connection was closed") from None

    async def call(self, api_key: int, values: Mapping[str, Any], *, min_version: int | None = None,
                   max_version: int | None = None, timeout: float | None = None) -> Any:
        """Build the request at the negotiated version from ``values`` and send it."""
        version = self.version_for(api_key, min_version, max_version)
        if api_key == SHARE_FETCH_KEY and version in SHARE_FETCH_REQUEST_VERSIONS:
            # the share consumer's per-poll request: written by hand (protocol/share_request_encoders.py)
            return await self._request(api_key, version, lambda: self._wire.send_encoded(
                api_key, version, lambda cid, client_id: encode_share_fetch_request(version, cid, client_id, values)),
                timeout)
        return await self.request(build_entity(request_class(api_key, version), values), timeout)
