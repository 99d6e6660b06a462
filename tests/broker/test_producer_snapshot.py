"""Producer-state snapshots (Kafka's ProducerStateManager `<offset>.snapshot` files).

The file layout round-trips and matches Kafka's; a snapshot is taken at each segment roll and on
clean shutdown and goes with its segment; a restart after a clean shutdown replays no batch header
below the snapshot; a SIGKILL restart starts from the last roll's snapshot and replays the tail,
and idempotent deduplication keeps working across it; a corrupt snapshot is skipped with a
warning (an older one, or a scan from the log start, is used)."""

from __future__ import annotations

import logging
import os
import struct
from datetime import timedelta

import crc32c
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from support import RawClient

from quafka import EmbeddedBroker
from quafka.broker.core.producer_state import INT32_MAX, Duplicate, ProducerStateTable
from quafka.broker.storage import FileLogStore, LogConfig
from quafka.broker.storage.file_log import FileLog
from quafka.broker.storage.producer_snapshot import (
    CorruptSnapshotError,
    ProducerSnapshots,
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    snapshot_file_name,
)
from quafka.protocol.record_batch import build_batch, validate_batches

SEGMENT_BYTES = 1048576  # the smallest segment.bytes Kafka allows
RECORDS_PER_BATCH = 4
RECORD_BYTES = 25_000  # ~100 KB batches: ten to a segment
OUT_OF_ORDER_SEQUENCE_NUMBER = 45

# ----------------------------------------------------------------------------- helpers


class RawIdempotentProducer:
    """One idempotent producer (InitProducerId, then Produce v9 with explicit sequences)."""

    def __init__(self, bootstrap: str) -> None:
        self.raw = RawClient(bootstrap)
        init = self.raw.request(InitProducerIdRequest(
            transactional_id=None, transaction_timeout=timedelta(seconds=60), producer_id=-1, producer_epoch=-1))
        assert init.error_code == 0
        self.producer_id = init.producer_id

    def produce(self, topic: str, batch_index: int):
        """The batch_index-th batch (sequence RECORDS_PER_BATCH * batch_index); its partition response."""
        seq = RECORDS_PER_BATCH * batch_index
        records = build_batch([(None, b"%d-" % (seq + i) + b"x" * RECORD_BYTES) for i in range(RECORDS_PER_BATCH)],
                              producer_id=self.producer_id, producer_epoch=0, base_sequence=seq,
                              base_timestamp=1_700_000_000_000 + batch_index)
        request = ProduceRequest(transactional_id=None, acks=-1, timeout=timedelta(seconds=10), topic_data=(
            TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=0, records=records),)),))
        return self.raw.request(request).responses[0].partition_responses[0]

    def close(self) -> None:
        self.raw.close()


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)


def produce_batches(bootstrap: str, topic: str, count: int) -> tuple[RawIdempotentProducer, list[int]]:
    producer = RawIdempotentProducer(bootstrap)
    offsets = []
    for i in range(count):
        resp = producer.produce(topic, i)
        assert resp.error_code == 0
        offsets.append(resp.base_offset)
    assert offsets == [RECORDS_PER_BATCH * i for i in range(count)]
    return producer, offsets


def files_of(partition_dir, suffix: str) -> list[int]:
    return sorted(int(n[: -len(suffix)]) for n in os.listdir(partition_dir) if n.endswith(suffix))


@pytest.fixture
def header_reads(monkeypatch):
    """Every FileLog.iter_batch_headers call: [topic, start_offset, headers yielded]."""
    calls: list[list] = []
    original = FileLog.iter_batch_headers

    def spy(self, start_offset=0):
        call = [self.topic, start_offset, 0]
        calls.append(call)
        for header in original(self, start_offset):
            call[2] += 1
            yield header

    monkeypatch.setattr(FileLog, "iter_batch_headers", spy)
    return calls


