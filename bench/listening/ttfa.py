"""Time to first audio (streaming) against total time (non-streaming), through the real service.

Streaming exists so that a listener hears the first sentence while the rest is still being
synthesised: the worker runs a text's first sentence chunk on its own, then the remaining chunks
in one batch, and publishes each chunk's audio to a Redis Stream the moment it exists. This
measures what that buys on this machine, for the tiny checkpoint and for the full-size
random-weight one (ChatTTS's real dimensions, so the real model's CPU cost):

* streaming: ``POST /v1/tts/submit``, then ``GET /v1/tts/stream/{id}?format=pcm``; the time from
  just before the submit to the first audio byte, and to the last one;
* non-streaming: submit, then poll ``GET /v1/tts/result/{id}`` every 20 ms until it answers 200.

Each checkpoint gets its own redis-server, ``python worker.py`` (``CACHE_ENABLED=false``, so every
request synthesises) and ``uvicorn app:app``; every request has its own seed; the two modes
alternate so that drift in machine load hits both alike. Each streamed result is checked to be
the same samples as the stored file.

    python -m bench.listening.ttfa [--quick] [--checkpoints tiny,full]
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf

from bench.stacks import ROOT, stop_processes
from ttsq.domain.text import split_sentences
from ttsq.inference.engines.checkpoint import build_random_checkpoint
from ttsq.runtime.launch import api_command, free_port, spawn, wait_until_ok, worker_command
from ttsq.store.local_redis import start_redis_server

TEXT = (
    "The morning train was late again, so everyone waited in the rain. "
    "A small dog sat beside the bench and watched the empty tracks. "
    "When the train finally arrived, the doors opened with a loud sigh. "
    "People hurried inside, shaking water from their coats and umbrellas. "
    "By the time we reached the city, the sun was shining brightly."
)
"""Five English sentences of about ten words each."""

MAX_CHUNK_CHARS = 80
"""Every sentence above is 60-70 characters, so each becomes its own chunk: 1 alone + a batch of 4."""
TOKENS_PER_CHUNK = 48
"""MAX_NEW_TOKEN = MIN_NEW_TOKEN: every chunk costs the same (about 1 s of audio), whatever the
random weights sample, and the full-size run stays within minutes on 2 cores."""
FULL_CHECKPOINT_DIR = ROOT / "var" / "full-random-checkpoint"
RESULTS = ROOT / "bench" / "results" / "ttfa.md"
POLL_S = 0.02


@dataclass(frozen=True)
class Checkpoint:
    name: str
    model: str
    """The worker's ``MODEL``: ``tiny`` or a checkpoint directory."""
    runs: int
    timeout_s: float
    """Bound on one request, so a stuck worker ends the benchmark instead of hanging it."""


@dataclass
class Results:
    ttfa_s: list[float] = field(default_factory=list)
    stream_last_s: list[float] = field(default_factory=list)
    total_s: list[float] = field(default_factory=list)
    audio_s: list[float] = field(default_factory=list)
    worker_streamed_s: list[float] = field(default_factory=list)
    """The worker's own time on each job (``finished_at - started_at``), to tell apart time spent
    synthesising from time spent delivering; polling every 20 ms takes CPU from the worker."""
    worker_polled_s: list[float] = field(default_factory=list)
    chunks: set[int] = field(default_factory=set)


@contextmanager
def service(
    checkpoint: Checkpoint, tmp: Path, tokens: int = TOKENS_PER_CHUNK, settings: dict[str, str] | None = None
) -> Iterator[str]:
    """Redis, one worker and the API for ``checkpoint`` (``tokens`` per chunk, and any other ``settings``); yields the
    API's URL and stops them all."""
    redis = start_redis_server(tmp / "redis")
    api_port, worker_port = free_port(), free_port()
    env = dict(
        os.environ,
        REDIS_URL=redis.url,
        MODEL=checkpoint.model,
        CACHE_ENABLED="false",
        CACHE_DIR=str(tmp / "cache"),
        MAX_NEW_TOKEN=str(tokens),
        MIN_NEW_TOKEN=str(tokens),
        MAX_CHUNK_CHARS=str(MAX_CHUNK_CHARS),
        CPU_THREADS="1",
        JOB_TIMEOUT_S=str(int(checkpoint.timeout_s)),
        PYTHONUNBUFFERED="1",
        LOG_LEVEL="WARNING",
    ) | (settings or {})
    processes: list[subprocess.Popen[bytes]] = []
    try:
        worker_env = env | {"WORKER_HEALTH_PORT": str(worker_port)}
        processes.append(spawn(worker_command(), cwd=ROOT, env=worker_env, log=tmp / "worker.log"))
        processes.append(spawn(api_command(api_port), cwd=ROOT, env=env, log=tmp / "api.log"))
        url = f"http://127.0.0.1:{api_port}"
        wait_until_ok(f"{url}/readyz", 60)
        wait_until_ok(f"http://127.0.0.1:{worker_port}/readyz", 300)  # model loaded and warmed
        yield url
    finally:
        stop_processes(processes)
        redis.stop()


