"""What does a row's audio cost decoded as its states arrive? The streaming decoder beside the piecewise one.

The target: a chunk's decode CPU within 1.5x of its single whole decode. ChatTTS's decoder and Vocos are built
as ``Chat._load`` builds them (random weights, seeded; the tiny checkpoint's dimensions and ChatTTS's real ones) and
random GPT states of a few lengths are handed over one token at a time, as the decoder makes them, to
:class:`ttsq.inference.audio.streaming.StreamingDecoder` (each convolution keeps its left context; runs of 4, 8, 16 and
32 states here) and to :class:`bench.engine.piecewise.PieceDecoder` (pieces of as many tokens, each decoding its window
again, at the measured look-ahead), and to four streaming decoders at once
(:func:`ttsq.inference.audio.streaming.add_together`: one run of the layers for all four rows, as a worker streaming
several rows would). Reported per (size, run): CPU time of each (per row) against one whole decode of the same states
(the median over interleaved repetitions; one thread), calls into the layers, and the largest difference to the whole
decode. Then the serving default as a worker runs it (:class:`ttsq.inference.audio.lead.LeadThenExact`: the first
``PIECE_TOKENS`` decoded ahead of the field from the stream's state once ``PIECE_TOKENS + PIECE_LOOKAHEAD`` states are
in, every state streamed exactly in runs of ``RUN_TOKENS``), its states handed over as the scheduler hands them: the
first ``PIECE_TOKENS + PIECE_LOOKAHEAD`` at once, then ``PIECE_TOKENS`` at a time. Last, what one streamed run costs a
state by its size, in the steady state.

    python -m bench.engine.streaming_audio [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from bench import ROOT
from bench.engine.lookahead import decoder_and_vocos, decoder_and_vocos_modules
from bench.engine.piecewise import AudioField, PieceDecoder, measure_field
from settings import Settings
from ttsq.inference.audio.handoff import Cadence
from ttsq.inference.audio.lead import LeadThenExact
from ttsq.inference.audio.streaming import RUN_TOKENS, StreamingDecoder, add_together
from ttsq.inference.engines.checkpoint import CheckpointSize

RESULTS = ROOT / "bench" / "results" / "streaming_audio.md"
SERVING_LENGTHS = [100, 180, 250, 400]
"""Chunk lengths of the serving default: a sentence chunk is 100-250 decode steps, a long one more."""
PIECES = (4, 8, 16, 32)
TOGETHER = 4
"""Rows decoded together by ``add_together`` (a batch of streams, as the decoder makes their states step by step)."""


def cpu(run: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """This thread's CPU seconds for ``run(*args)`` (the other engineers' load on the machine does not count)."""
    started = time.thread_time()
    result = run(*args)
    return time.thread_time() - started, result


def token_by_token(decoder: StreamingDecoder | PieceDecoder, states: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    return np.concatenate([decoder.add(states[i : i + 1]) for i in range(len(states))] + [decoder.finish()])


def as_scheduled(decoder: LeadThenExact, states: npt.NDArray[np.float32], piece: int, lookahead: int) -> npt.NDArray[np.float32]:
    """``states`` handed over as the scheduler hands a row's: ``piece + lookahead`` at first, then ``piece`` at a time."""
    bounds = [0, *range(piece + lookahead, len(states), piece), len(states)]
    *runs, last = itertools.pairwise(bounds)
    return np.concatenate([decoder.add(states[a:b]) for a, b in runs] + [decoder.finish(states[last[0] : last[1]])])


def rows_together(decoders: list[StreamingDecoder], states: npt.NDArray[np.float32]) -> list[npt.NDArray[np.float32]]:
    """``len(decoders)`` rows of the same states, added one token at a time with :func:`add_together`."""
    outs: list[list[npt.NDArray[np.float32]]] = [[] for _ in decoders]
    for i in range(len(states)):
        for out, samples in zip(outs, add_together(decoders, [states[i : i + 1]] * len(decoders)), strict=True):
            out.append(samples)
    return [np.concatenate([*out, decoder.finish()]) for out, decoder in zip(outs, decoders, strict=True)]


