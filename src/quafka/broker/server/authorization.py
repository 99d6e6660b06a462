"""The one entry point handlers call to authorize an action (Kafka's `AuthHelper.authorize`).

With no authorizer configured (`authorizer.class.name` empty, Kafka's default) every action is
allowed and the check costs one attribute read. The authorizer itself (ACL bindings from the
metadata journal, `super.users`, `allow.everyone.if.no.acl.found`) lives in `server.authorizer`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quafka.broker.core.acl_types import AclOperation, ResourceType

if TYPE_CHECKING:
    from .connection import RequestContext


def authorize(ctx: "RequestContext", operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    """Whether the request's principal may do `operation` on the resource `name`."""
    authorizer = ctx.server.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize(ctx.session, operation, resource_type, name)
