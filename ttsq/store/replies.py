"""What every Lua script answers, as named Python types: the one place a script's reply is read.

Each script under ``ttsq/store/lua/`` documents its reply in its header; the type of the same name
here reads it (``X.parse(raw)``), so no other code indexes a reply by position or compares a reply
to a string. The queue (:mod:`ttsq.store.queue`), the delivery queue (:mod:`ttsq.store.deliveries`)
and the rate limiter (:mod:`ttsq.store.rate_limit`) return these types, or build theirs from them.

Replies come from a client with ``decode_responses=False``: strings arrive as bytes, numbers as
integers (Lua numbers are truncated to integers on the way out, so fractional ones are sent as
strings).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Self

from ttsq.domain.jobs import LANES, Job, Lane


def text(value: Any) -> str:
    """A reply element (bytes from Redis) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _outcome(raw: Any) -> tuple[str, list[Any]]:
    """A ``{outcome, values...}`` reply: the outcome's name, and the values after it."""
    head, *values = raw
    return text(head), values


class Outcome(StrEnum):
    """A script's outcome: its whole reply (``'done'``), or the first element of a list reply (``{'retry', ...}``)."""

    @classmethod
    def parse(cls, raw: Any) -> Self:
        return cls(text(raw) if isinstance(raw, bytes | str) else _outcome(raw)[0])


def listed_ids(raw: Sequence[Any]) -> list[str]:
    """A reply that lists job ids: parts of ``renew.lua``'s."""
    return [text(job_id) for job_id in raw]


@dataclass(frozen=True)
class Renewed:
    """``renew.lua``: the leases this worker no longer holds (lapsed and swept, claimed again: its claim is stale), and
    the jobs it holds that were cancelled while running."""

    lost: frozenset[str]
    cancelling: frozenset[str]

    @classmethod
    def parse(cls, raw: Sequence[Any]) -> Self:
        lost, cancelling = raw
        return cls(frozenset(listed_ids(lost)), frozenset(listed_ids(cancelling)))


def appended(raw: Any) -> bool:
    """``stream_append.lua``: 1 when the piece was appended, 0 when the caller's claim was stale."""
    return bool(int(raw))


# ---- token_bucket.lua (alone in rate_limit.lua, and in front of enqueue.lua) -------------------


@dataclass(frozen=True)
class TokenTaken:
    """``take_token``: whether a token was taken, and how the bucket stands after it."""

    allowed: bool
    tokens_left: int
    wait_s: int
    """Seconds until a token is back (0 when allowed)."""
    full_s: int
    """Seconds until the bucket is full again."""

    @classmethod
    def parse(cls, raw: Any) -> TokenTaken:
        """``{allowed (1 | 0), tokens_left, seconds_until_a_token, seconds_until_full}``."""
        allowed, left, wait, full = raw
        return cls(bool(int(allowed)), int(left), int(wait), int(full))


# ---- the job queue ------------------------------------------------------------------------------


class Enqueued(Outcome):
    CREATED = "created"
    """A new job was recorded and queued."""
    EXISTS = "exists"
    """A job with this id already exists (a repeated enqueue): nothing changed."""
    JOINED = "joined"
    """An identical job is queued or running (single-flight): nothing new was queued."""
    FULL = "full"
    """The queue is at ``max_queue_depth``."""
    OWNER_FULL = "owner_full"
    """The submitting owner already has ``max_queued_per_owner`` jobs queued or running."""
    LIMITED = "limited"
    """The caller's token bucket was empty (a charged enqueue): nothing was recorded."""


_ENQUEUE_VALUES = {
    Enqueued.JOINED: 1,
    Enqueued.EXISTS: 1,
    Enqueued.FULL: 1,
    Enqueued.OWNER_FULL: 1,
    Enqueued.CREATED: 4,
    Enqueued.LIMITED: 3,
}
"""How many values each outcome of ``enqueue.lua`` carries, before a charged submit's two."""


