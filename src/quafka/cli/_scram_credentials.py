"""`quafka configs --entity-type users`: SCRAM credentials, as kafka-configs.sh manages them
(Kafka's ConfigCommand: `alterUserScramCredentialConfigs`, `describeResourceConfig` for users).

    quafka configs --bootstrap-server HOST:PORT --entity-type users --entity-name alice --alter \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
    quafka configs --bootstrap-server HOST:PORT --entity-type users --entity-name alice --alter \\
        --delete-config 'SCRAM-SHA-512'
    quafka configs --bootstrap-server HOST:PORT --entity-type users [--entity-name alice] --describe

The password never leaves this process: quafka's Admin (`Admin.alter_user_scram_credentials`)
draws a random salt, derives the salted password (PBKDF2, `iterations`, 4096 when not given as
ConfigCommand's default) and sends AlterUserScramCredentials (key 51) with the salt and the
salted password, as Kafka's Admin does. --describe calls `Admin.describe_user_scram_credentials`
(DescribeUserScramCredentials, key 50) and prints
"SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192".
"""

from __future__ import annotations

import argparse

from quafka.client import (
    ScramCredentialInfo,
    KafkaException,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from quafka.protocol.errors import ErrorCode

from ._common import ToolError, open_admin

DEFAULT_ITERATIONS = 4096  # ConfigCommand.DefaultScramIterations
SCRAM_KEYS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def is_scram_key(key: str) -> bool:
    return key in SCRAM_KEYS


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


def alter(args: argparse.Namespace, name: str, to_set: dict[str, str], to_delete: list[str]) -> int:
    others = [k for k in [*to_set, *to_delete] if not is_scram_key(k)]
    if others:
        raise ToolError(f"Invalid config(s): {','.join(others)} (quafka serves SCRAM-SHA-256 and SCRAM-SHA-512 "
                        "for users)")
    alterations: list = [UserScramCredentialDeletion(name, ScramMechanism.of(m)) for m in to_delete]
    for mechanism, value in to_set.items():
        iterations, password = parse_scram_value(mechanism, value)
        alterations.append(UserScramCredentialUpsertion(
            name, ScramCredentialInfo(ScramMechanism.of(mechanism), iterations), password))
    with open_admin(args) as admin:
        # one call per change: the broker refuses a user named twice in one request (DUPLICATE_RESOURCE)
        for alteration in alterations:
            error = admin.alter_user_scram_credentials([alteration]).get(name)
            if error is not None:
                raise ToolError(error.message)
    print(f"Completed updating config for user {name}.")
    return 0


def describe(args: argparse.Namespace, name: str | None) -> int:
    with open_admin(args) as admin:
        try:
            described = admin.describe_user_scram_credentials(None if name is None else [name])
        except KafkaException as exc:
            raise ToolError(exc.message) from None
    for user, result in described.items():
        if isinstance(result, KafkaException):
            if result.code == ErrorCode.resource_not_found:
                continue  # no credential: nothing to print, as kafka-configs.sh
            raise ToolError(result.message)
        infos = ", ".join(f"{i.mechanism.mechanism_name}=iterations={i.iterations}"
                          for i in result.scram_credential_infos)
        print(f"SCRAM credential configs for user-principal '{user}' are {infos}")
    return 0
