"""scripts/bench_moves.py, the rewrite the lead reruns after merging a branch that still names bench's flat modules.

Why: a wrong rewrite breaks a merged benchmark silently (a command line that no longer runs, an attribute of a
variable named ``bench`` turned into a module path), and the branches it is for are merged after this test runs.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def bench_moves() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_moves", ROOT / "scripts" / "bench_moves.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OLD = """\
from bench import retype
from bench.realtime import run
from bench.service.throughput import SUBMIT_BODY, service_env
    from bench.listening.stream_storm import api_process
cmd = [sys.executable, "-m", "bench.ttfa", "--quick"]
times = bench.decoder(8, packed)
app = "bench.lpush_app:app"
See `bench/gpu.py` and `bench/decoder_steps.py`;
[link](../BENCHMARKS.md#capacity-python--m-benchrealtime-part-of-make-bench)
"""
NEW = """\
from bench.service import retype
from bench.listening.realtime import run
from bench.service.throughput import SUBMIT_BODY
from bench.stacks import service_env
    from bench.stacks import api_process
cmd = [sys.executable, "-m", "bench.listening.ttfa", "--quick"]
times = bench.decoder(8, packed)
app = "bench.service.lpush_app:app"
See `bench/gpu/run.py` and `bench/engine/decoder_steps.py`;
[link](../BENCHMARKS.md#capacity-python--m-benchlisteningrealtime-part-of-make-bench)
"""


def test_references_to_flat_modules_are_rewritten_to_their_group_and_a_variable_named_bench_is_left_alone() -> None:
    moves = bench_moves()
    assert moves.move_names(moves.rewrite(OLD)) == NEW


def test_a_second_run_changes_nothing() -> None:
    moves = bench_moves()
    assert moves.move_names(moves.rewrite(NEW)) == NEW


def test_every_destination_exists_or_is_a_module_another_branch_brings() -> None:
    """Each move lands in a group that is a package here, so ``python -m bench.<group>.<name>`` can run once it is."""
    moves = bench_moves()
    for new in moves.MOVES.values():
        group = new.split(".")[0]
        assert (ROOT / "bench" / group / "__init__.py").is_file(), new
