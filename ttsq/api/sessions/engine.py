"""The session engine: one implementation of a realtime connection and its contexts, under every protocol that streams
text in and audio out over a WebSocket — ttsq's own (``/v1/tts/realtime``, :mod:`.ttsq_protocol`) and the others
built on it — each protocol a thin adapter that translates its messages into the engine's calls and the engine's
events into its frames.

The engine: :class:`Sessions` (the process's one, on ``app.state.sessions``) serves a WebSocket with an adapter
(:meth:`Sessions.serve`); a :class:`.connection.Connection` holds the socket's inbox, its inactivity timeout, its key
recheck, its stream slot and its contexts; a :class:`.context.Context` is one stream of text spoken in order (its
cuts, its chunks queued through the one submit path with ``first_chunk``, its pacing, its audio in order, its
cancellation, its timing). The fixes every protocol gets for nothing: a key in the handshake checked before the
socket is accepted, a bounded inbox with backpressure, memory bounded before any key is checked, the key rechecked in
every phase, Redis outages ridden out for ``LISTEN_OUTAGE_S``, shared jobs abandoned (never cancelled for others),
``no_worker`` (1013) when no worker is alive, per-caller and per-tenant stream slots, chunks paced by playback,
audio delivered gap-free (or an error), exact segment timing.

The adapter contract (:class:`Adapter`; docs/realtime.md, "Writing a protocol adapter"). One adapter object per
WebSocket, four methods:

* ``open(opening)``: the protocol's opening, from the handshake to a :class:`.connection.Connection`, with the
  :class:`Opening`'s steps in this order: :meth:`Opening.caller_before_accept` (a key in the handshake, refused with an
  HTTP status before the socket is accepted; :meth:`Opening.refuse` for the protocol's own refusals, e.g. an unknown
  voice in the URL), :meth:`Opening.accept`, at most one :meth:`Opening.first_message` (read within a limit, nothing
  else read before the caller is known), :meth:`Opening.authenticate` for a key that came in it,
  :meth:`Opening.voice` for the options' voice, and last :meth:`Opening.connect` (the stream slot). Then set the
  connection's :attr:`~.connection.Connection.defaults` where the protocol has a default context (the context
  ``None``, opened by its first text). Raise :class:`~.wire.ConnectionEnded` to end it with a reason.
* ``handle(connection, message)``: one client frame (a Starlette ``websocket.receive`` message, in order) translated
  into calls on the connection: :meth:`~.connection.Connection.open_context` (its
  :class:`~.events.ContextOptions`: a voice from ``connection.voice(name)``, an output format from the protocol's
  names, :mod:`ttsq.domain.output_formats`), ``add_text`` (an empty text is a keep-alive), ``flush`` (with a ``mark``:
  :class:`~.events.Flushed` once what it cut is spoken), ``close_context`` (finish speaking), ``cancel_context`` (stop
  now), ``keep_alive``, ``close`` (finish every context, then the end) and ``cancel`` (stop everything);
  :meth:`~.connection.Connection.refuse` answers a message the protocol cannot take (read it with
  :func:`.wire.read_frame`, whose :class:`ValueError` says why). Calls never raise for one bad message: an unknown
  context, a context over the limit, text for a closed context each come back as a :class:`~.events.Failure` event.
  Messages after ``close``/``cancel`` never reach ``handle``: the engine answers them (``closing``).
* ``render(event)``: one :mod:`.events` event as the frames that say it (none where the protocol has no word for
  it). Audio is :class:`~.events.Audio`, bytes in the context's output format; a context's events come in its own
  order; an ordered connection (``connect(ordered=True)``: audio frames that carry no id) sends one context's audio at a
  time in the order they were opened. Every context opened gets a :class:`~.events.ContextDone` (``cancelled`` or
  not), after which its id may be opened again.
* ``close_code(code)``: the WebSocket close code of an ending (``done``, ``timeout``, ``unauthorized``, ``no_worker``,
  ...: :data:`.ttsq_protocol.CLOSE_CODES` names them all), after ``render(Ended(...))``'s frames.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect

from ttsq.api.auth import Authenticator, Principal, Unauthorized, presented_key
from ttsq.api.service import NoWorker, TTSService
from ttsq.api.sessions.connection import Connection, resolve_voice
from ttsq.api.sessions.events import Ended, Event, RealtimeConfig
from ttsq.api.sessions.wire import REDIS_DOWN, ConnectionEnded, Disconnected, Frame, close, refuse
from ttsq.api.stream_slots import TooManyStreams
from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.voices import Voice
from ttsq.store.connection import STORE_ERRORS

__all__ = ["Adapter", "HandshakeRefused", "LiveCounts", "Opening", "Sessions"]

log = logging.getLogger("ttsq.api.realtime")


class Adapter(Protocol):
    """A protocol on the engine: its opening, its messages into calls, the engine's events into its frames."""

    async def open(self, opening: Opening) -> Connection: ...

    async def handle(self, connection: Connection, message: Mapping[str, Any]) -> None: ...

    def render(self, event: Event) -> Sequence[Frame]: ...

    def close_code(self, code: str) -> int: ...


