"""SaslHandshake (key 17, v0-1) and SaslAuthenticate (key 36, v0-2): the exchange of a connection
on a SASL listener, driven through its `SaslAuthenticator` (server/sasl_authenticator.py, which
says which requests a connection may send in which state).

Following Kafka's `SaslServerAuthenticator.handleHandshakeRequest` / `handleSaslToken`:

- SaslHandshake names a mechanism; an enabled one is answered NONE with the enabled list, another
  UNSUPPORTED_SASL_MECHANISM with the list, `connection.failed.authentication.delay.ms` later, and
  the connection closes. v0 means raw SASL tokens follow (no SaslAuthenticate framing).
- SaslAuthenticate carries one token; the answer carries the server's token, and once the exchange
  is complete (v1+) the session lifetime (`connections.max.reauth.ms`, 0: none). A failure is
  SASL_AUTHENTICATION_FAILED with Kafka's message (PLAIN: "Authentication failed: Invalid username
  or password"; SCRAM: "Authentication failed during authentication due to invalid credentials with
  SASL mechanism SCRAM-SHA-256"), delayed, then the connection closes.
- On a connection that needs no authentication (a PLAINTEXT or SSL listener) or that has
  authenticated and may not re-authenticate, both are answered ILLEGAL_SASL_STATE
  (KafkaApis.handleSaslHandshakeRequest / handleSaslAuthenticateRequest) and the connection stays.
"""

from __future__ import annotations

import asyncio
import datetime

from quafka.protocol.errors import ErrorCode

from ..registry import handles
from ..sasl_authenticator import AUTHENTICATE, HANDSHAKE, AuthenticationFailed
from ._util import make, response_class

AFTER_AUTHENTICATION = "SaslAuthenticate request received after successful authentication"


@handles(17, 0, 1)
async def handle_sasl_handshake(ctx, req):
    resp_cls = response_class(17, ctx.api_version)
    auth = ctx.session.authenticator
    if auth is None or auth.state != HANDSHAKE:
        return make(resp_cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    accepted, enabled = auth.on_handshake(req.mechanism, ctx.api_version)
    if accepted:
        return make(resp_cls, error_code=ErrorCode.none, mechanisms=tuple(enabled))
    delay_s = auth.fail(None, f"the client asked for the SASL mechanism {req.mechanism!r}, which listener "
                              f"{auth.listener} does not enable ({', '.join(enabled)})")
    if delay_s > 0:
        await asyncio.sleep(delay_s)
    auth.close_soon()
    return make(resp_cls, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=tuple(enabled))


@handles(36, 0, 2)
async def handle_sasl_authenticate(ctx, req):
    resp_cls = response_class(36, ctx.api_version)
    auth = ctx.session.authenticator
    if auth is None or auth.state != AUTHENTICATE:
        return make(resp_cls, error_code=ErrorCode.illegal_sasl_state, error_message=AFTER_AUTHENTICATION,
                    auth_bytes=b"", session_lifetime=datetime.timedelta(0))
    try:
        token, lifetime_ms = auth.evaluate(bytes(req.auth_bytes), ctx.api_version)
    except AuthenticationFailed as exc:
        delay_s = auth.fail(exc, "")
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        auth.close_soon()
        return make(resp_cls, error_code=ErrorCode.sasl_authentication_failed, error_message=exc.client_message,
                    auth_bytes=b"", session_lifetime=datetime.timedelta(0))
    return make(resp_cls, error_code=ErrorCode.none, error_message=None, auth_bytes=token,
                session_lifetime=datetime.timedelta(milliseconds=lifetime_ms))
