"""DescribeProducers (key 61), v0: the active producers of partitions, with the start offset of
each one's open transaction — what `kafka-transactions.sh describe-producers` and `find-hanging`
read.

As Kafka's `KafkaApis.handleDescribeProducersRequest` and `ReplicaManager.activeProducerState`:
per topic, READ on the TOPIC (else TOPIC_AUTHORIZATION_FAILED on each partition asked), then an
unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION; per partition, one entry per producer id in
its producer state: producer id, epoch, last sequence and last timestamp (of its last batch, -1
when it has none: a producer known from markers only), coordinator epoch (of its last marker) and
the first offset of its open transaction (`current_txn_start_offset`, -1 if none).
"""

from __future__ import annotations

from quafka.broker.core.acl_types import AclOperation, ResourceType
from quafka.protocol.errors import ErrorCode

from ..authorization import filter_authorized
from ..registry import handles
from ._util import NO_THROTTLE, item_class, make, response_class


@handles(61, 0, 0)
async def handle_describe_producers(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(61, ctx.api_version)
    topic_cls = item_class(resp_cls, "topics")
    part_cls = item_class(topic_cls, "partitions")
    producer_cls = item_class(part_cls, "active_producers")
    readable = filter_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, [t.name for t in req.topics])
    topics_out = []
    for t in req.topics:
        topic = state.topics.get(t.name)
        parts = []
        for index in t.partition_indexes:
            error, message, producers = ErrorCode.none, None, ()
            if t.name not in readable:
                error = ErrorCode.topic_authorization_failed
            elif topic is None or not 0 <= index < len(topic.partitions):
                error, message = ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
            else:
                producers = tuple(
                    make(producer_cls, producer_id=pid, producer_epoch=entry.epoch,
                         last_sequence=entry.last_seq,
                         last_timestamp=entry.batches[-1].timestamp_ms if entry.batches else -1,
                         coordinator_epoch=entry.coordinator_epoch,
                         current_txn_start_offset=entry.current_txn_first_offset)
                    for pid, entry in sorted(topic.partitions[index].producers.entries.items()))
            parts.append(make(part_cls, partition_index=index, error_code=error, error_message=message,
                              active_producers=producers))
        topics_out.append(make(topic_cls, name=t.name, partitions=tuple(parts)))
    return make(resp_cls, throttle_time=NO_THROTTLE, topics=tuple(topics_out))
