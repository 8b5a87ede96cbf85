"""FastAPI dependencies shared by the routers, as ``Annotated`` aliases.

The app's lifespan (``app.py``) builds the settings, Redis clients, queue and cache once and
keeps them on ``app.state``; routes receive them through these aliases. The providers are
``async def`` on purpose: FastAPI runs plain ``def`` dependencies in a thread pool, a hop that
cost about a sixth of a submit's time (profiled).
"""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import Depends, Request

from settings import Settings
from ttsq.cache import ResultCache
from ttsq.queue import JobQueue
from ttsq.task_ids import TaskIdSigner
from ttsq.voices import VoiceRegistry


async def get_app_settings(request: Request) -> Settings:
    return cast(Settings, request.app.state.settings)


async def get_queue(request: Request) -> JobQueue:
    return cast(JobQueue, request.app.state.queue)


async def get_voices(request: Request) -> VoiceRegistry:
    return cast(VoiceRegistry, request.app.state.voices)


async def get_cache(request: Request) -> ResultCache:
    return cast(ResultCache, request.app.state.cache)


async def get_signer(request: Request) -> TaskIdSigner:
    """The task-id signer; without a configured secret, the shared one is fetched from Redis once."""
    state = request.app.state
    if state.signer is None:
        state.signer = TaskIdSigner(await cast(JobQueue, state.queue).shared_secret())
    return cast(TaskIdSigner, state.signer)


SettingsDep = Annotated[Settings, Depends(get_app_settings)]
QueueDep = Annotated[JobQueue, Depends(get_queue)]
CacheDep = Annotated[ResultCache, Depends(get_cache)]
SignerDep = Annotated[TaskIdSigner, Depends(get_signer)]
VoicesDep = Annotated[VoiceRegistry, Depends(get_voices)]


def model_notice(settings: Settings) -> str | None:
    """Say loudly when the configured model has random weights (its audio is noise)."""
    if settings.model == "tiny":
        return "MODEL=tiny: random-weight test checkpoint, the audio is noise (for testing only)"
    return None
