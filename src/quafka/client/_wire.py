"""The sans-I/O core of a client connection: request frames out, response entities in.

No sockets, no asyncio, no clock. ``WireConnection`` turns a kio request entity into the bytes to
send (4-byte size prefix, request header, body) and remembers it as in flight under a fresh
correlation id; ``receive_bytes`` takes whatever bytes arrived and returns the completed
(correlation id, response entity) pairs, in the order the broker sent them (Kafka answers the
requests of one connection in order, and this is checked).

Header versions follow the request class: request header v1 (non-flexible) or v2 (flexible
request versions); response header v0 or v1 likewise, except ApiVersions, whose response header
is always v0 (kio's response classes carry the right ``__header_schema__``). An ApiVersions
request above what the broker serves is answered in the v0 body format with UNSUPPORTED_VERSION;
that reply is decoded as v0 whatever version was asked for, as Kafka's clients do.

Helpers for building requests: ``kio_version_range(api_key)`` gives the versions kio knows, and
``build_entity(cls, values)`` builds an entity of any version from plain dicts, dropping the
fields that version lacks, so one call site serves every version.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field

from quafka.protocol import extensions
from quafka.protocol.errors import ErrorCode
from quafka.protocol.fallback import fallback_entity_reader
from quafka.protocol.framing import DECODE_ERRORS

from ._kio_overrides import RESPONSE_OVERRIDES
from .errors import KafkaException

__all__ = [
    "API_VERSIONS_KEY",
    "InFlight",
    "WireConnection",
    "WireError",
    "api_name",
    "build_entity",
    "kio_version_range",
    "request_class",
    "response_class",
]

API_VERSIONS_KEY = 18
_SIZE = struct.Struct(">i")
_INT16 = struct.Struct(">h")
MAX_RESPONSE_BYTES = 1 << 30
#: a response frame at least this large is collected as the pieces received and joined once
_LARGE_FRAME_BYTES = 1 << 20


class WireError(KafkaException):
    """The byte stream from the broker cannot be understood; the connection must be closed."""

    default_retriable = True


def api_name(api_key: int) -> str:
    name = api_key_map.get(api_key) or extensions.EXTENSION_API_NAMES.get(api_key)
    return f"{name} (key {api_key})" if name else f"api key {api_key}"


@functools.lru_cache(maxsize=None)
def kio_version_range(api_key: int) -> tuple[int, int]:
    """(lowest, highest) version of an API that kio has schemas for (quafka's API extension
    included: `protocol.extensions`)."""
    if api_key in extensions.VERSION_RANGES:
        return extensions.VERSION_RANGES[api_key]
    try:
        versions = schema_name_map[api_key_map[api_key]]
    except KeyError:
        raise KafkaException(f"kio has no schemas for {api_name(api_key)}") from None
    return min(versions), max(versions)


@functools.lru_cache(maxsize=None)
def request_class(api_key: int, version: int) -> type:
    if (api_key, version) in extensions.REQUESTS:
        return extensions.REQUESTS[(api_key, version)]
    try:
        return load_request_schema(api_key, version)
    except (UnknownAPIKey, UnknownEntity):
        raise KafkaException(f"kio has no request schema for {api_name(api_key)} v{version}") from None


@functools.lru_cache(maxsize=None)
def response_class(api_key: int, version: int) -> type:
    if (api_key, version) in extensions.RESPONSES:
        return extensions.RESPONSES[(api_key, version)]
    if (api_key, version) in RESPONSE_OVERRIDES:
        return RESPONSE_OVERRIDES[(api_key, version)]
    try:
        return load_response_schema(api_key, version)
    except (UnknownAPIKey, UnknownEntity):
        raise KafkaException(f"kio has no response schema for {api_name(api_key)} v{version}") from None


_PLAIN, _ENTITIES, _ENTITY, _DURATION = range(4)


@functools.lru_cache(maxsize=None)
def _fields(cls: type) -> dict[str, tuple[int, Any]]:
    """name -> (how build_entity treats the value, the nested entity class): worked out once per
    class (kio's classify_field is not cached, and a request is built per fetch)."""
    out: dict[str, tuple[int, Any]] = {}
    for field in dataclasses.fields(cls):
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            out[field.name] = (_ENTITIES, kind.type_)
        elif isinstance(kind, EntityField):
            out[field.name] = (_ENTITY, kind.type_)
        elif getattr(field.type, "__name__", "").endswith("Timedelta"):
            out[field.name] = (_DURATION, None)
        else:
            out[field.name] = (_PLAIN, None)
    return out


def build_entity(cls: type, values: Mapping[str, Any]) -> Any:
    """Build a kio entity of ``cls`` from a mapping; nested entities may be given as mappings
    (and arrays of them as sequences of mappings). Keys that ``cls`` lacks are dropped, so the
    same values build every version of a request. A duration field (kio's ``i32Timedelta``) may be
    given as an int of milliseconds: the sans-I/O modules that build values keep time as integers."""
    fields = _fields(cls)
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        found = fields.get(name)
        if found is None:
            continue
        how, nested = found
        if how == _ENTITIES and value is not None:
            value = tuple(build_entity(nested, v) if isinstance(v, Mapping) else v for v in value)
        elif how == _ENTITY and isinstance(value, Mapping):
            value = build_entity(nested, value)
        elif how == _DURATION and type(value) is int:
            value = datetime.timedelta(milliseconds=value)
        kwargs[name] = value
    return cls(**kwargs)


@functools.lru_cache(maxsize=None)
def _writer(cls: type) -> Callable[[Any, Any], None]:
    return entity_writer(cls)


@functools.lru_cache(maxsize=None)
def _reader(cls: type) -> Callable[[Any, int], tuple[Any, int]]:
    return entity_reader(cls)


def _read(cls: type, buf: bytes, pos: int) -> tuple[Any, int]:
    """kio's native reader; the pure-Python fallback when kio meets an unknown tagged field."""
    try:
        return _reader(cls)(buf, pos)
    except KeyError:
        return fallback_entity_reader(cls)(buf, pos)


class InFlight(NamedTuple):
    """A request sent and not yet answered."""

    correlation_id: int
    api_key: int
    api_version: int


class WireConnection:
    """The protocol state of one connection: correlation ids, in-flight requests, framing."""

    def __init__(self, client_id: str | None) -> None:
        self.client_id = client_id
        self._next_correlation_id = 0
        self._in_flight: deque[InFlight] = deque()
        self._buffer = bytearray()
        # a large frame being received: its pieces (joined once, when complete) and the bytes missing
        self._pieces: list[bytes] = []
        self._missing = 0

    # ------------------------------------------------------------------ outbound

    def send(self, request: Any) -> tuple[int, bytes]:
        """Encode a kio request entity: (correlation id, bytes to write, size prefix included)."""
        cls = type(request)
        api_key, version = cls.__api_key__, cls.__version__
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        header_cls = cls.__header_schema__
        header_values = dict(request_api_key=api_key, request_api_version=version,
                             correlation_id=correlation_id, client_id=self.client_id)
        header = header_cls(**{k: v for k, v in header_values.items() if k in _fields(header_cls)})
        buffer = io.BytesIO()
        buffer.write(b"\0\0\0\0")
        _writer(header_cls)(buffer, header)
        _writer(cls)(buffer, request)
        out = buffer.getbuffer()
        _SIZE.pack_into(out, 0, len(out) - 4)
        del out
        self._in_flight.append(InFlight(correlation_id, api_key, version))
        return correlation_id, buffer.getvalue()

    def send_encoded(self, api_key: int, version: int,
                     encode: Callable[[int, str | None], bytes]) -> tuple[int, bytes]:
        """Like `send`, for a request written by a hand-written encoder: `encode(correlation id,
        client id)` returns the whole frame (size prefix included)."""
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        frame = encode(correlation_id, self.client_id)
        self._in_flight.append(InFlight(correlation_id, api_key, version))
        return correlation_id, frame

    @property
    def in_flight(self) -> tuple[InFlight, ...]:
        return tuple(self._in_flight)

    def fail_all(self) -> list[InFlight]:
        """Forget every in-flight request (the connection is gone) and return them."""
        failed = list(self._in_flight)
        self._in_flight.clear()
        self._buffer.clear()
        self._pieces, self._missing = [], 0
        return failed

    # ------------------------------------------------------------------ inbound

    def receive_bytes(self, data: bytes | bytearray | memoryview) -> list[tuple[int, Any]]:
        """Feed received bytes; return every response now complete as (correlation id, entity).

        Raises WireError for a response nobody asked for, a correlation id out of order, an
        absurd size or a body kio cannot decode.
        """
        out: list[tuple[int, Any]] = []
        if self._missing:  # the rest of a large frame: kept as received, joined once complete
            piece = data if isinstance(data, bytes) else bytes(data)
            if len(piece) < self._missing:
                self._pieces.append(piece)
                self._missing -= len(piece)
                return out
            self._pieces.append(piece[: self._missing])
            frame = b"".join(self._pieces)
            data = piece[self._missing :]
            self._pieces, self._missing = [], 0
            out.append(self._decode_frame(frame))
        self._buffer += data
        while len(self._buffer) >= 4:
            (size,) = _SIZE.unpack_from(self._buffer, 0)
            if size < 4 or size > MAX_RESPONSE_BYTES:
                raise WireError(f"response frame size {size} is outside 4..{MAX_RESPONSE_BYTES} bytes")
            if len(self._buffer) < 4 + size:
                if size >= _LARGE_FRAME_BYTES:
                    # a large response (a fetch of megabytes) arrives in many reads: growing the
                    # buffer and cutting the frame out of it copied every byte three times
                    self._pieces = [bytes(memoryview(self._buffer)[4:])]
                    self._missing = 4 + size - len(self._buffer)
                    self._buffer.clear()
                break
            with memoryview(self._buffer) as view:
                frame = bytes(view[4 : 4 + size])
            del self._buffer[: 4 + size]
            out.append(self._decode_frame(frame))
        return out

    def _decode_frame(self, frame: bytes) -> tuple[int, Any]:
        if not self._in_flight:
            raise WireError(f"received a response of {len(frame)} bytes but no request is in flight")
        expected = self._in_flight.popleft()
        (correlation_id,) = struct.unpack_from(">i", frame, 0)
        label = f"{api_name(expected.api_key)} v{expected.api_version}"
        if correlation_id != expected.correlation_id:
            raise WireError(f"response correlation id {correlation_id} does not match the oldest request in "
                            f"flight ({label}, correlation id {expected.correlation_id})")
        cls = response_class(expected.api_key, expected.api_version)
        try:
            _, pos = _read(cls.__header_schema__, frame, 0)
            if expected.api_key == API_VERSIONS_KEY and expected.api_version > 0 and len(frame) >= pos + 2 \
                    and _INT16.unpack_from(frame, pos)[0] == ErrorCode.unsupported_version:
                cls = response_class(API_VERSIONS_KEY, 0)  # the broker answers in the v0 format
            body, _ = _read(cls, frame, pos)
        except DECODE_ERRORS as exc:
            raise WireError(f"malformed {label} response: {type(exc).__name__}: {exc}") from exc
        return correlation_id, body
