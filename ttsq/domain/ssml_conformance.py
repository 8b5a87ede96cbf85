"""What ttsq supports of SSML, as data, and what each supported value means.

One source for three things: the SSML reader (:mod:`ttsq.domain.ssml`) checks every element and attribute of a
document against :data:`ELEMENTS` and refuses the others (those it knows, :data:`REFUSED_ELEMENTS` and
:data:`REFUSED_ATTRIBUTES`, with a reason); the readers of values below say what a ``time``, ``strength``, ``rate``
or ``volume`` is in ttsq's terms (samples, ChatTTS's speed, dB); and docs/ssml.md's conformance table is generated
from the same data (:func:`conformance_markdown`, ``scripts/ssml_docs.py``), so the docs cannot promise what the
reader refuses.

Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Literal

from ttsq.domain.sampling import MAX_SPEED, MIN_SPEED
from ttsq.domain.say_as import DATE_FORMATS, INTERPRETATIONS
from ttsq.domain.segments import MAX_GAIN_DB, MAX_PAUSE_SAMPLES, MIN_GAIN_DB, PAUSE_SAMPLE_RATE

__all__ = [
    "ELEMENTS",
    "MAX_ATTRIBUTE_CHARS",
    "MAX_MARK_NAME_CHARS",
    "MAX_PAUSE_SAMPLES",
    "REFUSED_ATTRIBUTES",
    "REFUSED_ELEMENTS",
    "SAMPLE_RATE",
    "SSML_NAMESPACE",
    "STRENGTH_MS",
    "AttributeRule",
    "ElementRule",
    "ValueRefused",
    "break_samples",
    "conformance_markdown",
    "document_language",
    "paragraph_samples",
    "rate_speed",
    "volume_gain",
]

Language = Literal["en", "zh"]

SSML_NAMESPACE = "http://www.w3.org/2001/10/synthesis"
SAMPLE_RATE = PAUSE_SAMPLE_RATE
"""Breaks are counted in samples of ttsq's audio, as a segment's pause is. A span's silence is held to a segment's
(:data:`MAX_PAUSE_SAMPLES`: breaks in a row add up to it), and its gain to a segment's (:data:`MIN_GAIN_DB` to
:data:`MAX_GAIN_DB`: ``volume`` beyond them is refused, never clipped)."""
MAX_ATTRIBUTE_CHARS = 1_000
"""No supported attribute's value is longer (the longest is a blend of eight voice names): a longer one is refused
before it is read, and never echoed whole."""
MAX_MARK_NAME_CHARS = 200
"""The longest mark name (a segment's :class:`~ttsq.domain.segments.Mark` takes no longer; a test holds the two
equal)."""

STRENGTH_MS: dict[str, int] = {"none": 0, "x-weak": 250, "weak": 500, "medium": 750, "strong": 1000, "x-strong": 1250}
"""``<break strength>`` in milliseconds; a break with neither ``time`` nor ``strength`` is ``medium``, as SSML says."""
PARAGRAPH_STRENGTH = "strong"
"""The silence between two paragraphs (``<p>``), unless a break between them says otherwise."""
RATE_SPEEDS: dict[str, int] = {"x-slow": 1, "slow": 3, "medium": 5, "fast": 7, "x-fast": 9}
"""``<prosody rate>``'s words as ChatTTS speeds (1 slowest, 9 fastest, 5 its default)."""
SPEED_STEPS_PER_DOUBLING = 4
"""A rate of ``200%`` is this many speed steps above the enclosing speed, ``50%`` as many below (so from the default
5, ``50%`` is 1 and ``200%`` is 9), and percentages in between on the same log scale, rounded."""
VOLUME_DB: dict[str, float] = {"x-soft": -12.0, "soft": -6.0, "medium": 0.0, "loud": 6.0, "x-loud": 12.0}
"""``<prosody volume>``'s words as gains in dB."""

_TIME = re.compile(r"(?P<value>\d+(?:\.\d+)?|\.\d+)(?P<unit>ms|s)")
_PERCENT = re.compile(r"(?P<sign>[+-]?)(?P<value>\d+(?:\.\d+)?)%")
_DECIBELS = re.compile(r"(?P<value>[+-]?\d+(?:\.\d+)?)dB", re.IGNORECASE)
_LANGUAGE = re.compile(r"(?P<language>en|zh|cmn)(?:-[A-Za-z0-9]{1,8})*", re.IGNORECASE)


# ---- what is supported, as data ------------------------------------------------------------------


