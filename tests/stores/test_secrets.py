"""A password never leaves the process: in every form libpq accepts it (in a URL's userinfo,
percent-encoded or with a raw colon, `?password=`, `sslpassword`, `passfile`, a keyword string,
an application's pool, a `nilo_listen_url`), it appears in no refusal, no `StoreUnavailable`, no
"no table" or "older table" sentence, no repr, and no output of the command line.

The server is the tests' own, with trust auth: the role each test creates has a password, which
the server does not ask for, so every target below really connects.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

import nilo_job as job
from nilo_job.cli import main
from nilo_job.store._target import scrubbed, shown


@dataclass(frozen=True)
class Form:
    """One way of giving a password: the target for role `user` on the database at `at`
    (`host:port/dbname`), and the secret it carries."""

    name: str
    secret: str

    def target(self, user: str, at: str) -> str:
        encoded = quote(self.secret, safe="")
        return {
            "userinfo, percent-encoded": f"postgresql://{user}:{encoded}@{at}",
            "userinfo, a raw colon": f"postgresql://{user}:{self.secret}@{at}",
            "userinfo, a raw @": f"postgresql://{user}:{self.secret}@{at}",
            "postgres://": f"postgres://{user}:{encoded}@{at}",
            "?password=": f"postgresql://{user}@{at}?sslmode=disable&password={encoded}",
            "sslpassword": f"postgresql://{user}@{at}?sslpassword={encoded}&sslmode=disable",
            "passfile": f"postgresql://{user}@{at}?passfile=/nonexistent/{encoded}",
            "nilo_listen_url": f"postgresql://{user}@{at}?nilo_listen_url="
            + quote(f"postgresql://{user}:{encoded}@{at}", safe=""),
        }[self.name]


FORMS = [
    Form("userinfo, percent-encoded", "Xq7:Zr9@Wm4/Kp2 Vb5'Jt8"),
    Form("userinfo, a raw colon", "Qw3:Er4:Ty5"),
    Form("postgres://", "Ab1@Cd2%Ef3"),
    Form("?password=", "Gh4&Ij5=Kl6"),
    Form("sslpassword", "Mn7#Op8"),
    Form("passfile", "Pf9Qr0"),
    Form("nilo_listen_url", "Lu1:Ln2@Lx3"),
]
RAW_AT = Form("userinfo, a raw @", "Ra1@Rb2")
"""A password with a raw `@`, which libpq reads as the password `Ra1` and the host `Rb2@…`: it
is refused before anything connects, and nothing may show either piece."""


def pieces(secret: str) -> list[str]:
    """Every run of letters and digits in `secret`: none may be printed, alone or whole."""
    return re.findall(r"[A-Za-z0-9]+", secret)


def assert_hidden(said: str, secret: str) -> None:
    for piece in [secret, quote(secret, safe=""), *pieces(secret)]:
        assert piece not in said, (piece, said)


@pytest.fixture
def role(pg_url: str) -> Iterator[str]:
    """A role of the test's own, with a password and the rights to the test's table; dropped
    after the test."""
    name = f"nilo_secret_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        role_id = sql.Identifier(name)
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(role_id, sql.Literal("Rp5Rq6"))
        )
        conn.execute(sql.SQL("GRANT ALL ON ALL TABLES IN SCHEMA public TO {}").format(role_id))
        conn.execute(sql.SQL("GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {}").format(role_id))
    try:
        yield name
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def place(pg_url: str) -> str:
    read = conninfo_to_dict(pg_url)
    return f"{read['host']}:{read.get('port', 5432)}/{read['dbname']}"


def nilo_job(*args: str) -> str:
    """The command's whole output (stdout and stderr), run in this process."""
    done = CliRunner().invoke(main, list(args))
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    return done.output


# ------------------------------------------------------------------- targets that really connect


@pytest.mark.parametrize("form", FORMS, ids=lambda form: form.name)
async def test_no_sentence_about_a_table_says_the_password(
    form: Form, role: str, pg_url: str
) -> None:
    at = place(pg_url)
    target = form.target(role, at)
    table = job.Table(target)
    said: list[str] = [repr(table)]
    assert repr(table) == f"job.Table('postgresql://{role}@{at}')"  # the user, never a password
    try:
        await table.check()  # it connects: the table is there
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("ALTER TABLE nilo_jobs DROP COLUMN worker")
        with pytest.raises(job.StoreUnavailable) as older:
            await table.check()
        said.append(str(older.value))
        assert str(older.value).startswith(
            f"the nilo_jobs table in job.Table('postgresql://{role}@{at}')"
        )
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP TABLE nilo_jobs")
        for call in (table.stats, table.check):
            with pytest.raises(job.StoreUnavailable) as missing:
                await call()
            said.append(str(missing.value))
            assert str(missing.value).startswith("there is no nilo_jobs table in "), missing
            assert re.search(
                f"create it with `nilo-job migrate postgres(ql)?://{role}@{re.escape(at)}",
                str(missing.value),
            ), missing
    finally:
        await table.close()
    said.append(await asyncio.to_thread(nilo_job, "stats", target))
    assert said[-1].startswith("Error: there is no nilo_jobs table in "), said[-1]
    for text in said:
        assert_hidden(text, form.secret)


