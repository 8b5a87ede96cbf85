"""Reading tasks back: status, audio download, audio stream and status events."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse

from deps import Guarded, ListeningDep, StreamCaller, TasksDep, TTSCaller
from ttsq.api.auth import Principal
from ttsq.api.errors import AUTH_RESPONSES, ERROR_RESPONSES, LONG_POLL_UNAVAILABLE, TOO_MANY_STREAMS_RESPONSES
from ttsq.api.schemas import CancelResponse, ErrorBody, TaskEvent, TaskStatus, TimingEvent, component_schema, sse_schema
from ttsq.api.service import (
    CAPTION_CONTENT_TYPES,
    COMMON_RATES,
    CONTENT_TYPES,
    TTSQ_NAMES,
    Cancelled,
    CaptionFormat,
    Job,
    KeyRevoked,
    NoWorker,
    OutputFormat,
    Status,
    StoreUnavailable,
    TtsqName,
    UnsupportedFormat,
    parse_ttsq,
)

router = APIRouter(prefix="/v1/tts", tags=["query"])
log = logging.getLogger("ttsq.api")
_event_json = json.JSONEncoder(ensure_ascii=False).encode
"""An event's data as JSON: one encoder for every event (``json.dumps`` with an option builds one per call, and a
process with a thousand event streams encodes a thousand events per piece)."""

_NOT_FOUND = {"model": ErrorBody, "description": "Unknown task id, or its result has expired."}
_AUDIO_CONTENT_TYPES = sorted({parse_ttsq(name).content_type for name in TTSQ_NAMES})

SampleRateQuery = Annotated[
    int | None,
    Query(
        description="The audio's sample rate in Hz: 8000, 11025, 12000, 16000, 22050, 24000 (ttsq's own), 32000, 44100 or "
        "48000; opus only 8000, 12000, 16000, 24000 or 48000. Default: 24000, and 8000 for mulaw and alaw. Other rates "
        "are resampled from 24 kHz with an anti-aliasing filter (docs/api.md#output-formats).",
        json_schema_extra={"enum": list(COMMON_RATES)},
    ),
]


def _output_format(name: TtsqName, sample_rate: int | None) -> OutputFormat:
    """``format`` and ``sample_rate`` as one output format; a pair ttsq cannot make is a 422 naming both."""
    try:
        return parse_ttsq(name, sample_rate)
    except UnsupportedFormat as exc:
        raise _query_error("sample_rate", str(exc), sample_rate) from None


def _download_format(job: Job, asked: OutputFormat | None, sample_rate: int | None) -> OutputFormat | None:
    """The format a download is answered in: the one ``asked`` (``format`` with ``sample_rate``, checked before the
    download); a ``sample_rate`` alone keeps the stored format's name; None for the stored file as it is."""
    if asked is not None or sample_rate is None:
        return asked
    stored = job.params.format
    if stored not in TTSQ_NAMES:
        raise _query_error("format", f"the task's audio is {stored}: name the format to convert it to", None)
    return _output_format(stored, sample_rate)  # a ttsq name, checked above


def _query_error(name: str, message: str, value: object) -> RequestValidationError:
    """A 422 in FastAPI's own format for a query parameter a check outside its type refused."""
    return RequestValidationError([{"type": "value_error", "loc": ("query", name), "msg": message, "input": value}])
_FAILED = {"model": TaskStatus, "description": "The task failed (`error` says why) or was cancelled."}


@router.get(
    "/tasks/{task_id}",
    operation_id="task_status",
    response_model=TaskStatus,
    responses={404: _NOT_FOUND, 503: LONG_POLL_UNAVAILABLE, **AUTH_RESPONSES},
    summary="Status of a task",
)
async def task_status(
    task_id: str, tasks: TasksDep, listening: ListeningDep, caller: TTSCaller, request: Request, wait: WaitQuery = None
) -> TaskStatus:
    """With ``wait``, answers as soon as the task ends, or after that many seconds with its status then (a long-poll)."""
    job = await tasks.job(task_id, caller)
    if _waits(job, wait, listening, caller, request):
        job = await tasks.wait_for_end(job, caller, wait or 0.0)
    return await tasks.status(job)


