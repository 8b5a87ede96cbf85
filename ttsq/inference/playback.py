"""Playback accounting: when each stream's listener runs dry, and how many rows one decode step keeps ahead of them.

A listener starts playing at a stream's first audio and plays on without pause while it has audio. Whether it stutters
depends only on when each next piece of audio arrives against the audio it already has: :class:`Listener` keeps that
account for one stream, server-side (the moment a piece is handed to the job's stream stands for its arrival), so the
worker can count the underruns its listeners would hear and the slack each delivery had (``ttsq_stream_underruns_total``,
``ttsq_stream_slack_seconds``: docs/operations.md).

A decode step advances every row by one token, 512 samples at 24 kHz (:data:`TOKEN_AUDIO_S`, ~21.3 ms of audio), so
rows stay ahead of playback while a step takes less than that. :class:`StepCost` is the measurement: it fits the step's
cost to the rows it ran (recent steps, least squares ``a + b × rows``), and :meth:`StepCost.real_time_rows` says how
many rows fit under ``headroom × TOKEN_AUDIO_S``. What the worker does with that figure — its stream room, the claims
it allows, the room its heartbeat reports — is stream admission's (``STREAM_ADMISSION``:
:mod:`ttsq.runtime.stream_admission`). Pure arithmetic on times it is given: every clock is the caller's, so tests
inject theirs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ttsq.domain.audio import SAMPLE_RATE, SAMPLES_PER_TOKEN

__all__ = ["TOKEN_AUDIO_S", "Listener", "StepCost"]

TOKEN_AUDIO_S = SAMPLES_PER_TOKEN / SAMPLE_RATE
"""Seconds of audio one decode step adds to each row (DVAE + Vocos: 512 samples per audio token at 24 kHz)."""
MAX_ROWS = 1 << 16
"""Bound on :meth:`StepCost.real_time_rows` (a fit whose per-row cost rounds to nothing would leave room without end)."""


@dataclass
class Listener:
    """One stream's listener, played from its first audio: what it has heard, and when it runs dry."""

    started_at: float | None = None
    """When the first audio was delivered (the playback clock's zero)."""
    buffered_until: float = 0.0
    """When the audio delivered so far runs out, stalls included."""
    delivered_s: float = 0.0
    underruns: int = 0
    stall_s: float = 0.0
    first_s: float = 0.0
    """The first delivery's seconds: the buffer it started with."""
    last_at: float | None = None
    """When the latest delivery came."""
    deliveries: int = 0

    def deliver(self, now: float, seconds: float) -> float | None:
        """``seconds`` of audio handed on at ``now``. Returns the slack this delivery had (how long the listener still had
        audio for; negative: it ran dry that long ago, an underrun), or None for the first audio or an empty piece."""
        if seconds <= 0:
            return None
        slack: float | None = None
        if self.started_at is None:
            self.started_at = self.buffered_until = now
            self.first_s = seconds
        else:
            slack = self.buffered_until - now
            if slack < 0:
                self.underruns += 1
                self.stall_s -= slack
                self.buffered_until = now  # playback resumes with this piece
        self.buffered_until += seconds
        self.delivered_s += seconds
        self.last_at = now
        self.deliveries += 1
        return slack

    def left(self, now: float) -> float | None:
        """The audio it still has at ``now`` (negative: it ran dry that long ago); None before the first audio."""
        return None if self.started_at is None else self.buffered_until - now

    def losing(self) -> bool:
        """Whether its audio has come slower than it plays: the buffer after its latest delivery, its stalls not
        counted (a stall resets it), is less than the one its first delivery left it. Over its whole life, not the
        last two pieces: a chunk's pieces come unevenly at its start (the decoder's look-ahead), and one long wait for a
        piece is no trend."""
        if self.last_at is None or self.deliveries < 2:
            return False
        return self.buffered_until - self.stall_s - self.last_at < self.first_s - 1e-9

    def due(self, margin_s: float) -> float | None:
        """When the next audio is due: the buffer's end less ``margin_s`` (None before the first audio)."""
        return None if self.started_at is None else self.buffered_until - margin_s


class StepCost:
    """Seconds per decode step as a function of the rows it ran, fitted to the last ``window`` steps.

    With steps at one row count only, the cost is taken as proportional to rows (``seconds / rows`` each): on a CPU a
    step's cost grows about linearly with its rows, and on a GPU, where it hardly grows, that errs on the side of
    starting fewer streams until steps at other sizes have been seen."""

    def __init__(self, window: int = 256) -> None:
        self._steps: deque[tuple[int, float]] = deque(maxlen=window)

    def observe(self, rows: int, seconds: float) -> None:
        if rows > 0 and seconds >= 0:
            self._steps.append((rows, seconds))

    def fit(self) -> tuple[float, float] | None:
        """``(a, b)``: a step of ``r`` rows costs ``a + b × r`` seconds (both ≥ 0); None before any step."""
        if not self._steps:
            return None
        n = len(self._steps)
        mean_r = sum(r for r, _ in self._steps) / n
        mean_s = sum(s for _, s in self._steps) / n
        spread = sum((r - mean_r) ** 2 for r, _ in self._steps)
        if spread == 0:
            return 0.0, mean_s / mean_r
        b = max(0.0, sum((r - mean_r) * (s - mean_s) for r, s in self._steps) / spread)
        a = mean_s - b * mean_r
        if a < 0:  # no fixed part: all of it per row, through the mean
            return 0.0, mean_s / mean_r
        return a, b

    def predict(self, rows: int) -> float | None:
        fitted = self.fit()
        return None if fitted is None else fitted[0] + fitted[1] * rows

    def real_time_rows(self, headroom: float) -> int | None:
        """The most rows whose step stays within ``headroom × TOKEN_AUDIO_S`` (every row then makes audio faster than a
        listener plays it); None before any step (nothing is known yet)."""
        fitted = self.fit()
        if fitted is None:
            return None
        a, b = fitted
        budget = headroom * TOKEN_AUDIO_S - a
        if budget < 0:
            return 0
        if b <= budget / MAX_ROWS:
            return MAX_ROWS
        return int(budget / b)
