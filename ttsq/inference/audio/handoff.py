"""How the scheduler streams a row's audio while its codes are still being generated: the hand-off.

The words, one each: a *hand-off* gives a code row's new GPT states to that row's audio decoder, after
``piece_tokens + lookahead`` decode steps, then every ``piece_tokens`` (:class:`Cadence`: ``PIECE_TOKENS``,
``PIECE_LOOKAHEAD``); a *piece* is the samples a hand-off makes ready (maybe none), sent as a ``PieceReady``; the row's
end brings the rest. The decoder is made by :attr:`HandOff.make`, so that its implementation can change without the
scheduler: serving's is :class:`~ttsq.inference.audio.lead.LeadThenExact` (a lead of the first ``piece_tokens``,
then the streamed decode, which gathers states into *runs* of its own).

:class:`RowAudio` is one *run* of one row through the scheduler: a row put back in the queue (out of memory, a suspect
step) runs again from its prompt with a new one, and the scheduler skips the samples it already handed on (a row's
codes depend only on its own inputs and seed, so a re-run regenerates them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ttsq.domain.audio import SAMPLES_PER_TOKEN
from ttsq.inference.chattts_rows import audible

__all__ = ["AudioPieces", "Cadence", "HandOff", "RowAudio", "Together", "keep_ahead"]


class AudioPieces(Protocol):
    """One row's audio decoder, fed its states as they come (:class:`~ttsq.inference.audio.lead.LeadThenExact`)."""

    def add(self, states: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Take the row's next states ``[tokens, hidden]``; return the waveform samples now ready (maybe none)."""
        ...

    def finish(self, states: npt.NDArray[np.float32] | None = None) -> npt.NDArray[np.float32]:
        """The row ended, its last ``states`` (if any) with it: the rest of its waveform. Given together, the decoder
        need not run them through its layers once as states to come and once more at the end."""
        ...


Together = Callable[
    [Sequence[AudioPieces], Sequence[npt.NDArray[np.float32] | None], Sequence[bool]], list[npt.NDArray[np.float32]]
]
"""``together(decoders, states, ends)``: each decoder's ``add(states)`` (``end`` False) or ``finish(states)`` (``end``
True) at once, each row's samples as if it were decoded alone."""


@dataclass(frozen=True)
class Cadence:
    """When a code row's states are handed to its audio decoder: the first time after :attr:`first` decode steps, then
    every ``piece_tokens``."""

    piece_tokens: int
    """States per hand-off, and the tokens a lead covers (``PIECE_TOKENS``)."""
    lookahead: int
    """States after the first ``piece_tokens`` that the first hand-off waits for (``PIECE_LOOKAHEAD``)."""

    def __post_init__(self) -> None:
        if self.piece_tokens < 1 or self.lookahead < 1:
            raise ValueError(f"a piece and its look-ahead are at least 1 token each; got {self.piece_tokens}, {self.lookahead}")

    @property
    def first(self) -> int:
        """Steps of a row before its first hand-off."""
        return self.piece_tokens + self.lookahead


@dataclass(frozen=True)
class HandOff:
    """Audio within a chunk: when a row's states are handed on, and what decodes them."""

    cadence: Cadence
    make: Callable[[], AudioPieces]
    """A fresh audio decoder for one run of one row."""
    keep_ahead: float | None = None
    """The longest decode step, as a share of a token's audio, at which a row's listener never runs dry from its first
    audio on (:func:`keep_ahead`); None: not measured."""
    together: Together | None = None
    """Several rows' decoders (all of :attr:`make`'s) taking their states at once, in one run of the layers for all of
    them (:func:`~ttsq.inference.audio.lead.leads_together`); None: each row is decoded alone."""


def keep_ahead(make: Callable[[], AudioPieces], cadence: Cadence, *, hidden: int) -> float:
    """How fast a row must be generated for its listener never to run dry, as the largest step time that does it, in
    tokens of audio (a step of ``r`` × a token's audio plays ``r`` tokens): the smallest, over every step ``k`` after the
    first audio, of the tokens handed on before ``k`` divided by the steps since the first audio.

    Measured on the piece decoder itself, fed zero states on the scheduler's schedule (``cadence.first`` at first,
    then ``piece_tokens`` at a time) for eight first hand-offs' worth of steps, where the bound has long stopped tightening: when
    each piece's samples come is a matter of shapes (the lead, the streamed decode's field and runs), not of values.
    Exact audio lags its states by the decoder's field, so with ChatTTS's real layers (52 tokens) and the defaults this
    is ~0.41 — stricter than a steady stream's bound (``STREAM_RTF_TARGET``); docs/decoder.md, "Keeping ahead after the
    first piece"."""
    pieces = make()
    first, tokens = cadence.first, cadence.piece_tokens
    horizon = 8 * first
    zeros = np.zeros((tokens, hidden), dtype=np.float32)
    handed: list[tuple[int, float]] = []  # (step, tokens of audio handed on by then)
    total = 0
    for step in range(first, horizon + 1, tokens):
        total += pieces.add(np.zeros((first, hidden), dtype=np.float32) if step == first else zeros).size
        handed.append((step, total / SAMPLES_PER_TOKEN))
    started = next((step for step, audio in handed if audio > 0), None)
    if started is None:
        return 0.0  # nothing before the row's end: no stream keeps ahead of it
    bound = float("inf")
    before = 0.0
    at = iter(handed)
    step, audio = next(at)
    for k in range(started + 1, horizon + 1):
        while step < k:
            before = audio
            step, audio = next(at, (horizon + 1, audio))
        bound = min(bound, before / (k - started))
    return bound


class RowAudio:
    """One run of one row's audio: its piece decoder, and (``keep_wave``) the waveform so far.

    Only the thread that decodes audio touches it (the audio thread, or the loop inline), one call after another in
    the order the states came. The waveform is kept for an anchored request's first chunk, whose whole wave (near-
    silent samples included) becomes its later chunks' speaker prompt at the chunk's end.
    """

    def __init__(self, pieces: AudioPieces, *, keep_wave: bool) -> None:
        self.pieces = pieces
        self.wave: list[npt.NDArray[np.float32]] | None = [] if keep_wave else None

    def add(self, states: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The audible samples that ``states`` make ready (ChatTTS drops near-silent samples one by one, so a piece
        loses exactly the samples the whole chunk would lose there)."""
        return self.added(self.pieces.add(states))

    def added(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """What the piece decoder returned for the row's next states (its ``add``, alone or together with other rows'),
        as :meth:`add` returns it."""
        return audible(self._kept(samples))

    def finish(self, states: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32] | None]:
        """The row's last ``states`` (maybe none) and its end: the rest of its audible samples, and its whole
        waveform where it was kept."""
        return self.finished(self.pieces.finish(states))

    def finished(self, samples: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32] | None]:
        """What the piece decoder returned at the row's end (its ``finish``, alone or together with other rows'), as
        :meth:`finish` returns it."""
        rest = self._kept(samples)
        wave = np.concatenate(self.wave) if self.wave else (np.zeros(0, dtype=np.float32) if self.wave is not None else None)
        return audible(rest), wave

    def _kept(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        if self.wave is not None and samples.size:
            self.wave.append(samples)
        return samples
