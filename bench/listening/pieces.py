"""Audio within a chunk (``PIECE_TOKENS``) against a chunk's audio at its end (``PIECE_TOKENS=0``), side by side.

The criterion: one long sentence (a chunk of at least 250 tokens) on the full-size checkpoint on a CPU, time
to first audio at most 0.25× what it is without pieces, and time to the last byte at most 1.1×. Two services run at
once, each its own redis-server, ``python worker.py`` and ``uvicorn app:app``, the same checkpoint and settings but
``PIECE_TOKENS``: one with the defaults (pieces), one with ``PIECE_TOKENS=0`` (today's whole-chunk decode). Requests
alternate between them, one at a time (an idle worker only waits on Redis), so drift in the machine's load hits both
alike. Each request is ``POST /v1/tts/submit`` then ``GET /v1/tts/stream/{id}?format=pcm``: the time from just
before the submit to the first audio byte and to the last, and the streamed samples are checked to equal the stored
file's. Every chunk is forced to ``--tokens`` tokens (``MIN_NEW_TOKEN = MAX_NEW_TOKEN``), so both sides speak the
same length whatever random weights sample. The worker's step log says after how many decode steps of the first
chunk its first audio came (``first audio after N decode steps``).

    python -m bench.listening.pieces [--checkpoints tiny,full] [--runs 3] [--tokens 260]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import statistics
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

from bench import ROOT
from bench.listening.ttfa import FULL_CHECKPOINT_DIR, Checkpoint, service, wav_samples
from ttsq.inference.engines.checkpoint import build_random_checkpoint

TEXT = (
    "On the long road home that evening, while the rain kept falling on the fields and the old bus rattled over "
    "every stone, she told us the whole story of the summer she had spent by the sea"
)
"""One sentence (no sentence end inside), one chunk with MAX_CHUNK_CHARS=250."""
MAX_CHUNK_CHARS = 250
RESULTS = ROOT / "bench" / "results" / "pieces.md"
MODES = {"pieces": {}, "whole chunk": {"PIECE_TOKENS": "0"}}
"""The two services: default settings, and the same with a chunk's audio decoded at its end."""


@dataclass
class Side:
    first_s: list[float] = field(default_factory=list)
    last_s: list[float] = field(default_factory=list)
    audio_s: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    """Decode steps of the first chunk before its first audio (the worker's log)."""


def streamed(client: httpx.Client, url: str, seed: int, timeout_s: float) -> tuple[float, float, bytes, str]:
    """Seconds from submit to the first and to the last audio byte; the PCM16 bytes; the task id."""
    started = time.perf_counter()
    response = client.post(f"{url}/v1/tts/submit", json={"text": TEXT, "seed": seed, "format": "wav", "listen": True})
    task_id: str = response.raise_for_status().json()["task_id"]
    first = last = None
    pcm = bytearray()
    with client.stream("GET", f"{url}/v1/tts/stream/{task_id}", params={"format": "pcm"}, timeout=timeout_s) as stream:
        stream.raise_for_status()
        for piece in stream.iter_raw():
            if piece:
                last = time.perf_counter() - started
                first = last if first is None else first
                pcm += piece
    if first is None or last is None:
        raise SystemExit(f"task {task_id} streamed no audio")
    stored = client.get(f"{url}/v1/tts/result/{task_id}").raise_for_status().content
    if not np.array_equal(np.frombuffer(bytes(pcm), dtype="<i2"), wav_samples(stored)):
        raise SystemExit(f"task {task_id}: the streamed audio differs from the stored file")
    return first, last, bytes(pcm), task_id


def logged_steps(log: Path) -> list[int]:
    """The jobs' first-audio step counts in a worker's log (not its warm-up's, whose keys are ``local-N``)."""
    found = re.findall(r"(\S+): first audio after (\d+) decode steps", log.read_text(errors="replace"))
    return [int(steps) for key, steps in found if not key.startswith("local-")]


