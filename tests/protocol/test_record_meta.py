"""`record_batch.iter_record_meta`: keys, timestamps and chosen headers of every record, values
skipped, for every codec; it agrees with the full decoder `iter_records`. Seeded: each run draws a
fresh seed and prints it; rerun one with QUAFKA_SEED=<seed>."""

import os
import random

import pytest

from quafka.protocol.record_batch import TIMESTAMP_TYPE_MASK, iter_record_meta, iter_records
from tests.client.fixture_batches import CODEC_IDS, build, control_batch

SEED = int(os.environ.get("QUAFKA_SEED", random.randrange(1 << 30)))
NAMES = frozenset({"quafka.deliver.after.ms", "quafka.deliver.at.ms"})


def _random_records(rng: random.Random, n: int) -> list:
    records = []
    for i in range(n):
        key = None if rng.random() < 0.2 else bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
        value = None if rng.random() < 0.1 else bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
        headers = []
        for _ in range(rng.randrange(0, 4)):
            name = rng.choice(["quafka.deliver.after.ms", "quafka.deliver.at.ms", "trace", "x" * 200])
            headers.append((name, None if rng.random() < 0.1 else str(rng.randrange(10**6)).encode()))
        records.append((key, value, headers, 1_700_000_000_000 + rng.randrange(-5000, 5000)))
    return records


@pytest.mark.parametrize("codec", sorted(CODEC_IDS))
def test_meta_agrees_with_the_full_decoder_for_every_codec(codec):
    print(f"seed {SEED} (replay with QUAFKA_SEED={SEED})")
    rng = random.Random(f"{SEED}-{codec}")
    for _ in range(30):
        batch = build(_random_records(rng, rng.randrange(1, 60)), codec=codec)
        full = list(iter_records(batch))
        meta = list(iter_record_meta(batch, NAMES))
        assert [(m.offset, m.timestamp, m.key) for m in meta] == [(r.offset, r.timestamp, r.key) for r in full]
        for m, r in zip(meta, full):
            wanted = {}
            for name, value in r.headers:
                if name in NAMES:
                    wanted[name] = value  # the last of a repeated header wins, as in a dict
            assert m.headers == wanted


def test_log_append_time_is_the_batch_max_timestamp():
    records = [(b"k", b"v", [], 1000), (b"k", b"v", [], 3000)]
    batch = build(records, attributes=TIMESTAMP_TYPE_MASK)
    assert [m.timestamp for m in iter_record_meta(batch)] == [3000, 3000]


def test_without_header_names_no_header_is_read_and_control_batches_yield_nothing():
    batch = build([(b"k", b"v", [("quafka.deliver.at.ms", b"5")], 1000)])
    assert [m.headers for m in iter_record_meta(batch)] == [{}]
    assert list(iter_record_meta(control_batch(timestamp=5), NAMES)) == []


def test_a_truncated_body_raises_value_or_index_error():
    batch = bytearray(build([(b"key", b"value" * 20, [], 1000)]))
    batch[61 + 1] = 0x7E  # a record length far past the end
    with pytest.raises((ValueError, IndexError)):
        list(iter_record_meta(bytes(batch)))
