"""Move bench/'s flat modules into their groups and rewrite every reference to them (issue 29, item 4).

Why a script: other branches were adding and editing bench modules while the move happened. After merging one, run
``python scripts/bench_moves.py`` again from the repository root: a module still at its old top-level path is moved
with ``git mv`` (so its history follows it), a moved module that computed the root from its own path takes
``bench.ROOT`` instead, and every ``bench.<old>`` / ``bench/<old>.py`` / ``from bench import <old>`` in tracked text
files is rewritten to its group's path; then ``ruff check --fix`` sorts the imports.
Running it twice changes nothing the second time. Recorded results (``bench/results/``) are never touched: their
paths stay as BENCHMARKS.md cites them.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: old module name at bench/'s top → its new dotted place under bench/.
MOVES: dict[str, str] = {
    # engine/: the engine and its decoder on their own, no service around them.
    "decoder": "engine.decoder",
    "decoder_steps": "engine.decoder_steps",
    "lookahead": "engine.lookahead",
    "raw_batch": "engine.raw_batch",
    "consistent_voice": "engine.consistent_voice",
    "streaming_audio": "engine.streaming_audio",
    "cpu_matmul": "engine.cpu_matmul",
    # service/: the whole service's throughput and per-request cost, and what it is compared with.
    "throughput": "service.throughput",
    "throughput_report": "service.throughput_report",
    "closed_loop": "service.closed_loop",
    "submit_cost": "service.submit_cost",
    "asgi_driver": "service.asgi_driver",
    "wrk": "service.wrk",
    "arq_jobs": "service.arq_jobs",
    "baseline_app": "service.baseline_app",
    "bare_app": "service.bare_app",
    "lpush_app": "service.lpush_app",
    "job_records": "service.job_records",
    "cache_latency": "service.cache_latency",
    "cache_replay": "service.cache_replay",
    "retype": "service.retype",
    # listening/: what a listener gets: streams, first audio, encoders, idle listeners.
    "listeners": "listening.listeners",
    "stream_storm": "listening.stream_storm",
    "stream_formats": "listening.stream_formats",
    "encoders": "listening.encoders",
    "ttfa": "listening.ttfa",
    "text_in": "listening.text_in",
    "realtime": "listening.realtime",
    "chattts_stream_app": "listening.chattts_stream_app",
    "pieces": "listening.pieces",
    # scale/: more than one Redis.
    "shards": "scale.shards",
    "sentinel": "scale.sentinel",
    # gpu/: make bench-gpu. `python -m bench.gpu` still runs it (bench/gpu/__main__.py).
    "gpu_e2e": "gpu.e2e",
    "gpu_engine": "gpu.engine",
    "gpu_report": "gpu.report",
}
#: files that move but are not modules named ``bench.<old>``.
FILE_MOVES: dict[str, str] = {"bench/gpu.py": "bench/gpu/run.py", "bench/gpu.mk": "bench/gpu/gpu.mk"}
#: names that moved into the shared helper: (module they were imported from, name) → the module that has them now.
NAME_MOVES: dict[tuple[str, str], str] = {
    ("bench.service.throughput", "service_env"): "bench.stacks",
    ("bench.service.throughput", "Stack"): "bench.stacks",
    ("bench.service.throughput", "EngineSpec"): "bench.stacks",
    ("bench.service.throughput", "progress"): "bench.stacks",
    ("bench.listening.stream_storm", "api_process"): "bench.stacks",
    ("bench.service.cache_latency", "ROOT"): "bench",
}
GROUPS = sorted({new.split(".")[0] for new in MOVES.values()})
TEXT_SUFFIXES = {".py", ".md", ".sh", ".mk", ".toml", ".txt", ".cfg", ".ini", ".yml", ".yaml", ""}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def move_files() -> None:
    for group in GROUPS:
        init = ROOT / "bench" / group / "__init__.py"
        if not init.exists():
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text("")
            git("add", str(init.relative_to(ROOT)))
    pairs = {f"bench/{old}.py": "bench/" + new.replace(".", "/") + ".py" for old, new in MOVES.items()}
    pairs.update(FILE_MOVES)
    for old, new in pairs.items():
        if (ROOT / old).exists() and not (ROOT / new).exists():
            git("mv", old, new)
        if (ROOT / new).exists() and take_root_from_bench(ROOT / new):
            print("root from bench.ROOT:", new)


OLD_ROOT = "ROOT = Path(__file__).resolve().parent.parent\n"


def take_root_from_bench(path: Path) -> bool:
    """A moved module that computed the root from its own path (now a folder too shallow) takes :data:`bench.ROOT`.

    The import goes after the module's last top-level import; ``ruff check --fix bench`` then sorts it in."""
    text = path.read_text()
    if OLD_ROOT not in text:
        return False
    lines = text.replace(OLD_ROOT, "", 1).splitlines(keepends=True)
    last_import = max(i for i, line in enumerate(lines) if line.startswith(("import ", "from ")))
    lines.insert(last_import + 1, "from bench import ROOT\n")
    path.write_text("".join(lines))
    return True


