"""Log compaction of a partition with transactions (docs/storage.md "Log compaction and
transactions"), after Kafka's cleaner: LogCleanerManager.cleanableOffsets (never past the last
stable offset), Cleaner.cleanSegments / cleanInto with CleanedTransactionMetadata (aborted
transactions' records go, markers stay while their transaction has a batch in the log, then live
delete.retention.ms like tombstones), the cleaned segment's aborted-transaction index. Raw
transactional batches and markers as in test_transactions_log.py (support/txn.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from support.readers import read_to_end
from support import RawClient, wait_until
from support.txn import READ_COMMITTED, READ_UNCOMMITTED, fetch, init_producer_id, install_verifier, produce, \
    write_markers

from quafka.protocol.errors import ErrorCode
from quafka.protocol.record_batch import TRANSACTIONAL_FLAG, build_batch, iter_headers, iter_records

BIG = b"x" * 400_000  # two such batches and a few small ones fill a 1 MiB segment
HOUR_MS = 3_600_000
TOPIC = "txn-compacted"


def batch(key: bytes, value: bytes, *, producer_id: int = -1, sequence: int = -1, transactional: bool = False) -> bytes:
    return build_batch([(key, value)], base_timestamp=int(time.time() * 1000), producer_id=producer_id,
                       producer_epoch=0, base_sequence=sequence, attributes=TRANSACTIONAL_FLAG if transactional else 0)


def plain(raw, key: bytes, value: bytes) -> int:
    resp = produce(raw, TOPIC, batch(key, value), transactional_id=None)
    assert resp.error_code == 0, resp
    return resp.base_offset


def in_txn(raw, producer_id: int, sequence: int, key: bytes, value: bytes) -> int:
    resp = produce(raw, TOPIC, batch(key, value, producer_id=producer_id, sequence=sequence, transactional=True))
    assert resp.error_code == 0, resp
    return resp.base_offset


def end_txn(broker, producer_id: int, committed: bool) -> None:
    assert write_markers(broker, producer_id, 0, committed, [(TOPIC, 0)]) == {(TOPIC, 0): ErrorCode.none}


def clean(broker, now_ms: int) -> bool:
    return asyncio.run_coroutine_threadsafe(broker.server.log_cleaner.clean_filthiest(now_ms),
                                            broker._loop).result(60)


def part_of(broker):
    return broker.server.state.topics[TOPIC].partitions[0]


def batches(raw, isolation: int = READ_UNCOMMITTED) -> list[tuple]:
    """(offset, is_control, key, value prefix) of every record and every control batch, from 0."""
    out = []
    offset = 0
    while True:
        data = fetch(raw, TOPIC, offset, isolation, partition_max_bytes=8 << 20)
        records = bytes(data.records or b"")
        if not records:
            return out
        for pos, header in iter_headers(records):
            if header.is_control:
                out.append((header.base_offset, True, None, None))
            else:
                out += [(r.offset, False, r.key, r.value[:8]) for r in iter_records(records[pos:pos + header.size_bytes])]
            offset = header.next_offset


def read_committed(bootstrap: str) -> list[tuple[bytes, bytes]]:
    """What a confluent-kafka read_committed consumer gets (up to the LSO), as (key, value prefix)."""
    return [(m.key(), m.value()[:8]) for m in read_to_end(bootstrap, TOPIC, isolation="read_committed")]


def scenario(broker, raw) -> dict:
    """Plain, committed and aborted writes below an open transaction; returns names -> offsets."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "1048576", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": str(HOUR_MS)})])[TOPIC].result(10)
    install_verifier(broker)
    p1, p2, p3 = (init_producer_id(raw) for _ in range(3))
    o = {"p1": p1, "p2": p2, "p3": p3}
    o["a0"] = plain(raw, b"a", b"a0" + BIG)
    o["c0"] = plain(raw, b"c", b"c0" + BIG)
    o["a_aborted"] = in_txn(raw, p1, 0, b"a", b"aborted" + BIG)  # supersedes nothing: it was aborted
    o["c_txn"] = in_txn(raw, p2, 0, b"c", b"c-txn" + BIG)  # supersedes c0: it was committed
    end_txn(broker, p1, False)
    end_txn(broker, p2, True)
    o["b0"] = plain(raw, b"b", b"b0" + BIG)
    o["d_txn"] = in_txn(raw, p1, 1, b"d", b"d-txn" + BIG)  # p1's next transaction: committed
    end_txn(broker, p1, True)
    o["b1"] = plain(raw, b"b", b"b1" + BIG)
    o["open"] = in_txn(raw, p3, 0, b"e", b"open" + BIG)  # the LSO from here on
    o["b2"] = plain(raw, b"b", b"b2" + BIG)
    o["b3"] = plain(raw, b"b", b"b3" + BIG)
    o["f"] = plain(raw, b"f", b"f" + BIG)
    return o