@pytest.mark.parametrize("form", FORMS, ids=lambda form: form.name)
@pytest.mark.parametrize("wrong", ["port", "host"])
async def test_a_server_that_cannot_be_reached_is_said_without_the_password(
    form: Form, wrong: str, role: str, pg_url: str
) -> None:
    at = place(pg_url)
    if wrong == "port":
        at = at.replace(":5432/", ":1/")
    else:
        at = at.replace("127.0.0.1:", "nilo-no-such-host.invalid:")
    where = at
    target = form.target(role, at) + ("&" if "?" in form.target(role, at) else "?")
    target += "connect_timeout=2"
    table = job.Table(target)
    try:
        with pytest.raises(job.StoreUnavailable) as failed:
            await table.stats()
    finally:
        await table.close()
    said = str(failed.value)
    assert said.startswith(f"cannot reach PostgreSQL at {where}: "), said
    assert_hidden(said, form.secret)
    printed = await asyncio.to_thread(nilo_job, "stats", target)
    assert printed.startswith(f"Error: cannot reach PostgreSQL at {where}: "), printed
    assert_hidden(printed, form.secret)


async def test_an_application_pool_on_a_keyword_string_is_said_without_its_password(
    role: str, pg_url: str
) -> None:
    read = conninfo_to_dict(pg_url)
    secret = "Kw1 Kx2'Ky3"
    conninfo = (
        f"host={read['host']} port={read.get('port', 5432)} dbname={read['dbname']} user={role} "
        "password='Kw1 Kx2\\'Ky3'"
    )
    assert conninfo_to_dict(conninfo)["password"] == secret  # as libpq reads it
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE nilo_jobs")
    async with AsyncConnectionPool(conninfo, min_size=1, max_size=2, open=False) as pool:
        table = job.Table(pool)
        with pytest.raises(job.StoreUnavailable) as missing:
            await table.stats()
        await table.close()
    at = place(pg_url)
    assert repr(table) == f"job.Table('postgresql://{role}@{at}')"
    assert str(missing.value) == (
        f"there is no nilo_jobs table in {at}: create it with `nilo-job migrate "
        f"postgresql://{role}@{at}` (or await table.create_missing())"
    )
    for said in (repr(table), str(missing.value), shown(pool)):
        assert_hidden(said, secret)
    assert shown(pool) == (
        f"host={read['host']} port={read.get('port', 5432)} dbname={read['dbname']} user={role}"
    )


# ------------------------------------------------------------------ targets refused at once


SQLALCHEMY = "postgresql+psycopg://app:Sa1Sb2@db.example:5432/shop"
KEYWORDS = "host=db.example dbname=shop user=app password='Kk1 Kl2'"


@pytest.mark.parametrize(
    ("target", "secret", "said"),
    [
        (
            SQLALCHEMY,
            "Sa1Sb2",
            "job.Table('postgresql+psycopg://app@db.example:5432/shop'): this is a SQLAlchemy "
            "URL; job.Table takes libpq's, without the driver: "
            "'postgresql://app@db.example:5432/shop'",
        ),
        (
            KEYWORDS,
            "Kk1 Kl2",
            "job.Table('host=db.example dbname=shop user=app'): this is a libpq keyword string; "
            "job.Table takes the same as a URL, 'postgresql://user:password@host:port/dbname' "
            "(percent-encoded), or a psycopg_pool.AsyncConnectionPool opened with it",
        ),
        (
            "mssql://app:Ms1Ms2@db.example/shop",
            "Ms1Ms2",
            "job.Table('mssql://app@db.example/shop'): pass a URL, 'sqlite:///app.db' "
            "(relative), 'sqlite:////var/lib/app.db' (absolute), 'postgresql://user@host/db' or "
            "'mysql://user@host/db' (MariaDB or MySQL), or a psycopg_pool.AsyncConnectionPool",
        ),
        (
            "mysql://app:My1My2@db.example:3306/",
            "My1My2",
            "job.Table('mysql://app@db.example:3306/') names no database: write "
            "'mysql://user:password@host:3306/database'",
        ),
        (
            "sqlite://app:Sq1Sq2@host/app.db",
            "Sq1Sq2",
            "job.Table('sqlite://app@host/app.db'): write sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db",
        ),
        (
            "postgresql://app:Pa1 Pa2@db.example/shop",
            "Pa1 Pa2",
            "job.Table('postgresql://app@db.example/shop') is not a connection string "
            'PostgreSQL reads: unexpected spaces found in "***", use percent-encoded spaces '
            "(%20) instead",
        ),
        (
            "postgresql://app:Pc1%zzPc2@db.example/shop",
            "Pc1%zzPc2",
            "job.Table('postgresql://app@db.example/shop') is not a connection string "
            'PostgreSQL reads: invalid percent-encoded token: "***"',
        ),
        (
            "postgresql://app@db.example/shop?password=Pq1%zzPq2",
            "Pq1%zzPq2",
            "job.Table('postgresql://app@db.example/shop') is not a connection string "
            'PostgreSQL reads: invalid percent-encoded token: "***"',
        ),
        (
            {"password": "Dc1Dc2"},
            "Dc1Dc2",
            "job.Table(a dict): pass a URL, 'sqlite:///app.db' (relative), "
            "'sqlite:////var/lib/app.db' (absolute), 'postgresql://user@host/db' or "
            "'mysql://user@host/db' (MariaDB or MySQL), or a psycopg_pool.AsyncConnectionPool",
        ),
    ],
    ids=[
        "sqlalchemy",
        "keywords",
        "another database",
        "mysql without a database",
        "sqlite",
        "space",
        "bad escape",
        "bad escape in the query",
        "dict",
    ],
)
def test_a_refused_target_is_named_without_its_password(
    target: object, secret: str, said: str
) -> None:
    with pytest.raises(job.Refusal) as refused:
        job.Table(target)
    assert str(refused.value) == said
    assert_hidden(str(refused.value), secret)


