"""Multipart uploads, on the routes that take a file: the form is turned into the route's JSON body before anything reads it.

``POST /v1/voices`` takes a reference recording base64 in JSON; a person with ``curl -F audio=@anna.wav`` should not
have to base64 it. Rather than give the route a second body model (and a second set of checks that could drift),
:func:`multipart_as_json` rewrites a ``multipart/form-data`` body on the listed paths into the JSON the route reads —
the file part base64 under its field name, every other part a string — and hands it on as ``application/json``.
From there the request is the JSON request: :func:`ttsq.api.bodies.strict_json`'s rules, the same model, the same
422s naming the same fields (a form field that should be a number is refused as a string would be in JSON).

It sits inside ``BodyLimitMiddleware`` (the form counts against the route's limit as sent) and outside
``strict_json``, and reads the form only when the route reads its body — after ``strict_json`` has had the caller
authenticated, so a caller without a valid key never has its form read. A form that cannot be parsed is not
answered here: the refusal is kept in the request's state, as ``strict_json`` keeps its own, and raised once the
caller is authenticated. Every other path and content type passes through untouched.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncGenerator, Collection
from email.message import Message as MimeMessage

from fastapi.exceptions import RequestValidationError
from starlette.datastructures import Headers, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ttsq.api.bodies import REFUSAL
from ttsq.api.headers import BodyTooLarge

__all__ = ["MAX_FORM_FIELDS", "multipart_as_json"]

MAX_FORM_FIELDS = 16
"""Most parts a form may have (a voice needs three)."""


def _multipart(headers: Headers) -> bool:
    content_type = headers.get("content-type")
    if not content_type:
        return False
    message = MimeMessage()
    message["content-type"] = content_type
    return message.get_content_type() == "multipart/form-data"


async def _body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _as_json(headers: Headers, body: bytes) -> bytes:
    """The form's fields as one JSON object: files base64, other parts as strings; a field sent twice is refused."""

    async def stream() -> AsyncGenerator[bytes, None]:
        yield body

    form = await MultiPartParser(
        headers, stream(), max_files=MAX_FORM_FIELDS, max_fields=MAX_FORM_FIELDS, max_part_size=len(body) + 1
    ).parse()
    fields: dict[str, str] = {}
    try:
        for name, value in form.multi_items():
            if name in fields:
                raise MultiPartException(f"the field {name!r} is sent more than once")
            fields[name] = base64.b64encode(await value.read()).decode() if isinstance(value, UploadFile) else value
    finally:
        await form.close()
    return json.dumps(fields, ensure_ascii=False).encode()


def multipart_as_json(app: ASGIApp, paths: Collection[str]) -> ASGIApp:
    """``app`` with a ``multipart/form-data`` POST to one of ``paths`` read as the JSON of its fields (see the
    module's docstring); a middleware factory for ``app.add_middleware``."""
    accepted = frozenset(paths)

    async def converting_app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in accepted:
            await app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if not _multipart(headers):
            await app(scope, receive, send)
            return
        rest = [(name, value) for name, value in scope["headers"] if name not in (b"content-type", b"content-length")]
        inner = {**scope, "headers": [*rest, (b"content-type", b"application/json")]}
        delivered = False

        async def converted() -> Message:
            """The form as JSON, read and converted only when the route reads its body: after ``strict_json`` has
            asked whether the caller may send one, so a refused caller's form is never read."""
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            try:
                body: bytes | None = await _body(receive)
            except BodyTooLarge as exc:
                # Raised here, outside the app's error handlers, it was a 500; kept like any refused body, it is the
                # route's own 413 once the caller is authenticated.
                inner.setdefault("state", {})[REFUSAL] = exc
                body = None
            try:
                as_json = b"" if body is None else await _as_json(headers, body)
            except MultiPartException as exc:
                inner.setdefault("state", {})[REFUSAL] = RequestValidationError(
                    [
                        {
                            "type": "multipart",
                            "loc": ("body",),
                            "msg": f"not the multipart form its Content-Type announces: {exc.message}",
                            "input": None,
                        }
                    ]
                )
                as_json = b""
            return {"type": "http.request", "body": as_json, "more_body": False}

        await app(inner, converted, send)

    return converting_app