@dataclass(frozen=True)
class AttributeRule:
    """A supported attribute: what values it takes and what ttsq does with them (the conformance table's words)."""

    values: str
    how: str
    required: bool = False


@dataclass(frozen=True)
class ElementRule:
    """A supported element: what ttsq does with it, its attributes, and what it may hold."""

    how: str
    attributes: dict[str, AttributeRule]
    content: Literal["mixed", "text", "empty"] = "mixed"
    """``mixed``: text and elements; ``text``: text only; ``empty``: nothing (whitespace aside)."""


ELEMENTS: dict[str, ElementRule] = {
    "speak": ElementRule(
        "The root, and only there.",
        {
            "version": AttributeRule("`1.0`, `1.1`", "Accepted."),
            "xmlns": AttributeRule(f"`{SSML_NAMESPACE}`", "Accepted (another namespace is refused)."),
            "xmlns:*": AttributeRule("any", "Namespace declarations are accepted; elements and attributes in them are not."),
            "xsi:schemaLocation": AttributeRule("any", "Accepted and ignored."),
            "xml:lang": AttributeRule(
                "`en…`, `zh…`, `cmn…` (e.g. `en-US`, `zh-CN`)",
                "The language `say-as` and added sentence ends are written in; without it, the document's text decides "
                "(any Chinese ideograph: Chinese). Other languages are refused: ChatTTS speaks English and Chinese.",
            ),
        },
    ),
    "p": ElementRule(
        f"A paragraph: its last sentence ends (a full stop is added if it has none), and a paragraph after earlier "
        f"speech begins after the `{PARAGRAPH_STRENGTH}` break ({STRENGTH_MS[PARAGRAPH_STRENGTH]} ms), unless a "
        f"`<break>` between them says otherwise.",
        {},
    ),
    "s": ElementRule("A sentence: it ends (a full stop, `.` or `。`, is added if it has none).", {}),
    "break": ElementRule(
        "Exact silence in place of the usual pause: its samples are zeros at 24 kHz (breaks in a row add up, to a "
        "minute at most); a break starts a new run of speech.",
        {
            "time": AttributeRule(
                "`Nms` or `Ns` (`700ms`, `1.5s`), up to a minute",
                "Exactly that long, rounded to the nearest sample: `700ms` is 16,800 zero samples. `time` wins over `strength`.",
            ),
            "strength": AttributeRule(
                ", ".join(f"`{name}`" for name in STRENGTH_MS),
                ", ".join(f"{name} {ms} ms" for name, ms in STRENGTH_MS.items()) + "; without either attribute: medium.",
            ),
        },
        content="empty",
    ),
    "prosody": ElementRule(
        "Speed and loudness of what it holds; a change starts a new run of speech (ChatTTS speaks one speed per request).",
        {
            "rate": AttributeRule(
                "`x-slow`, `slow`, `medium`, `fast`, `x-fast`, `default`; `N%` (a multiple of the enclosing rate: "
                "`50%`, `150%`); `+N%`/`-N%` (a change of it)",
                "ChatTTS's speed 1–9: "
                + ", ".join(f"{name} {speed}" for name, speed in RATE_SPEEDS.items())
                + f", default the request's `speed`; a percentage moves the enclosing speed {SPEED_STEPS_PER_DOUBLING} "
                f"steps per doubling (`200%` of 5 is 9, `50%` is 1), rounded and kept within 1–9.",
            ),
            "volume": AttributeRule(
                "`x-soft`, `soft`, `medium`, `loud`, `x-loud`, `default`; `+NdB`/`-NdB`",
                "A gain on its samples: "
                + ", ".join(f"{name} {db:+g} dB" for name, db in VOLUME_DB.items())
                + f", default 0 dB; `±NdB` adds to the enclosing gain. Beyond {MIN_GAIN_DB:g}…{MAX_GAIN_DB:+g} dB: "
                "refused.",
            ),
        },
    ),
    "voice": ElementRule(
        "Who speaks what it holds: switching voices inside one document, each a new run of speech.",
        {
            "name": AttributeRule(
                "a voice name or blend, as a request's `voice`",
                "Any voice the caller's key may use, resolved with its tenant's voices as a request's `voice` is; "
                "an unknown one is refused with its line and column.",
                required=True,
            ),
        },
    ),
    "say-as": ElementRule(
        "Its text read as the given kind, written out as words in the document's language (English or Chinese).",
        {
            "interpret-as": AttributeRule(
                ", ".join(f"`{name}`" for name in INTERPRETATIONS),
                "characters/spell-out: letters and digits one by one; cardinal: a number (`-1,234.5`); ordinal "
                "(`3`, `3rd`); digits: one by one; date (see `format`); time (`9:05`, `21:30:15`, `9:05 pm`); "
                "telephone: digit by digit in groups, a leading `+` said. Other kinds are refused.",
                required=True,
            ),
            "format": AttributeRule(
                ", ".join(f"`{name}`" for name in DATE_FORMATS) + " (dates only)",
                "The order of a date's parts (separated by `-`, `/` or `.`); default `ymd`.",
            ),
        },
        content="text",
    ),
    "sub": ElementRule(
        "Its `alias` is spoken in place of its text.",
        {"alias": AttributeRule("any text", "Spoken instead.", required=True)},
        content="text",
    ),
    "mark": ElementRule(
        "A named point: the result's timing reports its exact sample offset: where the speech after it begins, or, "
        "when a break, a paragraph or the document's end comes before any more text, where the speech before it ends.",
        {"name": AttributeRule(f"any text, up to {MAX_MARK_NAME_CHARS} characters", "Reported by name.", required=True)},
        content="empty",
    ),
}
"""Every element ttsq supports, with its attributes: the reader's rules and the conformance table's rows."""

