"""Test-side helpers for the share-group offset admin APIs, built on kio and `support.RawClient`.

* DescribeShareGroupOffsets (key 90, v0-v1), AlterShareGroupOffsets (key 91, v0),
  DeleteShareGroupOffsets (key 92, v0) and DeleteGroups (key 42, v0-v2): request builders that
  never validate what they build, and `OffsetAdmin`, one connection sending them;
* `ListOffsets` for the earliest/latest offset of a partition (what a caller resolves before an
  AlterShareGroupOffsets to "earliest" or "latest");
* readers of the coordinators' internal topics with a plain confluent `Consumer`: every record
  of one partition from its log start offset up to its high watermark, decoded with
  `quafka.protocol.share_state_records` and `quafka.protocol.share_group_records` (tombstones come
  back with value None).

Shapes:

* *describe topics* is ``None`` (every topic the group holds share state for) or
  ``{topic name: [partition, ...]}``;
* *alter offsets* is ``{topic name: {partition: start offset}}``;
* `partition_offsets(group)` flattens a described group to
  ``{(topic name, partition): PartitionOffsets(start_offset, leader_epoch, lag, error_code)}``
  (lag is None for v0, which has no such field).
"""

from __future__ import annotations

import dataclasses
import sys
import uuid
from typing import Iterable, Mapping, NamedTuple, Sequence

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from quafka.protocol.coordinator_record_codec import CONSUMER_OFFSETS_TOPIC, UnknownRecordType
from quafka.protocol.partition_placement import group_partition, share_state_partition
from quafka.protocol.share_group_records import GroupRecord, decode_group_record
from quafka.protocol.share_state_records import SHARE_GROUP_STATE_TOPIC, ShareStateRecord, decode_share_state_record

from . import RawClient

DESCRIBE_SHARE_GROUP_OFFSETS = 90
ALTER_SHARE_GROUP_OFFSETS = 91
DELETE_SHARE_GROUP_OFFSETS = 92
DELETE_GROUPS = 42
LIST_OFFSETS = 2

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2

# Broker defaults of the internal topics' partition counts.
DEFAULT_OFFSETS_PARTITIONS = 50
DEFAULT_SHARE_STATE_PARTITIONS = 50


