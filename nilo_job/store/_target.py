"""A store's target as people read it, never with a secret in it.

A target is what `job.Table(...)` or a command is given: a URL (`postgresql://…`,
`postgres://…`, a SQLAlchemy URL such as `postgresql+psycopg://…`, `sqlite:///…`), a libpq
keyword string (`host=db password='a b'`), or a `psycopg_pool` pool (its connection string).
`shown` renders any of them for a sentence, a log line, a repr or a refusal: without what follows
the user in a URL's userinfo, and without the values of `password`, `passfile`, `sslpassword` (or
libpq's other secrets) wherever they are given, also inside a percent-encoded `nilo_listen_url`.
`scrubbed` takes the driver's own words about a target (libpq's message for a URL it cannot
read, or for a connection that failed, may quote a piece of it), makes them one line to stand in
a sentence (`one_line`), and hides every piece of a secret they quote.

Every sentence nilo-job says about a target goes through one of the two: a password is never
printed, logged, or shown on a page.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

SECRETS = frozenset(
    {"password", "passfile", "sslpassword", "oauth_client_secret", "scram_client_key",
     "scram_server_key"}
)  # fmt: skip
"""libpq's parameters whose values are never shown (a URL's query, a keyword string)."""

LISTEN_URL = "nilo_listen_url"
"""A URL inside a URL (percent-encoded), shown as any URL is."""

HIDDEN = "***"
"""What a quoted piece of a secret becomes in the driver's words (`scrubbed`)."""

_QUOTED = re.compile(r"""(?P<q>["'])(?P<piece>.*?)(?P=q)""")
"""A piece the driver quotes: libpq quotes with `"`, psycopg's own messages with `'`."""


def shown(target: object, *, place: bool = False) -> str:
    """`target` as people may read it: no password, passfile or other secret, nothing after
    the user in a URL's userinfo.

    Args:
        target: a URL (any scheme), a libpq keyword string, a `psycopg_pool` pool (its
            connection string), or anything else (then only its type is named, since its repr
            may hold anything).
        place: only where PostgreSQL is: `host:port/dbname` (several hosts comma-separated),
            as the store's sentences and repr name it.

    Returns:
        The text, for a sentence, a log line, a repr or a refusal.
    """
    if not isinstance(target, str):
        conninfo = getattr(target, "conninfo", None)
        if type(target).__module__.startswith("psycopg") and isinstance(conninfo, str):
            return shown(conninfo, place=place)
        if target is None or isinstance(target, bool | int | float):
            return repr(target)
        name = type(target).__qualname__
        return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"
    if place:
        return _place(target)
    if "://" in target:
        scheme, _, rest = target.partition("://")
        return _url(scheme + "://", rest)
    if "=" in target:
        return _keywords(target)
    if "@" in target:  # a URL without its scheme
        return _url("", target)
    return target


def scrubbed(message: str, target: object) -> str:
    """`message` (the driver's words about `target`) as one line (`one_line`), with every
    quoted piece that holds or is part of a secret of `target` replaced by `HIDDEN`, and every
    secret of four characters or more hidden wherever it stands."""
    message = one_line(message)
    found = [secret for secret in _secrets(target) if secret]
    if not found:
        return message

    def hide(quoted: re.Match[str]) -> str:
        piece, mark = quoted.group("piece"), quoted.group("q")
        if piece and any(secret in piece or piece in secret for secret in found):
            return f"{mark}{HIDDEN}{mark}"
        return quoted.group(0)

    message = _QUOTED.sub(hide, message)
    for secret in sorted(found, key=len, reverse=True):
        if len(secret) >= 4:
            message = message.replace(secret, HIDDEN)
    return message


_ATTEMPTS = "Multiple connection attempts failed. All failures were:"
"""psycopg's line before its list of every host it tried, one `- host: …` line each."""

_CARET = re.compile(r"^\s*\^\s*$")
"""The line under the server's `LINE n:` that points into the statement."""


