"""Metadata (key 3): brokers, cluster id, topics with their ids and partitions.

One node leads every partition with leader epoch 0 and is the only replica. A topic that does not
exist is created when the request allows it and `auto.create.topics.enable` is true (quafka
creates it at once and returns it, rather than answering LEADER_NOT_AVAILABLE first).
"""

from __future__ import annotations

from dataclasses import replace

from quafka.broker.core.acl_types import CLUSTER_NAME, AclOperation, ResourceType
from quafka.protocol.errors import ErrorCode, ProtocolError

from ..authorization import authorize, authorize_cluster, authorized_operations
from ..registry import handles
from ..state import INTERNAL_TOPICS, LEADER_EPOCH, OperationError, TopicState, validate_topic_name
from ._util import AUTHORIZED_OPERATIONS_OMITTED, NO_THROTTLE, item_class, make, response_class


def _topic_entry(topic_cls, part_cls, node_id: int, topic: TopicState):
    return make(
        topic_cls,
        error_code=ErrorCode.none,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=tuple(
            make(
                part_cls,
                error_code=ErrorCode.none,
                partition_index=p.index,
                leader_id=node_id,
                leader_epoch=LEADER_EPOCH,
                replica_nodes=(node_id,),
                isr_nodes=(node_id,),
                offline_replicas=(),
            )
            for p in topic.partitions
        ),
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def _error_entry(topic_cls, error: ErrorCode, name, topic_id=None, is_internal: bool = False):
    return make(
        topic_cls, error_code=error, name=name, topic_id=topic_id, is_internal=is_internal, partitions=(),
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def _may_create(ctx, name: str) -> bool:
    """KafkaApis.handleTopicMetadataRequest: auto-creating a topic needs CREATE on the CLUSTER or on
    the TOPIC."""
    return authorize_cluster(ctx, AclOperation.CREATE) or authorize(ctx, AclOperation.CREATE, ResourceType.TOPIC, name)


@handles(3, 0, 13)
async def handle_metadata(ctx, req):
    state = ctx.server.state
    version = ctx.api_version
    resp_cls = response_class(3, version)
    topic_cls = item_class(resp_cls, "topics")
    part_cls = item_class(topic_cls, "partitions")
    broker_cls = item_class(resp_cls, "brokers")
    node_id = state.node_id
    host, port = state.endpoint_for(ctx.session.listener_name)
    allow_auto_create = version < 4 or bool(getattr(req, "allow_auto_topic_creation", True))
    requested = req.topics
    checked = ctx.server.authorizer is not None
    if requested is None or (version == 0 and not requested):
        # KafkaApis.handleTopicMetadataRequest: every topic the principal may DESCRIBE; the others
        # are left out without a word
        entries = [_topic_entry(topic_cls, part_cls, node_id, t) for t in list(state.topics.values())
                   if not checked or authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)]
    else:
        entries = []
        for wanted in requested:
            name = wanted.name
            topic_id = getattr(wanted, "topic_id", None)
            if name is None and version < 12:
                # the response cannot even carry a null name before v12; Kafka refuses the request
                raise ProtocolError(f"Metadata v{version} request names a topic by id only; topic ids need v12+")
            if name is None:
                topic = state.topics_by_id.get(topic_id) if topic_id is not None else None
                if topic is None:
                    entries.append(_error_entry(topic_cls, ErrorCode.unknown_topic_id, None, topic_id))
                elif checked and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name):
                    # a topic id is not secret: TOPIC_AUTHORIZATION_FAILED with the id, not the name
                    entries.append(_error_entry(topic_cls, ErrorCode.topic_authorization_failed, None, topic.topic_id))
                else:
                    entries.append(_topic_entry(topic_cls, part_cls, node_id, topic))
                continue
            if checked and not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                # whether it exists is not disclosed (KafkaApis.handleTopicMetadataRequest)
                entries.append(_error_entry(topic_cls, ErrorCode.topic_authorization_failed, name))
                continue
            topic = state.topics.get(name)
            if topic is None:
                try:
                    validate_topic_name(name)
                except OperationError:
                    entries.append(_error_entry(topic_cls, ErrorCode.invalid_topic_exception, name))
                    continue
                if allow_auto_create and checked and state.config.get("auto.create.topics.enable") \
                        and not _may_create(ctx, name):
                    entries.append(_error_entry(topic_cls, ErrorCode.topic_authorization_failed, name,
                                                is_internal=name in INTERNAL_TOPICS))
                    continue
                if allow_auto_create:
                    topic = state.maybe_auto_create(name)
            if topic is None:
                entries.append(_error_entry(topic_cls, ErrorCode.unknown_topic_or_partition, name))
            else:
                entries.append(_topic_entry(topic_cls, part_cls, node_id, topic))
    cluster_operations = AUTHORIZED_OPERATIONS_OMITTED
    if version >= 8:  # KafkaApis.handleTopicMetadataRequest: the authorized operations asked for
        if version <= 10 and getattr(req, "include_cluster_authorized_operations", False):
            cluster_operations = authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME) \
                if authorize_cluster(ctx, AclOperation.DESCRIBE) else 0
        if getattr(req, "include_topic_authorized_operations", False):
            entries = [replace(e, topic_authorized_operations=authorized_operations(ctx, ResourceType.TOPIC, e.name))
                       if e.error_code == ErrorCode.none else e for e in entries]
    return make(
        resp_cls,
        throttle_time=NO_THROTTLE,
        brokers=(make(broker_cls, node_id=node_id, host=host, port=port, rack=None),),
        cluster_id=state.metadata.cluster_id,
        controller_id=node_id,
        topics=tuple(entries),
        cluster_authorized_operations=cluster_operations,
        error_code=ErrorCode.none,
    )
