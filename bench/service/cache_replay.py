"""Hit ratio of the result cache on replays of realistic near-duplicate requests.

Two generated workloads, each 2,000 requests drawn Zipf-like from a set of sentences with 60% of
them re-typed:

* ``ours`` — 50 sentences re-typed by this module's own variants (width forms, whitespace runs,
  zero-width characters, edge whitespace), written beside the key code;
* ``independent`` — :mod:`bench.service.retype`: 40 sentences re-typed by 14 kinds of variation (IME
  punctuation, spaces between Chinese characters, quote styles, case, dropped final marks, ...),
  written without looking at the key code, so the key is measured on variations its authors did
  not choose.

The hit ratio is the share of requests whose key was already seen. Keys compared: the raw text; the
previous key (width folding, whitespace, invisible characters); ttsq's key (that, plus ChatTTS's
view: its punctuation rewriting and the spaces its tokenizer ignores); and the **upper bound**, a
key made of the tokens the model really sees — ChatTTS's own normalizer, then the tiny checkpoint's
tokenizer — so a variant counts as a repeat exactly when the model cannot tell it apart. No service
is needed: this measures the keys.

**Sharing scopes.** The same replays sent by many API keys measure what tenant isolation costs: with
``CACHE_SCOPE=global`` every key hits every other's entries; with ``CACHE_SCOPE=tenant`` (the
default, one key per tenant) a request hits only what its own key asked for before. Each request is
given one of 10 or 100 keys, evenly or Zipf-like (a few keys send most requests), and the ttsq key is
computed with that key's scope, as the API computes it.

    python -m bench.service.cache_replay [--requests 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from importlib.resources import files
from typing import Any

import tokenizers

from bench.service import retype
from bench.stacks import ROOT, record, utc_now
from ttsq.api.schemas import SubmitRequest
from ttsq.api.service import build_params
from ttsq.domain.text import clean_text, detect_language, fold_width
from ttsq.domain.voices import builtin
from ttsq.inference.engines.checkpoint import build_tiny_checkpoint

RESULTS = ROOT / "bench" / "results" / "cache_replay.md"

SENTENCES_EN = [
    "Your order has shipped.",
    "Please hold, an agent will be with you shortly.",
    "The meeting starts at 3 pm.",
    "Thank you for calling.",
    "Your verification code is 4 8 1 5.",
    "Turn left at the next junction.",
    "The weather today is sunny with light wind.",
    "Battery low, please charge the device.",
    "Welcome back!",
    "Press one for sales, two for support.",
    "Your balance is 25 dollars.",
    "The train to Boston is delayed.",
    "Good morning, how can I help you?",
    "Please try again later.",
    "Payment received, thank you.",
    "Door is open.",
    "Mind the gap.",
    "Your table is ready.",
    "The file has been saved.",
    "Goodbye and have a nice day.",
    "Recording will start after the tone.",
    "Your package is out for delivery.",
    "The store closes in ten minutes.",
    "Please fasten your seat belt.",
    "New message from Anna.",
]
SENTENCES_ZH = [
    "您好，欢迎光临。",
    "您的订单已发货。",
    "请稍候，客服马上为您服务。",
    "会议将在下午三点开始。",
    "感谢您的来电。",
    "前方路口请左转。",
    "今天天气晴朗。",
    "电量不足，请及时充电。",
    "欢迎回来！",
    "请按一号键转人工服务。",
    "列车晚点，请耐心等待。",
    "早上好，请问有什么可以帮您？",
    "请稍后再试。",
    "付款成功，谢谢。",
    "门已打开。",
    "请注意脚下安全。",
    "您的座位已准备好。",
    "文件已保存。",
    "再见，祝您愉快。",
    "提示音后开始录音。",
    "您的包裹正在派送中。",
    "商店将在十分钟后关门。",
    "请系好安全带。",
    "您有一条新消息。",
    "祝您生日快乐！",
]
SENTENCES = SENTENCES_EN + SENTENCES_ZH


def widen(text: str, rng: random.Random) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" and rng.random() < 0.5 else c for c in text)


def respace(text: str, rng: random.Random) -> str:
    return "".join(rng.choice(["  ", "\t", "\n", " \n"]) if c == " " and rng.random() < 0.5 else c for c in text)


def zero_width(text: str, rng: random.Random) -> str:
    spot = rng.randrange(len(text) + 1)
    return text[:spot] + rng.choice(["\u200b", "\ufeff", "\u200d"]) + text[spot:]


def edge_whitespace(text: str, rng: random.Random) -> str:
    return rng.choice(["", " ", "\n"]) + text + rng.choice(["", " ", "\n", "\r\n"])


VARIANTS: list[Callable[[str, random.Random], str]] = [widen, respace, zero_width, edge_whitespace]


def workload(requests: int, seed: int) -> list[tuple[int, str]]:
    """(base sentence index, the text as sent) pairs; 60% of requests are re-typed variants."""
    rng = random.Random(seed)
    weights = [1 / (rank + 1) for rank in range(len(SENTENCES))]
    requests_out = []
    for _ in range(requests):
        index = rng.choices(range(len(SENTENCES)), weights)[0]
        text = SENTENCES[index]
        if rng.random() < 0.6:
            for variant in rng.sample(VARIANTS, rng.randint(1, 2)):
                text = variant(text, rng)
        requests_out.append((index, text))
    return requests_out


def hit_ratio(keys: list[Any]) -> float:
    seen: set[Any] = set()
    hits = 0
    for key in keys:
        hits += key in seen
        seen.add(key)
    return hits / len(keys)


def ttsq_key(text: str, scope: str | None = None) -> str:
    body = SubmitRequest(text=text, voice="zh_female")
    key = build_params(body, builtin("zh_female"), max_text_chars=2000, model_identity="bench", scope=scope).cache_key
    assert key is not None
    return key


CALLERS = (10, 100)
"""How many API keys send a replay, in the sharing-scope comparison."""


def scope_report(name: str, requests: list[tuple[int, str]], seed: int) -> list[str]:
    """The hit ratio of one replay sent by many keys: shared by all (``CACHE_SCOPE=global``), or per key (``tenant``)."""
    texts = [text for _, text in requests]
    rng = random.Random(seed)
    rows = [("one scope for every key (`CACHE_SCOPE=global`)", hit_ratio([ttsq_key(text) for text in texts]))]
    for callers in CALLERS:
        zipf = [1 / (rank + 1) for rank in range(callers)]
        for spread, owners in (
            ("evenly", [rng.randrange(callers) for _ in texts]),
            ("Zipf-like", rng.choices(range(callers), zipf, k=len(texts))),
        ):
            keys = [ttsq_key(text, f"key:{owner}") for owner, text in zip(owners, texts, strict=True)]
            rows.append((f"a scope per key (`CACHE_SCOPE=tenant`), {callers} keys sending {spread}", hit_ratio(keys)))
    return [
        f"### sharing scopes, {name}: the same {len(requests)} requests sent by several API keys",
        "",
        "| sharing | hit ratio |",
        "|---|---|",
        *(f"| {label} | {ratio:.1%} |" for label, ratio in rows),
        "",
    ]


def model_tokens() -> Callable[[str], tuple[str, ...]]:
    """What the model sees: ChatTTS's normalizer (as the engine calls it), then the checkpoint's tokenizer."""
    import ChatTTS.norm

    normalizer = ChatTTS.norm.Normalizer(str(files("ChatTTS").joinpath("res", "homophones_map.json")))
    checkpoint = build_tiny_checkpoint(ROOT / "var" / "tiny-checkpoint")
    tokenizer = tokenizers.Tokenizer.from_file(str(checkpoint / "asset" / "tokenizer" / "tokenizer.json"))

    def tokens(text: str) -> tuple[str, ...]:
        normalized = normalizer(clean_text(fold_width(text)), True, True, detect_language(text))
        encoding = tokenizer.encode(normalized, add_special_tokens=False)
        return tuple(
            normalized[start:end].lower() if token == "[UNK]" else token
            for token, (start, end) in zip(encoding.tokens, encoding.offsets, strict=True)
        )

    return tokens


def report(name: str, requests: list[tuple[int, str]], sentences: list[str], tokens: Callable[[str], tuple[str, ...]]) -> list[str]:
    variants = sum(text != sentences[index] for index, text in requests)
    rows: dict[str, list[Any]] = {
        "raw text (no normalization)": [text for _, text in requests],
        "previous key (width folding, whitespace, invisible characters)": [clean_text(fold_width(t)) for _, t in requests],
        "ttsq key (the above, then ChatTTS's punctuation rewriting and ignored spaces)": [ttsq_key(t) for _, t in requests],
        "upper bound: the tokens the model sees": [tokens(t) for _, t in requests],
    }
    lines = [
        f"### {name}: {len(requests)} requests over {len(sentences)} sentences (Zipf), {variants} re-typed",
        "",
        "| key | hit ratio |",
        "|---|---|",
        *(f"| {label} | {hit_ratio(keys):.1%} |" for label, keys in rows.items()),
        "",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tokens = model_tokens()
    ours = workload(args.requests, args.seed)
    independent = [(index, text) for index, text, _ in retype.replay(args.requests, args.seed)]
    lines = [
        f"Command: `.venv/bin/python -m bench.service.cache_replay --requests {args.requests} --seed {args.seed}`",
        f"Date: {utc_now()}",
        "",
        *report("ours (bench/service/cache_replay.py variants)", ours, SENTENCES, tokens),
        *report("independent (bench/service/retype.py, written without the key code)", independent, retype.SENTENCES, tokens),
        *scope_report("ours", ours, args.seed),
        *scope_report("independent", independent, args.seed),
    ]
    output = "\n".join(lines)
    print(output)
    record(RESULTS, output + "\n")


if __name__ == "__main__":
    main()
