"""Cartesia-compatible speech: ``POST /tts/bytes``.

Point a Cartesia client at the API's root (``http://host:8000``: LiveKit's ``cartesia.TTS(base_url=...)``, Pipecat's
``CartesiaHttpTTSService(base_url=...)``, the SDK's ``Cartesia(base_url=...)``) with a ttsq key and a ttsq voice: what
its options mean here is :mod:`ttsq.api.cartesia` (and docs/protocols/cartesia.md). A request runs on the same queue,
workers, cache, single-flight and limits as the native API, with the caller's key read from ``X-API-Key`` or
``Authorization: Bearer`` (what Cartesia's clients send) and held to the same scopes, limits and tenant. The answer
is the audio itself, streamed sentence by sentence as it is synthesised (``wav``: the finished file, whose header
states its sizes); every error has Cartesia's error body (:mod:`ttsq.api.errors`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import StreamingResponse

from deps import Guarded, ListeningDep, StreamCaller, TasksDep, VoicesDep
from ttsq.api.audio_out import whole_file
from ttsq.api.cartesia import CartesiaBytesRequest, generation
from ttsq.api.errors import CARTESIA_ERROR_RESPONSES, RATE_LIMIT_HEADERS, error_response
from ttsq.api.schemas import IGNORED_FIELDS, SubmitRequest, field_names
from ttsq.api.service import KeyRevoked, NoWorker, Status, StreamFailed

router = APIRouter(tags=["cartesia"])

CartesiaVersion = Annotated[
    str | None, Header(alias="Cartesia-Version", description="Cartesia's API version (a date): every one is answered alike.")
]
_AUDIO_TYPES = ("audio/pcm", "audio/wav", "audio/mpeg", "audio/basic", "audio/x-alaw-basic")


@router.post(
    "/tts/bytes",
    operation_id="cartesia_tts_bytes",
    responses={
        200: {
            "description": "The audio in `output_format`, streamed as it is synthesised (raw PCM; WAV is the finished file).",
            "content": {t: {} for t in _AUDIO_TYPES},
            "headers": {
                **RATE_LIMIT_HEADERS,
                "X-TTSQ-Task-Id": {"schema": {"type": "string"}, "required": True, "description": "The ttsq task behind it."},
            },
        },
        **CARTESIA_ERROR_RESPONSES,
    },
    summary="Cartesia-compatible text to speech",
)
async def tts_bytes(
    body: CartesiaBytesRequest,
    tasks: TasksDep,
    listening: ListeningDep,
    voices: VoicesDep,
    caller: StreamCaller,
    guard: Guarded,
    request: Request,
    cartesia_version: CartesiaVersion = None,  # accepted and ignored
) -> Response:
    asked = generation(body)
    voice = await voices.resolve_any(asked.voice, caller, "voice.id")
    # Heard as it is made, but for a WAV answer, which is the finished file.
    native = SubmitRequest(text=body.transcript, voice=voice.name, speed=asked.speed, format="pcm", listen=not asked.output.wav)
    submitted = await tasks.submit(native, caller, voice, max_text_chars=tasks.config.openai_max_input_chars)
    task_id = submitted.answer.task_id
    headers = {"X-TTSQ-Task-Id": task_id, **(submitted.rate.headers() if submitted.rate is not None else {})}
    if asked.ignored:
        headers[IGNORED_FIELDS] = field_names(asked.ignored)
    done = submitted.answer.status is Status.DONE
    # This request is the only listener of a job it queued: when its client goes away, the job goes too (unless a submit
    # joined it meanwhile, or a webhook waits for it: TaskService.abandon); a job it joined, or a cache hit, is left alone.
    sole = not done and not submitted.answer.joined
    try:
        if not done:
            await listening.require_workers()  # no worker alive: 503 no_worker now, not a response that never comes
        if asked.output.wav:
            audio = await whole_file(guard(listening.pcm(task_id)), asked.output, request.receive)
            if audio is None:  # its client went away first: nobody is left to answer (499, as proxies log it)
                if sole:
                    await tasks.abandon(task_id, caller)
                return Response(status_code=499)
            return Response(audio, media_type=asked.output.content_type, headers=headers)
        pcm = await listening.started(task_id)  # the answer starts with the first audio: a failure before it is a 500
    except NoWorker:
        if sole:  # nobody is left to hear it: a worker that starts later need not make it
            await tasks.abandon(task_id, caller)
        raise
    except KeyRevoked as exc:  # while the whole file was awaited
        if sole:
            await tasks.abandon(task_id, caller)
        return error_response(request, 401, str(exc), headers={"WWW-Authenticate": 'Bearer realm="ttsq"'})
    except StreamFailed as exc:
        return error_response(request, 500, f"synthesis failed: {exc}")
    # A failure after the first audio breaks the body off: Cartesia's clients take a clean end for the whole.
    stream = listening.audio(task_id, asked.output, pcm, failure_aborts=True)
    if sole:
        stream = tasks.cancelled_when_abandoned(stream, task_id, caller, request.state)
    return StreamingResponse(guard(stream), media_type=asked.output.content_type, headers=headers)

