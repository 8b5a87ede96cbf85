"""The bounded chaos run's shared deployment: one per module, because starting workers dominates its cost.

Starting a worker process costs 5-10 s of CPU on a small machine (importing torch and ChatTTS), and
the kill scenario alone restarts twelve, so the bounded scenarios share one deployment and one clean
reference; each still settles and judges its own jobs. ``CHAOS_SEED`` replays a run's random choices.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.harness import ROOT
from tests.chaos.ledger import TABLE_HEADER
from tests.chaos.scenarios import BOUNDED, Chaos
from tests.conftest import SUMMARY


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: chaos scenarios with real processes and injected faults (tests/chaos)")


def say(text: str) -> None:
    """Figures go to the captured output as they come (shown with ``-s`` or on failure) and to the terminal
    summary (:data:`tests.conftest.SUMMARY`: a green run's figures are seen too)."""
    print(text, flush=True)
    if text.startswith("[chaos]"):
        SUMMARY.setdefault("chaos figures", []).append(text)


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint_dir: Path) -> Iterator[Chaos]:
    seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1, 1_000_000))
    run = Chaos(tmp_path_factory.mktemp("chaos"), tiny_checkpoint_dir, BOUNDED, seed, say)
    try:
        yield run
    finally:
        artifacts = ROOT / "test-artifacts"
        artifacts.mkdir(exist_ok=True)
        rows = "\n".join(figures.row() for figures in run.results)
        (artifacts / "chaos-bounded.md").write_text(f"Bounded chaos run, seed {seed}\n\n{TABLE_HEADER}\n{rows}\n")
        run.close()