WaitQuery = Annotated[
    float | None,
    Query(
        ge=0,
        allow_inf_nan=False,
        description="Long-poll: answer as soon as the task ends, or after this many seconds with its status then "
        "(at most MAX_WAIT_S; a longer wait is served as MAX_WAIT_S). Without it, answer at once.",
    ),
]


def _waits(job: Job, wait: float | None, listening: ListeningDep, caller: Principal, request: Request) -> bool:
    """Whether this request waits for ``job`` to end; one that does holds a stream slot meanwhile, as a stream does
    (it follows the task through the process's listener). The wait itself answers 503 ``no_worker`` when no worker is
    alive to end the task, and 401 once the caller's key is revoked (:meth:`TaskService.wait_for_end`)."""
    if not wait or job.status.is_final:
        return False
    listening.open_stream(caller, request.state, "long_poll")
    return True


@router.delete(
    "/tasks/{task_id}",
    operation_id="cancel_task",
    response_model=CancelResponse,
    status_code=202,
    responses={
        200: {"model": CancelResponse, "description": "Cancelled already, or not yours to cancel any more."},
        404: _NOT_FOUND,
        409: {"model": ErrorBody, "description": "The task had already finished (done or failed)."},
        503: ERROR_RESPONSES[503],
        **AUTH_RESPONSES,
    },
    summary="Cancel a task",
)
async def cancel_task(task_id: str, tasks: TasksDep, caller: TTSCaller) -> Response:
    """A waiting task leaves the queue at once (``cancelled``); a running one is marked and its result
    dropped when its batch ends (``cancelling``). When others joined the same task (single-flight),
    only the caller is detached and the task goes on for them. Cancelling again changes nothing. A cancel
    deletes nothing: the task's status stays readable (``cancelled``) until its record expires."""
    outcome = await tasks.cancel(task_id, caller)
    if outcome is Cancelled.FINAL:
        raise HTTPException(409, f"task {task_id!r} has already finished; nothing to cancel")
    if outcome is Cancelled.GONE:
        raise HTTPException(404, f"no task {task_id!r}: it never existed or its result has expired")
    body = CancelResponse(task_id=task_id, status=_CANCEL_STATUS[outcome])
    return JSONResponse(body.model_dump(mode="json"), status_code=202 if outcome is Cancelled.CANCELLING else 200)


_CANCEL_STATUS = {Cancelled.CANCELLED: "cancelled", Cancelled.CANCELLING: "cancelling", Cancelled.DETACHED: "cancelled"}


