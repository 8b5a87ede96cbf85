"""One engine's deployment for the soak (a redis-server, the API, one worker, as ``make up`` starts them) and the
sampler that reads its memory, Redis and counters as it runs."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import redis as redis_sync

from bench.stacks import EngineSpec, Stack
from ttsq.store.local_redis import RedisServer, start_redis_server

NAMESPACE = "ttsq"
KEY_KINDS = ("job", "result", "stream", "cache", "inflight")
FIXED_STAND_IN = (
    "fixed-cost model of GPU time (NOT ChatTTS) - a benchmark STAND-IN: 300 ms per call + 20 ms per item, returns silence"
)
TINY_LABEL = "tiny random-weight checkpoint (MODEL=tiny: the real ChatTTS code path, random weights, 48 audio tokens per chunk)"
TINY_TOKENS = "48"
L1_MAX_MIB = 8
"""CACHE_L1_MAX_BYTES of the soak's processes (default 64 MiB). Every SubmitPollUser result is new, so the
worker's in-process LRU grows until its bound: at the default that takes about the whole 10 minutes (measured:
worker RSS 108 → 134 MiB from 4 to 7.5 min while its L1 filled to 51 MiB, no eviction yet), which would read
as a leak. 8 MiB fills within the warm-up, so the RSS after it shows what a leak would, with LRU evictions
under way (counted in the summary)."""


def engine_specs() -> dict[str, EngineSpec]:
    return {
        "fixed": EngineSpec(
            "fixed",
            FIXED_STAND_IN,
            {"BENCH_ENGINE": "fixed", "MODEL_ID": "soak-fixed-cost-stand-in"},
            [sys.executable, "-m", "bench.fixed_worker"],
            90,
            stand_in=True,
        ),
        "tiny": EngineSpec(
            "tiny",
            TINY_LABEL,
            {"MODEL": "tiny", "MAX_NEW_TOKEN": TINY_TOKENS, "MIN_NEW_TOKEN": TINY_TOKENS},
            [sys.executable, "worker.py"],
            300,
        ),
    }


@dataclass(frozen=True)
class Plan:
    """Everything one run is configured by, recorded in the summary."""

    duration_s: float
    engines: list[str]
    users: int | None
    load: float
    calibrate_s: float
    warmup_s: float
    ttl_s: int
    sample_s: float
    bucket_s: float
    seed: int
    out: Path
    command: str


def _owned_env() -> dict[str, str]:
    """This environment minus anything that would reconfigure the deployment or locust behind the harness's back."""
    prefixes = ("FAULT_", "REDIS_", "MODEL", "WORKER_", "LOCUST_", "CACHE_", "RATE_LIMIT", "MAX_", "RESULT_TTL", "BENCH_", "AUTH")
    return {key: value for key, value in os.environ.items() if not key.startswith(prefixes)}


@dataclass
class Deployment:
    """One engine's processes: a redis-server, the API, one worker. Stopped, whatever happens, by :meth:`close`."""

    spec: EngineSpec
    plan: Plan
    tmp: Path
    redis_url: str = ""
    api_url: str = ""
    worker_url: str = ""
    redis_server: RedisServer | None = None
    stack: Stack = field(init=False)

    def __post_init__(self) -> None:
        self.stack = Stack(self.tmp)

    @property
    def processes(self) -> dict[str, subprocess.Popen[bytes]]:
        return self.stack.processes

    def env(self) -> dict[str, str]:
        ttl = str(self.plan.ttl_s)
        return _owned_env() | {
            "REDIS_URL": self.redis_url,
            "TASK_ID_SECRET": "soak-test-task-id-secret-0123456789",
            "RESULT_TTL_S": ttl,
            "CACHE_TTL_S": ttl,
            "CACHE_DIR": str(self.tmp / "cache"),
            "CACHE_L1_MAX_BYTES": str(L1_MAX_MIB * 2**20),
            # Every simulated client is one loopback address: the per-client limits would refuse the mix.
            "RATE_LIMIT_PER_S": "1000000",
            "RATE_LIMIT_BURST": "1000000",
            "MAX_QUEUED_PER_KEY": "1000000",
            "DEVICE": "cpu",
            "CPU_THREADS": "1",
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
            "SHUTDOWN_GRACE_S": "10",
            **self.spec.env,
        }

    def start(self) -> None:
        self.redis_server = start_redis_server(self.tmp / "redis")
        self.redis_url = self.redis_server.url
        env = self.env()
        self.api_url = self.stack.start_api("api", env, 90)
        worker_id = f"soak-{self.spec.key}"
        self.worker_url = self.stack.start_worker("worker", self.spec.command, env, self.spec.ready_timeout_s, worker_id)

    def log_tail(self, name: str, lines: int = 30) -> str:
        return self.stack.log_tail(name, lines)

    def close(self) -> None:
        """SIGTERM (the worker finishes its batch), SIGKILL after 30 s; then Redis."""
        self.stack.close()
        if self.redis_server is not None:
            self.redis_server.stop()


