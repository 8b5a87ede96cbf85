"""How exact is a row's audio decoded in pieces, for each look-ahead? (:mod:`bench.engine.piecewise`)

ChatTTS's decoder and Vocos are built as ``Chat._load`` builds them (random weights, seeded: the tiny checkpoint's
dimensions and ChatTTS's real ones), their receptive field is measured, and random GPT states of a few lengths are
decoded whole and in pieces, for piece sizes and look-aheads from 1 token to the field's right side. Reported per
(size, piece, look-ahead): the largest difference to the whole decode and its RMS in dB below the signal's RMS,
and the decode work (tokens through the decoder, and CPU seconds) against one whole decode.

    python -m bench.engine.lookahead [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.engine.piecewise import AudioField, PieceDecoder, measure_field
from bench.stacks import ROOT
from ttsq.inference.engines.checkpoint import CheckpointSize, apply_config_overrides, config_overrides

RESULTS = ROOT / "bench" / "results" / "lookahead.md"


def decoder_and_vocos(size: CheckpointSize) -> tuple[Callable[[npt.NDArray[np.float32]], npt.NDArray[np.float32]], int]:
    """The audio decode of ``Chat._decode_to_wavs`` (decoder, then Vocos) with random weights of ``size``."""
    import torch

    decoder, vocos, hidden = decoder_and_vocos_modules(size)

    def decode(states: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        with torch.inference_mode():
            mel = decoder(torch.from_numpy(states).T.unsqueeze(0))  # as _decode_to_wavs lays one row out
            return np.asarray(vocos.decode(mel), dtype=np.float32).reshape(-1)

    return decode, hidden


def decoder_and_vocos_modules(size: CheckpointSize) -> tuple[Any, Any, int]:
    """ChatTTS's decoder and Vocos modules as ``Chat._load`` builds them, random weights (seeded) of ``size``, and
    the GPT state size they decode."""
    import torch
    from ChatTTS.config import Config
    from ChatTTS.model import DVAE
    from vocos import Vocos
    from vocos.pretrained import instantiate_class

    config = apply_config_overrides(Config(), config_overrides(size, "")) if size == "tiny" else Config()
    asdict = dataclasses.asdict
    torch.manual_seed(0)
    decoder = DVAE(decoder_config=asdict(config.decoder), dim=config.decoder.idim).eval()
    vocos = Vocos(
        feature_extractor=instantiate_class(args=(), init=asdict(config.vocos.feature_extractor)),
        backbone=instantiate_class(args=(), init=asdict(config.vocos.backbone)),
        head=instantiate_class(args=(), init=asdict(config.vocos.head)),
    ).eval()
    return decoder, vocos, config.decoder.idim * 2


def compare(
    decode: Callable[[npt.NDArray[np.float32]], npt.NDArray[np.float32]],
    field: AudioField,
    hidden: int,
    lengths: list[int],
    piece: int,
    lookahead: int,
) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    worst, error_power, signal_power, work, cpu_pieces, cpu_whole = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    for n in lengths:
        states = rng.standard_normal((n, hidden)).astype(np.float32)
        started = time.process_time()
        whole = decode(states)
        cpu_whole += time.process_time() - started
        pieces = PieceDecoder(decode, field, piece, lookahead)
        started = time.process_time()
        joined = np.concatenate([pieces.add(states[i : i + 4]) for i in range(0, n, 4)] + [pieces.finish()])
        cpu_pieces += time.process_time() - started
        assert joined.size == whole.size
        worst = max(worst, float(np.abs(joined - whole).max()))
        error_power += float(np.sum((joined - whole).astype(np.float64) ** 2))
        signal_power += float(np.sum(whole.astype(np.float64) ** 2))
        work += pieces.decoded_tokens / n
    rms_db = 10 * np.log10(error_power / signal_power) if error_power > 0 else float("-inf")
    return {
        "max_abs": worst,
        "rms_db": rms_db,
        "tokens_ratio": work / len(lengths),
        "cpu_ratio": cpu_pieces / cpu_whole,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the tiny dimensions only, two lengths")
    args = parser.parse_args()
    sizes: list[CheckpointSize] = ["tiny"] if args.quick else ["tiny", "full"]
    lengths = [120, 260] if args.quick else [120, 260, 400]
    lines = [
        "# Piecewise audio decode against the whole decode",
        "",
        f"Command: `.venv/bin/python -m bench.engine.lookahead{' --quick' if args.quick else ''}`. "
        f"Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC. Random weights (seeded), random GPT states of "
        f"{', '.join(map(str, lengths))} tokens fed 4 tokens at a time; CPU, one process.",
        "",
    ]
    for size in sizes:
        decode, hidden = decoder_and_vocos(size)
        field = measure_field(decode, hidden)
        lines += [
            f"## {size}: field {field.left} tokens left, {field.right} right ({field.samples_per_token} samples a token)",
            "",
            "| piece (tokens) | look-ahead (tokens) | max abs difference | RMS difference (dB below signal) "
            "| tokens decoded / length | CPU / whole decode |",
            "|---|---|---|---|---|---|",
        ]
        lookaheads = sorted({1, 2, 4, 8, 16, 24, 32, field.right // 2, field.right} & set(range(1, field.right + 1)))
        for piece in (8, 16, 32):
            for lookahead in lookaheads:
                row = compare(decode, field, hidden, lengths, piece, lookahead)
                lines.append(
                    f"| {piece} | {lookahead} | {row['max_abs']:.2e} | {row['rms_db']:.1f} | {row['tokens_ratio']:.2f} | "
                    f"{row['cpu_ratio']:.2f} |"
                )
                print(lines[-1], flush=True)
        lines.append("")
    text = "\n".join(lines)
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
