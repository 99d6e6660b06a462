"""FileLog only: read_batches reads what it returns, not the data that lies beyond it.

Work is measured by wrapping the os.pread the storage modules call (bytes read) and their
read_header (headers parsed); nothing is timed.
"""

from __future__ import annotations

import os

import pytest

from quafka.broker.storage import BatchExtent, BatchRead, FileLogStore, LogConfig
from quafka.broker.storage import _segment as segment_module

KIB = 1024
SEEK_CHUNK = segment_module._SEEK_CHUNK_BYTES  # _locate's walk from an index entry reads chunks of this size
FIRST_CHUNK = 4 * KIB  # read_batches' first read at the batch it starts with


@pytest.fixture
def preads(monkeypatch):
    """Bytes returned by each os.pread of the storage modules, in order."""
    sizes: list[int] = []
    real = os.pread

    def pread(fd, length, position):
        data = real(fd, length, position)
        sizes.append(len(data))
        return data

    monkeypatch.setattr(segment_module.os, "pread", pread)  # the os module file_log.py uses too
    return sizes


@pytest.fixture
def headers_parsed(monkeypatch):
    count = [0]
    real = segment_module.read_header

    def read_header(buf, pos=0):
        count[0] += 1
        return real(buf, pos)

    monkeypatch.setattr(segment_module, "read_header", read_header)
    return count


@pytest.fixture
def big_log(tmp_path, kit):
    """10,000 one-record batches (175 bytes each) in one segment, default index interval."""
    store = FileLogStore(tmp_path / "logs")
    log = store.open_log("t", 0, kit.topic_id, LogConfig(), 0)
    one = kit.batch(1)
    for _ in range(10):
        kit.append(log, [one] * 1_000)
    assert log.segment_base_offsets == [0]
    assert log.size_bytes == 10_000 * len(one) > 1 << 20
    yield log, one
    store.close()


def test_reading_one_batch_reads_a_bounded_number_of_bytes(big_log, kit, preads, headers_parsed):
    log, one = big_log
    got = log.read_batches(5_000, 1 << 20, 5_000)
    assert got == BatchRead(kit.stamped(one, 5_000), (BatchExtent(5_000, 5_000, len(one)),))
    # locating the batch (one index interval walked, in one seek chunk), then one small chunk
    assert sum(preads) <= SEEK_CHUNK + FIRST_CHUNK < log.size_bytes // 16
    assert headers_parsed[0] <= LogConfig().index_interval_bytes // len(one) + 2 + 1
    # read() is sized by max_bytes: it reads what lies beyond the one batch wanted
    preads.clear()
    assert log.read(5_000, 1 << 20)[: len(one)] == got.data
    assert sum(preads) > 800 * KIB


def test_a_sequential_read_uses_the_hint_and_reads_one_small_chunk(big_log, kit, preads, headers_parsed):
    log, one = big_log
    log.read_batches(5_000, 1 << 20, 5_000)
    preads.clear()
    headers_parsed[0] = 0
    got = log.read_batches(5_001, 1 << 20, 5_001)
    assert got == BatchRead(kit.stamped(one, 5_001), (BatchExtent(5_001, 5_001, len(one)),))
    assert preads == [FIRST_CHUNK]
    assert headers_parsed[0] == 1
    # a hundred batches: bytes read within twice what is returned, one header per batch
    preads.clear()
    headers_parsed[0] = 0
    got = log.read_batches(5_002, 1 << 20, 5_101)
    assert len(got.extents) == 100
    assert got.data == b"".join(kit.stamped(one, o) for o in range(5_002, 5_102))
    assert sum(preads) <= 2 * len(got.data) + FIRST_CHUNK
    assert headers_parsed[0] == 100


def test_max_bytes_bounds_the_bytes_read(big_log, kit, preads):
    log, one = big_log
    got = log.read_batches(0, 10_000, 10_000)
    assert len(got.extents) == 10_000 // len(one)
    assert got.data == log.read(0, 10_000)
    preads.clear()
    log.read_batches(200, 10_000, 10_000)
    assert sum(preads) <= SEEK_CHUNK + 10_000 + FIRST_CHUNK


def test_a_header_cut_by_a_chunk_end_and_batches_larger_than_a_chunk(tmp_path, kit, preads):
    store = FileLogStore(tmp_path / "logs")
    log = store.open_log("t", 0, kit.topic_id, LogConfig(), 0)
    small, large = kit.batch(1, value_bytes=20), kit.batch(3, value_bytes=10_000)
    assert FIRST_CHUNK % len(small) < 61  # the 45th header straddles the first chunk's end
    kit.append(log, [small] * 200 + [large] * 3 + [small])
    log.read_batches(0, 1 << 20, 0)  # sets the read hint at offset 1
    preads.clear()
    got = log.read_batches(1, 1 << 20, 100)
    assert got.data == b"".join(kit.stamped(small, o) for o in range(1, 101))
    assert sum(preads) <= 2 * len(got.data) + FIRST_CHUNK
    preads.clear()
    got = log.read_batches(200, 0, 200)  # the first batch whole (30 KB) though max_bytes is 0
    assert got == BatchRead(kit.stamped(large, 200), (BatchExtent(200, 202, len(large)),))
    assert sum(preads) <= SEEK_CHUNK + FIRST_CHUNK + len(large)
    got = log.read_batches(201, 1 << 20, 1_000)
    assert got.extents == (
        BatchExtent(200, 202, len(large)), BatchExtent(203, 205, 2 * len(large)),
        BatchExtent(206, 208, 3 * len(large)), BatchExtent(209, 209, 3 * len(large) + len(small)),
    )
    assert got.data == b"".join([kit.stamped(large, 200), kit.stamped(large, 203), kit.stamped(large, 206),
                                 kit.stamped(small, 209)])
    store.close()
