"""A broker that degrades instead of dying on a full disk (issue 28, acceptance 2; docs/durability.md
"A nearly full disk").

Kafka has no free-space watermark: a full disk is an IOException of an append, the log directory
goes offline (`LogDirFailureChannel.maybeAddOfflineLogDir`) and a broker whose last directory
failed halts (`LogManager.handleLogDirFailure`) — test_storage_faults.py shows quafka doing the
same with the watermark off. With `quafka.log.dir.min.free.bytes` / `.percent` quafka refuses
produces to user topics once the free space is below the watermark and keeps serving everything
else from the reserve below it.

On a real 48 MiB tmpfs under a `quafka broker` process (the suite runs as root): a producer fills
the disk until its produces are refused with KAFKA_STORAGE_ERROR (retriable) carrying the
watermark message; the broker stays up; a share consumer consumes and acknowledges (ACCEPT, and
REJECT, whose dead letters are written below the watermark) what is there; the broker is
SIGKILLed and restarted below the watermark: every acknowledged record and acknowledgement is
there (ACCEPTed and REJECTed records are not delivered again, unacknowledged ones are, once);
a producer with retries keeps being refused, and once a topic is deleted its record is taken
without a restart.
"""

from __future__ import annotations

import datetime
import re
import subprocess
import urllib.request

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from prometheus_client.parser import text_string_to_metric_families

from quafka.protocol.record_batch import build_batch, iter_records
from support import RawClient, free_port, port_open, set_group_configs, wait_until
from support.dlq import DLQ_TOPIC_CONFIGS, headers_of, read_all as read_dlq
from support.share_client import ACCEPT, REJECT, ShareClient, acquired_offsets, create_topic, partition_errors

pytestmark = pytest.mark.timeout(120)

JOBS = "jobs"  # the topic share consumers work on
BULK = "bulk"  # the topic that fills the disk
DLQ = "dlq.jobs"
GROUP = "workers"
JOB_COUNT = 200
ACCEPTED = range(0, 120)  # acknowledged below the watermark, before the SIGKILL
REJECTED = range(120, 140)
UNACKNOWLEDGED = range(140, JOB_COUNT)  # acquired when the broker is killed
DISK = 48 << 20
MIN_FREE_BYTES = 8 << 20
MIN_FREE_PERCENT = 25  # of 48 MiB = 12 MiB: the larger of the two applies
THRESHOLD = DISK * MIN_FREE_PERCENT // 100
BULK_VALUE = 64 << 10
BELOW_LINE = "below the free-space watermark"
ABOVE_LINE = "again, above the free-space watermark"
WATERMARK_MESSAGE = re.compile(r"Log directory \S+ is below its free-space watermark \(\d+ bytes free, "
                               r"quafka.log.dir.min.free.bytes/quafka.log.dir.min.free.percent ask for "
                               rf"{THRESHOLD}\): produces are refused until \d+ bytes are free; retry later")


# ----------------------------------------------------------------------------- helpers

def _mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)


def metrics(metrics_port: int) -> dict[str, float]:
    """{sample name: value} of the broker's scrape (the log_dir label has one value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def no_retries_producer(bootstrap: str) -> Producer:
    """acks=all, no retries: a refusal reaches the delivery report at once."""
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "enable.idempotence": False,
                     "linger.ms": 5, "message.timeout.ms": 15000, "log_level": 0})


def produce(producer: Producer, topic: str, values: list[bytes]) -> list[tuple[KafkaError | None, int]]:
    """(error, offset) per record, in order."""
    results: dict[int, tuple] = {}
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=0, on_delivery=lambda err, msg, i=i: results.__setitem__(
            i, (err, msg.offset() if err is None else -1)))
    assert producer.flush(20) == 0, "the producer still holds records"
    return [results[i] for i in range(len(values))]


def raw_produce(bootstrap: str, topic: str, value: bytes):
    """A Produce v9 of one record: the partition's response (error_code, error_message)."""
    request = ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
        TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=0, records=build_batch(
            [(None, value)], base_timestamp=0)),)),))
    with RawClient(bootstrap) as raw:
        return raw.request(request).responses[0].partition_responses[0]


def read_topic(bootstrap: str, topic: str) -> dict[int, bytes]:
    """Every record of the topic's partition 0, {offset: value}, with raw Fetch requests."""
    out: dict[int, bytes] = {}
    offset = 0
    with RawClient(bootstrap) as raw:
        while True:
            part = raw.request(FetchRequest(
                cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=8 << 20,
                isolation_level=0, session_id=0, session_epoch=-1,
                topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                    log_start_offset=-1, partition_max_bytes=4 << 20),)),),
                forgotten_topics_data=(), rack_id="")).responses[0].partitions[0]
            assert part.error_code == 0, part
            for record in iter_records(part.records or b""):
                out[record.offset] = record.value
            if not part.records or max(out) + 1 >= part.high_watermark:
                return out
            offset = max(out) + 1


