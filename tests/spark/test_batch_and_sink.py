"""Batch reader and sink of format("quafka") against an embedded broker (issue 7, acceptance 4,
and the option errors)."""

from __future__ import annotations

import datetime
import json
import time

import pytest
from confluent_kafka import Producer
from pyspark.sql import functions as F
from pyspark.sql.datasource import GreaterThanOrEqual, In, LessThan, LessThanOrEqual

from quafka.client import Admin, NewTopic, PartitionReader, ShareConsumer
from quafka.spark.batch import QuafkaBatchReader
from quafka.spark.datasource import RECORD_SCHEMA
from quafka.spark.options import OptionError, Options

pytestmark = pytest.mark.spark

TOPIC = "batch3"
PER_PARTITION = 10
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


def _produce(bootstrap: str, topic: str, rows: list[tuple[int, bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    errors = []
    for partition, key, value in rows:
        producer.produce(topic, value=value, key=key, partition=partition,
                         on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(30) == 0
    assert not errors


@pytest.fixture(scope="module")
def topic3(bootstrap):
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({TOPIC: (3, 1)})
    _produce(bootstrap, TOPIC, [(p, f"k{p}-{i}".encode(), f"v{p}-{i}".encode())
                                for i in range(PER_PARTITION) for p in range(3)])
    return TOPIC


def _reader(spark, bootstrap, **options):
    r = spark.read.format("quafka").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _rows(df):
    return sorted((r.partition, r.offset, r.value) for r in df.select("partition", "offset", "value").collect())


def test_offset_ranges_return_exactly_the_expected_rows(spark, bootstrap, topic3):
    starting = {TOPIC: {"0": 2, "1": -2, "2": 5}}
    ending = {TOPIC: {"0": 8, "1": 3, "2": -1}}
    df = _reader(spark, bootstrap, subscribe=TOPIC, startingOffsets=json.dumps(starting),
                 endingOffsets=json.dumps(ending), maxRecordsPerPartition="4")
    expected = sorted([(0, o, f"v0-{o}".encode()) for o in range(2, 8)]
                      + [(1, o, f"v1-{o}".encode()) for o in range(0, 3)]
                      + [(2, o, f"v2-{o}".encode()) for o in range(5, 10)])
    rows = df.collect()
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in rows) == expected
    first = next(r for r in rows if r.partition == 0 and r.offset == 2)
    assert first.key == b"k0-2" and first.topic == TOPIC and first.deliveryCount is None
    assert first.timestamp is not None and first.headers == []


def test_filtered_read_same_rows_with_pushdown_off_and_on(spark, bootstrap, topic3):
    def filtered():
        df = _reader(spark, bootstrap, subscribe=TOPIC)
        df = df.where(F.col("partition").isin(0, 2) & (F.col("offset") >= 3) & (F.col("offset") < 7))
        return _rows(df), df.rdd.getNumPartitions()

    expected = sorted((p, o, f"v{p}-{o}".encode()) for p in (0, 2) for o in range(3, 7))
    before = spark.conf.get(PUSHDOWN, "false")
    try:
        spark.conf.set(PUSHDOWN, "false")
        off, off_tasks = filtered()
        spark.conf.set(PUSHDOWN, "true")
        on, on_tasks = filtered()
    finally:
        spark.conf.set(PUSHDOWN, before)
    assert off == expected
    assert on == expected
    assert off_tasks == 3  # every partition planned, Spark filters
    assert on_tasks == 2  # partition 1 not planned at all

    # what the planner does when pushdown is on: the partition and offset filters are taken
    reader = QuafkaBatchReader(Options({"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC}), RECORD_SCHEMA)
    filters = [In(("partition",), (0, 2)), GreaterThanOrEqual(("offset",), 3), LessThan(("offset",), 7)]
    assert list(reader.pushFilters(filters)) == []
    planned = [(s.topic, s.partition, s.start, s.end) for s in reader.partitions()]
    assert planned == [(TOPIC, 0, 3, 7), (TOPIC, 2, 3, 7)]


def test_timestamp_lower_bound_moves_the_start_offset(bootstrap):
    topic = "stamped"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({topic: (1, 1)})
    producer = Producer({"bootstrap.servers": bootstrap})
    base = 1_700_000_000_000
    for i in range(6):
        producer.produce(topic, value=b"x", partition=0, timestamp=base + i * 1000)
    assert producer.flush(30) == 0

    reader = QuafkaBatchReader(Options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}), RECORD_SCHEMA)
    bound = GreaterThanOrEqual(("timestamp",), datetime.datetime.fromtimestamp((base + 4000) / 1000,
                                                                               datetime.timezone.utc))
    assert list(reader.pushFilters([bound])) == [bound]  # Spark re-applies timestamp filters
    assert [(s.start, s.end) for s in reader.partitions()] == [(4, 6)]


def _with_pushdown(spark, enabled: bool, fn):
    before = spark.conf.get(PUSHDOWN, "false")
    try:
        spark.conf.set(PUSHDOWN, "true" if enabled else "false")
        return fn()
    finally:
        spark.conf.set(PUSHDOWN, before)


def _utc(ms: int, micros: int = 0) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc) + datetime.timedelta(microseconds=micros)


def test_timestamp_range_on_log_append_time_topic_narrows_both_ends(spark, bootstrap):
    """The broker stamps LogAppendTime records, so timestamps grow with the offset and an upper
    bound caps the end offset too; pushdown off and on give the same rows."""
    topic = "appended"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 1, 1, {"message.timestamp.type": "LogAppendTime"})])
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(6):  # one batch per millisecond: distinct append times
        producer.produce(topic, value=f"a{i}".encode(), partition=0, timestamp=1)  # CreateTime ignored
        assert producer.flush(30) == 0
        sent_ms = time.time_ns() // 1_000_000
        deadline = time.monotonic() + 5
        while time.time_ns() // 1_000_000 <= sent_ms + 1 and time.monotonic() < deadline:
            pass
    with PartitionReader({"bootstrap.servers": bootstrap}) as log:
        ms = [r.timestamp for r in log.read(topic, 0, 0, 6)]
    assert ms == sorted(ms) and len(set(ms)) == 6 and ms[0] > 1, ms  # broker-stamped, increasing

    low, high = _utc(ms[1]), _utc(ms[3], 500)  # 0.5 ms past record 3: "<=" must keep it

    def filtered():
        df = _reader(spark, bootstrap, subscribe=topic)
        df = df.where((F.col("timestamp") >= F.lit(low)) & (F.col("timestamp") <= F.lit(high)))
        return sorted(r.offset for r in df.select("offset").collect())

    assert _with_pushdown(spark, False, filtered) == [1, 2, 3]
    assert _with_pushdown(spark, True, filtered) == [1, 2, 3]

    reader = QuafkaBatchReader(Options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}), RECORD_SCHEMA)
    bounds = [GreaterThanOrEqual(("timestamp",), low), LessThanOrEqual(("timestamp",), high)]
    assert list(reader.pushFilters(bounds)) == bounds  # Spark re-applies timestamp filters
    assert [(s.start, s.end) for s in reader.partitions()] == [(1, 4)]
    reader = QuafkaBatchReader(Options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}), RECORD_SCHEMA)
    reader.pushFilters([LessThan(("timestamp",), _utc(ms[2]))])
    assert [(s.start, s.end) for s in reader.partitions()] == [(0, 2)]


