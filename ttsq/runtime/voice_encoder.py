"""A worker's side of voice encoding: take reference recordings off Redis and encode them on the model's thread.

Runs beside the claim loop in every worker once its model is loaded (:class:`ttsq.runtime.worker.Worker`), so a
deployment that can synthesise can make voices from recordings, with no process of its own. The encoding itself is
a call on the inference thread between two decode steps (the model is used from that one thread only), the
exchange with the API :class:`ttsq.store.voice_encodings.VoiceEncodings`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np
import numpy.typing as npt

from ttsq.domain.audio import SAMPLE_RATE
from ttsq.runtime.upkeep import REDIS_ERRORS, RedisOutage, end_loop
from ttsq.store.voice_encodings import VoiceEncodings

__all__ = ["VoiceEncoderLoop"]

log = logging.getLogger(__name__)

_OUTAGE_BACKOFF_S = 1.0


class VoiceEncoderLoop:
    """Serves encode requests until :meth:`stop`; ``call`` runs a function on the inference thread.

    :meth:`stop` cancels it and also signals it (:func:`ttsq.runtime.upkeep.end_loop`): with cancellation alone, a
    cancel absorbed inside the blocking ``BLPOP`` would leave it serving on, and the worker's shutdown, which awaited
    it, waiting forever.

    ``outage`` is the worker's one Redis-outage policy (:class:`ttsq.runtime.upkeep.RedisOutage`): an outage this
    loop meets is the worker's, warned about once, and its pause ends as soon as any of the worker's calls gets
    through (a loop of its own would warn at every retry)."""

    def __init__(
        self,
        encodings: VoiceEncodings,
        encode: Callable[[npt.NDArray[np.float32]], str],
        call: Callable[[Callable[[], str]], Future[str]],
        outage: RedisOutage | None = None,
    ) -> None:
        self.encodings = encodings
        self._encode = encode
        self._call = call
        self._outage = outage if outage is not None else RedisOutage(log, "voice encodings wait until it is back")
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self.served = 0

    def start(self) -> None:
        self._closing.clear()
        self._task = asyncio.create_task(self._run(), name="voice-encoder")

    async def stop(self) -> None:
        """Cancel the loop now — a recording in hand goes unanswered, and its API's wait ends with an error — and, if
        the cancel is absorbed, let it end by signal at its next read; returns within 2 s either way."""
        task, self._task = self._task, None
        await end_loop(task, self._closing, wait_s=0.0)

    async def _on_thread(self, samples: npt.NDArray[np.float32]) -> str:
        return await asyncio.wrap_future(self._call(lambda: self._encode(samples)))

    async def _run(self) -> None:
        while not self._closing.is_set():
            try:
                request = await self.encodings.take()
                self._outage.back()
                if request is None:
                    continue
                await self.encodings.answer(request, self._on_thread)
                self.served += 1
                log.info("encoded a reference recording of %.1f s", request.samples.size / SAMPLE_RATE)
            except REDIS_ERRORS as exc:
                self._outage.lost("voice encoding", exc)
                await self._outage.pause(_OUTAGE_BACKOFF_S, self._closing)