def test_a_listen_url_refused_is_named_without_its_password() -> None:
    with pytest.raises(job.Refusal) as refused:
        job.Table("postgresql://app@bouncer/shop", listen_url="mysql://app:Lr1Lr2@db/shop")
    assert str(refused.value) == (
        "listen_url='mysql://app@db/shop': pass the direct 'postgresql://user@host/db' of the "
        "server (not the pooler's)"
    )
    with pytest.raises(job.Refusal) as refused:
        job.Table("postgresql://app@bouncer/shop", listen_url="postgresql://app:Ls1%zzLs2@db/x")
    assert str(refused.value) == (
        "listen_url='postgresql://app@db/x' is not a connection string PostgreSQL reads: "
        'invalid percent-encoded token: "***"'
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["worker", "postgresql://app:Wk1Wk2@db.example/shop"],
            "Error: postgresql://app@db.example/shop is a database URL, but `nilo-job worker` "
            "needs the queue's kinds: pass module:attr naming your job.Jobs (or a function "
            "returning one), like myapp.jobs:jobs\n",
        ),
        (
            ["check", "postgresql://app@db.example/shop?password=Wk1Wk2"],
            "Error: postgresql://app@db.example/shop is a database URL, but `nilo-job check` "
            "needs the queue's kinds: pass module:attr naming your job.Jobs (or a function "
            "returning one), like myapp.jobs:jobs\n",
        ),
        (
            ["worker", "host=db.example user=app password=Wk1Wk2"],
            "Error: 'host=db.example user=app' is a libpq keyword string, which nilo-job does "
            "not take: pass module:attr naming your job.Jobs, like myapp.jobs:jobs\n",
        ),
        (
            ["stats", "host=db.example user=app password='Wk1 Wk2'"],
            "Error: 'host=db.example user=app' is a libpq keyword string, which nilo-job does "
            "not take: pass the database's URL, like postgresql://user@host/db, or module:attr "
            "naming your job.Jobs, like myapp.jobs:jobs\n",
        ),
        (
            ["stats", "postgresql+psycopg://app:Wk1Wk2@db.example/shop"],
            "Error: job.Table('postgresql+psycopg://app@db.example/shop'): this is a SQLAlchemy "
            "URL; job.Table takes libpq's, without the driver: "
            "'postgresql://app@db.example/shop'\n",
        ),
        (
            ["dead", "postgresql://app:Wk1 Wk2@db.example/shop"],
            "Error: job.Table('postgresql://app@db.example/shop') is not a connection string "
            'PostgreSQL reads: unexpected spaces found in "***", use percent-encoded spaces '
            "(%20) instead\n",
        ),
    ],
    ids=["worker", "check", "worker keywords", "stats keywords", "stats sqlalchemy", "dead"],
)
def test_the_command_line_names_a_target_without_its_password(args: list[str], said: str) -> None:
    printed = nilo_job(*args)
    assert printed == said
    assert_hidden(printed, "Wk1 Wk2")


