"""The GPU benchmark's service phases: the whole service under closed-loop clients, per ``MAX_BATCH``.

    python -m bench.gpu.e2e --model DIR --device cuda --tokens 256 --max-batches auto,8,1 --clients 64,256 \\
        --window-s 30 --drain-s 15 --budget-s 250 --out e2e.json [--compile] [--engine-backend ttsq|chattts|auto]

Run by :mod:`bench.gpu` in its own process group (its ``e2e`` and ``compile`` phases); it can be run
by hand too. Each ``MAX_BATCH`` setting gets its own stack: a ``redis-server``
(:func:`ttsq.store.local_redis.start_redis_server`), ``uvicorn app:app`` and one ``python worker.py``,
started the way ``make up`` starts them (:mod:`ttsq.runtime.launch`) and configured only through
their environment: ``MODEL``, ``DEVICE``, ``MAX_BATCH``, ``MIN_NEW_TOKEN = MAX_NEW_TOKEN``, cache and
single-flight off, normalization off, ``COMPILE``, ``ENGINE_BACKEND`` (``--engine-backend``: ``ttsq``
with ``CUDA_GRAPHS=true`` by default, ``chattts`` with ``--compile``, which compiles ChatTTS's loop).
On CUDA a ``MAX_BATCH=auto`` stack starts alone (its worker measures the GPU at start, which other
workers loading at the same time would disturb); the fixed settings start together and are
measured one after the other.

Per stack and client count, one window: ``clients`` closed-loop clients (submit, poll every 100 ms,
download: :func:`bench.service.closed_loop.ttsq_job`), spread over client processes (64 clients each) so
the load generator is never the bottleneck. No job starts after ``window_s``; jobs still running
``drain_s`` later are abandoned and not counted. jobs/s = completed / (last completion - start).
With ``--min-jobs N`` (a dry run on CPU: 1) each client also completes N jobs whatever the clock
says — it starts them after the window if need be and they are never abandoned — so a slow or
busy CPU makes a window longer, never empty: the dry run checks the benchmark's plumbing, and a
window of a few seconds on a shared 2-core machine may see no job through otherwise.
The worker's ``/metrics`` is scraped before and after: ``ttsq_batch_size_sum``/``_count`` give the
mean batch actually formed (rows per engine step), ``ttsq_real_time_factor_count`` the jobs done
(audio seconds per job from it), ``ttsq_batch_limit`` the batch limit the worker chose,
``ttsq_compile_recompiles_total`` (where the worker exports it) the graphs compiled while serving.
A window that leaves jobs behind gets a fresh worker and an empty Redis before the next one.

The JSON file is rewritten after every window and every stack start, so a cut-off run keeps what
it measured. Windows carry the monotonic clock at their start and end for the caller's GPU sampler.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import math
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import ROOT
from bench.engine.raw_batch import TEXTS
from bench.gpu.engine import VOICE, Recorder
from bench.interrupt import Interrupted, on_stop_signals, restore
from bench.service.closed_loop import JobError, percentile, ttsq_job
from ttsq.runtime.launch import ProcessExited, api_command, free_port, spawn, wait_until_ok, worker_command
from ttsq.store.local_redis import RedisServer, start_redis_server

CLIENTS_PER_PROCESS = 64
RECOMPILE_METRICS = ("ttsq_compile_recompiles_total", "ttsq_compile_recompiles")
"""The worker's count of graphs compiled after start-up (a counter, or a gauge without ``_total``)."""
SHUTDOWN_GRACE_S = 5


def log(message: str) -> None:
    print(f"[bench.gpu.e2e {time.strftime('%H:%M:%S')}] {message}", flush=True)


def request_body(n: int) -> dict[str, Any]:
    """As :func:`bench.service.throughput.request_body`: one voice (so the worker may batch), a fresh seed, one of four texts."""
    return {"text": TEXTS[n % len(TEXTS)], "voice": VOICE, "seed": n + 1, "format": "wav"}


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text as ``{sample name: value summed over its label sets}``."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + float(sample.value)
    return values


