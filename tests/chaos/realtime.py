"""``python -m tests.chaos.realtime`` (``make realtime-chaos``): realtime sessions under faults, each held to its text.

Real processes (:class:`tests.chaos.harness.Deployment`: a redis-server with its append-only file, ``uvicorn app:app``,
supervised ``python worker.py`` slots, ``BATCH_INVARIANT``), real WebSocket clients on ``/v1/tts/realtime``. Every
session speaks a text of a few sentences (each over half of ``MAX_CHUNK_CHARS``, so a submit of the whole text cuts it
where the session does) with its own voice and seed; its audio is then held to that text submitted whole (``pcm``) on
the same deployment with no fault, sample for sample. A session either *equals* it, or *ended with an error* (an
``error`` message, or a close other than 1000) — or it has a *hole*: it ended well and its audio is not the text's.
A hole is the one violation.

Scenarios (``--only``, comma-separated keys):

``redis``      rounds of ``--sessions`` sessions; once all of a round's sessions have audio, Redis is restarted (SIGTERM,
               ``--down-s`` seconds between its exit and its start, again on its port with its data): ``--restarts``
               rounds. Measured: how long Redis was unreachable (its shutdown and start included), and how many claims
               went stale meanwhile (a lease that lapsed while Redis was away: the job runs again).
``kill``       two workers; once a round's sessions have audio, one worker is killed with SIGKILL (its supervisor starts
               it again): the longest pause in each session's audio.
``no-worker``  an API whose queue no worker serves: how long a session waits for its error (up to ``--no-worker-wait-s``).

A scenario is a function of :class:`RealtimeChaos` in :data:`SCENARIOS`, returning its :class:`Figures`: another one is
one more entry. Prints one line per scenario, then the markdown table, and writes it (with the date, the command, the
seed and the sizes) to ``--markdown``. Exits 1 if any session has a hole.

    python -m tests.chaos.realtime                                  # every scenario
    python -m tests.chaos.realtime --only redis --sessions 3 --restarts 20 --seed 7
    python -m tests.chaos.realtime --only redis --timings chaos     # the chaos suite's short leases (LEASE_S=3)
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import random
import re
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.chaos.harness import ENGINE_ENV, ROOT, TIMING_ENV, Deployment, WorkerSlot
from ttsq.domain.audio import SAMPLE_RATE
from ttsq.inference.engines.checkpoint import build_tiny_checkpoint

ROUND_TIMEOUT_S = 600.0
"""Longest wait for one session, or a round's first audio: only a hang reaches it."""

SESSION_ENV = {"MAX_NEW_TOKEN": "256", "MIN_NEW_TOKEN": "256", "REALTIME_MAX_S": "900"}
"""Longer chunks than the chaos suite's (16 tokens, well under a second): a sentence takes seconds to speak, so a
fault lands while sessions are mid-way, not between them."""

WORDS = (
    *("river", "stone", "morning", "quiet", "garden", "window", "paper", "silver", "yellow", "basket", "letter"),
    *("orange", "travel", "winter", "summer", "over", "under", "little", "gentle", "simple", "careful", "happy"),
    *("early", "later", "open", "closed", "along", "around", "between", "beyond", "after", "before"),
)

Verdict = Literal["equal", "error", "hole"]

RE_RUN = re.compile(r"✓ \S+ attempt (?:[2-9]|\d\d+) ")
"""A worker's line for a job done at its second attempt or later: an earlier attempt's claim went stale."""


# ---- one session ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionSpec:
    """What one session speaks: its text (whole sentences), voice and seed; the same goes into the whole-text submit."""

    text: str
    voice: str
    seed: int


