"""Time to first audio per streamed format, through the official OpenAI SDK, against the real service.

``python -m bench.listening.stream_formats [--runs N] [--checkpoint tiny|full] [--tokens T]`` — one redis-server, one
``python worker.py`` on the tiny (or the full-size random-weight) checkpoint (``CACHE_ENABLED=false``: every
request synthesises) and one ``uvicorn app:app`` (:func:`bench.listening.ttfa.service`). For
each format (wav, pcm, mp3, opus, aac, flac, in turn, run after run, so drift in the machine's load hits all alike),
``client.audio.speech.with_streaming_response.create(..., response_format=fmt)`` with a fresh text each time;
measured from just before the call to the first *audio* byte (past the format's header: WAV's 44 bytes, mp3's
Xing frame, Ogg Opus's header pages, FLAC's STREAMINFO) and to the last byte, whose ratio is the share of the
whole synthesis a listener waits before hearing anything. Each streamed body is checked to decode (libav) to the
stored result's length (``GET /v1/tts/result``, decoded the same way) within one codec frame, but for aac (ADTS
cannot carry its priming: within two). Written to ``bench/results/stream_formats.md`` (``-full.md`` for the
full-size checkpoint).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import openai

from bench.listening.ttfa import FULL_CHECKPOINT_DIR, MAX_CHUNK_CHARS, Checkpoint, service, spread
from bench.stacks import ROOT, utc_now
from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.encoders import StreamFormat, decode_pcm16, stream_encoder
from ttsq.domain.text import split_sentences
from ttsq.inference.engines.checkpoint import build_random_checkpoint

RESULTS = ROOT / "bench" / "results" / "stream_formats.md"
FORMATS: tuple[StreamFormat, ...] = ("wav", "pcm", "mp3", "opus", "aac", "flac")
SENTENCES = (
    "The morning train was late again, so everyone waited in the rain.",
    "A small dog sat beside the bench and watched the empty tracks.",
    "When the train finally arrived, the doors opened with a loud sigh.",
    "People hurried inside, shaking water from their coats and umbrellas.",
    "By the time we reached the city, the sun was shining brightly.",
    "The market by the station was already full of voices and colour.",
    "A baker handed out warm bread to the first customers of the day.",
    "Somewhere a radio played an old song that nobody could name.",
)
"""Eight sentences of about ten words, one chunk each (MAX_CHUNK_CHARS=80): the first alone, then the rest."""
TOKENS_PER_CHUNK = 192
"""MAX_NEW_TOKEN = MIN_NEW_TOKEN: about 4 s of audio per chunk, so synthesis, not the fixed cost of a job (the
text's normalisation, the first chunk's own call), is most of a request's time, as with the real model
(``bench.listening.ttfa``: 48 tokens a chunk on tiny is 0.49 for WAV, where the fixed cost weighs most)."""
TOLERANCE = {"wav": 0, "pcm": 0, "mp3": 576 + 64, "opus": 0, "aac": 2048, "flac": 0}
"""Samples a streamed body may decode to beyond the stored result (mp3: its end padding; aac: priming + padding)."""


def text_for(run: int, fmt: str) -> str:
    """The same eight sentences, made a distinct request (no two requests share a cache key or a job)."""
    return f"Run {run} in {fmt}. " + " ".join(SENTENCES)


def timed(client: openai.OpenAI, fmt: StreamFormat, text: str) -> tuple[float, float, bytes, str]:
    """Seconds to the first audio byte and to the last; the body; the task id."""
    header = len(stream_encoder(fmt, SAMPLE_RATE).start())
    started = time.perf_counter()
    first = None
    body = bytearray()
    with client.audio.speech.with_streaming_response.create(model="tts-1", voice="alloy", input=text, response_format=fmt) as r:
        task = r.headers["x-ttsq-task-id"]
        for chunk in r.iter_bytes():
            body += chunk
            if first is None and len(body) > header:
                first = time.perf_counter() - started
    last = time.perf_counter() - started
    if first is None:
        raise SystemExit(f"{fmt}: no audio streamed (task {task})")
    return first, last, bytes(body), task


def samples(data: bytes, fmt: str) -> int:
    return len(data) // 2 if fmt == "pcm" else len(decode_pcm16(data, SAMPLE_RATE)) // 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--checkpoint", choices=("tiny", "full"), default="tiny")
    parser.add_argument("--tokens", type=int, default=TOKENS_PER_CHUNK, help="MAX_NEW_TOKEN = MIN_NEW_TOKEN per chunk")
    args = parser.parse_args()
    if args.checkpoint == "full":
        build_random_checkpoint(FULL_CHECKPOINT_DIR, "full")  # reused when intact
        point = Checkpoint("full-random", str(FULL_CHECKPOINT_DIR), runs=args.runs, timeout_s=600)
    else:
        point = Checkpoint("tiny-random", "tiny", runs=args.runs, timeout_s=60)
    results = RESULTS if args.checkpoint == "tiny" else RESULTS.with_name("stream_formats-full.md")
    chunks = split_sentences(text_for(0, "wav"), MAX_CHUNK_CHARS)
    started_at = utc_now()
    load_before = os.getloadavg()[0]
    first: dict[str, list[float]] = {fmt: [] for fmt in FORMATS}
    last: dict[str, list[float]] = {fmt: [] for fmt in FORMATS}
    excess: dict[str, list[int]] = {fmt: [] for fmt in FORMATS}
    tmp = Path(tempfile.mkdtemp(prefix="ttsq-stream-formats-"))
    with service(point, tmp, args.tokens) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=point.timeout_s)
        timed(client, "wav", "A warm-up request pays the first-request costs.")
        for run in range(args.runs):
            for fmt in FORMATS:
                t_first, t_last, body, task = timed(client, fmt, text_for(run + 1, fmt))
                stored = httpx.get(f"{url}/v1/tts/result/{task}", timeout=30).raise_for_status().content
                extra = samples(body, fmt) - samples(stored, fmt)
                if not 0 <= extra <= TOLERANCE[fmt]:
                    raise SystemExit(f"{fmt}: the stream decodes to {extra:+} samples against the stored result")
                first[fmt].append(t_first)
                last[fmt].append(t_last)
                excess[fmt].append(extra)
                print(f"  run {run + 1} {fmt}: first audio {t_first:.3f}s, last byte {t_last:.3f}s, {extra:+} samples", flush=True)
    lines = [
        "Command: `.venv/bin/python -m bench.listening.stream_formats "
        f"--runs {args.runs} --checkpoint {args.checkpoint} --tokens {args.tokens}`",
        f"Date: {started_at}",
        "",
        f"{len(chunks)} chunks per request (MAX_CHUNK_CHARS={MAX_CHUNK_CHARS}, MAX_NEW_TOKEN=MIN_NEW_TOKEN={args.tokens}), "
        f"{args.checkpoint} checkpoint, one worker (CPU_THREADS=1, CACHE_ENABLED=false), one API, one redis-server; "
        "the official OpenAI "
        f"SDK's with_streaming_response, one request at a time; {os.cpu_count()} cores; 1-min load average "
        f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after",
        "",
        "| format | n | first audio s, median (min–max) | last byte s, median | first audio / last byte, median (max) "
        "| decoded − stored samples (min–max) |",
        "|---|---|---|---|---|---|",
    ]
    for fmt in FORMATS:
        ratios = [f / total for f, total in zip(first[fmt], last[fmt], strict=True)]
        lines.append(
            f"| {fmt} | {len(first[fmt])} | {spread(first[fmt])} | "
            f"{statistics.median(last[fmt]):.3f} | {statistics.median(ratios):.2f} ({max(ratios):.2f}) | "
            f"{min(excess[fmt]):+}–{max(excess[fmt]):+} |"
        )
    report = "\n".join(lines) + "\n"
    results.write_text(report)
    print(f"\n{report}(in {results.relative_to(ROOT)}; the processes' logs in {tmp})")


if __name__ == "__main__":
    main()
