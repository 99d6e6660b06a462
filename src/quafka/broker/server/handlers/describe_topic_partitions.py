"""DescribeTopicPartitions (key 75, KIP-966), v0: topics and their partitions, a page at a time.

Kafka's own tooling (the Java Admin's `describeTopics`, so `kafka-topics.sh --describe`) asks this
instead of Metadata when the broker advertises it. Followed here as Kafka 4.x answers it
(`DescribeTopicPartitionsRequestHandler.handleDescribeTopicPartitionsRequest` and
`KRaftMetadataCache.describeTopicResponse`):

- An empty topic list asks for every topic; topics are taken in name order from the cursor's topic
  on, the cursor's topic from the cursor's partition index, the others from partition 0.
- At most `min(ResponsePartitionLimit, 2000)` partitions (at least 1) are described; 2000 is
  Kafka's `max.request.partition.size.limit` default, which quafka does not make configurable. A
  topic cut short gets NextCursor (that topic, the first partition left out); a limit reached exactly
  at the end of a topic points NextCursor at the next topic's partition 0; the last page has none.
- A cursor whose topic is not among the topics named, or whose partition index is negative, is an
  INVALID_REQUEST: every topic named is answered with that error and no partitions (Kafka's
  `DescribeTopicPartitionsRequest.getErrorResponse`).
- DESCRIBE on the TOPIC: a topic named without it is answered TOPIC_AUTHORIZATION_FAILED with the
  zero topic id (whether it exists is not disclosed), after the described topics; with all topics
  asked for it is left out. A named topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION (a name
  that is not a valid topic name: INVALID_TOPIC_EXCEPTION). TopicAuthorizedOperations is always
  filled in for the described topics (there is no flag asking for it, unlike Metadata).

One node: every partition is led by this node at leader epoch 0, its only replica and ISR; the
eligible leader replicas and the last known ELR are empty (KIP-966's ELR is the in-sync replicas
that are not the leader: none with one replica); no offline replicas.
"""

from __future__ import annotations

import uuid

from quafka.broker.core.acl_types import AclOperation, ResourceType
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize, authorized_operations
from ..registry import handles
from ..state import INTERNAL_TOPICS, LEADER_EPOCH, OperationError, validate_topic_name
from ._util import AUTHORIZED_OPERATIONS_OMITTED, NO_THROTTLE, item_class, make, response_class

MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000  # Kafka's max.request.partition.size.limit default
ZERO_UUID = uuid.UUID(int=0)


def page_limit(requested: int) -> int:
    """The partitions one response may describe: the request's limit, capped and at least 1."""
    return max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, requested), 1)


def _invalid(resp_cls, topic_cls, names):
    return make(resp_cls, throttle_time=NO_THROTTLE, next_cursor=None, topics=tuple(
        make(topic_cls, error_code=ErrorCode.invalid_request, name=n, topic_id=ZERO_UUID, is_internal=False,
             partitions=(), topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED) for n in names))


def _missing_error(name: str) -> ErrorCode:
    try:
        validate_topic_name(name)
    except OperationError:
        return ErrorCode.invalid_topic_exception
    return ErrorCode.unknown_topic_or_partition


@handles(75, 0, 0)
async def handle_describe_topic_partitions(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(75, ctx.api_version)
    topic_cls = item_class(resp_cls, "topics")
    part_cls = item_class(topic_cls, "partitions")
    cursor_cls = item_class(resp_cls, "next_cursor")
    node_id = state.node_id
    cursor = req.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not req.topics
    named = [t.name for t in req.topics]
    candidates = set(state.topics) if fetch_all else set(named)
    wanted = {name for name in candidates if name >= cursor_topic}
    if not fetch_all and cursor is not None and cursor.topic_name not in wanted:
        return _invalid(resp_cls, topic_cls, named)  # the topic list must hold the cursor's topic
    if cursor is not None and cursor.partition_index < 0:
        return _invalid(resp_cls, topic_cls, named)

    checked = ctx.server.authorizer is not None
    allowed = sorted(n for n in wanted if not checked or authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, n))
    refused = sorted(wanted.difference(allowed)) if not fetch_all else []

    def operations(name: str) -> int:
        return authorized_operations(ctx, ResourceType.TOPIC, name)

    remaining = page_limit(req.response_partition_limit)
    described = []
    next_cursor = None
    for name in allowed:
        if remaining == 0:
            # the previous topic filled the page exactly: the next page starts at this one
            next_cursor = make(cursor_cls, topic_name=name, partition_index=0)
            break
        topic = state.topics.get(name)
        if topic is None:
            if not fetch_all:
                described.append(make(topic_cls, error_code=_missing_error(name), name=name, topic_id=ZERO_UUID,
                                      is_internal=name in INTERNAL_TOPICS, partitions=(),
                                      topic_authorized_operations=operations(name)))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        count = len(topic.partitions)
        end = min(count, start + remaining)
        partitions = tuple(
            make(part_cls, error_code=ErrorCode.none, partition_index=i, leader_id=node_id, leader_epoch=LEADER_EPOCH,
                 replica_nodes=(node_id,), isr_nodes=(node_id,), eligible_leader_replicas=(), last_known_elr=(),
                 offline_replicas=())
            for i in range(start, end))
        described.append(make(topic_cls, error_code=ErrorCode.none, name=name, topic_id=topic.topic_id,
                              is_internal=topic.internal, partitions=partitions,
                              topic_authorized_operations=operations(name)))
        if end < count:
            next_cursor = make(cursor_cls, topic_name=name, partition_index=end)
            break
        remaining -= len(partitions)
    refused_entries = [make(topic_cls, error_code=ErrorCode.topic_authorization_failed, name=name,
                            topic_id=ZERO_UUID, is_internal=False, partitions=(),
                            topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED) for name in refused]
    return make(resp_cls, throttle_time=NO_THROTTLE, topics=tuple(described + refused_entries),
                next_cursor=next_cursor)
