"""The broker's authorizer: Kafka's `org.apache.kafka.metadata.authorizer.StandardAuthorizer`.

Set on `BrokerServer.authorizer` when `authorizer.class.name` names it (`make_authorizer`); handlers
reach it through `authorization.authorize`. The ACLs are the `acl` / `remove_acl` records of the
metadata journal: `ClusterMetadata.replay` adds each to and removes each from its `AclIndex`
(core/acl.py) as it is replayed — at start-up from the journal, afterwards as CreateAcls / DeleteAcls
commit them — so the authorizer always answers from the durable ACLs, with no rebuild.

Decisions follow StandardAuthorizerData.authorize (`super.users`, the ACLs, then
`allow.everyone.if.no.acl.found`). Like Kafka's `kafka.authorizer.logger`, a denial is logged at INFO
on the `quafka.authorizer` logger (principal, operation, resource, host and the deciding rule) and an
allowed request at DEBUG; denial lines are capped at DENIAL_LOG_LINES_PER_S so a client retrying a
refused request in a loop cannot fill the disk (the lines left out are counted in the metric
`quafka_authorizer_denial_log_lines_suppressed_total` and summed up in the next line). Allowed and
denied decisions are counted as Kafka's authorizer-metrics count them (KIP-767).

Creating and deleting ACLs follows Kafka's AclControlManager: every new binding is validated
(`validateNewAcl`), a binding equal to an existing one succeeds without a new record, each new ACL gets
a random id (a Uuid in Kafka), and the records of one request are committed together.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from quafka.broker._config_defs import STANDARD_AUTHORIZER
from quafka.broker.core import acl as acls
from quafka.broker.core.acl_types import AclOperation, ResourceType

if TYPE_CHECKING:
    from quafka.broker import config as cfg

    from .metrics import BrokerMetrics
    from .session import ClientSession
    from .state import BrokerState

log = logging.getLogger("quafka.authorizer")

DENIAL_LOG_LINES_PER_S = 50

# SecurityUtils.resourceTypeName: how Kafka's audit log names a resource type.
_RESOURCE_TYPE_NAMES = {ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
                        ResourceType.TRANSACTIONAL_ID: "TransactionalId",
                        ResourceType.DELEGATION_TOKEN: "DelegationToken", ResourceType.USER: "User"}


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """One filter's outcome: an error message (INVALID_REQUEST), or the bindings it deleted."""

    error: str | None
    deleted: tuple[acls.AclBinding, ...] = ()


