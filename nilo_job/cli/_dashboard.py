"""`nilo-job dashboard module:attr`: the dashboard on its own, served by uvicorn.

The secret is read from an environment variable (`--secret-env`), never from the command line,
where `ps` would show it. The socket is bound before uvicorn starts, so the address printed is
the one listening, even for `--port 0`; the line also says who may read. Every request's `Host`
must be the address listened on, `localhost`, `127.0.0.1`, `::1` or a name given with
`--allow-host`: a page whose DNS name was rebound to this address is refused (400).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import AsyncIterator

import click

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
"""The host names every dashboard the command serves answers to, beside its own address."""


def _host(_ctx: click.Context, _param: click.Parameter, names: tuple[str, ...]) -> list[str]:
    """The names of `--allow-host`, as the Host check compares them."""
    from ..dashboard._guard import host_name, host_problem

    checked = []
    for name in names:
        bare = f"[{name}]" if name.count(":") > 1 and not name.startswith("[") else name
        problem = host_problem(name)
        found = host_name(bare) if problem is None else None
        if found is None or found != bare.strip("[]").lower():
            raise click.BadParameter(
                f"{name!r} is not a host name{f': {problem}' if problem else ''}; give one name "
                "or address, without a port (ops.example.com, 10.0.0.5, ::1)"
            )
        checked.append(found)
    return checked


@click.command("dashboard")
@click.argument("target")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65_535),
    default=8_900,
    show_default=True,
    help="Port to listen on; 0 picks a free one (the address is printed).",
)
@click.option(
    "--secret-env",
    default="NILO_DASHBOARD_SECRET",
    show_default=True,
    help="The environment variable holding the secret (16+ characters). Set: every page needs "
    "a login with it, which also lets the operator retry, cancel, delete and pause. Unset or "
    "empty: read-only, and only for clients on this machine (loopback).",
)
@click.option(
    "--public-reads",
    is_flag=True,
    help="Let anyone who can reach the dashboard read every page without logging in "
    "(actions still need the secret).",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    callback=_host,
    metavar="NAME",
    help="A further host name the Host header may name (repeatable); beside the address "
    "listened on, localhost, 127.0.0.1 and ::1. Any other Host is refused with 400.",
)
@click.option("--title", default="nilo-job", show_default=True, help="The page's heading.")
@click.option(
    "--payloads",
    is_flag=True,
    help="Show what rows carry of users' data: payloads, results, failure messages and "
    "tracebacks, unique keys and workers (may be personal data).",
)
def dashboard_command(
    target: str,
    host: str,
    port: int,
    secret_env: str,
    public_reads: bool,
    allow_hosts: list[str],
    title: str,
    payloads: bool,
) -> None:
    """Serve the dashboard of the queue TARGET (module:attr) until SIGINT or SIGTERM.

    Who may read: with the secret set, those who log in with it; with --public-reads, anyone
    who can reach it; with neither, clients on this machine only. The line printed at the
    start says which.
    """
    try:
        import uvicorn
        from starlette.applications import Starlette
        from starlette.routing import Mount
    except ImportError as error:
        raise click.ClickException(
            f"the dashboard needs Starlette and uvicorn ({error}): "
            "pip install 'nilo-job[web]' uvicorn"
        ) from None

    from .._base.errors import Refusal
    from ..dashboard._app import dashboard_app
    from ..dashboard._guard import host_problem
    from ..dashboard._session import MIN_SECRET_CHARS
    from ._load import load

    jobs = load(target, command="dashboard")
    secret = os.environ.get(secret_env) or None
    if secret is not None and len(secret) < MIN_SECRET_CHARS:
        raise click.ClickException(
            f"${secret_env} is {len(secret)} characters; use at least {MIN_SECRET_CHARS} "
            f"(`export {secret_env}=$(python -c 'import secrets; print(secrets.token_urlsafe())')`"
            " makes one), or unset it for a read-only dashboard for this machine's clients only"
        )
    bound = host.strip("[]").lower()
    if (problem := host_problem(bound)) is not None or bound.count(":") == 1:
        raise click.BadParameter(
            f"{host!r} is not an address to listen on{f': {problem}' if problem else ''}; give "
            "one name or address, without a port (127.0.0.1, 0.0.0.0, ::1)",
            param_hint="'--host'",
        )
    hosts = sorted({bound, *LOCAL_NAMES, *allow_hosts})
    try:
        board = dashboard_app(
            jobs,
            secret=secret,
            title=title,
            payloads=payloads,
            public_reads=public_reads,
            hosts=hosts,
        )
    except Refusal as refusal:
        raise click.ClickException(str(refusal)) from None

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await jobs.store.close()

    app = Starlette(routes=[Mount("", app=board)], lifespan=lifespan)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2_048)  # listening now: a request sent once the line is printed waits
    except OSError as error:
        sock.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {error}") from None
    with sock:
        port_bound = sock.getsockname()[1]
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        click.echo(
            f"nilo-job dashboard on http://{shown}:{port_bound}/ "
            f"({_readers(secret is not None, public_reads, secret_env)})",
            err=True,
        )
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        # uvicorn stops on SIGINT/SIGTERM, then raises the signal again for the handler that was
        # there before it: this one, so that a stop asked for is a clean exit (status 0).
        previous = {signum: signal.signal(signum, _stopped) for signum in _STOP_SIGNALS}
        try:
            uvicorn.Server(config).run(sockets=[sock])
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def _readers(secret: bool, public_reads: bool, secret_env: str) -> str:
    """Who may read and who may act, in the words of the line printed at the start."""
    if secret and public_reads:
        return f"anyone who can reach it reads; actions need a login with ${secret_env}"
    if secret:
        return f"pages and actions need a login with ${secret_env}"
    if public_reads:
        return "read-only, for anyone who can reach it"
    return f"read-only, for clients on this machine only; set ${secret_env} to let others log in"


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _stopped(signum: int, frame: object) -> None:
    """The server has already stopped when this runs: nothing is left to do."""
