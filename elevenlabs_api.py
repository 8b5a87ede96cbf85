"""ElevenLabs-compatible text to speech: ``POST /v1/text-to-speech/{voice_id}``, ``.../stream``, ``.../with-timestamps``
and ``.../stream/with-timestamps``.

Point ElevenLabs' clients at ttsq and change nothing else: the SDK (``ElevenLabs(base_url="http://host:8000")``), LiveKit's
``elevenlabs.TTS(base_url="http://host:8000/v1")`` (its ``synthesize()`` uses ``/stream``), Pipecat's
``ElevenLabsHttpTTSService(base_url="http://host:8000")`` (``/stream/with-timestamps``). Requests run on the same queue,
workers, cache, single-flight and limits as the native API, through the same submit; the key comes from ``xi-api-key``
(what those clients send), or from ttsq's own headers, with the same scopes and tenant rules. As on OpenAI's route the
answer is the audio itself, sent as each sentence is synthesised.

What maps to what (``voice_id``, ``voice_settings.speed``, ``seed``, ``output_format``) and what is accepted but not
acted on is :mod:`ttsq.api.elevenlabs`'s, one place for these routes and the WebSocket ones; a request that sent
options ttsq does not act on is answered with their names in ``X-TTSQ-Ignored-Fields``. Errors have ElevenLabs' body
(:mod:`ttsq.api.errors`); a ``voice_id`` the caller sees no voice by is ElevenLabs' ``404 voice_not_found``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from deps import Guarded, ListeningDep, StreamCaller, TasksDep, VoicesDep
from ttsq.api.auth import Principal
from ttsq.api.elevenlabs import (
    ACTED_ON,
    DEFAULT_OUTPUT_FORMAT,
    OutputFormat,
    OutputFormatName,
    TextToSpeechRequest,
    audio_responses,
    ignored_options,
    parse_output_format,
    sampling_seed,
)
from ttsq.api.errors import elevenlabs_error
from ttsq.api.schemas import SubmitRequest
from ttsq.api.service import (
    Download,
    ListeningService,
    NoWorker,
    Status,
    StreamFailed,
    TaskService,
    VoiceService,
    speed_level,
)

router = APIRouter(prefix="/v1/text-to-speech", tags=["elevenlabs"])

KEYS = (
    "ElevenLabs' protocol (docs/protocols/elevenlabs.md). The API key in `xi-api-key`, as ElevenLabs' clients send it, or "
    "in `X-API-Key` or `Authorization: Bearer`, with scope `tts`."
)

LINE_AUDIO_BYTES = 48_000
"""At most this much audio in one line of ``/stream/with-timestamps`` (64 KB once base64): aiohttp, which Pipecat's HTTP
service reads the lines with, refuses a line over 128 KiB (its reader's default high-water mark)."""

VoiceId = Annotated[
    str,
    Path(
        description="A ttsq voice the caller sees (docs/voices.md), one of OpenAI's names (`alloy`, ...: each a built-in "
        "voice), or a blend of them (`zh_female*0.7+narrator*0.3`).",
        examples=["zh_female"],
    ),
]


EnableLogging = Annotated[bool | None, Query(description="Accepted, not acted on (docs/protocols/elevenlabs.md).")]
StreamingLatency = Annotated[int | None, Query(ge=0, le=4, description="Accepted, not acted on: audio always streams.")]

_TIMED_CHUNK = {
    "type": "object",
    "required": ["audio_base64", "alignment", "normalized_alignment"],
    "properties": {
        "audio_base64": {"type": "string", "contentEncoding": "base64"},
        "alignment": {"type": "null", "description": "Always null: ChatTTS gives no character timing."},
        "normalized_alignment": {"type": "null"},
    },
}


def _timed_responses(media_type: str, description: str) -> dict[int | str, dict[str, Any]]:
    responses = audio_responses(description)
    responses[200]["content"] = {media_type: {"schema": _TIMED_CHUNK}}
    return responses


@dataclass(frozen=True)
class _Spoken:
    """A request submitted: its task, its format, its answer's headers, whether it is the task's only listener, and
    the stored result when the cache answered."""

    task_id: str
    fmt: OutputFormat
    headers: dict[str, str]
    sole: bool
    stored: Download | None


async def _speak(
    voice_id: str,
    body: TextToSpeechRequest,
    output_format: str,
    query: dict[str, Any],
    tasks: TaskService,
    voices: VoiceService,
    caller: Principal,
    *,
    listen: bool,
) -> _Spoken:
    fmt = parse_output_format(output_format)  # checked already (OutputFormatName)
    voice = await voices.resolve_any(voice_id, caller, "voice_id")
    speed = body.voice_settings.speed if body.voice_settings is not None else None
    native = SubmitRequest(
        text=body.text,
        voice=voice.name,
        seed=None if body.seed is None else sampling_seed(body.seed),
        # The jobs' own audio, stored and cached as such (lossless): each answer converts it into its own format.
        format="pcm",
        listen=listen,  # whether the answer streams as it is made (a whole file does not)
        **({} if speed is None else {"speed": speed_level(speed)}),
    )
    submitted = await tasks.submit(native, caller, voice)
    task_id = submitted.answer.task_id
    headers = {"X-TTSQ-Task-Id": task_id, **(submitted.rate.headers() if submitted.rate is not None else {})}
    ignored = ignored_options({**dict(body), **(body.model_extra or {}), **query}, ACTED_ON)
    if ignored:
        headers["X-TTSQ-Ignored-Fields"] = ", ".join(ignored)
    # A cache hit is done at once: its stored PCM is the answer, converted.
    stored = await tasks.download(task_id, caller) if submitted.answer.status is Status.DONE else None
    # This request is the only listener of a job it queued: when its client goes away, the job goes too (as OpenAI's).
    return _Spoken(task_id, fmt, headers, stored is None and not submitted.answer.joined, stored)


async def _once(piece: bytes) -> AsyncIterator[bytes]:
    yield piece


async def _audio(
    spoken: _Spoken, tasks: TaskService, listening: ListeningService, caller: Principal, request: Request
) -> AsyncIterator[bytes] | Response:
    """The request's audio in its format as it is synthesised, each piece as soon as it is final; or the error answer
    when synthesis fails before any audio."""
    task_id, fmt = spoken.task_id, spoken.fmt
    if spoken.stored is not None and spoken.stored.audio is not None:
        return _once(await listening.stored(spoken.stored.job, spoken.stored.audio, fmt))
    try:
        await listening.require_workers()  # no worker alive: 503 no_worker now, not a response that never comes
        started = await listening.started(task_id)  # the answer starts with the first audio
    except StreamFailed as exc:
        return elevenlabs_error(500, f"synthesis failed: {exc}", code="synthesis_failed")
    except NoWorker:
        if spoken.sole:  # nobody is left to hear it: a worker that starts later need not make it
            await tasks.abandon(task_id, caller)
        raise
    audio = listening.audio(task_id, fmt, started)
    if spoken.sole:
        audio = tasks.cancelled_when_abandoned(audio, task_id, caller, request.state)
    return audio


async def _whole(spoken: _Spoken, tasks: TaskService, listening: ListeningService, caller: Principal) -> bytes | Response:
    """The request's whole audio in its format, once its task has ended (a failure is a 500, never part of the audio)."""
    stored = spoken.stored
    if stored is None:
        try:
            await listening.require_workers()
        except NoWorker:
            if spoken.sole:
                await tasks.abandon(spoken.task_id, caller)
            raise
        stored = await tasks.finished(spoken.task_id, caller)
    if stored.audio is None:
        return elevenlabs_error(500, f"synthesis failed: {stored.job.error or stored.job.status.value}", code="synthesis_failed")
    return await listening.stored(stored.job, stored.audio, spoken.fmt)



@router.post(
    "/{voice_id}",
    operation_id="elevenlabs_text_to_speech",
    responses=audio_responses(
        "The audio in `output_format`, sent as it is synthesised (WAV: the finished file, whose header states its sizes)."
    ),
    summary="ElevenLabs-compatible text to speech",
    description=KEYS,
)
async def text_to_speech(
    voice_id: VoiceId,
    body: TextToSpeechRequest,
    tasks: TasksDep,
    listening: ListeningDep,
    voices: VoicesDep,
    caller: StreamCaller,
    guard: Guarded,
    request: Request,
    output_format: OutputFormatName = DEFAULT_OUTPUT_FORMAT,
    enable_logging: EnableLogging = None,
    optimize_streaming_latency: StreamingLatency = None,
) -> Response:
    """Streamed as ``/stream`` is (every client of either reads the body as it comes), but for WAV: a RIFF header states
    its sizes, and a streamed one can only say 0xFFFFFFFF (which Python's ``wave`` reads as 2^31 frames), so a WAV
    answer here is the finished file; ``/stream`` sends the open-ended one."""
    query = {"enable_logging": enable_logging, "optimize_streaming_latency": optimize_streaming_latency}
    streamed = not parse_output_format(output_format).wav  # a WAV answer is the finished file
    spoken = await _speak(voice_id, body, output_format, query, tasks, voices, caller, listen=streamed)
    if spoken.fmt.wav:
        whole = await _whole(spoken, tasks, listening, caller)
        if isinstance(whole, Response):
            return whole
        return Response(whole, media_type=spoken.fmt.content_type, headers=spoken.headers)
    audio = await _audio(spoken, tasks, listening, caller, request)
    if isinstance(audio, Response):
        return audio
    return StreamingResponse(guard(audio), media_type=spoken.fmt.content_type, headers=spoken.headers)


@router.post(
    "/{voice_id}/stream",
    operation_id="elevenlabs_text_to_speech_stream",
    responses=audio_responses("The audio in `output_format`, streamed as it is synthesised (WAV with an open-ended header)."),
    summary="ElevenLabs-compatible text to speech, streamed",
    description=KEYS,
)
async def text_to_speech_stream(
    voice_id: VoiceId,
    body: TextToSpeechRequest,
    tasks: TasksDep,
    listening: ListeningDep,
    voices: VoicesDep,
    caller: StreamCaller,
    guard: Guarded,
    request: Request,
    output_format: OutputFormatName = DEFAULT_OUTPUT_FORMAT,
    enable_logging: EnableLogging = None,
    optimize_streaming_latency: StreamingLatency = None,
) -> Response:
    query = {"enable_logging": enable_logging, "optimize_streaming_latency": optimize_streaming_latency}
    spoken = await _speak(voice_id, body, output_format, query, tasks, voices, caller, listen=True)
    audio = await _audio(spoken, tasks, listening, caller, request)
    if isinstance(audio, Response):
        return audio
    return StreamingResponse(guard(audio), media_type=spoken.fmt.content_type, headers=spoken.headers)


def _timed(audio: bytes) -> dict[str, Any]:
    """One of ElevenLabs' timed audio objects, without timing (ChatTTS gives none)."""
    return {"audio_base64": base64.b64encode(audio).decode(), "alignment": None, "normalized_alignment": None}


@router.post(
    "/{voice_id}/with-timestamps",
    operation_id="elevenlabs_text_to_speech_with_timestamps",
    responses=_timed_responses("application/json", "The whole audio in `output_format`, base64, without alignment."),
    summary="ElevenLabs-compatible text to speech, as JSON",
    description=KEYS,
)
async def text_to_speech_with_timestamps(
    voice_id: VoiceId,
    body: TextToSpeechRequest,
    tasks: TasksDep,
    listening: ListeningDep,
    voices: VoicesDep,
    caller: StreamCaller,
    output_format: OutputFormatName = DEFAULT_OUTPUT_FORMAT,
    enable_logging: EnableLogging = None,
    optimize_streaming_latency: StreamingLatency = None,
) -> Response:
    """The answer is one JSON object, so it is made once the task has ended: a task that fails is a 500, never a
    partial audio that reads as the whole."""
    query = {"enable_logging": enable_logging, "optimize_streaming_latency": optimize_streaming_latency}
    spoken = await _speak(voice_id, body, output_format, query, tasks, voices, caller, listen=False)
    whole = await _whole(spoken, tasks, listening, caller)
    if isinstance(whole, Response):
        return whole
    return JSONResponse(_timed(whole), headers=spoken.headers)


async def _lines(audio: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """ElevenLabs' timed stream: one JSON object a line, each at most :data:`LINE_AUDIO_BYTES` of audio."""
    async for piece in audio:
        for at in range(0, len(piece), LINE_AUDIO_BYTES):
            yield json.dumps(_timed(piece[at : at + LINE_AUDIO_BYTES])) + "\n"


@router.post(
    "/{voice_id}/stream/with-timestamps",
    operation_id="elevenlabs_text_to_speech_stream_with_timestamps",
    responses=_timed_responses(
        "application/x-ndjson", "The audio in `output_format` as it is synthesised: JSON objects, one a line, without alignment."
    ),
    summary="ElevenLabs-compatible text to speech, streamed as JSON lines",
    description=KEYS,
)
async def text_to_speech_stream_with_timestamps(
    voice_id: VoiceId,
    body: TextToSpeechRequest,
    tasks: TasksDep,
    listening: ListeningDep,
    voices: VoicesDep,
    caller: StreamCaller,
    guard: Guarded,
    request: Request,
    output_format: OutputFormatName = DEFAULT_OUTPUT_FORMAT,
    enable_logging: EnableLogging = None,
    optimize_streaming_latency: StreamingLatency = None,
) -> Response:
    query = {"enable_logging": enable_logging, "optimize_streaming_latency": optimize_streaming_latency}
    spoken = await _speak(voice_id, body, output_format, query, tasks, voices, caller, listen=True)
    audio = await _audio(spoken, tasks, listening, caller, request)
    if isinstance(audio, Response):
        return audio
    return StreamingResponse(guard(_lines(audio)), media_type="application/x-ndjson", headers=spoken.headers)
