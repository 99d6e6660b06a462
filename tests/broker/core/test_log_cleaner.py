"""The log cleaner's decisions (broker/core/log_cleaner.py), with virtual time; facts from Kafka's
LogCleanerManager.cleanableOffsets / grabFilthiestCompactedLog and Cleaner.groupSegmentsBySize /
shouldRetainRecord / cleanInto, and for transactions LogCleanerManager.cleanableOffsets (the last
stable offset), Cleaner's CleanedTransactionMetadata and checkBatchRetention."""

from __future__ import annotations

from typing import NamedTuple

from quafka.broker.core.log_cleaner import (
    BatchRetention,
    CleanedTransactionMetadata,
    CompactionConfig,
    LastRecord,
    LogToClean,
    OffsetMap,
    SegmentSummary,
    batch_retention,
    cleanable_offsets,
    grab_filthiest,
    group_segments_by_size,
    log_to_clean,
    offset_map_slots,
    retain_record,
)
from quafka.protocol.control_batches import ControlType

NOW = 1_000_000
COMPACT = CompactionConfig(compact=True)


def segments(*spec):
    """(base, size, largest timestamp) triples; the last is the active segment."""
    return [SegmentSummary(base, size, ts, ts) for base, size, ts in spec]


LOG = segments((0, 100, NOW - 5000), (10, 100, NOW - 3000), (20, 100, NOW - 1000), (30, 50, NOW))


def test_the_active_segment_is_never_cleanable():
    first_dirty, first_uncleanable, reset = cleanable_offsets(LOG, 0, 35, None, COMPACT, NOW)
    assert (first_dirty, first_uncleanable, reset) == (0, 30, False)
    one_segment = segments((0, 500, NOW - 10_000))
    assert cleanable_offsets(one_segment, 0, 40, None, COMPACT, NOW)[:2] == (0, 0)


def test_min_compaction_lag_stops_the_range_at_the_first_segment_with_a_newer_record():
    lagged = CompactionConfig(compact=True, min_compaction_lag_ms=2000)
    assert cleanable_offsets(LOG, 0, 35, None, lagged, NOW)[1] == 20  # segment 20 holds a record 1 s old
    assert cleanable_offsets(LOG, 0, 35, None, CompactionConfig(compact=True, min_compaction_lag_ms=4000), NOW)[1] == 10
    assert cleanable_offsets(LOG, 0, 35, None, lagged, NOW + 5000)[1] == 30  # all old enough later on


def test_a_checkpoint_outside_the_log_is_reset_to_the_log_start():
    assert cleanable_offsets(LOG, 5, 35, 2, COMPACT, NOW) == (5, 30, True)
    assert cleanable_offsets(LOG, 5, 35, 99, COMPACT, NOW) == (5, 30, True)
    assert cleanable_offsets(LOG, 5, 35, 20, COMPACT, NOW) == (20, 30, False)


def test_dirty_ratio_counts_clean_and_cleanable_segment_bytes():
    ltc, _ = log_to_clean(("t", 0), LOG, 0, 35, 20, COMPACT, NOW)
    assert (ltc.clean_bytes, ltc.cleanable_bytes) == (200, 100)
    assert abs(ltc.cleanable_ratio - 1 / 3) < 1e-9


def test_the_filthiest_log_over_its_ratio_is_chosen_and_max_lag_forces_cleaning():
    low = LogToClean(("a", 0), 0, 10, 900, 100, False, 0.5)
    high = LogToClean(("b", 0), 0, 10, 100, 900, False, 0.5)
    mid = LogToClean(("c", 0), 0, 10, 400, 600, False, 0.5)
    assert grab_filthiest([low, mid, high]).key == ("b", 0)
    assert grab_filthiest([low]) is None
    assert grab_filthiest([low._replace(need_compaction_now=True)]).key == ("a", 0)
    assert grab_filthiest([low._replace(need_compaction_now=True, cleanable_bytes=0)]) is None
    # max.compaction.lag.ms: the first dirty segment's first batch is older than the lag
    forced, _ = log_to_clean(("t", 0), LOG, 0, 35, None, CompactionConfig(compact=True, max_compaction_lag_ms=4000,
                                                                            min_cleanable_ratio=0.99), NOW)
    assert forced.need_compaction_now and grab_filthiest([forced]) is forced


def test_segments_are_grouped_up_to_segment_bytes():
    segs = segments((0, 40, 0), (10, 40, 0), (20, 40, 0), (30, 90, 0), (40, 10, 0))
    groups = group_segments_by_size(segs, 100, 50)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 10], [20], [30, 40]]


def test_the_offset_map_is_bounded_by_the_dedupe_buffer():
    assert offset_map_slots(24 * 1000, 0.9) == 900
    m = OffsetMap(2)
    m.put(b"a", 1)
    m.put(b"b", 2)
    assert m.full and not m.can_put(b"c") and m.can_put(b"a")
    m.put(b"a", 3)
    assert m.get(b"a") == 3 and m.get(b"zz") == -1 and m.latest_offset == 3


