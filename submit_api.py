"""``POST /v1/tts/submit``: validate, record, queue, answer with a task id. Never waits for inference."""

from __future__ import annotations

from fastapi import APIRouter, status

from deps import QueueDep, SettingsDep, model_notice
from ttsq.api_errors import ERROR_RESPONSES, field_error
from ttsq.jobs import DEFAULT_SAMPLING_SEED, Status, TTSParams, draw_seed, new_task_id
from ttsq.queue import JobQueue
from ttsq.schemas import ErrorBody, SubmitRequest, SubmitResponse
from ttsq.text import TextError, validate_text
from ttsq.voices import known_voices, speaker_seed_of

router = APIRouter(prefix="/v1/tts", tags=["tts"])


def build_params(body: SubmitRequest, max_text_chars: int) -> TTSParams:
    """Apply the voice/seed rule and validate what needs settings.

    A ``voice`` fixes the speaker; a ``seed`` seeds sampling and, without a voice, also draws the
    speaker. With neither, a fresh seed is drawn here (and reported) — the only random case.
    """
    try:
        text = validate_text(body.text, max_text_chars)
    except TextError as exc:
        raise field_error("text", str(exc), body.text[:200]) from exc
    if body.voice is not None and speaker_seed_of(body.voice) is None:
        raise field_error("voice", f"unknown voice {body.voice!r}; available: {', '.join(known_voices())}", body.voice)
    deterministic = body.voice is not None or body.seed is not None
    if body.voice is not None:
        seed = DEFAULT_SAMPLING_SEED if body.seed is None else body.seed
        speaker_seed = None
    else:
        seed = draw_seed() if body.seed is None else body.seed
        speaker_seed = seed
    return TTSParams(
        text=text,
        voice=body.voice,
        speaker_seed=speaker_seed,
        seed=seed,
        speed=body.speed,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        format=body.format,
        refine_text=body.refine_text,
        deterministic=deterministic,
    )


async def submit_job(queue: JobQueue, params: TTSParams) -> tuple[str, int, float]:
    task_id = new_task_id()
    result = await queue.enqueue(task_id, params)
    return task_id, result.position, await queue.estimate_wait_s(result.position)


@router.post(
    "/submit",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SubmitResponse,
    responses={
        **ERROR_RESPONSES,
        429: {
            "model": ErrorBody,
            "description": "The queue is full; retry after `Retry-After` seconds.",
            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
        },
    },
    summary="Queue a text for synthesis and get a task id at once",
)
async def submit(body: SubmitRequest, queue: QueueDep, settings: SettingsDep) -> SubmitResponse:
    params = build_params(body, settings.max_text_chars)
    task_id, position, estimate = await submit_job(queue, params)
    return SubmitResponse(
        task_id=task_id,
        status=Status.QUEUED,
        queue_position=position,
        estimate_s=estimate,
        seed=params.seed,
        deterministic=params.deterministic,
        notice=model_notice(settings),
    )
