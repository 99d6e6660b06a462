"""Request decoding and response encoding on top of kio (wire-notes §3, §5).

A *frame* is one request without its 4-byte size prefix. Decoding:

1. ``peek_header`` reads ``>hhi`` (api_key, api_version, correlation_id) to pick the kio class;
2. the request header is read with kio's native reader;
3. ``fallback.length_checker`` walks the body as the native reader would and rejects array
   lengths that cannot fit in the frame (kio pre-allocates from the wire length and a 5-byte
   compact length aborts the process; see ``fallback``);
4. the body is read with kio's native reader. If kio meets an unknown tagged field (KeyError),
   header and body are read again with the pure-Python ``fallback_entity_reader``, which skips
   them. Trailing bytes after the body are ignored (librdkafka sends some, wire-notes §5 item 2).

Every decoding failure surfaces as ``ProtocolError``; the caller closes that connection.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import struct
from collections.abc import Callable
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.index import api_key_map
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)
from kio.serial.errors import DecodeError

from . import extensions
from .errors import ErrorCode, ProtocolError
from .fallback import FIXED_SIZE_TYPES, fallback_entity_reader, length_checker

__all__ = [
    "DECODE_ERRORS",
    "api_versions_fallback_response",
    "build",
    "decode_request",
    "encode_response",
    "peek_header",
    "request_class",
]

_PEEK = struct.Struct(">hhi")
_SIZE_AND_CORRELATION = struct.Struct(">ii")

#: Everything kio's readers (and the fallback) raise on malformed input.
DECODE_ERRORS: tuple[type[BaseException], ...] = (
    DecodeError,
    KeyError,
    ValueError,
    struct.error,
    IndexError,
    UnicodeDecodeError,
    OverflowError,
    TypeError,
)


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes of a request frame."""
    if len(frame) < _PEEK.size:
        raise ProtocolError(f"request frame of {len(frame)} bytes is shorter than a request header")
    return _PEEK.unpack_from(frame, 0)


def _api_label(api_key: int, version: int) -> str:
    name = api_key_map.get(api_key) or extensions.EXTENSION_API_NAMES.get(api_key)
    return f"{name} (key {api_key}) v{version}" if name else f"api key {api_key} v{version}"


@functools.lru_cache(maxsize=None)
def request_class(api_key: int, version: int) -> type:
    """kio's request class for (api_key, version) — or quafka's, for its API extension
    (`extensions`); ProtocolError if there is none."""
    extension = extensions.REQUESTS.get((api_key, version))
    if extension is not None:
        return extension
    try:
        return load_request_schema(api_key, version)
    except (UnknownAPIKey, UnknownEntity):
        raise ProtocolError(f"unsupported request {_api_label(api_key, version)}") from None


@functools.lru_cache(maxsize=None)
def _decoding_plan(api_key: int, version: int) -> tuple[type, Callable, Callable, Callable, Callable]:
    """(request class, native header reader, length checker, native body reader, null checker)."""
    cls = request_class(api_key, version)
    return cls, entity_reader(cls.__header_schema__), length_checker(cls), entity_reader(cls), null_checker(cls)


@functools.lru_cache(maxsize=None)
def null_checker(cls: type) -> Callable[[Any], None]:
    """A function that raises ValueError when a field the schema says is not nullable holds None.

    kio decodes a null length (-1, or 0 in compact encoding) as None even for arrays that may not
    be null; Kafka refuses such a request ("non-nullable field was serialized as null"), and so do
    we, before a handler iterates over None.
    """
    plain: list[str] = []
    nested: list[tuple[str, bool, Callable[[Any], None]]] = []  # (name, is_array, checker)
    for field in dataclasses.fields(cls):
        kind = classify_field(field)
        if not is_optional(field) and not _never_null(field, kind):
            plain.append(field.name)
        if isinstance(kind, (EntityField, EntityTupleField)):
            nested.append((field.name, isinstance(kind, EntityTupleField), null_checker(kind.type_)))

    def check(entity: Any) -> None:
        for name in plain:
            if getattr(entity, name) is None:
                raise ValueError(f"non-nullable field {cls.__name__}.{name} was serialized as null")
        for name, is_array, sub in nested:
            value = getattr(entity, name)
            if value is None:
                continue
            if is_array:
                for item in value:
                    sub(item)
            else:
                sub(value)

    return check


