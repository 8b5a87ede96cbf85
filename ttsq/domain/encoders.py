"""Incremental encoders: PCM16 pieces in, the bytes of one growing file out, as soon as whole frames exist.

A job's audio arrives sentence by sentence (:mod:`ttsq.store.streams`); a listener wants the format it asked for
from the first sentence on, not after the last. Each :class:`PieceEncoder` is fed PCM16 LE mono pieces as they
come and hands back the bytes that are final: whatever the codec has finished encoding and the container has
framed. Everything emitted, concatenated, is one valid file, so a client may save the body and play it.

The codecs and containers are libav's (PyAV, chosen by measurement: ``bench/listening/encoders.py``, BENCHMARKS.md).
What a stream cannot do is go back: a muxer that would rewrite its header at the end (MP3's Xing/LAME frame,
FLAC's STREAMINFO) writes into a :class:`_ForwardSink`, which drops writes into bytes already sent. So:

- **mp3** (layer III: MPEG-2 up to 24 kHz, 576 samples a frame; MPEG-1 from 32 kHz, 1,152): the header is a
  Xing frame with a LAME tag. libav fills in the tag's encoder delay only in its end-of-file rewrite; LAME's delay
  is fixed (576 samples), so it is written at the start (:func:`_announce_mp3_delay`) and decoders that read the
  tag (ffmpeg, PyAV) trim the priming. The frame count and end padding are known only at the end, so the decoded
  tail keeps the padding.
- **opus** in Ogg: ``OpusHead`` carries the pre-skip and the last page's granule position trims the end, so
  decoders return exactly the samples fed. libopus takes the 24 kHz input itself; Ogg Opus counts in 48 kHz,
  which is what PyAV/ffmpeg decode to (soundfile decodes at the 24 kHz recorded in ``OpusHead``).
- **aac** in ADTS (what OpenAI's ``aac`` is): ADTS has no place for priming or padding, so a decoder returns
  1,024 priming samples before the audio and pads the last frame (at most 2,047 samples more in all).
- **flac**: STREAMINFO says "total samples unknown" (allowed by the format); decoders return exactly the samples
  fed. A reader that trusts the total (libsndfile's ``frames``) must read until the end instead.
- **wav**: an open-ended header (sizes 0xFFFFFFFF, as streaming WAV servers send) and the samples; **pcm**: the
  samples.

Pieces need not be frame-aligned: a codec keeps the samples of an incomplete frame until the next piece (or
:meth:`PieceEncoder.finish`). Encoding costs CPU in the caller's thread; :func:`encoded` moves it off the event loop.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, Protocol, cast

import av
import numpy as np
from av.audio.stream import AudioStream

__all__ = [
    "STREAM_CONTENT_TYPES",
    "PieceEncoder",
    "StreamFormat",
    "decode_pcm16",
    "encode_whole",
    "open_ended_wav_header",
    "stream_encoder",
]

StreamFormat = Literal["wav", "pcm", "mp3", "opus", "aac", "flac"]
STREAM_CONTENT_TYPES: dict[str, str] = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg; codecs=opus",
    "aac": "audio/aac",
    "flac": "audio/flac",
}

_OPEN_ENDED = 0xFFFFFFFF


def open_ended_wav_header(sample_rate: int) -> bytes:
    """A 44-byte PCM16 mono WAV header whose sizes say "until the stream ends"."""
    byte_rate = sample_rate * 2
    return (
        b"RIFF"
        + struct.pack("<I", _OPEN_ENDED)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, byte_rate, 2, 16)
        + b"data"
        + struct.pack("<I", _OPEN_ENDED)
    )


class PieceEncoder(Protocol):
    """One stream's encoder: :meth:`start`, then :meth:`feed` per piece, then :meth:`finish`, each returning the
    bytes that became final (possibly none). Not thread-safe: one caller at a time."""

    def start(self) -> bytes:
        """The file's header, before any audio (so a player can start at once)."""
        ...

    def feed(self, pcm: bytes) -> bytes:
        """Encode a piece of PCM16 LE mono; return what is ready."""
        ...

    def finish(self) -> bytes:
        """Flush the codec and close the container; return the rest of the file."""
        ...


