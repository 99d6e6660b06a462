"""Altering and describing SCRAM credentials (AlterUserScramCredentials, DescribeUserScramCredentials)
as Kafka's controller and metadata image do: `ScramControlManager.alterCredentials` and
`ScramImage.describe`. Pure: the caller commits the returned records to the metadata journal before
it answers (records first), and the image changes by replaying them.

Alter, per user name (a user appears at most once per request, whatever the mechanisms):

- a name seen twice (two deletions, two upsertions, or one of each): DUPLICATE_RESOURCE "A user
  credential cannot be altered twice in the same request";
- an empty name: UNACCEPTABLE_CREDENTIAL "Username must not be empty"; a mechanism type other than
  1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512): UNSUPPORTED_SASL_MECHANISM "Unknown SCRAM mechanism";
- deleting a credential that does not exist: RESOURCE_NOT_FOUND "Attempt to delete a user
  credential that does not exist";
- iterations below 4096 or above 16384: UNACCEPTABLE_CREDENTIAL "Too few iterations" / "Too many
  iterations".

The upsertion carries the salt and the salted password (the client derives it); the broker keeps
only StoredKey and ServerKey (`ScramControlManager.finishUpsertion`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .metadata import ClusterMetadata, scram_credential_record
from .scram import MAX_ITERATIONS, MECHANISM_BY_TYPE, MIN_ITERATIONS, SCRAM_MECHANISMS, credential_from_salted_password

NONE, RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL, UNSUPPORTED_SASL_MECHANISM = 0, 91, 92, 93, 33

DUPLICATE_ALTER = "A user credential cannot be altered twice in the same request"
DESCRIBE_DUPLICATE_USER = "Cannot describe SCRAM credentials for the same user twice in a single request: "
DESCRIBE_USER_THAT_DOES_NOT_EXIST = "Attempt to describe a user credential that does not exist: "


@dataclass(frozen=True)
class Deletion:
    name: str
    mechanism: int


@dataclass(frozen=True)
class Upsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:
        return f"Upsertion(name={self.name!r}, mechanism={self.mechanism}, iterations={self.iterations})"


def _check_name_and_mechanism(name: str, mechanism: int) -> tuple[int, str] | None:
    if not name:
        return UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in MECHANISM_BY_TYPE:
        return UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def plan_alter(metadata: ClusterMetadata, deletions: list[Deletion], upsertions: list[Upsertion]
               ) -> tuple[list[tuple[str, int, str | None]], list[dict]]:
    """(results as (user, error code, message), the records to commit). All records of the
    request are committed together (Kafka's ControllerResult.atomicOf)."""
    errors: dict[str, tuple[int, str]] = {}
    to_delete: dict[str, Deletion] = {}
    to_upsert: dict[str, Upsertion] = {}
    for deletion in deletions:
        if deletion.name in errors:
            continue
        if to_delete.pop(deletion.name, None) is not None:
            errors[deletion.name] = (DUPLICATE_RESOURCE, DUPLICATE_ALTER)
            continue
        error = _check_name_and_mechanism(deletion.name, deletion.mechanism)
        if error is None and metadata.scram_credential(deletion.name, MECHANISM_BY_TYPE[deletion.mechanism]) is None:
            error = (RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        if error is not None:
            errors[deletion.name] = error
        else:
            to_delete[deletion.name] = deletion
    for upsertion in upsertions:
        if upsertion.name in errors:
            continue
        if to_delete.pop(upsertion.name, None) is not None or to_upsert.pop(upsertion.name, None) is not None:
            errors[upsertion.name] = (DUPLICATE_RESOURCE, DUPLICATE_ALTER)
            continue
        error = _check_name_and_mechanism(upsertion.name, upsertion.mechanism)
        if error is None and upsertion.iterations < MIN_ITERATIONS:
            error = (UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif error is None and upsertion.iterations > MAX_ITERATIONS:
            error = (UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        if error is not None:
            errors[upsertion.name] = error
        else:
            to_upsert[upsertion.name] = upsertion
    results: list[tuple[str, int, str | None]] = []
    records: list[dict] = []
    for deletion in to_delete.values():
        results.append((deletion.name, NONE, None))
        records.append({"type": "remove_user_scram_credential", "user": deletion.name,
                        "mechanism": MECHANISM_BY_TYPE[deletion.mechanism]})
    for upsertion in to_upsert.values():
        mechanism = MECHANISM_BY_TYPE[upsertion.mechanism]
        credential = credential_from_salted_password(mechanism, upsertion.salted_password, upsertion.salt,
                                                     upsertion.iterations)
        results.append((upsertion.name, NONE, None))
        records.append(scram_credential_record(upsertion.name, mechanism, credential))
    results += [(name, code, message) for name, (code, message) in errors.items()]
    return results, records


def describe(metadata: ClusterMetadata, users: list[str] | None
             ) -> list[tuple[str, int, str | None, list[tuple[int, int]]]]:
    """(user, error code, message, [(mechanism type, iterations)]) per user: every user with a
    credential when `users` is None or empty (ScramImage.describe)."""
    if not users:
        names = {name: False for name in metadata.scram_credentials}
    else:
        names = {}
        for name in users:
            names[name] = name in names
    out = []
    for name, duplicated in names.items():
        if duplicated:
            out.append((name, DUPLICATE_RESOURCE, DESCRIBE_DUPLICATE_USER + name, []))
            continue
        mechanisms = metadata.scram_credentials.get(name)
        if not mechanisms:
            out.append((name, RESOURCE_NOT_FOUND, DESCRIBE_USER_THAT_DOES_NOT_EXIST + name, []))
            continue
        infos = [(SCRAM_MECHANISMS[m][1], c.iterations) for m, c in sorted(mechanisms.items())]
        out.append((name, NONE, None, infos))
    return out
