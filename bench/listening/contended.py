"""Stream admission on a contended machine: realtime sessions opened at once on one tiny worker while a CPU hog takes a
core, each session heard through by a listener of its own, with stream admission in several variants side by side.

    python -m bench.listening.contended [--sessions 40] [--open-s 2] [--variants slack,fit,off] [--hogs 1] [--ahead 1]

Real processes, one stack per variant (a redis-server, one ``python worker.py`` and ``uvicorn app:app`` on the tiny
checkpoint; cache and single-flight off, every fair-use limit lifted) and, for the run of each variant, a CPU hog — a
process spinning on one core (``python -c 'while True: pass'``; ``--hogs`` of them), so the worker, the API, Redis and
the listeners share what is left. ``--sessions`` WebSocket sessions (``/v1/tts/realtime``) open within ``--open-s``
seconds (uniform, seeded); each sends 2–3 sentences (one chunk each) and ``close``, and plays what comes from its
first byte: every chunk is ``--tokens`` decode steps of audio (``MIN_NEW_TOKEN = MAX_NEW_TOKEN``: 240 tokens are 5.12
s), so a session is 10–15 s.

Variants (``--variants``):

``slack``  ``STREAM_ADMISSION=wait``: the fitted step cost (the audio and prefill threads' time counted in) and the
           listeners' slack (``STREAM_ADMISSION_SLACK=true``, the default): :mod:`ttsq.runtime.stream_admission`.
``fit``    ``STREAM_ADMISSION=wait`` with ``STREAM_ADMISSION_SLACK=false``: the fitted step cost alone.
``off``    ``STREAM_ADMISSION=off``: claims up to the batch's room.

Counted per variant: sessions that ended well (close 1000, no ``error``); sessions whose first chunk waited in the queue
(its task's ``started_at − created_at`` over ``--waited-s``: held back by admission or a full batch); underruns as the
listeners hear them — a byte arriving after the audio so far ran out, across the session's chunks (the session's
stream is one stream to its listener, whatever the worker counts it as) — and as the worker's own metric counts them
(``ttsq_stream_underruns_total``, read from its ``/metrics`` at the end); the worst single gap; first audio (from the
session's text) for the sessions that started at once and for those that waited. Nothing asserts a timing: the
figures go to ``bench/results/contended.md`` (and ``.json``); read the variants beside each other, in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from bench import ROOT
from bench.listening.realtime import SENTENCES, percentile
from bench.machine import machine
from bench.stacks import progress, record, service_env, stop_processes, utc_now
from ttsq.domain.audio import SAMPLE_RATE

RESULTS = ROOT / "bench" / "results" / "contended.md"
BYTES_PER_SECOND = 2 * SAMPLE_RATE
"""Raw PCM16 mono at 24 kHz: what a session streams by default."""
VARIANTS: dict[str, dict[str, str]] = {
    "slack": {"STREAM_ADMISSION": "wait", "STREAM_ADMISSION_SLACK": "true"},
    "fit": {"STREAM_ADMISSION": "wait", "STREAM_ADMISSION_SLACK": "false"},
    "off": {"STREAM_ADMISSION": "off"},
}
HOG = [sys.executable, "-c", "while True: pass"]


@dataclass
class Heard:
    """One session as its client saw it."""

    seed: int
    sentences: int
    delay_s: float
    """When it opened, after the first one."""
    text_at: float = 0.0
    arrivals: list[tuple[float, int]] = field(default_factory=list)
    """``(time.monotonic(), bytes)`` of each audio frame."""
    done_at: list[float] = field(default_factory=list)
    """``time.monotonic()`` of each ``segment.done``: where one chunk's audio ends and the next one's begins."""
    first_task: str | None = None
    close_code: int | None = None
    error: str | None = None
    queue_wait_s: float | None = None
    """Its first chunk's task: ``started_at − created_at`` (None: not known)."""

    @property
    def ok(self) -> bool:
        return self.error is None and self.close_code == 1000 and bool(self.arrivals)

    def playback(self) -> tuple[float | None, int, float, float, int]:
        """``(first audio s after the text, underruns, stall s, worst gap s, underruns at a chunk's start)`` of a
        listener that plays from the first byte without pause while it has audio, across the session's chunks. An
        underrun at a chunk's start is the first audio after a ``segment.done`` coming too late: the next chunk's
        start, not a chunk's decode falling behind."""
        first: float | None = None
        play_end = stall = worst = previous = 0.0
        underruns = at_start = 0
        for at, size in self.arrivals:
            if first is None:
                first = play_end = at
            elif at > play_end:
                underruns += 1
                at_start += any(previous <= done <= at for done in self.done_at)
                stall += at - play_end
                worst = max(worst, at - play_end)
                play_end = at
            play_end += size / BYTES_PER_SECOND
            previous = at
        return (None if first is None else first - self.text_at), underruns, stall, worst, at_start


