"""Spoken-form text normalization, so that numbers, dates and amounts are read aloud.

ChatTTS 0.2.5 registers no normalizer of its own and silently deletes every character outside
CJK, ASCII letters and a few punctuation marks: "I have 3 apples" is spoken as "I have apples".
WeTextProcessing's finite-state normalizers turn such text into words first ("three",
"二零二六年十一月三十日", "三点五元").

The normalizers would also rewrite ChatTTS's bracketed control tokens (``[laugh_1]`` becomes
``[laugh_一]`` or ``[laugh_ one ]``), so the text is cut around every control token and only the
pieces between them are normalized.

Loading one language's graphs takes about a second and they are immutable afterwards, so each
language is loaded at most once per process and shared by every :class:`TextNormalizer`.

A worker's normaliser runs in a child process of its own (``TextNormalizer(isolated=True)``, what the engines use):
pynini's compositions hold the GIL for tens of milliseconds a sentence, and in the worker's process they would stall
the decode loop of every stream in flight (its Python between the torch calls) each time a new request's text is
prepared. The child is this module run as a program (``python -m ttsq.inference.engines.normalize``), one JSON line
in and one out per call; it is started at the first call (or :meth:`TextNormalizer.preload`), started again if it
dies, and ends when its parent closes its input.

Most sentences hold nothing to normalise, yet the graphs cost as much for them as for any (and, isolated, a round trip
to the child): :func:`spoken_as_is` answers the text it can prove the graphs would give back unchanged, in the caller's
process, and only the other pieces go to the graphs.
"""

from __future__ import annotations

import atexit
import functools
import importlib.resources
import json
import logging
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import IO, Literal, Protocol, cast

from ttsq.domain.text import CHATTTS_CONTROL_TOKENS

__all__ = ["NormalizationUnavailableError", "TextNormalizer"]

Language = Literal["zh", "en"]

_CONTROL_TOKEN = re.compile("(" + "|".join(re.escape(token) for token in CHATTTS_CONTROL_TOKENS) + ")")

_ZH_FULLWIDTH = str.maketrans({",": "，", ".": "。", "!": "！", "?": "？", ";": "；", ":": "："})
"""The zh normalizer folds sentence punctuation to ASCII; ChatTTS's Chinese training text and
the sentence splitter both expect the full-width forms back."""


class NormalizationUnavailableError(RuntimeError):
    """WeTextProcessing is not installed; switch normalization off in the engine config instead."""


class _Normalizer(Protocol):
    def normalize(self, input: str) -> str: ...


_loaded: dict[Language, _Normalizer] = {}
_load_lock = threading.Lock()
_call_locks: dict[Language, threading.Lock] = {"zh": threading.Lock(), "en": threading.Lock()}


def _load(lang: Language) -> _Normalizer:
    """Load (once per process) the WeTextProcessing normalizer for ``lang``.

    WeTextProcessing sets its ``wetext`` logger to INFO when first imported and then logs graph
    file paths on every load, so the logger is turned down after the import, not before.
    """
    with _load_lock:
        normalizer = _loaded.get(lang)
        if normalizer is None:
            from tn.chinese.normalizer import Normalizer as ChineseNormalizer
            from tn.english.normalizer import Normalizer as EnglishNormalizer

            logging.getLogger("wetext").setLevel(logging.WARNING)
            normalizer = ChineseNormalizer() if lang == "zh" else EnglishNormalizer()
            _loaded[lang] = normalizer
        return normalizer


class TextNormalizer:
    """Rewrite text into its spoken form, leaving ChatTTS control tokens untouched.

    Thread-safe: graphs load lazily under a lock, and each language's calls are serialized
    because pynini's FST objects make no promise about concurrent use. ``isolated``: the graphs
    are loaded, and the text normalised, in a child process (the module docstring says why).
    """

    def __init__(self, *, isolated: bool = False) -> None:
        try:
            import tn  # noqa: F401
        except ImportError as exc:
            raise NormalizationUnavailableError(
                "text normalization needs WeTextProcessing (pip install wetextprocessing); "
                "install it or set normalize_text=False in the engine config"
            ) from exc

        self._child = _Child() if isolated else None

    def preload(self, langs: tuple[Language, ...] = ("zh", "en")) -> None:
        """Load the graphs now, so the first request in each language does not pay for it."""
        if self._child is not None:
            self._child.call(list(langs), [])
            return
        for lang in langs:
            _load(lang)

    def normalize(self, text: str, lang: Language) -> str:
        """Return ``text`` with numbers, dates, amounts and symbols written out as words."""
        if lang not in _call_locks:
            raise ValueError(f"unsupported language {lang!r}; expected 'zh' or 'en'")
        pieces = _CONTROL_TOKEN.split(text)
        texts = pieces[0::2]  # between the control tokens, which stay as they are
        known = [spoken_as_is(piece, lang) for piece in texts]
        rest = [piece for piece, said in zip(texts, known, strict=True) if said is None]
        if not rest:
            spoken: Iterator[str] = iter(())
        elif self._child is not None:
            spoken = iter(self._child.call([lang], rest))
        else:
            spoken = iter(normalize_pieces(lang, rest))
        pieces[0::2] = [said if said is not None else next(spoken) for said in known]
        return "".join(pieces)