@router.get(
    "/result/{task_id}",
    operation_id="task_result",
    responses={
        200: {
            "description": "The audio as it was stored (the submit's `format`); with an audio `format` or a `sample_rate`, "
            "that audio converted; with a caption `format`, its captions instead.",
            "content": {t: {} for t in sorted({*CONTENT_TYPES.values(), *_AUDIO_CONTENT_TYPES, *CAPTION_CONTENT_TYPES.values()})},
        },
        202: {
            "model": TaskStatus,
            "description": "Not ready yet (with `wait`: not within it); poll again after `Retry-After` seconds.",
            "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}, "required": True}},
        },
        404: _NOT_FOUND,
        409: _FAILED,
        503: LONG_POLL_UNAVAILABLE,
        **AUTH_RESPONSES,
    },
    summary="Download the audio of a finished task",
)
async def task_result(
    task_id: str,
    tasks: TasksDep,
    listening: ListeningDep,
    caller: TTSCaller,
    request: Request,
    wait: WaitQuery = None,
    format: Annotated[
        CaptionFormat | TtsqName | None,
        Query(
            description="Captions instead of the audio: `srt`, `vtt` (WebVTT) or `json` (a list of cues), one per chunk. "
            "Or the audio in another format: wav, pcm, mp3, opus, aac, flac, mulaw or alaw (converted from the stored "
            "file; default: as stored)."
        ),
    ] = None,
    sample_rate: SampleRateQuery = None,
) -> Response:
    """With ``wait``, a task still queued or running is waited for, up to that many seconds (a long-poll). With a
    caption ``format``, a finished task's captions: one cue per synthesised chunk, timed exactly by the joined audio.
    With an audio ``format`` or a ``sample_rate``, the stored file converted (the stored file itself when it already
    is that format)."""
    if format in CAPTION_CONTENT_TYPES and sample_rate is not None:
        raise _query_error("sample_rate", f"captions ({format}) have no sample rate", sample_rate)
    if sample_rate is not None and sample_rate not in COMMON_RATES:  # whatever the task turns out to hold
        rates = ", ".join(map(str, COMMON_RATES))
        raise _query_error("sample_rate", f"{sample_rate} Hz is not supported; ttsq makes audio at {rates} Hz", sample_rate)
    asked = _output_format(format, sample_rate) if format in TTSQ_NAMES else None
    if wait:
        _waits(await tasks.job(task_id, caller), wait, listening, caller, request)
    download = await tasks.download(task_id, caller, wait or 0.0)
    if download.audio is not None and download.job.params.refine_only:
        # A refine task's result is its text ({"text": ...}), whatever was asked: it has no audio or captions to convert.
        return Response(content=download.audio, media_type=download.job.content_type)
    if download.audio is not None and download.job.params.document and format not in CAPTION_CONTENT_TYPES:
        # A document's audio is its stream's (docs/documents.md): encoded as it is read, never held whole.
        streamed = asked or _output_format(download.job.params.format, sample_rate)  # type: ignore[arg-type]  # a ttsq name
        return StreamingResponse(
            listening.audio(task_id, streamed),
            media_type=streamed.content_type,
            headers={"Content-Disposition": f'attachment; filename="{task_id}.{streamed.extension}"'},
        )
    if download.audio is not None and format in CAPTION_CONTENT_TYPES:
        captions = listening.captions(download.job, format)  # type: ignore[arg-type]  # a caption format
        if captions is None:
            raise HTTPException(404, f"task {task_id!r} has no captions: its result was stored before captions were recorded")
        return Response(content=captions, media_type=CAPTION_CONTENT_TYPES[format])
    fmt = _download_format(download.job, asked, sample_rate) if download.audio is not None else None
    if download.audio is not None and fmt is not None:
        return Response(
            content=await listening.stored(download.job, download.audio, fmt),
            media_type=fmt.content_type,
            headers={"Content-Disposition": f'attachment; filename="{task_id}.{fmt.extension}"'},
        )
    if download.audio is not None:
        return Response(
            content=download.audio,
            media_type=download.job.content_type,
            headers={"Content-Disposition": f'attachment; filename="{task_id}.{download.job.params.format}"'},
        )
    body = download.status.model_dump(mode="json") if download.status is not None else {}
    if download.job.status in (Status.FAILED, Status.CANCELLED):
        return JSONResponse(status_code=409, content=body)
    return JSONResponse(status_code=202, content=body, headers={"Retry-After": str(_poll_after_s(download.job))})


def _poll_after_s(job: Job) -> int:
    """Running jobs are polled sooner than queued ones; a client may always poll faster."""
    return 1 if job.status is Status.RUNNING else 2


