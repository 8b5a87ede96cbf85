"""``POST /v1/tts/submit``: validate, record, queue, answer with a task id. Never waits for inference."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from deps import ServiceDep
from ttsq.api.errors import ERROR_RESPONSES, QUEUE_FULL_RESPONSE
from ttsq.api.schemas import SubmitRequest, SubmitResponse

router = APIRouter(prefix="/v1/tts", tags=["tts"])


@router.post(
    "/submit",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SubmitResponse,
    responses={
        200: {"model": SubmitResponse, "description": "Served from the cache: the task is already done."},
        **ERROR_RESPONSES,
        429: QUEUE_FULL_RESPONSE,
    },
    summary="Queue a text for synthesis and get a task id at once",
)
async def submit(body: SubmitRequest, service: ServiceDep) -> Response:
    """``202`` with a queued (or joined, identical and in-flight) task; ``200`` when the cache answers.

    The answer is serialised once, here: returning the model would have FastAPI validate it again.
    """
    answer = await service.submit(body)
    code = status.HTTP_200_OK if answer.cached else status.HTTP_202_ACCEPTED
    return Response(answer.model_dump_json(), status_code=code, media_type="application/json")
