"""A SASL client over RawClient for raw-wire tests: SaslHandshake, then SaslAuthenticate with PLAIN
or SCRAM (the client side of RFC 5802, written for the tests)."""

from __future__ import annotations

import base64
import hashlib
import hmac

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from quafka.broker.core.scram import hash_name, salted_password


def handshake(raw, mechanism: str):
    return raw.request(SaslHandshakeRequest(mechanism=mechanism))


def authenticate(raw, mechanism: str, user: str, password: str, nonce: str = "clientnonce123") -> list:
    """Handshake and authenticate; returns the SaslAuthenticate responses (the last one decides)."""
    assert int(handshake(raw, mechanism).error_code) == 0
    if mechanism == "PLAIN":
        return [raw.request(SaslAuthenticateRequest(auth_bytes=f"\x00{user}\x00{password}".encode()))]
    first_bare = f"n={user},r={nonce}"
    first = raw.request(SaslAuthenticateRequest(auth_bytes=b"n,," + first_bare.encode()))
    if int(first.error_code) != 0:
        return [first]
    server_first = first.auth_bytes.decode()
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salt, iterations = base64.b64decode(attrs["s"]), int(attrs["i"])
    salted = salted_password(mechanism, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hash_name(mechanism)).digest()
    stored_key = hashlib.new(hash_name(mechanism), client_key).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, hash_name(mechanism)).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    final = raw.request(SaslAuthenticateRequest(auth_bytes=f"{without_proof},p={proof}".encode()))
    return [first, final]
