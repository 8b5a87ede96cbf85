"""What compacting the slots saves: rows moved down into the holes ended rows leave, or left where they are.

``python -m bench.engine.compaction [--slots 8] [--checkpoint full]`` — two decoders over the same checkpoint (one
thread, oneDNN-packed float32 weights as served on a CPU) take the same rows on the same schedule: ``2 x slots`` rows,
row ``i`` arriving at step ``i x SPACING x 8 / slots`` (waiting for a slot if none is free), each running exactly its
own number of tokens (``LENGTHS`` in turn, 40-250) and leaving: the slots about two-thirds full. One decoder compacts
before every step, as the scheduler does; the other never does, as before compaction was built. Their steps are
interleaved one by one, so the machine's noise falls on both alike.

Per decoder: the slots its steps computed (the rows advanced plus the free slots inside each step's span), the CPU
seconds of its steps (compaction's copies included), and what a CUDA graph step would compute — the batch bucket
(:meth:`SlotDecoder.buckets`: 1, 2, 4, then every 8) that holds each step's span, and the power-of-two bucket the
decoder captured before. Written to ``bench/results/compaction[-<checkpoint>-<slots>].md``
(no suffix for the defaults). ``--checkpoint tiny --slots 64`` shows the buckets at a GPU's batch sizes in a minute.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from dataclasses import dataclass, field

import torch

from bench.engine.decoder import RESULTS, SENTENCES, checkpoint, commit, engines
from bench.machine import machine
from ttsq.inference.base import BatcherStats
from ttsq.inference.chattts_rows import ChatTTSRows
from ttsq.inference.gpt.slot_decoder import DecoderShape, Prefilled, RowParams, SlotDecoder

LENGTHS = (120, 40, 250, 90, 180, 60, 220, 140, 70, 200, 110, 160, 50, 240, 100, 130)
"""Tokens per row, in arrival order (mean 135: with :data:`SPACING` the slots are about two-thirds full)."""
SPACING = 24
"""Steps between arrivals at 8 slots (a wider decoder gets its rows proportionally faster)."""


@dataclass
class Run:
    """One decoder and its rows' bookkeeping."""

    name: str
    decoder: SlotDecoder
    compacts: bool
    waiting: list[int] = field(default_factory=list)
    stats: BatcherStats = field(default_factory=BatcherStats)
    """Steps, rows advanced and slots computed, counted as a batcher counts them."""
    bucket_rows: int = 0
    power_rows: int = 0
    moves: int = 0
    cpu_s: float = 0.0

    def step(self, prefilled: dict[int, Prefilled], params: dict[int, RowParams]) -> None:
        dec = self.decoder
        while self.waiting and dec.free_slots:
            index = self.waiting.pop(0)
            dec.place(prefilled[index], params[index])
        if not dec.occupied:
            return
        started = time.thread_time()
        if self.compacts:
            self.moves += len(dec.compact())
        span, rows = dec.span(), dec.occupied
        dec.step()
        self.cpu_s += time.thread_time() - started
        self.stats.steps += 1
        self.stats.row_steps += rows
        self.stats.slot_steps += span
        self.bucket_rows += next(size for size in dec.buckets() if size >= span)
        self.power_rows += next(size for size in powers_of_two(dec.shape.slots) if size >= span)


