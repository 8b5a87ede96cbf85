"""Joining per-sentence audio and encoding it for delivery.

ChatTTS is run once per text chunk (see :func:`ttsq.domain.text.split_sentences`), so the chunks
have to be stitched back together. Chunks start and end at arbitrary waveform phase, and
butting them together produces audible clicks; a short fade to silence at every seam plus
a sentence-length pause removes them and sounds like natural speech.

Only numpy, soundfile (libsndfile) and PyAV (libav, for AAC, which libsndfile has no encoder for) are used, so
the API process can encode without torch.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import cast, get_args

import numpy as np
import numpy.typing as npt
import soundfile as sf

from ttsq.domain.converter import convert_whole
from ttsq.domain.encoders import decode_pcm16, encode_whole
from ttsq.domain.jobs import AudioFormat
from ttsq.domain.output_formats import OutputFormat, stored_format

__all__ = [
    "CONTENT_TYPES",
    "SAMPLES_PER_TOKEN",
    "SAMPLE_RATE",
    "AudioFormat",
    "ChunkJoiner",
    "decode_to_pcm16",
    "duration_s",
    "encode_audio",
    "join_chunks",
    "stored_as",
]

SAMPLE_RATE = 24_000
"""ChatTTS always produces 24 kHz mono float32 audio."""
SAMPLES_PER_TOKEN = 512
"""Samples of one audio token: ChatTTS's DVAE makes two mel frames of each, and Vocos hops 256 samples a frame. The
streaming decoder checks a checkpoint's Vocos against it."""

CONTENT_TYPES: dict[str, str] = {
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "ogg": "audio/ogg",
    "flac": "audio/flac",
    "opus": "audio/ogg; codecs=opus",
    "aac": "audio/aac",
    "pcm": "audio/pcm",
}
"""HTTP ``Content-Type`` for each output format."""

_SOUNDFILE_FORMATS: dict[str, tuple[str, str]] = {
    "wav": ("WAV", "PCM_16"),
    "flac": ("FLAC", "PCM_16"),
    "ogg": ("OGG", "VORBIS"),
    "mp3": ("MP3", "MPEG_LAYER_III"),
    "opus": ("OGG", "OPUS"),
    "pcm": ("RAW", "PCM_16"),
}
"""``pcm`` is headerless 16-bit little-endian mono at 24 kHz (what OpenAI's ``pcm`` format is)."""
_LIBAV_FORMATS = ("aac",)
"""Formats libsndfile cannot write: stored as the stream encoder writes them (:mod:`ttsq.domain.encoders`), from
the same PCM16 the stream is fed, so a streamed ``aac`` and the stored file are one encoding of the same samples.
``aac`` is ADTS, what OpenAI's ``aac`` is."""

_WRITE_BLOCK_FRAMES = 8192
"""libvorbis allocates its analysis buffer on the stack in proportion to one write call,
and overflows it on long audio written in one go (libsndfile issue 1095, python-soundfile
issues 233 and 426); writing in blocks keeps every call small, whatever the format."""


def _as_mono_float32(samples: npt.ArrayLike, what: str) -> npt.NDArray[np.float32]:
    """Return ``samples`` as a 1-D float32 array, accepting an (n, 1) column too.

    ChatTTS hands back (1, n) or (n,) arrays depending on the call path, so one trailing or
    leading singleton axis is tolerated; genuinely multi-channel audio is a caller bug.
    """
    array = np.asarray(samples, dtype=np.float32)
    if array.ndim == 2 and 1 in array.shape:
        array = array.reshape(-1)
    if array.ndim != 1:
        raise ValueError(f"{what} must be mono (1-D), got shape {array.shape}")
    return array


