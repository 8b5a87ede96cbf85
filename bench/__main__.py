"""The benchmark suite, each benchmark named once: ``python -m bench`` (``make bench``) runs every one in turn,
``python -m bench --quick`` (``make bench-quick``) the short smoke run of those that have one; ``--list`` prints what
would run. A benchmark that fails stops the suite (its own output says why).

    python -m bench [--quick] [--list]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass, field

from bench import ROOT


@dataclass(frozen=True)
class Benchmark:
    module: str
    args: tuple[str, ...] = ()
    quick: tuple[str, ...] | None = None
    """Its arguments in the smoke run; None: not in it (no short form)."""
    env: dict[str, str] = field(default_factory=dict)


SUITE = [
    Benchmark("bench.service.throughput", quick=("--quick",)),
    Benchmark("bench.engine.decoder", quick=("--quick", "--checkpoints", "tiny")),
    Benchmark("bench.engine.decoder_steps"),
    Benchmark("bench.engine.cpu_matmul"),
    Benchmark("bench.engine.cpu_gemm"),
    Benchmark("bench.engine.streaming_audio"),
    Benchmark("bench.engine.audio_together", quick=("--quick",)),
    Benchmark("bench.engine.quiet_decode", quick=("--quick",)),
    Benchmark("bench.engine.compaction"),
    Benchmark("bench.engine.normalise_cost"),
    Benchmark("bench.scale.shards", quick=("--quick",)),
    Benchmark("bench.scale.sentinel", quick=("--quick",)),
    Benchmark("bench.listening.encoders"),
    Benchmark("bench.listening.output_formats"),
    Benchmark("bench.listening.stream_formats"),
    Benchmark("bench.listening.listeners"),
    Benchmark("bench.listening.realtime", quick=("--quick",)),
    Benchmark("bench.listening.profile_session", quick=("--quick",)),
    Benchmark("bench.listening.contended"),
    # the control for the one above: CPython's own garbage collector
    Benchmark(
        "bench.listening.listeners", args=("--results", "bench/results/listeners-cpython-gc.md"), env={"GC_FULL_COLLECTION_S": "0"}
    ),
]
"""In the order they run (about 20 minutes, and 15 more for the decoder; results in bench/results/, BENCHMARKS.md)."""


def commands(*, quick: bool) -> list[tuple[list[str], dict[str, str]]]:
    """Each benchmark's command line and the environment it adds, in order."""
    chosen = []
    for bench in SUITE:
        if quick and bench.quick is None:
            continue
        args = [*bench.args, *(bench.quick or ())] if quick else list(bench.args)
        chosen.append(([sys.executable, "-m", bench.module, *args], bench.env))
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the short smoke run (a few minutes)")
    parser.add_argument("--list", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args()
    for command, env in commands(quick=args.quick):
        shown = " ".join([*(f"{key}={value}" for key, value in env.items()), "python", *command[1:]])
        print(shown, flush=True)
        if not args.list and subprocess.run(command, cwd=ROOT, env={**os.environ, **env}, check=False).returncode:
            print(f"failed: {shown}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