@dataclass
class SessionRun:
    """What one session's client got: every audio byte and event, the close code, and when each audio frame came."""

    spec: SessionSpec
    audio: bytearray = field(default_factory=bytearray)
    events: list[dict[str, Any]] = field(default_factory=list)
    close_code: int | None = None
    frames_at: list[float] = field(default_factory=list)
    """``time.monotonic()`` of each audio frame."""
    text_at: float = 0.0
    """When the text was sent."""
    error_at: float | None = None
    """When the first ``error`` message (or the close, if it came first) arrived."""
    crashed: str | None = None
    """The client's own failure (a connection refused, a timeout), if any."""

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [event for event in self.events if event.get("type") == "error"]

    def longest_pause_s(self) -> float:
        """The longest time between two audio frames (0 with fewer than two)."""
        return max((b - a for a, b in zip(self.frames_at, self.frames_at[1:], strict=False)), default=0.0)


def judge(run: SessionRun, whole: bytes) -> Verdict:
    """``equal``: the session ended well (close 1000, no ``error``) with the text's audio exactly; ``error``: it said it
    went wrong (or its client failed); ``hole``: it ended well with audio that is not the text's."""
    if run.crashed is not None or run.close_code != 1000 or run.errors:
        return "error"
    return "equal" if bytes(run.audio) == whole else "hole"


def describe_hole(run: SessionRun, whole: bytes) -> str:
    """Where a session's audio first departs from the text's, for the report."""
    audio = bytes(run.audio)
    first = next((i for i, (a, b) in enumerate(zip(audio, whole, strict=False)) if a != b), min(len(audio), len(whole)))
    return (
        f"voice {run.spec.voice} seed {run.spec.seed}: {len(audio) / 2 / SAMPLE_RATE:.2f} s of "
        f"{len(whole) / 2 / SAMPLE_RATE:.2f} s, first different at {first / 2 / SAMPLE_RATE:.2f} s"
    )


async def speak(url: str, spec: SessionSpec, started: asyncio.Event, limit_s: float = ROUND_TIMEOUT_S) -> SessionRun:
    """One realtime session: start, the whole text, ``close``; then everything until the server closes. ``started`` is
    set once its first audio came (or it ended)."""
    run = SessionRun(spec)
    try:
        async with asyncio.timeout(limit_s), connect(url.replace("http://", "ws://") + "/v1/tts/realtime") as ws:
            await ws.send(json.dumps({"type": "session.start", "voice": spec.voice, "seed": spec.seed}))
            opened = json.loads(await ws.recv())
            if opened.get("type") != "session.started":
                run.events.append(opened)
            run.text_at = time.monotonic()
            await ws.send(json.dumps({"type": "text", "text": spec.text}))
            await ws.send(json.dumps({"type": "close"}))
            try:
                async for message in ws:
                    if isinstance(message, bytes):
                        run.audio += message
                        run.frames_at.append(time.monotonic())
                        started.set()
                        continue
                    event = json.loads(message)
                    run.events.append(event)
                    if event.get("type") == "error" and run.error_at is None:
                        run.error_at = time.monotonic()
            except ConnectionClosed:
                pass
            run.close_code = ws.close_code
    except (OSError, TimeoutError, ConnectionClosed) as exc:
        run.crashed = f"{type(exc).__name__}: {exc}"
    if run.error_at is None and run.close_code not in (None, 1000):
        run.error_at = time.monotonic()
    started.set()
    return run


async def whole_text(http: httpx.AsyncClient, spec: SessionSpec) -> bytes:
    """The session's text submitted whole (``pcm``), waited for, and its stored audio: decoded in pieces (``listen``), as
    the session's is, so that the two are the same bits (a chunk decoded whole differs by float rounding)."""
    body = {"text": spec.text, "voice": spec.voice, "seed": spec.seed, "format": "pcm", "listen": True}
    answer = await http.post("/v1/tts/submit", json=body)
    answer.raise_for_status()
    task_id = answer.json()["task_id"]
    async with asyncio.timeout(ROUND_TIMEOUT_S):
        while (result := await http.get(f"/v1/tts/result/{task_id}", params={"wait": 20})).status_code == 202:
            pass  # a long-poll: the next one waits again
    result.raise_for_status()
    return result.content


