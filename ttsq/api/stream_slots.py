"""How many event and audio streams one API process holds open at once: per caller, per tenant, and in all.

A stream (``GET /v1/tts/events/{id}``, ``GET /v1/tts/stream/{id}``, ``POST /v1/audio/speech``, which answers with
the audio once made, a long-poll ``?wait=``, a realtime session) lasts as long as its task: it follows the task
through the process's one listener. A thousand opened at once kept the event loop so busy that ``/healthz`` answered
in seconds. So each process serves at most ``MAX_STREAMS`` streams; one caller (its key, or a client address without
one) at most ``MAX_STREAMS_PER_KEY`` of them, and one tenant (all its keys; callers without a key are one tenant:
docs/fairness.md) at most ``MAX_STREAMS_PER_TENANT`` — without it one tenant's four keys held every slot of a process
and every other tenant was refused. Past the caller's or its tenant's share, ``429``; past the process's, ``503``
(another replica may have room); both with ``Retry-After``.

Counted per process, in memory: what it protects is this process's event loop and connection pool, and a count that
died with its process can never leak. A slot is taken once the caller is authenticated (``deps.py``) and kept in the
request's state; :func:`releasing` hands it back when the whole response has been sent, or the client went away,
whatever the route did.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "ELEVENLABS_TTS_ROUTES",
    "HELD",
    "KINDS",
    "KeyRevoked",
    "SlotCounts",
    "StreamAborted",
    "StreamKind",
    "StreamSlots",
    "TooManyStreams",
    "releasing",
    "when_over",
]

log = logging.getLogger("ttsq.api")
K = TypeVar("K")

HELD = "ttsq_stream_slots"
"""Where a request keeps its slots' release functions (and whatever else waits for its response to be over), in its state."""

StreamKind = Literal["session", "events", "audio", "speech", "long_poll"]
KINDS: tuple[StreamKind, ...] = ("session", "events", "audio", "speech", "long_poll")
"""What holds a slot: a realtime session, an event stream, an audio stream, a speech request (OpenAI's, Cartesia's
``/tts/bytes``, Google's ``text:synthesize``), a long-poll."""

ELEVENLABS_TTS_ROUTES = frozenset(
    f"/v1/text-to-speech/{{voice_id}}{tail}" for tail in ("", "/stream", "/with-timestamps", "/stream/with-timestamps")
)
"""ElevenLabs' text-to-speech routes (``elevenlabs_api.py``), by their templates: each submits, and holds its caller
while it sends the audio, as OpenAI's speech does."""

ROUTE_KINDS: dict[str, StreamKind] = {
    "/v1/tts/events/{task_id}": "events",
    "/v1/tts/stream/{task_id}": "audio",
    "/v1/audio/speech": "speech",
    **dict.fromkeys(ELEVENLABS_TTS_ROUTES, "speech"),
    "/tts/bytes": "speech",
    "/v1/text:synthesize": "speech",
    "/v1/text-to-dialogue": "speech",
    "/v1/text-to-dialogue/stream": "speech",
}
"""The kind of slot each streaming route's caller takes (``deps.py``, by the route's template)."""


class TooManyStreams(Exception):
    """A stream over the caller's share, its key's or its tenant's (``per_key``: 429), or over the process's limit (503)."""

    def __init__(self, message: str, *, per_key: bool) -> None:
        super().__init__(message)
        self.per_key = per_key


@dataclass(frozen=True)
class SlotCounts:
    """The slots as they stand, for ``/metrics``: held by kind, the limit, and held by tenant."""

    limit: int
    by_kind: dict[StreamKind, int]
    by_tenant: dict[str, int]

    @property
    def in_use(self) -> int:
        return sum(self.by_kind.values())


