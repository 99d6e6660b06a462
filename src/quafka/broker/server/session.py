"""Who is on the other end of a connection: the listener it came in on, its security protocol and
the principal it authenticated as (Kafka's `RequestContext.principal` / `Session`).

A connection starts as `User:ANONYMOUS` on PLAINTEXT (Kafka's `KafkaPrincipal.ANONYMOUS`); on an
SSL listener the principal comes from the client certificate's distinguished name when one was
presented (Kafka's `DefaultKafkaPrincipalBuilder` with `ssl.principal.mapping.rules`); on a SASL
listener from the authenticated user once SaslAuthenticate succeeded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ANONYMOUS = "ANONYMOUS"
USER_TYPE = "User"


@dataclass(slots=True)
class ClientSession:
    listener_name: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"
    client_host: str = ""  # the peer's address (no port): what ACL host patterns match
    principal_type: str = USER_TYPE
    principal_name: str = ANONYMOUS
    sasl_mechanism: str | None = None  # set once a SASL exchange succeeded
    authenticated: bool = True  # False on SASL listeners until SaslAuthenticate succeeds
    authenticator: Any = None  # sasl_authenticator.SaslAuthenticator on SASL listeners (the handlers drive it)

    @property
    def principal(self) -> str:
        """`User:alice`, as ACLs and logs name it."""
        return f"{self.principal_type}:{self.principal_name}"
