"""The completion-webhook delivery queue: the only code that speaks Redis about webhook deliveries.

It is the job queue's reliable-queue pattern again, for a job's completion notice:

* the script that makes a job final (done, failed, cancelled) ``LPUSH``-es its id onto
  :attr:`Keys.deliveries` in the same atomic step, so a crash can never lose the fact that a
  delivery is due;
* **claim** moves an id with ``BLMOVE`` into :attr:`Keys.deliveries_processing`, then a script
  grants a *lease*: a deadline in :attr:`Keys.delivery_leases`. The deadline doubles as the claim's
  fencing token: :meth:`DeliveryQueue.renew` and the acknowledgements act only while the lease still
  carries the deadline this holder set, so a deliverer that stalled past its lease cannot release,
  or reschedule, a delivery another deliverer now holds;
* **succeeded / retry / give_up** append the attempt to the job's delivery log and release the
  lease in one script; a retry waits in :attr:`Keys.deliveries_delayed`;
* **sweep** requeues lapsed leases and ids claimed but never leased, and releases due retries. It
  is one idempotent script, cheap enough for every deliverer to run each interval, so it takes
  no lock.

Deliveries are at least once: a deliverer that dies after the receiver answered but before the
acknowledgement causes a second POST with the same ``ttsq-event-id``. Once the log ends in a final
record (delivered or given up), any further claim of that id is dropped without a POST.
Leases run on Redis's clock (:mod:`ttsq.store.clock`): the scripts set each deadline themselves and hand
it back as the holder's token, and the deliverer asks Redis for "now" (:meth:`RedisClock.now`) when it
schedules a retry, so no deliverer's host clock decides when a lease lapses or a retry is due.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from importlib.resources import files
from typing import Any

from redis.commands.core import AsyncScript

from ttsq.store.clock import Clock, RedisClock, clock_lua
from ttsq.store.connection import RedisClient
from ttsq.store.keys import Keys, Shards
from ttsq.store.replies import DeliverySweep, Leased, LeaseReply, Settled, renewed, text

LOG_MAX = 100
"""Most attempt records kept per job (the newest); a day of capped backoff is far fewer."""

_PROMOTE_LIMIT = 1000
"""Most retries released per sweep (the rest wait one interval)."""


@dataclass(frozen=True)
class DeliveryConfig:
    """The delivery queue's names and timings. Built from settings by ``settings.py``, which validates them."""

    namespace: str
    """Hash tag of every key (``REDIS_NAMESPACE``), as the job queue's."""
    shards: int
    """The job queue's shards (``QUEUE_SHARDS``): a job's deliveries live on its shard."""
    lease_s: float
    """How long a claimed delivery stays with its deliverer without a renewal (``WEBHOOK_LEASE_S``)."""
    result_ttl_s: int
    """The expiry of a delivery log whose job has no TTL left to copy (``RESULT_TTL_S``)."""

    def __post_init__(self) -> None:
        if self.lease_s <= 0 or self.result_ttl_s <= 0:
            raise ValueError("lease_s and result_ttl_s must be positive")


class AttemptOutcome(StrEnum):
    """What one delivery attempt led to."""

    DELIVERED = "delivered"
    """The receiver answered 2xx: done."""
    RETRYING = "retrying"
    """It failed; another attempt is scheduled at ``next_attempt_at``."""
    GAVE_UP = "gave_up"
    """It failed and no attempt follows (refused URL, out of time, task gone)."""

    @property
    def is_final(self) -> bool:
        return self is not AttemptOutcome.RETRYING


@dataclass(frozen=True)
class DeliveryAttempt:
    """One attempt, as kept in the job's delivery log and shown on its status."""

    attempt: int
    """1 for the first attempt."""
    at: float
    """When the attempt started (Unix seconds)."""
    outcome: AttemptOutcome
    status_code: int | None = None
    """The receiver's HTTP status; None when no answer came (refused, unreachable, timed out)."""
    error: str | None = None
    """Why the attempt failed, for a person to read; None when delivered."""
    elapsed_s: float = 0.0
    next_attempt_at: float | None = None
    """Set when ``outcome`` is ``retrying``."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> DeliveryAttempt:
        data: dict[str, Any] = json.loads(raw)
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        known["outcome"] = AttemptOutcome(known["outcome"])
        return cls(**known)


class DeliveryState(StrEnum):
    """Where a task's webhook stands, for its status."""

    PENDING = "pending"
    """Due, or in flight: no attempt has finished yet."""
    RETRYING = "retrying"
    DELIVERED = "delivered"
    GAVE_UP = "gave_up"


