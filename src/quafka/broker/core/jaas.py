"""A broker listener's JAAS configuration (Kafka's `sasl.jaas.config`; the text is parsed by
protocol/jaas.py, shared with the client), and SASL/PLAIN's check.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";

One entry: the login module class, a control flag (required, requisite, sufficient, optional),
options `name=value` (a value quoted with double quotes, or one bare word), and a `;`. This follows
Kafka's `JaasConfig` (a StreamTokenizer over the text; a broker's listener takes exactly one login
module, `JaasContext.load`) and `PlainServerCallbackHandler`/`PlainSaslServer` (the users are the
`user_<name>` options; the message `[authzid] NUL authcid NUL passwd` of RFC 4616).

Errors (`JaasError`) say what is wrong and where (the entry, the option name), never an option's
value: the text holds passwords.
"""

from __future__ import annotations

import hmac

from quafka.protocol.jaas import (  # noqa: F401 - re-exported: the broker's JAAS names live here
    LOGIN_MODULE_OF_MECHANISM,
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasError,
    LoginModule,
    parse_jaas_config,
)


def server_login_module(text: str, mechanism: str | None = None) -> LoginModule:
    """The one login module of a broker listener's JAAS config (JaasContext.load refuses more or
    fewer); with `mechanism`, its class must be that mechanism's login module."""
    modules = parse_jaas_config(text)
    if len(modules) != 1:
        raise JaasError(f"the JAAS config holds {len(modules)} login modules; a broker listener's must hold exactly 1")
    module = modules[0]
    if mechanism is not None:
        expected = LOGIN_MODULE_OF_MECHANISM.get(mechanism)
        if expected is not None and module.class_name != expected:
            raise JaasError(f"{mechanism} needs the login module {expected}, not {module.class_name}")
    return module


# --------------------------------------------------------------------------- SASL/PLAIN


class PlainFailure(Exception):
    """A SASL/PLAIN exchange that failed; `client_message` is what the client is told (Kafka's
    PlainSaslServer wording), `str()` the broker's log line (the user name, never the password)."""

    def __init__(self, log_message: str, client_message: str | None, username: str | None = None) -> None:
        super().__init__(log_message)
        self.client_message = client_message  # None: Kafka's generic "invalid credentials" message
        self.username = username


INVALID_USERNAME_OR_PASSWORD = "Authentication failed: Invalid username or password"


def plain_authenticate(token: bytes, users: dict[str, str]) -> str:
    """The user name a PLAIN message authenticates (PlainSaslServer.evaluateResponse), or PlainFailure.
    An unknown user and a wrong password fail alike, and the password is compared in constant time."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise PlainFailure("the PLAIN message is not UTF-8", None) from None
    parts = text.split("\x00")
    if len(parts) != 3:
        raise PlainFailure(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}", None)
    authzid, username, password = parts
    if not username:
        raise PlainFailure("Authentication failed: username not specified", None)
    if not password:
        raise PlainFailure("Authentication failed: password not specified", None, username)
    expected = users.get(username)
    ok = hmac.compare_digest(password.encode("utf-8"), (expected if expected is not None else "\x00" + password)
                             .encode("utf-8"))
    if expected is None or not ok:
        # for the broker's log: the user is named after "user", never where a password would be
        reason = f"unknown user {username!r}" if expected is None else f"wrong password for user {username!r}"
        raise PlainFailure(reason, INVALID_USERNAME_OR_PASSWORD, username)
    if authzid and authzid != username:
        raise PlainFailure(f"user {username!r} asked for the authorization id {authzid!r}",
                           "Authentication failed: Client requested an authorization id that is different from "
                           "username", username)
    return username
