"""Real-time streaming capacity, the way the field measures it: ttsq beside ChatTTS's own ``infer(stream=True)`` server.

    python -m bench.listening.realtime [--quick] [--checkpoints tiny,full] [--streams 1,2,4,8,16,24,32,48] [--window-s 20]

For each checkpoint (``tiny`` by default; ``full`` is the full-size random-weight one, ChatTTS's real dimensions) and
each concurrency N, both servers get the same load in the same run, on the same checkpoint and the same machine:

* **ttsq**: redis-server + ``python worker.py`` + ``uvicorn app:app`` (cache and single-flight off, as every
  benchmark here); a stream is ``POST /v1/tts/submit`` then ``GET /v1/tts/stream/{id}?format=pcm``;
* **ChatTTS stream**: :mod:`bench.listening.chattts_stream_app`, ``Chat.infer(stream=True)`` per request behind one lock, as
  ChatTTS's examples serve it; a stream is ``POST /stream``.

Load: N listeners. Each waits an exponential time (mean ``--gap-s``), opens a stream, plays it to the end, waits again,
and so on until the window ends (streams open then run to their end; each listener opens one at least): arrivals are
Poisson-like and at most N streams are open at once. Texts are 1–3 English sentences (40–250 characters), drawn with a
fixed seed. Every chunk of audio costs the same number of decode steps (``MIN_NEW_TOKEN = MAX_NEW_TOKEN = --tokens``:
random weights never choose a natural length), and the ChatTTS server is asked for that many tokens per ttsq chunk of
the text, so both speak the same seconds of audio for the same text.

Each listener simulates playback from its first byte (raw PCM16 at 24 kHz, so bytes → seconds is exact): the playback
clock starts at the first audio byte; an **underrun** is bytes arriving after the audio buffered so far ran out (the
stall is how long playback waited). Per N: success rate (a whole stream within ``--timeout-s``), time to first audio
p50/p99 (from just before the request), real-time factor p99 (time from the request to the last byte over the audio's
duration), underruns per stream, and the **capacity**: the largest N at which this and every smaller N measured had
success 1.00, first audio p99 ≤ 1 s and RTF p99 ≤ 1 (the criterion published for self-hosted TTS capacity).

The machine is small and shared; the servers and this client share its cores, so read the ratios between the two
servers in one run, not the absolute figures. Writes ``bench/results/realtime.md`` (``realtime-quick.md`` with
``--quick``) and, with ``--out``, the figures as JSON (``bench.gpu``'s realtime phase).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from bench import ROOT
from bench.machine import machine
from bench.stacks import stop_processes
from ttsq.domain.audio import SAMPLE_RATE, SAMPLES_PER_TOKEN
from ttsq.domain.text import split_sentences
from ttsq.runtime.launch import ProcessExited

RESULTS = ROOT / "bench" / "results"
CHECKPOINTS = {"tiny": "tiny", "full": str(ROOT / "var" / "full-random-checkpoint")}
BYTES_PER_SECOND = 2 * SAMPLE_RATE
"""Raw PCM16 mono at 24 kHz: both servers stream exactly this."""
MAX_CHUNK_CHARS = 120
"""ttsq's default chunk size; the ChatTTS server's token count follows the same split."""
FIRST_AUDIO_LIMIT_S = 1.0
RTF_LIMIT = 1.0
SENTENCES = (
    "The morning train was late again.",
    "Everyone waited on the platform in the cold rain.",
    "A small dog sat beside the bench and watched the empty tracks.",
    "When the train finally arrived, the doors opened with a loud sigh.",
    "Please remember to bring your umbrella tomorrow.",
    "The meeting has been moved to the larger room upstairs.",
    "Our new kitchen has a window that looks out over the garden.",
    "She read the letter twice before she put it back in the envelope.",
    "Turn left at the next corner, then keep going until you see the bridge.",
    "Thank you for calling, your order will be ready in a few minutes.",
    "The old clock in the hall stopped at a quarter past seven.",
    "We walked along the river until the lights of the town came on.",
)
"""Plain sentences of 33-75 characters (no digits: text normalization plays no part)."""


# ---- the listener's arithmetic (pure: tests/unit/bench/test_bench_realtime.py) -------------------------------------------------


@dataclass(frozen=True)
class Playback:
    """What a listener playing a stream from its first byte heard."""

    first_s: float | None
    """Seconds from the request to the first audio byte (None: no audio came)."""
    last_s: float | None
    audio_s: float
    underruns: int
    stall_s: float


def playback(arrivals: Sequence[tuple[float, float]]) -> Playback:
    """Replay a stream's arrivals ``(seconds since the request, seconds of audio in the piece)`` through a player that
    starts at the first audio byte and plays without pause while it has audio.

    The player's buffer runs out at ``play_end`` (the first piece's arrival plus all the audio received so far, plus any
    stalls); a piece arriving after ``play_end`` is an underrun: playback stalled from ``play_end`` until it came."""
    first: float | None = None
    play_end = 0.0
    audio = stall = 0.0
    underruns = 0
    last: float | None = None
    for at, seconds in arrivals:
        if seconds <= 0:
            continue
        if first is None:
            first = play_end = at
        elif at > play_end:
            underruns += 1
            stall += at - play_end
            play_end = at
        play_end += seconds
        audio += seconds
        last = at
    return Playback(first, last, audio, underruns, stall)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank: with few streams p99 is the worst, never an interpolation below it)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass(frozen=True)
class Stream:
    """One stream as the client saw it: its playback, or why it failed."""

    text_chars: int
    play: Playback | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.play is not None and self.play.first_s is not None


@dataclass(frozen=True)
class Level:
    """The figures of one server at one concurrency."""

    streams: int
    requests: int
    success: float
    first_p50_s: float
    first_p99_s: float
    rtf_p99: float
    underruns_per_stream: float
    stall_s: float
    audio_s: float
    errors: list[str] = field(default_factory=list)

    @property
    def meets(self) -> bool:
        """Success 1.00, first audio p99 ≤ 1 s, RTF p99 ≤ 1: this N counts toward the capacity."""
        return self.requests > 0 and self.success == 1.0 and self.first_p99_s <= FIRST_AUDIO_LIMIT_S and self.rtf_p99 <= RTF_LIMIT


def summarize(n: int, streams: Sequence[Stream]) -> Level:
    """Per-N figures; latency, RTF and underruns are over the streams that succeeded."""
    ok = [s.play for s in streams if s.ok and s.play is not None]
    firsts = [p.first_s for p in ok if p.first_s is not None]
    rtfs = [p.last_s / p.audio_s for p in ok if p.last_s is not None and p.audio_s > 0]
    return Level(
        streams=n,
        requests=len(streams),
        success=len(ok) / len(streams) if streams else 0.0,
        first_p50_s=percentile(firsts, 50),
        first_p99_s=percentile(firsts, 99),
        rtf_p99=percentile(rtfs, 99),
        underruns_per_stream=sum(p.underruns for p in ok) / len(ok) if ok else math.nan,
        stall_s=sum(p.stall_s for p in ok),
        audio_s=sum(p.audio_s for p in ok),
        errors=sorted({s.error for s in streams if s.error})[:5],
    )


def capacity(levels: Sequence[Level]) -> int:
    """The largest N that meets the criterion with every smaller N measured meeting it too (0: none does). A noisy
    pass above a failure is not capacity: the first failure bounds it."""
    best = 0
    for level in sorted(levels, key=lambda lv: lv.streams):
        if not level.meets:
            break
        best = level.streams
    return best


def texts(seed: int, count: int) -> list[str]:
    """``count`` texts of 1-3 sentences, 40-250 characters, the same for a seed."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < count:
        text = " ".join(rng.sample(SENTENCES, rng.randint(1, 3)))
        if 40 <= len(text) <= 250:
            out.append(text)
    return out


