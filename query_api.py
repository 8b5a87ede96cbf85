"""Reading tasks back: status, audio download, and the API's own health and readiness."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response
from fastapi.responses import JSONResponse

from deps import QueueDep, SettingsDep, SignerDep, model_notice
from ttsq.api_errors import ERROR_RESPONSES
from ttsq.jobs import Job, Status
from ttsq.queue import JobQueue
from ttsq.schemas import ErrorBody, HealthBody, TaskStatus
from ttsq.task_ids import TaskIdSigner

router = APIRouter(tags=["query"])

_NOT_FOUND = {"model": ErrorBody, "description": "Unknown task id, or its result has expired."}


async def _load(queue: JobQueue, signer: TaskIdSigner, task_id: str) -> Job:
    """The job, or 404. A forged, random or malformed id is refused without any Redis command."""
    job = await queue.get(task_id) if signer.verify(task_id) else None
    if job is None:
        raise HTTPException(404, f"no task {task_id!r}: it never existed or its result has expired")
    return job


async def _status_of(queue: JobQueue, job: Job) -> TaskStatus:
    position = await queue.position(job.id) if job.status is Status.QUEUED else None
    return TaskStatus.of(job, position)


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
            "content": {t: {} for t in ("audio/wav", "audio/mpeg", "audio/ogg", "audio/flac")},
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
    await queue.redis.ping()
    return HealthBody(
        status="ready",
        redis="ok",
        workers=await queue.live_worker_count(),
        queue_depth=await queue.depth(),
        model=settings.model,
        notice=model_notice(settings),
    )
