"""One listener per API process: a single reader follows the Redis Streams of every job some client waits on.

Why this shape. A job's audio stream (:mod:`ttsq.store.streams`) is already the durable log of everything a
waiting client cares about: each piece of audio, the start of each attempt (``claim.lua``), a retry's wait
(``fail.lua``), a detached caller (``cancel.lua``) and the job's end, whichever it is (``finish.lua``: done, failed
for good, dead-lettered, cancelled). So one ``XREAD BLOCK`` over the streams of every job followed in this
process replaces both the per-client poll of the job record and the per-client blocking read: a piece crosses
the wire once per process and is fanned out in memory to every :class:`Subscription` of its job. Pub/sub was the
other candidate; it would add a second, lossy channel next to the log (a message published while the listener
reconnects is gone, so it must read the log anyway), and Redis Cluster's sharded pub/sub needs a connection per
node. Reading the log itself is lossless by construction: the listener keeps, for each job, the id of the last
entry it read, and after any outage (a Redis restart, a failover) it simply reads again from there, so no piece
is lost and none is read twice.

The blocking read is re-issued when the set of followed jobs grows: a new subscription appends one entry to this
process's *wake* stream, which the read always includes, so it returns at once (one ``XADD`` + ``EXPIRE`` per
wake; wakes coalesce while one is pending). A quiet read returns after ``LISTEN_BLOCK_S`` (below the Redis socket
timeout) and is issued again: with nothing happening, the listener costs one command per ``LISTEN_BLOCK_S`` per group,
whatever the number of clients, and one connection per group; with no subscription at all it sends nothing.

Groups. On one server (or a Sentinel-managed primary) every followed stream is read by one command. On a Redis
Cluster a multi-key ``XREAD`` must stay within one slot: every key of a queue shard carries the shard's hash tag
(:mod:`ttsq.store.keys`), so there is one group per shard, each reading its own shard's streams on the node that
holds them (and its own wake stream, with the same tag).

Each group also follows its shards' *moves* streams (``claim.lua`` and ``cancel.lua`` add an entry when jobs leave
a queue), so that a client of a queued task re-reads its position only when it may have changed.

A subscriber starts with its own backlog: one ``XRANGE`` from the id it asks for (``"0"``: the whole stream; an
SSE ``Last-Event-ID``: what came after it), or one ``XREVRANGE`` to start from now. It then joins its job's feed;
if the feed had already read past its backlog, the gap is read once more, so the subscriber sees every entry
after its id exactly once, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError

from ttsq.store.connection import STORE_ERRORS, RedisClient
from ttsq.store.keys import Keys, Shards
from ttsq.store.replies import text

__all__ = ["Entry", "JobListener", "ListenerConfig", "ListenerOutage", "Subscription", "Update", "entry_order"]

log = logging.getLogger("ttsq.listener")

T = TypeVar("T")

Entry = tuple[str, dict[str, bytes]]
"""One stream entry: its id and its fields (names decoded, values as Redis keeps them)."""


def entry_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id as a sortable pair (``"1700000000000-3"`` → ``(1700000000000, 3)``; ``"0"`` → ``(0, 0)``)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _entries(reply: Any) -> list[Entry]:
    return [(text(entry_id), {text(name): value for name, value in fields.items()}) for entry_id, fields in reply]


@dataclass(frozen=True)
class ListenerConfig:
    """The listener's timings. Built from settings by ``settings.py`` (``LISTEN_*``)."""

    block_s: float
    """The longest single blocking read (``LISTEN_BLOCK_S``, below the Redis socket timeout)."""
    retry_s: float
    """Pause before reading again after Redis could not be reached (``LISTEN_RETRY_S``)."""
    outage_s: float
    """How long Redis may stay unreachable before the subscribers are told (``LISTEN_OUTAGE_S``): a restart or a
    failover is ridden out (they resume where they were), a Redis that stays away ends them with an error."""


class ListenerOutage(RedisConnectionError):
    """Redis has been unreachable for longer than ``LISTEN_OUTAGE_S``: raised to each subscriber, as a connection
    error (what a read of its own would have raised), so its caller's outage path handles it."""


@dataclass
class Update:
    """What a subscriber has been handed since it last asked."""

    entries: list[Entry] = field(default_factory=list)
    """New entries of its job's stream, in order, none seen before."""
    moved: bool = False
    """Jobs left its shard's queue: a queued job's position may have changed."""
    gone: bool = False
    """After an outage, the job's record was not found: Redis lost it (a restart without persistence)."""

    def __bool__(self) -> bool:
        return bool(self.entries) or self.moved or self.gone


@dataclass
class _Feed:
    """One followed job: its stream, the id the listener has read up to, and its subscribers."""

    job_id: str
    stream: str
    job_key: str
    moves: str
    cursor: str
    subscribers: set[Subscription] = field(default_factory=set)


@dataclass
class _Group:
    """The jobs one blocking read follows: all of them on one server, one shard's on a cluster."""

    wake: str
    wake_cursor: str = "0"
    moves_cursors: dict[str, str] = field(default_factory=dict)
    feeds: dict[str, _Feed] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    blocked: bool = False
    waking: bool = False
    task: asyncio.Task[None] | None = None


