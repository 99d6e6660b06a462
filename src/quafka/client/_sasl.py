"""SASL authentication of one connection, after ApiVersions, as Kafka's ``SaslClientAuthenticator``
does it: SaslHandshake (v1: the tokens then travel in SaslAuthenticate requests) naming the
mechanism, then SaslAuthenticate rounds until the mechanism is complete.

- PLAIN (RFC 4616): one round, ``\\0<user>\\0<password>`` (no authorization id, as Kafka's
  ``PlainSaslClient`` via the JDK sends it).
- SCRAM-SHA-256/512 (RFC 5802/7677): two rounds, the math in `_scram_client` (pure); the client
  nonce is 32 random bytes from ``secrets``; the broker's final signature is checked, so the
  exchange fails unless the broker knows the credentials.

The last SaslAuthenticate response's ``session_lifetime_ms`` (KIP-368, v1+) is returned: the
connection re-authenticates before that (`_transport`). Every failure raises
`SaslAuthenticationException` (not retriable) naming the broker, the mechanism and the user,
never the password.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from quafka.protocol.errors import ErrorCode

from ._scram_client import ScramClient, ScramError
from ._security import SaslSettings
from ._wire import build_entity, request_class
from .errors import KafkaException, SaslAuthenticationException

__all__ = ["SASL_AUTHENTICATE_KEY", "SASL_HANDSHAKE_KEY", "authenticate"]

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
_NONCE_BYTES = 32

#: (api key, min version, max version) -> version; (request entity) -> response entity
VersionFor = Callable[[int, int, int], int]
Send = Callable[[Any], Awaitable[Any]]


def _tokens(sasl: SaslSettings):
    """A generator of the client's tokens: each ``yield`` sends one and receives the broker's answer."""
    if sasl.mechanism == "PLAIN":
        yield b"\0" + sasl.username.encode() + b"\0" + sasl.password.encode()
        return
    nonce = base64.b64encode(secrets.token_bytes(_NONCE_BYTES)).decode()
    scram = ScramClient(sasl.mechanism, sasl.username, sasl.password, nonce)
    server_first = yield scram.first_message()
    server_final = yield scram.final_message(server_first)
    scram.verify_server_final(server_final)


async def authenticate(address: str, sasl: SaslSettings, version_for: VersionFor, send: Send) -> int:
    """Authenticate the connection to ``address``; return the broker's session lifetime in ms
    (0: no limit). ``version_for`` and ``send`` are the connection's."""
    who = f"SASL {sasl.mechanism} authentication of user {sasl.username!r} to broker {address}"
    try:
        handshake_version = version_for(SASL_HANDSHAKE_KEY, 1, 1)
        authenticate_version = version_for(SASL_AUTHENTICATE_KEY, 0, 2)
    except KafkaException:
        raise SaslAuthenticationException(
            f"{who} failed: the broker does not serve SaslHandshake v1 and SaslAuthenticate (is its listener "
            f"SASL_PLAINTEXT or SASL_SSL? check security.protocol)", ErrorCode.illegal_sasl_state) from None
    response = await send(build_entity(request_class(SASL_HANDSHAKE_KEY, handshake_version),
                                       {"mechanism": sasl.mechanism}))
    if response.error_code != ErrorCode.none:
        enabled = ", ".join(response.mechanisms) or "none"
        if response.error_code == ErrorCode.unsupported_sasl_mechanism:
            raise SaslAuthenticationException(f"{who} failed: the broker does not enable {sasl.mechanism} "
                                              f"(it enables: {enabled})", ErrorCode.unsupported_sasl_mechanism)
        error = ErrorCode(response.error_code)
        hint = ""
        if error == ErrorCode.illegal_sasl_state and not response.mechanisms:
            # Kafka's KafkaApis answers a handshake on a listener without SASL this way
            hint = "; the listener takes no SASL (is its listener SASL_PLAINTEXT or SASL_SSL? check security.protocol)"
        raise SaslAuthenticationException(f"{who} failed: SaslHandshake answered {error.name.upper()} "
                                          f"(enabled mechanisms: {enabled}){hint}", error)
    request_cls = request_class(SASL_AUTHENTICATE_KEY, authenticate_version)
    tokens = _tokens(sasl)
    lifetime_ms = 0
    try:
        token = next(tokens)
        while True:
            response = await send(build_entity(request_cls, {"auth_bytes": token}))
            if response.error_code != ErrorCode.none:
                error = ErrorCode(response.error_code)
                detail = response.error_message or error.name.upper()
                raise SaslAuthenticationException(f"{who} failed: {detail}", error)
            lifetime = getattr(response, "session_lifetime", None)
            lifetime_ms = int(lifetime.total_seconds() * 1000) if lifetime is not None else 0
            token = tokens.send(response.auth_bytes)
    except StopIteration:
        return max(lifetime_ms, 0)
    except ScramError as exc:
        raise SaslAuthenticationException(f"{who} failed: {exc}") from None
