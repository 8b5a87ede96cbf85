"""Every error answer of the API, in one place: clear sentences, never stack traces.

Three shapes, chosen by route family:

* the native API (``/v1/tts``, ``/v1/voices``, probes) answers ``{"detail": "..."}``, and 422 with
  FastAPI's list of ``{loc, msg, type}`` entries for invalid input;
* the OpenAI-compatible routes (``/v1/audio/...``) answer OpenAI's
  ``{"error": {"message", "type", "param", "code"}}`` for every status, and 400 for invalid input,
  so the OpenAI SDKs raise their usual exception types;
* ElevenLabs' routes (``/v1/text-to-speech/...``, ``/v1/text-to-dialogue``) answer ElevenLabs'
  ``{"detail": {"status", "message"}}``, and for invalid input the 422 of FastAPI's list, which is ElevenLabs' own (its
  API is FastAPI's too); a voice the caller sees none of is its ``404 voice_not_found``.
* Cartesia's routes (``/tts/...``) answer Cartesia's ``{"error_code", "title", "message", "request_id"}`` (and
  ``param``, the field at fault), 400 for invalid input;
* Google Cloud's route (``/v1/text:synthesize``) answers ``{"error": {"code", "message", "status"}}`` (a
  ``google.rpc.Status``: ``INVALID_ARGUMENT`` with a ``BadRequest`` detail naming each field, ``UNAUTHENTICATED``, …).

A Redis outage becomes ``503`` with ``Retry-After`` (the client's job is not lost: it was either
never acknowledged, or it is safe in Redis). A submit the store refuses — the queue full, the key at its
cap of queued jobs, or its token bucket empty — becomes ``429`` with ``Retry-After``, here and nowhere
else: the use cases let the store's exceptions through as they are.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from redis.exceptions import RedisClusterException, RedisError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Mount

from ttsq.api.auth import Forbidden, Unauthorized
from ttsq.api.bodies import REFUSAL
from ttsq.api.metrics import SUBMIT_ROUTES, SubmitOutcome
from ttsq.api.schemas import (
    CartesiaErrorBody,
    ElevenLabsErrorBody,
    ErrorBody,
    GoogleErrorBody,
    OpenAIErrorBody,
    ValidationErrorBody,
)
from ttsq.api.service import InvalidInput, NoWorker, TaskNotFound, UnknownVoice
from ttsq.api.stream_slots import TooManyStreams
from ttsq.domain import context
from ttsq.domain.voices import VoiceError
from ttsq.store.queue import QueueFullError
from ttsq.store.rate_limit import RateLimitExceeded

log = logging.getLogger(__name__)

OPENAI_PREFIX = "/v1/audio"
ELEVENLABS_PREFIXES = ("/v1/text-to-speech/", "/v1/text-to-dialogue")
"""ElevenLabs' routes: text-to-speech (``elevenlabs_api.py``) and text-to-dialogue (``dialogue_api.py``)."""
CARTESIA_PREFIX = "/tts/"
GOOGLE_PREFIX = "/v1/text:"

_RETRY_AFTER = {"Retry-After": {"schema": {"type": "integer", "minimum": 1}, "required": True, "description": "Seconds to wait."}}
RATE_LIMIT_HEADERS: dict[str, Any] = {
    "RateLimit-Limit": {"schema": {"type": "integer", "minimum": 0}, "description": "Submits this caller may make at once."},
    "RateLimit-Remaining": {"schema": {"type": "integer", "minimum": 0}, "description": "Submits left before the limit applies."},
    "RateLimit-Reset": {"schema": {"type": "integer", "minimum": 0}, "description": "Seconds until the bucket is full again."},
}
"""What every answer of a submit route says about the caller's rate limit (absent when the answer came before it
was looked at, e.g. a body over the size limit)."""

_WWW_AUTHENTICATE = {"WWW-Authenticate": {"schema": {"type": "string"}, "required": True, "description": "`Bearer`."}}

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    422: {"model": ValidationErrorBody, "description": "Invalid input; `detail` names the field and the problem."},
    503: {"model": ErrorBody, "description": "Redis is unreachable; retry after `Retry-After` seconds.", "headers": _RETRY_AFTER},
}
"""The errors every native route can answer, for the OpenAPI schema."""

