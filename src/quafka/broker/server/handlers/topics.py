"""CreateTopics (19), DeleteTopics (20) and CreatePartitions (37).

Every change is journalled durably before the response (see `state.BrokerState`). With one node
the only legal replication factor is 1 (or -1 for the default), and replica assignments may name
only this node.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import timedelta

from quafka.broker import config as cfg
from quafka.broker.core.acl_types import AclOperation, ResourceType
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize_cluster, filter_authorized
from ..quotas import MutationQuota
from ..registry import handles
from ..state import OperationError
from ._util import item_class, make, response_class


ZERO_UUID = uuid.UUID(int=0)


def _check_assignment(replicas, node_id: int) -> None:
    if list(replicas) != [node_id]:
        raise OperationError(
            ErrorCode.invalid_replica_assignment,
            f"Replica assignment {list(replicas)} is not valid: the only broker is {node_id}",
        )


@handles(19, 2, 7)
async def handle_create_topics(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(19, ctx.api_version)
    result_cls = item_class(resp_cls, "topics")
    config_cls = item_class(result_cls, "configs") if "configs" in {f for f in result_cls.__dataclass_fields__} else None
    counts = Counter(t.name for t in req.topics)
    creatable = describable = None
    if ctx.server.authorizer is not None:
        # ControllerApis.createTopics: CREATE on the CLUSTER or on each TOPIC; the configs of a created
        # topic are returned only with DESCRIBE_CONFIGS on it (else TopicConfigErrorCode
        # TOPIC_AUTHORIZATION_FAILED, ReplicationControlManager.buildCreatableTopicResult)
        names = set(counts)
        creatable = names if authorize_cluster(ctx, AclOperation.CREATE) else \
            filter_authorized(ctx, AclOperation.CREATE, ResourceType.TOPIC, names)
        describable = filter_authorized(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names)
    results = []
    quota = MutationQuota(ctx, strict_since_version=6)  # Kafka: ControllerMutationQuotaManager.newQuotaFor
    for t in req.topics:
        values = dict(name=t.name, topic_id=None, error_code=ErrorCode.none, error_message=None,
                      topic_config_error_code=0, num_partitions=-1, replication_factor=-1, configs=None)
        try:
            if counts[t.name] > 1:
                raise OperationError(ErrorCode.invalid_request,
                                     f"Create topics request contains multiple entries for the topic {t.name}")
            if creatable is not None and t.name not in creatable:
                raise OperationError(ErrorCode.topic_authorization_failed, "Authorization failed.")
            configs = {c.name: c.value for c in t.configs}
            num_partitions = t.num_partitions
            if t.assignments:
                indexes = sorted(a.partition_index for a in t.assignments)
                if indexes != list(range(len(indexes))):
                    raise OperationError(ErrorCode.invalid_replica_assignment,
                                         "Partitions in the replica assignment must be 0..n-1 without gaps")
                for a in t.assignments:
                    _check_assignment(a.broker_ids, state.node_id)
            if not req.validate_only and t.name not in state.topics and not quota.allows(
                    len(t.assignments) if t.assignments else
                    (num_partitions if num_partitions != -1 else int(state.config.get("num.partitions")))):
                raise _throttled(quota)
            topic = state.create_topic(
                t.name, num_partitions, t.replication_factor, configs,
                validate_only=req.validate_only, assignments=bool(t.assignments),
            )
            if topic is not None:
                values["topic_id"] = topic.topic_id
                values["num_partitions"] = len(topic.partitions)
                overrides = topic.configs
            else:
                values["num_partitions"] = len(t.assignments) if t.assignments else (
                    num_partitions if num_partitions != -1 else int(state.config.get("num.partitions")))
                overrides = cfg.validate_topic_configs(configs)
            values["replication_factor"] = 1
            if describable is not None and t.name not in describable:
                values.update(topic_config_error_code=ErrorCode.topic_authorization_failed, num_partitions=-1,
                              replication_factor=-1, configs=())
            elif config_cls is not None:
                values["configs"] = tuple(
                    make(config_cls, name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                         is_sensitive=e.sensitive)
                    for e in cfg.describe_topic_configs(state.config, overrides, None)
                )
        except OperationError as exc:
            values.update(error_code=exc.error_code, error_message=exc.message, num_partitions=-1,
                          replication_factor=-1, configs=None)
        except OSError as exc:  # the log directory failed (it is offline now: server.on_log_dir_failure)
            values.update(error_code=ErrorCode.kafka_storage_error, error_message=f"Creating {t.name} failed: {exc}",
                          num_partitions=-1, replication_factor=-1, configs=None)
        results.append(make(result_cls, **values))
    return make(resp_cls, throttle_time=timedelta(milliseconds=quota.throttle_ms), topics=tuple(results))


@handles(20, 1, 6)
async def handle_delete_topics(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(20, ctx.api_version)
    result_cls = item_class(resp_cls, "responses")
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in req.topics]
    else:
        wanted = [(name, None) for name in req.topic_names]
    results = []
    quota = MutationQuota(ctx, strict_since_version=5)
    describable = deletable = None
    if ctx.server.authorizer is not None and not authorize_cluster(ctx, AclOperation.DELETE):
        # ControllerApis.deleteTopics: DELETE on the CLUSTER, or DELETE on each TOPIC
        # (TOPIC_AUTHORIZATION_FAILED); a topic named by id the principal may not DESCRIBE is
        # answered without its name
        names = [name if name is not None else (state.topics_by_id[tid].name if tid in state.topics_by_id else None)
                 for name, tid in wanted]
        describable = filter_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        deletable = filter_authorized(ctx, AclOperation.DELETE, ResourceType.TOPIC, names)
    for name, topic_id in wanted:
        error, message = ErrorCode.none, None
        by_id = name is None and topic_id is not None
        if by_id:
            topic = state.topics_by_id.get(topic_id)
            if topic is None:
                results.append(make(result_cls, name=None, topic_id=topic_id, error_code=ErrorCode.unknown_topic_id,
                                    error_message="This server does not host this topic ID."))
                continue
            name = topic.name
        if deletable is not None and name is not None and name not in deletable:
            results.append(make(result_cls, name=name if not by_id or name in describable else None,
                                topic_id=topic_id if by_id else ZERO_UUID,
                                error_code=ErrorCode.topic_authorization_failed, error_message=None))
            continue
        topic = state.topics.get(name) if name is not None else None
        tid = topic.topic_id if topic is not None else topic_id
        try:
            if name is None:
                raise OperationError(ErrorCode.invalid_request, "Neither a topic name nor a topic id was given")
            if topic is not None and not quota.allows(len(topic.partitions)):
                raise _throttled(quota)
            state.delete_topic(name)
        except OperationError as exc:
            error, message = exc.error_code, exc.message
        except OSError as exc:  # the log directory failed
            error, message = ErrorCode.kafka_storage_error, f"Deleting {name} failed: {exc}"
        results.append(make(result_cls, name=name, topic_id=tid, error_code=error, error_message=message))
    return make(resp_cls, throttle_time=timedelta(milliseconds=quota.throttle_ms), responses=tuple(results))


@handles(37, 0, 3)
async def handle_create_partitions(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(37, ctx.api_version)
    result_cls = item_class(resp_cls, "results")
    counts = Counter(t.name for t in req.topics)
    # ControllerApis.createPartitions: ALTER on each TOPIC (TOPIC_AUTHORIZATION_FAILED)
    alterable = filter_authorized(ctx, AclOperation.ALTER, ResourceType.TOPIC, counts)
    results = []
    quota = MutationQuota(ctx, strict_since_version=3)
    for t in req.topics:
        error, message = ErrorCode.none, None
        try:
            if counts[t.name] > 1:
                raise OperationError(ErrorCode.invalid_request, f"Duplicate topic in the request: {t.name}")
            if t.name not in alterable:
                raise OperationError(ErrorCode.topic_authorization_failed, None)
            topic = state.topics.get(t.name)
            if t.assignments is not None and topic is not None:
                if len(t.assignments) != t.count - len(topic.partitions):
                    raise OperationError(
                        ErrorCode.invalid_replica_assignment,
                        f"Increasing the number of partitions by {t.count - len(topic.partitions)} but "
                        f"{len(t.assignments)} assignments provided.",
                    )
                for a in t.assignments:
                    _check_assignment(a.broker_ids, state.node_id)
            if (not req.validate_only and topic is not None and t.count > len(topic.partitions)
                    and not quota.allows(t.count - len(topic.partitions))):
                raise _throttled(quota)
            state.create_partitions(t.name, t.count, validate_only=req.validate_only)
        except OperationError as exc:
            error, message = exc.error_code, exc.message
        except OSError as exc:  # the log directory failed
            error, message = ErrorCode.kafka_storage_error, f"Creating partitions of {t.name} failed: {exc}"
        results.append(make(result_cls, name=t.name, error_code=error, error_message=message))
    return make(resp_cls, throttle_time=timedelta(milliseconds=quota.throttle_ms), results=tuple(results))


def _throttled(quota: MutationQuota) -> OperationError:
    """Kafka's ThrottlingQuotaExceededException for one topic of the request."""
    return OperationError(ErrorCode.throttling_quota_exceeded, "The throttling quota has been exceeded.")
