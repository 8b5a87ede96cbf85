"""The API process's garbage-collection policy (``ttsq/runtime/collector.py``), on CPython's real collector.

Why it exists: a storm of new streams grows the heap, and growth is what triggers CPython's full collections, each
holding the event loop (``bench.listening.listeners``: 130-180 ms walks, ``/healthz`` p99 25x its rest in the storm). These tests
hold the policy's three promises: no automatic full collection while it is installed (and one without it, so the test
can tell), the start-up heap frozen out of the walks, and a scheduled full collection that frees what the young ones
cannot.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.conftest import api_client
from ttsq.runtime.collector import NEVER, collect_periodically, install


class Node:
    """A container that can sit in a reference cycle and be watched through a weak reference."""

    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of every collection CPython runs meanwhile."""
    seen: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(record)
    try:
        yield seen
    finally:
        gc.callbacks.remove(record)


def grow(objects: int) -> list[list[int]]:
    """Long-lived containers, as a storm's held streams are: each survives the young collections."""
    return [[n] for n in range(objects)]


def test_while_installed_growth_triggers_no_full_collection_and_without_it_it_does(collections: list[int]) -> None:
    restore = install()
    try:
        assert gc.get_threshold()[2] == NEVER
        held = grow(400_000)
        assert 0 in collections and 1 in collections, "the young generations are still collected"
        assert 2 not in collections
    finally:
        restore()
    del held
    collections.clear()
    again = grow(400_000)
    assert 2 in collections, "CPython's own policy collects in full as the heap grows: the check above means something"
    assert len(again) == 400_000  # held to here: the growth is what triggers the collections


def test_the_start_up_heap_is_frozen_out_of_the_walks_and_given_back() -> None:
    assert gc.get_freeze_count() == 0
    restore = install()
    try:
        assert gc.get_freeze_count() > 1000  # this process's modules, classes, fixtures
    finally:
        restore()
    assert gc.get_freeze_count() == 0


def test_two_apps_in_one_process_put_the_collector_back_only_when_both_are_gone() -> None:
    before = gc.get_threshold()
    first, second = install(), install()
    first()
    first()  # a second call changes nothing
    assert gc.get_threshold()[2] == NEVER
    second()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


async def test_the_scheduled_full_collection_frees_cyclic_garbage_the_young_collections_left() -> None:
    restore = install()
    try:
        a, b = Node(), Node()
        a.other, b.other = b, a
        watched = weakref.ref(a)
        gc.collect(1)  # the cycle survives while referenced: it is in the old generation now
        del a, b
        gc.collect(1)  # a young collection does not look at the old generation
        assert watched() is not None
        stop = asyncio.Event()
        ticks: list[float] = []
        durations: list[float] = []

        async def tick(event: asyncio.Event, seconds: float) -> bool:
            """The schedule's clock: one period passes, then the app stops."""
            ticks.append(seconds)
            return len(ticks) > 1

        await collect_periodically(30.0, stop, wait=tick, on_collect=durations.append)
        assert ticks == [30.0, 30.0] and len(durations) == 1
        assert watched() is None
    finally:
        restore()


async def test_the_api_installs_it_for_its_life_and_reports_each_collection(redis: Redis, make_settings: Any) -> None:
    default = gc.get_threshold()
    async with api_client(make_settings()) as (client, _app):
        assert gc.get_threshold()[2] == NEVER and gc.get_freeze_count() > 0
        assert "ttsq_api_gc_full_collection_seconds_count 0.0" in (await client.get("/metrics")).text
    assert gc.get_threshold() == default and gc.get_freeze_count() == 0
    async with api_client(make_settings(gc_full_collection_s=0)):
        assert gc.get_threshold() == default and gc.get_freeze_count() == 0