@dataclass(frozen=True)
class DeliverySummary:
    """The delivery log boiled down for a task's status (see :meth:`of`)."""

    state: DeliveryState
    attempts: int
    last_status_code: int | None
    last_error: str | None
    last_attempt_at: float | None
    next_attempt_at: float | None

    @classmethod
    def of(cls, log: Sequence[DeliveryAttempt]) -> DeliverySummary:
        """Summarise a log (oldest first). An empty log means the webhook is due or in flight."""
        if not log:
            return cls(DeliveryState.PENDING, 0, None, None, None, None)
        last = log[-1]
        state = {
            AttemptOutcome.DELIVERED: DeliveryState.DELIVERED,
            AttemptOutcome.RETRYING: DeliveryState.RETRYING,
            AttemptOutcome.GAVE_UP: DeliveryState.GAVE_UP,
        }[last.outcome]
        return cls(state, last.attempt, last.status_code, last.error, last.at, last.next_attempt_at)


@dataclass(frozen=True)
class DeliveryLease:
    """A claimed delivery. ``deadline`` is its fencing token: renewals hand back a new lease."""

    job_id: str
    holder: str
    deadline: float
    attempts: int
    """Attempts already logged for this job; the next one is ``attempts + 1``."""


@dataclass(frozen=True)
class DeliveryDepths:
    """How the delivery queue stands, in one round trip (for metrics)."""

    due: int
    in_flight: int
    delayed: int


def _script(redis: RedisClient, name: str, *, timed: bool = True) -> AsyncScript:
    lua = files("ttsq.store").joinpath("lua", f"{name}.lua").read_text()
    return redis.register_script((clock_lua() + "\n" if timed else "") + lua)