def recompiles(metrics: dict[str, float]) -> float | None:
    for name in RECOMPILE_METRICS:
        if name in metrics:
            return metrics[name]
    return None


def scrape(url: str) -> dict[str, float]:
    response = httpx.get(f"{url}/metrics", timeout=10.0)
    response.raise_for_status()
    return parse_metrics(response.text)


# ---- closed-loop clients, in client processes -------------------------------------------------


@dataclass
class ShardResult:
    done_at: list[float] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    error_count: int = 0
    abandoned: int = 0


def _ready() -> bool:
    """Run once in every client process, so its imports are paid before the first window."""
    return True


def client_shard(
    base: str, clients: int, start: float, window_s: float, drain_s: float, first: int, stride: int, min_jobs: int = 0
) -> ShardResult:
    """``clients`` closed-loop clients from ``start`` (``time.monotonic``, system-wide) for ``window_s``,
    each completing at least ``min_jobs`` jobs however long they take."""
    return asyncio.run(_shard(base, clients, start, window_s, drain_s, first, stride, min_jobs))


async def _shard(
    base: str, clients: int, start: float, window_s: float, drain_s: float, first: int, stride: int, min_jobs: int
) -> ShardResult:
    result = ShardResult()
    tickets = iter(range(first, 1 << 40, stride))
    limits = httpx.Limits(max_connections=clients + 8, max_keepalive_connections=clients + 8)
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=10.0), limits=limits) as client:
        job = ttsq_job(client, base, request_body)
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        deadline, hard_end = start + window_s, start + window_s + drain_s

        async def one_client() -> None:
            done = 0
            while (time.monotonic() < deadline or done < min_jobs) and result.error_count < 50:
                began = time.monotonic()
                owed = done < min_jobs  # one of the client's minimum: never abandoned at the drain cap
                try:
                    async with asyncio.timeout(None if owed else hard_end - began):
                        await job(next(tickets))
                except TimeoutError:
                    result.abandoned += 1
                    return
                except (JobError, httpx.HTTPError, KeyError, ValueError) as exc:
                    result.error_count += 1
                    if len(result.errors) < 5:
                        result.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                    await asyncio.sleep(0.1)  # a failing service must not be hammered in a hot loop
                    continue
                finished = time.monotonic()
                done += 1
                result.done_at.append(finished)
                result.latencies_s.append(finished - began)

        await asyncio.gather(*(one_client() for _ in range(clients)))
    return result


# ---- one stack: redis-server + API + worker ---------------------------------------------------