def submit(client: httpx.Client, url: str, seed: int, *, listen: bool = False) -> str:
    """``listen``: the client follows the job's stream as it is made (its chunks then come in pieces)."""
    response = client.post(f"{url}/v1/tts/submit", json={"text": TEXT, "seed": seed, "format": "wav", "listen": listen})
    response.raise_for_status()
    task_id: str = response.json()["task_id"]
    return task_id


def streamed(client: httpx.Client, url: str, seed: int, timeout_s: float) -> tuple[float, float, bytes, str]:
    """Seconds from submit to the first and to the last audio byte; the PCM16 bytes; the task id."""
    started = time.perf_counter()
    task_id = submit(client, url, seed, listen=True)
    first = last = None
    pcm = bytearray()
    with client.stream("GET", f"{url}/v1/tts/stream/{task_id}", params={"format": "pcm"}, timeout=timeout_s) as response:
        response.raise_for_status()
        for piece in response.iter_raw():
            if not piece:
                continue
            last = time.perf_counter() - started
            if first is None:
                first = last
            pcm += piece
            if last > timeout_s:
                raise SystemExit(f"streaming {task_id} took over {timeout_s:.0f}s")
    if first is None or last is None:
        raise SystemExit(f"task {task_id} streamed no audio")
    return first, last, bytes(pcm), task_id


def polled(client: httpx.Client, url: str, seed: int, timeout_s: float) -> tuple[float, bytes, str]:
    """Seconds from submit until ``GET /v1/tts/result`` answers 200, polling every 20 ms; the file; the task id."""
    started = time.perf_counter()
    task_id = submit(client, url, seed)
    while True:
        response = client.get(f"{url}/v1/tts/result/{task_id}")
        if response.status_code == 200:
            return time.perf_counter() - started, response.content, task_id
        if response.status_code != 202:
            raise SystemExit(f"result of {task_id}: HTTP {response.status_code} {response.text[:200]}")
        if time.perf_counter() - started > timeout_s:
            raise SystemExit(f"task {task_id} not done after {timeout_s:.0f}s")
        time.sleep(POLL_S)


def worker_time(client: httpx.Client, url: str, task_id: str) -> tuple[float, int | None]:
    """The worker's time on a finished task, and its chunk count when the status still reports it."""
    body = client.get(f"{url}/v1/tts/tasks/{task_id}").raise_for_status().json()
    return float(body["finished_at"]) - float(body["started_at"]), body.get("chunks_total")


def wav_samples(wav: bytes) -> np.ndarray:
    samples, _rate = sf.read(io.BytesIO(wav), dtype="int16")
    return np.asarray(samples)


