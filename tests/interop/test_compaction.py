"""Log compaction seen by confluent-kafka clients (docs/storage.md "Log compaction"): the latest
value of every key survives, tombstones stay for delete.retention.ms after the cleaning that first
saw them and then go, min.compaction.lag.ms holds records back, the active segment is never
touched, a consumer reads across the offset gaps, and a SIGKILL in the middle of a cleaning loses
nothing. Kafka: LogCleaner, Cleaner, LogCleanerManager (storage module)."""

from __future__ import annotations

import asyncio
import os
import re
import time
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from support.readers import read_to_end
from support import wait_until

SEGMENT = 1048576
VALUE = b"x" * 1000
HOUR_MS = 3_600_000


def create(bootstrap: str, topic: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    base = {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT), "min.cleanable.dirty.ratio": "0.01"}
    admin.create_topics([NewTopic(topic, 1, 1, config={**base, **configs})])[topic].result(10)


def produce(bootstrap: str, topic: str, items: list[tuple[bytes, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "none"})
    for key, value in items:
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0


def updates(start: int, count: int, keys: int, key_offset: int = 0) -> list[tuple[bytes, bytes]]:
    return [(b"k%03d" % (key_offset + i % keys), b"%07d" % i + VALUE) for i in range(start, start + count)]


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record from offset 0 to the end."""
    return [(m.offset(), m.key(), m.value()) for m in read_to_end(bootstrap, topic)]


def latest_by_key(items) -> dict[bytes, bytes | None]:
    return {key: value for key, value in items}


def clean(broker, now_ms: int | None = None) -> bool:
    """One cleaner round on the broker's loop, at `now_ms` (virtual time for the decisions)."""
    server = broker.server
    return asyncio.run_coroutine_threadsafe(server.log_cleaner.clean_filthiest(now_ms), broker._loop).result(60)


def log_of(broker, topic: str):
    return broker.server.state.topics[topic].partitions[0].log


def test_compaction_keeps_the_latest_value_per_key_and_tombstones_for_delete_retention(make_broker):
    broker = make_broker(config={"log.cleaner.backoff.ms": 3_600_000})  # rounds driven by clean() only
    bootstrap = broker.bootstrap_servers
    create(bootstrap, "compacted", **{"delete.retention.ms": str(HOUR_MS)})
    written = updates(0, 2200, 100)
    tombstones = [(b"k%03d" % i, None) for i in range(10)]
    written += tombstones + updates(2200, 1100, 50, key_offset=50)
    produce(bootstrap, "compacted", written)
    plog = log_of(broker, "compacted")
    active_base = plog.segment_base_offsets[-1]
    before = read_all(bootstrap, "compacted")
    now = int(time.time() * 1000)

    assert clean(broker, now)
    after = read_all(bootstrap, "compacted")
    assert latest_by_key((k, v) for _, k, v in after) == latest_by_key(written)  # tombstones still there
    assert sum(1 for _, _, v in after if v is None) == 10
    offsets = [o for o, _, _ in after]
    assert len(after) < len(before) / 3 and offsets == sorted(offsets) and offsets[-1] == len(written) - 1
    assert any(b - a > 1 for a, b in zip(offsets, offsets[1:]))  # the consumer crossed offset gaps
    assert [r for r in before if r[0] >= active_base] == [r for r in after if r[0] >= active_base]  # active: untouched
    assert plog.segment_base_offsets[-1] == active_base

    # within delete.retention.ms of that cleaning, a later cleaning keeps the tombstones
    more = updates(3300, 1100, 50, key_offset=50)
    produce(bootstrap, "compacted", more)
    assert clean(broker, now + HOUR_MS // 2)
    assert sum(1 for _, _, v in read_all(bootstrap, "compacted") if v is None) == 10

    # past it, they go (and so do their keys)
    more2 = updates(4400, 1100, 50, key_offset=50)
    produce(bootstrap, "compacted", more2)
    assert clean(broker, now + 2 * HOUR_MS)
    final = read_all(bootstrap, "compacted")
    expected = {k: v for k, v in latest_by_key(written + more + more2).items() if v is not None}
    assert latest_by_key((k, v) for _, k, v in final) == expected
    assert all(v is not None for _, _, v in final)


def test_the_records_that_supersede_are_durable_before_the_swap_removes_what_they_supersede(make_broker):
    """A cleaned segment is fsynced and swapped in durably; the records it drops are superseded by
    later ones that, with the default flush settings, may still be only in the page cache. The
    cleaner fsyncs the log up to the end of what it mapped before the first swap, so that a power
    loss after the swap cannot leave a key with neither value (Kafka flushes a segment when it is
    rolled, UnifiedLog.roll, and cleans only below the last stable offset, which the high watermark
    bounds: LogCleanerManager.cleanableOffsets). Found with the simulator's power losses."""
    broker = make_broker(config={"log.cleaner.backoff.ms": 3_600_000})
    bootstrap = broker.bootstrap_servers
    create(bootstrap, "durable-first")
    produce(bootstrap, "durable-first", updates(0, 3300, 100))
    plog = log_of(broker, "durable-first")
    assert len(plog.segment_base_offsets) >= 3 and plog.flushed_offset < plog.segment_base_offsets[1]
    swaps = []
    replace = plog.replace_segments

    def recording_replace(cleaned, base_offsets):
        swaps.append(plog.flushed_offset)
        return replace(cleaned, base_offsets)

    plog.replace_segments = recording_replace
    assert clean(broker, int(time.time() * 1000))
    end = broker.server.log_cleaner.checkpoints[("durable-first", 0)]
    assert swaps and min(swaps) >= end, (swaps, end)


def empty_batches(partition_dir: str) -> int:
    """Batches with no record in the partition's segment files (v2 batch header: records count at
    byte 57, batch length at byte 8)."""
    count = 0
    for name in sorted(os.listdir(partition_dir)):
        if not name.endswith(".log"):
            continue
        data = open(os.path.join(partition_dir, name), "rb").read()
        pos = 0
        while pos + 61 <= len(data):
            length = int.from_bytes(data[pos + 8:pos + 12], "big")
            count += int.from_bytes(data[pos + 57:pos + 61], "big") == 0
            pos += 12 + length
    return count


def test_an_empty_batch_left_by_one_cleaning_goes_in_the_next(make_broker, tmp_path):
    """A round keeps the batch that ends each cleaned group as an empty header; once a later round
    no longer ends a group there, the header goes (Kafka's MemoryRecords.filterTo writes a batch
    with no retained record only when checkBatchRetention says RETAIN_EMPTY). Kept unchanged, one
    header per round piled up in __consumer_offsets for ever (measured: 75 B per round, 24 KB
    after 1,000,000 offset commits, benchmarks/offsets_restart.py)."""
    data_dir = str(tmp_path / "data")
    broker = make_broker(data_dir=data_dir, config={"log.cleaner.backoff.ms": 3_600_000})
    bootstrap = broker.bootstrap_servers
    create(bootstrap, "headers")
    written: list = []
    now = int(time.time() * 1000)
    counts = []
    for n in range(6):
        batch = updates(n * 1100, 1100, 50)
        produce(bootstrap, "headers", batch)
        written += batch
        assert clean(broker, now)
        counts.append(empty_batches(os.path.join(data_dir, "headers-0")))
    assert latest_by_key((k, v) for _, k, v in read_all(bootstrap, "headers")) == latest_by_key(written)
    assert counts[-1] == counts[1] <= 2, counts  # the ends of this round's groups, not one more per round


def test_min_compaction_lag_holds_recent_records_back(make_broker):
    broker = make_broker(config={"log.cleaner.backoff.ms": 3_600_000})
    bootstrap = broker.bootstrap_servers
    create(bootstrap, "lagged", **{"min.compaction.lag.ms": str(HOUR_MS)})
    written = updates(0, 2500, 20)
    produce(bootstrap, "lagged", written)
    plog = log_of(broker, "lagged")
    size = plog.size_bytes
    now = int(time.time() * 1000)
    assert not clean(broker, now)  # every sealed segment holds records younger than the lag
    assert plog.size_bytes == size
    assert clean(broker, now + 2 * HOUR_MS)
    assert plog.size_bytes < size / 2
    assert latest_by_key((k, v) for _, k, v in read_all(bootstrap, "lagged")) == latest_by_key(written)


def test_the_cleaner_runs_by_itself_and_compacts_consumer_offsets(make_broker, tmp_path):
    """__consumer_offsets is compacted as in Kafka: after many commits of the same six partitions
    the topic holds little more than its active segment, and a restart still finds the latest."""
    data_dir = str(tmp_path / "data")
    config = {"log.cleaner.backoff.ms": 100, "offsets.topic.num.partitions": 1, "metrics.listener": "http://127.0.0.1:0"}
    broker = make_broker(data_dir=data_dir, config=config)
    bootstrap = broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("six", 6, 1)])["six"].result(10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "committer", "enable.auto.commit": False})
    last = 0
    offsets_log = None
    for n in range(1, 20_001):
        last = n
        consumer.commit(offsets=[TopicPartition("six", p, n) for p in range(6)], asynchronous=n % 200 != 0)
        if n % 200 == 0:
            offsets_log = offsets_log or log_of(broker, "__consumer_offsets")
            if len(offsets_log.segment_base_offsets) > 2:
                break
    consumer.close()
    assert len(offsets_log.segment_base_offsets) > 2, "the commits did not fill two segments"
    wait_until(lambda: broker.server.log_cleaner.rounds > 0, 20, message="the cleaner's first round")
    wait_until(lambda: offsets_log.size_bytes < 1.3 * SEGMENT, 20, message="__consumer_offsets compacted")
    metrics = urllib.request.urlopen(broker.metrics_url, timeout=5).read().decode()
    for name in ("kafka_log_logcleaner_rounds_total", "kafka_log_logcleaner_bytes_read_total",
                 "kafka_log_logcleaner_bytes_written_total"):
        assert float(re.search(rf"^{name} (\S+)$", metrics, re.MULTILINE).group(1)) > 0, name
    broker.stop()
    restarted = make_broker(data_dir=data_dir, config=config)
    reader = Consumer({"bootstrap.servers": restarted.bootstrap_servers, "group.id": "committer"})
    committed = reader.committed([TopicPartition("six", p) for p in range(6)], timeout=10)
    reader.close()
    assert [tp.offset for tp in committed] == [last] * 6


