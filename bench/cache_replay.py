"""Hit ratio of the result cache on a replay of realistic near-duplicate requests.

A generated workload: a few hundred requests drawn (Zipf-like) from 50 base sentences, each
re-typed the way people and programs re-type text — extra or missing spaces, tabs and newlines,
full-width letters and punctuation from an IME, zero-width characters pasted from a web page.
The hit ratio is the share of requests whose cache key was already seen, with ttsq's key
normalization and with a key over the raw text. No service is needed: this measures the key.

    python -m bench.cache_replay [--requests 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable

from tests.helpers import params_for
from ttsq.schemas import SubmitRequest

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


def hit_ratio(keys: list[str]) -> float:
    seen: set[str] = set()
    hits = 0
    for key in keys:
        hits += key in seen
        seen.add(key)
    return hits / len(keys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    requests = workload(args.requests, args.seed)
    normalized = []
    for _, text in requests:
        key = params_for(SubmitRequest(text=text, voice="zh_female"), 500, "bench").cache_key
        assert key is not None
        normalized.append(key)
    raw = [text for _, text in requests]
    ideal = [str(index) for index, _ in requests]
    variants = sum(text != SENTENCES[index] for index, text in requests)
    print(f"requests: {len(requests)} over {len(SENTENCES)} sentences (Zipf), {variants} of them re-typed variants")
    print("| key | hit ratio |")
    print("|---|---|")
    print(f"| raw text (no normalization) | {hit_ratio(raw):.1%} |")
    print(f"| ttsq key (width folding, whitespace, invisible characters) | {hit_ratio(normalized):.1%} |")
    print(f"| upper bound (every variant recognised as its sentence) | {hit_ratio(ideal):.1%} |")


if __name__ == "__main__":
    main()
