"""Soak test: the locust mix for minutes against a real deployment, with memory, Redis and latency sampled as it runs.

    python -m loadtest.soak [--duration 10m] [--engines fixed,tiny] [--users N] [--out DIR]

Why: a load test of a minute shows speed; leaks, unbounded key growth and latency that creeps up
only show after minutes of steady traffic. For each engine this starts a fresh deployment exactly as
``make up`` does (a real ``redis-server`` from :mod:`ttsq.store.local_redis`, ``uvicorn app:app``, one
worker process), measures its capacity, sizes the user count to ~70 % of it, runs every user class of
``loadtest/locustfile.py`` headless for ``--duration``, and every few seconds samples:

* RSS and CPU of the API, the worker and locust (psutil), and the worker's and API's L1 cache bytes;
* Redis ``used_memory``, key count and keys without a TTL (``INFO``), keys by kind (``SCAN``), queue depth;
* the worker's job counters (done, failed) from its ``/metrics``.

Latency per request name per time bucket (a minute in a long run) comes from locust itself: this
file is also handed to locust as a second locustfile (``-f loadtest/locustfile.py,loadtest/soak.py``),
where it only adds a request listener keeping one response-time histogram per name per bucket
(locust's own history CSV has percentiles over a sliding 10 s window, which cannot be merged into
per-minute ones). It defines no users, and does nothing unless the harness set ``TTSQ_SOAK_BUCKETS``.

Engines run one after the other, each on its own deployment:

* ``fixed``: the fixed-cost model of GPU time (NOT ChatTTS; ``bench/fixed_worker.py``), a STAND-IN
  that sleeps 300 ms per call + 20 ms per item and returns silence. Labelled as such in every output.
* ``tiny``: ``MODEL=tiny``, the genuine ChatTTS code path on random weights (48 audio tokens per chunk).

Results and cache entries expire after a short ``RESULT_TTL_S`` / ``CACHE_TTL_S`` (``--ttl``, 60 s in a
long run), so expiry reaches a steady state within the run; the fair-use limits are lifted, because
every simulated client comes from one loopback address (``RATE_LIMIT_PER_S``, ``RATE_LIMIT_BURST``,
``MAX_QUEUED_PER_KEY``). Writes into ``DIR/``: ``summary.md`` (with the date, the command, the machine's
load average and a verdict per criterion: errors, RSS ±10 %, Redis flat, p99 stable), ``summary.json``
(every figure) and the raw files (samples, per-bucket latency, locust's reports), under 1 MB in all.
Exit status: 0 when every engine ran without an unexpected error, 1 when one had errors, 2 when it could
not run. The other criteria are measured figures with a verdict for the reader, never the exit status:
on a shared machine, other work moves latency.
"""

from __future__ import annotations

import argparse
import ast
import csv
import datetime as dt
import heapq
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import redis as redis_sync

from bench.interrupt import Interrupted, interruptible
from bench.machine import machine

ROOT = Path(__file__).resolve().parent.parent
LOCUSTFILE = ROOT / "loadtest" / "locustfile.py"
BUCKETS_ENV = "TTSQ_SOAK_BUCKETS"
"""Set by the harness in locust's environment: where the per-bucket latency goes (JSON)."""
BUCKET_S_ENV = "TTSQ_SOAK_BUCKET_S"
NAMESPACE = "ttsq"
KEY_KINDS = ("job", "result", "stream", "cache", "inflight")
FIXED_STAND_IN = (
    "fixed-cost model of GPU time (NOT ChatTTS) - a benchmark STAND-IN: 300 ms per call + 20 ms per item, returns silence"
)
TINY_LABEL = "tiny random-weight checkpoint (MODEL=tiny: the real ChatTTS code path, random weights, 48 audio tokens per chunk)"
TINY_TOKENS = "48"
RESULTS_BUDGET_BYTES = 1_000_000
L1_MAX_MIB = 8
"""CACHE_L1_MAX_BYTES of the soak's processes (default 64 MiB). Every SubmitPollUser result is new, so the
worker's in-process LRU grows until its bound: at the default that takes about the whole 10 minutes (measured:
worker RSS 108 → 134 MiB from 4 to 7.5 min while its L1 filled to 51 MiB, no eviction yet), which would read
as a leak. 8 MiB fills within the warm-up, so the RSS after it shows what a leak would, with LRU evictions
under way (counted in the summary)."""


# ---- shared by the harness and the locust listener ---------------------------------------------


def locust_round(ms: float) -> int:
    """Round a response time as locust's histogram does (two significant digits above 100 ms)."""
    if ms < 100:
        return round(ms)
    if ms < 1000:
        return int(round(ms, -1))
    if ms < 10_000:
        return int(round(ms, -2))
    return int(round(ms, -3))


def percentile(histogram: Mapping[int, int], fraction: float) -> int:
    """locust's own rule (``stats.calculate_response_time_percentile``) on a ``{ms: count}`` histogram."""
    total = sum(histogram.values())
    rank, seen = int(total * fraction), 0
    for ms in sorted(histogram, reverse=True):
        seen += histogram[ms]
        if total - seen <= rank:
            return ms
    return 0


# ---- inside locust: latency per request name per bucket ----------------------------------------