def chunk_count(text: str) -> int:
    return len(split_sentences(text, MAX_CHUNK_CHARS))


# ---- the clients -----------------------------------------------------------------------------------------------------

Opener = Callable[[httpx.AsyncClient, str, int], Awaitable[Stream]]


async def _read(response: httpx.Response, started: float, chars: int, timeout_s: float) -> Stream:
    if response.status_code != 200:
        await response.aread()
        return Stream(chars, None, f"HTTP {response.status_code}")
    arrivals: list[tuple[float, float]] = []
    odd = b""
    async for piece in response.aiter_raw():
        now = time.perf_counter() - started
        piece = odd + piece
        whole = len(piece) - len(piece) % 2
        odd = piece[whole:]
        if whole:
            arrivals.append((now, whole / BYTES_PER_SECOND))
        if now > timeout_s:
            return Stream(chars, playback(arrivals), f"over {timeout_s:.0f}s")
    play = playback(arrivals)
    return Stream(chars, play, None if play.first_s is not None else "no audio")


def ttsq_opener(base: str, timeout_s: float) -> Opener:
    async def open_stream(client: httpx.AsyncClient, text: str, seed: int) -> Stream:
        started = time.perf_counter()
        submitted = await client.post(f"{base}/v1/tts/submit", json={"text": text, "seed": seed, "format": "wav", "listen": True})
        if submitted.status_code != 202:
            return Stream(len(text), None, f"submit HTTP {submitted.status_code}")
        task = submitted.json()["task_id"]
        async with client.stream("GET", f"{base}/v1/tts/stream/{task}", params={"format": "pcm"}) as response:
            return await _read(response, started, len(text), timeout_s)

    return open_stream


