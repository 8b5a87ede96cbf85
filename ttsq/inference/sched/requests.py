"""What the scheduler schedules: a request's and a row's state, a row's sampling, and a row's audio.

:class:`~ttsq.inference.sched.scheduler.Scheduler` decides which row takes which slot when; this module holds what it
moves around (:class:`RequestState`, :class:`RowState`) and the work on a row's audio (:class:`AudioWork`): decoded
whole when the row ends, or in pieces while its states are generated (:class:`~ttsq.inference.audio.pieces.Piecing`), in
the audio thread beside the decode loop (ranked as the row, in the order asked) or inline, and handed back as
:class:`PieceReady` events and, at the row's end, to the scheduler, whose bookkeeping of the request it is.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.reference_audio import MAX_REFERENCE_S
from ttsq.inference.audio.pieces import Piecing, RowAudio
from ttsq.inference.base import (
    BatchEvent,
    ChunkAudio,
    InferenceError,
    OutOfMemory,
    PermanentError,
    PieceReady,
    SynthesisRequest,
    TransientError,
)
from ttsq.inference.chattts_rows import ChatTTSRows
from ttsq.inference.gpt.slot_decoder import Prefilled, RowParams, stream_seed
from ttsq.inference.playback import Listener
from ttsq.inference.sched.background import RankedExecutor

if TYPE_CHECKING:
    import torch

__all__ = [
    "AudioWork",
    "DecodeLimits",
    "Decoding",
    "RequestState",
    "RowState",
    "chunk_audio",
    "code_params",
    "log_first_audio",
    "refine_params",
    "typed",
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
    """A listener playing its chunks in order from the first: when its audio runs out."""
    unheard: dict[int, tuple[float, bool]] = field(default_factory=dict)
    """Seconds of audio ready of chunks after the one being heard, and whether each is whole (a listener hears them
    in order)."""
    heard: int = 0
    """Chunks the listener has had whole, in order."""

    def due(self, index: int) -> float:
        """When chunk ``index``'s audio is due: the first chunk at once (its arrival), a later one when the listener's
        audio runs out, less the margin (not before the first is heard: after every started stream). 0 without
        playback-aware order: every row alike, and the rest of :meth:`RowState.priority` decides."""
        if self.margin_s is None:
            return 0.0
        if index == 0:
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

    first_heard: bool = False
    """Its first audio (a piece or a whole chunk) has been handed on."""


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
        """Playback-aware (the scheduler's ``playback_margin_s``): the row whose audio is due first; then first chunks
        first, then arrival; a refined row (work already spent) ahead of its peers."""
        return (self.request.due(self.index), self.index > 0, self.phase == "refine", self.request.arrival, self.index)

    @property
    def exclusive(self) -> str | None:
        """Rows that must run without strangers share this token: a suspect alone, an isolated request with itself."""
        if self.suspect:
            return f"row:{id(self)}"
        if self.request.alone:
            return f"request:{self.request.key}"
        return None


@dataclass
class Decoding:
    """A row's audio being decoded in the audio thread: a piece (``final`` False) or the rest of its chunk."""

    row: RowState
    future: Future[npt.NDArray[np.float32]]
    run: int
    final: bool
    steps: int
    """The row's states when it was handed on: how many decode steps the audio waited for."""


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
    """Log when a request's first audio comes (issue 31: after how many steps of its first chunk)."""
    request = row.request
    if row.index == 0 and not request.first_heard:
        request.first_heard = True
        log.info("%s: first audio after %d decode steps of its first chunk", request.key, steps)


ChunkReadyHook = Callable[[RowState, npt.NDArray[np.float32], list[BatchEvent], int], None]
"""The scheduler's end of a row: its whole chunk's audio (the pieces sent, then the rest), and after how many steps."""
FailHook = Callable[[str, BaseException, list[BatchEvent]], None]
"""The scheduler's failure of a request (by key) for one of its rows' audio."""


class AudioWork:
    """A scheduler's audio decoding (see the module docstring)."""

    def __init__(
        self,
        rows: ChatTTSRows,
        limits: DecodeLimits,
        pool: RankedExecutor | None,
        pieces: Piecing | None,
        clock: Callable[[], float],
        *,
        alive: Callable[[RequestState], bool],
        chunk_ready: ChunkReadyHook,
        fail: FailHook,
    ) -> None:
        self.rows = rows
        self.limits = limits
        self.pool = pool
        self.pieces = pieces
        """Audio within a chunk, as it is generated (None: a chunk's audio is decoded at its end)."""
        self.clock = clock
        self.alive = alive
        """Whether a request is still the scheduler's (not cancelled or failed meanwhile)."""
        self.chunk_ready = chunk_ready
        self.fail = fail
        self.pending: list[Decoding] = []
        """Audio being decoded (in the audio thread), in the order it was asked for: finished rows' chunks (first
        chunks first, then by arrival) and pieces."""

    def futures(self) -> list[Future[npt.NDArray[np.float32]]]:
        return [entry.future for entry in self.pending]

    def placed(self, row: RowState) -> None:
        """``row`` took a slot: with pieces, a code row gets this run's piece decoder."""
        if self.pieces is not None and row.phase == "code":
            row.audio = RowAudio(self.pieces.make(), keep_wave=row.index == 0 and row.request.anchored)
            row.tokens, row.handed = 1, 0  # placing a row samples its first token

    def hand_on(self, rows: list[RowState], hiddens: torch.Tensor | None, events: list[BatchEvent]) -> None:
        """Each of ``rows`` (code rows still in their slot after a step) has one more state; a row whose next piece is
        due hands its new states to its piece decoder (copied: the slot's buffer is written again when the slot is
        reused)."""
        pieces = self.pieces
        if pieces is None:
            return
        for row in rows:
            if row.audio is None or row.slot is None:
                continue
            row.tokens += 1
            due = pieces.first if row.handed == 0 else row.handed + pieces.tokens
            if row.tokens < due:
                continue
            assert hiddens is not None
            states = hiddens[row.slot, row.handed : row.tokens].to("cpu", dtype=hiddens.dtype, copy=True).numpy()
            row.handed = row.tokens
            self._decode(row, row.audio.add, states, final=False, events=events)

    def ended(self, row: RowState, hiddens: torch.Tensor, events: list[BatchEvent]) -> None:
        """``row``'s codes are all out: the rest of its audio (after its pieces), or all of it, is decoded."""
        row.tokens = int(hiddens.shape[0])
        if row.audio is not None:
            rest = hiddens[row.handed :].to("cpu", copy=True).numpy()
            self._decode(row, self._rest_of, row, row.audio, rest, final=True, events=events)
            return
        self._decode(row, self._audio_of, row, hiddens, final=True, events=events)

    def evicted(self, row: RowState) -> None:
        """``row`` left its slot to run again from its prompt, as a new run: its pieces being decoded are dropped,
        and the samples it already handed on are skipped when the new run makes them again."""
        if row.audio is not None:
            row.audio = None
            row.run += 1
            row.tokens = row.handed = 0
            row.skip = sum(piece.size for piece in row.sent)
            self.drop(lambda entry: entry.row is row)

    def drop(self, which: Callable[[Decoding], bool]) -> None:
        """The decodes ``which`` picks are cancelled (one not started yet never runs)."""
        self.pending = _dropping(self.pending, which)

    def collect(self, events: list[BatchEvent]) -> None:
        """Hand on the audio that has been decoded, whichever row's it is (the worker puts a request's chunks in
        order; a short request's audio must not wait for a long one's decoded before it). A row's own pieces and its
        end go in the order they were asked for: one not done yet holds back that row's later ones."""
        done: list[Decoding] = []
        pending: list[Decoding] = []
        held: set[int] = set()
        for entry in self.pending:  # one look at each future: one that ends meanwhile waits for the next call
            if id(entry.row) in held or not entry.future.done():
                held.add(id(entry.row))
                pending.append(entry)
            else:
                done.append(entry)
        self.pending = pending
        for entry in done:
            try:
                samples = entry.future.result()
            except Exception as exc:  # noqa: BLE001 - this row's own failure
                self.fail(entry.row.request.key, typed(exc), events)
                continue
            self._decoded(entry.row, entry.run, entry.final, entry.steps, samples, events)

    def _decoded(
        self, row: RowState, run: int, final: bool, steps: int, samples: npt.NDArray[np.float32], events: list[BatchEvent]
    ) -> None:
        if run != row.run:
            return  # an earlier run's piece: the row runs again and hands on from where the pieces stopped
        if row.skip:
            cut = min(row.skip, samples.size)
            row.skip -= cut
            samples = samples[cut:]
        if not final:
            if samples.size and self.alive(row.request):
                row.sent.append(samples)
                row.request.played(self.clock(), row.index, samples.size / SAMPLE_RATE, whole=False)
                log_first_audio(row, steps)
                events.append(PieceReady(row.request.key, chunk_audio(row, samples)))
            return
        if row.sent:
            samples = np.concatenate([*row.sent, samples])
        self.chunk_ready(row, samples, events, steps)

    def _decode(
        self, row: RowState, decode: Callable[..., npt.NDArray[np.float32]], *args: Any, final: bool, events: list[BatchEvent]
    ) -> None:
        """Decode some of a row's audio: in the audio thread (ranked as the row, in the order asked, so that a row's
        pieces stay in order), or inline, its result handed on at once."""
        steps = row.tokens
        if self.pool is not None:
            future = self.pool.submit(row.priority(), decode, *args)
            self.pending.append(Decoding(row, future, row.run, final, steps))
            return
        try:
            samples = decode(*args)
        except Exception as exc:  # noqa: BLE001 - this row's own failure
            self.fail(row.request.key, typed(exc), events)
            return
        self._decoded(row, row.run, final, steps, samples, events)

    def _audio_of(self, row: RowState, hiddens: torch.Tensor) -> npt.NDArray[np.float32]:
        """A row's audio; an anchored request's first chunk also becomes the speaker prompt of its later chunks, made
        as upstream's ``split_text`` makes it (:meth:`ChatTTSRows.audio_and_prompt`), with the chunk's text (refined,
        where asked) as ``txt_smp``. Inline, or in the audio thread: the loop reads the anchor once this is done."""
        if row.index > 0 or not row.request.anchored:
            return self.rows.audio(hiddens)
        samples, prompt = self.rows.audio_and_prompt(hiddens, self.limits.max_reference_s)
        row.request.anchor = (prompt, row.text)
        return samples

    def _rest_of(self, row: RowState, audio: RowAudio, states: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The rest of a row decoded in pieces; an anchored request's first chunk makes its speaker prompt of the
        whole wave, as :meth:`_audio_of` does."""
        samples, wave = audio.finish(states)
        if wave is not None:
            row.request.anchor = (self.rows.speaker_prompt(wave, self.limits.max_reference_s), row.text)
        return samples


def _dropping(entries: list[Decoding], drop: Callable[[Decoding], bool]) -> list[Decoding]:
    """``entries`` without those ``drop`` picks, which are cancelled (a decode not started yet never runs)."""
    kept = []
    for entry in entries:
        if drop(entry):
            entry.future.cancel()
        else:
            kept.append(entry)
    return kept


def typed(exc: BaseException) -> BaseException:
    """An engine failure in the engine contract's types (torch's OOM included), so the worker need not know torch."""
    if isinstance(exc, InferenceError):
        return exc
    try:
        import torch

        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return OutOfMemory(str(exc))
    except ImportError:  # pragma: no cover - torch is always there when a decoder runs
        pass
    if isinstance(exc, ValueError):
        return PermanentError(str(exc))
    return TransientError(f"{type(exc).__name__}: {exc}")
