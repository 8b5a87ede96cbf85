"""Closed-loop HTTP clients for the end-to-end benchmarks, and what they measured.

Each of ``clients`` asyncio tasks runs one job after another (submit, poll every 100 ms,
download — or, for the baseline, one POST that waits) until ``duration_s`` has passed, then
finishes the job it holds. Every job in flight at the deadline is therefore completed and
counted, and the server is busy from the first submit to the last completion, so

    throughput = completed jobs / (last completion − start)

is the service rate over a busy period, with no warm-up to cut (engines are warmed before
serving). For a batching server the tail (the last poll and download) is counted as busy time,
which errs against ttsq. Latency is per job, from its first request to its last byte.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

POLL_S = 0.1
MAX_ERRORS = 50


class JobError(RuntimeError):
    """A job that did not end with its audio (a refused submit, a failed task, a short download)."""


@dataclass
class LoopResult:
    name: str
    clients: int
    duration_s: float
    completed: int = 0
    wall_s: float = 0.0
    jobs_per_s: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    errors: list[str] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    worker_jobs: int = 0
    """Jobs the ttsq workers finished during the run, and in how many engine calls (their /healthz
    counters), so a report can show the mean batch size actually formed."""
    worker_batches: int = 0
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds each role's processes used during the run (client, API, workers, Redis)."""

    @property
    def mean_batch(self) -> float | None:
        return self.worker_jobs / self.worker_batches if self.worker_batches else None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["errors"] = self.errors[:10]
        data["error_count"] = len(self.errors)
        data["mean_batch"] = self.mean_batch
        data["cpu_cores"] = {role: seconds / self.wall_s for role, seconds in self.cpu_s.items()} if self.wall_s else {}
        del data["latencies_ms"]
        return data


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (inclusive method; the one value when there is one)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


async def closed_loop(
    name: str, job: Callable[[int], Awaitable[None]], *, clients: int, duration_s: float, job_timeout_s: float
) -> LoopResult:
    """Run ``clients`` closed-loop clients of ``job(n)`` for ``duration_s`` (plus the drain)."""
    result = LoopResult(name=name, clients=clients, duration_s=duration_s)
    tickets = itertools.count()
    done_at: list[float] = []
    start = time.perf_counter()
    deadline = start + duration_s

    async def client() -> None:
        while time.perf_counter() < deadline and len(result.errors) < MAX_ERRORS:
            began = time.perf_counter()
            try:
                async with asyncio.timeout(job_timeout_s):
                    await job(next(tickets))
            except (JobError, httpx.HTTPError, TimeoutError, KeyError, ValueError) as exc:
                result.errors.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(POLL_S)  # a failing server must not be hammered in a hot loop
                continue
            finished = time.perf_counter()
            done_at.append(finished)
            result.latencies_ms.append((finished - began) * 1000)

    await asyncio.gather(*(client() for _ in range(clients)))
    result.completed = len(done_at)
    if done_at:
        result.wall_s = max(done_at) - start
        result.jobs_per_s = result.completed / result.wall_s
        result.p50_ms = statistics.median(result.latencies_ms)
        result.p99_ms = percentile(result.latencies_ms, 99)
    return result


def merge(name: str, runs: list[LoopResult]) -> LoopResult:
    """Several rounds of one variant as one: jobs over summed busy time, latencies pooled."""
    merged = LoopResult(name=name, clients=runs[0].clients, duration_s=sum(run.duration_s for run in runs))
    for run in runs:
        merged.completed += run.completed
        merged.wall_s += run.wall_s
        merged.errors.extend(run.errors)
        merged.latencies_ms.extend(run.latencies_ms)
        merged.worker_jobs += run.worker_jobs
        merged.worker_batches += run.worker_batches
        for role, seconds in run.cpu_s.items():
            merged.cpu_s[role] = merged.cpu_s.get(role, 0.0) + seconds
    if merged.completed:
        merged.jobs_per_s = merged.completed / merged.wall_s
        merged.p50_ms = statistics.median(merged.latencies_ms)
        merged.p99_ms = percentile(merged.latencies_ms, 99)
    return merged


async def worker_counters(client: httpx.AsyncClient, health_urls: list[str]) -> tuple[int, int]:
    """(jobs done, batches run) summed over the workers' ``/healthz`` bodies."""
    jobs = batches = 0
    for url in health_urls:
        body = (await client.get(f"{url}/healthz")).json()
        jobs += int(body.get("jobs_done", 0))
        batches += int(body.get("batches", 0))
    return jobs, batches


def ttsq_job(client: httpx.AsyncClient, base: str, body: Callable[[int], dict[str, Any]]) -> Callable[[int], Awaitable[None]]:
    """A ttsq client: submit, poll the task every 100 ms until done, download the audio."""

    async def once(n: int) -> None:
        submitted = await client.post(f"{base}/v1/tts/submit", json=body(n))
        if submitted.status_code != 202:
            raise JobError(f"submit answered {submitted.status_code}: {submitted.text[:200]}")
        task_id = submitted.json()["task_id"]
        while True:  # bounded by the caller's job timeout
            await asyncio.sleep(POLL_S)
            state = (await client.get(f"{base}/v1/tts/tasks/{task_id}")).json()["status"]
            if state == "done":
                break
            if state == "failed":
                raise JobError(f"task {task_id} failed")
        audio = await client.get(f"{base}/v1/tts/result/{task_id}")
        if audio.status_code != 200 or len(audio.content) <= 44:
            raise JobError(f"download answered {audio.status_code} with {len(audio.content)} bytes")

    return once


def baseline_job(client: httpx.AsyncClient, base: str, body: Callable[[int], dict[str, Any]]) -> Callable[[int], Awaitable[None]]:
    """A baseline client: one POST that returns the audio when synthesis is done."""

    async def once(n: int) -> None:
        response = await client.post(f"{base}/tts", json=body(n))
        if response.status_code != 200 or len(response.content) <= 44:
            raise JobError(f"baseline answered {response.status_code} with {len(response.content)} bytes")

    return once