def check_dedup_after_restart(bootstrap: str, topic: str, producer_id: int, batches: int) -> None:
    """The last batch and the oldest of the last five retried: duplicates with their offsets; the
    next batch goes at the log end; a gap is refused."""
    producer = RawIdempotentProducer(bootstrap)
    producer.producer_id = producer_id  # the same producer, reconnected
    try:
        for i in (batches - 1, batches - 5):
            again = producer.produce(topic, i)
            assert (again.error_code, again.base_offset) == (0, RECORDS_PER_BATCH * i), f"batch {i} written twice"
        nxt = producer.produce(topic, batches)
        assert (nxt.error_code, nxt.base_offset) == (0, RECORDS_PER_BATCH * batches)
        gap = producer.produce(topic, batches + 2)
        assert gap.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    finally:
        producer.close()


# ----------------------------------------------------------------------------- the file


def test_snapshot_round_trips_in_kafkas_layout():
    entries = [SnapshotEntry(7, 2, 41, 1041, 3, 1_700_000_000_123), SnapshotEntry(2**62, 0, INT32_MAX, 5, 0, -1)]
    data = encode_snapshot(entries)
    assert len(data) == 2 + 4 + 4 + 46 * len(entries)
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 2)
    assert crc == crc32c.crc32c(data[6:])  # CRC32C of everything after the crc field
    # producer_id int64, epoch int16, last_sequence int32, last_offset int64, offset_delta int32,
    # timestamp int64, coordinator_epoch int32, current_txn_first_offset int64
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (7, 2, 41, 1041, 3, 1_700_000_000_123, -1, -1)
    assert decode_snapshot(data) == entries
    assert decode_snapshot(encode_snapshot([])) == []


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "empty", "version 2", "extra byte"])
def test_a_damaged_snapshot_is_refused(damage):
    data = bytearray(encode_snapshot([SnapshotEntry(7, 0, 9, 9, 0)] * 3))
    if damage == "flipped byte":
        data[20] ^= 0x10
    elif damage == "truncated":
        del data[-5:]
    elif damage == "empty":
        data = bytearray()
    elif damage == "version 2":
        data[1] = 2
    else:
        data += b"\0"
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(data))


def test_table_round_trips_through_a_snapshot_with_every_remembered_batch():
    table = ProducerStateTable()
    for i in range(7):  # only the last five are remembered
        table.record(11, 0, 10 * i, 10 * i + 9, 100 * i, 100 * i + 9, 5_000 + i)
    table.record(12, 3, INT32_MAX - 1, 1, 900, 903)  # a sequence that wraps
    table.record(13, 0, 0, 0, 5, 5)
    loaded = ProducerStateTable()
    loaded.load_snapshot(decode_snapshot(encode_snapshot(table.snapshot_entries())))
    assert loaded.entries == table.entries
    assert loaded.check(11, 0, 20, 29) == Duplicate(200, 209)  # not the last batch: still known
    assert loaded.check(12, 3, INT32_MAX - 1, 1) == Duplicate(900, 903)


def test_loading_drops_batches_below_the_log_start():
    table = ProducerStateTable()
    table.record(1, 0, 0, 4, 0, 4)
    table.record(1, 0, 5, 9, 5, 9)
    table.record(2, 0, 0, 0, 3, 3)  # all of producer 2 was deleted
    loaded = ProducerStateTable()
    loaded.load_snapshot(table.snapshot_entries(), log_start_offset=5)
    assert list(loaded.entries) == [1]
    assert [b.first_offset for b in loaded.entries[1].batches] == [5]


# ----------------------------------------------------------------------------- files next to segments


