"""The decode step's matmuls on this CPU: MKL on plain weights against oneDNN on weights packed once, and the opt-in precisions.

    python -m bench.engine.cpu_matmul [--steps 104] [--name cpu-matmul]

Full-size random-weight checkpoint, one thread, CPU time of the thread. Two sections, each side by side in one process:

1. batch 8 — eight mixed rows (each its own voice, seed, temperature, top-p/top-k and penalty), ``--steps`` tokens
   each, decoded by one decoder per path over the same admitted rows; the paths' steps are interleaved (one step of
   each in turn), so the machine's load falls on all alike. Median ms per step; each path's codes against the plain
   float32 path's: rows with identical codes and the share of equal tokens. Row independence per path: row 0
   decoded alone (batch 1) against row 0 in the batch.
2. batch 1 — the default path's step against the weight-read floor: the bytes of the weights a step multiplies
   (the GPT's projections and the heads, float32) over this thread's measured memory bandwidth (the fastest of four
   read-only passes over a buffer of that size, CPU time, interleaved with the steps). The other paths beside it.

Writes ``bench/results/<name>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from bench.engine.decoder import RESULTS, SENTENCES, checkpoint, commit, cpu_settings
from bench.machine import machine
from ttsq.inference.chattts_rows import ChatTTSRows
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.inference.gpt.slot_decoder import DecoderShape, Finished, Precision, RowParams, SlotDecoder, inference

PATHS: dict[str, tuple[bool, Precision]] = {
    "fp32 plain (MKL)": (False, "fp32"),
    "fp32 packed (oneDNN, default)": (True, "fp32"),
    "bf16 (PRECISION=bf16)": (True, "bf16"),
    "int8 (PRECISION=int8)": (True, "int8"),
}
PLAIN, DEFAULT = "fp32 plain (MKL)", "fp32 packed (oneDNN, default)"


def params(index: int, tokens: int) -> RowParams:
    return RowParams(
        temperature=(0.3, 0.7, 0.5, 1.0)[index % 4],
        top_p=(0.7, 0.95, 0.5)[index % 3],
        top_k=(20, 40, 5)[index % 3],
        repetition_penalty=(1.05, 1.0, 1.2)[index % 3],
        min_new_token=tokens,
        max_new_token=tokens,
        seed=100 + index,
    )


class Bench:
    def __init__(self, engine: DecoderEngine, tokens: int) -> None:
        self.chat = engine._loaded_chat()
        self.rows = ChatTTSRows(self.chat)
        self.tokens = tokens
        self.prompts = [
            self.rows.code_prompt(SENTENCES[index % len(SENTENCES)], 5, engine.speaker_from_seed(index)).embeddings
            for index in range(8)
        ]

    def decoder(self, slots: int, packed: bool, precision: Precision) -> SlotDecoder:
        return SlotDecoder(
            self.chat.gpt.gpt,
            self.chat.embed,
            mode="code",
            eos=self.rows.code_eos,
            shape=DecoderShape(slots=slots, max_prompt=96, max_new=self.tokens),
            dtype=torch.float32,
            head_dtype=torch.float32,
            packed_weights=packed,
            precision=precision,
        )

    def interleaved(
        self, decoders: dict[str, SlotDecoder], rows: int
    ) -> tuple[dict[str, list[float]], dict[str, dict[int, Finished]]]:
        """Admit the first ``rows`` rows into every decoder, then step them in turn until all end: ms per step, rows."""
        ended: dict[str, dict[int, Finished]] = {name: {} for name in decoders}
        times: dict[str, list[float]] = {name: [] for name in decoders}
        with inference():
            for name, dec in decoders.items():
                for index in range(rows):
                    slot, done = dec.admit(self.prompts[index], params(index, self.tokens))
                    if done is not None:
                        ended[name][slot] = done
            while any(dec.occupied for dec in decoders.values()):
                for name, dec in decoders.items():
                    if dec.occupied:
                        started = time.thread_time()
                        finished = dec.step()
                        times[name].append((time.thread_time() - started) * 1e3)
                        ended[name].update({f.slot: f for f in finished})
        return times, ended


PROBES = ("sum", "max", "dot", "mv")


def read_bandwidth(buffer: torch.Tensor, vector: torch.Tensor) -> dict[str, float]:
    """Bytes per second this thread reads (CPU time, as the steps are timed) in four passes that each read ``buffer``
    once: a sum, a max, a dot product with itself, and MKL's matrix-vector product over it as a (n, 768) matrix."""
    matrix = buffer.view(-1, vector.shape[0])
    passes: dict[str, Callable[[], Any]] = {
        "sum": buffer.sum,
        "max": buffer.max,
        "dot": lambda: torch.dot(buffer, buffer),
        "mv": lambda: torch.mv(matrix, vector),
    }
    rates = {}
    for name, run in passes.items():
        started = time.thread_time()
        run()
        rates[name] = buffer.numel() * buffer.element_size() / (time.thread_time() - started)
    return rates


