"""Reading a job's audio as it is produced, for progressive playback.

The worker publishes each sentence chunk's joined piece as PCM16 to a Redis Stream
(``ttsq.store.queue.JobQueue.publish_piece``). Readers follow that stream; a job that has no stream (a
cache hit, or a stream that expired) is served from its stored result instead, so every finished
task can be streamed.

Container: raw PCM16 LE mono 24 kHz, or WAV with an open-ended header (RIFF and data sizes set to
0xFFFFFFFF, as streaming WAV servers do): players start at once and read until the connection
ends. Compressed formats are not streamed: their encoders need the whole signal for a clean file.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from typing import Literal

from ttsq.domain.audio import SAMPLE_RATE, decode_to_pcm16
from ttsq.domain.jobs import Status
from ttsq.store.queue import JobQueue

StreamFormat = Literal["wav", "pcm"]
STREAM_CONTENT_TYPES: dict[str, str] = {"wav": "audio/wav", "pcm": "audio/pcm"}
_OPEN_ENDED = 0xFFFFFFFF


def open_ended_wav_header(sample_rate: int = SAMPLE_RATE) -> bytes:
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


class StreamFailed(Exception):
    """The job failed while (or before) its audio was being streamed."""


async def pcm_pieces(queue: JobQueue, job_id: str, block_ms: int = 1000) -> AsyncIterator[bytes]:
    """Yield the job's PCM16 audio piece by piece until it is complete.

    A retried attempt republishes from its first piece; pieces already sent are skipped by
    index (an attempt is deterministic: the job carries its seed), so the listener never hears
    a sentence twice.
    """
    after, next_index, streamed, wait = "0", 0, False, False
    while True:
        # The first read never blocks: a job that is already done (a cache hit) has no stream
        # to wait for, and its stored result is sent at once.
        entries = await queue.read_stream(job_id, after, block_ms if wait else None)
        wait = True
        ended = False
        for entry_id, fields in entries:
            after = entry_id
            if "end" in fields:
                ended = True
                break
            streamed = True
            index = int(fields["index"])
            if index < next_index:
                continue
            next_index = index + 1
            if fields["pcm"]:
                yield fields["pcm"]
        if ended and streamed:
            return
        if entries and not ended:
            continue
        job = await queue.get(job_id)
        if job is None:
            return
        if job.status is Status.FAILED:
            raise StreamFailed(job.error or "the job failed")
        if job.status is Status.CANCELLED:
            raise StreamFailed("the task was cancelled")
        if job.status is Status.DONE:
            if not streamed:
                audio = await queue.result(job_id)
                if audio is not None:
                    yield audio if job.params.format == "pcm" else decode_to_pcm16(audio)
            return


async def audio_stream(queue: JobQueue, job_id: str, fmt: StreamFormat) -> AsyncIterator[bytes]:
    if fmt == "wav":
        yield open_ended_wav_header()
    try:
        async for piece in pcm_pieces(queue, job_id):
            yield piece
    except StreamFailed:
        return
