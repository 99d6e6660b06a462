"""The SASL side of a connection on a SASL_PLAINTEXT / SASL_SSL listener: Kafka's
`SaslServerAuthenticator` plus the parts of `KafkaChannel` and `SocketServer` that gate requests
on it.

Until it has authenticated, a connection is served only what Kafka's authenticator serves
(`SaslServerAuthenticator.handleKafkaRequest` / `handleSaslToken`):

- before the handshake: ApiVersions (once, first) and SaslHandshake; any other request closes the
  connection without an answer ("Unexpected Kafka request of type X during SASL handshake");
- after a SaslHandshake v1: SaslAuthenticate only (anything else closes the connection; Kafka
  answers it with ILLEGAL_SASL_STATE first, quafka closes it without an answer);
- after a SaslHandshake v0: raw SASL tokens, each a 4-byte size and the bytes with no Kafka header,
  answered the same way (a failure closes the connection with no answer, as Kafka's v0 exchange).

Requests before authentication may be at most `sasl.server.max.receive.size` bytes.

A failed authentication (SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM) is answered
`connection.failed.authentication.delay.ms` later and the connection is then closed (Kafka's
Selector delays the close of a channel whose authentication failed, against password guessing).
Every failure is logged with the peer, the mechanism and the user (never a password) and counted
(`kafka_server_socket_server_metrics_authentication_total`).

Re-authentication (KIP-368): with `connections.max.reauth.ms` > 0, a successful SaslAuthenticate
v1+ tells the client the session lifetime; a client re-authenticates by sending SaslHandshake and
SaslAuthenticate again on the open connection (`KafkaChannel.maybeBeginServerReauthentication`:
the same mechanism, at most once a second, and the principal must not change). A connection whose
session has expired and that sends anything else is closed (`SocketServer`'s
expired-connections-killed). Without an expiry, the gate is removed once authenticated, and the
connection costs nothing more than a PLAINTEXT one; a later SaslHandshake or SaslAuthenticate then
gets ILLEGAL_SASL_STATE from the handlers (KafkaApis.handleSaslHandshakeRequest).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import struct
from typing import Any

from quafka.broker.config import SaslListenerSettings, sasl_settings
from quafka.broker.core.jaas import PlainFailure, plain_authenticate
from quafka.broker.core.scram import SCRAM_MECHANISMS, ScramFailure, ScramServer
from quafka.protocol.framing import peek_header

log = logging.getLogger("quafka.sasl")

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
FAILED_CLOSE_GRACE_S = 1.0  # a failed connection's socket is closed this long after its answer at the latest
MIN_REAUTH_INTERVAL_MS = 1000  # KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS
_SIZE = struct.Struct(">i")

# states (SaslServerAuthenticator.SaslState, folded: INITIAL_REQUEST/HANDSHAKE_OR_VERSIONS_REQUEST/
# HANDSHAKE_REQUEST are HANDSHAKE with `versions_allowed`)
HANDSHAKE, AUTHENTICATE, COMPLETE, FAILED = "handshake", "authenticate", "complete", "failed"


class SaslService:
    """What every SASL connection of one broker shares: the resolved settings per listener (for
    the configuration in force), the secret unknown users' SCRAM salts are derived from, and the
    credential lookups."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.fake_salt_key = secrets.token_bytes(32)
        self._settings: tuple[Any, dict[str, SaslListenerSettings]] = (None, {})

    def settings(self, listener: str) -> SaslListenerSettings:
        config = self.server.state.config
        if self._settings[0] is not config:
            self._settings = (config, {})
        cache = self._settings[1]
        found = cache.get(listener)
        if found is None:
            found = cache[listener] = sasl_settings(config, listener)
        return found

    def scram_credential(self, user: str, mechanism: str):
        metadata = self.server.state.metadata
        return metadata.scram_credential(user, mechanism) if metadata is not None else None


