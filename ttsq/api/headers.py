"""Browser-facing hardening: the web page may run no inline script, be framed by no one, leak no referrer.

Every answer gets ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer`` and
``X-Frame-Options: DENY``; the page and its static files also get a Content-Security-Policy that
allows only the page's own script, styles and connections (the OpenAPI docs at ``/docs`` load
their script from a CDN and are left without it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; media-src 'self' blob:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_ALWAYS = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY")]
_PAGE = [(b"content-security-policy", CONTENT_SECURITY_POLICY.encode())]


def _is_page(path: str) -> bool:
    return path == "/" or path.startswith("/static/")


class SecurityHeadersMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = _ALWAYS + (_PAGE if _is_page(scope["path"]) else [])

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)


class BodyTooLarge(HTTPException):
    """A request body over its route's limit (``MAX_BODY_BYTES``, or the larger one a route has): answered 413 before
    it is parsed. An HTTP exception, so FastAPI's body parsing passes it through instead of calling it a malformed
    body (400). The message names the setting that sets the limit, so an operator knows which one to raise."""

    def __init__(self, limit: int, setting: str = "MAX_BODY_BYTES") -> None:
        super().__init__(413, f"the request body is larger than {limit} bytes ({setting}); nothing was read or queued")
        self.limit = limit


class BodyTimedOut(HTTPException):
    """A request body that did not arrive whole within its time (``BODY_READ_TIMEOUT_S``): answered 408, and the
    connection is closed (``Connection: close``), so a client that declared more than it sends cannot hold it."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(
            408,
            f"the request body did not arrive within {timeout_s:g} s (BODY_READ_TIMEOUT_S); nothing was read or queued",
            headers={"Connection": "close"},
        )


def declared_length(values: list[bytes]) -> int | None:
    """The body length that ``Content-Length`` field values declare, read as HTTP reads them (RFC 9110, 5.5 and 8.6):
    the whitespace around a field value is not part of it, and a list of identical lengths (several fields, or one
    with commas) declares that length. None when they declare no single length (the streamed count still applies).

    ``isdigit`` alone refused ``"200000000 "`` (a trailing space) as a length, so a 200 MB declaration skipped the
    immediate 413 and was counted as it streamed instead.
    """
    lengths = {part.strip(b" \t") for value in values for part in value.split(b",")}
    if len(lengths) != 1:
        return None
    (length,) = lengths
    return int(length) if length.isdigit() and len(length) <= 19 else None


class BodyLimitMiddleware:
    """Refuse a body over ``max_bytes`` before anything reads it, or one that does not arrive in ``read_timeout_s``.

    A declared ``Content-Length`` over the limit is refused at once, without reading a byte of the
    body; a body without one (chunked) is counted as it streams in and refused the moment it passes
    the limit. Either way :class:`BodyTooLarge` reaches the app's error handlers, which answer 413 in
    the route's own error shape (native or OpenAI). Starlette's own limiter answers in plain text
    and replaces the app's answer, so it is not used.

    The whole body must come within ``read_timeout_s`` of the app's first read of it, else
    :class:`BodyTimedOut` (408, and the connection closed): uvicorn has no such deadline, and a body that
    declared more than it sent held its connection for as long as the client liked (≥ 200 s measured).
    Once the body is complete, reads pass through untimed (a streamed answer reads on, for the disconnect).
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        larger: Mapping[str, tuple[int, str]] | None = None,
        read_timeout_s: float | None = None,
    ) -> None:
        self.app = app
        self.read_timeout_s = read_timeout_s
        self.max_bytes = max_bytes
        self.larger = dict(larger or {})
        """Paths whose bodies may be larger (a reference recording on ``POST /v1/voices``): path → (limit, the
        setting's name)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, setting = self.larger.get(scope["path"], (self.max_bytes, "MAX_BODY_BYTES"))
        declared = declared_length([value for name, value in scope["headers"] if name == b"content-length"])
        too_large = declared is not None and declared > limit
        received = 0
        complete = False
        deadline: float | None = None

        async def counting() -> Message:
            nonlocal received, complete, deadline
            if too_large:  # refused before a byte of the body is read
                raise BodyTooLarge(limit, setting)
            if complete or self.read_timeout_s is None:
                return await receive()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.read_timeout_s if deadline is None else deadline
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyTimedOut(self.read_timeout_s) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                complete = not message.get("more_body", False)
                if received > limit:
                    raise BodyTooLarge(limit, setting)
            return message

        await self.app(scope, counting, send)