def test_timestamp_upper_bound_does_not_prune_create_time(spark, bootstrap):
    """Producer timestamps need not grow with the offset: an upper bound must not cap the end."""
    topic = "unordered"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({topic: (1, 1)})
    base = 1_700_000_000_000
    producer = Producer({"bootstrap.servers": bootstrap})
    for delta in (5000, 1000, 3000, 2000):
        producer.produce(topic, value=b"x", partition=0, timestamp=base + delta)
    assert producer.flush(30) == 0

    def filtered():
        df = _reader(spark, bootstrap, subscribe=topic).where(F.col("timestamp") < F.lit(_utc(base + 2500)))
        return sorted(r.offset for r in df.select("offset").collect())

    assert _with_pushdown(spark, False, filtered) == [1, 3]
    assert _with_pushdown(spark, True, filtered) == [1, 3]
    reader = QuafkaBatchReader(Options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}), RECORD_SCHEMA)
    reader.pushFilters([LessThan(("timestamp",), _utc(base + 2500))])
    assert [(s.start, s.end) for s in reader.partitions()] == [(0, 4)]


def test_timestamp_options_as_in_spark_kafka_source(spark, bootstrap):
    """startingTimestamp / endingTimestamp / *OffsetsByTimestamp (+ strategy): ListOffsets by
    timestamp, with Spark's Kafka source's precedence and rules."""
    topic = "timed"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({topic: (2, 1)})
    base = 1_700_000_000_000
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(2):
        for i in range(5):  # partition p, offset i: timestamp base + i s (+ 100 ms on partition 1)
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p, timestamp=base + i * 1000 + p * 100)
    assert producer.flush(30) == 0

    def read(**options):
        return sorted((r.partition, r.offset) for r in _reader(spark, bootstrap, subscribe=topic, **options)
                      .select("partition", "offset").collect())

    # global bounds: [first offset with ts >= base+1000, first offset with ts >= base+3050)
    assert read(startingTimestamp=str(base + 1000), endingTimestamp=str(base + 3050)) == [
        (0, 1), (0, 2), (0, 3), (1, 1), (1, 2)]
    # the timestamp options win over startingOffsets / endingOffsets
    assert read(startingTimestamp=str(base + 4000), startingOffsets="earliest") == [(0, 4), (1, 4)]
    # per partition; an end past every record is the latest offset
    by = json.dumps({topic: {"0": base + 3000, "1": base}})
    assert read(startingOffsetsByTimestamp=by, endingOffsetsByTimestamp=json.dumps(
        {topic: {"0": base + 9999, "1": base + 1000}})) == [(0, 3), (0, 4), (1, 0)]
    # a start past every record: an error naming the partition, or the latest offset on request
    with pytest.raises(Exception, match="startingTimestamp.*no record of timed-0"):
        read(startingTimestamp=str(base + 9999))
    assert read(startingTimestamp=str(base + 4050), startingOffsetsByTimestampStrategy="latest") == [(1, 4)]
    # a by-timestamp map names every partition, as Spark requires
    with pytest.raises(Exception, match="startingOffsetsByTimestamp.*missing: timed-1"):
        read(startingOffsetsByTimestamp=json.dumps({topic: {"0": base}}))


