"""The benchmarks, grouped by what they measure (bench/README.md). Shared pieces live at this level."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository root: the working directory of every process a benchmark starts. Here, not in each module: a
benchmark sits one or two folders below it (``bench/<group>/<name>.py``), and the standard library alone is enough
(``python -m bench.gpu`` runs on bare GPU machines before anything is installed)."""
RESULTS = ROOT / "bench" / "results"
"""Recorded raw outputs, cited by BENCHMARKS.md; they stay here whatever group their benchmark is in."""
