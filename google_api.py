"""Google Cloud Text-to-Speech compatible speech: ``POST /v1/text:synthesize``.

Point a client of Google's REST API at the API's root (``http://host:8000``) with a ttsq key and a ttsq voice in
``voice.name``: what its fields mean here is :mod:`ttsq.api.google` (and docs/protocols/google.md). The key is read
where Google's clients put one (``x-goog-api-key``, ``?key=``) as well as where ttsq's own do, and held to the same
scopes, limits and tenant. A request runs on the same queue, workers, cache, single-flight and limits as the native
API; Google answers with the whole audio in one JSON body, so the answer comes once the task has ended, its
``audioContent`` plain base64. A client that goes away before then gives the task up (when nobody else wants it).
Every error has Google's error body (:mod:`ttsq.api.errors`).
"""

from __future__ import annotations

import base64
from typing import Annotated

from fastapi import APIRouter, Request, Response, Security
from fastapi.responses import JSONResponse

from deps import ApiKeyCaller, ListeningDep, TasksDep, VoicesDep, stream_guard
from ttsq.api.audio_out import whole_file
from ttsq.api.auth import Principal
from ttsq.api.errors import GOOGLE_ERROR_RESPONSES, RATE_LIMIT_HEADERS, error_response
from ttsq.api.google import GoogleSynthesizeRequest, GoogleSynthesizeResponse, synthesis
from ttsq.api.schemas import IGNORED_FIELDS, SubmitRequest, field_names
from ttsq.api.service import KeyRevoked, NoWorker, Status, StreamFailed

router = APIRouter(tags=["google"])


class GoogleKeyCaller(ApiKeyCaller):
    """The caller of Google's route: its key from ``x-goog-api-key`` or the ``key`` query parameter (what Google's
    clients send), else from ttsq's own headers; checked as every key is."""

    def presented(self, request: Request) -> str | None:
        return request.headers.get("x-goog-api-key") or request.query_params.get("key") or super().presented(request)


GoogleCaller = Annotated[Principal, Security(GoogleKeyCaller("tts", stream=True))]
"""A ``tts`` caller that holds one of the process's stream slots while its task runs (as OpenAI's speech does)."""


@router.post(
    "/v1/text:synthesize",
    operation_id="google_text_synthesize",
    response_model=GoogleSynthesizeResponse,
    responses={200: {"headers": RATE_LIMIT_HEADERS}, **GOOGLE_ERROR_RESPONSES},
    summary="Google Cloud compatible text to speech",
)
async def synthesize(
    body: GoogleSynthesizeRequest,
    tasks: TasksDep,
    listening: ListeningDep,
    voices: VoicesDep,
    caller: GoogleCaller,
    request: Request,
) -> Response:
    asked = synthesis(body)
    voice = await voices.resolve_any(asked.voice, caller, "voice.name")
    native = SubmitRequest(text=asked.text, voice=voice.name, speed=asked.speed, format="pcm")
    submitted = await tasks.submit(native, caller, voice, max_text_chars=tasks.config.openai_max_input_chars)
    task_id = submitted.answer.task_id
    headers = {"X-TTSQ-Task-Id": task_id, **(submitted.rate.headers() if submitted.rate is not None else {})}
    if asked.ignored:
        headers[IGNORED_FIELDS] = field_names(asked.ignored)
    done = submitted.answer.status is Status.DONE
    sole = not done and not submitted.answer.joined  # this request is the only one that wants the job it queued
    guard = await stream_guard(request, caller)  # a key revoked while the task runs ends the wait: 401
    try:
        if not done:
            await listening.require_workers()  # no worker alive: 503 no_worker now, not an answer that never comes
        audio = await whole_file(guard(listening.pcm(task_id)), asked.output, request.receive)
    except NoWorker:
        if sole:  # nobody is left to hear it: a worker that starts later need not make it
            await tasks.abandon(task_id, caller)
        raise
    except KeyRevoked as exc:
        if sole:
            await tasks.abandon(task_id, caller)
        return error_response(request, 401, str(exc), headers={"WWW-Authenticate": 'Bearer realm="ttsq"'})
    except StreamFailed as exc:
        return error_response(request, 500, f"synthesis failed: {exc}")
    if audio is None:  # its client went away first: nobody is left to answer (499, as proxies log it)
        if sole:
            await tasks.abandon(task_id, caller)
        return Response(status_code=499)
    return JSONResponse({"audioContent": base64.b64encode(audio).decode("ascii")}, headers=headers)
