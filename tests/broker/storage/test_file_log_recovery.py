"""FileLog only: files on disk, restarts, crashes, torn tails and fsync placement."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from quafka.broker.storage import FileLog, FileLogStore, LogConfig
from quafka.broker.storage import file_log as file_log_module
from quafka.broker.storage.file_log import InconsistentTopicIdError


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "logs"


def open_file_log(log_dir, kit, config=LogConfig(index_interval_bytes=300), now_ms=0) -> FileLog:
    return FileLogStore(log_dir).open_log("t", 0, kit.topic_id, config, now_ms)


def fill(log, kit, batches=20, records=3):
    for i in range(batches):
        kit.append(log, [kit.timed_batch([1_000 + 10 * i + r for r in range(records)])], now_ms=i)


def snapshot(log):
    return (
        log.log_start_offset, log.log_end_offset, log.size_bytes, log.segment_base_offsets,
        log.read(0, 1 << 30), log.max_timestamp_offset(), [log.offset_for_timestamp(t) for t in range(990, 1_210, 13)],
        list(log.iter_batch_headers(7)),
    )


def count_scans(monkeypatch):
    scanned = []
    original = file_log_module._Segment.scan

    def scan(self, interval_bytes, verify_crc):
        scanned.append((self.base_offset, verify_crc))
        return original(self, interval_bytes, verify_crc)

    monkeypatch.setattr(file_log_module._Segment, "scan", scan)
    return scanned


def segment_file(log, base_offset, suffix=".log"):
    return os.path.join(log.dir_path, f"{base_offset:020d}{suffix}")


# ----------------------------------------------------------------------------- restarts

def test_reopen_after_close_loads_the_indexes(log_dir, kit, monkeypatch):
    config = LogConfig(segment_bytes=1_000, index_interval_bytes=150)
    log = open_file_log(log_dir, kit, config)
    fill(log, kit)
    before = snapshot(log)
    assert len(before[3]) > 3
    log.close()
    for base in before[3]:
        assert os.path.exists(segment_file(log, base, ".index"))
        assert os.path.exists(segment_file(log, base, ".timeindex"))
    scanned = count_scans(monkeypatch)
    reopened = open_file_log(log_dir, kit, config)
    assert scanned == []  # a clean close: not even the active segment is scanned (Kafka: no recovery)
    assert snapshot(reopened) == before
    assert kit.append(reopened, [kit.batch()], now_ms=100).first_offset == before[1]
    after_append = snapshot(reopened)
    reopened.close()  # the active segment's indexes are written again, for its new size
    again = open_file_log(log_dir, kit, config)
    assert scanned == [] and snapshot(again) == after_append
    assert kit.append(again, [kit.batch()], now_ms=200).first_offset == before[1] + 1
    again.release()  # a crash after appending: the index files left no longer fit the active segment
    recovered = open_file_log(log_dir, kit, config)
    assert scanned == [(after_append[3][-1], True)]
    assert recovered.log_end_offset == before[1] + 2
    recovered.close()


def test_missing_or_corrupt_indexes_are_rebuilt(log_dir, kit, monkeypatch):
    config = LogConfig(segment_bytes=1_000, index_interval_bytes=150)
    log = open_file_log(log_dir, kit, config)
    fill(log, kit)
    before = snapshot(log)
    bases = before[3]
    log.close()
    os.unlink(segment_file(log, bases[0], ".timeindex"))
    with open(segment_file(log, bases[1], ".index"), "r+b") as f:
        f.seek(3)
        f.write(b"\xff")
    os.truncate(segment_file(log, bases[2], ".index"), 10)
    scanned = count_scans(monkeypatch)
    reopened = open_file_log(log_dir, kit, config)
    assert sorted(scanned) == [(bases[0], False), (bases[1], False), (bases[2], False)]
    assert snapshot(reopened) == before
    reopened.close()
    scanned.clear()
    open_file_log(log_dir, kit, config).close()  # the rebuilt indexes were written out
    assert scanned == []


def test_reopen_after_a_crash_without_close(log_dir, kit):
    config = LogConfig(segment_bytes=1_000, index_interval_bytes=150)
    log = open_file_log(log_dir, kit, config)
    fill(log, kit)
    before = snapshot(log)
    log.release()  # as if the process were killed: no flush, no index files for the active segment
    active = before[3][-1]
    assert not os.path.exists(segment_file(log, active, ".index"))
    assert os.path.exists(segment_file(log, before[3][0], ".index"))  # written when rolled
    reopened = open_file_log(log_dir, kit, config)
    assert snapshot(reopened) == before
    reopened.close()


def test_appends_survive_sigkill_of_the_process(log_dir, kit):
    script = textwrap.dedent(
        f"""
        import os, signal
        from quafka.broker.storage import FileLogStore, LogConfig
        from quafka.protocol.record_batch import build_batch, validate_batches
        log = FileLogStore({str(log_dir)!r}).open_log("t", 0, {kit.topic_id!r}, LogConfig(segment_bytes=4000), 0)
        for i in range(50):
            buf = bytearray(build_batch([(None, b"v" * 100)] * 3, base_timestamp=i))
            log.append(buf, validate_batches(buf, 1 << 20), i)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert result.returncode == -signal.SIGKILL, result.stderr
    log = open_file_log(log_dir, kit)
    assert log.log_end_offset == 150
    assert [h.max_timestamp for h in log.iter_batch_headers()] == list(range(50))
    log.close()


