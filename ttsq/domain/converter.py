"""ttsq's audio (PCM16 mono at 24 kHz, in pieces as it is made) converted into any :class:`OutputFormat`, piece by piece.

The manual, for every route and session that hands audio out::

    from ttsq.domain.converter import converter
    from ttsq.domain.output_formats import parse_elevenlabs

    conv = converter(parse_elevenlabs("ulaw_8000"))  # UnsupportedFormat (a ValueError) for what ttsq cannot make
    send(conv.start())           # the header (WAV, mp3's Info frame, Ogg's OpusHead...), b"" for raw formats
    for piece in pcm16_24k_pieces:
        send(conv.feed(piece))   # what became final: possibly b"" (an encoder waits for a whole frame)
    send(conv.end())             # the rest: the resampler's and the codec's tail

Every call returns bytes; the bytes of all calls, joined in order, are one valid file or raw stream in that format.
:meth:`StreamConverter.start` is optional (a first :meth:`~StreamConverter.feed` or :meth:`~StreamConverter.end`
includes the header when it was not taken); empty results need not be sent. :meth:`~StreamConverter.close` frees the
encoder when a stream is abandoned (``end`` does it too). A converter is for one stream and one caller at a time;
it costs CPU in the caller's thread (:func:`converted` moves codec work to a worker thread for a route).

What it does, per piece:

1. **Resampling** (when the rate is not 24 kHz) by libswresample through a libavfilter graph (``aresample``),
   PyAV's, already a dependency of the API: a windowed-sinc filter of :data:`RESAMPLE_FILTER_SIZE` taps per phase
   with its cutoff at :data:`RESAMPLE_CUTOFF` of the lower Nyquist frequency (libsoxr's default pass band), so that
   nothing above the new Nyquist frequency folds back. swresample keeps the filter's history between pieces and
   flushes it at the end, so a stream cut into any pieces resamples to exactly the bytes of the whole in one piece
   (``tests/unit/domain/test_converter.py`` proves it for every rate, with hypothesis): no click, no gap, no sample lost or
   doubled at a piece boundary. libsoxr (python-soxr) was the other candidate: as good a filter, but a new
   dependency for what libswresample, with a longer filter than its default, already does.
2. **Sample encoding**: s16 and f32 little-endian are written as they are; µ-law and A-law by libavcodec's
   ``pcm_mulaw``/``pcm_alaw`` (G.711, nearest-step rounding).
3. **Framing**: a WAV header for the WAV formats (an open-ended one while streaming: the length is not known yet;
   :func:`convert_whole` writes the true sizes), the codec and container of :mod:`ttsq.domain.encoders` for mp3,
   opus, AAC and FLAC (which hold back an incomplete frame until the next piece).
"""

from __future__ import annotations

import asyncio
import struct
import threading
from collections.abc import AsyncIterable, AsyncIterator
from fractions import Fraction
from typing import Protocol

import av
import numpy as np
import numpy.typing as npt
from av.filter import Graph

from ttsq.domain.encoders import PieceEncoder, stream_encoder
from ttsq.domain.output_formats import NATIVE_RATE, OutputFormat

__all__ = [
    "RESAMPLE_CUTOFF",
    "RESAMPLE_FILTER_SIZE",
    "StreamConverter",
    "convert_whole",
    "converted",
    "converter",
    "wav_header",
]

RESAMPLE_FILTER_SIZE = 128
"""Taps per phase of swresample's filter (its default is 32, whose transition band lets a tone just above the new
Nyquist frequency through at about -22 dB): 128 puts the stop band below -80 dB right from the Nyquist frequency."""
RESAMPLE_CUTOFF = 0.91
"""The filter's cutoff as a fraction of the lower rate's Nyquist frequency (libsoxr's default pass band is 91.3%):
below it the audio passes flat; from the Nyquist frequency on it is stopped."""

_WAVE_FORMAT_TAGS: dict[str, tuple[int, int]] = {
    "pcm_s16le": (1, 16),
    "pcm_f32le": (3, 32),
    "pcm_alaw": (6, 8),
    "pcm_mulaw": (7, 8),
}
"""WAV ``fmt `` format tag and bits per sample of each PCM encoding (PCM, IEEE float, A-law, µ-law)."""
_OPEN_ENDED = 0xFFFFFFFF


def wav_header(fmt: OutputFormat, data_bytes: int | None = None) -> bytes:
    """A mono WAV header for ``fmt`` (a PCM encoding) before ``data_bytes`` of samples; None: an open-ended one, whose
    sizes say "until the stream ends" (0xFFFFFFFF, as streaming WAV servers send). Formats other than integer PCM
    get the 18-byte ``fmt `` chunk and the ``fact`` chunk (the sample count) the format asks of them."""
    tag, bits = _WAVE_FORMAT_TAGS[fmt.encoding]
    block = bits // 8
    fmt_chunk = struct.pack("<HHIIHH", tag, 1, fmt.sample_rate, fmt.sample_rate * block, block, bits)
    extra = b""
    if tag != 1:
        fmt_chunk += struct.pack("<H", 0)
        frames = _OPEN_ENDED if data_bytes is None else data_bytes // block
        extra = b"fact" + struct.pack("<II", 4, frames)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt_chunk)) + fmt_chunk + extra + b"data"
    if data_bytes is None:
        return b"RIFF" + struct.pack("<I", _OPEN_ENDED) + body + struct.pack("<I", _OPEN_ENDED)
    riff = len(body) + 4 + data_bytes + (data_bytes & 1)
    return b"RIFF" + struct.pack("<I", riff) + body + struct.pack("<I", data_bytes)


