"""`quafka configs --entity-type users`: SCRAM credentials, as kafka-configs.sh manages them
(Kafka's ConfigCommand: `alterUserScramCredentialConfigs`, `describeResourceConfig` for users).

    quafka configs --bootstrap-server HOST:PORT --entity-type users --entity-name alice --alter \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
    quafka configs --bootstrap-server HOST:PORT --entity-type users --entity-name alice --alter \\
        --delete-config 'SCRAM-SHA-512'
    quafka configs --bootstrap-server HOST:PORT --entity-type users [--entity-name alice] --describe

The password never leaves this process: the tool draws a random salt, derives the salted password
(PBKDF2, `iterations`, 4096 when not given as ConfigCommand's default) and sends
AlterUserScramCredentials (key 51) with the salt and the salted password, as Kafka's Admin does.
--describe sends DescribeUserScramCredentials (key 50) and prints
"SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192".
"""

from __future__ import annotations

import argparse
import secrets
from typing import Any

from quafka.broker.core.scram import MECHANISM_BY_TYPE, SCRAM_MECHANISMS, salted_password
from quafka.client.errors import error_for_code

from ._common import ToolError, open_admin

DESCRIBE_KEY, ALTER_KEY = 50, 51
DEFAULT_ITERATIONS = 4096  # ConfigCommand.DefaultScramIterations


def is_scram_key(key: str) -> bool:
    return key in SCRAM_MECHANISMS


def _random_salt() -> bytes:
    """130 random bits written in base 36, as Kafka's Admin draws a salt (generateRandomSalt)."""
    value, digits = secrets.randbits(130), "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while value:
        value, rem = divmod(value, 36)
        out = digits[rem] + out
    return (out or "0").encode("ascii")


def parse_scram_value(mechanism: str, value: str) -> tuple[int, str]:
    """'iterations=8192,password=secret' -> (8192, 'secret') (ConfigCommand.parseConfigsToBeAdded)."""
    iterations, password = DEFAULT_ITERATIONS, None
    for part in value.split(","):
        key, sep, item = part.partition("=")
        key = key.strip()
        if not sep:
            raise ToolError(f"Invalid value for {mechanism}: expected [iterations=N,password=P]")
        if key == "iterations":
            try:
                iterations = int(item.strip())
            except ValueError:
                raise ToolError(f"Invalid iterations for {mechanism}: {item.strip()!r} is not a number") from None
        elif key == "password":
            password = item
        else:
            raise ToolError(f"Invalid value for {mechanism}: unknown field {key!r} (expected iterations, password)")
    if not password:
        raise ToolError(f"Invalid value for {mechanism}: a password is required (password=...)")
    return iterations, password


def _call(admin: Any, api_key: int, values: dict) -> Any:
    """One request to the controller through quafka's Admin."""
    return admin._run(admin._async._controller_call(api_key, values, lambda r: getattr(r, "results", ())))


def alter(args: argparse.Namespace, name: str, to_set: dict[str, str], to_delete: list[str]) -> int:
    others = [k for k in [*to_set, *to_delete] if not is_scram_key(k)]
    if others:
        raise ToolError(f"Invalid config(s): {','.join(others)} (quafka serves SCRAM-SHA-256 and SCRAM-SHA-512 "
                        "for users)")
    upsertions = []
    for mechanism, value in to_set.items():
        iterations, password = parse_scram_value(mechanism, value)
        salt = _random_salt()
        # Kafka's Admin leaves the iteration bounds to the broker; computing Hi() with an absurd count would hang
        salted = salted_password(mechanism, password.encode("utf-8"), salt, iterations) \
            if 0 < iterations <= 10 * 16384 else b"\x00"
        upsertions.append({"name": name, "mechanism": SCRAM_MECHANISMS[mechanism][1], "iterations": iterations,
                           "salt": salt, "salted_password": salted})
    deletions = [{"name": name, "mechanism": SCRAM_MECHANISMS[m][1]} for m in to_delete]
    with open_admin(args) as admin:
        # one request per change: a user may be named once per request (DUPLICATE_RESOURCE otherwise)
        for values in ([{"deletions": [d], "upsertions": []} for d in deletions]
                       + [{"deletions": [], "upsertions": [u]} for u in upsertions]):
            response = _call(admin, ALTER_KEY, values)
            for result in response.results:
                if int(result.error_code) != 0:
                    raise ToolError(str(error_for_code(result.error_code, result.error_message or "")))
    print(f"Completed updating config for user {name}.")
    return 0


def describe(args: argparse.Namespace, name: str | None) -> int:
    with open_admin(args) as admin:
        response = _call(admin, DESCRIBE_KEY, {"users": None if name is None else [{"name": name}]})
    if int(response.error_code) != 0:
        raise ToolError(str(error_for_code(response.error_code, response.error_message or "")))
    for result in response.results:
        if int(result.error_code) == 91:  # RESOURCE_NOT_FOUND: no credential, nothing to print
            continue
        if int(result.error_code) != 0:
            raise ToolError(str(error_for_code(result.error_code, result.error_message or "")))
        infos = ", ".join(f"{MECHANISM_BY_TYPE.get(int(i.mechanism), 'UNKNOWN')}=iterations={int(i.iterations)}"
                          for i in result.credential_infos)
        print(f"SCRAM credential configs for user-principal '{result.user}' are {infos}")
    return 0