def text_of(own: random.Random, sentences: int) -> str:
    return " ".join(own.choice(SENTENCES) for _ in range(sentences))


async def speak(url: str, heard: Heard, text: str, limit_s: float) -> None:
    """One realtime session: open after its delay, the text, ``close``; then everything until the server closes."""
    await asyncio.sleep(heard.delay_s)
    try:
        async with asyncio.timeout(limit_s), connect(url.replace("http://", "ws://") + "/v1/tts/realtime") as ws:
            await ws.send(json.dumps({"type": "session.start", "seed": heard.seed}))
            opened = json.loads(await ws.recv())
            if opened.get("type") != "session.started":
                heard.error = json.dumps(opened)
                return
            heard.text_at = time.monotonic()
            await ws.send(json.dumps({"type": "text", "text": text}))
            await ws.send(json.dumps({"type": "close"}))
            with contextlib.suppress(ConnectionClosed):
                async for message in ws:
                    if isinstance(message, bytes):
                        heard.arrivals.append((time.monotonic(), len(message)))
                        continue
                    event = json.loads(message)
                    if event.get("type") == "segment.done":
                        heard.done_at.append(time.monotonic())
                    if event.get("type") == "segment.queued" and heard.first_task is None:
                        heard.first_task = event.get("task_id")
                    elif event.get("type") == "error" and heard.error is None:
                        heard.error = f"{event.get('code')}: {event.get('message')}"
            heard.close_code = ws.close_code
    except (OSError, TimeoutError, ConnectionClosed) as exc:
        heard.error = f"{type(exc).__name__}: {exc}"


WATCHED = ("ttsq_stream_capacity_rows", "ttsq_engine_rows_active", "ttsq_engine_rows_waiting", "ttsq_jobs_in_flight")
"""The worker's gauges sampled through the run: what its admission saw and did."""


async def watch(worker_url: str, samples: list[dict[str, float]], stop: asyncio.Event) -> None:
    """Sample the worker's :data:`WATCHED` gauges every half second until ``stop``."""
    async with httpx.AsyncClient(timeout=5) as http:
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                text = (await http.get(f"{worker_url}/metrics")).text
                sample = {"t": time.monotonic()}
                for line in text.splitlines():
                    name, _, value = line.partition(" ")
                    if name in WATCHED:
                        sample[name] = float(value)
                samples.append(sample)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)


async def storm(
    url: str, worker_url: str, sessions: int, open_s: float, seed: int, limit_s: float
) -> tuple[list[Heard], list[dict[str, float]]]:
    own = random.Random(seed)
    heard = [Heard(seed=n + 1, sentences=own.choice((2, 3)), delay_s=own.uniform(0, open_s)) for n in range(sessions)]
    texts = [text_of(own, h.sentences) for h in heard]
    samples: list[dict[str, float]] = []
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch(worker_url, samples, stop))
    await asyncio.gather(*(speak(url, h, text, limit_s) for h, text in zip(heard, texts, strict=True)))
    stop.set()
    await watcher
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        for h in heard:
            if h.first_task is None:
                continue
            answer = await http.get(f"/v1/tts/tasks/{h.first_task}")
            if answer.status_code == 200:
                body = answer.json()
                if body.get("started_at") is not None:
                    h.queue_wait_s = body["started_at"] - body["created_at"]
    return heard, samples


def worker_underruns(worker_url: str) -> float | None:
    """The worker's ``ttsq_stream_underruns_total`` (None: its metrics did not answer)."""
    with contextlib.suppress(httpx.HTTPError):
        for line in httpx.get(f"{worker_url}/metrics", timeout=5).text.splitlines():
            if line.startswith("ttsq_stream_underruns_total "):
                return float(line.split()[1])
    return None


