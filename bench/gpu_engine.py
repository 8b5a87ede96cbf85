"""The GPU benchmark's engine phase: ``ChatTTSEngine.synthesize_batch`` alone, batch size by batch size.

    python -m bench.gpu_engine --model DIR --device cuda --tokens 256 --batches 1,8,32,64,128,256 --reps 2 \\
        --out engine.json [--budget-s 100]

Run by :mod:`bench.gpu` in its own process group (so a time limit kills it and everything it
started); it can be run by hand too. Every item is forced to exactly ``--tokens`` audio tokens
(``MIN_NEW_TOKEN = MAX_NEW_TOKEN``), so every batch of a size costs the same whatever the random
weights sample. The product path is timed: text preparation, GPT decode, DVAE decoder, Vocos and
the copy to numpy; ChatTTS's ``_decode_to_wavs`` is wrapped with synchronised timers so the GPT
decode is reported apart from mel decode + vocoder. ``release_memory()`` (what a worker runs after
an out-of-memory error, or when idle) is timed on its own and not counted in the batch's wall time.

The JSON file is rewritten after every measurement, so a run cut off at its time limit still
leaves what it measured. Each row carries the monotonic clock at its start and end, so the caller
can pair it with GPU utilisation it sampled meanwhile (``time.monotonic`` is system-wide on Linux).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.raw_batch import TEXTS
from settings import Settings

VOICE = "zh_female"
"""The end-to-end phase's requests name this built-in voice, so both phases speak with one speaker."""


