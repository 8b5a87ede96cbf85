"""Every Redis key name ttsq uses, in one place; and the queue's shards.

Every key carries a hash tag, so that every script's keys live in one Redis Cluster slot: the queue's
multi-key operations (the Lua scripts) require that. With one shard (``QUEUE_SHARDS=1``, the
default) every key shares the namespace's tag, ``{ttsq}``. With N shards the queue is N queues:
shard 0 keeps ``{ttsq}``, shard *i* has ``{ttsq:<label>}``, and a job lives whole on one shard (its
record, result, stream, lease, single-flight marker, its owner's count there, its webhook's delivery).
What is one per deployment — API keys, voices, the task-id secret, rate buckets, workers' records —
stays on shard 0, the *home* shard.

A shard's label is chosen so that the shards' slots spread evenly over the slot space: shard 0's
``{ttsq}`` falls in one of N equal slot ranges, and shard *i* takes the first label (1, 2, 3, …) whose
slot falls in the *i*-th of the others. A cluster whose masters split the slots evenly (``redis-cli
--cluster create``, managed services) then serves each shard from another master, as far as there
are masters. A job's id names its shard's label (:func:`shard_label`), so a task is found whatever
the shard count is now.
"""

from __future__ import annotations

import hashlib
import random

from redis.crc import key_slot

SLOTS = 16384
"""A Redis Cluster's hash slots."""


def shard_label(job_id: str) -> str:
    """The shard label a job id names ('' for shard 0): a task id is ``<uuid>_<label>.<tag>`` (signed whole)."""
    head = job_id.split(".", 1)[0]
    return head.partition("_")[2]


def _slot(tag: str) -> int:
    return int(key_slot(tag.encode()))