def powers_of_two(slots: int) -> list[int]:
    """The batch buckets the decoder captured before (1, 2, 4, 8, 16, …, and the slot count): a step padded up to
    ``2n - 1`` rows where :meth:`SlotDecoder.buckets` pads at most 7 (15 past 256)."""
    return sorted({1 << p for p in range(slots.bit_length()) if 1 << p < slots} | {slots})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--checkpoint", choices=("tiny", "full"), default="full")
    parser.add_argument("--rows", type=int, default=None, help="how many rows arrive (default: twice the slots)")
    args = parser.parse_args()
    slots = args.slots
    count = args.rows if args.rows is not None else 2 * slots
    spacing = max(1, round(SPACING * 8 / slots))
    torch.set_num_threads(1)
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    ours, _ = engines(checkpoint(args.checkpoint, quick=True))
    chat = ours._loaded_chat()
    rows = ChatTTSRows(chat)
    lengths = [LENGTHS[index % len(LENGTHS)] for index in range(count)]
    shape = DecoderShape(slots=slots, max_prompt=96, max_new=max(lengths))

    def decoder() -> SlotDecoder:
        return SlotDecoder(
            chat.gpt.gpt,
            chat.embed,
            mode="code",
            eos=rows.code_eos,
            shape=shape,
            dtype=torch.float32,
            head_dtype=torch.float32,
            packed_weights=True,
        )

    runs = [Run("compacted before each step", decoder(), True), Run("never compacted (before)", decoder(), False)]
    prefilled: dict[int, Prefilled] = {}
    params: dict[int, RowParams] = {}
    for index, tokens in enumerate(lengths):
        prompt = rows.code_prompt(SENTENCES[index % len(SENTENCES)], 5, ours.speaker_from_seed(index)).embeddings
        prefilled[index] = runs[0].decoder.prefill(prompt)
        params[index] = RowParams(0.3, 0.7, 20, 1.05, tokens, tokens, index)
    clock = 0
    while clock < len(lengths) * spacing or any(run.decoder.occupied or run.waiting for run in runs):
        if clock % spacing == 0 and clock // spacing < len(lengths):
            for run in runs:
                run.waiting.append(clock // spacing)
        for run in runs:
            run.step(prefilled, params)
        clock += 1
        if clock % 200 == 0:
            print(f"step {clock}: " + ", ".join(f"{r.name}: {r.cpu_s:.1f} s" for r in runs), flush=True)
    first, second = runs
    lines = [
        "| decoder | steps | row-steps | slots computed | free slots computed | moves | CPU s in steps | "
        "ms per step | CUDA bucket rows | … with power-of-two buckets |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        wasted = 1 - run.stats.row_steps / run.stats.slot_steps
        lines.append(
            f"| {run.name} | {run.stats.steps} | {run.stats.row_steps} | {run.stats.slot_steps} | {wasted:.1%} | {run.moves} | "
            f"{run.cpu_s:.1f} | {run.cpu_s / run.stats.steps * 1e3:.1f} | {run.bucket_rows} | {run.power_rows} |"
        )
    lines += [
        "",
        f"Compacted ÷ never compacted: CPU in steps **{first.cpu_s / second.cpu_s:.2f}×**, slots computed "
        f"{first.stats.slot_steps / second.stats.slot_steps:.2f}×, CUDA bucket rows {first.bucket_rows / second.bucket_rows:.2f}× "
        f"(padding beyond the rows: {first.bucket_rows / first.stats.row_steps - 1:.0%} compacted, "
        f"{second.bucket_rows / second.stats.row_steps - 1:.0%} never compacted; with power-of-two buckets, "
        f"{first.power_rows / first.stats.row_steps - 1:.0%} and {second.power_rows / second.stats.row_steps - 1:.0%}).",
    ]
    info = machine()
    default = (slots, args.checkpoint, args.rows) == (8, "full", None)
    suffix_args = "" if default else f" --slots {slots} --checkpoint {args.checkpoint}"
    out = RESULTS / ("compaction.md" if default else f"compaction-{args.checkpoint}-{slots}.md")
    text = "\n".join(
        [
            f"# Compacting the slots: rows moved into the holes ended rows leave ({args.checkpoint} checkpoint, CPU)",
            "",
            f"`python -m bench.engine.compaction{suffix_args}` — {started}, commit {commit()}. Machine: {info['cpu']}, "
            f"{info['cores']} cores; one thread; {slots} slots; {len(lengths)} rows of {min(lengths)}-{max(lengths)} "
            f"tokens (mean {sum(lengths) / len(lengths):.0f}), one arriving every {spacing} steps; CPU time of the "
            "thread in each decoder's steps, the two decoders' steps interleaved.",
            "",
            *lines,
            "",
        ]
    )
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