def test_only_the_latest_record_of_a_key_survives_and_tombstones_until_their_horizon():
    m = OffsetMap(10)
    m.put(b"k", 5)
    m.put(b"d", 6)
    assert not retain_record(m, 1, b"k", True, None, NOW)  # superseded
    assert retain_record(m, 5, b"k", True, None, NOW)  # the latest
    assert retain_record(m, 9, b"k", True, None, NOW)  # past the map's last offset: not decided this round
    assert retain_record(m, 2, b"other", True, None, NOW)  # a key the dirty range never saw
    assert not retain_record(m, 3, None, True, None, NOW)  # keyless records go
    assert retain_record(m, 6, b"d", False, None, NOW)  # a tombstone without horizon: kept, horizon set
    assert retain_record(m, 6, b"d", False, NOW + 1, NOW)  # before its horizon
    assert not retain_record(m, 6, b"d", False, NOW, NOW)  # at its horizon: gone


def test_a_producers_last_batch_and_the_end_of_a_cleaned_range_are_kept_even_empty():
    common = dict(producer_epoch=0, control=False, discard_records=False, segment_end_offset=100)
    active = {7: LastRecord(40, 0)}
    assert batch_retention(producer_id=7, last_offset=40, next_offset=41, last_records=active,
                           **common) is BatchRetention.RETAIN_EMPTY
    assert batch_retention(producer_id=7, last_offset=30, next_offset=31, last_records=active,
                           **common) is BatchRetention.DELETE_EMPTY
    assert batch_retention(producer_id=-1, last_offset=99, next_offset=100, last_records={},
                           **common) is BatchRetention.RETAIN_EMPTY
    # an aborted transaction's batch, or an expired marker, goes whole unless something needs it
    assert batch_retention(producer_id=7, last_offset=30, next_offset=31, last_records=active,
                           **{**common, "discard_records": True}) is BatchRetention.DELETE
    assert batch_retention(producer_id=7, last_offset=40, next_offset=41, last_records=active,
                           **{**common, "discard_records": True}) is BatchRetention.RETAIN_EMPTY
    # a producer with no data batch left keeps its marker of the current epoch (its epoch)
    no_data = {7: LastRecord(None, 3)}
    marker = dict(common, control=True, discard_records=True)
    assert batch_retention(producer_id=7, last_offset=50, next_offset=51, last_records=no_data,
                           **{**marker, "producer_epoch": 3}) is BatchRetention.RETAIN_EMPTY
    assert batch_retention(producer_id=7, last_offset=50, next_offset=51, last_records=no_data,
                           **{**marker, "producer_epoch": 2}) is BatchRetention.DELETE


def test_the_last_stable_offset_bounds_the_cleanable_range():
    """LogCleanerManager.cleanableOffsets: the first uncleanable offset is at most the LSO (the
    first offset of the earliest open transaction), even inside a sealed segment."""
    assert cleanable_offsets(LOG, 0, 35, None, COMPACT, NOW, last_stable_offset=15)[1] == 15
    assert cleanable_offsets(LOG, 0, 35, None, COMPACT, NOW, last_stable_offset=35)[1] == 30  # the active segment
    assert cleanable_offsets(LOG, 20, 35, 20, COMPACT, NOW, last_stable_offset=12)[1] == 20  # never below dirty
    ltc, _ = log_to_clean(("t", 0), LOG, 0, 35, None, COMPACT, NOW, 15)
    assert ltc.first_uncleanable_offset == 15 and ltc.cleanable_bytes == 200


class Aborted(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def test_aborted_transactions_records_go_and_their_marker_stays_while_a_batch_of_theirs_was_met():
    """CleanedTransactionMetadata: producer 1 aborts [10, 20], producer 2 commits [12, 21]."""
    txn = Aborted(1, 10, 20, 21)
    meta = CleanedTransactionMetadata([txn, txn])  # listed twice (two segments' ranges): counted once
    assert not meta.on_batch_read(-1, 5, False)  # plain data
    assert meta.on_batch_read(1, 11, True)  # aborted: its records go
    assert not meta.on_batch_read(2, 13, True)  # committed: cleaned like any data
    assert not meta.on_batch_read(1, 14, False)  # not transactional: never aborted
    assert not meta.on_control_batch_read(1, 20, ControlType.ABORT)  # a batch of it was met: kept...
    assert meta.take_cleaned_index() == [txn]  # ...with its index entry
    assert not meta.on_control_batch_read(2, 21, ControlType.COMMIT)  # a batch of it was met: kept
    assert not meta.on_batch_read(1, 30, True)  # after its ABORT, producer 1's next transaction is not aborted
    assert meta.take_cleaned_index() == []

    # the next round: the aborted batches are gone, so are the committed ones (superseded)
    later = CleanedTransactionMetadata([txn])
    assert later.on_control_batch_read(1, 20, ControlType.ABORT)  # nothing of it left: may go
    assert later.on_control_batch_read(2, 21, ControlType.COMMIT)
    assert later.take_cleaned_index() == []
    assert later.on_control_batch_read(3, 40, None)  # an emptied marker goes
