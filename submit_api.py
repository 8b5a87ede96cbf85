"""``POST /v1/tts/submit``: validate, record, queue, answer with a task id. Never waits for inference."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from deps import CacheDep, QueueDep, SettingsDep, SignerDep, VoicesDep, model_notice
from ttsq.api_errors import ERROR_RESPONSES, field_error
from ttsq.cache import ResultCache
from ttsq.cache_key import cache_key
from ttsq.jobs import DEFAULT_SAMPLING_SEED, Status, TTSParams, draw_seed
from ttsq.queue import JobQueue
from ttsq.schemas import ErrorBody, SubmitRequest, SubmitResponse
from ttsq.task_ids import TaskIdSigner
from ttsq.text import TextError, validate_text
from ttsq.voices import Voice, VoiceRegistry

router = APIRouter(prefix="/v1/tts", tags=["tts"])


async def resolve_voice(voices: VoiceRegistry, name: str | None, field: str = "voice") -> Voice | None:
    """The named voice, or a 422 naming the field and the voices that exist."""
    if name is None:
        return None
    voice = await voices.get(name)
    if voice is None:
        available = ", ".join(v.name for v in await voices.list())
        raise field_error(field, f"unknown voice {name!r}; available: {available}", name)
    return voice


def build_params(body: SubmitRequest, max_text_chars: int, model_identity: str, voice: Voice | None) -> TTSParams:
    """Apply the voice/seed rule and validate what needs settings.

    A ``voice`` (already resolved from ``body.voice``) fixes the speaker; a ``seed`` seeds
    sampling and, without a voice, also draws the speaker. With neither, a fresh seed is drawn
    here (and reported) — the only random case.
    """
    try:
        text = validate_text(body.text, max_text_chars)
    except TextError as exc:
        raise field_error("text", str(exc), body.text[:200]) from exc
    deterministic = voice is not None or body.seed is not None
    speaker_embedding = None
    if voice is not None:
        seed = DEFAULT_SAMPLING_SEED if body.seed is None else body.seed
        speaker_seed, speaker_embedding = voice.seed, voice.embedding
    else:
        seed = draw_seed() if body.seed is None else body.seed
        speaker_seed = seed
    params = TTSParams(
        text=text,
        voice=voice.name if voice is not None else None,
        speaker_seed=speaker_seed,
        speaker_embedding=speaker_embedding,
        seed=seed,
        speed=body.speed,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        format=body.format,
        refine_text=body.refine_text,
        deterministic=deterministic,
    )
    return params.model_copy(update={"cache_key": cache_key(params, model_identity)})


async def submit_job(
    queue: JobQueue, cache: ResultCache, signer: TaskIdSigner, params: TTSParams, *, single_flight: bool = True
) -> SubmitResponse:
    """Answer from the cache, join an identical job in flight, or queue a new one."""
    if params.cache_key is not None:
        hit = await cache.get(params.cache_key)
        if hit is not None:
            job = await queue.record_done(signer.new(), params, hit.audio, hit.content_type, hit.duration_s)
            return SubmitResponse(
                task_id=job.id,
                status=Status.DONE,
                queue_position=None,
                estimate_s=0.0,
                seed=params.seed,
                deterministic=True,
                cached=True,
            )
    result = await queue.enqueue(signer.new(), params, single_flight=single_flight)
    position = result.position
    return SubmitResponse(
        task_id=result.job.id,
        status=result.job.status,
        queue_position=position,
        estimate_s=result.estimate_s,
        seed=params.seed,
        deterministic=params.deterministic,
        joined=result.joined,
    )


@router.post(
    "/submit",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SubmitResponse,
    responses={
        200: {"model": SubmitResponse, "description": "Served from the cache: the task is already done."},
        **ERROR_RESPONSES,
        429: {
            "model": ErrorBody,
            "description": "The queue is full; retry after `Retry-After` seconds.",
            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
        },
    },
    summary="Queue a text for synthesis and get a task id at once",
)
async def submit(
    body: SubmitRequest,
    response: Response,
    queue: QueueDep,
    cache: CacheDep,
    signer: SignerDep,
    voices: VoicesDep,
    settings: SettingsDep,
) -> SubmitResponse:
    """``202`` with a queued (or joined, identical and in-flight) task; ``200`` when the cache answers."""
    voice = await resolve_voice(voices, body.voice)
    params = build_params(body, settings.max_text_chars, settings.model_identity(), voice)
    answer = await submit_job(queue, cache, signer, params, single_flight=settings.single_flight)
    if answer.cached:
        response.status_code = status.HTTP_200_OK
    return answer.model_copy(update={"notice": model_notice(settings)})
