"""FastAPI dependencies shared by the routers, as ``Annotated`` aliases.

The app's lifespan (``app.py``) builds the service (which owns the rate limiter) and the
authenticator once and keeps them on ``app.state``; routes receive them through these aliases. Providers are
``async def`` on purpose: FastAPI runs plain ``def`` dependencies in a thread pool, a hop that cost
about a sixth of a submit's time (profiled).

Who may call what: ``TTSCaller`` (scope ``tts``: submit, read and cancel one's own tasks, list
voices) and ``AdminCaller`` (scope ``admin``: voices, dead letters, everyone's tasks). A submit's
token is not taken here but by the service, inside the script that queues the job (one round trip).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, cast

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from ttsq.api.auth import Authenticator, Forbidden, Principal
from ttsq.api.service import TTSService
from ttsq.store.api_keys import Scope

_bearer = HTTPBearer(auto_error=False, description="An API key as a bearer token (what the OpenAI SDK sends).")
_api_key = APIKeyHeader(name="X-API-Key", auto_error=False, description="An API key.")


async def get_service(request: Request) -> TTSService:
    return cast(TTSService, request.app.state.service)


ServiceDep = Annotated[TTSService, Depends(get_service)]


def _caller(scope: Scope) -> Callable[..., Awaitable[Principal]]:
    async def caller(
        request: Request,
        bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
        api_key: Annotated[str | None, Depends(_api_key)],
    ) -> Principal:
        authenticator = cast(Authenticator, request.app.state.authenticator)
        presented = api_key or (bearer.credentials if bearer is not None else None)
        principal = await authenticator.principal(presented, request.client.host if request.client else "unknown")
        if not principal.allows(scope):
            raise Forbidden(scope)
        request.state.principal = principal
        return principal

    return caller


TTSCaller = Annotated[Principal, Depends(_caller("tts"))]
AdminCaller = Annotated[Principal, Depends(_caller("admin"))]

