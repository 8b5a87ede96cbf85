"""One logging set-up for every ttsq process (the API under uvicorn, the worker, ``make up``).

Lines go to standard output (the container and systemd way), one per event, prefixed with time,
level and logger; uvicorn's own loggers are routed through the same handler (its access log only
when uvicorn runs with one).
"""

from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def configure_logging(level: str) -> None:
    """Send every logger's records to stdout at ``level``; calling it again only changes the level."""
    root = logging.getLogger()
    if not any(getattr(handler, "ttsq", False) for handler in root.handlers):
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(FORMAT))
        handler.ttsq = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        if logger.handlers:  # configured by uvicorn: route through ours (--no-access-log leaves none, and stays off)
            logger.handlers.clear()
            logger.propagate = True
