"""``make hostile-ssml``: hostile SSML documents against a real API process (uvicorn, a real Redis), with every SSML
limit at the widest the settings allow, and the bodies let through (``MAX_BODY_BYTES`` 2 MB): each document sent
``--rounds`` times, every answer's status and round-trip time, and the API's resident memory before and after each
kind. Targets: every answer a 422, the slowest under 100 ms, the API's memory within 20 MB of its baseline.

    python -m tests.hostile.ssml [--rounds 50] [--output bench/results/hostile-ssml.md]

Exits 1 when a target is missed. (``tests/unit/domain/test_ssml.py`` bounds the reader's allocations for the same documents in
``make test``; this is the process as a caller meets it.)
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from tests.support.redis_server import start_redis_server
from tests.support.service import ROOT, Service
from tests.unit.domain.test_ssml import DEEP, EXTERNAL, LAUGHS, LONG_ATTRIBUTE

SLOWEST_TARGET_MS = 100.0
RSS_GROWTH_TARGET_MB = 20.0
DOCUMENTS = {
    "billion laughs (9 levels of entities)": LAUGHS,
    "external entity (file:///etc/passwd)": EXTERNAL,
    "10,000 elements deep": DEEP,
    "a 1 MB attribute (a 1,000,030-character document)": LONG_ATTRIBUTE,
    "a 999 KB attribute (under MAX_SSML_CHARS)": LONG_ATTRIBUTE[:999_000] + '"/>x</speak>',
}
WIDEST = {
    "MAX_BODY_BYTES": "2000000",
    "MAX_SSML_CHARS": "1000000",
    "MAX_SSML_DEPTH": "1000",
    "MAX_SSML_ELEMENTS": "100000",
    "RATE_LIMIT_PER_S": "1000",
    "RATE_LIMIT_BURST": "100000",
}


def rss_mb(pid: int) -> float:
    return float(psutil.Process(pid).memory_info().rss) / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "hostile-ssml.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        redis = start_redis_server(Path(tmp) / "redis")
        env = {key: value for key, value in os.environ.items() if not key.startswith(("REDIS_", "MODEL"))}
        env.update(REDIS_URL=redis.url, MODEL="tiny", CACHE_DIR=str(Path(tmp) / "cache"), NO_WORKER_S="0", **WIDEST)
        service = Service(redis=redis, tmp=Path(tmp), env=env)
        try:
            url = service.start_api()
            pid = service.named["api"].pid
            rows, ok = run(url, pid, args.rounds)
        finally:
            service.kill_all()
            redis.stop()
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join(
        [
            f"# Hostile SSML against the API ({when})",
            "",
            f"`python -m tests.hostile.ssml --rounds {args.rounds}` (`make hostile-ssml`): one API process (uvicorn, "
            f"a real Redis), every SSML limit at its widest ({', '.join(f'{k}={v}' for k, v in WIDEST.items())}); "
            f"targets: every answer 422, slowest < {SLOWEST_TARGET_MS:g} ms, RSS growth ≤ {RSS_GROWTH_TARGET_MB:g} MB.",
            "",
            "| document | requests | statuses | median (ms) | slowest (ms) | API RSS before → after (MB) |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            f"Targets {'met' if ok else 'MISSED'}.",
            "",
        ]
    )
    args.output.write_text(text, encoding="utf-8")
    print(text)
    return 0 if ok else 1


def run(url: str, pid: int, rounds: int) -> tuple[list[str], bool]:
    rows, ok = [], True
    with httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(5):  # the first requests import and allocate what every request will use
            client.post("/v1/tts/submit", json={"ssml": "<speak><emphasis>x</emphasis></speak>"})
        baseline = rss_mb(pid)
        for name, source in DOCUMENTS.items():
            body = httpx.Request("POST", url, json={"ssml": source}).content
            before, times, statuses = rss_mb(pid), [], set()
            for _ in range(rounds):
                began = time.perf_counter()
                answer = client.post("/v1/tts/submit", content=body, headers={"content-type": "application/json"})
                times.append((time.perf_counter() - began) * 1000)
                statuses.add(answer.status_code)
            after = rss_mb(pid)
            slowest = max(times)
            ok &= statuses == {422} and slowest < SLOWEST_TARGET_MS and after - baseline <= RSS_GROWTH_TARGET_MB
            rows.append(
                f"| {name} | {rounds} | {', '.join(map(str, sorted(statuses)))} | {statistics.median(times):.1f} | "
                f"{slowest:.1f} | {before:.1f} → {after:.1f} |"
            )
    return rows, ok


if __name__ == "__main__":
    sys.exit(main())