class DeliveryQueue:
    """Delivery-queue semantics over one Redis connection pool (``decode_responses=False``)."""

    def __init__(self, redis: RedisClient, config: DeliveryConfig, clock: Clock | None = None) -> None:
        self.redis = redis
        self.config = config
        self.shards = Shards(config.namespace, config.shards)
        self.keys = self.shards.home
        self.clock = RedisClock(redis, clock, self.keys.deliveries)
        self._turn = 0
        """Redis's clock (a test may pin it)."""
        self._lease = _script(redis, "deliveries_lease")
        self._renew = _script(redis, "deliveries_renew")
        self._settle = _script(redis, "deliveries_settle", timed=False)
        self._sweep = _script(redis, "deliveries_sweep")

    async def claim(self, holder: str, block_s: float) -> DeliveryLease | None:
        """Wait up to ``block_s`` (0: do not wait) for a due delivery and lease it to ``holder``.

        Every shard's deliveries are looked at in turn (without waiting), then one shard is waited on for a
        share of ``block_s``. Ids with nothing left to deliver (already delivered, given up, task expired) are
        dropped here and the claim answers None, as when nothing is due.
        """
        self._turn = (self._turn + 1) % self.shards.count
        rotation = self.shards.all[self._turn :] + self.shards.all[: self._turn]
        raw = None
        for keys in rotation:
            raw = await self.redis.lmove(keys.deliveries, keys.deliveries_processing, "RIGHT", "LEFT")
            if raw is not None:
                break
        if raw is None and block_s > 0:
            keys = rotation[0]
            # Redis takes fractional block timeouts; redis-py's annotation says int.
            wait = block_s / self.shards.count
            raw = await self.redis.blmove(keys.deliveries, keys.deliveries_processing, wait, "RIGHT", "LEFT")  # type: ignore[arg-type]
        if raw is None:
            return None
        job_id = text(raw)
        args: list[Any] = [job_id, self.clock.arg(), self.config.lease_s]
        reply = LeaseReply.parse(await self._lease(keys=self._lease_keys(job_id), args=args))
        if reply.leased is not Leased.LEASED or reply.deadline is None:
            return None
        return DeliveryLease(job_id=job_id, holder=holder, deadline=reply.deadline, attempts=reply.attempts)

    def _lease_keys(self, job_id: str) -> list[str]:
        """What the lease and settle scripts touch, on the job's shard: the claim, the lease, a retry's slot, the log, the job."""
        keys = self.shards.of(job_id)
        return [
            keys.deliveries_processing,
            keys.delivery_leases,
            keys.deliveries_delayed,
            keys.delivery_log(job_id),
            keys.job(job_id),
        ]

    async def renew(self, lease: DeliveryLease) -> DeliveryLease | None:
        """Move the lease forward; the new lease (new token) is returned, None if it was lost."""
        args: list[Any] = [lease.job_id, repr(lease.deadline), self.clock.arg(), self.config.lease_s]
        deadline = renewed(await self._renew(keys=[self.shards.of(lease.job_id).delivery_leases], args=args))
        if deadline is None:
            return None
        return DeliveryLease(job_id=lease.job_id, holder=lease.holder, deadline=deadline, attempts=lease.attempts)

    async def succeeded(self, lease: DeliveryLease, record: DeliveryAttempt) -> Settled:
        """The receiver took it: log the attempt and forget the delivery."""
        if record.outcome is not AttemptOutcome.DELIVERED:
            raise ValueError(f"succeeded() takes a delivered attempt, not {record.outcome}")
        return await self._settled(lease, record, retry_at=None)

    async def retry(self, lease: DeliveryLease, record: DeliveryAttempt, at: float) -> Settled:
        """Log the failed attempt and try again at ``at`` (released by a sweep from then on)."""
        if record.outcome is not AttemptOutcome.RETRYING or record.next_attempt_at != at:
            raise ValueError("retry() takes a retrying attempt whose next_attempt_at is the retry time")
        return await self._settled(lease, record, retry_at=at)

    async def give_up(self, lease: DeliveryLease, record: DeliveryAttempt) -> Settled:
        """Log the last attempt and forget the delivery for good."""
        if record.outcome is not AttemptOutcome.GAVE_UP:
            raise ValueError(f"give_up() takes a given-up attempt, not {record.outcome}")
        return await self._settled(lease, record, retry_at=None)

    async def _settled(self, lease: DeliveryLease, record: DeliveryAttempt, retry_at: float | None) -> Settled:
        reply = await self._settle(
            keys=self._lease_keys(lease.job_id),
            args=[
                lease.job_id,
                repr(lease.deadline),
                record.to_json(),
                "" if retry_at is None else retry_at,
                LOG_MAX,
                self.config.result_ttl_s,
            ],
        )
        return Settled.parse(reply)

    async def sweep(self) -> DeliverySweep:
        """Requeue lapsed leases, grace-lease ids claimed but never leased, release due retries — on every shard."""

        async def one(keys: Keys) -> DeliverySweep:
            reply = await self._sweep(
                keys=[keys.delivery_leases, keys.deliveries_processing, keys.deliveries, keys.deliveries_delayed],
                args=[self.clock.arg(), self.config.lease_s, _PROMOTE_LIMIT],
            )
            return DeliverySweep.parse(reply)

        reports = await asyncio.gather(*(one(keys) for keys in self.shards.all))
        return DeliverySweep(*(sum(getattr(report, name) for report in reports) for name in ("requeued", "orphans", "promoted")))

    async def log(self, job_id: str) -> list[DeliveryAttempt]:
        """The job's delivery attempts, oldest first (empty: none finished yet, or it has no webhook)."""
        raw = await self.redis.lrange(self.shards.of(job_id).delivery_log(job_id), 0, -1)
        return [DeliveryAttempt.from_json(item) for item in raw]

    async def depths(self) -> DeliveryDepths:
        """Due, in flight and delayed deliveries, summed over the shards."""

        async def one(keys: Keys) -> list[Any]:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.llen(keys.deliveries)
                pipe.llen(keys.deliveries_processing)
                pipe.zcard(keys.deliveries_delayed)
                result: list[Any] = await pipe.execute()
            return result

        shards = await asyncio.gather(*(one(keys) for keys in self.shards.all))
        due, in_flight, delayed = (sum(int(shard[n]) for shard in shards) for n in range(3))
        return DeliveryDepths(due, in_flight, delayed)