# ---- a run ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    sessions: int
    """Sessions per round."""
    restarts: int
    """Rounds of the ``redis`` scenario: one Redis restart each."""
    down_s: tuple[float, float]
    """How long Redis stays down (uniform in this range)."""
    kills: int
    """Rounds of the ``kill`` scenario: one SIGKILL each."""
    sentences: int
    """Sentences per session."""
    no_worker_wait_s: float
    """How long a session of the ``no-worker`` scenario is given to end with an error."""
    workers: int
    """Workers in the ``redis`` scenario (the ``kill`` scenario has two): with more than one, another worker's sweep
    may take back a lease that lapsed while Redis was away before its owner renews it (its job then runs again)."""


@dataclass
class Figures:
    """One scenario's outcome: its sessions' verdicts, its measurements (named, for the table) and its violations."""

    key: str
    name: str
    verdicts: dict[Verdict, int] = field(default_factory=lambda: {"equal": 0, "error": 0, "hole": 0})
    measured: dict[str, str] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    """The sessions' first ``error`` codes (or close codes), counted."""
    violations: list[str] = field(default_factory=list)
    mid_way: int = 0
    """Sessions still speaking when their round's fault was over."""
    began: float = field(default_factory=time.monotonic)
    wall_s: float = 0.0

    def count(self, run: SessionRun, whole: bytes) -> Verdict:
        verdict = judge(run, whole)
        self.verdicts[verdict] += 1
        if verdict == "error":
            reason = run.crashed or (run.errors[0].get("code") if run.errors else None) or f"close {run.close_code}"
            self.errors[str(reason)] = self.errors.get(str(reason), 0) + 1
        if verdict == "hole":
            self.violations.append(f"a session ended well with a hole: {describe_hole(run, whole)}")
        return verdict

    def line(self) -> str:
        sessions = sum(self.verdicts.values())
        verdicts = ", ".join(f"{count} {name}" for name, count in self.verdicts.items())
        measured = "; ".join(f"{name} {value}" for name, value in self.measured.items())
        return f"[realtime-chaos] {self.key} {self.name}: {sessions} sessions: {verdicts}; {measured} ({self.wall_s:.0f} s)"

    def row(self) -> str:
        errors = ", ".join(f"{code} ×{count}" for code, count in sorted(self.errors.items())) or "–"
        measured = "; ".join(f"{name} {value}" for name, value in self.measured.items())
        sessions = sum(self.verdicts.values())
        return (
            f"| {self.key} | {self.name} | {sessions} | {self.verdicts['equal']} | {self.verdicts['error']} ({errors}) | "
            f"**{self.verdicts['hole']}** | {measured} | {self.wall_s:.0f} |"
        )


TABLE_HEADER = (
    "| key | scenario | sessions | equal to the whole text | ended with an error (codes) | with a hole | measured | wall s |\n"
    "|---|---|---|---|---|---|---|---|"
)


def spread(values: list[float], unit: str = "s") -> str:
    """min / median / max of ``values``."""
    if not values:
        return "–"
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f} {unit}"


