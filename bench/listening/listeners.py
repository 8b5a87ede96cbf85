"""A thousand idle listeners on one API process: what they cost Redis, what they do to ``/healthz``, how fast news reaches them.

"One listener per API process": every event stream, audio stream and long-poll of a process waits on one
stream listener (``ttsq/store/listener.py``) instead of polling or blocking on Redis each on its own. This run starts,
on this machine, a redis-server and one real uvicorn API process (no worker: the benchmark plays the worker through the
queue's own scripts, so nothing else touches Redis), queues ``--tasks`` tasks, and:

1. probes ``/healthz`` for ``--seconds`` with nothing open (at rest), one request every 10 ms;
2. opens ``--listeners`` listeners at once from a separate process (half ``GET /v1/tts/events/{id}``, half
   ``GET /v1/tts/stream/{id}?format=pcm``, spread over the tasks; raw sockets, so the client costs little CPU),
   probing ``/healthz`` until every one is answered (the storm);
3. holds them idle for ``--seconds``: Redis's commands in that window (``INFO commandstats`` deltas, the benchmark's own
   ``INFO`` and ``CLIENT LIST`` left out) and its connections (``CLIENT LIST``, the benchmark's own left out), while
   ``/healthz`` is probed again;
4. starts every task (a claim, as a worker's) and publishes pieces of audio to the tasks' streams, noting the moment
   just before each publication; each listener notes when its bytes arrive (the clocks are the same machine's
   ``CLOCK_MONOTONIC``): publication to first byte, two ways. First a *burst*: one piece to every task back to back,
   every listener served at once (the stress figure). Then *steady*: ``--rate`` pieces a second for ``--steady-s``
   seconds, to the tasks in turn, as workers produce them (the default 200 a second is two pieces a second for each of
   the 100 tasks: 2,000 deliveries a second to the 1,000 listeners held);
5. long-polls ``GET /v1/tts/tasks/{id}?wait=30`` on ``--polls`` more running tasks, ends each (the queue's complete
   script), and times the answer from the moment just before the end was written.

Nothing asserts a timing: the machine is small and shared (2 cores here, other work on them), so the figures that carry
over are the counts (commands, connections) and the ratios (``/healthz`` p99 in the storm over at rest).

    .venv/bin/python -m bench.listening.listeners [--listeners 1000] [--tasks 100] [--seconds 10] [--polls 20]

writes ``bench/results/listeners.md`` (``--results`` elsewhere: e.g. a control run with ``GC_FULL_COLLECTION_S=0``,
CPython's own collector, in the environment, which the API inherits).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import httpx
import uvloop
from redis.asyncio import Redis

from bench.listening.stream_storm import cell, crowd, probe
from bench.machine import machine
from bench.service.cache_latency import pct
from bench.stacks import ROOT, api_process, record, service_env, utc_now
from settings import Settings
from ttsq.store.local_redis import start_redis_server
from ttsq.store.queue import JobQueue
from ttsq.store.streams import AudioStreams

RESULTS = ROOT / "bench" / "results" / "listeners.md"
OWN_COMMANDS = {"cmdstat_info", "cmdstat_client|list"}
PIECE = b"\0\0" * 2400
"""One piece: 0.1 s of PCM16 at 24 kHz."""
"""What the benchmark itself sends while it counts."""


# ---- the listeners' process ---------------------------------------------------------------------------------------


class _Listener(asyncio.Protocol):
    """One listener over a raw socket: the status code of its answer, then the moment of every read that brought bytes,
    taken in ``data_received`` itself (no task or future between the socket and the clock)."""

    def __init__(self, path: str, arrivals: list[float], answered: list[int]) -> None:
        self.request = f"GET {path} HTTP/1.1\r\nHost: bench\r\nAccept: */*\r\n\r\n".encode()
        self.arrivals, self.answered = arrivals, answered
        self.head: bytes | None = b""
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast(asyncio.WriteTransport, transport).write(self.request)  # uvloop's transports are not asyncio's classes

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        if self.head is not None:  # still in the answer's head
            self.head += data
            if b"\r\n\r\n" not in self.head:
                return
            self.answered.append(int(self.head.split(b" ", 2)[1]))
            rest = self.head.partition(b"\r\n\r\n")[2]
            self.head = None
            if not rest:
                return
        self.arrivals.append(now)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


async def _listen(port: int, path: str, arrivals: list[float], answered: list[int]) -> None:
    loop = asyncio.get_running_loop()
    transport, listener = await loop.create_connection(lambda: _Listener(path, arrivals, answered), "127.0.0.1", port)
    try:
        await listener.closed
    finally:
        transport.close()


async def listeners(port: int, task_ids: list[str], count: int) -> None:
    """Open ``count`` listeners at once (after "go" on stdin), print how they were answered, hold them until stdin closes,
    then print every listener's arrival times (one JSON line)."""
    arrivals: list[list[float]] = [[] for _ in range(count)]
    answered: list[int] = []
    paths = [
        f"/v1/tts/events/{task}" if n % 2 == 0 else f"/v1/tts/stream/{task}?format=pcm"
        for n, task in ((n, task_ids[n % len(task_ids)]) for n in range(count))
    ]
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    running = [asyncio.create_task(_listen(port, paths[n], arrivals[n], answered)) for n in range(count)]
    while len(answered) < count:
        await asyncio.sleep(0.01)
    print(json.dumps({str(code): answered.count(code) for code in sorted(set(answered))}), flush=True)
    await asyncio.to_thread(sys.stdin.read)
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    print(json.dumps({"arrivals": arrivals}), flush=True)


