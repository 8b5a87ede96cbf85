"""What the scheduler moves: a request's and a row's state, and a row's sampling.

:class:`~ttsq.inference.sched.scheduler.Scheduler` decides which row takes which slot when; this module holds what it
moves around (:class:`RequestState`, :class:`RowState`), the token limits rows run under (:class:`DecodeLimits`) and
each row's sampling (:func:`code_params`, :func:`refine_params`). The work on a row's audio is
:mod:`ttsq.inference.sched.audio_work`'s.
"""

from __future__ import annotations

import logging
import math
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from ttsq.domain.reference_audio import MAX_REFERENCE_S
from ttsq.inference.audio.handoff import RowAudio
from ttsq.inference.base import ChunkAudio, SynthesisRequest
from ttsq.inference.gpt.slot_decoder import Prefilled, RowParams, stream_seed
from ttsq.inference.playback import Listener

__all__ = [
    "DecodeLimits",
    "RequestState",
    "RowState",
    "chunk_audio",
    "code_params",
    "log_first_audio",
    "refine_params",
]

log = logging.getLogger("ttsq.inference.sched.scheduler")  # the scheduler's story, one logger

CODE_REPETITION_PENALTY = 1.05
"""ChatTTS's ``InferCodeParams`` default; ttsq has always used it."""
REFINE_TEMPERATURE, REFINE_TOP_P, REFINE_TOP_K, REFINE_REPETITION_PENALTY = 0.7, 0.7, 20, 1.0
"""ChatTTS's ``RefineTextParams`` defaults, which ttsq has always used for ``refine_text``."""


@dataclass(frozen=True)
class DecodeLimits:
    """Per-row token limits, from the engine's configuration."""

    max_new_token: int
    min_new_token: int
    refine_max_new_token: int
    max_reference_s: float = MAX_REFERENCE_S
    """The longest speaker prompt a code row has room for (``MAX_REFERENCE_S``): a first chunk's audio made into the
    prompt of its request's later chunks (``consistent``) is cut to it."""


@dataclass
class RequestState:
    key: str
    request: SynthesisRequest
    lang: Literal["zh", "en"]
    total: int
    arrival: int
    alone: bool
    done: int = 0
    anchored: bool = False
    """One voice across the text (``consistent``, more than one chunk, no speaker prompt of its own): the later
    chunks' code rows wait for the first chunk's audio, made into their speaker prompt (:attr:`anchor`)."""
    anchor: tuple[str, str] | None = None
    """The first chunk's speaker prompt and text (ChatTTS's ``spk_smp``/``txt_smp``), once its audio is decoded."""
    held: list[RowState] = field(default_factory=list)
    """Later code rows waiting for :attr:`anchor`."""
    lead_decoded: bool = False
    """Its first chunk's codes are decoded (with the scheduler's ``head_start``, its later chunks wait for this)."""
    arrived_at: float = 0.0
    margin_s: float | None = None
    """The scheduler's ``playback_margin_s`` (None: no playback-aware order)."""
    listener: Listener = field(default_factory=Listener)
    """A listener playing its chunks in order from the first: when its audio runs out. For a request that belongs to a
    stream heard across jobs (``request.stream``), that stream's listener (:mod:`ttsq.inference.stream_listeners`)."""
    unheard: dict[int, tuple[float, bool]] = field(default_factory=dict)
    """Seconds of audio ready of chunks after the one being heard, and whether each is whole (a listener hears them
    in order)."""
    heard: int = 0
    """Chunks the listener has had whole, in order."""
    first_heard: bool = False
    """Its first audio (a piece or a whole chunk) has been handed on."""

    def wait_for_anchor(self, row: RowState) -> bool:
        """Whether ``row`` waits out of the queue for :attr:`anchor`: a later chunk's code row of an anchored request
        whose first chunk's audio is not decoded yet (its slot goes to other rows meanwhile). It is kept in
        :attr:`held` until then."""
        if self.anchored and self.anchor is None and row.phase == "code" and row.index > 0:
            self.held.append(row)
            return True
        return False

    @property
    def continues(self) -> bool:
        """It continues a stream already playing (a session's chunk after its first): even its first chunk is due by
        that stream's listener."""
        return self.request.stream is not None and self.request.stream.continues

    def due(self, index: int) -> float:
        """When chunk ``index``'s audio is due: the first chunk at once (its arrival), a later one — or any of a request
        that continues a stream — when the listener's audio runs out, less the margin (not before the first is heard:
        after every started stream). 0 without playback-aware order: every row alike, and the rest of
        :meth:`RowState.priority` decides."""
        if self.margin_s is None:
            return 0.0
        if index == 0 and not self.continues:
            return self.arrived_at
        due = self.listener.due(self.margin_s)
        return math.inf if due is None else due

    def played(self, now: float, index: int, seconds: float, *, whole: bool = True) -> None:
        """More of chunk ``index``'s audio (a piece, or with ``whole`` its end) is ready at ``now``: the listener hears
        it, and whatever of the chunks after it is ready, in order."""
        ready, ended = self.unheard.get(index, (0.0, False))
        self.unheard[index] = (ready + seconds, ended or whole)
        while self.heard in self.unheard:
            ready, ended = self.unheard.pop(self.heard)
            if ready:
                self.listener.deliver(now, ready)
            if not ended:
                self.unheard[self.heard] = (0.0, False)
                break
            self.heard += 1