# ------------------------------------------------------------------------- the function itself


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("postgresql://app:p%40ss@db:5432/shop", "postgresql://app@db:5432/shop"),
        (
            "postgresql://app:a:b@db/shop?sslmode=require",
            "postgresql://app@db/shop?sslmode=require",
        ),
        ("postgresql://app:p@ss@db/shop", "postgresql://app@db/shop"),  # a raw '@': all hidden
        ("postgresql://app:a?b@db/shop", "postgresql://app@db/shop"),
        ("postgresql://app:pa/ss@db/shop", "postgresql://app@db/shop"),
        (
            "postgresql://app@db/shop?sslpassword=x&passfile=/p&sslkey=/k.pem&password=y",
            "postgresql://app@db/shop?sslkey=/k.pem",
        ),
        ("postgresql:///shop?host=/run/pg&password=y", "postgresql:///shop?host=/run/pg"),
        ("host=db password='a b' dbname=shop", "host=db dbname=shop"),
        ("host=db password=a b dbname=shop", "host=db …"),  # libpq cannot read the rest
        ("host=db passfile=/p sslpassword=q", "host=db"),
        ("sqlite:///app.db", "sqlite:///app.db"),
        ("sqlite:////var/lib/app.db", "sqlite:////var/lib/app.db"),
        ("app:secret@db/shop", "app@db/shop"),
        ("myapp.jobs:jobs", "myapp.jobs:jobs"),
    ],
)
def test_shown_keeps_the_user_and_drops_every_secret(target: str, expected: str) -> None:
    assert shown(target) == expected


MISREAD = (
    "cannot be read as meant: its user or password holds an '@' or a '/' that is not "
    "percent-encoded, so PostgreSQL would read a piece of the password as the host; "
    "percent-encode the user and the password (urllib.parse.quote(password, safe='') writes "
    "'@' as %40 and '/' as %2F)"
)


@pytest.mark.parametrize("secret", [RAW_AT.secret, "Rs1/Rs2", "Rt1@Rt2/Rt3"])
async def test_a_password_with_a_raw_at_or_slash_is_refused_saying_so_not_a_host_never_tried(
    secret: str,
) -> None:
    """libpq would take a piece of such a password for the host (`Rb2@127.0.0.1`) or the port,
    so a sentence naming the host of the URL as meant would label a host it never tried: the
    URL is refused at once, saying what went wrong, with no piece of the password."""
    url = f"postgresql://app:{secret}@127.0.0.1:5432/shop"
    with pytest.raises(job.Refusal) as refused:
        job.Table(url)
    assert str(refused.value) == f"job.Table('postgresql://app@127.0.0.1:5432/shop') {MISREAD}"
    printed = await asyncio.to_thread(nilo_job, "stats", url)
    assert printed == f"Error: job.Table('postgresql://app@127.0.0.1:5432/shop') {MISREAD}\n"
    with pytest.raises(job.Refusal) as listen:
        job.Table("postgresql://app@127.0.0.1:6432/shop", listen_url=url)
    assert str(listen.value) == f"listen_url='postgresql://app@127.0.0.1:5432/shop' {MISREAD}"
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(url, open=False)  # never opened
    with pytest.raises(job.Refusal) as pooled:
        job.Table(pool)
    assert str(pooled.value) == (
        "job.Table(a pool on 'postgresql://app@127.0.0.1:5432/shop'): its URL " + MISREAD
    )
    for said in (str(refused.value), printed, str(listen.value), str(pooled.value)):
        assert_hidden(said, secret)
    # Percent-encoded, the same password is read as meant.
    encoded = f"postgresql://app:{quote(secret, safe='')}@127.0.0.1:5432/shop"
    assert repr(job.Table(encoded)) == "job.Table('postgresql://app@127.0.0.1:5432/shop')"


def test_scrubbed_hides_each_quoted_piece_of_a_secret() -> None:
    raw_at = "postgresql://app:p@ssword@127.0.0.1:5432/shop"  # libpq: host "ssword@127.0.0.1"
    assert shown(raw_at, place=True) == "127.0.0.1:5432/shop"
    assert scrubbed("failed to resolve host 'ssword@127.0.0.1': [Errno -2]", raw_at) == (
        "failed to resolve host '***': [Errno -2]"
    )
    assert scrubbed('connection to server at "127.0.0.1", port 5432 failed', raw_at) == (
        'connection to server at "127.0.0.1", port 5432 failed'
    )


@dataclass
class Note:
    nilo_job = "note"

    n: int

    def run(self) -> None:
        pass


def test_a_url_given_as_a_queue_s_store_is_named_without_its_password() -> None:
    with pytest.raises(job.Refusal) as refused:
        job.Jobs(kinds=[Note], store="postgresql://app:Js1Js2@db.example/shop")  # type: ignore[arg-type]
    assert str(refused.value).startswith(
        "job.Jobs(store='postgresql://app@db.example/shop'): pass job.Table('sqlite:///app.db'), "
    )
    assert_hidden(str(refused.value), "Js1Js2")
