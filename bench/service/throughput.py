"""Throughput of ttsq beside simpler alternatives, measured side by side in one run.

    python -m bench.service.throughput [--quick] [--sections submit,queue,e2e,scaling,memory] [--engines fixed,full,tiny]

Five benchmarks, each comparing variants started by this one command on this one machine, and
reported as ratios, because these 2-core machines are noisy and only same-run ratios mean much:

1. submit   — ``POST /v1/tts/submit`` (no workers) vs a bare FastAPI endpoint doing one LPUSH,
              under wrk with 64 connections.
2. queue    — no-op jobs/s through ttsq's queue and real worker (no-op engine, MAX_BATCH 1 and 8)
              vs arq on the same Redis.
3. e2e      — 16 submit-then-poll clients vs a 2noise-style app that synthesises in its handler,
              on three engines: a fixed-cost model of GPU time (not ChatTTS), the full-size
              random-weight checkpoint (real ChatTTS code), and the tiny checkpoint.
4. scaling  — batch 1 vs 8, and 1 vs 2 worker processes, on the fixed-cost model of GPU time.
5. memory   — RSS of a real tiny-checkpoint worker over hundreds of jobs.

Every throughput run turns the result cache and single-flight off and fixes the audio length
(``MIN_NEW_TOKEN = MAX_NEW_TOKEN``), so every request costs the same and none is skipped.
Writes ``bench/results/throughput.{md,json,png}`` (``throughput-quick.*`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.metadata
import itertools
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import redis as redis_sync

from bench.engine.raw_batch import TEXTS
from bench.fixed_cost_engine import DEFAULT_CALL_MS, DEFAULT_ITEM_MS, FIXED_COST_LABEL
from bench.interrupt import interruptible
from bench.machine import machine
from bench.noop_engine import NOOP_LABEL
from bench.service.closed_loop import LoopResult, baseline_job, closed_loop, merge, ttsq_job, worker_counters
from bench.service.job_records import done_jobs
from bench.service.throughput_report import write_outputs
from bench.service.wrk import WrkResult, ensure_wrk, post_script, run_wrk, wrk_version
from bench.stacks import ROOT, EngineSpec, Stack, progress, service_env, utc_now
from settings import Settings
from ttsq.domain.jobs import TTSParams
from ttsq.inference.engines.checkpoint import build_random_checkpoint, build_tiny_checkpoint
from ttsq.runtime.launch import api_command, free_port, worker_command
from ttsq.store.connection import create_redis
from ttsq.store.keys import Keys
from ttsq.store.local_redis import RedisServer, start_redis_server
from ttsq.store.queue import JobQueue

RESULTS = ROOT / "bench" / "results"
ARQ_VENV = ROOT / "var" / "bench-arq-venv"
ARQ_VERSION = "0.28.0"
FULL_CHECKPOINT = ROOT / "var" / "full-random-checkpoint"
SECTIONS = ("submit", "queue", "e2e", "scaling", "memory")
ENGINES = ("fixed", "full", "tiny")
SUBMIT_BODY = {"text": TEXTS[0], "seed": 1}
"""What the submit section posts (and ``bench.service.submit_cost``): one deterministic request."""


@dataclass(frozen=True)
class Profile:
    """How long each benchmark runs; ``FULL`` fits 30 minutes here, ``QUICK`` a few."""

    name: str
    submit_warm_s: int
    submit_round_s: int
    submit_rounds: int
    queue_jobs: int
    queue_rounds: int
    e2e_s: dict[str, float]
    e2e_rounds: dict[str, int]
    scaling_s: float
    scaling_rounds: int
    scaling_clients: int
    memory_jobs: int
    memory_step: int


FULL = Profile(
    name="full",
    submit_warm_s=3,
    submit_round_s=10,
    submit_rounds=2,
    queue_jobs=3000,
    queue_rounds=2,
    e2e_s={"fixed": 20, "full": 35, "tiny": 20},
    e2e_rounds={"fixed": 2, "full": 2, "tiny": 2},
    scaling_s=20,
    scaling_rounds=2,
    scaling_clients=32,
    memory_jobs=500,
    memory_step=50,
)
QUICK = Profile(
    name="quick",
    submit_warm_s=1,
    submit_round_s=3,
    submit_rounds=1,
    queue_jobs=400,
    queue_rounds=1,
    e2e_s={"fixed": 5, "full": 5, "tiny": 5},
    e2e_rounds={"fixed": 1, "full": 1, "tiny": 1},
    scaling_s=5,
    scaling_rounds=1,
    scaling_clients=32,
    memory_jobs=100,
    memory_step=20,
)


def engine_specs() -> dict[str, EngineSpec]:
    """The three end-to-end engines; both sides of each comparison run the same engine code."""
    fixed_worker = [sys.executable, "-m", "bench.fixed_worker"]
    real_worker = worker_command()
    return {
        "fixed": EngineSpec(
            "fixed",
            f"{FIXED_COST_LABEL}: 300 ms per call + 20 ms per item",
            {"BENCH_ENGINE": "fixed", "MODEL_ID": "bench-fixed-cost"},
            fixed_worker,
            60,
            stand_in=True,
        ),
        "full": EngineSpec(
            "full",
            "full-size random-weight checkpoint (real ChatTTS code on CPU, 1 thread, 16 audio tokens per job)",
            {"BENCH_ENGINE": "chattts", "MODEL": str(FULL_CHECKPOINT), "MAX_NEW_TOKEN": "16", "MIN_NEW_TOKEN": "16"},
            real_worker,
            600,
        ),
        "tiny": EngineSpec(
            "tiny",
            "tiny random-weight checkpoint (real ChatTTS code, 48 audio tokens per job; client, API, Redis, worker on 2 cores)",
            {"BENCH_ENGINE": "chattts", "MODEL": "tiny", "MAX_NEW_TOKEN": "48", "MIN_NEW_TOKEN": "48"},
            real_worker,
            300,
        ),
    }


# ---- processes -------------------------------------------------------------------------------


@dataclass
class Bench:
    profile: Profile
    tmp: Path
    redis: RedisServer
    stack: Stack

    def env(self, **extra: str) -> dict[str, str]:
        return service_env(self.redis.url, **extra)

    def flush(self) -> None:
        client = redis_sync.Redis.from_url(self.redis.url)
        try:
            client.flushdb()
        finally:
            client.close()


def bench_submit(bench: Bench) -> dict[str, Any]:
    """wrk -c64 against ttsq's submit (no workers: every job stays queued) and the LPUSH floor."""
    wrk = ensure_wrk()
    profile = bench.profile
    ports = {"ttsq": free_port(), "lpush": free_port()}
    env = bench.env(MODEL_ID="bench-submit")
    bench.stack.start("submit-api", api_command(ports["ttsq"], app="app:app"), env)
    bench.stack.start("lpush-app", api_command(ports["lpush"], app="bench.service.lpush_app:app"), env)
    try:
        bench.stack.wait_ready("submit-api", f"http://127.0.0.1:{ports['ttsq']}/readyz", 60)
        bench.stack.wait_ready("lpush-app", f"http://127.0.0.1:{ports['lpush']}/healthz", 60)
        script = post_script(bench.tmp / "post.lua", SUBMIT_BODY)
        urls = {
            "ttsq POST /v1/tts/submit": f"http://127.0.0.1:{ports['ttsq']}/v1/tts/submit",
            "bare FastAPI + one LPUSH": f"http://127.0.0.1:{ports['lpush']}/submit",
        }
        for url in urls.values():  # warm both (connections, first-request costs), results discarded
            run_wrk(wrk, url, script, connections=64, threads=2, duration_s=profile.submit_warm_s)
        rounds: dict[str, list[WrkResult]] = {name: [] for name in urls}
        for round_no in range(profile.submit_rounds):
            for name, url in urls.items():  # interleaved, so drift in machine load hits both alike
                progress(f"submit: {name}, round {round_no + 1}/{profile.submit_rounds}")
                rounds[name].append(run_wrk(wrk, url, script, connections=64, threads=2, duration_s=profile.submit_round_s))
    finally:
        bench.stack.stop("submit-api", "lpush-app")
        bench.flush()

    def summary(results: list[WrkResult]) -> dict[str, Any]:
        requests = sum(r.requests for r in results)
        duration = sum(r.duration_s for r in results)
        return {
            "requests": requests,
            "requests_per_s": requests / duration,
            "p50_ms": sum(r.p50_ms for r in results) / len(results),
            "p99_ms": sum(r.p99_ms for r in results) / len(results),
            "non_2xx": sum(r.non_2xx for r in results),
            "socket_errors": sum(r.socket_errors for r in results),
            "rounds": [r.as_dict() for r in results],
        }

    variants = {name: summary(results) for name, results in rounds.items()}
    ttsq, floor = variants["ttsq POST /v1/tts/submit"], variants["bare FastAPI + one LPUSH"]
    return {
        "wrk": wrk_version(wrk),
        "connections": 64,
        "threads": 2,
        "round_s": profile.submit_round_s,
        "rounds": profile.submit_rounds,
        "body": SUBMIT_BODY,
        "variants": variants,
        "ratio_rps": ttsq["requests_per_s"] / floor["requests_per_s"],
        "ratio_p99": ttsq["p99_ms"] / floor["p99_ms"],
        "aim": 0.8,
    }


