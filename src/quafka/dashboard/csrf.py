"""CSRF protection of the dashboard's actions (POST /actions/*), written by hand.

Three checks, all of which a POST must pass (OWASP's CSRF prevention cheat sheet: a synchronizer
token, and Fetch Metadata / Origin verification as defence in depth):

1. a signed double-submit token: the cookie ``quafka_csrf`` holds a random nonce (HttpOnly,
   SameSite=Strict, Path=/), and the form field ``csrf_token`` (or the ``X-CSRF-Token`` header) must be
   HMAC-SHA256(secret, nonce), the secret being random per dashboard process. Another site can
   neither read the cookie nor compute the token;
2. ``Sec-Fetch-Site``, when the browser sends it, must be ``same-origin``;
3. ``Origin``, when sent, must be this dashboard's own origin (scheme://host from the Host header,
   which TrustedHostMiddleware has already checked).

Why not starlette-csrf: it reads the token only from a header and needs itsdangerous
(docs/dashboard.md).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping

__all__ = ["COOKIE", "FIELD", "HEADER", "Csrf"]

COOKIE = "quafka_csrf"
FIELD = "csrf_token"
HEADER = "x-csrf-token"


class Csrf:
    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    @staticmethod
    def new_nonce() -> str:
        return secrets.token_urlsafe(18)

    def token_for(self, nonce: str) -> str:
        return hmac.new(self._secret, nonce.encode(), hashlib.sha256).hexdigest()

    @staticmethod
    def cookie_header(nonce: str) -> str:
        return f"{COOKIE}={nonce}; Path=/; HttpOnly; SameSite=Strict"

    def refusal(self, headers: Mapping[str, str], cookies: Mapping[str, str], form_token: str | None,
                own_origin: str) -> str | None:
        """Why this POST must be refused, or None when it passes every check. ``headers``: the
        request's headers (lower-case names); ``own_origin``: "http://host[:port]" as requested."""
        site = headers.get("sec-fetch-site")
        if site is not None and site != "same-origin":
            return f"the request came from another site (Sec-Fetch-Site: {site})"
        origin = headers.get("origin")
        if origin is not None and origin != own_origin:
            return f"the request came from another origin ({origin}, this dashboard is {own_origin})"
        nonce = cookies.get(COOKIE)
        if not nonce:
            return "the CSRF cookie is missing (reload the page and try again)"
        token = form_token or headers.get(HEADER)
        if not token:
            return "the CSRF token is missing"
        if not hmac.compare_digest(token, self.token_for(nonce)):
            return "the CSRF token does not match (reload the page and try again)"
        return None
