"""DescribeConfigs (32), IncrementalAlterConfigs (44) and the legacy AlterConfigs (33).

Resources: TOPIC (2), BROKER (4; name = this node's id for per-broker configs, "" for the
cluster-wide default) and GROUP (32; a share group's configs, described for any group id with the
broker's defaults where the group sets nothing, as Kafka does). Dynamic changes are journalled before the response and applied to live
logs at once. AlterConfigs (replace the whole set of a resource's dynamic configs) is deprecated in
Kafka but still served by Kafka 4.x and used by older tools, so quafka serves it as well.
While `eligible.leader.replicas.version` is 1 or more, the cluster-level `min.insync.replicas` cannot
be removed (a DELETE, or an AlterConfigs of "" without it) and a per-broker one cannot be set or
deleted: INVALID_CONFIG, as Kafka's ConfigurationControlManager.validateAlterConfig (core/elr.py).
"""

from __future__ import annotations

from quafka.broker import config as cfg
from quafka.broker.core.acl_types import CLUSTER_NAME, AclOperation, ResourceType
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize
from ..registry import handles
from ..state import OperationError
from ._util import NO_THROTTLE, item_class, make, response_class

TOPIC = 2
BROKER = 4
GROUP = 32

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


# A config resource's ACL resource and the error a principal without the permission gets
# (ConfigHelper.handleDescribeConfigsRequest, ControllerApis.authorizeAlterResource)
_ACL_RESOURCE = {
    TOPIC: (ResourceType.TOPIC, ErrorCode.topic_authorization_failed, "Topic authorization failed."),
    BROKER: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed, "Cluster authorization failed."),
    GROUP: (ResourceType.GROUP, ErrorCode.group_authorization_failed, "Group authorization failed."),
}


def _authorize(ctx, operation: AclOperation, resource_type: int, name: str) -> None:
    """DESCRIBE_CONFIGS (describe) or ALTER_CONFIGS (alter) on the resource: the TOPIC, the GROUP, or
    the CLUSTER for a broker's configs; raises the authorization error when not allowed."""
    acl = _ACL_RESOURCE.get(resource_type)
    if acl is None or ctx.server.authorizer is None:
        return
    rtype, error, message = acl
    if not authorize(ctx, operation, rtype, CLUSTER_NAME if rtype is ResourceType.CLUSTER else name):
        raise OperationError(error, message)


def _unsupported(resource_type: int) -> OperationError:
    return OperationError(ErrorCode.invalid_request, f"Unsupported resource type {resource_type}: quafka serves "
                          "TOPIC (2), BROKER (4) and GROUP (32)")


def _check_group_name(name: str) -> None:
    if not name:
        raise OperationError(ErrorCode.invalid_request, "Group name must not be empty")


def _entries(state, resource_type: int, name: str, keys):
    if resource_type == TOPIC:
        topic = state.topics.get(name)
        if topic is None:
            raise OperationError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist")
        return cfg.describe_topic_configs(state.config, topic.configs, keys)
    if resource_type == BROKER:
        if name == "":
            return cfg.describe_broker_configs(state.config, keys, default_resource=True)
        if name != str(state.node_id):
            raise OperationError(ErrorCode.invalid_request, f"Broker {name} is not this broker ({state.node_id})")
        return cfg.describe_broker_configs(state.config, keys)
    if resource_type == GROUP:
        _check_group_name(name)
        return cfg.describe_group_configs(state.config, state.group_configs(name), keys)
    raise _unsupported(resource_type)


