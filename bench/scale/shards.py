"""Queue shards on a local Redis Cluster: no-op jobs/s with 1, 2 and 3 shards.

    python -m bench.scale.shards [--quick] [--jobs N] [--workers W]

One real three-master Redis Cluster (``ttsq.store.local_topology``, no replicas: replication is not what is
measured) and real worker processes on the no-op engine (``python -m bench.fixed_worker``, ``BENCH_ENGINE=noop``:
the real claim loop, leases, streams and completions, with inference costing nothing), so what limits throughput is
Redis and the workers' own Python, never a model. For each shard count the queue is emptied, ``--jobs`` jobs are
queued spread evenly over the shards (directly through :class:`~ttsq.store.queue.JobQueue`: the API is not what is
measured), then ``--workers`` workers with ``QUEUE_SHARDS`` set to that count drain them. Jobs/s is counted from
the first claim to the last completion, both stamped by Redis (``TIME``), as :mod:`bench.service.throughput` does.

Beside jobs/s the report gives each master's share of the commands and of the Redis CPU time the run cost
(``INFO commandstats``/``INFO cpu`` before and after): with one shard one master does all the work whatever the
cluster's size; with three each does about a third. Whether that turns into more jobs/s depends on the machine:
where the workers' Python, not one Redis core, is the bottleneck (a 2-core machine running the workers, the
servers and this script), spreading the Redis work cannot raise jobs/s much, and the report says what it measured.

Writes ``bench/results/shards.{md,json}`` (``shards-quick.*`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis.asyncio.cluster import RedisCluster

from bench.machine import machine
from bench.noop_engine import NOOP_LABEL
from bench.service.job_records import done_jobs
from bench.stacks import ROOT, stop_processes, utc_now
from settings import Settings
from ttsq.domain.jobs import Job, TTSParams
from ttsq.runtime.launch import free_port, spawn, wait_until_ok
from ttsq.store.connection import create_redis
from ttsq.store.keys import Shards
from ttsq.store.local_topology import LocalCluster, start_redis_cluster
from ttsq.store.queue import JobQueue

RESULTS = ROOT / "bench" / "results"
NAMESPACE = "ttsq"
SHARD_COUNTS = (1, 2, 3)


@dataclass(frozen=True)
class Run:
    shards: int
    jobs: int
    seconds: float
    per_master: dict[int, dict[str, float]]
    """Master port → its commands and Redis CPU seconds during the run, and its dataset bytes at the end."""

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0


def _params(n: int) -> TTSParams:
    return TTSParams(text="a no-op job", speaker_seed=1, seed=n + 1, deterministic=False)


def _job_ids(shards: Shards, count: int) -> list[str]:
    """Ids spread evenly over the shards: a task id names its shard as ``<uuid>_<label>`` (none for shard 0)."""
    labels = [keys.label for keys in shards.all]
    return [f"{uuid.uuid4()}_{labels[n % len(labels)]}" if labels[n % len(labels)] else str(uuid.uuid4()) for n in range(count)]


def _settings(cluster: LocalCluster, shards: int) -> Settings:
    return Settings(_env_file=None, redis_url=cluster.url(), queue_shards=shards, max_queue_depth=10**9)


async def _enqueue(cluster: LocalCluster, shards: int, count: int) -> list[str]:
    settings = _settings(cluster, shards)
    client = create_redis(settings.redis_config())
    queue = JobQueue(client, settings.queue_config())
    ids = _job_ids(queue.shards, count)
    try:
        # Learn the slots before the burst, as the API and the worker do at start (their eviction check): a cold
        # redis-py async cluster client met by dozens of first commands at once sometimes fails one of them.
        assert isinstance(client, RedisCluster)
        await client.initialize()
        for start in range(0, count, 48):  # below the client's connection pool
            chunk = range(start, min(count, start + 48))
            await asyncio.gather(*(queue.enqueue(ids[n], _params(n), single_flight=False) for n in chunk))
    finally:
        await client.aclose()
    return ids


async def _window(cluster: LocalCluster, shards: int, ids: list[str], since: float) -> tuple[int, int, float, float]:
    """(jobs done, jobs claimed from ``since`` on, ``since``, their last completion) from the job records; one MGET
    per shard (one slot each).

    ``since`` is when every worker was ready (workers start a second or so apart on a busy machine; before that
    fewer of them were draining), so only the jobs claimed from then on are counted."""
    settings = _settings(cluster, shards)
    client = create_redis(settings.redis_config())
    queue = JobQueue(client, settings.queue_config())
    jobs: list[Job] = []
    try:
        by_shard: dict[str, list[str]] = {}
        for job_id in ids:
            by_shard.setdefault(queue.shards.of(job_id).prefix, []).append(job_id)
        for group in by_shard.values():
            keys = queue.shards.of(group[0])
            jobs += await done_jobs(client, [keys.job(i) for i in group])
    finally:
        await client.aclose()
    counted = [job for job in jobs if (job.started_at or 0.0) >= since]
    return len(jobs), len(counted), since, max((job.finished_at or 0.0 for job in counted), default=since)


def _redis_now(cluster: LocalCluster) -> float:
    with redis.Redis(port=cluster.masters()[0].port) as node:
        seconds, micros = node.time()
    return float(seconds) + float(micros) / 1e6


def _node_figures(port: int) -> dict[str, float]:
    with redis.Redis(port=port) as node:
        stats = node.info("stats")
        cpu = node.info("cpu")
        memory = node.info("memory")
    return {
        "commands": float(stats["total_commands_processed"]),
        "cpu_s": float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
        "dataset_bytes": float(memory["used_memory_dataset"]),
    }


def _flush(cluster: LocalCluster) -> None:
    for node in cluster.masters():
        with redis.Redis(port=node.port) as client:
            client.flushall()


def _wait_done(cluster: LocalCluster, shards: int, ids: list[str], timeout_s: float, workers: list[Any]) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        done, _counted, _since, _last = asyncio.run(_window(cluster, shards, ids, 0.0))
        if done >= len(ids):
            return
        for process in workers:
            if process.poll() is not None:
                raise RuntimeError(f"a worker exited ({process.returncode}) with {done}/{len(ids)} jobs done")
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {done}/{len(ids)} jobs done within {timeout_s:.0f}s")
        time.sleep(0.5)


def run_one(cluster: LocalCluster, shards: int, jobs: int, workers: int, logs: Path) -> Run:
    _flush(cluster)
    ids = asyncio.run(_enqueue(cluster, shards, jobs))
    masters = [node.port for node in cluster.masters()]
    before = {port: _node_figures(port) for port in masters}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "QUEUE_", "WORKER_", "BENCH_", "FAULT_"))}
    env |= {
        "REDIS_URL": cluster.url(),
        "QUEUE_SHARDS": str(shards),
        "BENCH_ENGINE": "noop",
        "MAX_BATCH": "8",
        "MODEL_ID": "bench-noop",
        "RESULT_TTL_S": "3600",
        "CACHE_ENABLED": "false",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    processes = []
    try:
        ports = []
        for index in range(workers):
            ports.append(free_port())
            worker_env = env | {"WORKER_ID": f"bench-{shards}-{index}", "WORKER_HEALTH_PORT": str(ports[-1])}
            log = logs / f"worker-{shards}-{index}.log"
            processes.append(spawn([sys.executable, "-m", "bench.fixed_worker"], cwd=ROOT, env=worker_env, log=log))
        for port in ports:
            wait_until_ok(f"http://127.0.0.1:{port}/readyz", 120, processes)
        since = _redis_now(cluster)
        _wait_done(cluster, shards, ids, 120 + jobs / 10, processes)
    finally:
        stop_processes(processes)
    after = {port: _node_figures(port) for port in masters}
    _done, counted, first, last = asyncio.run(_window(cluster, shards, ids, since))
    per_master = {
        port: {
            "commands": after[port]["commands"] - before[port]["commands"],
            "cpu_s": after[port]["cpu_s"] - before[port]["cpu_s"],
            "dataset_bytes": after[port]["dataset_bytes"],
        }
        for port in masters
    }
    return Run(shards, counted, last - first, per_master)


def _shares(run: Run, figure: str) -> str:
    total = sum(values[figure] for values in run.per_master.values()) or 1.0
    return " / ".join(f"{100 * values[figure] / total:.0f}%" for _port, values in sorted(run.per_master.items()))


def report(runs: list[Run], meta: dict[str, Any]) -> str:
    base = runs[0].jobs_per_s or 1.0
    lines = [
        "# Queue shards on a local Redis Cluster",
        "",
        f"Generated by `python -m bench.scale.shards{' --quick' if meta['quick'] else ''}` on {meta['date']}. "
        f"Machine: {meta['machine']['cpu']}, {meta['machine']['cores']} cores; load average at start {meta['load']}.",
        "",
        f"A real three-master Redis Cluster (no replicas), {meta['workers']} worker processes on the {NOOP_LABEL} "
        f"(`MAX_BATCH=8`), {meta['jobs']} jobs queued before the workers start, spread evenly over the shards. "
        "Jobs/s over the jobs claimed once every worker answered ready (`jobs` counts those), to the last "
        "completion (Redis's clock). Each master's share of the commands "
        "and of the Redis CPU time the run cost, masters in port order.",
        "",
        "| shards | jobs | seconds | jobs/s | × 1 shard | commands per master | Redis CPU per master | Redis CPU s (all) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        cpu = sum(values["cpu_s"] for values in run.per_master.values())
        lines.append(
            f"| {run.shards} | {run.jobs} | {run.seconds:.2f} | {run.jobs_per_s:.0f} | {run.jobs_per_s / base:.2f} | "
            f"{_shares(run, 'commands')} | {_shares(run, 'cpu_s')} | {cpu:.2f} |"
        )
    lines += ["", meta["reading"], ""]
    return "\n".join(lines)


def _reading(runs: list[Run], cores: int) -> str:
    one, most = runs[0], runs[-1]
    busiest = max(values["cpu_s"] for values in one.per_master.values())
    spread = max(values["cpu_s"] for values in most.per_master.values())
    busy = busiest / one.seconds if one.seconds > 0 else 0.0
    return (
        f"Reading: with 1 shard one master did {busiest:.2f} s of Redis CPU (all of it), busy {100 * busy:.0f}% of the "
        f"run; with {most.shards} the busiest "
        f"did {spread:.2f} s — the Redis work spreads over the masters as the shards do. Jobs/s went from "
        f"{one.jobs_per_s:.0f} to {most.jobs_per_s:.0f} ({most.jobs_per_s / (one.jobs_per_s or 1):.2f}×). On this "
        f"{cores}-core machine the workers, the servers and this script share the cores: even with one shard its master "
        "was far from saturated, so this load is bound by the workers' CPU, not by Redis, and shards cannot raise "
        "jobs/s here. What shards buy is headroom where one master's core is the limit (many workers on machines of "
        "their own against one busy master), which this machine cannot show."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer jobs: a smoke run of a minute or so")
    parser.add_argument("--jobs", type=int, default=None, help="jobs per shard count (default 30000; 6000 with --quick)")
    parser.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    args = parser.parse_args()
    jobs = args.jobs or (6000 if args.quick else 30000)
    load = os.getloadavg()[0]
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-shards-") as scratch:
        workdir = Path(scratch)
        cluster = start_redis_cluster(workdir / "cluster", masters=3, replicas=0)
        try:
            for shards in SHARD_COUNTS:
                print(f"shards: {shards} shard(s), {jobs} jobs, {args.workers} workers", flush=True)
                runs.append(run_one(cluster, shards, jobs, args.workers, workdir))
                print(f"  {runs[-1].jobs_per_s:.0f} jobs/s", flush=True)
        finally:
            cluster.stop()
    about = machine()
    meta = {
        "quick": args.quick,
        "date": utc_now(),
        "machine": about,
        "load": f"{load:.2f}",
        "jobs": jobs,
        "workers": args.workers,
        "engine": NOOP_LABEL,
        "reading": _reading(runs, int(about["cores"] or 0)),
    }
    name = "shards-quick" if args.quick else "shards"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.md").write_text(report(runs, meta))
    data = {
        **meta,
        "runs": [
            {
                "shards": r.shards,
                "jobs": r.jobs,
                "seconds": r.seconds,
                "jobs_per_s": r.jobs_per_s,
                "per_master": {str(p): v for p, v in r.per_master.items()},
            }
            for r in runs
        ],
    }
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
    print((RESULTS / f"{name}.md").read_text())


if __name__ == "__main__":
    main()
