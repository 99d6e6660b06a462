"""The aborted-transaction index (Kafka's TransactionIndex / AbortedTxn, `<base>.txnindex`): kept
per segment by both engines, collected as UnifiedLog.collectAbortedTransactions does, deleted with
its segment, reset when its segment is recovered after a crash."""

from __future__ import annotations

import os
import struct

from quafka.broker.storage import AbortedTxn, FileLogStore, LogConfig
from quafka.broker.storage.txn_index import ENTRY_SIZE, decode_entries
from quafka.protocol.control_batches import end_txn_marker_batch

from .conftest import TOPIC_ID, append, batch

SMALL = LogConfig(segment_bytes=400)  # about two 150-byte batches per segment


def fill(log, count: int) -> None:
    for i in range(count):
        append(log, [batch(1, value_bytes=100, tag=i)])


def marker(log, producer_id: int) -> None:
    append(log, [end_txn_marker_batch(producer_id, 0, 0, False, 0)])


def test_entries_live_in_the_segment_of_their_marker_and_are_collected_by_overlap(open_log):
    log = open_log(SMALL)
    fill(log, 6)  # offsets 0..5 over three segments
    bases = log.segment_base_offsets
    assert len(bases) == 3
    assert log.append_aborted_txn(AbortedTxn(10, 0, 1, 2))
    assert log.append_aborted_txn(AbortedTxn(11, 2, 3, 1))  # producer 12's transaction is open since 1
    assert log.append_aborted_txn(AbortedTxn(12, 1, 5, 6))
    assert not log.append_aborted_txn(AbortedTxn(12, 1, 5, 6))  # a replay adds nothing twice
    assert log.aborted_transactions(0, 6) == [(10, 0, 1, 2), (12, 1, 5, 6), (11, 2, 3, 1)]  # by first offset
    assert log.aborted_transactions(2, 3) == [(12, 1, 5, 6), (11, 2, 3, 1)]  # last >= 2 and first < 3
    assert log.aborted_transactions(4, 6) == [(12, 1, 5, 6)]
    # TxnIndexSearchResult.isComplete: the walk stops after an entry whose LSO reaches the end
    assert log.aborted_transactions(0, 2) == [(10, 0, 1, 2)]


def test_retention_and_delete_records_remove_the_segments_entries(open_log):
    log = open_log(SMALL)
    fill(log, 6)
    log.append_aborted_txn(AbortedTxn(10, 0, 1, 2))
    log.append_aborted_txn(AbortedTxn(11, 2, 3, 4))
    log.delete_records_before(log.segment_base_offsets[1])
    assert log.aborted_transactions(0, 6) == [(11, 2, 3, 4)]
    if hasattr(log, "dir_path"):
        names = sorted(n for n in os.listdir(log.dir_path) if n.endswith(".txnindex"))
        assert names == [f"{log.segment_base_offsets[0]:020d}.txnindex"]


def test_retention_deletes_the_index_with_its_segment(open_log):
    log = open_log(LogConfig(segment_bytes=400, retention_bytes=500))
    fill(log, 6)  # three segments of two batches
    log.append_aborted_txn(AbortedTxn(10, 0, 1, 2))
    log.append_aborted_txn(AbortedTxn(11, 0, 3, 4))
    assert log.enforce_retention(0)  # the oldest segment goes (the rest still holds 500 bytes)
    assert log.log_start_offset == 2 and log.aborted_transactions(0, 6) == [(11, 0, 3, 4)]
    if hasattr(log, "dir_path"):
        assert sorted(n for n in os.listdir(log.dir_path) if n.endswith(".txnindex")) == [f"{2:020d}.txnindex"]


def test_file_layout_is_kafkas_34_byte_entries(tmp_path):
    store = FileLogStore(tmp_path)
    log = store.open_log("t", 0, TOPIC_ID, LogConfig(), 0)
    fill(log, 3)
    log.append_aborted_txn(AbortedTxn(4242, 0, 2, 3))
    with open(os.path.join(log.dir_path, f"{0:020d}.txnindex"), "rb") as f:
        data = f.read()
    assert ENTRY_SIZE == 34 and data == struct.pack(">hqqqq", 0, 4242, 0, 2, 3)
    store.close()


