"""OpenAI-compatible speech: ``POST /v1/audio/speech`` and ``GET /v1/audio/voices``.

Point any OpenAI SDK at ``http://host:8000/v1``. Requests run on the same queue, workers, cache,
single-flight and limits as the native API; the difference is the contract: OpenAI's endpoint
answers with the audio itself, so this one submits and streams it: every format, sentence by sentence as it is
synthesised, each piece encoded as it comes (:mod:`ttsq.domain.encoders`), so the body is one file; a request the
cache answers gets the stored file at once.
Every error on these routes has OpenAI's error body (see :mod:`ttsq.api.errors`), so the SDKs
raise their usual exceptions.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from deps import Guarded, ListeningDep, StreamCaller, TasksDep, TTSCaller, VoicesDep
from ttsq.api.errors import OPENAI_ERROR_RESPONSES, OPENAI_SPEECH_ERROR_RESPONSES, RATE_LIMIT_HEADERS, openai_error
from ttsq.api.schemas import IGNORED_FIELDS, Priority, SubmitRequest, field_names, sse_schema, task_links
from ttsq.api.service import (
    COMMON_RATES,
    CONTENT_TYPES,
    LEVELS,
    OPENAI_MAX_INPUT_CHARS,
    OPENAI_VOICES,
    STYLE_NAME,
    BreakLevel,
    Download,
    InvalidInput,
    KeyRevoked,
    LaughLevel,
    ListeningService,
    NoWorker,
    OralLevel,
    OutputFormat,
    Status,
    StreamFailed,
    UnsupportedFormat,
    parse_ttsq,
    speed_level,
    stored_format,
)

router = APIRouter(prefix="/v1/audio", tags=["openai"])

OpenAIFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]


class SpeechRequest(BaseModel):
    """OpenAI's ``audio.speech.create`` body. ``model`` and ``instructions`` are accepted and ignored:
    there is one model, and ChatTTS takes no style instructions (use prosody tokens in ``input``)."""

    # Strict like every request body. OpenAI adds parameters and the SDKs send them, so unknown fields pass, named in
    # the answer's X-TTSQ-Ignored-Fields header (they were ignored without a word).
    model_config = ConfigDict(strict=True, extra="allow")

    model: str = Field(min_length=1, examples=["tts-1"])
    input: str = Field(
        description="Text to speak, checked as `text` on /v1/tts/submit but against its own limit: at most "
        f"OPENAI_MAX_INPUT_CHARS characters ({OPENAI_MAX_INPUT_CHARS} by default, as OpenAI's; `maxLength`), synthesised "
        "in sentence chunks like any long text.",
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
    response_format: OpenAIFormat = "mp3"
    sample_rate: int | None = Field(
        None,
        description="ttsq's own field (the SDK's `extra_body`, as other OpenAI-compatible servers take it): the audio's "
        "sample rate in Hz, 8000 to 48000 (opus: 8000, 12000, 16000, 24000 or 48000), resampled from ttsq's 24 kHz. "
        "Default: 24000.",
        examples=[16000],
        json_schema_extra={"enum": [*COMMON_RATES, None]},
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
    oral: OralLevel | None = Field(
        None, description="ttsq's own field (`extra_body`): ChatTTS's refine prompt `[oral_N]`, 0-9, as on /v1/tts/submit."
    )
    laugh: LaughLevel | None = Field(
        None, description="ttsq's own field (`extra_body`): ChatTTS's refine prompt `[laugh_N]`, 0-2, as on /v1/tts/submit."
    )
    break_: BreakLevel | None = Field(
        None,
        alias="break",
        description="ttsq's own field (`extra_body`): ChatTTS's refine prompt `[break_N]`, 0-7, as on /v1/tts/submit.",
    )
    style: str | None = Field(
        None,
        pattern=STYLE_NAME.pattern,
        description="ttsq's own field (`extra_body`): a style (`GET /v1/styles`), as on /v1/tts/submit; `speed`, when "
        "sent, and the levels override its own.",
    )

    def native_sampling(self) -> dict[str, Any]:
        """The sampling fields this request says, as /v1/tts/submit takes them: OpenAI's ``speed`` mapped onto ChatTTS's
        (only when sent, so that a style's speed stands otherwise), the refine levels, the style."""
        said: dict[str, Any] = {"style": self.style}
        if "speed" in self.model_fields_set:
            said["speed"] = speed_level(self.speed)
        levels = zip(LEVELS, (self.oral, self.laugh, self.break_), strict=True)
        return said | {name: value for name, value in levels if value is not None}


_SPEECH_EVENT = {
    "oneOf": [
        sse_schema(
            {
                "type": "object",
                "required": ["type", "audio"],
                "properties": {"type": {"const": "speech.audio.delta"}, "audio": {"type": "string", "contentEncoding": "base64"}},
            }
        ),
        sse_schema(
            {
                "type": "object",
                "required": ["type", "usage"],
                "properties": {
                    "type": {"const": "speech.audio.done"},
                    "usage": {
                        "type": "object",
                        "required": ["input_tokens", "output_tokens", "total_tokens"],
                        "properties": {name: {"type": "integer"} for name in ("input_tokens", "output_tokens", "total_tokens")},
                    },
                },
            }
        ),
        sse_schema(
            {
                "type": "object",
                "required": ["type", "error"],
                "properties": {
                    "type": {"const": "error"},
                    "error": {
                        "type": "object",
                        "required": ["message"],
                        "properties": {"message": {"type": "string"}, "code": {"type": "string"}},
                    },
                },
            },
            event="error",
        ),
    ]
}
"""One event of ``stream_format: "sse"``: audio deltas (base64), then done, or an error (``code`` ``no_worker`` when no
worker is left alive to finish it)."""


@router.post(
    "/speech",
    operation_id="openai_speech",
    responses={
        200: {
            "description": "The audio, streamed as it is synthesised (one file: mp3, Ogg Opus, ADTS AAC, FLAC, WAV with an "
            "open-ended header, or raw PCM16); with `stream_format: sse`, server-sent events whose deltas join into that file.",
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
async def speech(
    body: SpeechRequest,
    tasks: TasksDep,
    listening: ListeningDep,
    voices: VoicesDep,
    caller: StreamCaller,
    guard: Guarded,
    request: Request,
) -> Response:
    fmt = _output_format(body)
    voice = await voices.resolve_any(body.voice, caller)
    native = SubmitRequest.model_validate(
        {
            "text": body.input,
            "voice": voice.name,
            # What the task stores (and the cache keeps): the answer itself when it is at 24 kHz, else the PCM it is
            # made from. Either way the answer is made from the stored file only through ListeningService.stored.
            "format": stored_format(fmt) or "pcm",
            "priority": body.priority,
            "consistent_voice": body.consistent_voice,
            # Heard as it is made, but for a WAV answer, which is the finished file.
            "listen": body.stream_format == "sse" or not fmt.wav,
            **body.native_sampling(),
        }
    )
    submitted = await tasks.submit(native, caller, voice, max_text_chars=tasks.config.openai_max_input_chars)
    task_id = submitted.answer.task_id
    media_type = fmt.content_type
    headers = {"X-TTSQ-Task-Id": task_id, **(submitted.rate.headers() if submitted.rate is not None else {})}
    if body.model_extra:
        headers[IGNORED_FIELDS] = field_names(body.model_extra)
    # A cache hit is done at once: its stored file is the answer (never decoded and encoded again).
    stored = await tasks.download(task_id, caller) if submitted.answer.status is Status.DONE else None
    # This request is the only listener of a job it queued: when its client goes away, the job goes too (unless a
    # submit joined it meanwhile, or a webhook waits for it: TaskService.abandon); a job it joined is left alone.
    sole = stored is None and not submitted.answer.joined
    try:
        if stored is None:
            await listening.require_workers()  # no worker alive: 503 no_worker now, not a response that never comes
        if body.stream_format == "sse":
            pieces = guard(listening.encoded(task_id, fmt)) if stored is None else None
            whole = await _answer(listening, stored, fmt) if stored is not None else None
            events = _sse(pieces, whole, _usage(body.input))
            if sole:
                events = tasks.cancelled_when_abandoned(events, task_id, caller, request.state)
            return StreamingResponse(events, media_type="text/event-stream", headers=headers)
        if stored is None and fmt.wav:
            # A RIFF header states its sizes: a streamed WAV can only say 0xFFFFFFFF, which Python's wave module reads as
            # 2^31 frames. So a WAV answer is the finished file (every other format streams; SSE streams WAV too).
            stored = await tasks.finished(task_id, caller)
            if stored.audio is None:
                return openai_error(500, f"synthesis failed: {stored.job.error or stored.job.status.value}")
        if stored is not None and stored.audio is not None:
            return Response(await _answer(listening, stored, fmt), media_type=media_type, headers=headers)
        try:
            pcm = await listening.started(task_id)  # the answer starts with the first audio, so a failure before it is a 500
        except StreamFailed as exc:
            return openai_error(500, f"synthesis failed: {exc}")
    except NoWorker:
        if sole:  # nobody is left to hear it: a worker that starts later need not make it
            await tasks.abandon(task_id, caller)
        raise
    audio = listening.audio(task_id, fmt, pcm)
    if sole:
        audio = tasks.cancelled_when_abandoned(audio, task_id, caller, request.state)
    return StreamingResponse(guard(audio), media_type=media_type, headers=headers)


def _output_format(body: SpeechRequest) -> OutputFormat:
    """``response_format`` at ``sample_rate``; a rate its format cannot have is OpenAI's 400, naming ``sample_rate``."""
    try:
        return parse_ttsq(body.response_format, body.sample_rate)
    except UnsupportedFormat as exc:
        raise InvalidInput("sample_rate", str(exc), body.sample_rate) from None


async def _answer(listening: ListeningService, stored: Download, fmt: OutputFormat) -> bytes | None:
    """A finished task's stored file as ``fmt`` (itself, or converted from it); None when it has no audio."""
    return None if stored.audio is None else await listening.stored(stored.job, stored.audio, fmt)



def _usage(text: str) -> dict[str, int]:
    """OpenAI's ``usage`` object, which ``speech.audio.done`` must carry (LiveKit's OpenAI plugin reads it as an
    object: ``null`` failed its stream after the first audio). ttsq counts no billing tokens: ``input_tokens`` is the
    input's characters, ``output_tokens`` 0 — true of what it measures, and said so in docs/api.md."""
    return {"input_tokens": len(text), "output_tokens": 0, "total_tokens": len(text)}


async def _sse(pieces: AsyncIterator[bytes] | None, stored: bytes | None, used: dict[str, int]) -> AsyncIterator[str]:
    """OpenAI's speech SSE: ``speech.audio.delta`` events (base64), each an encoded piece as it is ready (``pieces``,
    their bytes joined are one file, as the raw body is; else the ``stored`` file at once), then ``speech.audio.done``
    with its ``usage``; an ``error`` event instead if the task fails, no worker is left to finish it, or the key is
    revoked meanwhile."""
    try:
        if stored is not None:
            yield _delta(stored)
        elif pieces is not None:
            async for piece in pieces:
                yield _delta(piece)
    except StreamFailed as exc:
        yield _event({"type": "error", "error": {"message": f"synthesis failed: {exc}"}}, name="error")
        return
    except (NoWorker, KeyRevoked) as exc:
        yield _event({"type": "error", "error": {"message": str(exc), "code": exc.code}}, name="error")
        return
    yield _event({"type": "speech.audio.done", "usage": used})


def _event(data: dict[str, Any], name: str | None = None) -> str:
    prefix = f"event: {name}\n" if name else ""
    return f"{prefix}data: {json.dumps(data)}\n\n"


def _delta(audio: bytes) -> str:
    return _event({"type": "speech.audio.delta", "audio": base64.b64encode(audio).decode()})


class OpenAIVoice(BaseModel):
    """OpenAI's voice object (``audio.voice``, the SDK's ``openai.types.audio.Voice``), with ttsq's own fields.

    ``type`` says how the voice was made, as OpenAI's does, in ttsq's terms: ``builtin``, ``seed``, ``embedding``,
    ``reference`` (from a recording) or ``blend`` — every kind a stored voice has (OpenAI's are ``audio_sample`` and
    ``prompt``; the SDK does not check them). It allowed the first three only, and the listing was a 500 for everyone
    once one reference or blend voice existed. ``voice_id`` (= ``id``) is what this
    listing said before it took OpenAI's shape; ``maps_to`` names the built-in voice an OpenAI name speaks with.
    """

    id: str
    object: Literal["audio.voice"] = "audio.voice"
    name: str
    created_at: int = Field(description="Unix seconds; 0 for the built-in voices and OpenAI's names.")
    type: Literal["builtin", "seed", "embedding", "reference", "blend"]
    voice_id: str
    maps_to: str | None = None


class VoiceListing(BaseModel):
    """OpenAI's list shape (``object: list``, ``data``) and, the same voices again, ``voices`` (Kokoro-FastAPI's key,
    and this listing's own before: existing clients read it)."""

    object: Literal["list"] = "list"
    data: list[OpenAIVoice]
    voices: list[OpenAIVoice]


@router.get(
    "/voices",
    operation_id="openai_voices",
    response_model=VoiceListing,
    responses=OPENAI_ERROR_RESPONSES,
    summary="Voices usable on /v1/audio/speech",
)
async def openai_voices(voices: VoicesDep, caller: TTSCaller) -> VoiceListing:
    """OpenAI's names (each mapped onto a built-in voice), then every ttsq voice, as OpenAI voice objects."""
    mapped = [
        OpenAIVoice(id=name, name=name, created_at=0, type="builtin", voice_id=name, maps_to=target)
        for name, target in OPENAI_VOICES.items()
    ]
    native = [
        OpenAIVoice(id=v.name, name=v.name, created_at=int(v.created_at or 0), type=v.kind, voice_id=v.name)
        for v in await voices.list_voices(caller)
    ]
    return VoiceListing(data=mapped + native, voices=mapped + native)
