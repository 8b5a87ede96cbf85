"""Operator routes (scope ``admin``): the dead letters — jobs that failed for good — listed with their
reasons, requeued under their own ids, or dropped. The same as ``python -m ttsq dead-letters``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query
from fastapi.responses import Response

from deps import AdminCaller, ServiceDep
from ttsq.api.errors import AUTH_RESPONSES, ERROR_RESPONSES
from ttsq.api.schemas import DeadLetter, DeadLetterList, ErrorBody, RequeueResponse
from ttsq.api.service import Requeued

router = APIRouter(prefix="/v1/admin/dead-letters", tags=["admin"])

TaskId = Annotated[str, Path(description="The dead-lettered task's id.")]
_NOT_FOUND = {"model": ErrorBody, "description": "No dead letter with that id (requeued, purged, or never)."}


@router.get("", response_model=DeadLetterList, responses={503: ERROR_RESPONSES[503], **AUTH_RESPONSES}, summary="List dead letters")
async def list_dead_letters(
    service: ServiceDep, caller: AdminCaller, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> DeadLetterList:
    """Newest first, each with its reason and attempts (texts shortened to 200 characters)."""
    jobs, total = await service.dead_letters(limit)
    return DeadLetterList(total=total, dead_letters=[DeadLetter.of(job, preview=True) for job in jobs])


@router.get(
    "/{task_id}",
    response_model=DeadLetter,
    responses={404: _NOT_FOUND, 503: ERROR_RESPONSES[503], **AUTH_RESPONSES},
    summary="One dead letter",
)
async def get_dead_letter(task_id: TaskId, service: ServiceDep, caller: AdminCaller) -> DeadLetter:
    job = await service.dead_letter(task_id)
    if job is None:
        raise HTTPException(404, f"no dead letter {task_id!r}")
    return DeadLetter.of(job, preview=False)


@router.post(
    "/{task_id}/requeue",
    status_code=202,
    response_model=RequeueResponse,
    responses={
        404: _NOT_FOUND,
        409: {"model": ErrorBody, "description": "Its task is queued, running or done again: nothing changed."},
        503: ERROR_RESPONSES[503],
        **AUTH_RESPONSES,
    },
    summary="Requeue a dead letter under its own id",
)
async def requeue_dead_letter(task_id: TaskId, service: ServiceDep, caller: AdminCaller) -> RequeueResponse:
    """Clients still polling the id get its audio once it runs; its attempts start again and it runs alone."""
    outcome, position = await service.requeue_dead(task_id)
    if outcome is Requeued.MISSING:
        raise HTTPException(404, f"no dead letter {task_id!r}")
    if outcome is Requeued.ACTIVE:
        raise HTTPException(409, f"task {task_id!r} is active again; nothing changed")
    return RequeueResponse(task_id=task_id, status="queued", queue_position=position)


@router.delete(
    "/{task_id}",
    status_code=204,
    responses={404: _NOT_FOUND, 503: ERROR_RESPONSES[503], **AUTH_RESPONSES},
    summary="Drop a dead letter",
)
async def purge_dead_letter(task_id: TaskId, service: ServiceDep, caller: AdminCaller) -> Response:
    """The task's record still reads "failed" until it expires (``RESULT_TTL_S``)."""
    if not await service.purge_dead(task_id):
        raise HTTPException(404, f"no dead letter {task_id!r}")
    return Response(status_code=204)
