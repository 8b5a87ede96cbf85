"""A context's audio on its way out: the seam where the PCM16 a worker streams (24 kHz, mono) becomes what the
context's client asked for.

Every context has its own converter, fed each piece of its audio in order (:meth:`Converter.feed`) and told once when
that audio has ended (:meth:`Converter.end`), so that a converter that keeps state across pieces (a resampler's
filter, an encoder's frames) joins them into one stream: what it returns, joined, is the context's audio in its format.
Where the engine's audio events count samples (:class:`.events.Audio`), they count the 24 kHz audio fed, whatever
comes out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ttsq.domain.audio import SAMPLE_RATE

__all__ = ["PCM16", "Converter", "OutputFormat"]


class Converter(Protocol):
    """One context's audio, PCM16 at 24 kHz in, its output format out, piece by piece."""

    def feed(self, pcm16: bytes) -> bytes:
        """The output this piece completes (may be empty: an encoder waits for a whole frame)."""
        ...

    def end(self) -> bytes:
        """What is left once the audio has ended (a resampler's tail, an encoder's last frame)."""
        ...


class _Unchanged:
    """PCM16 at 24 kHz, as the workers make it."""

    def feed(self, pcm16: bytes) -> bytes:
        return pcm16

    def end(self) -> bytes:
        return b""


@dataclass(frozen=True)
class OutputFormat:
    """What a context's audio is sent as: its name (``pcm_s16le``), its rate, and a fresh converter per context."""

    encoding: str
    sample_rate: int
    converter: Callable[[], Converter]


PCM16 = OutputFormat("pcm_s16le", SAMPLE_RATE, _Unchanged)
"""The workers' own audio, unchanged: PCM16, little-endian, 24 kHz, mono."""