BODY_TOO_LARGE_RESPONSE: dict[str, Any] = {
    "model": ErrorBody,
    "description": "The request body is larger than `MAX_BODY_BYTES`; nothing was read or queued.",
}
"""413, on every route that takes a body."""

BODY_TIMEOUT_RESPONSE: dict[str, Any] = {
    "model": ErrorBody,
    "description": "The request body did not arrive whole within `BODY_READ_TIMEOUT_S`; the connection is closed and "
    "nothing was queued.",
}
"""408, on every route that takes a body (:class:`ttsq.api.headers.BodyTimedOut`)."""

UNSUPPORTED_MEDIA_TYPE_RESPONSE: dict[str, Any] = {
    "model": ErrorBody,
    "description": "The body is not sent as `application/json` in UTF-8 (`Content-Type`); nothing was read.",
}
"""415, on every route that takes a body (:mod:`ttsq.api.bodies`)."""

AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "An API key is needed, or the one sent is not valid.", "headers": _WWW_AUTHENTICATE},
    403: {"model": ErrorBody, "description": "The API key lacks the scope this route needs."},
}

TOO_MANY_STREAMS_RESPONSES: dict[int | str, dict[str, Any]] = {
    429: {
        "model": ErrorBody,
        "description": "This caller, or its tenant, holds its share of the process's streams (`MAX_STREAMS_PER_KEY`, "
        "`MAX_STREAMS_PER_TENANT`); retry after `Retry-After` seconds, or close one.",
        "headers": _RETRY_AFTER,
    },
    503: {
        "model": ErrorBody,
        "description": "Redis is unreachable, this process serves its limit of streams (`MAX_STREAMS`), or no worker is "
        "alive to run the task (`code`: `no_worker`, `NO_WORKER_S`); retry after `Retry-After` seconds.",
        "headers": _RETRY_AFTER,
    },
}
"""What a route that streams until its task ends answers past the stream limits (:mod:`ttsq.api.stream_slots`)."""

LONG_POLL_UNAVAILABLE: dict[str, Any] = {
    "model": ErrorBody,
    "description": "Redis is unreachable, or (with `wait`) no worker is alive to run the task (`code`: `no_worker`, "
    "`NO_WORKER_S`); retry after `Retry-After` seconds.",
    "headers": _RETRY_AFTER,
}
"""503 of a route that may wait for its task to end (a long-poll, ``?wait=``)."""

QUEUE_FULL_RESPONSE: dict[str, Any] = {
    "model": ErrorBody,
    "description": "The queue is full, this key has its cap of queued jobs, it submits too fast, or "
    "(`STREAM_ADMISSION=refuse`) no worker has room for another real-time stream; retry after `Retry-After` seconds "
    "(`RateLimit-*` headers say how many submits remain).",
    "headers": {**_RETRY_AFTER, **RATE_LIMIT_HEADERS},
}

OPENAI_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": OpenAIErrorBody, "description": "Invalid request."},
    401: {
        "model": OpenAIErrorBody,
        "description": "An API key is needed, or the one sent is not valid.",
        "headers": _WWW_AUTHENTICATE,
    },
    403: {"model": OpenAIErrorBody, "description": "The API key lacks the scope this route needs."},
    429: {
        "model": OpenAIErrorBody,
        "description": "The queue is full, this key has its cap of queued jobs, or it submits too fast; retry after "
        "`Retry-After` seconds.",
        "headers": {**_RETRY_AFTER, **RATE_LIMIT_HEADERS},
    },
    503: {
        "model": OpenAIErrorBody,
        "description": "Redis is unreachable; retry after `Retry-After` seconds.",
        "headers": _RETRY_AFTER,
    },
}
"""The errors every OpenAI-compatible route can answer."""

OPENAI_SPEECH_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    **OPENAI_ERROR_RESPONSES,
    429: {
        **OPENAI_ERROR_RESPONSES[429],
        "description": "The queue is full, this key has its cap of queued jobs or of open streams (or its tenant of "
        "streams), or it submits too fast; retry after `Retry-After` seconds.",
    },
    503: {
        **OPENAI_ERROR_RESPONSES[503],
        "description": "Redis is unreachable, this process serves its limit of streams (`MAX_STREAMS`), or no worker is "
        "alive to synthesise (`code`: `no_worker`, `NO_WORKER_S`); retry after `Retry-After` seconds.",
    },
    408: {"model": OpenAIErrorBody, "description": "The request body did not arrive whole within `BODY_READ_TIMEOUT_S`."},
    413: {"model": OpenAIErrorBody, "description": "The request body is larger than `MAX_BODY_BYTES`."},
    415: {"model": OpenAIErrorBody, "description": "The body is not sent as `application/json` in UTF-8 (`Content-Type`)."},
    500: {"model": OpenAIErrorBody, "description": "Synthesis failed."},
}

