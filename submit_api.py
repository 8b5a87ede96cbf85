"""``POST /v1/tts/submit``: validate, record, queue, answer with a task id. Never waits for inference."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from deps import TasksDep, TTSCaller
from ttsq.api.errors import (
    AUTH_RESPONSES,
    BODY_TIMEOUT_RESPONSE,
    BODY_TOO_LARGE_RESPONSE,
    ERROR_RESPONSES,
    QUEUE_FULL_RESPONSE,
    RATE_LIMIT_HEADERS,
    UNSUPPORTED_MEDIA_TYPE_RESPONSE,
)
from ttsq.api.schemas import SubmitRequest, SubmitResponse, task_links

router = APIRouter(prefix="/v1/tts", tags=["tts"])

TASK_LINKS = task_links("$response.body#/task_id")


@router.post(
    "/submit",
    operation_id="submit",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SubmitResponse,
    responses={
        200: {
            "model": SubmitResponse,
            "description": "Served from the cache: the task is already done.",
            "headers": RATE_LIMIT_HEADERS,
            "links": TASK_LINKS,
        },
        202: {"description": "Queued, or joined an identical task in flight.", "headers": RATE_LIMIT_HEADERS, "links": TASK_LINKS},
        408: BODY_TIMEOUT_RESPONSE,
        413: BODY_TOO_LARGE_RESPONSE,
        415: UNSUPPORTED_MEDIA_TYPE_RESPONSE,
        **ERROR_RESPONSES,
        **AUTH_RESPONSES,
        429: QUEUE_FULL_RESPONSE,
    },
    summary="Queue a text for synthesis and get a task id at once",
)
async def submit(body: SubmitRequest, tasks: TasksDep, caller: TTSCaller) -> Response:
    """``202`` with a queued (or joined, identical and in-flight) task; ``200`` when the cache answers.

    The answer is serialised once, here: returning the model would have FastAPI validate it again.
    """
    submitted = await tasks.submit(body, caller)
    code = status.HTTP_200_OK if submitted.answer.cached else status.HTTP_202_ACCEPTED
    headers = submitted.rate.headers() if submitted.rate is not None else None
    return Response(submitted.answer.model_dump_json(), status_code=code, media_type="application/json", headers=headers)
