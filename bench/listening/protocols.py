"""First audio after the first sentence is complete, through the stock streaming clients agents ship and through
ttsq's own protocol, in one run.

    python -m bench.listening.protocols [--rounds N] [--pace-s S] [--ttsq-env KEY=VALUE ...] [--results PATH]

One redis-server, one worker on the tiny checkpoint (``BATCH_INVARIANT=true``, the cache and single-flight off, so
every context is synthesised afresh) and one ``uvicorn app:app``. Per round, one after another, the same reply is
streamed a word at a time (``--pace-s`` apart, an LLM's pace) through each path, each in a process of its own in the
frameworks' virtual environment (var/agents-venv), driven by tests/agents/first_audio_clients.py:

* ``ttsq-realtime``: a plain WebSocket client on ``/v1/tts/realtime`` (ttsq's own protocol, the reference);
* ``livekit-elevenlabs`` and ``pipecat-elevenlabs``: LiveKit's ElevenLabs ``stream()`` and Pipecat's
  ``ElevenLabsTTSService`` on ``multi-stream-input``;
* ``livekit-cartesia`` and ``pipecat-cartesia``: LiveKit's Cartesia ``stream()`` and Pipecat's ``CartesiaTTSService``
  on ``/tts/websocket``.

The figure is measured in the client's process: from the moment the word that ends the first sentence was handed to
the client to the moment its first audio frame reached the application. Each path stops once its first audio came, so
nothing is left synthesising when the next is timed. The paths take turns round-robin (the first path of each round
moves on by one), so drift in the machine's load hits all alike; compare each path with ttsq's own in the same run.
Writes ``bench/results/protocols-first-audio.md`` and ``.json`` (``--results``: elsewhere); ``--ttsq-env`` sets more of
the API's and the worker's settings (e.g. ``REALTIME_CLAUSE_WAIT_S=0.05``, to see what the text cut's wait adds).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.machine import machine
from bench.stacks import ROOT, Stack, record, service_env, utc_now
from ttsq.runtime.launch import worker_command
from ttsq.store.local_redis import start_redis_server

RESULTS = ROOT / "bench" / "results" / "protocols-first-audio.md"
AGENTS_PYTHON = Path(os.environ.get("TTSQ_AGENTS_PYTHON") or ROOT / "var" / "agents-venv" / "bin" / "python")
DRIVER = ROOT / "tests" / "agents" / "first_audio_clients.py"
REFERENCE = "ttsq-realtime"
PATHS = (REFERENCE, "livekit-elevenlabs", "pipecat-elevenlabs", "livekit-cartesia", "pipecat-cartesia")
"""The driver's paths; the first is the one every other is compared with."""
TARGET_S = 0.050
"""Each stock client's median first audio within this of ttsq's own protocol's."""
KEY = "sk_any_key_on_loopback"
VOICE = "alloy"
TOKENS_PER_CHUNK = 48
MAX_CHUNK_CHARS = 80
TEXT = " ".join(
    [
        "The morning train was late again, so everyone waited in the rain.",
        "A small dog sat beside the bench and watched the empty tracks.",
        "When the train finally arrived, the doors opened with a loud sigh.",
        "People hurried inside, shaking water from their coats and umbrellas.",
    ]
)
"""The reply: a first sentence of twelve words (one chunk at ``MAX_CHUNK_CHARS``), and more after it, so the client is
still writing when its first audio comes."""


# ---- the summary (pure: tests/unit/bench/test_bench_protocols.py) ----------------------------------------------------


@dataclass(frozen=True)
class PathSummary:
    """One path's first audio after the first sentence was complete, over the rounds, in seconds."""

    path: str
    n: int
    failed: int
    median_s: float
    min_s: float
    max_s: float
    spread_s: float
    """max - min over the rounds."""
    vs_reference_s: float
    """This path's median minus the reference path's median (NaN where either has no figure)."""
    hold_median_s: float
    """Median of what the client itself held the sentence: its socket's send of the sentence's last word - complete."""
    after_sent_median_s: float
    """Median of first audio - that send: the server's part (and the client's on the way back)."""

    @property
    def within_target(self) -> bool:
        return not math.isnan(self.vs_reference_s) and self.vs_reference_s <= TARGET_S


