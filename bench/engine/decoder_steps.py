"""What a decode step of ttsq's decoder costs on this CPU as the batch grows (full-size checkpoint).

``python -m bench.engine.decoder_steps`` — CPU seconds of one thread per decode step at batches 1, 8, 16 and 32, with
the prefill of one row apart (one at a time, and the batch's rows in one pass, ``SlotDecoder.prefill_many``): the
figures behind BENCHMARKS.md's reading of why batching buys little on a CPU
(a step there is compute-bound, where a GPU's barely grows with the batch). Written to
``bench/results/decoder-steps.md``.
"""

from __future__ import annotations

import datetime as dt
import time

import torch

from bench.engine.decoder import RESULTS, SENTENCES, checkpoint, commit, engines
from bench.machine import machine
from ttsq.inference.chattts_rows import ChatTTSRows
from ttsq.inference.gpt.slot_decoder import DecoderShape, RowParams, SlotDecoder

BATCHES = (1, 8, 16, 32)
TOKENS = 24


def main() -> None:
    torch.set_num_threads(1)
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    point = checkpoint("full", quick=True)
    ours, _ = engines(point)
    chat = ours._loaded_chat()
    rows = ChatTTSRows(chat)
    prompt = rows.code_prompt(SENTENCES[0], 5, ours.speaker_from_seed(1)).embeddings
    params = RowParams(0.3, 0.7, 20, 1.05, TOKENS, TOKENS, 1)
    lines = [
        "| batch | ms per step | ms per row-step | prefill ms per row, one at a time | … all in one pass |",
        "|---|---|---|---|---|",
    ]
    for batch in BATCHES:
        shape = DecoderShape(slots=batch, max_prompt=96, max_new=TOKENS)
        decoder = SlotDecoder(
            chat.gpt.gpt, chat.embed, mode="code", eos=rows.code_eos, shape=shape, dtype=torch.float32, head_dtype=torch.float32
        )
        cpu = time.thread_time()
        prefilled = [decoder.prefill(prompt) for _ in range(batch)]
        prefill_ms = (time.thread_time() - cpu) / batch * 1e3
        cpu = time.thread_time()
        decoder.prefill_many([prompt] * batch)  # the rows admitted at one step, in one pass (CUDA's inline path)
        together_ms = (time.thread_time() - cpu) / batch * 1e3
        for row in prefilled:
            decoder.place(row, params)
        cpu, steps = time.thread_time(), 0
        while decoder.occupied:
            decoder.step()
            steps += 1
        step_ms = (time.thread_time() - cpu) / steps * 1e3
        lines.append(f"| {batch} | {step_ms:.1f} | {step_ms / batch:.1f} | {prefill_ms:.1f} | {together_ms:.1f} |")
        print(lines[-1], flush=True)
    info = machine()
    text = "\n".join(
        [
            "# ttsq's decode step on a CPU as the batch grows (full-size checkpoint)",
            "",
            f"`python -m bench.engine.decoder_steps` — {started}, commit {commit()}. "
            f"Machine: {info['cpu']}, {info['cores']} cores; "
            f"one thread; plain float32 weights (MKL, not the served oneDNN-packed ones: the figures of 2026-12-01 on); "
            f"a {int(prompt.shape[0])}-position prompt, {TOKENS} tokens per row, CPU time of the thread.",
            "",
            *lines,
            "",
        ]
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "decoder-steps.md").write_text(text)
    print(f"wrote {RESULTS / 'decoder-steps.md'}")


if __name__ == "__main__":
    main()
