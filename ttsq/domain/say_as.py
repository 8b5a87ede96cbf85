"""SSML's ``<say-as>``: a number, date, time or telephone number written out as the words ChatTTS should say.

ChatTTS reads only letters, ideographs, spaces and a few marks (``，。、,.``); everything else is deleted before the
model sees it, digits included. The worker's normaliser (WeTextProcessing) turns ordinary numbers into words first,
but it guesses how each is meant ("1999" a year or a count, "0101" a number or digits), and ``say-as`` exists so the
author says how. So ``say-as`` is written out here, at the API, into words: the normaliser has nothing left to guess,
and what is spoken is decided where the document is validated, in the text's language (``en`` or ``zh``,
:func:`ttsq.domain.text.detect_language`). English numbers come from ``num2words``, Chinese ones from ``cn2an``; what
is ttsq's own is which reading each ``interpret-as`` asks for, and that every word is one ChatTTS can say (no hyphen,
apostrophe or digit is left; a test holds every reading to that).

Pure: no I/O.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Literal

import cn2an
from num2words import num2words

__all__ = ["DATE_FORMATS", "INTERPRETATIONS", "MAX_NUMBER_DIGITS", "SayAsError", "spoken"]

Language = Literal["en", "zh"]

DATE_FORMATS = ("mdy", "dmy", "ymd")
"""The orders a ``say-as interpret-as="date"`` may give with ``format`` (``ymd`` when it gives none)."""

MAX_NUMBER_DIGITS = 15
"""The most digits a cardinal's or ordinal's whole part may have (below a quadrillion): past it, a number is not
read as one (``cn2an`` stops at 16 digits); ``interpret-as="digits"`` reads any number of digits one by one."""


class SayAsError(ValueError):
    """What a ``say-as`` holds cannot be read as it asks: the message says what it takes."""


_EN_DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_ZH_DIGITS = "零一二三四五六七八九"
_ZH_PHONE_DIGITS = "零幺二三四五六七八九"
"""Telephone numbers in Chinese say 1 as 幺, as callers read them out (一 and 七 sound alike over a line)."""

_EN_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip

_NUMBER = re.compile(r"(?P<sign>[+-]?)(?P<whole>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<fraction>\d+))?")
_ORDINAL = re.compile(r"(?P<whole>\d{1,3}(?:,\d{3})+|\d+)(?:st|nd|rd|th|\.)?", re.IGNORECASE)
_DIGITS = re.compile(r"[\d\s]+")
_DATE = re.compile(r"(\d{1,4})([-/.])(\d{1,4})\2(\d{1,4})")
_TIME = re.compile(r"(?P<hour>\d{1,2}):(?P<minute>\d{2})(?::(?P<second>\d{2}))?\s*(?P<half>[ap]\.?m\.?)?", re.IGNORECASE)
_TELEPHONE = re.compile(r"\+?[\d\s().-]*\d[\d\s().-]*")
_PHONE_GROUP = re.compile(r"\d+")


def spoken(interpret_as: str, content: str, language: Language, date_format: str | None = None) -> str:
    """``content`` (a ``say-as``'s text, whitespace trimmed) read as ``interpret_as`` says, in ``language``.

    ``interpret_as`` is one of :data:`INTERPRETATIONS` and ``date_format`` one of :data:`DATE_FORMATS` (the SSML
    reader checked both); :class:`SayAsError` when ``content`` is not what ``interpret_as`` reads.
    """
    return INTERPRETATIONS[interpret_as](content, language, date_format)


def _characters(content: str, language: Language, _: str | None) -> str:
    """Each character on its own: letters as capitals (their names), digits as words, marks skipped."""
    spelled = []
    for char in content:
        if char.isdigit() and char.isascii():
            spelled.append(_digit(char, language))
        elif char.isalpha():
            spelled.append(char.upper())
    if not spelled:
        raise SayAsError("has no letter or digit to spell out")
    return " ".join(spelled)


def _cardinal(content: str, language: Language, _: str | None) -> str:
    match = _NUMBER.fullmatch(content)
    if match is None:
        raise SayAsError("needs a number such as 1234, 1,234, -12 or 3.5")
    whole = _whole(match["whole"])
    words = _integer(whole, language)
    if match["fraction"]:
        point = " point " if language == "en" else "点"
        words += point + _digit_run(match["fraction"], language)
    if match["sign"] == "-" and (whole or (match["fraction"] or "").strip("0")):
        words = ("minus " if language == "en" else "负") + words
    return words


def _ordinal(content: str, language: Language, _: str | None) -> str:
    match = _ORDINAL.fullmatch(content)
    if match is None:
        raise SayAsError("needs a whole number such as 3, 3rd or 1,000")
    whole = _whole(match["whole"])
    if language == "zh":
        return "第" + _integer(whole, language)
    return _words(num2words(whole, to="ordinal"))


def _digits(content: str, language: Language, _: str | None) -> str:
    if _DIGITS.fullmatch(content) is None or not content.strip():
        raise SayAsError("needs digits only, such as 0042")
    return _digit_run("".join(content.split()), language)


def _date(content: str, language: Language, date_format: str | None) -> str:
    order = date_format or "ymd"
    match = _DATE.fullmatch(content)
    if match is None:
        raise SayAsError(f"needs a date such as {_example(order)} (format {order!r})")
    values = dict(zip(order, (match[1], match[3], match[4]), strict=True))
    try:
        date = datetime.date(int(values["y"]), int(values["m"]), int(values["d"]))
    except ValueError as exc:
        raise SayAsError(f"{content!r} is not a date in the {order!r} order ({exc})") from None
    if language == "zh":
        return f"{_digit_run(values['y'], 'zh')}年{_integer(date.month, 'zh')}月{_integer(date.day, 'zh')}日"
    year, month = _words(num2words(date.year, to="year")), _EN_MONTHS[date.month - 1]
    day = _words(num2words(date.day, to="ordinal"))
    if order == "dmy":
        return f"the {day} of {month}, {year}"
    return f"{month} {day}, {year}"


def _time(content: str, language: Language, _: str | None) -> str:
    match = _TIME.fullmatch(content)
    if match is None:
        raise SayAsError("needs a time such as 9:05, 21:30:15 or 9:05 pm")
    hour, minute, second = int(match["hour"]), int(match["minute"]), int(match["second"] or 0)
    half = (match["half"] or "").lower().replace(".", "")
    if minute > 59 or second > 59 or hour > (12 if half else 23) or (half and hour == 0):
        raise SayAsError(f"{content!r} is not a time of day")
    if language == "zh":
        said = f"{_integer(hour, 'zh')}点"
        if minute or second:
            said += ("零" if minute < 10 else "") + f"{_integer(minute, 'zh')}分"
        if second:
            said += f"{_integer(second, 'zh')}秒"
        return {"am": "上午", "pm": "下午"}.get(half, "") + said
    said = _integer(hour, "en")
    if minute:
        said += " oh " + _EN_DIGITS[minute] if minute < 10 else " " + _integer(minute, "en")
    elif not second:
        said += " o clock" if not half else ""
    if second:
        said += f" and {_integer(second, 'en')} second" + ("s" if second != 1 else "")
    return said + {"am": " a m", "pm": " p m"}.get(half, "")


def _telephone(content: str, language: Language, _: str | None) -> str:
    """Digit by digit, each group of digits apart (a comma, a short pause), a leading ``+`` said."""
    if _TELEPHONE.fullmatch(content) is None:
        raise SayAsError("needs a telephone number: digits, spaces, and + ( ) - . only, such as +1 555-0100")
    digits = _ZH_PHONE_DIGITS if language == "zh" else None
    groups = [
        "".join(digits[int(d)] for d in group) if digits else " ".join(_EN_DIGITS[int(d)] for d in group)
        for group in _PHONE_GROUP.findall(content)
    ]
    said = ("，" if language == "zh" else ", ").join(groups)
    if content.startswith("+"):
        said = ("加" if language == "zh" else "plus ") + said
    return said


INTERPRETATIONS: dict[str, Callable[[str, Language, str | None], str]] = {
    "characters": _characters,
    "spell-out": _characters,
    "cardinal": _cardinal,
    "ordinal": _ordinal,
    "digits": _digits,
    "date": _date,
    "time": _time,
    "telephone": _telephone,
}
"""Every supported ``interpret-as`` and what reads it."""


def _whole(written: str) -> int:
    """A number's whole part as written (thousands separators allowed), bounded by :data:`MAX_NUMBER_DIGITS`."""
    digits = written.replace(",", "").lstrip("0") or "0"
    if len(digits) > MAX_NUMBER_DIGITS:
        raise SayAsError(f"has {len(digits)} digits before its point; at most {MAX_NUMBER_DIGITS} are read as a number "
                         '(interpret-as="digits" reads any number of digits)')  # fmt: skip
    return int(digits)


def _integer(value: int, language: Language) -> str:
    if language == "zh":
        return str(cn2an.an2cn(str(value)))
    return _words(num2words(Decimal(value)))


def _digit(char: str, language: Language) -> str:
    return _ZH_DIGITS[int(char)] if language == "zh" else _EN_DIGITS[int(char)]


def _digit_run(digits: str, language: Language) -> str:
    """Digits one by one: ``0042`` → "zero zero four two" / "零零四二"."""
    return ("" if language == "zh" else " ").join(_digit(char, language) for char in digits)


def _words(english: str) -> str:
    """``num2words``' English as ChatTTS says it: hyphens become spaces ("twenty one"; ChatTTS reads a hyphen as a
    pause) and its thousands commas go (a pause in the middle of a number)."""
    return " ".join(english.replace("-", " ").replace(",", " ").split())


def _example(order: str) -> str:
    return {"mdy": "12/31/2026", "dmy": "31/12/2026", "ymd": "2026-12-31"}[order]
