"""What one voice across a long text (``consistent_voice``) costs in ttsq's decoder.

``python -m bench.engine.consistent_voice [--full]`` — a burst of requests of four one-sentence chunks each, run through one
scheduler twice: plain, then with every request ``consistent`` (the later chunks wait for the first chunk's audio and
are prefilled with its speaker prompt). Reported per mode: the median and worst time from the burst to each request's
first and second chunk, the time to the last chunk, and the throughput in chunks per second. Every chunk is forced to
the same number of tokens (random weights would end rows at random), so the modes do the same decode work apart from
the longer prefills and the waiting. Tiny checkpoint by default, ``--full`` the full-size random one (slower). Written
to ``bench/results/consistent-voice[-full].md``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from bench.engine.decoder import RESULTS, SENTENCES, checkpoint, commit, cpu_settings
from bench.machine import machine
from bench.stacks import record, utc_now
from ttsq.inference.base import ChunkReady, SynthesisRequest
from ttsq.inference.engines.decoder_engine import DecoderEngine

REQUESTS = 8
SLOTS = 8
CHUNKS = 4


def burst(engine: DecoderEngine, consistent: bool) -> dict[str, float]:
    """Run :data:`REQUESTS` requests at once; seconds from the burst to each request's chunks, and the total."""
    scheduler = engine._scheduler(SLOTS, engine._limits(), oom_recover_s=0.0, capture=False, reserve=1)
    requests = [
        SynthesisRequest(
            text=" ".join(SENTENCES[(n + k) % len(SENTENCES)] for k in range(CHUNKS)),
            speaker=engine.speaker_from_seed(n),
            seed=n,
            consistent=consistent,
        )
        for n in range(REQUESTS)
    ]
    ready: dict[tuple[str, int], float] = {}
    started = time.perf_counter()
    for n, request in enumerate(requests):
        assert scheduler.add(f"r{n}", request) == []
    while scheduler.busy:
        for event in scheduler.step():
            assert isinstance(event, ChunkReady), event
            ready[(event.key, event.chunk.index)] = time.perf_counter() - started
    total = time.perf_counter() - started
    firsts = [ready[(f"r{n}", 0)] for n in range(REQUESTS)]
    seconds = [ready[(f"r{n}", 1)] for n in range(REQUESTS)]
    lasts = [max(t for (key, _), t in ready.items() if key == f"r{n}") for n in range(REQUESTS)]
    return {
        "first_median": statistics.median(firsts),
        "second_median": statistics.median(seconds),
        "second_max": max(seconds),
        "last_median": statistics.median(lasts),
        "total": total,
        "chunks_per_s": len(ready) / total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the full-size random checkpoint instead of the tiny one")
    args = parser.parse_args()
    torch.set_num_threads(1)
    date = utc_now()
    point = checkpoint("full" if args.full else "tiny", quick=True)
    settings = cpu_settings(point, min_new_token=point.tokens)
    engine = DecoderEngine(settings.engine_config(), cuda_graphs=False, batch_invariant=False, first_chunk_slots=1, overlap=True)
    engine.load()
    engine.warm_up()
    burst(engine, False)  # allocator and JIT warm for both modes alike
    lines = [
        "| mode | 1st chunk, median s | 2nd chunk, median s | 2nd chunk, worst s | last chunk, median s | total s | chunks/s |",
        "|---|---|---|---|---|---|---|",
    ]
    figures = {}
    for consistent in (False, True):
        figures[consistent] = result = burst(engine, consistent)
        lines.append(
            f"| {'consistent' if consistent else 'plain'} | {result['first_median']:.2f} | {result['second_median']:.2f} | "
            f"{result['second_max']:.2f} | {result['last_median']:.2f} | {result['total']:.2f} | {result['chunks_per_s']:.1f} |"
        )
        print(lines[-1], flush=True)
    plain, anchored = figures[False], figures[True]
    info = machine()
    suffix = "-full" if args.full else ""
    text = "\n".join(
        [
            f"# One voice across a long text: its cost in ttsq's decoder ({point.name} checkpoint)",
            "",
            f"`python -m bench.engine.consistent_voice{' --full' if args.full else ''}` — {date}, commit {commit()}. "
            f"Machine: {info['cpu']}, {info['cores']} cores; one torch thread, prefill and audio threads on (the CPU default). "
            f"{REQUESTS} requests of {CHUNKS} chunks at once into {SLOTS} slots, {point.tokens} tokens per chunk.",
            "",
            *lines,
            "",
            f"Consistent vs plain: 2nd chunk median ×{anchored['second_median'] / plain['second_median']:.2f}, "
            f"throughput ×{anchored['chunks_per_s'] / plain['chunks_per_s']:.2f}.",
            "",
        ]
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    record(RESULTS / f"consistent-voice{suffix}.md", text)
    print(text)


if __name__ == "__main__":
    main()
