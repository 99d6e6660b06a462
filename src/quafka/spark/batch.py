"""The batch reader of ``spark.read.format("quafka")``: plain Fetch by offset through
``quafka.client.PartitionReader``, no group, so reading has no side effects.

Options:

- ``kafka.bootstrap.servers`` (required), ``subscribe`` (required, comma-separated topics); other
  ``kafka.*`` options pass through to the reader/admin clients where they know the key.
- ``startingOffsets`` / ``endingOffsets`` (``earliest`` / ``latest`` or JSON per partition),
  ``startingTimestamp`` / ``endingTimestamp``, ``startingOffsetsByTimestamp`` /
  ``endingOffsetsByTimestamp`` and ``startingOffsetsByTimestampStrategy``, as in Spark's Kafka
  source (``offset_specs.py``).
- ``maxRecordsPerPartition`` (default 100000): larger offset ranges are split into several Spark
  partitions.
- ``share.group`` is refused (a batch read joins no group).

Planning (``partitions()``) runs ListOffsets through ``quafka.client.Admin`` and makes one
``InputPartition`` per ``(topic, partition, [from, to))`` slice; ``read()`` runs on the executors.

Filter pushdown: when the session sets ``spark.sql.python.filterPushdown.enabled=true`` Spark
calls ``pushFilters`` and this reader narrows the plan: ``partition`` ``=`` / ``IN`` drop whole
partitions, ``offset`` ``>``, ``>=``, ``<``, ``<=`` narrow the offset ranges (these filters are
handled exactly and not re-applied by Spark), and ``timestamp`` bounds narrow the offset ranges
through ListOffsets by timestamp, which answers the first offset whose timestamp is at least T
(every earlier record is older):

- lower bounds (``>``, ``>=``, ``=``) move each start offset to ListOffsets(T), on every topic;
- upper bounds (``<``, ``<=``, ``=``) move each end offset to ListOffsets(T') with T' the first
  millisecond past the bound — but only on topics whose ``message.timestamp.type`` is
  ``LogAppendTime``: there the broker stamps each batch as it appends it, so timestamps grow with
  the offset and every later record is too new. A ``CreateTime`` topic keeps the producers'
  timestamps, which need not grow (a record after ListOffsets(T') may still be older than T), so
  upper bounds do not prune there. (Kafka's own time index makes the same assumption; records
  written before a topic was switched to LogAppendTime keep their CreateTime, so do not rely on
  upper-bound pruning for a switched topic's older records.)

Bounds are rounded outwards to whole milliseconds, and timestamp filters are always returned to
Spark, which re-applies them: pushdown only reads less. With the setting off (Spark's default)
``pushFilters`` is never called: the read covers the whole offset range and Spark applies every
filter itself, giving the same rows.

pyspark 4.3 refuses to plan a reader that overrides ``DataSourceReader.pushFilters`` while the
setting is off (``DATA_SOURCE_PUSHDOWN_DISABLED``, in ``plan_data_source_read``: it compares
``reader.pushFilters.__func__`` with ``DataSourceReader.pushFilters``). To work with the setting
either way, ``pushFilters`` here is a descriptor whose bound object reports the base method as its
``__func__`` and calls ``_push_filters`` when invoked.

``subscribe=__share_group_state`` reads the share-state topic decoded with
``quafka.client.coordinator_records`` into ``SHARE_STATE_SCHEMA`` (one row per ShareSnapshot/ShareUpdate
record; tombstones give a row with ``tombstone=true`` and null state columns).
"""

from __future__ import annotations

import datetime
from typing import Any, Iterator

from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from quafka.client.coordinator_records import kafka_uuid_str

from .arrow import utc_datetime
from .record_columns import fetched_arrow_batches
from .offset_specs import parse_spec
from .options import SHARE_STATE_TOPIC, OptionError, Options
from .worker_process import settle_worker_process

__all__ = ["QuafkaBatchReader", "SHARE_STATE_SCHEMA", "OffsetSlice"]

DEFAULT_MAX_RECORDS_PER_PARTITION = 100_000