@dataclass(frozen=True)
class EnqueueReply:
    """``enqueue.lua``'s answer; the fields its outcome does not carry keep their zero values."""

    outcome: Enqueued
    depth: int = 0
    """The queue's length (``exists``, ``full``, ``created``), or the owner's jobs (``owner_full``)."""
    other_id: str | None = None
    """``joined``: the job in flight (or a stale marker's, for the caller to name on its retry)."""
    jobs_done: int = 0
    busy_s: float = 0.0
    live_workers: int = 0
    """``created``: what the wait estimate needs."""
    bucket: TokenTaken | None = None
    """``limited``, or any outcome of a charged enqueue: the caller's token bucket."""

    @classmethod
    def parse(cls, raw: Any) -> EnqueueReply:
        name, values = _outcome(raw)
        outcome = Enqueued(name)
        own, charged = values[: _ENQUEUE_VALUES[outcome]], values[_ENQUEUE_VALUES[outcome] :]
        if outcome is Enqueued.LIMITED:
            left, wait, full = own
            return cls(outcome, bucket=TokenTaken(False, int(left), int(wait), int(full)))
        bucket = None
        if charged:
            left, full = charged
            bucket = TokenTaken(True, int(left), 0, int(full))
        if outcome is Enqueued.JOINED:
            return cls(outcome, other_id=text(own[0]), bucket=bucket)
        if outcome is Enqueued.CREATED:
            depth, jobs_done, busy_s, workers = own
            done, busy, live = int(jobs_done), float(busy_s), int(workers)
            return cls(outcome, int(depth), jobs_done=done, busy_s=busy, live_workers=live, bucket=bucket)
        return cls(outcome, int(own[0]), bucket=bucket)


class Started(Outcome):
    RUN = "run"
    """The attempt is counted and leased to this worker: run it."""
    DEAD = "dead"
    """The job had used up its attempts: it was failed for good and dead-lettered instead."""


@dataclass(frozen=True)
class StartReply:
    """One job of ``claim.lua``'s reply: ``{'run', job}`` | ``{'dead', job}``."""

    started: Started
    job: Job
    """The job as the script left it: a stand-in when its record does not load as it is (:meth:`Job.stored`,
    :attr:`Job.unreadable`), which the worker fails instead of running."""

    @classmethod
    def parse(cls, raw: Any) -> StartReply:
        name, values = _outcome(raw)
        return cls(Started(name), Job.stored(values[0]))


@dataclass(frozen=True)
class ClaimReply:
    """``claim.lua``: ``{'claimed' | 'repeated', {started, job}, ...}``."""

    repeated: bool
    """The request had been answered already (its first answer was lost): these are the same jobs again."""
    started: list[StartReply]
    strays: list[str] = field(default_factory=list)
    """Why each job claimed whose record is no job record at all (not a JSON object, no id: not even a stand-in
    loads) was left out of :attr:`started`. Raising instead would lose every job of the claim from its worker's hands,
    the readable ones too; left out, such a job's lease lapses, the sweep requeues it, and a claim dead-letters it
    once its attempts are spent (the script does that without Python reading it)."""

    @classmethod
    def parse(cls, raw: Any) -> ClaimReply:
        name, values = _outcome(raw)
        if name not in ("claimed", "repeated"):
            raise ValueError(f"claim.lua answered {name!r}")
        started: list[StartReply] = []
        strays: list[str] = []
        for item in values:
            try:
                started.append(StartReply.parse(item))
            except ValueError as exc:  # pydantic's ValidationError and json's JSONDecodeError are ValueErrors
                strays.append(f"{type(exc).__name__}: {str(exc)[:300]}")
        return cls(name == "repeated", started, strays)


@dataclass(frozen=True)
class Peeked:
    """``peek.lua``: the ids a claim would take next, in the round robin's order, each with its owner ('' for none),
    its lane and its tenant (whose queue the claim must declare)."""

    ids: list[str]
    owners: list[str]
    lanes: list[Lane]
    tenants: list[str]

    @classmethod
    def parse(cls, raw: Sequence[Any]) -> Peeked:
        values = [text(value) for value in raw]
        lanes = [_lane(lane) for lane in values[2::4]]
        return cls(values[0::4], values[1::4], lanes, values[3::4])


