"""The pronunciation dictionary: admin-made entries that rewrite a caller's text before it is normalised.

ChatTTS reads what it is given; a name, an acronym or a rare character it gets wrong is fixed by rewriting it
("SQL" → "sequel", "重庆" → "崇庆"). An entry is a *word* (a literal) or a *regex* (a pattern, with ``\\1`` and
``\\g<name>`` references in its replacement), for one language (``zh``, ``en``) or both (``auto``), either
``global`` or for one caller (``key:<id>``) or one tenant (``tenant:<name>``).

The rules, in the order they apply to a text (:meth:`Dictionary.apply`):

* **Which entries.** The text's language is :func:`ttsq.domain.text.detect_language` of the text as sent; an
  entry applies when its language is that one or ``auto``, and its scope is the caller's key, the caller's
  tenant, or ``global``.
* **Regex entries first**, the caller's key's, then its tenant's, then the global ones, each group oldest first;
  each runs on the output of the one before (so a regex may rewrite what an earlier one wrote).
* **Word entries next, in one pass**: the longest word wins where two start at the same place ("New York City"
  before "New York"), and a replacement is never read again (no entry rewrites another's output). Where two
  scopes hold the same word, the nearer one wins (key, then tenant, then global); the other is not used.
* **Word boundaries.** A word's end that is a Latin letter or digit matches only where the character beside it
  in the text is not one ("API" matches in "the API." and "用API调用", not in "APIs" or "rapid"); a Chinese
  character has no boundary, so "重庆" matches inside "重庆市". Words match **case-insensitively** unless the
  entry says ``case_sensitive``; a regex matches as written (put ``(?i)`` in it to ignore case).

**Regex safety.** Patterns are compiled when written (a bad one is refused naming the problem), and are capped
in length (as are replacements and the number of entries a scope holds). Before compiling, the repetition counts
are read from the pattern: their product along any nesting may not pass :data:`MAX_REPEAT` (the compiler unrolls
counted repeats — ``a{100000000}``, 12 characters, allocated over 6 GB). A pattern may match nothing empty, not
only not the empty string: one whose shortest match is zero characters wide (``\\b``, ``(?=x)``, ``x?``) would
insert its replacement at every place it holds, so it is refused, its width read by the standard library's
parser where that can read it and probed on sample texts where it cannot; an empty match is never replaced even
so. They run on the ``regex`` module with a time limit per use and the GIL released (its ``concurrent`` mode,
so a caller can run them off the event loop): a pattern that backtracks catastrophically on some text raises
:class:`DictionaryTimeout` naming the entry instead of holding the API; the syntax itself is not otherwise
restricted. Word entries are escaped literals in one alternation (the stdlib ``re``: no backtracking to fear).

A replacement may not contain a ChatTTS control token the text itself may not (``[Stts]``…): the dictionary
never smuggles one past :func:`ttsq.domain.text.validate_text`, which runs on its output.
"""

from __future__ import annotations

import importlib
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import regex
from pydantic import BaseModel, Field

from ttsq.domain.text import detect_language, find_forbidden_tokens

__all__ = [
    "GLOBAL",
    "MAX_REPEAT",
    "SCOPE_PATTERN",
    "Dictionary",
    "DictionaryError",
    "DictionaryLimits",
    "DictionaryTimeout",
    "EntryKind",
    "EntryLanguage",
    "PronunciationEntry",
    "caller_scopes",
    "check_entry",
    "check_scope",
]

EntryKind = Literal["word", "regex"]
EntryLanguage = Literal["zh", "en", "auto"]
GLOBAL = "global"
"""The scope of an entry that applies to every caller."""

SCOPE_PATTERN = r"^(?:global|key:[0-9a-f]{12}|tenant:[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$"
"""What a scope may be, as a regex (and in the routes' schema)."""
_SCOPE = re.compile(SCOPE_PATTERN)
_LATIN = "A-Za-z0-9\u00c0-\u024f"
"""What a word boundary is about: Latin letters (with their accented forms) and digits."""
_LATIN_CHAR = re.compile(f"[{_LATIN}]")

