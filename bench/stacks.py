"""Where a benchmark runs from and what it starts: one place for the repository root and the results folder.

Every benchmark lives one or two folders below the root (``bench/<group>/<name>.py``); a root computed from each
file's own path would change with its depth, so they all take it from here.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository root: the working directory of every process a benchmark starts."""
RESULTS = ROOT / "bench" / "results"
"""Recorded raw outputs, cited by BENCHMARKS.md; they stay here whatever group their benchmark is in."""
