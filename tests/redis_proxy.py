"""A TCP proxy in front of a real redis-server that can lose a reply on its way back (fault injection for tests).

Redis runs the command; only its answer never reaches the client, exactly what a network that drops a
reply, or an event loop stalled past the socket timeout, looks like to redis-py: the client times out,
drops the connection, and (with retries) sends the same command again on a new one. Arm it with
:meth:`RedisProxy.lose_reply_to`: the next connection whose request contains a marker gets no more
replies, ever (the client gives that connection up).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass
class RedisProxy:
    upstream_port: int
    port: int = 0
    lost: list[bytes] = field(default_factory=list)
    """The request chunks whose replies were lost, in order."""
    losing: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once a request whose reply will be lost has gone through to Redis."""
    _armed: list[bytes] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def lose_reply_to(self, marker: bytes, times: int = 1) -> None:
        """The next ``times`` connections that send a request containing ``marker`` get no reply to it (nor to anything after)."""
        self._armed.extend([marker] * times)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, black_hole: asyncio.Event) -> None:
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while data := await reader.read(65536):
                if not black_hole.is_set():
                    writer.write(data)
                    await writer.drain()
        with contextlib.suppress(ConnectionError, RuntimeError):
            writer.close()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, black_hole: asyncio.Event) -> None:
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while data := await reader.read(65536):
                marker = next((m for m in self._armed if m in data), None)
                if marker is not None and not black_hole.is_set():
                    self._armed.remove(marker)
                    self.lost.append(data)
                    black_hole.set()
                    self.losing.set()
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(ConnectionError, RuntimeError):
            writer.close()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        black_hole = asyncio.Event()
        await asyncio.gather(
            self._requests(client_reader, upstream_writer, black_hole),
            self._pipe(upstream_reader, client_writer, black_hole),
        )


@asynccontextmanager
async def redis_proxy(upstream_port: int) -> AsyncIterator[RedisProxy]:
    """A proxy to the redis-server on ``upstream_port``, listening on a free loopback port, for the block's duration."""
    proxy = RedisProxy(upstream_port)
    server = await asyncio.start_server(proxy._serve, "127.0.0.1", 0)
    proxy.port = server.sockets[0].getsockname()[1]
    try:
        yield proxy
    finally:
        server.close()
        await server.wait_closed()
