"""What a request body may be: JSON as RFC 8259 defines it, in UTF-8 — anything else is a 4xx that names the field.

Python's ``json`` module reads more than JSON: ``NaN``, ``Infinity`` and ``-Infinity``; numbers of any length
(``1e400`` becomes ``inf``; an integer of thousands of digits costs quadratic time and, past 4,300 digits,
raises); lone surrogates (``"\\ud800"``, which no UTF-8 encoder can write back); and duplicate keys, the last
one silently winning. Such values reached the request models, and a non-finite number or a lone surrogate then
broke the 422 answer itself, whose strict JSON and UTF-8 encoding of the echoed input failed: a 500, a dropped
connection and an ERROR traceback that any caller could cause at will. NUL characters and nesting deeper than
:data:`MAX_DEPTH` are refused too: no field needs them. :func:`read_json` is the one reader of these rules.

What reading may cost is bounded before the reader runs. Python's reader holds the event loop (and the GIL) for as
long as it takes, about a second per 4 million numbers here, and the body is read twice (here, then by FastAPI);
so a body of more than :data:`MAX_VALUES` values or nested past :data:`MAX_DEPTH` is refused from a count of its
brackets and commas (:func:`_shape_problem`: ``bytes.count`` when the count alone proves the body small, else a
scan of its tokens that stops at the first value over either bound), and never parsed. A body longer than
:data:`OFF_LOOP_BYTES` (only a reference recording's route takes one) is checked in a thread.

:func:`strict_json` (a middleware) applies them on every route that takes a JSON body, when the route reads it
(routes without a body never have theirs read). A refused body — not JSON, one of the values above, or sent
with another ``Content-Type`` (415) — is handed to the route as no body at all, and the refusal is kept in the
request's state; the caller dependency (``deps.py``) raises it once the caller is authenticated
(:func:`ttsq.api.errors.raise_refused_body`), so a caller without a valid key gets its 401 and learns nothing,
not even what is wrong with its body. Before reading a byte of the body it asks ``before_body`` (``deps.py``:
the route's caller is authenticated and authorised first) and reads nothing for a caller that is refused, whose
answer then closes the connection.
Outside it, ``BodyLimitMiddleware`` bounds what is read.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.message import Message as MimeMessage
from typing import Any

from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "MAX_DEPTH",
    "MAX_NUMBER_CHARS",
    "MAX_VALUES",
    "OFF_LOOP_BYTES",
    "REFUSAL",
    "UnsupportedMediaType",
    "read_json",
    "strict_json",
]

MAX_DEPTH = 32
"""Deepest nesting of arrays and objects a body may have (every request body of this API is one flat object)."""

MAX_NUMBER_CHARS = 64
"""Longest number literal, in characters: far past any field's range, short of what makes parsing costly."""

MAX_VALUES = 1_000
"""Most values (counted as its commas and opening brackets) a body may hold: the largest body of this API is one
object of a few dozen, and what reading costs grows with them."""

OFF_LOOP_BYTES = 65_536
"""A body longer than this is checked in a thread: ``MAX_BODY_BYTES``'s default, so only the routes with a larger
limit of their own (a reference recording, ``MAX_VOICE_BODY_BYTES``) send one there."""

MAX_ERRORS = 10
"""Most refusals named in one answer."""

REFUSAL = "ttsq_refused_body"
"""Where the middleware keeps a refused body's exception, in the request's state."""


class UnsupportedMediaType(HTTPException):
    """415: a body sent as something other than JSON in UTF-8."""

    def __init__(self, content_type: str | None) -> None:
        got = f"got {content_type!r}" if content_type else "got none"
        super().__init__(415, f"Content-Type must be application/json (UTF-8); {got}")


@dataclass(frozen=True)
class _Refused:
    """A value that Python's reader accepts and JSON does not; it stands in the parsed body where it was found."""

    reason: str
    key: str | None = None
    """For an object with a duplicated key: that key (the refusal is about it, inside the object)."""


