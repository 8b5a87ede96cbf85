"""What normalising a realtime session's text costs, with the fast path (:func:`spoken_as_is`) and without it.

    python -m bench.engine.normalise_cost [--rounds 100]

One isolated :class:`TextNormalizer` (what the engines use: the graphs in a child process), its graphs loaded first.
Each set of texts is normalised ``--rounds`` times two ways, alternating in blocks (:data:`BLOCKS`): through the graphs
for every piece (what :meth:`TextNormalizer.normalize` did before the fast path: the text cut around control tokens,
every piece sent to the child) and through :meth:`TextNormalizer.normalize` as it is now. The CPU time of both
processes (the caller's and the child's, from the kernel) is summed per variant; both variants' outputs are compared,
text by text.

The sets: the realtime benchmarks' sentences (``bench.listening.text_in``, whose first three are
``bench.listening.profile_session``'s), the same with a number in every other one, and plain Chinese sentences.
Writes ``bench/results/normalise-cost.md``.
"""

from __future__ import annotations

import argparse
import time

import psutil

from bench.listening.text_in import SENTENCES
from bench.stacks import RESULTS, record, utc_now
from ttsq.inference.engines.normalize import _CONTROL_TOKEN, Language, TextNormalizer

NUMBERED = [s.replace("the ", "the 2 ", 1) if i % 2 else s for i, s in enumerate(SENTENCES)]
"""Every other sentence given a digit, so that it must go through the graphs."""

CHINESE = [
    "今天天气很好，我们去公园散步吧。",
    "火车又晚点了，大家都在雨中等待。",
    "一只小狗坐在长椅旁边，看着空荡荡的铁轨。",
    "人们匆匆走进来，抖掉外套上的水。",
]

SETS: list[tuple[str, Language, list[str]]] = [
    ("realtime sentences (en)", "en", SENTENCES),
    ("every other with a number (en)", "en", NUMBERED),
    ("plain sentences (zh)", "zh", CHINESE),
]


BLOCKS = 5
"""The rounds run in this many blocks per variant, the variants alternating: the kernel counts CPU time in ticks
(10 ms), so each reading spans many texts."""


def through_graphs(normalizer: TextNormalizer, text: str, lang: Language) -> str:
    """What :meth:`TextNormalizer.normalize` did before the fast path: every piece between control tokens to the child."""
    child = normalizer._child
    assert child is not None
    pieces = _CONTROL_TOKEN.split(text)
    pieces[0::2] = child.call([lang], pieces[0::2])
    return "".join(pieces)


def cpu_s(*processes: psutil.Process) -> float:
    total = 0.0
    for process in processes:
        times = process.cpu_times()
        total += times.user + times.system
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()

    normalizer = TextNormalizer(isolated=True)
    normalizer.preload(("zh", "en"))
    child = normalizer._child
    assert child is not None and child._process is not None
    processes = (psutil.Process(), psutil.Process(child._process.pid))

    rows = []
    data = {}
    for name, lang, texts in SETS:
        spent = {"graphs": 0.0, "fast path": 0.0}
        for _ in range(BLOCKS):
            for variant in spent:
                start = cpu_s(*processes)
                for _ in range(args.rounds // BLOCKS):
                    for text in texts:
                        if variant == "graphs":
                            through_graphs(normalizer, text, lang)
                        else:
                            normalizer.normalize(text, lang)
                spent[variant] += cpu_s(*processes) - start
        same = all(through_graphs(normalizer, t, lang) == normalizer.normalize(t, lang) for t in texts)
        calls = args.rounds // BLOCKS * BLOCKS * len(texts)
        before, after = (spent[v] / calls * 1000 for v in ("graphs", "fast path"))
        ratio = after / before if before else float("nan")
        rows.append(f"| {name} | {len(texts)} | {before:.2f} | {after:.3f} | {ratio:.3f} | {'yes' if same else 'NO'} |")
        data[name] = {"texts": len(texts), "graphs_ms": before, "fast_path_ms": after, "ratio": ratio, "same": same}
        print(rows[-1], flush=True)

    report = "\n".join(
        [
            "# Normalising a realtime session's text: the graphs for every piece vs the fast path",
            "",
            f"`python -m bench.engine.normalise_cost --rounds {args.rounds}`, {utc_now()}; an isolated normaliser (graphs in a",
            "child process), CPU of both processes from the kernel, per text, each text normalised "
            f"{args.rounds} times per variant (in {BLOCKS} alternating blocks).",
            "",
            "| texts | count | graphs: CPU ms per text | fast path: CPU ms per text | fast path / graphs | same output |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
    record(RESULTS / "normalise-cost.md", report, {"rounds": args.rounds, "at": time.time(), "sets": data})


if __name__ == "__main__":
    main()