@handles(32, 1, 4)
async def handle_describe_configs(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(32, ctx.api_version)
    result_cls = item_class(resp_cls, "results")
    entry_cls = item_class(result_cls, "configs")
    synonym_cls = item_class(entry_cls, "synonyms") if "synonyms" in entry_cls.__dataclass_fields__ else None
    with_synonyms = getattr(req, "include_synonyms", False)
    with_docs = getattr(req, "include_documentation", False)
    results = []
    for r in req.resources:
        try:
            # ConfigHelper.handleDescribeConfigsRequest: DESCRIBE_CONFIGS on the resource
            _authorize(ctx, AclOperation.DESCRIBE_CONFIGS, r.resource_type, r.resource_name)
            entries = _entries(state, r.resource_type, r.resource_name, r.configuration_keys)
            configs = tuple(
                make(
                    entry_cls,
                    name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                    is_default=e.source == cfg.DEFAULT_CONFIG, is_sensitive=e.sensitive,
                    synonyms=tuple(make(synonym_cls, name=n, value=v, source=s) for n, v, s in e.synonyms)
                    if with_synonyms and synonym_cls is not None else (),
                    config_type=cfg.CONFIG_TYPE_IDS.get(e.type, 0),
                    documentation=e.documentation if with_docs else None,
                )
                for e in entries
            )
            results.append(make(result_cls, error_code=ErrorCode.none, error_message=None,
                                resource_type=r.resource_type, resource_name=r.resource_name, configs=configs))
        except OperationError as exc:
            results.append(make(result_cls, error_code=exc.error_code, error_message=exc.message,
                                resource_type=r.resource_type, resource_name=r.resource_name, configs=()))
    return make(resp_cls, throttle_time=NO_THROTTLE, results=tuple(results))


def _current(state, resource_type: int, name: str) -> dict[str, str]:
    if resource_type == TOPIC:
        topic = state.topics.get(name)
        if topic is None:
            raise OperationError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist")
        return dict(topic.configs)
    if resource_type == BROKER:
        if name not in ("", str(state.node_id)):
            raise OperationError(ErrorCode.invalid_request, f"Broker {name} is not this broker ({state.node_id})")
        return state.dynamic_broker_configs(name)
    if resource_type == GROUP:
        _check_group_name(name)
        return state.group_configs(name)
    raise _unsupported(resource_type)


def _apply(state, resource_type: int, name: str, configs: dict[str, str], validate_only: bool,
           named: tuple[str, ...] = ()) -> None:
    if resource_type == TOPIC:
        state.set_topic_configs(name, configs, validate_only=validate_only)
    elif resource_type == GROUP:
        state.set_group_configs(name, configs, validate_only=validate_only)
    else:  # `named`: Kafka writes a BROKER record for every key named, changed or not (KAFKA-14136)
        state.set_broker_configs(name, configs, validate_only=validate_only, named=named)


def _key_type(resource_type: int, key: str) -> str | None:
    table = {TOPIC: cfg.TOPIC_KEYS, GROUP: cfg.GROUP_KEYS}.get(resource_type, cfg.BROKER_KEYS)
    spec = table.get(key)
    return spec.type if spec is not None else None


def _incremental(state, r) -> dict[str, str]:
    names = [c.name for c in r.configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise OperationError(ErrorCode.invalid_request, f"Error due to duplicate config keys: {', '.join(duplicates)}")
    configs = _current(state, r.resource_type, r.resource_name)
    for c in r.configs:
        op = c.config_operation
        if op == SET:
            if c.value is None:
                raise OperationError(ErrorCode.invalid_request, f"Null value not supported for: {c.name}")
            configs[c.name] = c.value
        elif op == DELETE:
            configs.pop(c.name, None)
        elif op in (APPEND, SUBTRACT):
            if _key_type(r.resource_type, c.name) != "list":
                raise OperationError(ErrorCode.invalid_config,
                                     f"Config value append/subtract is not allowed for config key: {c.name}")
            if r.resource_type == TOPIC:
                current = cfg.resolve_topic_configs(state.config, configs).get(c.name, "")
            else:
                current = configs.get(c.name, "")
            items = [v for v in str(current).split(",") if v] if current else []
            given = [v.strip() for v in (c.value or "").split(",") if v.strip()]
            if op == APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            configs[c.name] = ",".join(items)
        else:
            raise OperationError(ErrorCode.invalid_request, f"Unknown config operation {op} for {c.name}")
    return configs


@handles(44, 0, 1)
async def handle_incremental_alter_configs(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(44, ctx.api_version)
    result_cls = item_class(resp_cls, "responses")
    results = []
    for r in req.resources:
        error, message = ErrorCode.none, None
        try:
            # ControllerApis.handleIncrementalAlterConfigs (authorizeAlterResource): ALTER_CONFIGS
            _authorize(ctx, AclOperation.ALTER_CONFIGS, r.resource_type, r.resource_name)
            _apply(state, r.resource_type, r.resource_name, _incremental(state, r), req.validate_only,
                   tuple(c.name for c in r.configs))
        except OperationError as exc:
            error, message = exc.error_code, exc.message
        results.append(make(result_cls, error_code=error, error_message=message, resource_type=r.resource_type,
                            resource_name=r.resource_name))
    return make(resp_cls, throttle_time=NO_THROTTLE, responses=tuple(results))


@handles(33, 0, 2)
async def handle_alter_configs(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(33, ctx.api_version)
    result_cls = item_class(resp_cls, "responses")
    results = []
    for r in req.resources:
        error, message = ErrorCode.none, None
        try:
            # ControllerApis.handleLegacyAlterConfigs (authorizeAlterResource): ALTER_CONFIGS
            _authorize(ctx, AclOperation.ALTER_CONFIGS, r.resource_type, r.resource_name)
            _current(state, r.resource_type, r.resource_name)
            names = [c.name for c in r.configs]
            if len(set(names)) != len(names):
                raise OperationError(ErrorCode.invalid_request, "Error due to duplicate config keys")
            configs = {}
            for c in r.configs:
                if c.value is None:
                    raise OperationError(ErrorCode.invalid_request, f"Null value not supported for: {c.name}")
                configs[c.name] = c.value
            _apply(state, r.resource_type, r.resource_name, configs, req.validate_only, tuple(configs))
        except OperationError as exc:
            error, message = exc.error_code, exc.message
        results.append(make(result_cls, error_code=error, error_message=message, resource_type=r.resource_type,
                            resource_name=r.resource_name))
    return make(resp_cls, throttle_time=NO_THROTTLE, responses=tuple(results))
