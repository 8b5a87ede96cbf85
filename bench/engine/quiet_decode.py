"""What does a chunk's audio cost when nobody listens to it live? Decoded whole at its end, against decoded in pieces.

A job with a live listener (``listened``: a realtime session, a streamed answer) has each chunk's audio decoded in
pieces while its codes are generated (:class:`~ttsq.inference.audio.lead.LeadThenExact`); a job nobody listens to has
each chunk decoded whole at its end. Both are run here through the serving path's own
:class:`~ttsq.inference.sched.audio_work.AudioWork` (inline, one row) as the scheduler drives it: the row placed in a
slot, its states handed on after every decode step (a hand-off every ``PIECE_TOKENS`` once ``PIECE_TOKENS +
PIECE_LOOKAHEAD`` exist), then its end. Its states are random GPT states of a chunk's length, its decoder and Vocos a
loaded checkpoint's (random weights: the tiny one and ChatTTS's real dimensions). Reported per chunk length: the
audio work's CPU for the quiet row and for the pieced one, each against one whole decode of the same states
(:meth:`~ttsq.inference.chattts_rows.ChatTTSRows.audio`, what the quiet row runs), as medians over interleaved rounds
after an untimed one (one torch thread, this thread's CPU time; every other round in the reverse order), and how far
each output is from the whole decode.

    python -m bench.engine.quiet_decode [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from bench import ROOT
from settings import Settings
from ttsq.inference.audio.handoff import HandOff
from ttsq.inference.audio.streaming import streaming_decoder
from ttsq.inference.base import BatchEvent, SynthesisRequest
from ttsq.inference.chattts_rows import ChatTTSRows
from ttsq.inference.engines.checkpoint import CheckpointSize, build_random_checkpoint, build_tiny_checkpoint
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.inference.sched.audio_work import AudioWork
from ttsq.inference.sched.requests import DecodeLimits, RequestState, RowState

RESULTS = ROOT / "bench" / "results" / "quiet_decode.md"
LENGTHS = [48, 100, 180, 250, 400]
"""Chunk lengths in tokens: a sentence chunk is 100-250 decode steps; 48 is the issue's short-request check."""


def loaded(size: CheckpointSize) -> DecoderEngine:
    """A decoder engine on ``size``'s random checkpoint, pieced as the serving defaults piece."""
    if size == "tiny":
        path = build_tiny_checkpoint(ROOT / "var" / "tiny-checkpoint")
    else:
        path = build_random_checkpoint(ROOT / "var" / "full-checkpoint", size="full")
    settings = Settings(_env_file=None, model=str(path), device="cpu", cpu_threads=1)
    engine = DecoderEngine(
        settings.engine_config(),
        cuda_graphs=False,
        batch_invariant=False,
        first_chunk_slots=1,
        overlap=False,
        pieces=(settings.piece_tokens, settings.piece_lookahead),
    )
    engine.load()
    return engine


def audio_work(rows: ChatTTSRows, limits: DecodeLimits, pieces: HandOff, states: Any, *, listened: bool) -> npt.NDArray[np.float32]:
    """One row's audio work as the scheduler drives it (see the module docstring); its chunk's samples."""
    import torch

    got: list[npt.NDArray[np.float32]] = []

    def ready(_row: RowState, samples: npt.NDArray[np.float32], _events: list[BatchEvent], _steps: int) -> None:
        got.append(samples)

    def failed(_key: str, exc: BaseException, _events: list[BatchEvent]) -> None:
        raise exc

    work = AudioWork(rows, limits, None, pieces, time.monotonic, alive=lambda _r: True, chunk_ready=ready, fail=failed)
    request = SynthesisRequest(text="", speaker=None, seed=0, pieces=listened)
    row = RowState(RequestState("bench", request, "en", 2, 0, False), 1, "code", "", slot=0)
    events: list[BatchEvent] = []
    slots = states.unsqueeze(0)  # the decoder's buffer of states: one slot
    work.placed(row)
    for _ in range(2, len(states)):  # every step but the last hands on; the last ends the row
        work.hand_on([row], slots, events)
    with torch.inference_mode():
        work.ended(row, states, events)
        work.flush(events)  # a pieced row's end is decoded with the rows due in its step (here none but it)
    (samples,) = got
    return samples