def measure(checkpoint: Checkpoint, tmp: Path, tokens: int) -> dict[str, Side]:
    sides = {mode: Side() for mode in MODES}
    with ExitStack() as stack, httpx.Client(timeout=30) as client:
        urls = {}
        for mode, settings in MODES.items():
            started = time.monotonic()
            folder = tmp / checkpoint.name / mode.replace(" ", "-")
            overrides = {"MAX_CHUNK_CHARS": str(MAX_CHUNK_CHARS), "LOG_LEVEL": "INFO", **settings}
            urls[mode] = stack.enter_context(service(checkpoint, folder, tokens, overrides))
            print(f"{checkpoint.name} / {mode}: service ready in {time.monotonic() - started:.1f}s", flush=True)
        for url in urls.values():  # untimed: first-request costs of the API and the model
            streamed(client, url, 1, checkpoint.timeout_s)
        for run in range(checkpoint.runs):
            for mode, url in urls.items() if run % 2 == 0 else reversed(urls.items()):
                first, last, pcm, _task = streamed(client, url, 100 + run, checkpoint.timeout_s)
                side = sides[mode]
                side.first_s.append(first)
                side.last_s.append(last)
                side.audio_s.append(len(pcm) / 2 / 24_000)
                print(f"  {checkpoint.name} {mode} run {run + 1}: first audio {first:.3f}s, last byte {last:.3f}s", flush=True)
    for mode in MODES:
        sides[mode].steps = logged_steps(tmp / checkpoint.name / mode.replace(" ", "-") / "worker.log")
    return sides


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def table(results: dict[str, dict[str, Side]]) -> str:
    lines = [
        "| checkpoint | mode | n | audio s | first audio s, median (min–max) | last byte s, median (min–max) "
        "| first-chunk steps before first audio | first audio / whole chunk's | last byte / whole chunk's |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, sides in results.items():
        base = sides["whole chunk"]
        for mode, side in sides.items():
            first = statistics.median(side.first_s) / statistics.median(base.first_s)
            last = statistics.median(side.last_s) / statistics.median(base.last_s)
            steps = f"{min(side.steps)}–{max(side.steps)}" if side.steps else "–"
            lines.append(
                f"| {name} | {mode} | {len(side.first_s)} | {statistics.median(side.audio_s):.2f} | {spread(side.first_s)} "
                f"| {spread(side.last_s)} | {steps} | {first:.2f} | {last:.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", default="tiny,full", help="comma-separated subset of tiny,full")
    parser.add_argument("--runs", type=int, default=3, help="timed requests per mode and checkpoint")
    parser.add_argument("--tokens", type=int, default=260, help="tokens of the one chunk (at least 250 for the criterion)")
    args = parser.parse_args()
    checkpoints = {
        "tiny": Checkpoint("tiny-random", "tiny", runs=args.runs, timeout_s=120),
        "full": Checkpoint("full-random", str(FULL_CHECKPOINT_DIR), runs=args.runs, timeout_s=600),
    }
    chosen = [name.strip() for name in args.checkpoints.split(",") if name.strip()]
    if unknown := set(chosen) - set(checkpoints):
        raise SystemExit(f"unknown checkpoint(s): {', '.join(sorted(unknown))}")
    if "full" in chosen:
        build_random_checkpoint(FULL_CHECKPOINT_DIR, "full")  # reused when intact
    tmp = Path(tempfile.mkdtemp(prefix="ttsq-pieces-"))
    load_before = os.getloadavg()[0]
    results = {checkpoints[name].name: measure(checkpoints[name], tmp, args.tokens) for name in chosen}
    command = f"python -m bench.listening.pieces --checkpoints {args.checkpoints} --runs {args.runs} --tokens {args.tokens}"
    lines = [
        f"Command: `.venv/bin/{command}`",
        f"Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"One {len(TEXT)}-character English sentence, one chunk (MAX_CHUNK_CHARS={MAX_CHUNK_CHARS}) forced to "
        f"{args.tokens} tokens; default settings (PIECE_TOKENS, PIECE_LOOKAHEAD) against PIECE_TOKENS=0; CPU_THREADS=1; "
        f"CACHE_ENABLED=false; two services side by side, requests alternating, one at a time; {os.cpu_count()} cores; "
        f"1-min load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after. Streamed audio checked equal "
        "to the stored file for every request.",
        "",
        table(results),
    ]
    print("\n".join(["", *lines]))
    RESULTS.write_text("\n".join(lines) + "\n")
    print(f"written to {RESULTS.relative_to(ROOT)}; logs: {tmp}")


if __name__ == "__main__":
    main()