def one_line(message: str) -> str:
    """The driver's words, which may run over several lines, as one line for a sentence.

    libpq's hints (its lines indented by a tab: "Is the server running on that host and
    accepting TCP/IP connections?") and the server's pointer into a statement (`LINE 1: …` and
    its caret) are dropped; psycopg's list of every host it tried replaces its first line
    (which repeats the last attempt), as "multiple connection attempts failed: host: …; host:
    …"; any other lines are joined with "; "."""
    lines = [
        line.strip()
        for line in message.splitlines()
        if line.strip() and not line.startswith("\t") and not _CARET.match(line)
        and not line.startswith("LINE ")
    ]  # fmt: skip
    if _ATTEMPTS in lines:
        tried = [line.removeprefix("- ") for line in lines[lines.index(_ATTEMPTS) + 1 :]]
        return "multiple connection attempts failed: " + "; ".join(tried)
    return "; ".join(lines)


# ------------------------------------------------------------------------------------- URLs


def _split_url(rest: str) -> tuple[str | None, str, str | None]:
    """A URL after its `scheme://`, as (the userinfo or None, the host and path, the query or
    None). The userinfo ends at the last `@` before the query, so a password holding a raw `@`,
    `:`, `?` or `/` is never taken for a host or a parameter (too much is hidden, never too
    little); an empty authority (`sqlite:///path`, `postgresql:///db?host=…`) has none."""
    slash = rest.find("/")
    if slash == 0:
        path, sep, after = rest.partition("?")
        return None, path, after if sep else None
    start = slash if slash > 0 else rest.rfind("@") + 1
    mark = rest.find("?", start)
    head = rest if mark < 0 else rest[:mark]
    query = None if mark < 0 else rest[mark + 1 :]
    at = head.rfind("@")
    if at < 0:
        return None, head, query
    return head[:at], head[at + 1 :], query


def _url(scheme: str, rest: str) -> str:
    userinfo, hosts, query = _split_url(rest)
    user = "" if userinfo is None else userinfo.split(":", 1)[0]
    text = f"{scheme}{user}@{hosts}" if user else f"{scheme}{hosts}"
    if query is None:
        return text
    kept = []
    hiding = False  # after a secret, a part without `=` may be the rest of its value
    for part in query.split("&"):
        key, sep, value = part.partition("=")
        name = unquote(key)
        if name in SECRETS or (hiding and not sep):
            hiding = True
            continue
        hiding = False
        if name == LISTEN_URL and sep:
            part = f"{key}={quote(shown(unquote(value)), safe='')}"
        kept.append(part)
    return f"{text}?{'&'.join(kept)}" if kept else text


# ---------------------------------------------------------------------------- keyword strings


def _read_keywords(text: str) -> tuple[list[tuple[str, str]], str]:
    """`key=value` pairs as libpq reads them (values quoted with `'` or not, `\\` escaping the
    next character), and the text from where it can no longer read one ("" when it read all)."""
    pairs: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return pairs, ""
        begin = i
        while i < n and text[i] != "=" and not text[i].isspace():
            i += 1
        key = text[begin:i]
        while i < n and text[i].isspace():
            i += 1
        if i >= n or text[i] != "=" or not key:
            return pairs, text[begin:]
        i += 1
        while i < n and text[i].isspace():
            i += 1
        value: list[str] = []
        quoted = i < n and text[i] == "'"
        i += quoted
        while i < n:
            char = text[i]
            if char == "\\" and i + 1 < n:
                value.append(text[i + 1])
                i += 2
                continue
            if (char == "'") if quoted else char.isspace():
                break
            value.append(char)
            i += 1
        if quoted:
            if i >= n:  # unterminated
                return pairs, text[begin:]
            i += 1
        pairs.append((key, "".join(value)))


def _keywords(text: str) -> str:
    pairs, unread = _read_keywords(text)
    words = [f"{key}={_quoted(value)}" for key, value in pairs if key not in SECRETS]
    if unread:
        words.append("…")
    return " ".join(words)


