"""The GPU benchmark's engine phases: the engine alone, batch size by batch size.

    python -m bench.gpu.engine --model DIR --device cuda --tokens 256 --batches 1,8,32,64,128,256 --reps 2 \\
        --out engine.json [--budget-s 100] [--engine chattts|ttsq] [--cuda-graphs]

``--engine chattts`` (the ``engine`` phase): ``ChatTTSEngine.synthesize_batch``, ChatTTS's own
decode loop. ``--engine ttsq`` (the ``decoder`` phase, with ``--cuda-graphs``): ttsq's decoder as
the worker drives it — one :meth:`DecoderEngine.batcher` of as many slots as the largest batch
(on CUDA with graphs, every bucket's step is captured then, and the capture is timed), and per
batch size that many requests added to it and stepped until every one has ended. Its rows also
carry the batcher's own counts (steps, rows per step, slots computed per step) and the time of
the decode steps alone, apart from the rows' prefill and audio.

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
import contextlib
import dataclasses
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.engine.raw_batch import TEXTS
from settings import Settings

if TYPE_CHECKING:
    from ttsq.inference.base import SynthesisRequest
    from ttsq.inference.engines.decoder_engine import DecoderEngine

VOICE = "zh_female"
"""The end-to-end phase's requests name this built-in voice, so both phases speak with one speaker."""
ENGINES = ("chattts", "ttsq")
OOM_RECOVER_S = 600.0
"""ttsq's batcher halves its slots after running out of memory for this long: the rest of the phase, so a
batch size too large for the device retreats once (and is reported) instead of running out again at every step."""


def log(message: str) -> None:
    print(f"[bench.gpu.engine {time.strftime('%H:%M:%S')}] {message}", flush=True)


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


@contextlib.contextmanager
def _scraping(on: bool) -> Iterator[list[int]]:
    """While the block runs (a CUDA graph capture), another thread calls ``torch.cuda.mem_get_info`` over and over, as a
    metrics scrape does: the capture must not fail for it (it once did, in torch's default capture mode). Yields
    ``[calls made]``, final on exit."""
    calls = [0]
    if not on:
        yield calls
        return
    import torch

    done = threading.Event()

    def scrape() -> None:
        while not done.is_set():
            torch.cuda.mem_get_info()
            calls[0] += 1
            done.wait(0.001)

    thread = threading.Thread(target=scrape, name="bench-scrape", daemon=True)
    thread.start()
    try:
        yield calls
    finally:
        done.set()
        thread.join()