def log(message: str) -> None:
    print(f"[bench.gpu_engine {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per batch size, the fastest repetition (the first one of a size also pays for allocator growth)."""
    rows = []
    for batch in sorted({int(run["batch"]) for run in runs if "wall_s" in run}):
        reps = [run for run in runs if run["batch"] == batch and "wall_s" in run]
        best = min(reps, key=lambda run: float(run["wall_s"]))
        walls = [float(run["wall_s"]) for run in reps]
        rows.append(best | {"wall_s_all": walls, "wall_s_median": statistics.median(walls)})
    return rows


class Recorder:
    """The phase's JSON file, rewritten atomically after every change."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data
        self.save()

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        tmp.replace(self.path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Engine-only throughput per batch size (the GPU benchmark's engine phase).")
    parser.add_argument("--model", required=True, help="checkpoint directory")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tokens", type=int, default=256, help="audio tokens per item (forced: min = max)")
    parser.add_argument("--batches", default="1,8,32,64,128,256")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--budget-s", type=float, default=1e9, help="skip the remaining batch sizes when they would not fit")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    started = time.monotonic()
    cuda = args.device.startswith("cuda")
    batches = sorted({int(b) for b in args.batches.split(",") if b.strip()})

    settings = Settings(
        _env_file=None,
        model=args.model,
        device=args.device,
        max_new_token=args.tokens,
        min_new_token=args.tokens,
        normalize_text=False,  # as the end-to-end phase (NORMALIZE_TEXT=false): the texts hold no digits
        compile=False,
    )
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", settings.cuda_alloc_conf)  # as worker.py does, before torch loads
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    rec = Recorder(
        args.out,
        {
            "device": args.device,
            "tokens_per_item": args.tokens,
            "batches_planned": batches,
            "reps": args.reps,
            "runs": [],
            "complete": False,
        },
    )

    import torch

    from ttsq.domain.voices import BUILTIN_VOICES
    from ttsq.inference.base import SynthesisRequest
    from ttsq.inference.chattts import ChatTTSEngine

    rec.data["versions"] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "transformers": _version("transformers"),
        "chattts": _version("chattts"),
    }
    rec.data["gpu"] = torch.cuda.get_device_name(0) if cuda else None
    rec.data["import_s"] = round(time.monotonic() - started, 2)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    engine = ChatTTSEngine(settings.engine_config())
    t0 = time.monotonic()
    info = engine.load()
    rec.data["load_s"] = round(time.monotonic() - t0, 2)
    rec.data["model"] = info.name
    rec.data["weights_alloc_mib"] = round(torch.cuda.memory_allocated() / 2**20, 1) if cuda else None

    # Instrumentation only: time ChatTTS's mel decode + vocoder inside the product call.
    chat: Any = engine._chat
    decode_log: list[tuple[float, int]] = []
    original_decode: Callable[..., Any] = chat._decode_to_wavs

    def timed_decode(*call_args: Any, **call_kwargs: Any) -> Any:
        sync()
        began = time.perf_counter()
        wavs = original_decode(*call_args, **call_kwargs)
        sync()
        decode_log.append((time.perf_counter() - began, len(call_args[0]) if call_args else 0))
        return wavs

    chat._decode_to_wavs = timed_decode
    t0 = time.monotonic()
    engine.warm_up()
    sync()
    rec.data["warm_up_s"] = round(time.monotonic() - t0, 2)
    timings = f"imports {rec.data['import_s']}s, load {rec.data['load_s']}s, warm-up {rec.data['warm_up_s']}s"
    log(f"loaded {info.name} on {info.device}: {timings}")
    rec.save()
    speaker = engine.speaker_from_seed(BUILTIN_VOICES[VOICE])
    sample_rate = 24_000

    def one(batch: int, rep: int) -> dict[str, Any]:
        reqs = [SynthesisRequest(text=TEXTS[i % len(TEXTS)], speaker=speaker, seed=1 + rep * 1000 + i) for i in range(batch)]
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        decode_log.clear()
        sync()
        mono0 = time.monotonic()
        began = time.perf_counter()
        chunks = list(engine.synthesize_batch(reqs))
        sync()
        wall = time.perf_counter() - began
        mono1 = time.monotonic()
        began = time.perf_counter()
        engine.release_memory()
        release_s = time.perf_counter() - began
        samples = [chunk.samples.size for _, chunk in chunks]
        audio_s = sum(samples) / sample_rate
        decode_s = sum(seconds for seconds, _ in decode_log)
        gpt_s = wall - decode_s
        return {
            "batch": batch,
            "rep": rep,
            "wall_s": round(wall, 4),
            "gpt_and_prep_s": round(gpt_s, 4),
            "gpt_ms_per_step": round(1000 * gpt_s / args.tokens, 3),
            "decode_vocoder_s": round(decode_s, 4),
            "chattts_calls": len(decode_log),
            "release_memory_s": round(release_s, 4),
            "audio_s_total": round(audio_s, 3),
            "audio_s_per_item": round(audio_s / batch, 3),
            "empty_items": sum(1 for size in samples if size == 0),
            "audio_s_per_wall_s": round(audio_s / wall, 3),
            "jobs_per_s": round(batch / wall, 3),
            "tokens_per_s": round(batch * args.tokens / wall, 1),
            "max_mem_alloc_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else None,
            "max_mem_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20, 1) if cuda else None,
            "t0": mono0,
            "t1": mono1,
        }

    # Every size once, smallest first, then the repetitions while time allows: a short budget still covers every
    # batch size (the largest is the 256-client reference), and a repetition only improves a size's best time.
    walls: dict[int, float] = {}
    too_big: int | None = None  # the smallest size that failed (out of memory): it and larger ones are not tried again
    skipped: set[int] = set()
    for rep in range(args.reps):
        for batch in batches:
            if too_big is not None and batch >= too_big:
                continue
            spent = time.monotonic() - started
            known = max((b for b in walls if b <= batch), default=None)
            # A GPU call grows slowly with the batch (launch-bound decode); a CPU call about in proportion to it.
            predicted = walls.get(batch) or (walls[known] * (1.3 if cuda else batch / known) if known else 0.0)
            if spent + predicted > args.budget_s:
                skipped.add(batch)
                log(f"{spent:.0f}s spent of {args.budget_s:.0f}s: no repetition {rep} of batch {batch} (about {predicted:.0f}s)")
                continue
            try:
                row = one(batch, rep)
            except Exception as exc:  # noqa: BLE001 - out of memory at a large batch: keep the table, stop growing
                rec.data["runs"].append({"batch": batch, "rep": rep, "error": f"{type(exc).__name__}: {exc}"[:500]})
                log(f"batch {batch} failed: {type(exc).__name__}: {exc}")
                too_big = batch
                engine.release_memory()
                rec.save()
                continue
            walls[batch] = min(walls.get(batch, float("inf")), float(row["wall_s"]))
            rec.data["runs"].append(row)
            rec.data["summary"] = summarise(rec.data["runs"])
            rec.save()
            log(
                f"batch {batch:3d} rep {rep}: {row['wall_s']:.3f}s, GPT {row['gpt_ms_per_step']:.2f} ms/step, "
                f"decode+vocoder {row['decode_vocoder_s']:.3f}s, {row['audio_s_per_wall_s']:.1f} audio-s/wall-s, "
                f"{row['jobs_per_s']:.2f} jobs/s, max alloc {row['max_mem_alloc_mib']} MiB, release {row['release_memory_s']:.3f}s"
            )
    never = sorted(b for b in batches if b not in walls)
    if never:
        rec.data["skipped_batches"] = never
    if skipped - set(never):
        rec.data["fewer_reps"] = sorted(skipped - set(never))
    rec.data["summary"] = summarise(rec.data["runs"])
    rec.data["complete"] = True
    rec.data["total_s"] = round(time.monotonic() - started, 1)
    rec.save()
    log(f"done in {rec.data['total_s']}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
