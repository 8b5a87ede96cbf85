"""The audio a foreign protocol asks for (Cartesia's ``output_format``, Google's ``audioConfig``), and ttsq's PCM16 at
24 kHz converted into it, as one small seam: the protocol modules (:mod:`ttsq.api.cartesia`, :mod:`ttsq.api.google`)
ask here, and nowhere else, what a format is and how to make it.

What ttsq makes here is what its stream encoders make (:mod:`ttsq.domain.encoders`): PCM16 (raw or in WAV), mp3 and
Ogg Opus at 24 kHz. Anything else a protocol names is refused by name with :class:`UnsupportedFormat` (a
:class:`ValueError`), which a route answers with a 400 in its protocol's shape: never a different format than asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from starlette.types import Receive

from ttsq.api.service import NoWorker, StreamAborted, StreamFailed
from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.encoders import STREAM_CONTENT_TYPES, StreamFormat, encoded, stream_encoder

__all__ = [
    "OutputFormat",
    "UnsupportedFormat",
    "convert_whole",
    "converted",
    "parse_cartesia",
    "parse_google",
    "streamed",
    "unless_disconnected",
    "whole_file",
]
T = TypeVar("T")


class UnsupportedFormat(ValueError):
    """A format ttsq cannot make; the message names it and what ttsq makes instead."""


@dataclass(frozen=True)
class OutputFormat:
    """One output format ttsq can make: the stream encoder's format, at 24 kHz."""

    stream_format: StreamFormat
    sample_rate: int = SAMPLE_RATE

    @property
    def wav(self) -> bool:
        return self.stream_format == "wav"

    @property
    def content_type(self) -> str:
        return STREAM_CONTENT_TYPES[self.stream_format]

    @property
    def label(self) -> str:
        return f"{self.stream_format} at {self.sample_rate} Hz"


_CARTESIA_MADE = "raw or wav pcm_s16le at 24000 Hz"


def parse_cartesia(output_format: Mapping[str, object]) -> OutputFormat:
    """A Cartesia ``output_format`` object (``{"container", "encoding", "sample_rate"}``, or ``bit_rate`` for mp3)."""
    container, encoding, rate = (output_format.get(name) for name in ("container", "encoding", "sample_rate"))
    if container in ("raw", "wav") and encoding == "pcm_s16le" and rate == SAMPLE_RATE:
        return OutputFormat("pcm" if container == "raw" else "wav")
    asked = ", ".join(f"{name} {value!r}" for name, value in output_format.items())
    raise UnsupportedFormat(f"output_format ({asked}) is not supported; ttsq answers {_CARTESIA_MADE}")


_GOOGLE: dict[str, StreamFormat] = {"LINEAR16": "wav", "PCM": "pcm", "MP3": "mp3", "OGG_OPUS": "opus"}


def parse_google(audio_encoding: str, sample_rate_hertz: int | None = None) -> OutputFormat:
    """Google's ``audioConfig.audioEncoding`` and ``sampleRateHertz`` (None or 0: the encoding's own rate)."""
    made = _GOOGLE.get(audio_encoding)
    if made is None or sample_rate_hertz not in (None, 0, SAMPLE_RATE):
        raise UnsupportedFormat(
            f"audioEncoding {audio_encoding} at sampleRateHertz {sample_rate_hertz or 'default'} is not supported; "
            f"ttsq answers {', '.join(_GOOGLE)} at {SAMPLE_RATE} Hz"
        )
    return OutputFormat(made)


def converted(pieces: AsyncIterable[bytes], fmt: OutputFormat) -> AsyncIterator[bytes]:
    """``pieces`` (PCM16 mono at 24 kHz, as a task's audio comes) as the bytes of one stream in ``fmt``."""
    return encoded(pieces, fmt.stream_format, SAMPLE_RATE)


def convert_whole(pcm: bytes, fmt: OutputFormat) -> bytes:
    """A whole signal as one finished file in ``fmt``; a WAV header states its sizes (Python's ``wave`` reads an
    open-ended one as 2^31 frames)."""
    encoder = stream_encoder(fmt.stream_format, SAMPLE_RATE)
    header, body = encoder.start(), encoder.feed(pcm) + encoder.finish()
    if fmt.wav:
        data = len(body).to_bytes(4, "little")
        return header[:4] + (36 + len(body)).to_bytes(4, "little") + header[8:40] + data + body
    return header + body


async def unless_disconnected(receive: Receive, work: Awaitable[T]) -> T | None:
    """``work``'s result, or None when the client goes away first (its connection closes: ``http.disconnect``), and
    ``work`` is cancelled. For a route whose answer is one piece made at the end (a whole file, a JSON body): its
    handler would otherwise wait out the task for a client that is gone, and never give the task up.
    ``receive``: the request's, once its body has been read."""

    async def gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    working = asyncio.ensure_future(work)
    watching = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({working, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watching.cancel()
        if not working.done():
            working.cancel()
        await asyncio.gather(working, watching, return_exceptions=True)
    return None if working.cancelled() else working.result()


async def whole_file(pcm: AsyncIterator[bytes], fmt: OutputFormat, receive: Receive) -> bytes | None:
    """A task's audio (``pcm``, its PCM16 pieces) once it has all come, as one finished file in ``fmt`` (encoded in a
    worker thread); None when the client went away first (:func:`unless_disconnected`). What ``pcm`` raises (the task
    failed, no worker is left) is raised."""

    async def joined() -> bytes:
        pieces = []
        try:
            async for piece in pcm:
                pieces.append(piece)
        finally:
            closing = getattr(pcm, "aclose", None)  # at once, not when collected: it holds a listener's subscription
            if closing is not None:
                await closing()
        return b"".join(pieces)

    audio = await unless_disconnected(receive, joined())
    return None if audio is None else await asyncio.to_thread(convert_whole, audio, fmt)


async def streamed(pcm: AsyncIterator[bytes], fmt: OutputFormat) -> AsyncIterator[bytes]:
    """A task's audio (``pcm``) as the body of an answer whose status is sent already: converted into ``fmt`` as it
    comes, and broken off (:class:`~ttsq.api.service.StreamAborted`) if the task fails, its audio cannot be delivered
    whole, or no worker is left to finish it. A raw audio body has no other way to say so: an end that looks clean
    would pass what came for the whole."""
    try:
        async for piece in converted(pcm, fmt):
            yield piece
    except (StreamFailed, NoWorker) as exc:
        raise StreamAborted(str(exc)) from None