def test_sink_round_trip(spark, bootstrap):
    topic = "roundtrip"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({topic: (2, 1)})
    data = [(f"k{i}", f"value-{i}".encode(), i % 2, [(f"h{i}", b"hv")]) for i in range(20)]
    df = spark.createDataFrame(data, "key string, value binary, partition int, "
                                     "headers array<struct<key: string, value: binary>>")
    df.write.format("quafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).mode(
        "append").save()
    back = _reader(spark, bootstrap, subscribe=topic).collect()
    got = sorted((bytes(r.key).decode(), bytes(r.value), r.partition, [(h.key, bytes(h.value)) for h in r.headers])
                 for r in back)
    assert got == sorted((k, v, p, h) for k, v, p, h in data)


def test_share_group_state_read_decodes_the_acknowledged_records(spark, bootstrap):
    topic, group = "audited", "audit-group"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({topic: (1, 1)})
        admin.alter_configs("group", group, {"share.auto.offset.reset": "earliest"})
    _produce(bootstrap, topic, [(0, None, f"r{i}".encode()) for i in range(5)])
    with ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group}) as consumer:
        consumer.subscribe([topic])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            got += consumer.poll(1.0)
        assert len(got) == 5
        consumer.commit_sync()

    def state_rows():
        df = _reader(spark, bootstrap, subscribe="__share_group_state")
        return [r for r in df.where(F.col("group") == group).collect() if r.topic == topic]

    deadline = time.monotonic() + 20
    rows = state_rows()
    while not any(not r.tombstone and (r.startOffset == 5 or any(b.deliveryState == 2 for b in r.stateBatches or []))
                  for r in rows) and time.monotonic() < deadline:
        time.sleep(0.5)
        rows = state_rows()
    assert rows, "no __share_group_state rows for the group"
    assert {r.recordType for r in rows} <= {"ShareSnapshot", "ShareUpdate"}
    assert all(r.partition == 0 and r.topicId for r in rows)
    assert any(not r.tombstone and (r.startOffset == 5 or any(b.deliveryState == 2 for b in r.stateBatches or []))
               for r in rows)


