"""The decode step's float32 matrix products through every library path this CPU's torch offers: is there a faster one?

    python -m bench.engine.cpu_gemm [--rounds 12] [--name cpu-gemm]

The target: a full-size batch-8 step of at most half the plain float32 step, with the same tokens. The step is its
matrix products and little else (``bench.engine.cpu_matmul``: the oneDNN-packed products are ~80% of a batch-8 step),
so this measures the products alone, on the full-size checkpoint's own fused weights (each layer's q/k/v, output,
gate/up and down projections, and the four code heads, as ``ttsq.inference.gpt.layers`` multiplies them), at batch 1 and 8,
one thread, through:

- ``F.linear`` on plain weights (MKL's sgemm, which re-packs the weight at every call): the plain path;
- oneDNN on weights packed once (``_reorder_linear_weight``) for batch 1 and for batch 8 (ttsq's default packs for 8);
- MKL on weights packed once (``_mkl_reorder_linear_weight``/``_mkl_linear``, what inductor's frozen graphs call);
- the other operand orders (``W @ x.T``, ``x @ W.T`` stored transposed), which MKL serves with other kernels;
- ``torch.compile`` with inductor's ``max-autotune`` and frozen weights, choosing between its C++ GEMM template and
  ATen for each shape by timing them (the autotuner's choices are in the log it prints).

Every path is float32 in and out with float32 accumulation (no bf16/tf32 math mode): a path that only changes the
summation order keeps the plain path's tokens (as the packed default does, ``tests/integration/inference/gpt/test_decoder.py``). The
paths run interleaved, round by round, CPU time of the thread; the largest difference from the plain path's outputs is shown.
Writes ``bench/results/<name>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from bench.engine.cpu_matmul import full_size_engine, read_bandwidth
from bench.engine.decoder import RESULTS, commit
from bench.machine import machine
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.inference.gpt.layers import fused, linear

Products = Callable[[], list[torch.Tensor]]


def step_weights(engine: DecoderEngine) -> list[torch.Tensor]:
    """The (out, in) float32 matrices one decode step multiplies, in the order it does: per layer q/k/v (fused),
    output, gate/up (fused), down; then the four code heads in one matrix."""
    chat = engine._loaded_chat()
    weights: list[torch.Tensor] = []
    for block in chat.gpt.gpt.layers:
        layer = fused(block, torch.float32, pack=False, precision="fp32")
        for weight in (layer.qkv, layer.out, layer.gate_up, layer.down):
            assert isinstance(weight, torch.Tensor)
            weights.append(weight)
    weights.append(torch.cat([head.weight.detach().float() for head in chat.embed.head_code], 0).contiguous())
    return weights


class _Linears(torch.nn.Module):
    """The weights as ``Linear`` modules, for inductor to freeze: forward multiplies each by the input of its width."""

    def __init__(self, weights: list[torch.Tensor]) -> None:
        super().__init__()
        self.linears = torch.nn.ModuleList()
        for weight in weights:
            linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
            linear.weight = torch.nn.Parameter(weight, requires_grad=False)
            self.linears.append(linear)

    def forward(self, narrow: torch.Tensor, wide: torch.Tensor) -> list[torch.Tensor]:
        return [linear(narrow if linear.in_features == narrow.shape[1] else wide) for linear in self.linears]


def paths(weights: list[torch.Tensor], rows: int) -> tuple[dict[str, Products], dict[str, float]]:
    """Each path's products over ``weights`` for a batch of ``rows``, and the seconds each compile took."""
    import torch._inductor.config as inductor

    widths = sorted({int(weight.shape[1]) for weight in weights})
    inputs = {width: torch.randn(rows, width, generator=torch.Generator().manual_seed(width)) for width in widths}
    transposed_inputs = {width: x.t().contiguous() for width, x in inputs.items()}
    onednn = {hint: [torch.ops.mkldnn._reorder_linear_weight(w, hint) for w in weights] for hint in (1, 8)}
    mkl_packed = [torch.ops.mkl._mkl_reorder_linear_weight(w, rows) for w in weights]
    transposed = [w.t().contiguous() for w in weights]
    out: dict[str, Products] = {
        "F.linear, plain weights (MKL sgemm; the plain path)": lambda: [plain_linear(inputs[w.shape[1]], w) for w in weights],
        "oneDNN, packed for batch 8 (ttsq's default)": lambda: [
            linear(inputs[w.shape[1]], p) for w, p in zip(weights, onednn[8], strict=True)
        ],
        "oneDNN, packed for batch 1": lambda: [linear(inputs[w.shape[1]], p) for w, p in zip(weights, onednn[1], strict=True)],
        "MKL, packed once (_mkl_linear)": lambda: [
            torch.ops.mkl._mkl_linear(inputs[w.shape[1]], p, w, None, rows) for w, p in zip(weights, mkl_packed, strict=True)
        ],
        "W @ x.T (MKL, the other operand order)": lambda: [torch.mm(w, transposed_inputs[w.shape[1]]).t() for w in weights],
        "x @ W.T stored transposed (MKL)": lambda: [torch.mm(inputs[t.shape[0]], t) for t in transposed],
    }
    compile_s: dict[str, float] = {}
    module = _Linears(weights).eval()
    narrow, wide = inputs[min(widths)], inputs[max(widths)]
    name = "inductor max-autotune (C++ template or ATen, timed per shape)"
    torch._dynamo.reset()
    with inductor.patch(freezing=True, max_autotune=True, max_autotune_gemm_backends="CPP,ATEN"), torch.no_grad():
        compiled = torch.compile(module)
        started = time.perf_counter()
        compiled(narrow, wide)
        compile_s[name] = time.perf_counter() - started

    def run() -> list[torch.Tensor]:
        with torch.no_grad():
            return compiled(narrow, wide)  # type: ignore[no-any-return]

    out[name] = run
    return out, compile_s


