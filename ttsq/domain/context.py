"""Which request and which task the current piece of work belongs to, for every log line about it.

Context variables follow asyncio tasks and ``run_in_executor`` calls (which copy the context), so
the API sets the request id once per request and the task id once it knows it, and the worker
sets the task id while it handles a job; the log formatter (:mod:`ttsq.runtime.logs`) adds both
to every line. One ``grep <task id>`` then follows a job across the API and the workers.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator
from contextvars import ContextVar

request_id: ContextVar[str | None] = ContextVar("ttsq_request_id", default=None)
task_id: ContextVar[str | None] = ContextVar("ttsq_task_id", default=None)

_WELL_FORMED = re.compile(r"[A-Za-z0-9._:-]{1,128}")
"""What a client-supplied ``X-Request-ID`` may be: short, no spaces or control characters (it is logged)."""


def accept_request_id(offered: str | None) -> str:
    """The client's request id when it is well formed, else a fresh one (a client cannot inject log lines)."""
    if offered is not None and _WELL_FORMED.fullmatch(offered):
        return offered
    return uuid.uuid4().hex


@contextlib.contextmanager
def working_on(task: str | None) -> Iterator[None]:
    """Attribute the log lines inside to ``task``."""
    token = task_id.set(task)
    try:
        yield
    finally:
        task_id.reset(token)