class StandardAuthorizer:
    def __init__(self, state: "BrokerState", metrics: "BrokerMetrics", super_users: frozenset[str],
                 allow_if_no_acl: bool, *, clock_s: Callable[[], float] = time.monotonic,
                 new_id: Callable[[], str] = lambda: uuid.uuid4().hex) -> None:
        self._state = state
        self._metrics = metrics
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._clock_s = clock_s
        self._new_id = new_id
        self._log_window_start = -1.0
        self._log_lines_in_window = 0
        self._suppressed_in_window = 0

    @property
    def index(self) -> acls.AclIndex:
        assert self._state.metadata is not None, "the authorizer is used once the metadata is loaded"
        return self._state.metadata.acls

    # ------------------------------------------------------------------ decisions
    def authorize(self, session: "ClientSession", operation: AclOperation, resource_type: ResourceType,
                  name: str, *, log_denied: bool = True) -> bool:
        """One decision, counted; a denial logged (rate-limited) unless `log_denied` is False (Kafka's
        Action.logIfDenied, false where a denial only filters, e.g. regex-resolved topics)."""
        principal = session.principal
        host = session.client_host
        decision = acls.authorize(self.index, self.super_users, self.allow_if_no_acl, principal, host,
                                  operation, resource_type, name)
        if decision.allowed:
            self._metrics.authorization_allowed += 1
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s", _audit_line(principal, True, operation, host, resource_type, name, decision.rule))
        else:
            self._metrics.authorization_denied += 1
            if log_denied:
                self._log_denial(principal, operation, host, resource_type, name, decision.rule)
            elif log.isEnabledFor(logging.DEBUG):
                log.debug("%s", _audit_line(principal, False, operation, host, resource_type, name, decision.rule))
        return decision.allowed

    def authorize_by_resource_type(self, session: "ClientSession", operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """May the principal do `operation` on some resource of the type (Kafka's default
        Authorizer.authorizeByResourceType, which StandardAuthorizer inherits; core/acl.py has the
        rules). Counted as one decision; a denial is logged at DEBUG only, as Kafka asks its probe with
        logIfDenied=false (the caller usually falls back to another check, and logs its own refusal)."""
        principal = session.principal
        host = session.client_host
        allowed = acls.authorize_by_resource_type(self.index, self.super_users, self.allow_if_no_acl, principal,
                                                  host, operation, resource_type)
        if allowed:
            self._metrics.authorization_allowed += 1
        else:
            self._metrics.authorization_denied += 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug("Principal = %s is %s operation = %s from host = %s on at least one resource of type %s",
                      principal, "Allowed" if allowed else "Denied", operation.name, host,
                      _RESOURCE_TYPE_NAMES.get(resource_type, resource_type.name))
        return allowed

    def _log_denial(self, principal: str, operation: AclOperation, host: str, resource_type: ResourceType,
                    name: str, rule: str) -> None:
        now = self._clock_s()
        if now - self._log_window_start >= 1.0:
            self._log_window_start = now
            self._log_lines_in_window = 0
            if self._suppressed_in_window:
                log.info("%d more authorization denials were not logged in the last second (at most %d lines "
                         "a second)", self._suppressed_in_window, DENIAL_LOG_LINES_PER_S)
                self._suppressed_in_window = 0
        if self._log_lines_in_window >= DENIAL_LOG_LINES_PER_S:
            self._suppressed_in_window += 1
            self._metrics.authorizer_log_lines_suppressed += 1
            return
        self._log_lines_in_window += 1
        log.info("%s", _audit_line(principal, False, operation, host, resource_type, name, rule))

    # ------------------------------------------------------------------ ACL administration
    def acls(self, f: acls.AclBindingFilter) -> list[acls.AclBinding]:
        """The ACLs `f` matches (StandardAuthorizer.acls)."""
        return self.index.bindings(f)

    def create_acls(self, bindings: list[acls.AclBinding]) -> list[str | None]:
        """Create each binding; one error message (INVALID_REQUEST) or None per binding, in order
        (AclControlManager.createAcls). The new ACLs' records are committed in one journal append."""
        index = self.index
        results: list[str | None] = []
        records: list[dict] = []
        new: set[acls.AclBinding] = set()
        for binding in bindings:
            try:
                acls.validate_new_binding(binding)
            except acls.AclError as exc:
                results.append(str(exc))
                continue
            results.append(None)
            if index.id_of(binding) is not None or binding in new:
                continue  # already there: success without a record, as Kafka's existingAcls set
            new.add(binding)
            acl_id = self._new_id()
            while index.get(acl_id) is not None:
                acl_id = self._new_id()
            records.append(acls.to_record(acl_id, binding))
        if records:
            self._state._commit(records)
            for record in records:
                log.info("ACL created: %s (id %s)", acls.from_record(record)[1], record["id"])
        return results

    def delete_acls(self, filters: list[acls.AclBindingFilter]) -> list[DeleteResult]:
        """Delete what each filter matches (AclControlManager.deleteAcls): one result per filter
        listing what it matched; the removals of the whole request are committed together."""
        index = self.index
        results: list[DeleteResult] = []
        removed: dict[str, acls.AclBinding] = {}
        for f in filters:
            try:
                acls.validate_filter(f)
            except acls.AclError as exc:
                results.append(DeleteResult(str(exc)))
                continue
            matched = index.matching(f)
            for acl_id, binding in matched:
                removed[acl_id] = binding
            results.append(DeleteResult(None, tuple(binding for _id, binding in matched)))
        if removed:
            self._state._commit([{"type": "remove_acl", "id": acl_id} for acl_id in removed])
            for acl_id, binding in removed.items():
                log.info("ACL deleted: %s (id %s)", binding, acl_id)
        return results


def _audit_line(principal: str, allowed: bool, operation: AclOperation, host: str, resource_type: ResourceType,
                name: str, rule: str) -> str:
    """What Kafka's StandardAuthorizerData.buildAuditMessage says (without the request name)."""
    resource = f"{_RESOURCE_TYPE_NAMES.get(resource_type, resource_type.name)}:LITERAL:{name}"
    return (f"Principal = {principal} is {'Allowed' if allowed else 'Denied'} operation = {operation.name} "
            f"from host = {host} on resource = {resource} based on rule {rule}")


def make_authorizer(config: "cfg.BrokerConfig", state: "BrokerState",
                    metrics: "BrokerMetrics") -> StandardAuthorizer | None:
    """The authorizer `authorizer.class.name` names, or None (every request allowed) when it is empty.
    The config validated the class name: it is empty or StandardAuthorizer."""
    class_name = str(config.get("authorizer.class.name") or "")
    if not class_name:
        return None
    assert class_name == STANDARD_AUTHORIZER, class_name
    super_users = acls.parse_super_users(str(config.get("super.users") or ""))
    allow = bool(config.get("allow.everyone.if.no.acl.found"))
    log.info("authorizer %s: super.users %s, allow.everyone.if.no.acl.found=%s", class_name,
             ";".join(sorted(super_users)) or "(none)", str(allow).lower())
    return StandardAuthorizer(state, metrics, super_users, allow)