class Completed(Outcome):
    """``complete.lua``."""

    DONE = "done"
    CANCELLED = "cancelled"
    """The job had been cancelled while it ran: its audio was dropped."""
    GONE = "gone"
    """The job had already finished (e.g. a requeued copy ran elsewhere) or expired."""
    STALE = "stale"
    """The caller's claim is not the job's current one (its lease lapsed; the job was requeued, perhaps
    claimed again): refused, nothing changed."""


class Failed(Outcome):
    """``fail.lua`` (the retry's delay it also names is not needed: the job records its retry time)."""

    RETRY = "retry"
    """The job waits out its backoff, then runs again."""
    FAILED = "failed"
    """The job failed for good and was dead-lettered."""
    CANCELLED = "cancelled"
    """The job had been cancelled while it ran: it ends cancelled, not retried."""
    GONE = "gone"
    """The job had already finished or expired; nothing changed."""
    STALE = "stale"
    """The caller's claim is not the job's current one: refused, nothing changed (see :attr:`Completed.STALE`)."""


class Cancelled(Outcome):
    """``cancel.lua``."""

    CANCELLED = "cancelled"
    """It was waiting and left the queue (or was cancelled already)."""
    CANCELLING = "cancelling"
    """It is running: its result will be dropped when its batch ends."""
    DETACHED = "detached"
    """Other readers still want it (single-flight): it goes on for them, without this reader."""
    FINAL = "final"
    """It had already finished (done or failed): nothing to cancel."""
    GONE = "gone"
    KEPT = "kept"
    """A sole cancel (its submitter went away) of a job others joined: it goes on, unchanged."""


class Requeued(Outcome):
    REQUEUED = "requeued"
    MISSING = "missing"
    """No dead letter with that id (never, already requeued, purged, or trimmed off the capped list)."""
    ACTIVE = "active"
    """Its task is queued, running or done again: nothing changed."""


@dataclass(frozen=True)
class RequeueReply:
    """``requeue_dead.lua``: ``{'requeued', position}`` | ``{'missing'}`` | ``{'active', status}``."""

    outcome: Requeued
    position: int | None
    """Where the job went in the queue (requeued only)."""

    @classmethod
    def parse(cls, raw: Any) -> RequeueReply:
        name, values = _outcome(raw)
        outcome = Requeued(name)
        return cls(outcome, int(values[0]) if outcome is Requeued.REQUEUED else None)


@dataclass(frozen=True)
class SweepScan:
    """``sweep_scan.lua``'s ``{'scan', lapsed, unleased, due, places, abandoned, owners}``: the ids a sweep looks at,
    and where each would go back in line."""

    lapsed: list[str]
    """Leases whose deadline has passed."""
    unleased: list[str]
    """Ids in the processing list with no lease."""
    due: list[str]
    """Retries whose backoff is over."""
    places: list[tuple[Lane, str]]
    """The lane and tenant of each id above and of :attr:`abandoned`, in that order (lapsed, unleased, due, abandoned)."""
    abandoned: list[str]
    """Ids claimed by workers whose heartbeat has lapsed (from each one's own set of claims)."""
    owners: list[str]
    """The worker of each id of :attr:`abandoned`."""

    @classmethod
    def parse(cls, raw: Any) -> SweepScan | None:
        """None for ``{'skipped'}``: another worker holds this interval's sweep lock."""
        name, values = _outcome(raw)
        if name == "skipped":
            return None
        lapsed, unleased, due, places, abandoned, owners = values
        flat = [text(value) for value in places]
        lanes = [_lane(lane) for lane in flat[0::2]]
        return cls(
            listed_ids(lapsed),
            listed_ids(unleased),
            listed_ids(due),
            list(zip(lanes, flat[1::2], strict=True)),
            listed_ids(abandoned),
            listed_ids(owners),
        )


class Swept(Outcome):
    SWEPT = "swept"
    SKIPPED = "skipped"
    """Another worker holds this interval's sweep lock."""