class Subscription:
    """One client's view of one job's stream: every entry after its start, once, in order (:meth:`next`)."""

    def __init__(self, job_id: str, seen: str) -> None:
        self.job_id = job_id
        self.seen = seen
        """The id of the newest entry handed to this subscriber (or its start)."""
        self.backlog: list[Entry] = []
        """The entries that existed when it subscribed (after its start id), read by :meth:`JobListener.follow`."""
        self._pending: deque[Entry] = deque()
        self._moved = False
        self._gone = False
        self._lost = False
        self._signal = asyncio.Event()

    def _deliver(self, entries: list[Entry]) -> None:
        fresh = [entry for entry in entries if entry_order(entry[0]) > entry_order(self.seen)]
        if fresh:
            self._pending.extend(fresh)
            self.seen = fresh[-1][0]
            self._signal.set()

    def _notice(self, *, moved: bool = False, gone: bool = False, lost: bool = False) -> None:
        self._moved = self._moved or moved
        self._gone = self._gone or gone
        self._lost = self._lost or lost
        self._signal.set()

    async def next(self, timeout_s: float | None = None) -> Update:
        """What arrived since the last call, waiting for something for up to ``timeout_s`` (None: as long as it takes);
        an empty update when the time ran out. :class:`ListenerOutage` once Redis has been away for ``LISTEN_OUTAGE_S``."""
        if not (self._pending or self._moved or self._gone or self._lost):
            self._signal.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._signal.wait(), timeout_s)
        if self._lost and not self._pending:
            raise ListenerOutage("the job store (Redis) has been unreachable too long to follow the task")
        update = Update(list(self._pending), self._moved, self._gone)
        self._pending.clear()
        self._moved = False
        return update