def _make(cls, **values):
    """A kio entity from the fields `cls` has (others are dropped, so one call fits every version)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def _nested(cls, name: str):
    return getattr(sys.modules[cls.__module__], name)


def _code(value):
    try:
        return ErrorCode(value)
    except ValueError:
        return value


# ----------------------------------------------------------------------------- request builders

def describe_offsets_request(groups: Mapping[str, Mapping[str, Sequence[int]] | None], *, version: int = 1):
    """DescribeShareGroupOffsetsRequest: {group id: describe topics (None = all)}."""
    cls = load_request_schema(DESCRIBE_SHARE_GROUP_OFFSETS, version)
    group_cls = _nested(cls, "DescribeShareGroupOffsetsRequestGroup")
    topic_cls = _nested(cls, "DescribeShareGroupOffsetsRequestTopic")
    return cls(groups=tuple(
        group_cls(group_id=g, topics=None if topics is None else tuple(
            topic_cls(topic_name=name, partitions=tuple(parts)) for name, parts in topics.items()))
        for g, topics in groups.items()))


def alter_offsets_request(group_id: str, offsets: Mapping[str, Mapping[int, int]], *, version: int = 0):
    """AlterShareGroupOffsetsRequest: {topic name: {partition: start offset}}."""
    cls = load_request_schema(ALTER_SHARE_GROUP_OFFSETS, version)
    topic_cls = _nested(cls, "AlterShareGroupOffsetsRequestTopic")
    part_cls = _nested(cls, "AlterShareGroupOffsetsRequestPartition")
    return cls(group_id=group_id, topics=tuple(
        topic_cls(topic_name=name, partitions=tuple(
            part_cls(partition_index=p, start_offset=o) for p, o in parts.items()))
        for name, parts in offsets.items()))


def delete_offsets_request(group_id: str, topics: Iterable[str], *, version: int = 0):
    """DeleteShareGroupOffsetsRequest for these topic names."""
    cls = load_request_schema(DELETE_SHARE_GROUP_OFFSETS, version)
    topic_cls = _nested(cls, "DeleteShareGroupOffsetsRequestTopic")
    return cls(group_id=group_id, topics=tuple(topic_cls(topic_name=t) for t in topics))


def delete_groups_request(group_ids: Iterable[str], *, version: int = 2):
    cls = load_request_schema(DELETE_GROUPS, version)
    return cls(groups_names=tuple(group_ids))


def list_offsets_request(topic: str, partitions: Iterable[int], timestamp: int, *, version: int = 7):
    cls = load_request_schema(LIST_OFFSETS, version)
    topic_cls, part_cls = _nested(cls, "ListOffsetsTopic"), _nested(cls, "ListOffsetsPartition")
    return _make(cls, replica_id=-1, isolation_level=0, topics=(topic_cls(name=topic, partitions=tuple(
        _make(part_cls, partition_index=p, current_leader_epoch=-1, timestamp=timestamp, max_num_offsets=1)
        for p in partitions)),))


# ----------------------------------------------------------------------------- responses

class PartitionOffsets(NamedTuple):
    start_offset: int
    leader_epoch: int
    lag: int | None  # None: DescribeShareGroupOffsets v0 has no Lag
    error_code: object


def partition_offsets(group) -> dict[tuple[str, int], PartitionOffsets]:
    """{(topic name, partition): PartitionOffsets} of one DescribeShareGroupOffsets response group."""
    return {(t.topic_name, p.partition_index): PartitionOffsets(p.start_offset, p.leader_epoch,
                                                                getattr(p, "lag", None), _code(p.error_code))
            for t in group.topics for p in t.partitions}


def alter_errors(response) -> dict[tuple[str, int], object]:
    """{(topic name, partition): error code} of an AlterShareGroupOffsets response."""
    return {(t.topic_name, p.partition_index): _code(p.error_code) for t in response.responses for p in t.partitions}


def delete_errors(response) -> dict[str, object]:
    """{topic name: error code} of a DeleteShareGroupOffsets response."""
    return {t.topic_name: _code(t.error_code) for t in response.responses}


# ----------------------------------------------------------------------------- the client

class OffsetAdmin:
    """One connection sending the offset admin requests (tests only; nothing is validated)."""

    def __init__(self, bootstrap: str, *, timeout_s: float = 10.0) -> None:
        self.raw = RawClient(bootstrap, timeout_s=timeout_s)

    def close(self) -> None:
        self.raw.close()

    def __enter__(self) -> "OffsetAdmin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(self, entity):
        return self.raw.request(entity)

    def describe_groups(self, groups: Mapping[str, Mapping[str, Sequence[int]] | None], *, version: int = 1):
        """The whole DescribeShareGroupOffsets response for several groups."""
        return self.request(describe_offsets_request(groups, version=version))

    def describe(self, group_id: str, topics: Mapping[str, Sequence[int]] | None = None, *, version: int = 1):
        """The response group of a DescribeShareGroupOffsets for one group (topics None = all)."""
        (group,) = self.describe_groups({group_id: topics}, version=version).groups
        return group

    def offsets(self, group_id: str, topics: Mapping[str, Sequence[int]] | None = None, *,
                version: int = 1) -> dict[tuple[str, int], PartitionOffsets]:
        """`partition_offsets` of `describe`, asserting the group-level error is NONE."""
        group = self.describe(group_id, topics, version=version)
        assert group.error_code == ErrorCode.none, group
        return partition_offsets(group)

    def alter(self, group_id: str, offsets: Mapping[str, Mapping[int, int]], *, version: int = 0):
        return self.request(alter_offsets_request(group_id, offsets, version=version))

    def delete(self, group_id: str, topics: Iterable[str], *, version: int = 0):
        return self.request(delete_offsets_request(group_id, topics, version=version))

    def delete_groups(self, group_ids: Iterable[str], *, version: int = 2) -> dict[str, object]:
        """{group id: error code} of a DeleteGroups request."""
        resp = self.request(delete_groups_request(group_ids, version=version))
        return {r.group_id: _code(r.error_code) for r in resp.results}

    def list_offset(self, topic: str, partition: int = 0, timestamp: int = LATEST_TIMESTAMP) -> int:
        """ListOffsets for one partition: latest (-1, the log end offset) or earliest (-2)."""
        resp = self.request(list_offsets_request(topic, [partition], timestamp))
        (p,) = resp.topics[0].partitions
        assert p.error_code == ErrorCode.none, resp
        return p.offset


# ----------------------------------------------------------------------------- internal topics

def read_partition(bootstrap: str, topic: str, partition: int, *, timeout_s: float = 10.0) -> list[tuple]:
    """(key, value) of every record of one partition, from its log start offset to its high
    watermark (read with a plain confluent Consumer; value None is a tombstone)."""
    import time

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "quafka-tests-internal-reader",
                         "enable.auto.commit": False, "log_level": 3})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
        if high <= low:
            return []
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        out: list[tuple] = []
        deadline = time.monotonic() + timeout_s
        last = low - 1
        while last < high - 1:
            if time.monotonic() > deadline:
                raise AssertionError(f"read {len(out)} records of {topic}-{partition} up to {high}, "
                                     f"timed out at offset {last}")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            last = msg.offset()
            out.append((msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def group_records(bootstrap: str, group_id: str, *,
                  num_partitions: int = DEFAULT_OFFSETS_PARTITIONS) -> list[GroupRecord]:
    """The share-group records of `group_id` on `__consumer_offsets`, in log order."""
    out = []
    for key, value in read_partition(bootstrap, CONSUMER_OFFSETS_TOPIC, group_partition(group_id, num_partitions)):
        try:
            record = decode_group_record(key, value)
        except UnknownRecordType:
            continue
        if record.key.group_id == group_id:
            out.append(record)
    return out


def share_state_records(bootstrap: str, group_id: str, topic_id: uuid.UUID, partition: int, *,
                        num_partitions: int = DEFAULT_SHARE_STATE_PARTITIONS) -> list[ShareStateRecord]:
    """The ShareSnapshot/ShareUpdate records (and tombstones) of one share partition on
    `__share_group_state`, in log order."""
    state_partition = share_state_partition(group_id, topic_id, partition, num_partitions)
    records = (decode_share_state_record(k, v) for k, v in read_partition(bootstrap, SHARE_GROUP_STATE_TOPIC,
                                                                          state_partition))
    return [r for r in records if r.key == (group_id, topic_id, partition)]


def latest_group_records(records: Iterable[GroupRecord]) -> dict[tuple[int, tuple], object]:
    """The newest value per (record type, key) -- the group as the topic says it is now; keys whose
    newest record is a tombstone map to None."""
    latest: dict[tuple[int, tuple], object] = {}
    for r in records:
        latest[(r.record_type, tuple(r.key))] = r.value
    return latest
