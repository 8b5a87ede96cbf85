"""A Redis outage under a realtime connection is a pause, not an end: its calls (a chunk's submit, an abandon, a key's
recheck) are tried again for up to ``LISTEN_OUTAGE_S`` from their first failure — a restart, a Sentinel failover, a
Cluster slot move — as the stream listener rides one out for the audio."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.backoff import EqualJitterBackoff

from ttsq.store.connection import STORE_ERRORS

__all__ = ["OUTAGE_BACKOFF", "ride_out"]

log = logging.getLogger("ttsq.api.realtime")
T = TypeVar("T")

OUTAGE_BACKOFF = EqualJitterBackoff(cap=1.0, base=0.05)
"""The pauses between a connection's tries of a Redis call during an outage: doubling from 50 ms up to 1 s, each drawn
from its upper half, so the connections of a process that all met one failover do not all come back in the same
instant."""


async def ride_out(call: Callable[[], Awaitable[T]], what: str, who: str, outage_s: float, clock: Callable[[], float]) -> T:
    """``call()``, tried again through a Redis outage for up to ``outage_s`` from its first failure: the connection
    ``who`` pauses instead of ending; past it, the error is raised (the connection ends with 1013)."""
    failing_since: float | None = None
    failures = 0
    while True:
        try:
            result = await call()
        except STORE_ERRORS as exc:
            now = clock()
            if failing_since is None:
                failing_since = now
                said = "realtime session %s could not %s: Redis unavailable (%s); trying again for up to %g s"
                log.warning(said, who, what, exc, outage_s)
            left = failing_since + outage_s - now
            if left <= 0:
                raise
            failures += 1
            await asyncio.sleep(min(left, OUTAGE_BACKOFF.compute(failures)))
        else:
            if failing_since is not None:
                log.info("realtime session %s: Redis answers again; it could %s", who, what)
            return result
