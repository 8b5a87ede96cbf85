"""The shapes a decode step may run at, and on CUDA the step captured as a graph at each and replayed.

A step of :class:`~ttsq.inference.gpt.slot_decoder.SlotDecoder` reads and writes only preallocated buffers, with no
host synchronisation inside, so one step per batch bucket (the lowest ``n`` slots: :func:`buckets`) and attention
window (the cache's first ``w`` positions: :func:`windows`) can be captured as a CUDA graph and replayed
(:class:`StepGraphs`): a step reads the keys and values of at most twice its longest row's positions rather than the
whole preallocated cache, for one launch instead of a thousand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["StepGraphs", "buckets", "windows"]


def buckets(slots: int, *, batch_invariant: bool) -> list[int]:
    """The spans a step may cover (a graph is captured for each): 1, 2, 4, then every 8 below 256 and every 16 beyond
    (vLLM's capture sizes), and the slot count; only the count when the decoder is batch-invariant. Rows are compacted
    into the lowest slots (:meth:`~ttsq.inference.gpt.slot_decoder.SlotDecoder.compact`), so a step pads its rows by at
    most 7 (15 past 256), where powers of two pad several times more (``bench.engine.compaction``; BENCHMARKS.md)."""
    if batch_invariant:
        return [slots]
    sizes = {1, 2, 4, *range(8, 256, 8), *range(256, slots, 16)}
    return sorted({size for size in sizes if size < slots} | {slots})


def windows(positions: int, *, batch_invariant: bool) -> list[int]:
    """The attention windows a step may read of a cache of ``positions`` (a graph is captured for each, times each
    bucket): its first ``w`` positions, ``w`` a power of two from 32 below its length, and the whole cache; only the
    whole cache when the decoder is batch-invariant (a window that followed the longest batch-mate would change a row's
    reduction lengths, and so its bits)."""
    if batch_invariant:
        return [positions]
    return [*(1 << p for p in range(5, positions.bit_length()) if 1 << p < positions), positions]


class StepGraphs:
    """One decoder's captured steps, by (bucket, window)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._graphs: dict[tuple[int, int], Any] = {}

    def capture(self, shapes: Sequence[tuple[int, int]], decode: Callable[[int, int], None], state: list[torch.Tensor]) -> None:
        """Capture ``decode(bucket, window)`` at every shape. Called once, before serving. The warm-up steps run for
        real; what they write to the rows' ``state`` is put back (the cache is free slots' garbage)."""
        import torch

        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.inference_mode(), torch.cuda.stream(stream):
            snapshot = [tensor.clone() for tensor in state]
            for bucket, window in shapes:
                for _ in range(2):  # warm each shape's kernels (cuBLAS workspaces, autotuning) outside capture
                    decode(bucket, window)
            for tensor, saved in zip(state, snapshot, strict=True):
                tensor.copy_(saved)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        # One memory pool for every graph, as vLLM and TGI share theirs: a step's scratch memory is dead when its replay
        # ends (every output is written into a buffer allocated outside the graphs), and graphs replay one at a time on
        # one stream, so they may reuse each other's blocks. The largest shapes go first, and the pool is their size.
        # "thread_local": a CUDA call another thread makes meanwhile (a metrics scrape's torch.cuda.mem_get_info) is its
        # own business; in the default "global" mode it would make this capture fail.
        pool = torch.cuda.graph_pool_handle()
        for bucket, window in sorted(shapes, reverse=True):
            graph = torch.cuda.CUDAGraph()
            with torch.inference_mode(), torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                decode(bucket, window)
            self._graphs[bucket, window] = graph

    def replay(self, bucket: int, window: int) -> None:
        self._graphs[bucket, window].replay()
