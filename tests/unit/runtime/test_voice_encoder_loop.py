"""The worker's voice-encoding loop ends when the worker stops, even when a cancellation is absorbed.

A cancellation that lands inside a redis-py command can be absorbed by the client (``ttsq.runtime.upkeep``). The loop
used to be stopped by cancellation alone and awaited without a bound: a loop that absorbed the cancel would serve on,
and the worker's shutdown, which awaits it first, would never finish. Real Redis, a real blocking ``BLPOP``.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

import numpy as np
import numpy.typing as npt
from redis.asyncio import Redis

from tests.conftest import queue_config
from ttsq.runtime.voice_encoder import VoiceEncoderLoop
from ttsq.store.keys import Keys
from ttsq.store.voice_encodings import EncodeRequest, VoiceEncodings

BLOCK_S = 1.5
"""Each BLPOP waits this long for a recording, and none comes."""


class ReadingEncodings(VoiceEncodings):
    """The real exchange, saying when the loop is in its read."""

    def __init__(self, redis: Redis) -> None:
        super().__init__(redis, Keys(queue_config().namespace), BLOCK_S)
        self.reading = asyncio.Event()

    async def take(self) -> EncodeRequest | None:
        self.reading.set()
        return await super().take()


class AbsorbingEncodings(ReadingEncodings):
    """A cancel that lands in its read is swallowed, as redis-py can do."""

    absorbed = 0

    async def take(self) -> EncodeRequest | None:
        try:
            return await super().take()
        except asyncio.CancelledError:
            self.absorbed += 1
            return None


def never_called(_: object) -> Future[str]:
    raise AssertionError("no recording was sent")


def no_encoder(_: npt.NDArray[np.float32]) -> str:
    raise AssertionError("no recording was sent")


async def test_stop_ends_the_loop_even_when_the_cancel_is_absorbed_in_a_redis_read(redis: Redis) -> None:
    encodings = AbsorbingEncodings(redis)
    loop = VoiceEncoderLoop(encodings, no_encoder, never_called)
    loop.start()
    task = loop._task
    await asyncio.wait_for(encodings.reading.wait(), 30)  # the loop waits in its BLPOP

    await asyncio.wait_for(loop.stop(), 30)  # a hang guard: the loop absorbed the cancel, and stop used to wait forever

    assert encodings.absorbed == 1, "the cancel landed in the read and was swallowed"
    assert task is not None and task.done(), "the loop ended by the signal instead"


async def test_stop_of_a_loop_waiting_for_recordings_cancels_its_read_at_once(redis: Redis) -> None:
    encodings = ReadingEncodings(redis)
    loop = VoiceEncoderLoop(encodings, no_encoder, never_called)
    loop.start()
    task = loop._task
    await asyncio.wait_for(encodings.reading.wait(), 30)
    await asyncio.wait_for(loop.stop(), 30)
    assert task is not None and task.cancelled(), "cancelled in its read, not left to finish the BLPOP"