def parse_line(stdout: str) -> dict[str, Any]:
    """The driver's JSON line (the last line of its stdout that is a JSON object); an error line if there is none."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            found: dict[str, Any] = json.loads(line)
            return found
    return {"first_audio_after_complete_s": None, "error": "the driver printed no result"}


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def summarize(runs: Mapping[str, Sequence[dict[str, Any]]], reference: str = REFERENCE) -> list[PathSummary]:
    """Per path, in ``runs``' order: the figures of the runs that got audio, and the difference of medians from
    ``reference``'s."""

    def ok(path: str) -> list[dict[str, Any]]:
        return [r for r in runs.get(path, []) if not r.get("error") and r.get("first_audio_after_complete_s") is not None]

    base_median = _median([r["first_audio_after_complete_s"] for r in ok(reference)])
    out = []
    for path, rows in runs.items():
        good = ok(path)
        values = [r["first_audio_after_complete_s"] for r in good]
        median = _median(values)
        low, high = (min(values), max(values)) if values else (math.nan, math.nan)
        holds = [r["client_hold_s"] for r in good if r.get("client_hold_s") is not None]
        after = [r["first_audio_after_complete_s"] - r["client_hold_s"] for r in good if r.get("client_hold_s") is not None]
        out.append(
            PathSummary(
                path, len(values), len(rows) - len(values), median, low, high, high - low, median - base_median,
                _median(holds), _median(after),
            )
        )  # fmt: skip
    return out


def order(round_number: int, paths: Sequence[str] = PATHS) -> list[str]:
    """Round ``round_number``'s turns: every path once, the first moved on by one each round."""
    shift = round_number % len(paths)
    return [*paths[shift:], *paths[:shift]]