class DecoderDriver:
    """ttsq's decoder driven as the worker drives it: one batcher of ``slots`` rows for the whole phase;
    per measurement, requests are added and the batcher stepped until every one has all its chunks.

    Instrumentation only, as the ``_decode_to_wavs`` timer: the code decoder's ``capture``, ``step`` and
    ``prefill_many`` are wrapped with synchronised timers (a step ends by reading which rows ended, a host
    synchronisation of its own, so its time is the device's), and the batcher's own counts give the rows
    per step."""

    def __init__(self, engine: DecoderEngine, slots: int, sync: Callable[[], None]) -> None:
        from ttsq.inference.gpt.slot_decoder import SlotDecoder
        from ttsq.inference.sched.scheduler import Scheduler

        self.sync = sync
        self.captures: list[dict[str, Any]] = []
        original = SlotDecoder.capture

        def timed_capture(decoder: SlotDecoder) -> None:
            sync()
            began = time.perf_counter()
            with _scraping(decoder.cuda_graphs) as scrapes:
                original(decoder)
            sync()
            if decoder.cuda_graphs:
                self.captures.append(
                    {
                        "mode": decoder.mode,
                        "buckets": decoder.buckets(),
                        "windows": decoder.windows(),
                        "seconds": round(time.perf_counter() - began, 2),
                        "mem_get_info_calls_beside": scrapes[0],
                    }
                )

        SlotDecoder.capture = timed_capture  # type: ignore[method-assign,assignment]
        try:
            began = time.perf_counter()
            batcher = engine.batcher(slots, oom_recover_s=OOM_RECOVER_S)
            sync()
            self.build_s = time.perf_counter() - began
        finally:
            SlotDecoder.capture = original  # type: ignore[method-assign]
        if not isinstance(batcher, Scheduler):
            raise TypeError(f"DecoderEngine.batcher returned a {type(batcher).__name__}, not ttsq's Scheduler")
        self.batcher = batcher
        self.step_s: list[float] = []
        self.prefill_s: list[float] = []
        self.prefill_rows: list[int] = []
        code = batcher.code
        code.step = self._timed(code.step, self.step_s)  # type: ignore[method-assign]
        # prefill_many: the rows admitted together go through it in one pass (and a row alone through prefill, which calls it)
        code.prefill_many = self._timed(code.prefill_many, self.prefill_s, self.prefill_rows)  # type: ignore[method-assign]
        self.last: dict[str, Any] = {}

    def _timed(self, call: Callable[..., Any], seconds: list[float], rows: list[int] | None = None) -> Callable[..., Any]:
        def timed(*args: Any) -> Any:
            if rows is not None:
                rows.append(len(args[0]))
            self.sync()
            began = time.perf_counter()
            out = call(*args)
            self.sync()
            seconds.append(time.perf_counter() - began)
            return out

        return timed

    def info(self) -> dict[str, Any]:
        code = self.batcher.code
        shape = code.shape
        cache_bytes = sum(t.numel() * t.element_size() for t in code.kv_cache)
        return {
            "slots": self.batcher.slots,
            "cuda_graphs": code.cuda_graphs,
            "graph_buckets": code.buckets() if code.cuda_graphs else None,
            "graph_windows": code.windows() if code.cuda_graphs else None,
            "capture_s": round(sum(c["seconds"] for c in self.captures), 2) if code.cuda_graphs else None,
            "captures": self.captures,
            "build_s": round(self.build_s, 2),
            "max_prompt": shape.max_prompt,
            "max_new": shape.max_new,
            "attended_positions": shape.max_len + 1,
            "kv_cache_mib": round(cache_bytes / 2**20, 1),
        }

    def run(self, keys: Sequence[str], requests: Sequence[SynthesisRequest], max_steps: int) -> list[int]:
        """Add every request, step until each has all its chunks; their sample counts. A request's failure,
        or more than ``max_steps`` steps, raises (whatever is left of the requests is dropped first)."""
        from ttsq.inference.base import ChunkReady

        batcher = self.batcher
        before = dataclasses.asdict(batcher.stats)
        self.step_s.clear()
        self.prefill_s.clear()
        self.prefill_rows.clear()
        owed = dict.fromkeys(keys, -1)  # chunks still to come per request; -1 until its first chunk says how many
        samples: dict[str, int] = dict.fromkeys(keys, 0)
        try:
            for key, request in zip(keys, requests, strict=True):
                for event in batcher.add(key, request):
                    raise RuntimeError(f"request {key} was refused: {event}")
            steps = 0
            while owed:
                if steps >= max_steps or not batcher.busy:
                    raise RuntimeError(f"{len(owed)} request(s) unfinished after {steps} steps (busy: {batcher.busy})")
                steps += 1
                for event in batcher.step():
                    if not isinstance(event, ChunkReady):
                        raise RuntimeError(f"request {event.key} failed: {event}")
                    samples[event.key] += int(event.chunk.samples.size)
                    left = (event.chunk.total if owed[event.key] < 0 else owed[event.key]) - 1
                    owed[event.key] = left
                    if left == 0:
                        del owed[event.key]
        finally:
            for key in keys:
                batcher.cancel(key)
        after = dataclasses.asdict(batcher.stats)
        delta = {name: after[name] - before[name] for name in ("steps", "row_steps", "slot_steps", "out_of_memory", "suspects")}
        done = max(1, delta["steps"])
        self.last = delta | {
            "rows_per_step": round(delta["row_steps"] / done, 3),
            "computed_per_step": round(delta["slot_steps"] / done, 3),
            "decode_steps_s": round(sum(self.step_s), 4),
            "decode_step_ms": round(1000 * statistics.fmean(self.step_s), 3) if self.step_s else None,
            "decode_step_ms_median": round(1000 * statistics.median(self.step_s), 3) if self.step_s else None,
            "prefills": len(self.prefill_s),
            "prefill_s": round(sum(self.prefill_s), 4),
            "prefilled_rows": sum(self.prefill_rows),
            "rows_per_prefill": round(sum(self.prefill_rows) / len(self.prefill_rows), 2) if self.prefill_rows else None,
        }
        return [samples[key] for key in keys]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Engine-only throughput per batch size (the GPU benchmark's engine phases).")
    parser.add_argument("--model", required=True, help="checkpoint directory")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tokens", type=int, default=256, help="audio tokens per item (forced: min = max)")
    parser.add_argument("--batches", default="1,8,32,64,128,256")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--budget-s", type=float, default=1e9, help="skip the remaining batch sizes when they would not fit")
    parser.add_argument(
        "--engine", choices=ENGINES, default="chattts", help="chattts: ChatTTS's own loop (default); ttsq: ttsq's decoder"
    )
    parser.add_argument(
        "--cuda-graphs", action="store_true", help="with --engine ttsq on CUDA: capture each batch bucket's step as a CUDA graph"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    started = time.monotonic()
    cuda = args.device.startswith("cuda")
    ttsq = args.engine == "ttsq"
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
            "engine": args.engine,
            "cuda_graphs_requested": args.cuda_graphs,
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
    from ttsq.inference.engines.chattts import ChatTTSEngine
    from ttsq.inference.engines.decoder_engine import DecoderEngine

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

    def allocated_mib() -> float | None:
        return round(torch.cuda.memory_allocated() / 2**20, 1) if cuda else None

    engine = (
        DecoderEngine(
            settings.engine_config(), cuda_graphs=args.cuda_graphs, batch_invariant=False, first_chunk_slots=0, overlap=False
        )
        if ttsq
        else ChatTTSEngine(settings.engine_config())
    )
    t0 = time.monotonic()
    info = engine.load()
    rec.data["load_s"] = round(time.monotonic() - t0, 2)
    rec.data["model"] = info.name
    rec.data["weights_alloc_mib"] = allocated_mib()

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
    log(f"loaded {info.name} on {info.device} ({args.engine}): {timings}")
    rec.save()
    speaker = engine.speaker_from_seed(BUILTIN_VOICES[VOICE])
    sample_rate = 24_000

    driver: DecoderDriver | None = None
    if isinstance(engine, DecoderEngine):
        before = allocated_mib()
        try:
            driver = DecoderDriver(engine, max(batches), sync)
        except Exception as exc:  # noqa: BLE001 - a batcher that cannot be built (capture failed, out of memory) is the result
            rec.data["error"] = f"building the batcher of {max(batches)} slots failed: {type(exc).__name__}: {exc}"[:2000]
            rec.data["total_s"] = round(time.monotonic() - started, 1)
            rec.save()
            log(rec.data["error"])
            return 1
        now = allocated_mib()
        rec.data["batcher"] = driver.info() | {
            "alloc_mib": round(now - before, 1) if now is not None and before is not None else None
        }
        rec.save()
        log(f"batcher of {max(batches)} slots: {json.dumps(rec.data['batcher'])}")

    def call(reqs: list[SynthesisRequest], batch: int, rep: int) -> list[int]:
        if driver is None:
            return [chunk.samples.size for _, chunk in engine.synthesize_batch(reqs)]
        keys = [f"b{batch}-r{rep}-{i}" for i in range(batch)]
        return driver.run(keys, reqs, max_steps=4 * args.tokens + 64)

    def one(batch: int, rep: int) -> dict[str, Any]:
        reqs = [SynthesisRequest(text=TEXTS[i % len(TEXTS)], speaker=speaker, seed=1 + rep * 1000 + i) for i in range(batch)]
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        decode_log.clear()
        sync()
        mono0 = time.monotonic()
        began = time.perf_counter()
        samples = call(reqs, batch, rep)
        sync()
        wall = time.perf_counter() - began
        mono1 = time.monotonic()
        began = time.perf_counter()
        engine.release_memory()
        release_s = time.perf_counter() - began
        audio_s = sum(samples) / sample_rate
        decode_s = sum(seconds for seconds, _ in decode_log)
        gpt_s = wall - decode_s
        row = {
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
        if driver is not None:
            row |= driver.last
            row["other_gpt_s"] = round(gpt_s - row["decode_steps_s"] - row["prefill_s"], 4)
        return row

    # Every size once, smallest first, then the repetitions while time allows: a short budget still covers every
    # batch size (the largest is the 256-client reference), and a repetition only improves a size's best time.
    walls: dict[int, float] = {}
    per_item: dict[int, float] = {}
    """ttsq: seconds of a size's call that grow with each row (its prefill and its audio are its own)."""

    def predicted(batch: int) -> float:
        if batch in walls:
            return walls[batch]
        known = max((b for b in walls if b <= batch), default=None)
        if known is None:
            return 0.0
        if not cuda:
            return walls[known] * batch / known  # a CPU call grows about in proportion to the batch
        # A GPU decode step grows slowly with the batch (launch-bound); ttsq's per-row work in proportion to it.
        each = per_item.get(known, 0.0)
        return (walls[known] - each * known) * 1.3 + each * batch

    too_big: int | None = None  # the smallest size that failed (out of memory): it and larger ones are not tried again
    skipped: set[int] = set()
    for rep in range(args.reps):
        for batch in batches:
            if too_big is not None and batch >= too_big:
                continue
            spent = time.monotonic() - started
            guess = predicted(batch)
            if spent + guess > args.budget_s:
                skipped.add(batch)
                log(f"{spent:.0f}s spent of {args.budget_s:.0f}s: no repetition {rep} of batch {batch} (about {guess:.0f}s)")
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
            if driver is not None:
                per_item[batch] = (float(row["prefill_s"]) + float(row["decode_vocoder_s"])) / batch
            rec.data["runs"].append(row)
            rec.data["summary"] = summarise(rec.data["runs"])
            rec.save()
            steps = f", {row['steps']} steps of {row['decode_step_ms']} ms, {row['rows_per_step']} rows/step" if driver else ""
            log(
                f"batch {batch:3d} rep {rep}: {row['wall_s']:.3f}s, GPT {row['gpt_ms_per_step']:.2f} ms/step{steps}, "
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