class _Passthrough:
    """wav (an open-ended header, then the samples) and pcm (the samples): nothing to encode."""

    def __init__(self, header: bytes) -> None:
        self._header = header

    def start(self) -> bytes:
        return self._header

    def feed(self, pcm: bytes) -> bytes:
        return pcm

    def finish(self) -> bytes:
        return b""


class _ForwardSink:
    """A seekable file for libav that only ever emits forward.

    Seekable, so that muxers write the headers they write only to seekable outputs (MP3's Info frame with the
    encoder delay); forward-only, because what was sent cannot be unsent: a write into bytes already taken (the
    end-of-file header rewrite) is dropped, and the header keeps its "unknown length" values.
    """

    def __init__(self) -> None:
        self._pending = bytearray()
        """Bytes from ``_taken`` on: written, not taken yet (what was taken is not kept)."""
        self._taken = 0
        self._pos = 0

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        if self._pos >= self._taken:  # a write into bytes already taken is dropped
            at = self._pos - self._taken
            self._pending[at : at + len(chunk)] = chunk
        self._pos += len(chunk)
        return len(chunk)

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._taken + len(self._pending)}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def take(self) -> bytes:
        """The bytes written since the last take; from now on they are final."""
        out = bytes(self._pending)
        self._taken += len(out)
        self._pending.clear()
        return out


_LAME_ENCODER_DELAY = 576
"""Samples LAME puts before the audio (its ``ENCDELAY``; a decoder adds 529 of its own, which readers of the tag
know to add)."""
_MPEG1_MONO_SIDE_INFO = 17
_MPEG2_MONO_SIDE_INFO = 9
"""Bytes between a mono layer III frame's 4-byte header and its Xing tag: 17 in MPEG-1, 9 in MPEG-2 and 2.5."""
_XING_TAG_BYTES = 120
"""``Xing``/``Info``, flags, frames, bytes, a 100-byte table of contents, quality: where the LAME tag starts."""