def table(summaries: Sequence[PathSummary]) -> list[str]:
    def ms(value: float, sign: bool = False) -> str:
        return "–" if math.isnan(value) else f"{value * 1000:{'+' if sign else ''}.0f}"

    lines = [
        "| path | runs ok | failed | median ms | min–max ms | spread ms | median − ttsq's own ms | within +50 ms "
        "| client's own hold, median ms | after the socket sent it, median ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        within = "(reference)" if s.path == REFERENCE else ("yes" if s.within_target else "no")
        lines.append(
            f"| {s.path} | {s.n} | {s.failed} | {ms(s.median_s)} | {ms(s.min_s)}–{ms(s.max_s)} | {ms(s.spread_s)} | "
            f"{ms(s.vs_reference_s, sign=True)} | {within} | {ms(s.hold_median_s)} | {ms(s.after_sent_median_s)} |"
        )
    return lines


# ---- the run ---------------------------------------------------------------------------------------------------------


def drive(path: str, url: str, pace_s: float, timeout_s: float) -> dict[str, Any]:
    """One path, in a process of its own: the driver's line (with the error if it failed)."""
    try:
        done = subprocess.run(
            [str(AGENTS_PYTHON), str(DRIVER), path, url, KEY, VOICE, TEXT, str(pace_s)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=ROOT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"path": path, "first_audio_after_complete_s": None, "error": f"driver over {timeout_s:.0f}s"}
    found = parse_line(done.stdout)
    if done.returncode != 0 and not found.get("error"):
        found["error"] = f"driver exited {done.returncode}: {done.stderr[-500:]}"
    return {"path": path, **found}


def measure(
    rounds: int, pace_s: float, settle_s: float, timeout_s: float, tmp: Path, extra: Mapping[str, str]
) -> dict[str, list[dict[str, Any]]]:
    redis = start_redis_server(tmp / "redis")
    env = service_env(
        redis.url,
        MODEL="tiny",
        ENGINE_BACKEND="ttsq",
        BATCH_INVARIANT="true",
        MIN_NEW_TOKEN=str(TOKENS_PER_CHUNK),
        MAX_NEW_TOKEN=str(TOKENS_PER_CHUNK),
        MAX_CHUNK_CHARS=str(MAX_CHUNK_CHARS),
        NORMALIZE_TEXT="false",
    ) | dict(extra)
    stack = Stack(tmp)
    runs: dict[str, list[dict[str, Any]]] = {path: [] for path in PATHS}
    try:
        stack.start_worker("worker", worker_command(), env, timeout_s=300)
        url = stack.start_api("api", env)
        print(f"warm-up: {drive(REFERENCE, url, pace_s, timeout_s)}", flush=True)  # untimed: first-request costs
        for number in range(rounds):
            for path in order(number):
                time.sleep(settle_s)  # the last path's cancelled chunk, if one was still decoding, ends first
                found = drive(path, url, pace_s, timeout_s)
                runs[path].append(found)
                print(f"round {number + 1} {path}: {json.dumps(found)}", flush=True)
    finally:
        stack.close()
        redis.stop()
    return runs


def report(runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace, command: str, loads: tuple[Any, Any]) -> str:
    summaries = summarize(runs)
    spec = machine()
    extra = "".join(f", `{kv}`" for kv in args.ttsq_env)
    stock = [s for s in summaries if s.path != REFERENCE]
    lines = [
        "# First audio after the first sentence: stock clients vs ttsq's own protocol",
        "",
        f"Command: `{command}`. Date: {utc_now()}.",
        f"Machine: {spec['cpu']}, {spec['cores']} cores, {spec['memory_gib']} GiB, no GPU; load average "
        f"{' / '.join(f'{v:.2f}' for v in loads[0])} (1/5/15 min) at the start, {' / '.join(f'{v:.2f}' for v in loads[1])} "
        "at the end (shared with other work: read the differences between paths, not the milliseconds).",
        "",
        f"One redis-server, one worker (tiny checkpoint, `BATCH_INVARIANT=true`, `MIN_NEW_TOKEN=MAX_NEW_TOKEN="
        f"{TOKENS_PER_CHUNK}`, `MAX_CHUNK_CHARS={MAX_CHUNK_CHARS}`, cache and single-flight off{extra}), one API. "
        f"{args.rounds} rounds, paths round-robin; each path in its own var/agents-venv process; a "
        f"{len(TEXT.split())}-word reply written a word every {args.pace_s * 1000:.0f} ms, voice `{VOICE}`. "
        "Figure: first audio frame at the application − the moment the first sentence's last word was handed to the "
        "client (time.monotonic in the client's process). Split in two: the client's own hold (until its socket sent a "
        "message holding that word: LiveKit's sentence tokenizer and "
        "Pipecat's text aggregator wait for text after a sentence end) and the rest (ttsq, and the client's way back).",
        "",
        *table(summaries),
        "",
        f"Within +{TARGET_S * 1000:.0f} ms of ttsq's own median: {sum(s.within_target for s in stock)} of {len(stock)} "
        "stock clients.",
        "",
        "Raw runs:",
        "",
        *(f"- {json.dumps(r)}" for path in runs for r in runs[path]),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5, help="turns of every path (default 5)")
    parser.add_argument("--pace-s", type=float, default=0.04, help="seconds between two words (an LLM's pace)")
    parser.add_argument("--settle-s", type=float, default=1.0, help="pause before each path's turn")
    parser.add_argument("--timeout-s", type=float, default=180.0, help="longest one path's process may run")
    parser.add_argument("--ttsq-env", action="append", default=[], metavar="KEY=VALUE", help="extra ttsq settings")
    parser.add_argument("--results", type=Path, default=RESULTS, help="markdown report (its numbers beside it as .json)")
    args = parser.parse_args(argv)
    if not AGENTS_PYTHON.exists():
        raise SystemExit(f"{AGENTS_PYTHON} is missing: run `make agent-clients`")
    command = "python -m bench.listening.protocols " + " ".join(sys.argv[1:] if argv is None else argv)
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="protocols-") as tmp:
        extra = dict(kv.split("=", 1) for kv in args.ttsq_env)
        runs = measure(args.rounds, args.pace_s, args.settle_s, args.timeout_s, Path(tmp), extra)
    text = report(runs, args, command.strip(), (load_start, os.getloadavg()))
    summaries = [asdict(s) | {"within_target": s.within_target} for s in summarize(runs)]
    data = {"command": command.strip(), "date": utc_now(), "machine": machine(), "runs": runs, "summary": summaries}
    data |= {"load_average": {"start": load_start, "end": os.getloadavg()}}
    record(args.results, text, data)
    print(text)


if __name__ == "__main__":
    main()
