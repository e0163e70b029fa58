"""The dashboard's secret: who may retry and cancel, and the tokens that prove it.

Pure functions of the secret and a clock reading handed in, so every rule is tested without a
server or a sleep. A session is a signed cookie, nothing is kept on the server:

    session cookie   v1.<issued_s>.<nonce>.<mac>      mac = HMAC-SHA256(key, "session|issued|nonce")
    CSRF token       HMAC-SHA256(key, "csrf|nonce")   bound to that one session

`key` is derived from the configured secret, so changing the secret ends every session. Every
comparison is `hmac.compare_digest`.

A visitor whom the application's access function lets act has no session of the secret: the
forms carry a random token that a cookie of its own also holds (a double-submit token, checked
beside the origin and under SameSite=Strict), so any number of processes can check it without a
key they share.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from .._base.errors import Refusal

MIN_SECRET_CHARS = 16
"""The shortest secret accepted: a login form is open to guessing, so the secret must be long."""

_VERSION = "v1"


def check_secret(secret: object) -> str | None:
    """`secret` if it can protect the dashboard; None stays None (read-only).

    Raises:
        Refusal: the secret is not a str, or is shorter than `MIN_SECRET_CHARS` characters.
    """
    if secret is None:
        return None
    if not isinstance(secret, str):
        raise Refusal(f"dashboard_app(secret=...) takes a str, not {type(secret).__name__}")
    if len(secret) < MIN_SECRET_CHARS:
        raise Refusal(
            f"dashboard_app(secret=...) is {len(secret)} characters; use at least "
            f"{MIN_SECRET_CHARS} (`python -c 'import secrets; print(secrets.token_urlsafe())'` "
            "makes one), or secret=None for a read-only dashboard"
        )
    return secret


class Sessions:
    """Issues and checks session cookies and their CSRF tokens for one secret.

    Args:
        secret: the operator's secret (at least `MIN_SECRET_CHARS` characters).
        session_s: how long a login lasts, in seconds.
    """

    def __init__(self, secret: str, session_s: int) -> None:
        self._secret = secret.encode()
        self._key = hmac.new(self._secret, b"nilo-job dashboard session key", "sha256").digest()
        self.session_s = session_s

    def _mac(self, message: str) -> str:
        return hmac.new(self._key, message.encode(), hashlib.sha256).hexdigest()

    def secret_matches(self, offered: str) -> bool:
        """Whether `offered` is the secret, compared in constant time (digests of both, so that
        not even the secret's length shows)."""
        theirs = hashlib.sha256(_bytes(offered)).digest()
        return hmac.compare_digest(theirs, hashlib.sha256(self._secret).digest())

    def issue(self, now_s: int) -> str:
        """A new session cookie value, issued at `now_s` (seconds since the epoch)."""
        nonce = secrets.token_hex(16)
        return f"{_VERSION}.{now_s}.{nonce}.{self._mac(f'session|{now_s}|{nonce}')}"

    def session(self, cookie: str | None, now_s: int) -> str | None:
        """The session's nonce if `cookie` is a session this secret issued that has not expired
        by `now_s` (seconds since the epoch); None otherwise."""
        if not cookie:
            return None
        if not cookie.isascii():
            return None  # not one this secret issued (those are ASCII), whatever it holds
        parts = cookie.split(".")
        if len(parts) != 4 or parts[0] != _VERSION or not parts[1].isdigit():
            return None
        _version, issued, nonce, mac = parts
        if not hmac.compare_digest(mac.encode(), self._mac(f"session|{issued}|{nonce}").encode()):
            return None
        if not int(issued) <= now_s < int(issued) + self.session_s:
            return None
        return nonce

    def csrf(self, nonce: str) -> str:
        """The CSRF token the forms of session `nonce` carry."""
        return self._mac(f"csrf|{nonce}")

    def csrf_matches(self, nonce: str, offered: str) -> bool:
        """Whether `offered` is session `nonce`'s CSRF token, compared in constant time."""
        return hmac.compare_digest(_bytes(offered), self.csrf(nonce).encode())


def new_token() -> str:
    """A fresh random form token for a visitor the access function lets act: 64 hex digits."""
    return secrets.token_hex(32)


def token_of(cookie: str | None) -> str | None:
    """The form token a cookie holds, if it is one `new_token` could have made; else None."""
    if cookie is None or len(cookie) != 64 or not cookie.isascii():
        return None
    return cookie if all(c in "0123456789abcdef" for c in cookie) else None


def token_matches(cookie: str | None, offered: str) -> bool:
    """Whether the form's `offered` token is the one the cookie holds, in constant time."""
    held = token_of(cookie)
    return held is not None and hmac.compare_digest(_bytes(offered), held.encode())


def _bytes(text: str) -> bytes:
    """`text` as bytes to compare, whatever it holds (a form may carry any text)."""
    return text.encode("utf-8", "surrogateescape")