def chattts_opener(base: str, timeout_s: float, tokens: int) -> Opener:
    async def open_stream(client: httpx.AsyncClient, text: str, seed: int) -> Stream:
        started = time.perf_counter()
        body = {"text": text, "seed": seed, "tokens": tokens * chunk_count(text)}
        async with client.stream("POST", f"{base}/stream", json=body) as response:
            return await _read(response, started, len(text), timeout_s)

    return open_stream


async def load(open_stream: Opener, n: int, window_s: float, gap_s: float, seed: int, timeout_s: float) -> list[Stream]:
    """N listeners, each opening streams one after another with exponential gaps until ``window_s`` has passed, and at
    least one however short the window: a listener whose first gap outlasts it would otherwise measure nothing (so
    would the untimed first stream of a 0.01 s window, once in three times with a 0.01 s gap)."""
    rng = random.Random(seed)
    pool = texts(seed, 64)
    end = time.perf_counter() + window_s
    streams: list[Stream] = []
    counter = iter(range(10**9))

    async def listener(client: httpx.AsyncClient, own: random.Random) -> None:
        opened = False
        while True:
            await asyncio.sleep(own.expovariate(1 / gap_s))
            if opened and time.perf_counter() >= end:
                return
            opened = True
            k = next(counter)
            try:
                streams.append(await asyncio.wait_for(open_stream(client, pool[k % len(pool)], seed + k), timeout_s + 5))
            except (TimeoutError, httpx.HTTPError) as exc:
                streams.append(Stream(len(pool[k % len(pool)]), None, type(exc).__name__))

    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s + 5), limits=limits) as client:
        await asyncio.gather(*(listener(client, random.Random(rng.random())) for _ in range(n)))
    return streams


# ---- the servers -----------------------------------------------------------------------------------------------------


def _env(model: str, tokens: int, device: str, **extra: str) -> dict[str, str]:
    from bench.stacks import service_env

    env = service_env(
        extra.pop("REDIS_URL", "redis://127.0.0.1:1/0"),
        MODEL=model,
        MAX_NEW_TOKEN=str(tokens),
        MIN_NEW_TOKEN=str(tokens),
        MAX_CHUNK_CHARS=str(MAX_CHUNK_CHARS),
        NORMALIZE_TEXT="false",
        JOB_TIMEOUT_S="600",
        MAX_STREAMS="100000",
        MAX_STREAMS_PER_KEY="100000",
        AUTH="off",
    )
    return env | {"DEVICE": device} | extra