class HandshakeRefused(Exception):
    """The handshake was answered with an HTTP status (:meth:`Opening.refuse`): there is no socket to close."""


class Opening:
    """A WebSocket before its connection: the steps every protocol's opening takes, in order (the module's docstring)."""

    def __init__(self, websocket: WebSocket, sessions: Sessions) -> None:
        self.websocket = websocket
        self.sessions = sessions
        self.config = sessions.config
        self.release: Callable[[], None] | None = None
        """Gives the connection's stream slot back (once it has one)."""

    @property
    def address(self) -> str:
        return self.websocket.client.host if self.websocket.client else "unknown"

    def handshake_key(self) -> str | None:
        """The key in the handshake's ``Authorization: Bearer`` or ``X-API-Key`` header, as ttsq's routes take it."""
        return presented_key(self.websocket.headers.get("authorization"), self.websocket.headers.get("x-api-key"))

    async def caller_before_accept(self, presented: str | None, *, required: bool = False) -> Principal | None:
        """The caller of ``presented``, checked before the socket is accepted: a key that is unknown, revoked or expired
        is refused with HTTP 401, one without the ``tts`` scope 403, Redis unreachable 503 (each
        :class:`HandshakeRefused`). None when there is no key and none is ``required`` (a later message may bring one);
        where one is required, no key is the anonymous caller, refused where keys are not optional."""
        if presented is None and not required:
            return None
        try:
            caller = await self.sessions.authenticator.principal(presented, self.address)
        except Unauthorized as exc:
            await self.refuse(401, str(exc))
        except STORE_ERRORS as exc:
            log.warning("realtime handshake: Redis unavailable: %s", exc)
            await self.refuse(503, REDIS_DOWN)
        if not caller.allows("tts"):
            await self.refuse(403, "this API key lacks the 'tts' scope needed here")
        return caller

    async def refuse(self, status: int, message: str) -> NoReturn:
        """Answer the handshake with ``status`` and ``{"detail": message}`` instead of accepting it."""
        await refuse(self.websocket, status, message, self.config.retry_after_s)
        raise HandshakeRefused(message)

    async def accept(self) -> None:
        await self.websocket.accept()

    async def first_message(self, timeout_s: float, why: str) -> dict[str, Any]:
        """The client's first message, read alone (nothing more is read before the caller is known); ``timeout`` with
        ``why`` when it does not come within ``timeout_s``."""
        try:
            first = dict(await asyncio.wait_for(self.websocket.receive(), timeout_s))
        except TimeoutError:
            raise ConnectionEnded("timeout", why) from None
        if first["type"] == "websocket.disconnect":
            raise Disconnected
        return first

    async def authenticate(self, presented: str | None) -> Principal:
        """The caller of a key that came after the handshake (or of none): ``unauthorized``/``forbidden`` endings."""
        try:
            caller = await self.sessions.authenticator.principal(presented, self.address)
        except Unauthorized as exc:
            raise ConnectionEnded("unauthorized", str(exc)) from None
        if not caller.allows("tts"):
            raise ConnectionEnded("forbidden", "this API key lacks the 'tts' scope needed here")
        return caller

    async def voice(self, name: str | None, caller: Principal) -> Voice | None:
        """The voice ``name`` among those ``caller`` sees (its tenant's and the global ones; OpenAI's names and blends
        too); :class:`ValueError` saying why not. Before the connection (a voice in the URL, refused with a status);
        a context's own voice later: :meth:`.connection.Connection.voice`."""
        return await resolve_voice(self.sessions.service, name, caller)

    def connect(self, caller: Principal, adapter: Adapter, *, idle_s: float | None = None, ordered: bool = False) -> Connection:
        """The connection, once it holds one of the process's stream slots (``MAX_STREAMS``, per key, per tenant:
        ``too_many_requests`` or ``unavailable`` past them). ``idle_s``: its inactivity timeout, at most
        ``REALTIME_IDLE_S`` (the adapter refuses more, or takes the server's); ``ordered``: its audio frames carry no
        context id."""
        sessions = self.sessions
        try:
            self.release = sessions.service.listening.open_session(caller)
        except TooManyStreams as exc:
            raise ConnectionEnded("too_many_requests" if exc.per_key else "unavailable", str(exc)) from None
        key = caller.key
        store = sessions.authenticator.store
        still_valid = (lambda: store.still_valid(key)) if key is not None else None
        connection = Connection(
            self.websocket,
            sessions.service,
            caller,
            self.config,
            sessions.clock,
            adapter,
            idle_s=idle_s,
            ordered=ordered,
            still_valid=still_valid,
        )
        log.info("realtime session %s opened by %s", connection.id, caller.subject)
        return connection


