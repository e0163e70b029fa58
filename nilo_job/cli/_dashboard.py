"""`nilo-job dashboard module:attr`: the dashboard on its own, served by uvicorn.

The secret is read from an environment variable (`--secret-env`), never from the command line,
where `ps` would show it. The socket is bound before uvicorn starts, so the address printed is
the one listening, even for `--port 0`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import AsyncIterator

import click


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
    help="The environment variable holding the secret (16+ characters) that lets an operator "
    "retry, cancel, delete and pause. Unset or empty: the dashboard is read-only.",
)
@click.option("--title", default="nilo-job", show_default=True, help="The page's heading.")
@click.option("--payloads", is_flag=True, help="Show each row's payload (may be personal data).")
def dashboard_command(
    target: str, host: str, port: int, secret_env: str, title: str, payloads: bool
) -> None:
    """Serve the dashboard of the queue TARGET (module:attr) until SIGINT or SIGTERM."""
    try:
        import uvicorn
        from starlette.applications import Starlette
        from starlette.routing import Mount
    except ImportError as error:
        raise click.ClickException(
            f"the dashboard needs Starlette and uvicorn ({error}): "
            "pip install 'nilo-job[web]' uvicorn"
        ) from None

    from .._errors import Refusal
    from ..dashboard._app import dashboard_app
    from ._load import load

    jobs = load(target, command="dashboard")
    secret = os.environ.get(secret_env) or None
    try:
        board = dashboard_app(jobs, secret=secret, title=title, payloads=payloads)
    except Refusal as refusal:
        raise click.ClickException(f"${secret_env}: {refusal}") from None

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
    except OSError as error:
        sock.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {error}") from None
    with sock:
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        mode = f"log in with ${secret_env} to act on rows" if secret else "read-only"
        click.echo(f"nilo-job dashboard on http://{shown}:{bound}/ ({mode})", err=True)
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        # uvicorn stops on SIGINT/SIGTERM, then raises the signal again for the handler that was
        # there before it: this one, so that a stop asked for is a clean exit (status 0).
        previous = {signum: signal.signal(signum, _stopped) for signum in _STOP_SIGNALS}
        try:
            uvicorn.Server(config).run(sockets=[sock])
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _stopped(signum: int, frame: object) -> None:
    """The server has already stopped when this runs: nothing is left to do."""
