"""Cache-hit latency through the HTTP API, beside the cold path and a bare FastAPI endpoint.

One run starts everything on this machine — a redis-server, a tiny-checkpoint worker, two ttsq
APIs (one with L1 on; one with L1 and L3 off, so every hit is an L2 hit) and a bare FastAPI app —
and times the same client sequence against each: POST a request, then GET its audio. Results are
compared as ratios to the bare endpoint in the same run, because these machines are noisy.

    python -m bench.service.cache_latency [--hits 400] [--cold 15]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from bench.stacks import ROOT, record, stop_processes, utc_now
from ttsq.runtime.launch import api_command, free_port, spawn, wait_until_ok, worker_command
from ttsq.store.local_redis import start_redis_server

RESULTS = ROOT / "bench" / "results" / "cache_latency.md"
REQUEST = {"text": "A sentence everybody asks for.", "voice": "zh_female", "format": "wav"}


async def timed(samples: int, once: Callable[[int], Awaitable[None]]) -> list[float]:
    times = []
    for n in range(samples):
        started = time.perf_counter()
        await once(n)
        times.append((time.perf_counter() - started) * 1000)
    return times


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


async def measure(urls: dict[str, str], hits: int, cold: int, audio_bytes: int) -> dict[str, list[float]]:
    async with httpx.AsyncClient(timeout=60) as client:

        def hit(base: str) -> Callable[[int], Awaitable[None]]:
            async def once(_: int) -> None:
                body = (await client.post(f"{base}/v1/tts/submit", json=REQUEST)).json()
                assert body["cached"], body
                response = await client.get(f"{base}/v1/tts/result/{body['task_id']}")
                assert response.status_code == 200 and len(response.content) == audio_bytes

            return once

        async def bare(_: int) -> None:
            await client.post(f"{urls['bare']}/bare/submit", json=REQUEST)
            response = await client.get(f"{urls['bare']}/bare/result")
            assert response.status_code == 200

        async def miss(n: int) -> None:
            body = (await client.post(f"{urls['l1']}/v1/tts/submit", json=REQUEST | {"seed": 10_000 + n})).json()
            while (await client.get(f"{urls['l1']}/v1/tts/result/{body['task_id']}")).status_code != 200:
                await asyncio.sleep(0.01)

        results: dict[str, list[float]] = {}
        for _ in range(2):  # interleave rounds so drift in machine load hits every variant alike
            for name, once in (
                ("bare FastAPI (POST + GET)", bare),
                ("ttsq L1 hit", hit(urls["l1"])),
                ("ttsq L2 hit", hit(urls["l2"])),
            ):
                await timed(20, once)
                results.setdefault(name, []).extend(await timed(hits // 2, once))
        results["ttsq cold (tiny model inference)"] = await timed(cold, miss)
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hits", type=int, default=400)
    parser.add_argument("--cold", type=int, default=15)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ttsq-bench-"))
    redis = start_redis_server(tmp / "redis")
    env = dict(
        os.environ,
        REDIS_URL=redis.url,
        MODEL="tiny",
        CACHE_DIR=str(tmp / "cache"),
        MAX_NEW_TOKEN="48",
        MIN_NEW_TOKEN="48",
        PYTHONUNBUFFERED="1",
        LOG_LEVEL="WARNING",
        BARE_AUDIO_BYTES="0",
        # One loopback client: the fair-use limits would throttle the measurement itself (they still run).
        RATE_LIMIT_PER_S="1000000",
        RATE_LIMIT_BURST="1000000",
        MAX_QUEUED_PER_KEY="100000000",
    )
    ports = {name: free_port() for name in ("l1", "l2", "bare", "worker")}
    processes = [
        spawn(worker_command(), cwd=ROOT, env=env | {"WORKER_HEALTH_PORT": str(ports["worker"])}, log=tmp / "worker.log"),
        spawn(api_command(ports["l1"]), cwd=ROOT, env=env, log=tmp / "api-l1.log"),
        spawn(api_command(ports["l2"]), cwd=ROOT, env=env | {"CACHE_L1_MAX_BYTES": "0", "CACHE_DIR": ""}, log=tmp / "l2.log"),
    ]
    try:
        urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
        for name in ("l1", "l2"):
            wait_until_ok(f"{urls[name]}/readyz", 60)
        wait_until_ok(f"http://127.0.0.1:{ports['worker']}/readyz", 300)
        probe = asyncio.run(measure_audio_size(urls["l1"]))
        bare_env = env | {"BARE_AUDIO_BYTES": str(probe)}
        processes.append(
            spawn(api_command(ports["bare"], app="bench.service.bare_app:app"), cwd=ROOT, env=bare_env, log=tmp / "bare.log")
        )
        wait_until_ok(f"{urls['bare']}/docs", 60)
        results = asyncio.run(measure(urls, args.hits, args.cold, probe))
    finally:
        stop_processes(processes)
        redis.stop()
    bare_p99 = pct(results["bare FastAPI (POST + GET)"], 99)
    lines = [
        f"Command: `.venv/bin/python -m bench.service.cache_latency --hits {args.hits} --cold {args.cold}`",
        f"Date: {utc_now()}",
        "",
        f"sequential client, {args.hits} hits per variant, {probe}-byte WAV result, one machine (2 cores)",
        "",
        "| path | n | p50 ms | p99 ms | p99 / bare p99 |",
        "|---|---|---|---|---|",
    ]
    for name, values in results.items():
        p50, p99 = statistics.median(values), pct(values, 99)
        lines.append(f"| {name} | {len(values)} | {p50:.2f} | {p99:.2f} | {p99 / bare_p99:.2f}× |")
    print("\n".join(lines))
    record(RESULTS, "\n".join(lines) + "\n")


async def measure_audio_size(base: str) -> int:
    """Synthesise the benchmark request once (filling the cache) and return its size."""
    async with httpx.AsyncClient(timeout=60) as client:
        body = (await client.post(f"{base}/v1/tts/submit", json=REQUEST)).json()
        while (response := await client.get(f"{base}/v1/tts/result/{body['task_id']}")).status_code != 200:
            await asyncio.sleep(0.05)
        return len(response.content)


if __name__ == "__main__":
    main()