@dataclass(frozen=True)
class LiveCounts:
    """What the engine holds now: connections, their open contexts, their tasks (readers, senders, key watchers)."""

    connections: int
    contexts: int
    tasks: int


class Sessions:
    """The process's session engine: what every connection needs, and the connections it serves."""

    def __init__(
        self, service: TTSService, authenticator: Authenticator, config: RealtimeConfig, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.service = service
        self.authenticator = authenticator
        self.config = config
        self.clock = clock
        self.connections: set[Connection] = set()

    def counts(self) -> LiveCounts:
        live = list(self.connections)
        return LiveCounts(len(live), sum(len(c.contexts) for c in live), sum(c.tasks for c in live))

    async def serve(self, websocket: WebSocket, adapter: Adapter) -> None:
        """Serve one WebSocket with ``adapter``, from its handshake to its close; whatever ends it, its slot is given
        back, its unsent chunks abandoned, and a client that just left logs nothing above INFO."""
        opening = Opening(websocket, self)
        connection: Connection | None = None
        try:
            connection = await adapter.open(opening)
            self.connections.add(connection)
            await connection.run()
            await close(websocket, [], adapter.close_code("done"), "")
        except HandshakeRefused:
            pass
        except ConnectionEnded as exc:
            await self._end(websocket, adapter, exc.code, str(exc), exc.details)
        except (Disconnected, WebSocketDisconnect):
            pass
        except OSError:  # the client went away before the handshake's answer could be sent
            pass
        except NoWorker as exc:
            await self._end(websocket, adapter, NoWorker.code, str(exc))
        except STORE_ERRORS as exc:
            log.warning("realtime session: Redis unavailable: %s", exc)
            await self._end(websocket, adapter, "unavailable", REDIS_DOWN)
        except Exception:
            log.exception("realtime session failed")
            await self._end(websocket, adapter, "internal_error", "internal error")
        finally:
            if opening.release is not None:
                opening.release()
            if connection is not None:
                self.connections.discard(connection)
                segments = connection.segments + sum(len(c.segments) for c in connection.contexts.values())
                samples = connection.samples + sum(c.samples for c in connection.contexts.values())
                log.info("realtime session %s ended: %d chunks, %.2f s of audio", connection.id, segments, samples / SAMPLE_RATE)

    @staticmethod
    async def _end(websocket: WebSocket, adapter: Adapter, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        frames = list(adapter.render(Ended(code, message, details or {})))
        await close(websocket, frames, adapter.close_code(code), message)
