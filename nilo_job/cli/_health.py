"""`nilo-job worker --health-port PORT`: the probes an orchestrator asks, served over HTTP by
the worker's own event loop, with asyncio's streams (no dependency beyond the worker's own).

- `/livez`: 200 "ok", answered by the event loop that runs the workers; a loop that is blocked
  (a sync call inside an async run, say) does not answer, which is the liveness signal.
- `/readyz`: 200 "ready" when the store answers (`jobs.ready()`) and serve's workers are running;
  503 with a one-line reason otherwise (the store does not answer, serve has not started yet,
  is stopping, or has ended).
- `/metrics`: the Prometheus text of `nilo_job.metrics.Metrics` when prometheus-client is
  installed; 404 with a sentence otherwise.

Each request gets one response and the connection is closed (HTTP/1.1, `Connection: close`).
Only GET and HEAD are answered; a request line or headers that do not arrive within `READ_S`,
or are longer than `LINE_MAX`, are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import Awaitable, Callable

from .._queue.jobs import Jobs

log = logging.getLogger("nilo_job")

READ_S = 5.0
"""How long a probe may take to send its request line and headers, in seconds."""
LINE_MAX = 8_192
"""The longest request line or header line read, in bytes."""
HEADERS_MAX = 100
"""The most header lines read from one request."""
MARGIN_S = 1.0
"""How much longer than the store's own bound `/readyz` waits for it, in seconds."""

_TEXT = "text/plain; charset=utf-8"
_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


class Health:
    """The probes of one worker process.

    Args:
        jobs: the queue the process serves.
        bound_s: the store's own bound on one call, in seconds; `/readyz` waits a second
            more (`MARGIN_S`) before it says the store did not answer, so that the store's own
            answer comes first.
    """

    def __init__(self, jobs: Jobs, bound_s: float) -> None:
        self.jobs = jobs
        self.bound_s = bound_s
        self.exposition: Callable[[], Awaitable[tuple[bytes, str]]] | None = None
        self.no_metrics = "prometheus-client is not installed: pip install 'nilo-job[metrics]'"
        self.server: asyncio.Server | None = None
        self.answering: set[asyncio.Task[object]] = set()  # requests being answered

    def measure(self) -> None:
        """Build the queue's `Metrics` for `/metrics`, when prometheus-client is installed; call
        it before serve starts. A queue its module measures already keeps its own: `/metrics`
        then says where to find them."""
        try:
            metrics = importlib.import_module("nilo_job.metrics")
        except ImportError:
            return
        try:
            self.exposition = metrics.Metrics(self.jobs).exposition
        except Exception as error:  # a Metrics of the module's own (Refusal)
            self.no_metrics = f"/metrics is not served here: {error}"

    async def start(self, host: str, port: int) -> str:
        """Listen on `host`:`port` (0: a free port); answers the address, as `host:port`
        (`[host]:port` for IPv6).

        Raises:
            OSError: the address cannot be listened on (in use, not this machine's).
        """
        self.server = await asyncio.start_server(self._answer, host, port, limit=LINE_MAX)
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    async def close(self) -> None:
        """Stop listening; requests being answered (a `/readyz` waiting for a silent store) are
        cut short, so that they never hold up the worker's exit."""
        if self.server is not None:
            self.server.close()
            for task in list(self.answering):
                task.cancel()
            await self.server.wait_closed()

    async def ready(self) -> str | None:
        """Why this process is not ready, in a sentence; None when it is."""
        not_serving = self.jobs._server.not_serving()
        if not_serving is not None:
            return not_serving
        try:
            answered = await asyncio.wait_for(self.jobs.ready(), self.bound_s + MARGIN_S)
        except TimeoutError:
            return f"the store did not answer within {self.bound_s + MARGIN_S:g} s"
        if not answered:
            return "the store cannot be reached or has no usable table"
        return self.jobs._server.not_serving()  # serve may have begun to stop meanwhile

    async def respond(self, method: str, path: str) -> tuple[int, bytes, str]:
        """The status, body and content type for `method` (GET or HEAD) of `path`."""
        if path == "/livez":
            return 200, b"ok\n", _TEXT
        if path == "/readyz":
            reason = await self.ready()
            if reason is None:
                return 200, b"ready\n", _TEXT
            return 503, f"not ready: {reason}\n".encode(), _TEXT
        if path == "/metrics":
            if self.exposition is None:
                return 404, f"{self.no_metrics}\n".encode(), _TEXT
            body, content_type = await self.exposition()
            return 200, body, content_type
        return 404, b"not found: the paths are /livez, /readyz and /metrics\n", _TEXT

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.answering.add(task)
        try:
            request = await asyncio.wait_for(_read_request(reader), READ_S)
            if request is None:
                return
            method, path = request
            if method not in ("GET", "HEAD"):
                status, body, content_type = 405, b"only GET and HEAD are answered\n", _TEXT
            else:
                status, body, content_type = await self.respond(method, path)
            head = (
                f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n"
                f"Content-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\n"
                "Cache-Control: no-store\r\n"
                "Connection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else body))
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass  # a probe that went away or sent no request: nothing to answer
        except Exception:
            log.exception("answering a health probe failed")
        finally:
            self.answering.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str] | None:
    """The method and path (without its query) of one request, its headers read and dropped;
    None for a line that is not a request.

    Raises:
        ValueError: a line longer than the reader's limit (`LINE_MAX`).
    """
    line = (await reader.readline()).decode("latin-1").strip()
    words = line.split()
    for _ in range(HEADERS_MAX):
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
    if len(words) != 3 or not words[2].startswith("HTTP/"):
        return None
    return words[0], words[1].split("?", 1)[0]