REFUSED_ELEMENTS: dict[str, str] = {
    "audio": "ttsq speaks text: it does not mix recordings into speech",
    "phoneme": "ChatTTS takes no phonemes (a pronunciation dictionary entry can respell a word: docs/dictionary.md)",
    "emphasis": "ChatTTS has no emphasis control",
    "lang": "a document has one language (`xml:lang` on `<speak>`)",
    "lexicon": "use the pronunciation dictionary (docs/dictionary.md)",
    "lookup": "use the pronunciation dictionary (docs/dictionary.md)",
    "meta": "not read",
    "metadata": "not read",
    "desc": "belongs to `<audio>`, which is not supported",
    "token": "ChatTTS has no word-level control",
    "w": "ChatTTS has no word-level control",
}
"""SSML elements ttsq refuses (422), and why; any other name is refused as unknown."""

REFUSED_ATTRIBUTES: dict[str, dict[str, str]] = {
    "prosody": {
        "pitch": "ChatTTS has no pitch control",
        "range": "ChatTTS has no pitch control",
        "contour": "ChatTTS has no pitch control",
        "duration": "ChatTTS cannot be held to a duration (use `rate`)",
    },
    "voice": {
        "gender": "voices are chosen by name",
        "age": "voices are chosen by name",
        "variant": "voices are chosen by name",
        "languages": "voices are chosen by name",
    },
    "say-as": {"detail": "not read"},
}
"""Standard attributes of supported elements that ttsq refuses (422), and why; any other is refused as unknown."""


# ---- what the values mean ---------------------------------------------------------------------------


class ValueRefused(ValueError):
    """An attribute's value ttsq cannot take: the message names the attribute and says what it takes."""


def break_samples(attributes: Mapping[str, str]) -> int:
    """A ``<break>``'s silence in samples: its ``time`` (rounded to the nearest sample), else its ``strength``, else
    ``medium``."""
    if "time" in attributes:
        match = _TIME.fullmatch(attributes["time"].strip())
        if match is None:
            raise ValueRefused(f"<break> time {quoted(attributes['time'])} is not a duration such as 700ms or 1.5s")
        scale = SAMPLE_RATE if match["unit"] == "s" else SAMPLE_RATE // 1000
        samples = int((Decimal(match["value"]) * scale).to_integral_value(ROUND_HALF_EVEN))
        if samples > MAX_PAUSE_SAMPLES:
            raise ValueRefused(f"<break> time {quoted(attributes['time'])} is longer than a minute")
        return samples
    strength = attributes.get("strength", "medium").strip()
    if strength not in STRENGTH_MS:
        raise ValueRefused(f"<break> strength {quoted(strength)} is not supported; supported: {listed(STRENGTH_MS)}")
    return STRENGTH_MS[strength] * SAMPLE_RATE // 1000


def paragraph_samples() -> int:
    """The silence between two paragraphs, in samples."""
    return STRENGTH_MS[PARAGRAPH_STRENGTH] * SAMPLE_RATE // 1000