def cpu(run: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[float, Any]:
    """This thread's CPU seconds for ``run(*args)`` (other work on the machine does not count)."""
    started = time.thread_time()
    result = run(*args, **kwargs)
    return time.thread_time() - started, result


def measure(size: CheckpointSize, lengths: list[int], repeats: int) -> list[str]:
    import torch

    engine = loaded(size)
    chat = engine._loaded_chat()
    rows = ChatTTSRows(chat)
    limits = engine._limits()
    pieces = engine._piecing()
    assert pieces is not None
    hidden = streaming_decoder(chat).width
    rng = np.random.default_rng(7)
    chunks = {length: torch.from_numpy(rng.standard_normal((length, hidden)).astype(np.float32)) for length in lengths}
    for states in chunks.values():  # untimed: oneDNN's kernels for these shapes
        audio_work(rows, limits, pieces, states, listened=True)
        audio_work(rows, limits, pieces, states, listened=False)
    quiet: dict[int, list[float]] = {}
    pieced: dict[int, list[float]] = {}
    whole_ms: dict[int, list[float]] = {}
    quiet_diff: dict[int, float] = {}
    pieced_diff: dict[int, float] = {}
    for round_ in range(repeats):
        for length, states in chunks.items():
            # Every other round in the reverse order, so that none of the three always follows another's work.
            runs: dict[str, tuple[float, Any]] = {}
            order = ["whole", "quiet", "pieced"] if round_ % 2 == 0 else ["pieced", "quiet", "whole"]
            for name in order:
                if name == "whole":
                    runs[name] = cpu(rows.audio, states)
                else:
                    runs[name] = cpu(audio_work, rows, limits, pieces, states, listened=name == "pieced")
            (whole_s, whole), (quiet_s, quiet_out), (pieced_s, pieced_out) = runs["whole"], runs["quiet"], runs["pieced"]
            whole_ms.setdefault(length, []).append(whole_s * 1e3)
            quiet.setdefault(length, []).append(quiet_s / whole_s)
            pieced.setdefault(length, []).append(pieced_s / whole_s)
            same = quiet_out.size == whole.size and bool(np.array_equal(quiet_out, whole))
            quiet_diff[length] = 0.0 if same else np.inf
            size_ok = pieced_out.size == whole.size
            pieced_diff[length] = float(np.abs(pieced_out - whole).max()) if size_ok else np.inf
    cadence = pieces.cadence
    lines = [
        f"### {size}: first piece {cadence.piece_tokens} tokens after {cadence.first} steps, then every "
        f"{cadence.piece_tokens} (the defaults), field {streaming_decoder(chat).delay} tokens",
        "",
        "| chunk (tokens) | whole decode (ms CPU) | nobody listens: CPU / whole decode | listened, in pieces: CPU / whole "
        "decode | pieces ÷ nobody listens | nobody listens: equal to the whole decode | in pieces: max abs diff to it |",
        "|---|---|---|---|---|---|---|",
    ]
    for length in lengths:
        q, p = statistics.median(quiet[length]), statistics.median(pieced[length])
        lines.append(
            f"| {length} | {statistics.median(whole_ms[length]):.1f} | {q:.3f} | {p:.2f} | {p / q:.2f} "
            f"| {'bit for bit' if quiet_diff[length] == 0 else 'NO'} | {pieced_diff[length]:.1e} |"
        )
        print(lines[-1], flush=True)
    engine.release_memory()
    return [*lines, ""]


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the tiny checkpoint only, one round")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sizes: list[CheckpointSize] = ["tiny"] if args.quick else ["tiny", "full"]
    # A tiny chunk decodes in a few milliseconds, where the machine's noise is as large: more rounds for its median.
    repeats = {"tiny": 1 if args.quick else 41, "full": 7}
    lines = [
        "# Decoding a chunk whole where nobody listens, against in pieces",
        "",
        f"Command: `.venv/bin/python -m bench.engine.quiet_decode{' --quick' if args.quick else ''}`. "
        f"Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC. Random weights (seeded checkpoints), random GPT states of "
        f"{', '.join(map(str, LENGTHS))} tokens, each driven through the serving path's `AudioWork` as the scheduler "
        "drives a row (inline); CPU, one torch thread, thread CPU time; ratios are medians over interleaved rounds, every "
        "other one in the reverse order "
        f"({', '.join(f'{size}: {repeats[size]}' for size in sizes)}), after an untimed one.",
        "",
    ]
    for size in sizes:
        lines += measure(size, LENGTHS, repeats[size])
    text = "\n".join(lines)
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