# ---- the measuring process ----------------------------------------------------------------------------------------


async def submit(base: str, count: int, seed: int) -> list[str]:
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        ids = []
        for n in range(count):
            response = await client.post("/v1/tts/submit", json={"text": "Listening at scale.", "seed": seed + n, "listen": True})
            assert response.status_code == 202, response.text
            ids.append(response.json()["task_id"])
        return ids


async def redis_counts(redis: Redis) -> tuple[int, list[dict[str, Any]]]:
    """Commands Redis has run (but the benchmark's own counting) and the clients connected now (but this one)."""
    stats: Any = await redis.info("commandstats")
    calls = sum(int(value["calls"]) for name, value in stats.items() if f"cmdstat_{name}" not in OWN_COMMANDS)
    clients: Any = await redis.client_list()
    me = await redis.client_id()
    return calls, [client for client in clients if int(client["id"]) != me]


async def idle_window(base: str, redis: Redis, seconds: float) -> dict[str, Any]:
    """``/healthz`` probed for ``seconds`` while Redis's commands and connections are counted over the same window."""
    before, _ = await redis_counts(redis)
    held = await probe(base, seconds)
    after, clients = await redis_counts(redis)
    used = [client for client in clients if int(client["idle"]) < seconds]
    return {
        "held": held,
        "commands": after - before,
        "connections": len(clients),
        "used": len(used),
        "blocked": sum(1 for client in used if client["cmd"] == "xread"),
    }


async def settled(base: str, listeners: int) -> None:
    """Until the API reports every listener subscribed (``ttsq_listener_subscriptions``), and a moment more: the storm's
    own start-up commands (each listener's first reads) are over before anything is counted."""
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        while f"ttsq_listener_subscriptions {float(listeners)}" not in (await client.get("/metrics")).text:
            await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)