def rewrite(text: str) -> str:
    names = "|".join(sorted(MOVES, key=len, reverse=True))
    # A module is never called: `bench.decoder(8)` is a method of a variable named bench, left alone.
    text = re.sub(  # `from bench import ttfa` → `from bench.listening import ttfa`
        rf"^from bench import ({names})$",
        lambda m: (
            f"from bench.{MOVES[m.group(1)].rpartition('.')[0]} import {MOVES[m.group(1)].rpartition('.')[2]}"
            + (f" as {m.group(1)}" if MOVES[m.group(1)].rpartition(".")[2] != m.group(1) else "")
        ),
        text,
        flags=re.M,
    )
    text = re.sub(rf"(?<![\w./])bench\.({names})(?![\w(])", lambda m: "bench." + MOVES[m.group(1)], text)
    text = re.sub(rf"(?<![\w./])bench/({names})\.py\b", lambda m: "bench/" + MOVES[m.group(1)].replace(".", "/") + ".py", text)
    # A heading's anchor drops the dots: `## … (python -m bench.realtime)` is `#…-benchrealtime-…`.
    text = re.sub(
        rf"(#[\w-]*-)bench({names})(?=[-)\s]|$)", lambda m: m.group(1) + "bench" + MOVES[m.group(2)].replace(".", ""), text
    )
    for old, new in FILE_MOVES.items():
        text = re.sub(rf"(?<![\w./]){re.escape(old)}(?![\w/])", new, text)
    return text


def move_names(text: str) -> str:
    """``from bench.service.throughput import X, service_env`` → X from there, ``service_env`` from :mod:`bench.stacks`."""

    def split(match: re.Match[str]) -> str:
        module, names = match.group(2), [n.strip() for n in match.group(3).split(",")]
        homes: dict[str, list[str]] = {}
        for name in names:
            homes.setdefault(NAME_MOVES.get((module, name), module), []).append(name)
        indent = match.group(1)
        return "\n".join(f"{indent}from {home} import {', '.join(found)}" for home, found in homes.items())

    return re.sub(r"^([ \t]*)from (bench[\w.]*) import ([\w, ]+)$", split, text, flags=re.M)


def rewrite_references() -> list[str]:
    changed = []
    for rel in git("ls-files").splitlines():
        path = ROOT / rel
        if rel.startswith("bench/results/") or path.suffix not in TEXT_SUFFIXES or not path.is_file():
            continue
        if rel in ("scripts/bench_moves.py", "tests/test_bench_moves.py"):  # the mapping itself, and its test's fixture
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new = rewrite(text)
        if path.suffix == ".py":
            new = move_names(new)
        if new != text:
            path.write_text(new)
            changed.append(rel)
    return changed


def main() -> int:
    move_files()
    for rel in rewrite_references():
        print("rewrote", rel)
    print("now: .venv/bin/ruff check --fix bench loadtest tests && .venv/bin/ruff format bench (import order, long lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
