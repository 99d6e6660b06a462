"""JAAS configuration text as Kafka's `sasl.jaas.config` holds it, and SASL/PLAIN's check.

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
from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
LOGIN_MODULE_OF_MECHANISM = {"PLAIN": PLAIN_LOGIN_MODULE, "SCRAM-SHA-256": SCRAM_LOGIN_MODULE,
                             "SCRAM-SHA-512": SCRAM_LOGIN_MODULE}
_FLAGS = ("required", "requisite", "sufficient", "optional")


class JaasError(ValueError):
    """Malformed JAAS text; the message never holds an option's value."""


@dataclass(frozen=True)
class LoginModule:
    class_name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        return f"LoginModule({self.class_name} {self.flag}, options={sorted(self.options)})"

    @property
    def plain_users(self) -> dict[str, str]:
        """user_<name>="<password>" options (PlainServerCallbackHandler's user store)."""
        return {name[5:]: value for name, value in self.options.items() if name.startswith("user_") and len(name) > 5}


def _tokens(text: str) -> list[tuple[str, str]]:
    """("word" | "quoted" | "=" | ";", text) tokens."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "=;":
            out.append((ch, ch))
            i += 1
        elif ch == '"':
            j = i + 1
            value = []
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n:
                    j += 1
                value.append(text[j])
                j += 1
            if j >= n:
                raise JaasError("a quoted value is not closed (a '\"' is missing)")
            out.append(("quoted", "".join(value)))
            i = j + 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in '=;"':
                j += 1
            out.append(("word", text[i:j]))
            i = j
    return out


def parse_jaas_config(text: str) -> list[LoginModule]:
    """Every login module entry of `text`, in order."""
    tokens = _tokens(text)
    modules: list[LoginModule] = []
    i = 0
    while i < len(tokens):
        kind, class_name = tokens[i]
        if kind != "word":
            raise JaasError(f"expected a login module class name at entry {len(modules) + 1}")
        if i + 1 >= len(tokens) or tokens[i + 1][0] != "word" or tokens[i + 1][1].lower() not in _FLAGS:
            raise JaasError(f"login module {class_name}: expected a control flag ({', '.join(_FLAGS)}) after the "
                            "class name")
        flag = tokens[i + 1][1].lower()
        i += 2
        options: dict[str, str] = {}
        while True:
            if i >= len(tokens):
                raise JaasError(f"login module {class_name}: the entry does not end with ';'")
            kind, value = tokens[i]
            if kind == ";":
                i += 1
                break
            if kind != "word":
                raise JaasError(f"login module {class_name}: expected an option name or ';'")
            name = value
            if i + 1 >= len(tokens) or tokens[i + 1][0] != "=":
                raise JaasError(f"login module {class_name}: option {name} must be written {name}=value")
            if i + 2 >= len(tokens) or tokens[i + 2][0] not in ("word", "quoted"):
                raise JaasError(f"login module {class_name}: option {name} has no value")
            if name in options:
                raise JaasError(f"login module {class_name}: option {name} is given twice")
            options[name] = tokens[i + 2][1]
            i += 3
        modules.append(LoginModule(class_name, flag, options))
    if not modules:
        raise JaasError("no login module is given")
    return modules


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
        reason = "unknown user" if expected is None else "wrong password"
        raise PlainFailure(f"{reason} {username!r}", INVALID_USERNAME_OR_PASSWORD, username)
    if authzid and authzid != username:
        raise PlainFailure(f"user {username!r} asked for the authorization id {authzid!r}",
                           "Authentication failed: Client requested an authorization id that is different from "
                           "username", username)
    return username
