"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31), as Kafka's AclApis serves them
(kafka.server.AclApis.handleDescribeAcls / handleCreateAcls / handleDeleteAcls; versions 1-3, as
Kafka 4.x: v0 went with KIP-896).

- The caller needs DESCRIBE (describe) or ALTER (create, delete) on the CLUSTER
  (`AuthHelper.authorizeClusterOperation`), else CLUSTER_AUTHORIZATION_FAILED on the request's every
  item (the top-level error of DescribeAcls).
- With no authorizer (`authorizer.class.name` empty) every item fails with SECURITY_DISABLED.
- A binding that cannot be created (UNKNOWN / ANY types, a MATCH or ANY pattern, a CLUSTER resource
  not named kafka-cluster, an empty name, a principal without a type) fails alone with
  INVALID_REQUEST (AclControlManager.validateNewAcl); the others are created. A filter with UNKNOWN
  parts fails with INVALID_REQUEST (AclControlManager.validateFilter; DescribeAclsRequest.validate).
- A wire code no enum value has (a newer client's type) reads as UNKNOWN, as Kafka's `fromCode`.
- The journal append failing (the log directory went offline) answers KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import logging
from itertools import groupby

from quafka.broker.core import acl as acls
from quafka.broker.core.acl_types import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from quafka.protocol.errors import ErrorCode

from ..authorization import authorize
from ..registry import handles
from ._util import NO_THROTTLE, item_class, make, make_items, response_class

log = logging.getLogger("quafka.server")

NO_AUTHORIZER = "No Authorizer is configured."


def _enum(cls, code: int):
    """Kafka's `fromCode`: an unknown code reads as UNKNOWN."""
    try:
        return cls(int(code))
    except ValueError:
        return cls.UNKNOWN


def _creation_binding(c) -> acls.AclBinding:
    return acls.AclBinding(
        acls.ResourcePattern(_enum(ResourceType, c.resource_type), c.resource_name,
                             _enum(PatternType, c.resource_pattern_type)),
        acls.AccessControlEntry(c.principal, c.host, _enum(AclOperation, c.operation),
                                _enum(AclPermissionType, c.permission_type)))


def _filter(f) -> acls.AclBindingFilter:
    return acls.AclBindingFilter(
        acls.ResourcePatternFilter(_enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
                                   _enum(PatternType, f.pattern_type_filter)),
        acls.AccessControlEntryFilter(f.principal_filter, f.host_filter, _enum(AclOperation, f.operation),
                                      _enum(AclPermissionType, f.permission_type)))


def _cluster_denied(ctx, operation: AclOperation) -> bool:
    return not authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def _cluster_message(operation: AclOperation) -> str:
    return f"Cluster authorization failed: {operation.name} on the CLUSTER resource is needed."


@handles(29, 1, 3)
async def handle_describe_acls(ctx, req):
    resp_cls = response_class(29, ctx.api_version)
    authorizer = ctx.server.authorizer

    def error(code: ErrorCode, message: str):
        return make(resp_cls, throttle_time=NO_THROTTLE, error_code=code, error_message=message, resources=())

    if _cluster_denied(ctx, AclOperation.DESCRIBE):
        return error(ErrorCode.cluster_authorization_failed, _cluster_message(AclOperation.DESCRIBE))
    if authorizer is None:
        return error(ErrorCode.security_disabled, "No Authorizer is configured on the broker")
    f = _filter(req)
    try:
        acls.validate_filter(f)
    except acls.AclError as exc:
        return error(ErrorCode.invalid_request, str(exc))
    found = authorizer.acls(f)
    resources = [{"resource_type": pattern.resource_type, "resource_name": pattern.name,
                  "pattern_type": pattern.pattern_type,
                  "acls": make_items(item_class(resp_cls, "resources"), "acls", [
                      {"principal": b.entry.principal, "host": b.entry.host, "operation": b.entry.operation,
                       "permission_type": b.entry.permission_type} for b in group])}
                 for pattern, group in ((p, list(g)) for p, g in groupby(found, key=lambda b: b.pattern))]
    return make(resp_cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                resources=make_items(resp_cls, "resources", resources))


@handles(30, 1, 3)
async def handle_create_acls(ctx, req):
    resp_cls = response_class(30, ctx.api_version)
    authorizer = ctx.server.authorizer

    def all_fail(code: ErrorCode, message: str):
        return make(resp_cls, throttle_time=NO_THROTTLE, results=make_items(
            resp_cls, "results", [{"error_code": code, "error_message": message} for _ in req.creations]))

    if _cluster_denied(ctx, AclOperation.ALTER):
        return all_fail(ErrorCode.cluster_authorization_failed, _cluster_message(AclOperation.ALTER))
    if authorizer is None:
        return all_fail(ErrorCode.security_disabled, NO_AUTHORIZER)
    bindings = [_creation_binding(c) for c in req.creations]
    try:
        outcomes = authorizer.create_acls(bindings)
    except OSError as exc:  # the journal append failed: the log directory is offline
        log.error("CreateAcls from %s failed: %s", ctx.session.principal, exc)
        return all_fail(ErrorCode.kafka_storage_error, f"Creating ACLs failed: {exc}")
    return make(resp_cls, throttle_time=NO_THROTTLE, results=make_items(resp_cls, "results", [
        {"error_code": ErrorCode.none if why is None else ErrorCode.invalid_request, "error_message": why}
        for why in outcomes]))


@handles(31, 1, 3)
async def handle_delete_acls(ctx, req):
    resp_cls = response_class(31, ctx.api_version)
    authorizer = ctx.server.authorizer

    def all_fail(code: ErrorCode, message: str):
        return make(resp_cls, throttle_time=NO_THROTTLE, filter_results=make_items(
            resp_cls, "filter_results", [{"error_code": code, "error_message": message, "matching_acls": ()}
                                         for _ in req.filters]))

    if _cluster_denied(ctx, AclOperation.ALTER):
        return all_fail(ErrorCode.cluster_authorization_failed, _cluster_message(AclOperation.ALTER))
    if authorizer is None:
        return all_fail(ErrorCode.security_disabled, NO_AUTHORIZER)
    try:
        outcomes = authorizer.delete_acls([_filter(f) for f in req.filters])
    except OSError as exc:
        log.error("DeleteAcls from %s failed: %s", ctx.session.principal, exc)
        return all_fail(ErrorCode.kafka_storage_error, f"Deleting ACLs failed: {exc}")
    result_cls = item_class(resp_cls, "filter_results")
    results = []
    for outcome in outcomes:
        if outcome.error is not None:
            results.append({"error_code": ErrorCode.invalid_request, "error_message": outcome.error,
                            "matching_acls": ()})
            continue
        results.append({"error_code": ErrorCode.none, "error_message": None, "matching_acls": make_items(
            result_cls, "matching_acls", [
                {"error_code": ErrorCode.none, "error_message": None, "resource_type": b.pattern.resource_type,
                 "resource_name": b.pattern.name, "pattern_type": b.pattern.pattern_type,
                 "principal": b.entry.principal, "host": b.entry.host, "operation": b.entry.operation,
                 "permission_type": b.entry.permission_type} for b in outcome.deleted])})
    return make(resp_cls, throttle_time=NO_THROTTLE, filter_results=make_items(resp_cls, "filter_results", results))
