"""The simulated disk keeps a compacted log as FileLog does: its segments, and the gaps the log
cleaner left between batches (FileLog's recovery, storage/_segment.py, accepts offsets that grow
with gaps). It used to cut a log at the first gap and renumber the rest on recovery, so every crash
after a cleaning of __consumer_offsets lost commits and assignments (seeds 2 and 3 of the CI slice:
committed-offset-lost, partition-owned-twice)."""

from __future__ import annotations

import random

import pytest

from quafka.broker.storage import LogConfig
from quafka.protocol.record_batch import build_batch, iter_headers, iter_records, validate_batches

from sim.disk import SimDisk, SimLogStore


class _Faults:
    """No faults: only what a crash keeps is under test."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: False


class _Incarnation:
    faults = _Faults()

    def check_alive(self) -> None:
        pass


def _contents(log) -> list[tuple[int, bytes, bytes]]:
    data = log.read(log.log_start_offset, 1 << 20)
    out = []
    for pos, header in iter_headers(data):
        out += [(r.offset, r.key, r.value) for r in iter_records(data[pos:pos + header.size_bytes])]
    return out


def _compacted_log(store: SimLogStore):
    """12 single-record batches in segments of 400 bytes (the even ones update one key, the odd
    ones have keys of their own), the first two segments cleaned into one (the latest record of
    each key and the range's last batch kept)."""
    log = store.open_log("t", 0, "00" * 16, LogConfig(segment_bytes=400), 0)
    for i in range(12):
        buf = bytearray(build_batch([(b"k0" if i % 2 == 0 else b"k%d" % i, b"v%03d" % i)], base_timestamp=1000 + i))
        log.append(buf, validate_batches(buf, 1 << 30), i)
    bases = log.segment_base_offsets[:2]
    assert len(log.segment_base_offsets) >= 3
    sources = log.open_for_cleaning(bases)
    batches = [(h, b) for src in sources for h, b in src.iter_batches(4096)]
    latest = {r.key: r.offset for _, b in batches for r in iter_records(b)}
    end = log.segment_base_offsets[2]
    cleaned = log.create_cleaned_segment(bases[0])
    for h, b in batches:
        if any(latest[r.key] == r.offset for r in iter_records(b)) or h.next_offset == end:
            cleaned.append(h, b)
    cleaned.finish(end)
    assert log.replace_segments(cleaned, bases)
    log.flush()
    return log


@pytest.mark.parametrize("power", [False, True])
def test_a_compacted_log_is_recovered_with_its_gaps_and_segments(power):
    disk = SimDisk(cluster_id="sim-test")
    store = SimLogStore(_Incarnation(), disk, 0)
    log = _compacted_log(store)
    before = _contents(log)
    offsets = [o for o, _, _ in before]
    assert any(b - a > 1 for a, b in zip(offsets, offsets[1:])), "the cleaning left no gap"
    store.capture(disk, power=power, rng=random.Random(0))  # everything is flushed: a power loss keeps it all
    recovered = SimLogStore(_Incarnation(), disk, 0)
    assert recovered.recovered_cut_bytes == 0
    again = recovered.open_log("t", 0, "00" * 16, LogConfig(segment_bytes=400), 0)
    assert _contents(again) == before
    assert again.segment_base_offsets == log.segment_base_offsets
    assert again.log_end_offset == log.log_end_offset


def test_the_cleaner_checkpoint_outlives_a_crash():
    disk = SimDisk(cluster_id="sim-test")
    SimLogStore(_Incarnation(), disk, 0).write_cleaner_checkpoints({("t", 0): 7})
    assert SimLogStore(_Incarnation(), disk, 0).read_cleaner_checkpoints() == {("t", 0): 7}