def encode_audio(samples: npt.NDArray[np.floating], fmt: AudioFormat, sample_rate: int = SAMPLE_RATE) -> bytes:
    """Encode mono float audio as a complete file in ``fmt``, ready to send.

    Samples are clipped to [-1, 1] (and NaN/inf replaced) first: the model occasionally
    overshoots, and the encoders wrap or reject out-of-range values instead of saturating.
    """
    if fmt in _LIBAV_FORMATS:
        return encode_whole(encode_audio(samples, "pcm", sample_rate), "aac", sample_rate)
    if fmt not in _SOUNDFILE_FORMATS:
        allowed = ", ".join(get_args(AudioFormat))
        raise ValueError(f"unknown audio format {fmt!r}; expected one of {allowed}")
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")
    mono = _as_mono_float32(samples, "audio")
    if mono.size == 0:
        raise ValueError("cannot encode empty audio")
    mono = np.clip(np.nan_to_num(mono, nan=0.0, posinf=1.0, neginf=-1.0), -1.0, 1.0)
    container, subtype = _SOUNDFILE_FORMATS[fmt]
    buffer = io.BytesIO()
    with sf.SoundFile(
        buffer,
        mode="w",
        samplerate=sample_rate,
        channels=1,
        format=container,
        subtype=subtype,
        endian="LITTLE" if container == "RAW" else "FILE",
    ) as out:
        for start in range(0, mono.size, _WRITE_BLOCK_FRAMES):
            out.write(mono[start : start + _WRITE_BLOCK_FRAMES])
    return buffer.getvalue()


SENTENCE_GAP_MS = 120.0
"""The pause between two chunks of one text (:class:`ChunkJoiner`); a realtime session puts the same pause between its
chunks, which are tasks of their own, so its audio is the text's joined audio."""


def sentence_gap_pcm16(sample_rate: int = SAMPLE_RATE) -> bytes:
    """:data:`SENTENCE_GAP_MS` of silence as PCM16."""
    return bytes(2 * _ms_to_samples(SENTENCE_GAP_MS, sample_rate, "gap_ms"))


def _ms_to_samples(ms: float, sample_rate: int, what: str) -> int:
    """Convert a duration to whole samples, refusing negative or non-finite values."""
    if not math.isfinite(ms) or ms < 0:
        raise ValueError(f"{what} must be a non-negative number of milliseconds, got {ms}")
    return round(ms * sample_rate / 1000)


def _raised_cosine(length: int) -> npt.NDArray[np.float32]:
    """Ramp from exactly 0 towards 1 with zero slope at both ends.

    Zero slope means the fade itself adds no corner to the waveform, so it cannot click.
    """
    phase = np.arange(length, dtype=np.float64) * (math.pi / length)
    return (0.5 - 0.5 * np.cos(phase)).astype(np.float32)


