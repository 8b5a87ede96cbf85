"""Re-typed sentences, for measuring the result cache's hit ratio on text people send in slightly different forms.

This module was written WITHOUT looking at the project's cache-key code (ttsq/), its tests, or the
benchmark that replays the cache. That is deliberate: a key's authors test it on the variations
they thought of, and such a test mostly confirms their own choices. Here the variations come from
how users, input methods (IMEs), copy-paste and programs actually re-type a sentence, so the hit
ratio measured with them says how the key does on re-typings its authors did not choose.

Every transformation keeps what a person would call "the same sentence". Some of them genuinely
change what a TTS model sees (an ASCII comma instead of a Chinese one, a dropped question mark);
no attempt is made to guess what the model or the key normalizes, because guessing would bias
the measurement towards the key.

Numbers are out of scope: no sentence contains digits.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import NamedTuple

SENTENCES: list[str] = [
    # Chinese: the punctuation a Chinese IME produces, with quotes, book-title marks and brackets.
    "今天天气很好，我们一起去公园散步吧。",
    "请问，最近的地铁站怎么走？",
    "会议将在下午开始，请大家提前做好准备。",
    "他笑着说：“没关系，下次再来。”",
    "我最喜欢的书是《红楼梦》，你呢？",
    "这家餐厅的菜很好吃，价格也不贵！",
    "请把窗户关上；外面风太大了。",
    "春天来了，花开了，鸟儿也唱起了歌。",
    "你好，欢迎致电客户服务中心，请问有什么可以帮您？",
    "列车即将到站，请携带好您的随身物品。",
    "妈妈说：“早点回家，路上注意安全。”",
    "我们需要买苹果、香蕉、橘子和葡萄。",
    "这个问题比较复杂（至少对我来说），需要慢慢想。",
    "他想了很久……最后还是决定留下来。",
    "人工智能——尤其是语音合成——正在改变我们的生活。",
    "明天会下雨吗？记得带伞！",
    "请打开手机的 Wi-Fi 设置，然后重新连接。",
    "《西游记》讲述了唐僧师徒西天取经的故事。",
    "谢谢你的帮助，我真的非常感激！",
    "小明问老师：“为什么天空是蓝色的？”",
    # English: ordinary keyboard punctuation, apostrophes and straight quotes.
    "Good morning, and welcome to the city library.",
    "Please hold the line; your call is important to us.",
    "Could you tell me where the nearest train station is?",
    "I can't believe it's already the end of the year!",
    'She said, "Let\'s meet at the coffee shop after work."',
    "The weather today will be sunny, with a light breeze in the afternoon.",
    "Note: the museum is closed on public holidays.",
    "Thank you for your patience while we connect you to an agent.",
    "Don't forget to bring your umbrella; it might rain later.",
    "Wait... did you hear that noise outside?",
    "The quick brown fox jumps over the lazy dog.",
    "Reading is to the mind what exercise is to the body.",
    "We'll need eggs, flour, sugar, and a little butter.",
    "Is this the right way to the airport?",
    "Congratulations! You've just completed your first lesson.",
    'He whispered, "Everything is going to be fine."',
    "The meeting has been moved to Friday - please update your calendar.",
    "Turn left at the next corner, then go straight for a while.",
    "My grandmother's garden is full of roses and tulips.",
    "Attention, passengers: the train to the airport is now boarding.",
]

# What a Chinese IME's punctuation becomes when the user types it in English mode (or a program
# "cleans" it). The enumeration comma has no ASCII key; people type a comma for it.
_CJK_TO_ASCII: dict[str, str] = {
    "，": ",",
    "。": ".",
    "！": "!",
    "？": "?",
    "：": ":",
    "；": ";",
    "（": "(",
    "）": ")",
    "、": ",",
    "《": "<",
    "》": ">",
}

# The reverse: English typed while a Chinese IME is in Chinese-punctuation mode.
_ASCII_TO_CJK: dict[str, str] = {
    ",": "，",
    ".": "。",
    "!": "！",
    "?": "？",
    ":": "：",
    ";": "；",
}

_ZERO_WIDTH: tuple[str, ...] = ("\u200b", "\u200d", "\ufeff", "\u2060")
_PUNCTUATION: frozenset[str] = frozenset(",.!?:;，。！？：；、")
_FINAL_PUNCTUATION: frozenset[str] = frozenset(".!?。！？")
# Quote pairs people and programs swap between: Chinese curly, straight ASCII, corner brackets.
_QUOTE_STYLES: tuple[tuple[str, str], ...] = (("“", "”"), ('"', '"'), ("「", "」"))
_QUOTE_CHARS: frozenset[str] = frozenset('“”"「」')


def _is_cjk(char: str) -> bool:
    """True for a CJK unified ideograph: the characters between which extra spaces appear."""
    return "\u4e00" <= char <= "\u9fff"


def _has_cjk(text: str) -> bool:
    """True when the sentence is (at least partly) Chinese, so Chinese-only re-typings apply."""
    return any(_is_cjk(c) for c in text)


def _has_latin(text: str) -> bool:
    """True when the text has ASCII letters, so case and full-width letter changes apply."""
    return any(c.isascii() and c.isalpha() for c in text)


def _positions(text: str, rng: random.Random, predicate: Callable[[int], bool], share: float) -> set[int]:
    """Pick a random share (at least one) of the indices satisfying `predicate`.

    Why: people introduce stray characters in a few places, not everywhere, and the replay
    should cover both one stray change and many.
    """
    candidates = [i for i in range(len(text)) if predicate(i)]
    if not candidates:
        return set()
    chosen = {i for i in candidates if rng.random() < share}
    if not chosen:
        chosen.add(rng.choice(candidates))
    return chosen


def _ascii_punct(text: str, rng: random.Random) -> str:
    """Chinese punctuation typed half-width: an IME in English mode, or a program that "cleans" text.

    Sometimes every mark is converted, sometimes only some (the user toggled the IME mid-sentence);
    sometimes a space follows each ASCII mark, as English typing habits add one.
    """
    convert_all = rng.random() < 0.5
    add_space = rng.random() < 0.4
    out: list[str] = []
    for i, char in enumerate(text):
        if char in _CJK_TO_ASCII and (convert_all or rng.random() < 0.5):
            out.append(_CJK_TO_ASCII[char])
            if add_space and i < len(text) - 1 and char not in "（《":
                out.append(" ")
        else:
            out.append(char)
    return "".join(out)


def _fullwidth_punct(text: str, rng: random.Random) -> str:
    """English punctuation typed full-width: a Chinese IME left in Chinese mode while typing English."""
    convert_all = rng.random() < 0.6
    return "".join(_ASCII_TO_CJK[c] if c in _ASCII_TO_CJK and (convert_all or rng.random() < 0.5) else c for c in text)


def _cjk_spaces(text: str, rng: random.Random) -> str:
    """Spaces between Chinese characters: text copied from PDFs, justified layouts or typed by hand.

    Either a few stray spaces, or a space between every character (letter-spaced titles in PDFs);
    occasionally the ideographic space U+3000 that a full-width IME inserts.
    """
    space = "\u3000" if rng.random() < 0.2 else " "
    share = 1.0 if rng.random() < 0.25 else 0.2
    chosen = _positions(text, rng, lambda i: i + 1 < len(text) and _is_cjk(text[i]) and _is_cjk(text[i + 1]), share)
    return "".join(c + space if i in chosen else c for i, c in enumerate(text))


def _punct_spaces(text: str, rng: random.Random) -> str:
    """Spaces around punctuation: a space before a mark (French-style habits) or after a Chinese one."""
    before = rng.random() < 0.4

    def is_target(i: int) -> bool:
        if text[i] not in _PUNCTUATION:
            return False
        if before:
            return i > 0 and text[i - 1] != " "
        return i + 1 < len(text) and text[i + 1] != " "

    chosen = _positions(text, rng, is_target, 0.5)
    if before:
        return "".join(" " + c if i in chosen else c for i, c in enumerate(text))
    return "".join(c + " " if i in chosen else c for i, c in enumerate(text))


def _double_spaces(text: str, rng: random.Random) -> str:
    """Doubled spaces between words: two-spaces-after-punctuation typists and sloppy editing."""
    chosen = _positions(text, rng, lambda i: text[i] == " ", 0.3)
    return "".join("  " if i in chosen else c for i, c in enumerate(text))


def _edge_whitespace(text: str, rng: random.Random) -> str:
    """Leading or trailing whitespace: a copied line with its newline, an indented paste, a CRLF file."""
    pieces = (" ", "  ", "\n", "\r\n", "\t", " \n")
    lead = rng.choice(pieces) if rng.random() < 0.5 else ""
    trail = rng.choice(pieces) if rng.random() < 0.7 or not lead else ""
    return lead + text + trail


def _line_break(text: str, rng: random.Random) -> str:
    """A newline or tab where a space was, or a hard wrap after a Chinese mark: text pasted from a wrapped source."""
    brk = rng.choice(("\n", "\r\n", "\t"))
    spaces = [i for i, c in enumerate(text) if c == " "]
    if spaces:
        at = rng.choice(spaces)
        return text[:at] + brk + text[at + 1 :]
    marks = [i for i, c in enumerate(text[:-1]) if c in _PUNCTUATION]
    at = rng.choice(marks) if marks else rng.randrange(1, len(text))
    return text[: at + 1] + brk + text[at + 1 :]


def _nbsp(text: str, rng: random.Random) -> str:
    """No-break spaces for spaces: text copied from web pages and word processors."""
    chosen = _positions(text, rng, lambda i: text[i] == " ", 0.5)
    return "".join("\u00a0" if i in chosen else c for i, c in enumerate(text))


def _zero_width(text: str, rng: random.Random) -> str:
    """Invisible characters: a BOM from a file, zero-width joiners and spaces from chat apps and web copies."""
    chars = list(text)
    if rng.random() < 0.3:
        chars.insert(0, "\ufeff")
    for _ in range(rng.randint(1, 2)):
        chars.insert(rng.randrange(len(chars) + 1), rng.choice(_ZERO_WIDTH))
    return "".join(chars)


def _fullwidth_char(char: str) -> str:
    """The full-width form of a printable ASCII character (U+FF01..U+FF5E), or the character itself."""
    return chr(ord(char) + 0xFEE0) if "!" <= char <= "~" else char


def _fullwidth_latin(text: str, rng: random.Random) -> str:
    """Full-width Latin letters: English typed with a Chinese/Japanese IME in full-width mode.

    Either the whole sentence (spaces becoming U+3000 too) or just one word.
    """
    if rng.random() < 0.5:
        return "".join("\u3000" if c == " " else _fullwidth_char(c) for c in text)
    words = text.split(" ")
    latin = [i for i, w in enumerate(words) if _has_latin(w)]
    at = rng.choice(latin)
    words[at] = "".join(_fullwidth_char(c) if c.isascii() and c.isalpha() else c for c in words[at])
    return " ".join(words)


def _quote_style(text: str, rng: random.Random) -> str:
    """A different quote style: curly, straight or corner quotes, as different keyboards and editors produce.

    Apostrophes flip between straight and curly too, as word processors' "smart quotes" do.
    """
    out: list[str] = []
    opening = True
    current = ("", "")
    for pair in _QUOTE_STYLES:
        if pair[0] in text:
            current = pair
            break
    targets = [pair for pair in _QUOTE_STYLES if pair != current]
    open_q, close_q = rng.choice(targets)
    for char in text:
        if char in _QUOTE_CHARS:
            out.append(open_q if opening else close_q)
            opening = not opening
        elif char == "'":
            out.append("\u2019")
        elif char == "\u2019":
            out.append("'")
        else:
            out.append(char)
    return "".join(out)


def _case_change(text: str, rng: random.Random) -> str:
    """Letter case changes: all lower case (phone typing), all caps (shouting), Title Case (headlines)."""
    mode = rng.choice(("lower", "upper", "title"))
    if mode == "lower" and text != text.lower():
        return text.lower()
    if mode == "upper" and text != text.upper():
        return text.upper()
    # Title Case word by word: str.title() would write "Can'T".
    titled = " ".join(w[:1].upper() + w[1:] for w in text.split(" "))
    return titled if titled != text else text.lower()


def _ellipsis_dash(text: str, rng: random.Random) -> str:
    """Ellipses and dashes written differently: …… vs … vs ... vs 。。。, —— vs -- vs —, " - " vs " — "."""
    if "……" in text:
        text = text.replace("……", rng.choice(("...", "…", "......", "。。。")))
    elif "..." in text:
        text = text.replace("...", rng.choice(("…", "……", "..")))
    if "——" in text:
        text = text.replace("——", rng.choice(("--", "—", "-", " -- ")))
    elif " - " in text:
        text = text.replace(" - ", rng.choice((" — ", " -- ", "—", " – ")))
    return text


def _drop_final_punct(text: str, rng: random.Random) -> str:
    """The final full stop, question or exclamation mark left out, as in chat and search boxes."""
    del rng  # deterministic: there is only one final mark
    end = len(text) - 1
    while end >= 0 and (text[end].isspace() or text[end] in _ZERO_WIDTH):  # skip what earlier re-typings appended
        end -= 1
    if end >= 0 and text[end] in _FINAL_PUNCTUATION:
        return text[:end] + text[end + 1 :]
    return text


class Transformation(NamedTuple):
    """One way of re-typing a sentence; `weight` says how common it is relative to the others."""

    name: str
    weight: float
    applies: Callable[[str], bool]
    apply: Callable[[str, random.Random], str]


def _always(text: str) -> bool:
    """Applicability of re-typings that fit any sentence."""
    return bool(text)


TRANSFORMATIONS: tuple[Transformation, ...] = (
    Transformation("ascii_punct", 3.0, lambda t: any(c in _CJK_TO_ASCII for c in t), _ascii_punct),
    Transformation("fullwidth_punct", 0.5, lambda t: not _has_cjk(t) and any(c in _ASCII_TO_CJK for c in t), _fullwidth_punct),
    Transformation("cjk_spaces", 2.0, _has_cjk, _cjk_spaces),
    Transformation("punct_spaces", 2.0, lambda t: any(c in _PUNCTUATION for c in t), _punct_spaces),
    Transformation("double_spaces", 2.0, lambda t: " " in t, _double_spaces),
    Transformation("edge_whitespace", 3.0, _always, _edge_whitespace),
    Transformation("line_break", 1.5, lambda t: len(t) > 1, _line_break),
    Transformation("nbsp", 1.0, lambda t: " " in t, _nbsp),
    Transformation("zero_width", 1.5, _always, _zero_width),
    Transformation("fullwidth_latin", 0.7, _has_latin, _fullwidth_latin),
    Transformation("quote_style", 2.0, lambda t: any(c in _QUOTE_CHARS or c == "'" for c in t), _quote_style),
    Transformation("case_change", 2.0, _has_latin, _case_change),
    Transformation("ellipsis_dash", 2.0, lambda t: any(s in t for s in ("……", "...", "——", " - ")), _ellipsis_dash),
    Transformation("drop_final_punct", 1.0, lambda t: len(t) > 1 and t[-1] in _FINAL_PUNCTUATION, _drop_final_punct),
)


def retype(sentence: str, rng: random.Random) -> tuple[str, list[str]]:
    """Re-type `sentence` with 1 to 3 randomly chosen transformations; return the text and their names.

    Transformations are drawn by weight, without repetition, among those that fit the sentence
    (no case change for a purely Chinese one). Only transformations that changed the text are
    named, and the result always differs from the sentence, so every re-typed request is a real
    test of the key.
    """
    wanted = rng.randint(1, 3)
    candidates = [t for t in TRANSFORMATIONS if t.applies(sentence)]
    text = sentence
    applied: list[str] = []
    while len(applied) < wanted and candidates:
        (pick,) = rng.choices(candidates, weights=[t.weight for t in candidates])
        candidates.remove(pick)
        changed = pick.apply(text, rng)
        if changed != text:
            text = changed
            applied.append(pick.name)
    if text == sentence:  # a later change undid an earlier one: fall back on one that always shows
        text = _edge_whitespace(sentence, rng)
        applied = ["edge_whitespace"]
    return text, applied


ZIPF_EXPONENT = 1.1
RETYPE_PROBABILITY = 0.6


def replay(count: int, seed: int) -> list[tuple[int, str, list[str]]]:
    """A deterministic stream of `count` requests: (sentence index, text sent, transformations applied).

    Popularity is Zipf-like, as in real TTS traffic (a few prompts, greetings and notices are
    requested over and over); which sentences are popular is shuffled by the seed, so Chinese and
    English both appear among the head. With probability 0.6 a request is re-typed, else it is the
    sentence verbatim with no transformations. The same (count, seed) always yields the same list.
    """
    rng = random.Random(seed)
    ranked = list(range(len(SENTENCES)))
    rng.shuffle(ranked)
    cum_weights = list(itertools.accumulate(1.0 / (rank + 1) ** ZIPF_EXPONENT for rank in range(len(ranked))))
    requests: list[tuple[int, str, list[str]]] = []
    for _ in range(count):
        (index,) = rng.choices(ranked, cum_weights=cum_weights)
        sentence = SENTENCES[index]
        if rng.random() < RETYPE_PROBABILITY:
            text, names = retype(sentence, rng)
        else:
            text, names = sentence, []
        requests.append((index, text, names))
    return requests
