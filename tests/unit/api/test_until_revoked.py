"""until_revoked: a stream opened with a key ends once the key is no longer valid, and leaves its source closed
however it ends (revoked, finished, or its consumer cancelled: a client that went away)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from ttsq.api.auth import until_revoked


class Source:
    """An async generator that says whether it was closed; ``quiet`` after ``items`` items (waits for ever)."""

    def __init__(self, items: int | None) -> None:
        self.items = items
        self.closed = False

    async def run(self) -> AsyncIterator[int]:
        try:
            for n in itertools.count():
                if self.items is not None and n >= self.items:
                    await asyncio.Event().wait()  # quiet: no next item, ever
                yield n
                await asyncio.sleep(0)
        finally:
            self.closed = True


def validity(answers: list[bool]) -> tuple[list[int], Callable[[], Awaitable[bool]]]:
    asked: list[int] = []

    async def still_valid() -> bool:
        asked.append(1)
        return answers[min(len(asked), len(answers)) - 1]

    return asked, still_valid


async def test_a_quiet_stream_ends_when_the_key_is_revoked_and_its_source_is_closed() -> None:
    source = Source(items=2)
    asked, still_valid = validity([True, False])
    got = [item async for item in until_revoked(source.run(), still_valid, every_s=0.01)]
    assert got == [0, 1] and len(asked) == 2 and source.closed


async def test_a_busy_stream_is_asked_too_and_ends() -> None:
    source = Source(items=None)  # never quiet, never ends
    asked, still_valid = validity([True, True, False])
    got = [item async for item in until_revoked(source.run(), still_valid, every_s=0.001)]
    assert got and len(asked) == 3 and source.closed


async def test_a_consumer_cancelled_while_the_source_is_quiet_closes_it_cleanly() -> None:
    """The client went away: the consumer is cancelled while the next item is awaited in its own task. The source
    was closed while that task still ran it ("aclose(): asynchronous generator is already running")."""
    source = Source(items=1)
    _, still_valid = validity([True])
    stream = until_revoked(source.run(), still_valid, every_s=60)

    async def consume() -> None:
        async for _ in stream:
            pass

    consumer = asyncio.ensure_future(consume())
    for _ in range(5):
        await asyncio.sleep(0)
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    assert source.closed


async def test_a_finished_source_ends_the_stream_without_asking() -> None:
    source = Source(items=None)

    async def three() -> AsyncIterator[int]:
        async for item in source.run():
            if item == 3:
                return
            yield item

    asked, still_valid = validity([True])
    assert [item async for item in until_revoked(three(), still_valid, every_s=60)] == [0, 1, 2]
    assert asked == []
