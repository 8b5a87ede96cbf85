"""``python -m tests.chaos`` (``make chaos``): every chaos scenario at full size, figures to bench/results/chaos.md.

    python -m tests.chaos                        # full run: 100 kills, longer outages, a bigger flood
    python -m tests.chaos --kills 300 --seed 7   # more kills; replay a run's random choices
    python -m tests.chaos --only S1,S4           # some scenarios
    python -m tests.chaos --bounded --no-write   # the sizes ``make test`` uses, results only printed

Prints one line of figures per scenario as it ends, then the markdown table, and writes the table
(with the date, the command and the seed) to ``--markdown``. Exits 1 if any scenario found a
violation of the invariant, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import random
import shlex
import shutil
import signal
import sys
import tempfile
import traceback
from pathlib import Path

from tests.chaos.harness import ROOT
from tests.chaos.ledger import TABLE_HEADER, Figures
from tests.chaos.scenarios import BOUNDED, FULL, SCENARIOS, Chaos, can_mount
from ttsq.inference.engines.checkpoint import build_tiny_checkpoint

METHOD = """\
Method: real processes (redis-server with its append-only file, `uvicorn app:app`, `python worker.py` with
MODEL=tiny, the random-weight checkpoint) started as `make up` starts them; faults are real signals, a real
redis-server killed and restarted on its port, `CLIENT PAUSE`, tmpfs mounts. Every request is deterministic
(its own seed, or a voice and a seed) and is also run by a clean reference deployment (own Redis, one worker,
no faults); every worker runs ttsq's decoder with BATCH_INVARIANT and MAX_BATCH=8, so a job's audio is the same
bits whatever shared its steps, and a done job must have bit-identical audio. *re-run*: jobs that needed more than one
attempt; *completed twice*: jobs finished by two workers (the queue kept the first result); *duplicated*: ids
read with two different results (must be 0). Timings are figures measured on this machine, never asserted.
"""


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, help="SIGKILLs in the kill scenario, even over the moments (full: 100, bounded: 12)")
    parser.add_argument("--seed", type=int, help="RNG seed (default: random, printed)")
    parser.add_argument("--only", help="comma-separated scenario keys: " + ",".join(SCENARIOS))
    parser.add_argument("--bounded", action="store_true", help="the sizes `make test` uses")
    parser.add_argument("--jobs", type=int, help="jobs per load-driven scenario")
    parser.add_argument("--outage-s", type=float, help="seconds Redis stays dead")
    parser.add_argument("--pause-ms", type=int, help="CLIENT PAUSE length (longer than LEASE_S=3 s)")
    parser.add_argument("--flood", type=int, help="submits in the flood")
    parser.add_argument("--markdown", type=Path, default=ROOT / "bench" / "results" / "chaos.md", help="where to write the table")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--workdir", type=Path, help="scratch directory (default: a new temporary one, removed unless it failed)")
    args = parser.parse_args(argv)
    unknown = set((args.only or "").split(",")) - set(SCENARIOS) - {""}
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    return args


def markdown(results: list[Figures], command: str, seed: int, sizes: str) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    violations = [f"- {figures.key}: {violation}" for figures in results for violation in figures.violations]
    return "\n".join(
        [
            "# Chaos suite results",
            "",
            f"`{command}` — {now} — {machine} — seed {seed}",
            "",
            f"Sizes: {sizes}",
            "",
            TABLE_HEADER,
            *(figures.row() for figures in results),
            "",
            "Violations:" if violations else "Violations: none.",
            *violations,
            "",
            METHOD,
        ]
    )


def _exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM (``timeout``, a CI cancel) ends the run like Ctrl-C: through ``finally``, so the processes it started
    (each in a session of its own, out of reach of a signal to this one's group) are stopped, not orphaned."""
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    sizes = BOUNDED if args.bounded else FULL
    overrides = {
        "kills": args.kills,
        "jobs": args.jobs,
        "outage_s": args.outage_s,
        "pause_ms": args.pause_ms,
        "flood": args.flood,
    }
    sizes = dataclasses.replace(sizes, **{key: value for key, value in overrides.items() if value is not None})
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1_000_000)
    chosen = [key for key in SCENARIOS if not args.only or key in args.only.split(",")]
    root = args.workdir or Path(tempfile.mkdtemp(prefix="ttsq-chaos-"))
    checkpoint = build_tiny_checkpoint(ROOT / "var" / "tiny-checkpoint")
    chaos = Chaos(root, checkpoint, sizes, seed)
    try:
        for key in chosen:
            if key == "S8" and not can_mount():
                print("[chaos] S8 skipped: mounting a tmpfs needs root", flush=True)
                continue
            try:
                SCENARIOS[key](chaos)
            except Exception as exc:  # noqa: BLE001 - one broken scenario is reported, the others still run
                traceback.print_exc()
                crashed = Figures(key, "crashed", violations=[f"the scenario itself failed: {type(exc).__name__}: {exc}"])
                chaos.results.append(crashed)
                print(crashed.line(), flush=True)
    finally:
        chaos.close()
    command = "python -m tests.chaos " + shlex.join(argv) if argv else "python -m tests.chaos"
    report = markdown(chaos.results, command.strip(), seed, str(dataclasses.asdict(sizes)))
    print("\n" + report)
    if not args.no_write:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(report)
        print(f"written to {args.markdown}")
    failed = any(figures.violations for figures in chaos.results)
    if failed:
        print(f"process logs kept in {root / 'chaos' / 'logs'}")
    elif args.workdir is None:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
