"""The one Redis-outage policy and the one chore runner, shared by every long-running loop.

Two loops run against Redis for as long as their process lives: the worker's (claim → synthesise →
store, :mod:`ttsq.runtime.worker`) and the webhook deliverer's (claim → POST → record,
:mod:`ttsq.runtime.deliverer`). Both meet Redis outages, and both keep periodic chores running beside
the loop (heartbeats, lease renewals, sweeps). What they do about either is written here once:

* :class:`RedisOutage` — a failed Redis call is reported *once* per outage (not once per retry), the
  state is marked (the worker's liveness record shows it), and the loop backs off, doubling up to
  :data:`MAX_BACKOFF_S` so a long outage costs Redis few connection attempts. A pause ends as soon as
  any Redis call succeeds again (a chore's, typically), so a loop deep in its backoff resumes within
  one chore interval of Redis's return: the chaos suite's Redis restart found a worker idle for up to
  10 s without it. :meth:`RedisOutage.persist` is the same policy for a write that must land.
* :class:`Upkeep` — every chore on its own interval in one task. A chore that fails is reported under
  the policy above (a Redis error) or logged (anything else), and runs again at its next interval. It
  ends by signal, not by cancellation alone: a cancellation that lands inside a redis-py command can be
  absorbed by the client, which would leave the task running forever; cancellation is the fallback.
* :class:`WorkerChores` — the worker's own chores (heartbeat, idle memory release, lease renewal, sweep) and what
  it does on every pass (its liveness tick, systemd's watchdog), over the loop's state that the worker hands it.
  The heartbeat runs in an upkeep task of its own: it is what keeps the worker's claims its own (a beat older than
  ``HEARTBEAT_TTL_S`` and the sweep takes them back), so no slower chore may hold it up.
* :class:`CancelFollower` — the worker's blocking read of every shard's cancels stream, so a job cancelled while it
  runs leaves the engine at its next decode step instead of at the next lease renewal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from redis.exceptions import AskError

from ttsq.store.clock import RedisClock
from ttsq.store.connection import STORE_ERRORS

if TYPE_CHECKING:  # types only: the API process (the deliverer) loads this module without the worker's
    from ttsq.domain.batching import MemoryHygiene
    from ttsq.runtime.health import HeartbeatRecord
    from ttsq.runtime.metrics import WorkerMetrics
    from ttsq.runtime.sdnotify import SystemdNotifier
    from ttsq.store.heartbeats import Heartbeats
    from ttsq.store.keys import Keys
    from ttsq.store.leases import CancelNotice
    from ttsq.store.queue import JobQueue

T = TypeVar("T")

FIRST_BACKOFF_S = 0.5
"""The first pause of a loop after a Redis failure."""
MAX_BACKOFF_S = 10.0
"""The longest pause: the backoff doubles up to it while Redis stays away."""
FIRST_RETRY_S = 0.2
"""The first pause before a write that must land is tried again (:meth:`RedisOutage.persist`)."""

REDIS_ERRORS = (*STORE_ERRORS, OSError)
"""What a Redis outage raises: redis-py's errors (its cluster client's included), and the socket's own."""


