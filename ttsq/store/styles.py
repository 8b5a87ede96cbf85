"""The style registry: built-in styles, global styles, and each tenant's own, in Redis hashes — kept as voices are.

A style belongs to a tenant (the sharing scope of the key that made it: ``tenant:<name>``, or ``key:<id>`` for a key
that is a tenant of its own) or is global by an admin's choice (``owner`` None: the built-in catalogue and a shared
one). A tenant sees, and resolves names among, the built-in styles, its own and the global ones, never another
tenant's: its own hash is the only one its names are looked up in besides the global hash (docs/voices.md#tenants has
the rules, which styles follow).
"""

from __future__ import annotations

import time

from ttsq.domain.sampling import SamplingPreset
from ttsq.domain.styles import BUILTIN_STYLES, Style, StyleConflict, builtin_style, builtin_styles
from ttsq.store.connection import RedisClient
from ttsq.store.keys import Keys

__all__ = ["StyleRegistry"]


class StyleRegistry:
    """Built-in styles plus stored ones: ``{ns}:styles`` (global) and ``{ns}:styles:<owner>`` (a tenant's), each a hash
    of name → JSON. Every method takes the ``owner`` whose view it acts in (None: the global catalogue alone); a name
    resolves to a built-in style, else the owner's own, else a global one."""

    def __init__(self, redis: RedisClient, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    def _hash(self, owner: str | None) -> str:
        return self.keys.styles if owner is None else self.keys.tenant_styles(owner)

    async def list(self, owner: str | None) -> list[Style]:
        """The styles ``owner`` sees: built-in, then its own and the global ones by name (its own where both have one)."""
        stored = await self.redis.hgetall(self.keys.styles)
        users = {style.name: style for style in map(Style.model_validate_json, stored.values())}
        if owner is not None:
            own = await self.redis.hgetall(self.keys.tenant_styles(owner))
            users.update((style.name, style) for style in map(Style.model_validate_json, own.values()))
        return builtin_styles() + [users[name] for name in sorted(users)]

    async def get(self, name: str, owner: str | None) -> Style | None:
        """The style ``name`` means to ``owner``: built-in, its own, else global; None when it sees none by that name."""
        found = builtin_style(name)
        if found is not None:
            return found
        raw = None if owner is None else await self.redis.hget(self.keys.tenant_styles(owner), name)
        if raw is None:
            raw = await self.redis.hget(self.keys.styles, name)
        return None if raw is None else Style.model_validate_json(raw)

    async def create(self, name: str, owner: str | None, preset: SamplingPreset) -> Style:
        """Store ``preset`` as ``owner``'s style ``name``; :class:`StyleConflict` when the name is built in, taken in
        ``owner``'s hash, or a global style's (which a tenant's own would hide from it). Another tenant's names are never
        looked at: a conflict must not tell one tenant what another has."""
        if name in BUILTIN_STYLES:
            raise StyleConflict(f"{name!r} is a built-in style's name")
        if owner is not None and await self.redis.hexists(self.keys.styles, name):
            raise StyleConflict(f"a style named {name!r} already exists")
        style = Style.model_validate({**preset.settings(), "name": name, "owner": owner, "created_at": time.time()})
        if not await self.redis.hsetnx(self._hash(owner), name, style.model_dump_json()):
            raise StyleConflict(f"a style named {name!r} already exists")
        return style

    async def delete(self, name: str, owner: str | None) -> bool:
        """Delete the style ``name`` means to ``owner`` (its own, else the global one); False when it sees none.
        :class:`StyleConflict` for a built-in style."""
        if name in BUILTIN_STYLES:
            raise StyleConflict(f"{name!r} is a built-in style and cannot be deleted")
        if owner is not None and await self.redis.hdel(self.keys.tenant_styles(owner), name):
            return True
        return bool(await self.redis.hdel(self.keys.styles, name))