#: The decoded rows of ``__share_group_state``. ``topic`` is the topic's name when the cluster
#: still knows the topic id, else the id (``topicId``, Kafka's base64 form). ``stateEpoch`` is null
#: on ShareUpdate records; ``startOffset`` -1 on a ShareUpdate means "unchanged".
#: ``deliveryState``: 0 AVAILABLE, 2 ACKNOWLEDGED, 3 ARCHIVING, 4 ARCHIVED (Kafka's codes).
SHARE_STATE_SCHEMA = StructType([
    StructField("group", StringType(), False),
    StructField("topic", StringType(), False),
    StructField("topicId", StringType(), False),
    StructField("partition", IntegerType(), False),
    StructField("recordType", StringType(), False),
    StructField("tombstone", BooleanType(), False),
    StructField("startOffset", LongType(), True),
    StructField("stateEpoch", IntegerType(), True),
    StructField("leaderEpoch", IntegerType(), True),
    StructField("stateBatches", ArrayType(StructType([
        StructField("firstOffset", LongType(), False),
        StructField("lastOffset", LongType(), False),
        StructField("deliveryState", IntegerType(), False),
        StructField("deliveryCount", IntegerType(), False),
    ])), True),
    StructField("offset", LongType(), False),
    StructField("timestamp", TimestampType(), False),
])

_UTC = datetime.timezone.utc


class OffsetSlice(InputPartition):
    """One Spark partition: records ``[start, end)`` of ``topic``-``partition``."""

    def __init__(self, topic: str, partition: int, start: int, end: int,
                 topic_names: dict[str, str] | None = None) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.topic_names = dict(topic_names or {})  # share-state reads: topic id -> name

    def __repr__(self) -> str:
        return f"OffsetSlice({self.topic}-{self.partition} [{self.start}, {self.end}))"


def _client_config(options: Options, keys: Any) -> dict[str, Any]:
    config = {k: v for k, v in options.client_config().items() if k in keys}
    config["bootstrap.servers"] = options.bootstrap_servers()
    return config


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=_UTC)
_ONE_MS = datetime.timedelta(milliseconds=1)


def _ms(value: Any, ceil: bool = False) -> int | None:
    """A filter's TIMESTAMP/DATE value as epoch milliseconds, floored (or ceiled); exact, no float
    rounding."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_UTC)  # Spark sends naive UTC datetimes for TIMESTAMP
    elif isinstance(value, datetime.date):
        value = datetime.datetime(value.year, value.month, value.day, tzinfo=_UTC)
    else:
        return None
    delta = value - _EPOCH
    return -((-delta) // _ONE_MS) if ceil else delta // _ONE_MS


def _by_time(admin: Any, lookups: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """ListOffsets by timestamp: {tp: first offset with timestamp >= ms, or -1}."""
    return {tp: found[0] for tp, found in admin.list_offsets(lookups).items()} if lookups else {}


def _log_append_time(admin: Any, topic: str) -> bool:
    """Whether the broker stamps the topic's records (timestamps grow with the offset)."""
    value = admin.describe_configs("topic", topic).get("message.timestamp.type")
    return str(value) == "LogAppendTime"


class _BoundPushFilters:
    """What ``reader.pushFilters`` returns: callable like a bound method, while its ``__func__``
    is ``DataSourceReader.pushFilters`` so that pyspark does not refuse to plan with pushdown off."""

    def __init__(self, reader: "QuafkaBatchReader") -> None:
        self.__self__ = reader
        self.__func__ = DataSourceReader.pushFilters

    def __call__(self, filters: list) -> list:
        return self.__self__._push_filters(filters)


class _PushFilters:
    def __get__(self, obj: Any, cls: Any = None) -> Any:
        if obj is None:
            return DataSourceReader.pushFilters
        return _BoundPushFilters(obj)


