"""ACL bindings, the filters that select them, and the decision Kafka's StandardAuthorizer makes.

Follows `org.apache.kafka.metadata.authorizer.StandardAuthorizerData` (Kafka 4.x):

- `authorize` (StandardAuthorizerData.authorize): a super user is allowed everything; otherwise the
  ACLs whose resource pattern matches the resource are looked at (`findAclRule`): a LITERAL pattern of
  the same name, the LITERAL wildcard `*`, and every PREFIXED pattern the name starts with.
- An ACL applies to a request when its principal is the caller's or `User:*`, its host is the
  caller's address or `*`, and its operation is the one asked for, or ALL, or — for an ALLOW ACL
  only — one that implies it (`findResult`): READ, WRITE, DELETE and ALTER imply DESCRIBE;
  ALTER_CONFIGS implies DESCRIBE_CONFIGS. A DENY ACL for READ does not deny DESCRIBE.
- Any applying DENY wins over every ALLOW. With no applying ACL the answer is DENY if the resource
  has ACLs at all (for anyone) and the configured default otherwise: that default is
  `allow.everyone.if.no.acl.found` (StandardAuthorizer.configure -> `DefaultRule`).
- `authorize_by_resource_type` answers "may the principal do this on at least one resource of the
  type" as the default method `org.apache.kafka.server.authorizer.Authorizer#authorizeByResourceType`
  that StandardAuthorizer inherits (InitProducerId asks it for WRITE on any TOPIC).

The index keeps literal patterns in a dict keyed by (resource type, name) and prefixed patterns in a
dict keyed by (resource type, prefix) plus, per resource type, the sorted distinct prefix lengths in
use; a lookup costs one dict probe per distinct prefix length no longer than the name (Kafka walks a
TreeSet sorted by reverse name instead: same answers, `AclIndex.find` is checked against a brute-force
oracle in tests/broker/core/test_acl.py).

Filters follow `org.apache.kafka.common.acl.AclBindingFilter`, `ResourcePatternFilter` and
`AccessControlEntryFilter` (ANY matches every value; a MATCH pattern filter selects the patterns that
would apply to the named resource: the literal name, the literal wildcard and the prefixes of it).
Validation of new bindings follows `AclControlManager.validateNewAcl` and `AclApis.handleCreateAcls`.

Nothing here does I/O; ACL ids (Kafka uses a Uuid per ACL, `StandardAclWithId`) come from the caller.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from .acl_types import CLUSTER_NAME, WILDCARD, AclOperation, AclPermissionType, PatternType, ResourceType

WILDCARD_PRINCIPAL = "User:*"  # StandardAuthorizerData.WILDCARD_PRINCIPAL

# Operations that imply another when granted by an ALLOW ACL (StandardAuthorizerData.findResult).
IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                              AclOperation.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


class AclError(ValueError):
    """A binding or filter that cannot be used (Kafka answers INVALID_REQUEST)."""


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:  # as Kafka's ResourcePattern.toString (kafka-acls.sh prints it)
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "User:alice"
    host: str  # "*" or an address
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:  # as Kafka's AccessControlEntry.toString
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission_type.name})")


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        return f"(pattern={self.pattern}, entry={self.entry})"


def binding(resource_type: ResourceType, name: str, pattern_type: PatternType, principal: str, host: str,
            operation: AclOperation, permission_type: AclPermissionType) -> AclBinding:
    """A binding from its seven fields (enums or their codes)."""
    return AclBinding(ResourcePattern(ResourceType(resource_type), name, PatternType(pattern_type)),
                      AccessControlEntry(principal, host, AclOperation(operation), AclPermissionType(permission_type)))


# ---------------------------------------------------------------------------------------------- records

def to_record(acl_id: str, acl: AclBinding) -> dict:
    """The metadata journal record of one ACL (Kafka's AccessControlEntryRecord)."""
    return {"type": "acl", "id": acl_id, "resource_type": acl.pattern.resource_type.name,
            "name": acl.pattern.name, "pattern_type": acl.pattern.pattern_type.name,
            "principal": acl.entry.principal, "host": acl.entry.host,
            "operation": acl.entry.operation.name, "permission_type": acl.entry.permission_type.name}


def from_record(record: dict) -> tuple[str, AclBinding]:
    """(id, binding) of an `acl` record; KeyError/ValueError when it is malformed."""
    return str(record["id"]), binding(
        ResourceType[record["resource_type"]], str(record["name"]), PatternType[record["pattern_type"]],
        str(record["principal"]), str(record["host"]), AclOperation[record["operation"]],
        AclPermissionType[record["permission_type"]])


# ---------------------------------------------------------------------------------------------- validation

def parse_principal(principal: str) -> tuple[str, str]:
    """("User", "alice") from "User:alice" (Kafka's SecurityUtils.parseKafkaPrincipal)."""
    if not principal or ":" not in principal:
        raise AclError(f"expected a string in format principalType:principalName but got {principal!r}")
    kind, name = principal.split(":", 1)
    return kind, name


def validate_new_binding(acl: AclBinding) -> None:
    """Raise AclError when `acl` may not be created (AclControlManager.validateNewAcl and the checks
    AclApis.handleCreateAcls makes first)."""
    pattern, entry = acl.pattern, acl.entry
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not pattern.name:
        raise AclError("Invalid empty resource name")
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise AclError(f"Invalid resourceType {pattern.resource_type.name}")
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclError(f"Invalid patternType {pattern.pattern_type.name}")
    if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise AclError(f"Invalid operation {entry.operation.name}")
    if entry.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise AclError(f"Invalid permissionType {entry.permission_type.name}")
    parse_principal(entry.principal)
    if not entry.host:
        raise AclError("Invalid empty host (use * for every host)")


# ---------------------------------------------------------------------------------------------- filters

@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None  # None: any name
    pattern_type: PatternType = PatternType.ANY

    def is_unknown(self) -> bool:
        return self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN

    def matches(self, pattern: ResourcePattern) -> bool:
        """As Kafka's ResourcePatternFilter.matches: MATCH selects the patterns that apply to `name`."""
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    principal: str | None = None  # None: any
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def is_unknown(self) -> bool:
        return self.operation == AclOperation.UNKNOWN or self.permission_type == AclPermissionType.UNKNOWN

    def matches(self, entry: AccessControlEntry) -> bool:
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != entry.operation:
            return False
        return self.permission_type in (AclPermissionType.ANY, entry.permission_type)


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter = field(default_factory=ResourcePatternFilter)
    entry: AccessControlEntryFilter = field(default_factory=AccessControlEntryFilter)

    def is_unknown(self) -> bool:
        return self.pattern.is_unknown() or self.entry.is_unknown()

    def matches(self, acl: AclBinding) -> bool:
        return self.pattern.matches(acl.pattern) and self.entry.matches(acl.entry)


ANY_FILTER = AclBindingFilter()


def validate_filter(f: AclBindingFilter) -> None:
    """Raise AclError for a filter with UNKNOWN parts (AclControlManager.validateFilter)."""
    if f.pattern.is_unknown():
        raise AclError("Unknown patternFilter.")
    if f.entry.is_unknown():
        raise AclError("Unknown entryFilter.")


# ---------------------------------------------------------------------------------------------- matching

def entry_result(entry: AccessControlEntry, principal: str, host: str, operation: AclOperation) -> bool | None:
    """True (allow) / False (deny) when `entry` applies to the request, None when it does not
    (StandardAuthorizerData.findResult; the resource is assumed to match)."""
    if entry.principal != principal and entry.principal != WILDCARD_PRINCIPAL:
        return None
    if entry.host != WILDCARD and entry.host != host:
        return None
    allow = entry.permission_type == AclPermissionType.ALLOW
    if entry.operation != AclOperation.ALL:
        if allow and operation == AclOperation.DESCRIBE:
            if entry.operation not in IMPLIES_DESCRIBE:
                return None
        elif allow and operation == AclOperation.DESCRIBE_CONFIGS:
            if entry.operation not in IMPLIES_DESCRIBE_CONFIGS:
                return None
        elif entry.operation != operation:
            return None
    return allow


@dataclass(frozen=True, slots=True)
class AclMatch:
    """What the ACLs say about one request: `allowed` is None when the resource has no ACL at all
    (the default applies); `acl` is the deciding ACL (a DENY when one applied)."""

    allowed: bool | None
    acl: AclBinding | None = None


class AclIndex:
    """Every ACL by id, indexed by resource for `find` (StandardAuthorizerData's aclsById and
    aclsByResource). Adding an ACL equal to one present is refused, as Kafka keeps a set."""

    def __init__(self) -> None:
        self._by_id: dict[str, AclBinding] = {}
        self._ids: dict[AclBinding, str] = {}
        # (resource type, name) -> (the pattern, {id: entry}); literal and prefixed patterns apart
        self._literal: dict[tuple[int, str], tuple[ResourcePattern, dict[str, AccessControlEntry]]] = {}
        self._prefixed: dict[tuple[int, str], tuple[ResourcePattern, dict[str, AccessControlEntry]]] = {}
        self._prefix_lengths: dict[int, list[int]] = {}  # sorted distinct prefix lengths in use, per type
        self._length_counts: dict[tuple[int, int], int] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def items(self) -> list[tuple[str, AclBinding]]:
        return list(self._by_id.items())

    def get(self, acl_id: str) -> AclBinding | None:
        return self._by_id.get(acl_id)

    def id_of(self, acl: AclBinding) -> str | None:
        return self._ids.get(acl)

    def add(self, acl_id: str, acl: AclBinding) -> None:
        if acl_id in self._by_id:
            raise AclError(f"An ACL with ID {acl_id} already exists.")
        if acl in self._ids:
            raise AclError(f"ACL {acl} already exists with ID {self._ids[acl]}.")
        self._by_id[acl_id] = acl
        self._ids[acl] = acl_id
        p = acl.pattern
        rtype = int(p.resource_type)
        prefixed = p.pattern_type == PatternType.PREFIXED
        table = self._prefixed if prefixed else self._literal
        slot = table.get((rtype, p.name))
        if slot is None:
            slot = table[(rtype, p.name)] = (p, {})
        slot[1][acl_id] = acl.entry
        if prefixed:
            count_key = (rtype, len(p.name))
            count = self._length_counts.get(count_key, 0)
            if count == 0:
                bisect.insort(self._prefix_lengths.setdefault(rtype, []), len(p.name))
            self._length_counts[count_key] = count + 1

    def remove(self, acl_id: str) -> AclBinding:
        acl = self._by_id.pop(acl_id, None)
        if acl is None:
            raise AclError(f"ID {acl_id} not found in the ACLs.")
        del self._ids[acl]
        p = acl.pattern
        rtype = int(p.resource_type)
        prefixed = p.pattern_type == PatternType.PREFIXED
        table = self._prefixed if prefixed else self._literal
        entries = table[(rtype, p.name)][1]
        del entries[acl_id]
        if not entries:
            del table[(rtype, p.name)]
        if prefixed:
            count_key = (rtype, len(p.name))
            self._length_counts[count_key] -= 1
            if self._length_counts[count_key] == 0:
                del self._length_counts[count_key]
                lengths = self._prefix_lengths[rtype]
                lengths.pop(bisect.bisect_left(lengths, len(p.name)))
        return acl

    def of_type(self, resource_type: ResourceType) -> list[tuple[ResourcePattern, AccessControlEntry]]:
        """(pattern, entry) of every ACL on a resource of `resource_type`, literal and prefixed."""
        rtype = int(resource_type)
        return [(pattern, entry) for table in (self._literal, self._prefixed)
                for (t, _name), (pattern, entries) in table.items() if t == rtype for entry in entries.values()]

    def bindings(self, f: AclBindingFilter = ANY_FILTER) -> list[AclBinding]:
        """The ACLs `f` matches, sorted by resource then entry (StandardAuthorizerData.acls)."""
        return sorted((acl for acl in self._by_id.values() if f.matches(acl)), key=_sort_key)

    def matching(self, f: AclBindingFilter) -> list[tuple[str, AclBinding]]:
        """(id, binding) of each ACL `f` matches (AclControlManager.deleteAclsForFilter)."""
        return sorted(((i, acl) for i, acl in self._by_id.items() if f.matches(acl)), key=lambda x: _sort_key(x[1]))

    def _slots(self, resource_type: int, name: str) -> list:
        """(pattern, {id: entry}) of every stored pattern that applies to the resource: its literal
        name, the literal wildcard, and each prefix of the name in use."""
        found = []
        slot = self._literal.get((resource_type, name))
        if slot is not None:
            found.append(slot)
        if name != WILDCARD:
            slot = self._literal.get((resource_type, WILDCARD))
            if slot is not None:
                found.append(slot)
        lengths = self._prefix_lengths.get(resource_type)
        if lengths:
            prefixed = self._prefixed
            for length in lengths:
                if length > len(name):
                    break
                slot = prefixed.get((resource_type, name[:length]))
                if slot is not None:
                    found.append(slot)
        return found

    def find(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
             name: str) -> AclMatch:
        """What the ACLs say about `principal` at `host` doing `operation` on the resource
        (StandardAuthorizerData.findAclRule): a DENY that applies wins; else an ALLOW that applies;
        else DENY when the resource has ACLs, and None (the default decides) when it has none."""
        slots = self._slots(int(resource_type), name)
        if not slots:
            return NO_ACLS
        allow: AclBinding | None = None
        for pattern, entries in slots:
            for entry in entries.values():
                result = entry_result(entry, principal, host, operation)
                if result is False:
                    return AclMatch(False, AclBinding(pattern, entry))
                if result and allow is None:
                    allow = AclBinding(pattern, entry)
        if allow is not None:
            return AclMatch(True, allow)
        return NO_MATCH


NO_ACLS = AclMatch(None)  # the resource has no ACL: the default decides
NO_MATCH = AclMatch(False)  # the resource has ACLs, none applies: denied


def _sort_key(acl: AclBinding) -> tuple:
    p, e = acl.pattern, acl.entry
    return (int(p.resource_type), p.name, int(p.pattern_type), e.principal, e.host, int(e.operation),
            int(e.permission_type))


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    kind: str  # SuperUser, MatchingAcl, DefaultAllow or DefaultDeny
    acl: AclBinding | None = None

    @property
    def rule(self) -> str:
        """Why, as Kafka's audit log names it (formatted only when logged)."""
        return f"MatchingAcl(acl={self.acl})" if self.acl is not None else self.kind


SUPER_USER = Decision(True, "SuperUser")
DEFAULT_ALLOW = Decision(True, "DefaultAllow")
DEFAULT_DENY = Decision(False, "DefaultDeny")


def authorize(index: AclIndex, super_users: frozenset[str], allow_if_no_acl: bool, principal: str, host: str,
              operation: AclOperation, resource_type: ResourceType, name: str) -> Decision:
    """StandardAuthorizerData.authorize: super users first, then the ACLs, then the default."""
    if principal in super_users:
        return SUPER_USER
    match = index.find(principal, host, operation, resource_type, name)
    if match.acl is not None:
        return Decision(bool(match.allowed), "MatchingAcl", match.acl)
    if match.allowed is None and allow_if_no_acl:
        return DEFAULT_ALLOW
    return DEFAULT_DENY


# the name Kafka's Authorizer.authorizeByResourceType asks about first (a LITERAL resource nobody names
# on purpose), so that super users, and the default when no ACL applies to it, are honoured
RESOURCE_TYPE_PROBE_NAME = "hardcode"


def authorize_by_resource_type(index: AclIndex, super_users: frozenset[str], allow_if_no_acl: bool,
                               principal: str, host: str, operation: AclOperation,
                               resource_type: ResourceType) -> bool:
    """May `principal` at `host` do `operation` on at least one resource of `resource_type`?

    The rules of Kafka's default `Authorizer.authorizeByResourceType` (StandardAuthorizer does not
    override it):

    1. Allowed when `authorize` allows the operation on the LITERAL resource named "hardcode" (super
       users; an ACL whose pattern covers that name; the default when no ACL does).
    2. Else the ACLs of the type whose principal is the caller's or `User:*`, whose host is the
       caller's or `*`, and whose operation is exactly the one asked or ALL are looked at (no implied
       operations here: an ALLOW of READ does not answer DESCRIBE). A DENY on the LITERAL wildcard
       `*` denies outright; an ALLOW on the LITERAL wildcard allows.
    3. Else allowed when some ALLOW pattern is not dominated by a DENY: a LITERAL allow is dominated
       by a LITERAL deny of the same name, and any allow by a PREFIXED deny that is a prefix of its
       name (the name itself included).
    """
    if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        raise AclError(f"authorize_by_resource_type needs a concrete operation, not {operation.name}")
    if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise AclError(f"authorize_by_resource_type needs a concrete resource type, not {resource_type.name}")
    if authorize(index, super_users, allow_if_no_acl, principal, host, operation, resource_type,
                 RESOURCE_TYPE_PROBE_NAME).allowed:
        return True
    deny_literal: set[str] = set()
    deny_prefixed: set[str] = set()
    allows: list[tuple[PatternType, str]] = []
    wildcard_allow = False
    for pattern, entry in index.of_type(resource_type):
        if entry.host != WILDCARD and entry.host != host:
            continue
        if entry.principal != principal and entry.principal != WILDCARD_PRINCIPAL:
            continue
        if entry.operation != operation and entry.operation != AclOperation.ALL:
            continue
        literal = pattern.pattern_type == PatternType.LITERAL
        if entry.permission_type == AclPermissionType.DENY:
            if literal and pattern.name == WILDCARD:
                return False
            (deny_literal if literal else deny_prefixed).add(pattern.name)
        elif entry.permission_type == AclPermissionType.ALLOW:
            if literal and pattern.name == WILDCARD:
                wildcard_allow = True
            else:
                allows.append((pattern.pattern_type, pattern.name))
    if wildcard_allow:
        return True
    for pattern_type, name in allows:
        if pattern_type == PatternType.LITERAL and name in deny_literal:
            continue
        if any(name[:length] in deny_prefixed for length in range(1, len(name) + 1)):
            continue
        return True
    return False


def parse_super_users(value: str) -> frozenset[str]:
    """`super.users`: principals separated by semicolons (Kafka's StandardAuthorizer.getConfiguredSuperUsers)."""
    users = frozenset(u.strip() for u in value.split(";") if u.strip())
    for user in users:
        parse_principal(user)
    return users
