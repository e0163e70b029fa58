"""TLS to a MariaDB/MySQL server, as a `mysql://` URL asks for it.

    mysql://app@db.internal/shop?ssl_mode=VERIFY_IDENTITY&ssl_ca=/etc/mysql/ca.pem

`ssl_mode` takes the names of MySQL's own client (`--ssl-mode`):

- `DISABLED`: no TLS (the default when the URL says nothing of TLS);
- `REQUIRED`: TLS, the server's certificate not checked: the connection is encrypted, but
  anyone in between who answers with a certificate of their own is taken for the server;
- `VERIFY_CA`: TLS, and the server's certificate must be signed by `ssl_ca` (or, without it,
  by a certificate authority the system trusts); the default when `ssl_ca` is given;
- `VERIFY_IDENTITY`: as `VERIFY_CA`, and the certificate must name the URL's host.

`ssl_cert` and `ssl_key` (both, or neither) give a client certificate, for a user created
`REQUIRE X509`. Every path is read as the store is made, so that a missing or unreadable file
is said then, not at the first connection. MySQL's `PREFERRED` (TLS when the server offers it,
else none) is not taken: a connection that may or may not be encrypted is one that an attacker
in between can make plain.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path

from ..._base.errors import Refusal

MODES = ("DISABLED", "REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY")
"""The values `ssl_mode` takes."""

OPTIONS = frozenset({"ssl_mode", "ssl_ca", "ssl_cert", "ssl_key"})
"""The URL's TLS options."""


@dataclass(frozen=True, slots=True)
class Tls:
    """What a URL asks of TLS: `mode` (one of `MODES` but `DISABLED`), the files it names, and
    the `context` made of them (which the driver connects with)."""

    mode: str
    ca: str | None
    cert: str | None
    key: str | None
    context: ssl.SSLContext = field(compare=False, repr=False)


def read_tls(options: dict[str, str], said: str) -> Tls | None:
    """The TLS that a URL's `options` ask for, or None for none; `said` is the URL as sentences
    show it (no password).

    Raises:
        Refusal: `ssl_mode` is not one of `MODES`, `DISABLED` comes with files, `ssl_cert`
            comes without `ssl_key` or the other way round, or a file is missing or is not
            what it should be (PEM certificates, a PEM key that matches the certificate).
    """
    given = {name: options[name] for name in OPTIONS if options.get(name)}
    if not given:
        return None
    ca, cert, key = given.get("ssl_ca"), given.get("ssl_cert"), given.get("ssl_key")
    mode = given.get("ssl_mode", "VERIFY_CA" if ca else "REQUIRED").upper()
    if mode not in MODES:
        raise Refusal(
            f"job.Table({said!r}): ssl_mode={given['ssl_mode']!r} is none of {', '.join(MODES)} "
            "(MySQL's PREFERRED, TLS only when the server offers it, is not taken: say REQUIRED "
            "or a VERIFY_ mode)"
        )
    if mode == "DISABLED":
        if ca or cert or key:
            raise Refusal(
                f"job.Table({said!r}): ssl_mode=DISABLED with a certificate or key: drop them, or "
                "say REQUIRED, VERIFY_CA or VERIFY_IDENTITY"
            )
        return None
    if (cert is None) != (key is None):
        raise Refusal(
            f"job.Table({said!r}): a client certificate needs both ssl_cert and ssl_key, the "
            f"URL gives only {'ssl_cert' if cert else 'ssl_key'}"
        )
    for name, path in (("ssl_ca", ca), ("ssl_cert", cert), ("ssl_key", key)):
        if path is not None and not Path(path).is_file():
            raise Refusal(f"job.Table({said!r}): {name}={path!r} is not a file here")
    try:
        context = _context(mode, ca, cert, key)
    except (ssl.SSLError, OSError) as error:
        raise Refusal(
            f"job.Table({said!r}): the TLS files cannot be used ({error.strerror or error}): "
            "ssl_ca and ssl_cert must be PEM certificates, ssl_key the PEM key of ssl_cert"
        ) from None
    return Tls(mode, ca, cert, key, context)


def _context(mode: str, ca: str | None, cert: str | None, key: str | None) -> ssl.SSLContext:
    """The `ssl.SSLContext` of `mode` with those files.

    Raises:
        ssl.SSLError, OSError: a file could not be read as what it should be.
    """
    if mode == "REQUIRED":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(cafile=ca)
        context.check_hostname = mode == "VERIFY_IDENTITY"
    if cert is not None:
        context.load_cert_chain(cert, keyfile=key)
    return context


def failed_sentence(said: str, tls: Tls) -> str | None:
    """Why TLS could not be set up, when `said` (the driver's words at connect) says it is TLS
    that failed; else None."""
    if "CERTIFICATE_VERIFY_FAILED" in said:
        by = f"ssl_ca={tls.ca!r}" if tls.ca else "a certificate authority this system trusts"
        named = " or does not name the URL's host" if tls.mode == "VERIFY_IDENTITY" else ""
        return f"its certificate is not signed by {by}{named} (ssl_mode={tls.mode}): {said}"
    if "SSL" in said:
        return (
            f"TLS could not be set up with it ({said}); a server without TLS answers so "
            "(SHOW VARIABLES LIKE 'have_ssl' says YES on one that has it)"
        )
    return None
