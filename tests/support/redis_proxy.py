"""A TCP proxy in front of a real redis-server that can lose a reply on its way back (fault injection for tests).

Redis runs the command; only its answer never reaches the client, exactly what a network that drops a
reply, or an event loop stalled past the socket timeout, looks like to redis-py: the client times out,
drops the connection, and (with retries) sends the same command again on a new one. Arm it with
:meth:`RedisProxy.lose_reply_to`: the next connection whose request contains a marker gets no more
replies, ever (the client gives that connection up). :meth:`RedisProxy.answer` is the other fault: a request
never reaches Redis, and the proxy answers it itself (an error reply such as ``-OOM …``, or one the client cannot
make sense of) — what a Redis refusing a write, or a broken script, looks like to the client.
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
    answered: list[bytes] = field(default_factory=list)
    """The requests the proxy answered itself (:meth:`answer`), in order."""
    _armed: list[bytes] = field(default_factory=list)
    _answers: dict[bytes, tuple[bytes, int | None]] = field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def lose_reply_to(self, marker: bytes, times: int = 1) -> None:
        """The next ``times`` connections that send a request containing ``marker`` get no reply to it (nor to anything after)."""
        self._armed.extend([marker] * times)

    def answer(self, marker: bytes, reply: bytes, times: int | None = None) -> None:
        """Requests containing ``marker`` are not sent to Redis: the proxy answers each with ``reply`` (raw RESP, e.g.
        ``b"-OOM command not allowed\\r\\n"``), ``times`` times or until :meth:`stop_answering`. Written at once, so
        a connection must not pipeline other requests ahead of it (redis-py sends a script call alone)."""
        self._answers[marker] = (reply, times)

    def stop_answering(self, marker: bytes) -> None:
        self._answers.pop(marker, None)

    def _answer_to(self, request: bytes) -> bytes | None:
        marker = next((m for m in self._answers if m in request), None)
        if marker is None:
            return None
        reply, times = self._answers[marker]
        if times is not None:
            if times <= 1:
                del self._answers[marker]
            else:
                self._answers[marker] = (reply, times - 1)
        self.answered.append(request)
        return reply

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, black_hole: asyncio.Event) -> None:
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while data := await reader.read(65536):
                if not black_hole.is_set():
                    writer.write(data)
                    await writer.drain()
        with contextlib.suppress(ConnectionError, RuntimeError):
            writer.close()

    async def _requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client: asyncio.StreamWriter, black_hole: asyncio.Event
    ) -> None:
        buffer = b""
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while data := await reader.read(65536):
                buffer += data
                while (end := _request_end(buffer)) is not None:
                    request, buffer = buffer[:end], buffer[end:]
                    reply = None if black_hole.is_set() else self._answer_to(request)
                    if reply is not None:
                        client.write(reply)
                        await client.drain()
                        continue
                    marker = next((m for m in self._armed if m in request), None)
                    if marker is not None and not black_hole.is_set():
                        self._armed.remove(marker)
                        self.lost.append(request)
                        black_hole.set()
                        self.losing.set()
                    writer.write(request)
                    await writer.drain()
        with contextlib.suppress(ConnectionError, RuntimeError):
            writer.close()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        black_hole = asyncio.Event()
        await asyncio.gather(
            self._requests(client_reader, upstream_writer, client_writer, black_hole),
            self._pipe(upstream_reader, client_writer, black_hole),
        )


def _request_end(buffer: bytes) -> int | None:
    """Where the first request in ``buffer`` ends — a RESP array of bulk strings, as clients send commands — or None
    while it has not all arrived (anything else, an inline command, is taken as it came)."""
    if not buffer:
        return None
    if not buffer.startswith(b"*"):
        end = buffer.find(b"\r\n")
        return None if end < 0 else end + 2
    end = buffer.find(b"\r\n")
    if end < 0:
        return None
    position = end + 2
    for _ in range(int(buffer[1:end])):
        end = buffer.find(b"\r\n", position)
        if end < 0:
            return None
        position = end + 2 + int(buffer[position + 1 : end]) + 2
        if position > len(buffer):
            return None
    return position


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
