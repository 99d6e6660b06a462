"""One client connection: read frames, dispatch to handlers, write responses in request order.

Requests on one connection are served one at a time, as Kafka does (it mutes a channel until its
response is sent), so responses leave in request order. Bad input closes only this connection:

- a size prefix below 8 bytes or above `socket.request.max.bytes`;
- an API key or version that was not advertised (ApiVersions above the served range gets the v0
  UNSUPPORTED_VERSION reply instead, so the client can retry with a version we serve);
- a body that does not decode.

Each such close is logged with the peer, the API key and the version.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from time import perf_counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from quafka.protocol.errors import ProtocolError
from quafka.protocol.framing import api_versions_fallback_response, decode_request, encode_response, peek_header

from .metrics import api_name

if TYPE_CHECKING:
    from .server import BrokerServer

log = logging.getLogger("quafka.connection")

API_VERSIONS_KEY = 18
_SIZE = struct.Struct(">i")
HIGH_WATER_BYTES = 4 * 1024 * 1024


class CloseConnection(Exception):
    """Raised by a handler that has done its work but must close the connection (logged)."""


@dataclass(slots=True)
class RequestContext:
    server: "BrokerServer"
    peer: str
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header: Any
    connection: object = None  # identifies the connection (share sessions are tied to it)


async def serve_connection(server: "BrokerServer", reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    peername = writer.get_extra_info("peername")
    peer = f"{peername[0]}:{peername[1]}" if isinstance(peername, tuple) else str(peername)
    registry = server.registry
    max_request_bytes = int(server.state.config.get("socket.request.max.bytes"))
    connection = object()
    observe = server.metrics.observe_request
    software = ""  # the client's software name and version, from its ApiVersions (v3+)
    try:
        while True:
            size = _SIZE.unpack(await reader.readexactly(4))[0]
            if size < 8 or size > max_request_bytes:
                log.warning(
                    "closing connection from %s: request size %d is outside [8, %d] (socket.request.max.bytes)",
                    peer, size, max_request_bytes,
                )
                return
            frame = await reader.readexactly(size)
            started = perf_counter()
            api_key, api_version, correlation_id = peek_header(frame)
            spec = registry.get(api_key)
            if spec is None or not spec.min_version <= api_version <= spec.max_version:
                if api_key == API_VERSIONS_KEY and spec is not None and api_version > spec.max_version:
                    writer.write(api_versions_fallback_response(correlation_id, server.advertised_ranges))
                    continue
                _log_unserved(server, peer, frame, api_key, api_version, spec is None, software)
                return
            try:
                header, body = decode_request(frame)
            except ProtocolError as exc:
                log.warning("closing connection from %s: malformed request (API key %d version %d): %s",
                            peer, api_key, api_version, exc)
                return
            ctx = RequestContext(server, peer, api_key, api_version, correlation_id,
                                 getattr(header, "client_id", None), header, connection)
            if api_key == API_VERSIONS_KEY and getattr(body, "client_software_name", None):
                software = f"{body.client_software_name} {body.client_software_version}"
            server.requests_in_flight += 1
            try:
                response = await spec.handler(ctx, body)
            except ProtocolError as exc:
                log.warning("closing connection from %s: invalid request (API key %d version %d): %s",
                            peer, api_key, api_version, exc)
                return
            except CloseConnection as exc:
                log.info("closing connection from %s after API key %d version %d: %s",
                         peer, api_key, api_version, exc)
                return
            finally:
                server.requests_in_flight -= 1
            if response is None:
                observe(api_key, api_version, (perf_counter() - started) * 1000.0)
                continue
            if not isinstance(response, (bytes, bytearray)):
                response = encode_response(correlation_id, response)
            writer.write(response)
            observe(api_key, api_version, (perf_counter() - started) * 1000.0)
            if writer.transport.get_write_buffer_size() > HIGH_WATER_BYTES:
                await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    except ProtocolError as exc:
        log.warning("closing connection from %s: %s", peer, exc)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("closing connection from %s after an internal error", peer)
    finally:
        writer.close()
        server.on_connection_closed(connection)


def _log_unserved(server: "BrokerServer", peer: str, frame: bytes, api_key: int, api_version: int,
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