def test_torn_tail_is_truncated_at_the_last_whole_batch(log_dir, kit):
    log = open_file_log(log_dir, kit)
    batches = [kit.batch(2, tag=i) for i in range(5)]
    for b in batches:
        kit.append(log, [b])
    size = len(batches[0])
    path = segment_file(log, 0)
    log.release()
    os.truncate(path, 5 * size - 7)  # the last batch lost its end
    log = open_file_log(log_dir, kit)
    assert (log.log_end_offset, log.size_bytes, os.path.getsize(path)) == (8, 4 * size, 4 * size)
    assert log.read(0, 1 << 20) == b"".join(kit.stamped(b, 2 * i) for i, b in enumerate(batches[:4]))
    log.release()
    os.truncate(path, 3 * size + 30)  # a partial header
    log = open_file_log(log_dir, kit)
    assert (log.log_end_offset, os.path.getsize(path)) == (6, 3 * size)
    assert kit.append(log, [kit.batch(tag=9)]).first_offset == 6
    assert log.read(6, 1 << 20) == kit.stamped(kit.batch(tag=9), 6)
    log.close()


def test_corrupt_crc_in_the_tail_truncates_there(log_dir, kit):
    log = open_file_log(log_dir, kit)
    batches = [kit.batch(2, tag=i) for i in range(5)]
    kit.append(log, batches)
    size = len(batches[0])
    path = segment_file(log, 0)
    log.release()  # a crash (after a clean close the active segment is not recovered, as Kafka's)
    with open(path, "r+b") as f:  # flip a byte inside the records of the third batch
        f.seek(2 * size + 70)
        byte = f.read(1)
        f.seek(2 * size + 70)
        f.write(bytes([byte[0] ^ 0x01]))
    log = open_file_log(log_dir, kit)
    assert (log.log_end_offset, log.size_bytes, os.path.getsize(path)) == (4, 2 * size, 2 * size)
    assert [h.base_offset for h in log.iter_batch_headers()] == [0, 2]
    log.close()


def test_only_the_active_segment_is_recovered_with_crc_checks(log_dir, kit, monkeypatch):
    size = len(kit.batch(2))
    config = LogConfig(segment_bytes=2 * size)
    log = open_file_log(log_dir, kit, config)
    for i in range(5):
        kit.append(log, [kit.batch(2, tag=i)])
    assert log.segment_base_offsets == [0, 4, 8]
    log.close()
    os.truncate(segment_file(log, 8), size - 1)
    log = open_file_log(log_dir, kit, config)
    assert (log.segment_base_offsets, log.log_end_offset) == ([0, 4, 8], 8)
    assert kit.append(log, [kit.batch(2)]).first_offset == 8
    log.close()