@contextlib.contextmanager
def stack(tmp: Path, tokens: int, extra: dict[str, str]) -> Iterator[tuple[str, str]]:
    """Redis, one tiny worker and the API; yields the API's and the worker's URLs."""
    from ttsq.runtime.launch import api_command, free_port, spawn, wait_until_ok, worker_command
    from ttsq.store.local_redis import start_redis_server

    tmp.mkdir(parents=True, exist_ok=True)
    redis = start_redis_server(tmp / "redis")
    api_port, worker_port = free_port(), free_port()
    env = service_env(
        redis.url,
        MODEL="tiny",
        MAX_NEW_TOKEN=str(tokens),
        MIN_NEW_TOKEN=str(tokens),
        NORMALIZE_TEXT="false",
        JOB_TIMEOUT_S="600",
        MAX_STREAMS="100000",
        MAX_STREAMS_PER_KEY="100000",
        AUTH="off",
        REALTIME_MAX_S="900",
        **extra,
    )
    processes: list[subprocess.Popen[bytes]] = []
    try:
        processes.append(
            spawn(worker_command(), cwd=ROOT, env=env | {"WORKER_HEALTH_PORT": str(worker_port)}, log=tmp / "worker.log")
        )
        processes.append(spawn(api_command(api_port), cwd=ROOT, env=env, log=tmp / "api.log"))
        url, worker_url = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{worker_port}"
        wait_until_ok(f"{url}/readyz", 60, processes)
        wait_until_ok(f"{worker_url}/readyz", 300, processes)
        yield url, worker_url
    finally:
        stop_processes(processes)
        redis.stop()


@contextlib.contextmanager
def hogs(count: int) -> Iterator[None]:
    """``count`` processes spinning, a core each, for the run."""
    processes = [subprocess.Popen(HOG) for _ in range(count)]
    try:
        yield
    finally:
        for process in processes:
            process.kill()
            process.wait()


def summary(name: str, heard: Sequence[Heard], metric: float | None, waited_s: float) -> dict[str, Any]:
    plays = [(h, *h.playback()) for h in heard]
    waited = [p for p in plays if p[0].queue_wait_s is not None and p[0].queue_wait_s > waited_s]
    at_once = [p for p in plays if p not in waited]
    first_at_once = [p[1] for p in at_once if p[1] is not None]
    first_waited = [p[1] for p in waited if p[1] is not None]
    return {
        "variant": name,
        "sessions": len(heard),
        "ended_well": sum(h.ok for h in heard),
        "errors": sorted({h.error for h in heard if h.error}),
        "waited": len(waited),
        "sessions_with_underruns": sum(p[2] > 0 for p in plays),
        "underruns_listeners": sum(p[2] for p in plays),
        "underruns_waited": sum(p[2] for p in waited),
        "underruns_at_chunk_start": sum(p[5] for p in plays),
        "underruns_metric": metric,
        "stall_s": round(sum(p[3] for p in plays), 3),
        "worst_gap_s": round(max((p[4] for p in plays), default=0.0), 3),
        "first_audio_p50_at_once_s": round(percentile(first_at_once, 50), 2) if first_at_once else None,
        "first_audio_max_at_once_s": round(max(first_at_once), 2) if first_at_once else None,
        "first_audio_p50_waited_s": round(percentile(first_waited, 50), 2) if first_waited else None,
        "first_audio_max_waited_s": round(max(first_waited), 2) if first_waited else None,
        "queue_wait_max_s": round(max((h.queue_wait_s or 0.0 for h in heard), default=0.0), 2),
    }


