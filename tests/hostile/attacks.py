"""What a hostile client sends, byte for byte: raw WebSocket frames (a client is free to ignore what the handshake
negotiated), sessions that flood small messages, connections that never finish a request.

Raw sockets rather than a WebSocket library where the attack is a frame no library would send: a compressed frame
(``RSV1``) on a connection that declined compression, a header that declares a megabyte and sends a kilobyte, a
fragment never finished. The flooding sessions use the ``websockets`` client, as a real (if ill-behaved) client would.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from typing import Literal

from websockets.asyncio.client import connect

OP_TEXT, OP_BINARY, OP_CLOSE = 0x1, 0x2, 0x8
REALTIME_PATH = "/v1/tts/realtime"
BOMB_BYTES = 15 * 1024 * 1024
"""What one compressed bomb inflates to: just under uvicorn's default message limit (16 MiB), so that a server with
that default takes it whole."""

BombKind = Literal["deflate", "fragment", "oversize", "held"]
BOMB_KINDS: tuple[BombKind, ...] = ("deflate", "fragment", "oversize", "held")
"""``deflate``: a whole compressed message of :data:`BOMB_BYTES` zeros (about 15 KB on the wire); ``fragment``: the
same, its last fragment never sent; ``oversize``: a frame whose header declares 1 MiB, of which 1 KiB is sent;
``held``: an uncompressed fragment of 60 KiB (under the limit), never finished."""


@cache
def deflated(size: int) -> bytes:
    """``size`` zero bytes, compressed as permessage-deflate sends a message (RFC 7692: raw deflate, sync-flushed, its
    final four bytes left off)."""
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    data = compressor.compress(bytes(size)) + compressor.flush(zlib.Z_SYNC_FLUSH)
    return data[:-4]


def frame(payload: bytes, *, opcode: int = OP_BINARY, fin: bool = True, rsv1: bool = False, length: int | None = None) -> bytes:
    """One client frame (masked, as a client's must be); ``length`` declares another length than the payload's."""
    declared = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode])
    if declared < 126:
        head += bytes([0x80 | declared])
    elif declared < 65536:
        head += bytes([0x80 | 126]) + declared.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + declared.to_bytes(8, "big")
    key = os.urandom(4)
    repeated = (key * (len(payload) // 4 + 1))[: len(payload)]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(len(payload), "big")
    return head + key + masked


def bomb(kind: BombKind) -> bytes:
    if kind == "deflate":
        return frame(deflated(BOMB_BYTES), rsv1=True)
    if kind == "fragment":
        return frame(deflated(BOMB_BYTES), rsv1=True, fin=False)
    if kind == "oversize":
        return frame(bytes(1024), length=1024 * 1024)
    return frame(bytes(60 * 1024), fin=False)


@dataclass
class Socket:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    status: int
    headers: dict[str, str]

    def close(self) -> None:
        self.writer.close()


async def handshake(port: int, *, offer_deflate: bool = True, headers: dict[str, str] | None = None) -> Socket:
    """A WebSocket opening handshake on ``/v1/tts/realtime`` (offering permessage-deflate, as browsers and the common
    client libraries do); the answer's status and headers (names in lower case)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [
        f"GET {REALTIME_PATH} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}",
        "Sec-WebSocket-Version: 13",
    ]
    if offer_deflate:
        lines.append("Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits")
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    answer = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in head[1:] if line)}
    return Socket(reader, writer, int(head[0].split()[1]), answer)


async def close_code(reader: asyncio.StreamReader) -> int | None:
    """The code of the server's close frame, skipping what comes before it (an ``error`` event, a ping); None when the
    connection ends without one."""
    try:
        while True:
            first, second = await reader.readexactly(2)
            length = second & 0x7F
            if length == 126:
                length = int.from_bytes(await reader.readexactly(2), "big")
            elif length == 127:
                length = int.from_bytes(await reader.readexactly(8), "big")
            payload = await reader.readexactly(length)
            if first & 0x0F == OP_CLOSE:
                return int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


@dataclass
class Outcomes:
    """How the server answered a set of hostile connections: by what happened to each (``refused <status>`` at the
    handshake, ``closed <code>``, ``dropped`` without a close frame, ``held`` open at the end of the attack)."""

    counts: Counter[str] = field(default_factory=Counter)

    def add(self, outcome: str) -> None:
        self.counts[outcome] += 1

    def __str__(self) -> str:
        return ", ".join(f"{outcome}: {count}" for outcome, count in sorted(self.counts.items())) or "none"