class RealtimeChaos:
    """One run's shared state: the deployment (one API, workers started as scenarios need them), the RNG, the figures."""

    def __init__(
        self, root: Path, checkpoint: Path, sizes: Sizes, seed: int, timings: str, say: Callable[[str], None] = print
    ) -> None:
        self.sizes = sizes
        self.seed = seed
        self.say = say
        self.rng = random.Random(seed)
        self.results: list[Figures] = []
        self.deployment = Deployment(root, checkpoint, say)
        if timings == "shipped":  # the harness's short leases and sweeps out: every timing at its default
            for name in TIMING_ENV:
                if name != "RESULT_TTL_S":
                    self.deployment.env.pop(name, None)
        self.deployment.env.update(SESSION_ENV)
        self.api = self.deployment.start_api("api")
        self.workers: list[WorkerSlot] = []

    def workers_up(self, count: int) -> list[WorkerSlot]:
        """At least ``count`` workers on the main queue, ready."""
        while len(self.workers) < count:
            self.workers.append(self.deployment.add_worker(f"w{len(self.workers) + 1}"))
        self.deployment.wait_ready(self.workers)
        return self.workers

    def spec(self) -> SessionSpec:
        """A new text of whole sentences (21 to 40 characters each) with a voice and a seed of its own."""
        sentences = []
        for _ in range(self.sizes.sentences):
            words = [self.rng.choice(WORDS)]
            while len(" ".join(words)) < 22:
                words.append(self.rng.choice(WORDS))
            sentence = " ".join(words)[:38].rstrip()
            sentences.append(sentence[0].upper() + sentence[1:] + ".")
        return SessionSpec(" ".join(sentences), self.rng.choice(("zh_female", "zh_male")), self.rng.randrange(1, 1_000_000))

    async def round(self, figures: Figures, url: str, fault: Callable[[], Awaitable[None]]) -> list[SessionRun]:
        """``--sessions`` sessions at once; ``fault`` once each has its first audio (and a moment more); every run. The
        sessions still speaking when the fault is over are counted (``mid_way``): those the fault surely met."""
        specs = [self.spec() for _ in range(self.sizes.sessions)]
        started = [asyncio.Event() for _ in specs]
        sessions = [asyncio.create_task(speak(url, spec, flag)) for spec, flag in zip(specs, started, strict=True)]
        async with asyncio.timeout(ROUND_TIMEOUT_S):
            await asyncio.gather(*(flag.wait() for flag in started))
        await asyncio.sleep(self.rng.uniform(0.0, 1.0))
        await fault()
        figures.mid_way += sum(1 for session in sessions if not session.done())
        return list(await asyncio.gather(*sessions))

    async def judge_round(self, figures: Figures, runs: list[SessionRun]) -> None:
        async with httpx.AsyncClient(base_url=self.api.url, timeout=60) as http:
            wholes = await asyncio.gather(*(whole_text(http, run.spec) for run in runs))
        for run, whole in zip(runs, wholes, strict=True):
            figures.count(run, whole)

    def worker_log_count(self, pattern: re.Pattern[str]) -> int:
        """How many lines of every worker incarnation's log so far match ``pattern``."""
        logs = [path for slot in self.workers for path in slot.all_logs() if path.exists()]
        return sum(len(pattern.findall(path.read_text(errors="replace"))) for path in logs)

    def finish(self, figures: Figures) -> Figures:
        figures.wall_s = time.monotonic() - figures.began
        self.say(figures.line())
        for violation in figures.violations:
            self.say(f"[realtime-chaos]   ✗ {violation}")
        self.results.append(figures)
        return figures

    def close(self) -> None:
        self.deployment.close()


# ---- scenarios ------------------------------------------------------------------------------------------------------


def redis_restarts(chaos: RealtimeChaos) -> Figures:
    """Redis restarted (SIGTERM: it writes its append-only file and exits; started again on its port) once per round,
    mid-session: no session may end well with a hole."""
    figures = Figures("R1", "Redis restarted mid-session")
    chaos.workers_up(chaos.sizes.workers)
    downs: list[float] = []

    async def restart() -> None:
        down_s = chaos.rng.uniform(*chaos.sizes.down_s)
        began = time.monotonic()
        await asyncio.to_thread(chaos.deployment.redis.stop)
        await asyncio.sleep(down_s)
        await asyncio.to_thread(chaos.deployment.restart_redis, True)  # returns once it answers
        downs.append(time.monotonic() - began)

    async def run() -> None:
        for number in range(chaos.sizes.restarts):
            runs = await chaos.round(figures, chaos.api.url, restart)
            await chaos.judge_round(figures, runs)
            chaos.say(f"[realtime-chaos]   round {number + 1}: Redis unreachable {downs[-1]:.2f} s; {dict(figures.verdicts)}")

    asyncio.run(run())
    figures.measured["Redis unreachable (min / median / max)"] = spread(downs)
    figures.measured["sessions still speaking when Redis was back"] = str(figures.mid_way)
    figures.measured["jobs done at a second attempt or later (a claim gone stale)"] = str(chaos.worker_log_count(RE_RUN))
    return chaos.finish(figures)