def test_batches_larger_than_the_read_chunks(log_dir, kit):
    big = kit.timed_batch([5_000 + i for i in range(12)], value_bytes=110_000)  # ~1.3 MB
    assert len(big) > 1 << 20
    config = LogConfig(segment_bytes=2 << 20, index_interval_bytes=0)
    log = open_file_log(log_dir, kit, config)
    small = [kit.timed_batch([1_000 + i]) for i in range(3)]
    kit.append(log, small[:2])
    kit.append(log, [big])
    kit.append(log, small[2:])
    kit.append(log, [big])  # rolls
    before = snapshot(log)
    assert before[3] == [0, 15]
    assert log.offset_for_timestamp(5_003) == (5, 5_003)
    assert log.read(14, 10) == kit.stamped(small[2], 14)
    log.release()
    log = open_file_log(log_dir, kit, config)
    assert snapshot(log) == before
    assert [h.base_offset for h in log.iter_batch_headers()] == [0, 1, 2, 14, 15]
    log.close()


def test_checkpoint_beyond_a_lost_tail_is_clamped(log_dir, kit):
    log = open_file_log(log_dir, kit)
    batches = [kit.batch(2, tag=i) for i in range(3)]
    kit.append(log, batches)
    log.delete_records_before(5)
    log.release()
    os.truncate(segment_file(log, 0), 2 * len(batches[0]))  # offsets 4 and 5 are lost
    log = open_file_log(log_dir, kit)
    assert (log.log_start_offset, log.log_end_offset) == (4, 4)
    kit.append(log, batches)
    log.close()
    log = open_file_log(log_dir, kit)
    assert (log.log_start_offset, log.log_end_offset) == (4, 10)
    log.close()


def test_log_start_offset_checkpoint_survives_reopen(log_dir, kit):
    size = len(kit.batch(2))
    config = LogConfig(segment_bytes=2 * size)
    log = open_file_log(log_dir, kit, config)
    for i in range(6):
        kit.append(log, [kit.batch(2, tag=i)])
    checkpoint = os.path.join(log.dir_path, file_log_module.LOG_START_FILE)
    assert not os.path.exists(checkpoint)
    assert log.delete_records_before(6) == 6
    with open(checkpoint) as f:
        assert f.read().strip() == "6"
    assert log.segment_base_offsets == [4, 8]
    log.release()  # a crash right after DeleteRecords
    log = open_file_log(log_dir, kit, config)
    assert (log.log_start_offset, log.segment_base_offsets, log.log_end_offset) == (6, [4, 8], 12)
    log.close()


def test_new_log_with_a_checkpoint_but_no_segments_starts_there(log_dir, kit):
    log = open_file_log(log_dir, kit)
    kit.append(log, [kit.batch(3)])
    log.delete_records_before(3)
    log.close()
    os.unlink(segment_file(log, 0))
    log = open_file_log(log_dir, kit)
    assert (log.log_start_offset, log.log_end_offset, log.segment_base_offsets) == (3, 3, [3])
    log.close()


# ----------------------------------------------------------------------------- the store

def test_partition_metadata_round_trip(log_dir, kit):
    store = FileLogStore(log_dir)
    log = store.open_log("orders", 3, kit.topic_id, LogConfig(), 0)
    with open(os.path.join(log.dir_path, "partition.metadata")) as f:
        assert f.read() == f"version: 0\ntopic_id: {kit.topic_id}\n"
    store.close()
    store = FileLogStore(log_dir)
    assert store.existing_logs() == [("orders", 3, kit.topic_id)]
    with pytest.raises(InconsistentTopicIdError):
        store.open_log("orders", 3, "0" * 32, LogConfig(), 0)
    log = store.open_log("orders", 3, kit.topic_id, LogConfig(), 0)
    assert store.open_log("orders", 3, kit.topic_id, LogConfig(), 0) is log  # already open
    store.close()


