"""What does a chunk's audio cost when the rows due in the same step are decoded together?

Serving decodes a row's audio in pieces while its codes are generated (:class:`~ttsq.inference.sched.audio_work.AudioWork`
with :class:`~ttsq.inference.audio.lead.LeadThenExact` piece decoders at the default ``PIECE_TOKENS`` and
``PIECE_LOOKAHEAD``). Rows placed together hand their states on together, and their pieces (and ends, where they fall
in the same step) are decoded in one task whose layers run once for all of them
(:attr:`~ttsq.inference.audio.handoff.HandOff.together`). Here 1, 2, 4 and 8 rows of random GPT states (100-250 tokens
each, seeded) are placed in one step and stepped as the scheduler steps its slots, through ``AudioWork`` itself
(inline, so the decode's CPU is this thread's), three ways side by side: each row's whole decode at its end, the pieces
one row at a time (serving before), the pieces of the rows due together in one run. Reported: CPU per chunk against
the whole decode (medians over interleaved rounds, after an untimed one; one torch thread), and the largest difference
between a row's samples decoded together and alone. Random weights as ``Chat._load`` builds ChatTTS's decoder and
Vocos (the tiny checkpoint's dimensions, and ChatTTS's real ones unless ``--quick``).

    python -m bench.engine.audio_together [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import statistics
import time
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from bench import ROOT
from bench.engine.lookahead import decoder_and_vocos, decoder_and_vocos_modules
from settings import Settings
from ttsq.inference.audio.handoff import Cadence, HandOff
from ttsq.inference.audio.lead import LeadThenExact, pieces_together
from ttsq.inference.audio.streaming import StreamingDecoder
from ttsq.inference.base import BatchEvent, SynthesisRequest
from ttsq.inference.engines.checkpoint import CheckpointSize
from ttsq.inference.sched.audio_work import AudioWork
from ttsq.inference.sched.requests import DecodeLimits, RequestState, RowState

RESULTS = ROOT / "bench" / "results" / "audio_together.md"
ROWS = (1, 2, 4, 8)
LENGTHS = (100, 250)
"""A sentence chunk's tokens: each row's length is drawn from this range."""


def chunk_audio(handoff: HandOff | None, decode: Any, rows_states: list[npt.NDArray[np.float32]]) -> list[npt.NDArray[np.float32]]:
    """Every row's chunk, all placed in one step and stepped together as the scheduler's slots are, through
    ``AudioWork`` inline (``handoff`` None: each row decoded whole at its end by ``decode``)."""
    import torch

    chunks: dict[int, npt.NDArray[np.float32]] = {}

    def ready(row: RowState, samples: npt.NDArray[np.float32], events: list[BatchEvent], steps: int) -> None:
        chunks[row.slot or 0] = samples

    def fail(key: str, error: BaseException, events: list[BatchEvent]) -> None:
        raise error

    rows_audio = cast(Any, _WholeRows(decode))
    limits = DecodeLimits(max_new_token=2048, min_new_token=0, refine_max_new_token=384)
    work = AudioWork(rows_audio, limits, None, handoff, lambda: 0.0, alive=lambda _r: True, chunk_ready=ready, fail=fail)
    hidden = rows_states[0].shape[1]
    hiddens = torch.zeros((len(rows_states), max(map(len, rows_states)), hidden))
    rows = []
    for slot, states in enumerate(rows_states):
        hiddens[slot, : len(states)] = torch.from_numpy(states)
        request = SynthesisRequest(text="words", speaker=None, seed=slot)
        state = RequestState(key=f"r{slot}", request=request, lang="en", total=1, arrival=slot, alone=False)
        row = RowState(request=state, index=0, phase="code", text="words", slot=slot)
        work.placed(row)
        row.tokens = max(row.tokens, 1)
        rows.append(row)
    live = list(rows)
    while live:
        events: list[BatchEvent] = []
        for row in [row for row in live if row.tokens + 1 >= len(rows_states[row.slot or 0])]:
            live.remove(row)
            work.ended(row, hiddens[row.slot or 0, : len(rows_states[row.slot or 0])], events)
        work.hand_on(live, hiddens, events)
        for row in live:
            if work.pieces is None:
                row.tokens += 1
        work.collect(events)
    return [chunks[slot] for slot in range(len(rows_states))]


@dataclasses.dataclass
class _WholeRows:
    """The whole decode of a row's states, as ``ChatTTSRows.audio`` (the decoder and Vocos of these random weights)."""

    decode: Any

    def audio(self, hiddens: Any) -> npt.NDArray[np.float32]:
        samples: npt.NDArray[np.float32] = self.decode(hiddens.numpy())
        return samples