def worker_kills(chaos: RealtimeChaos) -> Figures:
    """One of two workers killed with SIGKILL once per round, mid-session (its supervisor starts it again): the longest
    pause in each session's audio, and every session equal to its text or ended with an error."""
    figures = Figures("R2", "worker kill -9 mid-session, a second worker up")
    workers = chaos.workers_up(2)
    pauses: list[float] = []

    async def kill() -> None:
        victim = chaos.rng.choice(workers)
        await asyncio.to_thread(chaos.deployment.kill, victim, signal.SIGKILL)

    async def run() -> None:
        for number in range(chaos.sizes.kills):
            runs = await chaos.round(figures, chaos.api.url, kill)
            longest = [run.longest_pause_s() for run in runs]
            pauses.extend(longest)
            await chaos.judge_round(figures, runs)
            chaos.say(f"[realtime-chaos]   round {number + 1}: longest pause {max(longest):.2f} s; {dict(figures.verdicts)}")
            await asyncio.to_thread(chaos.deployment.wait_ready, workers)

    asyncio.run(run())
    figures.measured["longest pause per session (min / median / max)"] = spread(pauses)
    figures.measured["sessions still speaking after the kill"] = str(figures.mid_way)
    return chaos.finish(figures)


def no_worker(chaos: RealtimeChaos) -> Figures:
    """Sessions on a queue no worker serves: how long each waits, from its text, for an error (or the wait's end)."""
    figures = Figures("R3", "no worker at all")
    api = chaos.deployment.start_api("api-no-worker", namespace="no-worker")
    waits: list[float] = []

    async def run() -> None:
        specs = [chaos.spec() for _ in range(chaos.sizes.sessions)]
        limit_s = chaos.sizes.no_worker_wait_s
        runs = await asyncio.gather(*(speak(api.url, spec, asyncio.Event(), limit_s) for spec in specs))
        for session in runs:  # nothing can be spoken: an error is the one right end, and nothing else is counted
            if session.error_at is not None:
                waits.append(session.error_at - session.text_at)
                figures.count(session, b"")
        unanswered = sum(1 for session in runs if session.error_at is None)
        figures.measured["time from text to error"] = spread(waits)
        figures.measured[f"no error within {limit_s:.0f} s"] = f"{unanswered} of {len(runs)} sessions"

    asyncio.run(run())
    return chaos.finish(figures)


SCENARIOS: dict[str, Callable[[RealtimeChaos], Figures]] = {"redis": redis_restarts, "kill": worker_kills, "no-worker": no_worker}


# ---- the command ----------------------------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.realtime", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated scenario keys: " + ",".join(SCENARIOS))
    parser.add_argument("--sessions", type=int, default=3, help="sessions per round (default 3)")
    parser.add_argument("--restarts", type=int, default=20, help="Redis restarts, one per round (default 20)")
    parser.add_argument("--down-s", default="0.5:3", help="Redis down time range in seconds, MIN:MAX (default 0.5:3)")
    parser.add_argument("--kills", type=int, default=10, help="worker SIGKILLs, one per round (default 10)")
    parser.add_argument("--sentences", type=int, default=4, help="sentences per session (default 4)")
    parser.add_argument("--workers", type=int, default=1, help="workers in the redis scenario (default 1)")
    parser.add_argument("--no-worker-wait-s", type=float, default=30.0, help="how long a session without a worker waits")
    parser.add_argument(
        "--timings",
        choices=("shipped", "chaos"),
        default="shipped",
        help="shipped: every lease, sweep and timeout at its default; chaos: the chaos suite's (LEASE_S=3, ...)",
    )
    parser.add_argument("--seed", type=int, help="RNG seed (default: random, printed)")
    parser.add_argument("--markdown", type=Path, default=ROOT / "bench" / "results" / "realtime-chaos.md")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--workdir", type=Path, help="scratch directory (default: a new temporary one, removed unless it failed)")
    args = parser.parse_args(argv)
    unknown = set((args.only or "").split(",")) - set(SCENARIOS) - {""}
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    low, _, high = args.down_s.partition(":")
    try:
        args.down_range = (float(low), float(high or low))
    except ValueError:
        parser.error(f"--down-s takes MIN:MAX in seconds, not {args.down_s!r}")
    if not 0 < args.down_range[0] <= args.down_range[1]:
        parser.error("--down-s: 0 < MIN <= MAX")
    return args