@pytest.mark.parametrize("options, named", [
    ({"subscribe": TOPIC}, "kafka.bootstrap.servers"),
    ({"kafka.bootstrap.servers": "x:1"}, "subscribe"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": TOPIC, "share.group": "g"}, "share.group"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": TOPIC, "startingOffsets": "latest"}, "startingOffsets"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": TOPIC, "endingOffsets": "{bad"}, "endingOffsets"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": TOPIC, "startingOffsets": '{"other": {"0": 1}}'},
     "startingOffsets"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": TOPIC, "maxRecordsPerPartition": "0"},
     "maxRecordsPerPartition"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": TOPIC, "startingTimestamp": "soon"}, "startingTimestamp"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": TOPIC, "endingTimestamp": "-5"}, "endingTimestamp"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": TOPIC, "startingOffsetsByTimestamp": '{"%s": {"0": "x"}}' % TOPIC},
     "startingOffsetsByTimestamp"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": TOPIC, "endingOffsetsByTimestamp": "[]"},
     "endingOffsetsByTimestamp"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": TOPIC, "startingTimestamp": "1",
      "startingOffsetsByTimestampStrategy": "earliest"}, "startingOffsetsByTimestampStrategy"),
])
def test_reader_option_errors_name_the_option(options, named):
    with pytest.raises(OptionError, match=named):
        QuafkaBatchReader(Options(options), RECORD_SCHEMA)


def test_option_errors_surface_through_spark(spark, bootstrap, topic3):
    with pytest.raises(Exception, match="OptionError: option 'share.group'"):
        _reader(spark, bootstrap, subscribe=TOPIC, **{"share.group": "g"}).collect()
    with pytest.raises(Exception, match="OptionError: .*option 'subscribe'"):
        _reader(spark, bootstrap).collect()


@pytest.mark.parametrize("ddl, options, named", [
    ("key string", {"topic": "t"}, "OptionError: .*writes need a 'value' column"),
    ("value int", {"topic": "t"}, "OptionError: column 'value' must be binary or string"),
    ("value binary, partition string", {"topic": "t"}, "OptionError: column 'partition' must be int"),
    ("value binary", {}, "OptionError: option 'topic' is missing"),
    ("value binary, extra int", {"topic": "t"}, "OptionError: column 'extra' is not one of"),
])
def test_sink_errors_name_the_column_or_option(spark, bootstrap, ddl, options, named):
    df = spark.createDataFrame([], ddl)
    writer = df.write.format("quafka").option("kafka.bootstrap.servers", bootstrap).mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    with pytest.raises(Exception, match=named):
        writer.save()


def test_topic_column_and_stream_writer(spark, bootstrap, tmp_path):
    topics = ("by-column-a", "by-column-b")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({t: (1, 1) for t in topics})
    rows = [(topics[i % 2], f"s{i}") for i in range(10)]
    spark.createDataFrame(rows, "topic string, value string").write.parquet(str(tmp_path / "in"))
    stream = spark.readStream.schema("topic string, value string").parquet(str(tmp_path / "in"))
    query = (stream.writeStream.format("quafka").option("kafka.bootstrap.servers", bootstrap)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination(60)
    assert query.exception() is None
    for topic in topics:
        back = _reader(spark, bootstrap, subscribe=topic).collect()
        assert sorted(bytes(r.value).decode() for r in back) == sorted(v for t, v in rows if t == topic)


def test_empty_topic_and_empty_range_read_no_rows(spark, bootstrap, topic3):
    """No offset slice to read (an empty topic, or a range with nothing in it): pyspark then plans
    one `InputPartition(None)` of its own (pyspark/sql/worker/plan_data_source_read.py), which the
    reader must read as no rows — as Spark's Kafka source answers an empty range."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics({"empty2": (2, 1)})
    assert _reader(spark, bootstrap, subscribe="empty2").count() == 0
    at_4 = json.dumps({TOPIC: {"0": 4, "1": 4, "2": 4}})
    assert _reader(spark, bootstrap, subscribe=TOPIC, startingOffsets=at_4, endingOffsets=at_4).collect() == []