def describe(exc: BaseException) -> str:
    """A Redis failure as the operator needs to read it: its kind, what it said, and for a redirection what it means."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, AskError):  # MOVED too (a MovedError is an AskError)
        text += (
            " (another Redis Cluster node serves this key: this client is not a cluster client;"
            " name the cluster with a redis+cluster:// REDIS_URL)"
        )
    return text


async def end_loop(task: asyncio.Task[None] | None, closing: asyncio.Event, wait_s: float) -> None:
    """End a loop that runs against Redis: set ``closing`` (the loop checks it between commands), wait up to ``wait_s``
    for ``task`` to end by itself, and only then cancel it, waiting at most 2 s more.

    Not cancellation alone: a cancellation that lands inside a redis-py command can be absorbed by the client, and a
    loop that absorbed it would run on — and whoever awaits it would wait — forever (a worker that never exits after
    SIGTERM). Whatever the loop does, this returns within ``wait_s`` + 2 s; ``wait_s=0`` cancels at once (a loop whose
    wait may be dropped), the signal still ending it if the cancel is absorbed."""
    closing.set()
    if task is None:
        return
    _, pending = await asyncio.wait({task}, timeout=wait_s)
    if pending:  # a command that would not return: cancellation is the fallback
        task.cancel()
        await asyncio.wait(pending, timeout=2)


class RedisOutage:
    """Whether Redis answers, as one loop and its chores see it, and how they wait for it.

    ``consequence`` completes the one warning of an outage ("Redis unavailable (claim: ...);
    <consequence>"), ``resumed`` the one line when it ends; ``on_change`` hears every change of state
    (the worker mirrors it in the liveness record its probe reports).
    """

    def __init__(
        self,
        log: logging.Logger,
        consequence: str,
        resumed: str | None = None,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self._log = log
        self._consequence = consequence
        self._resumed = resumed
        self._on_change = on_change
        self.ok = True
        self.backoff_s = FIRST_BACKOFF_S
        """The loop's next pause (:meth:`back_off`); back to the first once Redis answers."""
        self._up = asyncio.Event()
        self._up.set()

    def lost(self, what: str, exc: BaseException) -> None:
        """A Redis call failed: warn once per outage, mark it, and hold every pause until Redis is back."""
        if self.ok:
            self._log.warning("Redis unavailable (%s: %s); %s", what, describe(exc), self._consequence)
        self._mark(False)
        self._up.clear()

    def back(self) -> None:
        """A Redis call succeeded: say so once, and end every pause now."""
        if not self.ok:
            self._log.info("Redis is reachable again" + (f"; {self._resumed}" if self._resumed else ""))
        self._mark(True)
        self.backoff_s = FIRST_BACKOFF_S
        self._up.set()

    def _mark(self, ok: bool) -> None:
        changed = ok is not self.ok
        self.ok = ok
        if changed and self._on_change is not None:
            self._on_change(ok)

    async def pause(self, seconds: float, stop: asyncio.Event | None = None) -> None:
        """Wait up to ``seconds``, ending early when Redis is seen back (:meth:`back`) or ``stop`` is set."""
        waits = [asyncio.ensure_future(self._up.wait())]
        if stop is not None:
            waits.append(asyncio.ensure_future(stop.wait()))
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()

    async def back_off(self, stop: asyncio.Event | None = None) -> None:
        """The loop's pause after a failed call: :attr:`backoff_s`, which doubles for the next one."""
        await self.pause(self.backoff_s, stop)
        self.backoff_s = min(self.backoff_s * 2, MAX_BACKOFF_S)

    async def persist(self, write: Callable[[], Awaitable[T]], what: str, *, give_up: Callable[[], bool]) -> T:
        """Retry ``write`` through an outage, so that work already done is not thrown away.

        The pauses start at :data:`FIRST_RETRY_S` and double up to :data:`MAX_BACKOFF_S`, each
        ending early when Redis is seen back. After a failure for which ``give_up()`` is true, the
        error propagates (the caller's lease then lapses, and the work is done again elsewhere).
        """
        pause = FIRST_RETRY_S
        while True:
            try:
                value = await write()
            except REDIS_ERRORS as exc:
                self.lost(what, exc)
                if give_up():
                    raise
                await self.pause(pause)
                pause = min(pause * 2, MAX_BACKOFF_S)
            else:
                self.back()
                return value


@dataclass
class Chore:
    """Something periodic: ``run`` every ``interval_s`` seconds, in the upkeep task."""

    name: str
    interval_s: float
    run: Callable[[], Awaitable[bool | None]]
    """One run; it returns False when it called no Redis this time (nothing to renew, a memory chore): its
    success then says nothing about Redis, and must not end an outage."""
    due: float = 0.0
    """When it runs next (on the upkeep's clock); 0: on the first pass."""


class Upkeep:
    """Runs ``chores`` in one task (:meth:`start` … :meth:`stop`), under ``outage``'s policy.

    Each pass first calls ``every_pass`` (the worker ticks its liveness record there: a stalled event
    loop stops ticking, and the probe sees it), then runs the chores that are due, then sleeps until
    the next one is. ``clock`` is monotonic seconds; tests pass their own.
    """

    def __init__(
        self,
        chores: Sequence[Chore],
        outage: RedisOutage,
        log: logging.Logger,
        *,
        every_pass: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.chores = list(chores)
        self.outage = outage
        self._log = log
        self._every_pass = every_pass
        self._clock = clock
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Run the chores in a task of their own until :meth:`stop`."""
        self._closing.clear()
        self._task = asyncio.create_task(self.run(), name="upkeep")

    async def run(self) -> None:
        """Pass after pass until :meth:`stop`: ``every_pass``, the chores that are due, then sleep until the next is."""
        while not self._closing.is_set():
            if self._every_pass is not None:
                self._every_pass()
            wait_s = await self.run_due()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), wait_s)

    async def run_due(self) -> float:
        """Run each chore that is due (in order); return the seconds until the next one is."""
        for chore in self.chores:
            if self._clock() < chore.due:
                continue
            chore.due = self._clock() + chore.interval_s
            await self.run_chore(chore)
        return max(0.0, min(chore.due for chore in self.chores) - self._clock())

    async def run_chore(self, chore: Chore) -> None:
        """One run of ``chore``, under the policy: a failure is reported, and the chore runs again at its next interval."""
        try:
            touched_redis = await chore.run()
        except REDIS_ERRORS as exc:
            self.outage.lost(chore.name, exc)
        except Exception:  # noqa: BLE001 - a failing chore never ends the upkeep; it runs again at its interval
            self._log.exception("%s failed; trying again in %.1fs", chore.name, chore.interval_s)
        else:
            if touched_redis is not False:
                self.outage.back()

    async def stop(self, wait_s: float) -> None:
        """Signal the task to end and wait up to ``wait_s`` for it; cancel it only if it does not."""
        task, self._task = self._task, None
        await end_loop(task, self._closing, wait_s)


class WorkerChores:
    """A worker's periodic chores, for its :class:`Upkeep`: the heartbeat, idle memory release, lease renewal for the
    jobs in hand (every third of a lease, so one missed renewal never loses a lease) and the queue sweep (which takes
    a lock, so one worker of the pool sweeps per interval); and on every pass, its liveness tick and systemd's
    watchdog. ``running`` and ``in_flight`` are the worker's own maps (read, never changed here); ``cancel`` ends a job
    that was cancelled while it ran, ``drop`` lets go of a job whose claim the sweep took back (nothing of it is
    written: its claim is stale), ``release_memory`` gives the allocator's cache back in the inference thread.
    ``worker_id`` is the worker's identity in the queue (one per process: :func:`incarnation`)."""

    def __init__(
        self,
        queue: JobQueue,
        heartbeats: Heartbeats,
        record: HeartbeatRecord,
        metrics: WorkerMetrics,
        log: logging.Logger,
        *,
        worker_id: str,
        sweep_interval_s: float,
        stall_after_s: float,
        systemd: SystemdNotifier,
        hygiene: MemoryHygiene,
        running: Mapping[str, int],
        in_flight: Mapping[str, object],
        idle_s: Callable[[], float],
        release_memory: Callable[[], Awaitable[object]],
        cancel: Callable[[str], None],
        drop: Callable[[str], None],
    ) -> None:
        self.queue = queue
        self.heartbeats = heartbeats
        self.record = record
        self.metrics = metrics
        self._log: logging.Logger = log
        self.worker_id = worker_id
        self.sweep_interval_s = sweep_interval_s
        self.stall_after_s = stall_after_s
        self._was_alive: bool = True
        self._systemd = systemd
        self._hygiene = hygiene
        self._running = running
        self._in_flight: Mapping[str, object] = in_flight
        self._idle_s = idle_s
        """Seconds since the engine last stepped."""
        self._release_memory = release_memory
        self._cancel = cancel
        self._drop = drop

    def every_upkeep_pass(self) -> None:
        """Tick the liveness record (a stalled event loop stops ticking, and the probe sees it); ping the watchdog."""
        self.record.tick()
        self._watchdog()

    def _watchdog(self) -> None:
        """Ping systemd's watchdog while liveness holds (the same judgement as ``/healthz``); a hung
        inference stops the pings, and systemd restarts the worker after ``WatchdogSec``."""
        if not self._systemd.enabled:
            return
        alive, reason = self.record.liveness(self.stall_after_s)
        if alive:
            self._systemd.notify("WATCHDOG=1", *([] if self._was_alive else ["STATUS=serving"]))
        elif self._was_alive:
            self._systemd.notify(f"STATUS=unhealthy: {reason}")
        self._was_alive = alive

    async def release_when_idle(self) -> bool:
        """Give the allocator's cache back once the worker has been idle a while (the inference thread is free).
        False: it calls no Redis (see :class:`Chore`)."""
        if not self._running and self._hygiene.when_idle(self._idle_s()):
            await self._release_memory()
        return False

    async def beat(self) -> None:
        """One heartbeat; should it find a fence (the sweep took this worker's claims back while its beats had lapsed:
        an event loop stalled, Redis out of reach), drop every job held under a claim the fence covers."""
        beats = await self.heartbeats.write(self.worker_id, self.record.as_dict())
        if not beats.failures:
            self.record.last_heartbeat = time.time()
        self._taken_back(beats.fences)
        if beats.failures:
            raise beats.failures[0]

    def _taken_back(self, fences: Mapping[str, int]) -> None:
        if not fences:
            return
        taken = [
            (job_id, token)
            for job_id, token in self._running.items()
            if token <= fences.get(self.queue.shards.of(job_id).prefix, 0)
        ]
        self._log.warning(
            "this worker's heartbeat had lapsed and the sweep declared it dead: %d job(s) in hand were requeued; "
            "dropping them (their writes would be refused)",
            len(taken),
        )
        for job_id, token in taken:
            self.metrics.taken_back.inc()
            self._log.warning("  ⊘ %s: dropped, claim %d was taken back (this worker's heartbeat had lapsed)", job_id, token)
            self._drop(job_id)

    async def renew_leases(self) -> bool:
        """Renew every lease in hand; False when there was none (no Redis call: see :class:`Chore`)."""
        if not self._running:
            return False
        renewed = await self.queue.leases.renew_leases(dict(self._running), self.worker_id)
        for job_id in renewed.lost & self._running.keys():
            self.metrics.stale.labels("renew").inc()
            self._log.warning(
                "lease on %s (claim %d) was lost: it lapsed and the job went back to the queue, perhaps to another "
                "worker; this worker's outcome for it will be refused",
                job_id,
                self._running[job_id],
            )
        for job_id in renewed.cancelling & self._in_flight.keys():
            # Cancelled while it ran, and its announcement missed (the cancels stream is the quick way): its rows
            # leave the engine now and the job ends as cancelled, instead of finishing audio nobody gets.
            self.metrics.cancels.labels("renewal").inc()
            self._cancel(job_id)
        return True

    async def sweep(self) -> None:
        report = await self.queue.leases.sweep(self.sweep_interval_s, holder=self.worker_id)
        self.metrics.swept.labels("heartbeat").inc(report.abandoned)
        self.metrics.swept.labels("lease").inc(report.requeued)
        self.metrics.swept.labels("unstarted").inc(report.orphans)


def incarnation(worker_id: str) -> str:
    """A worker process's identity in the queue: its ``WORKER_ID`` and a random suffix. A supervisor restarts a dead
    worker under the same ``WORKER_ID`` (systemd's unit name, a pod's name), often within a heartbeat TTL; with one
    identity per process, the new process's heartbeats never vouch for the jobs its predecessor died holding."""
    return f"{worker_id}~{secrets.token_hex(3)}"


CANCEL_RETRY_FIRST_S = 0.2
"""The first pause of the cancel follower after a failed read of a shard's cancels stream; it doubles up to
:data:`CANCEL_RETRY_MAX_S`. Cancels announced meanwhile are read when it reads again (from where it was)."""
CANCEL_RETRY_MAX_S = 2.0


class CancelFollower:
    """A worker's blocking read of every shard's cancels stream (``cancel.lua`` appends to it when a caller cancels a
    running job), one task per shard: a notice naming this worker, under the claim it holds the job by, hands the job
    to ``cancel`` (its rows leave the engine at the next decode step) at once. No job record is read for it, and
    a worker with nothing cancelled waits in one ``XREAD`` per ``block_s``.

    A read that fails is reported under the outage policy and tried again after a short pause, from where it was:
    nothing announced meanwhile is missed (up to the stream's cap; past it, the next lease renewal still sees the
    job's cancel mark). Stopping sets a signal and, the read being only a read, cancels the task if it waits."""

    def __init__(
        self,
        queue: JobQueue,
        outage: RedisOutage,
        metrics: WorkerMetrics,
        log: logging.Logger,
        *,
        worker_id: str,
        block_s: float,
        running: Mapping[str, int],
        in_flight: Mapping[str, object],
        cancel: Callable[[str], None],
    ) -> None:
        self.queue = queue
        self.outage = outage
        self.metrics = metrics
        self._log = log
        self.worker_id = worker_id
        self.block_s = block_s
        self._running = running
        self._in_flight = in_flight
        self._cancel = cancel
        self._closing = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._closing.clear()
        self._tasks = [asyncio.create_task(self.follow(keys), name=f"cancels {keys.label or 0}") for keys in self.queue.shards.all]

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        await asyncio.gather(*(end_loop(task, self._closing, 0) for task in tasks))

    async def follow(self, keys: Keys) -> None:
        """Follow one shard's cancels stream until :meth:`stop`, from its newest entry when it starts."""
        after: str | None = None
        clock = RedisClock(self.queue.redis, None, keys.cancels)  # Redis's own time, as the entries' ids are
        pause = CANCEL_RETRY_FIRST_S
        while not self._closing.is_set():
            try:
                if after is None:
                    after = await self.queue.leases.last_cancel(keys)
                after, notices = await self.queue.leases.cancel_notices(keys, after, self.block_s)
                handed = self.hand_over(notices)
                if handed:
                    now = await clock.now()
                    for notice in handed:
                        self.metrics.cancel_latency.observe(max(0.0, now - notice.at))
            except REDIS_ERRORS as exc:
                self.outage.lost("follow cancels", exc)
                await self._pause(pause)
                pause = min(pause * 2, CANCEL_RETRY_MAX_S)
                continue
            except Exception:  # noqa: BLE001 - a bad entry never ends the follower; renewals still see every cancel
                self._log.exception("reading the cancels of shard %r failed; reading again in %.1fs", keys.label, pause)
                await self._pause(pause)
                pause = min(pause * 2, CANCEL_RETRY_MAX_S)
                continue
            self.outage.back()
            pause = CANCEL_RETRY_FIRST_S

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), seconds)

    def hand_over(self, notices: Sequence[CancelNotice]) -> list[CancelNotice]:
        """Cancel the jobs the notices name that this worker is decoding under the named claim; the notices it acted on."""
        handed = []
        for notice in notices:
            mine = notice.worker == self.worker_id and self._running.get(notice.job_id) == notice.claim
            if mine and notice.job_id in self._in_flight:
                self.metrics.cancels.labels("notice").inc()
                self._log.info("%s cancelled while it ran: its rows leave the engine at the next step", notice.job_id)
                self._cancel(notice.job_id)
                handed.append(notice)
        return handed
