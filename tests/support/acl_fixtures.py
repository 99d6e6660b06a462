"""Granting permissions to the test principal, and raw kio requests built from plain values.

`AclEnv(broker)` puts an authorizer on an embedded broker that allows nothing until `grant` says
so, and takes it off again with `close`. Every permission a test needs goes through `grant(op,
resource_type, name)`; `deny_all` forgets them. The principal is `User:ANONYMOUS` on PLAINTEXT.

The authorizer here is a stand-in for the StandardAuthorizer being built (branch h/acls): a set of
LITERAL grants with `*` for any resource name and `User:*` for any principal, answering
`authorize(session, operation, resource_type, name)` and `authorize_by_resource_type(session,
operation, resource_type)` as broker/server/authorization.py asks them. When the real authorizer
and CreateAcls land, `grant` creates ACLs over the wire instead and the tests stay as they are.

`kreq(api_key, version, **fields)` builds a kio request entity from plain values: nested entities
from dicts, arrays from lists, and every field not given its default or a zero value of its type.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import types
import typing
import uuid

from kio.index import load_request_schema

from quafka.broker.core.acl_types import AclOperation, ResourceType

ANONYMOUS = "User:ANONYMOUS"


class GrantingAuthorizer:
    """Allows exactly what was granted (LITERAL names, `*` for any name, `User:*` for anyone, ALL for
    every operation); records what it was asked, for the tests of the hot paths' cost."""

    def __init__(self) -> None:
        self.grants: set[tuple[str, AclOperation, ResourceType, str]] = set()
        self.asked: list[tuple[AclOperation, ResourceType, str]] = []

    def _allows(self, principal: str, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        return any((p, op, resource_type, n) in self.grants
                   for p in (principal, "User:*") for op in (operation, AclOperation.ALL) for n in (name, "*"))

    def authorize(self, session, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        self.asked.append((operation, resource_type, name))
        return self._allows(session.principal, operation, resource_type, name)

    def authorize_by_resource_type(self, session, operation: AclOperation, resource_type: ResourceType) -> bool:
        self.asked.append((operation, resource_type, None))
        return any(p in (session.principal, "User:*") and op in (operation, AclOperation.ALL) and rt == resource_type
                   for p, op, rt, _n in self.grants)


class AclEnv:
    """An embedded broker's authorization for one test module: nothing allowed until granted."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.authorizer = GrantingAuthorizer()
        broker.call(lambda: setattr(broker.server, "authorizer", self.authorizer))

    def grant(self, operation: AclOperation, resource_type: ResourceType, name: str,
              principal: str = ANONYMOUS) -> None:
        self.authorizer.grants.add((principal, operation, resource_type, name))

    def deny_all(self) -> None:
        self.authorizer.grants.clear()
        self.authorizer.asked.clear()

    def allow_all(self) -> None:
        """What a broker without an authorizer allows (for setting state up)."""
        for rtype in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID):
            self.grant(AclOperation.ALL, rtype, "*")

    def close(self) -> None:
        self.broker.call(lambda: setattr(self.broker.server, "authorizer", None))


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