def test_cleaning_with_transactions_keeps_read_committed_right_and_stops_at_the_lso(make_broker, tmp_path):
    data_dir = str(tmp_path / "data")
    config = {"log.cleaner.backoff.ms": 3_600_000}  # rounds driven by clean() only
    broker = make_broker(data_dir=data_dir, config=config)
    raw = RawClient(broker.bootstrap_servers)
    o = scenario(broker, raw)
    part = part_of(broker)
    plog = part.log
    lso = part.last_stable_offset
    assert lso == o["open"] and plog.segment_base_offsets[-1] > o["b2"], plog.segment_base_offsets
    aborted_before = [(t.producer_id, t.first_offset) for t in part.aborted_transactions(0, plog.log_end_offset)]
    assert aborted_before == [(o["p1"], o["a_aborted"])]
    at_lso_before = [r for r in batches(raw) if r[0] >= lso]
    now = int(time.time() * 1000)

    assert clean(broker, now)
    # below the LSO: the latest committed value of every key; the aborted record is gone, and so is
    # c0, superseded by the committed transaction; the markers stay (their transactions have batches)
    cleaned = [r for r in batches(raw) if r[0] < lso]
    data = [(off, k, v) for off, ctl, k, v in cleaned if not ctl]
    assert data == [(o["a0"], b"a", b"a0xxxxxx"), (o["c_txn"], b"c", b"c-txnxxx"), (o["d_txn"], b"d", b"d-txnxxx"),
                    (o["b1"], b"b", b"b1xxxxxx")], data
    assert [off for off, ctl, _, _ in cleaned if ctl] == [o["a_aborted"] + 2, o["c_txn"] + 2, o["d_txn"] + 1]
    # at and above the LSO nothing was rewritten (b2 is superseded by b3, yet still there)
    assert [r for r in batches(raw) if r[0] >= lso] == at_lso_before
    # read_committed readers: committed records only, one per key below the LSO
    assert read_committed(broker.bootstrap_servers) == [(b"a", b"a0xxxxxx"), (b"c", b"c-txnxxx"),
                                                       (b"d", b"d-txnxxx"), (b"b", b"b1xxxxxx")]
    # the ABORT marker stays with its index entry (the aborted batch was met in this round)
    assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions(0, plog.log_end_offset)] \
        == aborted_before
    marker_segment = max(b for b in plog.segment_base_offsets if b <= o["a_aborted"] + 2)
    assert os.path.getsize(os.path.join(data_dir, f"{TOPIC}-0", f"{marker_segment:020d}.txnindex")) == 34

    # the open transaction commits; the next round finds no batch of p1's aborted transaction: its
    # ABORT marker loses its index entry and gets a delete horizon; past it, the marker goes
    end_txn(broker, o["p3"], True)
    plain(raw, b"g", b"g" + BIG)
    plain(raw, b"g", b"g" + BIG)
    assert clean(broker, now)
    assert part.aborted_transactions(0, plog.log_end_offset) == []
    assert (o["a_aborted"] + 2, True, None, None) in batches(raw)
    plain(raw, b"h", b"h" + BIG)
    plain(raw, b"h", b"h" + BIG)
    assert clean(broker, now + 2 * HOUR_MS)
    after = batches(raw)
    assert (o["a_aborted"] + 2, True, None, None) not in after
    assert (o["c_txn"] + 2, True, None, None) in after  # c-txn is still the latest c: its COMMIT stays
    expected = [(b"a", b"a0xxxxxx"), (b"c", b"c-txnxxx"), (b"d", b"d-txnxxx"), (b"e", b"openxxxx"),
                (b"b", b"b3xxxxxx"), (b"f", b"fxxxxxxx"), (b"g", b"gxxxxxxx"), (b"h", b"hxxxxxxx")]
    got = read_committed(broker.bootstrap_servers)
    assert dict(got) == dict(expected) and [k for k, _ in got if k not in (b"g", b"h")] == [k for k, _ in expected[:-2]]
    raw.close()

    # a restart reads the same (the producer-state replay meets cleaned markers and empty batches)
    broker.stop()
    restarted = make_broker(data_dir=data_dir, config=config)
    assert part_of(restarted).last_stable_offset == part_of(restarted).log.log_end_offset
    assert read_committed(restarted.bootstrap_servers) == got
    with RawClient(restarted.bootstrap_servers) as raw2:
        assert [r for r in batches(raw2, READ_COMMITTED) if not r[1]] == [r for r in after if not r[1]]


CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_txn_broker_child.py")
CRASHY = "txn-crashy"