@contextmanager
def ttsq_server(model: str, tokens: int, device: str, tmp: Path, ready_s: float, extra: dict[str, str]) -> Iterator[str]:
    """Redis, one worker and the API on ``model``; yields the API's URL."""
    from ttsq.runtime.launch import api_command, free_port, spawn, wait_until_ok, worker_command
    from ttsq.store.local_redis import start_redis_server

    tmp.mkdir(parents=True, exist_ok=True)
    redis = start_redis_server(tmp / "redis")
    api_port, worker_port = free_port(), free_port()
    env = _env(model, tokens, device, REDIS_URL=redis.url, **extra)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        processes.append(
            spawn(worker_command(), cwd=ROOT, env=env | {"WORKER_HEALTH_PORT": str(worker_port)}, log=tmp / "worker.log")
        )
        processes.append(spawn(api_command(api_port), cwd=ROOT, env=env, log=tmp / "api.log"))
        url = f"http://127.0.0.1:{api_port}"
        wait_until_ok(f"{url}/readyz", 60, processes)
        wait_until_ok(f"http://127.0.0.1:{worker_port}/readyz", ready_s, processes)
        yield url
    finally:
        stop_processes(processes)
        redis.stop()


@contextmanager
def chattts_server(model: str, tokens: int, device: str, tmp: Path, ready_s: float) -> Iterator[str]:
    """:mod:`bench.listening.chattts_stream_app` on ``model``; yields its URL."""
    from ttsq.runtime.launch import api_command, free_port, spawn, wait_until_ok

    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = _env(model, tokens, device, ENGINE_BACKEND="chattts")
    process = spawn(api_command(port, app="bench.listening.chattts_stream_app:app"), cwd=ROOT, env=env, log=tmp / "chattts.log")
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_ok(f"{url}/healthz", ready_s, [process])
        yield url
    finally:
        stop_processes([process])


# ---- the run ---------------------------------------------------------------------------------------------------------


def _cell(value: float, digits: int = 2) -> str:
    return "–" if math.isnan(value) else f"{value:.{digits}f}"


