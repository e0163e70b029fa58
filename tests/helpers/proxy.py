"""A TCP proxy of the tests' own between nilo-job and PostgreSQL, to make the faults real networks
make: a flow a NAT or a firewall forgot, a server that stops answering while TCP stays open, a
partition that heals.

It runs its own event loop in a thread, so tests of any kind (async, sync, with worker processes
connecting through it) can use it. Every byte goes through it, so a flow it holds is, for the
client, exactly a flow whose peer went silent: what the client sends is acknowledged (by the
proxy's kernel) and nothing ever comes back, and nothing is closed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable


class Proxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`target_port` until told otherwise.

    - `drop_open()`: every flow open now goes silent for good (a NAT that forgot them); new
      flows pass.
    - `pause()`: every flow, open or new, holds its bytes (a server that stopped answering, a
      partition); `resume()`: they pass again, held bytes first (the flows dropped for good
      stay silent).
    """

    def __init__(self, target_port: int = 5432) -> None:
        self.target_port = target_port
        self.port = 0
        self.flows = 0  # flows accepted so far
        self.listens = 0  # flows that sent LISTEN
        self.dropped: set[int] = set()
        self.paused = False
        self.loop = asyncio.new_event_loop()
        self.changed: asyncio.Event | None = None
        self.server: asyncio.base_events.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> Proxy:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    def url(self, pg_url: str) -> str:
        """`pg_url` (on 127.0.0.1 or localhost, port `target_port`) through the proxy."""
        for host in ("127.0.0.1", "localhost"):
            pg_url = pg_url.replace(f"@{host}:{self.target_port}/", f"@127.0.0.1:{self.port}/")
        assert f":{self.port}/" in pg_url, pg_url
        return pg_url

    async def _start(self) -> None:
        self.changed = asyncio.Event()
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    def _call(self, fn: Callable[[], None]) -> None:
        self.loop.call_soon_threadsafe(fn)

    def _tell(self) -> None:
        assert self.changed is not None
        self.changed.set()
        self.changed = asyncio.Event()

    def drop_open(self) -> None:
        def drop() -> None:
            self.dropped |= set(range(self.flows))

        asyncio.run_coroutine_threadsafe(_run(drop), self.loop).result(10)

    def pause(self) -> None:
        def pause() -> None:
            self.paused = True

        asyncio.run_coroutine_threadsafe(_run(pause), self.loop).result(10)

    def resume(self) -> None:
        def resume() -> None:
            self.paused = False
            self._tell()

        asyncio.run_coroutine_threadsafe(_run(resume), self.loop).result(10)

    def close(self) -> None:
        async def close() -> None:
            if self.server is not None:
                self.server.close()
            for writer in self.writers:
                writer.close()
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = self.flows
        self.flows += 1
        self.writers.append(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self.writers.append(up_writer)
        try:
            await asyncio.gather(
                self._pump(number, reader, up_writer, client=True),
                self._pump(number, up_reader, writer, client=False),
            )
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            up_writer.close()

    async def _pump(
        self,
        number: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        client: bool,
    ) -> None:
        while data := await reader.read(65_536):
            if client and b"LISTEN nilo_jobs" in data:
                self.listens += 1
            while number in self.dropped or self.paused:
                assert self.changed is not None
                await self.changed.wait()  # silent: nothing passes, nothing closes
            writer.write(data)
            await writer.drain()


async def _run(fn: Callable[[], None]) -> None:
    fn()