async def publish_all(
    redis: Redis, settings: Settings, task_ids: list[str], rate: float, seconds: float
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Start every task (as a worker's claim), let the listeners settle, then publish pieces two ways, noting the moment
    just before each publication, by task id:

    - the burst: one piece to each task, back to back (every listener gets a piece at once: the stress figure);
    - steady: ``rate`` pieces a second for ``seconds``, to the tasks in turn, evenly spaced (as workers produce them:
      each task's next piece comes ``len(task_ids) / rate`` seconds after its last).
    """
    queue = JobQueue(redis, settings.queue_config())
    streams = AudioStreams(redis, queue.shards, settings.result_ttl_s)
    held = {claim.job.id: claim.job for claim in await queue.leases.claim_more("bench-worker", len(task_ids))}
    assert set(held) == set(task_ids), "the listened tasks were queued first, and one tenant's queue is first in, first out"
    total = 2 + int(rate * seconds / len(task_ids)) + 1

    async def publish(task: str, index: int) -> float:
        job = held[task]
        assert job.claim is not None
        moment = time.monotonic()
        assert await streams.publish(task, job.claim, index, total, PIECE, spoken=(0, 2400, "Listening at scale."))
        return moment

    await asyncio.sleep(2.0)  # the "running" events reach the listeners; what is timed next is the pieces alone
    burst = {task: await publish(task, 0) for task in task_ids}
    await asyncio.sleep(2.0)  # every listener has had its piece
    steady: dict[str, list[float]] = {task: [] for task in task_ids}
    start = time.monotonic()
    for n in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, start + n / rate - time.monotonic()))
        task = task_ids[n % len(task_ids)]
        steady[task].append(await publish(task, 1 + n // len(task_ids)))
    return burst, steady


async def long_polls(base: str, redis: Redis, settings: Settings, task_ids: list[str]) -> list[float]:
    """Long-poll each task, end it, and time the answer from just before the end was written (ms)."""
    queue = JobQueue(redis, settings.queue_config())
    held = {claim.job.id: claim.job for claim in await queue.leases.claim_more("bench-poller", len(task_ids))}
    latencies = []
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        for task in task_ids:
            waiting = asyncio.create_task(client.get(f"/v1/tts/tasks/{task}", params={"wait": 30}))
            await asyncio.sleep(0.5)  # the long-poll is subscribed
            ended = time.monotonic()
            await queue.leases.complete(held[task], b"RIFF", "audio/wav", 0.1, 0.1, cache_key=None)
            response = await waiting
            latencies.append((time.monotonic() - ended) * 1000)
            assert response.json()["status"] == "done", response.text
    return latencies


def first_byte_latencies(arrivals: list[list[float]], task_ids: list[str], published: dict[str, list[float]]) -> list[float]:
    """For each listener and each publication to its task, ms from the publication to the first bytes after it (and
    before the task's next publication)."""
    latencies = []
    for n, times in enumerate(arrivals):
        moments = published[task_ids[n % len(task_ids)]]
        for k, moment in enumerate(moments):
            until = moments[k + 1] if k + 1 < len(moments) else float("inf")
            after = [t for t in times if moment <= t < until]
            if after:
                latencies.append((after[0] - moment) * 1000)
    return latencies


def measure(base: str, port: int, settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    async def setup() -> tuple[list[str], list[str]]:
        return await submit(base, args.tasks, 100), await submit(base, args.polls, 10_000)

    tasks, polled = asyncio.run(setup())
    rest = asyncio.run(probe(base, args.seconds))
    command = [sys.executable, "-m", "bench.listening.listeners", "--listen", str(port), "--listeners", str(args.listeners), *tasks]
    with crowd(command) as listening:
        assert listening.stdout is not None and listening.stdin is not None
        with concurrent.futures.ThreadPoolExecutor(2) as helpers:
            answer = helpers.submit(listening.stdout.readline)
            listening.stdin.write("go\n")
            listening.stdin.flush()
            # The storm: from the first request until every listener is answered and subscribed.
            subscribed = helpers.submit(asyncio.run, settled(base, args.listeners))
            storm = asyncio.run(probe(base, until=lambda: answer.done() and subscribed.done()))
            answered = json.loads(answer.result())
            subscribed.result()

        async def held_phase() -> tuple[dict[str, Any], tuple[dict[str, float], dict[str, list[float]]], list[float]]:
            client = Redis.from_url(settings.redis_url)
            try:
                idle = await idle_window(base, client, args.seconds)
                published = await publish_all(client, settings, tasks, args.rate, args.steady_s)
                await asyncio.sleep(2.0)  # every listener has had its last piece
                polls = await long_polls(base, client, settings, polled)
                return idle, published, polls
            finally:
                await client.aclose()

        idle, published, polls = asyncio.run(held_phase())
        listening.stdin.close()
        arrivals = json.loads(listening.stdout.readline())["arrivals"]
        listening.wait(60)
    return {
        "rest": rest,
        "storm": storm,
        "answered": answered,
        **idle,
        "first_byte": first_byte_latencies(arrivals, tasks, {task: [moment] for task, moment in published[0].items()}),
        "steady": first_byte_latencies(arrivals, tasks, published[1]),
        "polls": polls,
    }


def q(times: list[float], percent: int) -> float:
    """A percentile that also takes one figure (a short phase may hold a single probe)."""
    return pct(times, percent) if len(times) > 1 else times[0]


def report(result: dict[str, Any], args: argparse.Namespace, load: tuple[str, str]) -> str:
    spec = machine()
    collector = os.environ.get("GC_FULL_COLLECTION_S", "60 (default)")  # the API inherits this process's environment
    rest, storm, held = result["rest"], result["storm"], result["held"]
    first, steady, polls = result["first_byte"], result["steady"], result["polls"]
    answered = ", ".join(f"{count}× {code}" for code, count in result["answered"].items())
    lines = [
        f"Command: `.venv/bin/python -m bench.listening.listeners --listeners {args.listeners} --tasks {args.tasks} "
        f"--seconds {args.seconds:g} --polls {args.polls} --rate {args.rate:g} --steady-s {args.steady_s:g}`",
        f"Date: {utc_now()}",
        f"Machine: {spec['cpu']}, {spec['cores']} cores, {spec['memory_gib']} GiB; load average {load[0]} at start, "
        f"{load[1]} at end (shared with other work: read the counts and ratios, not the milliseconds)",
        "",
        f"One uvicorn API process (`REDIS_MAX_CONNECTIONS=8`, `GC_FULL_COLLECTION_S={collector}`), one redis-server, "
        f"no worker; {args.listeners} listeners "
        f"opened at once (half event streams, half PCM audio streams) over {args.tasks} queued tasks: {answered}.",
        "",
        "| measure | figure | issue 21's target | before (issue 21's figures for the per-client path) |",
        "|---|---|---|---|",
        f"| Redis commands in {args.seconds:g} s, {args.listeners} idle listeners | {result['commands']} | ≤ 50 | ~20,000 |",
        f"| Redis connections used in those {args.seconds:g} s (of which blocked in the listener's `XREAD`) | "
        f"{result['used']} ({result['blocked']}) | ≤ 10 | one per audio stream |",
        f"| Redis connections open, idle ones included (the API's pool keeps what the storm's opening needed) | "
        f"{result['connections']} | | |",
        f"| `/healthz` p50 / p99 ms at rest ({len(rest)} probes) | {cell(rest)} | | |",
        f"| `/healthz` p50 / p99 ms in the storm ({len(storm)} probes; slowest {max(storm):.1f} ms) | {cell(storm)} | | "
        "600–7,000 ms |",
        f"| `/healthz` p50 / p99 ms with the listeners held ({len(held)} probes) | {cell(held)} | | |",
        f"| `/healthz` p99 storm / at rest | {q(storm, 99) / q(rest, 99):.1f}× | ≤ 2× | |",
        f"| `/healthz` p99 held / at rest | {q(held, 99) / q(rest, 99):.1f}× | ≤ 2× | |",
        f"| publication → first byte, steady: {args.rate:g} pieces/s to the tasks in turn for {args.steady_s:g} s, "
        f"p50 / p99 / max ms ({len(steady)} deliveries) | {q(steady, 50):.1f} / {q(steady, 99):.1f} / {max(steady):.1f} "
        "| p99 ≤ 50 | |",
        f"| publication → first byte, burst: one piece to every task back to back, p50 / p99 / max ms ({len(first)} "
        f"listeners) | {q(first, 50):.1f} / {q(first, 99):.1f} / {max(first):.1f} | (stress) | |",
        f"| long-poll answer after the task ends, p50 / p99 / max ms ({len(polls)} polls, listeners held) | "
        f"{q(polls, 50):.1f} / {q(polls, 99):.1f} / {max(polls):.1f} | ≤ 50 | |",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listeners", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=100, help="queued tasks the listeners are spread over")
    parser.add_argument("--seconds", type=float, default=10.0, help="each probing window, and the idle count's window")
    parser.add_argument("--polls", type=int, default=20, help="long-polls timed after the listeners' figures")
    parser.add_argument("--rate", type=float, default=200.0, help="steady phase: pieces published a second")
    parser.add_argument("--steady-s", type=float, default=10.0, help="steady phase: for how long")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the report is written")
    parser.add_argument("--listen", type=int, metavar="PORT", help=argparse.SUPPRESS)  # the listeners' process
    parser.add_argument("task_ids", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.listen:
        uvloop.run(listeners(args.listen, args.task_ids, args.listeners))  # the API's own loop: the client costs little
        return
    load_start = f"{os.getloadavg()[0]:.2f}"
    tmp = Path(tempfile.mkdtemp(prefix="ttsq-listeners-"))
    redis = start_redis_server(tmp / "redis")
    caps = str(args.listeners * 2 + 100)
    env = service_env(redis.url, AUTH="off", MAX_STREAMS=caps, MAX_STREAMS_PER_KEY=caps, REDIS_MAX_CONNECTIONS="8")
    settings = Settings(redis_url=redis.url, _env_file=None)  # the API's queue names and TTLs
    try:
        with api_process(env, tmp / "api.log") as (base, port):
            result = measure(base, port, settings, args)
    finally:
        redis.stop()
    text = report(result, args, (load_start, f"{os.getloadavg()[0]:.2f}"))
    print(text)
    record(args.results, text)


if __name__ == "__main__":
    main()