def test_snapshots_go_with_their_segments_and_strays_are_removed_on_open(tmp_path):
    store = FileLogStore(tmp_path)
    config = LogConfig(segment_bytes=600)
    log = store.open_log("t", 0, "ab" * 16, config, 0)
    log.roll_listener = lambda offset: log.producer_snapshots.write(
        offset, [SnapshotEntry(1, 0, offset, offset, 0)], sync=False)
    for i in range(8):
        buf = bytearray(build_batch([(None, b"v" * 400)], producer_id=1, producer_epoch=0, base_sequence=i))
        log.append(buf, validate_batches(buf, 1 << 20), now_ms=i)
    bases = log.segment_base_offsets
    assert bases == list(range(8))
    assert files_of(log.dir_path, ".snapshot") == list(range(1, 8))  # one per roll, at the new base
    log.delete_records_before(5)
    assert files_of(log.dir_path, ".snapshot") == [5, 6, 7]  # deleted with segments 0..4
    log.close()
    for stray in (2, 8, 9, 12):  # below the log start; at the log end (a clean shutdown's); past the end
        open(os.path.join(log.dir_path, snapshot_file_name(stray)), "wb").close()
    reopened = FileLogStore(tmp_path).open_log("t", 0, "ab" * 16, config, 10)
    # at segment bases, plus the newest stray that lies above the last base and within the log
    assert reopened.log_end_offset == 8
    assert files_of(reopened.dir_path, ".snapshot") == [5, 6, 7, 8]
    assert reopened.producer_snapshots.offsets == [5, 6, 7, 8]
    reopened.close()


def test_unreadable_snapshots_are_deleted_and_an_older_one_is_used(tmp_path, caplog):
    snapshots = ProducerSnapshots(str(tmp_path))
    snapshots.write(10, [SnapshotEntry(1, 0, 9, 9, 0)], sync=True)
    snapshots.write(20, [SnapshotEntry(1, 0, 19, 19, 0)], sync=False)
    with open(snapshots.path(20), "r+b") as f:
        f.seek(12)
        f.write(b"\xff")
    snapshots.write(30, [], sync=False)
    with caplog.at_level(logging.WARNING, logger="quafka.storage"):
        assert snapshots.load_latest(25) == (10, [SnapshotEntry(1, 0, 9, 9, 0)])  # 30 is past the end
    assert "00000000000000000020.snapshot" in caplog.text and "CRC" in caplog.text
    assert files_of(tmp_path, ".snapshot") == [10, 30]
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


# ----------------------------------------------------------------------------- restarts of a real broker


def test_clean_restart_replays_no_batch_header_below_the_snapshot(tmp_path, header_reads):
    data = tmp_path / "data"
    with EmbeddedBroker(str(data), {"log.segment.bytes": SEGMENT_BYTES}) as broker:
        create_topic(broker.bootstrap_servers, "idem")
        producer, _ = produce_batches(broker.bootstrap_servers, "idem", 23)
        producer.close()
        end = broker.server.state.topics["idem"].partitions[0].log.log_end_offset
    part_dir = data / "idem-0"
    bases = files_of(part_dir, ".log")
    assert len(bases) == 3 and end == 23 * RECORDS_PER_BATCH
    assert files_of(part_dir, ".snapshot") == bases[1:] + [end]  # one per roll, one at clean shutdown
    header_reads.clear()
    with EmbeddedBroker(str(data), {"log.segment.bytes": SEGMENT_BYTES}) as broker:
        at_start = [c for c in header_reads if c[0] == "idem"]
        assert at_start == [["idem", end, 0]]  # from the snapshot's offset, and nothing there
        check_dedup_after_restart(broker.bootstrap_servers, "idem", producer.producer_id, 23)