ELEVENLABS_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {
        "model": ElevenLabsErrorBody,
        "description": "An API key is needed (`xi-api-key`), or the one sent is not valid.",
        "headers": _WWW_AUTHENTICATE,
    },
    403: {"model": ElevenLabsErrorBody, "description": "The API key lacks the scope `tts`."},
    404: {"model": ElevenLabsErrorBody, "description": "`voice_not_found`: the caller sees no voice by that `voice_id`."},
    408: {"model": ElevenLabsErrorBody, "description": "The request body did not arrive whole within `BODY_READ_TIMEOUT_S`."},
    413: {"model": ElevenLabsErrorBody, "description": "The request body is larger than `MAX_BODY_BYTES`."},
    415: {"model": ElevenLabsErrorBody, "description": "The body is not sent as `application/json` in UTF-8 (`Content-Type`)."},
    422: ERROR_RESPONSES[422],
    429: {
        "model": ElevenLabsErrorBody,
        "description": "The queue is full, this key has its cap of queued jobs or of open streams (or its tenant of streams), "
        "or it submits too fast; retry after `Retry-After` seconds.",
        "headers": {**_RETRY_AFTER, **RATE_LIMIT_HEADERS},
    },
    500: {"model": ElevenLabsErrorBody, "description": "Synthesis failed before any audio."},
    503: {
        "model": ElevenLabsErrorBody,
        "description": "Redis is unreachable, this process serves its limit of streams (`MAX_STREAMS`), or no worker is "
        "alive to synthesise (`status`: `no_worker`, `NO_WORKER_S`); retry after `Retry-After` seconds.",
        "headers": _RETRY_AFTER,
    },
}
"""The errors ElevenLabs' routes (text-to-speech, text-to-dialogue) can answer."""

_ELEVENLABS_STATUSES = {
    400: "invalid_request",
    401: "invalid_api_key",
    403: "missing_permissions",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "too_many_requests",
    500: "internal_error",
    503: "service_unavailable",
}
"""The ``detail.status`` of an ElevenLabs-shaped error, where the error has no ``code`` of its own."""


def elevenlabs_error(status: int, message: str, headers: dict[str, str] | None = None, code: str | None = None) -> JSONResponse:
    """ElevenLabs' error body: ``{"detail": {"status": ..., "message": ...}}``; ``status`` is ``code`` when the error
    has one a client can branch on (``no_worker``, ``voice_not_found``)."""
    kind = code or _ELEVENLABS_STATUSES.get(status, "internal_error" if status >= 500 else "invalid_request")
    return JSONResponse(status_code=status, content={"detail": {"status": kind, "message": message}}, headers=headers)


def _in_shape(responses: dict[int | str, dict[str, Any]], model: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    return {status: {**response, "model": model} for status, response in responses.items()}


CARTESIA_ERROR_RESPONSES = _in_shape(OPENAI_SPEECH_ERROR_RESPONSES, CartesiaErrorBody)
"""The errors of Cartesia's routes: those of OpenAI's speech, in Cartesia's shape."""
GOOGLE_ERROR_RESPONSES = _in_shape(OPENAI_SPEECH_ERROR_RESPONSES, GoogleErrorBody)
"""The errors of Google's route: those of OpenAI's speech, in Google's shape."""

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
}


def openai_error(
    status: int, message: str, param: str | None = None, headers: dict[str, str] | None = None, code: str | None = None
) -> JSONResponse:
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(status_code=status, content=body, headers=headers)


_CARTESIA_KINDS = {
    400: ("invalid_request", "Invalid request"),
    401: ("unauthorized", "Unauthorized"),
    403: ("forbidden", "Forbidden"),
    404: ("not_found", "Not found"),
    405: ("method_not_allowed", "Method not allowed"),
    408: ("request_timeout", "Request timeout"),
    413: ("request_too_large", "Request too large"),
    415: ("unsupported_media_type", "Unsupported media type"),
    429: ("rate_limited", "Too many requests"),
    500: ("internal_error", "Internal error"),
    503: ("unavailable", "Service unavailable"),
}

