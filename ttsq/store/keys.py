"""Every Redis key name ttsq uses, in one place.

All keys share the hash tag ``{namespace}`` so that they live in one Redis Cluster slot: the queue's
multi-key operations (BLMOVE between two lists, the Lua scripts) require that.
"""

from __future__ import annotations


class Keys:
    """Key builder for one namespace (``ttsq`` → keys look like ``{ttsq}:queue``)."""

    def __init__(self, namespace: str) -> None:
        if not namespace or any(c in namespace for c in "{}: "):
            raise ValueError(f"invalid Redis namespace {namespace!r}")
        self.prefix = f"{{{namespace}}}:"

    @property
    def queue(self) -> str:
        """List of waiting job ids: LPUSH at the head, consumers pop from the tail (FIFO)."""
        return self.prefix + "queue"

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
        """Sorted set of worker ids scored by their last heartbeat (Unix seconds)."""
        return self.prefix + "workers"

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

    def owner_jobs(self, owner: str) -> str:
        """How many of an owner's jobs are queued or running (the per-key cap); kept by the job scripts."""
        return f"{self.prefix}owner-jobs:{owner}"

    @property
    def owner_jobs_prefix(self) -> str:
        return f"{self.prefix}owner-jobs:"

    @property
    def api_keys(self) -> str:
        """Hash of API keys: key id → JSON record with the key's SHA-256, never the key itself."""
        return self.prefix + "api-keys"

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
        """Hash of registered voices: name → JSON record."""
        return self.prefix + "voices"