def test_sigkill_in_the_middle_of_a_cleaning_loses_nothing(broker_process, tmp_path):
    data_dir = str(tmp_path / "data")
    throttled = {"log.cleaner.backoff.ms": "100", "log.cleaner.io.max.bytes.per.second": "2000000"}
    broker = broker_process(data_dir, overrides=throttled)
    create(broker.bootstrap_servers, "crashy")
    written = updates(0, 2600, 300)
    produce(broker.bootstrap_servers, "crashy", written)
    partition_dir = os.path.join(data_dir, "crashy-0")

    def cleaning() -> bool:
        return any(name.endswith(".cleaned") for name in os.listdir(partition_dir))

    wait_until(cleaning, 20, message="a cleaning in progress (a .cleaned file)")
    broker.kill()
    assert cleaning()  # killed while copying
    restarted = broker_process(data_dir, overrides={"log.cleaner.backoff.ms": "100"})
    assert latest_by_key((k, v) for _, k, v in read_all(restarted.bootstrap_servers, "crashy")) == latest_by_key(written)

    def checkpointed() -> bool:  # the restarted broker's cleaning has finished a round
        path = os.path.join(data_dir, "cleaner-offset-checkpoint")
        return os.path.exists(path) and "crashy 0 " in open(path, encoding="utf-8").read()

    wait_until(checkpointed, 20, message="the restarted broker's cleaning")
    after = read_all(restarted.bootstrap_servers, "crashy")
    assert latest_by_key((k, v) for _, k, v in after) == latest_by_key(written)
    assert len(after) < len(written) / 2
    assert not [n for n in os.listdir(partition_dir) if n.endswith((".cleaned", ".swap"))]


def test_a_compacted_topic_refuses_records_without_a_key(broker):
    """Kafka's LogValidator.validateKey: INVALID_RECORD, and nothing is written."""
    create(broker.bootstrap_servers, "keyed-only")
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "retries": 0})
    errors = []
    producer.produce("keyed-only", value=b"no key", partition=0, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(10)  # its own batch: the refusal covers the whole batch
    producer.produce("keyed-only", key=b"k", value=b"keyed", partition=0, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(10)
    assert errors[0] is not None and errors[0].name() == "INVALID_RECORD"
    assert errors[1] is None
    assert [(k, v) for _, k, v in read_all(broker.bootstrap_servers, "keyed-only")] == [(b"k", b"keyed")]