def spread_labels(namespace: str, count: int) -> list[str]:
    """The labels of shards 1 … count-1: each the first unused number whose slot falls in the next of the equal slot
    ranges that shard 0's tag (the namespace) does not fall in."""
    if count <= 1:
        return []
    ranges = [(index * SLOTS // count, (index + 1) * SLOTS // count) for index in range(count)]
    home = next(index for index, (start, end) in enumerate(ranges) if start <= _slot(namespace) < end)
    labels: list[str] = []
    candidate = 0
    for start, end in (span for index, span in enumerate(ranges) if index != home):
        candidate = 1
        while str(candidate) in labels or not start <= _slot(f"{namespace}:{candidate}") < end:
            candidate += 1
        labels.append(str(candidate))
    return labels


class Keys:
    """Key builder for one shard of a namespace (``ttsq`` → keys look like ``{ttsq}:queue``; shard label ``7`` →
    ``{ttsq:7}:queue``)."""

    def __init__(self, namespace: str, label: str = "") -> None:
        if not namespace or any(c in namespace for c in "{}: "):
            raise ValueError(f"invalid Redis namespace {namespace!r}")
        if label and not label.isdigit():
            raise ValueError(f"invalid shard label {label!r}")
        self.label = label
        self.prefix = f"{{{namespace}:{label}}}:" if label else f"{{{namespace}}}:"

    @property
    def queue(self) -> str:
        """The shard's tally of waiting jobs: one entry per job queued in any tenant's queue (:meth:`tenant_queue`),
        pushed and popped by the same scripts, so its length is the shard's depth in O(1) (the depth cap, metrics,
        KEDA's ``listName``) and a worker with nothing to do waits on it (``BLMOVE`` onto itself). Which job is next
        is the tenants' queues' business, never this list's (docs/fairness.md)."""
        return self.prefix + "queue"

    @property
    def fair_prefix(self) -> str:
        """What the fair-queuing keys start with (the scripts build a tenant's queue name from it, to check it)."""
        return self.prefix + "fair:"

    def tenant_queue(self, lane: str, tenant: str) -> str:
        """One tenant's waiting job ids in one lane (``continuation``, ``interactive`` or ``batch``): LPUSH at the back,
        the front is the tail, like :attr:`queue` was before fair queuing (docs/fairness.md)."""
        return f"{self.fair_prefix}{lane}:q:{tenant}"

    def ring(self, lane: str) -> str:
        """List of the tenants with jobs waiting in a lane, in deficit-round-robin order: the head (served now) at
        the tail, a tenant whose turn is over moves to the other end, a newly active tenant joins there too."""
        return f"{self.fair_prefix}{lane}:ring"

    def credit(self, lane: str) -> str:
        """Hash: the head tenant of a lane → claims left in its turn (absent: a fresh turn of its weight)."""
        return f"{self.fair_prefix}{lane}:credit"

    @property
    def weights(self) -> str:
        """Hash of tenant → weight (claims per turn), copied from its API key at each submit."""
        return self.fair_prefix + "weights"

    @property
    def streak(self) -> str:
        """Interactive claims in a row while batch jobs waited (a batch claim follows ``INTERACTIVE_BURST`` of them)."""
        return self.fair_prefix + "streak"

    @property
    def processing(self) -> str:
        """List of claimed job ids (running; an id an older release moved here and never started is swept back)."""
        return self.prefix + "processing"

    @property
    def leases(self) -> str:
        """Sorted set of running job ids scored by their lease deadline (Unix seconds); the sweep requeues lapsed ones."""
        return self.prefix + "leases"

    @property
    def claims(self) -> str:
        """Counter of claims ever made: each claim takes the next number as its fencing token (see ``claim.lua``)."""
        return self.prefix + "claims"

    def claim_record(self, worker_id: str) -> str:
        """A worker's last claim (its request id and the jobs it got), so a repeated claim answers the same jobs."""
        return f"{self.prefix}claim:{worker_id}"

    @property
    def sweep_lock(self) -> str:
        """Held for one sweep interval by whichever worker sweeps, so that one worker sweeps per interval."""
        return self.prefix + "sweep-lock"

    @property
    def delayed(self) -> str:
        """Sorted set of job ids waiting out a retry backoff, scored by the time they may run."""
        return self.prefix + "delayed"

    @property
    def dead(self) -> str:
        """Dead-letter list: the final JSON record of every job that failed for good."""
        return self.prefix + "dead"

    @property
    def workers(self) -> str:
        """Sorted set of worker ids scored by their last heartbeat (Unix seconds, Redis's clock): who counts as live, and
        whose claims the sweep takes back once the beat is older than the heartbeat TTL."""
        return self.prefix + "workers"

    @property
    def beats_since(self) -> str:
        """Hash of worker id → when its current unbroken run of heartbeats on this shard began (Redis's clock; a gap
        longer than half the TTL starts a new run). A sweeper judges another worker's heartbeat only once its own run is
        a TTL long: after an outage every worker's beats are old, and none of them is dead for it."""
        return self.prefix + "beats-since"

    @property
    def fences(self) -> str:
        """Hash of worker id → the claims counter (:attr:`claims`) when the sweep last took that worker's claims back
        because its heartbeat had lapsed. Its next beat reads and clears it: the worker drops every job it holds under
        a claim up to that number (their writes would be refused anyway)."""
        return self.prefix + "fences"

    def worker_jobs(self, worker_id: str) -> str:
        """Sorted set of the jobs a worker claimed on this shard, scored by their claim's fencing token: what the sweep
        takes back when the worker's heartbeat lapses, without reading any other job. Added to by each claim, pruned of
        ended jobs by the worker's lease renewals; expires when neither has touched it for two leases."""
        return f"{self.prefix}worker-jobs:{worker_id}"

    @property
    def worker_jobs_prefix(self) -> str:
        return f"{self.prefix}worker-jobs:"

    @property
    def cancels(self) -> str:
        """Redis Stream (capped) with one entry each time a caller cancels a running job (its id, worker and claim):
        every worker follows it with a blocking read, so the job's worker stops its rows at the next decode step instead
        of at its next lease renewal (the job's ``cancel_requested`` stays the record; renewals still see it)."""
        return self.prefix + "cancels"

    @property
    def stats(self) -> str:
        """Hash of running totals (jobs done, busy seconds) used for wait estimates."""
        return self.prefix + "stats"

    @property
    def job_prefix(self) -> str:
        """What :meth:`job` puts before an id (Lua scripts that walk many jobs build their keys from it)."""
        return f"{self.prefix}job:"

    def job(self, job_id: str) -> str:
        return self.job_prefix + job_id

    def result(self, job_id: str) -> str:
        return f"{self.prefix}result:{job_id}"

    def worker(self, worker_id: str) -> str:
        return f"{self.prefix}worker:{worker_id}"

    def cache(self, cache_key: str) -> str:
        """L2 result-cache entry (on the cache's Redis, which may be a separate LRU instance)."""
        return f"{self.prefix}cache:{cache_key}"

    def inflight(self, cache_key: str) -> str:
        """Id of the queued or running job that is computing ``cache_key`` (single-flight)."""
        return f"{self.prefix}inflight:{cache_key}"

    @property
    def task_id_secret(self) -> str:
        """The HMAC secret for task ids when none is configured: created once, shared by replicas."""
        return self.prefix + "task-id-secret"

    def stream(self, job_id: str) -> str:
        """Redis Stream of a job's audio pieces (PCM16), published as each sentence is ready."""
        return f"{self.prefix}stream:{job_id}"

    @property
    def moves(self) -> str:
        """Redis Stream (capped at 16 entries) with one entry each time jobs leave the shard's queue (a claim, a cancel):
        queue positions on the shard have moved. The API's listener follows it, so an event stream of a queued task
        re-reads its position only when it may have changed."""
        return self.prefix + "moves"

    def owner_jobs(self, owner: str) -> str:
        """How many of an owner's jobs are queued or running (the per-key cap); kept by the job scripts."""
        return f"{self.prefix}owner-jobs:{owner}"

    @property
    def api_keys(self) -> str:
        """Hash of API keys: key id → JSON record with the key's SHA-256, never the key itself."""
        return self.prefix + "api-keys"

    @property
    def pronunciation(self) -> str:
        """Hash of pronunciation-dictionary entries: entry id → JSON record (home shard)."""
        return self.prefix + "pronunciation"

    @property
    def pronunciation_version(self) -> str:
        """Counter bumped by every dictionary change: what the API replicas poll to know theirs is stale."""
        return self.prefix + "pronunciation:version"

    def draw(self, draw_id: str) -> str:
        """A voice draw: its candidates' and reference voices' preview jobs (JSON); expires with their results."""
        return f"{self.prefix}draw:{draw_id}"

    def rate_limit(self, subject: str) -> str:
        """Token bucket of one API key or anonymous client address."""
        return f"{self.prefix}rate:{subject}"

    @property
    def deliveries(self) -> str:
        """List of job ids whose completion webhook is due (pushed by the completing script itself)."""
        return self.prefix + "deliveries"

    @property
    def deliveries_processing(self) -> str:
        """Job ids a deliverer has claimed (BLMOVE from :attr:`deliveries`), leased in :attr:`delivery_leases`."""
        return self.prefix + "deliveries:processing"

    @property
    def delivery_leases(self) -> str:
        """Sorted set of claimed delivery ids scored by their lease deadline."""
        return self.prefix + "deliveries:leases"

    @property
    def deliveries_delayed(self) -> str:
        """Sorted set of delivery ids waiting out a retry backoff, scored by when they may run."""
        return self.prefix + "deliveries:delayed"

    def delivery_log(self, job_id: str) -> str:
        """List of a job's delivery attempts (JSON), shown on its status; expires with the result."""
        return f"{self.prefix}delivery-log:{job_id}"

    @property
    def voices(self) -> str:
        """Hash of the global voices (every tenant sees them: an admin's catalogue): name → JSON record. Every voice
        stored before voices belonged to tenants is here, so a deployment's existing voices became global as they were."""
        return self.prefix + "voices"

    def tenant_voices(self, owner: str) -> str:
        """Hash of one tenant's own voices (``owner``: ``tenant:<name>`` or ``key:<id>``, the sharing scope of the key
        that made them): name → JSON record, seen and used by that tenant's keys (and admins) only."""
        return f"{self.prefix}voices:{owner}"

    @property
    def voice_encodes(self) -> str:
        """List of reference recordings waiting for a worker's DVAE encoder (ids; :mod:`ttsq.store.voice_encodings`)."""
        return self.prefix + "voice-encodes"

    def voice_encode(self, request_id: str) -> str:
        """One waiting recording's samples (float32 bytes); expires when its API request gives up."""
        return f"{self.prefix}voice-encode:{request_id}"

    def voice_encoded(self, request_id: str) -> str:
        """List holding a worker's answer to one encode request (JSON), read by the API request waiting on it."""
        return f"{self.prefix}voice-encoded:{request_id}"

    @property
    def styles(self) -> str:
        """Hash of the global styles (every tenant sees them: an admin's catalogue beside the built-in one): name → JSON
        record (:mod:`ttsq.store.styles`)."""
        return self.prefix + "styles"

    def tenant_styles(self, owner: str) -> str:
        """Hash of one tenant's own styles (``owner`` as for :meth:`tenant_voices`): name → JSON record."""
        return f"{self.prefix}styles:{owner}"


class Shards:
    """The queue's ``count`` shards of ``namespace``: where a job goes, and where a job id says it is."""

    def __init__(self, namespace: str, count: int) -> None:
        if count < 1:
            raise ValueError("a queue has at least one shard")
        self.namespace = namespace
        self.all = [Keys(namespace), *(Keys(namespace, label) for label in spread_labels(namespace, count))]
        """Every shard's keys, shard 0 (the home shard) first."""
        self._by_label = {keys.label: keys for keys in self.all}

    @property
    def home(self) -> Keys:
        """Shard 0: the job queue's first shard, and what is one per deployment."""
        return self.all[0]

    @property
    def count(self) -> int:
        return len(self.all)

    def of(self, job_id: str) -> Keys:
        """The shard a job id names (shard 0 when it names none), also one no longer in use.

        An id whose label no shard could have (not ASCII digits: a caller's typo, a fuzzer's ``_\\x18``) names none: it is
        looked up on shard 0 and not found there, a 404, where building its keys would raise (a 500)."""
        label = shard_label(job_id)
        if not (label.isascii() and label.isdigit()):
            return self.home
        known = self._by_label.get(label)
        return known if known is not None else Keys(self.namespace, label)

    def place(self, cache_key: str | None) -> Keys:
        """Where a new job goes: by its cache key (so identical requests meet on one shard: single-flight and the
        cache), else anywhere."""
        if self.count == 1:
            return self.home
        if cache_key is None:
            return random.choice(self.all)
        return self.all[int.from_bytes(hashlib.sha256(cache_key.encode()).digest()[:8], "big") % self.count]
