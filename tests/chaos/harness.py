"""The processes of a chaos run, and the hands that hurt them.

One :class:`Deployment` is a redis-server with its append-only file on, API processes
(``uvicorn app:app``, one per Redis namespace and set of limits) and worker slots (``python
worker.py``), all started by :mod:`ttsq.runtime.launch` from the repository root and configured
only through their environment, as in production. A slot is what systemd or a Kubernetes
Deployment keeps running: when its process dies and the slot is supervised, a supervisor thread
starts the next incarnation at once (same settings, same probe port, a new worker id), so a crash
or a ``kill -9`` is followed by a restart exactly as a real supervisor would do it.

The faults act on the real things: signals to process groups, SIGKILL and restart of the
redis-server on its port, ``CLIENT PAUSE``, tmpfs mounts over a cache directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import redis
import redis.asyncio

from tests.support.redis_server import server_binary
from ttsq.runtime.launch import api_command, free_port, spawn, wait_until_ok, worker_command
from ttsq.store.api_keys import ApiKeyStore
from ttsq.store.keys import Keys
from ttsq.store.local_redis import RedisServer, start_redis_server

ROOT = Path(__file__).resolve().parents[2]

ENGINE_ENV = {
    "MODEL": "tiny",
    "DEVICE": "cpu",
    "ENGINE_BACKEND": "ttsq",
    "BATCH_INVARIANT": "true",
    "MAX_BATCH": "8",
    "MAX_NEW_TOKEN": "16",
    "MIN_NEW_TOKEN": "16",
    "MAX_CHUNK_CHARS": "40",
    "NORMALIZE_TEXT": "false",
}
"""The model as every chaos process runs it. A fixed, short chunk keeps one job around a second on a
small CPU; the number normalizer is off because loading its grammars would add seconds to each of
the many worker restarts, and the texts have no digits. ttsq's decoder with ``BATCH_INVARIANT`` and
one slot count everywhere: a job's audio is then the same bits whatever shared its steps, so every
done job can be held to the reference run's exact audio."""

TIMING_ENV = {
    "LEASE_S": "3",
    "REDIS_SOCKET_TIMEOUT_S": "1.5",
    "HEARTBEAT_INTERVAL_S": "0.5",
    "HEARTBEAT_TTL_S": "3",
    "SWEEP_INTERVAL_S": "0.5",
    "BLOCK_S": "0.5",
    "RETRY_BASE_S": "1",
    "BATCH_WAIT_MS": "20",
    "RESULT_TTL_S": "86400",
    "NO_WORKER_S": "0",
}
"""Short leases and sweeps, so a lost worker's jobs come back within seconds rather than the production 30; and
results kept for a day, not the default 10 minutes: a full run's kill scenario alone lasts longer than that, and
an expired result would read as a lost job. The scenarios stop and kill every worker as a device (S3d holds its jobs
with SIGSTOP while its listeners subscribe): the no-worker refusal is off here, and tested on its own."""

OPEN_LIMITS_ENV = {
    "RATE_LIMIT_PER_S": "100000",
    "RATE_LIMIT_BURST": "100000",
    "MAX_QUEUED_PER_KEY": "100000",
    "MAX_STREAMS": "256",
    "MAX_STREAMS_PER_KEY": "256",
}
"""The chaos client is one address submitting hundreds of jobs and holding dozens of streams (S3d): per-client
fair-use limits would answer 429 for reasons no scenario is about (the flood scenario sets its own queue cap)."""


def _environment() -> dict[str, str]:
    """This process's environment without anything that would configure ttsq behind the harness's back."""
    return {
        key: value for key, value in os.environ.items() if not key.startswith(("FAULT_", "REDIS_", "MODEL", "WORKER_", "CACHE_"))
    }


def _kill_group(process: subprocess.Popen[bytes], sig: int) -> None:
    """Signal a process and everything it started (each is spawned in its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


@dataclass
class Api:
    """One API process: a namespace's front door with its own limits (attempts, queue cap)."""

    name: str
    namespace: str
    url: str
    process: subprocess.Popen[bytes]

    def rss_bytes(self) -> int:
        return int(psutil.Process(self.process.pid).memory_info().rss)


@dataclass
class Exit:
    worker_id: str
    returncode: int
    at: float