MAX_REPEAT = 1_000
"""Largest product of repetition counts along one nesting of a pattern (``(?:a{10}){100}`` is 1,000): compiling
``(?:a{1000}){1000}`` took 274 MB, ``a{1000}`` 12 MB (the interpreter's own)."""
_COUNT = re.compile(r"\{(\d*)(?:,(\d*))?\}")
"""A counted repeat, ``{m}``, ``{m,}``, ``{,n}`` or ``{m,n}``, where a quantifier may stand."""
_BRACED_ESCAPE = frozenset("pPNx")
r"""Escapes whose argument may be in braces (``\p{L}``, ``\N{name}``, ``\x{263a}``): not a count."""
_PROBES = ("", "a", "Aa 1.", "the API, 用API调用。\n", "x" * 3)
"""Texts on which a pattern the standard library cannot parse must not match empty."""


class PronunciationEntry(BaseModel):
    """One stored entry."""

    id: str
    kind: EntryKind
    match: str = Field(description="The word, or the regex pattern.")
    replacement: str
    language: EntryLanguage = "auto"
    scope: str = GLOBAL
    case_sensitive: bool = False
    created_at: float


@dataclass(frozen=True)
class DictionaryLimits:
    """The bounds an entry is held to (from settings)."""

    max_pattern_chars: int
    max_replacement_chars: int
    regex_timeout_s: float


class DictionaryError(ValueError):
    """An entry that cannot be stored, naming the field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class DictionaryTimeout(Exception):
    """A regex entry ran past its time limit on a text (catastrophic backtracking); names the entry."""

    def __init__(self, entry: PronunciationEntry) -> None:
        super().__init__(
            f"the pronunciation entry {entry.id} (regex {entry.match!r}) ran past its time limit on this text; "
            "an admin should fix or delete it"
        )
        self.entry = entry


def check_scope(scope: str) -> str:
    """``global``, ``key:<12 hex>`` or ``tenant:<name>``, or :class:`DictionaryError`."""
    if not _SCOPE.fullmatch(scope):
        raise DictionaryError("scope", "scope is 'global', 'key:<key id>' or 'tenant:<tenant name>'")
    return scope


def caller_scopes(key_id: str | None, tenant: str | None) -> tuple[str, ...]:
    """The scopes whose entries apply to a caller, nearest first: its key, its tenant, then global."""
    scopes = [f"key:{key_id}"] if key_id is not None else []
    if tenant is not None:
        scopes.append(f"tenant:{tenant}")
    return (*scopes, GLOBAL)


def _compile_regex(pattern: str) -> regex.Pattern[str]:
    return regex.compile(pattern, regex.VERSION0)


def _repeat_weight(pattern: str) -> int:
    """The largest product of repetition counts along any nesting of ``pattern``, read without compiling it:
    what a compiler that unrolls counted repeats multiplies out. Escapes and character classes are skipped; a
    count's weight is its largest bound given (``{2,5}``: 5; ``{3,}``: 3)."""
    outer: list[int] = []
    current = last = 1
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            if pattern[index + 1 : index + 2] in _BRACED_ESCAPE and pattern[index + 2 : index + 3] == "{":
                index = pattern.find("}", index) if "}" in pattern[index:] else len(pattern)
            else:
                index += 1
            last = 1
        elif char == "[":
            index += 1
            index += 1 if pattern[index : index + 1] == "^" else 0
            index += 1 if pattern[index : index + 1] == "]" else 0  # a leading "]" is one of the class's characters
            while index < len(pattern) and pattern[index] != "]":
                index += 2 if pattern[index] == "\\" else 1
            last = 1
        elif char == "(":
            outer.append(current)
            current = 1
        elif char == ")":
            last = current
            current = max(outer.pop() if outer else 1, current)
        elif char == "{" and (count := _COUNT.match(pattern, index)) is not None:
            bounds = [int(bound) for bound in count.groups() if bound]
            last *= max(bounds, default=1)
            current = max(current, last)
            index = count.end() - 1
        else:
            last = 1
        current = max(current, last)
        index += 1
    return max([current, *outer])


