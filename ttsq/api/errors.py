"""Every error answer of the API, in one place: clear sentences, never stack traces.

Two shapes, chosen by route family:

* the native API (``/v1/tts``, ``/v1/voices``, probes) answers ``{"detail": "..."}``, and 422 with
  FastAPI's list of ``{loc, msg, type}`` entries for invalid input;
* the OpenAI-compatible routes (``/v1/audio/...``) answer OpenAI's
  ``{"error": {"message", "type", "param", "code"}}`` for every status, and 400 for invalid input,
  so the OpenAI SDKs raise their usual exception types.

A Redis outage becomes ``503`` with ``Retry-After`` (the client's job is not lost: it was either
never acknowledged, or it is safe in Redis); a full queue becomes ``429`` with ``Retry-After``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from redis.exceptions import RedisError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ttsq.api.metrics import SUBMIT_ROUTES, SubmitOutcome
from ttsq.api.schemas import ErrorBody, OpenAIErrorBody, ValidationErrorBody
from ttsq.api.service import InvalidInput, TaskNotFound
from ttsq.domain.voices import VoiceError
from ttsq.store.queue import QueueFullError

log = logging.getLogger(__name__)

OPENAI_PREFIX = "/v1/audio"

_RETRY_AFTER = {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait before retrying."}}

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    422: {"model": ValidationErrorBody, "description": "Invalid input; `detail` names the field and the problem."},
    503: {"model": ErrorBody, "description": "Redis is unreachable; retry after `Retry-After` seconds.", "headers": _RETRY_AFTER},
}
"""The errors every native route can answer, for the OpenAPI schema."""

QUEUE_FULL_RESPONSE: dict[str, Any] = {
    "model": ErrorBody,
    "description": "The queue is full; retry after `Retry-After` seconds.",
    "headers": _RETRY_AFTER,
}

OPENAI_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": OpenAIErrorBody, "description": "Invalid request."},
    429: {
        "model": OpenAIErrorBody,
        "description": "The queue is full; retry after `Retry-After` seconds.",
        "headers": _RETRY_AFTER,
    },
    500: {"model": OpenAIErrorBody, "description": "Synthesis failed."},
    503: {
        "model": OpenAIErrorBody,
        "description": "Redis is unreachable; retry after `Retry-After` seconds.",
        "headers": _RETRY_AFTER,
    },
}

_OPENAI_TYPES = {400: "invalid_request_error", 404: "invalid_request_error", 429: "rate_limit_error"}


def openai_error(status: int, message: str, param: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    body = {"error": {"message": message, "type": kind, "param": param, "code": None}}
    return JSONResponse(status_code=status, content=body, headers=headers)


def error_response(
    request: Request, status: int, message: str, *, param: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    """``{"detail": message}``, or OpenAI's error body on the OpenAI-compatible routes."""
    if request.url.path.startswith(OPENAI_PREFIX):
        return openai_error(status, message, param, headers)
    return JSONResponse(status_code=status, content={"detail": message}, headers=headers)


def invalid_field(field: str, message: str, value: Any = None) -> RequestValidationError:
    """A 422 in FastAPI's own format, for a check that cannot live in the request model."""
    return RequestValidationError([{"type": "value_error", "loc": ("body", field), "msg": message, "input": value}])


_OPENAI_FIELD_NAMES = {"text": "input", "format": "response_format"}
"""The native request's field names as an OpenAI client knows them."""


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

    async def queue_full(request: Request, exc: Exception) -> Response:
        rejected(request, "queue_full")
        return error_response(request, 429, str(exc), headers=retry)

    async def not_found(request: Request, exc: Exception) -> Response:
        return error_response(request, 404, str(exc))

    async def voice_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, VoiceError)
        if exc.status == 422:
            return await invalid(request, invalid_field("embedding", str(exc)))
        return error_response(request, exc.status, str(exc))

    async def invalid_input(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, InvalidInput)
        return await invalid(request, invalid_field(exc.field, exc.message, exc.value))

    async def invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        rejected(request, "invalid")
        if not request.url.path.startswith(OPENAI_PREFIX):
            return await request_validation_exception_handler(request, exc)
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        param = str(first["loc"][-1]) if first.get("loc") else None
        field = _OPENAI_FIELD_NAMES.get(param or "", param)
        return openai_error(400, f"{field}: {first['msg']}" if field else str(first["msg"]), field)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        headers = dict(exc.headers) if exc.headers else None
        return error_response(request, exc.status_code, str(exc.detail), headers=headers)

    app.add_exception_handler(RedisError, redis_down)
    app.add_exception_handler(QueueFullError, queue_full)
    app.add_exception_handler(TaskNotFound, not_found)
    app.add_exception_handler(VoiceError, voice_error)
    app.add_exception_handler(InvalidInput, invalid_input)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
