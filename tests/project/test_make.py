"""The Makefile says what each target does, and the benchmark suite names each benchmark once."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.__main__ import SUITE, commands
from tests.conftest import FAST_LAST, SLOWEST_FILES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_help_lists_every_target_with_its_line() -> None:
    """Every target of the Makefile and its included *.mk files has a ``##`` line, which ``make help`` prints."""
    result = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    listed = dict(line.split(None, 1) for line in result.stdout.splitlines() if line.strip())
    sources = [ROOT / "Makefile", *(ROOT / name for name in re.findall(r"^include (\S+)", (ROOT / "Makefile").read_text(), re.M))]
    targets = {
        match for source in sources for match in re.findall(r"^([a-z][a-z0-9-]*):(?!=)", source.read_text(encoding="utf-8"), re.M)
    }
    assert targets - listed.keys() == set(), "targets make help does not list"
    assert [name for name, doc in listed.items() if doc == "(no ## line)"] == [], "targets without a ## line"


def test_the_benchmark_suite_names_each_run_once_and_every_module_exists() -> None:
    runs = [(bench.module, bench.args, tuple(sorted(bench.env.items()))) for bench in SUITE]
    assert len(runs) == len(set(runs)), "a benchmark listed twice"
    assert [bench.module for bench in SUITE if importlib.util.find_spec(bench.module) is None] == []
    quick = commands(quick=True)
    assert quick and all("--quick" in command for command, _ in quick)
    assert len(commands(quick=False)) == len(SUITE)


def test_the_test_processes_take_the_slowest_files_first() -> None:
    """``make test`` and ``make unit`` hand whole files out in collection order, which ``tests/conftest.py`` sorts slowest
    first: every file it names exists (a renamed one would lose its place unseen), and both pytest lines keep pytest-xdist
    from re-sorting the files by how many tests each holds (``--no-loadscope-reorder``; its default puts files of one or
    two long tests, such as a whole deployment's run, last)."""
    assert [name for name in SLOWEST_FILES if not (ROOT / name).is_file()] == []
    assert all((ROOT / folder).is_dir() for folder in FAST_LAST)
    lines = [line for line in (ROOT / "Makefile").read_text().splitlines() if "--dist loadfile" in line]
    assert len(lines) == 2 and all("--no-loadscope-reorder" in line for line in lines), lines