def run_variant(name: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    progress(f"{name}: starting the stack")
    settings = VARIANTS[name] | {"REALTIME_AHEAD": str(args.ahead)} | ({"MAX_BATCH": args.max_batch} if args.max_batch else {})
    with stack(tmp / name, args.tokens, settings) as (url, worker_url), hogs(0 if args.no_hog else args.hogs):
        time.sleep(2.0)  # the hog's own start, and the worker's first heartbeat with it
        progress(f"{name}: {args.sessions} sessions within {args.open_s:.1f} s")
        heard, samples = asyncio.run(storm(url, worker_url, args.sessions, args.open_s, args.seed, args.limit_s))
        metric = worker_underruns(worker_url)
    result = summary(name, heard, metric, args.waited_s)
    rows = [sample.get("ttsq_engine_rows_active", 0.0) for sample in samples]
    capacity = [sample["ttsq_stream_capacity_rows"] for sample in samples if "ttsq_stream_capacity_rows" in sample]
    result["rows_active_max"] = max(rows, default=0.0)
    result["capacity_rows_p50"] = percentile(capacity, 50) if capacity else None
    result["raw"] = [asdict(h) | {"playback": h.playback()} for h in heard]
    result["worker_samples"] = samples
    progress(f"{name}: " + json.dumps({k: v for k, v in result.items() if k not in ("raw", "worker_samples")}))
    return result


COLUMNS = (
    ("variant", "variant"),
    ("sessions", "sessions"),
    ("ended well", "ended_well"),
    ("waited", "waited"),
    ("sessions with a gap", "sessions_with_underruns"),
    ("underruns (listeners)", "underruns_listeners"),
    ("of which waited", "underruns_waited"),
    ("of which at a chunk's start", "underruns_at_chunk_start"),
    ("underruns (worker metric)", "underruns_metric"),
    ("worst gap s", "worst_gap_s"),
    ("stall s", "stall_s"),
    ("first audio p50 / max, started at once s", "first_audio_p50_at_once_s"),
    ("first audio p50 / max, waited s", "first_audio_p50_waited_s"),
    ("longest queue wait s", "queue_wait_max_s"),
    ("most rows decoding", "rows_active_max"),
    ("fitted real-time rows p50", "capacity_rows_p50"),
)


def markdown(results: list[dict[str, Any]], args: argparse.Namespace, command: str, load: tuple[float, float]) -> str:
    def cell(result: dict[str, Any], key: str) -> str:
        value = result[key]
        if key.startswith("first_audio_p50"):
            worst = result[key.replace("p50", "max")]
            return "–" if value is None else f"{value} / {worst}"
        return "–" if value is None else str(value)

    info = machine()
    lines = [
        f"Command: `{command}`",
        f"Date: {utc_now()}",
        f"Machine: {info['cpu']}, {info['cores']} cores; 1-min load average {load[0]:.2f} at start, {load[1]:.2f} at end"
        f" (shared with other work){'' if args.no_hog else f'; {args.hogs} CPU hog(s) spinning, a core each, through each run'}",
        "",
        f"Load: {args.sessions} realtime sessions opened within {args.open_s} s (seed {args.seed}) on one tiny worker, each"
        f" 2–3 sentences of {args.tokens} tokens ({args.tokens * 512 / SAMPLE_RATE:.2f} s) each, REALTIME_AHEAD={args.ahead}"
        f"{f', MAX_BATCH={args.max_batch}' if args.max_batch else ''}; a listener per session"
        " plays from its first byte across its chunks. 'waited': its first chunk's queue wait over"
        f" {args.waited_s} s.",
        "",
        "| " + " | ".join(title for title, _ in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(cell(result, key) for _, key in COLUMNS) + " |" for result in results]
    for result in results:
        if result["errors"]:
            lines.append(f"\n{result['variant']}: errors {result['errors']}")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.listening.contended", description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--open-s", type=float, default=2.0)
    parser.add_argument("--tokens", type=int, default=240, help="decode steps per chunk (240: 5.12 s of audio)")
    parser.add_argument("--variants", default="slack,fit", help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--no-hog", action="store_true", help="no CPU hog")
    parser.add_argument("--hogs", type=int, default=1, help="CPU hogs, a core each (1: the machine's other core taken)")
    parser.add_argument(
        "--ahead", type=int, default=1, help="REALTIME_AHEAD: a session's chunks queued beyond the one streaming (1: the default)"
    )
    parser.add_argument("--max-batch", default="", help="the worker's MAX_BATCH (default: its own, auto)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--waited-s", type=float, default=1.0)
    parser.add_argument("--limit-s", type=float, default=600.0, help="the longest a session may take")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument(
        "--check",
        metavar="VARIANT",
        help="exit 1 unless this variant's sessions all ended well with no underrun, by the listeners and the worker alike",
    )
    return parser.parse_args(argv)


def broken(result: dict[str, Any]) -> list[str]:
    """What ``--check`` refuses in a variant's result: a session that did not end well, or any gap a listener heard or the
    worker counted. Waiting is allowed: admission holds new sessions back so that the admitted ones play through."""
    faults = []
    if result["ended_well"] != result["sessions"]:
        faults.append(f"{result['sessions'] - result['ended_well']} of {result['sessions']} sessions did not end well")
    if result["underruns_listeners"]:
        faults.append(f"{result['underruns_listeners']} underruns heard by the listeners (worst gap {result['worst_gap_s']} s)")
    if result["underruns_metric"]:
        faults.append(f"ttsq_stream_underruns_total counted {result['underruns_metric']}")
    return faults + [f"error: {error}" for error in result["errors"]]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    names = [name.strip() for name in args.variants.split(",") if name.strip()]
    if args.check is not None and args.check not in names:
        names.append(args.check)
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}: of {', '.join(VARIANTS)}")
    command = shlex.join(["python", "-m", "bench.listening.contended", *(argv if argv is not None else sys.argv[1:])])
    start_load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="ttsq-contended-") as tmp:
        results = [run_variant(name, args, Path(tmp)) for name in names]
    text = markdown(results, args, command, (start_load, os.getloadavg()[0]))
    print(text)
    record(args.results, text, {"command": command, "date": utc_now(), "results": results})
    if args.check is not None:
        faults = broken(next(result for result in results if result["variant"] == args.check))
        if faults:
            raise SystemExit(f"--check {args.check}: " + "; ".join(faults))
        print(f"--check {args.check}: every session ended well, no underrun by the listeners or the worker")


if __name__ == "__main__":
    main()
