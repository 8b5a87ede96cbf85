"""One logging set-up for every ttsq process (the API under uvicorn, the worker, ``make up``).

Lines go to standard output (the container and systemd way), one per event, as text
(``time level logger [request task] message``) or as one JSON object per line for a log pipeline
(``LOG_FORMAT=json``). Every line carries the request id and the task id of the work it is about
(:mod:`ttsq.domain.context`), so one grep follows a job from its submit through the worker. The
API's access lines come from ttsq's own middleware in the same format (uvicorn's access log is
off); uvicorn's other loggers are routed through the same handler.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

from pythonjsonlogger.json import JsonFormatter

from ttsq.domain import context

LogFormat = Literal["text", "json"]

TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s%(ids)s: %(message)s"


class _ContextFilter(logging.Filter):
    """Adds ``request_id`` and ``task_id`` (and a compact ``ids`` for text lines) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        request, task = context.request_id.get(), context.task_id.get()
        record.request_id = request
        record.task_id = task
        parts = [f"req={request}" if request else "", f"task={task}" if task else ""]
        record.ids = f" [{' '.join(part for part in parts if part)}]" if request or task else ""
        return True


def formatter(fmt: LogFormat) -> logging.Formatter:
    if fmt == "json":
        return JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s %(task_id)s",
            rename_fields={"levelname": "level", "name": "logger", "asctime": "time"},
            timestamp=False,
        )
    return logging.Formatter(TEXT_FORMAT)


def configure_logging(level: str, fmt: LogFormat = "text") -> None:
    """Send every logger's records to stdout at ``level`` in ``fmt``; calling it again replaces the handler."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "ttsq", False)]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(formatter(fmt))
    handler.addFilter(_ContextFilter())
    handler.ttsq = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        if logger.handlers:  # configured by uvicorn: route through ours (--no-access-log leaves none, and stays off)
            logger.handlers.clear()
            logger.propagate = True