def markdown(results: list[Figures], command: str, seed: int, sizes: Sizes, timings: str) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    violations = [f"- {figures.key}: {violation}" for figures in results for violation in figures.violations]
    env = {**ENGINE_ENV, **SESSION_ENV, **(TIMING_ENV if timings == "chaos" else {})}
    return "\n".join(
        [
            "# Realtime chaos results",
            "",
            f"`{command}` — {now} — {machine} — seed {seed}",
            "",
            f"Sizes: {sizes}; timings: {timings}; worker and API settings: "
            + ", ".join(f"{name}={value}" for name, value in env.items()),
            "",
            TABLE_HEADER,
            *(figures.row() for figures in results),
            "",
            "Violations:" if violations else "Violations: none.",
            *violations,
            "",
            "Method: real processes (redis-server with its append-only file, `uvicorn app:app`, `python worker.py` on the "
            "tiny checkpoint with BATCH_INVARIANT) and real WebSocket clients on `/v1/tts/realtime`, each sending a text of "
            "whole sentences with its own voice and seed, then `close`. Each session's audio is compared, sample for "
            "sample, with the same text submitted whole (`pcm`) to the same deployment after the round, with no fault: "
            "*equal*, *ended with an error* (an `error` message or a close other than 1000), or *with a hole* (ended "
            "well, audio not the text's: the violation). Timings are measured on a small shared machine, not asserted.",
        ]
    )


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    sizes = Sizes(args.sessions, args.restarts, args.down_range, args.kills, args.sentences, args.no_worker_wait_s, args.workers)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1_000_000)
    chosen = [key for key in SCENARIOS if not args.only or key in args.only.split(",")]
    root = args.workdir or Path(tempfile.mkdtemp(prefix="ttsq-realtime-chaos-"))
    print(f"[realtime-chaos] seed {seed}; scratch {root}", flush=True)
    checkpoint = build_tiny_checkpoint(ROOT / "var" / "tiny-checkpoint")
    chaos = RealtimeChaos(root / "realtime", checkpoint, sizes, seed, args.timings)
    try:
        for key in chosen:
            try:
                SCENARIOS[key](chaos)
            except Exception as exc:  # noqa: BLE001 - one broken scenario is reported, the others still run
                traceback.print_exc()
                crashed = Figures(key, "crashed", violations=[f"the scenario itself failed: {type(exc).__name__}: {exc}"])
                chaos.results.append(crashed)
                print(crashed.line(), flush=True)
    finally:
        chaos.close()
    command = "python -m tests.chaos.realtime " + shlex.join(argv) if argv else "python -m tests.chaos.realtime"
    report = markdown(chaos.results, command.strip(), seed, sizes, args.timings)
    print("\n" + report)
    if not args.no_write:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(report + "\n")
        print(f"written to {args.markdown}")
    failed = any(figures.violations for figures in chaos.results)
    if failed:
        print(f"process logs kept in {root / 'realtime' / 'logs'}")
    elif args.workdir is None:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