def test_sigkill_in_the_middle_of_a_cleaning_keeps_the_aborted_transaction_index(tmp_path, make_broker):
    """A broker (child process) killed while its throttled cleaner copies segments holding
    committed and aborted transactions: after the restart, read_committed readers still skip the
    aborted records (the .txnindex is intact; the .cleaned files are gone), and once the restarted
    broker's cleaner has run they are gone from the log while the ABORT marker keeps its entry."""
    data_dir = str(tmp_path / "data")
    throttled = {"log.cleaner.backoff.ms": 100, "log.cleaner.io.max.bytes.per.second": 2_000_000}
    child = subprocess.Popen([sys.executable, CHILD, data_dir, json.dumps(throttled)], stdout=subprocess.PIPE,
                             stdin=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        bootstrap = json.loads(child.stdout.readline())["bootstrap"]

        def end(producer_id: int, committed: bool) -> None:
            child.stdin.write(json.dumps({"producer_id": producer_id, "epoch": 0, "committed": committed,
                                          "partitions": [[CRASHY, 0]]}) + "\n")
            child.stdin.flush()
            assert json.loads(child.stdout.readline())["written"] == {f"{CRASHY}-0": 0}

        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(CRASHY, 1, 1, config={"segment.bytes": "1048576",
                                                            "min.cleanable.dirty.ratio": "0.01"})])[CRASHY].result(10)
        with RawClient(bootstrap) as raw:
            p1, p2 = init_producer_id(raw), init_producer_id(raw)

            def put(key: bytes, value: bytes, **txn) -> int:
                resp = produce(raw, CRASHY, batch(key, value + BIG, **txn), transactional_id="tx" if txn else None)
                assert resp.error_code == 0, resp
                return resp.base_offset

            for i in range(6):
                put(b"k%d" % (i % 3), b"v%d" % i)
            aborted_at = put(b"a", b"aborted", producer_id=p1, sequence=0, transactional=True)
            end(p1, False)
            put(b"k0", b"k0-txn", producer_id=p2, sequence=0, transactional=True)
            end(p2, True)
            put(b"d", b"d-txn", producer_id=p1, sequence=1, transactional=True)  # p1's next: committed
            end(p1, True)
            for i in range(6, 14):
                put(b"k%d" % (i % 3), b"v%d" % i)
        partition_dir = os.path.join(data_dir, f"{CRASHY}-0")
        compact = ConfigResource(ResourceType.TOPIC, CRASHY, incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
        assert admin.incremental_alter_configs([compact])[compact].result(10) is None

        def cleaning() -> bool:
            return any(name.endswith(".cleaned") for name in os.listdir(partition_dir))

        wait_until(cleaning, 20, message="a cleaning in progress (a .cleaned file)")
        child.kill()
        child.wait(10)
        assert cleaning()  # killed while copying
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(10)

    def view(bootstrap: str) -> tuple:
        with RawClient(bootstrap) as raw:
            part = fetch(raw, CRASHY, 0, READ_COMMITTED, partition_max_bytes=64 << 20)
            aborted = [(t.producer_id, t.first_offset) for t in part.aborted_transactions]
            values = []
            offset = 0
            while True:
                records = bytes(fetch(raw, CRASHY, offset, READ_UNCOMMITTED, partition_max_bytes=8 << 20).records or b"")
                if not records:
                    break
                for pos, header in iter_headers(records):
                    if not header.is_control:
                        values += [r.value[:9] for r in iter_records(records[pos:pos + header.size_bytes])]
                    offset = header.next_offset
        return aborted, values

    first = make_broker(data_dir=data_dir, config={"log.cleaner.enable": False})  # as the kill left it
    aborted, values = view(first.bootstrap_servers)
    assert aborted == [(p1, aborted_at)]  # the index survived the kill...
    assert b"abortedxx" in values  # ...and the aborted record is still there (the copy was discarded)
    assert not [n for n in os.listdir(partition_dir) if n.endswith((".cleaned", ".swap"))]
    first.stop()

    restarted = make_broker(data_dir=data_dir, config={"log.cleaner.backoff.ms": 100})

    def checkpointed() -> bool:
        path = os.path.join(data_dir, "cleaner-offset-checkpoint")
        return os.path.exists(path) and f"{CRASHY} 0 " in open(path, encoding="utf-8").read()

    wait_until(checkpointed, 30, message="the restarted broker's cleaning")
    aborted, values = view(restarted.bootstrap_servers)
    assert b"abortedxx" not in values and aborted == [(p1, aborted_at)]  # the marker keeps its entry
    expected = [(b"k1", b"v13"), (b"k2", b"v11"), (b"k0", b"v12"), (b"d", b"d-txn")]
    got = dict(read_committed_of(restarted.bootstrap_servers, CRASHY))
    assert got == {k: v for k, v in expected}


def read_committed_of(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    """(key, value without its padding) of what a read_committed consumer gets."""
    return [(m.key(), m.value()[:-len(BIG)]) for m in read_to_end(bootstrap, topic, isolation="read_committed")]
