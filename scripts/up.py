"""``make up``: run ttsq on this machine — Redis (embedded when REDIS_URL is unset), workers, API.

It supervises the processes in the foreground as systemd's ``Restart=always`` would (a process
that exits, or whose ``/healthz`` stays failing, is restarted with backoff while the rest keeps
running; :mod:`ttsq.runtime.supervise`) and stops them all on Ctrl-C. It supervises from the first
start on: a worker killed while it loads its model (the OOM killer) is restarted like one killed
later, while the API goes on accepting jobs for it. What stops the stack is what a restart cannot
fix: a worker's configuration error (its exit code ``CONFIG_ERROR_EXIT``, after its message), or an
API that does not come up (nothing has been accepted yet). The model is an explicit choice and
there is no silent fallback: when the weights cannot be reached it stops and names the choices.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ttsq.runtime.launch import api_command, spawn, worker_command
from ttsq.runtime.supervise import Child, Supervisor, http_probe
from ttsq.store.local_redis import RedisServer, start_redis_server

ROOT = Path(__file__).resolve().parent.parent
MODEL_CHOICES = """Choose a model explicitly:
  make up                      ChatTTS weights from the model hub (2Noise/ChatTTS, CC BY-NC 4.0)
  make up MODEL=/path/to/dir   a local directory of ChatTTS weights (asset/...)
  make up MODEL=tiny           a generated random-weight checkpoint: it speaks NOISE (for trying the service)"""


def fail(message: str) -> None:
    print(f"\nttsq: {message}\n\n{MODEL_CHOICES}\n", file=sys.stderr)
    raise SystemExit(2)


def check_model(model: str) -> None:
    if model == "tiny":
        return
    if model == "hub":
        try:
            from huggingface_hub import snapshot_download

            snapshot_download("2Noise/ChatTTS", local_files_only=True)
            return
        except Exception:  # noqa: BLE001 - not cached: see whether the hub answers
            pass
        try:
            httpx.head("https://huggingface.co/api/models/2Noise/ChatTTS", timeout=5.0)
        except httpx.HTTPError as exc:
            fail(f"the model hub is unreachable from this machine ({type(exc).__name__}) and no cached copy exists.")
        return
    directory = Path(model)
    if not (directory / "asset").is_dir():
        fail(f"{directory} is not a directory of ChatTTS weights (no asset/ folder in it).")


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def start_redis(workdir: Path) -> RedisServer:
    """An embedded redis-server that keeps its data in var/redis (append-only file: queued jobs and
    voices survive its restarts)."""
    port = 6379 if port_free(6379) else None
    server = start_redis_server(workdir, binary=shutil.which("redis-server"), port=port, persist=True)
    print(f"ttsq: embedded redis-server ({server.binary}) on 127.0.0.1:{server.port}, data in {workdir}")
    return server


API_READY_S = 60.0
WORKERS_READY_S = 900.0


def stop_on_configuration_error(supervisor: Supervisor) -> None:
    """Stop (through the caller's cleanup) when a child exited with a configuration error: a restart would not help."""
    for child in supervisor.given_up():
        raise SystemExit(
            f"ttsq: {child.name} {child.gave_up}: its message is above; restarting it would fail the same way, "
            "so everything stops. Fix the configuration and run make up again."
        )


def wait_until_up(supervisor: Supervisor, api: Child, ready: dict[str, str]) -> None:
    """Wait until every child's readiness URL (``ready``: name → URL) answers 200, supervising meanwhile.

    A worker that dies before it is ready is restarted by the supervisor (with its backoff) and waited for
    again; its configuration error stops everything. The API is the exception: one that exits or is not ready
    within ``API_READY_S`` stops everything, since nothing can have been accepted yet.
    """
    started = time.monotonic()
    waiting = dict(ready)
    while waiting:
        if api.process is not None and (code := api.process.poll()) is not None:  # before tick() restarts it
            raise SystemExit(f"ttsq: the API exited with code {code} while starting; see its log above")
        supervisor.tick()
        stop_on_configuration_error(supervisor)
        for name, url in list(waiting.items()):
            if http_probe(url):
                del waiting[name]
        elapsed = time.monotonic() - started
        if api.name in waiting and elapsed > API_READY_S:
            raise SystemExit(f"ttsq: the API not ready after {API_READY_S:.0f}s ({waiting[api.name]})")
        if waiting and elapsed > WORKERS_READY_S:
            late = ", ".join(f"{name} ({url})" for name, url in waiting.items())
            raise SystemExit(f"ttsq: not ready after {WORKERS_READY_S:.0f}s: {late}")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="hub")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--worker-base-port", type=int, default=8001)
    parser.add_argument("--redis-dir", type=Path, default=ROOT / "var" / "redis", help="the embedded Redis's data")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per probe of every child, every second

    check_model(args.model)
    env = dict(os.environ, MODEL=args.model, PYTHONUNBUFFERED="1")
    redis_children: list[Child] = []
    if not env.get("REDIS_URL"):
        server = start_redis(args.redis_dir)
        env["REDIS_URL"] = server.url

        def restart_redis() -> subprocess.Popen[bytes]:
            server.restart()
            return server.process

        redis_children.append(Child("redis-server", restart_redis, process=server.process, started_at=time.monotonic()))
    workers = []
    for index in range(args.workers):
        port = args.worker_base_port + index
        worker_env = dict(env, WORKER_HEALTH_PORT=str(port), WORKER_ID=f"{socket.gethostname()}-w{index}")
        workers.append(
            Child(
                f"worker {index}",
                partial(spawn, worker_command(), cwd=ROOT, env=worker_env),
                health_url=f"http://127.0.0.1:{port}/healthz",
                startup_url=f"http://127.0.0.1:{port}/readyz",
            )
        )
    base = f"http://{args.host}:{args.port}"
    api = Child("api", partial(spawn, api_command(args.port, host=args.host), cwd=ROOT, env=env), f"{base}/healthz")
    supervisor = Supervisor([*redis_children, *workers, api])

    def stop(*_: object) -> None:
        """API and workers first (workers finish their job within the grace period), Redis last."""
        supervisor.stop(order=[[api, *workers], redis_children])
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    ready = {api.name: f"{base}/readyz"}
    ready.update((worker.name, f"http://127.0.0.1:{args.worker_base_port + n}/readyz") for n, worker in enumerate(workers))
    try:
        for child in (*workers, api):
            supervisor.launch(child)
        wait_until_up(supervisor, api, ready)
        announce(args, env, base)
        while True:  # as systemd's Restart=always: whatever exits is started again, the rest keeps running
            supervisor.tick()
            stop_on_configuration_error(supervisor)
            time.sleep(1.0)
    except BaseException:
        supervisor.stop(order=[[api, *workers], redis_children])
        raise


def announce(args: argparse.Namespace, env: dict[str, str], base: str) -> None:
    noise = "  (MODEL=tiny: random weights, the audio is NOISE)\n" if args.model == "tiny" else ""
    print(
        f"\nttsq is up: API {base} · {args.workers} worker(s) · Redis {env['REDIS_URL']}\n{noise}"
        f"  curl -s -X POST {base}/v1/tts/submit -H 'content-type: application/json' "
        '-d \'{"text": "你好，欢迎使用 ttsq。", "voice": "zh_female"}\'\n'
        f"  curl -s {base}/v1/tts/tasks/TASK_ID\n"
        f"  curl -s -o hello.wav {base}/v1/tts/result/TASK_ID\n"
        f"  API docs: {base}/docs · Ctrl-C stops everything · a process that exits or stops being live is restarted\n",
        flush=True,
    )


if __name__ == "__main__":
    main()