def field_with_layer_scale(size: CheckpointSize, scale: float) -> AudioField:
    """The field measured once every ConvNeXt block's layer scale is ``scale``: random weights start them at 1e-6
    (ChatTTS's decoder) and 1/8 (Vocos), small enough that a change dies out in float32 before it crosses them all,
    which trained blocks do not do."""
    import torch

    decoder, vocos, hidden = decoder_and_vocos_modules(size)
    with torch.no_grad():
        for block in decoder.decoder.decoder_block:
            block.weight.fill_(scale)
        for block in vocos.backbone.convnext:
            block.gamma.fill_(scale)

    def decode(states: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        with torch.inference_mode():
            return np.asarray(vocos.decode(decoder(torch.from_numpy(states).T.unsqueeze(0))), dtype=np.float32).reshape(-1)

    return measure_field(decode, hidden, tokens=300)


def measure(size: CheckpointSize, lengths: list[int], repeats: int) -> list[str]:
    decode, hidden = decoder_and_vocos(size)
    modules, vocos, _ = decoder_and_vocos_modules(size)  # seeded: the same weights as ``decode``'s
    field = measure_field(decode, hidden)
    delay = StreamingDecoder(modules, vocos).delay
    scaled = field_with_layer_scale(size, 0.3)
    rng = np.random.default_rng(7)
    rows = {length: rng.standard_normal((length, hidden)).astype(np.float32) for length in lengths}
    ratios: dict[tuple[str, int], list[float]] = {}
    calls: dict[tuple[str, int], int] = {}
    worst: dict[tuple[str, int], float] = {}
    for piece in PIECES:  # a first, untimed round: oneDNN builds a kernel for each new shape, once per process
        for states in rows.values():
            token_by_token(StreamingDecoder(modules, vocos, run_tokens=piece), states)
            token_by_token(PieceDecoder(decode, field, piece, field.right), states)
    for _ in range(repeats):  # interleaved: every variant once per round, so a busy spell hits them all
        for piece in PIECES:
            for states in rows.values():
                whole_s, whole = cpu(decode, states)
                streaming = StreamingDecoder(modules, vocos, run_tokens=piece)
                pieces = PieceDecoder(decode, field, piece, field.right)
                for name, decoder in (("streaming", streaming), ("piecewise", pieces)):
                    seconds, joined = cpu(token_by_token, decoder, states)
                    ratios.setdefault((name, piece), []).append(seconds / whole_s)
                    worst[name, piece] = max(worst.get((name, piece), 0.0), float(np.abs(joined - whole).max()))
                together = [StreamingDecoder(modules, vocos, run_tokens=piece) for _ in range(TOGETHER)]
                seconds, joined_rows = cpu(rows_together, together, states)
                ratios.setdefault(("together", piece), []).append(seconds / TOGETHER / whole_s)
                worst["together", piece] = max(
                    [worst.get(("together", piece), 0.0)] + [float(np.abs(joined - whole).max()) for joined in joined_rows]
                )
                calls["streaming", piece] = calls.get(("streaming", piece), 0) + streaming.calls
                calls["piecewise", piece] = calls.get(("piecewise", piece), 0) + -(-len(states) // piece)
    lines = [
        f"## {size}: streaming delay {delay} tokens (from the layers' shapes); piecewise field measured "
        f"{field.left} left, {field.right} right (with every ConvNeXt layer scale at 0.3: {scaled.left} left, "
        f"{scaled.right} right)",
        "",
        f"| piece (tokens) | streaming CPU / whole decode | {TOGETHER} rows streamed together: CPU per row / whole decode "
        "| piecewise CPU / whole decode | streaming calls / row | piecewise decodes / row | streaming max abs diff "
        "| piecewise max abs diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for piece in PIECES:
        per_row = repeats * len(lengths)
        lines.append(
            f"| {piece} "
            f"| {statistics.median(ratios['streaming', piece]):.2f} | {statistics.median(ratios['together', piece]):.2f} "
            f"| {statistics.median(ratios['piecewise', piece]):.2f} "
            f"| {calls['streaming', piece] / per_row:.1f} | {calls['piecewise', piece] / per_row:.1f} "
            f"| {max(worst['streaming', piece], worst['together', piece]):.1e} | {worst['piecewise', piece]:.1e} |"
        )
        print(lines[-1], flush=True)
    return [*lines, ""]


def serving_default(size: CheckpointSize, lengths: list[int], repeats: int) -> list[str]:
    """The worker's own piecing at its default settings, per chunk length: CPU against one whole decode, and where
    its output stands against the whole decode (the lead's approximation, cross-faded, is the only difference)."""
    decode, _ = decoder_and_vocos(size)
    modules, vocos, hidden = decoder_and_vocos_modules(size)
    defaults = Settings.model_fields
    piece = int(defaults["piece_tokens"].default)
    lookahead = int(defaults["piece_lookahead"].default)
    rng = np.random.default_rng(11)
    rows = {length: rng.standard_normal((length, hidden)).astype(np.float32) for length in lengths}

    def make(ahead: int = lookahead) -> LeadThenExact:
        return LeadThenExact(StreamingDecoder(modules, vocos), Cadence(piece, ahead))

    for states in rows.values():  # untimed: oneDNN's kernels for these shapes
        as_scheduled(make(), states, piece, lookahead)
    ratios: dict[int, list[float]] = {}
    streamed: dict[int, list[float]] = {}
    window: dict[int, list[float]] = {}
    full_field: dict[int, list[float]] = {}
    worst_exact: dict[int, float] = {}
    decoded: dict[int, float] = {}
    runs: dict[int, int] = {}
    worst: dict[int, tuple[float, float]] = {}
    for _ in range(repeats):
        for length, states in rows.items():
            whole_s, whole = cpu(decode, states)
            decoder = make()
            seconds, joined = cpu(as_scheduled, decoder, states, piece, lookahead)
            ratios.setdefault(length, []).append(seconds / whole_s)
            decoded[length] = decoder.decoded_tokens / length
            runs[length] = decoder.stream.calls
            # Where the cost goes: the streamed decode alone (fed the same way: no lead, no early run), and the lead:
            # the stream's preview of its first piece once its window is in.
            alone = StreamingDecoder(modules, vocos)
            streamed.setdefault(length, []).append(cpu(as_scheduled, alone, states, piece, lookahead)[0] / whole_s)
            # At the full look-ahead (PIECE_LOOKAHEAD at the field: no lead, every sample exact), as served.
            exact = make(alone.delay)
            seconds, joined_exact = cpu(as_scheduled, exact, states, piece, alone.delay)
            full_field.setdefault(length, []).append(seconds / whole_s)
            worst_exact[length] = max(worst_exact.get(length, 0.0), float(np.abs(joined_exact - whole).max()))
            lead = StreamingDecoder(modules, vocos)
            lead.add(states[: piece + lookahead])
            lead.run_now()
            window.setdefault(length, []).append(cpu(lead.preview, piece)[0] / whole_s)
            diff = joined - whole
            signal = float(np.sqrt(np.mean(whole**2)))
            rms_db = 20 * np.log10(max(float(np.sqrt(np.mean(diff**2))), 1e-12) / signal)
            worst[length] = (float(np.abs(diff).max()), float(rms_db))
    lines = [
        f"### {size}: the serving default (first piece {piece} tokens after {piece + lookahead}, then streamed in runs "
        f"of {RUN_TOKENS}; a row's last states come with its end)",
        "",
        "| chunk (tokens) | CPU / whole decode | the streamed decode alone (no lead, no early run) "
        "| the lead alone (the stream's preview of its first piece) | at the full look-ahead, as served (no lead) "
        "| streamed runs | states decoded / chunk's states | max abs diff to the whole decode "
        "| RMS diff, dB below the signal | max abs diff at the full look-ahead |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for length in lengths:
        max_abs, rms_db = worst[length]
        lines.append(
            f"| {length} | {statistics.median(ratios[length]):.2f} | {statistics.median(streamed[length]):.2f} "
            f"| {statistics.median(window[length]):.2f} | {statistics.median(full_field[length]):.2f} | {runs[length]} "
            f"| {decoded[length]:.2f} | {max_abs:.1e} | {-rms_db:.1f} | {worst_exact[length]:.1e} |"
        )
        print(lines[-1], flush=True)
    return [*lines, ""]


def run_sizes(size: CheckpointSize, repeats: int) -> list[str]:
    """What one run of the streamed decode costs a state, by the run's size, in the steady state (past the field's
    start), against a whole decode of 500 states: why fewer, larger runs cost less."""
    decode, _ = decoder_and_vocos(size)
    modules, vocos, hidden = decoder_and_vocos_modules(size)
    sizes = (16, 32, 64, 128, 256)
    states = np.random.default_rng(5).standard_normal((200 + repeats * max(sizes), hidden)).astype(np.float32)
    decode(states[:500])  # untimed: oneDNN's kernels for these shapes
    whole_s = statistics.median(cpu(decode, states[:500])[0] for _ in range(repeats)) / 500
    lines = [
        f"### {size}: one streamed run's CPU per state, by the run's size (steady state; whole decode of 500 states: "
        f"{whole_s * 1e3:.2f} ms a state)",
        "",
        "| run (states) | ms per state | ÷ the whole decode's |",
        "|---|---|---|",
    ]
    for run in sizes:
        decoder = StreamingDecoder(modules, vocos, run_tokens=run)
        decoder.add(states[:200])  # past the field's start: every run after this makes a run's worth of samples
        times = [cpu(decoder.add, states[200 + k * run : 200 + (k + 1) * run])[0] / run for k in range(repeats)]
        per_state = statistics.median(times)
        lines.append(f"| {run}{' (serving)' if run == RUN_TOKENS else ''} | {per_state * 1e3:.2f} | {per_state / whole_s:.2f} |")
        print(lines[-1], flush=True)
    return [*lines, ""]


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the tiny dimensions only, one round")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sizes: list[CheckpointSize] = ["tiny"] if args.quick else ["tiny", "full"]
    lengths, repeats = ([100, 250], 1) if args.quick else ([100, 250], 3)
    serving = lengths if args.quick else SERVING_LENGTHS
    lines = [
        "# Streaming audio decode beside the piecewise one, against the whole decode",
        "",
        f"Command: `.venv/bin/python -m bench.engine.streaming_audio{' --quick' if args.quick else ''}`. "
        f"Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC. Random weights (seeded), random GPT states of "
        f"{' and '.join(map(str, lengths))} tokens added one token at a time; CPU, one torch thread, thread CPU time; "
        f"ratios are medians over {repeats} interleaved round(s) of both lengths, after an untimed one. "
        "The piecewise decoder runs at its measured look-ahead (exact on these random weights only); the streaming "
        "one at its full field. The serving default is measured on chunks of "
        f"{', '.join(map(str, serving))} tokens (a `MAX_CHUNK_CHARS` chunk is 100-250), each handed over as the "
        "scheduler hands it.",
        "",
    ]
    for size in sizes:
        lines += measure(size, lengths, repeats)
        lines += serving_default(size, serving, repeats)
        lines += run_sizes(size, repeats)
    text = "\n".join(lines)
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
