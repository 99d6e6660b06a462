"""The one varint implementation (protocol/varint.py): round trips, Kafka's limits, and the inline
fast paths of record decoding agreeing with it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.serial.errors import DecodeError

from quafka.protocol.record_batch import build_batch, iter_records
from quafka.protocol.varint import (
    MAX_UVARINT,
    VarintTooLong,
    read_uvarint,
    read_varlong,
    uvarint_bytes,
    write_uvarint,
    write_varlong,
)


@given(st.integers(0, MAX_UVARINT))
def test_unsigned_varints_round_trip(value):
    out = bytearray(b"\xff")
    write_uvarint(out, value)
    assert bytes(out[1:]) == uvarint_bytes(value)
    assert read_uvarint(out, 1) == (value, len(out))
    assert len(out) - 1 == max(1, -(-value.bit_length() // 7))


@given(st.integers(-2**63, 2**63 - 1))
def test_signed_varlongs_round_trip(value):
    out = bytearray()
    write_varlong(out, value)
    assert read_varlong(out, 0) == (value, len(out))
    assert len(out) <= 10


def test_known_encodings_match_kafkas_byte_utils():
    assert uvarint_bytes(0) == b"\x00" and uvarint_bytes(300) == b"\xac\x02"
    for value, encoded in ((0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"), (64, b"\x80\x01")):
        out = bytearray()
        write_varlong(out, value)
        assert bytes(out) == encoded


def test_limits_and_truncation():
    with pytest.raises(VarintTooLong) as info:
        read_uvarint(b"\x80\x80\x80\x80\x80\x01", 0)
    assert isinstance(info.value, DecodeError) and isinstance(info.value, ValueError)
    with pytest.raises(VarintTooLong):
        read_varlong(b"\x80" * 10 + b"\x01", 0)
    with pytest.raises(IndexError):
        read_uvarint(b"\x80", 0)
    with pytest.raises(ValueError):
        write_uvarint(bytearray(), MAX_UVARINT + 1)
    with pytest.raises(ValueError):
        write_uvarint(bytearray(), -1)


@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=300)),
                          st.one_of(st.none(), st.binary(max_size=20000))), min_size=1, max_size=5))
def test_record_decoding_fast_paths_agree_with_the_varint_functions(records):
    """Lengths below 64, below 8192 and above take the one-byte, two-byte and general paths."""
    batch = build_batch([(k, v, [("h", v)]) for k, v in records], base_offset=7)
    decoded = list(iter_records(batch))
    assert [(r.offset, r.key, r.value, r.headers) for r in decoded] == [
        (7 + i, k, v, (("h", v),)) for i, (k, v) in enumerate(records)]
