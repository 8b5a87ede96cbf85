"""Reading tasks back: status, audio download, audio stream and status events."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse, StreamingResponse

from deps import ServiceDep
from ttsq.api.errors import ERROR_RESPONSES
from ttsq.api.schemas import ErrorBody, TaskStatus
from ttsq.domain.audio import CONTENT_TYPES
from ttsq.domain.jobs import Job, Status
from ttsq.store.streams import STREAM_CONTENT_TYPES, StreamFormat

router = APIRouter(prefix="/v1/tts", tags=["query"])

_NOT_FOUND = {"model": ErrorBody, "description": "Unknown task id, or its result has expired."}
_FAILED = {"model": TaskStatus, "description": "The task failed; `error` says why."}


@router.get(
    "/tasks/{task_id}",
    response_model=TaskStatus,
    responses={404: _NOT_FOUND, 503: ERROR_RESPONSES[503]},
    summary="Status of a task",
)
async def task_status(task_id: str, service: ServiceDep) -> TaskStatus:
    return await service.status(await service.job(task_id))


@router.get(
    "/result/{task_id}",
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
        409: _FAILED,
        503: ERROR_RESPONSES[503],
    },
    summary="Download the audio of a finished task",
)
async def task_result(task_id: str, service: ServiceDep) -> Response:
    download = await service.download(task_id)
    if download.audio is not None:
        return Response(
            content=download.audio,
            media_type=download.job.content_type,
            headers={"Content-Disposition": f'attachment; filename="{task_id}.{download.job.params.format}"'},
        )
    body = download.status.model_dump(mode="json") if download.status is not None else {}
    if download.job.status is Status.FAILED:
        return JSONResponse(status_code=409, content=body)
    return JSONResponse(status_code=202, content=body, headers={"Retry-After": str(_poll_after_s(download.job))})


def _poll_after_s(job: Job) -> int:
    """Running jobs are polled sooner than queued ones; a client may always poll faster."""
    return 1 if job.status is Status.RUNNING else 2


@router.get(
    "/stream/{task_id}",
    responses={
        200: {
            "description": "The audio as it is produced: WAV with an open-ended header, or raw PCM16 LE mono 24 kHz.",
            "content": {"audio/wav": {}, "audio/pcm": {}},
        },
        404: _NOT_FOUND,
        409: _FAILED,
        503: ERROR_RESPONSES[503],
    },
    summary="Stream a task's audio sentence by sentence (works while it is queued or running)",
)
async def task_stream(
    task_id: str,
    service: ServiceDep,
    format: Annotated[StreamFormat, Query(description="wav (open-ended header) or pcm (raw PCM16)")] = "wav",
) -> Response:
    job = await service.job(task_id)
    if job.status is Status.FAILED:
        return JSONResponse(status_code=409, content=(await service.status(job)).model_dump(mode="json"))
    return StreamingResponse(
        service.audio(task_id, format),
        media_type=STREAM_CONTENT_TYPES[format],
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


@router.get(
    "/events/{task_id}",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "`event: status` with a JSON `data` line each time the task changes, until it ends.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        404: _NOT_FOUND,
        503: ERROR_RESPONSES[503],
    },
    summary="Server-sent `status` events (queue position, chunks done/total) until the task ends",
)
async def task_events(task_id: str, service: ServiceDep) -> StreamingResponse:
    """The task is looked up before the stream starts, so an unknown id is a plain 404."""
    job = await service.job(task_id)

    async def events() -> AsyncIterator[str]:
        async for event in service.events(job):
            yield f"event: status\ndata: {json.dumps(event)}\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})
