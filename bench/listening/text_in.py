"""Text in as an LLM writes it: when does a realtime session's first audio come, against the first sentence alone?

A voice agent streams an LLM's reply into ``/v1/tts/realtime`` a word at a time. The session can speak only once
the first sentence is complete; the question is what it adds on top of that. Per run, side by side on one service:

* **session**: a 6-sentence reply sent a word every 30-80 ms (seeded random pauses, an LLM's pace), while the
  client reads; ``complete`` is when the word that ends the first sentence was sent, ``first`` when the first audio
  frame came, both from the session's start;
* **alone**: the first sentence by itself, ``POST /v1/tts/submit`` then ``GET /v1/tts/stream/{id}?format=pcm``, the
  first audio byte timed from just before the submit (ttsq's own first-audio time for that sentence).

The target: ``first - complete <= alone + 0.1 s``. The two modes alternate, every request has its own seed
and the cache is off (``bench.listening.ttfa``'s deployment: one redis-server, one worker on the tiny checkpoint, one API), so
drift in machine load hits both alike. Also reported: the session's last audio against the same text submitted whole
and streamed (the price, if any, of speaking a text as separate chunks).

    python -m bench.listening.text_in [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from websockets.asyncio.client import connect

from bench.listening.ttfa import Checkpoint, service
from bench.stacks import ROOT, record, utc_now

RESULTS = ROOT / "bench" / "results" / "text_in.md"
SENTENCES = [
    "The morning train was late again, so everyone waited in the rain.",
    "A small dog sat beside the bench and watched the empty tracks.",
    "When the train finally arrived, the doors opened with a loud sigh.",
    "People hurried inside, shaking water from their coats and umbrellas.",
    "By the time we reached the city, the sun was shining brightly.",
    "Nobody mentioned the delay, and the day went on as planned.",
]
"""Six sentences of about ten words, each one chunk (``MAX_CHUNK_CHARS=80`` in ``bench.listening.ttfa``)."""


@dataclass
class Run:
    complete_s: float
    first_s: float
    last_s: float
    alone_first_s: float
    whole_last_s: float

    @property
    def lag_s(self) -> float:
        """What the session added after the first sentence was complete."""
        return self.first_s - self.complete_s

    @property
    def margin_s(self) -> float:
        """``lag - alone``: the target is at most 0.1 s."""
        return self.lag_s - self.alone_first_s


@dataclass
class Results:
    runs: list[Run] = field(default_factory=list)


async def session(url: str, seed: int, pauses: random.Random) -> tuple[float, float, float]:
    """One reply streamed in word by word: (first sentence complete, first audio, last audio), from the start."""
    words = " ".join(SENTENCES).split(" ")
    first_end = len(SENTENCES[0].split(" "))
    ws_url = url.replace("http://", "ws://") + "/v1/tts/realtime"
    async with connect(ws_url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.start", "seed": seed}))
        json.loads(await ws.recv())
        began = time.perf_counter()
        complete = 0.0

        async def write() -> None:
            nonlocal complete
            for n, word in enumerate(words, start=1):
                await ws.send(json.dumps({"type": "text", "text": word + " "}))
                if n == first_end:
                    complete = time.perf_counter() - began
                await asyncio.sleep(pauses.uniform(0.030, 0.080))
            await ws.send(json.dumps({"type": "close"}))

        writing = asyncio.create_task(write())
        first = last = None
        async for message in ws:
            if isinstance(message, bytes):
                last = time.perf_counter() - began
                first = last if first is None else first
            elif json.loads(message)["type"] == "error":
                raise SystemExit(f"session error: {message}")
        await writing
        if first is None or last is None:
            raise SystemExit("the session sent no audio")
        return complete, first, last


def streamed(client: httpx.Client, url: str, text: str, seed: int) -> tuple[float, float]:
    """``text`` submitted and streamed: seconds from just before the submit to the first and the last audio byte."""
    started = time.perf_counter()
    task = client.post(
        f"{url}/v1/tts/submit", json={"text": text, "seed": seed, "format": "pcm", "listen": True}
    ).raise_for_status()
    first = last = None
    with client.stream("GET", f"{url}/v1/tts/stream/{task.json()['task_id']}", params={"format": "pcm"}) as response:
        for piece in response.iter_raw():
            if piece:
                last = time.perf_counter() - started
                first = last if first is None else first
    if first is None or last is None:
        raise SystemExit("a submitted text streamed no audio")
    return first, last


def measure(url: str, runs: int) -> Results:
    results = Results()
    pauses = random.Random(2026)
    with httpx.Client(timeout=120) as client:
        asyncio.run(session(url, 1, pauses))  # untimed: first-request costs of the API, the model and the socket
        streamed(client, url, SENTENCES[0], 2)
        for run in range(runs):
            seed = 100 + 10 * run
            complete, first, last = asyncio.run(session(url, seed, pauses))
            alone_first, _ = streamed(client, url, SENTENCES[0], seed + 1)
            _, whole_last = streamed(client, url, " ".join(SENTENCES), seed + 2)
            results.runs.append(Run(complete, first, last, alone_first, whole_last))
            print(f"run {run}: {results.runs[-1]}", flush=True)
    return results


def report(results: Results, runs: int, command: str) -> str:
    rows = results.runs

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"

    lines = [
        "# Realtime sessions: first audio with text streamed in",
        "",
        f"Command: `{command}`. Date: {utc_now()}. Tiny checkpoint, "
        "bench.listening.ttfa's deployment (CACHE_ENABLED=false, CPU_THREADS=1, 48 tokens a chunk, MAX_CHUNK_CHARS=80).",
        "",
        f"{runs} runs; median (min–max), seconds. A reply of {len(SENTENCES)} sentences sent a word every 30-80 ms.",
        "",
        "| measure | s |",
        "|---|---|",
        f"| first sentence complete (sent), from the session's start | {cell([r.complete_s for r in rows])} |",
        f"| session: first audio, from the session's start | {cell([r.first_s for r in rows])} |",
        f"| session: first audio after the first sentence was complete (lag) | {cell([r.lag_s for r in rows])} |",
        f"| the first sentence alone: submit to first audio byte | {cell([r.alone_first_s for r in rows])} |",
        f"| lag - alone (target <= 0.100) | {cell([r.margin_s for r in rows])} |",
        f"| session: last audio, from the session's start | {cell([r.last_s for r in rows])} |",
        f"| the reply submitted whole: submit to last audio byte | {cell([r.whole_last_s for r in rows])} |",
        "",
        f"Runs within the target: {sum(r.margin_s <= 0.1 for r in rows)} of {len(rows)}.",
        "",
        "Raw runs:",
        "",
        *(f"- {r}" for r in rows),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    command = ".venv/bin/python -m bench.listening.text_in" + (f" --runs {args.runs}" if args.runs != 5 else "")
    with tempfile.TemporaryDirectory() as tmp, service(Checkpoint("tiny-random", "tiny", args.runs, 120.0), Path(tmp)) as url:
        results = measure(url, args.runs)
    text = report(results, args.runs, command)
    record(RESULTS, text)
    print(text)


if __name__ == "__main__":
    main()