def normalize_pieces(lang: Language, pieces: list[str]) -> list[str]:
    """Each of ``pieces`` (text without control tokens) in its spoken form, in this process."""
    normalizer = _load(lang)
    with _call_locks[lang]:
        return [_normalize_piece(normalizer, piece, lang) for piece in pieces]


_EN_WORD = r"(?:[a-z]+|[A-Z][a-z]*)(?:'[a-z]+)?[,.!?;:]?"
_EN_PLAIN = re.compile(f"{_EN_WORD}(?: {_EN_WORD})*")
_EN_INITIAL = re.compile(r"(?<![A-Za-z'])[A-Z][,.!?;:]")
_LETTERS = re.compile("[A-Za-z]+")
_ZH_PLAIN = re.compile("[\u4e00-\u9fff，。！？；：、]+")


def spoken_as_is(piece: str, lang: Language) -> str | None:
    """``piece`` as :func:`normalize_pieces` would give it back, where that is certain without the graphs; else ``None``.

    Most sentences hold nothing to speak differently, and the graphs cost milliseconds a sentence however plain it is
    (a child process's round trip on top, for an isolated normaliser). What is answered here is exact, never a guess:

    * en: words of ASCII letters, lower case or capitalised (one leading capital), an apostrophe and lower-case
      letters after it, one mark of ``,.!?;:`` at a word's end, single spaces between words. The English graphs
      rewrite such text only through their word lists (``Mr`` -> ``Mister``, ``Aabo`` -> ``AABO``), so any run of
      letters that is in one of them is refused (:func:`_refused`); so is a capital letter alone before a mark
      ("U. S. A." is joined into "USA") and "per" before a space (the measure graph reads "per h" as "per hour", and
      "paper cm" as "pa per centimeter"). Capitals in a row (``IV``, ``CA``, ``TV``), digits, symbols, other marks
      and doubled spaces all go to the graphs.
    * zh: Han characters of the basic block and the full-width marks ``，。！？；：、``, nothing else. The Chinese graphs
      keep such text except where a character is traditional (made simplified), an interjection (呃, 啊: deleted),
      儿 (erhua: deleted) or part of a word-list entry: those characters are refused. The full-width marks come
      back half-width from the graphs and :data:`_ZH_FULLWIDTH` folds them back, so they are kept as they are.

    A test proves on the shipped graphs, for all accepted text at once, that their taggers read it as plain words and
    marks (zh: single characters) and nothing cheaper (``tests/unit/inference/engines/test_normalize_fast_path_proof.py``);
    property tests compare this function with the graphs on text drawn from what it accepts and from around it.
    """
    core = piece.strip()
    if not core:
        return piece
    english, elided, han = _refused()
    if lang == "en":
        plain = (
            _EN_PLAIN.fullmatch(core)
            and "per " not in core
            and not _EN_INITIAL.search(core)
            and english.isdisjoint(_LETTERS.findall(core))
            and not ("'" in core and elided.search(core))
        )
    else:
        plain = _ZH_PLAIN.fullmatch(core) and han.isdisjoint(core)
    return piece if plain else None


