"""What each output format costs the API: CPU per audio second of the streaming converter, beside PCM passthrough.

``python -m bench.listening.output_formats`` — every format is fed the same 10 s of speech-like PCM16 (24 kHz mono) as
five sentence-sized pieces through :func:`ttsq.domain.converter.converter`, as a stream is, and measured for the
thread CPU time of the whole conversion (open, header, five feeds, end) per second of audio, median of
:data:`REPEATS`, and the bit rate of the result. PCM16 at 24 kHz is the passthrough every other row is compared to.
Written to ``bench/results/output_formats.md``.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

from bench.machine import machine
from bench.stacks import ROOT, record, utc_now
from ttsq.domain.converter import converter
from ttsq.domain.output_formats import OutputFormat, parse_elevenlabs, parse_google, parse_ttsq

RESULTS = ROOT / "bench" / "results" / "output_formats.md"
NATIVE = 24_000
PIECES = (48_000, 36_000, 60_000, 42_000, 54_000)
"""Five sentences, 10 s in all."""
REPEATS = 5
FORMATS: list[tuple[str, OutputFormat]] = [
    ("pcm (24 kHz: passthrough)", parse_ttsq("pcm")),
    ("pcm_8000", parse_elevenlabs("pcm_8000")),
    ("pcm_16000", parse_elevenlabs("pcm_16000")),
    ("pcm_22050", parse_elevenlabs("pcm_22050")),
    ("pcm_44100", parse_elevenlabs("pcm_44100")),
    ("pcm_48000", parse_elevenlabs("pcm_48000")),
    ("Cartesia pcm_f32le 44100", OutputFormat("pcm_f32le", 44_100)),
    ("ulaw_8000", parse_elevenlabs("ulaw_8000")),
    ("alaw_8000", parse_elevenlabs("alaw_8000")),
    ("Google MULAW (WAV, 8 kHz)", parse_google("MULAW")),
    ("mulaw at 24 kHz (no resampling)", parse_ttsq("mulaw", NATIVE)),
    ("mp3 (24 kHz, 48 kbps)", parse_ttsq("mp3")),
    ("mp3_22050_32", parse_elevenlabs("mp3_22050_32")),
    ("mp3_44100_128", parse_elevenlabs("mp3_44100_128")),
    ("opus (24 kHz, 32 kbps)", parse_ttsq("opus")),
    ("opus_48000_64", parse_elevenlabs("opus_48000_64")),
    ("aac (24 kHz, 48 kbps)", parse_ttsq("aac")),
    ("flac 44100", parse_ttsq("flac", 44_100)),
]


def speechlike(n: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / NATIVE
    signal = 0.3 * np.sin(2 * np.pi * (180 + 40 * np.sin(2 * np.pi * 3 * t)) * t) + 0.03 * rng.standard_normal(n)
    return bytes((signal * 32767).astype("<i2").tobytes())


def run(fmt: OutputFormat, pieces: list[bytes]) -> tuple[float, bytes]:
    started = time.thread_time()
    conv = converter(fmt)
    out = conv.start() + b"".join(conv.feed(piece) for piece in pieces) + conv.end()
    return time.thread_time() - started, out


def main() -> None:
    started = utc_now()
    pieces = [speechlike(n, seed) for seed, n in enumerate(PIECES)]
    audio_s = sum(PIECES) / NATIVE
    lines = [
        "| format | sample rate | CPU ms per audio second | % of a core per real-time stream | kbit/s |",
        "|---|---|---|---|---|",
    ]
    for name, fmt in FORMATS:
        cpu = statistics.median(run(fmt, pieces)[0] for _ in range(REPEATS)) / audio_s * 1e3
        size = len(run(fmt, pieces)[1])
        lines.append(f"| {name} | {fmt.sample_rate} | {cpu:.3f} | {cpu / 10:.2f} | {size * 8 / audio_s / 1000:.0f} |")
        print(lines[-1], flush=True)
    info = machine()
    title = "# Output formats: the streaming converter's CPU per audio second"
    setup = (
        f"`python -m bench.listening.output_formats` — {started}. Machine: {info['cpu']}, {info['cores']} cores, 1-min "
        f"load {os.getloadavg()[0]:.2f}; one thread, thread CPU time, median of {REPEATS}; five pieces, "
        f"{audio_s:.0f} s of 24 kHz mono PCM16 (a wobbling tone with noise) through ttsq.domain.converter."
    )
    record(RESULTS, f"{title}\n\n{setup}\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
