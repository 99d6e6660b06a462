"""Pure-Python decoding helpers around kio's native reader.

Two problems with ``kio.serial.entity_reader`` (kio 0.6.5, native Rust) are handled here:

1. **Unknown tagged fields.** The native reader raises ``KeyError('Unknown tagged field tag: N')``
   instead of skipping the field as KIP-482 requires. :func:`fallback_entity_reader` walks the
   dataclass fields itself, delegates every primitive field to kio's native per-field readers and
   skips unknown tags (uvarint size, then that many bytes) at every level, nested structs
   included. With no unknown tags its result is exactly the native reader's.

2. **Unbounded array pre-allocation.** The native reader sizes a ``Vec`` from the array length on
   the wire *before* reading any element. A 5-byte compact array length such as
   ``ff ff ff ff 0f`` asks for 2**35 elements (256 GiB) and the Rust allocator aborts the whole
   process. :func:`length_checker` returns a cheap pure-Python pass that walks a frame exactly as
   the native reader would, touching no Python objects, and rejects any array whose length
   cannot fit in the bytes that remain. Call it before handing untrusted bytes to the native
   reader. The fallback reader performs the same check before every native array read.

Both raise subclasses of ``kio.serial.errors.DecodeError`` (or IndexError/ValueError from kio) on
malformed input; they never allocate in proportion to a length read from the wire.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from kio._kio_native import (
    compact_array_reader,
    get_field_reader,
    legacy_array_reader,
    read_compact_array_length,
    read_int8,
    read_int32,
    read_unsigned_varint,
)
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.serial.errors import BufferUnderflow, DecodeError

from .varint import read_uvarint

__all__ = [
    "ImplausibleLength",
    "fallback_entity_reader",
    "length_checker",
]

Reader = Callable[[Any, int], tuple[Any, int]]
Skipper = Callable[[Any, int, int], int]


class ImplausibleLength(DecodeError):
    """An array length that cannot fit in the rest of the frame."""


# Wire size of the fixed-size kafka types (identical in flexible and legacy versions).
_FIXED_SIZE = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float64": 8,
    "bool": 1,
    "uuid": 16,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
}
FIXED_SIZE_TYPES = frozenset(_FIXED_SIZE)  # kafka types kio always reads a value for
_LEGACY_LENGTH_SIZE = {"string": 2, "bytes": 4, "records": 4}


def _is_request_header(cls: type, is_request_header: bool) -> bool:
    # kio's native reader special-cases RequestHeader.client_id by class name; mirror that.
    return is_request_header or cls.__name__ == "RequestHeader"


# --------------------------------------------------------------------------------------------
# Minimum encoded sizes (used to bound array lengths)
# --------------------------------------------------------------------------------------------


def _primitive_min_size(kafka_type: str, flexible: bool) -> int:
    size = _FIXED_SIZE.get(kafka_type)
    if size is not None:
        return size
    if flexible:
        return 1  # compact length uvarint
    return _LEGACY_LENGTH_SIZE[kafka_type]


@functools.cache
def _entity_min_size(cls: type, nullable: bool) -> int:
    if nullable:
        return 1  # just the -1 marker
    flexible = cls.__flexible__
    total = 1 if flexible else 0  # tag section count
    for field in dataclasses.fields(cls):
        if get_field_tag(field) is not None:
            continue
        shape = classify_field(field)
        if isinstance(shape, (PrimitiveTupleField, EntityTupleField)):
            total += 1 if flexible else 4
        elif isinstance(shape, EntityField):
            total += _entity_min_size(shape.type_, is_optional(field))
        else:
            total += _primitive_min_size(get_schema_field_type(field), flexible)
    return total


def _check_array_length(n: int, item_min: int, remaining: int) -> None:
    if n * item_min > remaining:
        raise ImplausibleLength(
            f"array of {n} items (at least {item_min} bytes each) "
            f"exceeds the {remaining} bytes left"
        )


# --------------------------------------------------------------------------------------------
# Fallback reader
# --------------------------------------------------------------------------------------------


def fallback_entity_reader(cls: type, *, is_request_header: bool = False) -> Reader:
    """A reader ``(buf, offset) -> (entity, bytes_consumed)`` for *cls* that skips unknown tags.

    Same result as ``kio.serial.entity_reader(cls)`` on input without unknown tagged fields.
    ``is_request_header`` selects the legacy-string encoding of ``client_id``; as in kio it is
    implied when the class is named ``RequestHeader``. Readers are cached per class.
    """
    return _entity_reader(cls, False, _is_request_header(cls, is_request_header))


def _bounded_array(array_reader: Reader, item_min: int, flexible: bool) -> Reader:
    """Check the array length against the remaining bytes, then let kio read the array."""
    item_min = max(item_min, 1)
    if flexible:

        def read_compact(buf: Any, offset: int) -> tuple[Any, int]:
            n, k = read_compact_array_length(buf, offset)
            if n:
                _check_array_length(n, item_min, len(buf) - offset - k)
            return array_reader(buf, offset)

        return read_compact

    def read_legacy(buf: Any, offset: int) -> tuple[Any, int]:
        n, k = read_int32(buf, offset)
        if n > 0:
            _check_array_length(n, item_min, len(buf) - offset - k)
        return array_reader(buf, offset)

    return read_legacy


def _field_reader(
    cls: type, field: dataclasses.Field, is_request_header: bool, tagged: bool
) -> Reader:
    flexible = cls.__flexible__
    shape = classify_field(field)
    if isinstance(shape, EntityField):
        # Like kio: a struct field typed `X | None` is a nullable struct (int8 marker),
        # tagged or not.
        return _entity_reader(shape.type_, is_optional(field), False)
    if isinstance(shape, EntityTupleField):
        item = _entity_reader(shape.type_, False, False)
        array = compact_array_reader(item) if flexible else legacy_array_reader(item)
        return _bounded_array(array, _entity_min_size(shape.type_, False), flexible)
    native = get_field_reader(cls, field, is_request_header, tagged)
    if isinstance(shape, PrimitiveTupleField):
        item_min = _primitive_min_size(get_schema_field_type(field), flexible)
        return _bounded_array(native, item_min, flexible)
    assert isinstance(shape, PrimitiveField)
    return native


_ABSENT = object()


@functools.cache
def _entity_reader(cls: type, nullable: bool, is_request_header: bool) -> Reader:
    flexible: bool = cls.__flexible__
    regular: list[tuple[str, Reader]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    tag_defaults: list[tuple[str, Any]] = []
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        reader = _field_reader(cls, field, is_request_header, tag is not None)
        if tag is None:
            regular.append((field.name, reader))
        else:
            tagged[int(tag)] = (field.name, reader)
            tag_defaults.append((field.name, get_tagged_field_default(field)))
    if tagged and not flexible:
        raise ValueError(f"{cls.__name__}: tagged fields on a non-flexible model")

    def read(buf: Any, offset: int) -> tuple[Any, int]:
        pos = offset
        if nullable:
            marker, n = read_int8(buf, pos)
            pos += n
            if marker == -1:
                return None, pos - offset
        values: dict[str, Any] = {}
        for name, reader in regular:
            values[name], n = reader(buf, pos)
            pos += n
        if flexible:
            count, n = read_unsigned_varint(buf, pos)
            pos += n
            found: dict[str, Any] = {}
            for _ in range(count):
                tag, n = read_unsigned_varint(buf, pos)
                pos += n
                size, n = read_unsigned_varint(buf, pos)
                pos += n
                entry = tagged.get(tag)
                if entry is None:  # unknown tag: skip its payload
                    pos += size
                    if pos > len(buf):
                        raise BufferUnderflow("Buffer is exhausted")
                    continue
                # Known tag: read it by its schema, as kio does (the size is not consulted).
                name, reader = entry
                found[name], n = reader(buf, pos)
                pos += n
            for name, default in tag_defaults:
                value = found.get(name, _ABSENT)
                values[name] = default if value is _ABSENT else value
        return cls(**values), pos - offset

    return read


# --------------------------------------------------------------------------------------------
# Length checker: walk a frame like the native reader, building nothing
# --------------------------------------------------------------------------------------------


def length_checker(cls: type, *, is_request_header: bool = False) -> Callable[[Any, int], int]:
    """A function ``(buf, offset) -> bytes_consumed`` that walks an encoded *cls* without decoding.

    It follows the native reader's path exactly (known tagged fields are read by their schema,
    unknown ones skipped by size) and raises :class:`ImplausibleLength` for any array whose
    length exceeds what the remaining bytes could hold, and ``BufferUnderflow`` when the data
    runs out. Strings, bytes and primitives are skipped, not validated: the native reader checks
    them itself. Passing this check guarantees kio's native reader will not be asked to
    pre-allocate more than ``8 * len(buf)`` bytes for any array.
    """
    skip = _entity_skipper(cls, False, _is_request_header(cls, is_request_header))

    def check(buf: Any, offset: int) -> int:
        end = len(buf)
        try:
            pos = skip(buf, offset, end)
        except IndexError:
            raise BufferUnderflow("Buffer is exhausted") from None
        if pos > end:
            raise BufferUnderflow("Buffer is exhausted")
        return pos - offset

    return check


_uvarint = read_uvarint  # (value, new pos); VarintTooLong is a DecodeError, as kio's


def _skip_compact_string(buf: Any, pos: int, end: int) -> int:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = _uvarint(buf, pos)
    return pos + n - 1 if n else pos


def _skip_legacy_string(buf: Any, pos: int, end: int) -> int:
    n = (buf[pos] << 8) | buf[pos + 1]
    return pos + 2 + n if n < 0x8000 else pos + 2  # negative: null (or an error kio reports)


def _skip_legacy_bytes(buf: Any, pos: int, end: int) -> int:
    n = (buf[pos] << 24) | (buf[pos + 1] << 16) | (buf[pos + 2] << 8) | buf[pos + 3]
    return pos + 4 + n if n < 0x80000000 else pos + 4


def _skip_tags(buf: Any, pos: int, end: int, known: dict[int, Skipper]) -> int:
    """Skip a non-empty tag section: known tags by their schema (as kio does), others by size."""
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        skip = known.get(tag)
        if skip is None:
            pos += size
            if pos > end:
                raise BufferUnderflow("Buffer is exhausted")
        else:
            pos = skip(buf, pos, end)
    return pos


# Source snippets for the generated skippers. Each leaves `pos` after the item; `n` is scratch.
_SRC_COMPACT_LENGTH = """\
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = _uvarint(buf, pos)
"""
_SRC_VARIABLE = {
    "compact": _SRC_COMPACT_LENGTH + "    if n:\n        pos += n - 1\n",
    "string": (
        "    n = (buf[pos] << 8) | buf[pos + 1]\n"
        "    pos += 2\n    if n < 0x8000:\n        pos += n\n"
    ),
    "bytes": (
        "    n = (buf[pos] << 24) | (buf[pos + 1] << 16) | (buf[pos + 2] << 8) | buf[pos + 3]\n"
        "    pos += 4\n    if n < 0x80000000:\n        pos += n\n"
    ),
}
_SRC_ARRAY_LENGTH = {
    True: _SRC_COMPACT_LENGTH + "    n -= 1\n",
    False: (
        "    n = (buf[pos] << 24) | (buf[pos + 1] << 16) | (buf[pos + 2] << 8) | buf[pos + 3]\n"
        "    pos += 4\n    if n >= 0x80000000:\n        n = 0\n"  # null, or negative: kio rejects
    ),
}
_VARIABLE_SKIPPERS: dict[str, Skipper] = {
    "compact": _skip_compact_string,
    "string": _skip_legacy_string,
    "bytes": _skip_legacy_bytes,
}


def _primitive_layout(kafka_type: str, flexible: bool) -> int | str:
    """Fixed size in bytes, or the name of the variable-length encoding."""
    size = _FIXED_SIZE.get(kafka_type)
    if size is not None:
        return size
    if flexible:
        return "compact"
    return "string" if kafka_type == "string" else "bytes"


class _SkipperBuilder:
    """Generates the source of one straight-line skipper function for an entity class."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = {
            "_uvarint": _uvarint,
            "_check": _check_array_length,
            "_skip_tags": _skip_tags,
        }
        self.fixed = 0

    def bind(self, value: Any) -> str:
        name = f"_v{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def flush(self) -> None:
        if self.fixed:
            self.lines.append(f"    pos += {self.fixed}\n")
            self.fixed = 0

    def add(self, layout: int | str | Skipper) -> None:
        if isinstance(layout, int):
            self.fixed += layout
            return
        self.flush()
        if isinstance(layout, str):
            self.lines.append(_SRC_VARIABLE[layout])
        else:
            self.lines.append(f"    pos = {self.bind(layout)}(buf, pos, end)\n")

    def add_array(self, item: int | str | Skipper, item_min: int, flexible: bool) -> None:
        self.flush()
        if isinstance(item, str):
            item = _VARIABLE_SKIPPERS[item]
        if isinstance(item, int):
            body = f"        pos += n * {item}\n"
        else:
            body = (
                "        for _ in range(n):\n"
                f"            pos = {self.bind(item)}(buf, pos, end)\n"
            )
        self.lines.append(
            _SRC_ARRAY_LENGTH[flexible]
            + f"    if n > 0:\n        _check(n, {max(item_min, 1)}, end - pos)\n"
            + body
        )


