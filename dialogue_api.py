"""Dialogues: ``POST /v1/tts/dialogue`` (ttsq's own: a task id at once, like a submit) and ElevenLabs'
``POST /v1/text-to-dialogue`` and ``/v1/text-to-dialogue/stream`` (the audio itself, as ElevenLabs answers).

Each line is spoken in its speaker's voice, as a segment of one task (docs/api.md#dialogue): the task is polled,
streamed, captioned (the speaker on every cue), called back and cached as any task is. The ElevenLabs routes take
``{"inputs": [{"text", "voice_id"}]}`` with ``?output_format=`` and the key in ``xi-api-key`` (or ttsq's headers), so
the ``elevenlabs`` SDK's ``text_to_dialogue.convert`` and ``.stream`` work with only its base URL changed.
"""

from __future__ import annotations

from typing import Annotated, Any, cast

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import JSONResponse, StreamingResponse

from deps import DialogueDep, Guarded, ListeningDep, StreamCaller, TasksDep, TTSCaller
from ttsq.api.auth import Principal
from ttsq.api.errors import (
    AUTH_RESPONSES,
    BODY_TIMEOUT_RESPONSE,
    BODY_TOO_LARGE_RESPONSE,
    ERROR_RESPONSES,
    QUEUE_FULL_RESPONSE,
    RATE_LIMIT_HEADERS,
    UNSUPPORTED_MEDIA_TYPE_RESPONSE,
)
from ttsq.api.schemas import IGNORED_FIELDS, SubmitResponse, field_names, task_links
from ttsq.api.service import (
    ELEVENLABS_DEFAULT,
    ELEVENLABS_PATTERN,
    MAX_SEED,
    DialogueLine,
    DialogueRequest,
    Download,
    ElevenLabsDialogueRequest,
    InvalidInput,
    ListeningService,
    NoWorker,
    OutputFormat,
    Status,
    StreamFailed,
    TaskService,
    UnsupportedFormat,
    parse_elevenlabs,
    stored_format,
)

router = APIRouter(prefix="/v1/tts", tags=["tts"])
elevenlabs = APIRouter(prefix="/v1/text-to-dialogue", tags=["elevenlabs"])

TASK_LINKS = task_links("$response.body#/task_id")


@router.post(
    "/dialogue",
    operation_id="dialogue",
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
    summary="Queue a dialogue (lines in several voices) and get a task id at once",
)
async def dialogue(body: DialogueRequest, dialogues: DialogueDep, caller: TTSCaller) -> Response:
    """``202`` with a queued (or joined) task whose audio is every line in its speaker's voice; ``200`` when the
    cache answers. A speaker without a voice, too many lines or characters: ``422`` naming the field."""
    submitted = await dialogues.submit(body, caller)
    code = status.HTTP_200_OK if submitted.answer.cached else status.HTTP_202_ACCEPTED
    headers = submitted.rate.headers() if submitted.rate is not None else None
    return Response(submitted.answer.model_dump_json(), status_code=code, media_type="application/json", headers=headers)


OutputFormatQuery = Annotated[
    str | None,
    Query(
        max_length=40,
        # Checked here for its characters (named with the other fields a request gets wrong); its shape, which the
        # schema states, by parse_elevenlabs, whose refusal lists the names ttsq makes.
        pattern=r"^[a-z0-9_]+$",
        json_schema_extra={"pattern": ELEVENLABS_PATTERN},
        description="ElevenLabs' name of the audio's format (`pcm_16000`, `ulaw_8000`, `mp3_44100_128`, `opus_48000_64`, "
        f"`wav_24000`, …: docs/api.md#output-formats). Default: `{ELEVENLABS_DEFAULT}`, as ElevenLabs'.",
    ),
]
_AUDIO_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The audio, streamed as it is synthesised.",
        "content": {"audio/mpeg": {}, "audio/pcm": {}, "audio/basic": {}, "audio/wav": {}, "audio/ogg; codecs=opus": {}},
        "headers": {
            **RATE_LIMIT_HEADERS,
            "X-TTSQ-Task-Id": {"schema": {"type": "string"}, "required": True, "description": "The ttsq task behind it."},
        },
        "links": task_links("$response.header.X-TTSQ-Task-Id"),
    },
    408: BODY_TIMEOUT_RESPONSE,
    413: BODY_TOO_LARGE_RESPONSE,
    415: UNSUPPORTED_MEDIA_TYPE_RESPONSE,
    **ERROR_RESPONSES,
    **AUTH_RESPONSES,
    429: QUEUE_FULL_RESPONSE,
}


