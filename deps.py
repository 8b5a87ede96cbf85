"""FastAPI dependencies shared by the routers, as ``Annotated`` aliases.

The app's lifespan (``app.py``) builds the settings, Redis client and queue once and keeps
them on ``app.state``; routes receive them through these aliases.
"""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import Depends, Request

from settings import Settings
from ttsq.queue import JobQueue


def get_app_settings(request: Request) -> Settings:
    return cast(Settings, request.app.state.settings)


def get_queue(request: Request) -> JobQueue:
    return cast(JobQueue, request.app.state.queue)


SettingsDep = Annotated[Settings, Depends(get_app_settings)]
QueueDep = Annotated[JobQueue, Depends(get_queue)]


def model_notice(settings: Settings) -> str | None:
    """Say loudly when the configured model has random weights (its audio is noise)."""
    if settings.model == "tiny":
        return "MODEL=tiny: random-weight test checkpoint, the audio is noise (for testing only)"
    return None
