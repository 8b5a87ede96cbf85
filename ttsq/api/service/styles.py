"""Styles: the stored ones a caller sees (the built-in catalogue, its tenant's and the global ones), and a request's
``style`` resolved among them into its sampling parameters.

Tenancy is the voices' (:func:`~ttsq.api.service.common.voice_owner` and its kin): a style is its tenant's or global,
a tenant sees its own and the global ones, and an admin may act as a tenant (docs/voices.md#tenants).
"""

from __future__ import annotations

from typing import TypeVar

from ttsq.api.auth import Principal
from ttsq.api.service.common import InvalidInput, new_voice_owner, viewed_owner, voice_owner
from ttsq.domain.sampling import SamplingFields, SamplingPreset
from ttsq.domain.styles import Style
from ttsq.store.styles import StyleRegistry

__all__ = ["StyleService"]

_Body = TypeVar("_Body", bound=SamplingFields)


class StyleService:
    """The styles routes' use cases (``prosody_api``), and a request's style for every route that takes sampling fields."""

    def __init__(self, styles: StyleRegistry) -> None:
        self.styles = styles

    async def applied(self, body: _Body, caller: Principal, style: str | None, field: str = "style") -> _Body:
        """``body`` with its style's parameters under its own (:meth:`SamplingPreset.under`), validated again as a body;
        ``body`` itself without a style. An unknown style (or another tenant's) is :class:`InvalidInput` naming
        ``field`` and the styles the caller sees."""
        if style is None:
            return body
        found = await self.resolve_style(style, caller, field)
        # Every value was validated (the style when stored, the body when received): only the merge is new.
        return body.with_sampling(found.under(body))

    async def resolve_style(self, style: str, caller: Principal, field: str = "style") -> Style:
        """The style ``style`` means to ``caller``; an unknown one (or another tenant's) is :class:`InvalidInput`
        naming ``field`` and the styles the caller sees."""
        owner = voice_owner(caller)
        found = await self.styles.get(style, owner)
        if found is None:
            names = ", ".join(known.name for known in await self.styles.list(owner))
            raise InvalidInput(field, f"unknown style {style!r}; available: {names}", style)
        return found

    async def list_styles(self, caller: Principal, tenant: str | None = None) -> list[Style]:
        """The styles ``caller`` sees (or, for an admin, ``tenant``)."""
        return await self.styles.list(viewed_owner(caller, tenant))

    async def get_style(self, name: str, caller: Principal, tenant: str | None = None) -> Style | None:
        """The style ``name`` means to ``caller`` (or, for an admin, to ``tenant``); None when it sees none by that name —
        another tenant's style is as absent as one that never existed."""
        return await self.styles.get(name, viewed_owner(caller, tenant))

    async def create_style(
        self, name: str, preset: SamplingPreset, caller: Principal, *, shared: bool = False, tenant: str | None = None
    ) -> Style:
        return await self.styles.create(name, new_voice_owner(caller, shared, tenant), preset)

    async def delete_style(self, name: str, caller: Principal, tenant: str | None = None) -> bool:
        return await self.styles.delete(name, viewed_owner(caller, tenant))
