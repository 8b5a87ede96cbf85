"""Named voices: a name fixes the speaker.

A built-in voice is a speaker *seed*: ``torch.manual_seed(seed)`` then ChatTTS's random speaker
draw gives the same embedding in every worker process, so a name sounds the same everywhere
(for a given checkpoint). The persistent registry of user voices builds on this.
"""

from __future__ import annotations

BUILTIN_VOICES: dict[str, int] = {
    "zh_female": 2,
    "zh_male": 1111,
}
"""Built-in voice name → speaker seed."""


def known_voices() -> list[str]:
    return sorted(BUILTIN_VOICES)


def speaker_seed_of(voice: str) -> int | None:
    return BUILTIN_VOICES.get(voice)