def _number(literal: str) -> _Refused | None:
    if len(literal) > MAX_NUMBER_CHARS:
        return _Refused(f"a number of {len(literal)} characters; at most {MAX_NUMBER_CHARS} are read")
    return None


def _int(literal: str) -> int | _Refused:
    return _number(literal) or int(literal)


def _float(literal: str) -> float | _Refused:
    refused = _number(literal)
    if refused is not None:
        return refused
    value = float(literal)
    return value if math.isfinite(value) else _Refused(f"{literal} is out of range for a number")


def _constant(name: str) -> _Refused:
    return _Refused(f"{name} is not JSON: a number must be finite")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any] | _Refused:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            return _Refused(f"the key {_printable(key)!r} appears more than once", key)
        found[key] = value
    return found


def _printable(text: str) -> str:
    """``text`` with lone surrogates written as ``\\udXXX``, so an answer that names it can be encoded."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _string_problem(text: str) -> str | None:
    if "\x00" in text:
        return "contains NUL (U+0000)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"contains a lone surrogate (U+{ord(text[exc.start]):04X}), which is not text"
    return None


Loc = tuple[str | int, ...]


def _problems(value: Any) -> list[tuple[Loc, str]]:
    """Every refused value in a parsed body, in document order, with where it is (at most :data:`MAX_ERRORS`)."""
    found: list[tuple[Loc, str]] = []
    pending: list[tuple[Loc, Any]] = [((), value)]
    while pending and len(found) < MAX_ERRORS:
        loc, item = pending.pop()
        if len(loc) > MAX_DEPTH:
            found.append((loc[:MAX_DEPTH], f"nested more than {MAX_DEPTH} levels deep"))
        elif isinstance(item, _Refused):
            found.append(((*loc, _printable(item.key)) if item.key is not None else loc, item.reason))
        elif isinstance(item, str):
            problem = _string_problem(item)
            if problem is not None:
                found.append((loc, problem))
        elif isinstance(item, dict):
            children: list[tuple[Loc, Any]] = []
            for key, child in item.items():
                problem = _string_problem(key)
                if problem is not None:
                    found.append(((*loc, _printable(key)), f"a key that {problem}"))
                children.append(((*loc, key), child))
            pending.extend(reversed(children))
        elif isinstance(item, list):
            pending.extend(reversed([((*loc, index), child) for index, child in enumerate(item)]))
    return found


_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]')
"""A JSON string or one structural character: what :func:`_shape_problem` steps over (numbers and literals are
skipped by the scanner, in C)."""


def _shape_problem(body: bytes) -> tuple[Loc, str] | None:
    """Where ``body`` nests past :data:`MAX_DEPTH` or holds more than :data:`MAX_VALUES` values, and which, read from
    its brackets and commas before any parsing (the field: the top-level key it happened under). Counting the
    bytes proves most bodies small at once (a bracket or comma inside a string only adds to the count); the rest are
    scanned token by token, and the scan stops at the first value past a bound, so its steps are bounded too."""
    opens = body.count(b"[") + body.count(b"{")
    if opens <= MAX_DEPTH and opens + body.count(b",") <= MAX_VALUES:
        return None
    depth = values = 0
    key: str | None = None
    last: bytes | None = None
    for step, token in enumerate(_TOKEN.finditer(body)):
        if step > 4 * MAX_VALUES:  # a key, a colon, a value and a comma per value, at most: the rest is not JSON
            return (() if key is None else (key,)), f"more than {MAX_VALUES} values; a request body holds at most {MAX_VALUES}"
        text = token.group()
        if text[:1] == b'"':
            last = text
            continue
        if text in b"[{":
            depth += 1
            values += 1
            if depth > MAX_DEPTH:
                return (() if key is None else (key,)), f"nested more than {MAX_DEPTH} levels deep"
        elif text in b"]}":
            depth -= 1
        elif text == b",":
            values += 1
            if depth == 1:
                key = None
        elif depth == 1 and last is not None:  # a colon after a top-level key
            try:
                key = _printable(json.loads(last))
            except ValueError:
                key = last[1:-1].decode("utf-8", "backslashreplace")
        if values > MAX_VALUES:
            return (() if key is None else (key,)), f"more than {MAX_VALUES} values; a request body holds at most {MAX_VALUES}"
        last = None
    return None


def _error(loc: Loc, message: str) -> dict[str, Any]:
    return {"type": "json_invalid", "loc": ("body", *loc), "msg": message, "input": None}


def read_json(body: bytes) -> Any:
    """``body`` as JSON by RFC 8259's rules (in UTF-8), or :class:`RequestValidationError` naming each refused field."""
    shape = _shape_problem(body)
    if shape is not None:
        raise RequestValidationError([_error(*shape)])
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestValidationError([_error((), "the request body is not JSON in UTF-8")]) from exc
    try:
        value = json.loads(text, parse_constant=_constant, parse_int=_int, parse_float=_float, object_pairs_hook=_object)
    except RecursionError as exc:  # only where the scan and the reader disagree about a malformed body
        raise RequestValidationError([_error((), f"nested more than {MAX_DEPTH} levels deep")]) from exc
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise RequestValidationError([_error((), f"the request body is not JSON: {exc.msg} ({where})")]) from exc
    problems = _problems(value)
    if problems:
        raise RequestValidationError([_error(loc, message) for loc, message in problems])
    return value


