"""SCRAM credential administration for the Admin: DescribeUserScramCredentials (key 50) and
AlterUserScramCredentials (key 51), as Kafka's `Admin.describeUserScramCredentials` /
`alterUserScramCredentials` (org.apache.kafka.clients.admin.KafkaAdminClient, KIP-554), shaped
like confluent-kafka's AdminClient methods of the same names: `ScramMechanism`,
`ScramCredentialInfo`, `UserScramCredentialUpsertion`, `UserScramCredentialDeletion`,
`UserScramCredentialsDescription`. `AsyncAdmin` inherits `ScramAdminMixin`.

The password never leaves the client. As `KafkaAdminClient.getScramCredentialUpsertion` does, the
client derives the salted password, Hi(password, salt, iterations) of RFC 5802 (PBKDF2 with the
mechanism's HMAC), and sends the salt and that; the broker keeps only StoredKey and ServerKey. The
salt, when the upsertion names none, is drawn as Kafka's `UserScramCredentialUpsertion` draws it
(`ScramFormatter.secureRandomBytes`: 130 random bits written in base 36).

Checks made before anything is sent, as `KafkaAdminClient.alterUserScramCredentials` makes them:
an empty user name or password fails the user with UNACCEPTABLE_CREDENTIAL, an UNKNOWN mechanism
with UNSUPPORTED_SASL_MECHANISM; such a user's other alterations are not sent either. Everything
else goes in one request to the controller, which refuses a user named twice in one request
(DUPLICATE_RESOURCE, `ScramControlManager.alterCredentials`): alter one mechanism of a user per
call, or both in two calls. Iteration bounds (4096..16384) are the broker's to check; the client
does not compute Hi() for a count far beyond them (it would take minutes) and lets the broker
refuse it.
"""

from __future__ import annotations

import enum
import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

from quafka.protocol.errors import ErrorCode

from .errors import KafkaException, error_for_code

__all__ = ["ScramAdminMixin", "ScramCredentialInfo", "ScramMechanism", "UserScramCredentialAlteration",
           "UserScramCredentialDeletion", "UserScramCredentialUpsertion", "UserScramCredentialsDescription"]

DESCRIBE_USER_SCRAM_CREDENTIALS_KEY, ALTER_USER_SCRAM_CREDENTIALS_KEY = 50, 51
#: past this many iterations the client does not derive the salted password (the broker's maximum
#: is 16384, ScramControlManager.MAX_ITERATIONS; it refuses the upsertion whatever is sent)
_MAX_COMPUTED_ITERATIONS = 10 * 16384
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


class ScramMechanism(enum.Enum):
    """Kafka's admin ``ScramMechanism``: the wire type codes 0 (UNKNOWN), 1 and 2."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """The SASL mechanism name, e.g. ``SCRAM-SHA-256`` (``UNKNOWN`` for UNKNOWN)."""
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str | None:
        return {1: "sha256", 2: "sha512"}.get(self.value)

    @classmethod
    def of(cls, value: "ScramMechanism | str | int") -> "ScramMechanism":
        """A ScramMechanism from itself, its SASL name (``SCRAM-SHA-512``) or its type code; UNKNOWN otherwise."""
        if isinstance(value, ScramMechanism):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return next((m for m in cls if m.value == value), cls.UNKNOWN)
        name = str(value).strip().upper().replace("-", "_")
        return cls.__members__.get(name, cls.UNKNOWN)


@dataclass(frozen=True)
class ScramCredentialInfo:
    """A credential's mechanism and iteration count (what a describe shows: never the salt)."""

    mechanism: ScramMechanism
    iterations: int


@dataclass(frozen=True)
class UserScramCredentialsDescription:
    """The SCRAM credentials of one user."""

    user: str
    scram_credential_infos: tuple[ScramCredentialInfo, ...]


@dataclass(frozen=True)
class UserScramCredentialAlteration:
    user: str


@dataclass(frozen=True)
class UserScramCredentialUpsertion(UserScramCredentialAlteration):
    """Add or replace the credential of ``user`` for ``scram_credential_info.mechanism``; the
    password (str as UTF-8, or bytes) and the salt never show in a repr. ``salt`` None: a random one."""

    scram_credential_info: ScramCredentialInfo
    password: bytes | str = field(repr=False)
    salt: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class UserScramCredentialDeletion(UserScramCredentialAlteration):
    """Remove the credential of ``user`` for ``mechanism``."""

    mechanism: ScramMechanism


def random_salt() -> bytes:
    """130 random bits written in base 36 (as ScramFormatter.secureRandomBytes makes a salt)."""
    value, out = secrets.randbits(130), ""
    while value:
        value, digit = divmod(value, 36)
        out = _BASE36[digit] + out
    return (out or "0").encode("ascii")


def salted_password(mechanism: ScramMechanism, password: bytes, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, iterations) of RFC 5802 for the mechanism's hash."""
    assert mechanism.hash_name is not None
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password, salt, iterations)


def _refusal(code: ErrorCode, user: str, message: str) -> KafkaException:
    return KafkaException(f"AlterUserScramCredentials for user {user!r}: {message} "
                          f"({code.name.upper()}, error code {int(code)})", code)


