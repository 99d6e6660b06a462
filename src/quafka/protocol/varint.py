"""Kafka's variable-length integers, one implementation for the whole code base.

- Unsigned varints (`UNSIGNED_VARINT` in Kafka's message schemas: compact lengths, tagged-field
  tags and sizes, coordinator record headers): 7 bits a byte, least significant first, the high
  bit set on every byte but the last; at most 5 bytes (a 32-bit value), as Kafka's
  `ByteUtils.readUnsignedVarint` and kio read them.
- Signed varlongs (record fields in a v2 batch: lengths, timestamp and offset deltas, header
  counts): the value zigzag-encoded (`(n << 1) ^ (n >> 63)`), then as above, at most 10 bytes
  (`ByteUtils.readVarlong`). A record's int32 fields use the same encoding, so one decoder serves both.

Hot loops that decode one- and two-byte varints inline (`record_batch.iter_records`) fall back to
these functions for anything longer; tests/protocol/test_varint.py checks both agree.
"""

from __future__ import annotations

from kio.serial.errors import DecodeError

__all__ = ["MAX_UVARINT", "VarintTooLong", "read_uvarint", "read_varlong", "uvarint_bytes", "write_uvarint",
           "write_varlong"]

MAX_UVARINT = 0xFFFFFFFF
_SMALL = [bytes((i,)) for i in range(128)]


class VarintTooLong(DecodeError, ValueError):
    """More continuation bytes than the type allows (5 for a varint, 10 for a varlong)."""


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    """(value, position after it) of the unsigned varint at `pos`; IndexError when truncated."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    for i in range(1, 5):
        b = buf[pos + i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos + i + 1
        shift += 7
    raise VarintTooLong("Varint is too long, the most significant bit in the 5th byte is set")


def read_varlong(buf, pos: int) -> tuple[int, int]:
    """(value, position after it) of the zigzag varlong at `pos`; IndexError when truncated."""
    shift = 0
    raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise VarintTooLong("Varlong is too long, the most significant bit in the 10th byte is set")
    return (raw >> 1) ^ -(raw & 1), pos


def write_uvarint(out: bytearray, value: int) -> None:
    """Append `value` (0 <= value <= MAX_UVARINT) as an unsigned varint."""
    if not 0 <= value <= MAX_UVARINT:
        raise ValueError(f"unsigned varint out of range: {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def uvarint_bytes(value: int) -> bytes:
    """`value` as an unsigned varint (values below 128, the common case, from a table)."""
    if 0 <= value < 0x80:
        return _SMALL[value]
    out = bytearray()
    write_uvarint(out, value)
    return bytes(out)


def write_varlong(out: bytearray, value: int) -> None:
    """Append `value` (a signed 64-bit integer) zigzag-encoded."""
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while raw & ~0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
