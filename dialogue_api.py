"""Dialogues: ``POST /v1/tts/dialogue`` (ttsq's own: a task id at once, like a submit) and ElevenLabs'
``POST /v1/text-to-dialogue`` and ``/v1/text-to-dialogue/stream`` (the audio itself, as ElevenLabs answers).

Each line is spoken in its speaker's voice, as a segment of one task (docs/api.md#dialogue): the task is polled,
streamed, captioned (the speaker on every cue), called back and cached as any task is. The ElevenLabs routes take
``{"inputs": [{"text", "voice_id"}]}`` with ``?output_format=`` and the key in ``xi-api-key`` (or ttsq's headers), so
the ``elevenlabs`` SDK's ``text_to_dialogue.convert`` and ``.stream`` work with only its base URL changed.
"""

from __future__ import annotations

from typing import Any, cast

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import StreamingResponse

from deps import DialogueDep, Guarded, ListeningDep, StreamCaller, TasksDep, TTSCaller
from ttsq.api.elevenlabs import (
    DEFAULT_OUTPUT_FORMAT,
    OutputFormatName,
    audio_responses,
    ignored_options,
    parse_output_format,
    sampling_seed,
)
from ttsq.api.errors import (
    AUTH_RESPONSES,
    BODY_TIMEOUT_RESPONSE,
    BODY_TOO_LARGE_RESPONSE,
    ERROR_RESPONSES,
    QUEUE_FULL_RESPONSE,
    RATE_LIMIT_HEADERS,
    UNSUPPORTED_MEDIA_TYPE_RESPONSE,
    elevenlabs_error,
)
from ttsq.api.schemas import IGNORED_FIELDS, SubmitResponse, field_names, task_links
from ttsq.api.service import (
    DialogueLine,
    DialogueRequest,
    ElevenLabsDialogueRequest,
    NoWorker,
    Status,
    StreamFailed,
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


_AUDIO_RESPONSES = audio_responses(
    "The audio in `output_format`, streamed as it is synthesised (WAV: the finished file, whose header states its sizes).",
    voice_not_found=False,
)


@elevenlabs.post("", operation_id="elevenlabs_dialogue", responses=_AUDIO_RESPONSES, summary="ElevenLabs-compatible dialogue")
async def text_to_dialogue(
    body: ElevenLabsDialogueRequest,
    dialogues: DialogueDep,
    tasks: TasksDep,
    listening: ListeningDep,
    caller: StreamCaller,
    guard: Guarded,
    request: Request,
    output_format: OutputFormatName = DEFAULT_OUTPUT_FORMAT,
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
    output_format: OutputFormatName = DEFAULT_OUTPUT_FORMAT,
) -> Response:
    return await _speak(body, output_format, dialogues, tasks, listening, caller, guard, request)


async def _speak(
    body: ElevenLabsDialogueRequest,
    output_format: str,
    dialogues: DialogueDep,
    tasks: TasksDep,
    listening: ListeningDep,
    caller: StreamCaller,
    guard: Guarded,
    request: Request,
) -> Response:
    """Queue the inputs as a dialogue (each voice its own speaker) and answer with its audio as it is made: the stored
    file at once for a cache hit (converted where it is not the format asked for); a WAV once the task is done (its
    header states its sizes); a failure before the first audio is ElevenLabs' 500; this request is the task's only
    listener, so the task is cancelled when its client goes away (unless someone else wants it: ``TaskService.abandon``)."""
    fmt = parse_output_format(output_format)  # checked already (OutputFormatName)
    # Each voice is its own speaker. Built without validating again: the service checks every line as it checks any
    # dialogue's, naming `inputs.N.text`, and a voice it cannot resolve as `voices.<voice_id>`. The task stores the
    # answer itself when it is at 24 kHz, else the PCM it is made from (as the OpenAI route does).
    native = DialogueRequest.model_construct(
        lines=[DialogueLine.model_construct(speaker=line.voice_id, text=line.text) for line in body.inputs],
        voices={line.voice_id: line.voice_id for line in body.inputs},
        seed=None if body.seed is None else sampling_seed(body.seed),
        format=cast(Any, stored_format(fmt) or "pcm"),  # a stored format's name: one a job may have
    )
    submitted = await dialogues.submit(native, caller, field="inputs", listen=not fmt.wav)  # a WAV is the finished file
    task_id = submitted.answer.task_id
    headers = {"X-TTSQ-Task-Id": task_id, **(submitted.rate.headers() if submitted.rate is not None else {})}
    extra = {**(body.model_extra or {})}
    for line in body.inputs:
        extra |= {f"inputs.{name}": value for name, value in (line.model_extra or {}).items()}
    ignored = ignored_options(extra)
    if ignored:
        headers[IGNORED_FIELDS] = field_names(ignored)
    stored = await tasks.download(task_id, caller) if submitted.answer.status is Status.DONE else None
    sole = stored is None and not submitted.answer.joined
    try:
        if stored is None:
            await listening.require_workers()  # no worker alive: 503 no_worker now, not a response that never comes
        if stored is None and fmt.wav:
            stored = await tasks.finished(task_id, caller)
        if stored is not None:
            if stored.audio is None:
                return elevenlabs_error(500, f"synthesis failed: {stored.job.error or 'no audio'}", code="synthesis_failed")
            return Response(await listening.stored(stored.job, stored.audio, fmt), media_type=fmt.content_type, headers=headers)
        try:
            pcm = await listening.started(task_id)
        except StreamFailed as exc:
            return elevenlabs_error(500, f"synthesis failed: {exc}", code="synthesis_failed")
    except NoWorker:
        if sole:
            await tasks.abandon(task_id, caller)
        raise
    audio = listening.audio(task_id, fmt, pcm)
    if sole:
        audio = tasks.cancelled_when_abandoned(audio, task_id, caller, request.state)
    return StreamingResponse(guard(audio), media_type=fmt.content_type, headers=headers)