def rate_speed(rate: str, enclosing: int | None, request_speed: int) -> int | None:
    """``<prosody rate>`` as ChatTTS's speed, within ``enclosing`` (None: the request's, ``request_speed``); None
    where it is the request's own speed (so a span at it is no different from plain text)."""
    rate = rate.strip()
    if rate == "default":
        return None
    if rate in RATE_SPEEDS:
        speed = RATE_SPEEDS[rate]
    else:
        match = _PERCENT.fullmatch(rate)
        if match is None:
            raise ValueRefused(f"<prosody> rate {quoted(rate)} is not one of {listed(RATE_SPEEDS)}, default, N%, +N% or -N%")
        value = float(match["value"]) / 100
        factor = {"": value, "+": 1 + value, "-": 1 - value}[match["sign"]]
        if factor <= 0:
            raise ValueRefused(f"<prosody> rate {quoted(rate)} leaves no speed: a rate must be above 0%")
        start = request_speed if enclosing is None else enclosing
        speed = min(MAX_SPEED, max(MIN_SPEED, round(start + SPEED_STEPS_PER_DOUBLING * math.log2(factor))))
    return None if speed == request_speed else speed


def volume_gain(volume: str, enclosing: float | None) -> float | None:
    """``<prosody volume>`` as a gain in dB within ``enclosing`` (None: 0 dB); None for 0 dB."""
    volume = volume.strip()
    if volume == "default":
        return None
    if volume in VOLUME_DB:
        gain = VOLUME_DB[volume]
    else:
        match = _DECIBELS.fullmatch(volume)
        if match is None:
            raise ValueRefused(f"<prosody> volume {quoted(volume)} is not one of {listed(VOLUME_DB)}, default or ±NdB")
        gain = (enclosing or 0.0) + float(match["value"])
    if not MIN_GAIN_DB <= gain <= MAX_GAIN_DB:
        raise ValueRefused(
            f"<prosody> volume {quoted(volume)} makes a gain of {gain:+g} dB; the gain must stay within "
            f"{MIN_GAIN_DB:g} to {MAX_GAIN_DB:+g} dB"
        )
    return gain or None


def document_language(attributes: Mapping[str, str]) -> Language | None:
    """What ``<speak>``'s attributes say of the document (its ``version`` and ``xmlns`` checked): the language its
    ``xml:lang`` names, or None."""
    version = attributes.get("version")
    if version is not None and version not in ("1.0", "1.1"):
        raise ValueRefused(f"<speak> version {quoted(version)} is not supported; supported: 1.0, 1.1")
    namespace = attributes.get("xmlns")
    if namespace is not None and namespace != SSML_NAMESPACE:
        raise ValueRefused(f"<speak> xmlns {quoted(namespace)} is not SSML's namespace ({SSML_NAMESPACE})")
    lang = attributes.get("xml:lang")
    if lang is None:
        return None
    match = _LANGUAGE.fullmatch(lang.strip())
    if match is None:
        raise ValueRefused(f"<speak> xml:lang {quoted(lang)} is not supported: ChatTTS speaks English (en) and Chinese (zh)")
    return "en" if match["language"].lower() == "en" else "zh"


def listed(names: Mapping[str, object]) -> str:
    """Names as a message lists them."""
    return ", ".join(names)


def quoted(value: str) -> str:
    """An attribute's name or value as a message quotes it: short (a long one is cut)."""
    return repr(value if len(value) <= 60 else value[:57] + "...")


# ---- the conformance table ------------------------------------------------------------------------------


def conformance_markdown() -> str:
    """docs/ssml.md's conformance table: every element and attribute, supported (and how) or refused (and why)."""
    rows = ["| element | attribute | values | ttsq |", "|---|---|---|---|"]
    for name, rule in ELEMENTS.items():
        rows.append(f"| `<{name}>` | | | {rule.how} |")
        for attribute, spec in rule.attributes.items():
            required = " (required)" if spec.required else ""
            rows.append(f"| `<{name}>` | `{attribute}`{required} | {spec.values} | {spec.how} |")
        for attribute, why in REFUSED_ATTRIBUTES.get(name, {}).items():
            rows.append(f"| `<{name}>` | `{attribute}` | | 422: {why}. |")
        if not rule.attributes:
            rows.append(f"| `<{name}>` | any | | 422: it takes no attributes. |")
    for name, why in REFUSED_ELEMENTS.items():
        rows.append(f"| `<{name}>` | | | 422: {why}. |")
    rows.append("| any other element or attribute | | | 422, naming it and the supported list. |")
    return "\n".join(rows)
