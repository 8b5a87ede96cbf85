"""Styles: named presets of the sampling parameters (speed, temperature, top-p, top-k, the refine levels), owned by a
tenant like voices, and the built-in catalogue every tenant sees.

A request names one as ``style`` on every route that takes sampling fields; the API resolves it at submit
(:meth:`ttsq.domain.sampling.SamplingPreset.under`: the request's own fields override the style's) into the job's
parameters, so the worker never looks a style up and a style changed or deleted later changes no queued job.

The built-in catalogue takes its names and values from Speech-AI-Forge's ``data/styles.csv`` (lenML/Speech-AI-Forge,
its plain styles, not the ``_p`` ones that add a second prompt ttsq does not pass to the model): speed and the oral,
laugh and break levels as given there, a level it leaves out left unset here too (out of the refine prompt), and its
speed ``0`` (ChatTTS's slowest token, which the API does not offer) as ttsq's slowest, ``1``. Every built-in style sets a
level, so each one refines the text.
"""

from __future__ import annotations

import re

from pydantic import Field

from ttsq.domain.sampling import SamplingFields, SamplingPreset

__all__ = [
    "BUILTIN_STYLES",
    "STYLE_NAME",
    "Style",
    "StyleConflict",
    "StyledSampling",
    "builtin_style",
    "builtin_styles",
    "validate_style_name",
]

STYLE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""A style's name, as a voice's is written."""


class StyledSampling(SamplingFields):
    """The sampling fields as a request carries them: the parameters, and a ``style`` whose parameters stand in for
    those the request leaves unsaid. Inherited by every body that takes sampling fields (the submit body, a realtime
    session's start); the stored job keeps the parameters alone (the style is resolved at submit)."""

    style: str | None = Field(
        None,
        pattern=STYLE_NAME.pattern,
        description="A style (`GET /v1/styles`): a named preset of these parameters; the request's own fields override "
        "its style's (docs/prosody.md).",
        examples=["chat"],
    )


_FORGE: dict[str, tuple[int, int, int | None, int]] = {
    # name: (speed, oral, laugh or None, break), from Speech-AI-Forge's data/styles.csv (speed 0 read as 1)
    "assistant": (5, 7, 1, 2),
    "calm": (1, 4, None, 4),
    "chat": (6, 9, 1, 2),
    "cheerful": (7, 8, 2, 2),
    "customerservice": (5, 6, 1, 5),
    "documentary-narration": (4, 4, None, 3),
    "excited": (8, 7, 2, 1),
    "friendly": (6, 7, 1, 2),
    "gentle": (4, 5, 1, 3),
    "narration-professional": (5, 3, None, 3),
    "narration-relaxed": (2, 4, None, 3),
    "newscast": (2, 4, None, 2),
    "podcast": (2, 8, 1, 2),
    "sad": (1, 3, None, 5),
    "serious": (3, 3, None, 4),
    "whispering": (2, 3, None, 4),
}


class Style(SamplingPreset):
    """A named preset: the sampling parameters it sets (each one optional), and whose it is."""

    name: str
    builtin: bool = False
    owner: str | None = Field(
        None,
        description="Whose style it is: `tenant:NAME` or `key:ID` (that tenant's keys alone see and use it); null: global "
        "(the built-in catalogue and an admin's shared styles, seen by every tenant).",
    )
    created_at: float | None = None


class StyleConflict(ValueError):
    """A style's name is taken (built in, the caller's tenant's, or a global style's)."""


BUILTIN_STYLES: dict[str, Style] = {
    name: Style.model_validate({"name": name, "builtin": True, "speed": speed, "oral": oral, "laugh": laugh, "break": pause})
    for name, (speed, oral, laugh, pause) in _FORGE.items()
}
"""The catalogue every tenant sees, by name (docs/prosody.md lists it)."""


def builtin_style(name: str) -> Style | None:
    return BUILTIN_STYLES.get(name)


def builtin_styles() -> list[Style]:
    """The built-in styles, by name."""
    return [BUILTIN_STYLES[name] for name in sorted(BUILTIN_STYLES)]


def validate_style_name(name: str) -> str:
    if not STYLE_NAME.fullmatch(name):
        raise ValueError("a style name is 1-64 letters, digits, '_' or '-'")
    return name