class JobListener:
    """The process's one reader of job streams, and the in-process fan-out to its subscribers.

    ``run`` (one task, started by the app's lifespan) keeps a blocking read per group going while anyone listens;
    :meth:`follow` subscribes a client. ``on_read``/``on_outage`` let the caller count reads and outages
    (metrics); ``sleep`` is the pause after an outage and ``monotonic`` the clock an outage is timed on (a test passes
    its own).
    """

    def __init__(
        self,
        redis: RedisClient,
        shards: Shards,
        config: ListenerConfig,
        *,
        on_read: Callable[[], None] = lambda: None,
        on_outage: Callable[[], None] = lambda: None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis, self.shards, self.config = redis, shards, config
        self._on_read, self._on_outage = on_read, on_outage
        self._sleep, self._monotonic = sleep, monotonic
        self._name = uuid.uuid4().hex[:12]
        self._by_slot = isinstance(redis, RedisCluster)
        self._groups: dict[str, _Group] = {}
        self._stop: asyncio.Event | None = None

    # ---- subscribing -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def follow(self, job_id: str, after: str | None = "0") -> AsyncIterator[Subscription]:
        """Subscribe to ``job_id``'s stream for the block: entries after ``after`` (``"0"``: all of them; None: from
        now on). The entries already there are in :attr:`Subscription.backlog`; later ones come from :meth:`next`."""
        keys = self.shards.of(job_id)
        stream = keys.stream(job_id)
        if after is None:
            last: Any = await self.read(lambda: self.redis.xrevrange(stream, count=1))
            backlog: list[Entry] = []
            position = text(last[0][0]) if last else "0"
        else:
            backlog = await self._range(stream, after, "+")
            position = backlog[-1][0] if backlog else after
        group = self._group(keys)
        feed = group.feeds.get(job_id)
        # Entries the feed read (and handed to others) past this backlog are read once more, until none is missing.
        while feed is not None and entry_order(feed.cursor) > entry_order(position):
            gap = await self._range(stream, position, feed.cursor)
            backlog += gap
            position = backlog[-1][0] if gap else feed.cursor
            feed = group.feeds.get(job_id)
        subscription = Subscription(job_id, position)
        subscription.backlog = backlog
        if feed is None:
            feed = group.feeds[job_id] = _Feed(job_id, stream, keys.job(job_id), keys.moves, position)
            group.moves_cursors.setdefault(keys.moves, "$")
            self._wake(group)
        feed.subscribers.add(subscription)
        try:
            yield subscription
        finally:
            feed.subscribers.discard(subscription)
            if not feed.subscribers and group.feeds.get(job_id) is feed:
                del group.feeds[job_id]  # its key leaves the next read; the one in flight may still return it: ignored

    async def _range(self, stream: str, after: str, upto: str) -> list[Entry]:
        """Entries with ids in (after, upto]."""
        start = "-" if after == "0" else f"({after}"
        return _entries(await self.read(lambda: self.redis.xrange(stream, min=start, max=upto)))

    async def read(self, call: Callable[[], Awaitable[T]]) -> T:
        """A follower's read of its own (a backlog, the job's record, its stored result), ridden through a Redis outage
        as the listener's own reads are: tried again every ``LISTEN_RETRY_S`` while Redis cannot be reached, and
        :class:`ListenerOutage` once it has been away ``LISTEN_OUTAGE_S``. So a restart or a failover is a pause to a
        follower, wherever in its stream it meets it, and never the end of it."""
        since: float | None = None
        while True:
            try:
                return await call()
            except STORE_ERRORS as exc:
                now = self._monotonic()
                since = now if since is None else since
                if now - since >= self.config.outage_s:
                    raise ListenerOutage(f"the job store (Redis) has been unreachable too long to follow the task: {exc}") from exc
                await self._sleep(self.config.retry_s)

    def listening(self) -> int:
        """Subscriptions open now (a gauge)."""
        return sum(len(feed.subscribers) for group in self._groups.values() for feed in group.feeds.values())

    def following(self, job_id: str) -> bool:
        """Whether some subscriber in this process follows ``job_id`` (tests wait for it before ending a job)."""
        return any(job_id in group.feeds for group in self._groups.values())

    # ---- reading ---------------------------------------------------------------------------

    def _group(self, keys: Keys) -> _Group:
        home = keys if self._by_slot else self.shards.home
        group = self._groups.get(home.prefix)
        if group is None:
            group = self._groups[home.prefix] = _Group(wake=f"{home.prefix}listener:{self._name}")
            if self._stop is not None:
                group.task = asyncio.create_task(self._read(group, self._stop), name=f"listener {home.prefix}")
        return group

    def _wake(self, group: _Group) -> None:
        """Make the group's read include a new feed: start it, or end the blocking read in flight."""
        group.changed.set()
        if group.blocked and not group.waking:
            group.waking = True
            asyncio.get_running_loop().create_task(self._send_wake(group))

    async def _send_wake(self, group: _Group) -> None:
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.xadd(group.wake, {"w": "1"}, maxlen=1)
                pipe.expire(group.wake, 3600)
                await pipe.execute()
        except STORE_ERRORS:
            group.waking = False  # the read in flight fails too, and the next one includes the feed

    async def run(self, stop: asyncio.Event) -> None:
        """Follow every subscribed job until ``stop`` is set (the app's lifespan runs this as one task)."""
        self._stop = stop
        for group in self._groups.values():
            group.task = asyncio.create_task(self._read(group, stop), name="listener")
        await stop.wait()
        tasks = [group.task for group in self._groups.values() if group.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _read(self, group: _Group, stop: asyncio.Event) -> None:
        outage_since: float | None = None  # this group's own: on a cluster, one shard's read may fail while another's works
        while not stop.is_set():
            if not group.feeds:
                group.changed.clear()
                await group.changed.wait()
                continue
            feeds = dict(group.feeds)
            streams = {group.wake: group.wake_cursor, **group.moves_cursors}
            streams.update({feed.stream: feed.cursor for feed in feeds.values()})
            group.blocked = True
            try:
                reply: Any = await self.redis.xread(streams, block=max(1, round(self.config.block_s * 1000)))  # type: ignore[arg-type]
            except STORE_ERRORS as exc:
                if outage_since is None:
                    log.warning("listener: Redis unreachable (%s); following %d jobs again once it is back", exc, len(feeds))
                    outage_since = self._monotonic()
                self._on_outage()
                if self._monotonic() - outage_since >= self.config.outage_s:
                    for feed in feeds.values():
                        for subscription in feed.subscribers:
                            subscription._notice(lost=True)
                await self._sleep(self.config.retry_s)
                continue
            finally:
                group.blocked = False
            self._on_read()
            if outage_since is not None:
                outage_since = None
                log.info("listener: Redis is back; following %d jobs from where each was", len(feeds))
                await self._recheck(group)
            self._dispatch(group, reply or [])

    def _dispatch(self, group: _Group, reply: Any) -> None:
        by_stream = {feed.stream: feed for feed in group.feeds.values()}
        for raw_key, raw_entries in reply:
            key, entries = text(raw_key), _entries(raw_entries)
            if not entries:
                continue
            if key == group.wake:
                group.wake_cursor = entries[-1][0]
                group.waking = False
            elif key in group.moves_cursors:
                group.moves_cursors[key] = entries[-1][0]
                for moved in group.feeds.values():
                    if moved.moves == key:
                        for subscription in moved.subscribers:
                            subscription._notice(moved=True)
            elif (feed := by_stream.get(key)) is not None:
                if entry_order(entries[-1][0]) > entry_order(feed.cursor):
                    feed.cursor = entries[-1][0]
                for subscription in list(feed.subscribers):
                    subscription._deliver(entries)

    async def _recheck(self, group: _Group) -> None:
        """After an outage: a job whose record Redis no longer has (it lost its data) ends its subscribers, who would
        otherwise wait for an end that will never be written. One ``EXISTS`` per followed job, once per outage."""
        feeds = list(group.feeds.values())
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for feed in feeds:
                    pipe.exists(feed.job_key)
                found = await pipe.execute()
        except STORE_ERRORS:
            return  # the next read fails too, and this runs again after it
        for feed, exists in zip(feeds, found, strict=True):
            if not exists:
                for subscription in feed.subscribers:
                    subscription._notice(gone=True)
