"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as a Kafka broker serves them: the
credential arithmetic and the server side of one exchange, with no I/O and no randomness.

Kafka's pieces this follows (org.apache.kafka.common.security.scram.internals): `ScramMechanism`
(the two mechanisms, their hash and the 4096-iteration minimum), `ScramFormatter` (Hi(), the client
and server keys, the signatures, the user-name escaping), `ScramMessages` (the four messages) and
`ScramSaslServer.evaluateResponse` (the two-step state machine). The mechanism type codes (1, 2)
and the 16384-iteration maximum are the admin API's (`ScramMechanism` in clients.admin,
`ScramControlManager.MAX_ITERATIONS`).

A credential holds the salt, StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey =
HMAC(SaltedPassword, "Server Key") and the iteration count; never the password nor the salted
password. Its repr hides everything but the iteration count, so it cannot leak into a log line.

The exchange (`ScramServer`):

    client-first  n,,n=<user>,r=<client nonce>         -> server-first  r=<nonce>,s=<salt>,i=<iterations>
    client-final  c=biws,r=<nonce>,p=<proof>           -> server-final  v=<server signature>

The caller passes in the server's part of the nonce (the shell draws it from a secure random
source). Departure from Kafka: an unknown user is not refused at the first message (Kafka's
`ScramSaslServer` throws there, "Invalid user credentials"); it gets a server-first message with a
salt derived from the user name and a per-broker secret (`fake_salt_key`, RFC 5802 section 9's
advice), and fails at the proof like a wrong password, so that a client cannot tell an unknown user
from a wrong password. Either way the client is told only Kafka's generic message (`ScramFailure`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

MIN_ITERATIONS = 4096  # ScramMechanism.minIterations, both mechanisms
MAX_ITERATIONS = 16384  # ScramControlManager.MAX_ITERATIONS

