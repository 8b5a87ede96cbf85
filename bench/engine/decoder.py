"""ttsq's decoder beside ChatTTS's own loop, side by side in one run, on the genuine ChatTTS code.

    python -m bench.engine.decoder [--quick] [--checkpoints tiny,full] [--sections step,mixed,short,agreement,equal]
                                   [--traffic mixed,same,short] [--name STEM]

Sections (each compares the two engines in the same process, interleaved where it matters):

1. step      — ms per decode step at batch 1 and 8 on the tiny checkpoint (a tiny step is almost all
               framework overhead, like a launch-bound GPU step): ChatTTS's ``infer_code`` loop vs
               ttsq's :class:`~ttsq.inference.gpt.slot_decoder.SlotDecoder`, prefill included, CPU time and wall time.
2. mixed     — closed-loop traffic through each engine's batcher (what the worker drives), 8 slots:
               every request a different voice and seed and 1-20 sentences (mixed), or one voice and
               one set of parameters (same-voice), or short requests (``--traffic short``: four sentences
               each, every request its own voice, seed and sampling, ``MAX_CHUNK_CHARS=20``, 48 tokens a
               chunk, engines built as the worker builds them; ttsq runs them as jobs nobody listens to, and
               again listened, in pieces, for reference). jobs/s and jobs per CPU-second of the process (all
               its threads: the worker's CPU), latency p50/p99, mean occupied slots, wasted row-steps. The
               reference (``ENGINE_BACKEND=chattts``) batches per compatible group.
3. short     — a one-sentence request arriving while long requests fill the other slots: its latency
               against its latency alone.
4. agreement — float32: how often a row's codes are the same in a batch as alone (float64: always).
5. equal     — float64: rows of a mixed batch against ChatTTS's own ``infer_code`` at batch 1.

Writes ``bench/results/decoder.{md,json}`` (``decoder-quick.*`` with ``--quick``; ``--name`` another stem). Short
requests alone: ``--sections mixed --traffic short --checkpoints full,tiny``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench.engine.decoder_traffic import (
    MAX_CHUNK_CHARS,
    SENTENCES,
    SHORT_CHUNK_CHARS,
    SHORT_TOKENS,
    closed_loop,
    grouped_waste,
    requests_of,
    traffic,
)
from bench.machine import machine
from bench.stacks import ROOT, utc_now
from settings import Settings
from ttsq.inference.base import Batcher, ChunkReady, Engine, SynthesisRequest
from ttsq.inference.chattts_rows import ChatTTSRows
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.inference.engines.checkpoint import build_random_checkpoint, build_tiny_checkpoint
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.inference.engines.factory import build_engine
from ttsq.inference.gpt.slot_decoder import DecoderShape, RowParams, SlotDecoder, inference

__all__ = ["RESULTS", "SENTENCES", "checkpoint", "commit", "cpu_settings", "engines"]

RESULTS = ROOT / "bench" / "results"


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    name: str
    path: Path
    tokens: int
    """``MAX_NEW_TOKEN`` per chunk (random weights rarely end a chunk early: most run to it)."""
    requests: int
    """Requests per closed-loop run."""
    short_requests: int
    """Requests per closed-loop run of short requests (traffic ``short``)."""


def checkpoint(name: str, quick: bool) -> Checkpoint:
    if name == "tiny":
        path = build_tiny_checkpoint(ROOT / "var" / "tiny-checkpoint")
        return Checkpoint("tiny", path, tokens=48, requests=40 if quick else 160, short_requests=16 if quick else 64)
    path = build_random_checkpoint(ROOT / "var" / "full-checkpoint", size="full")
    return Checkpoint("full", path, tokens=16 if quick else 24, requests=12 if quick else 40, short_requests=8 if quick else 16)


def cpu_settings(
    point: Checkpoint, *, min_new_token: int, max_chunk_chars: int = MAX_CHUNK_CHARS, tokens: int | None = None
) -> Settings:
    """The decoder benchmarks' worker settings for ``point``: this CPU, one thread, a sentence a chunk (``max_chunk_chars``),
    ``tokens`` at most a chunk (the checkpoint's), no normalising."""
    return Settings(
        _env_file=None,
        model=str(point.path),
        device="cpu",
        cpu_threads=1,
        max_chunk_chars=max_chunk_chars,
        max_new_token=point.tokens if tokens is None else tokens,
        min_new_token=min_new_token,
        normalize_text=False,
    )


def engines(point: Checkpoint) -> tuple[DecoderEngine, ChatTTSEngine]:
    settings = cpu_settings(point, min_new_token=1)
    config = settings.engine_config()
    ours = DecoderEngine(
        config,
        cuda_graphs=False,
        batch_invariant=settings.batch_invariant,
        first_chunk_slots=settings.first_chunk_slots,
        overlap=settings.overlap_prefill_and_audio,
        head_start=None if settings.first_chunk_head_start == "auto" else settings.first_chunk_head_start,
    )
    reference = ChatTTSEngine(config)
    for engine in (ours, reference):
        engine.load()
        engine.warm_up()
    return ours, reference


# ---- 1. step cost ---------------------------------------------------------------------------


def step_cost(engine: DecoderEngine, batches: tuple[int, ...], tokens: int, rounds: int) -> list[dict[str, Any]]:
    """ms per decode step, ChatTTS's loop vs ttsq's, rounds interleaved; the best round of each (least disturbed)."""
    chat = engine._loaded_chat()
    rows = ChatTTSRows(chat)
    speaker = engine.speaker_from_seed(1)
    text = SENTENCES[0]
    out = []
    for batch in batches:
        decoder = SlotDecoder(
            chat.gpt.gpt,
            chat.embed,
            mode="code",
            eos=rows.code_eos,
            shape=DecoderShape(slots=batch, max_prompt=96, max_new=tokens),
            dtype=torch.float32,
            head_dtype=torch.float32,
        )
        params = chat.InferCodeParams(
            prompt="[speed_5]", spk_emb=speaker, manual_seed=1, max_new_token=tokens, min_new_token=tokens, show_tqdm=False
        )
        row = RowParams(0.3, 0.7, 20, 1.05, tokens, tokens, 1)
        upstream: list[tuple[float, float]] = []
        ours: list[tuple[float, float]] = []
        for _ in range(rounds):
            cpu, wall = time.thread_time(), time.perf_counter()
            next(chat._infer_code([text] * batch, False, chat.device, True, params))
            upstream.append(((time.thread_time() - cpu) / tokens * 1e3, (time.perf_counter() - wall) / tokens * 1e3))
            cpu, wall = time.thread_time(), time.perf_counter()
            with inference():  # held across the loop as the scheduler holds it across a step (upstream: no_grad)
                for _ in range(batch):
                    decoder.admit(rows.code_prompt(text, 5, speaker).embeddings, row)
                while decoder.occupied:
                    decoder.step()
            ours.append(((time.thread_time() - cpu) / tokens * 1e3, (time.perf_counter() - wall) / tokens * 1e3))
        best_up, best_ours = min(upstream), min(ours)
        out.append(
            {
                "batch": batch,
                "tokens": tokens,
                "chattts_ms_per_step_cpu": round(best_up[0], 3),
                "ttsq_ms_per_step_cpu": round(best_ours[0], 3),
                "chattts_ms_per_step_wall": round(best_up[1], 3),
                "ttsq_ms_per_step_wall": round(best_ours[1], 3),
                "ratio_cpu": round(best_ours[0] / best_up[0], 3),
                "ratio_wall": round(best_ours[1] / best_up[1], 3),
            }
        )
        print(f"  step batch {batch}: {out[-1]}", flush=True)
    return out


# ---- 2./3. traffic through a batcher --------------------------------------------------------


def mixed_section(
    point: Checkpoint, kinds: list[str], base: tuple[DecoderEngine, ChatTTSEngine] | None, slots: int
) -> list[dict[str, Any]]:
    """Each kind of traffic through ttsq's batcher and ChatTTS's loop, in that order, in this process (``short``: with
    engines of its own, :func:`short_requests`)."""
    out = []
    for kind in kinds:
        if kind == "short":
            out += short_requests(point, slots)
            continue
        assert base is not None
        ours, reference = base
        flow = traffic(kind, ours)
        for name, engine in (("ttsq", ours), ("chattts", reference)):
            batcher = engine.batcher(slots, oom_recover_s=60)
            result = closed_loop(batcher, requests_of(flow), clients=slots, requests=point.requests)
            if name == "chattts":
                waste = grouped_waste(reference, requests_of(flow), min(point.requests, 16), slots)
                result["wasted_row_steps"] = waste["wasted_row_steps"]
                result["mean_occupied"] = None  # a grouped call's rows are not visible step by step
            result |= {"checkpoint": point.name, "traffic": kind, "engine": name, "slots": slots}
            out.append(result)
            print(f"  {point.name} {kind} {name}: {result}", flush=True)
    return out


def short_engines(point: Checkpoint) -> tuple[Engine, Engine]:
    """ttsq's engine as the worker builds it (:func:`build_engine` from the settings, its audio pieces included) and
    ChatTTS's, both with ``MAX_CHUNK_CHARS`` = :data:`SHORT_CHUNK_CHARS` and ``MIN_NEW_TOKEN = MAX_NEW_TOKEN`` =
    :data:`SHORT_TOKENS`; loaded and warmed up."""
    settings = cpu_settings(point, min_new_token=SHORT_TOKENS, max_chunk_chars=SHORT_CHUNK_CHARS, tokens=SHORT_TOKENS)
    ours = build_engine(settings.engine_config(), dataclasses.replace(settings.backend_config(), engine_backend="ttsq"))
    reference = ChatTTSEngine(settings.engine_config())
    for engine in (ours, reference):
        engine.load()
        engine.warm_up()
    return ours, reference


def short_requests(point: Checkpoint, slots: int) -> list[dict[str, Any]]:
    """Short requests (:func:`~bench.engine.decoder_traffic.traffic` ``short``) through ttsq's batcher as jobs nobody
    listens to (``pieces=False``, how the worker runs a submit-then-poll job), ChatTTS's loop, and ttsq's again as
    listened jobs (``pieces=True``, each chunk's audio in pieces as it is generated) for reference: the same requests."""
    ours, reference = short_engines(point)
    flow = traffic("short", ours)
    out = []
    for name, engine, pieces in (("ttsq", ours, False), ("chattts", reference, False), ("ttsq, pieces", ours, True)):
        batcher = engine.batcher(slots, oom_recover_s=60)
        result = closed_loop(batcher, _with_pieces(requests_of(flow), pieces), slots, point.short_requests)
        if name == "chattts":  # every row runs its SHORT_TOKENS: a grouped call wastes no row-step
            result["mean_occupied"] = None  # a grouped call's rows are not visible step by step
        result |= {"checkpoint": point.name, "traffic": "short", "engine": name, "slots": slots, "pieces": pieces}
        out.append(result)
        print(f"  {point.name} short {name}: {result}", flush=True)
    return out


def _with_pieces(make: Callable[[int], SynthesisRequest], pieces: bool) -> Callable[[int], SynthesisRequest]:
    return lambda n: dataclasses.replace(make(n), pieces=pieces)


def mixed_ratios(point: str, rows: list[dict[str, Any]]) -> dict[str, float]:
    """The section's ratios for the traffic it ran: ttsq over ChatTTS's loop per kind, mixed-voice over same-voice."""
    by = {(row["traffic"], row["engine"]): row for row in rows}
    ratios: dict[str, float] = {}

    def ratio(a: tuple[str, str], b: tuple[str, str], unit: str) -> float | None:
        return round(by[a][unit] / by[b][unit], 2) if a in by and b in by else None

    for unit, label in (("jobs_per_s", "jobs/s"), ("jobs_per_cpu_s", "jobs per CPU-second")):
        named = {
            f"{point}: mixed-voice / same-voice {label}, ttsq": ratio(("mixed", "ttsq"), ("same", "ttsq"), unit),
            f"{point}: mixed-voice {label}, ttsq / ChatTTS's loop (today's grouping)": ratio(
                ("mixed", "ttsq"), ("mixed", "chattts"), unit
            ),
            f"{point}: same-voice {label}, ttsq / ChatTTS's loop": ratio(("same", "ttsq"), ("same", "chattts"), unit),
            f"{point}: short requests {label}, ttsq (nobody listens) / ChatTTS's loop": ratio(
                ("short", "ttsq"), ("short", "chattts"), unit
            ),
            f"{point}: short requests {label}, ttsq listened (pieces) / ChatTTS's loop": ratio(
                ("short", "ttsq, pieces"), ("short", "chattts"), unit
            ),
        }
        ratios |= {name: value for name, value in named.items() if value is not None}
    return ratios


def short_behind_long(point: Checkpoint, engine: ChatTTSEngine | DecoderEngine, slots: int, stagger_steps: int) -> dict[str, Any]:
    """A one-sentence request, alone; then the same request arriving while long requests (12 sentences
    each) fill the slots. ``stagger_steps``: the long requests arrive that many steps apart, so their rows
    end at different times (0: all at once, so their rows end together — the worst case for a newcomer)."""
    speaker = engine.speaker_from_seed(3)
    short = SynthesisRequest(text=SENTENCES[2], speaker=speaker, seed=3)
    batcher = engine.batcher(slots, oom_recover_s=60)
    alone = min(_time_one(batcher, short) for _ in range(3))
    long_text = " ".join(SENTENCES[n % len(SENTENCES)] for n in range(12))
    for n in range(slots - 1):
        batcher.add(f"long{n}", SynthesisRequest(text=long_text, speaker=engine.speaker_from_seed(100 + n), seed=n))
        for _ in range(stagger_steps):
            batcher.step()
    for _ in range(3):  # the long rows are decoding
        batcher.step()
    behind = _time_one(batcher, short)
    ratio = round(behind / alone, 2)
    return {"alone_s": round(alone, 4), "behind_long_s": round(behind, 4), "ratio": ratio, "stagger_steps": stagger_steps}


def _time_one(batcher: Batcher, request: SynthesisRequest) -> float:
    """Seconds from ``request``'s arrival to its last chunk: wall time (on a machine shared with other work, the
    figures to compare are the ratios within one run)."""
    key = f"timed-{time.perf_counter_ns()}"
    started = time.perf_counter()
    batcher.add(key, request)
    while True:
        for event in batcher.step():
            if isinstance(event, ChunkReady) and event.key == key and event.chunk.index == event.chunk.total - 1:
                return time.perf_counter() - started


# ---- 4./5. equality and agreement -----------------------------------------------------------


def agreement(engine: DecoderEngine, rows_count: int, dtype: torch.dtype) -> dict[str, Any]:
    """Rows run alone and then in random batches (random slot, random joining step): how many keep their codes."""
    chat = engine._loaded_chat()
    rows = ChatTTSRows(chat)
    rng = random.Random(7)
    same = 0
    for n in range(rows_count):
        speaker = engine.speaker_from_seed(rng.randrange(1000))
        params = RowParams(rng.choice([0.3, 0.7]), rng.choice([0.7, 0.9]), rng.choice([5, 20]), 1.05, 1, 32, rng.randrange(1 << 30))
        prompt = rows.code_prompt(rng.choice(SENTENCES), 5, speaker).embeddings

        def decoder(slots: int) -> SlotDecoder:
            return SlotDecoder(
                chat.gpt.gpt, chat.embed, mode="code", eos=rows.code_eos,
                shape=DecoderShape(slots=slots, max_prompt=96, max_new=32), dtype=dtype, head_dtype=dtype,
            )  # fmt: skip

        alone_dec = decoder(1)
        _, done = alone_dec.admit(prompt, params)
        while done is None:
            done = next(iter(alone_dec.step()), None)
        crowd = decoder(8)
        for _ in range(rng.randrange(8)):
            other = RowParams(0.5, 0.8, 20, 1.05, 1, 32, rng.randrange(1 << 30))
            crowd.admit(rows.code_prompt(rng.choice(SENTENCES), 5, engine.speaker_from_seed(rng.randrange(1000))).embeddings, other)
        for _ in range(rng.randrange(6)):
            crowd.step()
        slot, mine = crowd.admit(prompt, params)
        while mine is None:
            mine = next((f for f in crowd.step() if f.slot == slot), None)
        same += int(torch.equal(mine.tokens, done.tokens))
        if n % 10 == 9:
            print(f"  agreement {dtype}: {same}/{n + 1}", flush=True)
    return {"dtype": str(dtype).replace("torch.", ""), "rows": rows_count, "same_codes": same, "rate": round(same / rows_count, 4)}


def equal_to_chattts(engine: DecoderEngine, rows_count: int, tokens: int) -> dict[str, Any]:
    """float64: a mixed batch's rows against ChatTTS's own ``infer_code`` for each alone (real sampling)."""
    chat = engine._loaded_chat()
    chat.gpt.gpt.double()
    chat.embed.double()
    original_code, original_text = chat.gpt.head_code, chat.gpt.head_text
    chat.gpt.head_code = [lambda h, head=head: head(h.double()) for head in original_code]
    try:
        rows = ChatTTSRows(chat)
        rng = random.Random(11)
        decoder = SlotDecoder(
            chat.gpt.gpt, chat.embed, mode="code", eos=rows.code_eos,
            shape=DecoderShape(slots=rows_count, max_prompt=96, max_new=tokens), dtype=torch.float64, head_dtype=torch.float64,
        )  # fmt: skip
        cases = []
        for _ in range(rows_count):
            seed, voice, text = rng.randrange(1 << 30), rng.randrange(1000), rng.choice(SENTENCES)
            temperature, top_p, top_k = rng.choice([0.2, 0.3, 0.7]), rng.choice([0.5, 0.7, 0.95]), rng.choice([1, 5, 20])
            params = RowParams(temperature, top_p, top_k, 1.05, 1, tokens, seed)
            speaker = engine.speaker_from_seed(voice)
            slot, _ = decoder.admit(rows.code_prompt(text, 5, speaker).embeddings, params)
            cases.append((slot, text, speaker, params))
        ended = {}
        while decoder.occupied:
            ended.update({f.slot: f for f in decoder.step()})
        equal = 0
        for slot, text, speaker, p in cases:
            reference = chat.InferCodeParams(
                prompt="[speed_5]", spk_emb=speaker, temperature=p.temperature, top_P=p.top_p, top_K=p.top_k,
                repetition_penalty=p.repetition_penalty, manual_seed=p.seed, max_new_token=tokens, min_new_token=1,
            )  # fmt: skip
            reference.show_tqdm = False
            codes = next(chat._infer_code([text], False, chat.device, True, reference)).ids[0]
            equal += int(torch.equal(codes, ended[slot].tokens))
        return {"rows": rows_count, "tokens": tokens, "equal": equal}
    finally:
        chat.gpt.head_code, chat.gpt.head_text = original_code, original_text
        chat.gpt.gpt.float()
        chat.embed.float()


# ---- report ---------------------------------------------------------------------------------


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def write(results: dict[str, Any], quick: bool, name: str | None = None) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / (name or ("decoder-quick" if quick else "decoder"))
    stem.with_suffix(".json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    lines = [
        "# ttsq's decoder vs ChatTTS's own loop",
        "",
        f"`{results['command']}` — {results['started']} to {results['finished']}, commit {results['commit']}.",
        f"Machine: {results['machine']['cpu']}, {results['machine']['cores']} cores, {results['machine']['memory_gib']} GiB; "
        "one inference thread (`CPU_THREADS=1`); genuine ChatTTS code on random-weight checkpoints.",
        "",
    ]
    if results.get("step"):
        lines += ["## ms per decode step, tiny checkpoint (prefill included; best of the interleaved rounds)", ""]
        lines += [
            "| batch | ChatTTS cpu ms | ttsq cpu ms | ratio (cpu) | ChatTTS wall ms | ttsq wall ms | ratio (wall) |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in results["step"]:
            lines.append(
                f"| {row['batch']} | {row['chattts_ms_per_step_cpu']} | {row['ttsq_ms_per_step_cpu']} | {row['ratio_cpu']} | "
                f"{row['chattts_ms_per_step_wall']} | {row['ttsq_ms_per_step_wall']} | {row['ratio_wall']} |"
            )
        lines.append("")
    if results.get("mixed"):
        lines += ["## Closed-loop traffic, 8 slots, 8 clients", ""]
        if any(row["traffic"] == "short" for row in results["mixed"]):
            lines += [
                f"Short requests: four sentences each, every request its own voice, seed and sampling; "
                f"`MAX_CHUNK_CHARS={SHORT_CHUNK_CHARS}`, `MIN_NEW_TOKEN=MAX_NEW_TOKEN={SHORT_TOKENS}`; both engines built "
                "as the worker builds them. `ttsq`: jobs nobody listens to (`pieces=False`, each chunk decoded whole); "
                "`ttsq, pieces`: the same requests listened to (audio in pieces as it is generated). CPU is the "
                "process's, every thread (cores = CPU-s / wall-s).",
                "",
            ]
        lines += [
            "| checkpoint | traffic | engine | requests | chunks | jobs/s | jobs per CPU-s | cores | p50 s | p99 s "
            "| mean occupied slots | wasted row-steps |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in results["mixed"]:
            lines.append(
                f"| {row['checkpoint']} | {row['traffic']} | {row['engine']} | {row['requests']} | {row['rows']} | "
                f"{row['jobs_per_s']} | {row['jobs_per_cpu_s']} | {row.get('cores')} | {row['latency_p50_s']} | "
                f"{row['latency_p99_s']} | {row['mean_occupied']} | {row['wasted_row_steps']} |"
            )
        lines += ["", "Ratios:", ""]
        for name, value in results.get("ratios", {}).items():
            lines.append(f"- {name}: **{value}**")
        lines.append("")
    if results.get("short"):
        lines += [
            "## A one-sentence request behind long ones",
            "",
            "Seven 12-sentence requests fill the slots (their rows of 84 wait); then a one-sentence request arrives. "
            "Long requests arriving together (stagger 0): their rows end together, the newcomer waits for a whole row; "
            "arriving a few steps apart: rows end at different times, as in steady traffic.",
            "",
        ]
        for row in results["short"]:
            lines.append(
                f"- {row['checkpoint']} {row['engine']}, long requests {row['stagger_steps']} steps apart: alone "
                f"{row['alone_s']} s, behind long requests {row['behind_long_s']} s (×{row['ratio']})"
            )
        lines.append("")
    if results.get("agreement"):
        lines += ["## Row independence: same codes alone and in a random batch", ""]
        for row in results["agreement"]:
            lines.append(f"- {row['checkpoint']} {row['dtype']}: {row['same_codes']}/{row['rows']} rows ({row['rate']:.1%})")
        lines.append("")
    if results.get("equal"):
        lines += ["## Equal to ChatTTS's own infer_code (float64, mixed batch, real sampling)", ""]
        for row in results["equal"]:
            lines.append(f"- {row['checkpoint']}: {row['equal']}/{row['rows']} rows equal ({row['tokens']} tokens each)")
        lines.append("")
    stem.with_suffix(".md").write_text("\n".join(lines))
    return stem.with_suffix(".md")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--checkpoints", default="tiny,full")
    parser.add_argument("--sections", default="step,mixed,short,agreement,equal")
    parser.add_argument("--traffic", default="mixed,same,short", help="the mixed section's kinds of traffic")
    parser.add_argument("--name", help="results file stem in bench/results/ (default decoder, or decoder-quick)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sections = set(args.sections.split(","))
    kinds = args.traffic.split(",") if "mixed" in sections else []
    results: dict[str, Any] = {
        "command": "python -m bench.engine.decoder " + " ".join(sys.argv[1:]),
        "started": utc_now(),
        "commit": commit(),
        "machine": machine(),
    }
    ratios: dict[str, Any] = {}
    for name in args.checkpoints.split(","):
        point = checkpoint(name, args.quick)
        print(f"== {point.name} checkpoint ({point.path})", flush=True)
        base = engines(point) if sections - {"mixed"} or set(kinds) - {"short"} else None
        if "step" in sections and point.name == "tiny" and base is not None:
            results["step"] = step_cost(base[0], (1, 8), 100 if args.quick else 200, 3 if args.quick else 7)
        if kinds:
            rows = mixed_section(point, kinds, base, slots=8)
            results.setdefault("mixed", []).extend(rows)
            ratios |= mixed_ratios(point.name, rows)
        if "short" in sections and base is not None:
            for engine_name, engine in zip(("ttsq", "chattts"), base, strict=True):
                # ChatTTS's batcher steps a whole call at a time: staggering its long requests would run them
                # to the end before the newcomer arrives, so it is measured with them arriving together only.
                for stagger in (0, point.tokens // 8) if engine_name == "ttsq" else (0,):
                    row = short_behind_long(point, engine, 8, stagger) | {"checkpoint": point.name, "engine": engine_name}
                    results.setdefault("short", []).append(row)
                    print(f"  short {row}", flush=True)
        if "agreement" in sections and point.name == "tiny" and base is not None:
            for dtype in (torch.float32,):
                row = agreement(base[0], 20 if args.quick else 100, dtype) | {"checkpoint": point.name}
                results.setdefault("agreement", []).append(row)
        if "equal" in sections and base is not None:
            row = equal_to_chattts(base[0], 4, 12 if point.name == "full" else 24) | {"checkpoint": point.name}
            results.setdefault("equal", []).append(row)
            print(f"  equal {row}", flush=True)
        del base
    results["ratios"] = ratios
    results["finished"] = utc_now()
    print(f"wrote {write(results, args.quick, args.name)}", flush=True)


if __name__ == "__main__":
    main()