class ChunkJoiner:
    """Joins per-sentence audio incrementally, so each piece can be streamed as soon as it exists.

    ``add`` returns the piece that extends the joined signal: the pause before the chunk (for all
    but the first) and the chunk faded in from exactly zero and out to exactly zero. Pieces
    concatenate to exactly :func:`join_chunks` of the same chunks, which is how a streamed job's
    audio equals its stored result. Fading each chunk on its own needs no look-ahead, and never
    re-decoding earlier audio avoids the seams of ChatTTS's own streaming (2noise#959).
    """

    def __init__(self, sample_rate: int = SAMPLE_RATE, fade_ms: float = 10.0, gap_ms: float = SENTENCE_GAP_MS) -> None:
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {sample_rate}")
        self._fade = _ms_to_samples(fade_ms, sample_rate, "fade_ms")
        self._silence = np.zeros(_ms_to_samples(gap_ms, sample_rate, "gap_ms"), dtype=np.float32)
        self._started = False

    @property
    def gap(self) -> int:
        """Samples of the usual pause between two chunks."""
        return int(self._silence.size)

    @property
    def started(self) -> bool:
        """Some speech was joined already (the usual pause goes before the next chunk)."""
        return self._started

    def resume(self) -> None:
        """Go on after speech joined elsewhere (an earlier attempt's): the usual pause goes before the next chunk."""
        self._started = True

    def add(self, chunk: npt.NDArray[np.floating], pause: int | None = None) -> npt.NDArray[np.float32]:
        """The piece that extends the joined audio with ``chunk``: the pause before it, then the chunk faded.

        ``pause``: exactly that many zero samples before it, in place of the usual pause (a segment's own pause,
        :mod:`ttsq.domain.segments`); None, the usual pause after earlier speech and none before the first. An empty
        chunk adds only an explicit pause."""
        faded = _as_mono_float32(chunk, "each chunk").copy()
        if faded.size == 0:
            return np.zeros(pause or 0, dtype=np.float32)
        length = min(self._fade, (faded.size + 1) // 2)
        if length > 0:
            ramp = _raised_cosine(length)
            faded[:length] *= ramp
            faded[-length:] *= ramp[::-1]
        silence = self._pause(pause)
        self._started = True
        return np.concatenate([silence, faded]) if silence.size else faded

    def _pause(self, pause: int | None) -> npt.NDArray[np.float32]:
        if pause is not None:
            if pause < 0:
                raise ValueError(f"a pause must not be negative, got {pause}")
            return np.zeros(pause, dtype=np.float32)
        return self._silence if self._started else np.zeros(0, dtype=np.float32)

    def settled(self, partial: npt.NDArray[np.floating], pause: int | None = None) -> npt.NDArray[np.float32]:
        """The start of what :meth:`add` will return for a chunk that begins with ``partial`` (a chunk still being
        generated, streamed in pieces) and the same ``pause``, bit for bit whatever follows: the pause before it and
        its faded-in samples, all but the last fade's length, where the fade-out lands if the chunk ends
        there. Nothing until ``partial`` holds two fades (below that, the fade-in's length depends on the chunk's)."""
        samples = _as_mono_float32(partial, "a chunk's start")
        if samples.size == 0 or samples.size < 2 * self._fade:
            return np.zeros(0, dtype=np.float32)
        head = samples[: samples.size - self._fade].copy()
        if self._fade > 0:
            head[: self._fade] *= _raised_cosine(self._fade)
        silence = self._pause(pause)
        return np.concatenate([silence, head]) if silence.size else head


def join_chunks(
    chunks: Sequence[npt.NDArray[np.floating]],
    sample_rate: int = SAMPLE_RATE,
    fade_ms: float = 10.0,
    gap_ms: float = SENTENCE_GAP_MS,
) -> npt.NDArray[np.float32]:
    """Concatenate per-sentence audio with click-free seams and a pause between sentences.

    Every chunk is faded in from exactly zero and out to exactly zero, so each seam meets
    the silent gap (or, with ``gap_ms=0``, the next chunk's zero) without a jump. A chunk
    shorter than two fades is faded over half its length each way. Empty chunks carry no
    speech and are skipped, so they do not add a second pause. The result has length
    ``sum(len(chunk)) + gap * (number of non-empty chunks - 1)``.
    """
    joiner = ChunkJoiner(sample_rate, fade_ms, gap_ms)
    pieces = [joiner.add(chunk) for chunk in chunks]
    if not pieces:
        return np.zeros(0, dtype=np.float32)
    return cast(npt.NDArray[np.float32], np.concatenate(pieces))


def decode_to_pcm16(audio: bytes) -> bytes:
    """Decode an encoded result (any format ttsq writes but raw pcm) back to PCM16 LE mono samples.

    libsndfile reads what it wrote; what it cannot open (ADTS AAC) is decoded by libav."""
    try:
        samples, _ = sf.read(io.BytesIO(audio), dtype="int16", always_2d=False)
    except sf.LibsndfileError:
        return decode_pcm16(audio, SAMPLE_RATE)
    return np.asarray(samples, dtype="<i2").reshape(-1).tobytes()


def stored_as(audio: bytes, stored: AudioFormat, fmt: OutputFormat) -> bytes:
    """A stored result (``audio``: a job's file, in its own ``stored`` format at 24 kHz) as a listener asked for it.

    The stored bytes themselves only when they are ``fmt`` (:func:`~ttsq.domain.output_formats.stored_format`);
    otherwise its samples, decoded, converted into ``fmt`` as one finished file. So a cached or stored entry is
    never sent as a format or rate other than its own, whatever the route asked for: the cache key names the stored
    format (:func:`ttsq.domain.cache_key.cache_key`), and everything else is made from it here, per request."""
    if stored_format(fmt) == stored:
        return audio
    pcm = audio if stored == "pcm" else decode_to_pcm16(audio)
    return convert_whole(pcm, fmt)


def duration_s(samples: npt.NDArray[np.generic], sample_rate: int = SAMPLE_RATE) -> float:
    """Length of mono audio in seconds, for response headers, metrics and billing."""
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")
    return float(np.size(samples)) / sample_rate