class SaslAuthenticator:
    """One connection's SASL state (see the module docstring)."""

    def __init__(self, connection: Any, server: Any) -> None:
        """`connection`: the connection.BrokerConnection it gates (not imported: connection imports this)."""
        self.connection = connection
        self.server = server
        self.session = connection.session
        self.listener = connection.session.listener_name
        self.state = HANDSHAKE
        self.versions_allowed = True
        self.raw_tokens = False  # SaslHandshake v0: raw tokens follow
        self.mechanism: str | None = None
        self.exchange: ScramServer | None = None
        self.supports_reauth = False  # a SaslAuthenticate v1+ was seen
        self.session_expiry_ms: float | None = None
        self.reauthenticating = False
        self.reauth_started_ms = 0.0
        self.bad_mechanism_message: str | None = None

    # ------------------------------------------------------------------ the gate (connection._serve_frame)
    def gate(self, frame: bytes) -> bool:
        """True when the frame was dealt with here (served, refused or dropped); False to serve
        it through the handler registry as usual."""
        state = self.state
        if state == COMPLETE:
            return self._gate_authenticated(frame)
        if state == FAILED:
            return True  # answered and about to close
        if self.raw_tokens:
            self._raw_token(frame)
            return True
        api_key = peek_header(frame)[0]
        if state == HANDSHAKE:
            if api_key == SASL_HANDSHAKE or (api_key == API_VERSIONS and self.versions_allowed):
                self.versions_allowed = False
                return False
            self._refuse_unexpected(api_key, "SASL handshake")
            return True
        if api_key == SASL_AUTHENTICATE:  # AUTHENTICATE
            return False
        self._refuse_unexpected(api_key, "SASL authentication")
        return True

    def _gate_authenticated(self, frame: bytes) -> bool:
        """An authenticated connection whose session expires (the gate stays only then)."""
        now_ms = self.server.loop_time_ms()
        api_key = peek_header(frame)[0]
        if api_key == SASL_HANDSHAKE and self.supports_reauth and \
                now_ms - self.reauth_started_ms >= MIN_REAUTH_INTERVAL_MS:
            self.reauth_started_ms = now_ms
            self.reauthenticating = True
            self.state = HANDSHAKE
            self.versions_allowed = False
            self.exchange = None
            return False
        if self.session_expiry_ms is not None and now_ms >= self.session_expiry_ms:
            log.info("closing connection from %s: the SASL session of %s expired (connections.max.reauth.ms) and "
                     "the client sent API key %d instead of re-authenticating",
                     self.connection.peer, self.session.principal, api_key)
            self.server.metrics.count_sasl(self.listener, "expired-connections-killed")
            self.state = FAILED
            self.connection.close()
            return True
        return False

    def _refuse_unexpected(self, api_key: int, during: str) -> None:
        log.warning("closing connection from %s: unexpected Kafka request of type %d during %s on listener %s "
                    "(a client configured with the wrong security protocol?)",
                    self.connection.peer, api_key, during, self.listener)
        self.server.metrics.count_sasl(self.listener, self._outcome(False))
        self.state = FAILED
        self.connection.close()

    # ------------------------------------------------------------------ the exchange
    def settings(self) -> SaslListenerSettings:
        return self.server.sasl.settings(self.listener)

    def on_handshake(self, mechanism: str, version: int) -> tuple[bool, list[str]]:
        """SaslHandshake: (accepted, the enabled mechanisms). A refusal must be answered with
        `fail_after_delay`."""
        enabled = list(self.settings().mechanisms)
        if mechanism not in enabled:
            return False, enabled
        if self.reauthenticating and mechanism != self.session.sasl_mechanism:
            self.bad_mechanism_message = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                          f"re-authentication of mechanism '{self.session.sasl_mechanism}'")
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        if mechanism in SCRAM_MECHANISMS:
            self.exchange = ScramServer(mechanism, lambda user: self.server.sasl.scram_credential(user, mechanism),
                                        secrets.token_urlsafe(24), self.server.sasl.fake_salt_key)
        self.state = AUTHENTICATE
        return True, enabled

    def evaluate(self, token: bytes, version: int) -> tuple[bytes, int]:
        """One client token: (the server's token, the session lifetime in ms once complete). Raises
        AuthenticationFailed (its message is for the client)."""
        if version > 0:
            self.supports_reauth = True
        mechanism = self.mechanism
        if self.bad_mechanism_message is not None:
            raise AuthenticationFailed(self.bad_mechanism_message, self.bad_mechanism_message, None)
        if mechanism == "PLAIN":
            try:
                user = plain_authenticate(token, self.settings().plain_users)
            except PlainFailure as exc:
                raise AuthenticationFailed(str(exc), exc.client_message or self._generic(), exc.username) from None
            response = b""
        else:
            assert self.exchange is not None
            try:
                response = self.exchange.evaluate(token)
            except ScramFailure as exc:
                raise AuthenticationFailed(str(exc), self._generic(), self.exchange.username) from None
            if not self.exchange.complete:
                return response, 0
            user = self.exchange.username
            assert user is not None
        return response, self._complete(user)

    def _generic(self) -> str:
        """SaslServerAuthenticator's answer to a SaslException: nothing about the cause."""
        what = "re-authentication" if self.reauthenticating else "authentication"
        return f"Authentication failed during {what} due to invalid credentials with SASL mechanism {self.mechanism}"

    def _complete(self, user: str) -> int:
        session = self.session
        if self.reauthenticating and user != session.principal_name:
            message = (f"Cannot change principals during re-authentication from {session.principal_type}.{session.principal_name}: "
                       f"{session.principal_type}.{user}")
            raise AuthenticationFailed(message, message, user)
        lifetime_ms = int(self.settings().connections_max_reauth_ms)
        now_ms = self.server.loop_time_ms()
        session.principal_name = user
        session.sasl_mechanism = self.mechanism
        session.authenticated = True
        self.server.metrics.count_sasl(self.listener, self._outcome(True))
        log.debug("%s from %s authenticated as %s with %s (session lifetime %d ms)",
                  "re-authentication" if self.reauthenticating else "connection", self.connection.peer,
                  session.principal, self.mechanism, lifetime_ms)
        self.state = COMPLETE
        self.exchange = None
        self.reauthenticating = False
        self.connection.on_authenticated()
        if lifetime_ms > 0:
            self.session_expiry_ms = now_ms + lifetime_ms
        else:
            self.session_expiry_ms = None
            self.connection.sasl = None  # nothing more to check: the connection is as cheap as PLAINTEXT
        return lifetime_ms

    def _outcome(self, ok: bool) -> str:
        return ("successful-" if ok else "failed-") + ("reauthentication" if self.reauthenticating else "authentication")

    def fail(self, exc: "AuthenticationFailed | None", what: str) -> float:
        """Log and count a failure; the connection is FAILED from now on. Returns the delay (s)
        before the answer and the close."""
        user = exc.username if exc is not None else None
        log.warning("%s failed for connection from %s on listener %s (mechanism %s, user %s): %s",
                    "re-authentication" if self.reauthenticating else "authentication", self.connection.peer,
                    self.listener, self.mechanism or "-", repr(user) if user is not None else "-",
                    str(exc) if exc is not None else what)
        self.server.metrics.count_sasl(self.listener, self._outcome(False))
        self.state = FAILED
        self.exchange = None
        return int(self.server.state.config.get("connection.failed.authentication.delay.ms")) / 1000.0

    def close_soon(self) -> None:
        """End the connection once the answer being written has been handed to the transport: our
        side is shut (FIN after the answer) and the socket closed a moment later, or when the client
        closes first. Closing at once could turn into a reset that discards the answer when the
        client has sent more bytes meanwhile (they are dropped unread: the state is FAILED)."""
        loop = asyncio.get_running_loop()
        loop.call_soon(self._shut_write)
        loop.call_later(FAILED_CLOSE_GRACE_S, self.connection.close)

    def _shut_write(self) -> None:
        transport = self.connection.transport
        if transport is None or self.connection.closing:
            return
        try:
            if transport.can_write_eof():
                transport.write_eof()
                return
        except (OSError, RuntimeError):
            pass
        self.connection.close()

    def _raw_token(self, frame: bytes) -> None:
        """A SASL token after a SaslHandshake v0 (no Kafka header)."""
        try:
            response, _lifetime = self.evaluate(frame, 0)
        except AuthenticationFailed as exc:
            delay = self.fail(exc, "")
            asyncio.get_running_loop().call_later(delay, self.connection.close)
            return
        self.connection.transport.write(_SIZE.pack(len(response)) + response)


class AuthenticationFailed(Exception):
    """`str()`: the broker's log line (no secret); `client_message`: what the client is told."""

    def __init__(self, log_message: str, client_message: str, username: str | None) -> None:
        super().__init__(log_message)
        self.client_message = client_message
        self.username = username
