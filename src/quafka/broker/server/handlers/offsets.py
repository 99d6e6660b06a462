"""ListOffsets (key 2) and DeleteRecords (key 21): the log's offsets by position and by time.

ListOffsets special timestamps: -1 latest (the log end offset, which is also the high watermark on
one node; at isolation_level read_committed the last stable offset), -2 earliest (the log start offset), -3 the record with
the largest timestamp, -4 earliest local (= earliest: no tiered storage), -5 latest tiered and -6
earliest pending upload (no tiered storage: offset -1). A timestamp >= 0 finds the first record
whose timestamp is at least that (time index, then a record-level look into one batch). At
read_committed an offset found by timestamp (or -3) at or above the LSO is not answered (offset
-1), as Kafka's Partition.fetchOffsetForTimestamp filters by the last fetchable offset.

DeleteRecords moves a partition's log start offset (durably) to the given offset, or to the high
watermark for -1; whole segments below it are deleted.
"""

from __future__ import annotations

from quafka.broker.core.acl_types import AclOperation, ResourceType
from quafka.protocol.errors import ErrorCode

from ..authorization import filter_authorized
from ..registry import handles
from ..state import LEADER_EPOCH
from ._util import NO_THROTTLE, item_class, make, response_class

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6


READ_COMMITTED = 1


def _lookup(part, timestamp: int, isolation: int) -> tuple[ErrorCode, int, int]:
    """(error, timestamp, offset) for one partition (Kafka's Partition.fetchOffsetForTimestamp:
    the last fetchable offset is the LSO at read_committed, else the high watermark)."""
    plog = part.log
    last_fetchable = part.last_stable_offset if isolation == READ_COMMITTED else plog.log_end_offset
    if timestamp == LATEST:
        return ErrorCode.none, -1, last_fetchable
    error, ts, offset = _lookup_in_log(plog, timestamp)
    if timestamp not in (EARLIEST, EARLIEST_LOCAL) and offset >= last_fetchable:
        return error, -1, -1
    return error, ts, offset


def _lookup_in_log(plog, timestamp: int) -> tuple[ErrorCode, int, int]:
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return ErrorCode.none, -1, plog.log_start_offset
    if timestamp == MAX_TIMESTAMP:
        found = plog.max_timestamp_offset()
        return (ErrorCode.none, -1, -1) if found is None else (ErrorCode.none, found[1], found[0])
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return ErrorCode.none, -1, -1
    if timestamp < 0:
        return ErrorCode.invalid_request, -1, -1
    found = plog.offset_for_timestamp(timestamp)
    if found is None:
        return ErrorCode.none, -1, -1
    offset, ts = found
    return ErrorCode.none, ts, offset


@handles(2, 1, 11)
async def handle_list_offsets(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(2, ctx.api_version)
    topic_cls = item_class(resp_cls, "topics")
    part_cls = item_class(topic_cls, "partitions")
    topics_out = []
    # KafkaApis.handleListOffsetRequest: DESCRIBE on each TOPIC, else TOPIC_AUTHORIZATION_FAILED on its
    # partitions (whether the topic exists or not)
    describable = filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, [t.name for t in req.topics])
    isolation = getattr(req, "isolation_level", 0)  # v2+
    for t in req.topics:
        topic = state.topics.get(t.name)
        seen: set[int] = set()
        parts = []
        for p in t.partitions:
            values = dict(partition_index=p.partition_index, timestamp=-1, offset=-1, leader_epoch=-1,
                          old_style_offsets=())
            if t.name not in describable:
                values["error_code"] = ErrorCode.topic_authorization_failed
            elif p.partition_index in seen:
                values["error_code"] = ErrorCode.invalid_request
            elif topic is None or not 0 <= p.partition_index < len(topic.partitions):
                values["error_code"] = ErrorCode.unknown_topic_or_partition
            elif getattr(p, "current_leader_epoch", -1) > LEADER_EPOCH:
                values["error_code"] = ErrorCode.unknown_leader_epoch
            else:
                error, ts, offset = _lookup(topic.partitions[p.partition_index], p.timestamp, isolation)
                values.update(error_code=error, timestamp=ts, offset=offset,
                              leader_epoch=LEADER_EPOCH if offset >= 0 else -1)
            seen.add(p.partition_index)
            parts.append(make(part_cls, **values))
        topics_out.append(make(topic_cls, name=t.name, partitions=tuple(parts)))
    return make(resp_cls, throttle_time=NO_THROTTLE, topics=tuple(topics_out))


@handles(21, 0, 2)
async def handle_delete_records(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(21, ctx.api_version)
    topic_cls = item_class(resp_cls, "topics")
    part_cls = item_class(topic_cls, "partitions")
    topics_out = []
    # KafkaApis.handleDeleteRecordsRequest: DELETE on each TOPIC, else TOPIC_AUTHORIZATION_FAILED
    deletable = filter_authorized(ctx, AclOperation.DELETE, ResourceType.TOPIC, [t.name for t in req.topics])
    for t in req.topics:
        topic = state.topics.get(t.name)
        parts = []
        for p in t.partitions:
            low, error = -1, ErrorCode.none
            if t.name not in deletable:
                error = ErrorCode.topic_authorization_failed
            elif topic is None or not 0 <= p.partition_index < len(topic.partitions):
                error = ErrorCode.unknown_topic_or_partition
            elif topic.internal:  # ReplicaManager.deleteRecordsOnLocalLog: never for an internal topic
                error = ErrorCode.invalid_topic_exception
            else:
                plog = topic.partitions[p.partition_index].log
                offset = plog.log_end_offset if p.offset == -1 else p.offset
                if offset < 0 or offset > plog.log_end_offset:
                    error = ErrorCode.offset_out_of_range
                else:
                    low = plog.delete_records_before(offset)
            parts.append(make(part_cls, partition_index=p.partition_index, low_watermark=low, error_code=error))
        topics_out.append(make(topic_cls, name=t.name, partitions=tuple(parts)))
    ctx.server.disk_space.recheck()  # segments below the new start offsets are gone: measure now
    return make(resp_cls, throttle_time=NO_THROTTLE, topics=tuple(topics_out))