def plain_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``F.linear``: MKL's sgemm on a CPU, the weight re-packed at every call."""
    return torch.nn.functional.linear(x, weight)


def rest_of_step(engine: DecoderEngine, rows: int, steps: int) -> tuple[float, float]:
    """Median CPU ms of a full-size step of ``rows`` mixed rows (the default, packed path), and of the same step with
    its products replaced by a stub that returns ones of the right shape: what the step costs beyond its products
    (attention over the cache, norms, rotation, cache writes, sampling, Python). The stub is this measurement's alone,
    labelled as such; the rows are ~30 tokens in when timing starts."""
    from unittest import mock

    import ttsq.inference.gpt.slot_decoder as decoder_module
    from bench.engine.cpu_matmul import Bench, params
    from ttsq.inference.gpt.slot_decoder import inference

    bench = Bench(engine, steps + 40)
    timed: list[float] = []
    rest: list[float] = []

    def stub(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x.new_ones(*x.shape[:-1], weight.shape[0])

    for packed, out in ((True, timed), (False, rest)):
        decoder = bench.decoder(rows, packed, "fp32")
        with inference():
            for index in range(rows):
                decoder.admit(bench.prompts[index], params(index, steps + 40))
            for _ in range(30):
                decoder.step()
            with mock.patch.object(decoder_module, "linear", stub) if not packed else contextlib.nullcontext():
                for _ in range(steps):
                    begun = time.thread_time()
                    decoder.step()
                    out.append((time.thread_time() - begun) * 1e3)
    return statistics.median(timed), statistics.median(rest)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--name", default="cpu-gemm")
    args = parser.parse_args()
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    engine = full_size_engine()
    weights = step_weights(engine)
    total = sum(w.numel() for w in weights)
    megabytes = total * 4 / 1e6
    buffer, vector = torch.ones(total), torch.ones(int(weights[0].shape[1]))
    info = machine()
    lines = [
        "# The decode step's float32 matrix products, every library path (full-size checkpoint, one thread)",
        "",
        f"`python -m bench.engine.cpu_gemm --rounds {args.rounds}` — {started}, commit {commit()}. "
        f"Machine: {info['cpu']}, {info['cores']} cores.",
        "",
        f"{len(weights)} products a step (20 layers x q/k/v, output, gate/up, down, and the code heads): {megabytes:.1f} MB of "
        "float32 weights. Median of the rounds, CPU time of the thread; paths interleaved round by round.",
        "",
    ]
    report: dict[str, Any] = {"date": started, "commit": commit(), "weights_mb": megabytes, "batches": {}}
    print("\n".join(lines), flush=True)
    for rows in (1, 8):
        section_start = len(lines)
        made, compile_s = paths(weights, rows)
        reference = made["F.linear, plain weights (MKL sgemm; the plain path)"]()
        times: dict[str, list[float]] = {name: [] for name in made}
        rates: list[float] = []
        for _ in range(args.rounds):
            rates.append(read_bandwidth(buffer, vector)["sum"])
            for name, run in made.items():
                begun = time.thread_time()
                run()
                times[name].append(time.thread_time() - begun)
        plain = statistics.median(times["F.linear, plain weights (MKL sgemm; the plain path)"])
        rate = statistics.median(rates)
        flops = 2 * rows * total
        lines += [
            f"## batch {rows}",
            "",
            f"This thread's read rate (a sum over {megabytes:.0f} MB, median): {rate / 1e9:.1f} GB/s, so reading the weights once "
            f"takes {megabytes / 1e3 / (rate / 1e9) * 1e3:.1f} ms.",
            "",
            "| path | ms for the step's products | ÷ plain | weights read at (GB/s) | GFLOP/s | largest difference from plain |",
            "|---|---|---|---|---|---|",
        ]
        batch: dict[str, Any] = {"read_gb_s": rate / 1e9, "compile_s": compile_s, "paths": {}}
        for name, run in made.items():
            seconds = statistics.median(times[name])
            outputs = run()
            difference = max(float((a.reshape(b.shape) - b).abs().max()) for a, b in zip(outputs, reference, strict=True))
            lines.append(
                f"| {name} | {seconds * 1e3:.1f} | {seconds / plain:.2f} | {megabytes / 1e3 / seconds:.1f} | "
                f"{flops / seconds / 1e9:.1f} | {difference:.1e} |"
            )
            batch["paths"][name] = {"ms": seconds * 1e3, "ratio": seconds / plain, "max_abs_difference": difference}
        step_ms, rest_ms = rest_of_step(engine, rows, 20)
        lines += [
            "",
            *(f"Compiling {name} took {s:.0f} s." for name, s in compile_s.items()),
            "",
            f"The whole step at batch {rows} (packed, the default): {step_ms:.1f} ms; the same step with its products "
            f"stubbed out (a labelled stub returning ones): {rest_ms:.1f} ms, so {rest_ms / step_ms:.0%} of the step is not "
            "its products.",
            "",
        ]
        batch["step_ms"], batch["step_without_products_ms"] = step_ms, rest_ms
        report["batches"][rows] = batch
        print("\n".join(lines[section_start:]), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    (RESULTS / f"{args.name}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS / (args.name + '.md')}")


if __name__ == "__main__":
    main()
