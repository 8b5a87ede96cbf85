"""One realtime connection: one WebSocket, its client's messages read into a bounded inbox, several contexts spoken on
it, and everything that may end it.

What a client may cost is bounded whatever it sends: its messages wait in an inbox of ``REALTIME_INBOX_MESSAGES``, and
while it is full the socket is not read at all, so TCP holds the client back (backpressure) instead of the API holding
what it sent; it holds at most ``REALTIME_MAX_CONTEXTS`` contexts at once and sends at most ``REALTIME_MAX_CHARS`` of
text in all; it lasts at most ``REALTIME_MAX_S``. A connection whose client has sent nothing for its inactivity timeout
(``REALTIME_IDLE_S``, or less where its client asked for less) while none of its audio is pending ends, and says what
it never spoke. Its key (where it has one) is asked about again every ``STREAM_KEY_RECHECK_S`` for as long as it
lasts; once revoked or expired, nothing more is queued or sent. A Redis outage while it submits, abandons or rechecks
its key is a pause of up to ``LISTEN_OUTAGE_S`` (:mod:`.outage`), not an end.

Where a protocol's audio frames carry no context id (ttsq's binary frames), the connection is *ordered*: one context
sends its audio at a time, in the order the contexts were opened, the next once the one before it is over; elsewhere
every context sends as its audio comes, each event tagged with its context.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from asyncio import FIRST_COMPLETED as FIRST
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from starlette.websockets import WebSocket

from ttsq.api.auth import Principal
from ttsq.api.service import InvalidInput, TTSService
from ttsq.api.sessions.context import Context
from ttsq.api.sessions.events import (
    ConnectionDone,
    ContextId,
    ContextOptions,
    ContextStarted,
    Event,
    Failure,
    Flushed,
    Opened,
    RealtimeConfig,
)
from ttsq.api.sessions.outage import ride_out
from ttsq.api.sessions.wire import ConnectionEnded, Disconnected, Inbox, receive_into, transmit
from ttsq.domain.voices import OPENAI_VOICES, Voice, VoiceError

if TYPE_CHECKING:
    from ttsq.api.sessions.engine import Adapter

__all__ = ["Connection"]

log = logging.getLogger("ttsq.api.realtime")
T = TypeVar("T")

MAX_ID_SHOWN = 64
"""How much of a context id an error quotes."""


async def resolve_voice(service: TTSService, name: str | None, caller: Principal) -> Voice | None:
    """The voice ``name`` among those ``caller`` sees (its tenant's and the global ones; OpenAI's names and blends
    too); :class:`ValueError` saying why not."""
    if name is None:
        return None
    try:
        return await service.voicing.resolve_voice(OPENAI_VOICES.get(name, name), caller)
    except InvalidInput as exc:
        raise ValueError(f"{exc.field}: {exc.message}") from None
    except VoiceError as exc:
        raise ValueError(str(exc)) from None


def quiet(task: asyncio.Task[Any]) -> None:
    """Mark what ``task`` raised as seen: the connection surfaces it while it runs (:meth:`Guards.next`), and once
    it is over nothing is left to tell (an ERROR "never retrieved" for a client that just left helps no one)."""
    if not task.cancelled():
        task.exception()


def timed_out(contexts: Mapping[ContextId, Context], why: str) -> ConnectionEnded:
    """A timeout's ending, which says what of the text was never spoken, so nothing is dropped without a word: the
    default context's (``unspoken``) and each named context's (``unspoken_contexts``)."""
    default = contexts.get(None)
    unspoken = default.unspoken() if default is not None else ""
    named = {key: text for key, context in contexts.items() if key is not None and (text := context.unspoken())}
    total = len(unspoken) + sum(len(text) for text in named.values())
    if not total:
        return ConnectionEnded("timeout", why)
    details: dict[str, Any] = {"unspoken": unspoken} if unspoken else {}
    if named:
        details["unspoken_contexts"] = named
    return ConnectionEnded("timeout", f"{why}; {total} characters were not spoken (unspoken)", **details)


class Guards:
    """The tasks a connection runs beside its message loop (each context's audio sender, the key's watcher), and the
    loop's wait on them: what one raises ends the connection; one that ends well (a context over) is let go of."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self.tasks)

    def start(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        task.add_done_callback(quiet)
        self.tasks.add(task)
        return task

    async def next(self, inbox: Inbox, timeout_s: float) -> Mapping[str, Any] | None:
        """The client's next message; None when ``timeout_s`` passes first, or a guard ends (a context is over). What
        a guard raised (a revoked key, a failed submit, Redis gone for good) is raised here."""
        self.reap()
        getting = asyncio.ensure_future(inbox.get())
        done, _ = await asyncio.wait({getting, *self.tasks}, timeout=max(0.0, timeout_s), return_when=FIRST)
        if getting in done:
            return getting.result()
        getting.cancel()  # a message it was handed meanwhile stays in the inbox
        self.reap()
        return None

    def reap(self) -> None:
        """Let go of the guards that have ended (a context over, a cancelled context's sender); raise what one raised."""
        for task in [task for task in self.tasks if task.done()]:
            self.tasks.discard(task)
            if not task.cancelled():
                task.result()

    def cancel(self) -> None:
        for task in self.tasks:
            task.cancel()


class Connection:
    """One WebSocket's realtime service, driven by its protocol's adapter through the calls below (open a context, add
    text, flush, close or cancel a context, keep alive, close or cancel the connection), speaking back in events
    (:mod:`.events`) that the adapter renders as its protocol's frames."""

    def __init__(
        self,
        websocket: WebSocket,
        service: TTSService,
        caller: Principal,
        config: RealtimeConfig,
        clock: Callable[[], float],
        adapter: Adapter,
        *,
        idle_s: float | None = None,
        ordered: bool = False,
        still_valid: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self.websocket = websocket
        self.service = service
        self.caller = caller
        self.config = config
        self.clock = clock
        self.adapter = adapter
        self.idle_s = min(idle_s or config.idle_s, config.idle_s)
        self.ordered = ordered
        self.still_valid = still_valid
        """None for a keyless caller; else whether its key is still neither revoked nor expired."""
        self.id = uuid.uuid4().hex
        self.defaults: ContextOptions | None = None
        """The default context's options: where set, text for the default context (None) opens it."""
        self.contexts: dict[ContextId, Context] = {}
        """The open ones, by id."""
        self.order: list[Context] = []
        """The open ones in the order they were opened (an ordered connection's turns)."""
        self.inbox: Inbox = asyncio.Queue(maxsize=config.inbox_messages)
        self.receiver: asyncio.Task[None] | None = None
        self.guards = Guards()
        self.closing = False
        self.cancelled = False
        self.revoked = False
        """The key was found revoked or expired: nothing more is queued or sent."""
        self.chars = 0
        self.segments = 0
        """Chunks queued by the contexts that are over."""
        self.samples = 0
        """Audio sent by the contexts that are over."""
        self.began = clock()
        self.active = self.began
        """When the client last sent something or was last sent a chunk's end: the inactivity timeout counts from here."""
        self._send_lock = asyncio.Lock()

    # ---- the calls a protocol adapter makes ------------------------------------------------------------------------

    async def open_context(self, context_id: ContextId, options: ContextOptions | None = None) -> Context | None:
        """Open a context (``options``: the connection's :attr:`defaults` where None); a :class:`Failure` and None when
        it cannot be (its id is open already, the connection holds ``REALTIME_MAX_CONTEXTS``)."""
        shown = "the default context" if context_id is None else f"context {context_id[:MAX_ID_SHOWN]!r}"
        if context_id in self.contexts:
            await self.refuse("context_exists", f"{shown} is open already: close or cancel it first", context_id)
            return None
        if len(self.contexts) >= self.config.max_contexts:
            await self.refuse(
                "too_many_contexts",
                f"a session holds at most {self.config.max_contexts} contexts at once (REALTIME_MAX_CONTEXTS): "
                "close or cancel one first",
                context_id,
            )
            return None
        context = Context(self, context_id, options or self.defaults or ContextOptions())
        self.contexts[context_id] = context
        if not self.ordered or not self.order:
            context.turn.set()
        if self.ordered:
            self.order.append(context)
        await self.emit(ContextStarted(context_id))
        return context

    async def add_text(self, context_id: ContextId, text: str, whole: bool = False) -> None:
        """More text for a context (an empty one is a keep-alive, nothing more); ``whole``: the client sends whole
        sentences, so one that ends this text is spoken now (:meth:`ttsq.domain.text_stream.TextStream.feed`)."""
        if self.chars + len(text) > self.config.max_chars:
            raise ConnectionEnded(
                "too_much_text", f"a session may send at most {self.config.max_chars} characters (REALTIME_MAX_CHARS)"
            )
        context = await self._open(context_id, create=bool(text))
        if context is None or not text:
            return
        if context.closed:
            await self.refuse("context_closed", "this context is closed: no more text", context_id)
            return
        self.chars += len(text)
        await context.feed(text, whole)

    async def flush(self, context_id: ContextId, mark: object = None) -> None:
        """Speak what a context has received now, sentence or not; with a ``mark`` (any value but None),
        :class:`~.events.Flushed` once every chunk cut so far is resolved."""
        context = await self._open(context_id)
        if context is not None:
            await context.flush(mark)
        elif context_id is None and mark is not None:  # a default context with nothing received: nothing to wait for
            await self.emit(Flushed(None, mark))

    async def close_context(self, context_id: ContextId) -> None:
        """No more text for a context: the rest is spoken, then :class:`ContextDone`."""
        if (context := await self._open(context_id)) is not None and not context.closed:
            await context.finish()

    async def cancel_context(self, context_id: ContextId) -> None:
        """Stop a context now: nothing more of it is queued or sent, its unsent chunks are abandoned, then
        :class:`ContextDone` (``cancelled``)."""
        if (context := await self._open(context_id)) is not None:
            await context.cancel()

    def keep_alive(self) -> None:
        """Nothing but that the client is there: every message restarts the inactivity timeout, this one too."""

    async def close(self) -> None:
        """No more text on any context: the rest is spoken, then :class:`ConnectionDone` and the close (1000)."""
        self.closing = True
        for context in list(self.contexts.values()):
            if not context.closed:
                await context.finish()

    async def cancel(self) -> None:
        """Stop every context now, then :class:`ConnectionDone` (``cancelled``) and the close (1000)."""
        self.closing = self.cancelled = True
        for context in list(self.contexts.values()):
            await context.cancel()

    async def voice(self, name: str | None) -> Voice | None:
        """The voice ``name`` among those the caller sees (a context's own); :class:`ValueError` saying why not."""
        return await resolve_voice(self.service, name, self.caller)

    async def refuse(self, code: str, message: str, context_id: ContextId = None, **details: Any) -> None:
        """A message (or a context) refused: a :class:`Failure`, and the connection goes on."""
        await self.emit(Failure(context_id, code, message, details=details))

    async def _open(self, context_id: ContextId, create: bool = False) -> Context | None:
        """The open context ``context_id``; the default one opened where ``create`` (and it has options). An unknown
        named context is refused; the default one that is not open is nothing to act on."""
        context = self.contexts.get(context_id)
        if context is not None:
            return context
        if context_id is None:
            return await self.open_context(None) if create and self.defaults is not None else None
        await self.refuse("unknown_context", f"no context {context_id[:MAX_ID_SHOWN]!r} is open: start it first", context_id)
        return None

    # ---- what a context asks of its connection (context.Host) --------------------------------------------------------

    async def emit(self, event: Event) -> None:
        """Say ``event`` to the client, as its protocol renders it."""
        self.check_allowed()
        frames = self.adapter.render(event)
        if not frames:
            return
        async with self._send_lock:
            for frame in frames:
                send = self.websocket.send_bytes(frame) if isinstance(frame, bytes) else self.websocket.send_text(frame)
                await transmit(self.websocket, send)

    def check_allowed(self) -> None:
        if self.revoked:
            raise ConnectionEnded("unauthorized", "the API key was revoked or has expired")

    def touch(self) -> None:
        self.active = self.clock()

    async def ride_out(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        return await ride_out(call, what, self.id, self.config.outage_s, self.clock)

    def guard(self, work: Awaitable[None]) -> asyncio.Task[None]:
        return self.guards.start(work)

    def context_over(self, context: Context) -> None:
        """``context`` is over: it leaves the connection (its id may be opened again), and on an ordered connection the
        next context's turn comes."""
        if self.contexts.get(context.id) is context:
            del self.contexts[context.id]
            self.segments += len(context.segments)
            self.samples += context.samples
        if context in self.order:
            self.order.remove(context)
            if self.order:
                self.order[0].turn.set()

    # ---- running ------------------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the connection until it is closed or cancelled and every context is over (:class:`ConnectionDone`),
        or something ends it first (:class:`ConnectionEnded`, :class:`Disconnected`...)."""
        self.receiver = asyncio.create_task(receive_into(self.websocket, self.inbox))
        self.receiver.add_done_callback(quiet)
        try:
            await self.emit(Opened(self.id, self.idle_s))
            if self.still_valid is not None:
                self.guard(self._watch_key(self.still_valid))
            while not (self.closing and not self.contexts):
                message = await self.guards.next(self.inbox, self._deadline() - self.clock())
                if message is None:
                    await self._timers()
                    continue
                if message.get("type") == "websocket.disconnect":
                    raise Disconnected
                self.active = self.clock()
                if self.closing:
                    await self.refuse("closing", "the session is closing: no more messages")
                    continue
                await self.adapter.handle(self, message)
            await self.emit(ConnectionDone(self.id, self.cancelled, self.segments, self.samples, self.chars))
        finally:
            self.receiver.cancel()
            self.guards.cancel()
            for context in self.contexts.values():
                context.converter.close()  # an encoder's memory goes now, not when it is collected
            await asyncio.gather(*(context.abandon_unsent() for context in self.contexts.values()))

    @property
    def tasks(self) -> int:
        """The tasks it holds (for the engine's counts): its reader while it reads, and its guards, ended ones not yet
        let go of included."""
        return len(self.guards) + (self.receiver is not None and not self.receiver.done())

    def _deadline(self) -> float:
        deadlines = [self.began + self.config.max_session_s, self._idle_due()]
        deadlines += [context.clause_due for context in self.contexts.values() if context.clause_due is not None]
        return min(deadlines)

    def _idle_due(self) -> float:
        """When the inactivity timeout runs out: never while some audio is pending that may be sent, nor once closing."""
        pending = any(context.pending and context.turn.is_set() for context in self.contexts.values())
        return float("inf") if pending or self.closing else self.active + self.idle_s

    async def _timers(self) -> None:
        """What is due now: the connection's end (``REALTIME_MAX_S``), a context's clause wait, the inactivity timeout."""
        now = self.clock()
        if now >= self.began + self.config.max_session_s:
            raise timed_out(self.contexts, f"a session lasts at most {self.config.max_session_s:g} s (REALTIME_MAX_S)")
        due = [context for context in self.contexts.values() if context.clause_due is not None and now >= context.clause_due]
        for context in due:
            await context.clauses()
        if not due and now >= self._idle_due():
            raise timed_out(
                self.contexts,
                f"no message for {self.idle_s:g} s (the session's idle_s, at most REALTIME_IDLE_S): send keepalive "
                "during a pause in the text, close when it ends",
            )

    async def _watch_key(self, still_valid: Callable[[], Awaitable[bool]]) -> None:
        """Ask every ``STREAM_KEY_RECHECK_S`` whether the key is still valid, for as long as the connection lasts
        (while text comes in and after its close alike); once it is not, nothing more is queued or sent."""
        while True:
            await asyncio.sleep(self.config.key_recheck_s)
            if not await self.ride_out(still_valid, "recheck its key"):
                self.revoked = True
                self.check_allowed()
