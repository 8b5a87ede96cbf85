"""``STREAM_ADMISSION=refuse``: a submit is refused (429 + ``Retry-After``) while no live worker has room for a stream.

Each worker with admission on reports in its heartbeat how many more streams it can start and keep ahead of playback
(``stream_room``: :func:`ttsq.inference.playback.stream_room`, from its measured decode steps). A submit while those
add up to nothing would wait in the queue behind streams that fill every worker; with ``refuse`` it is turned away at
once instead, so a voice agent can fall back or retry, and the streams admitted keep their promise. The figure is as
fresh as the last heartbeats (``HEARTBEAT_INTERVAL_S``); with no worker reporting one, nothing is refused.
"""

from __future__ import annotations

from ttsq.store.heartbeats import Heartbeats
from ttsq.store.queue import QueueFullError


class StreamsFullError(QueueFullError):
    """Every live worker's real-time streams are taken (a 429 with ``Retry-After``, like a full queue)."""

    def __init__(self) -> None:
        Exception.__init__(self, "every worker is streaming as many voices as it can keep real-time; try again shortly")
        self.depth = 0


async def refuse_past_stream_capacity(heartbeats: Heartbeats) -> None:
    """Raise :class:`StreamsFullError` when the live workers report no room for another stream."""
    room = await heartbeats.stream_room()
    if room is not None and room <= 0:
        raise StreamsFullError
