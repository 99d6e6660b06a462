"""Brokers with Kafka's StandardAuthorizer, permissions granted over the wire, and raw kio requests
built from plain values.

Without authentication every connection is `User:ANONYMOUS`, so the ACLs tell the administrator from
the clients under test by their address (Linux routes all of 127.0.0.0/8 to the loopback device):

- the administrator's connection binds the source address ADMIN_HOST (127.0.0.3) and is allowed
  everything by `ALLOW ALL` ACLs on the wildcard resource of every resource type for that host;
- the clients under test connect as any client does, from CLIENT_HOST (127.0.0.1: a loopback
  connection's source address when the client binds none — confluent-kafka/librdkafka, kafka-python
  and aiokafka cannot bind one), and get exactly what `AclEnv.grant` gives them.

The broker runs with `allow.everyone.if.no.acl.found=true` only so that the administrator's first
CreateAcls (the cluster has no ACL yet) is allowed; from then on every resource of every type has an
ACL (the administrator's wildcard ones), so the default never decides again — `AclEnv` checks that a
client is refused before handing the broker to a test. Once SASL lands, a SCRAM administrator in
`super.users` can replace the host trick.

`AclEnv(broker)` is that set-up for an embedded broker started with AUTHORIZER_CONFIG. `grant(op,
resource_type, name)` creates one ACL with CreateAcls; `deny_all` deletes every ACL of CLIENT_HOST
with DeleteAcls; `lifted()` allows the clients everything for a block (for setting state up).

`kreq(api_key, version, **fields)` builds a kio request entity from plain values: nested entities
from dicts, arrays from lists, and every field not given its default or a zero value of its type.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import types
import typing
import uuid

from kio.index import load_request_schema

from support import RawClient

from quafka.broker.config import STANDARD_AUTHORIZER
from quafka.broker.core.acl_types import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType, ResourceType
from quafka.protocol.errors import ErrorCode

ANONYMOUS = "User:ANONYMOUS"
ADMIN_HOST = "127.0.0.3"
CLIENT_HOST = "127.0.0.1"
AUTHORIZER_CONFIG = {"authorizer.class.name": STANDARD_AUTHORIZER, "allow.everyone.if.no.acl.found": True}
ALL_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID,
             ResourceType.DELEGATION_TOKEN, ResourceType.USER)
# what `lifted` allows the clients: what a broker without an authorizer allows
LIFT_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID)


# a DescribeAcls / DeleteAcls filter matching every ACL
ANY_FILTER = {"resource_type_filter": int(ResourceType.ANY), "resource_name_filter": None,
              "pattern_type_filter": int(PatternType.ANY), "principal_filter": None, "host_filter": None,
              "operation": int(AclOperation.ANY), "permission_type": int(AclPermissionType.ANY)}


def wildcard(resource_type: ResourceType) -> str:
    return CLUSTER_NAME if resource_type == ResourceType.CLUSTER else "*"


@dataclasses.dataclass(frozen=True)
class Acl:
    operation: AclOperation
    resource_type: ResourceType
    name: str
    principal: str = ANONYMOUS
    host: str = CLIENT_HOST
    permission: AclPermissionType = AclPermissionType.ALLOW
    pattern: PatternType = PatternType.LITERAL

    def creation(self) -> dict:
        return {"resource_type": int(self.resource_type), "resource_name": self.name,
                "resource_pattern_type": int(self.pattern), "principal": self.principal, "host": self.host,
                "operation": int(self.operation), "permission_type": int(self.permission)}

    def filter(self) -> dict:
        return {"resource_type_filter": int(self.resource_type), "resource_name_filter": self.name,
                "pattern_type_filter": int(self.pattern), "principal_filter": self.principal,
                "host_filter": self.host, "operation": int(self.operation), "permission_type": int(self.permission)}


class AclEnv:
    """An embedded broker's ACLs, administered over the wire from ADMIN_HOST (see the module doc)."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.admin = RawClient(broker.bootstrap_servers, source_host=ADMIN_HOST)
        self.create(*(Acl(AclOperation.ALL, t, wildcard(t), host=ADMIN_HOST) for t in ALL_TYPES))
        with RawClient(broker.bootstrap_servers) as client:  # the default no longer decides for anyone
            refused = client.request(kreq(29, 3, **ANY_FILTER))
            assert refused.error_code == ErrorCode.cluster_authorization_failed, refused

    def create(self, *acls: Acl) -> None:
        resp = self.admin.request(kreq(30, 3, creations=[a.creation() for a in acls]))
        errors = [(r.error_code, r.error_message) for r in resp.results]
        assert all(code == ErrorCode.none for code, _m in errors), errors

    def delete(self, *filters: dict) -> list:
        """Delete what each filter (DeleteAcls filter fields) matches; the bindings deleted."""
        resp = self.admin.request(kreq(31, 3, filters=list(filters)))
        assert all(r.error_code == ErrorCode.none for r in resp.filter_results), resp
        return [m for r in resp.filter_results for m in r.matching_acls]

    def grant(self, operation: AclOperation, resource_type: ResourceType, name: str, principal: str = ANONYMOUS,
              host: str = CLIENT_HOST, pattern: PatternType = PatternType.LITERAL) -> None:
        self.create(Acl(operation, resource_type, name, principal, host, AclPermissionType.ALLOW, pattern))

    def deny(self, operation: AclOperation, resource_type: ResourceType, name: str, principal: str = ANONYMOUS,
             host: str = CLIENT_HOST, pattern: PatternType = PatternType.LITERAL) -> None:
        self.create(Acl(operation, resource_type, name, principal, host, AclPermissionType.DENY, pattern))

    def deny_all(self) -> None:
        """Delete every ACL of the clients' host."""
        self.delete({**ANY_FILTER, "host_filter": CLIENT_HOST})

    def exists(self, acl: Acl) -> bool:
        resp = self.admin.request(kreq(29, 3, **acl.filter()))
        assert resp.error_code == ErrorCode.none, resp
        return bool(resp.resources)

    @contextlib.contextmanager
    def lifted(self):
        """The clients may do everything inside the block; the ACLs added for it go afterwards (the
        ones that were there before stay, so blocks nest)."""
        lift = [Acl(AclOperation.ALL, t, wildcard(t)) for t in LIFT_TYPES]
        added = [a for a in lift if not self.exists(a)]
        if added:
            self.create(*added)
        try:
            yield
        finally:
            if added:
                self.delete(*(a.filter() for a in added))

    def close(self) -> None:
        self.admin.close()


