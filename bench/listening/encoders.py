"""Which library encodes a stream: PyAV (libav) against soundfile (libsndfile), per format, in one run.

``python -m bench.listening.encoders`` — each encoder is fed the same 10 s of speech-like PCM16 (24 kHz mono) as five
sentence-sized pieces, as a stream is, and measured for:

* **first bytes**: CPU ms from opening the encoder until the first piece's feed returns, and how many samples
  of that first piece the bytes returned so far decode to (what a listener can play after one sentence);
* **CPU per audio second**: thread CPU ms of the whole encode (open, five feeds, close) per second of audio;
* **bitrate** of the result, and whether the joined bytes decode (libav) to the samples fed (``+N``: N more).

soundfile writes through a file object whose writes are collected as they come (libsndfile writes its header at
open and rewrites it at close, which a stream cannot: the collected bytes are what a stream would have sent).
libsndfile has no AAC encoder. Written to ``bench/results/encoders.md``.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import soundfile as sf

from bench.machine import machine
from bench.stacks import ROOT, record, utc_now
from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.encoders import StreamFormat, decode_pcm16, stream_encoder

RESULTS = ROOT / "bench" / "results" / "encoders.md"
PIECES = (48_000, 36_000, 60_000, 42_000, 54_000)
"""Five sentences, 10 s in all."""
REPEATS = 7
SOUNDFILE = {"mp3": ("MP3", "MPEG_LAYER_III"), "opus": ("OGG", "OPUS"), "flac": ("FLAC", "PCM_16")}


def speechlike(n: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    t = np.arange(n) / SAMPLE_RATE
    signal = 0.3 * np.sin(2 * np.pi * (180 + 40 * np.sin(2 * np.pi * 3 * t)) * t) + 0.03 * rng.standard_normal(n)
    return bytes((signal * 32767).astype("<i2").tobytes())


class Collected:
    """A file object for libsndfile that keeps what is written, in order, and ignores going back."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.pos = 0

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        if self.pos >= len(self.data):
            self.data += chunk
        self.pos += len(chunk)
        return len(chunk)

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: 0, 1: self.pos, 2: len(self.data)}[whence] + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, size: int = -1) -> bytes:
        return b""


def run_pyav(fmt: StreamFormat, pieces: list[bytes]) -> tuple[float, bytes, bytes]:
    """(CPU s until the first piece's bytes are back, the bytes back by then, the whole file)."""
    started = time.thread_time()
    encoder = stream_encoder(fmt, SAMPLE_RATE)
    first = encoder.start() + encoder.feed(pieces[0])
    first_cpu = time.thread_time() - started
    rest = b"".join(encoder.feed(piece) for piece in pieces[1:]) + encoder.finish()
    return first_cpu, first, first + rest


def run_soundfile(fmt: str, pieces: list[bytes]) -> tuple[float, bytes, bytes]:
    container, subtype = SOUNDFILE[fmt]
    started = time.thread_time()
    sink = Collected()
    out = sf.SoundFile(sink, "w", samplerate=SAMPLE_RATE, channels=1, format=container, subtype=subtype)
    out.write(np.frombuffer(pieces[0], dtype="<i2"))
    first_cpu = time.thread_time() - started
    first = bytes(sink.data)
    for piece in pieces[1:]:
        out.write(np.frombuffer(piece, dtype="<i2"))
    out.close()
    return first_cpu, first, bytes(sink.data)


def playable(data: bytes) -> int:
    try:
        return len(decode_pcm16(data, SAMPLE_RATE)) // 2
    except Exception:  # noqa: BLE001 - a truncated or header-only stream may not open at all: nothing to play
        return 0


def measure(name: str, run: Callable[[list[bytes]], tuple[float, bytes, bytes]], pieces: list[bytes]) -> str:
    audio_s = sum(len(p) for p in pieces) / 2 / SAMPLE_RATE
    firsts, totals = [], []
    first = whole = b""
    for _ in range(REPEATS):
        started = time.thread_time()
        first_cpu, first, whole = run(pieces)
        totals.append(time.thread_time() - started)
        firsts.append(first_cpu)
    fed = sum(len(p) for p in pieces) // 2
    decoded = playable(whole)
    return (
        f"| {name} | {statistics.median(firsts) * 1e3:.1f} | {playable(first)} of {len(pieces[0]) // 2} | "
        f"{statistics.median(totals) / audio_s * 1e3:.2f} | {len(whole) * 8 / audio_s / 1000:.0f} | "
        f"{'+' if decoded >= fed else ''}{decoded - fed} |"
    )


def main() -> None:
    started = utc_now()
    pieces = [speechlike(n, seed) for seed, n in enumerate(PIECES)]
    lines = [
        "| format / library | first piece: CPU ms until its bytes are back | samples of the first piece playable then "
        "| CPU ms per audio second | kbit/s | decoded length − fed |",
        "|---|---|---|---|---|---|",
    ]
    for fmt in ("mp3", "opus", "aac", "flac"):
        lines.append(measure(f"{fmt} / PyAV", lambda p, f=fmt: run_pyav(f, p), pieces))  # type: ignore[misc]
        print(lines[-1], flush=True)
        if fmt in SOUNDFILE:
            lines.append(measure(f"{fmt} / soundfile", lambda p, f=fmt: run_soundfile(f, p), pieces))  # type: ignore[misc]
            print(lines[-1], flush=True)
    info = machine()
    title = "# Stream encoders: PyAV (libav) against soundfile (libsndfile)"
    setup = (
        f"`python -m bench.listening.encoders` — {started}. Machine: {info['cpu']}, {info['cores']} cores, 1-min load "
        f"{os.getloadavg()[0]:.2f}; one thread, thread CPU time, median of {REPEATS}; five pieces, "
        f"{sum(PIECES) / SAMPLE_RATE:.0f} s of 24 kHz mono PCM16 (a wobbling tone with noise)."
    )
    record(RESULTS, f"{title}\n\n{setup}\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
