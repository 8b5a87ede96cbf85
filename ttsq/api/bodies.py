"""What a request body may be: JSON as RFC 8259 defines it, in UTF-8 — anything else is a 4xx that names the field.

Python's ``json`` module reads more than JSON: ``NaN``, ``Infinity`` and ``-Infinity``; numbers of any length
(``1e400`` becomes ``inf``; an integer of thousands of digits costs quadratic time and, past 4,300 digits,
raises); lone surrogates (``"\\ud800"``, which no UTF-8 encoder can write back); and duplicate keys, the last
one silently winning. Such values reached the request models, and a non-finite number or a lone surrogate then
broke the 422 answer itself, whose strict JSON and UTF-8 encoding of the echoed input failed: a 500, a dropped
connection and an ERROR traceback that any caller could cause at will. NUL characters and nesting deeper than
:data:`MAX_DEPTH` are refused too: no field needs them. :func:`read_json` is the one reader of these rules.

:func:`strict_json` (a middleware) applies them on every route that takes a JSON body, when the route reads it
(routes without a body never have theirs read). A refused body — not JSON, one of the values above, or sent
with another ``Content-Type`` (415) — is handed to the route as no body at all, and the refusal is kept in the
request's state; the caller dependency (``deps.py``) raises it once the caller is authenticated
(:func:`ttsq.api.errors.raise_refused_body`), so a caller without a valid key gets its 401 and learns nothing,
not even what is wrong with its body. Outside it, ``BodyLimitMiddleware`` bounds what is read.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from email.message import Message as MimeMessage
from typing import Any

from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["MAX_DEPTH", "MAX_NUMBER_CHARS", "REFUSAL", "UnsupportedMediaType", "read_json", "strict_json"]

MAX_DEPTH = 32
"""Deepest nesting of arrays and objects a body may have (every request body of this API is one flat object)."""

MAX_NUMBER_CHARS = 64
"""Longest number literal, in characters: far past any field's range, short of what makes parsing costly."""

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


def _too_deep(text: str) -> Loc:
    """The top-level field whose value nests past :data:`MAX_DEPTH` (empty: the body itself), read by counting
    brackets outside strings — only for a body too deep for the reader, so ordinary bodies never pay for it."""
    depth, key, last, start = 0, None, None, 0
    in_string = escaped = False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
                last = text[start : index + 1]
        elif char == '"':
            in_string, start = True, index
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return () if key is None else (key,)
        elif char in "]}":
            depth -= 1
        elif depth == 1 and char == ":" and last is not None:
            try:
                key = _printable(json.loads(last))
            except ValueError:
                key = last[1:-1]
        elif depth == 1 and char == ",":
            key = None
    return ()


def _error(loc: Loc, message: str) -> dict[str, Any]:
    return {"type": "json_invalid", "loc": ("body", *loc), "msg": message, "input": None}


def read_json(body: bytes) -> Any:
    """``body`` as JSON by RFC 8259's rules (in UTF-8), or :class:`RequestValidationError` naming each refused field."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestValidationError([_error((), "the request body is not JSON in UTF-8")]) from exc
    try:
        value = json.loads(
            text, parse_constant=_constant, parse_int=_int, parse_float=_float, object_pairs_hook=_object
        )
    except RecursionError as exc:  # nested about a thousand levels deep: find the field it happened in
        raise RequestValidationError([_error(_too_deep(text), f"nested more than {MAX_DEPTH} levels deep")]) from exc
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


def strict_json(app: ASGIApp) -> ASGIApp:
    """``app`` with the body of every route that reads a JSON body checked as it is read (see the module's docstring);
    a middleware factory for ``app.add_middleware``."""

    async def checked_app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        checked = False

        async def checking() -> Message:
            nonlocal checked
            # The router has put the matched route in the scope by the time the route reads its body.
            if checked or getattr(scope.get("route"), "body_field", None) is None:
                return await receive()
            checked = True
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
            refusal = _refusal(content_type, body) if body else None
            if refusal is not None:
                scope.setdefault("state", {})[REFUSAL] = refusal
                body = b""
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, checking, send)

    return checked_app
