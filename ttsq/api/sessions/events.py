"""What crosses between the session engine and a protocol adapter: the engine's limits, a context's options, and the
events a connection emits — plain values, no socket and no JSON (:mod:`.engine` says how they are used).

A context is named by its id, a string the client chose; None names a connection's default context, the one a
protocol without ids speaks to (ttsq's messages without a ``context_id``). Audio is counted in samples of the
workers' 24 kHz audio from the start of its context, so that every place in a context's audio is exact whatever format
it is sent in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.jobs import Priority
from ttsq.domain.output_formats import OutputFormat
from ttsq.domain.sampling import DEFAULT_SAMPLING, Sampling
from ttsq.domain.voices import Voice

__all__ = [
    "PCM16",
    "Audio",
    "ConnectionDone",
    "ContextDone",
    "ContextId",
    "ContextOptions",
    "ContextStarted",
    "Ended",
    "Event",
    "Failure",
    "Flushed",
    "Opened",
    "RealtimeConfig",
    "SegmentDone",
    "SegmentQueued",
]

ContextId = str | None
"""A context's id, as its client named it; None: the connection's default context."""

PCM16 = OutputFormat("pcm_s16le")
"""The workers' own audio, unchanged: PCM16, little-endian, 24 kHz, mono (no conversion, no thread)."""


@dataclass(frozen=True)
class RealtimeConfig:
    """The session limits (``REALTIME_*``) and the chunk size the workers use (``MAX_CHUNK_CHARS``). Built by app.py."""

    max_chunk_chars: int
    idle_s: float
    """How long a connection may go without a message from the client while none of its audio is pending, unless
    its client asks for less: the default and the most a client may ask for."""
    start_s: float
    """How long a connection may take to send its first message (ttsq's ``session.start``); nothing else is read
    before it."""
    max_session_s: float
    """The longest a connection may last, however busy."""
    max_chars: int
    """The most text one connection may send, over all its contexts."""
    clause_wait_s: float
    """How long text without a sentence end (or whose sentence end waits for what follows it) waits before it is
    spoken up to its last sentence end or clause mark."""
    max_message_bytes: int
    """The largest message; a larger one ends the connection with 1009."""
    inbox_messages: int
    """The most messages a connection holds that it has not handled yet: past it, the socket is not read (TCP holds
    the client back), so what a client sends costs at most this many messages of memory, read or not."""
    key_recheck_s: float
    """How often a connection opened with a key asks whether it is still valid (``STREAM_KEY_RECHECK_S``), before and
    after its close alike: one revoked or expired meanwhile ends the connection (4401) and nothing more is queued or
    sent."""
    outage_s: float
    """How long a connection keeps trying a Redis call through an outage (``LISTEN_OUTAGE_S``, the stream listener's
    budget too) before it ends with 1013."""
    retry_after_s: int
    """``Retry-After`` of a handshake refused because Redis is unreachable (503)."""
    ahead: int
    """Chunks a context keeps queued beyond the one whose audio is streaming (``REALTIME_AHEAD``): the next is queued
    when a chunk's first audio goes out, so a context's later sentences do not share decode steps with its first one
    while a listener waits for it (on a CPU each row added to a step slows the step)."""
    max_contexts: int
    """The most contexts one connection holds open at once (``REALTIME_MAX_CONTEXTS``); one more is refused (an error
    for it, the connection goes on). A context is open from its start until its ``ContextDone``."""


@dataclass(frozen=True)
class ContextOptions:
    """How a context speaks: the fields a submit takes (``POST /v1/tts/submit``), already checked, and its output
    format (:mod:`ttsq.domain.output_formats`: each protocol's names parsed into one :class:`OutputFormat`; the
    context's audio is one stream in it, through a converter of its own)."""

    voice: Voice | None = None
    seed: int | None = None
    """The sampling seed of every chunk (None: each chunk draws its own, as a submit without one does)."""
    priority: Priority | None = None
    sampling: Sampling = DEFAULT_SAMPLING
    output: OutputFormat = PCM16


@dataclass(frozen=True)
class Opened:
    """The connection is served (its caller known, its slot taken): its id and its inactivity timeout."""

    connection_id: str
    idle_s: float


@dataclass(frozen=True)
class ContextStarted:
    """A context was opened (:meth:`Connection.open_context`)."""

    context_id: ContextId


@dataclass(frozen=True)
class SegmentQueued:
    """A chunk of a context's text became a task (``task_id``, readable on the task routes with the same key)."""

    context_id: ContextId
    index: int
    text: str
    task_id: str


@dataclass(frozen=True)
class Audio:
    """Audio of a context, in its output format (joined, a context's audio events are one stream in it: a WAV or mp3
    header in its first): ``offset`` samples of the context's audio at 24 kHz came before the piece it was made from."""

    context_id: ContextId
    audio: bytes
    offset: int


@dataclass(frozen=True)
class SegmentDone:
    """All of a chunk's audio is sent: its speech lies from ``start`` to ``end`` in its context's audio (samples at
    24 kHz; the pause before it is not part of it)."""

    context_id: ContextId
    index: int
    text: str
    task_id: str
    start: int
    end: int

    @property
    def start_s(self) -> float:
        return self.start / SAMPLE_RATE

    @property
    def end_s(self) -> float:
        return self.end / SAMPLE_RATE


@dataclass(frozen=True)
class Flushed:
    """Every chunk a context had cut when its client flushed with ``mark`` is resolved: its audio sent (or the chunk
    refused, or failed, each with its :class:`Failure`). For protocols that acknowledge a flush (Cartesia's
    ``flush_done``)."""

    context_id: ContextId
    mark: object


@dataclass(frozen=True)
class ContextDone:
    """A context is over: all its audio sent (``cancelled`` False), or cancelled. Its id may be opened again."""

    context_id: ContextId
    cancelled: bool
    segments: int
    samples: int
    chars: int

    @property
    def audio_s(self) -> float:
        return self.samples / SAMPLE_RATE


@dataclass(frozen=True)
class Failure:
    """An error for one message or one context (``context_id``; None for the default one or none at all): the
    connection goes on. ``index`` names a chunk; ``details`` what else the error carries (a refused chunk's text)."""

    context_id: ContextId
    code: str
    message: str
    index: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ConnectionDone:
    """The connection's end after its client closed or cancelled it: every context done. The totals are over all its
    contexts."""

    connection_id: str
    cancelled: bool
    segments: int
    samples: int
    chars: int

    @property
    def audio_s(self) -> float:
        return self.samples / SAMPLE_RATE


@dataclass(frozen=True)
class Ended:
    """Why the connection ends before its client closed it (a timeout, a revoked key, Redis gone for good...): the last
    event; then the close code its protocol gives ``code``."""

    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)


Event = Opened | ContextStarted | SegmentQueued | Audio | SegmentDone | Flushed | ContextDone | Failure | ConnectionDone | Ended
"""Everything a connection says, in the order it happens (a context's events in its own order)."""
