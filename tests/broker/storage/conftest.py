"""Fixtures for the storage tests: batch builders and an engine-parametrized log factory."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import crc32c
import pytest

from quafka.broker.storage import FileLogStore, LogConfig, MemoryLogStore
from quafka.protocol.record_batch import build_batch, validate_batches

TOPIC_ID = "3f2a9c1e4b5d6a7f8091a2b3c4d5e6f7"


def _varint(out: bytearray, value: int) -> None:
    raw = (value << 1) ^ (value >> 63)
    while raw & ~0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def timed_batch(timestamps: list[int], value_bytes: int = 20) -> bytes:
    """An uncompressed v2 batch with one record per timestamp (base timestamp = the first)."""
    base_ts = timestamps[0]
    body = bytearray()
    for i, ts in enumerate(timestamps):
        record = bytearray([0])
        _varint(record, ts - base_ts)
        _varint(record, i)
        key = b"k%d" % i
        _varint(record, len(key))
        record += key
        _varint(record, value_bytes)
        record += bytes([i % 251]) * value_bytes
        _varint(record, 0)
        _varint(body, len(record))
        body += record
    n = len(timestamps)
    after_crc = struct.pack(">hiqqqhii", 0, n - 1, base_ts, max(timestamps), -1, -1, -1, n) + bytes(body)
    return struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2, crc32c.crc32c(after_crc)) + after_crc


def batch(records: int = 1, timestamp_ms: int = 1_000, value_bytes: int = 100, tag: int = 0) -> bytes:
    """A batch of `records` records sharing one timestamp; `tag` makes its values distinct."""
    values = [(b"key-%d" % i, bytes([(tag + i) % 256]) * value_bytes) for i in range(records)]
    return build_batch(values, base_timestamp=timestamp_ms)


def stamped(data: bytes, base_offset: int) -> bytes:
    """`data` (one batch) as the log stores it at `base_offset`."""
    return struct.pack(">q", base_offset) + data[8:]


def append(log, batches: list[bytes], now_ms: int = 0):
    """Append `batches` in one call, as the produce path does (validated, back to back)."""
    buf = bytearray(b"".join(batches))
    return log.append(buf, validate_batches(buf, 1 << 30), now_ms)


def split_batches(data: bytes) -> list[tuple[int, int, bytes]]:
    """(base offset, next offset, bytes) of each batch in a read result."""
    out = []
    pos = 0
    while pos < len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        out.append((base, base + delta + 1, data[pos : pos + 12 + length]))
        pos += 12 + length
    return out


@pytest.fixture
def kit():
    return SimpleNamespace(
        batch=batch, timed_batch=timed_batch, stamped=stamped, append=append, split=split_batches, topic_id=TOPIC_ID
    )


@pytest.fixture(params=["memory", "file"])
def new_store(request, tmp_path):
    """A factory of empty stores of the engine under test (closed at teardown)."""
    stores = []

    def factory():
        if request.param == "memory":
            store = MemoryLogStore()
        else:
            store = FileLogStore(tmp_path / f"logs-{len(stores)}")
        stores.append(store)
        return store

    yield factory
    for store in stores:
        store.close()


@pytest.fixture
def open_log(new_store):
    """open_log(config=LogConfig(), now_ms=0): a fresh log of partition t-0 of the engine under test."""

    def factory(config: LogConfig = LogConfig(), now_ms: int = 0):
        return new_store().open_log("t", 0, TOPIC_ID, config, now_ms)

    return factory