def _json_media_type(content_type: str | None) -> bool:
    """``application/json`` or ``application/*+json`` (what FastAPI parses as JSON), in UTF-8 if a charset is named."""
    if not content_type:
        return False
    header = MimeMessage()
    header["content-type"] = content_type
    subtype = header.get_content_subtype()
    charset = header.get_param("charset")
    json_type = header.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))
    return json_type and (not isinstance(charset, str) or charset.lower().replace("-", "") == "utf8")


def _refusal(content_type: str | None, body: bytes) -> Exception | None:
    if not _json_media_type(content_type):
        return UnsupportedMediaType(content_type)
    try:
        read_json(body)
    except RequestValidationError as refused:
        return refused
    return None


def strict_json(app: ASGIApp, before_body: Callable[[Scope], Awaitable[bool]] | None = None) -> ASGIApp:
    """``app`` with the body of every route that reads a JSON body checked as it is read (see the module's docstring);
    a middleware factory for ``app.add_middleware``. ``before_body``: whether the body may be read at all (False:
    the route gets no body, and nothing is read from the client)."""

    async def checked_app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        checked = unread = False

        async def checking() -> Message:
            nonlocal checked, unread
            # The router has put the matched route in the scope by the time the route reads its body.
            if checked or getattr(scope.get("route"), "body_field", None) is None:
                return await receive()
            checked = True
            if before_body is not None and not await before_body(scope):
                unread = True
                return {"type": "http.request", "body": b"", "more_body": False}
            chunks: list[bytes] = []
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return message
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    break
            body = b"".join(chunks)
            content_type = next((value.decode("latin-1") for name, value in scope["headers"] if name == b"content-type"), None)
            if not body:
                refusal = None
            elif len(body) > OFF_LOOP_BYTES:
                refusal = await asyncio.to_thread(_refusal, content_type, body)
            else:
                refusal = _refusal(content_type, body)
            if refusal is not None:
                scope.setdefault("state", {})[REFUSAL] = refusal
                body = b""
            return {"type": "http.request", "body": body, "more_body": False}

        async def closing(message: Message) -> None:
            """The answer to a refused caller closes the connection: its body was never read, and a client that goes
            on sending it (or trickling it) would otherwise keep the connection."""
            if unread and message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        await app(scope, checking, closing)

    return checked_app
