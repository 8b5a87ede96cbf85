"""OpenAI-compatible speech: ``POST /v1/audio/speech`` and ``GET /v1/audio/voices``.

Point any OpenAI SDK at ``http://host:8000/v1``. Requests run on the same queue, workers, cache,
single-flight and limits as the native API; the difference is the contract: OpenAI's endpoint
answers with the audio itself, so this one submits, waits and returns it. ``pcm`` and ``wav``
stream sentence by sentence as they are synthesised; compressed formats are sent when complete.
Errors use OpenAI's error body, so the SDKs raise their usual exceptions.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from deps import CacheDep, QueueDep, SettingsDep, SignerDep, VoicesDep
from submit_api import build_params, submit_job
from ttsq.api_errors import ERROR_RESPONSES
from ttsq.audio import CONTENT_TYPES
from ttsq.jobs import Status
from ttsq.queue import JobQueue
from ttsq.schemas import SubmitRequest
from ttsq.streaming import StreamFailed, audio_stream, open_ended_wav_header, pcm_pieces
from ttsq.voices import OPENAI_VOICES, Voice

router = APIRouter(prefix="/v1/audio", tags=["openai"])

OpenAIFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
_UNSUPPORTED_FORMATS = {"aac": "AAC cannot be encoded here (no AAC encoder in libsndfile); use mp3, opus, flac, wav or pcm"}


class SpeechRequest(BaseModel):
    """OpenAI's ``audio.speech.create`` body. ``model`` and ``instructions`` are accepted and ignored:
    there is one model, and ChatTTS takes no style instructions (use prosody tokens in ``input``)."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, examples=["tts-1"])
    input: str = Field(examples=["Hello from ttsq."])
    voice: str = Field(description="alloy, ash, ballad, coral, echo, fable, nova, onyx, sage, shimmer, verse, or a ttsq voice.")
    instructions: str | None = None
    response_format: OpenAIFormat = "mp3"
    speed: float = Field(1.0, ge=0.25, le=4.0, description="0.25-4.0, mapped onto ChatTTS's speed 1-9 (1.0 → 5).")
    stream_format: Literal["audio", "sse"] = "audio"


def chattts_speed(speed: float) -> int:
    """OpenAI's speed factor → ChatTTS's [speed_N]: each doubling is two steps (0.25 → 1, 1 → 5, 4 → 9)."""
    return max(1, min(9, round(5 + 2 * math.log2(speed))))


def openai_error(status: int, message: str, param: str | None = None, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind, "param": param, "code": None}})


async def openai_validation_error(request: Request, exc: Exception) -> Response:
    """422s on /v1/audio become OpenAI-style 400s; elsewhere FastAPI's own format stays."""
    from fastapi.exception_handlers import request_validation_exception_handler

    assert isinstance(exc, RequestValidationError)
    if not request.url.path.startswith(router.prefix):
        return await request_validation_exception_handler(request, exc)
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    param = str(first["loc"][-1]) if first.get("loc") else None
    field = {"text": "input", "format": "response_format"}.get(param or "", param)
    return openai_error(400, f"{field}: {first['msg']}" if field else str(first["msg"]), field)


async def _resolve(voices: VoicesDep, name: str) -> Voice:
    voice = await voices.get(OPENAI_VOICES.get(name, name))
    if voice is None:
        known = ", ".join([*OPENAI_VOICES, *(v.name for v in await voices.list())])
        raise HTTPException(400, f"voice {name!r} is not supported; use one of: {known}")
    return voice


async def _wait_done(queue: JobQueue, task_id: str) -> bytes:
    """Follow the job's audio stream to its end (no polling), then fetch the stored result."""
    async for _ in pcm_pieces(queue, task_id):
        pass
    job = await queue.get(task_id)
    audio = await queue.result(task_id)
    if job is None or job.status is not Status.DONE or audio is None:
        raise StreamFailed(job.error if job is not None and job.error else "the result is gone")
    return audio


@router.post(
    "/speech",
    responses={
        200: {"description": "The audio.", "content": {t: {} for t in sorted(set(CONTENT_TYPES.values()))}},
        400: {"description": "Invalid request (OpenAI error body)."},
        429: {"description": "The queue is full; retry after `Retry-After` seconds."},
        500: {"description": "Synthesis failed (OpenAI error body)."},
        503: ERROR_RESPONSES[503],
    },
    summary="OpenAI-compatible text to speech",
)
async def speech(
    body: SpeechRequest,
    queue: QueueDep,
    cache: CacheDep,
    signer: SignerDep,
    voices: VoicesDep,
    settings: SettingsDep,
) -> Response:
    if body.response_format in _UNSUPPORTED_FORMATS:
        return openai_error(400, _UNSUPPORTED_FORMATS[body.response_format], "response_format")
    try:
        voice = await _resolve(voices, body.voice)
    except HTTPException as exc:
        return openai_error(400, str(exc.detail), "voice")
    native = SubmitRequest(text=body.input, voice=voice.name, speed=chattts_speed(body.speed), format=body.response_format)
    params = build_params(native, settings.max_text_chars, settings.model_identity(), voice)
    task_id = (await submit_job(queue, cache, signer, params, single_flight=settings.single_flight)).task_id
    media_type = CONTENT_TYPES[body.response_format]
    headers = {"X-TTSQ-Task-Id": task_id}

    if body.stream_format == "sse":
        return StreamingResponse(_sse(queue, task_id, body.response_format), media_type="text/event-stream", headers=headers)
    if body.response_format == "pcm" or body.response_format == "wav":
        return StreamingResponse(audio_stream(queue, task_id, body.response_format), media_type=media_type, headers=headers)
    try:
        audio = await _wait_done(queue, task_id)
    except StreamFailed as exc:
        return openai_error(500, f"synthesis failed: {exc}", kind="server_error")
    return Response(audio, media_type=media_type, headers=headers)


async def _sse(queue: JobQueue, task_id: str, fmt: str) -> AsyncIterator[str]:
    """OpenAI's speech SSE: ``speech.audio.delta`` events (base64 audio), then ``speech.audio.done``."""
    try:
        if fmt in ("pcm", "wav"):
            if fmt == "wav":
                yield _delta(open_ended_wav_header())
            async for piece in pcm_pieces(queue, task_id):
                yield _delta(piece)
        else:
            yield _delta(await _wait_done(queue, task_id))
    except StreamFailed as exc:
        yield _event({"type": "error", "error": {"message": f"synthesis failed: {exc}"}}, name="error")
        return
    yield _event({"type": "speech.audio.done", "usage": None})


def _event(data: dict[str, Any], name: str | None = None) -> str:
    prefix = f"event: {name}\n" if name else ""
    return f"{prefix}data: {json.dumps(data)}\n\n"


def _delta(audio: bytes) -> str:
    return _event({"type": "speech.audio.delta", "audio": base64.b64encode(audio).decode()})


class VoiceListing(BaseModel):
    voices: list[dict[str, Any]]


@router.get("/voices", response_model=VoiceListing, summary="Voices usable on /v1/audio/speech")
async def openai_voices(voices: VoicesDep) -> VoiceListing:
    """OpenAI's names (each mapped onto a built-in voice) and every ttsq voice."""
    mapped = [{"voice_id": name, "name": name, "maps_to": target} for name, target in OPENAI_VOICES.items()]
    native = [{"voice_id": v.name, "name": v.name, "kind": v.kind} for v in await voices.list()]
    return VoiceListing(voices=mapped + native)
