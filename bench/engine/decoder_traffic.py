"""Closed-loop traffic through an engine's batcher, for :mod:`bench.engine.decoder`'s mixed section.

The requests each kind of traffic draws (:func:`traffic`), the loop that keeps a number of them in flight and measures
jobs per second and per CPU-second of the whole process (:func:`closed_loop`), and the row-steps ChatTTS's grouped calls
spend on rows that had ended (:func:`grouped_waste`). Every engine of a run meets the same sequence of requests
(:func:`requests_of`).
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from ttsq.domain.sampling import Sampling
from ttsq.inference.base import Batcher, ChunkReady, Engine, PieceReady, SynthesisRequest

__all__ = [
    "MAX_CHUNK_CHARS",
    "SENTENCES",
    "SHORT_CHUNK_CHARS",
    "SHORT_SENTENCES",
    "SHORT_TOKENS",
    "Traffic",
    "closed_loop",
    "grouped_waste",
    "requests_of",
    "traffic",
]

SENTENCES = (
    "The morning train was late again today.",
    "她说明天下午三点在门口见面。",
    "Please leave a message after the tone.",
    "我们出去走走吧，今天天气很好。",
    "The report is due at the end of the week.",
    "这是一段用于测试吞吐量的文字。",
    "A quiet street, a cup of tea, a long book.",
    "请把窗户关上，外面有点冷。",
)
"""Each fits one chunk of ``MAX_CHUNK_CHARS = 48``: a request of n sentences is n rows."""
MAX_CHUNK_CHARS = 48

SHORT_SENTENCES = 4
"""Short requests (traffic ``short``): four sentences each, every request its own voice, seed and sampling."""
SHORT_CHUNK_CHARS = 20
"""``MAX_CHUNK_CHARS`` for short requests: an English sentence of :data:`SENTENCES` becomes two or three chunks, a
Chinese one stays whole, so a request is 4-12 rows (short rows: what a chat reply or a notification is cut into)."""
SHORT_TOKENS = 48
"""``MIN_NEW_TOKEN = MAX_NEW_TOKEN`` for short requests: every row runs exactly this many decode steps in both engines
(random weights would otherwise end rows at random)."""


@dataclasses.dataclass
class Traffic:
    name: str
    make: Callable[[random.Random, int], SynthesisRequest]


def sentences_in(rng: random.Random) -> int:
    """1 to 20 sentences, log-uniform: as many requests of 1-2 sentences as of 10-20 (real traffic is mostly short)."""
    return min(20, round(2 ** rng.uniform(0, 4.33)))


def _sampling(rng: random.Random) -> Sampling:
    return Sampling(temperature=rng.choice([0.2, 0.3, 0.5]), top_p=rng.choice([0.6, 0.7, 0.9]), top_k=rng.choice([10, 20, 30]))


def traffic(kind: str, engine: Engine) -> Traffic:
    """``mixed``: 1-20 sentences, every request its own voice, seed and sampling; ``same``: 1-20 sentences, one voice and
    one set of parameters; ``short``: four sentences, every request its own voice, seed and sampling, as a job nobody
    listens to (``pieces=False``: how the worker runs a submit-then-poll job), for settings of
    :data:`SHORT_CHUNK_CHARS` and :data:`SHORT_TOKENS`."""
    voice = engine.speaker_from_seed(7)

    def text(rng: random.Random) -> str:
        return " ".join(rng.choice(SENTENCES) for _ in range(sentences_in(rng)))

    def own(rng: random.Random, words: str, pieces: bool) -> SynthesisRequest:
        return SynthesisRequest(
            text=words,
            speaker=engine.speaker_from_seed(rng.randrange(1 << 20)),
            seed=rng.randrange(1 << 30),
            sampling=_sampling(rng),
            pieces=pieces,
        )

    if kind == "mixed":
        return Traffic("mixed voices, seeds and parameters", lambda rng, n: own(rng, text(rng), True))
    if kind == "short":

        def short(rng: random.Random, n: int) -> SynthesisRequest:
            return own(rng, " ".join(rng.choice(SENTENCES) for _ in range(SHORT_SENTENCES)), False)

        return Traffic("four sentences, each request its own voice, seed and parameters", short)
    if kind != "same":
        raise ValueError(f"unknown traffic {kind!r} (mixed, same, short)")

    def same(rng: random.Random, n: int) -> SynthesisRequest:
        return SynthesisRequest(text=text(rng), speaker=voice, seed=rng.randrange(1 << 30))

    return Traffic("one voice, one set of parameters", same)


def requests_of(flow: Traffic) -> Callable[[int], SynthesisRequest]:
    """The n-th request of a run: every engine meets the same sequence."""
    rng = random.Random(20261201)
    return lambda n: flow.make(rng, n)


def closed_loop(batcher: Batcher, make: Callable[[int], SynthesisRequest], clients: int, requests: int) -> dict[str, Any]:
    """``clients`` requests in flight at all times, each replaced the moment it ends, until ``requests`` ended. CPU is
    the process's (every thread: the decode loop, and the prefill and audio threads beside it)."""
    made = [make(n) for n in range(requests)]  # drawn before the clock starts (a voice draw costs milliseconds)
    started: dict[str, float] = {}
    chunks: dict[str, int] = {}
    latencies: list[float] = []
    issued = 0
    begin, begin_cpu = time.perf_counter(), time.process_time()
    steps_before, rows_before, slots_before = batcher.stats.steps, batcher.stats.row_steps, batcher.stats.slot_steps

    def issue() -> None:
        nonlocal issued
        key = f"q{issued}"
        started[key] = time.perf_counter()
        for event in batcher.add(key, made[issued]):
            raise RuntimeError(f"request failed at once: {event}")
        issued += 1

    for _ in range(min(clients, requests)):
        issue()
    audio_rows = 0
    while len(latencies) < requests:
        for event in batcher.step():
            if isinstance(event, PieceReady):
                continue  # a piece of a chunk still being made: its ChunkReady follows
            if not isinstance(event, ChunkReady):
                raise RuntimeError(f"request failed: {event}")
            audio_rows += 1
            chunks[event.key] = chunks.get(event.key, 0) + 1
            if chunks[event.key] == event.chunk.total:
                latencies.append(time.perf_counter() - started.pop(event.key))
                if issued < requests:
                    issue()
    elapsed, cpu = time.perf_counter() - begin, time.process_time() - begin_cpu
    steps = batcher.stats.steps - steps_before
    row_steps = batcher.stats.row_steps - rows_before
    slot_steps = batcher.stats.slot_steps - slots_before
    latencies.sort()
    return {
        "requests": requests,
        "rows": audio_rows,
        "seconds": round(elapsed, 2),
        "jobs_per_s": round(requests / elapsed, 4),
        "cpu_seconds": round(cpu, 2),
        "jobs_per_cpu_s": round(requests / cpu, 4),
        "cores": round(cpu / elapsed, 2),
        "latency_p50_s": round(statistics.median(latencies), 3),
        "latency_p99_s": round(latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 3),
        "steps": steps,
        "mean_occupied": round(row_steps / steps, 2) if steps else None,
        "wasted_row_steps": round(1 - row_steps / slot_steps, 4) if slot_steps else None,
    }


def grouped_waste(reference: Engine, make: Callable[[int], SynthesisRequest], requests: int, slots: int) -> dict[str, Any]:
    """ChatTTS's loop runs a call until its longest row ends: the row-steps spent on rows that had ended,
    from each chunk's length in tokens (its audio length over 512 samples a token). A grouped step makes
    two calls, its requests' first chunks and then all their other chunks (what ttsq always did)."""
    batcher = reference.batcher(slots, oom_recover_s=60)
    for n in range(requests):
        batcher.add(f"q{n}", make(n))
    useful = computed = 0
    while batcher.busy:
        events = [event for event in batcher.step() if isinstance(event, ChunkReady)]
        for call in ([e for e in events if e.chunk.index == 0], [e for e in events if e.chunk.index > 0]):
            tokens = [max(1, round(event.chunk.samples.size / 512)) for event in call]
            if tokens:
                useful += sum(tokens)
                computed += max(tokens) * len(tokens)
    return {"useful_row_steps": useful, "computed_row_steps": computed, "wasted_row_steps": round(1 - useful / computed, 4)}
