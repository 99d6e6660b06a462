"""The client side of SCRAM (RFC 5802, with SHA-256/SHA-512 as RFC 7677 and Kafka's KIP-84 use
them): pure message building and checking, no I/O, no clock, no randomness (the caller passes the
client nonce; `_sasl` draws it from ``secrets``).

Kafka's client (``ScramSaslClient``, driven by ``SaslClientAuthenticator``) sends

1. client-first ``n,,n=<user>,r=<client nonce>`` (no channel binding: gs2 header ``n,,``; the
   user name escaped as ``ScramFormatter.saslName`` does: ``=`` → ``=3D``, ``,`` → ``=2C``);
2. reads server-first ``r=<client nonce><server nonce>,s=<salt base64>,i=<iterations>``, refuses a
   nonce that does not extend its own and fewer iterations than the mechanism's minimum (4096 for
   both SHA-256 and SHA-512, ``ScramMechanism.minIterations``), and answers client-final
   ``c=biws,r=<nonce>,p=<proof base64>``;
3. reads server-final ``v=<server signature base64>`` (or ``e=<error>``) and checks the signature
   in constant time: a server that cannot prove it knows the stored key is refused, so a
   man-in-the-middle cannot pretend the authentication succeeded.

`ScramClient` holds the exchange's state; each step raises `ScramError` (a message without any
secret) when the server's message is malformed or wrong.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

__all__ = ["MECHANISMS", "MIN_ITERATIONS", "ScramClient", "ScramError", "escape_sasl_name"]

#: SASL mechanism name -> hashlib name
MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's ScramMechanism.minIterations (the same for both mechanisms)
MIN_ITERATIONS = 4096
_GS2_HEADER = "n,,"


class ScramError(Exception):
    """The SCRAM exchange cannot go on: the server's message is malformed, or it failed to prove
    itself. The message never carries the password or anything derived from it."""


def escape_sasl_name(name: str) -> str:
    """RFC 5802's saslname: ``=`` as ``=3D`` and ``,`` as ``=2C``."""
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: str, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ScramError(f"malformed SCRAM {what}: attribute {part[:20]!r} is not of the form x=value")
        out.setdefault(key, value)
    return out


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise ScramError(f"malformed SCRAM {what}: not base64") from None


class ScramClient:
    """One SCRAM exchange: ``first_message()``, ``final_message(server_first)``,
    ``verify_server_final(server_final)``, in that order."""

    def __init__(self, mechanism: str, username: str, password: str, client_nonce: str) -> None:
        if mechanism not in MECHANISMS:
            raise ScramError(f"unknown SCRAM mechanism {mechanism!r}; known: {', '.join(MECHANISMS)}")
        if not client_nonce or "," in client_nonce or not client_nonce.isprintable():
            raise ScramError("the client nonce must be printable ASCII without ','")
        self.mechanism = mechanism
        self._hash = MECHANISMS[mechanism]
        self._username = username
        self._password = password
        self._client_nonce = client_nonce
        self._client_first_bare = f"n={escape_sasl_name(username)},r={client_nonce}"
        self._server_signature: bytes | None = None
        self.complete = False

    def __repr__(self) -> str:
        return f"ScramClient({self.mechanism}, user={self._username!r}, complete={self.complete})"

    def _hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self._hash).digest()

    def first_message(self) -> bytes:
        """client-first-message."""
        return (_GS2_HEADER + self._client_first_bare).encode()

    def final_message(self, server_first: bytes) -> bytes:
        """client-final-message answering ``server_first`` (with the client proof)."""
        try:
            text = server_first.decode()
        except UnicodeDecodeError:
            raise ScramError("malformed SCRAM server-first message: not UTF-8") from None
        attrs = _attributes(text, "server-first message")
        if "e" in attrs:
            raise ScramError(f"the server refused the SCRAM exchange: {attrs['e']}")
        if "m" in attrs:
            raise ScramError("the SCRAM server-first message has a mandatory extension (m=) this client does not know")
        nonce, salt_b64, iterations_text = attrs.get("r"), attrs.get("s"), attrs.get("i")
        if nonce is None or salt_b64 is None or iterations_text is None:
            raise ScramError("malformed SCRAM server-first message: r=, s= and i= are required")
        if not nonce.startswith(self._client_nonce) or len(nonce) == len(self._client_nonce):
            raise ScramError("the SCRAM server nonce does not extend the client nonce")
        if not iterations_text.isdigit():
            raise ScramError(f"malformed SCRAM server-first message: iterations {iterations_text[:20]!r}")
        iterations = int(iterations_text)
        if iterations < MIN_ITERATIONS:
            raise ScramError(f"the server asks for {iterations} SCRAM iterations, fewer than the minimum "
                             f"{MIN_ITERATIONS} of {self.mechanism}")
        salt = _b64decode(salt_b64, "server-first message (salt)")
        salted = hashlib.pbkdf2_hmac(self._hash, self._password.encode(), salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        server_key = self._hmac(salted, b"Server Key")
        channel_binding = base64.b64encode(_GS2_HEADER.encode()).decode()
        without_proof = f"c={channel_binding},r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature))
        self._server_signature = self._hmac(server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        """Check server-final-message: ScramError unless it carries the expected server signature."""
        if self._server_signature is None:
            raise ScramError("server-final message before the client-final message was made")
        try:
            text = server_final.decode()
        except UnicodeDecodeError:
            raise ScramError("malformed SCRAM server-final message: not UTF-8") from None
        attrs = _attributes(text, "server-final message")
        if "e" in attrs:
            raise ScramError(f"the server refused the SCRAM exchange: {attrs['e']}")
        if "v" not in attrs:
            raise ScramError("malformed SCRAM server-final message: v= is required")
        if not hmac.compare_digest(_b64decode(attrs["v"], "server-final message"), self._server_signature):
            raise ScramError("the server's SCRAM signature is wrong: it does not know this user's credentials "
                             "(refusing the broker)")
        self.complete = True
