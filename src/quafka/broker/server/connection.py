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
                log.warning(
                    "closing connection from %s: unsupported API key %d version %d was not advertised",
                    peer, api_key, api_version,
                )
                return
            try:
                header, body = decode_request(frame)
            except ProtocolError as exc:
                log.warning("closing connection from %s: malformed request (API key %d version %d): %s",
                            peer, api_key, api_version, exc)
                return
            ctx = RequestContext(server, peer, api_key, api_version, correlation_id,
                                 getattr(header, "client_id", None), header, connection)
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