def test_existing_logs_parses_names_and_removes_deleted_leftovers(log_dir, kit):
    store = FileLogStore(log_dir)
    for topic, partition in [("my-topic.v2", 10), ("a", 0), ("x-1", 2)]:
        store.open_log(topic, partition, kit.topic_id, LogConfig(), 0)
    os.mkdir(log_dir / "not-a-partition")
    os.mkdir(log_dir / "b-7")  # no partition.metadata
    leftover = log_dir / "gone-0.0123456789abcdef0123456789abcdef-delete"
    os.mkdir(leftover)
    (leftover / "00000000000000000000.log").write_bytes(b"x")
    (log_dir / "stray-file-1").write_text("")
    assert store.existing_logs() == [
        ("a", 0, kit.topic_id), ("b", 7, None), ("my-topic.v2", 10, kit.topic_id), ("x-1", 2, kit.topic_id),
    ]
    assert not leftover.exists()
    store.close()


def test_delete_log_removes_the_directory(log_dir, kit):
    store = FileLogStore(log_dir)
    log = store.open_log("t", 0, kit.topic_id, LogConfig(), 0)
    kit.append(log, [kit.batch(3)])
    store.delete_log("t", 0)
    assert os.listdir(log_dir) == []
    assert store.existing_logs() == []
    log = store.open_log("t", 0, "f" * 32, LogConfig(), 0)
    assert log.log_end_offset == 0
    store.delete_log("t", 0)
    store.delete_log("t", 0)  # already gone
    store.close()


# ----------------------------------------------------------------------------- fsync placement

def record_fsyncs(monkeypatch, events):
    monkeypatch.setattr(os, "fsync", lambda fd: events.append("fsync"))
    if hasattr(os, "fdatasync"):
        monkeypatch.setattr(os, "fdatasync", lambda fd: events.append("fsync"))


def test_flush_messages_1_fsyncs_inside_append_before_it_returns(log_dir, kit, monkeypatch):
    """Acceptance: with log.flush.interval.messages=1 the fsync happens before the Produce response."""
    log = open_file_log(log_dir, kit, LogConfig(flush_messages=1))
    events: list[str] = []
    log.add_listener(lambda event: events.append(event.kind))
    record_fsyncs(monkeypatch, events)
    kit.append(log, [kit.batch(2)])
    events.append("returned")
    # the data (and the new segment's directory entry) are synced before listeners and the return
    assert events[-2:] == ["append", "returned"] and set(events[:-2]) == {"fsync"}
    events.clear()
    kit.append(log, [kit.batch(1)])
    assert events == ["fsync", "append"]
    log.close()


def test_flush_messages_counts_records(log_dir, kit, monkeypatch):
    log = open_file_log(log_dir, kit, LogConfig(flush_messages=5))
    events: list[str] = []
    record_fsyncs(monkeypatch, events)
    kit.append(log, [kit.batch(2)])
    kit.append(log, [kit.batch(2)])
    assert events == []
    kit.append(log, [kit.batch(1)])
    assert events and set(events) == {"fsync"}
    events.clear()
    kit.append(log, [kit.batch(4)])
    assert events == []
    log.close()


def test_default_flush_leaves_appends_to_the_os(log_dir, kit, monkeypatch):
    size = len(kit.batch(100))
    log = open_file_log(log_dir, kit, LogConfig(segment_bytes=3 * size))
    events: list[str] = []
    record_fsyncs(monkeypatch, events)
    for _ in range(10):  # rolls too
        kit.append(log, [kit.batch(100)])
    assert events == []
    path = segment_file(log, log.segment_base_offsets[-1])
    assert os.path.getsize(path) == log.size_bytes - 9 * size  # written, not buffered
    assert not log.maybe_flush(now_ms=10**9)
    log.flush()
    assert events and set(events) == {"fsync"}
    log.close()
