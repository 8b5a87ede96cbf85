"""``/healthz`` while a thousand event streams are asked for at once: with the stream caps, and without them.

An event stream (``GET /v1/tts/events/{id}``) lasts as long as its task and polls Redis every half
second; a thousand opened together once pushed the API's ``/healthz`` to seconds. This run starts, on
this machine, a redis-server and one API process per variant (no worker, so every task stays queued
and every stream stays open), and for each variant:

1. probes ``/healthz`` for ``--seconds``, one request every 10 ms, with no streams open (the quiet baseline);
2. starts the storm in a separate process (so its own CPU use is not timed as the API's): it asks for
   ``--streams`` event streams at once, spread over a few queued tasks, with ``AUTH=off`` (so each client
   address is one caller), from one address (one runaway client or script) or from many loopback
   addresses (``127.0.0.2`` on: many clients); refused ones are counted (429: past the caller's share,
   503: past the process's limit) and not retried, accepted ones are held open and read;
3. probes ``/healthz`` from the moment the storm starts until every stream is answered (the opening: a thousand
   requests at once, whatever they ask for), then for ``--seconds`` while the accepted streams are held (each
   polls Redis every half second, so a window of seconds sees every poll): what the caps bound.

Variants: ``uncapped`` (both caps far above the storm: the API as it was before them; many clients), and
the default caps (``MAX_STREAMS=32``, ``MAX_STREAMS_PER_KEY=8``) with one client (its share refuses: 429)
and with many (each within its share; the process's limit refuses: 503). Nothing asserts a timing:
p50/p99 are reported, with each storm's p99 over the same variant's quiet p99 measured in the same run.

    .venv/bin/python -m bench.listening.stream_storm [--streams 1000] [--seconds 10]

writes ``bench/results/stream_storm.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import httpx

from bench.machine import machine
from bench.service.cache_latency import pct
from bench.stacks import ROOT, api_process, record, service_env, utc_now
from ttsq.store.local_redis import start_redis_server

RESULTS = ROOT / "bench" / "results" / "stream_storm.md"
TASKS = 10
"""Queued tasks the streams are spread over (a stream's cost does not depend on how many others watch its task)."""
CLIENTS = 125
"""Loopback addresses the many-client storms come from: 8 streams each, a default share, for 1,000 streams."""
UNCAPPED = {"MAX_STREAMS": "100000", "MAX_STREAMS_PER_KEY": "100000"}
VARIANTS: dict[str, tuple[dict[str, str], int]] = {
    f"uncapped, {CLIENTS} clients": (UNCAPPED, CLIENTS),
    "default caps (32 a process, 8 a caller), 1 client": ({}, 1),
    f"default caps, {CLIENTS} clients": ({}, CLIENTS),
}
"""Name: (the API's settings, client addresses the storm comes from)."""


async def storm(base: str, task_ids: list[str], streams: int, clients: int) -> None:
    """The storm process: ask for ``streams`` event streams at once from ``clients`` loopback addresses, print how they
    were answered (one JSON line), hold the accepted ones open, reading them, until stdin closes."""
    limits = httpx.Limits(max_connections=streams + 10, max_keepalive_connections=0)
    async with contextlib.AsyncExitStack() as stack:
        pool = [
            await stack.enter_async_context(
                httpx.AsyncClient(
                    base_url=base,
                    timeout=None,
                    transport=httpx.AsyncHTTPTransport(limits=limits, local_address=f"127.0.{n // 250}.{2 + n % 250}"),
                )
            )
            for n in range(clients)
        ]
        answered: Counter[int] = Counter()
        done = asyncio.Event()
        released = asyncio.Event()

        async def one(n: int) -> None:
            async with pool[n % clients].stream("GET", f"/v1/tts/events/{task_ids[n % len(task_ids)]}") as response:
                answered[response.status_code] += 1
                if answered.total() == streams:
                    done.set()
                if response.status_code != 200:
                    return
                async for _ in response.aiter_bytes():
                    if released.is_set():
                        return

        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # "go": the measuring process is probing
        running = [asyncio.create_task(one(n)) for n in range(streams)]
        await done.wait()
        print(json.dumps({str(code): count for code, count in sorted(answered.items())}), flush=True)
        await asyncio.to_thread(sys.stdin.read)  # held until the measuring process closes our stdin
        released.set()
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


async def probe(base: str, seconds: float | None = None, until: Callable[[], bool] = lambda: False) -> list[float]:
    """``GET /healthz`` every 10 ms (sequentially: a slow answer delays the next) for ``seconds``, or ``until`` a
    condition holds, each timed in ms."""
    times = []
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        for _ in range(10):  # warm the connection
            await client.get("/healthz")
        end = time.perf_counter() + (seconds if seconds is not None else 3600)
        while (started := time.perf_counter()) < end and not until():
            response = await client.get("/healthz")
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, response.text
            await asyncio.sleep(0.01)
    return times


async def queued_tasks(base: str) -> list[str]:
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        ids = []
        for n in range(TASKS):
            response = await client.post("/v1/tts/submit", json={"text": "A storm of listeners.", "seed": 100 + n, "listen": True})
            assert response.status_code == 202, response.text
            ids.append(response.json()["task_id"])
        return ids


def measure(base: str, streams: int, clients: int, seconds: float) -> dict[str, object]:
    quiet = asyncio.run(probe(base, seconds))
    tasks = asyncio.run(queued_tasks(base))
    storm_args = ["--storm", base, "--streams", str(streams), "--clients", str(clients), *tasks]
    with crowd([sys.executable, "-m", "bench.listening.stream_storm", *storm_args]) as stormer:
        assert stormer.stdout is not None and stormer.stdin is not None
        with concurrent.futures.ThreadPoolExecutor(1) as reader:
            answer = reader.submit(stormer.stdout.readline)
            stormer.stdin.write("go\n")
            stormer.stdin.flush()
            opening = asyncio.run(probe(base, until=answer.done))
            answered = json.loads(answer.result())
        held = asyncio.run(probe(base, seconds))
        stormer.stdin.close()
        stormer.wait(60)
    return {"quiet": quiet, "opening": opening, "held": held, "answered": answered}


@contextlib.contextmanager
def crowd(command: list[str]) -> Iterator[subprocess.Popen[str]]:
    """A client process of the storm kind, once it has said "ready" on its stdout; killed if still running at the end."""
    process = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def cell(times: list[float]) -> str:
    """p50 / p99 of a phase's probes (a phase of one probe has no spread: both are that probe)."""
    return f"{pct(times, 50):.1f} / {pct(times, 99):.1f}" if len(times) > 1 else f"{times[0]:.1f} / {times[0]:.1f}"


def report(results: dict[str, dict[str, object]], streams: int, seconds: float, load: tuple[str, str]) -> str:
    spec = machine()
    lines = [
        f"Command: `.venv/bin/python -m bench.listening.stream_storm --streams {streams} --seconds {seconds:g}`",
        f"Date: {utc_now()}",
        f"Machine: {spec['cpu']}, {spec['cores']} cores, {spec['memory_gib']} GiB; load average {load[0]} at start, "
        f"{load[1]} at end",
        "",
        f"One API process per variant, no worker ({TASKS} queued tasks, every stream stays open); {streams} event streams "
        "asked for at once (AUTH=off: a client address is a caller), refused ones not retried; "
        f"`GET /healthz` every 10 ms: for {seconds:g} s before the storm (quiet), from its start until every stream is "
        f"answered (opening), then for {seconds:g} s while the accepted streams are held (held).",
        "",
        "| variant | streams answered | probes: quiet, opening, held | quiet p50 / p99 ms | opening p50 / p99 ms "
        "| held p50 / p99 ms | held p99 / quiet p99 |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, result in results.items():
        quiet, opening, held = (cast(list[float], result[phase]) for phase in ("quiet", "opening", "held"))
        answered = ", ".join(f"{count}× {code}" for code, count in cast(dict[str, int], result["answered"]).items())
        lines.append(
            f"| {name} | {answered} | {len(quiet)}, {len(opening)}, {len(held)} | {cell(quiet)} | {cell(opening)} "
            f"| {cell(held)} | {pct(held, 99) / pct(quiet, 99):.1f}× |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0, help="how long /healthz is probed, quiet and in the storm")
    parser.add_argument("--clients", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--storm", metavar="BASE_URL", help=argparse.SUPPRESS)  # the storm process (see storm())
    parser.add_argument("task_ids", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.storm:
        asyncio.run(storm(args.storm, args.task_ids, args.streams, args.clients))
        return
    load_start = f"{os.getloadavg()[0]:.2f}"
    tmp = Path(tempfile.mkdtemp(prefix="ttsq-storm-"))
    redis = start_redis_server(tmp / "redis")
    # The throughput benchmark's environment (fair-use limits lifted: the storm's own submits and probes are not what is
    # measured), keys off (a client address is a caller) and a pool that lets the uncapped variant open every stream.
    env = service_env(redis.url, AUTH="off", REDIS_MAX_CONNECTIONS="2000")
    results = {}
    try:
        for n, (name, (caps, clients)) in enumerate(VARIANTS.items()):
            with api_process(env | caps | {"REDIS_NAMESPACE": f"storm{n}"}, tmp / f"api-{n}.log") as (base, _port):
                results[name] = measure(base, args.streams, clients, args.seconds)
    finally:
        redis.stop()
    text = report(results, args.streams, args.seconds, (load_start, f"{os.getloadavg()[0]:.2f}"))
    print(text)
    record(RESULTS, text)


if __name__ == "__main__":
    main()