@functools.cache
def _refused() -> tuple[frozenset[str], re.Pattern[str], frozenset[str]]:
    """The runs of English letters and the Han characters :func:`spoken_as_is` leaves to the graphs, read from the
    word lists WeTextProcessing builds its graphs from (so a new version's entries are refused too).

    English: every run of two or more letters in an entry of the whitelists (``tts.tsv``, ``alternatives.tsv``), as
    cased; an entry that needs a lone capital before a mark ("A. D.") can never match accepted text and adds nothing,
    and runs of one letter ("World War I") are left out where the entry has a longer run to refuse it by. An entry
    with an apostrophe is refused as well wherever a word starts with it: one entry there is cheaper for the graphs than
    two words and a mark, so ``A'ma`` turns "A'maa" into "AMA a" though no run of it is ``ma``.
    Chinese: the traditional characters, the interjections, 儿, and every character of a whitelist entry that accepted
    text could hold (the erhua entries all hold 儿, the others Latin letters or digits: none adds a character).
    """
    data = importlib.resources.files("tn")

    def keys(path: str) -> list[str]:
        lines = (data / path).read_text(encoding="utf-8").splitlines()
        return [line.split("\t")[0].strip() for line in lines if line.strip()]

    english: set[str] = set()
    elided: list[str] = []
    for key in keys("english/data/whitelist/tts.tsv") + keys("english/data/whitelist/alternatives.tsv"):
        if not _en_possible(key):
            continue
        runs = _LETTERS.findall(key)
        english.update([run for run in runs if len(run) > 1] or runs)
        if "'" in key:
            elided.append(re.escape(key))
    han: set[str] = set("儿")
    for path in ("char/traditional_to_simple.tsv", "default/blacklist.tsv"):
        han.update(*keys(f"chinese/data/{path}"))
    for path in ("default/whitelist.tsv", "erhua/whitelist.tsv"):
        for key in keys(f"chinese/data/{path}"):
            if _ZH_PLAIN.fullmatch(key) and han.isdisjoint(key):
                han.update(key)
    starts = re.compile(f"(?<![A-Za-z'])(?:{'|'.join(sorted(elided, key=len, reverse=True)) or '(?!)'})")
    return frozenset(english), starts, frozenset(han)


def _en_possible(key: str) -> bool:
    """Whether a word-list entry can be part of English text that :func:`spoken_as_is` accepts: starting at a word's
    start, inside its letters or after its apostrophe, and ending at a word's end or inside its letters."""
    for text in (f"{before}{key}{after}" for before in ("", "x", "x'") for after in ("", "x")):
        if _EN_PLAIN.fullmatch(text) and not _EN_INITIAL.search(text):
            return True
    return False


class _Child:
    """The normalising child process of an isolated :class:`TextNormalizer`: one call at a time, started on demand."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None
        atexit.register(self._stop)

    def call(self, langs: list[str], pieces: list[str]) -> list[str]:
        """``pieces`` normalised in ``langs[0]`` (none: only load ``langs``). A child that died (killed, out of
        memory) is started again once; a second failure in a row is the caller's error."""
        with self._lock:
            for attempt in (1, 2):
                process = self._running()
                try:
                    stdin, stdout = cast(IO[str], process.stdin), cast(IO[str], process.stdout)
                    stdin.write(json.dumps({"langs": langs, "pieces": pieces}) + "\n")
                    stdin.flush()
                    line = stdout.readline()
                    if not line:
                        raise EOFError("the normaliser's process ended")
                except (OSError, EOFError):
                    self._stop()
                    if attempt == 2:
                        raise
                    continue
                reply = json.loads(line)
                if "error" in reply:
                    raise ValueError(reply["error"])
                return cast(list[str], reply["pieces"])
        raise AssertionError("unreachable")

    def _running(self) -> subprocess.Popen[str]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, "-m", __name__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                encoding="utf-8",
            )
        return self._process

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()


def _serve() -> None:
    """The child: one JSON request a line on stdin, one reply a line on stdout, until stdin closes."""
    for line in sys.stdin:
        request = json.loads(line)
        langs = cast(list[Language], request["langs"])
        try:
            for lang in langs:
                _load(lang)
            reply: dict[str, object] = {"pieces": normalize_pieces(langs[0], request["pieces"]) if request["pieces"] else []}
        except Exception as exc:  # noqa: BLE001 - the parent's call fails with it, the child serves on
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def _normalize_piece(normalizer: _Normalizer, piece: str, lang: Language) -> str:
    """Normalize text between control tokens, keeping its surrounding whitespace.

    The normalizers trim their input, which would glue English words to a neighbouring token
    ("Hello [uv_break] world" -> "Hello[uv_break]world").
    """
    core = piece.strip()
    if not core:
        return piece
    lead = piece[: len(piece) - len(piece.lstrip())]
    trail = piece[len(piece.rstrip()) :]
    spoken = normalizer.normalize(core)
    if lang == "zh":
        spoken = spoken.translate(_ZH_FULLWIDTH)
    return lead + spoken + trail


if __name__ == "__main__":
    _serve()
