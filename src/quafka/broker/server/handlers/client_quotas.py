"""DescribeClientQuotas (key 48) and AlterClientQuotas (key 49): `kafka-configs.sh --entity-type
users|clients` and `Admin.describeClientQuotas` / `alterClientQuotas`.

quafka keeps user and client-id entities (each a name or the default) with the four quota keys
(`producer_byte_rate`, `consumer_byte_rate`, `request_percentage`, `controller_mutation_rate`);
`ip` entities (Kafka's connection-creation-rate quota) are refused with INVALID_REQUEST, as an
unknown entity type is.

AlterClientQuotas follows Kafka's `ClientQuotaControlManager.alterClientQuotas`: each entry is
validated on its own (an empty entity, a duplicate or unknown entity type, an unknown key or a
non-positive value fails that entry with INVALID_REQUEST); the valid entries are written as
`client_quota` records in one journal append (unless ValidateOnly). DescribeClientQuotas follows
`ClientQuotasImage.describe`: components match EXACT (a name, or null for the default), DEFAULT or
SPECIFIED (any entity of the type, the default one too, as `ClientQuotasImage.matches` checks only
that the type is there); `strict` keeps only entities with no other entity types.
"""

from __future__ import annotations

from quafka.broker.core.acl_types import AclOperation
from quafka.broker.core.client_quotas import ENTITY_TYPES, IP, QUOTA_KEYS, normalize_entity, validate_quota_value
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize_cluster
from ..registry import handles
from ._util import NO_THROTTLE, item_class, make, make_items, response_class

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def _entity_items(entity) -> list[dict]:
    return [{"entity_type": t, "entity_name": n} for t, n in entity]


@handles(49, 0, 1)
async def handle_alter_client_quotas(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(49, ctx.api_version)
    entry_cls = item_class(resp_cls, "entries")
    results = []
    changes: dict[tuple, dict[str, float]] = {}
    if not authorize_cluster(ctx, AclOperation.ALTER_CONFIGS):
        # ControllerApis.handleAlterClientQuotas: ALTER_CONFIGS on the CLUSTER, else every entry gets
        # CLUSTER_AUTHORIZATION_FAILED (AlterClientQuotasRequest.getErrorResponse)
        return make(resp_cls, throttle_time=NO_THROTTLE, entries=tuple(
            make(entry_cls, error_code=ErrorCode.cluster_authorization_failed, error_message=None,
                 entity=make_items(entry_cls, "entity", _entity_items([(e.entity_type, e.entity_name)
                                                                        for e in entry.entity])))
            for entry in req.entries))
    for entry in req.entries:
        raw = [(e.entity_type, e.entity_name) for e in entry.entity]
        error, message = ErrorCode.none, None
        try:
            entity = normalize_entity(raw)
        except ValueError as exc:
            entity, error, message = None, ErrorCode.invalid_request, str(exc)
        if entity is not None:
            new = dict(changes.get(entity, state.client_quotas.get(entity, {})))
            for op in entry.ops:
                if op.remove:
                    if op.key not in QUOTA_KEYS:
                        error, message = ErrorCode.invalid_request, f"Invalid configuration key {op.key}"
                        break
                    new.pop(op.key, None)
                    continue
                why = validate_quota_value(op.key, float(op.value))
                if why is not None:
                    error, message = ErrorCode.invalid_request, why
                    break
                new[op.key] = float(op.value)
            if error == ErrorCode.none:
                changes[entity] = new
        results.append(make(entry_cls, error_code=error, error_message=message,
                            entity=make_items(entry_cls, "entity", _entity_items(raw))))
    if changes and not req.validate_only:
        try:
            state.set_client_quotas(changes)
        except OSError as exc:  # the log directory failed (the broker is stopping)
            results = [make(entry_cls, error_code=ErrorCode.kafka_storage_error,
                            error_message=f"Writing the client quotas failed: {exc}", entity=r.entity)
                       if r.error_code == ErrorCode.none else r for r in results]
    return make(resp_cls, throttle_time=NO_THROTTLE, entries=tuple(results))


def _matches(entity: tuple, components: list[tuple[str, int, str | None]], strict: bool) -> bool:
    parts = dict(entity)
    for entity_type, match_type, name in components:
        if entity_type not in parts:
            return False
        value = parts[entity_type]
        if match_type == MATCH_EXACT and value != name:
            return False
        if match_type == MATCH_DEFAULT and value is not None:
            return False
    return not strict or len(parts) == len(components)


@handles(48, 0, 1)
async def handle_describe_client_quotas(ctx, req):
    state = ctx.server.state
    resp_cls = response_class(48, ctx.api_version)
    if not authorize_cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
        # KafkaApis.handleDescribeClientQuotasRequest: DESCRIBE_CONFIGS on the CLUSTER
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    error_message="Cluster authorization failed.", entries=None)
    components = []
    seen: set[str] = set()
    for c in req.components:
        problem = None
        if c.entity_type in seen:
            problem = f"Entity type {c.entity_type} cannot appear more than once in the filter."
        elif c.entity_type == IP:
            problem = "quafka does not support ip quota entities"
        elif c.entity_type not in ENTITY_TYPES:
            problem = f"Custom entity type {c.entity_type} is not supported"
        elif c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            problem = f"Unknown match type {c.match_type}"
        if problem is not None:
            return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request,
                        error_message=problem, entries=None)
        seen.add(c.entity_type)
        components.append((c.entity_type, int(c.match_type), c.match))
    entries = [{"entity": make_items(item_class(resp_cls, "entries"), "entity",
                                     _entity_items(entity)),
                "values": make_items(item_class(resp_cls, "entries"), "values",
                                     [{"key": k, "value": v} for k, v in sorted(values.items())])}
               for entity, values in sorted(state.client_quotas.items(), key=lambda kv: repr(kv[0]))
               if _matches(entity, components, req.strict)]
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                entries=make_items(resp_cls, "entries", entries))
