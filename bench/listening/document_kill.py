"""A whole Markdown document through two workers, the one reading it killed halfway: done, each part synthesised once
(but those in hand at the kill), progress that only grows, and the memory it takes.

    python -m bench.listening.document_kill [--chars 100000] [--tokens 24]

One redis-server, one API and two workers (``doc-a``, ``doc-b``) on the tiny checkpoint (ttsq's decoder,
``MIN_NEW_TOKEN=MAX_NEW_TOKEN=tokens`` per chunk, so the audio's length is known and the run's time is bounded), workers
logging at INFO. A generated Markdown document of ``chars`` characters (headings, paragraphs, lists, code blocks; seeded,
so every run reads the same) is submitted with ``document: true``. Its status is polled every 0.5 s (``chunks_done``,
``audio_s``: each must never go down), and the resident memory (``VmRSS``) of the API and of both workers is sampled
with it. Once half its parts are done the worker holding it is killed with SIGKILL; the other goes on. Once done, its
result is downloaded as WAV (streamed, counted, not kept) and its captions as JSON.

Counted from the workers' logs (``part N of M synthesised``): the parts each synthesised, and those synthesised twice
(in the killed worker's hands at the kill, at most ``DOCUMENT_PARTS_IN_FLIGHT``). The surviving worker's
``ttsq_document_parts_kept_total`` says how many it did not synthesise again. A measurement, not a test (the tests:
``tests/integration/runtime/test_documents.py``). Writes ``bench/results/document-kill.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import redis
from prometheus_client.parser import text_string_to_metric_families

from bench.listening.worker_kill_gap import job_record, kill_holder
from bench.machine import machine
from bench.stacks import RESULTS, Stack, record, service_env, utc_now
from ttsq.runtime.launch import worker_command

WORKERS = ("doc-a", "doc-b")
WORDS = [
    "river",
    "morning",
    "station",
    "garden",
    "letter",
    "window",
    "winter",
    "market",
    "harbour",
    "engine",
    "lantern",
    "village",
    "meadow",
    "signal",
    "bridge",
    "journey",
    "quiet",
    "bright",
    "early",
    "patient",
    "careful",
    "gentle",
    "narrow",
    "distant",
    "golden",
    "simple",
    "steady",
    "open",
    "ready",
]
PART_LINE = re.compile(r"part (\d+) of (\d+) synthesised")


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(6, 14))]
    return " ".join(words).capitalize() + rng.choice(".!?")


def markdown(chars: int, seed: int = 7) -> str:
    """A document of about ``chars`` characters: sections with a heading, paragraphs, a list, now and then code."""
    rng = random.Random(seed)
    blocks: list[str] = []
    size = 0
    section = 0
    while size < chars:
        section += 1
        blocks.append(f"## Section {section}: {sentence(rng)[:-1]}")
        for _ in range(rng.randint(2, 4)):
            blocks.append(" ".join(sentence(rng) for _ in range(rng.randint(2, 6))))
        blocks.append("\n".join(f"- {sentence(rng)}" for _ in range(rng.randint(2, 4))))
        if section % 5 == 0:
            blocks.append("```python\nprint('this is never read aloud')\n```")
        size = sum(len(block) + 2 for block in blocks)
    return "\n\n".join(blocks)[:chars]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def metric(url: str, name: str) -> float:
    scrape = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(s.value for family in text_string_to_metric_families(scrape) for s in family.samples if s.name == name)


def measure(chars: int, tokens: int) -> dict[str, Any]:
    text = markdown(chars)
    with tempfile.TemporaryDirectory(prefix="document-kill-") as tmp:
        from ttsq.store.local_redis import start_redis_server

        server = start_redis_server(Path(tmp) / "redis")
        env = service_env(
            server.url,
            MODEL="tiny",
            ENGINE_BACKEND="ttsq",
            MAX_BATCH="8",
            MIN_NEW_TOKEN=str(tokens),
            MAX_NEW_TOKEN=str(tokens),
            MAX_DOCUMENT_CHARS=str(max(chars, 200_000)),
            RESULT_TTL_S="7200",
        ) | {"LOG_LEVEL": "INFO"}
        stack = Stack(Path(tmp))
        client = redis.Redis.from_url(server.url)
        try:
            api = stack.start_api("api", env)
            urls = {name: stack.start_worker(name, worker_command(), env, timeout_s=300) for name in WORKERS}
            pids = {name: stack.processes[name].pid for name in ("api", *WORKERS)}
            baseline = {name: rss_mb(pid) for name, pid in pids.items()}
            started = time.monotonic()
            answer = httpx.post(
                f"{api}/v1/tts/submit",
                json={"text": text, "document": True, "text_format": "markdown", "format": "wav", "seed": 3},
                timeout=120,
            )
            answer.raise_for_status()
            task_id = answer.json()["task_id"]
            progress: list[tuple[float, int | None, int | None, float | None, str]] = []
            peaks = dict(baseline)
            killed, killed_at = "", None
            while True:
                status = httpx.get(f"{api}/v1/tts/tasks/{task_id}", timeout=30).json()
                now = time.monotonic() - started
                progress.append((now, status["chunks_done"], status["chunks_total"], status["audio_s"], status["status"]))
                for name, pid in pids.items():
                    if name in stack.processes:
                        peaks[name] = max(peaks[name], rss_mb(pid))
                if status["status"] in ("done", "failed", "cancelled"):
                    break
                done, total = status["chunks_done"] or 0, status["chunks_total"] or 1
                if not killed and done >= total / 2:
                    killed, _ = kill_holder(client, stack, task_id)
                    if killed:
                        killed_at = (now, done, status["audio_s"])
                time.sleep(0.5)
            finished_s = time.monotonic() - started
            result_bytes = 0
            with httpx.stream("GET", f"{api}/v1/tts/result/{task_id}", timeout=600) as body:
                for piece in body.iter_bytes():
                    result_bytes += len(piece)
                    peaks["api"] = max(peaks["api"], rss_mb(pids["api"]))
            cues = httpx.get(f"{api}/v1/tts/result/{task_id}", params={"format": "json"}, timeout=120).json()
            survivor = next(name for name in WORKERS if name != killed)
            kept = metric(urls[survivor], "ttsq_document_parts_kept_total")
            synthesised: dict[str, Counter[int]] = {}
            for name in WORKERS:
                log = (Path(tmp) / f"{name}.log").read_text(errors="replace")
                synthesised[name] = Counter(int(match.group(1)) for match in PART_LINE.finditer(log))
            job = job_record(client, task_id)
        finally:
            stack.close()
            client.close()
            server.stop()
    total = progress[-1][2] or 0
    both = synthesised[WORKERS[0]] + synthesised[WORKERS[1]]
    done_series = [row[1] or 0 for row in progress]
    audio_series = [row[3] or 0.0 for row in progress]
    return {
        "chars": len(text),
        "tokens": tokens,
        "task_status": progress[-1][4],
        "attempts": job.get("attempts"),
        "parts": total,
        "seconds": finished_s,
        "killed": killed,
        "killed_at": killed_at,
        "parts_synthesised": {name: sum(counter.values()) for name, counter in synthesised.items()},
        "parts_synthesised_twice": sorted(part for part, n in both.items() if n > 1),
        "parts_never_synthesised": sorted(set(range(1, total + 1)) - set(both)),
        "parts_kept_by_survivor": kept,
        "progress_monotone": done_series == sorted(done_series) and audio_series == sorted(audio_series),
        "progress_samples": len(progress),
        "audio_s": job.get("duration_s"),
        "result_bytes": result_bytes,
        "cues": len(cues),
        "rss_mb_baseline": baseline,
        "rss_mb_peak": peaks,
        "rss_mb_growth": {name: peaks[name] - baseline[name] for name in baseline},
        "machine": machine(),
    }


def report(data: dict[str, Any], command: str) -> str:
    growth = ", ".join(f"{name} +{value:.0f} MB" for name, value in data["rss_mb_growth"].items())
    kill = data["killed_at"]
    lines = [
        "# A 100,000-character Markdown document, its worker killed halfway",
        "",
        f"{utc_now()}, `{command}`; tiny checkpoint, ttsq's decoder, `MIN_NEW_TOKEN=MAX_NEW_TOKEN={data['tokens']}`, two "
        f"workers, `DOCUMENT_PARTS_IN_FLIGHT` at its default. Machine: {json.dumps(data['machine'])}",
        "",
        "| measure | value |",
        "|---|---|",
        f"| document | {data['chars']:,} characters, {data['parts']} parts |",
        f"| outcome | {data['task_status']} after {data['seconds']:.0f} s, {data['attempts']} attempts, "
        f"{(data['audio_s'] or 0):.0f} s of audio, {data['result_bytes']:,} bytes of WAV streamed, {data['cues']} caption cues |",
        f"| kill | {data['killed']} (SIGKILL) at {kill[0]:.0f} s, {kill[1]} of {data['parts']} parts done, "
        f"{(kill[2] or 0):.0f} s of audio |"
        if kill
        else "| kill | none (the document ended first) |",
        f"| parts synthesised | {json.dumps(data['parts_synthesised'])}; twice: {data['parts_synthesised_twice']} (in the killed "
        f"worker's hands); never: {data['parts_never_synthesised']} |",
        f"| parts the survivor did not synthesise again | {data['parts_kept_by_survivor']:.0f} |",
        f"| progress (`chunks_done`, `audio_s`) only grew | {'yes' if data['progress_monotone'] else 'NO'} "
        f"({data['progress_samples']} polls) |",
        f"| resident memory growth (peak − at start) | {growth} |",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chars", type=int, default=100_000)
    parser.add_argument("--tokens", type=int, default=24, help="MIN_NEW_TOKEN = MAX_NEW_TOKEN: each chunk's length")
    args = parser.parse_args()
    data = measure(args.chars, args.tokens)
    command = f"python -m bench.listening.document_kill --chars {args.chars} --tokens {args.tokens}"
    record(RESULTS / "document-kill.md", report(data, command), data)
    print(report(data, command))


if __name__ == "__main__":
    main()