def test_a_clean_stop_writes_nothing_for_an_empty_partition_and_it_reopens_empty(tmp_path, header_reads):
    """An empty partition gets no producer snapshot at a clean stop (Kafka's
    ProducerStateManager.takeSnapshot writes only past the last snapshot's offset, 0 for a fresh
    log) and no index files (an empty active segment is scanned at start-up, never indexed); it
    reopens at offset 0, and an idempotent producer's first batch goes there."""
    data = tmp_path / "data"
    with EmbeddedBroker(str(data)) as broker:
        create_topic(broker.bootstrap_servers, "empty")
    part_dir = data / "empty-0"
    assert files_of(part_dir, ".log") == [0]
    assert files_of(part_dir, ".snapshot") == [] and files_of(part_dir, ".index") == []
    assert files_of(part_dir, ".timeindex") == []
    header_reads.clear()
    with EmbeddedBroker(str(data)) as broker:
        assert broker.server.state.topics["empty"].partitions[0].log.log_end_offset == 0
        assert [c for c in header_reads if c[0] == "empty"] == [["empty", 0, 0]]
        producer, offsets = produce_batches(broker.bootstrap_servers, "empty", 2)
        producer.close()
    assert offsets == [0, RECORDS_PER_BATCH]
    assert files_of(part_dir, ".snapshot") == [2 * RECORDS_PER_BATCH] and files_of(part_dir, ".index") == [0]


def test_sigkill_restart_reads_the_last_rolls_snapshot_and_dedup_survives(tmp_path, broker_process):
    data = tmp_path / "data"
    broker = broker_process(str(data), overrides={"log.segment.bytes": str(SEGMENT_BYTES)})
    create_topic(broker.bootstrap_servers, "idem")
    producer, _ = produce_batches(broker.bootstrap_servers, "idem", 23)
    producer.close()
    broker.kill()
    part_dir = data / "idem-0"
    bases = files_of(part_dir, ".log")
    assert len(bases) == 3
    # no clean-shutdown snapshot: the restart must use the last roll's one and replay the active
    # segment, which holds three of the last five batches (the other two are in the snapshot)
    assert files_of(part_dir, ".snapshot") == bases[1:]
    assert bases[-1] == 20 * RECORDS_PER_BATCH
    broker.start()
    check_dedup_after_restart(broker.bootstrap_servers, "idem", producer.producer_id, 23)
    # the restart took a snapshot at the recovered log end (Kafka's rebuildProducerState does)
    assert 23 * RECORDS_PER_BATCH in files_of(part_dir, ".snapshot")
    assert broker.stop() == 0


@pytest.mark.parametrize("corrupt", ["the newest", "all"])
def test_a_corrupt_snapshot_falls_back_to_an_older_one_or_a_full_scan(tmp_path, header_reads, caplog, corrupt):
    data = tmp_path / "data"
    with EmbeddedBroker(str(data), {"log.segment.bytes": SEGMENT_BYTES}) as broker:
        create_topic(broker.bootstrap_servers, "idem")
        producer, _ = produce_batches(broker.bootstrap_servers, "idem", 23)
        producer.close()
    part_dir = data / "idem-0"
    snapshots = files_of(part_dir, ".snapshot")
    end = snapshots[-1]
    damaged = snapshots[-1:] if corrupt == "the newest" else snapshots
    for offset in damaged:
        path = part_dir / snapshot_file_name(offset)
        raw = bytearray(path.read_bytes())
        raw[-1] ^= 0xFF
        path.write_bytes(bytes(raw))
    header_reads.clear()
    with caplog.at_level(logging.WARNING, logger="quafka.storage"):
        with EmbeddedBroker(str(data), {"log.segment.bytes": SEGMENT_BYTES}) as broker:
            at_start = [c for c in header_reads if c[0] == "idem"]
            if corrupt == "the newest":  # the last roll's snapshot, then the active segment's 3 batches
                assert at_start == [["idem", snapshots[-2], 3]]
            else:  # a scan from the log start
                assert at_start == [["idem", 0, 23]]
            check_dedup_after_restart(broker.bootstrap_servers, "idem", producer.producer_id, 23)
    for offset in damaged:
        assert snapshot_file_name(offset) in caplog.text
    assert end in files_of(part_dir, ".snapshot")  # rewritten whole after the replay