def _min_width(pattern: str, compiled: regex.Pattern[str], timeout_s: float) -> int | None:
    """The shortest match ``pattern`` can have: from the standard library's parser where it can read the pattern
    (its syntax is mostly the ``regex`` module's), else 0 if it matches empty in one of :data:`_PROBES` (None:
    no empty match seen)."""
    try:
        parser: Any = importlib.import_module("re._parser")  # private: typeshed does not describe it

        width: int = parser.parse(pattern).getwidth()[0]
        return width
    except Exception:  # noqa: BLE001 - regex-only syntax (\p{L}, fuzzy matching...): probe it instead
        pass
    for text in _PROBES:
        for found in compiled.finditer(text, timeout=timeout_s):
            if found.end() == found.start():
                return 0
    return None


def check_entry(entry: PronunciationEntry, limits: DictionaryLimits) -> None:
    """Refuse an entry that could not be applied, with the field and the reason (:class:`DictionaryError`)."""
    check_scope(entry.scope)
    if not entry.match:
        raise DictionaryError("match", "match is empty")
    if len(entry.match) > limits.max_pattern_chars:
        raise DictionaryError("match", f"match is {len(entry.match)} characters long; the limit is {limits.max_pattern_chars}")
    if len(entry.replacement) > limits.max_replacement_chars:
        raise DictionaryError(
            "replacement",
            f"replacement is {len(entry.replacement)} characters long; the limit is {limits.max_replacement_chars}",
        )
    forbidden = find_forbidden_tokens(entry.replacement)
    if forbidden:
        raise DictionaryError("replacement", f"replacement contains the ChatTTS control token(s) {', '.join(forbidden)}")
    if entry.kind == "word":
        if entry.match != entry.match.strip():
            raise DictionaryError("match", "a word may not start or end with whitespace")
        return
    weight = _repeat_weight(entry.match)
    if weight > MAX_REPEAT:
        raise DictionaryError(
            "match", f"the pattern's repetition counts multiply to {weight}; at most {MAX_REPEAT} are allowed (not compiled)"
        )
    try:
        compiled = _compile_regex(entry.match)
    except regex.error as exc:
        raise DictionaryError("match", f"not a valid regular expression: {exc}") from exc
    try:
        empty = compiled.match("", timeout=limits.regex_timeout_s)
        width = 0 if empty is not None else _min_width(entry.match, compiled, limits.regex_timeout_s)
    except TimeoutError as exc:
        raise DictionaryError("match", "the pattern ran past its time limit on a sample text") from exc
    if empty is not None:
        raise DictionaryError("match", "the pattern matches the empty string (it would insert its replacement everywhere)")
    if width == 0:
        raise DictionaryError(
            "match",
            "the pattern can match zero characters (an anchor, a lookaround or an optional part alone, like \\b or "
            "(?=x)): it would insert its replacement at every place it holds",
        )
    # A match object with every group of the pattern (unmatched), to check the replacement's group references on.
    probe = _compile_regex(f"(?:{entry.match})|").match("")
    try:
        if probe is not None:
            probe.expand(entry.replacement)
    except (IndexError, regex.error) as exc:
        raise DictionaryError("replacement", f"the replacement refers to a group the pattern lacks: {exc}") from exc


def _boundary_word(word: str, case_sensitive: bool) -> str:
    """The stdlib pattern of a word entry: the literal, with a Latin boundary at each end that is Latin."""
    body = re.escape(word)
    if not case_sensitive:
        body = f"(?i:{body})"
    before = f"(?<![{_LATIN}])" if _LATIN_CHAR.match(word[0]) else ""
    after = f"(?![{_LATIN}])" if _LATIN_CHAR.match(word[-1]) else ""
    return before + body + after


