"""Health: the worker's liveness record and probe server, and the API's probes.

Worker (its own small server on ``WORKER_HEALTH_PORT``):

The record is updated by a timer task on the worker's event loop, so ``/healthz`` tells two
different failures apart: a *stalled loop* stops answering at all (the probe times out), and a
*hung inference* (the executor thread stuck past the job's deadline) answers 503. A Redis outage
is reported in the body but never fails liveness: restarting a worker cannot fix Redis.

``/readyz`` answers 200 while the worker can take jobs: its model is loaded and warmed, it is not
stopping, it has reached Redis (its first heartbeat was written: not before), its last claim reached the queue, and
no finished job's outcome is failing to be stored. A
worker whose claims fail — Redis away, or a Redis that answers every command with an error (``MOVED``
from a cluster node a plain client was pointed at, ``CLUSTERDOWN``, ``NOAUTH``) — or whose results
cannot be written (it retries them) is not ready, so an orchestrator never counts a pod that makes no
progress; liveness stays local, so it is not restarted for it either. A primary that has lost its replicas where
the deployment guards it (``min-replicas-to-write``, as the shipped Sentinel and Kubernetes configurations set)
refuses the claim's writes (``NOREPLICAS``), so such a worker is not ready either.

API (routes of the app): ``/healthz`` answers while the process serves requests; ``/readyz``
answers 200 while Redis is reachable and its primary has the replicas a submit waits for
(:class:`~ttsq.store.connection.Replication`) — never depending on workers, so an API in front of a pool
scaled to zero still accepts and queues jobs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import asdict, dataclass, field
from typing import Any

import uvicorn
from fastapi import APIRouter
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


@dataclass
class CurrentJob:
    id: str
    started_at: float
    deadline: float
    batch_size: int = 1


@dataclass
class HeartbeatRecord:
    """What the worker knows about itself; mirrored to Redis for the pool's view."""

    worker_id: str
    model_loaded: bool = False
    model: str | None = None
    speaks_noise: bool = False
    ready: bool = False
    stopping: bool = False
    redis_ok: bool = True
    claim_error: str | None = None
    """Why the last claim failed (None: it reached the queue, or none was tried yet): readiness fails meanwhile."""
    store_error: str | None = None
    """Why storing a finished job's outcome is failing (None: no store is failing now): the worker retries it, and
    readiness fails meanwhile — its finished work is stuck in its hands, whatever its claims do."""
    last_tick: float = field(default_factory=time.time)
    last_heartbeat: float | None = None
    """When the heartbeat was last written to Redis (None: not yet)."""
    jobs_done: int = 0
    jobs_failed: int = 0
    batches: int = 0
    largest_batch: int = 0
    current_job: CurrentJob | None = None
    stream_room: int | None = None
    """With ``STREAM_ADMISSION`` on: this worker's stream room, the streams it can still start and keep real-time
    (:mod:`ttsq.runtime.stream_admission`), summed by the API for its ``refuse``."""

    def tick(self) -> None:
        self.last_tick = time.time()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def reached_redis(self) -> bool:
        """Whether anything this worker sent has reached Redis yet: its first heartbeat (written before the model loads,
        so it has long answered by the time a worker that can reach Redis is warm)."""
        return self.last_heartbeat is not None

    def serving(self) -> bool:
        """What ``/readyz`` answers: loaded and warmed (:attr:`ready`), not stopping, Redis reached (so a worker started
        while Redis is away never says it is ready before it has tried), its last claim reached the queue, and no
        outcome failing to be stored."""
        return self.ready and not self.stopping and self.reached_redis and self.claim_error is None and self.store_error is None

    def liveness(self, stall_after_s: float, now: float | None = None) -> tuple[bool, str]:
        """(alive, reason). Not alive when the loop stopped ticking or the job is past its deadline."""
        moment = time.time() if now is None else now
        if moment - self.last_tick > stall_after_s:
            return False, f"event loop has not ticked for {moment - self.last_tick:.1f}s"
        job = self.current_job
        if job is not None and moment > job.deadline:
            return False, (
                f"inference of job {job.id} has run {moment - job.started_at:.0f}s, "
                f"past its deadline of {job.deadline - job.started_at:.0f}s: hung"
            )
        return True, "ok"


def health_app(record: HeartbeatRecord, stall_after_s: float, metrics: Callable[[], bytes] | None = None) -> Starlette:
    async def healthz(_: Request) -> JSONResponse:
        alive, reason = record.liveness(stall_after_s)
        body = record.as_dict() | {
            "status": "ok" if alive else "unhealthy",
            "reason": reason,
            "redis": "ok" if record.redis_ok else "unreachable",
        }
        return JSONResponse(body, status_code=200 if alive else 503)

    async def readyz(_: Request) -> JSONResponse:
        claiming = record.claim_error is None and record.reached_redis
        why_not = record.claim_error or "no command of this worker has reached Redis yet"
        storing = record.store_error is None
        ready = record.serving()
        body: dict[str, Any] = {
            "status": "ready" if ready else "not ready",
            "model_loaded": record.model_loaded,
            "model": record.model,
            "speaks_noise": record.speaks_noise,
            "claiming": "ok" if claiming else f"cannot claim jobs: {why_not}",
            "storing": "ok" if storing else f"cannot store job outcomes: {record.store_error}",
        }
        if record.speaks_noise:
            body["notice"] = "random-weight test checkpoint: the audio is noise"
        return JSONResponse(body, status_code=200 if ready else 503)

    async def prometheus(_: Request) -> Response:
        return Response(metrics() if metrics is not None else b"", media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", prometheus)])


class EmbeddedServer(uvicorn.Server):
    """uvicorn on the worker's own loop; the worker, not uvicorn, owns SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def health_server(
    record: HeartbeatRecord, host: str, port: int, stall_after_s: float, metrics: Callable[[], bytes] | None = None
) -> EmbeddedServer:
    """The worker's probe and metrics server (``/healthz``, ``/readyz``, ``/metrics``)."""
    config = uvicorn.Config(
        health_app(record, stall_after_s, metrics), host=host, port=port, log_level="warning", access_log=False, lifespan="off"
    )
    return EmbeddedServer(config)


class HealthBody(BaseModel):
    status: str
    redis: str | None = None
    replicas: int | None = None
    """The primary's replicas online, where acknowledged writes wait for them (``SUBMIT_WAIT_REPLICAS``)."""
    workers: int | None = None
    queue_depth: int | None = None
    model: str | None = None
    notice: str | None = None


def api_probes(readiness: Callable[[], Awaitable[dict[str, Any]]], unavailable: dict[int | str, dict[str, Any]]) -> APIRouter:
    """The API's ``/healthz`` and ``/readyz``. ``readiness`` raises while the API cannot accept jobs
    (the app's error handlers turn a Redis outage into 503); ``unavailable`` documents that answer."""
    router = APIRouter(tags=["health"])

    @router.get("/healthz", response_model=HealthBody, summary="The API process is alive")
    async def healthz() -> HealthBody:
        return HealthBody(status="ok")

    @router.get(
        "/readyz",
        response_model=HealthBody,
        responses=unavailable,
        summary="Ready to accept jobs (Redis reachable, with the replicas submits wait for); also reports workers and queue depth",
    )
    async def readyz() -> HealthBody:
        return HealthBody(status="ready", **await readiness())

    return router
