"""FastAPI dependencies shared by the routers, as ``Annotated`` aliases.

The app's lifespan (``app.py``) builds the use cases' services (:class:`ttsq.api.service.TTSService`) and the
authenticator once and keeps them on ``app.state``; routes receive them through these aliases, each router family its
own service (``TasksDep``, ``ListeningDep``, ``VoicesDep``, ``DictionaryDep``, ``DrawsDep``, ``AdminDep``, ``StylesDep``,
``RefineDep``; the streaming-text WebSockets the session engine, ``SessionsDep``, which takes each connection's stream
slot from ``ListeningService`` as the streaming routes' caller does).

FastAPI solves every dependency (and sub-dependency) of a route on every request, so a route has
few: its use cases' services, and its caller. The caller is one security dependency that reads the key from
either header itself (``X-API-Key``, else ``Authorization: Bearer``): FastAPI's ``HTTPBearer`` and
``APIKeyHeader`` as sub-dependencies cost two more solves per request (profiled: solving
dependencies was about a fifth of a submit's time with them). FastAPI documents it as the bearer
scheme; :func:`document_security` adds the header scheme beside it wherever it appears, so the
OpenAPI document still offers both. Providers are ``async def``: FastAPI runs plain ``def``
dependencies in a thread pool.

Who may call what: ``TTSCaller`` (scope ``tts``: submit, read and cancel one's own tasks, list
voices), ``AdminCaller`` (scope ``admin``: voices, dead letters, everyone's tasks), ``MetricsCaller``
(scope ``metrics``: ``/metrics``) and ``KeyedCaller`` (any key: the documentation), each only where
keys are required. A submit's
token is not taken here but by the service, inside the script that queues the job (one round trip).

The caller is known before the body is read: FastAPI reads a route's body before it solves the route's
dependencies, so :func:`authenticate_before_body` (which :func:`ttsq.api.bodies.strict_json` calls when the route
starts reading) runs the route's caller first and keeps the outcome in the request's state; a caller refused there
gets its 401 or 403 without a byte of its body read or parsed (an unauthenticated 8 MiB JSON array held the event
loop for 8 s before its 401), and the dependency answers from that outcome instead of asking again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, TypeVar, cast

from fastapi import Depends, Request, Security
from fastapi.dependencies.models import Dependant
from fastapi.openapi.models import APIKey, APIKeyIn, HTTPBearer
from fastapi.security.base import SecurityBase
from starlette.requests import HTTPConnection
from starlette.types import Scope as AsgiScope

from ttsq.api.auth import Authenticator, Forbidden, Principal, Scope, presented_key, until_revoked
from ttsq.api.errors import raise_refused_body
from ttsq.api.service import (
    ROUTE_KINDS,
    AdminService,
    DialogueService,
    DictionaryService,
    DrawService,
    KeyRevoked,
    ListeningService,
    RefineService,
    StyleService,
    TaskService,
    TTSService,
    VoiceService,
)
from ttsq.api.sessions.engine import Sessions

BEARER_SCHEME = "HTTPBearer"
HEADER_SCHEME = "APIKeyHeader"
T = TypeVar("T")
HEADER_SCHEME_MODEL = APIKey(**{"in": APIKeyIn.header}, name="X-API-Key", description="An API key.")
CALLER = "ttsq_caller"
"""Where :func:`authenticate_before_body` keeps the route's caller, or what refused it, in the request's state."""


def _services(request: Request) -> TTSService:
    return cast(TTSService, request.app.state.service)


def _use_case(name: str) -> Callable[[Request], Awaitable[Any]]:
    """The dependency that hands a route the use case ``name`` of the app's services (``TTSService.<name>``)."""

    async def service(request: Request) -> Any:
        return getattr(_services(request), name)

    return service


TasksDep = Annotated[TaskService, Depends(_use_case("tasks"))]
ListeningDep = Annotated[ListeningService, Depends(_use_case("listening"))]
VoicesDep = Annotated[VoiceService, Depends(_use_case("voicing"))]
DictionaryDep = Annotated[DictionaryService, Depends(_use_case("dictionary"))]
DrawsDep = Annotated[DrawService, Depends(_use_case("drawing"))]
AdminDep = Annotated[AdminService, Depends(_use_case("admin"))]
StylesDep = Annotated[StyleService, Depends(_use_case("styling"))]
RefineDep = Annotated[RefineService, Depends(_use_case("refining"))]
DialogueDep = Annotated[DialogueService, Depends(_use_case("dialogue"))]


def app_state(name: str) -> Callable[[HTTPConnection], Awaitable[Any]]:
    """The dependency that hands a route (or a WebSocket route) what the app's lifespan keeps on ``app.state`` as
    ``name``: for what is neither a use case nor the caller (the realtime routes' session engine)."""

    async def provide(connection: HTTPConnection) -> Any:
        return getattr(connection.app.state, name)

    return provide


SessionsDep = Annotated[Sessions, Depends(app_state("sessions"))]
"""The session engine under every streaming-text WebSocket (its limits, ``REALTIME_*``), built once by the app's
lifespan."""