@dataclass
class WorkerSlot:
    """A supervised place for one worker process; each (re)start is a new incarnation with its own log and id."""

    name: str
    namespace: str
    env: dict[str, str]
    port: int
    logs: Path
    supervised: bool
    incarnation: int = 0
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    retired: bool = False
    exits: list[Exit] = field(default_factory=list)
    ready_after_s: list[float] = field(default_factory=list)
    """Seconds each incarnation took from start to ready (the cost of every restart)."""
    _ready_seen: bool = False

    @property
    def worker_id(self) -> str:
        return f"{self.name}.{self.incarnation}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_path(self, incarnation: int | None = None) -> Path:
        return self.logs / f"{self.name}.{self.incarnation if incarnation is None else incarnation}.log"

    def all_logs(self) -> list[Path]:
        return [self.log_path(n) for n in range(1, self.incarnation + 1)]

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def health(self) -> dict[str, Any] | None:
        """The worker's /healthz body (200 or 503), or None while it does not answer."""
        if not self.alive():
            return None
        try:
            response = httpx.get(f"{self.url}/healthz", timeout=2.0)
        except httpx.HTTPError:
            return None
        body: dict[str, Any] = response.json()
        body["http_status"] = response.status_code
        return body

    def ready(self) -> bool:
        if not self.alive():
            return False
        try:
            ok = httpx.get(f"{self.url}/readyz", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False
        if ok and not self._ready_seen:
            self._ready_seen = True
            self.ready_after_s.append(time.monotonic() - self.started_at)
        return ok


class Deployment:
    """A redis-server (AOF on), API processes and supervised worker slots, under one scratch directory."""

    def __init__(self, root: Path, checkpoint: Path, say: Callable[[str], None] = print) -> None:
        self.root = root
        self.say = say
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.redis: RedisServer = start_redis_server(root / "redis", binary=server_binary(), persist=True)
        self.env = {**_environment(), **ENGINE_ENV, **TIMING_ENV, **OPEN_LIMITS_ENV}
        self.env.update(TINY_CHECKPOINT_DIR=str(checkpoint), PYTHONUNBUFFERED="1", LOG_FORMAT="text")
        self.apis: list[Api] = []
        self.slots: list[WorkerSlot] = []
        self.mounts: list[Path] = []
        self._lock = threading.RLock()
        self._closing = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, name="chaos-supervisor", daemon=True)
        self._supervisor.start()

    # ---- processes -----------------------------------------------------------------------

    def _env(self, namespace: str, extra: dict[str, str]) -> dict[str, str]:
        return {**self.env, "REDIS_URL": self.redis.url, "REDIS_NAMESPACE": namespace, **extra}

    def start_api(self, name: str, namespace: str = "ttsq", **env: str) -> Api:
        """Start an API on ``namespace`` (its own cache directory) and wait until it is ready."""
        port = free_port()
        env.setdefault("CACHE_DIR", str(self.root / "cache" / name))
        process = spawn(api_command(port), cwd=ROOT, env=self._env(namespace, env), log=self.logs / f"{name}.log")
        api = Api(name, namespace, f"http://127.0.0.1:{port}", process)
        self.apis.append(api)
        wait_until_ok(f"{api.url}/readyz", 120, [process])
        return api

    def add_worker(self, name: str, namespace: str = "ttsq", *, supervised: bool = True, **env: str) -> WorkerSlot:
        """A worker slot, started at once; its readiness is the caller's to wait for (:meth:`wait_ready`)."""
        env.setdefault("CACHE_DIR", str(self.root / "cache" / name))
        slot = WorkerSlot(name, namespace, env, free_port(), self.logs, supervised)
        with self._lock:
            self.slots.append(slot)
            self._start(slot)
        return slot

    def _start(self, slot: WorkerSlot) -> None:
        slot.incarnation += 1
        slot._ready_seen = False
        env = self._env(slot.namespace, {**slot.env, "WORKER_ID": slot.worker_id, "WORKER_HEALTH_PORT": str(slot.port)})
        slot.started_at = time.monotonic()
        slot.process = spawn(worker_command(), cwd=ROOT, env=env, log=slot.log_path())

    def restart(self, slot: WorkerSlot, **env: str) -> None:
        """Start the slot's next incarnation now (a new pod after the old one was killed), optionally with changed settings."""
        with self._lock:
            if slot.alive():
                raise RuntimeError(f"worker {slot.worker_id} is still running")
            slot.env.update(env)
            slot.retired = False
            self._start(slot)

    def wait_ready(self, slots: list[WorkerSlot], timeout_s: float = 300) -> None:
        """Wait until every slot's current incarnation answers /readyz (a slot whose process dies meanwhile is
        restarted by the supervisor, and waited for again)."""
        wait_slowly(lambda: all(slot.ready() for slot in slots), timeout_s, f"workers {[s.name for s in slots]} to be ready")

    def kill(self, slot: WorkerSlot, sig: int = signal.SIGKILL) -> int:
        """Signal the slot's current process; for SIGKILL, wait for it to die. Returns the pid signalled."""
        with self._lock:
            process = slot.process
            if process is None:
                raise RuntimeError(f"worker slot {slot.name} has no process")
            _kill_group(process, sig)
        if sig == signal.SIGKILL:
            process.wait()
        return process.pid

    def retire(self, slot: WorkerSlot, sig: int = signal.SIGTERM, timeout_s: float = 120) -> int:
        """Stop a slot for good (no restart): signal it and wait for its exit code (SIGKILL after ``timeout_s``)."""
        with self._lock:
            slot.retired = True
            process = slot.process
        if process is None:
            return 0
        if process.poll() is None:
            _kill_group(process, sig)
        try:
            code = process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process, signal.SIGKILL)
            code = process.wait()
        self._record_exit(slot, code)
        return code

    def _record_exit(self, slot: WorkerSlot, code: int) -> None:
        if not slot.exits or slot.exits[-1].worker_id != slot.worker_id:
            slot.exits.append(Exit(slot.worker_id, code, time.monotonic()))

    def _supervise(self) -> None:
        """Restart every supervised slot whose process has exited, as systemd's Restart=always would."""
        while not self._closing.wait(0.05):
            with self._lock:
                for slot in self.slots:
                    if slot.process is None or slot.process.poll() is None:
                        continue
                    self._record_exit(slot, slot.process.returncode)
                    if slot.supervised and not slot.retired:
                        self._start(slot)

    # ---- Redis -----------------------------------------------------------------------------

    def client(self, timeout_s: float = 5.0) -> redis.Redis:
        return redis.Redis(port=self.redis.port, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)

    def tenant_keys(self, namespace: str, weights: Sequence[int]) -> list[str]:
        """New API keys in ``namespace``, one per weight (each its own tenant of the fair queue, with that weight)."""

        async def create() -> list[str]:
            client = redis.asyncio.Redis(port=self.redis.port)
            try:
                store = ApiKeyStore(client, Keys(namespace))
                return [(await store.create(f"chaos-{n}", ["tts"], weight=weight))[0] for n, weight in enumerate(weights)]
            finally:
                await client.aclose()

        return asyncio.run(create())

    def kill_redis(self) -> None:
        """SIGKILL the redis-server: no shutdown save, no goodbye to its clients."""
        self.redis.process.kill()
        self.redis.process.wait()

    def restart_redis(self, persist: bool) -> None:
        """Start redis-server again on the same port (loading its append-only file when ``persist``); returns once it answers."""
        self.redis.persist = persist
        self.redis.restart()

    def pause_redis(self, ms: int, mode: str) -> None:
        """``CLIENT PAUSE ms WRITE|ALL``: Redis stays up but stops serving (writes only, or everything)."""
        with self.client() as client:
            client.execute_command("CLIENT", "PAUSE", ms, mode)

    def unpause_redis(self) -> None:
        with self.client() as client:
            client.execute_command("CLIENT", "UNPAUSE")

    def used_memory(self) -> int:
        with self.client() as client:
            info: dict[str, Any] = client.info("memory")
        return int(info["used_memory"])

    def dead_letter_ids(self, namespace: str) -> list[str]:
        """Ids in the namespace's dead-letter list, oldest first."""
        with self.client() as client:
            raw: list[bytes] = client.lrange(Keys(namespace).dead, 0, -1)
        return [str(json.loads(item)["id"]) for item in reversed(raw)]

    def in_hand(self, namespace: str) -> tuple[int, int]:
        """(ids in the processing list, leases) of a namespace: both 0 once every claimed job has ended."""
        keys = Keys(namespace)
        with self.client() as client:
            return int(client.llen(keys.processing)), int(client.zcard(keys.leases))

    # ---- disks -----------------------------------------------------------------------------

    def mount_tmpfs(self, directory: Path, size: str = "64k") -> None:
        """Mount a tiny tmpfs over ``directory`` (root only); :meth:`close` unmounts it."""
        directory.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)], check=True, capture_output=True)
        self.mounts.append(directory)

    @staticmethod
    def fill(directory: Path) -> None:
        """Write until the file system says it is full (unbuffered: the error must come from a write, not from close)."""
        with contextlib.suppress(OSError), (directory / "filler").open("wb", buffering=0) as handle:
            while True:
                handle.write(b"\0" * 4096)

    @staticmethod
    def remount_read_only(directory: Path) -> None:
        subprocess.run(["mount", "-o", "remount,ro", str(directory)], check=True, capture_output=True)

    def unmount_all(self) -> None:
        while self.mounts:
            directory = self.mounts.pop()
            subprocess.run(["umount", "-l", str(directory)], check=False, capture_output=True)

    # ---- the end ---------------------------------------------------------------------------

    def close(self) -> None:
        self._closing.set()
        self._supervisor.join(5)
        with self._lock:
            for slot in self.slots:
                slot.retired = True
                if slot.process is not None and slot.process.poll() is None:
                    _kill_group(slot.process, signal.SIGKILL)
                    slot.process.wait()
            for api in self.apis:
                if api.process.poll() is None:
                    _kill_group(api.process, signal.SIGKILL)
                    api.process.wait()
        self.unmount_all()
        if self.redis.process.poll() is None:
            self.redis.process.kill()
            self.redis.process.wait()

    def log_tail(self, chars: int = 3000) -> str:
        """The end of every process log, for a failing scenario's report."""
        parts = []
        for path in sorted(self.logs.glob("*.log"), key=lambda p: p.stat().st_mtime):
            parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)


def wait_slowly(check: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.25) -> None:
    """:func:`tests.support.service.wait_for` for checks that cost several HTTP calls (every worker's probe): polled
    four times a second rather than twenty, so waiting does not eat the CPU the workers need."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)


@contextlib.contextmanager
def background(target: Callable[[threading.Event], None], name: str) -> Iterator[threading.Event]:
    """Run ``target(stop)`` in a thread for the duration of the block; it must return soon after ``stop`` is set."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target(stop)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread below
            errors.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(120)
    if errors:
        raise errors[0]
