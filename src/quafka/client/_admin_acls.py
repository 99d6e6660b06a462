"""ACL administration for the Admin: CreateAcls, DescribeAcls, DeleteAcls, as Kafka's
`Admin.createAcls` / `describeAcls` / `deleteAcls` (org.apache.kafka.clients.admin.KafkaAdminClient),
as `AclAdminMixin`, which `AsyncAdmin` inherits. The requests go to any broker (Kafka's
LeastLoadedNodeProvider).

Bindings and filters name Kafka's enum values as strings, the way Kafka's Java enums print them:
resource types TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER (ANY in a filter);
pattern types LITERAL, PREFIXED (ANY, MATCH in a filter); operations ALL, READ, WRITE, CREATE,
DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE,
CREATE_TOKENS, DESCRIBE_TOKENS, TWO_PHASE_COMMIT (ANY in a filter); permission types ALLOW, DENY
(ANY in a filter). The wire codes are Kafka's (ResourceType, PatternType, AclOperation,
AclPermissionType).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from quafka.protocol.errors import ErrorCode

from .errors import KafkaException, error_for_code

__all__ = ["AclAdminMixin", "AclBinding", "AclBindingFilter", "ACL_OPERATIONS", "PATTERN_TYPES", "operation_names",
           "PERMISSION_TYPES", "RESOURCE_TYPES_ACL"]

DESCRIBE_ACLS_KEY, CREATE_ACLS_KEY, DELETE_ACLS_KEY = 29, 30, 31

RESOURCE_TYPES_ACL = {"UNKNOWN": 0, "ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5,
                      "DELEGATION_TOKEN": 6, "USER": 7}
PATTERN_TYPES = {"UNKNOWN": 0, "ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}
ACL_OPERATIONS = {"UNKNOWN": 0, "ANY": 1, "ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7,
                  "DESCRIBE": 8, "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11,
                  "IDEMPOTENT_WRITE": 12, "CREATE_TOKENS": 13, "DESCRIBE_TOKENS": 14, "TWO_PHASE_COMMIT": 15}
PERMISSION_TYPES = {"UNKNOWN": 0, "ANY": 1, "DENY": 2, "ALLOW": 3}


AUTHORIZED_OPERATIONS_OMITTED = -2147483648  # Kafka's default: the broker was not asked


def operation_names(bit_field: int) -> frozenset[str] | None:
    """The ACL operation names of an authorized-operations bit field (bit `code` set per operation,
    Kafka's `Utils.from32BitField`); None when the broker left it out."""
    if bit_field == AUTHORIZED_OPERATIONS_OMITTED:
        return None
    return frozenset(name for name, code in ACL_OPERATIONS.items() if code > 1 and bit_field & (1 << code))


def _code(table: dict[str, int], value: str, what: str) -> int:
    code = table.get(str(value).upper())
    if code is None:
        raise KafkaException(f"unknown {what} {value!r}: one of {', '.join(n for n in table if n != 'UNKNOWN')}",
                             ErrorCode.invalid_request)
    return code


def _name(table: dict[str, int], code: int) -> str:
    for name, value in table.items():
        if value == code:
            return name
    return "UNKNOWN"


@dataclass(frozen=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry (Kafka's AclBinding)."""

    resource_type: str
    name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission_type: str

    def pattern_text(self) -> str:
        """As Kafka's ResourcePattern.toString (what kafka-acls.sh prints)."""
        return f"ResourcePattern(resourceType={self.resource_type}, name={self.name}, patternType={self.pattern_type})"

    def entry_text(self) -> str:
        """As Kafka's AccessControlEntry.toString."""
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation}, "
                f"permissionType={self.permission_type})")

    def to_filter(self) -> "AclBindingFilter":
        return AclBindingFilter(self.resource_type, self.name, self.pattern_type, self.principal, self.host,
                                self.operation, self.permission_type)


@dataclass(frozen=True)
class AclBindingFilter:
    """Selects ACLs (Kafka's AclBindingFilter): None matches any name, principal or host; "ANY" any
    type; pattern type MATCH selects the patterns that apply to the named resource."""

    resource_type: str = "ANY"
    name: str | None = None
    pattern_type: str = "ANY"
    principal: str | None = None
    host: str | None = None
    operation: str = "ANY"
    permission_type: str = "ANY"


def _binding_values(b: AclBinding) -> dict[str, Any]:
    return {"resource_type": _code(RESOURCE_TYPES_ACL, b.resource_type, "resource type"),
            "resource_name": b.name,
            "resource_pattern_type": _code(PATTERN_TYPES, b.pattern_type, "pattern type"),
            "principal": b.principal, "host": b.host,
            "operation": _code(ACL_OPERATIONS, b.operation, "operation"),
            "permission_type": _code(PERMISSION_TYPES, b.permission_type, "permission type")}


def _filter_values(f: AclBindingFilter) -> dict[str, Any]:
    return {"resource_type_filter": _code(RESOURCE_TYPES_ACL, f.resource_type, "resource type"),
            "resource_name_filter": f.name,
            "pattern_type_filter": _code(PATTERN_TYPES, f.pattern_type, "pattern type"),
            "principal_filter": f.principal, "host_filter": f.host,
            "operation": _code(ACL_OPERATIONS, f.operation, "operation"),
            "permission_type": _code(PERMISSION_TYPES, f.permission_type, "permission type")}


def _binding_of(resource_type: int, name: str, pattern_type: int, principal: str, host: str, operation: int,
                permission_type: int) -> AclBinding:
    return AclBinding(_name(RESOURCE_TYPES_ACL, resource_type), name, _name(PATTERN_TYPES, pattern_type),
                      principal, host, _name(ACL_OPERATIONS, operation), _name(PERMISSION_TYPES, permission_type))


class AclAdminMixin:
    """CreateAcls / DescribeAcls / DeleteAcls for AsyncAdmin (which provides `_get_cluster`)."""

    async def _acl_connection(self):
        cluster = await self._get_cluster()  # type: ignore[attr-defined]
        return await cluster.any_connection()

    async def create_acls(self, bindings: Iterable[AclBinding]) -> dict[AclBinding, KafkaException | None]:
        """Create ACLs; each binding maps to its error (None when created or already there)."""
        bindings = list(bindings)
        if not bindings:
            return {}
        conn = await self._acl_connection()
        response = await conn.call(CREATE_ACLS_KEY, {"creations": [_binding_values(b) for b in bindings]})
        return {b: None if r.error_code == ErrorCode.none else error_for_code(
                    r.error_code, f"CreateAcls {b.pattern_text()} {b.entry_text()}: {r.error_message or ''}")
                for b, r in zip(bindings, response.results)}

    async def describe_acls(self, acl_filter: AclBindingFilter = AclBindingFilter()) -> list[AclBinding]:
        """The ACLs the filter matches; KafkaException when the broker refuses (e.g. SECURITY_DISABLED)."""
        conn = await self._acl_connection()
        response = await conn.call(DESCRIBE_ACLS_KEY, _filter_values(acl_filter))
        if response.error_code != ErrorCode.none:
            raise error_for_code(response.error_code, f"DescribeAcls: {response.error_message or ''}")
        return [_binding_of(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                            a.permission_type) for r in response.resources for a in r.acls]

    async def delete_acls(self, filters: Iterable[AclBindingFilter]
                          ) -> dict[AclBindingFilter, list[AclBinding] | KafkaException]:
        """Delete the ACLs each filter matches; each filter maps to the ACLs it deleted, or its error."""
        filters = list(filters)
        if not filters:
            return {}
        conn = await self._acl_connection()
        response = await conn.call(DELETE_ACLS_KEY, {"filters": [_filter_values(f) for f in filters]})
        out: dict[AclBindingFilter, list[AclBinding] | KafkaException] = {}
        for f, r in zip(filters, response.filter_results):
            if r.error_code != ErrorCode.none:
                out[f] = error_for_code(r.error_code, f"DeleteAcls: {r.error_message or ''}")
                continue
            out[f] = [_binding_of(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
                                  m.permission_type) for m in r.matching_acls]
        return out