# ---- reading the deployment ----------------------------------------------------------------------


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Prometheus text exposition → (name, labels, value) rows."""
    rows = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?", line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        try:
            rows.append((match.group(1), labels, float(match.group(3))))
        except ValueError:
            continue
    return rows


def metric(rows: Sequence[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    """The sum of every row of ``name`` whose labels include ``labels``."""
    return sum(v for n, ls, v in rows if n == name and all(ls.get(k) == want for k, want in labels.items()))


def scrape(url: str) -> list[tuple[str, dict[str, str], float]]:
    try:
        response = httpx.get(f"{url}/metrics", timeout=5.0)
    except httpx.HTTPError:
        return []
    return parse_metrics(response.text) if response.status_code == 200 else []


class Sampler:
    """Reads the deployment every ``sample_s``: process memory and CPU, Redis, the queue, the workers' counters."""

    FIELDS = (
        "ts", "load1", "api_rss_mib", "worker_rss_mib", "locust_rss_mib", "api_cpu_pct", "worker_cpu_pct", "locust_cpu_pct",
        "redis_cpu_pct", "api_l1_mib", "worker_l1_mib", "api_l1_evictions", "worker_l1_evictions", "redis_used_memory_mib",
        "redis_rss_mib", "redis_keys",
        "redis_keys_no_ttl", "redis_expired_keys", *(f"keys_{kind}" for kind in KEY_KINDS), "keys_other", "queue_depth",
        "processing", "jobs_done", "jobs_failed",
    )  # fmt: skip

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.redis = redis_sync.Redis.from_url(deployment.redis_url, socket_timeout=5)
        self.processes: dict[str, psutil.Process] = {}
        for name, process in deployment.processes.items():
            self.watch(name, process.pid)
        assert deployment.redis_server is not None, "a deployment is sampled once started"
        self.watch("redis", deployment.redis_server.process.pid)
        self.rows: list[dict[str, float]] = []

    def watch(self, name: str, pid: int) -> None:
        process = psutil.Process(pid)
        process.cpu_percent(None)  # the first call starts the interval
        self.processes[name] = process

    def _process(self, name: str) -> tuple[float, float]:
        """(RSS MiB of the process and its children, CPU % since the last sample); NaN once it has gone."""
        process = self.processes.get(name)
        if process is None:
            return math.nan, math.nan
        try:
            rss = process.memory_info().rss + sum(c.memory_info().rss for c in process.children(recursive=True))
            return rss / 2**20, process.cpu_percent(None)
        except psutil.Error:
            return math.nan, math.nan

    def sample(self) -> dict[str, float]:
        from ttsq.store.keys import Keys

        keys = Keys(NAMESPACE)
        row: dict[str, float] = {"ts": time.time(), "load1": os.getloadavg()[0]}
        for name in ("api", "worker", "locust", "redis"):
            rss, cpu = self._process(name)
            if name != "redis":
                row[f"{name}_rss_mib"] = rss
            row[f"{name}_cpu_pct"] = cpu
        api, worker = scrape(self.deployment.api_url), scrape(self.deployment.worker_url)
        row["api_l1_mib"] = metric(api, "ttsq_cache_bytes", level="l1") / 2**20 if api else math.nan
        row["worker_l1_mib"] = metric(worker, "ttsq_cache_bytes", level="l1") / 2**20 if worker else math.nan
        row["api_l1_evictions"] = metric(api, "ttsq_cache_evictions_total", level="l1") if api else math.nan
        row["worker_l1_evictions"] = metric(worker, "ttsq_cache_evictions_total", level="l1") if worker else math.nan
        row["jobs_done"] = metric(worker, "ttsq_jobs_total", outcome="done") if worker else math.nan
        row["jobs_failed"] = (
            sum(metric(worker, "ttsq_jobs_total", outcome=o) for o in ("failed", "retried", "dead_lettered"))
            if worker
            else math.nan
        )
        try:
            memory, stats, keyspace = self.redis.info("memory"), self.redis.info("stats"), self.redis.info("keyspace")
            db0 = keyspace.get("db0", {"keys": 0, "expires": 0})
            row |= {
                "redis_used_memory_mib": memory["used_memory"] / 2**20,
                "redis_rss_mib": memory["used_memory_rss"] / 2**20,
                "redis_keys": db0["keys"],
                "redis_keys_no_ttl": db0["keys"] - db0["expires"],
                "redis_expired_keys": stats["expired_keys"],
                "queue_depth": self.redis.llen(keys.queue),
                "processing": self.redis.llen(keys.processing),
            }
            kinds: Counter[str] = Counter()
            for key in self.redis.scan_iter(count=2000):
                text = key.decode(errors="replace")
                kind = text[len(keys.prefix) :].split(":", 1)[0] if text.startswith(keys.prefix) else "foreign"
                kinds[kind if kind in KEY_KINDS else "other"] += 1
            row |= {f"keys_{kind}": kinds[kind] for kind in (*KEY_KINDS, "other")}
        except redis_sync.RedisError:
            pass
        self.rows.append(row)
        return row

    def keys_without_ttl(self, limit: int = 30) -> list[str]:
        """The names of keys that never expire (at most ``limit``): a growing set of these would be a leak."""
        names = []
        for key in self.redis.scan_iter(count=2000):
            if self.redis.ttl(key) == -1:
                names.append(key.decode(errors="replace"))
                if len(names) >= limit:
                    break
        return sorted(names)

    def close(self) -> None:
        self.redis.close()
