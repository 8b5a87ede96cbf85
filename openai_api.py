"""OpenAI-compatible speech: ``POST /v1/audio/speech`` and ``GET /v1/audio/voices``.

Point any OpenAI SDK at ``http://host:8000/v1``. Requests run on the same queue, workers, cache,
single-flight and limits as the native API; the difference is the contract: OpenAI's endpoint
answers with the audio itself, so this one submits, waits and returns it. ``pcm`` and ``wav``
stream sentence by sentence as they are synthesised; compressed formats are sent when complete.
Every error on these routes has OpenAI's error body (see :mod:`ttsq.api.errors`), so the SDKs
raise their usual exceptions.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import AsyncIterator
from typing import Any, Literal, get_args

from fastapi import APIRouter, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from deps import ServiceDep, StreamCaller, TTSCaller
from ttsq.api.errors import OPENAI_ERROR_RESPONSES, OPENAI_SPEECH_ERROR_RESPONSES, RATE_LIMIT_HEADERS, openai_error
from ttsq.api.schemas import Priority, SubmitRequest, sse_schema, task_links
from ttsq.api.service import (
    CONTENT_TYPES,
    DEFAULT_SAMPLING,
    MAX_SPEED,
    MIN_SPEED,
    OPENAI_VOICES,
    InvalidInput,
    StreamFailed,
    TTSService,
    Voice,
    is_blend,
    open_ended_wav_header,
)

router = APIRouter(prefix="/v1/audio", tags=["openai"])

OpenAIFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
_UNSUPPORTED_FORMATS = {"aac": "AAC cannot be encoded here (no AAC encoder in libsndfile); use mp3, opus, flac, wav or pcm"}
_SUPPORTED_FORMATS = [f for f in get_args(OpenAIFormat) if f not in _UNSUPPORTED_FORMATS]


class SpeechRequest(BaseModel):
    """OpenAI's ``audio.speech.create`` body. ``model`` and ``instructions`` are accepted and ignored:
    there is one model, and ChatTTS takes no style instructions (use prosody tokens in ``input``)."""

    model_config = ConfigDict(strict=True, extra="ignore")  # strict like every request body; OpenAI adds parameters, so extras pass

    model: str = Field(min_length=1, examples=["tts-1"])
    input: str = Field(
        description="Text to speak, as `text` on /v1/tts/submit: at most MAX_TEXT_CHARS characters (`maxLength`).",
        examples=["Hello from ttsq."],
        json_schema_extra={"minLength": 1},  # "" is refused by the text check, with its own message
    )
    voice: str = Field(
        min_length=1,
        description="alloy, ash, ballad, coral, echo, fable, nova, onyx, sage, shimmer, verse, marin, cedar, or a ttsq voice; "
        "or a blend of them, `alloy*0.7+narrator*0.3`.",
        examples=["alloy"],
    )
    instructions: str | None = None
    response_format: OpenAIFormat = Field(
        "mp3",
        # aac is taken, and refused with a message that says why, but it is not a format this API serves
        json_schema_extra={"enum": _SUPPORTED_FORMATS},
    )
    speed: float = Field(1.0, ge=0.25, le=4.0, description="0.25-4.0, mapped onto ChatTTS's speed 1-9 (1.0 → 5).")
    stream_format: Literal["audio", "sse"] = "audio"
    priority: Priority | None = Field(
        None,
        description="ttsq's own field (the SDK's `extra_body`): the fair queue's lane, `interactive` or `batch`, as on "
        "/v1/tts/submit. Default: the API key's priority, else interactive.",
    )
    consistent_voice: bool | None = Field(
        None,
        description="ttsq's own field (the SDK's `extra_body`): one voice across a long text, as on /v1/tts/submit. "
        "Default: `CONSISTENT_VOICE`.",
    )


def chattts_speed(speed: float) -> int:
    """OpenAI's speed factor → ChatTTS's [speed_N]: each doubling is two steps from the default (0.25 → 1, 1 → 5, 4 → 9)."""
    return max(MIN_SPEED, min(MAX_SPEED, round(DEFAULT_SAMPLING.speed + 2 * math.log2(speed))))


_SPEECH_EVENT = {
    "oneOf": [
        sse_schema(
            {
                "type": "object",
                "required": ["type", "audio"],
                "properties": {"type": {"const": "speech.audio.delta"}, "audio": {"type": "string", "contentEncoding": "base64"}},
            }
        ),
        sse_schema({"type": "object", "required": ["type"], "properties": {"type": {"const": "speech.audio.done"}}}),
        sse_schema(
            {
                "type": "object",
                "required": ["type", "error"],
                "properties": {
                    "type": {"const": "error"},
                    "error": {"type": "object", "required": ["message"], "properties": {"message": {"type": "string"}}},
                },
            },
            event="error",
        ),
    ]
}
"""One event of ``stream_format: "sse"``: audio deltas (base64), then done, or an error."""


async def _voice(name: str, service: TTSService) -> Voice:
    """OpenAI's names map onto built-in voices, ttsq's names are themselves; a blend may mix both (docs/voices.md)."""
    if is_blend(name):
        return await service.resolve_blend(name, "voice", OPENAI_VOICES)
    voice = await service.get_voice(OPENAI_VOICES.get(name, name))
    if voice is None:
        known = ", ".join([*OPENAI_VOICES, *(v.name for v in await service.list_voices())])
        raise InvalidInput("voice", f"{name!r} is not supported; use one of: {known}", name)
    return voice


@router.post(
    "/speech",
    operation_id="openai_speech",
    responses={
        200: {
            "description": "The audio (pcm and wav stream as they are synthesised); with `stream_format: sse`, server-sent events.",
            "content": {**{t: {} for t in sorted(set(CONTENT_TYPES.values()))}, "text/event-stream": {"schema": _SPEECH_EVENT}},
            "headers": {
                **RATE_LIMIT_HEADERS,
                "X-TTSQ-Task-Id": {"schema": {"type": "string"}, "required": True, "description": "The ttsq task behind it."},
            },
            "links": task_links("$response.header.X-TTSQ-Task-Id"),
        },
        **OPENAI_SPEECH_ERROR_RESPONSES,
    },
    summary="OpenAI-compatible text to speech",
)
async def speech(body: SpeechRequest, service: ServiceDep, caller: StreamCaller) -> Response:
    if body.response_format in _UNSUPPORTED_FORMATS:
        raise InvalidInput("response_format", _UNSUPPORTED_FORMATS[body.response_format], body.response_format)
    voice = await _voice(body.voice, service)
    native = SubmitRequest(
        text=body.input,
        voice=voice.name,
        speed=chattts_speed(body.speed),
        format=body.response_format,
        priority=body.priority,
        consistent_voice=body.consistent_voice,
    )
    submitted = await service.submit(native, caller, voice)
    task_id = submitted.answer.task_id
    media_type = CONTENT_TYPES[body.response_format]
    headers = {"X-TTSQ-Task-Id": task_id, **(submitted.rate.headers() if submitted.rate is not None else {})}

    if body.stream_format == "sse":
        return StreamingResponse(_sse(service, task_id, body.response_format), media_type="text/event-stream", headers=headers)
    if body.response_format in ("pcm", "wav"):
        return StreamingResponse(service.audio(task_id, body.response_format), media_type=media_type, headers=headers)
    try:
        audio = await service.wait_done(task_id)
    except StreamFailed as exc:
        return openai_error(500, f"synthesis failed: {exc}")
    return Response(audio, media_type=media_type, headers=headers)


async def _sse(service: TTSService, task_id: str, fmt: str) -> AsyncIterator[str]:
    """OpenAI's speech SSE: ``speech.audio.delta`` events (base64 audio), then ``speech.audio.done``."""
    try:
        if fmt in ("pcm", "wav"):
            if fmt == "wav":
                yield _delta(open_ended_wav_header())
            async for piece in service.pcm(task_id):
                yield _delta(piece)
        else:
            yield _delta(await service.wait_done(task_id))
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


@router.get(
    "/voices",
    operation_id="openai_voices",
    response_model=VoiceListing,
    responses=OPENAI_ERROR_RESPONSES,
    summary="Voices usable on /v1/audio/speech",
)
async def openai_voices(service: ServiceDep, caller: TTSCaller) -> VoiceListing:
    """OpenAI's names (each mapped onto a built-in voice) and every ttsq voice."""
    mapped = [{"voice_id": name, "name": name, "maps_to": target} for name, target in OPENAI_VOICES.items()]
    native = [{"voice_id": v.name, "name": v.name, "kind": v.kind} for v in await service.list_voices()]
    return VoiceListing(voices=mapped + native)