class _Resampler:
    """PCM16 at 24 kHz in, ``out_format`` (``s16``/``flt``) at ``rate`` out, by swresample with its state kept across
    pieces (see the module's docstring)."""

    def __init__(self, rate: int, out_format: str) -> None:
        self._graph = Graph()
        source = self._graph.add_abuffer(format="s16", sample_rate=NATIVE_RATE, layout="mono", time_base=Fraction(1, NATIVE_RATE))
        resample = self._graph.add(
            "aresample", f"{rate}:filter_size={RESAMPLE_FILTER_SIZE}:cutoff={RESAMPLE_CUTOFF}:phase_shift=10"
        )
        formatted = self._graph.add("aformat", f"sample_fmts={out_format}:sample_rates={rate}:channel_layouts=mono")
        sink = self._graph.add("abuffersink")
        source.link_to(resample)
        resample.link_to(formatted)
        formatted.link_to(sink)
        self._graph.configure()
        self._pts = 0
        self._ended = False

    def feed(self, samples: npt.NDArray[np.int16]) -> list[npt.NDArray[np.generic]]:
        if samples.size == 0:
            return []
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = NATIVE_RATE
        frame.time_base = Fraction(1, NATIVE_RATE)
        frame.pts = self._pts
        self._pts += samples.size
        self._graph.push(frame)
        return self._pull()

    def end(self) -> list[npt.NDArray[np.generic]]:
        if self._ended:
            return []
        self._ended = True
        self._graph.push(None)
        return self._pull()

    def _pull(self) -> list[npt.NDArray[np.generic]]:
        out: list[npt.NDArray[np.generic]] = []
        while True:
            try:
                frame = self._graph.pull()
            except (av.BlockingIOError, av.EOFError):
                return out
            out.append(frame.to_ndarray().reshape(-1))


class _SampleWriter(Protocol):
    """Resampled samples (s16, or f32 for ``pcm_f32le``) to bytes; a header first and a tail last."""

    def start(self) -> bytes: ...

    def feed(self, samples: npt.NDArray[np.generic]) -> bytes: ...

    def end(self) -> bytes: ...


class _RawPcm:
    """s16 or f32 little-endian, written as they are (after a WAV header for the WAV formats)."""

    def __init__(self, header: bytes, dtype: str) -> None:
        self._header = header
        self._dtype = dtype

    def start(self) -> bytes:
        return self._header

    def feed(self, samples: npt.NDArray[np.generic]) -> bytes:
        if samples.dtype == np.int16 and self._dtype == "<f4":  # 24 kHz f32: no resampler to convert it
            return (samples.astype("<f4") / np.float32(32768)).tobytes()
        return samples.astype(self._dtype, copy=False).tobytes()

    def end(self) -> bytes:
        return b""


class _G711:
    """µ-law or A-law by libavcodec (``pcm_mulaw``/``pcm_alaw``): one byte per sample, each on its own."""

    def __init__(self, codec: str, rate: int, header: bytes) -> None:
        self._context = av.CodecContext.create(codec, "w")
        self._context.sample_rate = rate  # type: ignore[attr-defined]
        self._context.layout = "mono"  # type: ignore[attr-defined]
        self._context.format = "s16"  # type: ignore[attr-defined]
        self._rate = rate
        self._header = header

    def start(self) -> bytes:
        return self._header

    def feed(self, samples: npt.NDArray[np.generic]) -> bytes:
        s16 = np.ascontiguousarray(samples, dtype=np.int16).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(s16, format="s16", layout="mono")
        frame.sample_rate = self._rate
        return b"".join(bytes(packet) for packet in self._context.encode(frame))  # type: ignore[attr-defined]

    def end(self) -> bytes:
        return b""


class _Codec:
    """mp3, opus, AAC or FLAC: the stream encoders of :mod:`ttsq.domain.encoders` at the format's rate and bit rate."""

    def __init__(self, encoder: PieceEncoder) -> None:
        self._encoder = encoder

    def start(self) -> bytes:
        return self._encoder.start()

    def feed(self, samples: npt.NDArray[np.generic]) -> bytes:
        return self._encoder.feed(np.ascontiguousarray(samples, dtype="<i2").tobytes())

    def end(self) -> bytes:
        return self._encoder.finish()


