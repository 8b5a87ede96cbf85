"""Voice draws: ``POST /v1/voices/draw`` speaks many random voices and keeps the ones least like the existing
voices; ``GET /v1/voices/draw/{id}`` (a long-poll with ``?wait=S``) answers with them, most different first.

A draw answers at once (``202``) with its id: its previews are ordinary jobs on the queue, batched with every
other request. Poll, or long-poll, the draw until ``status`` is ``done``; each candidate's preview is its task's
result (``GET /v1/tts/result/{task_id}``), and a candidate is kept with ``POST /v1/voices`` and its ``seed``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request, status
from pydantic import BaseModel, ConfigDict, Field

from deps import DrawsDep, ListeningDep, TTSCaller
from ttsq.api.errors import (
    AUTH_RESPONSES,
    BODY_TIMEOUT_RESPONSE,
    BODY_TOO_LARGE_RESPONSE,
    ERROR_RESPONSES,
    QUEUE_FULL_RESPONSE,
    TOO_MANY_STREAMS_RESPONSES,
    UNSUPPORTED_MEDIA_TYPE_RESPONSE,
)
from ttsq.api.schemas import REQUEST_MODEL, ErrorBody
from ttsq.api.service import DrawLanguage, DrawOutcome

router = APIRouter(prefix="/v1/voices/draw", tags=["voices"])


class DrawRequest(BaseModel):
    model_config = ConfigDict(**REQUEST_MODEL, json_schema_extra={"examples": [{"n": 10, "language": "zh"}]})

    n: int = Field(10, ge=1, le=100, description="How many voices to return: more than DRAW_MAX_N is served as DRAW_MAX_N.")
    language: DrawLanguage = Field("zh", description="The language of the preview sentence.")


class DrawCandidateBody(BaseModel):
    seed: int = Field(description="The speaker seed: `POST /v1/voices` with it keeps this voice.")
    task_id: str = Field(description="The preview's task.")
    preview_url: str = Field(description="The preview's audio (WAV): the task's result.")
    nearest_voice: str | None = Field(description="The existing voice whose speaker embedding is nearest.")
    distance: float | None = Field(description="Euclidean distance between the two speaker embeddings; larger is more different.")


class DrawBody(BaseModel):
    draw_id: str
    status: Literal["running", "done"]
    previews_done: int = Field(description="Previews (candidates' and existing voices') that have ended.")
    previews_total: int
    metric: Literal["euclidean"] = "euclidean"
    candidates: list[DrawCandidateBody] = Field(description="Once done: the kept voices, most different first.")

    @classmethod
    def of(cls, outcome: DrawOutcome) -> DrawBody:
        kept = outcome.candidates or []
        return cls(
            draw_id=outcome.draw.id,
            status="running" if outcome.candidates is None else "done",
            previews_done=outcome.previews_done,
            previews_total=outcome.previews_total,
            candidates=[
                DrawCandidateBody(
                    seed=c.seed,
                    task_id=c.task_id,
                    preview_url=f"/v1/tts/result/{c.task_id}",
                    nearest_voice=c.nearest_voice,
                    distance=c.distance,
                )
                for c in kept
            ],
        )


@router.post(
    "",
    operation_id="draw_voices",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=DrawBody,
    responses={
        408: BODY_TIMEOUT_RESPONSE,
        413: BODY_TOO_LARGE_RESPONSE,
        415: UNSUPPORTED_MEDIA_TYPE_RESPONSE,
        **ERROR_RESPONSES,
        **AUTH_RESPONSES,
        429: QUEUE_FULL_RESPONSE,
    },
    summary="Draw voices",
)
async def draw_voices(body: DrawRequest, draws: DrawsDep, caller: TTSCaller) -> DrawBody:
    """Queues ``n × DRAW_OVERSAMPLE`` short previews of fresh seeds (and one of each seed voice, to measure against);
    answers at once with ``status: running``. Costs one token of the caller's rate limit."""
    draw = await draws.draw_voices(body.n, body.language, caller)
    return DrawBody(draw_id=draw.id, status="running", previews_done=0, previews_total=len(draw.task_ids), candidates=[])


@router.get(
    "/{draw_id}",
    operation_id="get_draw",
    response_model=DrawBody,
    responses={
        404: {"model": ErrorBody, "description": "No such draw (or another caller's)."},
        422: ERROR_RESPONSES[422],
        **TOO_MANY_STREAMS_RESPONSES,
        **AUTH_RESPONSES,
    },
    summary="A draw's voices",
)
async def get_draw(
    draw_id: Annotated[str, Path(description="The draw's id.")],
    draws: DrawsDep,
    listening: ListeningDep,
    caller: TTSCaller,
    request: Request,
    wait: Annotated[
        float | None,
        Query(ge=0, allow_inf_nan=False, description="Long-poll: answer once every preview has ended, or after this many seconds."),
    ] = None,
) -> DrawBody:
    if wait:
        listening.open_stream(caller, request.state)  # it blocks on a Redis connection while it waits, as a stream does
    return DrawBody.of(await draws.draw_outcome(draw_id, caller, wait or 0.0))