def _field_layout(cls: type, field: dataclasses.Field, is_request_header: bool) -> tuple[Any, ...]:
    """('one', layout) or ('array', item layout, item min size) for a field, as kio reads it."""
    flexible = cls.__flexible__
    if is_request_header and field.name == "client_id":
        return ("one", "string")  # always a legacy nullable string
    shape = classify_field(field)
    if isinstance(shape, EntityField):
        return ("one", _entity_skipper(shape.type_, is_optional(field), False))
    if isinstance(shape, EntityTupleField):
        item = _entity_skipper(shape.type_, False, False)
        return ("array", item, _entity_min_size(shape.type_, False))
    kafka_type = get_schema_field_type(field)
    layout = _primitive_layout(kafka_type, flexible)
    if isinstance(shape, PrimitiveTupleField):
        return ("array", layout, _primitive_min_size(kafka_type, flexible))
    return ("one", layout)


def _standalone(layout: tuple[Any, ...], flexible: bool) -> Skipper:
    """A skipper function for one (tagged) field."""
    builder = _SkipperBuilder()
    if layout[0] == "array":
        builder.add_array(layout[1], layout[2], flexible)
    else:
        builder.add(layout[1])
    builder.flush()
    return _compile(builder)


def _compile(builder: _SkipperBuilder) -> Skipper:
    source = "def skip(buf, pos, end):\n" + "".join(builder.lines) + "    return pos\n"
    exec(compile(source, "<quafka length checker>", "exec"), builder.namespace)  # noqa: S102
    return builder.namespace["skip"]


@functools.cache
def _entity_skipper(cls: type, nullable: bool, is_request_header: bool) -> Skipper:
    flexible: bool = cls.__flexible__
    builder = _SkipperBuilder()
    if nullable:
        builder.lines.append("    if buf[pos] == 0xFF:\n        return pos + 1\n    pos += 1\n")
    known_tags: dict[int, Skipper] = {}
    for field in dataclasses.fields(cls):
        layout = _field_layout(cls, field, is_request_header)
        tag = get_field_tag(field)
        if tag is not None:
            known_tags[int(tag)] = _standalone(layout, flexible)
        elif layout[0] == "array":
            builder.add_array(layout[1], layout[2], flexible)
        else:
            builder.add(layout[1])
    builder.flush()
    if flexible:
        builder.lines.append(
            "    if buf[pos] == 0:\n        pos += 1\n"
            f"    else:\n        pos = _skip_tags(buf, pos, end, {builder.bind(known_tags)})\n"
        )
    return _compile(builder)