class ScramAdminMixin:
    """Describe/AlterUserScramCredentials for AsyncAdmin (which provides `_get_cluster` and
    `_controller_call`)."""

    async def describe_user_scram_credentials(self, users: Iterable[str] | None = None
                                              ) -> dict[str, UserScramCredentialsDescription | KafkaException]:
        """The SCRAM credentials of ``users`` (None: of every user that has one), to any broker
        (Kafka's LeastLoadedNodeProvider). Each user maps to its description, or to the
        KafkaException the broker answered for it (RESOURCE_NOT_FOUND for a user without
        credentials, DUPLICATE_RESOURCE for a user named twice). A request-level error raises."""
        names = None if users is None else list(users)
        if names is not None and any(not isinstance(n, str) for n in names):
            raise TypeError("users must be user names (str)")
        conn = await (await self._get_cluster()).any_connection()  # type: ignore[attr-defined]
        response = await conn.call(DESCRIBE_USER_SCRAM_CREDENTIALS_KEY,
                                   {"users": None if not names else [{"name": n} for n in names]})
        if response.error_code != ErrorCode.none:
            error = error_for_code(response.error_code, "DescribeUserScramCredentials")
            raise KafkaException(f"{error.message}: {response.error_message}" if response.error_message
                                 else error.message, error.code)
        out: dict[str, UserScramCredentialsDescription | KafkaException] = {}
        for result in response.results:
            if result.error_code != ErrorCode.none:
                error = error_for_code(result.error_code, f"DescribeUserScramCredentials of user {result.user!r}")
                out[result.user] = KafkaException(f"{error.message}: {result.error_message}"
                                                  if result.error_message else error.message, error.code)
                continue
            out[result.user] = UserScramCredentialsDescription(result.user, tuple(
                ScramCredentialInfo(ScramMechanism.of(int(i.mechanism)), int(i.iterations))
                for i in result.credential_infos))
        return out

    async def alter_user_scram_credentials(self, alterations: Iterable[UserScramCredentialAlteration]
                                           ) -> dict[str, KafkaException | None]:
        """Apply upsertions and deletions in one AlterUserScramCredentials to the controller;
        each user maps to None (applied) or the KafkaException that refused it (see the module
        docstring for the checks made here and Kafka's rule of one alteration per user per request)."""
        alterations = list(alterations)
        refused: dict[str, KafkaException] = {}
        deletions, upsertions = [], []
        for a in alterations:
            if not isinstance(a, (UserScramCredentialUpsertion, UserScramCredentialDeletion)):
                raise TypeError(f"{a!r} is neither a UserScramCredentialUpsertion nor a UserScramCredentialDeletion")
        for a in alterations:  # deletions first, as KafkaAdminClient checks them
            if isinstance(a, UserScramCredentialDeletion):
                if not a.user:
                    refused[a.user] = _refusal(ErrorCode.unacceptable_credential, a.user, "Username must not be empty")
                elif ScramMechanism.of(a.mechanism) is ScramMechanism.UNKNOWN:
                    refused[a.user] = _refusal(ErrorCode.unsupported_sasl_mechanism, a.user, "Unknown SCRAM mechanism")
        for a in alterations:
            if isinstance(a, UserScramCredentialUpsertion) and a.user not in refused:
                mechanism = ScramMechanism.of(a.scram_credential_info.mechanism)
                password = a.password.encode("utf-8") if isinstance(a.password, str) else bytes(a.password or b"")
                if not a.user:
                    refused[a.user] = _refusal(ErrorCode.unacceptable_credential, a.user, "Username must not be empty")
                elif not password:
                    refused[a.user] = _refusal(ErrorCode.unacceptable_credential, a.user, "Password must not be empty")
                elif mechanism is ScramMechanism.UNKNOWN:
                    refused[a.user] = _refusal(ErrorCode.unsupported_sasl_mechanism, a.user, "Unknown SCRAM mechanism")
        for a in alterations:
            if a.user in refused:
                continue
            if isinstance(a, UserScramCredentialDeletion):
                deletions.append({"name": a.user, "mechanism": ScramMechanism.of(a.mechanism).value})
                continue
            assert isinstance(a, UserScramCredentialUpsertion)
            mechanism = ScramMechanism.of(a.scram_credential_info.mechanism)
            iterations = int(a.scram_credential_info.iterations)
            password = a.password.encode("utf-8") if isinstance(a.password, str) else bytes(a.password)
            salt = random_salt() if a.salt is None else bytes(a.salt)
            salted = salted_password(mechanism, password, salt, iterations) \
                if 0 < iterations <= _MAX_COMPUTED_ITERATIONS else b"\x00"  # refused by the broker
            upsertions.append({"name": a.user, "mechanism": mechanism.value, "iterations": iterations,
                               "salt": salt, "salted_password": salted})
        out: dict[str, KafkaException | None] = {a.user: None for a in alterations}
        out.update(refused)
        if deletions or upsertions:
            response = await self._controller_call(  # type: ignore[attr-defined]
                ALTER_USER_SCRAM_CREDENTIALS_KEY, {"deletions": deletions, "upsertions": upsertions},
                lambda r: r.results)
            answered = set()
            for result in response.results:
                answered.add(result.user)
                if result.error_code != ErrorCode.none:
                    out[result.user] = _refusal(ErrorCode(result.error_code), result.user,
                                                result.error_message or ErrorCode(result.error_code).name.upper())
            for user in {d["name"] for d in deletions} | {u["name"] for u in upsertions}:
                if user not in answered:
                    out[user] = KafkaException(f"AlterUserScramCredentials: the broker's response did not contain "
                                               f"a result for user {user!r}")
        return out