class BucketRecorder:
    """One response-time histogram, failure count and status count per (type, name, bucket), in locust's process.

    Buckets are counted from locust's ``test_start``; a request falls in the bucket in which it ended.
    Only percentiles are written (small files), at ``test_stop`` and again at ``quitting``.
    """

    def __init__(self, path: Path, bucket_s: float) -> None:
        self.path = path
        self.bucket_s = bucket_s
        self.started: float | None = None
        self.histograms: dict[tuple[str, str, int], Counter[int]] = defaultdict(Counter)
        self.failures: dict[tuple[str, str, int], Counter[str]] = defaultdict(Counter)
        self.statuses: dict[tuple[str, str, int], Counter[str]] = defaultdict(Counter)

    def on_test_start(self, **_: Any) -> None:
        self.started = time.time()

    def on_request(self, request_type: str, name: str, response_time: float, exception: Any = None, **kwargs: Any) -> None:
        now = time.time()
        if self.started is None:
            self.started = now
        key = (request_type, name, int((now - self.started) // self.bucket_s))
        self.histograms[key][locust_round(response_time or 0.0)] += 1
        status = getattr(kwargs.get("response"), "status_code", None)
        if status is not None:
            self.statuses[key][str(status)] += 1
        if exception is not None:
            self.failures[key][str(exception)[:160]] += 1

    def write(self, **_: Any) -> None:
        rows = []
        for (request_type, name, bucket), histogram in sorted(self.histograms.items()):
            key = (request_type, name, bucket)
            rows.append(
                {
                    "type": request_type,
                    "name": name,
                    "bucket": bucket,
                    "count": sum(histogram.values()),
                    "failures": sum(self.failures[key].values()),
                    "p50": percentile(histogram, 0.5),
                    "p95": percentile(histogram, 0.95),
                    "p99": percentile(histogram, 0.99),
                    "max": max(histogram),
                    "statuses": dict(self.statuses[key]),
                    "failure_messages": dict(self.failures[key]),
                }
            )
        body = {"started": self.started, "bucket_s": self.bucket_s, "rows": rows}
        self.path.write_text(json.dumps(body, indent=0))


def _install_bucket_recorder(path: Path, bucket_s: float) -> None:
    from locust import events

    recorder = BucketRecorder(path, bucket_s)
    events.test_start.add_listener(recorder.on_test_start)  # type: ignore[no-untyped-call]
    events.request.add_listener(recorder.on_request)  # type: ignore[no-untyped-call]
    events.test_stop.add_listener(recorder.write)  # type: ignore[no-untyped-call]
    events.quitting.add_listener(recorder.write)  # type: ignore[no-untyped-call]


if __name__ != "__main__" and "locust" in sys.modules and os.environ.get(BUCKETS_ENV):
    # Loaded by locust as a second locustfile: record latency per bucket, nothing else.
    _install_bucket_recorder(Path(os.environ[BUCKETS_ENV]), float(os.environ.get(BUCKET_S_ENV, "60")))


# ---- the harness -------------------------------------------------------------------------------


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] soak: {message}", flush=True)


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``1h`` → seconds (locust's ``-t`` spelling)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 60s, 10m, 1h)")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def _literal(name: str) -> Any:
    """A constant of the locustfile, read from its source: importing it here would monkey-patch this process with gevent."""
    tree = ast.parse(LOCUSTFILE.read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
                return ast.literal_eval(node.value)
    raise LookupError(f"{name} not found in {LOCUSTFILE}")


@dataclass(frozen=True)
class UserClass:
    name: str
    weight: int
    wait_min_s: float
    wait_max_s: float


def user_classes() -> list[UserClass]:
    """The locustfile's user classes with their weights and ``between(a, b)`` waits, from its source."""
    classes = []
    for node in ast.parse(LOCUSTFILE.read_text()).body:
        if not isinstance(node, ast.ClassDef) or not any(isinstance(b, ast.Name) and b.id == "TTSUser" for b in node.bases):
            continue
        attrs: dict[str, Any] = {}
        for statement in node.body:
            if isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name):
                attrs[statement.targets[0].id] = statement.value
        wait = attrs["wait_time"]
        assert isinstance(wait, ast.Call) and len(wait.args) == 2, f"{node.name}: wait_time is not between(a, b)"
        low, high = (float(ast.literal_eval(arg)) for arg in wait.args)
        classes.append(UserClass(node.name, int(ast.literal_eval(attrs["weight"])), low, high))
    return classes


def class_split(classes: Sequence[UserClass], users: int) -> Counter[str]:
    """How locust shares ``users`` between the classes: its own order (``locust.dispatch._kl_generator``), by weight."""
    heap = [(c.weight * math.log2(c.weight / (c.weight + 1.0)), c.weight + 1.0, c.weight, c.name) for c in classes if c.weight > 0]
    heapq.heapify(heap)
    split: Counter[str] = Counter()
    for _ in range(users):
        _, x, weight, name = heap[0]
        split[name] += 1
        heapq.heapreplace(heap, (weight * math.log2(x / (x + 1.0)), x + 1.0, weight, name))
    return split


@dataclass(frozen=True)
class Demand:
    """Jobs per second the mix asks of the workers: an upper bound, so that the chosen load is at most the target.

    Only ``SubmitPollUser`` makes a new job every time (a fresh seed); its cycle is at least its mean
    wait plus one status poll. The cached classes miss once per distinct request (4 for
    ``CacheHeavyUser``; 8 sentences × 4 voices × 2 formats for ``OpenAIUser``) and then hit: the API's
    L1 and the disk's L3 have no TTL, so a short ``CACHE_TTL_S`` does not make them miss again.
    Those one-off jobs come early in the run and are left out of the steady rate.
    """

    classes: tuple[UserClass, ...]
    cycle_s: float
    mean_wait_s: float
    poll_interval_s: float
    one_off_jobs: int

    def jobs_s(self, users: int) -> float:
        return class_split(self.classes, users)["SubmitPollUser"] / self.cycle_s

    def users_for(self, jobs_s: float) -> int:
        """The most users whose steady demand stays within ``jobs_s`` (at least one)."""
        users = 1
        while users < 10_000 and self.jobs_s(users + 1) <= jobs_s:
            users += 1
        return users

    def explain(self, users: int) -> str:
        split = class_split(self.classes, users)
        return (
            f"{users} users are {', '.join(f'{split[c.name]} {c.name}' for c in self.classes)} (locust's split by weight); "
            f"each SubmitPollUser makes at most one job per {self.cycle_s:.2f} s (mean wait {self.mean_wait_s:.2f} s + one "
            f"{self.poll_interval_s:g} s poll), so they ask at most {self.jobs_s(users):.2f} jobs/s; the cached classes add "
            f"at most {self.one_off_jobs} one-off misses, then hit"
        )


def demand(poll_interval_s: float = 0.8) -> Demand:
    classes = user_classes()
    submit_poll = next(c for c in classes if c.name == "SubmitPollUser")
    mean_wait_s = (submit_poll.wait_min_s + submit_poll.wait_max_s) / 2
    sentences, voices, formats = (len(_literal(name)) for name in ("SENTENCES", "OPENAI_VOICES", "OPENAI_FORMATS"))
    distinct = len(_literal("CACHE_SENTENCES")) + sentences * voices * formats
    return Demand(tuple(classes), mean_wait_s + poll_interval_s, mean_wait_s, poll_interval_s, distinct)


@dataclass(frozen=True)
class EngineSpec:
    key: str
    label: str
    stand_in: bool
    env: dict[str, str]
    command: list[str]
    ready_timeout_s: float


def engine_specs() -> dict[str, EngineSpec]:
    return {
        "fixed": EngineSpec(
            "fixed",
            FIXED_STAND_IN,
            True,
            {"BENCH_ENGINE": "fixed", "MODEL_ID": "soak-fixed-cost-stand-in"},
            [sys.executable, "-m", "bench.fixed_worker"],
            90,
        ),
        "tiny": EngineSpec(
            "tiny",
            TINY_LABEL,
            False,
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
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    redis_server: Any = None

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
        from ttsq.runtime.launch import api_command, free_port, spawn, wait_until_ok
        from ttsq.store.local_redis import start_redis_server

        self.redis_server = start_redis_server(self.tmp / "redis")
        self.redis_url = self.redis_server.url
        env = self.env()
        port = free_port()
        self.processes["api"] = spawn(api_command(port), cwd=ROOT, env=env, log=self.tmp / "api.log")
        self.api_url = f"http://127.0.0.1:{port}"
        self._wait("api", f"{self.api_url}/readyz", 90, wait_until_ok)
        health = free_port()
        worker_env = env | {"WORKER_ID": f"soak-{self.spec.key}", "WORKER_HEALTH_PORT": str(health)}
        self.processes["worker"] = spawn(self.spec.command, cwd=ROOT, env=worker_env, log=self.tmp / "worker.log")
        self.worker_url = f"http://127.0.0.1:{health}"
        self._wait("worker", f"{self.worker_url}/readyz", self.spec.ready_timeout_s, wait_until_ok)

    def _wait(self, name: str, url: str, timeout_s: float, wait_until_ok: Callable[..., None]) -> None:
        try:
            wait_until_ok(url, timeout_s, [self.processes[name]])
        except (TimeoutError, RuntimeError) as exc:
            raise RuntimeError(f"{name} not ready ({exc}):\n{self.log_tail(name)}") from None

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.tmp / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def close(self) -> None:
        """SIGTERM (the worker finishes its batch), SIGKILL after 30 s; then Redis."""
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
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


# ---- capacity and user count --------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    capacity_jobs_s: float
    measured_s: float
    jobs: int
    mean_batch: float


def calibrate(deployment: Deployment, seconds: float) -> Calibration:
    """The deployment's capacity in jobs/s: keep a full batch (8 jobs) of the SubmitPollUser kind waiting in the queue
    for ``seconds`` after the first completion, count completions, then let the queue drain.

    Measured through the same API and worker that the soak then runs on (they start the soak warm).
    """
    from ttsq.store.keys import Keys

    sentences: tuple[str, ...] = _literal("SENTENCES")
    queue_key = Keys(NAMESPACE).queue
    client = redis_sync.Redis.from_url(deployment.redis_url, socket_timeout=5)
    http = httpx.Client(base_url=deployment.api_url, timeout=30.0)
    depth_target, n = 8, 0  # one CPU batch (MAX_BATCH=auto is 8 on a CPU) always waiting

    def counters() -> tuple[float, float, float]:
        rows = scrape(deployment.worker_url)
        return (
            metric(rows, "ttsq_jobs_total", outcome="done"),
            metric(rows, "ttsq_batch_size_sum"),
            metric(rows, "ttsq_batch_size_count"),
        )

    def top_up() -> None:
        nonlocal n
        for _ in range(max(0, depth_target - int(client.llen(queue_key)))):
            n += 1
            body = {"text": sentences[n % len(sentences)], "seed": 1_000_000 + n, "format": "wav"}
            response = http.post("/v1/tts/submit", json=body)
            if response.status_code != 202:
                raise RuntimeError(f"calibration submit answered {response.status_code}: {response.text[:200]}")

    try:
        done0 = counters()[0]
        deadline = time.monotonic() + 300
        while counters()[0] <= done0:  # the first completion: the worker is busy from here on
            top_up()
            if time.monotonic() > deadline:
                raise RuntimeError(f"no job finished within 300 s of calibration:\n{deployment.log_tail('worker')}")
            time.sleep(0.05)
        started, (done1, batch_sum1, batch_count1) = time.monotonic(), counters()
        while time.monotonic() - started < seconds:
            top_up()
            time.sleep(0.05)
        elapsed, (done2, batch_sum2, batch_count2) = time.monotonic() - started, counters()
        deadline = time.monotonic() + 300
        while client.llen(queue_key) or client.llen(Keys(NAMESPACE).processing):
            if time.monotonic() > deadline:
                raise RuntimeError("the calibration's jobs did not drain within 300 s")
            time.sleep(0.2)
    finally:
        http.close()
        client.close()
    batches = batch_count2 - batch_count1
    return Calibration(
        (done2 - done1) / elapsed, elapsed, int(done2 - done1), (batch_sum2 - batch_sum1) / batches if batches else 0.0
    )


# ---- one engine ----------------------------------------------------------------------------------


def _log_findings(path: Path) -> dict[str, Any]:
    """WARNING/ERROR lines and tracebacks in a process log (LOG_LEVEL=WARNING keeps only those)."""
    if not path.exists():
        return {"errors": 0, "warnings": 0, "tracebacks": 0, "examples": []}
    lines = path.read_text(errors="replace").splitlines()
    errors = [line for line in lines if re.search(r"\b(ERROR|CRITICAL)\b", line)]
    warnings = [line for line in lines if re.search(r"\bWARNING\b", line)]
    distinct = list(dict.fromkeys(re.sub(r"[0-9a-f-]{36}|\d+(\.\d+)?", "#", line)[:200] for line in errors + warnings))
    return {
        "errors": len(errors),
        "warnings": len(warnings),
        "tracebacks": sum("Traceback" in line for line in lines),
        "examples": distinct[:5],
    }


def run_engine(spec: EngineSpec, plan: Plan, raw: Path) -> dict[str, Any]:
    """Deploy, calibrate, soak, sample; the engine's figures (also on failure: what was measured)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"ttsq-soak-{spec.key}-"))
    deployment = Deployment(spec, plan, tmp)
    result: dict[str, Any] = {"engine": spec.key, "label": spec.label, "stand_in": spec.stand_in, "logs": str(tmp)}
    sampler: Sampler | None = None
    locust: subprocess.Popen[bytes] | None = None
    try:
        progress(f"{spec.key}: starting redis-server, the API and a worker ({spec.label})")
        deployment.start()
        mix = demand()
        how = ""
        if plan.calibrate_s > 0:
            progress(f"{spec.key}: measuring capacity for {plan.calibrate_s:g} s (a batch always waiting)")
            calibration = calibrate(deployment, plan.calibrate_s)
            result["calibration"] = vars(calibration) | {"target_load": plan.load}
            how = (
                f"capacity measured at {calibration.capacity_jobs_s:.2f} jobs/s ({calibration.jobs} jobs in "
                f"{calibration.measured_s:.0f} s with a full batch always queued, mean batch {calibration.mean_batch:.1f}: "
                "every SubmitPollUser job has its own seed, hence its own voice: with ttsq's decoder they share steps, "
                "with ChatTTS's own loop they share no call); "
            )
        if plan.users is None:
            target = plan.load * result["calibration"]["capacity_jobs_s"]
            users = mix.users_for(target)
            how += f"the target is {plan.load:.0%} of it, {target:.2f} jobs/s; {mix.explain(users)}"
        else:
            users = plan.users
            how += f"the user count was given on the command line (--users); {mix.explain(users)}"
        spawn_rate = max(1.0, round(users / 5, 1))  # ramp-up within ~5 s
        split = class_split(mix.classes, users)
        result |= {"users": users, "spawn_rate": spawn_rate, "how_users": how, "demand_bound_jobs_s": round(mix.jobs_s(users), 3)}
        result["user_split"] = dict(split)
        progress(f"{spec.key}: {how}")

        buckets_file, prefix = tmp / "buckets.json", tmp / "locust"
        command = [
            sys.executable, "-m", "locust", "-f", f"{LOCUSTFILE},{Path(__file__).resolve()}", "--headless",
            "-u", str(users), "-r", str(spawn_rate), "-t", f"{plan.duration_s:g}s", "--host", deployment.api_url,
            "--csv", str(prefix), "--json-file", str(prefix), "--only-summary",
            "--tts-seed", str(plan.seed), "--tts-flow-rows",
        ]  # fmt: skip
        locust_env = deployment.env() | {BUCKETS_ENV: str(buckets_file), BUCKET_S_ENV: str(plan.bucket_s)}
        sampler = Sampler(deployment)
        result["load_average_start"] = [round(x, 2) for x in os.getloadavg()]
        progress(
            f"{spec.key}: locust mix, {users} users (+{spawn_rate}/s) for {plan.duration_s:g} s; sampling every {plan.sample_s:g} s"
        )
        launched = time.time()
        with (tmp / "locust.log").open("ab") as log:
            locust = subprocess.Popen(
                command, cwd=ROOT, env=locust_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        sampler.watch("locust", locust.pid)
        hard_stop = time.monotonic() + plan.duration_s + 180
        next_sample = time.monotonic()
        while locust.poll() is None:
            if time.monotonic() >= next_sample:
                sampler.sample()
                next_sample += plan.sample_s
                if len(sampler.rows) % max(1, round(60 / plan.sample_s)) == 0:
                    row = sampler.rows[-1]
                    progress(
                        f"{spec.key}: t={row['ts'] - launched:.0f}s API {row['api_rss_mib']:.0f} MiB, worker "
                        f"{row['worker_rss_mib']:.0f} MiB, Redis {row.get('redis_used_memory_mib', math.nan):.1f} MiB, "
                        f"queue {row.get('queue_depth', math.nan):.0f}, load {row['load1']:.1f}"
                    )
            if time.monotonic() > hard_stop:
                raise RuntimeError(f"locust still running {plan.duration_s + 180:.0f} s after its start")
            time.sleep(max(0.0, min(0.2, next_sample - time.monotonic())))
        stopped = time.time()
        result["locust_exit"] = locust.returncode
        sampler.sample()  # after the users stopped
        result["keys_without_ttl_at_end"] = sampler.keys_without_ttl()
        result["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        result["server"] = _server_side(deployment)
        result |= summarise(spec, plan, sampler.rows, tmp, (launched, stopped), raw, users / spawn_rate)
    except Interrupted:
        raise
    except Exception as exc:  # noqa: BLE001 - the report says what failed, with the logs' place; the next engine still runs
        result["error"] = f"{exc} (process logs kept in {tmp})"[-3000:]
        progress(f"{spec.key}: FAILED: {result['error']}")
    finally:
        if locust is not None and locust.poll() is None:
            os.killpg(locust.pid, signal.SIGKILL)
            locust.wait()
        if sampler is not None:
            sampler.close()
        deployment.close()
        result["log_findings"] = {name: _log_findings(tmp / f"{name}.log") for name in ("api", "worker")}
        locust_log = (tmp / "locust.log").read_text(errors="replace") if (tmp / "locust.log").exists() else ""
        result["locust_cpu_warning"] = "CPU usage above" in locust_log or "CPU usage was too high" in locust_log
        result["locust_tracebacks"] = locust_log.count("Traceback")
        for bulky in ("cache", "redis"):  # the L3 cache and Redis's directory: hundreds of MB after a long run
            shutil.rmtree(tmp / bulky, ignore_errors=True)
    return result


def _server_side(deployment: Deployment) -> dict[str, float]:
    """What the service itself says went wrong: 5xx answers, failed or retried jobs."""
    api, worker = scrape(deployment.api_url), scrape(deployment.worker_url)
    server_errors = sum(v for n, ls, v in api if n == "ttsq_http_requests_total" and ls.get("status", "").startswith("5"))
    outcomes = {
        o: metric(worker, "ttsq_jobs_total", outcome=o) for o in ("done", "retried", "failed", "dead_lettered", "cancelled")
    }
    return {
        "api_5xx": server_errors,
        **{f"jobs_{o}": v for o, v in outcomes.items()},
        "batch_mean": metric(worker, "ttsq_batch_size_sum") / max(1.0, metric(worker, "ttsq_batch_size_count")),
        "engine_slots": metric(worker, "ttsq_engine_slots"),
        "wasted_row_steps": 1
        - metric(worker, "ttsq_engine_row_steps_total") / max(1.0, metric(worker, "ttsq_engine_slot_steps_total")),
        "inference_s": metric(worker, "ttsq_inference_seconds_sum"),
    }


# ---- figures ---------------------------------------------------------------------------------------


def _median(rows: Sequence[Mapping[str, float]], key: str) -> float | None:
    values = [row[key] for row in rows if key in row and not math.isnan(row[key])]
    return round(statistics.median(values), 2) if values else None


def _ratio(end: float | None, start: float | None) -> float | None:
    return round(end / start, 3) if end is not None and start else None


def _window(rows: Sequence[Mapping[str, float]], start: float, end: float) -> list[Mapping[str, float]]:
    return [row for row in rows if start <= row["t"] < end]


def _window_or_nearest(rows: Sequence[Mapping[str, float]], start: float, end: float) -> list[Mapping[str, float]]:
    """The samples in ``[start, end)``; when a slow sample left it empty, the one sample nearest to its middle."""
    inside = _window(rows, start, end)
    if inside or not rows:
        return inside
    middle = (start + end) / 2
    return [min(rows, key=lambda row: abs(row["t"] - middle))]


def _slope_per_min(rows: Sequence[Mapping[str, float]], key: str) -> float | None:
    """Least-squares slope of ``key`` against time, per minute: a leak is a steady positive slope."""
    points = [(row["t"], row[key]) for row in rows if key in row and not math.isnan(row[key])]
    if len(points) < 3:
        return None
    mean_t, mean_v = statistics.fmean(t for t, _ in points), statistics.fmean(v for _, v in points)
    var = sum((t - mean_t) ** 2 for t, _ in points)
    return round(60 * sum((t - mean_t) * (v - mean_v) for t, v in points) / var, 3) if var else None


def summarise(
    spec: EngineSpec,
    plan: Plan,
    samples: list[dict[str, float]],
    tmp: Path,
    bounds: tuple[float, float],
    raw: Path,
    ramp_s: float,
) -> dict[str, Any]:
    """Every figure of one engine from its samples and locust's reports; copies the raw files (small) into ``raw``.

    ``bounds`` is (locust launched, locust exited) in wall-clock time. t = 0 is locust's ``test_start``; the run's end
    is when locust exited (its ``-t`` timer starts a moment before ``test_start``, so a loaded machine ends it before
    t = duration): the end windows are measured back from there, not from the nominal duration.
    """
    launched, stopped = bounds
    buckets_path = tmp / "buckets.json"
    buckets: dict[str, Any] = json.loads(buckets_path.read_text()) if buckets_path.exists() else {"started": None, "rows": []}
    origin = buckets["started"] or launched  # t = 0: locust's test_start
    for row in samples:
        row["t"] = round(row["ts"] - origin, 1)
    stop_t = round(min(stopped - origin, plan.duration_s + 1), 1)
    in_run = [row for row in samples if row["t"] <= stop_t + 1]
    n_buckets = max(1, math.ceil(plan.duration_s / plan.bucket_s - 1e-9))
    window = min(60.0, max(plan.sample_s, plan.duration_s / 10))
    figures: dict[str, Any] = {"window_s": window, "n_buckets": n_buckets, "stop_s": stop_t}

    # Memory: warm-up end vs the end of the run.
    start = _window_or_nearest(in_run, 0, window)
    warm = _window_or_nearest(in_run, plan.warmup_s, plan.warmup_s + window)
    end = _window_or_nearest(in_run, stop_t - window, stop_t + 1)
    rss: dict[str, Any] = {}
    after_warmup = _window(in_run, plan.warmup_s, stop_t + 1)
    for name in ("api", "worker", "locust"):
        first, last = _median(warm, f"{name}_rss_mib"), _median(end, f"{name}_rss_mib")
        if name == "locust":  # the last sample is taken after locust exited: its RSS is the window's other samples
            alive = [row for row in in_run if not math.isnan(row.get("locust_rss_mib", math.nan))]
            last = last if last is not None else _median(alive[-1:], "locust_rss_mib")
        slope = _slope_per_min(after_warmup, f"{name}_rss_mib")
        rss[name] = {
            "start_mib": _median(start, f"{name}_rss_mib"),
            "warm_mib": first,
            "end_mib": last,
            "ratio": _ratio(last, first),
            "slope_mib_per_min": slope,
        }
    for name in ("api", "worker"):
        rss[name]["l1_warm_mib"], rss[name]["l1_end_mib"] = _median(warm, f"{name}_l1_mib"), _median(end, f"{name}_l1_mib")
        evictions = [r[f"{name}_l1_evictions"] for r in in_run if not math.isnan(r.get(f"{name}_l1_evictions", math.nan))]
        rss[name]["l1_evictions"] = evictions[-1] if evictions else None
    figures["rss"] = rss

    # Redis: the first steady window (results made at the start have expired) vs the last.
    locust_stats = _locust_rows(tmp / "locust.json")
    steady_start = max(plan.warmup_s, ramp_s + plan.ttl_s + plan.sample_s)
    first_steady = _window_or_nearest(in_run, steady_start, steady_start + window)
    redis_fig: dict[str, Any] = {
        "steady_start_s": round(steady_start, 1),
        "overlap": steady_start + window > stop_t - window,
    }
    for label, rows in (("first", first_steady), ("last", end)):
        redis_fig[label] = {
            key: _median(rows, key)
            for key in (
                "redis_used_memory_mib",
                "redis_rss_mib",
                "redis_keys",
                "redis_keys_no_ttl",
                *(f"keys_{k}" for k in KEY_KINDS),
            )
        }
    redis_fig["used_memory_slope_mib_per_min"] = _slope_per_min(_window(in_run, steady_start, stop_t + 1), "redis_used_memory_mib")
    redis_fig["keys_slope_per_min"] = _slope_per_min(_window(in_run, steady_start, stop_t + 1), "redis_keys")
    redis_fig["used_memory_ratio"] = _ratio(redis_fig["last"]["redis_used_memory_mib"], redis_fig["first"]["redis_used_memory_mib"])
    figures["redis"] = redis_fig

    # Throughput and queue during the run.
    loaded = [row for row in in_run if 0 <= row["t"] <= stop_t]
    done = [row["jobs_done"] for row in loaded if not math.isnan(row.get("jobs_done", math.nan))]
    span = (loaded[-1]["t"] - loaded[0]["t"]) if len(loaded) > 1 else 0.0
    depths = [row["queue_depth"] for row in loaded if "queue_depth" in row]
    figures["achieved"] = {
        "jobs_s": round((done[-1] - done[0]) / span, 2) if len(done) > 1 and span else None,
        "queue_depth_mean": round(statistics.fmean(depths), 2) if depths else None,
        "queue_depth_max": max(depths) if depths else None,
        "load1_median": _median(loaded, "load1"),
        "cpu_pct": {name: _median(loaded, f"{name}_cpu_pct") for name in ("api", "worker", "locust", "redis")},
    }

    # Requests, failures, latency per name: whole run from locust's JSON, per bucket from the recorder.
    figures["requests"] = locust_stats["http_requests"]
    figures["failures"] = locust_stats["http_failures"]
    figures["flow_jobs"], figures["flow_failures"] = locust_stats["flow_requests"], locust_stats["flow_failures"]
    figures["failure_messages"] = _failures(tmp / "locust_failures.csv")
    per_bucket: dict[tuple[str, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    statuses: Counter[str] = Counter()
    for row in buckets["rows"]:
        bucket = min(int(row["bucket"]), n_buckets - 1)  # a request ending as locust stops belongs to the last bucket
        key = (row["type"], row["name"])
        if bucket in per_bucket[key]:  # merge: percentiles of a tiny overflow bucket are dropped, counts kept
            per_bucket[key][bucket]["count"] += row["count"]
            per_bucket[key][bucket]["failures"] += row["failures"]
        else:
            per_bucket[key][bucket] = dict(row, bucket=bucket)
        if row["type"] != "FLOW":
            statuses.update(row["statuses"])
    figures["status_codes"] = dict(sorted(statuses.items()))
    latency = []
    for (request_type, name), whole in sorted(locust_stats["rows"].items()):
        rows_of = per_bucket.get((request_type, name), {})
        head, tail = rows_of.get(0), rows_of.get(n_buckets - 1)
        latency.append(
            {
                "type": request_type,
                "name": name,
                "requests": whole["requests"],
                "failures": whole["failures"],
                "p50": whole["p50"],
                "p99": whole["p99"],
                "first": {k: head[k] for k in ("count", "p50", "p99")} if head else None,
                "last": {k: tail[k] for k in ("count", "p50", "p99")} if tail else None,
            }
        )
    figures["latency"] = latency
    figures["per_bucket"] = {
        f"{request_type} {name}": {str(b): (row["p50"], row["p99"]) for b, row in sorted(rows_of.items())}
        for (request_type, name), rows_of in per_bucket.items()
    }
    figures["timeline"] = _timeline(plan, in_run, per_bucket, n_buckets)
    figures["ramp_s"] = round(ramp_s, 1)
    _copy_raw(spec, tmp, raw, samples, buckets)
    return figures


def _locust_rows(path: Path) -> dict[str, Any]:
    """locust's final JSON (exact: written after the users stopped): per-row totals and whole-run percentiles."""
    out: dict[str, Any] = {"rows": {}, "http_requests": 0, "http_failures": 0, "flow_requests": 0, "flow_failures": 0}
    if not path.exists():
        return out
    for row in json.loads(path.read_text()):
        histogram = {int(k): v for k, v in row["response_times"].items()}
        out["rows"][(row["method"], row["name"])] = {
            "requests": row["num_requests"],
            "failures": row["num_failures"],
            "p50": percentile(histogram, 0.5),
            "p99": percentile(histogram, 0.99),
        }
        kind = "flow" if row["method"] == "FLOW" else "http"
        out[f"{kind}_requests"] += row["num_requests"]
        out[f"{kind}_failures"] += row["num_failures"]
    return out


def _failures(path: Path) -> dict[str, int]:
    if not path.exists():
        return {}
    with path.open(newline="") as handle:
        return {f"{row['Method']} {row['Name']}: {row['Error']}": int(row["Occurrences"]) for row in csv.DictReader(handle)}


def _timeline(
    plan: Plan,
    samples: Sequence[Mapping[str, float]],
    per_bucket: Mapping[tuple[str, str], Mapping[int, Mapping[str, Any]]],
    n: int,
) -> list[dict[str, Any]]:
    """One row per bucket: memory at its end, the worst queue, requests, failures, and p99 of the main rows."""
    timeline = []
    for bucket in range(n):
        start, stop = bucket * plan.bucket_s, min((bucket + 1) * plan.bucket_s, plan.duration_s)
        rows = _window(samples, start, stop + 0.5)
        last = rows[-1] if rows else {}
        http = [b[bucket] for (t, _), b in per_bucket.items() if t != "FLOW" and bucket in b]
        p99 = {f"{t} {name}": b[bucket]["p99"] for (t, name), b in per_bucket.items() if bucket in b}
        timeline.append(
            {
                "bucket": bucket,
                "start_s": round(start),
                "api_rss_mib": _round(last.get("api_rss_mib")),
                "worker_rss_mib": _round(last.get("worker_rss_mib")),
                "redis_used_memory_mib": _round(last.get("redis_used_memory_mib")),
                "redis_keys": last.get("redis_keys"),
                "redis_keys_no_ttl": last.get("redis_keys_no_ttl"),
                "queue_depth_max": max((r.get("queue_depth", 0) for r in rows), default=None),
                "requests": sum(b["count"] for b in http),
                "failures": sum(b["failures"] for b in http),
                "p99": p99,
            }
        )
    return timeline


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None or math.isnan(value) else round(value, digits)


def _copy_raw(spec: EngineSpec, tmp: Path, raw: Path, samples: Sequence[Mapping[str, float]], buckets: Mapping[str, Any]) -> None:
    """The engine's raw files, small: samples (CSV), per-bucket latency, locust's JSON without its per-second series."""
    raw.mkdir(parents=True, exist_ok=True)
    with (raw / f"{spec.key}-samples.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["t", *Sampler.FIELDS], extrasaction="ignore")
        writer.writeheader()
        for row in samples:
            writer.writerow({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()})
    (raw / f"{spec.key}-buckets.json").write_text(json.dumps(buckets, indent=0))
    if (tmp / "locust.json").exists():
        rows = json.loads((tmp / "locust.json").read_text())
        for row in rows:
            row.pop("num_reqs_per_sec", None)
            row.pop("num_fail_per_sec", None)
        (raw / f"{spec.key}-locust.json").write_text(json.dumps(rows, indent=0))
    for name in ("locust_stats.csv", "locust_failures.csv"):
        if (tmp / name).exists():
            shutil.copyfile(tmp / name, raw / f"{spec.key}-{name.removeprefix('locust_')}")


def verdict(result: Mapping[str, Any]) -> list[str]:
    """Unexpected errors of one engine, as sentences; empty when there were none.

    Nothing is expected to fail: the load is sized below capacity, so even 429 (queue full) or 503
    would be unexpected here (they are the service's answers to deliberate overload).
    """
    problems = []
    if "error" in result:
        problems.append(f"the run did not complete: {result['error']}")
    if result.get("failures"):
        problems.append(f"{result['failures']} locust failures")
    if result.get("flow_failures"):
        problems.append(f"{result['flow_failures']} failed jobs (FLOW rows)")
    server = result.get("server", {})
    for key in ("api_5xx", "jobs_retried", "jobs_failed", "jobs_dead_lettered"):
        if server.get(key):
            problems.append(f"{key} = {server[key]:g}")
    for name, findings in result.get("log_findings", {}).items():
        if findings["errors"] or findings["tracebacks"]:
            problems.append(f"{name} log: {findings['errors']} ERROR lines, {findings['tracebacks']} tracebacks")
    if result.get("locust_tracebacks"):
        problems.append(f"locust log: {result['locust_tracebacks']} tracebacks")
    return problems


RSS_TOLERANCE = 0.10
"""API and worker RSS at the end within ±10 % of RSS at the end of warm-up."""
REDIS_TOLERANCE = 0.10
"""Redis used_memory in the last window within ±10 % of the first steady window (results made at the start expired)."""
P99_TOLERANCE, P99_SLACK_MS = 0.25, 10
"""p99 of the last bucket at most 25 % (or 10 ms: histogram steps and scheduler noise on small values) above the first."""
P99_ROWS = (("POST", "/v1/tts/submit"), ("GET", "/v1/tts/tasks/[id]"), ("FLOW", "submit+poll+result"))
"""The rows judged for p99 stability: the native API's submit and poll, and whole jobs (submit to audio in hand)."""


def criteria(result: Mapping[str, Any]) -> list[dict[str, str]]:
    """The soak's four criteria for one engine: name, target, what was measured, verdict (PASS, FAIL or n/a).

    Only the first is judged by the exit status; the other three are measured figures on whatever machine ran
    them (on a shared one, other work moves latency), reported for a reader to weigh.
    """
    problems = verdict(result)
    out = [
        {
            "criterion": "errors",
            "target": "zero unexpected errors (locust failures, failed jobs, 5xx, retries, ERROR log lines, tracebacks)",
            "measured": "none" if not problems else "; ".join(problems),
            "verdict": "FAIL" if problems else "PASS",
        }
    ]
    rss = result.get("rss", {})
    ratios = {name: rss.get(name, {}).get("ratio") for name in ("api", "worker")}
    known = [r for r in ratios.values() if r is not None]
    out.append(
        {
            "criterion": "RSS ±10 %",
            "target": f"API and worker RSS at the end within ±{RSS_TOLERANCE:.0%} of RSS at the end of warm-up",
            "measured": ", ".join(f"{name} {_pct(ratio)}" for name, ratio in ratios.items()),
            "verdict": "n/a"
            if len(known) < len(ratios)
            else ("PASS" if all(abs(r - 1) <= RSS_TOLERANCE for r in known) else "FAIL"),
        }
    )
    redis_fig = result.get("redis", {})
    ratio = redis_fig.get("used_memory_ratio")
    first = redis_fig.get("first", {}).get("redis_used_memory_mib")
    last = redis_fig.get("last", {}).get("redis_used_memory_mib")
    out.append(
        {
            "criterion": "Redis flat",
            "target": f"used_memory in the last window within ±{REDIS_TOLERANCE:.0%} of the first steady window "
            "(after warm-up and after ramp-up + TTL: the first results have expired)",
            "measured": f"{_mib(first)} → {_mib(last)} MiB, {_pct(ratio)}; slope "
            f"{_fmt(redis_fig.get('used_memory_slope_mib_per_min'), 3)} MiB/min"
            + ("; the run is too short: the windows overlap" if redis_fig.get("overlap") else ""),
            "verdict": "n/a"
            if ratio is None or redis_fig.get("overlap")
            else ("PASS" if abs(ratio - 1) <= REDIS_TOLERANCE else "FAIL"),
        }
    )
    rows = {(row["type"], row["name"]): row for row in result.get("latency", [])}
    measured, judged = [], []
    for key in P99_ROWS:
        row = rows.get(key)
        head, tail = (row or {}).get("first") or {}, (row or {}).get("last") or {}
        if "p99" not in head or "p99" not in tail:
            measured.append(f"{' '.join(key)} n/a")
            continue
        ok = tail["p99"] <= max(head["p99"] * (1 + P99_TOLERANCE), head["p99"] + P99_SLACK_MS)
        judged.append(ok)
        measured.append(f"{' '.join(key)} {_fmt(head['p99'])} → {_fmt(tail['p99'])} ms{'' if ok else ' (worse)'}")
    out.append(
        {
            "criterion": "p99 stable",
            "target": f"p99 of the last bucket at most +{P99_TOLERANCE:.0%} (or +{P99_SLACK_MS} ms) over the first bucket's, "
            "for submit, status poll and whole jobs",
            "measured": "; ".join(measured),
            "verdict": "n/a" if len(judged) < len(P99_ROWS) else ("PASS" if all(judged) else "FAIL"),
        }
    )
    return out


# ---- the report ------------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 2) -> str:
    """A number for a table: ``n/a`` when missing, thousands separated, ``digits`` decimals for floats."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _count(value: Any) -> str:
    return _fmt(value, 0)


def _mib(value: Any) -> str:
    return _fmt(value, 1)


def _pct(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.3f} ({(ratio - 1) * 100:+.1f} %)"


def render(report: Mapping[str, Any]) -> str:
    plan, machine = report["plan"], report["machine"]
    window_s = report["engines"][0].get("window_s", 0) if report["engines"] else 0
    lines = [
        "# Soak test",
        "",
        f"- **Date:** {report['date']}",
        f"- **Command:** `{report['command']}`",
        f"- **Machine:** {machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB, {machine['platform']}; "
        f"load average (1, 5, 15 min) at start {machine['load_average_start']}, at end {machine['load_average_end']}. "
        "This machine is **shared**: other engineers run tests on its 2 cores during the soak, so absolute latencies "
        "carry their load; the figures that matter are ratios within one run (start vs end).",
        f"- **Plan:** {plan['duration_s']:g} s of the locust mix per engine (every user class of `loadtest/locustfile.py`, "
        f"by weight, `--tts-flow-rows`, `--tts-seed {plan['seed']}`); warm-up {plan['warmup_s']:g} s; "
        f"`RESULT_TTL_S = CACHE_TTL_S = {plan['ttl_s']}`; samples every {plan['sample_s']:g} s; latency buckets of "
        f"{plan['bucket_s']:g} s. **Fair-use limits lifted:** `RATE_LIMIT_PER_S`, `RATE_LIMIT_BURST` and "
        "`MAX_QUEUED_PER_KEY` = 10⁶ in the deployment's environment (defaults 10/s, burst 50, 1,000 queued): every "
        "simulated client comes from one loopback address, so the per-client limit would refuse the mix with 429s. "
        "One deployment per engine: `redis-server` (ttsq.store.local_redis), "
        "`uvicorn app:app`, one worker, `DEVICE=cpu`, `CPU_THREADS=1`, L3 cache in a temporary directory, "
        f"`CACHE_L1_MAX_BYTES` = {L1_MAX_MIB} MiB (default 64): every new result enters the worker's in-process LRU, "
        "which at the default bound fills for about the whole 10 minutes and would read as a leak; this bound fills "
        "within the warm-up.",
        "- **Reading it:** RSS is compared between the end of warm-up and the end of the run (medians over "
        f"{window_s:g} s windows); Redis memory between the first steady window "
        "(once the first results have expired: after warm-up and after ramp-up + TTL) and the last. "
        "Latency per request name from locust's own histograms (ms, two significant digits above 100 ms). "
        "The exit status judges only unexpected errors; the other three criteria are measured figures, given a verdict "
        "below for the reader (on a shared machine, other work moves latency and, a little, memory).",
        "",
        "## Verdicts",
        "",
        "| criterion | target | " + " | ".join(_engine_name(result) for result in report["engines"]) + " |",
        "|---" * (2 + len(report["engines"])) + "|",
    ]
    judged = [result.get("criteria") or criteria(result) for result in report["engines"]]
    for index, first in enumerate(judged[0] if judged else []):
        cells = [f"**{c[index]['verdict']}**: {c[index]['measured']}" for c in judged]
        lines.append(f"| {first['criterion']} | {first['target']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Headline",
        "",
        "| engine | users | requests | failures | API RSS end/warm | worker RSS end/warm | Redis used_memory last/first steady | "
        "p99 whole job (FLOW submit+poll+result), first → last bucket, ms | unexpected errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for result in report["engines"]:
        rss, redis_fig = result.get("rss", {}), result.get("redis", {})
        problems = verdict(result)
        lines.append(
            f"| {_engine_name(result)} | {_fmt(result.get('users'))} | {_fmt(result.get('requests'))} | "
            f"{_fmt(result.get('failures'))} | {_pct(rss.get('api', {}).get('ratio'))} | "
            f"{_pct(rss.get('worker', {}).get('ratio'))} | "
            f"{_pct(redis_fig.get('used_memory_ratio'))} | {_first_last(result, 'FLOW', 'submit+poll+result')} | "
            f"{'none' if not problems else '; '.join(problems)} |"
        )
    for result in report["engines"]:
        lines += ["", *_engine_section(result, plan)]
    return "\n".join(lines) + "\n"


def _first_last(result: Mapping[str, Any], request_type: str, name: str) -> str:
    for row in result.get("latency", []):
        if row["type"] == request_type and row["name"] == name:
            return f"{_fmt((row['first'] or {}).get('p99'))} → {_fmt((row['last'] or {}).get('p99'))}"
    return "n/a"


def _engine_name(result: Mapping[str, Any]) -> str:
    return (
        f"`{result['engine']}` (STAND-IN, not ChatTTS)"
        if result["stand_in"]
        else f"`{result['engine']}` (ChatTTS code, random weights)"
    )


def _engine_section(result: Mapping[str, Any], plan: Mapping[str, Any]) -> list[str]:
    lines = [f"## {_engine_name(result)}", "", f"**Engine:** {result['label']}.", ""]
    if "error" in result:
        lines += [f"**The run did not complete:** {result['error']}", ""]
    if "users" in result:
        lines += [f"**Users:** {result['users']} (+{result['spawn_rate']}/s). {result['how_users']}.", ""]
    achieved, server = result.get("achieved", {}), result.get("server", {})
    if achieved:
        calibration = result.get("calibration")
        utilisation = (
            f" = {achieved['jobs_s'] / calibration['capacity_jobs_s']:.0%} of the measured capacity"
            if calibration and achieved.get("jobs_s") and calibration["capacity_jobs_s"]
            else ""
        )
        cpu = achieved["cpu_pct"]
        lines += [
            f"**Load achieved:** {_fmt(achieved['jobs_s'])} jobs/s{utilisation}; mean rows per engine step (occupied slots) "
            f"{_fmt(server.get('batch_mean'))} of {_fmt(server.get('engine_slots'))}, wasted row-steps "
            f"{_fmt(server.get('wasted_row_steps'))}; "
            f"queue depth mean {_fmt(achieved['queue_depth_mean'])}, max {_count(achieved['queue_depth_max'])}; "
            f"CPU (median of samples, % of one core) API {_mib(cpu['api'])}, worker {_mib(cpu['worker'])}, "
            f"locust {_mib(cpu['locust'])}, Redis {_mib(cpu['redis'])}; load average (1 min) median "
            f"{_fmt(achieved['load1_median'])}, at start {result.get('load_average_start')}, "
            f"at end {result.get('load_average_end')}."
            + (" **locust warned that its CPU was saturated.**" if result.get("locust_cpu_warning") else ""),
            "",
        ]
    if "requests" in result:
        problems = verdict(result)
        codes = ", ".join(f"{code}: {count:,}" for code, count in result["status_codes"].items())
        lines += [
            "### Errors",
            "",
            f"- HTTP requests {result['requests']:,}, locust failures **{result['failures']:,}**; jobs seen whole (FLOW rows) "
            f"{result['flow_jobs']:,}, failed {result['flow_failures']:,}. Status codes: {codes or 'none'}.",
            "- Expected non-2xx: none. The load is sized below capacity, so a 429 (queue full, or the per-key caps, lifted "
            "here) or 503 (Redis unreachable) would be unexpected; so would any other failure.",
            f"- Server side: API 5xx {_count(server.get('api_5xx'))}; worker jobs done {_count(server.get('jobs_done'))}, retried "
            f"{_count(server.get('jobs_retried'))}, failed {_count(server.get('jobs_failed'))}, dead-lettered "
            f"{_count(server.get('jobs_dead_lettered'))}; logs (LOG_LEVEL=WARNING): "
            + "; ".join(
                f"{name} {f['errors']} ERROR, {f['warnings']} WARNING, {f['tracebacks']} tracebacks"
                for name, f in result.get("log_findings", {}).items()
            )
            + ".",
            f"- **Unexpected errors: {'none' if not problems else '; '.join(problems)}.**",
        ]
        for message, count in result["failure_messages"].items():
            lines.append(f"  - {count:,} × {message}")
        for name, findings in result.get("log_findings", {}).items():
            for example in findings["examples"]:
                lines.append(f"  - {name} log: `{example}`")
        lines.append("")
    if "rss" in result:
        rss, redis_fig = result["rss"], result["redis"]
        lines += [
            "### Memory",
            "",
            f"| process | RSS at start MiB | RSS at warm-up end ({plan['warmup_s']:g} s) MiB | RSS at the end MiB | end / warm "
            f"| slope after warm-up MiB/min | L1 cache (bound {L1_MAX_MIB} MiB) warm → end MiB, evictions |",
            "|---|---|---|---|---|---|---|",
        ]
        for name in ("api", "worker", "locust"):
            figure = rss[name]
            l1 = (
                f"{_mib(figure.get('l1_warm_mib'))} → {_mib(figure.get('l1_end_mib'))}, {_count(figure.get('l1_evictions'))}"
                if name != "locust"
                else "(load generator)"
            )
            lines.append(
                f"| {name} | {_mib(figure.get('start_mib'))} | {_mib(figure['warm_mib'])} | {_mib(figure['end_mib'])} | "
                f"{_pct(figure['ratio'])} | "
                f"{_fmt(figure['slope_mib_per_min'])} | {l1} |"
            )
        first, last = redis_fig["first"], redis_fig["last"]
        lines += [
            "",
            f"Redis, first steady window (from {redis_fig['steady_start_s']:g} s) vs the last"
            + (" — **the run is too short for these windows not to overlap**" if redis_fig["overlap"] else "")
            + ":",
            "",
            "| | used_memory MiB | RSS MiB | keys | keys without TTL | job | result | stream | cache | inflight |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for label, figure in (("first steady", first), ("last", last)):
            lines.append(
                f"| {label} | {_mib(figure['redis_used_memory_mib'])} | {_mib(figure['redis_rss_mib'])} | "
                f"{_count(figure['redis_keys'])} | "
                f"{_count(figure['redis_keys_no_ttl'])} | " + " | ".join(_count(figure[f"keys_{k}"]) for k in KEY_KINDS) + " |"
            )
        lines += [
            "",
            f"used_memory last / first steady: {_pct(redis_fig['used_memory_ratio'])}; slope over the steady part "
            f"{_fmt(redis_fig['used_memory_slope_mib_per_min'], 3)} MiB/min, keys {_fmt(redis_fig['keys_slope_per_min'])}/min. "
            "Keys that never expire, at the end: "
            + (", ".join(f"`{k}`" for k in result.get("keys_without_ttl_at_end", [])) or "none")
            + ".",
            "",
        ]
    if result.get("latency"):
        bucket = f"{plan['bucket_s']:g} s"
        lines += [
            "### Latency per request name (ms)",
            "",
            f"First and last bucket of {bucket} (the first includes the ramp-up); whole run from locust's final JSON. "
            "FLOW rows are whole jobs, submit to audio in hand.",
            "",
            "| request | requests | failures | first p50 | first p99 | last p50 | last p99 | run p50 | run p99 |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in result["latency"]:
            first, last = row["first"] or {}, row["last"] or {}
            lines.append(
                f"| {row['type']} {row['name']} | {row['requests']:,} | {row['failures']:,} | {_fmt(first.get('p50'))} | "
                f"{_fmt(first.get('p99'))} | {_fmt(last.get('p50'))} | {_fmt(last.get('p99'))} | "
                f"{_fmt(row['p50'])} | {_fmt(row['p99'])} |"
            )
        lines += ["", f"### p50 / p99 per request name per {bucket} bucket (ms)", ""]
        n = result["n_buckets"]
        lines += [
            "| request | " + " | ".join(f"{b * plan['bucket_s']:g} s" for b in range(n)) + " |",
            "|---" * (n + 1) + "|",
        ]
        for row in result["latency"]:
            cells = result["per_bucket"].get(f"{row['type']} {row['name']}", {})
            lines.append(
                f"| {row['type']} {row['name']} | "
                + " | ".join(f"{_fmt(cells[str(b)][0])} / {_fmt(cells[str(b)][1])}" if str(b) in cells else "" for b in range(n))
                + " |"
            )
        lines += ["", f"### Timeline (per {bucket}; memory as sampled at the bucket's end)", ""]
        main_rows = [
            key for key in ("POST /v1/tts/submit", "GET /v1/tts/tasks/[id]", "FLOW submit+poll+result") if _has(result, key)
        ]
        lines += [
            "| from s | API RSS | worker RSS | Redis MiB | keys (no TTL) | queue max | requests | failures | "
            + " | ".join(f"p99 {key}" for key in main_rows)
            + " |",
            "|---" * (8 + len(main_rows)) + "|",
        ]
        for row in result["timeline"]:
            lines.append(
                f"| {row['start_s']} | {_mib(row['api_rss_mib'])} | {_mib(row['worker_rss_mib'])} | "
                f"{_mib(row['redis_used_memory_mib'])} | {_count(row['redis_keys'])} ({_count(row['redis_keys_no_ttl'])}) | "
                f"{_count(row['queue_depth_max'])} | {row['requests']:,} | "
                f"{row['failures']:,} | " + " | ".join(_fmt(row["p99"].get(key)) for key in main_rows) + " |"
            )
        lines.append("")
    return lines


def _has(result: Mapping[str, Any], key: str) -> bool:
    return any(f"{row['type']} {row['name']}" == key for row in result["latency"])


# ---- the run ----------------------------------------------------------------------------------------


def _machine() -> dict[str, Any]:
    return {**machine(), "load_average_start": [round(x, 2) for x in os.getloadavg()]}


def _command(argv: Sequence[str]) -> str:
    python = Path(sys.executable)
    shown = ".venv/bin/python" if python.parent.parent == ROOT / ".venv" else "python"
    return f"{shown} -m loadtest.soak {shlex.join(argv)}".strip()


def build_plan(argv: Sequence[str]) -> Plan:
    parser = argparse.ArgumentParser(prog="python -m loadtest.soak", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--duration", type=parse_duration, default=600.0, help="locust run time per engine: 60s, 10m (default 10m)")
    parser.add_argument("--engines", default="fixed,tiny", help="comma-separated: fixed (STAND-IN), tiny (default both)")
    parser.add_argument(
        "--users",
        type=int,
        help="simulated users (default: chosen from the measured capacity and --load; capacity is still measured)",
    )
    parser.add_argument("--load", type=float, default=0.7, help="target share of the measured capacity (default 0.7)")
    parser.add_argument(
        "--calibrate",
        type=parse_duration,
        default=20.0,
        help="capacity measurement per engine (default 20s; 0 = none, needs --users)",
    )
    parser.add_argument("--warmup", type=parse_duration, help="excluded from the RSS comparison (default 20 %% of --duration)")
    parser.add_argument("--ttl", type=int, help="RESULT_TTL_S and CACHE_TTL_S (default: a quarter of --duration, 10 to 60 s)")
    parser.add_argument("--sample", type=parse_duration, help="seconds between samples (default 5, less for short runs)")
    parser.add_argument("--bucket", type=parse_duration, help="latency bucket (default 60 s; a sixth of --duration under 5 min)")
    parser.add_argument("--seed", type=int, default=1, help="locust's --tts-seed: the users' choices (default 1)")
    parser.add_argument(
        "--out", type=Path, help="results directory (default bench/results/soak for ≥ 10 min, var/soak for shorter runs)"
    )
    args = parser.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    if not engines or set(engines) - set(engine_specs()):
        parser.error(f"--engines: one or more of {', '.join(engine_specs())}")
    if args.duration < 10:
        parser.error("--duration: at least 10s")
    if args.ttl is not None and args.ttl < 10:
        parser.error("--ttl: at least 10 (the service's minimum RESULT_TTL_S)")
    if args.users is not None and args.users < 1:
        parser.error("--users: at least 1")
    if args.users is None and args.calibrate <= 0:
        parser.error("--calibrate 0 needs --users: without a measured capacity there is nothing to size the load by")
    duration = args.duration
    out = args.out or (ROOT / "bench" / "results" / "soak" if duration >= 600 else ROOT / "var" / "soak")
    return Plan(
        duration_s=duration,
        engines=engines,
        users=args.users,
        load=args.load,
        calibrate_s=args.calibrate,
        warmup_s=args.warmup if args.warmup is not None else round(duration * 0.2, 1),
        ttl_s=args.ttl if args.ttl is not None else int(min(60, max(10, duration // 4))),
        sample_s=args.sample if args.sample is not None else float(min(5, max(1, round(duration / 30)))),
        bucket_s=args.bucket if args.bucket is not None else (60.0 if duration >= 300 else float(max(5, round(duration / 6)))),
        seed=args.seed,
        out=out.resolve(),
        command=_command(argv),
    )


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    plan = build_plan(arguments)
    specs = engine_specs()
    raw = plan.out
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": plan.command,
        "machine": _machine(),
        "plan": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(plan).items()},
        "engines": [],
    }
    if raw.exists():
        shutil.rmtree(raw)  # a run replaces the last one's raw files
    raw.mkdir(parents=True)
    progress(f"{plan.command}; results in {raw}/ (summary.md, summary.json, raw files)")
    with interruptible():
        for key in plan.engines:
            result = run_engine(specs[key], plan, raw)
            result["criteria"] = criteria(result)
            report["engines"].append(result)
            progress(f"{key}: unexpected errors: {'; '.join(verdict(result)) or 'none'}")
    report["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    (raw / "summary.json").write_text(json.dumps(report, indent=1, default=str))
    markdown = render(report)
    (raw / "summary.md").write_text(markdown)
    size = sum(p.stat().st_size for p in raw.rglob("*") if p.is_file())
    if size > RESULTS_BUDGET_BYTES:
        progress(f"warning: raw results are {size / 1e6:.2f} MB (budget {RESULTS_BUDGET_BYTES / 1e6:.0f} MB)")
    print(markdown)
    failed = [r for r in report["engines"] if "error" in r]
    if len(failed) == len(report["engines"]):
        return 2
    return 1 if any(verdict(r) for r in report["engines"]) else 0


if __name__ == "__main__":
    sys.exit(main())