def measure(checkpoint: Checkpoint, url: str, seed_base: int) -> Results:
    results = Results()
    with httpx.Client(timeout=30) as client:
        # One untimed request in each mode pays the first-request costs of the API and the model.
        streamed(client, url, seed_base, checkpoint.timeout_s)
        polled(client, url, seed_base + 1, checkpoint.timeout_s)
        for run in range(checkpoint.runs):
            first, last, pcm, task_id = streamed(client, url, seed_base + 2 + 2 * run, checkpoint.timeout_s)
            stored = client.get(f"{url}/v1/tts/result/{task_id}")
            stored.raise_for_status()
            if not np.array_equal(np.frombuffer(pcm, dtype="<i2"), wav_samples(stored.content)):
                raise SystemExit(f"task {task_id}: the streamed audio differs from the stored file")
            total, wav, polled_id = polled(client, url, seed_base + 3 + 2 * run, checkpoint.timeout_s)
            for task, into in ((task_id, results.worker_streamed_s), (polled_id, results.worker_polled_s)):
                busy, chunks = worker_time(client, url, task)
                into.append(busy)
                if chunks is not None:
                    results.chunks.add(chunks)
            results.ttfa_s.append(first)
            results.stream_last_s.append(last)
            results.total_s.append(total)
            results.audio_s.append(wav_samples(wav).size / 24_000)
            print(
                f"  {checkpoint.name} run {run + 1}/{checkpoint.runs}: first audio {first:.3f}s, "
                f"last byte {last:.3f}s (streaming); total {total:.3f}s (non-streaming)",
                flush=True,
            )
    return results


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def table(results: dict[str, Results]) -> str:
    lines = [
        "| checkpoint | n | audio s | streaming: first audio s, median (min–max) | streaming: last byte s, median "
        "| non-streaming: total s, median (min–max) | TTFA / total | worker s per job, streamed / polled |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        ratio = statistics.median(r.ttfa_s) / statistics.median(r.total_s)
        lines.append(
            f"| {name} | {len(r.ttfa_s)} | {statistics.median(r.audio_s):.2f} | {spread(r.ttfa_s)} | "
            f"{statistics.median(r.stream_last_s):.3f} | {spread(r.total_s)} | {ratio:.2f} | "
            f"{statistics.median(r.worker_streamed_s):.3f} / {statistics.median(r.worker_polled_s):.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 runs on tiny and 1 on full instead of 5 and 3")
    parser.add_argument("--checkpoints", default="tiny,full", help="comma-separated subset of tiny,full")
    args = parser.parse_args()
    chunks = split_sentences(TEXT, MAX_CHUNK_CHARS)
    if len(chunks) != 5:
        raise SystemExit(f"the benchmark text should split into 5 chunks, got {len(chunks)}")
    checkpoints = {
        "tiny": Checkpoint("tiny-random", "tiny", runs=2 if args.quick else 5, timeout_s=60),
        "full": Checkpoint("full-random", str(FULL_CHECKPOINT_DIR), runs=1 if args.quick else 3, timeout_s=240),
    }
    chosen = [name.strip() for name in args.checkpoints.split(",") if name.strip()]
    unknown = set(chosen) - set(checkpoints)
    if unknown:
        raise SystemExit(f"unknown checkpoint(s): {', '.join(sorted(unknown))}")
    if "full" in chosen:
        started = time.monotonic()
        build_random_checkpoint(FULL_CHECKPOINT_DIR, "full")  # reused when intact (hashing ~1 s)
        print(f"full-size checkpoint ready at {FULL_CHECKPOINT_DIR} ({time.monotonic() - started:.1f}s)", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="ttsq-ttfa-"))
    load_before = os.getloadavg()[0]
    results: dict[str, Results] = {}
    for index, name in enumerate(chosen):
        checkpoint = checkpoints[name]
        started = time.monotonic()
        with service(checkpoint, tmp / name) as url:
            print(f"{checkpoint.name}: service ready in {time.monotonic() - started:.1f}s", flush=True)
            results[checkpoint.name] = measure(checkpoint, url, seed_base=1000 * (index + 1))
    command = " ".join(["python -m bench.listening.ttfa", *(["--quick"] if args.quick else []), "--checkpoints", args.checkpoints])
    lines = [
        f"Command: `.venv/bin/{command}`",
        f"Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"{len(TEXT)}-character English text, 5 sentences → {len(chunks)} chunks (MAX_CHUNK_CHARS={MAX_CHUNK_CHARS}); "
        f"MAX_NEW_TOKEN=MIN_NEW_TOKEN={TOKENS_PER_CHUNK} per chunk; CPU_THREADS=1; CACHE_ENABLED=false; "
        f"one worker, one API, one redis-server, sequential client; {os.cpu_count()} cores; "
        f"1-min load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after",
        "",
        table(results),
    ]
    reported = {name: sorted(r.chunks) for name, r in results.items() if r.chunks}
    if reported:
        lines.append(f"chunks per job reported by the service: {reported}")
    print()
    print("\n".join(lines))
    RESULTS.write_text("\n".join(lines) + "\n")
    print(f"written to {RESULTS.relative_to(ROOT)}; logs: {tmp}")


if __name__ == "__main__":
    main()