class QuafkaBatchReader(DataSourceReader):
    """``spark.read.format("quafka")``; see the module docstring. ``__init__`` checks the options
    and does no I/O (the reader is pickled to the executors)."""

    pushFilters = _PushFilters()

    def __init__(self, options: Options, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        options.refuse(("share.group",), "is for spark.readStream (a share-group stream); a batch read "
                       "(spark.read) reads by offset and joins no group")
        options.refuse(("assign", "subscribePattern"), "is not supported by format(\"quafka\"); use 'subscribe'")
        self.bootstrap = options.bootstrap_servers()
        self.topics = options.topics()
        self.share_state = self.topics == [SHARE_STATE_TOPIC]
        if SHARE_STATE_TOPIC in self.topics and not self.share_state:
            raise OptionError(f"option 'subscribe' may name {SHARE_STATE_TOPIC!r} only on its own")
        self.starting = parse_spec(options, "starting", self.topics)
        self.ending = parse_spec(options, "ending", self.topics)
        self.max_records = options.integer("maxRecordsPerPartition", DEFAULT_MAX_RECORDS_PER_PARTITION)
        # pushed-down constraints
        self.pushed_partitions: set[int] | None = None
        self.pushed_min_offset = 0  # inclusive
        self.pushed_max_offset: int | None = None  # exclusive
        self.pushed_min_timestamp: int | None = None  # ms, inclusive
        self.pushed_max_timestamp: int | None = None  # ms, exclusive (LogAppendTime topics only)

    # ------------------------------------------------------------------ pushdown (planner)

    def _push_filters(self, filters: list) -> list:
        """Take what can be applied exactly; return the filters Spark must still apply."""
        remaining = []
        for f in filters:
            if not self._push_one(f):
                remaining.append(f)
        return remaining

    def _push_one(self, f: Any) -> bool:
        attr = getattr(f, "attribute", None)
        if not attr or len(attr) != 1:
            return False
        column = attr[0]
        if self.share_state:
            # partition/offset/timestamp of the share-state topic's records are columns too, but
            # "partition" there means the audited partition: leave everything to Spark
            if column != "offset":
                return False
        value = f.value
        if column == "partition" and isinstance(f, (EqualTo, In)):
            values = set(value) if isinstance(f, In) else {value}
            ints = {v for v in values if isinstance(v, int) and not isinstance(v, bool)}
            if len(ints) != len(values):
                return False
            self.pushed_partitions = ints if self.pushed_partitions is None else self.pushed_partitions & ints
            return True
        if column == "offset" and isinstance(value, int) and not isinstance(value, bool):
            if isinstance(f, GreaterThan):
                self.pushed_min_offset = max(self.pushed_min_offset, value + 1)
            elif isinstance(f, GreaterThanOrEqual):
                self.pushed_min_offset = max(self.pushed_min_offset, value)
            elif isinstance(f, LessThan):
                self._cap(value)
            elif isinstance(f, LessThanOrEqual):
                self._cap(value + 1)
            elif isinstance(f, EqualTo):
                self.pushed_min_offset = max(self.pushed_min_offset, value)
                self._cap(value + 1)
            else:
                return False
            return True
        if column == "timestamp":
            ms = _ms(value)  # floor to the millisecond
            if ms is None:
                return False
            if isinstance(f, (GreaterThan, GreaterThanOrEqual, EqualTo)):
                # ListOffsets(ms) = first offset with timestamp >= ms; also right for ">"
                self.pushed_min_timestamp = ms if self.pushed_min_timestamp is None else max(
                    self.pushed_min_timestamp, ms)
            if isinstance(f, (LessThan, LessThanOrEqual, EqualTo)):
                # the first millisecond no matching record can have; on a LogAppendTime topic every
                # record at or after ListOffsets(until) is that new
                until = ms if isinstance(f, LessThan) and _ms(value, ceil=True) == ms else ms + 1
                self.pushed_max_timestamp = until if self.pushed_max_timestamp is None else min(
                    self.pushed_max_timestamp, until)
            return False  # Spark re-applies it
        return False

    def _cap(self, end: int) -> None:
        self.pushed_max_offset = end if self.pushed_max_offset is None else min(self.pushed_max_offset, end)

    # ------------------------------------------------------------------ planning

    def partitions(self) -> list[OffsetSlice]:
        from quafka.client import Admin, KafkaException
        from quafka.client.admin import ADMIN_CONFIG

        slices: list[OffsetSlice] = []
        with Admin(_client_config(self.options, ADMIN_CONFIG)) as admin:
            try:
                described = admin.describe_topics(self.topics)
            except KafkaException as e:
                raise OptionError(f"option 'subscribe'={','.join(self.topics)!r}: {e}") from e
            tps = []
            for topic in self.topics:
                desc = described.get(topic)
                if desc is None:
                    raise OptionError(f"option 'subscribe' names topic {topic!r}, which does not exist")
                for p in sorted(desc.partitions):
                    if self.pushed_partitions is None or p in self.pushed_partitions:
                        tps.append((topic, p))
            partitions = {topic: described[topic].partitions for topic in self.topics}
            self.starting.check_partitions(partitions)
            self.ending.check_partitions(partitions)
            if not tps:
                return []
            earliest = admin.list_offsets({tp: "earliest" for tp in tps})
            latest = admin.list_offsets({tp: "latest" for tp in tps})
            start_time = _by_time(admin, self.starting.time_lookups(tps))
            end_time = _by_time(admin, self.ending.time_lookups(tps))
            since_time: dict[tuple[str, int], int] = {}  # pushed-down timestamp bounds
            if self.pushed_min_timestamp is not None:
                since_time = _by_time(admin, {tp: max(0, self.pushed_min_timestamp) for tp in tps})
            until_time: dict[tuple[str, int], int] = {}
            if self.pushed_max_timestamp is not None:
                appended = {topic for topic in {t for t, _ in tps} if _log_append_time(admin, topic)}
                until_time = _by_time(admin, {tp: max(0, self.pushed_max_timestamp) for tp in tps
                                              if tp[0] in appended})
            names: dict[str, str] = {}
            if self.share_state:
                names = {kafka_uuid_str(d.topic_id): name for name, d in admin.list_topics(include_internal=True).items()
                         if d.topic_id is not None}
        for tp in tps:
            low, high = earliest[tp][0], latest[tp][0]
            start = max(self.starting.resolve(tp, low, high, start_time.get), self.pushed_min_offset)
            end = self.ending.resolve(tp, low, high, end_time.get)
            if self.pushed_max_offset is not None:
                end = min(end, self.pushed_max_offset)
            if tp in since_time:
                start = max(start, high if since_time[tp] < 0 else since_time[tp])
            if until_time.get(tp, -1) >= 0:  # -1: no record that new, no cap
                end = min(end, until_time[tp])
            while start < end:
                stop = min(end, start + self.max_records)
                slices.append(OffsetSlice(tp[0], tp[1], start, stop, names))
                start = stop
        return slices

    # ------------------------------------------------------------------ reading (executors)

    def read(self, partition: OffsetSlice) -> Iterator[Any]:
        settle_worker_process()
        from quafka.client import PartitionReader
        from quafka.client.reader import READER_CONFIG

        if not isinstance(partition, OffsetSlice):
            # partitions() planned no slice (an empty topic or range): pyspark then runs one
            # InputPartition(None) of its own (pyspark/sql/worker/plan_data_source_read.py)
            return
        if partition.start >= partition.end:
            return
        with PartitionReader(_client_config(self.options, READER_CONFIG)) as reader:
            if self.share_state:
                records = reader.read(partition.topic, partition.partition, partition.start, partition.end)
                yield from self._share_state_rows(records, partition.topic_names)
                return
            # pyarrow.RecordBatches decoded in bulk per Fetch response (record_columns.py): Spark takes
            # them without per-row conversion
            yield from fetched_arrow_batches(partition.topic, partition.partition,
                                             reader.read_raw(partition.topic, partition.partition, partition.start,
                                                             partition.end),
                                             check_crcs=reader.config["check.crcs"])

    @staticmethod
    def _share_state_rows(records: Iterator[Any], names: dict[str, str]) -> Iterator[tuple]:
        from quafka.client import coordinator_records

        for r in records:
            if r.key is None:
                continue
            try:
                decoded = coordinator_records.decode_share_state_record(r.key, r.value)
            except coordinator_records.UnknownRecordType:
                continue  # a record type newer than this reader: skip it
            key, value = decoded.key, decoded.value
            topic_id = kafka_uuid_str(key.topic_id)
            kind = "ShareSnapshot" if decoded.record_type == coordinator_records.SHARE_SNAPSHOT else "ShareUpdate"
            ts = utc_datetime(r.timestamp)
            if value is None:
                yield (key.group_id, names.get(topic_id, topic_id), topic_id, key.partition, kind, True,
                       None, None, None, None, r.offset, ts)
                continue
            batches = [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                       for b in value.state_batches]
            state_epoch = getattr(value, "state_epoch", None)
            yield (key.group_id, names.get(topic_id, topic_id), topic_id, key.partition, kind, False,
                   value.start_offset, state_epoch, value.leader_epoch, batches, r.offset, ts)