def _never_null(field: dataclasses.Field, kind: Any) -> bool:
    """A fixed-size primitive (an int, a bool, a timedelta...): kio always reads a value for it,
    so the null check skips it (on the job-queue path, most of a request's fields)."""
    if isinstance(kind, (EntityField, EntityTupleField, PrimitiveTupleField)):
        return False
    try:
        return get_schema_field_type(field) in FIXED_SIZE_TYPES
    except Exception:  # noqa: BLE001 - a field kio cannot type: keep checking it
        return False


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[Any, Any]:
    """Decode one request frame into (kio RequestHeader, kio request body).

    Unknown tagged fields are skipped; trailing bytes after the body are ignored. Raises
    ProtocolError for short frames, unknown (key, version) and anything kio cannot decode.
    """
    if frame.__class__ is not bytes:
        # kio's native reader refuses writable buffers; a read-only view costs no copy.
        frame = memoryview(frame).cast("B").toreadonly()
    if len(frame) < 8:
        raise ProtocolError(f"request frame of {len(frame)} bytes is shorter than a request header")
    api_key, version, _ = _PEEK.unpack_from(frame, 0)
    cls, read_header, check_lengths, read_body, check_nulls = _decoding_plan(api_key, version)
    try:
        try:
            header, pos = read_header(frame, 0)
            check_lengths(frame, pos)  # before kio sizes any array from the wire (see fallback)
            body = read_body(frame, pos)[0]
        except KeyError:  # an unknown tagged field: kio cannot skip them, the fallback can
            read_header = fallback_entity_reader(cls.__header_schema__, is_request_header=True)
            header, pos = read_header(frame, 0)
            check_lengths(frame, pos)
            body = fallback_entity_reader(cls)(frame, pos)[0]
        check_nulls(body)
    except DECODE_ERRORS as exc:
        raise ProtocolError(
            f"malformed {_api_label(api_key, version)} request: {type(exc).__name__}: {exc}"
        ) from exc
    return header, body


@functools.lru_cache(maxsize=None)
def _writer(cls: type) -> Callable[[Any, Any], None]:
    return entity_writer(cls)


def encode_response(correlation_id: int, body: Any) -> bytes:
    """Size prefix + response header (``type(body).__header_schema__``) + body, encoded by kio.

    The response header is written by hand: v0 is the int32 correlation id, v1 adds an empty
    tag section (byte-identical to kio's writer, which the tests check).
    """
    cls = type(body)
    flexible_header = cls.__header_schema__.__flexible__
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0\0\0\0\0\0" if flexible_header else b"\0\0\0\0\0\0\0\0")
    _writer(cls)(buffer, body)
    out = buffer.getbuffer()
    _SIZE_AND_CORRELATION.pack_into(out, 0, len(out) - 4, correlation_id)
    del out  # release the export so getvalue() may share the buffer
    return buffer.getvalue()


@functools.lru_cache(maxsize=None)
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(field.name for field in dataclasses.fields(cls))


def build(cls: type, **values: Any) -> Any:
    """Construct a kio entity from the keyword arguments that are fields of *cls* (§3).

    One handler can so build every version of a response: fields a version lacks are dropped.
    """
    names = _field_names(cls)
    return cls(**{key: value for key, value in values.items() if key in names})


def api_versions_fallback_response(
    correlation_id: int, ranges: list[tuple[int, int, int]]
) -> bytes:
    """The ApiVersions v0-format reply (header v0) with UNSUPPORTED_VERSION and the served ranges.

    Sent when a client asks for an ApiVersions version above the highest served (§5 item 3);
    clients parse it whatever version they asked for and retry with one that is supported.
    """
    body = ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(
            ApiVersionV0(api_key=key, min_version=low, max_version=high)
            for key, low, high in ranges
        ),
    )
    return encode_response(correlation_id, body)
