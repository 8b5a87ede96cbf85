"""FastAPI dependencies shared by the routers, as ``Annotated`` aliases.

The app's lifespan (``app.py``) builds the service once and keeps it on ``app.state``; routes
receive it through :data:`ServiceDep`. The provider is ``async def`` on purpose: FastAPI runs
plain ``def`` dependencies in a thread pool, a hop that cost about a sixth of a submit's time
(profiled).
"""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import Depends, Request

from ttsq.api.service import TTSService


async def get_service(request: Request) -> TTSService:
    return cast(TTSService, request.app.state.service)


ServiceDep = Annotated[TTSService, Depends(get_service)]
