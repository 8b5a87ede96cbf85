"""ChatTTS's prosody: ``POST /v1/tts/refine`` (the refine pass alone, its text to read and edit) and the named styles,
``/v1/styles`` (list, create, fetch, delete). docs/prosody.md tells the whole story."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request, status
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from deps import AdminCaller, ListeningDep, RefineDep, StylesDep, TTSCaller
from ttsq.api.errors import (
    AUTH_RESPONSES,
    BODY_TIMEOUT_RESPONSE,
    BODY_TOO_LARGE_RESPONSE,
    ERROR_RESPONSES,
    LONG_POLL_UNAVAILABLE,
    RATE_LIMIT_HEADERS,
    TOO_MANY_STREAMS_RESPONSES,
    UNSUPPORTED_MEDIA_TYPE_RESPONSE,
)
from ttsq.api.schemas import REQUEST_MODEL, TEXT_FIELD, ErrorBody, SubmitRequest, TaskStatus
from ttsq.api.service import (
    LEVELS,
    MAX_SEED,
    STYLE_NAME,
    BreakLevel,
    LaughLevel,
    OralLevel,
    Refined,
    SamplingPreset,
    Status,
    Style,
    StyleConflict,
    validate_style_name,
)

refine = APIRouter(prefix="/v1/tts", tags=["tts"])
router = APIRouter(prefix="/v1/styles", tags=["styles"])


class RefineRequest(BaseModel):
    """A text to refine: ChatTTS's refine pass, steered by the refine prompt's levels, without the audio."""

    model_config = ConfigDict(
        **REQUEST_MODEL, json_schema_extra={"examples": [{"text": "So we went to the park, and it rained.", "oral": 2, "laugh": 0}]}
    )

    text: str = Field(
        description="Text to refine, checked as `text` on /v1/tts/submit (at most MAX_TEXT_CHARS characters, `maxLength`).",
        json_schema_extra={"minLength": 1},  # "" is refused by the text check, with its own message
    )
    oral: OralLevel | None = Field(None, description="The refine prompt's `[oral_N]`, 0-9.")
    laugh: LaughLevel | None = Field(None, description="The refine prompt's `[laugh_N]`, 0-2.")
    break_: BreakLevel | None = Field(None, alias="break", description="The refine prompt's `[break_N]`, 0-7.")
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="Sampling seed of the refine pass; drawn when absent.")
    style: str | None = Field(
        None,
        pattern=STYLE_NAME.pattern,
        description="A style (`GET /v1/styles`) whose oral, laugh and break levels stand in for those the body leaves unsaid.",
    )

    def submit_body(self) -> SubmitRequest:
        """The body a refine job is queued from: the text, the seed, the style and the levels this body says."""
        levels = dict(zip(LEVELS, (self.oral, self.laugh, self.break_), strict=True))
        said = {name: value for name, value in levels.items() if value is not None}
        return SubmitRequest.model_validate({TEXT_FIELD: self.text, "seed": self.seed, "style": self.style, **said})


class RefineResponse(BaseModel):
    text: str = Field(
        description="The text with the prosody tokens ChatTTS's refine pass inserted (numbers read as words), kept to the "
        "tokens /v1/tts/submit accepts: edit it and submit it as `text`."
    )
    task_id: str
    seed: int = Field(description="The refine's sampling seed; send it again for the same refinement.")


_REFINE_LINKS = {
    "poll": {
        "operationId": "refine_result",
        "parameters": {"task_id": "$response.body#/task_id"},
        "description": "The refined text, once it is ready.",
    }
}
_PENDING: dict[str, Any] = {
    "model": TaskStatus,
    "description": "Not refined within the wait (`REFINE_WAIT_S`, or `wait`): poll `GET /v1/tts/refine/{task_id}` after "
    "`Retry-After` seconds.",
    "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}, "required": True}},
    "links": _REFINE_LINKS,
}
_FAILED = {"model": TaskStatus, "description": "The refine failed (`error` says why) or was cancelled."}
_SLOTS_OR_QUEUE = {
    "model": ErrorBody,
    "description": "This key has its cap of queued jobs, it submits too fast, or it (or its tenant) holds its share of "
    "the process's streams (a refine waits as a long-poll does); retry after `Retry-After` seconds.",
    "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}, **RATE_LIMIT_HEADERS},
}


def _answer(refined: Refined, headers: dict[str, str] | None = None) -> Response:
    """The text (200), the task still pending (202 with ``Retry-After``), or its failure (409)."""
    if refined.text is not None:
        body = RefineResponse(text=refined.text, task_id=refined.job.id, seed=refined.job.params.seed)
        return JSONResponse(body.model_dump(mode="json"), headers=headers)
    pending = refined.status.model_dump(mode="json") if refined.status is not None else {}
    if refined.job.status in (Status.FAILED, Status.CANCELLED):
        return JSONResponse(pending, status_code=409, headers=headers)
    retry = "1" if refined.job.status is Status.RUNNING else "2"
    return JSONResponse(pending, status_code=202, headers={**(headers or {}), "Retry-After": retry})


@refine.post(
    "/refine",
    operation_id="refine",
    response_model=RefineResponse,
    responses={
        200: {"description": "The refined text.", "headers": RATE_LIMIT_HEADERS, "links": _REFINE_LINKS},
        202: _PENDING,
        408: BODY_TIMEOUT_RESPONSE,
        409: _FAILED,
        413: BODY_TOO_LARGE_RESPONSE,
        415: UNSUPPORTED_MEDIA_TYPE_RESPONSE,
        422: ERROR_RESPONSES[422],
        429: _SLOTS_OR_QUEUE,
        503: LONG_POLL_UNAVAILABLE,
        **AUTH_RESPONSES,
    },
    summary="Refine a text: the prosody tokens ChatTTS would insert, to read and edit",
)
async def refine_text(
    body: RefineRequest, refining: RefineDep, listening: ListeningDep, caller: TTSCaller, request: Request
) -> Response:
    """Queues a refine job (a worker runs ChatTTS's refine pass alone; this API runs no inference), paid like a submit,
    and waits for its text up to ``REFINE_WAIT_S``: ``200`` with it, else ``202`` with the task to poll at
    ``GET /v1/tts/refine/{task_id}``. The wait holds one of the caller's stream slots, as a long-poll does; with no
    worker alive nothing is queued (``503``, ``no_worker``)."""
    native = body.submit_body()
    listening.open_stream(caller, request.state, "long_poll")
    await listening.require_workers()
    refined = await refining.refine(native, caller)
    return _answer(refined, refined.rate.headers() if refined.rate is not None else None)


@refine.get(
    "/refine/{task_id}",
    operation_id="refine_result",
    response_model=RefineResponse,
    responses={
        200: {"description": "The refined text."},
        202: _PENDING,
        404: {"model": ErrorBody, "description": "Unknown task id, its result has expired, or it is not a refine."},
        409: _FAILED,
        429: TOO_MANY_STREAMS_RESPONSES[429],
        503: LONG_POLL_UNAVAILABLE,
        **AUTH_RESPONSES,
    },
    summary="The refined text of a refine task",
)
async def refine_result(
    task_id: str,
    refining: RefineDep,
    listening: ListeningDep,
    caller: TTSCaller,
    request: Request,
    wait: Annotated[
        float | None,
        Query(
            ge=0,
            allow_inf_nan=False,
            description="Long-poll: answer as soon as the refine ends, or after this many seconds (at most MAX_WAIT_S).",
        ),
    ] = None,
) -> Response:
    if wait:
        listening.open_stream(caller, request.state, "long_poll")
    return _answer(await refining.answer(task_id, caller, wait or 0.0))


# ---- styles --------------------------------------------------------------------------------

_NAME_SCHEMA: dict[str, JsonValue] = {"pattern": STYLE_NAME.pattern, "minLength": 1, "maxLength": 64}
StyleName = Annotated[str, Path(description="The style's name.", pattern=STYLE_NAME.pattern)]
_TENANT_PATTERN = r"^(?:key:[0-9a-f]{12}|[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$"
"""A tenant's name, or ``key:<id>`` for a key that is a tenant of its own: as the voices' routes take it."""
Tenant = Annotated[
    str | None,
    Query(
        pattern=_TENANT_PATTERN,
        description="Scope admin: act as this tenant sees the styles (a tenant's name, or `key:<id>`) instead of as the "
        "caller's own tenant.",
    ),
]


class StyleCreate(SamplingPreset):
    """A named preset of the sampling parameters; each one optional (unset: the request's, else its default)."""

    model_config = ConfigDict(
        **REQUEST_MODEL,
        json_schema_extra={
            "examples": [{"name": "storyteller", "speed": 4, "oral": 3, "break": 5, "temperature": 0.3}],
            # shared (a global style) or tenant (one tenant's), not both: refused as the voices' routes refuse it
            "allOf": [
                {
                    "not": {
                        "required": ["shared", "tenant"],
                        "properties": {"shared": {"const": True}, "tenant": {"type": "string"}},
                    }
                }
            ],
        },
    )

    name: str = Field(description="1-64 letters, digits, '_' or '-'.", json_schema_extra=_NAME_SCHEMA)
    shared: bool = Field(
        False,
        description="A global style, seen and used by every tenant; otherwise the style is the creating key's tenant's "
        "alone (docs/voices.md#tenants).",
    )
    tenant: str | None = Field(
        None,
        pattern=_TENANT_PATTERN,
        description="Make the style this tenant's (its name, or `key:<id>`) instead of the creating key's tenant's; "
        "not with `shared`.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return validate_style_name(value)


class StyleList(BaseModel):
    styles: list[Style]


_STYLE_LINKS = {
    "get": {"operationId": "get_style", "parameters": {"name": "$response.body#/name"}, "description": "Fetch it."},
    "delete": {"operationId": "delete_style", "parameters": {"name": "$response.body#/name"}, "description": "Delete it."},
}
_NO_STYLE = {"model": ErrorBody, "description": "No such style (or another tenant's)."}


@router.get(
    "",
    operation_id="list_styles",
    response_model=StyleList,
    responses={422: ERROR_RESPONSES[422], 503: ERROR_RESPONSES[503], **AUTH_RESPONSES},
    summary="List styles",
)
async def list_styles(styles: StylesDep, caller: TTSCaller, tenant: Tenant = None) -> StyleList:
    """The built-in styles, the global ones and the caller's tenant's own (never another tenant's)."""
    return StyleList(styles=await styles.list_styles(caller, tenant))


@router.post(
    "",
    operation_id="create_style",
    status_code=status.HTTP_201_CREATED,
    response_model=Style,
    responses={
        201: {"description": "The style, usable by name at once.", "links": _STYLE_LINKS},
        409: {"model": ErrorBody, "description": "The name is taken, or a built-in style's."},
        408: BODY_TIMEOUT_RESPONSE,
        413: BODY_TOO_LARGE_RESPONSE,
        415: UNSUPPORTED_MEDIA_TYPE_RESPONSE,
        **ERROR_RESPONSES,
        **AUTH_RESPONSES,
    },
    summary="Create a named style (scope admin)",
)
async def create_style(body: StyleCreate, styles: StylesDep, caller: AdminCaller) -> Style:
    try:
        return await styles.create_style(body.name, body, caller, shared=body.shared, tenant=body.tenant)
    except StyleConflict as exc:
        raise HTTPException(409, str(exc)) from exc


@router.get(
    "/{name}",
    operation_id="get_style",
    response_model=Style,
    responses={404: _NO_STYLE, 422: ERROR_RESPONSES[422], 503: ERROR_RESPONSES[503], **AUTH_RESPONSES},
    summary="Fetch a style",
)
async def get_style(name: StyleName, styles: StylesDep, caller: TTSCaller, tenant: Tenant = None) -> Style:
    style = await styles.get_style(name, caller, tenant)
    if style is None:
        raise HTTPException(404, f"no style named {name!r}")
    return style


@router.delete(
    "/{name}",
    operation_id="delete_style",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={
        404: _NO_STYLE,
        409: {"model": ErrorBody, "description": "Built-in styles cannot be deleted."},
        422: ERROR_RESPONSES[422],
        503: ERROR_RESPONSES[503],
        **AUTH_RESPONSES,
    },
    summary="Delete a style (scope admin)",
)
async def delete_style(name: StyleName, styles: StylesDep, caller: AdminCaller, tenant: Tenant = None) -> Response:
    """Deletes the style the name means to the caller's tenant (or to ``tenant``): its own, else the global one. Jobs
    queued with it keep its parameters (a style is resolved at submit)."""
    try:
        deleted = await styles.delete_style(name, caller, tenant)
    except StyleConflict as exc:
        raise HTTPException(409, str(exc)) from exc
    if not deleted:
        raise HTTPException(404, f"no style named {name!r}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
