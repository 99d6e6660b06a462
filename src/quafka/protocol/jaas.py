"""JAAS configuration text as Kafka's `sasl.jaas.config` holds it, shared by the broker (a
listener's login module and its PLAIN users: broker/core/jaas.py) and the client (its username and
password: client/_security.py).

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret";

One entry: the login module class, a control flag (required, requisite, sufficient, optional),
options `name=value` (a value quoted with double quotes, taking backslash escapes, or one bare
word), and a `;` — Kafka's `JaasConfig` (a StreamTokenizer over the text).

Errors (`JaasError`) say what is wrong and where (the entry, the option name), never an option's
value: the text holds passwords.
"""

from __future__ import annotations

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