def weight_bytes(chat: Any) -> int:
    """float32 bytes of what a decode step multiplies: every projection of every layer, and the four code heads."""
    total = 0
    for module in chat.gpt.gpt.layers.modules():
        if isinstance(module, torch.nn.Linear):
            total += module.weight.numel() * 4
    heads = sum(head.weight.numel() for head in chat.embed.head_code)
    return int(total + heads * 4)


def matrix_products(chat: Any) -> Callable[[], Any]:
    """The step's matrix products and nothing else: each weight :func:`weight_bytes` counts, times one float32 vector
    (MKL's ``F.linear`` at batch 1), one after another. What a step costs beyond this is everything else it does."""
    weights = [module.weight for module in chat.gpt.gpt.layers.modules() if isinstance(module, torch.nn.Linear)]
    weights += [head.weight for head in chat.embed.head_code]
    inputs = {weight.shape[1]: torch.ones(1, weight.shape[1]) for weight in weights}

    def run() -> None:
        for weight in weights:
            torch.nn.functional.linear(inputs[weight.shape[1]], weight)

    return run


def full_size_engine() -> DecoderEngine:
    """ttsq's decoder engine over the full-size random-weight checkpoint, loaded, on this CPU: torch on one thread, no
    prefill or audio threads."""
    torch.set_num_threads(1)
    point = checkpoint("full", quick=True)
    engine = DecoderEngine(
        cpu_settings(point, min_new_token=1).engine_config(),
        cuda_graphs=False,
        batch_invariant=False,
        first_chunk_slots=1,
        overlap=False,
    )
    engine.load()
    return engine


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=104, help="tokens per row (>= 100 for the equality claim)")
    parser.add_argument("--batch1-steps", type=int, default=40)
    parser.add_argument("--name", default="cpu-matmul")
    args = parser.parse_args()
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    engine = full_size_engine()
    bench = Bench(engine, args.steps)
    lines: list[str] = []

    def say(line: str = "") -> None:
        lines.append(line)
        print(line, flush=True)

    # ---- 1. batch 8 ----
    decoders = {name: bench.decoder(8, packed, precision) for name, (packed, precision) in PATHS.items()}
    times, ended = bench.interleaved(decoders, 8)
    del decoders
    plain_ms = statistics.median(times[PLAIN])
    reference = ended[PLAIN]
    alone_rows = {}
    for name, (packed, precision) in PATHS.items():
        _, alone = bench.interleaved({name: bench.decoder(1, packed, precision)}, 1)
        alone_rows[name] = alone[name][0]
    batch8: dict[str, Any] = {}
    say(f"## batch 8: 8 mixed rows, {args.steps} tokens each, steps interleaved (median ms per step, CPU time of one thread)")
    say()
    say("| path | ms per step | ÷ plain fp32 | rows with the plain path's codes | tokens equal | row 0 alone = in the batch |")
    say("|---|---|---|---|---|---|")
    for name in PATHS:
        ms = statistics.median(times[name])
        same_rows = sum(torch.equal(ended[name][slot].tokens, reference[slot].tokens) for slot in reference)
        equal = sum(int((ended[name][slot].tokens == reference[slot].tokens).sum()) for slot in reference)
        total = sum(reference[slot].tokens.numel() for slot in reference)
        independent = torch.equal(alone_rows[name].tokens, ended[name][0].tokens)
        batch8[name] = {
            "ms_per_step": ms,
            "steps": len(times[name]),
            "ratio": ms / plain_ms,
            "rows_identical": same_rows,
            "token_agreement": equal / total,
            "row0_alone_equals_batched": independent,
        }
        agreement = f"{100 * equal / total:.1f}%"
        say(f"| {name} | {ms:.1f} | {ms / plain_ms:.2f} | {same_rows}/8 | {agreement} | {'yes' if independent else 'no'} |")

    # ---- 2. batch 1 against the weight-read floor ----
    size = weight_bytes(bench.chat)
    buffer, vector = torch.ones(size // 4 // 768 * 768), torch.ones(768)
    single = {name: bench.decoder(1, packed, precision) for name, (packed, precision) in PATHS.items()}
    with inference():
        for dec in single.values():
            dec.admit(bench.prompts[0], params(0, args.batch1_steps))
        step_ms: dict[str, list[float]] = {name: [] for name in single}
        products, products_ms = matrix_products(bench.chat), []
        bandwidths = []
        while any(dec.occupied for dec in single.values()):
            bandwidths.append(read_bandwidth(buffer, vector))
            begun = time.thread_time()
            products()
            products_ms.append((time.thread_time() - begun) * 1e3)
            for name, dec in single.items():
                if dec.occupied:
                    begun = time.thread_time()
                    dec.step()
                    step_ms[name].append((time.thread_time() - begun) * 1e3)
    by_probe = {name: statistics.median(rates[name] for rates in bandwidths) for name in PROBES}
    bandwidth = max(by_probe.values())
    floor_ms = size / bandwidth * 1e3
    say()
    say(f"## batch 1 against the weight-read floor ({args.batch1_steps} steps, interleaved with the bandwidth probes)")
    say()
    say(f"- weights a step multiplies (float32): {size / 1e6:.1f} MB")
    medians = ", ".join(f"{name} {rate / 1e9:.1f}" for name, rate in by_probe.items())
    say(f"- this thread's read bandwidth, median of {len(bandwidths)} probes of each pass (GB/s): {medians}")
    say(f"- the fastest, taken as the bandwidth: {bandwidth / 1e9:.2f} GB/s")
    say(f"- floor = bytes ÷ bandwidth: {floor_ms:.1f} ms")
    say()
    say("| path | ms per step | ÷ floor |")
    say("|---|---|---|")
    batch1 = {}
    for name, values in step_ms.items():
        ms = statistics.median(values)
        batch1[name] = {"ms_per_step": ms, "ratio_to_floor": ms / floor_ms}
        say(f"| {name} | {ms:.1f} | {ms / floor_ms:.2f} |")
    alone_ms = statistics.median(products_ms)
    say(
        f"| the step's matrix products alone (MKL `F.linear` at batch 1, nothing else; {size / alone_ms / 1e6:.1f} GB/s) "
        f"| {alone_ms:.1f} | {alone_ms / floor_ms:.2f} |"
    )
    batch1["matrix products alone"] = {"ms_per_step": alone_ms, "ratio_to_floor": alone_ms / floor_ms}

    info = machine()
    header = [
        "# The decode step's matmuls on this CPU (full-size checkpoint, one thread)",
        "",
        f"`python -m bench.engine.cpu_matmul --steps {args.steps}` — {started}, commit {commit()}. Machine: {info['cpu']}, "
        f"{info['cores']} cores, shared with other engineers' work (ratios within the run are what to read).",
        "",
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.md").write_text("\n".join([*header, *lines, ""]))
    payload = {
        "started": started,
        "commit": commit(),
        "machine": info,
        "steps": args.steps,
        "batch8": batch8,
        "batch1": batch1,
        "weight_bytes": size,
        "bandwidth_bytes_per_s": bandwidth,
        "bandwidth_by_probe": by_probe,
        "floor_ms": floor_ms,
    }
    (RESULTS / f"{args.name}.json").write_text(json.dumps(payload, indent=2, default=str))
    print(f"wrote {RESULTS / args.name}.md")


if __name__ == "__main__":
    main()