# mechanism name -> (hashlib name, the admin API's type code)
SCRAM_MECHANISMS: dict[str, tuple[str, int]] = {
    "SCRAM-SHA-256": ("sha256", 1),
    "SCRAM-SHA-512": ("sha512", 2),
}
MECHANISM_BY_TYPE: dict[int, str] = {code: name for name, (_h, code) in SCRAM_MECHANISMS.items()}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the broker keeps for one user and mechanism (Kafka's `ScramCredential`)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        return f"ScramCredential(salt=[hidden], stored_key=[hidden], server_key=[hidden], iterations={self.iterations})"


class ScramFailure(Exception):
    """The exchange failed. `str()` is for the broker's log (never a secret); the client is told
    Kafka's generic message, whatever the cause."""


def hash_name(mechanism: str) -> str:
    try:
        return SCRAM_MECHANISMS[mechanism][0]
    except KeyError:
        raise ValueError(f"{mechanism!r} is not a SCRAM mechanism (expected one of {sorted(SCRAM_MECHANISMS)})") from None


def salted_password(mechanism: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with HMAC of the mechanism's hash."""
    return hashlib.pbkdf2_hmac(hash_name(mechanism), password, salt, iterations)


def _hmac(mechanism: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hash_name(mechanism)).digest()


def credential_from_salted_password(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """StoredKey and ServerKey from a salted password, as AlterUserScramCredentials receives it
    (ScramControlManager.finishUpsertion)."""
    client_key = _hmac(mechanism, salted, b"Client Key")
    stored_key = hashlib.new(hash_name(mechanism), client_key).digest()
    server_key = _hmac(mechanism, salted, b"Server Key")
    return ScramCredential(bytes(salt), stored_key, server_key, int(iterations))


def credential_from_password(mechanism: str, password: str, salt: bytes, iterations: int) -> ScramCredential:
    return credential_from_salted_password(
        mechanism, salted_password(mechanism, password.encode("utf-8"), salt, iterations), salt, iterations)


def sasl_name_to_username(sasl_name: str) -> str:
    """RFC 5802 saslname: "=2C" is ",", "=3D" is "=" (ScramFormatter.username); any other "="
    escape is malformed."""
    out, i = [], 0
    while i < len(sasl_name):
        ch = sasl_name[i]
        if ch == "=":
            code = sasl_name[i + 1:i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ScramFailure("malformed user name escape in the client-first message")
            i += 3
        elif ch == ",":
            raise ScramFailure("unescaped ',' in the user name of the client-first message")
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    pairs = []
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise ScramFailure(f"malformed attribute in the {what} message")
        pairs.append((part[0], part[2:]))
    return pairs


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ScramFailure(f"{what} is not valid base64") from None


class ScramServer:
    """The server side of one SCRAM exchange (ScramSaslServer): `evaluate` takes each client
    message and returns the server's; `complete` once the proof was verified; `username` is the
    authenticated user then. Any failure raises ScramFailure and leaves the server FAILED."""

    RECEIVE_CLIENT_FIRST, RECEIVE_CLIENT_FINAL, COMPLETE, FAILED = "client-first", "client-final", "complete", "failed"

    def __init__(self, mechanism: str, lookup, server_nonce: str, fake_salt_key: bytes) -> None:
        """`lookup(username) -> ScramCredential | None`; `server_nonce`: printable ASCII without
        ','; `fake_salt_key`: the per-broker secret unknown users' salts are derived from."""
        hash_name(mechanism)
        if not server_nonce or "," in server_nonce or not server_nonce.isascii():
            raise ValueError("the server nonce must be printable ASCII without ','")
        self.mechanism = mechanism
        self._lookup = lookup
        self._server_nonce = server_nonce
        self._fake_salt_key = fake_salt_key
        self.state = self.RECEIVE_CLIENT_FIRST
        self.username: str | None = None
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    @property
    def complete(self) -> bool:
        return self.state == self.COMPLETE

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self.state == self.RECEIVE_CLIENT_FIRST:
                return self._client_first(token)
            if self.state == self.RECEIVE_CLIENT_FINAL:
                return self._client_final(token)
            raise ScramFailure(f"unexpected SCRAM message in state {self.state}")
        except ScramFailure:
            self.state = self.FAILED
            self._credential = None
            raise

    def _client_first(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramFailure("the client-first message is not UTF-8") from None
        # gs2-header: ("n" | "y" | "p=..."), [a=authzid], then the bare message
        flag, sep1, rest = text.partition(",")
        authzid_part, sep2, bare = rest.partition(",")
        if not sep1 or not sep2 or flag not in ("n", "y"):
            raise ScramFailure("malformed gs2 header (channel binding is not supported)")
        if authzid_part and not authzid_part.startswith("a="):
            raise ScramFailure("malformed authorization id in the gs2 header")
        attrs = _attributes(bare, "client-first")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise ScramFailure("the client-first message must start with n=<user>,r=<nonce>")
        username = sasl_name_to_username(attrs[0][1])
        if not username:
            raise ScramFailure("empty user name")
        authzid = sasl_name_to_username(authzid_part[2:]) if authzid_part else ""
        if authzid and authzid != username:  # ScramSaslServer: an authorization id other than the user
            raise ScramFailure("the client asked for an authorization id that is not its user name")
        client_nonce = attrs[1][1]
        credential = self._lookup(username)
        if credential is not None and credential.iterations < MIN_ITERATIONS:
            raise ScramFailure(f"the stored credential has {credential.iterations} iterations, fewer than the "
                               f"minimum {MIN_ITERATIONS} for {self.mechanism}")
        self.username = username
        self._credential = credential
        salt = credential.salt if credential is not None else self._fake_salt(username)
        iterations = credential.iterations if credential is not None else MIN_ITERATIONS
        self._gs2_header = f"{flag},{authzid_part},"
        self._client_first_bare = bare
        self._nonce = client_nonce + self._server_nonce
        self._server_first = f"r={self._nonce},s={base64.b64encode(salt).decode('ascii')},i={iterations}"
        self.state = self.RECEIVE_CLIENT_FINAL
        return self._server_first.encode("ascii")

    def _fake_salt(self, username: str) -> bytes:
        return _hmac(self.mechanism, self._fake_salt_key, b"fake salt:" + username.encode("utf-8"))[:16]

    def _client_final(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramFailure("the client-final message is not UTF-8") from None
        without_proof, sep, proof_text = text.rpartition(",p=")
        if not sep:
            raise ScramFailure("the client-final message has no proof")
        attrs = _attributes(without_proof, "client-final")
        if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
            raise ScramFailure("the client-final message must start with c=<binding>,r=<nonce>")
        if _b64decode(attrs[0][1], "the channel binding") != self._gs2_header.encode("utf-8"):
            raise ScramFailure("the channel binding does not repeat the gs2 header")
        if attrs[1][1] != self._nonce:
            raise ScramFailure("Invalid client nonce in the final client message")
        proof = _b64decode(proof_text, "the client proof")
        credential = self._credential
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode("utf-8")
        if credential is None:
            raise ScramFailure(f"unknown user {self.username!r}")
        signature = _hmac(self.mechanism, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramFailure(f"wrong password for user {self.username!r} (invalid client proof)")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(hash_name(self.mechanism), client_key).digest(), credential.stored_key):
            raise ScramFailure(f"wrong password for user {self.username!r} (invalid client proof)")
        server_signature = _hmac(self.mechanism, credential.server_key, auth_message)
        self._credential = None
        self.state = self.COMPLETE
        return b"v=" + base64.b64encode(server_signature)
