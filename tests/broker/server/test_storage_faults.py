"""Disk faults as Kafka handles them (issue 14, acceptance 2; docs/durability.md "Disk faults").

For each kind of storage fault — ENOSPC on a segment write, EIO on a write, on an fsync, on a read,
a read-only log directory, a vanished partition directory, a failing share-state write (and a
failing group-coordinator write) — a test shows:

1. what the client sees (KAFKA_STORAGE_ERROR for the partition, NOT_COORDINATOR for a group write),
   with real clients over loopback: confluent-kafka's Producer (acks=all, no retries) and the
   suite's raw Fetch / ShareClient to read exact error codes;
2. that nothing acknowledged before the fault is lost: after a restart on the same data directory
   every record the producer had acknowledged is readable, and records whose ACCEPT was confirmed
   are never delivered again while the others are;
3. that the broker stops (a single log directory failed: as Kafka's ReplicaManager halts when its
   last log directory fails) and counted the failure in its metrics;
4. that once the disk is healthy a new broker on the same directory recovers and serves produce
   and share-consume.

Faults are injected at the OS-call level in the broker's process (tests/support/faults.py: the
`os` the storage modules call, only for files under the test's data directory), except the
vanished directory (really moved away) and one test on a really full file system (a 2 MiB tmpfs;
the machine runs the suite as root; the free-space watermark, which would refuse produces before
the disk is full, is turned off there: test_disk_watermark.py shows it on). A last test shows that a flush-scheduler error that is not an
OSError is counted, logged, and does not stop periodic flushing.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import timedelta

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from prometheus_client.parser import text_string_to_metric_families

from quafka.broker.server.metrics import render
from quafka.protocol.record_batch import iter_records
from support import RawClient, port_open, wait_until
from support.faults import DiskFaults
from support.share_client import ACCEPT, ShareClient, acquired_offsets, create_topic, partition_errors, records_in

pytestmark = pytest.mark.timeout(60)

TOPIC = "disk"
GROUP = "disk-group"
STORAGE_ERROR = 56  # KAFKA_STORAGE_ERROR
NOT_COORDINATOR = 16
WATERMARK_OFF = {"quafka.log.dir.min.free.bytes": "0", "quafka.log.dir.min.free.percent": "0"}
BEFORE = 6  # records produced and acknowledged before the fault
ACCEPTED = 3  # of which the first ones are ACCEPTed (confirmed) before the fault
BROKER_CONFIG = {
    "offsets.topic.num.partitions": 1,
    "share.coordinator.state.topic.num.partitions": 1,
    "metrics.listener": "http://127.0.0.1:0",
}


# ----------------------------------------------------------------------------- helpers

def metric(text: str, name: str) -> float:
    """The value of an unlabelled counter/gauge (or a histogram's _count) in an exposition."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    raise AssertionError(f"{name} is not in the metrics")


def scrape(broker) -> str:
    with urllib.request.urlopen(broker.metrics_url, timeout=5) as resp:
        return resp.read().decode()


def new_producer(bootstrap: str) -> Producer:
    """acks=all and no retries: a KAFKA_STORAGE_ERROR reaches the delivery callback."""
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "enable.idempotence": False,
                     "linger.ms": 0, "message.timeout.ms": 10000, "log_level": 0})


def produce(producer: Producer, values: list[bytes]) -> list[tuple[KafkaError | None, int, bytes]]:
    """(error, offset, value) per record, in order."""
    results: dict[int, tuple] = {}
    for i, value in enumerate(values):
        producer.produce(TOPIC, value=value, partition=0,
                         on_delivery=lambda err, msg, i=i, value=value: results.__setitem__(
                             i, (err, msg.offset() if err is None else -1, value)))
    assert producer.flush(15) == 0, "the producer still holds records"
    return [results[i] for i in range(len(values))]


def acked(results) -> dict[int, bytes]:
    return {offset: value for err, offset, value in results if err is None}


