"""A row's first audio a few dozen decode steps in, and every sample after it exact.

:class:`~ttsq.inference.audio.streaming.StreamingDecoder` decodes each state once and its samples are the whole
decode's, but a sample can only come once every state its receptive field reaches exists: ``delay`` tokens after its
own, 52 on ChatTTS's layers (9 on the tiny checkpoint). A first audio 52 steps into a sentence, plus a piece, is later
than a voice agent wants. So :class:`LeadThenExact` hands out a *lead*, the samples of the first ``piece_tokens``
tokens, as soon as ``piece_tokens + lookahead`` states exist (the hand-off's
:class:`~ttsq.inference.audio.handoff.Cadence`): the streamed decode's exact samples so far, then what the stream would
add if the row ended there (:meth:`~ttsq.inference.audio.streaming.StreamingDecoder.preview`), which is the whole decode
of those states, as if they were the row, up to the end of the first ``piece_tokens`` tokens. Below the field
(``lookahead < delay``) the lead's last samples are an approximation, off where the states' end cuts their field
(``bench.engine.lookahead`` measures by how much for each look-ahead). The streamed decode takes over where the lead
ends: its samples before that are dropped, and the lead's last ``fade`` samples are held back and cross-faded into the
streamed ones, so that the seam has no step. The streamed decode runs its layers every ``run_tokens`` states (its
*runs*), except once: as soon as the states handed over complete a sample past the seam, so that the exact audio follows
the lead as early as the field allows.

Joined, the output is the lead's samples up to the seam and the streamed decode's after it: the whole decode's within
float rounding at ``lookahead >= delay`` (then there is no lead: the streamed decode alone), and off only near the end
of the first piece below it. The extra work is the layers' right field run once more, for the lead, in the same pass as
the stream's run of the states handed over by then (each layer's exact frames and the lead's past them in one
convolution), so the lead costs no run of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ttsq.domain.audio import SAMPLES_PER_TOKEN
from ttsq.inference.audio.handoff import AudioPieces, Cadence
from ttsq.inference.audio.streaming import StreamingDecoder, preview_together, run_together, step_together

__all__ = ["FADE_SAMPLES", "LeadThenExact", "leads_together", "pieces_together"]

FADE_SAMPLES = 256
"""The seam's cross-fade: half a token (10.7 ms at 24 kHz), long enough that a difference between the lead and the
streamed samples is not a click, short enough to hold back from the first audio."""

_EMPTY = np.zeros(0, dtype=np.float32)


class LeadThenExact:
    """One row's audio: a lead of the cadence's ``piece_tokens`` soon, then the streamed decode (see the module
    docstring). A row's piece decoder (:class:`~ttsq.inference.audio.handoff.AudioPieces`): :meth:`add` takes the row's
    new states and returns the samples that are ready, :meth:`finish` the rest once the row ended.
    """

    def __init__(self, stream: StreamingDecoder, cadence: Cadence, *, fade: int = FADE_SAMPLES) -> None:
        if not 0 <= fade <= cadence.piece_tokens * SAMPLES_PER_TOKEN:
            raise ValueError(f"the cross-fade must fit in the first piece; got {fade} samples")
        self.stream = stream
        self.first = cadence.piece_tokens
        """Tokens the lead covers."""
        self.lookahead = cadence.lookahead
        self.fade = fade
        self.lead = cadence.lookahead < stream.delay
        """Whether a lead is decoded at all: at the full field the streamed samples come as soon as it would."""
        self.waiting: list[npt.NDArray[np.float32]] = []
        """Streamed samples not handed out yet: all of them until the lead is decoded."""
        self.received = 0
        """Streamed samples so far (their place in the row's waveform)."""
        self.seam: int | None = None
        """Where the lead ends and the streamed samples take over (None: no lead yet, or none at all)."""
        self.held = _EMPTY
        """The lead's last samples, ``[seam - len(held), seam)``, to cross-fade into the streamed ones."""
        self.window_tokens = 0
        """States whose audio the lead decoded on top of the streamed decode (its approximate tail: those after the
        exact samples' end when the lead was due): the work on top of the streamed decode's."""
        self.lead_states = 0
        """States the lead was decoded from (at least ``first + lookahead``: all those handed over when it was due)."""
        self.streamed_at_lead = 0
        """Streamed samples there were when the lead was decoded: the output's start is theirs, not the lead's."""

    @property
    def decoded_tokens(self) -> int:
        """States run through the decoder so far, the lead's included."""
        return self.stream.decoded_tokens + self.window_tokens

    def add(self, states: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        return leads_together([self], [states], [False])[0]

    def _early(self, streamed: npt.NDArray[np.float32]) -> bool:
        """Whether to run the states waiting now: the lead is playing and exact samples past its end already exist in
        them. Decoded now, not a whole run later, the gap between the lead and the streamed audio is as short as the
        field allows (the next run would otherwise come up to ``run_tokens`` steps after)."""
        return (
            self.seam is not None
            and self.received + streamed.size < self.seam
            and self._past_seam_ready()
            and bool(self.stream.pending)
        )

    def _lead_due(self) -> bool:
        return self.seam is None and self.lead and self.stream.states_added >= self.first + self.lookahead

    def _past_seam_ready(self) -> bool:
        """Whether the states handed over complete a sample past the seam: the state ``delay`` after the lead's last
        token exists."""
        return self.stream.states_added > self.first + self.stream.delay

    def finish(self, states: npt.NDArray[np.float32] | None = None) -> npt.NDArray[np.float32]:
        """The row ended, its last ``states`` with it: the rest, in one run of the streamed decode. A row that ends
        when (or before) its lead is due needs no lead: every sample of it is exact now."""
        return leads_together([self], [states], [True])[0]

    def _finished(self, streamed: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        if self.seam is None:  # the row ended before its lead was out: the streamed decode is all of it
            out = self._before_lead(streamed)
            rest = np.concatenate([*self.waiting, out]) if self.waiting else out
            self.waiting = []
            return rest
        return self._after_lead(streamed)

    def _before_lead(self, streamed: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Streamed samples before any lead: handed out where there will be no lead, kept until it otherwise."""
        self.received += streamed.size
        if not self.lead:
            return streamed
        if streamed.size:
            self.waiting.append(streamed)
        return _EMPTY

    def _lead(
        self, streamed: npt.NDArray[np.float32], ran: npt.NDArray[np.float32], tail: npt.NDArray[np.float32]
    ) -> npt.NDArray[np.float32]:
        """The lead is due: the streamed samples so far (and ``ran``, those of the stream's preview), then the lead's
        (``tail``, the preview's rest) from where they stop to the seam, less the samples held back for the cross-fade.
        Where the streamed samples already reach the seam, no lead is needed."""
        self.received += streamed.size + ran.size
        exact = np.concatenate([*self.waiting, streamed, ran])
        self.waiting = []
        seam = self.first * SAMPLES_PER_TOKEN
        if exact.size >= seam:
            self.lead = False
            return exact
        self.lead_states = self.stream.states_added
        self.streamed_at_lead = exact.size
        self.window_tokens = self.lead_states - exact.size // SAMPLES_PER_TOKEN
        fade = min(self.fade, seam - exact.size)
        lead = tail[: seam - exact.size]
        self.seam = seam
        self.held = lead[lead.size - fade :].copy()
        return np.concatenate([exact, lead[: lead.size - fade]])

    def _after_lead(self, streamed: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Streamed samples once the lead is out: dropped before the cross-fade, faded in over it, as they are after."""
        assert self.seam is not None
        start, self.received = self.received, self.received + streamed.size
        fade_start = self.seam - self.held.size
        out = streamed[max(0, fade_start - start) :]
        at = max(start, fade_start)
        if at < self.seam and out.size:
            overlap = min(self.seam - at, out.size)
            offset = at - fade_start
            weights = (np.arange(offset, offset + overlap, dtype=np.float32) + 0.5) / self.held.size
            faded = self.held[offset : offset + overlap] * (1 - weights) + out[:overlap] * weights
            out = np.concatenate([faded.astype(np.float32), out[overlap:]])
        return out


def leads_together(
    leads: Sequence[LeadThenExact], states: Sequence[npt.NDArray[np.float32] | None], ends: Sequence[bool]
) -> list[npt.NDArray[np.float32]]:
    """:meth:`LeadThenExact.add` (``end`` False) or :meth:`LeadThenExact.finish` (``end`` True) for several rows of
    the same ``Chat`` at once, each row's samples bit for bit those it gets decoded alone (each convolution runs row by
    row). Their streams run together
    (:func:`~ttsq.inference.audio.streaming.step_together`), then the early runs of those whose exact samples past the
    seam are ready, then the previews of those whose lead is due, each in one pass for all of them; the seams and
    cross-fades are each row's own."""
    streams = [lead.stream for lead in leads]
    streamed = step_together(streams, states, ends)
    early = [index for index, (lead, end) in enumerate(zip(leads, ends, strict=True)) if not end and lead._early(streamed[index])]
    for index, samples in zip(early, run_together([streams[index] for index in early]), strict=True):
        streamed[index] = np.concatenate([streamed[index], samples])
    due = [index for index, (lead, end) in enumerate(zip(leads, ends, strict=True)) if not end and lead._lead_due()]
    previews = dict(
        zip(due, preview_together([streams[index] for index in due], [leads[index].first for index in due]), strict=True)
    )
    out = []
    for index, (lead, end) in enumerate(zip(leads, ends, strict=True)):
        if end:
            out.append(lead._finished(streamed[index]))
        elif index in previews:
            out.append(lead._lead(streamed[index], *previews[index]))
        elif lead.seam is None:
            out.append(lead._before_lead(streamed[index]))
        else:
            out.append(lead._after_lead(streamed[index]))
    return out


def pieces_together(
    pieces: Sequence[AudioPieces], states: Sequence[npt.NDArray[np.float32] | None], ends: Sequence[bool]
) -> list[npt.NDArray[np.float32]]:
    """:func:`leads_together` as a hand-off's :attr:`~ttsq.inference.audio.handoff.HandOff.together`, whose decoders
    are all :class:`LeadThenExact`."""
    leads = [one for one in pieces if isinstance(one, LeadThenExact)]
    if len(leads) != len(pieces):
        raise TypeError("only LeadThenExact piece decoders are decoded together here")
    return leads_together(leads, states, ends)