class StreamSlots:
    """The streams this process serves, counted per caller and per tenant; :meth:`take` one, call what it returns to
    give it back."""

    def __init__(self, max_total: int, max_per_key: int, max_per_tenant: int | None = None) -> None:
        self.max_total = max_total
        self.max_per_key = max_per_key
        self.max_per_tenant = max_total if max_per_tenant is None else max_per_tenant
        self.by_caller: Counter[str] = Counter()
        self.by_tenant: Counter[str] = Counter()
        self.by_kind: Counter[StreamKind] = Counter()

    @property
    def open(self) -> int:
        return self.by_caller.total()

    def take(self, caller: str, tenant: str | None = None, kind: StreamKind = "session") -> Callable[[], None]:
        """A slot for ``caller`` (its subject: ``key:<id>`` or ``addr:<address>``) of ``tenant`` (None: a tenant of its
        own), or :class:`TooManyStreams` naming the limit it would pass."""
        tenant = caller if tenant is None else tenant
        if self.by_caller[caller] >= self.max_per_key:
            raise TooManyStreams(
                f"this caller already has {self.by_caller[caller]} streams open, its limit (MAX_STREAMS_PER_KEY="
                f"{self.max_per_key}); close one, or retry later",
                per_key=True,
            )
        if self.by_tenant[tenant] >= self.max_per_tenant:
            raise TooManyStreams(
                f"this caller's tenant already has {self.by_tenant[tenant]} streams open on this API process, its limit "
                f"(MAX_STREAMS_PER_TENANT={self.max_per_tenant}), over all its keys; close one, or retry later",
                per_key=True,
            )
        if self.open >= self.max_total:
            raise TooManyStreams(
                f"this API process serves its limit of {self.max_total} streams (MAX_STREAMS); retry later", per_key=False
            )
        self.by_caller[caller] += 1
        self.by_tenant[tenant] += 1
        self.by_kind[kind] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                _drop(self.by_caller, caller)
                _drop(self.by_tenant, tenant)
                _drop(self.by_kind, kind)

        return release

    def counts(self) -> SlotCounts:
        return SlotCounts(self.max_total, {kind: self.by_kind[kind] for kind in KINDS}, dict(self.by_tenant))


def _drop(counter: Counter[K], name: K) -> None:
    counter[name] -= 1
    if counter[name] <= 0:
        del counter[name]


def hold(slots: StreamSlots, caller: str, state: Any, tenant: str | None = None, kind: StreamKind = "events") -> None:
    """Take a slot for ``caller`` and keep it in the request's ``state`` until :func:`releasing` gives it back."""
    when_over(state, slots.take(caller, tenant, kind))


def when_over(state: Any, callback: Callable[[], None]) -> None:
    """Have :func:`releasing` call ``callback`` once the response to the request whose ``state`` this is is over: sent,
    failed, or abandoned by its client — even one whose body never started."""
    held = getattr(state, HELD, None)
    if held is None:
        held = []
        setattr(state, HELD, held)
    held.append(callback)


class StreamAborted(Exception):
    """A streamed body that cannot go on (no worker left, say) after its status and first bytes were sent: the only
    honest end left is to break the connection, so that no client takes what it got for a whole file."""


class KeyRevoked(StreamAborted):
    """The key a stream was opened with was revoked, or expired, while it ran: an event stream says so in an ``error``
    event (``code`` ``unauthorized``), a raw body is broken off — never an end that looks like the whole audio."""

    code = "unauthorized"

    def __init__(self) -> None:
        super().__init__("the API key was revoked or has expired")


UNFINISHED = "ASGI callable returned without completing response."
"""What uvicorn logs (as an error) when an app returns with its response unfinished, and closes the connection."""

_broken_off: ContextVar[bool] = ContextVar("ttsq_broken_off", default=False)
"""Set in the task of a request whose body was broken off on purpose (uvicorn logs :data:`UNFINISHED` in that task)."""


class _BrokenOffOnPurpose(logging.Filter):
    """uvicorn's :data:`UNFINISHED` error for a response :func:`releasing` broke off on purpose: its warning says why."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_broken_off.get() and record.getMessage() == UNFINISHED)


def releasing(app: ASGIApp) -> ASGIApp:
    """``app``, giving back every stream slot a request held once its response is over (sent, failed or abandoned),
    and breaking off a body that raised :class:`StreamAborted` (a streamed body starts its response before its first
    piece): the connection closes without the body's end — uvicorn closes it when an app returns with its response
    unfinished — and one warning says why, neither a traceback nor uvicorn's error line."""
    server_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(existing, _BrokenOffOnPurpose) for existing in server_log.filters):
        server_log.addFilter(_BrokenOffOnPurpose())

    async def released_after(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await app(scope, receive, send)
        except StreamAborted as exc:
            log.warning("%s %s: the response was broken off: %s", scope.get("method", ""), scope.get("path", ""), exc)
            _broken_off.set(True)
        finally:
            for release in scope.get("state", {}).pop(HELD, []):
                release()

    return released_after