@dataclass
class RowState:
    request: RequestState
    index: int
    phase: Literal["refine", "code"]
    text: str
    suspect: bool = False
    slot: int | None = None
    order: int = 0
    prefill: Future[Prefilled] | None = None
    """Its prompt prefilled ahead of admission (in the prefill thread with ``overlap``; inline, with the other rows about
    to be admitted, without); cleared once it is placed."""
    audio: RowAudio | None = None
    """This run's piece decoder (``pieces``, code rows in a slot)."""
    run: int = 0
    """Which run of the row this is: a row put back in the queue starts a new one, and work of an old one is dropped."""
    tokens: int = 0
    """States the row has in its slot (this run)."""
    handed: int = 0
    """States handed to :attr:`audio` so far (this run)."""
    sent: list[npt.NDArray[np.float32]] = field(default_factory=list)
    """Audible samples handed on as pieces (every run's): the start of its chunk."""
    skip: int = 0
    """Audible samples this run will produce again that were already handed on (an earlier run's)."""

    def priority(self) -> tuple[float, int, int, int, int]:
        """Playback-aware (the scheduler's ``playback_margin_s``): the row whose audio is due first; then streams' first
        chunks first, then arrival; a refined row (work already spent) ahead of its peers."""
        return (self.request.due(self.index), self.later, self.phase == "refine", self.request.arrival, self.index)

    @property
    def later(self) -> bool:
        """A chunk after its stream's first: a request's chunk after its first, or any chunk of a request that continues
        a stream (a session's next job). Such a row leaves the slots kept for first chunks free: a new stream's first
        audio does not wait behind chunks of streams already playing."""
        return self.index > 0 or self.request.continues

    @property
    def exclusive(self) -> str | None:
        """Rows that must run without strangers share this token: a suspect alone, an isolated request with itself."""
        if self.suspect:
            return f"row:{id(self)}"
        if self.request.alone:
            return f"request:{self.request.key}"
        return None


def code_params(row: RowState, limits: DecodeLimits) -> RowParams:
    """A code row's sampling: the request's, with ChatTTS's repetition penalty and the engine's token limits."""
    request = row.request.request
    return RowParams(
        temperature=request.sampling.temperature,
        top_p=request.sampling.top_p,
        top_k=request.sampling.top_k,
        repetition_penalty=CODE_REPETITION_PENALTY,
        min_new_token=min(max(limits.min_new_token, 1), limits.max_new_token),
        max_new_token=limits.max_new_token,
        seed=stream_seed(request.seed, request.first_chunk + row.index),
    )


def refine_params(row: RowState, limits: DecodeLimits) -> RowParams:
    """A refine-text row's sampling: ChatTTS's ``RefineTextParams`` defaults."""
    return RowParams(
        temperature=REFINE_TEMPERATURE,
        top_p=REFINE_TOP_P,
        top_k=REFINE_TOP_K,
        repetition_penalty=REFINE_REPETITION_PENALTY,
        min_new_token=1,
        max_new_token=limits.refine_max_new_token,
        seed=stream_seed(row.request.request.seed, row.request.request.first_chunk + row.index),
    )


def chunk_audio(row: RowState, samples: npt.NDArray[np.float32]) -> ChunkAudio:
    """Some of ``row``'s chunk (a piece, or the whole) as the engine hands it on."""
    return ChunkAudio(index=row.index, total=row.request.total, samples=samples, text=row.text)


def log_first_audio(row: RowState, steps: int) -> None:
    """Log when a request's first audio comes: after how many steps of its first chunk."""
    request = row.request
    if row.index == 0 and not request.first_heard:
        request.first_heard = True
        log.info("%s: first audio after %d decode steps of its first chunk", request.key, steps)
