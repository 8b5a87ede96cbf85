"""The real ttsq worker process on a benchmark stand-in engine: ``python -m bench.fixed_worker``.

It is ``worker.main`` — the same process entry, claim loop, leases, heartbeat, probe server and
shutdown as ``python worker.py`` — with only the engine factory swapped, so a benchmark measures
the service and not a re-implementation of it. ``BENCH_ENGINE`` picks the engine:

* ``fixed`` (default): :class:`bench.fixed_cost_engine.FixedCostEngine`, a model of GPU time (not
  ChatTTS); ``FIXED_COST_CALL_MS`` / ``FIXED_COST_ITEM_MS`` set its cost (300 / 20).
* ``noop``: :class:`bench.noop_engine.NoopEngine`, the no-op engine (benchmark stand-in).
* ``chattts``: the production factory (``worker.chattts_engine``), for symmetry with the baseline app.

Everything else is configured like any worker, through the environment (``settings.py``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import worker
from bench.fixed_cost_engine import DEFAULT_CALL_MS, DEFAULT_ITEM_MS, FixedCostEngine
from bench.noop_engine import NoopEngine
from settings import Settings

if TYPE_CHECKING:
    from ttsq.inference.base import Engine

ENGINES = ("fixed", "noop", "chattts")


def make_bench_engine(settings: Settings) -> Engine:
    """The engine ``BENCH_ENGINE`` names (read here, not in settings: it is a benchmark knob)."""
    kind = os.environ.get("BENCH_ENGINE", "fixed")
    if kind == "fixed":
        return FixedCostEngine(
            call_ms=float(os.environ.get("FIXED_COST_CALL_MS", DEFAULT_CALL_MS)),
            item_ms=float(os.environ.get("FIXED_COST_ITEM_MS", DEFAULT_ITEM_MS)),
        )
    if kind == "noop":
        return NoopEngine()
    if kind == "chattts":
        return worker.chattts_engine(settings)
    raise SystemExit(f"BENCH_ENGINE={kind!r} is not one of {', '.join(ENGINES)}")


if __name__ == "__main__":
    worker.main(make_engine=make_bench_engine)