class StreamConverter:
    """One stream's conversion from PCM16 mono 24 kHz pieces into :attr:`format` (how to use it: the module's
    docstring). Not thread-safe: one caller at a time."""

    def __init__(self, fmt: OutputFormat) -> None:
        self.format = fmt
        float_out = fmt.encoding == "pcm_f32le"
        self._resampler = _Resampler(fmt.sample_rate, "flt" if float_out else "s16") if fmt.sample_rate != NATIVE_RATE else None
        header = wav_header(fmt) if fmt.wav else b""
        self._writer: _SampleWriter
        if fmt.encoding in ("pcm_s16le", "pcm_f32le"):
            self._writer = _RawPcm(header, "<f4" if float_out else "<i2")
        elif fmt.encoding in ("pcm_mulaw", "pcm_alaw"):
            self._writer = _G711(fmt.encoding, fmt.sample_rate, header)
        else:
            self._writer = _Codec(stream_encoder(fmt.encoding, fmt.sample_rate, fmt.effective_bit_rate))  # type: ignore[arg-type]
        self._odd = b""
        """A trailing byte of a piece that split a sample, kept for the next piece."""
        self._started = False
        self._ended = False
        self._busy = threading.Lock()
        """Held by :meth:`feed` and :meth:`end`, which a server runs in a worker thread: :meth:`close`, called when the
        stream is abandoned (possibly while such a call is still running), never touches libav at the same time."""

    @property
    def encodes(self) -> bool:
        """Whether a piece costs real CPU (resampling or a codec), worth a worker thread in a server."""
        return self._resampler is not None or isinstance(self._writer, _Codec)

    def start(self) -> bytes:
        """The header (before any audio, so a player can start at once); b"" for raw formats and once taken."""
        if self._started:
            return b""
        self._started = True
        return self._writer.start()

    def feed(self, pcm16_24k: bytes) -> bytes:
        """Convert one piece of PCM16 LE mono at 24 kHz (any length); return what became final (after the header, when
        :meth:`start` was not called)."""
        with self._busy:
            return self._feed(pcm16_24k)

    def _feed(self, pcm16_24k: bytes) -> bytes:
        if self._ended:
            raise ValueError("this stream has ended: a converter is for one stream")
        head = self.start()
        data = self._odd + pcm16_24k
        whole = len(data) & ~1
        self._odd = data[whole:]
        samples = np.frombuffer(data[:whole], dtype="<i2")
        if samples.size == 0:
            return head
        if self._resampler is None:
            return head + self._writer.feed(samples)
        return head + b"".join(self._writer.feed(block) for block in self._resampler.feed(samples))

    def end(self) -> bytes:
        """Flush the resampler and the codec; return the rest of the stream. Calling it again returns b""."""
        with self._busy:
            return self._end()

    def _end(self) -> bytes:
        if self._ended:
            return b""
        head = self.start()
        self._ended = True
        tail = [self._writer.feed(block) for block in self._resampler.end()] if self._resampler is not None else []
        return head + b"".join(tail) + self._writer.end()

    def close(self) -> None:
        """Free the encoder of a stream that ends early (a no-op after :meth:`end`). While a :meth:`feed` or :meth:`end`
        is still running in another thread it does nothing, and never waits: the encoder is then freed with the
        converter."""
        if not self._busy.acquire(blocking=False):
            return
        try:
            if not self._ended:
                self._ended = True
                self._writer.end()
        finally:
            self._busy.release()


def converter(fmt: OutputFormat) -> StreamConverter:
    """A fresh converter for one stream into ``fmt`` (see the module's docstring for how to drive it)."""
    return StreamConverter(fmt)


def convert_whole(pcm16_24k: bytes, fmt: OutputFormat) -> bytes:
    """A whole signal as one finished file in ``fmt``: the stream's bytes, with a WAV header that states its sizes (a
    finished file has them: Python's ``wave`` reads an open-ended header as 2^31 frames)."""
    conv = converter(fmt)
    header = conv.start()
    body = conv.feed(pcm16_24k) + conv.end()
    if fmt.wav:  # the open-ended header replaced by one that states the sizes; an odd data chunk padded to even
        return wav_header(fmt, len(body)) + body + b"\0" * (len(body) & 1)
    return header + body


async def converted(pieces: AsyncIterable[bytes], fmt: OutputFormat) -> AsyncIterator[bytes]:
    """``pieces`` (PCM16 mono 24 kHz) converted as they come: the header at once, then each piece's ready bytes, then
    the rest. Resampling and codec work run in a worker thread (a sentence costs milliseconds of CPU: BENCHMARKS.md),
    so that many streams do not stall the event loop; the plain PCM formats stay on it. An error from ``pieces``
    propagates after what was ready is sent; the converter is closed either way."""
    conv = converter(fmt)
    offload = conv.encodes
    try:
        header = conv.start()
        if header:
            yield header
        async for pcm in pieces:
            ready = await asyncio.to_thread(conv.feed, pcm) if offload else conv.feed(pcm)
            if ready:
                yield ready
        rest = await asyncio.to_thread(conv.end) if offload else conv.end()
        if rest:
            yield rest
    finally:
        conv.close()