def fetch_request(offset: int) -> FetchRequest:
    return FetchRequest(
        cluster_id=None, replica_id=-1, max_wait=timedelta(0), min_bytes=1, max_bytes=50 << 20, isolation_level=0,
        session_id=0, session_epoch=-1,
        topics=(FetchTopic(topic=TOPIC, partitions=(FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id="")


def read_all(bootstrap: str) -> dict[int, bytes]:
    """Every record of the partition, {offset: value}, with Fetch requests from offset 0."""
    out: dict[int, bytes] = {}
    offset = 0
    with RawClient(bootstrap) as raw:
        while True:
            part = raw.request(fetch_request(offset)).responses[0].partitions[0]
            assert part.error_code == 0, part
            if not part.records:
                return out
            for record in iter_records(part.records):
                out[record.offset] = record.value
            offset = max(out) + 1
            if offset >= part.high_watermark:
                return out


def share_fetch_all(client: ShareClient, expected: set[int], max_wait_ms: int = 300) -> set[int]:
    """Offsets acquired by ShareFetches until `expected` are all acquired (or one comes back empty)."""
    got: set[int] = set()
    while not expected <= got:
        resp = client.fetch(max_wait_ms=max_wait_ms)
        assert resp.error_code == ErrorCode.none, resp
        offsets = {o for offs in acquired_offsets(resp).values() for o, _count in offs}
        if not offsets:
            break
        got |= offsets
    return got


def wait_halted(broker, timeout_s: float = 15.0) -> None:
    """The broker stopped itself: halted, its loop thread ended, its port closed."""
    wait_until(lambda: broker.server.halted, timeout_s, message="the broker to see the log directory fail")
    broker._thread.join(timeout_s)
    assert not broker._thread.is_alive(), "the broker did not stop after its log directory failed"
    assert not port_open(broker.port), "the halted broker still listens"


@dataclass
class Before:
    """What clients were told before the fault."""

    broker: object
    topic_id: uuid.UUID
    share: ShareClient
    producer: Producer
    acked: dict[int, bytes]
    accepted: set[int]
    acquired: set[int]

    @property
    def tp(self):
        return (self.topic_id, 0)


def prepare(make_broker, data_dir, config=None, topic_config=None) -> Before:
    """A broker, a topic, BEFORE records acknowledged to the producer, all acquired by a share
    consumer which ACCEPTs (and is told so) the first ACCEPTED of them."""
    broker = make_broker(data_dir=str(data_dir), config={**BROKER_CONFIG, **(config or {})})
    bootstrap = broker.bootstrap_servers
    topic_id = create_topic(bootstrap, TOPIC, 1, topic_config)
    share = ShareClient(bootstrap, GROUP)
    share.join([TOPIC])
    share.wait_for_assignment()
    assert share.fetch(max_wait_ms=0).error_code == ErrorCode.none  # the share partition starts at 0
    producer = new_producer(bootstrap)
    results = produce(producer, [b"before-%d" % i for i in range(BEFORE)])
    assert [err for err, _o, _v in results] == [None] * BEFORE
    before = Before(broker, topic_id, share, producer, acked(results), set(range(ACCEPTED)), set())
    before.acquired = share_fetch_all(share, set(before.acked))
    assert before.acquired == set(before.acked)
    resp = share.acknowledge({before.tp: [(0, ACCEPTED - 1, [ACCEPT])]})
    assert resp.error_code == ErrorCode.none and partition_errors(resp)[before.tp][0] == ErrorCode.none
    return before


def produce_until_error(before: Before, limit: int = 20) -> KafkaError:
    """Produce one record at a time until one fails; the acknowledged ones join `before.acked`."""
    for i in range(limit):
        [(err, offset, value)] = produce(before.producer, [b"during-%d" % i])
        if err is not None:
            return err
        before.acked[offset] = value
    raise AssertionError(f"{limit} records were acknowledged: the fault was never hit")


def check_metrics_after_halt(broker, *, flush_failures: int = 0) -> None:
    text = render(broker.server)  # what the metrics listener served until it closed
    assert metric(text, "quafka_log_dir_failures_total") == 1
    assert metric(text, "kafka_log_logmanager_offlinelogdirectorycount") == 1
    assert metric(text, "quafka_log_flush_failures_total") == flush_failures


def restart_and_check(make_broker, data_dir, before: Before, config=None):
    """A new broker on the healthy directory: every acknowledged record is there, ACCEPTed records
    are not delivered again but every other acquired one is, and produce + share-consume work."""
    before.share.close()
    broker = make_broker(data_dir=str(data_dir), config={**BROKER_CONFIG, **(config or {})})
    bootstrap = broker.bootstrap_servers
    stored = read_all(bootstrap)
    lost = {o: v for o, v in before.acked.items() if stored.get(o) != v}
    assert not lost, f"acknowledged records lost or changed after the restart: {lost}"

    share = ShareClient(bootstrap, GROUP)
    share.join([TOPIC])
    share.wait_for_assignment()
    redelivered = before.acquired - before.accepted
    delivered = share_fetch_all(share, redelivered | (set(stored) - before.accepted))
    assert not delivered & before.accepted, f"ACCEPTed records delivered again: {delivered & before.accepted}"
    assert redelivered <= delivered, f"unacknowledged records not delivered again: {redelivered - delivered}"
    tp = (before.topic_id, 0)
    resp = share.acknowledge({tp: [(o, o, [ACCEPT]) for o in sorted(delivered)]})
    assert partition_errors(resp)[tp][0] == ErrorCode.none

    producer = new_producer(bootstrap)
    [(err, offset, _value)] = produce(producer, [b"after"])
    assert err is None and offset == max(stored) + 1
    got = share_fetch_all(share, {offset}, max_wait_ms=2000)
    assert got == {offset}
    resp = share.acknowledge({tp: [(offset, offset, [ACCEPT])]})
    assert partition_errors(resp)[tp][0] == ErrorCode.none
    assert metric(scrape(broker), "kafka_log_logmanager_offlinelogdirectorycount") == 0
    share.close()
    return broker


@pytest.fixture
def data_dir(tmp_path):
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture
def faults(data_dir, monkeypatch):
    return DiskFaults(data_dir).install(monkeypatch)


# ----------------------------------------------------------------------------- writes

@pytest.mark.parametrize("kind", ["enospc", "eio"])
def test_failed_segment_write(kind, make_broker, data_dir, faults, caplog):
    """ENOSPC (after a short write, as a filling disk gives) or EIO on a segment write: the
    producer gets KAFKA_STORAGE_ERROR, the broker stops, the torn bytes are cut, nothing
    acknowledged is lost."""
    before = prepare(make_broker, data_dir)
    broker = before.broker
    assert metric(scrape(broker), "kafka_log_logmanager_offlinelogdirectorycount") == 0
    code = errno.ENOSPC if kind == "enospc" else errno.EIO
    faults.fail("write", code, where=f"/{TOPIC}-0/", partial=kind == "enospc")

    err = produce_until_error(before)
    assert err.code() == KafkaError.KAFKA_STORAGE_ERROR, err
    assert [(h.call, h.errno) for h in faults.hits] == [("write", code)]
    wait_halted(broker)
    check_metrics_after_halt(broker)
    assert any("log directory" in r.getMessage() and "failed" in r.getMessage() for r in caplog.records
               if r.levelno >= logging.ERROR)
    # the failed append left whole batches only: the short write's bytes were cut
    plog = broker.server.state.topics[TOPIC].partitions[0].log
    on_disk = sum(os.path.getsize(os.path.join(plog.dir_path, n)) for n in os.listdir(plog.dir_path)
                  if n.endswith(".log"))
    assert on_disk == plog.size_bytes

    faults.heal()
    restart_and_check(make_broker, data_dir, before)


def test_failed_fsync(make_broker, data_dir, faults):
    """EIO on the fdatasync that log.flush.interval.messages=1 makes the produce wait for (it runs
    on the flusher's worker thread): KAFKA_STORAGE_ERROR, the broker stops, nothing is retried."""
    config = {"log.flush.interval.messages": 1}
    before = prepare(make_broker, data_dir, config)
    broker = before.broker
    assert metric(scrape(broker), "kafka_log_logflushstats_logflushrateandtimems_count") > 0  # fsyncs ran
    faults.fail("fsync", errno.EIO, where=f"/{TOPIC}-0/")

    err = produce_until_error(before)
    assert err.code() == KafkaError.KAFKA_STORAGE_ERROR, err
    assert [(h.call, h.errno) for h in faults.hits] == [("fsync", errno.EIO)]
    assert faults.hits[0].thread.startswith("quafka-fsync")  # not on the event loop
    wait_halted(broker)
    check_metrics_after_halt(broker, flush_failures=1)
    assert len(faults.hits) == 1, "a failed fsync was retried"

    faults.heal()
    restart_and_check(make_broker, data_dir, before, config)


# ----------------------------------------------------------------------------- reads

def test_failed_fetch_read(make_broker, data_dir, faults):
    """EIO reading a segment for a Fetch: KAFKA_STORAGE_ERROR for the partition, the broker stops."""
    before = prepare(make_broker, data_dir)
    broker = before.broker
    faults.fail("pread", errno.EIO, where=f"/{TOPIC}-0/")

    with RawClient(broker.bootstrap_servers) as raw:
        part = raw.request(fetch_request(0)).responses[0].partitions[0]
    assert part.error_code == STORAGE_ERROR and not part.records
    assert faults.hits and {(h.call, h.errno) for h in faults.hits} == {("pread", errno.EIO)}
    wait_halted(broker)
    check_metrics_after_halt(broker)

    faults.heal()
    restart_and_check(make_broker, data_dir, before)


@pytest.mark.parametrize("request_kind", [
    "listed",  # a ShareFetch that lists the partition (a new session), MaxWaitMs 0
    "in_session",  # what librdkafka sends: epoch > 0, nothing listed, MaxWaitMs 500
])
def test_failed_share_fetch_read(request_kind, make_broker, data_dir, faults):
    """EIO reading a segment for a ShareFetch: KAFKA_STORAGE_ERROR for the partition, nothing
    acquired, the broker stops."""
    before = prepare(make_broker, data_dir)
    broker = before.broker
    before.acked.update(acked(produce(before.producer, [b"available-0", b"available-1"])))
    assert len(before.acked) == BEFORE + 2
    faults.fail("pread", errno.EIO, where=f"/{TOPIC}-0/")

    if request_kind == "listed":
        before.share.reset_session()
        resp = before.share.fetch(max_wait_ms=0)
    else:
        resp = before.share.fetch(max_wait_ms=500)
    assert resp.error_code == ErrorCode.none
    assert partition_errors(resp).get(before.tp, (None,))[0] == ErrorCode.kafka_storage_error, resp
    assert not acquired_offsets(resp)
    assert faults.hits and {(h.call, h.errno) for h in faults.hits} == {("pread", errno.EIO)}
    wait_halted(broker)
    check_metrics_after_halt(broker)

    faults.heal()
    restart_and_check(make_broker, data_dir, before)


# ----------------------------------------------------------------------------- the directory

def test_read_only_directory_on_segment_roll(make_broker, data_dir, faults):
    """The partition directory turned read-only: the next segment roll cannot create its files
    (EROFS); the produce that needed the roll gets KAFKA_STORAGE_ERROR and the broker stops."""
    topic_config = {"segment.ms": "1"}  # every produce rolls a segment
    before = prepare(make_broker, data_dir, topic_config=topic_config)
    broker = before.broker
    faults.read_only(where=f"/{TOPIC}-0/")

    err = produce_until_error(before)
    assert err.code() == KafkaError.KAFKA_STORAGE_ERROR, err
    first = faults.hits[0]  # the roll's first new file: the sealed segment's index
    assert (first.call, first.errno) == ("open", errno.EROFS) and first.path.endswith((".index", ".timeindex"))
    wait_halted(broker)
    check_metrics_after_halt(broker)

    faults.heal()
    restart_and_check(make_broker, data_dir, before)


def test_read_only_directory_on_topic_creation(make_broker, data_dir, faults):
    """The log directory turned read-only: creating a topic cannot create its partition directory
    (EROFS); CreateTopics is answered KAFKA_STORAGE_ERROR and the broker stops; after the restart
    the topic (recorded in the metadata journal before its log was created) exists and works."""
    before = prepare(make_broker, data_dir)
    broker = before.broker
    faults.read_only()

    with pytest.raises(KafkaException) as failed:
        create_topic(broker.bootstrap_servers, "created-read-only", 1, timeout_s=5)
    assert [(h.call, h.path, h.errno) for h in faults.hits] == [
        ("mkdir", os.path.join(faults.root, "created-read-only-0"), errno.EROFS)]
    wait_halted(broker)
    assert failed.value.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR, failed.value
    check_metrics_after_halt(broker)

    faults.heal()
    broker = restart_and_check(make_broker, data_dir, before)
    assert "created-read-only" in broker.server.state.topics


def test_vanished_partition_directory(make_broker, data_dir, tmp_path):
    """The partition directory disappears (moved away underneath the broker): the next segment
    roll fails with ENOENT, KAFKA_STORAGE_ERROR, the broker stops. Once the directory is back, a
    restart finds everything that was acknowledged — records written through the descriptors the
    broker held went into the moved files."""
    topic_config = {"segment.ms": "1"}
    before = prepare(make_broker, data_dir, topic_config=topic_config)
    broker = before.broker
    partition_dir = data_dir / f"{TOPIC}-0"
    away = tmp_path / "moved-away"
    os.rename(partition_dir, away)

    err = produce_until_error(before)
    assert err.code() == KafkaError.KAFKA_STORAGE_ERROR, err
    wait_halted(broker)
    assert broker.server.failed_log_dir.failure.errno == errno.ENOENT
    check_metrics_after_halt(broker)

    os.rename(away, partition_dir)
    restart_and_check(make_broker, data_dir, before)


# ----------------------------------------------------------------------------- coordinators

def test_failed_share_state_write(make_broker, data_dir, faults):
    """EIO appending to __share_group_state for a ShareAcknowledge: the acknowledgement is answered
    KAFKA_STORAGE_ERROR (not confirmed), the broker stops. After the restart the records ACCEPTed
    before are not delivered again; those whose ACCEPT failed are."""
    before = prepare(make_broker, data_dir)
    broker = before.broker
    faults.fail("write", errno.EIO, where="/__share_group_state-")

    resp = before.share.acknowledge({before.tp: [(ACCEPTED, BEFORE - 1, [ACCEPT])]})
    assert resp.error_code == ErrorCode.none
    assert partition_errors(resp)[before.tp][0] == ErrorCode.kafka_storage_error
    assert [(h.call, h.errno) for h in faults.hits] == [("write", errno.EIO)]
    wait_halted(broker)
    check_metrics_after_halt(broker)

    faults.heal()
    restart_and_check(make_broker, data_dir, before)  # offsets ACCEPTED..BEFORE-1 come back


def test_failed_group_coordinator_write(make_broker, data_dir, faults):
    """EIO appending to __consumer_offsets for a member joining the share group: NOT_COORDINATOR,
    the broker stops; the group (and its share state) is intact after the restart."""
    before = prepare(make_broker, data_dir)
    broker = before.broker
    faults.fail("write", errno.EIO, where="/__consumer_offsets-")

    with ShareClient(broker.bootstrap_servers, GROUP) as joining:
        resp = joining.join([TOPIC])
    assert resp.error_code == NOT_COORDINATOR, resp
    assert [(h.call, h.errno) for h in faults.hits] == [("write", errno.EIO)]
    wait_halted(broker)
    check_metrics_after_halt(broker)

    faults.heal()
    restart_and_check(make_broker, data_dir, before)


def test_full_disk_under_the_metadata_journal(make_broker, data_dir, faults):
    """ENOSPC (after a short write) appending to the metadata journal for a CreateTopics: the topic
    is not confirmed and the broker stops; after the restart everything confirmed before is there
    and the journal takes new records."""
    before = prepare(make_broker, data_dir)
    broker = before.broker
    faults.fail("write", errno.ENOSPC, where="/__quafka_metadata/", partial=True)

    with pytest.raises(KafkaException) as failed:
        create_topic(broker.bootstrap_servers, "not-confirmed", 1, timeout_s=5)
    assert failed.value.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR, failed.value
    assert [(h.call, h.errno) for h in faults.hits] == [("write", errno.ENOSPC)]
    wait_halted(broker)
    check_metrics_after_halt(broker)

    faults.heal()
    broker = restart_and_check(make_broker, data_dir, before)
    create_topic(broker.bootstrap_servers, "confirmed", 1)
    broker.stop()
    broker = make_broker(data_dir=str(data_dir), config=BROKER_CONFIG)
    assert {TOPIC, "confirmed"} <= set(broker.server.state.topics)


# ----------------------------------------------------------------------------- a really full disk

def _mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)


def test_really_full_file_system(tmp_path, make_broker, broker_process):
    """A 2 MiB tmpfs as the data directory of a `quafka broker` process: produce until the disk is
    full. The producer gets KAFKA_STORAGE_ERROR (a real ENOSPC), the broker exits with status 1.
    With the file system grown, a restart finds every acknowledged record, and produce and
    share-consume work."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    mounted = _mount("-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt))
    assert mounted.returncode == 0, (
        f"cannot mount a tmpfs ({mounted.stderr.strip()}): this test needs root (the suite runs as root "
        f"on the project's machines and in CI)")
    broker = None
    proc = None
    try:
        data_dir = mnt  # the broker's own log goes beside it (support.BrokerProcess), not on the tmpfs
        # the free-space watermark off (test_disk_watermark.py shows it on): the disk really fills
        overrides = {**{k: str(v) for k, v in BROKER_CONFIG.items() if k != "metrics.listener"}, **WATERMARK_OFF}
        proc = broker_process(str(data_dir), overrides=overrides)
        create_topic(proc.bootstrap_servers, TOPIC, 1)
        producer = new_producer(proc.bootstrap_servers)
        stored: dict[int, bytes] = {}
        errors: list[KafkaError] = []
        for chunk in range(40):  # 40 x 100 x 1 KiB: twice the file system
            results = produce(producer, [b"%04d-%03d-" % (chunk, i) + b"x" * 1024 for i in range(100)])
            stored.update(acked(results))
            errors = [err for err, _offset, _value in results if err is not None]
            if errors:
                break
        assert errors, "the 2 MiB file system never filled up"
        assert errors[0].code() == KafkaError.KAFKA_STORAGE_ERROR, errors[0]
        assert len(stored) > 1000  # most of the disk was filled with acknowledged records
        wait_until(lambda: proc.proc.poll() is not None, 15, message="the broker to exit")
        assert proc.proc.returncode == 1
        log_text = proc.read_log()
        assert "No space left on device" in log_text and "log directory" in log_text, log_text[-2000:]
        del producer

        grown = _mount("-o", "remount,size=64m", str(mnt))
        assert grown.returncode == 0, grown.stderr
        broker = make_broker(data_dir=str(data_dir), config={**BROKER_CONFIG, **WATERMARK_OFF})
        bootstrap = broker.bootstrap_servers
        found = read_all(bootstrap)
        lost = sorted(o for o, v in stored.items() if found.get(o) != v)
        assert not lost, f"{len(lost)} acknowledged records lost, first {lost[:5]}"
        with ShareClient(bootstrap, GROUP) as share:
            share.join([TOPIC])
            share.wait_for_assignment()
            assert share.fetch(max_wait_ms=0).error_code == ErrorCode.none  # starts at the log end
            [(err, offset, _value)] = produce(new_producer(bootstrap), [b"after"])
            assert err is None and offset == max(found) + 1
            resp = share.fetch(max_wait_ms=2000)
            assert [r.value for r in records_in(resp).get((topic_id_of_disk(broker), 0), [])] == [b"after"]
    finally:
        if broker is not None:
            broker.stop()
        if proc is not None:
            proc.ensure_stopped()
        unmounted = subprocess.run(["umount", str(mnt)], capture_output=True, text=True, timeout=30)
        if unmounted.returncode != 0:  # something still holds it: detach it now, fail below
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)
    assert unmounted.returncode == 0, f"the tmpfs was still busy at the end: {unmounted.stderr}"


def topic_id_of_disk(broker) -> uuid.UUID:
    return broker.server.state.topics[TOPIC].topic_id


# ----------------------------------------------------------------------------- the flush scheduler

def test_flush_scheduler_error_is_counted_logged_and_flushing_goes_on(make_broker, caplog):
    """An error in the periodic flush scheduler that is not an OSError (a log's flush_due raising
    RuntimeError on the broker's loop) is counted in quafka_flush_scheduler_errors_total and logged
    with its traceback; the scheduler goes on and later flushes happen; the broker keeps running."""
    broker = make_broker(config={**BROKER_CONFIG, "log.flush.interval.ms": 20})
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, TOPIC, 1)
    producer = new_producer(bootstrap)
    plog = broker.server.state.topics[TOPIC].partitions[0].log
    assert produce(producer, [b"first"])[0][0] is None
    wait_until(lambda: plog.flushed_offset == plog.log_end_offset == 1, message="the first periodic flush")
    assert metric(scrape(broker), "quafka_flush_scheduler_errors_total") == 0

    raised: list[int] = []
    real_flush_due = plog.flush_due

    def broken_flush_due(now_ms: int) -> bool:
        if len(raised) < 3:
            raised.append(now_ms)
            raise RuntimeError("injected flush scheduler failure")
        return real_flush_due(now_ms)

    broker.call(setattr, plog, "flush_due", broken_flush_due)  # on the loop, between two ticks
    wait_until(lambda: broker.server.metrics.flush_loop_errors == 3, message="three scheduler errors")
    text = scrape(broker)
    assert metric(text, "quafka_flush_scheduler_errors_total") == 3
    flushes = metric(text, "kafka_log_logflushstats_logflushrateandtimems_count")
    logged = [r for r in caplog.records if "flush scheduler failed" in r.getMessage()]
    assert len(logged) == 3 and all(r.exc_info and r.exc_info[0] is RuntimeError for r in logged)

    assert produce(producer, [b"second"])[0][0] is None
    wait_until(lambda: plog.flushed_offset == plog.log_end_offset == 2, message="a flush after the errors")
    wait_until(lambda: metric(scrape(broker), "kafka_log_logflushstats_logflushrateandtimems_count") > flushes,
               message="the flush counted")
    assert not broker.server.halted and broker.server.failed_log_dir is None
    assert metric(scrape(broker), "quafka_log_dir_failures_total") == 0