# ---- 2. queue overhead -----------------------------------------------------------------------


def ensure_arq_venv() -> Path:
    """A venv with arq and the redis-py it declares: arq pins redis<6, ttsq runs redis-py 8."""
    python = ARQ_VENV / "bin" / "python"
    check = [str(python), "-c", f"import arq, sys; sys.exit(arq.VERSION != {ARQ_VERSION!r})"]
    if python.exists() and subprocess.run(check, capture_output=True, check=False, timeout=60).returncode == 0:
        return python
    progress(f"creating {ARQ_VENV.relative_to(ROOT)} with arq=={ARQ_VERSION} (its redis<6 pin cannot share ttsq's venv)")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(ARQ_VENV)], check=True, timeout=300)
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"arq=={ARQ_VERSION}"], check=True, timeout=900)
    return python


def _arq(python: Path, *args: str, timeout_s: float) -> str:
    out = subprocess.run(
        [str(python), "-m", "bench.service.arq_jobs", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout_s,
    )
    if out.returncode != 0:
        raise RuntimeError(f"arq {args[0]} failed: {out.stderr[-2000:]}")
    return out.stdout.strip()


def _noop_params(n: int) -> TTSParams:
    return TTSParams(text="a no-op job", speaker_seed=1, seed=n + 1, deterministic=False)


async def _ttsq_enqueue(url: str, count: int) -> list[str]:
    config = Settings(_env_file=None, redis_url=url, max_queue_depth=10**9)
    client = create_redis(config.redis_config())
    queue = JobQueue(client, config.queue_config())
    ids = [str(uuid.uuid4()) for _ in range(count)]
    try:
        for start in range(0, count, 48):  # below the client's 64-connection pool
            chunk = range(start, min(count, start + 48))
            await asyncio.gather(*(queue.enqueue(ids[n], _noop_params(n), single_flight=False) for n in chunk))
    finally:
        await client.aclose()
    return ids


async def _ttsq_window(url: str, ids: list[str]) -> tuple[int, float, float]:
    """(jobs done, first claim, last completion) from the job records the worker wrote."""
    config = Settings(_env_file=None, redis_url=url)
    client = create_redis(config.redis_config())
    keys = Keys(config.redis_namespace)
    try:
        jobs = await done_jobs(client, [keys.job(i) for i in ids])
    finally:
        await client.aclose()
    starts = [job.started_at for job in jobs if job.started_at is not None]
    finishes = [job.finished_at for job in jobs if job.finished_at is not None]
    return len(jobs), min(starts, default=0.0), max(finishes, default=0.0)


def _wait_jobs_done(bench: Bench, count: int, timeout_s: float, watch: str) -> None:
    client = redis_sync.Redis.from_url(bench.redis.url)
    stats = Keys("ttsq").stats
    deadline = time.monotonic() + timeout_s
    try:
        while int(client.hget(stats, "jobs") or 0) < count:
            process = bench.stack.processes.get(watch)
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"{watch} exited:\n{bench.stack.log_tail(watch)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"jobs not done within {timeout_s:.0f}s:\n{bench.stack.log_tail(watch)}")
            time.sleep(0.05)
    finally:
        client.close()


def _queue_ttsq(bench: Bench, max_batch: int, count: int) -> dict[str, Any]:
    bench.flush()
    ids = asyncio.run(_ttsq_enqueue(bench.redis.url, count))
    name = f"noop-worker-b{max_batch}"
    env = bench.env(BENCH_ENGINE="noop", MAX_BATCH=str(max_batch), MODEL_ID="bench-noop")
    bench.stack.start_worker(name, [sys.executable, "-m", "bench.fixed_worker"], env, 60)
    try:
        _wait_jobs_done(bench, count, 60 + count / 20, name)
    finally:
        bench.stack.stop(name)
    done, first, last = asyncio.run(_ttsq_window(bench.redis.url, ids))
    return {"jobs": done, "seconds": last - first, "jobs_per_s": done / (last - first)}


def _queue_arq(bench: Bench, python: Path, max_jobs: int, poll_delay_s: float, count: int) -> dict[str, Any]:
    bench.flush()
    url = bench.redis.url
    _arq(python, "enqueue", url, str(count), timeout_s=120 + count / 50)
    _arq(python, "work", url, str(max_jobs), str(poll_delay_s), timeout_s=120 + count / 5)
    collected = json.loads(_arq(python, "collect", url, timeout_s=120))
    seconds = collected["last_finish"] - collected["first_start"]
    return {"jobs": collected["succeeded"], "seconds": seconds, "jobs_per_s": collected["succeeded"] / seconds}


def bench_queue(bench: Bench) -> dict[str, Any]:
    """No-op jobs/s from first claim to last completion: ttsq's queue + real worker vs arq."""
    python = ensure_arq_venv()
    arq_version = _arq(python, "version", timeout_s=60)
    arq_redis = subprocess.run(
        [str(python), "-c", "import redis; print(redis.__version__)"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    count = bench.profile.queue_jobs
    variants: dict[str, Callable[[], dict[str, Any]]] = {
        f"ttsq, MAX_BATCH=1 ({NOOP_LABEL})": lambda: _queue_ttsq(bench, 1, count),
        f"ttsq, MAX_BATCH=8 ({NOOP_LABEL})": lambda: _queue_ttsq(bench, 8, count),
        "arq defaults (max_jobs=10, poll_delay=0.5 s)": lambda: _queue_arq(bench, python, 10, 0.5, count),
        "arq tuned (max_jobs=100, poll_delay=0.01 s)": lambda: _queue_arq(bench, python, 100, 0.01, count),
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for round_no in range(bench.profile.queue_rounds):
        for name, run in variants.items():
            progress(f"queue: {name}, round {round_no + 1}/{bench.profile.queue_rounds}")
            runs[name].append(run())
    bench.flush()
    summary = {}
    for name, results in runs.items():
        jobs = sum(r["jobs"] for r in results)
        seconds = sum(r["seconds"] for r in results)
        summary[name] = {"jobs": jobs, "seconds": seconds, "jobs_per_s": jobs / seconds, "rounds": results}
    best_arq = max((v["jobs_per_s"] for k, v in summary.items() if k.startswith("arq")), default=0.0)
    default_arq = summary["arq defaults (max_jobs=10, poll_delay=0.5 s)"]["jobs_per_s"]
    return {
        "arq_version": arq_version,
        "arq_redis_py": arq_redis,
        "ttsq_redis_py": importlib.metadata.version("redis"),
        "jobs_per_round": count,
        "rounds": bench.profile.queue_rounds,
        "variants": summary,
        "best_arq_jobs_per_s": best_arq,
        "ratio_b1": summary[f"ttsq, MAX_BATCH=1 ({NOOP_LABEL})"]["jobs_per_s"] / best_arq,
        "ratio_b8": summary[f"ttsq, MAX_BATCH=8 ({NOOP_LABEL})"]["jobs_per_s"] / best_arq,
        "default_arq_jobs_per_s": default_arq,
        "ratio_b1_default": summary[f"ttsq, MAX_BATCH=1 ({NOOP_LABEL})"]["jobs_per_s"] / default_arq,
        "ratio_b8_default": summary[f"ttsq, MAX_BATCH=8 ({NOOP_LABEL})"]["jobs_per_s"] / default_arq,
        "aim": 1.0,
    }


# ---- 3. end to end ---------------------------------------------------------------------------


def request_body(n: int) -> dict[str, Any]:
    """One voice (so ttsq may batch), a different sampling seed and one of four texts per job."""
    return {"text": TEXTS[n % len(TEXTS)], "voice": "zh_female", "seed": n + 1, "format": "wav"}


@dataclass(frozen=True)
class Variant:
    """One side of a comparison: how a client does a job, and the ttsq workers behind it (if any)."""

    name: str
    make: Callable[[httpx.AsyncClient], Callable[[int], Awaitable[None]]]
    worker_urls: tuple[str, ...] = ()
    processes: tuple[tuple[str, int], ...] = ()
    """(role, pid) of the server-side processes whose CPU use is reported; the client is added."""


def _cpu_seconds(pids: list[tuple[str, int]]) -> dict[str, float]:
    """CPU seconds (user + system) so far, summed per role; a process that is gone counts 0."""
    totals: dict[str, float] = {}
    for role, pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
            used = times.user + times.system
        except psutil.Error:
            used = 0.0
        totals[role] = totals.get(role, 0.0) + used
    return totals


async def _rounds(plan: list[Variant], rounds: int, clients: int, duration_s: float, label: str) -> dict[str, list[LoopResult]]:
    """Run each variant ``rounds`` times, interleaved, sharing one HTTP client pool."""
    results: dict[str, list[LoopResult]] = {variant.name: [] for variant in plan}
    limits = httpx.Limits(max_connections=clients * 2, max_keepalive_connections=clients * 2)
    async with httpx.AsyncClient(timeout=httpx.Timeout(900.0, connect=10.0), limits=limits) as client:
        for round_no in range(rounds):
            for variant in plan:
                progress(f"{label}: {variant.name}, round {round_no + 1}/{rounds} ({clients} clients, {duration_s:.0f}s + drain)")
                urls = list(variant.worker_urls)
                pids = [("client (this benchmark)", os.getpid()), *variant.processes]
                jobs_before, batches_before = await worker_counters(client, urls)
                cpu_before = _cpu_seconds(pids)
                result = await closed_loop(
                    variant.name, variant.make(client), clients=clients, duration_s=duration_s, job_timeout_s=900
                )
                cpu_after = _cpu_seconds(pids)
                jobs_after, batches_after = await worker_counters(client, urls)
                result.worker_jobs, result.worker_batches = jobs_after - jobs_before, batches_after - batches_before
                result.cpu_s = {role: cpu_after[role] - cpu_before[role] for role in cpu_after}
                results[variant.name].append(result)
    return results


def raw_gain(spec: EngineSpec) -> dict[str, float]:
    """The engine's own batch-of-8 gain (no service): analytic for the fixed-cost model, measured otherwise."""
    if spec.key == "fixed":
        singles, batch = 8 * (DEFAULT_CALL_MS + DEFAULT_ITEM_MS), DEFAULT_CALL_MS + 8 * DEFAULT_ITEM_MS
        return {"batch": 8, "singles_s": singles / 1000, "batch_s": batch / 1000, "gain": singles / batch, "analytic": 1.0}
    source = str(FULL_CHECKPOINT) if spec.key == "full" else str(ROOT / "var" / "tiny-checkpoint")
    progress(f"e2e {spec.key}: the engine's raw batch-of-8 gain, in its own process")
    out = subprocess.run(
        [sys.executable, "-m", "bench.engine.raw_batch", source, spec.env["MAX_NEW_TOKEN"]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    measured: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return measured


def bench_e2e(bench: Bench, spec: EngineSpec) -> dict[str, Any]:
    """16 clients: ttsq (batching, MAX_BATCH=8, one worker) vs the in-handler baseline, same engine."""
    if spec.key == "full":
        build_random_checkpoint(FULL_CHECKPOINT, size="full")
    elif spec.key == "tiny":
        build_tiny_checkpoint(ROOT / "var" / "tiny-checkpoint")
    raw = raw_gain(spec)
    env = bench.env(**spec.env)
    api_port, base_port = free_port(), free_port()
    names = (f"e2e-{spec.key}-api", f"e2e-{spec.key}-baseline", f"e2e-{spec.key}-worker")
    bench.stack.start(names[0], api_command(api_port, app="app:app"), env)
    bench.stack.start(names[1], api_command(base_port, app="bench.service.baseline_app:app"), env)
    try:
        worker_url = bench.stack.start_worker(names[2], spec.command, env | {"MAX_BATCH": "8"}, spec.ready_timeout_s)
        bench.stack.wait_ready(names[0], f"http://127.0.0.1:{api_port}/readyz", 60)
        bench.stack.wait_ready(names[1], f"http://127.0.0.1:{base_port}/healthz", spec.ready_timeout_s)
        api_url, base_url = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{base_port}"
        pid = {name: bench.stack.processes[name].pid for name in names}
        redis_pid = ("Redis", bench.redis.process.pid)
        plan = [
            Variant(
                "baseline (synthesis in the handler)",
                lambda c: baseline_job(c, base_url, request_body),
                processes=(("baseline app", pid[names[1]]),),
            ),
            Variant(
                "ttsq (MAX_BATCH=8, 1 worker)",
                lambda c: ttsq_job(c, api_url, request_body),
                (worker_url,),
                (("API", pid[names[0]]), ("worker", pid[names[2]]), redis_pid),
            ),
        ]
        rounds, duration = bench.profile.e2e_rounds[spec.key], bench.profile.e2e_s[spec.key]
        runs = asyncio.run(_rounds(plan, rounds, 16, duration, f"e2e {spec.key}"))
    finally:
        bench.stack.stop(*names)
        bench.flush()
    merged = {name: merge(name, results) for name, results in runs.items()}
    baseline, ttsq = merged[plan[0].name], merged[plan[1].name]
    ratio = ttsq.jobs_per_s / baseline.jobs_per_s if baseline.jobs_per_s else 0.0
    return {
        "engine": spec.label,
        "clients": 16,
        "rounds": bench.profile.e2e_rounds[spec.key],
        "round_s": bench.profile.e2e_s[spec.key],
        "env": {k: v for k, v in spec.env.items() if k != "BENCH_ENGINE"},
        "raw_engine": raw,
        "variants": {name: result.as_dict() for name, result in merged.items()},
        "ratio": ratio,
        "share_of_raw_gain": ratio / raw["gain"],
        "aim": 3.0 if spec.key in ("fixed", "full") else None,
    }


# ---- 4. scaling ------------------------------------------------------------------------------


SCALING_VARIANTS = ((1, 1, None), (8, 1, None), (1, 2, None), (8, 2, None), (8, 1, 100), (8, 2, 100))
"""(MAX_BATCH, worker processes, BATCH_WAIT_MS or None for the default). The last two are not
for the aims: they show what a longer batch wait does when polled clients resubmit in a spread."""


def _scaling_name(batch: int, workers: int, wait_ms: int | None = None) -> str:
    wait = f", BATCH_WAIT_MS={wait_ms}" if wait_ms is not None else ""
    return f"MAX_BATCH={batch}, {workers} worker{'s' if workers > 1 else ''}{wait}"


def bench_scaling(bench: Bench) -> dict[str, Any]:
    """Fixed-cost model of GPU time: {batch 1, 8} × {1, 2} worker processes, 32 clients, one API."""
    spec = engine_specs()["fixed"]
    env = bench.env(**spec.env)
    api_port = free_port()
    bench.stack.start("scaling-api", api_command(api_port, app="app:app"), env)
    clients = bench.profile.scaling_clients
    runs: dict[str, list[LoopResult]] = {}
    try:
        bench.stack.wait_ready("scaling-api", f"http://127.0.0.1:{api_port}/readyz", 60)
        api_url = f"http://127.0.0.1:{api_port}"
        for round_no in range(bench.profile.scaling_rounds):
            for batch, workers, wait_ms in SCALING_VARIANTS:
                names = [f"scaling-w{i}-b{batch}" for i in range(workers)]
                worker_env = env | {"MAX_BATCH": str(batch)}
                if wait_ms is not None:
                    worker_env["BATCH_WAIT_MS"] = str(wait_ms)
                try:
                    urls = tuple(bench.stack.start_worker(n, spec.command, worker_env, 60) for n in names)
                    pids = (
                        ("API", bench.stack.processes["scaling-api"].pid),
                        *(("workers", bench.stack.processes[n].pid) for n in names),
                        ("Redis", bench.redis.process.pid),
                    )
                    name = _scaling_name(batch, workers, wait_ms)
                    variant = Variant(name, lambda c: ttsq_job(c, api_url, request_body), urls, pids)
                    label = f"scaling round {round_no + 1}/{bench.profile.scaling_rounds}"
                    result = asyncio.run(_rounds([variant], 1, clients, bench.profile.scaling_s, label))
                    runs.setdefault(variant.name, []).extend(result[variant.name])
                finally:
                    bench.stack.stop(*names)
    finally:
        bench.stack.stop("scaling-api")
        bench.flush()
    merged = {name: merge(name, results) for name, results in runs.items()}

    def rate(batch: int, workers: int, wait_ms: int | None = None) -> float:
        return merged[_scaling_name(batch, workers, wait_ms)].jobs_per_s

    return {
        "engine": spec.label,
        "clients": clients,
        "round_s": bench.profile.scaling_s,
        "rounds": bench.profile.scaling_rounds,
        "variants": {name: result.as_dict() for name, result in merged.items()},
        "per_round_jobs_per_s": {name: [r.jobs_per_s for r in results] for name, results in runs.items()},
        "ratio_batch": rate(8, 1) / rate(1, 1),
        "ratio_workers_b8": rate(8, 2) / rate(8, 1),
        "ratio_workers_b1": rate(1, 2) / rate(1, 1),
        "ratio_workers_b8_wait100": rate(8, 2, 100) / rate(8, 1, 100),
        "default_batch_wait_ms": 20,
        "aim_batch": 2.5,
        "aim_workers": 1.8,
    }


# ---- 5. worker memory ------------------------------------------------------------------------


def _memory_params(n: int) -> TTSParams:
    """Like the API builds them: half with a voice (batchable), half a fresh random voice each."""
    text = TEXTS[n % len(TEXTS)] if n % 3 else f"Order {n} ships on day {n % 28 + 1}, costing ${n % 97}.50."
    if n % 2:
        return TTSParams(text=text, voice="zh_female", speaker_seed=2, seed=n + 1)
    return TTSParams(text=text, speaker_seed=10_000 + n, seed=10_000 + n)


async def _enqueue_params(url: str, params: list[TTSParams]) -> None:
    config = Settings(_env_file=None, redis_url=url, max_queue_depth=10**9)
    client = create_redis(config.redis_config())
    queue = JobQueue(client, config.queue_config())
    try:
        for start in range(0, len(params), 48):  # below the client's 64-connection pool
            chunk = params[start : start + 48]
            await asyncio.gather(*(queue.enqueue(str(uuid.uuid4()), p, single_flight=False) for p in chunk))
    finally:
        await client.aclose()


def bench_memory(bench: Bench) -> dict[str, Any]:
    """RSS of a real tiny-checkpoint worker (``python worker.py``) every ``step`` jobs."""
    total, step = bench.profile.memory_jobs, bench.profile.memory_step
    env = bench.env(MODEL="tiny", MAX_NEW_TOKEN="48", MIN_NEW_TOKEN="48", MAX_BATCH="8")
    name = "memory-worker"
    bench.flush()
    bench.stack.start_worker(name, worker_command(), env, 300)
    process = psutil.Process(bench.stack.processes[name].pid)
    samples: list[tuple[int, float]] = [(0, process.memory_info().rss / 2**20)]
    started = time.monotonic()
    try:
        for done in range(step, total + 1, step):
            asyncio.run(_enqueue_params(bench.redis.url, [_memory_params(n) for n in range(done - step, done)]))
            _wait_jobs_done(bench, done, 600, name)
            samples.append((done, process.memory_info().rss / 2**20))
            progress(f"memory: {done}/{total} jobs, RSS {samples[-1][1]:.1f} MiB")
    finally:
        bench.stack.stop(name)
        bench.flush()
    after_first = [s for s in samples if s[0] >= step]
    steps = [later[1] - earlier[1] for earlier, later in itertools.pairwise(after_first)]
    return {
        "engine": "tiny random-weight checkpoint, 48 audio tokens per chunk, MAX_BATCH=8",
        "jobs": total,
        "step": step,
        "seconds": time.monotonic() - started,
        "samples": [{"jobs": j, "rss_mib": r} for j, r in samples],
        "first_mib": samples[0][1],
        "last_mib": samples[-1][1],
        "max_mib": max(r for _, r in samples),
        "slope_mib_per_100_jobs": 100 * _slope(samples),
        "slope_after_first_step_mib_per_100_jobs": 100 * _slope(after_first),
        "median_step_growth_mib": statistics.median(steps) if steps else 0.0,
        "largest_step_growth_mib": max(steps, default=0.0),
    }


def _slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of RSS (MiB) over jobs."""
    if len(points) < 2:
        return 0.0
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    var = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / var if var else 0.0


# ---- the run ---------------------------------------------------------------------------------


def _versions(redis_url: str) -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in ("fastapi", "uvicorn", "redis", "hiredis", "httpx", "torch", "chattts", "psutil", "matplotlib"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    client = redis_sync.Redis.from_url(redis_url)
    try:
        info: dict[str, Any] = client.info("server")
        versions["redis-server"] = str(info.get("redis_version", "unknown"))
    finally:
        client.close()
    return versions


def _machine() -> dict[str, Any]:
    return {**machine(), "gpu": "none", "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="ttsq throughput benchmarks, side by side, reported as ratios.")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few minutes")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"end-to-end engines, subset of {','.join(ENGINES)}")
    parser.add_argument("--scaling-clients", type=int, help="closed-loop clients in the scaling benchmark (default 32)")
    parser.add_argument("--out", type=Path, help="output prefix (default bench/results/throughput[-quick])")
    args = parser.parse_args(argv)
    sections = [s for s in args.sections.split(",") if s]
    engines = [e for e in args.engines.split(",") if e]
    if unknown := set(sections) - set(SECTIONS) | set(engines) - set(ENGINES):
        parser.error(f"unknown section or engine: {', '.join(sorted(unknown))}")
    profile = QUICK if args.quick else FULL
    if args.scaling_clients:
        profile = dataclasses.replace(profile, scaling_clients=args.scaling_clients)
    out = args.out or RESULTS / ("throughput-quick" if args.quick else "throughput")
    command = "python -m bench.service.throughput " + shlex.join(sys.argv[1:] if argv is None else argv)

    tmp = Path(tempfile.mkdtemp(prefix="ttsq-throughput-"))
    results: dict[str, Any] = {
        "command": command.strip(),
        "profile": profile.name,
        "date": utc_now(),
        "machine": _machine(),
    }
    started = time.monotonic()
    failed = False
    with interruptible():
        redis = start_redis_server(tmp / "redis")
        bench = Bench(profile=profile, tmp=tmp, redis=redis, stack=Stack(tmp))
        try:
            results["versions"] = _versions(redis.url)
            specs = engine_specs()
            for section in SECTIONS:
                if section not in sections:
                    continue
                progress(f"== {section}")
                if section == "submit":
                    results["submit"] = bench_submit(bench)
                elif section == "queue":
                    results["queue"] = bench_queue(bench)
                    results["versions"]["arq"] = results["queue"]["arq_version"]
                elif section == "e2e":
                    results["e2e"] = {key: bench_e2e(bench, specs[key]) for key in ENGINES if key in engines}
                elif section == "scaling":
                    results["scaling"] = bench_scaling(bench)
                else:
                    results["memory"] = bench_memory(bench)
        except BaseException:
            failed = True
            print(f"benchmark failed; process logs are in {tmp}", file=sys.stderr)
            raise
        finally:
            bench.stack.close()
            redis.stop()
            if not failed:
                shutil.rmtree(tmp, ignore_errors=True)
    results["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["elapsed_s"] = round(time.monotonic() - started, 1)
    report = write_outputs(results, out)
    print(report)


if __name__ == "__main__":
    main()