def table(levels: dict[str, list[Level]]) -> list[str]:
    lines = [
        "| server | N | streams | success | first audio p50 s | first audio p99 s | RTF p99 | underruns / stream "
        "| stall s (total) | audio s | meets |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for server, rows in levels.items():
        for lv in rows:
            lines.append(
                f"| {server} | {lv.streams} | {lv.requests} | {lv.success:.2f} | {_cell(lv.first_p50_s)} | "
                f"{_cell(lv.first_p99_s)} | {_cell(lv.rtf_p99)} | {_cell(lv.underruns_per_stream)} | {lv.stall_s:.2f} | "
                f"{lv.audio_s:.1f} | {'yes' if lv.meets else 'no'} |"
            )
    return lines


def verdict(levels: dict[str, list[Level]]) -> list[str]:
    """Capacity of each server and the issue's done-when ratios."""
    ours, theirs = levels.get("ttsq", []), levels.get("ChatTTS stream", [])
    cap_ours, cap_theirs = capacity(ours), capacity(theirs)
    lines = [f"Capacity (largest N with success 1.00, first audio p99 ≤ {FIRST_AUDIO_LIMIT_S:g} s, RTF p99 ≤ {RTF_LIMIT:g}):"]
    lines.append(f"ttsq **{cap_ours}**, ChatTTS stream **{cap_theirs}**.")
    if cap_ours and cap_theirs:
        lines.append(f"ttsq / ChatTTS stream: {cap_ours / cap_theirs:.1f}× the streams.")
    elif cap_ours:
        lines.append(f"ChatTTS stream meets the criterion at no N measured; ttsq does up to {cap_ours}.")
    sustained = {server: capacity([replace(lv, first_p99_s=0.0) for lv in rows]) for server, rows in levels.items()}
    lines.append(
        "Real-time streams with the first-audio bound set aside (success 1.00, RTF p99 ≤ 1): "
        + ", ".join(f"{server} {n}" for server, n in sustained.items())
        + "."
    )
    at = next((lv for lv in ours if lv.streams == cap_ours), None)
    if at is not None:
        lines.append(f"At ttsq's capacity (N={cap_ours}): underruns per admitted stream {_cell(at.underruns_per_stream)}.")
    pairs = [(a, b) for a in ours for b in theirs if a.streams == b.streams and not math.isnan(b.first_p99_s)]
    if pairs:
        ratios = ", ".join(f"N={a.streams}: {a.first_p99_s / b.first_p99_s:.2f}" for a, b in pairs if b.first_p99_s > 0)
        lines.append(f"First audio p99, ttsq / ChatTTS stream: {ratios}.")
    return lines


def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(args.tmp or tempfile.mkdtemp(prefix="ttsq-realtime-"))
    ns = [int(n) for n in args.streams.split(",") if n.strip()]
    deadline = time.monotonic() + args.budget_s if args.budget_s else math.inf
    report: dict[str, Any] = {"checkpoints": {}, "complete": False, "skipped": []}
    for name in args.checkpoint_list:
        model = args.model or CHECKPOINTS[name]
        if name == "full" and not args.model:
            from ttsq.inference.engines.checkpoint import build_random_checkpoint

            build_random_checkpoint(Path(model), "full")
        levels: dict[str, list[Level]] = {"ttsq": [], "ChatTTS stream": []}
        report["checkpoints"][name] = levels
        extra = dict(kv.split("=", 1) for kv in args.ttsq_env)
        try:
            _measure(args, name, model, ns, deadline, tmp, extra, levels, report)
        except (ProcessExited, TimeoutError, RuntimeError, OSError) as exc:  # a server that would not start: say so
            report["error"] = f"{name}: {type(exc).__name__}: {str(exc)[:2000]}"
            print(f"  {name}: {report['error']}", flush=True)
            break
    report["complete"] = not report["skipped"] and "error" not in report
    return report


def _measure(
    args: argparse.Namespace,
    name: str,
    model: str,
    ns: list[int],
    deadline: float,
    tmp: Path,
    extra: dict[str, str],
    levels: dict[str, list[Level]],
    report: dict[str, Any],
) -> None:
    """Both servers on ``model``, side by side, at every N (until ``deadline``)."""
    with (
        ttsq_server(model, args.tokens, args.device, tmp / name / "ttsq", args.ready_timeout_s, extra) as ours,
        chattts_server(model, args.tokens, args.device, tmp / name / "chattts", args.ready_timeout_s) as theirs,
    ):
        openers = {
            "ttsq": ttsq_opener(ours, args.timeout_s),
            "ChatTTS stream": chattts_opener(theirs, args.timeout_s, args.tokens),
        }
        for opener in openers.values():  # one untimed stream each: first-request costs
            asyncio.run(load(opener, 1, 0.01, 0.01, 1, args.timeout_s))
        for n in ns:
            for server, opener in openers.items():  # side by side: drift in load hits both alike
                if time.monotonic() + 2 * args.window_s > deadline:  # the window, and its open streams' ends
                    report["skipped"].append(f"{name} {server} N={n}")
                    continue
                streams = asyncio.run(load(opener, n, args.window_s, args.gap_s, 1000 + n, args.timeout_s))
                level = summarize(n, streams)
                levels[server].append(level)
                print(f"  {name} {server} N={n}: {json.dumps(asdict(level))}", flush=True)
                if args.out:
                    _write_json(args.out, report)


def _jsonable(report: dict[str, Any]) -> dict[str, Any]:
    out = dict(report)
    out["checkpoints"] = {
        name: {
            server: {"levels": [asdict(lv) | {"meets": lv.meets} for lv in rows], "capacity": capacity(rows)}
            for server, rows in levels.items()
        }
        for name, levels in report["checkpoints"].items()
    }
    return out


def _write_json(path: Path, report: dict[str, Any]) -> None:
    path.write_text(json.dumps(_jsonable(report), indent=1, default=str))


def markdown(report: dict[str, Any], args: argparse.Namespace, command: str, load_avg: tuple[float, float]) -> str:
    spec = machine()
    lines = [
        f"Command: `.venv/bin/{command}`",
        f"Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        f"Machine: {spec['cpu']}, {spec['cores']} cores, device {args.device}; 1-min load average {load_avg[0]:.2f} at "
        f"start, {load_avg[1]:.2f} at end (shared with other work; both servers and this client share the cores: read "
        "the ratios between the servers, not the seconds)",
        "",
        f"Load: N listeners, exponential gaps (mean {args.gap_s:g} s) before each stream, {args.window_s:g} s windows, "
        f"texts of 1–3 sentences (40–250 characters, seeded); {args.tokens} audio tokens per {MAX_CHUNK_CHARS}-character "
        f"chunk (MIN_NEW_TOKEN = MAX_NEW_TOKEN; {args.tokens * SAMPLES_PER_TOKEN / SAMPLE_RATE:.2f} s of audio), "
        "the ChatTTS server asked for the same tokens per text; raw PCM16 at 24 kHz; playback simulated from each "
        f"stream's first byte; a stream fails past {args.timeout_s:g} s.",
        "",
    ]
    for name, levels in report["checkpoints"].items():
        lines += [f"### {name} checkpoint", "", *table(levels), "", *verdict(levels), ""]
    if report["skipped"]:
        lines.append(f"Skipped for lack of time: {', '.join(report['skipped'])}.")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="N = 1,2,4 and 8 s windows (a smoke run)")
    parser.add_argument("--checkpoints", default="tiny", help="comma-separated subset of tiny,full")
    parser.add_argument("--model", help="a checkpoint directory instead (bench.gpu's realtime phase); one run")
    parser.add_argument("--device", default="cpu", help="DEVICE of both servers (cpu, cuda)")
    parser.add_argument("--streams", help="concurrencies N, in order (default 1,2,4,8,16,24,32,48; --quick 1,2,4)")
    parser.add_argument("--window-s", type=float, help="window per server and N (default 20; --quick 8)")
    parser.add_argument("--gap-s", type=float, default=0.3, help="mean exponential gap before each stream")
    parser.add_argument("--tokens", type=int, default=96, help="audio tokens per chunk (96 = 2.05 s of audio)")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="a stream not ended by then failed")
    parser.add_argument("--ready-timeout-s", type=float, default=300.0, help="longest wait for a server to be ready")
    parser.add_argument("--budget-s", type=float, help="stop starting windows that would end past this (bench.gpu)")
    parser.add_argument("--ttsq-env", action="append", default=[], metavar="KEY=VALUE", help="extra ttsq settings")
    parser.add_argument("--results", type=Path, help="markdown report (default bench/results/realtime[-quick].md)")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--tmp", help="process logs and Redis files (default a new temporary folder)")
    args = parser.parse_args(argv)
    args.streams = args.streams or ("1,2,4" if args.quick else "1,2,4,8,16,24,32,48")
    args.window_s = args.window_s or (8.0 if args.quick else 20.0)
    args.checkpoint_list = ["model"] if args.model else [c.strip() for c in args.checkpoints.split(",") if c.strip()]
    if unknown := set(args.checkpoint_list) - {*CHECKPOINTS, "model"}:
        parser.error(f"unknown checkpoint(s): {', '.join(sorted(unknown))}")
    if args.results is None:
        args.results = RESULTS / ("realtime-quick.md" if args.quick else "realtime.md")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    command = "python -m bench.listening.realtime " + " ".join(sys.argv[1:] if argv is None else argv)
    load_start = os.getloadavg()[0]
    report = run(args)
    if args.out:
        _write_json(args.out, report)
    text = markdown(report, args, command.strip(), (load_start, os.getloadavg()[0]))
    print(text)
    args.results.write_text(text)
    print(f"written to {args.results}")


if __name__ == "__main__":
    main()
