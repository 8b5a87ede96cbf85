"""The client's errors: one hierarchy under :class:`TTSError`, and which one an HTTP answer raises.

:class:`InvalidRequest` (422), :class:`TaskFailed`, :class:`TaskNotFound` / :class:`VoiceNotFound` (404),
:class:`NotReady`, :class:`Conflict` (409 on voices), :class:`ServiceBusy` (429/503, retried by ``submit``) and
:class:`ConnectionFailed` (the service could not be reached). :mod:`ttsq.client.sdk` re-exports them all.
"""

from __future__ import annotations

import email.utils
import time
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from ttsq.client.sdk import TaskStatus

__all__ = [
    "Conflict",
    "ConnectionFailed",
    "InvalidRequest",
    "NotFound",
    "NotReady",
    "ServiceBusy",
    "TTSError",
    "TaskFailed",
    "TaskNotFound",
    "VoiceNotFound",
]


class TTSError(Exception):
    """Base of every error this client raises. ``status_code`` is the HTTP status, when there was one."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class InvalidRequest(TTSError):
    """422: the server refused the input. ``detail`` is its list of ``{loc, msg, ...}`` entries."""

    def __init__(self, detail: list[dict[str, Any]]) -> None:
        self.detail = detail
        super().__init__("; ".join(f"{_field_name(item)}: {item.get('msg', 'invalid')}" for item in detail), status_code=422)

    @property
    def fields(self) -> list[str]:
        """The names of the refused fields, e.g. ``["speed"]``."""
        return [_field_name(item) for item in self.detail]


class NotFound(TTSError):
    """404."""


class TaskNotFound(NotFound):
    """The task id is unknown, forged, or its result has expired."""


class VoiceNotFound(NotFound):
    pass


class Conflict(TTSError):
    """409 on voices: the name is taken, or a built-in voice cannot be deleted."""


class TaskFailed(TTSError):
    """The task failed for good; ``error`` is the server's reason."""

    def __init__(self, task_id: str, error: str | None, status: TaskStatus | None = None) -> None:
        self.task_id = task_id
        self.error = error
        self.status = status
        super().__init__(f"task {task_id} failed: {error or 'no reason given'}")


class NotReady(TTSError):
    """The result was asked for while the task is still queued or running (202)."""

    def __init__(self, task_id: str, retry_after_s: float | None, status: TaskStatus | None) -> None:
        self.task_id = task_id
        self.retry_after_s = retry_after_s
        self.status = status
        state = status.status if status else "not finished"
        super().__init__(f"task {task_id} is {state}; its result is not ready yet", status_code=202)


class ServiceBusy(TTSError):
    """429 (queue full) or 503 (the job store is unreachable); safe to retry after ``retry_after_s``."""

    def __init__(self, message: str, *, status_code: int, retry_after_s: float | None) -> None:
        super().__init__(message, status_code=status_code)
        self.retry_after_s = retry_after_s


class ConnectionFailed(TTSError):
    """The service could not be reached, or did not answer in time."""


def _field_name(item: dict[str, Any]) -> str:
    loc = [str(part) for part in item.get("loc") or []]
    if len(loc) > 1 and loc[0] in ("body", "query", "path"):
        loc = loc[1:]
    return ".".join(loc) or "request"


def response_json(response: httpx.Response) -> Any:
    """The body as JSON, or None where it is not."""
    try:
        return response.json()
    except ValueError:
        return None


def retry_after_s(response: httpx.Response) -> float | None:
    """The answer's ``Retry-After`` in seconds from now (given as seconds or as an HTTP date), or None."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def raise_for_status(response: httpx.Response, not_found: type[NotFound] = NotFound) -> None:
    """Raise the matching :class:`TTSError` for an error response; return on success."""
    code = response.status_code
    if code < 400:
        return
    body = response_json(response)
    detail = body.get("detail") if isinstance(body, dict) else None
    if code == 422:
        if isinstance(detail, list):
            raise InvalidRequest([item if isinstance(item, dict) else {"msg": str(item)} for item in detail])
        raise InvalidRequest([{"msg": str(detail or response.text)}])
    message = detail if isinstance(detail, str) else (response.text.strip() or response.reason_phrase)
    if code in (429, 503):
        raise ServiceBusy(message, status_code=code, retry_after_s=retry_after_s(response))
    if code == 404:
        raise not_found(message, status_code=code)
    if code == 409:
        raise Conflict(message, status_code=code)
    raise TTSError(f"HTTP {code}: {message}", status_code=code)