@dataclass
class Stack:
    max_batch: str
    compile: bool
    tmp: Path
    base_env: dict[str, str]
    redis: RedisServer | None = None
    api: subprocess.Popen[bytes] | None = None
    worker: subprocess.Popen[bytes] | None = None
    api_port: int = 0
    health_port: int = 0
    worker_started: float = 0.0
    record: dict[str, Any] = field(default_factory=dict)
    starts: int = 0

    @property
    def name(self) -> str:
        return f"MAX_BATCH={self.max_batch}{', COMPILE=true' if self.compile else ''}"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.health_port}"

    def env(self) -> dict[str, str]:
        return self.base_env | {
            "REDIS_URL": self.redis.url if self.redis else "",
            "MAX_BATCH": self.max_batch,
            "COMPILE": "true" if self.compile else "false",
            "WORKER_ID": f"bench-gpu-{self.max_batch}{'-compile' if self.compile else ''}",
            "WORKER_HEALTH_PORT": str(self.health_port),
        }

    def start(self) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.redis = start_redis_server(self.tmp / "redis")
        self.api_port, self.health_port = free_port(), free_port()
        self.api = spawn(api_command(self.api_port), cwd=ROOT, env=self.env(), log=self.tmp / "api.log")
        self.start_worker()

    def start_worker(self) -> None:
        self.starts += 1
        self.worker_started = time.monotonic()
        self.worker = spawn(worker_command(), cwd=ROOT, env=self.env(), log=self.tmp / "worker.log")

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds from the worker's start to its ``/readyz`` (the API's too); raises with the logs on failure."""
        assert self.worker is not None and self.api is not None
        try:
            wait_until_ok(f"{self.health_url}/readyz", max(1.0, timeout_s), [self.worker])
            ready_s = time.monotonic() - self.worker_started
            wait_until_ok(f"{self.api_url}/readyz", max(5.0, timeout_s - ready_s), [self.api])
        except ProcessExited as exc:
            raise RuntimeError(f"{self.name}: {exc}\n{self.log_tail()}") from None
        except TimeoutError:
            waited = time.monotonic() - self.worker_started
            raise RuntimeError(f"{self.name}: not ready within {waited:.0f}s\n{self.log_tail()}") from None
        return ready_s

    def stop_worker(self) -> None:
        if self.worker is not None:
            _stop(self.worker, SHUTDOWN_GRACE_S + 5)
            self.worker = None

    def flush(self) -> None:
        import redis as redis_sync

        if self.redis is not None:
            client = redis_sync.Redis.from_url(self.redis.url)
            try:
                client.flushdb()
            finally:
                client.close()

    def stop(self) -> None:
        self.stop_worker()
        if self.api is not None:
            _stop(self.api, 5)
            self.api = None
        if self.redis is not None:
            self.redis.stop()
            self.redis = None

    def log_tail(self, lines: int = 30) -> str:
        out = []
        for role in ("worker", "api"):
            path = self.tmp / f"{role}.log"
            text = path.read_text(errors="replace").splitlines() if path.exists() else []
            kept = [line for line in text if "hit max_new_token" not in line]
            dropped = len(text) - len(kept)
            note = f"; {dropped} 'hit max_new_token' lines left out" if dropped else ""
            out.append(f"--- {self.name} {role}.log (last {lines} lines{note})\n" + "\n".join(kept[-lines:]))
        return "\n".join(out)


def _stop(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; then the rest of its process group (spawn() gave it its own)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    with contextlib.suppress(ProcessLookupError, PermissionError):  # what it started (torch.compile's workers) goes too
        os.killpg(process.pid, signal.SIGKILL)


# ---- the phase -----------------------------------------------------------------------------------


def groups(max_batches: Sequence[str], device: str) -> list[list[str]]:
    """Stacks started together, in order: on CUDA an ``auto`` one alone (it measures the GPU while it starts)."""
    cuda = device.startswith("cuda")
    out: list[list[str]] = []
    for value in max_batches:
        alone = cuda and value == "auto"
        if not out or alone or (cuda and out[-1] == ["auto"]):
            out.append([value])
        else:
            out[-1].append(value)
    return out


def window_summary(
    stack: Stack, clients: int, window_s: float, drain_s: float, start: float, shards: list[ShardResult]
) -> dict[str, Any]:
    done_at = sorted(t for shard in shards for t in shard.done_at)
    latencies = [x for shard in shards for x in shard.latencies_s]
    deadline = start + window_s
    res: dict[str, Any] = {
        "max_batch": stack.max_batch,
        "compile": stack.compile,
        "clients": clients,
        "window_s": round(window_s, 1),
        "drain_cap_s": drain_s,
        "completed": len(done_at),
        "completed_in_window": sum(1 for t in done_at if t <= deadline),
        "abandoned_at_drain_cap": sum(shard.abandoned for shard in shards),
        "errors": sum(shard.error_count for shard in shards),
        "error_samples": [e for shard in shards for e in shard.errors][:5],
        "client_processes": len(shards),
        "jobs_per_s": None,
    }
    if done_at:
        busy = done_at[-1] - start
        in_window = [start, *(t for t in done_at if t <= deadline), deadline]
        res.update(
            busy_s=round(busy, 2),
            jobs_per_s=round(len(done_at) / busy, 3),
            jobs_per_s_in_window=round(res["completed_in_window"] / window_s, 3) if window_s > 0 else None,
            p50_s=round(statistics.median(latencies), 2),
            p99_s=round(percentile(latencies, 99), 2),
            max_s=round(max(latencies), 2),
            max_gap_s=round(max(b - a for a, b in itertools.pairwise(in_window)), 2),
        )
    return res


def _whole(value: float | None) -> int | float | None:
    """A gauge's value as an int when it is one (Prometheus sends every number as a float)."""
    return int(value) if value is not None and value == int(value) else value