def _crc16(data: bytes) -> int:
    """CRC-16/ARC (reflected 0x8005, initial 0): the LAME tag's own checksum."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


def _announce_mp3_delay(header: bytes) -> bytes:
    """``header`` with LAME's encoder delay in its LAME tag (and the tag's CRC to match), end padding left 0.

    libav's muxer writes the delay only when it rewrites the tag at the end of the file, which a stream cannot do;
    without it, decoders keep the 576 samples of priming. Returned unchanged where the tag is not found.
    """
    xing = max(header.find(b"Xing"), header.find(b"Info"))
    starts = (xing - 4 - _MPEG1_MONO_SIDE_INFO, xing - 4 - _MPEG2_MONO_SIDE_INFO)
    frame = next((at for at in starts if at >= 0 and _frame_side_info(header, at) == xing - 4 - at), -1)
    tag = xing + _XING_TAG_BYTES
    if xing < 0 or frame < 0 or len(header) < tag + 36:
        return header
    patched = bytearray(header)
    patched[tag + 21 : tag + 24] = (_LAME_ENCODER_DELAY << 12).to_bytes(3, "big")
    patched[tag + 34 : tag + 36] = _crc16(bytes(patched[frame : tag + 34])).to_bytes(2, "big")
    return bytes(patched)


def _frame_side_info(data: bytes, at: int) -> int | None:
    """The side-information size of the mono layer III frame whose header starts at ``at``; None if none starts there."""
    if at + 4 > len(data) or data[at] != 0xFF or data[at + 1] & 0xE0 != 0xE0:
        return None
    version = (data[at + 1] >> 3) & 3  # 3: MPEG-1, 2: MPEG-2, 0: MPEG-2.5
    return _MPEG1_MONO_SIDE_INFO if version == 3 else _MPEG2_MONO_SIDE_INFO


@dataclass(frozen=True)
class _Codec:
    muxer: str
    codec: str
    bit_rate: int | None
    container_options: dict[str, str]


_CODECS: dict[str, _Codec] = {
    "mp3": _Codec("mp3", "libmp3lame", 48_000, {}),
    # page_duration: the Ogg muxer holds packets until a page spans this long (default 1 s); 100 ms keeps at most
    # that much audio behind a piece's end while the page overhead stays ~1.5 kbit/s (one page per 20 ms: ~11).
    "opus": _Codec("ogg", "libopus", 32_000, {"page_duration": "100000"}),
    "aac": _Codec("adts", "aac", 48_000, {}),
    "flac": _Codec("flac", "flac", None, {}),
}


class _LibavEncoder:
    """A libav codec and muxer writing into a :class:`_ForwardSink`, fed PCM16 through PyAV."""

    def __init__(self, fmt: str, sample_rate: int, bit_rate: int | None = None) -> None:
        spec = _CODECS[fmt]
        self._rate = sample_rate
        self._sink = _ForwardSink()
        self._container = av.open(self._sink, "w", format=spec.muxer, container_options=spec.container_options)
        self._stream = cast(AudioStream, self._container.add_stream(spec.codec, rate=sample_rate, layout="mono"))
        if spec.bit_rate is not None:
            self._stream.bit_rate = spec.bit_rate if bit_rate is None else bit_rate
        self._mp3 = fmt == "mp3"
        self._pts = 0
        self._closed = False

    def start(self) -> bytes:
        self._container.start_encoding()
        header = self._sink.take()
        return _announce_mp3_delay(header) if self._mp3 else header

    def feed(self, pcm: bytes) -> bytes:
        samples = np.frombuffer(pcm, dtype="<i2")
        if samples.size:
            frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
            frame.sample_rate = self._rate
            frame.time_base = Fraction(1, self._rate)
            frame.pts = self._pts
            self._pts += samples.size
            self._container.mux(self._stream.encode(frame))
        return self._sink.take()

    def finish(self) -> bytes:
        if not self._closed:
            self._closed = True
            self._container.mux(self._stream.encode(None))
            self._container.close()
        return self._sink.take()


def stream_encoder(fmt: StreamFormat, sample_rate: int, bit_rate: int | None = None) -> PieceEncoder:
    """A fresh encoder for one stream of PCM16 LE mono at ``sample_rate`` in ``fmt``; ``bit_rate`` (bit/s) for mp3, opus
    and AAC, None for the format's default. Rates and bit rates are checked by :class:`~ttsq.domain.output_formats.
    OutputFormat`, which is how every route asks for one (:mod:`ttsq.domain.converter`)."""
    if fmt == "wav":
        return _Passthrough(open_ended_wav_header(sample_rate))
    if fmt == "pcm":
        return _Passthrough(b"")
    if fmt not in _CODECS:
        raise ValueError(f"no stream encoder for {fmt!r}")
    return _LibavEncoder(fmt, sample_rate, bit_rate)


def encode_whole(pcm: bytes, fmt: StreamFormat, sample_rate: int) -> bytes:
    """A whole signal through the stream encoder: the stored file of a format only libav encodes (aac)."""
    encoder = stream_encoder(fmt, sample_rate)
    return encoder.start() + encoder.feed(pcm) + encoder.finish()


def decode_pcm16(audio: bytes, sample_rate: int) -> bytes:
    """Any file libav reads (ADTS AAC included, which libsndfile cannot) as PCM16 LE mono at ``sample_rate``.

    Decoders that know the stream's priming and padding (an MP3 Info frame, Ogg Opus's pre-skip and end
    granule) leave them out; ADTS carries neither, so its 1,024 priming samples come first.
    """
    resampler = av.AudioResampler(format="s16", layout="mono", rate=sample_rate)
    out = bytearray()
    with av.open(io.BytesIO(audio), "r") as container:
        for frame in container.decode(audio=0):
            for converted in resampler.resample(frame):
                out += converted.to_ndarray().tobytes()
    for converted in resampler.resample(None):
        out += converted.to_ndarray().tobytes()
    return bytes(out)