@router.get(
    "/stream/{task_id}",
    operation_id="task_stream",
    responses={
        200: {
            "description": "The audio as it is produced, encoded piece by piece into one file: WAV with an open-ended "
            "header, raw PCM16 LE mono, mp3, Ogg Opus, ADTS AAC, FLAC, or raw G.711 µ-law/A-law; at 24 kHz or the "
            "`sample_rate` asked for.",
            "content": {t: {} for t in _AUDIO_CONTENT_TYPES},
        },
        404: _NOT_FOUND,
        409: _FAILED,
        **ERROR_RESPONSES,
        **AUTH_RESPONSES,
        **TOO_MANY_STREAMS_RESPONSES,
    },
    summary="Stream a task's audio sentence by sentence (works while it is queued or running)",
)
async def task_stream(
    task_id: str,
    tasks: TasksDep,
    listening: ListeningDep,
    caller: StreamCaller,
    guard: Guarded,
    format: Annotated[
        TtsqName,
        Query(
            description="wav (open-ended header), pcm (raw PCM16 LE), mp3, opus (Ogg), aac (ADTS), flac, mulaw or alaw "
            "(raw G.711, 8 kHz unless `sample_rate` says otherwise): any of them streams"
        ),
    ] = "wav",
    sample_rate: SampleRateQuery = None,
) -> Response:
    """Refused with 503 ``no_worker`` before it starts when the task has not ended and no worker is alive to make its
    audio; a stream whose last worker goes away is broken off (no end of file: the audio is incomplete). A
    ``format``/``sample_rate`` pair ttsq cannot make is a 422 before anything else."""
    fmt = _output_format(format, sample_rate)
    job = await tasks.job(task_id, caller)
    if job.status in (Status.FAILED, Status.CANCELLED):
        return JSONResponse(status_code=409, content=(await tasks.status(job)).model_dump(mode="json"))
    await listening.require_workers(job)
    return StreamingResponse(
        guard(listening.audio(task_id, fmt)),
        media_type=fmt.content_type,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


@router.get(
    "/events/{task_id}",
    operation_id="task_events",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "`event: status` with a JSON `data` line each time the task changes, until it ends; "
            "`event: timing` as each chunk's audio is published (where its speech lies in the joined audio, and its "
            "text: a live caption cue); `event: error` if the job store becomes unreachable meanwhile, no worker is left "
            "alive to run the task (its `code` is `no_worker`), or the key is revoked or expires (`unauthorized`). Every "
            "event but `error` has an `id:`; a client that reconnects with `Last-Event-ID` resumes right after it.",
            "content": {
                "text/event-stream": {
                    "schema": {
                        "oneOf": [
                            sse_schema(component_schema(TaskEvent), event="status"),
                            sse_schema(component_schema(TimingEvent), event="timing"),
                            sse_schema(component_schema(ErrorBody), event="error"),
                        ]
                    }
                }
            },
        },
        404: _NOT_FOUND,
        **AUTH_RESPONSES,
        **TOO_MANY_STREAMS_RESPONSES,
    },
    summary="Server-sent `status` events (queue position, chunks done/total) and `timing` events until the task ends",
)
async def task_events(
    task_id: str,
    tasks: TasksDep,
    listening: ListeningDep,
    caller: StreamCaller,
    guard: Guarded,
    last_event_id: Annotated[
        str | None, Header(description="The `id` of the last event received: the stream resumes right after it.")
    ] = None,
) -> StreamingResponse:
    """The task is looked up before the stream starts, so an unknown id is a plain 404 (not a 200 whose
    stream then breaks), and a task no worker is alive to run is a 503 ``no_worker``. Once streaming, the status is
    already sent, so a Redis outage, or the last worker going away, ends the stream with an ``error`` event instead of
    a broken connection or a silence."""
    job = await tasks.job(task_id, caller)
    await listening.require_workers(job)

    async def events() -> AsyncIterator[str]:
        try:
            async for batch in guard(listening.events(job, caller, last_event_id)):
                yield "".join(
                    f"id: {event.id}\nevent: {event.kind}\ndata: {_event_json(event.data)}\n\n"
                    for event in batch
                )
        except StoreUnavailable:
            log.warning("task %s: event stream ended, Redis unreachable", task_id, exc_info=True)
            detail = {"detail": "the job store (Redis) became unreachable; reconnect shortly"}
            yield f"event: error\ndata: {json.dumps(detail)}\n\n"
        except (NoWorker, KeyRevoked) as exc:
            log.warning("task %s: event stream ended: %s", task_id, exc)
            yield f"event: error\ndata: {json.dumps({'detail': str(exc), 'code': exc.code})}\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})
