"""Reading tasks back: status, audio download, and the API's own health and readiness."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Response
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent

from deps import QueueDep, SettingsDep, SignerDep, model_notice
from ttsq.api_errors import ERROR_RESPONSES
from ttsq.audio import CONTENT_TYPES
from ttsq.jobs import Job, Status
from ttsq.queue import JobQueue
from ttsq.schemas import ErrorBody, HealthBody, TaskStatus
from ttsq.streaming import STREAM_CONTENT_TYPES, StreamFormat, audio_stream
from ttsq.task_ids import TaskIdSigner

router = APIRouter(tags=["query"])

_EVENT_POLL_S = 0.5
_NOT_FOUND = {"model": ErrorBody, "description": "Unknown task id, or its result has expired."}


async def _load(queue: JobQueue, signer: TaskIdSigner, task_id: str) -> Job:
    """The job, or 404. A forged, random or malformed id is refused without any Redis command."""
    job = await queue.get(task_id) if signer.verify(task_id) else None
    if job is None:
        raise HTTPException(404, f"no task {task_id!r}: it never existed or its result has expired")
    return job


async def _status_of(queue: JobQueue, job: Job) -> TaskStatus:
    position = await queue.position(job.id) if job.status is Status.QUEUED else None
    progress = await queue.progress(job.id) if job.status is not Status.QUEUED else None
    return TaskStatus.of(job, position, progress)


@router.get(
    "/v1/tts/tasks/{task_id}",
    response_model=TaskStatus,
    responses={404: _NOT_FOUND, 503: ERROR_RESPONSES[503]},
    summary="Status of a task",
)
async def task_status(task_id: str, queue: QueueDep, signer: SignerDep) -> TaskStatus:
    return await _status_of(queue, await _load(queue, signer, task_id))


@router.get(
    "/v1/tts/result/{task_id}",
    responses={
        200: {
            "description": "The audio, in the format that was asked for.",
            "content": {t: {} for t in sorted(set(CONTENT_TYPES.values()))},
        },
        202: {
            "model": TaskStatus,
            "description": "Not ready yet; poll again after `Retry-After` seconds.",
            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
        },
        404: _NOT_FOUND,
        409: {"model": TaskStatus, "description": "The task failed; `error` says why."},
        503: ERROR_RESPONSES[503],
    },
    summary="Download the audio of a finished task",
)
async def task_result(task_id: str, queue: QueueDep, signer: SignerDep) -> Response:
    job = await _load(queue, signer, task_id)
    if job.status is Status.DONE:
        audio = await queue.result(task_id)
        if audio is None:
            raise HTTPException(404, f"the result of task {task_id!r} has expired")
        return Response(
            content=audio,
            media_type=job.content_type,
            headers={"Content-Disposition": f'attachment; filename="{task_id}.{job.params.format}"'},
        )
    body = (await _status_of(queue, job)).model_dump(mode="json")
    if job.status is Status.FAILED:
        return JSONResponse(status_code=409, content=body)
    return JSONResponse(status_code=202, content=body, headers={"Retry-After": str(_poll_after_s(job))})


def _poll_after_s(job: Job) -> int:
    """Running jobs are polled sooner than queued ones; a client may always poll faster."""
    return 1 if job.status is Status.RUNNING else 2


@router.get(
    "/v1/tts/stream/{task_id}",
    responses={
        200: {
            "description": "The audio as it is produced: WAV with an open-ended header, or raw PCM16 LE mono 24 kHz.",
            "content": {"audio/wav": {}, "audio/pcm": {}},
        },
        404: _NOT_FOUND,
        409: {"model": TaskStatus, "description": "The task failed; `error` says why."},
        503: ERROR_RESPONSES[503],
    },
    summary="Stream a task's audio sentence by sentence (works while it is queued or running)",
)
async def task_stream(
    task_id: str,
    queue: QueueDep,
    signer: SignerDep,
    format: Annotated[StreamFormat, Query(description="wav (open-ended header) or pcm (raw PCM16)")] = "wav",
) -> Response:
    job = await _load(queue, signer, task_id)
    if job.status is Status.FAILED:
        return JSONResponse(status_code=409, content=(await _status_of(queue, job)).model_dump(mode="json"))
    return StreamingResponse(
        audio_stream(queue, task_id, format),
        media_type=STREAM_CONTENT_TYPES[format],
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


@router.get(
    "/v1/tts/events/{task_id}",
    response_class=EventSourceResponse,
    responses={404: _NOT_FOUND, 503: ERROR_RESPONSES[503]},
    summary="Server-sent `status` events (queue position, chunks done/total) until the task ends",
)
async def task_events(task_id: str, queue: QueueDep, signer: SignerDep) -> AsyncIterator[ServerSentEvent]:
    job: Job | None = await _load(queue, signer, task_id)
    last: dict[str, object] | None = None
    while job is not None:
        status = await _status_of(queue, job)
        event = status.model_dump(
            mode="json", include={"task_id", "status", "queue_position", "chunks_done", "chunks_total", "error"}
        )
        if event != last:
            yield ServerSentEvent(event="status", data=event)
            last = event
        if job.status.is_final:
            return
        await asyncio.sleep(_EVENT_POLL_S)
        job = await queue.get(task_id)


@router.get("/healthz", response_model=HealthBody, summary="The API process is alive")
async def healthz() -> HealthBody:
    return HealthBody(status="ok")


@router.get(
    "/readyz",
    response_model=HealthBody,
    responses={503: ERROR_RESPONSES[503]},
    summary="Ready to accept jobs (Redis reachable); also reports live workers",
)
async def readyz(queue: QueueDep, settings: SettingsDep) -> HealthBody:
    """Readiness depends on Redis only: with zero workers the API still accepts and queues jobs."""
    await queue.ping()
    return HealthBody(
        status="ready",
        redis="ok",
        workers=await queue.live_worker_count(),
        queue_depth=await queue.depth(),
        model=settings.model,
        notice=model_notice(settings),
    )
