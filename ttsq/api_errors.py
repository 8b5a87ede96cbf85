"""Error responses shared by the API routers: clear sentences, never stack traces.

A Redis outage becomes ``503`` with ``Retry-After`` (the client's job is not lost: it was either
never acknowledged, or it is safe in Redis); a full queue becomes ``429`` with ``Retry-After``.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from ttsq.queue import QueueFullError
from ttsq.schemas import ErrorBody, ValidationErrorBody

log = logging.getLogger(__name__)

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    422: {"model": ValidationErrorBody, "description": "Invalid input; `detail` names the field and the problem."},
    503: {
        "model": ErrorBody,
        "description": "Redis is unreachable; retry after the `Retry-After` seconds.",
        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
    },
}


def field_error(field: str, message: str, value: Any = None) -> RequestValidationError:
    """A 422 in FastAPI's own format for a check that needs settings (so it can't live in the model)."""
    return RequestValidationError([{"type": "value_error", "loc": ("body", field), "msg": message, "input": value}])


def install_error_handlers(app: FastAPI, retry_after_s: int) -> None:
    async def redis_down(_: Request, exc: Exception) -> JSONResponse:
        log.warning("Redis unavailable: %s", exc)
        return JSONResponse(
            status_code=503,
            content={"detail": "the job store (Redis) is unreachable; please retry shortly"},
            headers={"Retry-After": str(retry_after_s)},
        )

    async def queue_full(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(status_code=429, content={"detail": str(exc)}, headers={"Retry-After": str(retry_after_s)})

    app.add_exception_handler(RedisError, redis_down)
    app.add_exception_handler(QueueFullError, queue_full)