class ApiKeyCaller(SecurityBase):
    """Who is calling, for a route that needs ``scope``: the key from ``X-API-Key`` or ``Authorization:
    Bearer`` (:func:`ttsq.api.auth.presented_key`), or an anonymous caller where keys are optional.

    Raises :class:`~ttsq.api.auth.Unauthorized` (401) and :class:`~ttsq.api.auth.Forbidden` (403),
    which ``ttsq.api.errors`` answers in the route's own error shape.
    """

    def __init__(self, scope: Scope | None, *, stream: bool = False) -> None:
        self.scope = scope
        """None: any valid key (where keys are required) will do."""
        self.stream = stream
        """The route streams for as long as its task lasts: the caller takes one of the process's stream slots."""
        self.model = HTTPBearer(description="An API key as a bearer token (what the OpenAI SDK sends).")
        self.scheme_name = BEARER_SCHEME

    async def __call__(self, request: Request) -> Principal:
        principal = await self.authenticate(request)
        raise_refused_body(request)  # only now: a caller without a valid key learns nothing of its body
        if self.stream:
            route = getattr(request.scope.get("route"), "path", "")
            _services(request).listening.open_stream(principal, request.state, ROUTE_KINDS.get(route, "events"))
        return principal

    async def authenticate(self, request: Request) -> Principal:
        """The caller with this route's scope, or the exception that refuses it; found once per request (the
        outcome of :func:`authenticate_before_body`, when the route has a body, is used again here)."""
        known = getattr(request.state, CALLER, None)
        if isinstance(known, Exception):
            raise known
        if isinstance(known, Principal):
            principal = known
        else:
            authenticator = cast(Authenticator, request.app.state.authenticator)
            presented = self.presented(request)
            principal = await authenticator.principal(presented, request.client.host if request.client else "unknown")
        if self.scope is not None and not principal.allows(self.scope):
            raise Forbidden(self.scope)
        return principal

    def presented(self, request: Request) -> str | None:
        """The key ``request`` carries: ``X-API-Key`` (or ElevenLabs' ``xi-api-key``), else ``Authorization: Bearer``.
        A route that speaks another vendor's protocol may read that vendor's places too (a subclass: Google's
        ``x-goog-api-key`` and ``?key=``); the key is then checked exactly as here, with the same scopes, limits and
        tenant."""
        headers = request.headers
        # ElevenLabs' clients send their key as xi-api-key: the same key, in their header.
        return presented_key(headers.get("authorization"), headers.get("x-api-key") or headers.get("xi-api-key"))


def _route_caller(dependant: Dependant) -> ApiKeyCaller | None:
    for dependency in dependant.dependencies:
        if isinstance(dependency.call, ApiKeyCaller):
            return dependency.call
        found = _route_caller(dependency)
        if found is not None:
            return found
    return None


async def authenticate_before_body(scope: AsgiScope) -> bool:
    """Whether the body of the request in ``scope`` may be read: its route's caller is authenticated and authorised
    first (the outcome kept in the request's state for the route's dependency). False, and nothing is read, for a
    caller that is refused — or that cannot be checked (Redis down): the dependency raises what happened, in the
    route's error shape, instead of FastAPI's body reader calling it a malformed body (400)."""
    route = scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return True
    caller = _route_caller(dependant)  # a walk over a route's few dependencies
    if caller is None:
        return True
    request = Request(scope)
    try:
        outcome: Principal | Exception = await caller.authenticate(request)
    except Exception as exc:  # noqa: BLE001 - kept, and raised by the route's dependency in its error shape
        outcome = exc
    setattr(request.state, CALLER, outcome)
    return isinstance(outcome, Principal)


TTSCaller = Annotated[Principal, Security(ApiKeyCaller("tts"))]
AdminCaller = Annotated[Principal, Security(ApiKeyCaller("admin"))]
StreamCaller = Annotated[Principal, Security(ApiKeyCaller("tts", stream=True))]
"""A ``tts`` caller of a route that streams until its task ends: 429 past its share of streams, 503 past the process's."""
StreamGuard = Callable[[AsyncIterator[T]], AsyncIterator[T]]


async def stream_guard(request: Request, caller: StreamCaller) -> StreamGuard[Any]:
    """What a streaming route wraps its body (or the pieces it formats) in: for a caller with a key, the stream raises
    :class:`~ttsq.api.stream_slots.KeyRevoked` once the key is revoked or expires (asked every ``STREAM_KEY_RECHECK_S``:
    :func:`ttsq.api.auth.until_revoked`) — an event stream says so, a raw body is broken off; a keyless caller's is
    as is."""
    authenticator = cast(Authenticator, request.app.state.authenticator)
    every_s = cast(float, request.app.state.stream_key_recheck_s)
    key = caller.key

    async def still_valid() -> bool:
        if key is None or not await authenticator.store.still_valid(key):
            raise KeyRevoked
        return True

    def guard(source: AsyncIterator[Any]) -> AsyncIterator[Any]:
        return source if key is None else until_revoked(source, still_valid, every_s)

    return guard


Guarded = Annotated[StreamGuard[Any], Depends(stream_guard)]
"""The stream guard of a route whose caller is a :data:`StreamCaller` (the same caller, solved once)."""
MetricsCaller = Annotated[Principal, Security(ApiKeyCaller("metrics"))]
"""``/metrics``: where keys are required, a key with scope ``metrics`` (or ``admin``), as Prometheus sends it."""
KeyedCaller = Annotated[Principal, Security(ApiKeyCaller(None))]
"""Any valid key where keys are required: the API's documentation (``API_DOCS=auto``)."""


def document_security(schema: dict[str, Any]) -> dict[str, Any]:
    """Offer ``X-API-Key`` in ``schema`` (an OpenAPI document of our own, changed in place and returned) wherever the
    bearer scheme is: a caller may present its key either way."""
    secured = False
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            security = operation.get("security") if isinstance(operation, dict) else None
            if security and {BEARER_SCHEME: []} in security and {HEADER_SCHEME: []} not in security:
                security.insert(security.index({BEARER_SCHEME: []}) + 1, {HEADER_SCHEME: []})
                secured = True
    if secured:
        schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
        schemes[HEADER_SCHEME] = HEADER_SCHEME_MODEL.model_dump(mode="json", by_alias=True, exclude_none=True)
    return schema