def _metric_deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    # ttsq_batch_size counts rows per engine step (one decode step of ttsq's decoder, one grouped call of ChatTTS's
    # loop), so jobs come from a per-job metric instead: the real-time factor is observed once per job done.
    rows, steps = delta("ttsq_batch_size_sum"), delta("ttsq_batch_size_count")
    jobs = delta("ttsq_real_time_factor_count")
    audio = delta("ttsq_audio_seconds_total")
    rec_before, rec_after = recompiles(before), recompiles(after)
    return {
        "worker_jobs": int(jobs),
        "worker_steps": int(steps),
        "mean_batch": round(rows / steps, 2) if steps else None,
        "audio_s_per_job": round(audio / jobs, 3) if jobs else None,
        "batch_limit": _whole(after.get("ttsq_batch_limit")),
        "oom_splits": int(delta("ttsq_oom_splits_total")),
        "recompiles_before": rec_before,
        "recompiles_during": None if rec_after is None else rec_after - (rec_before or 0.0),
    }


def _settle(stack: Stack, timeout_s: float) -> bool:
    """Whether the stack is idle (nothing queued, claimed or waiting to retry) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            api = scrape(stack.api_url)
            worker = scrape(stack.health_url)
            busy = sum(api.get(name, 0.0) for name in ("ttsq_queue_depth", "ttsq_jobs_processing", "ttsq_jobs_retry_waiting"))
            if busy == 0 and worker.get("ttsq_jobs_in_flight", 0.0) == 0:
                return True
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.25)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="The service end to end under closed-loop clients (the GPU benchmark's e2e phase)."
    )
    parser.add_argument("--model", required=True, help="checkpoint directory (MODEL)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--max-batches", default="auto,8,1", help="MAX_BATCH values, in the order they are measured")
    parser.add_argument("--clients", default="64,256")
    parser.add_argument("--window-s", type=float, default=30.0)
    parser.add_argument("--drain-s", type=float, default=12.0)
    parser.add_argument("--settle-s", type=float, default=10.0, help="after a window, wait this long for the worker to go idle")
    parser.add_argument("--ready-timeout-s", type=float, default=300.0)
    parser.add_argument("--budget-s", type=float, default=1e9)
    parser.add_argument(
        "--min-jobs", type=int, default=0, help="jobs each client completes whatever the window (a dry run: 1; a GPU run: 0)"
    )
    parser.add_argument("--compile", action="store_true", help="COMPILE=true for every stack")
    parser.add_argument(
        "--engine-backend",
        choices=("ttsq", "chattts", "auto"),
        help="the workers' ENGINE_BACKEND (default: ttsq, with CUDA_GRAPHS=true; chattts with --compile)",
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tmp", type=Path, help="process logs and Redis files (default: next to --out)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    end = started + args.budget_s
    max_batches = [b.strip() for b in args.max_batches.split(",") if b.strip()]
    clients_list = sorted({int(c) for c in args.clients.split(",") if c.strip()})
    tmp = args.tmp or args.out.parent / f"{args.out.stem}-processes"
    backend = args.engine_backend or ("chattts" if args.compile else "ttsq")
    base_env = dict(
        os.environ,
        MODEL=args.model,
        DEVICE=args.device,
        MAX_NEW_TOKEN=str(args.tokens),
        MIN_NEW_TOKEN=str(args.tokens),
        CACHE_ENABLED="false",
        SINGLE_FLIGHT="false",
        CACHE_DIR="",
        CACHE_L1_MAX_BYTES="0",
        NORMALIZE_TEXT="false",
        MAX_QUEUE_DEPTH="100000000",
        # Every client is one loopback address: fair-use limits meant for the public would throttle the load itself.
        RATE_LIMIT_PER_S="1000000",
        RATE_LIMIT_BURST="1000000",
        MAX_QUEUED_PER_KEY="100000000",
        TASK_ID_SECRET="bench-gpu-secret-0123456789abcdef",
        LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
        SHUTDOWN_GRACE_S=str(SHUTDOWN_GRACE_S),
        ENGINE_BACKEND=backend,
        CUDA_GRAPHS="true",  # what ENGINE_BACKEND=ttsq serves with on CUDA (the decoder phase measures the same)
    )
    rec = Recorder(
        args.out,
        {
            "compile": args.compile,
            "engine_backend": backend,
            "device": args.device,
            "tokens_per_job": args.tokens,
            "max_batches": max_batches,
            "clients": clients_list,
            "stacks": [],
            "windows": [],
            "skipped": [],
            "complete": False,
        },
    )
    previous = on_stop_signals()
    shards_max = max(1, math.ceil(max(clients_list) / CLIENTS_PER_PROCESS))
    pool = ProcessPoolExecutor(max_workers=shards_max, mp_context=multiprocessing.get_context("spawn"))
    stacks: list[Stack] = []
    try:
        for future in [pool.submit(_ready) for _ in range(shards_max)]:
            future.result(timeout=120)
        for group in groups(max_batches, args.device):
            need = args.window_s + args.drain_s + 10
            if end - time.monotonic() < need + 20:
                for value in group:
                    rec.data["skipped"].append({"max_batch": value, "reason": f"{end - time.monotonic():.0f}s left"})
                log(f"no time left for MAX_BATCH={','.join(group)}")
                continue
            stacks = [
                Stack(value, args.compile, tmp / f"b{value}{'-compile' if args.compile else ''}", base_env) for value in group
            ]
            run_group(stacks, clients_list, args, end, pool, rec)
            stacks = []
        rec.data["complete"] = True
    except Interrupted as exc:
        rec.data["error"] = f"interrupted ({exc}) after {time.monotonic() - started:.0f}s"
        log(rec.data["error"])
    except Exception as exc:
        rec.data["error"] = f"{type(exc).__name__}: {exc}"[:4000]
        log(f"FAILED: {rec.data['error']}")
        raise
    finally:
        on_stop_signals(signal.SIG_IGN)  # the cleanup must not be interrupted in turn
        rec.data["total_s"] = round(time.monotonic() - started, 1)
        rec.save()  # first: a caller out of patience SIGKILLs while the stacks stop
        stop_all(stacks)
        pool.shutdown(wait=bool(rec.data["complete"]), cancel_futures=True)  # interrupted: the caller ends them
        restore(previous)
    return 0


def stop_all(stacks: Sequence[Stack]) -> None:
    """Stop several stacks at once: every worker and API is asked to stop before any is waited for."""
    for stack in stacks:
        for process in (stack.worker, stack.api):
            if process is not None and process.poll() is None:
                process.terminate()
    for stack in stacks:
        stack.stop()


def run_group(
    stacks: list[Stack], clients_list: list[int], args: argparse.Namespace, end: float, pool: ProcessPoolExecutor, rec: Recorder
) -> None:
    """Start ``stacks`` together, then measure their windows one at a time."""
    for stack in stacks:
        stack.record = {"max_batch": stack.max_batch, "compile": stack.compile}
        rec.data["stacks"].append(stack.record)
        stack.start()
    log(f"started {', '.join(s.name for s in stacks)}; waiting for readiness")
    rec.save()
    for stack in stacks:
        timeout = min(args.ready_timeout_s, end - time.monotonic() - (args.window_s + args.drain_s + 5))
        try:
            stack.record["ready_s"] = round(stack.wait_ready(timeout), 1)
            metrics = scrape(stack.health_url)
            stack.record.update(
                model_load_s=metrics.get("ttsq_model_load_seconds"),
                batch_limit_at_ready=_whole(metrics.get("ttsq_batch_limit")),
                recompiles_at_ready=recompiles(metrics),
            )
            log(f"{stack.name}: ready in {stack.record['ready_s']}s, batch limit {stack.record['batch_limit_at_ready']}")
        except (RuntimeError, httpx.HTTPError) as exc:
            stack.record["error"] = str(exc)[:4000]
            log(f"{stack.name} FAILED to start: {str(exc)[:2000]}")
            stack.stop()
        rec.save()
    # Smaller client counts first across the stacks (MAX_BATCH in the order given), so the runs that matter
    # most are measured before the time runs out.
    dirty = {stack.name: False for stack in stacks}
    for clients in clients_list:
        for stack in stacks:
            if "error" in stack.record:
                continue
            left = end - time.monotonic()
            restart = 30.0 if dirty[stack.name] else 0.0
            if left < args.window_s * 0.5 + args.drain_s + restart + 5:
                rec.data["skipped"].append({"max_batch": stack.max_batch, "clients": clients, "reason": f"{left:.0f}s left"})
                log(f"{stack.name}: no time left for {clients} clients")
                rec.save()
                continue
            if dirty[stack.name]:
                log(f"{stack.name}: jobs left from the last window; a fresh worker and an empty Redis")
                stack.stop_worker()
                stack.flush()
                stack.start_worker()
                try:
                    stack.wait_ready(min(args.ready_timeout_s, end - time.monotonic() - args.drain_s - 10))
                except RuntimeError as exc:
                    stack.record["error"] = f"restart failed: {exc}"[:4000]
                    rec.save()
                    continue
            window = min(args.window_s, end - time.monotonic() - args.drain_s - 5)
            res = measure_window(stack, clients, window, args.drain_s, pool, args.min_jobs)
            res["fresh_worker"] = dirty[stack.name]
            rec.data["windows"].append(res)
            rec.save()
            log(
                f"{stack.name}, {clients} clients: {res['completed']} jobs, {res['jobs_per_s']} jobs/s, "
                f"p50 {res.get('p50_s')}s p99 {res.get('p99_s')}s, mean batch {res.get('mean_batch')}, "
                f"limit {res.get('batch_limit')}, errors {res['errors']}, abandoned {res['abandoned_at_drain_cap']}"
            )
            dirty[stack.name] = res["abandoned_at_drain_cap"] > 0 or not _settle(stack, args.settle_s)
    for stack in stacks:
        if "error" not in stack.record:
            stack.record["log_tail"] = stack.log_tail()
    stop_all(stacks)
    rec.save()


def measure_window(
    stack: Stack, clients: int, window_s: float, drain_s: float, pool: ProcessPoolExecutor, min_jobs: int = 0
) -> dict[str, Any]:
    before = scrape(stack.health_url)
    cpu_before = _cpu_seconds(stack)
    shards = max(1, math.ceil(clients / CLIENTS_PER_PROCESS))
    sizes = [clients // shards + (1 if i < clients % shards else 0) for i in range(shards)]
    start = time.monotonic() + 1.0  # every client process starts at the same instant
    shard = functools.partial(client_shard, stack.api_url, start=start, window_s=window_s, drain_s=drain_s, min_jobs=min_jobs)
    futures = [pool.submit(shard, clients=size, first=i, stride=shards) for i, size in enumerate(sizes)]
    results = [future.result(timeout=window_s + drain_s + 120) for future in futures]
    end = time.monotonic()
    cpu_after = _cpu_seconds(stack)
    after = scrape(stack.health_url)
    res = window_summary(stack, clients, window_s, drain_s, start, results)
    res["min_jobs_per_client"] = min_jobs
    res.update(_metric_deltas(before, after))
    busy = res.get("busy_s") or window_s
    res["cpu_cores"] = {role: round((cpu_after[role] - cpu_before[role]) / busy, 2) for role in cpu_after if role in cpu_before}
    res["mono"] = [start, end]
    return res


def _cpu_seconds(stack: Stack) -> dict[str, float]:
    """CPU seconds the API and the worker have used so far: a saturated API (one process, every client polling
    ten times a second) or a worker busy on the CPU side shows here, not in the GPU's utilisation."""
    import psutil

    out = {}
    for role, process in (("api", stack.api), ("worker", stack.worker)):
        if process is not None and process.poll() is None:
            with contextlib.suppress(psutil.Error):
                times = psutil.Process(process.pid).cpu_times()
                out[role] = times.user + times.system
    return out


if __name__ == "__main__":
    sys.exit(main())
