"""How a stored record reads back a list that one of the store's Lua scripts rewrote.

Redis's Lua ``cjson`` cannot tell an empty array from an empty object: a record a script decodes and encodes again
(claim, cancel, complete, fail) comes back with every empty list written as ``{}``. Every list field of a record
that a script may rewrite is a :data:`StoredList`, which reads ``{}`` as ``[]``, so that such a record still loads —
a worker that cannot load a job it has claimed cannot fail it either.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

from pydantic import BeforeValidator

__all__ = ["StoredList"]

T = TypeVar("T")


def _empty_object_as_list(value: object) -> object:
    return [] if isinstance(value, dict) and not value else value


StoredList = Annotated[list[T], BeforeValidator(_empty_object_as_list)]
"""A list field of a stored record: ``{}`` (an empty list as Lua's cjson writes it) reads as ``[]``."""