def test_clean_restart_loads_the_index_and_crash_recovery_resets_the_active_segments(tmp_path):
    store = FileLogStore(tmp_path)
    log = store.open_log("t", 0, TOPIC_ID, SMALL, 0)
    fill(log, 1)
    marker(log, 1)  # segment 0: data at 0, ABORT at 1
    fill(log, 1)
    marker(log, 2)  # segment 2: data at 2, ABORT at 3
    assert log.segment_base_offsets == [0, 2]
    log.append_aborted_txn(AbortedTxn(1, 0, 1, 2))
    log.append_aborted_txn(AbortedTxn(2, 2, 3, 4))
    store.close()
    store = FileLogStore(tmp_path)
    log = store.open_log("t", 0, TOPIC_ID, SMALL, 0)
    assert log.txn_index_rebuild_from is None
    assert log.aborted_transactions(0, 4) == [(1, 0, 1, 2), (2, 2, 3, 4)]
    append(log, [batch(1, value_bytes=10)])  # offset 4 in the active segment, then a crash: it is scanned
    log.release()
    store = FileLogStore(tmp_path)
    log = store.open_log("t", 0, TOPIC_ID, SMALL, 0)
    # the active segment holds a marker: its index is rebuilt by the broker's replay from its base
    assert log.txn_index_rebuild_from == 2
    assert log.aborted_transactions(0, 5) == [(1, 0, 1, 2)]
    assert not os.path.exists(os.path.join(log.dir_path, f"{2:020d}.txnindex"))
    store.close()


def test_crash_recovery_of_a_segment_without_markers_asks_no_rebuild(tmp_path):
    store = FileLogStore(tmp_path)
    log = store.open_log("t", 0, TOPIC_ID, LogConfig(), 0)
    fill(log, 3)
    log.release()  # a crash: the active segment is scanned, finds no marker
    store = FileLogStore(tmp_path)
    log = store.open_log("t", 0, TOPIC_ID, LogConfig(), 0)
    assert log.log_end_offset == 3 and log.txn_index_rebuild_from is None  # no longer producer replay
    store.close()


def test_entries_past_a_truncated_tail_are_dropped(tmp_path):
    store = FileLogStore(tmp_path)
    log = store.open_log("t", 0, TOPIC_ID, LogConfig(), 0)
    fill(log, 1)
    marker(log, 1)
    marker(log, 2)
    log.append_aborted_txn(AbortedTxn(1, 0, 1, 2))
    log.append_aborted_txn(AbortedTxn(2, 0, 2, 3))
    store.close()
    path = os.path.join(log.dir_path, f"{0:020d}.txnindex")
    with open(path, "ab") as f:
        f.write(b"\x00" * 10)  # a torn entry
    seg = os.path.join(log.dir_path, f"{0:020d}.log")
    os.truncate(seg, os.path.getsize(seg) - 1)  # the last batch (offset 2, a marker) is torn
    store = FileLogStore(tmp_path)
    log = store.open_log("t", 0, TOPIC_ID, LogConfig(), 0)
    assert log.log_end_offset == 2 and log.txn_index_rebuild_from == 0
    assert log.aborted_transactions(0, 2) == []  # reset: the replay rebuilds what the log still holds
    store.close()
    assert decode_entries(b"\x00" * 33) == []


def test_an_index_of_an_unknown_version_is_rebuilt(tmp_path):
    store = FileLogStore(tmp_path)
    log = store.open_log("t", 0, TOPIC_ID, LogConfig(), 0)
    fill(log, 3)
    log.append_aborted_txn(AbortedTxn(1, 0, 1, 2))
    store.close()
    with open(os.path.join(log.dir_path, f"{0:020d}.txnindex"), "r+b") as f:
        f.write(b"\x00\x07")  # version 7
    store = FileLogStore(tmp_path)
    log = store.open_log("t", 0, TOPIC_ID, LogConfig(), 0)
    assert log.txn_index_rebuild_from == 0 and log.aborted_transactions(0, 3) == []
    store.close()
