"""quafka.spark.record_columns (the executors' vectorized decode) against the record-at-a-time
decode it replaces (``AcquiredBatches.columns()`` + ``arrow.columns_batch``): the same Arrow table
for random pieces — every codec, null/empty/long keys and values (varints of 1 to 3 bytes),
negative and large timestamp deltas, LogAppendTime, headers, transaction markers, partly acquired
batches, several delivery counts, null delivery counts (a replay by offset) — and the same error
for a corrupt batch. Pure: no broker, no SparkSession."""

from __future__ import annotations

import os
import random

import crc32c
import pyarrow as pa
import pytest

from client.fixture_batches import break_crc, build, control_batch

from quafka.client import AcquiredBatches, CorruptRecordException
from quafka.protocol import record_batch as rb
from quafka.spark.arrow import columns_batch
from quafka.spark.record_columns import acquired_arrow_batches

pytestmark = pytest.mark.spark


def reference(item: AcquiredBatches) -> pa.Table:
    """The record-at-a-time decode; for a replay piece (delivery counts None, which ``columns()``
    reads as not acquired) with counts 0, then a null deliveryCount column."""
    replay = any(dc is None for _, _, dc in item.acquired)
    cols = item._replace(acquired=[(f, last, 0 if replay else dc) for f, last, dc in item.acquired]).columns()
    if replay:
        cols["delivery_count"] = [None] * len(cols["offset"])
    return pa.Table.from_batches([columns_batch(item.topic, item.partition, cols)])


def decoded(item: AcquiredBatches) -> pa.Table:
    batches = list(acquired_arrow_batches(item))
    return pa.Table.from_batches(batches, schema=columns_batch("t", 0, AcquiredBatches("t", 0, b"", []).columns()).schema)


def random_bytes(rng: random.Random) -> bytes | None:
    kind = rng.random()
    if kind < 0.15:
        return None
    if kind < 0.25:
        return b""
    size = rng.choice([1, 7, 63, 64, 100, 300, 8191, 8192, 20000])
    return rng.randbytes(size)


def random_piece(rng: random.Random, *, headers: bool) -> tuple[AcquiredBatches, int]:
    """A piece of 1-6 batches (one maybe a marker) at consecutive offsets, with random acquired ranges."""
    data = bytearray()
    offset = rng.randrange(0, 10**6)
    first_offset = offset
    for _ in range(rng.randint(1, 6)):
        if rng.random() < 0.1:
            batch = bytearray(control_batch(timestamp=1_700_000_000_000))
            count = 1
        else:
            count = rng.randint(1, 40)
            base_ts = rng.randrange(0, 2**41)
            records = [(random_bytes(rng), random_bytes(rng),
                        [("h", b"v")] if headers and rng.random() < 0.2 else [],
                        base_ts + rng.randrange(-5000, 10**7)) for _ in range(count)]
            records.sort(key=lambda r: r[3])  # base timestamp is the smallest
            codec = rng.choice(["none", "none", "gzip", "snappy", "lz4", "zstd"])
            attributes = rb.TIMESTAMP_TYPE_MASK if rng.random() < 0.2 else 0
            batch = bytearray(build(records, codec=codec, attributes=attributes))
        rb.stamp_base_offset(batch, 0, offset)
        data += batch
        offset += count
    last_offset = offset - 1
    # acquired: the whole span cut into 1-3 ranges of random delivery counts (maybe a gap at either end)
    low = first_offset + (rng.randrange(0, 3) if rng.random() < 0.3 else 0)
    high = last_offset - (rng.randrange(0, 3) if rng.random() < 0.3 else 0)
    if high < low:
        low, high = first_offset, last_offset
    cuts = sorted(rng.sample(range(low + 1, high + 1), min(rng.randint(0, 2), high - low)))
    bounds = [low, *cuts, high + 1]
    replay = rng.random() < 0.25  # read by offset: no delivery count (null)
    acquired = [(bounds[i], bounds[i + 1] - 1, None if replay else rng.randint(1, 5)) for i in range(len(bounds) - 1)]
    return AcquiredBatches("topic-x", rng.randrange(0, 50), bytes(data), acquired), last_offset - first_offset + 1


@pytest.mark.parametrize("headers", [False, True])
def test_random_pieces_decode_as_the_record_at_a_time_path(headers):
    seed = int(os.environ.get("QUAFKA_TEST_SEED") or random.randrange(2**32))
    print(f"seed {seed} (rerun with QUAFKA_TEST_SEED={seed})")
    rng = random.Random(seed)
    rows = 0
    for round_ in range(150):
        item, _ = random_piece(rng, headers=headers)
        want = reference(item)
        got = decoded(item)
        assert got.equals(want), (seed, round_, item.acquired)
        rows += got.num_rows
    assert rows > 1000  # the pieces held records, not only markers


def test_a_replay_piece_without_delivery_counts_has_null_delivery_counts():
    batch = bytearray(build([(b"k", b"v", [], 1000), (None, b"w", [], 1001), (None, b"x", [], 1002)]))
    rb.stamp_base_offset(batch, 0, 40)
    for first, last in ((40, 42), (41, 41)):  # the whole batch (decoded in bulk), part of it (record at a time)
        got = decoded(AcquiredBatches("t", 3, bytes(batch), [(first, last, None)]))
        assert got.column("deliveryCount").null_count == got.num_rows == last - first + 1
        assert got.column("offset").to_pylist() == list(range(first, last + 1))


def test_a_corrupt_batch_raises_as_the_record_at_a_time_path():
    batch = bytearray(build([(b"k", b"v", [], 1000)] * 3))
    rb.stamp_base_offset(batch, 0, 7)
    item = AcquiredBatches("t", 0, break_crc(bytes(batch)), [(7, 9, 1)])
    with pytest.raises(CorruptRecordException):
        reference(item)
    with pytest.raises(CorruptRecordException):
        decoded(item)


def test_a_batch_whose_fields_overrun_its_records_raises_as_the_record_at_a_time_path():
    """A batch with a valid CRC whose last record's value length points past the data (a
    producer's bug): the vectorized decode leaves it to the record-at-a-time path, which rejects it."""
    batch = bytearray(build([(b"k", b"v" * 10, [], 1000)] * 3))
    value_len_at = len(batch) - 12  # the last record: ... value length (1 byte), 10 value bytes, header count
    assert batch[value_len_at] == 20  # zigzag(10)
    batch[value_len_at] = 0x7E  # zigzag(63): past the end of the batch
    batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    rb.stamp_base_offset(batch, 0, 0)
    item = AcquiredBatches("t", 0, bytes(batch), [(0, 2, 1)])
    with pytest.raises(CorruptRecordException):
        reference(item)
    with pytest.raises(CorruptRecordException):
        decoded(item)