def measure(size: CheckpointSize, repeats: int) -> list[str]:
    decode, _ = decoder_and_vocos(size)
    modules, vocos, hidden = decoder_and_vocos_modules(size)
    defaults = Settings.model_fields
    cadence = Cadence(int(defaults["piece_tokens"].default), int(defaults["piece_lookahead"].default))

    def make() -> LeadThenExact:
        return LeadThenExact(StreamingDecoder(modules, vocos), cadence)

    alone = HandOff(cadence, make)
    together = HandOff(cadence, make, together=pieces_together)
    rng = np.random.default_rng(13)
    batches = {
        n: [rng.standard_normal((int(rng.integers(*LENGTHS, endpoint=True)), hidden)).astype(np.float32) for _ in range(n)]
        for n in ROWS
    }
    ways = {"whole": None, "alone": alone, "together": together}
    for rows in batches.values():  # untimed: oneDNN's kernels for these shapes
        for handoff in ways.values():
            chunk_audio(handoff, decode, rows)
    cpu: dict[tuple[str, int], list[float]] = {}
    worst: dict[int, float] = {}
    for _ in range(repeats):
        for n, rows in batches.items():
            out = {}
            for name, handoff in ways.items():
                started = time.thread_time()
                out[name] = chunk_audio(handoff, decode, rows)
                cpu.setdefault((name, n), []).append((time.thread_time() - started) / n)
            worst[n] = max(
                [worst.get(n, 0.0)]
                + [
                    float(np.abs(a - b).max()) if a.size == b.size else float("inf")
                    for a, b in zip(out["together"], out["alone"], strict=True)
                ]
            )
    lines = [
        f"## {size}: pieces of {cadence.piece_tokens} tokens, first after {cadence.first} steps; rows of "
        f"{LENGTHS[0]}-{LENGTHS[1]} tokens placed in one step",
        "",
        "| rows due together | whole decode, ms CPU per chunk | pieces one row at a time / whole | pieces of the rows together "
        "/ whole | max abs diff, together vs alone |",
        "|---|---|---|---|---|",
    ]
    for n in ROWS:
        whole = statistics.median(cpu["whole", n])
        lines.append(
            f"| {n} | {whole * 1e3:.1f} | {statistics.median(cpu['alone', n]) / whole:.2f} "
            f"| {statistics.median(cpu['together', n]) / whole:.2f} | {worst[n]:.1e} |"
        )
        print(lines[-1], flush=True)
    return [*lines, ""]


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the tiny dimensions only, one round")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sizes: list[CheckpointSize] = ["tiny"] if args.quick else ["tiny", "full"]
    repeats = 1 if args.quick else 3
    lines = [
        "# A chunk's audio in pieces, the rows due together decoded in one run, against the whole decode",
        "",
        f"Command: `.venv/bin/python -m bench.engine.audio_together{' --quick' if args.quick else ''}`. "
        f"Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC. CPU, one torch thread, thread CPU time per chunk; "
        f"medians over {repeats} interleaved round(s) after an untimed one.",
        "",
    ]
    for size in sizes:
        lines += measure(size, repeats)
    text = "\n".join(lines)
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