def _nonempty(replacement: str) -> Callable[[regex.Match[str]], str]:
    """``replacement`` for a match with characters, nothing for an empty one: an entry stored before zero-width
    patterns were refused still rewrites only what it matched."""

    def expand(found: regex.Match[str]) -> str:
        return found.expand(replacement) if found.end() > found.start() else ""

    return expand


@dataclass(frozen=True)
class _Applier:
    """The entries for one caller's scopes and one language, compiled: regexes in order, then the words' alternation."""

    regexes: tuple[tuple[PronunciationEntry, regex.Pattern[str]], ...]
    words: re.Pattern[str] | None
    replacements: tuple[str, ...]

    def apply(self, text: str, timeout_s: float) -> str:
        for entry, pattern in self.regexes:
            try:
                text = pattern.sub(_nonempty(entry.replacement), text, timeout=timeout_s, concurrent=True)
            except TimeoutError as exc:
                raise DictionaryTimeout(entry) from exc
        if self.words is not None:
            text = self.words.sub(lambda match: self.replacements[int((match.lastgroup or "w0")[1:])], text)
        return text


class Dictionary:
    """Every entry, as loaded at one version; applies the ones that fit a caller and a text (rules: module doc).

    Compiling a caller's entries costs more than applying them, so the compiled form is kept per (scopes, language),
    for the ``cached`` most recent ones; a new version is a new :class:`Dictionary`, so nothing stale is kept.
    """

    def __init__(self, entries: Iterable[PronunciationEntry], version: int, timeout_s: float, cached: int = 256) -> None:
        self.entries = sorted(entries, key=lambda e: (e.created_at, e.id))
        self.version = version
        self.timeout_s = timeout_s
        self._cached = cached
        self._appliers: OrderedDict[tuple[tuple[str, ...], str], _Applier | None] = OrderedDict()

    def apply(self, text: str, scopes: Sequence[str]) -> str:
        """``text`` with the entries of ``scopes`` (nearest first, :func:`caller_scopes`) applied."""
        if not self.entries:
            return text
        applier = self._applier(tuple(scopes), detect_language(text))
        return text if applier is None else applier.apply(text, self.timeout_s)

    def runs_regexes(self, text: str, scopes: Sequence[str]) -> bool:
        """Whether :meth:`apply` runs a regex entry on ``text`` for ``scopes``: work that may take up to the time
        limit per entry, which a caller pays for and runs off the event loop (words take microseconds)."""
        if not self.entries:
            return False
        applier = self._applier(tuple(scopes), detect_language(text))
        return applier is not None and bool(applier.regexes)

    def _applier(self, scopes: tuple[str, ...], language: str) -> _Applier | None:
        key = (scopes, language)
        if key in self._appliers:
            self._appliers.move_to_end(key)
            return self._appliers[key]
        applier = self._compile(scopes, language)
        self._appliers[key] = applier
        if len(self._appliers) > self._cached:
            self._appliers.popitem(last=False)
        return applier

    def _compile(self, scopes: tuple[str, ...], language: str) -> _Applier | None:
        rank = {scope: index for index, scope in enumerate(scopes)}
        fitting = [e for e in self.entries if e.scope in rank and e.language in (language, "auto")]
        if not fitting:
            return None
        nearest_first = sorted(fitting, key=lambda e: rank[e.scope])  # stable: oldest first within a scope
        regexes = tuple((e, _compile_regex(e.match)) for e in nearest_first if e.kind == "regex")
        words: dict[tuple[str, bool], PronunciationEntry] = {}
        for entry in nearest_first:
            if entry.kind == "word":
                words.setdefault((entry.match if entry.case_sensitive else entry.match.casefold(), entry.case_sensitive), entry)
        chosen = sorted(words.values(), key=lambda e: (-len(e.match), not e.case_sensitive))
        alternation = "|".join(f"(?P<w{index}>{_boundary_word(e.match, e.case_sensitive)})" for index, e in enumerate(chosen))
        return _Applier(regexes, re.compile(alternation) if chosen else None, tuple(e.replacement for e in chosen))