@elevenlabs.post("", operation_id="elevenlabs_dialogue", responses=_AUDIO_RESPONSES, summary="ElevenLabs-compatible dialogue")
async def text_to_dialogue(
    body: ElevenLabsDialogueRequest,
    dialogues: DialogueDep,
    tasks: TasksDep,
    listening: ListeningDep,
    caller: StreamCaller,
    guard: Guarded,
    request: Request,
    output_format: OutputFormatQuery = None,
) -> Response:
    return await _speak(body, output_format, dialogues, tasks, listening, caller, guard, request)


@elevenlabs.post(
    "/stream",
    operation_id="elevenlabs_dialogue_stream",
    responses=_AUDIO_RESPONSES,
    summary="ElevenLabs-compatible dialogue, streamed",
)
async def text_to_dialogue_stream(
    body: ElevenLabsDialogueRequest,
    dialogues: DialogueDep,
    tasks: TasksDep,
    listening: ListeningDep,
    caller: StreamCaller,
    guard: Guarded,
    request: Request,
    output_format: OutputFormatQuery = None,
) -> Response:
    return await _speak(body, output_format, dialogues, tasks, listening, caller, guard, request)


async def _speak(
    body: ElevenLabsDialogueRequest,
    output_format: str | None,
    dialogues: DialogueDep,
    tasks: TasksDep,
    listening: ListeningDep,
    caller: StreamCaller,
    guard: Guarded,
    request: Request,
) -> Response:
    """Queue the inputs as a dialogue (each voice its own speaker) and answer with its audio as it is made: the stored
    file at once for a cache hit (converted where it is not the format asked for); a WAV once the task is done (its
    header states its sizes); a failure before the first audio is a 500; this request is the task's only listener,
    so the task is cancelled when its client goes away (unless someone else wants it: ``TaskService.abandon``)."""
    try:
        fmt = parse_elevenlabs(output_format)
    except UnsupportedFormat as exc:
        raise InvalidInput("output_format", str(exc), output_format) from None
    # Each voice is its own speaker. Built without validating again: the service checks every line as it checks any
    # dialogue's, naming `inputs.N.text`, and a voice it cannot resolve as `voices.<voice_id>`. The task stores the
    # answer itself when it is at 24 kHz, else the PCM it is made from (as the OpenAI route does).
    native = DialogueRequest.model_construct(
        lines=[DialogueLine.model_construct(speaker=line.voice_id, text=line.text) for line in body.inputs],
        voices={line.voice_id: line.voice_id for line in body.inputs},
        seed=None if body.seed is None else body.seed % (MAX_SEED + 1),
        format=cast(Any, stored_format(fmt) or "pcm"),  # a stored format's name: one a job may have
    )
    submitted = await dialogues.submit(native, caller, field="inputs")
    task_id = submitted.answer.task_id
    headers = {"X-TTSQ-Task-Id": task_id, **(submitted.rate.headers() if submitted.rate is not None else {})}
    ignored = [name for name in body.model_extra or {}] + [
        f"inputs.{name}" for line in body.inputs for name in line.model_extra or {}
    ]
    if ignored:
        headers[IGNORED_FIELDS] = field_names(ignored)
    stored = await tasks.download(task_id, caller) if submitted.answer.status is Status.DONE else None
    sole = stored is None and not submitted.answer.joined
    try:
        if stored is None:
            await listening.require_workers()  # no worker alive: 503 no_worker now, not a response that never comes
        if stored is None and fmt.wav:
            stored = await _finished(tasks, task_id, caller)
        if stored is not None:
            if stored.audio is None:
                return JSONResponse(status_code=500, content={"detail": f"synthesis failed: {stored.job.error or 'no audio'}"})
            return Response(await _answer(listening, stored, fmt), media_type=fmt.content_type, headers=headers)
        try:
            pcm = await listening.started(task_id)
        except StreamFailed as exc:
            return JSONResponse(status_code=500, content={"detail": f"synthesis failed: {exc}"})
    except NoWorker:
        if sole:
            await tasks.abandon(task_id, caller)
        raise
    audio = listening.audio(task_id, fmt, pcm)
    if sole:
        audio = tasks.cancelled_when_abandoned(audio, task_id, caller, request.state)
    return StreamingResponse(guard(audio), media_type=fmt.content_type, headers=headers)


async def _answer(listening: ListeningService, stored: Download, fmt: OutputFormat) -> bytes:
    """A finished task's stored file as ``fmt`` (itself, or converted from it)."""
    assert stored.audio is not None
    return await listening.stored(stored.job, stored.audio, fmt)


async def _finished(tasks: TaskService, task_id: str, caller: Principal) -> Download:
    """The task once it has ended (long-polls of ``MAX_WAIT_S`` each)."""
    while True:
        download = await tasks.download(task_id, caller, wait_s=tasks.config.max_wait_s)
        if download.audio is not None or download.job.status.is_final:
            return download
