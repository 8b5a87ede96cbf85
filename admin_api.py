"""Operator routes (scope ``admin``): the dead letters — jobs that failed for good — listed with their
reasons, requeued under their own ids, or dropped (the same as ``python -m ttsq dead-letters``); and the
pronunciation dictionary's entries, added, listed and deleted (docs/dictionary.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from deps import AdminCaller, AdminDep, DictionaryDep
from ttsq.api.errors import (
    AUTH_RESPONSES,
    BODY_TIMEOUT_RESPONSE,
    BODY_TOO_LARGE_RESPONSE,
    ERROR_RESPONSES,
    UNSUPPORTED_MEDIA_TYPE_RESPONSE,
)
from ttsq.api.schemas import REQUEST_MODEL, DeadLetter, DeadLetterList, ErrorBody, RequeueResponse
from ttsq.api.service import SCOPE_PATTERN, EntryConflict, EntryKind, EntryLanguage, PronunciationEntry, Requeued

router = APIRouter(prefix="/v1/admin/dead-letters", tags=["admin"])

TaskId = Annotated[str, Path(description="The dead-lettered task's id.")]
_NOT_FOUND = {"model": ErrorBody, "description": "No dead letter with that id (requeued, purged, or never)."}


@router.get("", response_model=DeadLetterList, responses={503: ERROR_RESPONSES[503], **AUTH_RESPONSES}, summary="List dead letters")
async def list_dead_letters(
    admin: AdminDep, caller: AdminCaller, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> DeadLetterList:
    """Newest first, each with its reason and attempts (texts shortened to 200 characters)."""
    jobs, total = await admin.dead_letters(limit)
    return DeadLetterList(total=total, dead_letters=[DeadLetter.of(job, preview=True) for job in jobs])


@router.get(
    "/{task_id}",
    response_model=DeadLetter,
    responses={404: _NOT_FOUND, 503: ERROR_RESPONSES[503], **AUTH_RESPONSES},
    summary="One dead letter",
)
async def get_dead_letter(task_id: TaskId, admin: AdminDep, caller: AdminCaller) -> DeadLetter:
    job = await admin.dead_letter(task_id)
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
async def requeue_dead_letter(task_id: TaskId, admin: AdminDep, caller: AdminCaller) -> RequeueResponse:
    """Clients still polling the id get its audio once it runs; its attempts start again and it runs alone."""
    outcome, position = await admin.requeue_dead(task_id)
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
async def purge_dead_letter(task_id: TaskId, admin: AdminDep, caller: AdminCaller) -> Response:
    """The task's record still reads "failed" until it expires (``RESULT_TTL_S``)."""
    if not await admin.purge_dead(task_id):
        raise HTTPException(404, f"no dead letter {task_id!r}")
    return Response(status_code=204)


# ---- the pronunciation dictionary (docs/dictionary.md) -------------------------------------------

pronunciation = APIRouter(prefix="/v1/admin/pronunciation", tags=["admin"])


class PronunciationCreate(BaseModel):
    """A word or a regex and what to say instead, for one language (or both) and one scope."""

    model_config = ConfigDict(
        **REQUEST_MODEL,
        json_schema_extra={"examples": [{"kind": "word", "match": "SQL", "replacement": "sequel", "language": "en"}]},
    )

    kind: EntryKind = Field("word", description="`word`: a literal; `regex`: a pattern (`\\1`, `\\g<name>` in the replacement).")
    match: str = Field(min_length=1, description="The word or the pattern (length capped by PRONUNCIATION_MAX_PATTERN_CHARS).")
    replacement: str = Field(description="What the model reads instead (capped by PRONUNCIATION_MAX_REPLACEMENT_CHARS).")
    language: EntryLanguage = Field("auto", description="Texts it applies to: `zh`, `en` (as detected), or `auto` (both).")
    scope: str = Field("global", pattern=SCOPE_PATTERN, description="`global`, `key:<key id>` or `tenant:<tenant name>`.")
    case_sensitive: bool = Field(False, description="Words only: match the case as written (default: any case).")


class PronunciationList(BaseModel):
    entries: list[PronunciationEntry]


_NO_ENTRY = {"model": ErrorBody, "description": "No entry with that id."}


@pronunciation.post(
    "",
    status_code=201,
    response_model=PronunciationEntry,
    responses={
        409: {"model": ErrorBody, "description": "The scope already has this entry, or holds as many as it may."},
        408: BODY_TIMEOUT_RESPONSE,
        413: BODY_TOO_LARGE_RESPONSE,
        415: UNSUPPORTED_MEDIA_TYPE_RESPONSE,
        **ERROR_RESPONSES,
        **AUTH_RESPONSES,
    },
    summary="Add a pronunciation entry",
)
async def create_pronunciation(body: PronunciationCreate, dictionary: DictionaryDep, caller: AdminCaller) -> PronunciationEntry:
    """Applies from the next submit on this replica, within PRONUNCIATION_REFRESH_S on the others. A bad pattern,
    an over-long field or a forbidden control token in the replacement is a 422 naming the field."""
    try:
        return await dictionary.add_pronunciation(**body.model_dump())
    except EntryConflict as exc:
        raise HTTPException(409, str(exc)) from exc


@pronunciation.get(
    "",
    response_model=PronunciationList,
    responses={**ERROR_RESPONSES, **AUTH_RESPONSES},
    summary="List pronunciation entries",
)
async def list_pronunciation(
    dictionary: DictionaryDep,
    caller: AdminCaller,
    scope: Annotated[str | None, Query(pattern=SCOPE_PATTERN, description="Only this scope's entries.")] = None,
) -> PronunciationList:
    """Oldest first."""
    return PronunciationList(entries=await dictionary.pronunciation_entries(scope))


@pronunciation.delete(
    "/{entry_id}",
    status_code=204,
    responses={404: _NO_ENTRY, 503: ERROR_RESPONSES[503], **AUTH_RESPONSES},
    summary="Delete a pronunciation entry",
)
async def delete_pronunciation(
    entry_id: Annotated[str, Path(description="The entry's id.")], dictionary: DictionaryDep, caller: AdminCaller
) -> Response:
    if not await dictionary.delete_pronunciation(entry_id):
        raise HTTPException(404, f"no pronunciation entry {entry_id!r}")
    return Response(status_code=204)
