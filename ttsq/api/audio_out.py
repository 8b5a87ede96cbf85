"""The audio a route of another vendor's protocol answers with as one finished file (Cartesia's ``/tts/bytes`` in WAV,
Google's ``text:synthesize``): a task's PCM16 converted into the format the protocol asked for
(:mod:`ttsq.domain.output_formats` names it, :mod:`ttsq.domain.converter` makes it) once all of it has come, and
what happens when the client goes away first. Audio streamed as it comes is
:meth:`ttsq.api.service.ListeningService.audio`'s, as on every route.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from starlette.types import Receive

from ttsq.domain.converter import convert_whole
from ttsq.domain.output_formats import OutputFormat

__all__ = ["unless_disconnected", "whole_file"]
T = TypeVar("T")


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
