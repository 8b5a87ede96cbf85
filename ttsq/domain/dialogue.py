"""A dialogue's script: ``Alice: Hi.`` lines read into (speaker, text) pairs, each line a segment of its job.

The native dialogue route takes its lines as a list or as one script; this is how a script is read. Every line that
is not blank names its speaker before a colon (ASCII ``:`` or the full-width ``：`` of Chinese scripts), and the
speaker is looked up in the request's ``voices``. Nothing is guessed: a line without a speaker, or a speaker with
nothing to say, is refused with its line number.
"""

from __future__ import annotations

import re

__all__ = ["MAX_SPEAKER_CHARS", "ScriptError", "read_script"]

MAX_SPEAKER_CHARS = 64
"""The longest speaker name: a name, not a sentence that happens to hold a colon."""

_LINE = re.compile(rf"^\s*([^:：\n]{{1,{MAX_SPEAKER_CHARS}}}?)\s*[:：](.*)$")


class ScriptError(ValueError):
    """A script line that cannot be read, with a message a person can act on (its line number, what is wrong)."""


def read_script(script: str) -> list[tuple[str, str]]:
    """``(speaker, text)`` of each line of ``script`` that is not blank, in order."""
    lines: list[tuple[str, str]] = []
    for number, line in enumerate(script.splitlines(), start=1):
        if not line.strip():
            continue
        found = _LINE.match(line)
        if found is None or not found.group(1).strip():
            shown = line.strip()[:60]
            raise ScriptError(
                f"line {number} names no speaker: write each line as `Speaker: text` "
                f"(a name of at most {MAX_SPEAKER_CHARS} characters before a colon), got {shown!r}"
            )
        speaker, text = found.group(1).strip(), found.group(2).strip()
        if not text:
            raise ScriptError(f"line {number}: {speaker} has nothing to say")
        lines.append((speaker, text))
    if not lines:
        raise ScriptError("the script has no lines: write one `Speaker: text` per line")
    return lines