@dataclass(frozen=True)
class SweepReport:
    """``sweep.lua``: ``{'skipped'}`` | ``{'swept', requeued, orphans, promoted, abandoned}``."""

    swept: bool
    """False when another worker holds this interval's sweep lock."""
    requeued: int = 0
    """Running jobs whose lease had lapsed."""
    orphans: int = 0
    """Ids claimed but never started."""
    promoted: int = 0
    """Retries whose backoff was over."""
    abandoned: int = 0
    """Running jobs whose worker's heartbeat had lapsed (taken back seconds after its death, not a lease after)."""

    @classmethod
    def parse(cls, raw: Any) -> SweepReport:
        name, values = _outcome(raw)
        if Swept(name) is Swept.SKIPPED:
            return cls(swept=False)
        requeued, orphans, promoted, abandoned = values
        return cls(swept=True, requeued=int(requeued), orphans=int(orphans), promoted=int(promoted), abandoned=int(abandoned))


@dataclass(frozen=True)
class Beat:
    """``heartbeat.lua``: ``{now, fence}`` on one shard."""

    at: float
    """The time of the beat, by the shard's Redis clock."""
    fence: int | None
    """Set when the sweep had taken this worker's claims back since its last beat (its beats had lapsed): every claim
    it holds on the shard with a token up to this number is no longer its own."""

    @classmethod
    def parse(cls, raw: Sequence[Any]) -> Beat:
        at, fence = (text(value) for value in raw)
        return cls(float(at), int(fence) if fence else None)


# ---- the webhook delivery queue ----------------------------------------------------------------


class Leased(Outcome):
    """What the lease script said about a claimed id."""

    LEASED = "leased"
    FINISHED = "finished"
    """Already delivered or given up (a duplicate id): dropped."""
    GONE = "gone"
    """The task expired: nothing to deliver; dropped."""
    LOST = "lost"
    """The sweep took the id back before it was leased; whoever claims it next delivers it."""


@dataclass(frozen=True)
class LeaseReply:
    """``deliveries_lease.lua``: ``{'leased', attempts_so_far, deadline}`` | ``{'finished'}`` | ``{'gone'}`` | ``{'lost'}``."""

    leased: Leased
    attempts: int
    """Attempts already logged for the job (leased only; 0 otherwise)."""
    deadline: float | None = None
    """The lease's deadline by Redis's clock, the holder's fencing token (leased only)."""

    @classmethod
    def parse(cls, raw: Any) -> LeaseReply:
        name, values = _outcome(raw)
        if not values:
            return cls(Leased(name), 0)
        return cls(Leased(name), int(values[0]), float(text(values[1])))


def renewed(raw: Any) -> float | None:
    """``deliveries_renew.lua``: the lease's new deadline (the holder's new token) when it still carried the
    holder's token, else None (0: lost)."""
    deadline = float(text(raw)) if isinstance(raw, bytes | str) else float(raw)
    return deadline if deadline > 0 else None


class Settled(Outcome):
    """``deliveries_settle.lua``."""

    SETTLED = "settled"
    """Recorded, and the lease released (a retry is scheduled)."""
    LOST = "lost"
    """The attempt was logged, but the lease had lapsed or passed to another deliverer: nothing else changed."""


@dataclass(frozen=True)
class DeliverySweep:
    """``deliveries_sweep.lua``: ``{requeued, orphans, promoted}``."""

    requeued: int = 0
    """Claimed deliveries whose lease had lapsed (their deliverer stopped renewing)."""
    orphans: int = 0
    """Ids claimed but never leased, given a grace lease (requeued when it lapses)."""
    promoted: int = 0
    """Retries whose backoff was over."""

    @classmethod
    def parse(cls, raw: Any) -> DeliverySweep:
        requeued, orphans, promoted = raw
        return cls(int(requeued), int(orphans), int(promoted))


def _lane(name: str) -> Lane:
    """A lane a script named (``fair.lua``'s ``lane_of``); anything else reads as interactive, the default lane."""
    return next((lane for lane in LANES if lane == name), "interactive")
