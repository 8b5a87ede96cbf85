"""Where a realtime session's CPU goes, end to end: the API, Redis, the worker's loop and its audio thread.

    python -m bench.listening.profile_session [--quick] [--sessions 8] [--rounds 4] [--rate 200]

One redis-server, one worker on the tiny checkpoint and one API (``bench.listening.ttfa``'s deployment: cache off,
``CPU_THREADS=1``, 48 tokens a chunk). ``--sessions`` realtime sessions (``/v1/tts/realtime``) at once, each three
sentences sent whole and then closed, read to their end; ``--rounds`` times. While they run, `py-spy
<https://github.com/benfred/py-spy>`_ samples the worker and the API (every thread, idle ones left out, without
pausing them: ``--nonblocking``), and each process's CPU time is read from the kernel before and after (Redis is C, and
the worker's text normaliser, where it runs in a process of its own, is pynini's C++: their CPU time only).

The report puts every sample of a Python process in one category by the frames on its stack (the first rule that
of its leaf, or of the first caller up the stack where the leaf is torch, numpy, the event loop or a thread's
machinery: :func:`category`), so that "what makes speech" (the GPT's step, the audio decode) stands
apart from what serves it (Redis calls, JSON, the event loop, metrics, logging), and lists the top functions by samples
where they were the leaf (self) and anywhere on the stack (inclusive). BENCHMARKS.md ("Where a session's CPU goes")
holds a before and an after; raw output in ``bench/results/profile-session*.md`` (``--stacks DIR`` keeps the collapsed
stacks, a flame graph's input).
py-spy is not a dependency of ttsq: the benchmark installs it into ``.venv`` (``pip install py-spy``) if it is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from websockets.asyncio.client import connect

from bench.listening.ttfa import Checkpoint, service
from bench.stacks import RESULTS, record, utc_now

UNLIMITED = {"RATE_LIMIT_PER_S": "1000000", "RATE_LIMIT_BURST": "1000000"}
"""Fair-use limits lifted: every session comes from one loopback address, and each chunk is one submit, so at full speed
the per-client limit (50 at once, then 10 a second) would refuse the later rounds with 4429."""

SENTENCES = [
    "The morning train was late again, so everyone waited in the rain.",
    "A small dog sat beside the bench and watched the empty tracks.",
    "When the train finally arrived, the doors opened with a loud sigh.",
]
"""Three sentences of about ten words: three chunks (``MAX_CHUNK_CHARS=80``)."""

CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("gpt step (speech)", ("ttsq/inference/gpt/", "ChatTTS/model/gpt", "transformers/models/llama")),
    ("audio decode (speech)", ("ttsq/inference/audio/", "ChatTTS/model/dvae", "vocos/", "chattts_rows.py")),
    ("text normalisation", ("tn/", "ttsq/inference/engines/normalize", "ChatTTS/norm")),
    ("speaker draw", ("lzma", "speaker_string", "ChatTTS/model/speaker", "ttsq/runtime/speakers")),
    ("prefill & prompts (speech)", ("ChatTTS/model/tokenizer", "ChatTTS/utils", "prefill", "code_prompt")),
    ("torch (other)", ("torch/",)),
    ("scheduler", ("ttsq/inference/sched/",)),
    ("audio encode / convert", ("ttsq/domain/audio", "ttsq/api/audio_out", "soundfile", "av/")),
    ("numpy (other)", ("numpy/",)),
    ("metrics", ("prometheus_client/",)),
    ("logging", ("logging/",)),
    ("redis client", ("redis/", "hiredis")),
    ("json / validation", ("json/", "pydantic", "orjson", "msgspec")),
    ("websocket / http", ("websockets/", "uvicorn/", "starlette/", "fastapi/", "h11/", "httptools")),
    ("ttsq api", ("ttsq/api/",)),
    ("ttsq store", ("ttsq/store/",)),
    ("ttsq runtime", ("ttsq/runtime/",)),
    ("event loop", ("asyncio/", "uvloop/", "selectors.py")),
    ("threads", ("threading.py", "concurrent/futures/")),
]
"""A sample's category is its leaf frame's (the first in this list one of whose markers is in the frame's file), or
for a leaf in a :data:`WEAK` one, the first caller's up the stack that has a category of its own: a GPT step's torch
call counts as the GPT's, a Redis call made under the event loop as the Redis client's."""


WEAK = frozenset({"torch (other)", "numpy (other)", "event loop", "threads"})
"""Categories that stand for their caller: a frame in one of them gives its sample to the first stronger category
further up its stack (a GPT step's matmul is the GPT's), and keeps it only where there is none."""


def category(frames: list[str]) -> str:
    fallback = "other"
    for frame in reversed(frames):
        name = next((name for name, markers in CATEGORIES if any(marker in frame for marker in markers)), None)
        if name is None:
            continue
        if name not in WEAK:
            return name
        if fallback == "other":
            fallback = name
    return fallback


@dataclass
class Profile:
    """One process's samples, from py-spy's raw (collapsed) output."""

    name: str
    stacks: Counter[tuple[str, ...]] = field(default_factory=Counter)

    @classmethod
    def read(cls, name: str, path: Path) -> Profile:
        profile = cls(name)
        if not path.exists():
            return profile
        for line in path.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if stack and count.isdigit():
                profile.stacks[tuple(stack.split(";"))] += int(count)
        return profile

    @property
    def total(self) -> int:
        return sum(self.stacks.values())

    def by_category(self) -> Counter[str]:
        shares: Counter[str] = Counter()
        for frames, count in self.stacks.items():
            shares[category(list(frames))] += count
        return shares

    def top_self(self, n: int) -> list[tuple[str, int]]:
        leaves: Counter[str] = Counter()
        for frames, count in self.stacks.items():
            leaves[frames[-1]] += count
        return leaves.most_common(n)

    def top_inclusive(self, n: int) -> list[tuple[str, int]]:
        anywhere: Counter[str] = Counter()
        for frames, count in self.stacks.items():
            for frame in set(frames):
                if frame.startswith("process ") or frame.startswith("thread "):
                    continue
                anywhere[frame] += count
        return anywhere.most_common(n)


async def one_session(ws_url: str, seed: int) -> int:
    """One session: three sentences, then close; the PCM bytes it heard."""
    heard = 0
    async with connect(ws_url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.start", "seed": seed}))
        json.loads(await ws.recv())
        for sentence in SENTENCES:
            await ws.send(json.dumps({"type": "text", "text": sentence + " "}))
        await ws.send(json.dumps({"type": "close"}))
        async for message in ws:
            if isinstance(message, bytes):
                heard += len(message)
            elif json.loads(message)["type"] == "error":
                raise SystemExit(f"session error: {message}")
    return heard


async def rounds(url: str, sessions: int, count: int) -> list[int]:
    ws_url = url.replace("http://", "ws://") + "/v1/tts/realtime"
    heard: list[int] = []
    for round_ in range(count):
        heard += await asyncio.gather(*(one_session(ws_url, 1000 * round_ + n) for n in range(sessions)))
    return heard


def py_spy() -> str:
    found = shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if found is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], check=True)
        found = shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if found is None:
        raise SystemExit("py-spy could not be installed")
    return found


def processes() -> dict[str, psutil.Process]:
    """This run's redis-server, worker and API, among this process's children."""
    found: dict[str, psutil.Process] = {}
    for child in psutil.Process().children(recursive=True):
        line = " ".join(child.cmdline())
        if "redis-server" in line:
            found["redis"] = child
        elif "ttsq.inference.engines.normalize" in line:
            found["normaliser"] = child
        elif "worker.py" in line:
            found["worker"] = child
        elif "api_server.py" in line:
            found["api"] = child
    missing = {"redis", "worker", "api"} - set(found)
    if missing:
        raise SystemExit(f"could not find the {', '.join(sorted(missing))} process")
    return found


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def report(profiles: list[Profile], cpu: dict[str, float], wall_s: float, heard: list[int], command: str) -> str:
    audio_s = max(sum(heard) / 2 / 24_000, 1e-9)
    lines = [
        "# Where a realtime session's CPU goes",
        "",
        f"Command: `{command}`. Date: {utc_now()}. Tiny checkpoint, bench.listening.ttfa's deployment "
        "(CACHE_ENABLED=false, CPU_THREADS=1, 48 tokens a chunk, MAX_CHUNK_CHARS=80). py-spy, every thread, idle ones "
        "left out, --nonblocking.",
        "",
        f"{len(heard)} sessions, {audio_s:.1f} s of audio heard, in {wall_s:.1f} s.",
        "",
        "| process | CPU s | CPU s per s of audio |",
        "|---|---|---|",
        *(f"| {name} | {seconds:.2f} | {seconds / audio_s:.3f} |" for name, seconds in cpu.items()),
        "",
    ]
    for profile in profiles:
        total = max(1, profile.total)
        lines += [f"## {profile.name}: {profile.total} samples", "", "| category | share |", "|---|---|"]
        lines += [f"| {name} | {count / total:.1%} |" for name, count in profile.by_category().most_common()]
        lines += ["", "Top functions, self (the leaf):", "", "| function | share |", "|---|---|"]
        lines += [f"| `{frame}` | {count / total:.1%} |" for frame, count in profile.top_self(15)]
        lines += ["", "Top functions, inclusive (anywhere on the stack):", "", "| function | share |", "|---|---|"]
        lines += [f"| `{frame}` | {count / total:.1%} |" for frame, count in profile.top_inclusive(25)]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--out", type=Path, default=RESULTS / "profile-session.md")
    parser.add_argument("--stacks", type=Path, default=None, help="a folder for the collapsed stacks (flame graph input)")
    parser.add_argument("--quick", action="store_true", help="2 sessions, one round (make bench-quick)")
    parser.add_argument("--reread", type=Path, default=None, help="report the stacks a --stacks folder kept; run nothing")
    args = parser.parse_args()
    command = " ".join(["python -m bench.listening.profile_session", *sys.argv[1:]])
    if args.quick:
        args.sessions, args.rounds = 2, 1
        args.out = args.out.with_name("profile-session-quick.md")
    if args.reread is not None:
        profiles = [Profile.read(path.stem, path) for path in sorted(args.reread.glob("*.collapsed"))]
        print(report(profiles, {}, 0.0, [], command))
        return
    spy = py_spy()
    tiny = Checkpoint("tiny-random", "tiny", 1, 120.0)
    with tempfile.TemporaryDirectory() as tmp, service(tiny, Path(tmp), settings=UNLIMITED) as url:
        found = processes()
        asyncio.run(rounds(url, 2, 1))  # untimed: first-request costs of the API, the model and the sockets
        raw = {name: Path(tmp) / f"{name}.txt" for name in ("worker", "api")}
        options = ["--rate", str(args.rate), "--format", "raw", "--threads", "--nonblocking"]
        spies = [
            subprocess.Popen(
                [spy, "record", "--pid", str(found[name].pid), *options, "--output", str(path)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for name, path in raw.items()
        ]
        time.sleep(1.0)  # py-spy attached
        before = {name: cpu_seconds(process) for name, process in found.items()}
        began = time.perf_counter()
        heard = asyncio.run(rounds(url, args.sessions, args.rounds))
        wall_s = time.perf_counter() - began
        cpu = {name: cpu_seconds(process) - before[name] for name, process in found.items()}
        for spy_process in spies:
            spy_process.send_signal(2)  # SIGINT: py-spy writes what it has and exits
        for spy_process in spies:
            spy_process.wait(60)
        profiles = [Profile.read(name, path) for name, path in raw.items()]
        if args.stacks is not None:
            args.stacks.mkdir(parents=True, exist_ok=True)
            for name, path in raw.items():
                if path.exists():
                    shutil.copy(path, args.stacks / f"{name}.collapsed")
    text = report(profiles, cpu, wall_s, heard, command)
    record(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