def _quoted(value: str) -> str:
    """A keyword string's value as libpq reads it back."""
    if value and not any(char.isspace() or char in "'\\" for char in value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# ------------------------------------------------------------------------------- the place


def _place(conninfo: str) -> str:
    """`host:port/dbname` of a PostgreSQL connection string, as libpq reads it once shown
    (so that a password libpq would take for a host or a port is not read at all); the shown
    target, cut, when libpq cannot read it."""
    text = shown(conninfo)
    try:
        from psycopg.conninfo import conninfo_to_dict

        read = conninfo_to_dict(text)
    except Exception:
        return text[:80]
    hosts = str(read.get("host") or "").split(",")
    ports = str(read.get("port") or "").split(",")
    if len(ports) == 1:
        ports *= len(hosts)
    at = ",".join(
        f"{host}:{port}" if port else host
        for host, port in zip(hosts, ports + [""] * (len(hosts) - len(ports)), strict=False)
    )
    return f"{at}/{read.get('dbname') or ''}"


def misread(url: str) -> str | None:
    """Why libpq would not read the URL `url` as it was meant, in words that name no secret; None
    when it would (or cannot read it at all, which is said otherwise). A user or password
    holding a raw `@` or `/` (one not percent-encoded) ends the userinfo early for libpq (at its
    first `@`, or before a `/`), which then takes a piece of the password for the host, the port
    or the database: where libpq connects differs from where it connects once the password is
    left out (`shown`), as the URL was meant."""
    if "://" not in url:
        return None
    userinfo, _hosts, _query = _split_url(url.partition("://")[2])
    if userinfo is None or not any(char in userinfo for char in "@/"):
        return None
    try:
        from psycopg.conninfo import conninfo_to_dict

        read, meant = conninfo_to_dict(url), conninfo_to_dict(shown(url))
    except Exception:
        return None
    if all(read.get(key) == meant.get(key) for key in ("host", "hostaddr", "port", "dbname")):
        return None
    return (
        "its user or password holds an '@' or a '/' that is not percent-encoded, so PostgreSQL "
        "would read a piece of the password as the host; percent-encode the user and the "
        "password (urllib.parse.quote(password, safe='') writes '@' as %40 and '/' as %2F)"
    )


def raw_in_userinfo(url: str) -> str:
    """Which of `@`, `/`, `?` and `#` the user or password of the URL `url` holds raw (not
    percent-encoded), in that order; "" when none (or the URL has no user). The userinfo is
    taken to end at the last `@` before the query, as `shown` takes it: as the URL was meant.
    A reader of URLs ends it earlier, at the first `@` (libpq) or at a `/`, `?` or `#` (any),
    and then takes a piece of the password for the host or the port."""
    if "://" not in url:
        return ""
    userinfo, _hosts, _query = _split_url(url.partition("://")[2])
    if userinfo is None:
        return ""
    return "".join(char for char in "@/?#" if char in userinfo)


def user_at(conninfo: str) -> str:
    """`user@` of a PostgreSQL connection string (as libpq reads it once shown, so a password
    is never read), percent-encoded for a URL; "" when it names no user."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        user = conninfo_to_dict(shown(conninfo)).get("user")
    except Exception:
        return ""
    return f"{quote(str(user), safe='')}@" if user else ""


# ------------------------------------------------------------------------------- the secrets


def _secrets(target: object) -> list[str]:
    """Every text of `target` that is, or may be a piece of, a secret: as written and
    percent-decoded."""
    if not isinstance(target, str):
        conninfo = getattr(target, "conninfo", None)
        return _secrets(conninfo) if isinstance(conninfo, str) else []
    found: list[str] = []
    if "://" in target or ("=" not in target and "@" in target):
        rest = target.partition("://")[2] if "://" in target else target
        userinfo, _hosts, query = _split_url(rest)
        if userinfo is not None and ":" in userinfo:
            secret = userinfo.split(":", 1)[1]
            found += [secret, *secret.split("@")]
        hiding = False
        for part in (query or "").split("&"):
            key, sep, value = part.partition("=")
            if unquote(key) in SECRETS or (hiding and not sep):
                hiding = True
                found.append(value if sep else part)
            else:
                hiding = False
                if unquote(key) == LISTEN_URL:
                    found += _secrets(unquote(value))
    else:
        pairs, unread = _read_keywords(target)
        found += [value for key, value in pairs if key in SECRETS]
        found.append(unread)
    try:
        from psycopg.conninfo import conninfo_to_dict

        read = conninfo_to_dict(target)
    except Exception:
        read = {}
    found += [str(read[key]) for key in SECRETS if read.get(key)]
    found += [host.rsplit("@", 1)[0] for host in str(read.get("host") or "").split(",")
              if "@" in host]  # fmt: skip
    return list(dict.fromkeys(found + [unquote(secret) for secret in found]))