async def bombs(port: int, count: int, hold_s: float, kinds: tuple[BombKind, ...] = BOMB_KINDS) -> Outcomes:
    """``count`` keyless connections, each sending one bomb (the kinds in turn) right after the handshake, then waiting
    up to ``hold_s`` for the server to close it."""
    outcomes = Outcomes()

    async def one(kind: BombKind) -> None:
        try:
            sock = await handshake(port)
        except (OSError, asyncio.IncompleteReadError) as exc:
            outcomes.add(f"{kind}: no handshake ({type(exc).__name__})")
            return
        if sock.status != 101:
            outcomes.add(f"{kind}: refused {sock.status}")
            sock.close()
            return
        try:
            sock.writer.write(bomb(kind))
            await sock.writer.drain()
        except ConnectionError:
            pass
        try:
            code = await asyncio.wait_for(close_code(sock.reader), hold_s)
        except TimeoutError:
            outcomes.add(f"{kind}: held")
        else:
            outcomes.add(f"{kind}: closed {code}" if code is not None else f"{kind}: dropped")
        sock.close()

    await asyncio.gather(*(one(kinds[n % len(kinds)]) for n in range(count)))
    return outcomes


@dataclass
class Flood:
    sent: int = 0
    outcome: Counter[str] = field(default_factory=Counter)

    def __str__(self) -> str:
        return f"{self.sent} messages sent; sessions " + ", ".join(f"{what}: {n}" for what, n in sorted(self.outcome.items()))


async def flooding_sessions(ws_url: str, keys: list[str], seconds: float) -> Flood:
    """A realtime session per key in ``keys`` (scope ``tts``), each sending the smallest message there is (an empty
    ``text``: it queues nothing) as fast as the server takes them for ``seconds``, never reading an answer."""
    flood = Flood()
    message = json.dumps({"type": "text", "text": ""})

    async def one(key: str) -> None:
        try:
            async with connect(ws_url, additional_headers={"Authorization": f"Bearer {key}"}, compression=None) as ws:
                await ws.send(json.dumps({"type": "session.start"}))
                until = time.monotonic() + seconds
                while time.monotonic() < until:
                    for _ in range(100):
                        await ws.send(message)
                    flood.sent += 100
                    await asyncio.sleep(0)  # a send that need not wait never yields: the other sessions get their turn
            flood.outcome["ended by the client"] += 1
        except Exception as exc:  # noqa: BLE001 - what the server did to the session is the outcome
            flood.outcome[f"ended by the server: {type(exc).__name__}: {str(exc)[:80]}"] += 1

    await asyncio.gather(*(one(key) for key in keys))
    return flood


async def churning_contexts(ws_url: str, keys: list[str], rounds: int) -> Counter[str]:
    """A realtime session per key in ``keys``, each opening and cancelling ``rounds`` contexts in a loop, then asking
    for ``rounds`` more at once and never closing them, reading every answer as it comes; then a ``cancel``. What the
    sessions were told, counted by event type (or error code), and how each ended."""
    told: Counter[str] = Counter()

    async def one(key: str) -> None:
        async with connect(ws_url, additional_headers={"Authorization": f"Bearer {key}"}, compression=None) as ws:
            await ws.send(json.dumps({"type": "session.start", "audio_transport": "json"}))

            async def send_all() -> None:
                for n in range(rounds):
                    await ws.send(json.dumps({"type": "context.start", "context_id": f"churn-{n}"}))
                    await ws.send(json.dumps({"type": "cancel", "context_id": f"churn-{n}"}))
                for n in range(rounds):
                    await ws.send(json.dumps({"type": "context.start", "context_id": f"held-{n}"}))
                await ws.send(json.dumps({"type": "cancel"}))

            sending = asyncio.ensure_future(send_all())
            async for message in ws:
                event = json.loads(message)
                told[event.get("code", event["type"])] += 1
            await sending
            told[f"closed {ws.close_code}"] += 1

    await asyncio.gather(*(one(key) for key in keys))
    return told


@dataclass
class Idle:
    opened: int = 0
    failed: int = 0
    closed_by_server: int = 0

    def __str__(self) -> str:
        return f"opened {self.opened}, failed to open {self.failed}, closed by the server {self.closed_by_server}"


async def idle_connections(port: int, count: int, hold_s: float, trickle: int = 0) -> Idle:
    """``count`` TCP connections that send nothing, and ``trickle`` more that send a request line, then one header byte
    a second; all held ``hold_s``. Counts those the server closed meanwhile."""
    idle = Idle()

    async def one(trickling: bool) -> None:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            idle.failed += 1
            return
        idle.opened += 1
        until = time.monotonic() + hold_s
        try:
            if trickling:
                writer.write(b"GET /healthz HTTP/1.1\r\nX-Trickle: ")
            while time.monotonic() < until:
                if trickling:
                    writer.write(b"a")
                    await writer.drain()
                with_left = max(0.0, until - time.monotonic())
                try:
                    if await asyncio.wait_for(reader.read(1), min(1.0, with_left)) == b"":
                        idle.closed_by_server += 1
                        return
                except TimeoutError:
                    continue
        except ConnectionError:
            idle.closed_by_server += 1
        finally:
            writer.close()

    await asyncio.gather(*(one(False) for _ in range(count)), *(one(True) for _ in range(trickle)))
    return idle