def acquire(share: ShareClient, expected: set[int]) -> dict[int, int]:
    """{offset: delivery_count} acquired by ShareFetches until `expected` are (or a fetch is empty)."""
    got: dict[int, int] = {}
    while not expected <= set(got):
        resp = share.fetch(max_wait_ms=500)
        assert resp.error_code == ErrorCode.none, resp
        offsets = {o: count for offs in acquired_offsets(resp).values() for o, count in offs}
        if not offsets:
            break
        got.update(offsets)
    return got


def acknowledge(share: ShareClient, tp, ranges: list[tuple[range, int]]) -> None:
    resp = share.acknowledge({tp: [(r.start, r.stop - 1, [ack]) for r, ack in ranges]})
    assert resp.error_code == ErrorCode.none, resp
    assert partition_errors(resp)[tp][0] == ErrorCode.none, resp


def occurrences(text: str, line: str) -> int:
    return text.count(line)


# ----------------------------------------------------------------------------- the acceptance test

def test_a_full_disk_refuses_produces_keeps_share_groups_working_and_resumes_after_a_delete(
        tmp_path, broker_process):
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    mounted = _mount("-t", "tmpfs", "-o", f"size={DISK >> 20}m", "tmpfs", str(mnt))
    assert mounted.returncode == 0, (
        f"cannot mount a tmpfs ({mounted.stderr.strip()}): this test needs root (the suite runs as root "
        f"on the project's machines and in CI)")
    procs = []

    def start():
        metrics_port = free_port()
        proc = broker_process(str(mnt), overrides={
            "offsets.topic.num.partitions": "1", "share.coordinator.state.topic.num.partitions": "1",
            "quafka.log.dir.min.free.bytes": str(MIN_FREE_BYTES),
            "quafka.log.dir.min.free.percent": str(MIN_FREE_PERCENT),
            "metrics.listener": f"http://127.0.0.1:{metrics_port}"})
        procs.append(proc)
        wait_until(lambda: port_open(metrics_port), message="the metrics listener")
        return proc, metrics_port

    try:
        proc, metrics_port = start()
        bootstrap = proc.bootstrap_servers
        jobs_id = create_topic(bootstrap, JOBS, 1)
        create_topic(bootstrap, BULK, 1)
        create_topic(bootstrap, DLQ, 1, DLQ_TOPIC_CONFIGS)
        set_group_configs(bootstrap, GROUP, {"share.auto.offset.reset": "earliest",
                                             "errors.deadletterqueue.topic.name": DLQ})
        tp = (jobs_id, 0)
        jobs = {i: b"job-%03d-" % i + b"j" * 1000 for i in range(JOB_COUNT)}
        producer = no_retries_producer(bootstrap)
        assert produce(producer, JOBS, list(jobs.values())) == [(None, i) for i in range(JOB_COUNT)]
        before = metrics(metrics_port)
        assert before["quafka_log_dir_min_free_bytes"] == THRESHOLD
        assert before["quafka_log_dir_below_min_free"] == 0

        # ---- fill the disk: produces are refused below the watermark, with a retriable error
        stored = 0
        errors: list[KafkaError] = []
        for chunk in range(DISK // (16 * BULK_VALUE)):  # at most the whole disk, 1 MiB at a time
            results = produce(producer, BULK, [b"%04d-%02d-" % (chunk, i) + b"b" * BULK_VALUE for i in range(16)])
            stored += sum(1 for err, _offset in results if err is None)
            errors = [err for err, _offset in results if err is not None]
            if errors:
                break
        assert errors, "the 48 MiB file system never reached the watermark"
        assert {err.code() for err in errors} == {KafkaError.KAFKA_STORAGE_ERROR}, errors
        # librdkafka retries this code (rd_kafka_handle_Produce_error: refresh, retry, not persisted) when it
        # may (retries > 0: shown below); its delivery report names the code, not the broker's message (raw_produce)
        # the disk filled up to the watermark: everything above it took records
        assert stored * BULK_VALUE > DISK - THRESHOLD - (4 << 20), stored
        refused = raw_produce(bootstrap, JOBS, b"refused")
        assert refused.error_code == ErrorCode.kafka_storage_error
        assert WATERMARK_MESSAGE.fullmatch(refused.error_message), refused.error_message
        below = metrics(metrics_port)
        assert below["quafka_log_dir_below_min_free"] == 1
        # the reserve is intact: at most the produce that crossed the watermark went below it
        assert THRESHOLD - (2 << 20) < below["quafka_log_dir_free_bytes"] < THRESHOLD
        assert below["quafka_log_dir_produce_refusals_total"] >= 2
        assert below["kafka_log_logmanager_offlinelogdirectorycount"] == 0

        # ---- below the watermark: share consumers consume and acknowledge what is there
        share = ShareClient(bootstrap, GROUP)
        share.join([JOBS])
        share.wait_for_assignment()
        acquired = acquire(share, set(jobs))
        assert acquired == {o: 1 for o in jobs}
        acknowledge(share, tp, [(ACCEPTED, ACCEPT), (REJECTED, REJECT)])  # REJECT writes dead letters
        letters = read_dlq(bootstrap, DLQ, expect=len(REJECTED))
        assert sorted(int(headers_of(m)["__dlq.errors.offset"]) for m in letters) == list(REJECTED)
        after_acks = metrics(metrics_port)
        assert after_acks["quafka_log_dir_below_min_free"] == 1
        assert after_acks["kafka_server_share_coordinator_metrics_write_total"] > before[
            "kafka_server_share_coordinator_metrics_write_total"]
        assert proc.proc.poll() is None and port_open(proc.port), "the broker stopped"
        log_text = proc.read_log()
        assert occurrences(log_text, BELOW_LINE) == 1, log_text[-3000:]
        assert str(mnt) in log_text and "quafka.log.dir.min.free.percent=25" in log_text
        share.close()

        # ---- SIGKILL, restart below the watermark: every acknowledged record and acknowledgement kept
        proc.kill()
        proc, metrics_port = start()
        bootstrap = proc.bootstrap_servers
        assert metrics(metrics_port)["quafka_log_dir_below_min_free"] == 1
        assert occurrences(proc.read_log(), BELOW_LINE) >= 1
        found = read_topic(bootstrap, JOBS)
        assert found == jobs, f"acknowledged records lost or changed: {sorted(set(jobs) ^ set(found))[:10]}"
        share = ShareClient(bootstrap, GROUP)
        share.join([JOBS])
        share.wait_for_assignment()
        redelivered = acquire(share, set(UNACKNOWLEDGED))
        assert set(redelivered) == set(UNACKNOWLEDGED), (
            f"ACCEPTed or REJECTed records delivered again, or unacknowledged ones not: {sorted(redelivered)}")
        acknowledge(share, tp, [(UNACKNOWLEDGED, ACCEPT)])
        read_dlq(bootstrap, DLQ, expect=len(REJECTED))  # written once, kept

        # ---- a producer with retries is refused again and again, and delivered once a topic is deleted
        retrying = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                             "message.timeout.ms": 60000, "retry.backoff.ms": 50, "retry.backoff.max.ms": 200,
                             "log_level": 0})
        outcome: list = []
        retrying.produce(JOBS, value=b"after-the-delete", partition=0,
                         on_delivery=lambda err, msg: outcome.append((err, msg.offset())))
        refusals = metrics(metrics_port)["quafka_log_dir_produce_refusals_total"]

        def refused_again() -> bool:
            retrying.poll(0)  # serve its delivery reports
            return metrics(metrics_port)["quafka_log_dir_produce_refusals_total"] >= refusals + 3

        wait_until(refused_again, timeout_s=20, message="the producer's retries to be refused")
        assert not outcome, f"delivered below the watermark: {outcome}"
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        admin.delete_topics([BULK], operation_timeout=10)[BULK].result(timeout=10)
        del admin
        assert retrying.flush(30) == 0
        assert outcome == [(None, JOB_COUNT)], outcome
        resumed = metrics(metrics_port)
        assert resumed["quafka_log_dir_below_min_free"] == 0
        assert resumed["quafka_log_dir_free_bytes"] > THRESHOLD
        assert produce(no_retries_producer(bootstrap), JOBS, [b"and-more"]) == [(None, JOB_COUNT + 1)]
        assert acquire(share, {JOB_COUNT, JOB_COUNT + 1}) == {JOB_COUNT: 1, JOB_COUNT + 1: 1}
        acknowledge(share, tp, [(range(JOB_COUNT, JOB_COUNT + 2), ACCEPT)])
        share.close()
        log_text = proc.read_log()
        assert occurrences(log_text, ABOVE_LINE) == 1, log_text[-3000:]
        assert proc.proc.poll() is None
        assert proc.stop() == 0
    finally:
        for proc in procs:
            proc.ensure_stopped()
        unmounted = subprocess.run(["umount", str(mnt)], capture_output=True, text=True, timeout=30)
        if unmounted.returncode != 0:  # something still holds it: detach it now, fail below
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)
    assert unmounted.returncode == 0, f"the tmpfs was still busy at the end: {unmounted.stderr}"
