"""A fixed-cost engine: a MODEL OF GPU TIME, not ChatTTS. It returns silence.

Why it exists: this machine has no GPU, and on CPU ChatTTS is so slow that any serving overhead
disappears in it. On a GPU a batched ChatTTS call costs a large fixed part (kernel launches,
the autoregressive loop runs once per step whatever the batch size) plus a small part per item.
This engine models exactly that — it sleeps ``call_ms`` per call plus ``item_ms`` per item in
the batch (default 300 ms + 20 ms) — so the serving architecture (batching, queueing, several
workers) can be compared under a GPU-like cost. Sleeping releases the GIL, as a thread waiting
on a GPU does. Every benchmark row that uses it says "fixed-cost model of GPU time (not ChatTTS)".

It returns silence of a plausible length (about 0.2 s per CJK character and 0.06 s per other
visible character, at least 0.5 s), so results, encoding and downloads have realistic sizes.
"""

from __future__ import annotations

import time

from bench.noop_engine import SilentEngine
from ttsq.inference.base import SynthesisRequest

FIXED_COST_LABEL = "fixed-cost model of GPU time (not ChatTTS)"
DEFAULT_CALL_MS = 300.0
DEFAULT_ITEM_MS = 20.0


def _is_cjk(char: str) -> bool:
    return "\u3400" <= char <= "\u9fff" or "\uf900" <= char <= "\ufaff"


class FixedCostEngine(SilentEngine):
    """A model of GPU time (not ChatTTS): ``call_ms`` + ``item_ms`` × batch size per call, silence out."""

    label = FIXED_COST_LABEL

    def __init__(self, call_ms: float = DEFAULT_CALL_MS, item_ms: float = DEFAULT_ITEM_MS) -> None:
        super().__init__()
        self.call_s = call_ms / 1000
        self.item_s = item_ms / 1000

    def spend(self, batch_size: int) -> None:
        time.sleep(self.call_s + self.item_s * batch_size)

    def audio_seconds(self, req: SynthesisRequest) -> float:
        cjk = sum(1 for char in req.text if _is_cjk(char))
        other = sum(1 for char in req.text if not char.isspace() and not _is_cjk(char))
        return max(0.5, 0.2 * cjk + 0.06 * other)
