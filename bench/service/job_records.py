"""Reading back what the workers wrote: the job records a throughput benchmark counts (one place for the
queue-bound benchmarks, :mod:`bench.service.throughput` and :mod:`bench.scale.shards`)."""

from __future__ import annotations

from ttsq.domain.jobs import Job
from ttsq.store.connection import RedisClient

BATCH = 500
"""Keys per MGET: large enough to be quick, small enough not to hold Redis up."""


async def done_jobs(client: RedisClient, job_keys: list[str]) -> list[Job]:
    """The records among ``job_keys`` that ended done with a start and a finish time (others are skipped). On a
    Redis Cluster the keys of one call must share a slot (one shard's jobs)."""
    jobs = []
    for start in range(0, len(job_keys), BATCH):
        for raw in await client.mget(job_keys[start : start + BATCH]):
            if raw is None:
                continue
            job = Job.model_validate_json(raw)
            if job.status == "done" and job.started_at is not None and job.finished_at is not None:
                jobs.append(job)
    return jobs