_GOOGLE_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
"""HTTP status → ``google.rpc.Code`` name, as Google's own mapping of the codes pairs them."""


def cartesia_error(
    status: int,
    message: str,
    *,
    request_id: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
    code: str | None = None,
) -> JSONResponse:
    kind, title = _CARTESIA_KINDS.get(status, ("internal_error" if status >= 500 else "invalid_request", "Error"))
    body = {"error_code": code or kind, "title": title, "message": message, "request_id": request_id, "param": param}
    return JSONResponse(status_code=status, content=body, headers=headers)


def google_error(
    status: int, message: str, *, fields: list[tuple[str, str]] | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    """``fields``: (field path, what is wrong with it) of an invalid request, as Google's ``BadRequest`` detail."""
    error: dict[str, Any] = {"code": status, "message": message, "status": _GOOGLE_STATUSES.get(status, "UNKNOWN")}
    if fields:
        violations = [{"field": field, "description": description} for field, description in fields]
        error["details"] = [{"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": violations}]
    return JSONResponse(status_code=status, content={"error": error}, headers=headers)


def _request_id(request: Request) -> str:
    return getattr(request.state, "request_id", None) or context.request_id.get() or "unknown"


def error_response(
    request: Request,
    status: int,
    message: str,
    *,
    param: str | None = None,
    headers: dict[str, str] | None = None,
    code: str | None = None,
) -> JSONResponse:
    """``{"detail": message}`` (with ``code`` when the error has one a client can branch on), or OpenAI's error body on
    the OpenAI-compatible routes."""
    path = request.url.path
    if path.startswith(OPENAI_PREFIX):
        return openai_error(status, message, param, headers, code)
    if request.url.path.startswith(ELEVENLABS_PREFIXES):
        return elevenlabs_error(status, message, headers, code)
    if path.startswith(CARTESIA_PREFIX):
        return cartesia_error(status, message, request_id=_request_id(request), param=param, headers=headers, code=code)
    if path.startswith(GOOGLE_PREFIX):
        return google_error(status, message, fields=[(param, message)] if param else None, headers=headers)
    content = {"detail": message} if code is None else {"detail": message, "code": code}
    return JSONResponse(status_code=status, content=content, headers=headers)


def raise_refused_body(request: Request) -> None:
    """Raise what :func:`ttsq.api.bodies.strict_json` refused in this request's body, if anything: a 422
    naming each field, or a 415. Called once the caller is authenticated (``deps.py``), so that a caller without a
    valid key learns nothing about its body."""
    refusal = getattr(request.state, REFUSAL, None)
    if isinstance(refusal, Exception):
        raise refusal


def invalid_field(field: str, message: str, value: Any = None) -> RequestValidationError:
    """A 422 in FastAPI's own format, for a check that cannot live in the request model."""
    return RequestValidationError([{"type": "value_error", "loc": ("body", field), "msg": message, "input": value}])


def _field_path(loc: Any, names: dict[str, str]) -> str:
    """A validation error's place as the protocols that name nested fields write it: ``voice.id``, ``body`` for the
    body as a whole (FastAPI's ``loc`` starts with where the value came from, ``body``); a native field that a check
    of the submit names (``text``) by the protocol's own name (``names``)."""
    parts = [str(part) for part in loc]
    inner = parts[1:] if parts and parts[0] in ("body", "query", "header") else parts
    path = ".".join(inner) or "body"
    return names.get(path, path)


_CARTESIA_FIELD_NAMES = {"text": "transcript"}
_GOOGLE_FIELD_NAMES = {"text": "input.text"}


_OPENAI_FIELD_NAMES = {"text": "input", "format": "response_format"}
"""The native request's field names as an OpenAI client knows them."""

_UNREADABLE_BODY = "There was an error parsing the body"
"""FastAPI's 400 detail for a body that cannot be decoded at all."""


def _unreadable_body_error() -> dict[str, Any]:
    return {"type": "json_invalid", "loc": ("body",), "msg": "the request body is not JSON in UTF-8", "input": None}


_EXPECTED = {
    "int_type": "an integer (a JSON number without a fraction, not a string)",
    "float_type": "a number (not a string or a boolean)",
    "bool_type": "true or false (not 0, 1 or a string)",
    "string_type": "a string",
}
"""Strict types, said plainly: what a field of each type takes."""


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "the boolean " + ("true" if value else "false")
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    return "an array" if isinstance(value, list) else "an object"


def _explained(error: Any) -> Any:
    """A strict type error that names what the field takes and what it got, e.g. ``refine_text`` given ``0``."""
    expected = _EXPECTED.get(error.get("type", ""))
    if expected is None:
        return error
    return {**error, "msg": f"expected {expected}, got {_json_kind(error.get('input'))}"}


_ECHO_CHARS = 1000
"""Longest string (or bytes) an answer echoes back from the input; the rest is cut."""


def _echoable(value: Any, depth: int = 0) -> Any:
    """``value`` as an answer can carry it in strict JSON and UTF-8: non-finite numbers and bytes as text, lone
    surrogates escaped, long strings cut. What a request sent is echoed in its 422, and an echo that cannot be
    encoded turned a client's mistake into a 500 (``ttsq.api.bodies`` refuses such bodies first; this holds for
    whatever else a validator echoes)."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, bytes | bytearray):
        value = bytes(value[:_ECHO_CHARS]).decode("utf-8", "replace")
    if isinstance(value, str):
        return value[:_ECHO_CHARS].encode("utf-8", "backslashreplace").decode("utf-8")
    if depth > 8:
        return "…"
    if isinstance(value, dict):
        return {_echoable(str(key), depth + 1): _echoable(item, depth + 1) for key, item in list(value.items())[:50]}
    if isinstance(value, list | tuple):
        return [_echoable(item, depth + 1) for item in list(value)[:50]]
    if value is None or isinstance(value, bool | int | float):
        return value
    return _echoable(str(value), depth + 1)


def _encodable(error: Any) -> Any:
    """A validation error whose every part (``loc``, ``msg``, ``input``, ``ctx``) survives strict JSON in UTF-8."""
    safe: dict[str, Any] = {}
    for key, value in error.items():
        if key == "loc":
            safe[key] = tuple(part if isinstance(part, int) else _echoable(part) for part in value)
        else:
            safe[key] = value if key == "url" else _echoable(value)
    return safe


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> list[str]:
    """Every method the requested path answers to, across all the routes on that path (the ``Allow`` of a 405).

    The router names only the first route whose path matches, so a path served by two routes (``GET`` and
    ``DELETE /v1/tts/tasks/{id}``) would advertise one of its methods. Each method is asked of the router
    as a request of its own would be, through the routes' public ``matches``.
    """
    scope = request.scope
    root_path = scope.get("app_root_path", scope.get("root_path", ""))  # a mount (the static files) moves root_path
    allowed = []
    for method in _METHODS:
        probe = {"type": "http", "method": method, "path": scope["path"], "root_path": root_path, "headers": []}
        for route in request.app.router.routes:
            if isinstance(route, Mount):  # the static files: GET and HEAD, whatever the path below
                full = method in ("GET", "HEAD") and route.matches(probe)[0] is Match.FULL
            else:
                full = route.matches(probe)[0] is Match.FULL
            if full:
                allowed.append(method)
                break
    return allowed


def install_error_handlers(app: FastAPI, retry_after_s: int, on_rejected_submit: Callable[[SubmitOutcome], None]) -> None:
    """``on_rejected_submit`` counts the rejections of submit routes (native and OpenAI) by outcome."""
    retry = {"Retry-After": str(retry_after_s)}

    def rejected(request: Request, outcome: SubmitOutcome) -> None:
        if getattr(request.scope.get("route"), "path", None) in SUBMIT_ROUTES:
            on_rejected_submit(outcome)

    async def redis_down(request: Request, exc: Exception) -> Response:
        log.warning("Redis unavailable: %s", exc)
        rejected(request, "unavailable")
        return error_response(request, 503, "the job store (Redis) is unreachable; please retry shortly", headers=retry)

    async def too_many(request: Request, exc: Exception) -> Response:
        """A submit the store refused: its bucket is empty (its ``RateLimit-*`` headers say when it refills), or the
        queue, or the key's share of it, is full."""
        if isinstance(exc, RateLimitExceeded):
            rejected(request, "rate_limited")
            return error_response(request, 429, str(exc), headers=exc.decision.headers())
        rejected(request, "queue_full")
        return error_response(request, 429, str(exc), headers=retry)

    async def too_many_streams(request: Request, exc: Exception) -> Response:
        """Past the caller's share of this process's streams: 429; past the process's own limit: 503 (another replica
        may have room). Both say when to come back."""
        assert isinstance(exc, TooManyStreams)
        rejected(request, "rate_limited" if exc.per_key else "unavailable")
        return error_response(request, 429 if exc.per_key else 503, str(exc), headers=retry)

    async def no_worker(request: Request, exc: Exception) -> Response:
        """A wait on a job no worker is alive to run (``NO_WORKER_S``): 503, ``code`` ``no_worker``, before any wait."""
        assert isinstance(exc, NoWorker)
        return error_response(request, 503, str(exc), headers=retry, code=NoWorker.code)

    async def not_found(request: Request, exc: Exception) -> Response:
        return error_response(request, 404, str(exc))

    async def unauthorized(request: Request, exc: Exception) -> Response:
        return error_response(request, 401, str(exc), headers={"WWW-Authenticate": 'Bearer realm="ttsq"'})

    async def forbidden(request: Request, exc: Exception) -> Response:
        return error_response(request, 403, str(exc))

    async def unexpected(request: Request, exc: Exception) -> Response:
        """A bug: the log gets the traceback (with the request id), the client a sentence and the id, never the trace."""
        log.exception("unhandled error")
        return error_response(request, 500, f"internal error; quote request id {_request_id(request)} when reporting it")

    async def voice_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, VoiceError)
        if exc.status == 422:
            return await invalid(request, invalid_field("embedding", str(exc)))
        return error_response(request, exc.status, str(exc))

    async def invalid_input(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, InvalidInput)
        if isinstance(exc, UnknownVoice) and request.url.path.startswith(ELEVENLABS_PREFIXES):
            rejected(request, "invalid")
            return elevenlabs_error(404, exc.message, code="voice_not_found")
        return await invalid(request, invalid_field(exc.field, exc.message, exc.value))

    async def invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        rejected(request, "invalid")
        exc = RequestValidationError([_encodable(_explained(error)) for error in exc.errors()], body=exc.body)
        path = request.url.path
        if path.startswith((CARTESIA_PREFIX, GOOGLE_PREFIX)):
            names = _GOOGLE_FIELD_NAMES if path.startswith(GOOGLE_PREFIX) else _CARTESIA_FIELD_NAMES
            fields = [(_field_path(error.get("loc") or (), names), str(error["msg"])) for error in exc.errors()]
            fields = fields or [("body", "invalid")]
            message = "; ".join(f"{field}: {msg}" for field, msg in fields)
            if path.startswith(GOOGLE_PREFIX):
                return google_error(400, message, fields=fields)
            return cartesia_error(400, message, request_id=_request_id(request), param=fields[0][0])
        if not path.startswith(OPENAI_PREFIX):
            return await request_validation_exception_handler(request, exc)
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        loc = first.get("loc") or ()
        param = str(loc[1] if len(loc) > 1 else loc[-1]) if loc else None  # the top-level field, however deep the error
        field = _OPENAI_FIELD_NAMES.get(param or "", param)
        return openai_error(400, f"{field}: {first['msg']}" if field else str(first["msg"]), field)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 400 and exc.detail == _UNREADABLE_BODY:
            # FastAPI's answer to a body it cannot even decode (not UTF-8): the same 422 as malformed JSON.
            return await invalid(request, RequestValidationError([_unreadable_body_error()]))
        headers = dict(exc.headers) if exc.headers else {}
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request))
        return error_response(request, exc.status_code, str(exc.detail), headers=headers or None)

    app.add_exception_handler(Unauthorized, unauthorized)
    app.add_exception_handler(Forbidden, forbidden)
    app.add_exception_handler(Exception, unexpected)
    app.add_exception_handler(RedisError, redis_down)
    app.add_exception_handler(RedisClusterException, redis_down)  # the cluster client's own: an outage too, never a 500
    app.add_exception_handler(QueueFullError, too_many)
    app.add_exception_handler(RateLimitExceeded, too_many)
    app.add_exception_handler(TooManyStreams, too_many_streams)
    app.add_exception_handler(NoWorker, no_worker)
    app.add_exception_handler(TaskNotFound, not_found)
    app.add_exception_handler(VoiceError, voice_error)
    app.add_exception_handler(InvalidInput, invalid_input)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
