"""How a stored record reads back: one that one of the store's Lua scripts rewrote, and one that does not load as it is.

Redis's Lua ``cjson`` cannot tell an empty array from an empty object: a record a script decodes and encodes again
(claim, cancel, complete, fail) comes back with every empty list written as ``{}``. Every list field of a record
that a script may rewrite is a :data:`StoredList`, which reads ``{}`` as ``[]``, so that such a record still loads —
a worker that cannot load a job it has claimed cannot fail it either.

A record may also not load for reasons nobody here foresaw: written by a newer or older release (a field of another
type, a value this one does not take). :func:`salvaged` reads what of it does load, with stand-ins for the rest, and
:func:`unreadable_reason` says what did not, in a sentence a person can read: what the job record's reader
(:meth:`Job.stored <ttsq.domain.jobs.Job.stored>`) needs so that one such record fails its job instead of stopping
whoever reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ValidationError

__all__ = ["StoredList", "salvaged", "unreadable_reason"]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

_REASON_CHARS = 400
"""The longest reason kept: enough for a few fields' messages, short enough for a status body and a log line."""


def _empty_object_as_list(value: object) -> object:
    return [] if isinstance(value, dict) and not value else value


StoredList = Annotated[list[T], BeforeValidator(_empty_object_as_list)]
"""A list field of a stored record: ``{}`` (an empty list as Lua's cjson writes it) reads as ``[]``."""


def salvaged(model: type[M], data: object, fallbacks: Mapping[str, object]) -> M:
    """``data`` (a decoded record) as ``model``, every top-level field that does not load replaced: by its value in
    ``fallbacks`` when it has one, else by the field's default. Raises :class:`ValidationError` when that is still not
    enough (a required field without a fallback did not load). Not a reading of the record: a stand-in for it, made of
    what did load, for whoever must end or show a record it cannot use."""
    fields: dict[str, Any] = dict(data) if isinstance(data, dict) else {}
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        bad = {str(error["loc"][0]) for error in exc.errors() if error["loc"]}
    kept = {name: value for name, value in fields.items() if name not in bad}
    return model.model_validate({**kept, **{name: fallbacks[name] for name in bad if name in fallbacks}})


def unreadable_reason(what: str, error: ValidationError) -> str:
    """Why ``what`` could not be read, for a person: each field that did not load and pydantic's message for it (never
    the value: it may be a user's text), shortened."""
    problems = "; ".join(f"{'.'.join(str(part) for part in e['loc']) or 'the record'}: {e['msg']}" for e in error.errors())
    reason = f"{what} could not be read: {problems}"
    return reason if len(reason) <= _REASON_CHARS else reason[: _REASON_CHARS - 1] + "…"