# ----------------------------------------------------------------------------- kio requests from plain values

def kreq(api_key: int, version: int, **fields):
    """The kio request entity of `api_key` v`version` with `fields` (nested dicts and lists)."""
    return _build(load_request_schema(api_key, version), fields)


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


def _build(cls: type, values: dict):
    hints = _hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in values:
            out[f.name] = _convert(hints[f.name], values[f.name])
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            out[f.name] = _zero(hints[f.name])
    unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise TypeError(f"{cls.__module__}.{cls.__name__} has no field(s) {sorted(unknown)}")
    return cls(**out)


def _strip_optional(tp):
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], True
    return tp, False


def _convert(tp, value):
    tp, _optional = _strip_optional(tp)
    if value is None:
        return None
    if typing.get_origin(tp) is tuple:
        item = typing.get_args(tp)[0]
        return tuple(_convert(item, v) for v in value)
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return _build(tp, value)
    base = _base(tp)
    if base is datetime.timedelta and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if base in (int, str, bool) and type(value) is base and callable(tp):
        return tp(value)
    return value


def _base(tp):
    while hasattr(tp, "__supertype__"):
        tp = tp.__supertype__
    if isinstance(tp, type):
        for b in (bool, int, str, bytes, datetime.timedelta, uuid.UUID):
            if issubclass(tp, b):
                return b
    return tp


def _zero(tp):
    tp, optional = _strip_optional(tp)
    if optional:
        return None
    if typing.get_origin(tp) is tuple:
        return ()
    if dataclasses.is_dataclass(tp):
        return _build(tp, {})
    base = _base(tp)
    if base is datetime.timedelta:
        return datetime.timedelta(0)
    if base is uuid.UUID:
        return uuid.UUID(int=0)
    if base in (bool, int, str, bytes):
        return tp(base()) if callable(tp) else base()
    raise TypeError(f"no zero value for {tp!r}")
