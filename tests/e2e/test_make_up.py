"""``make up`` as a new user runs it: a worker killed while it loads its model (as the OOM killer would) or
later must not stop the stack — the supervisor restarts it and the jobs acknowledged meanwhile are served —
and a worker's configuration error stops everything with its message instead of being restarted forever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import psutil
import pytest

from tests.support.service import ROOT, Service, wait_for
from ttsq.runtime.launch import CONFIG_ERROR_EXIT, free_port, spawn

pytestmark = pytest.mark.e2e


def make_up(service: Service, **env: str) -> tuple[subprocess.Popen[bytes], str, str]:
    """``scripts/up.py --model tiny`` on the test's Redis (REDIS_URL is set, so it embeds none); its API and worker URLs."""
    api_port, worker_port = free_port(), free_port()
    up = spawn(
        [sys.executable, "scripts/up.py", "--model", "tiny", "--port", str(api_port), "--worker-base-port", str(worker_port)],
        cwd=ROOT,
        env={**service.env, **env},
        log=service.tmp / "up.log",
    )
    service.processes.append(up)
    return up, f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{worker_port}"


def child(up: subprocess.Popen[bytes], marker: str) -> psutil.Process:
    """The live child of make up whose command line has ``marker`` (a killed one is a zombie until reaped)."""
    for process in psutil.Process(up.pid).children():
        try:
            if process.status() != psutil.STATUS_ZOMBIE and marker in " ".join(process.cmdline()):
                return process
        except psutil.Error:
            continue
    raise LookupError(marker)


def test_make_up_restarts_a_worker_killed_while_loading_or_later_and_the_rest_keeps_serving(service: Service) -> None:
    up, api, worker_health = make_up(service)
    log = service.tmp / "up.log"

    def loading() -> bool:
        """The API takes jobs and the worker answers its probes, but its model is not loaded yet."""
        if httpx.get(f"{api}/readyz", timeout=2).status_code != 200:
            return False
        response = httpx.get(f"{worker_health}/readyz", timeout=2)
        return response.status_code == 503 and response.json()["model_loaded"] is False

    def new_worker_started(old: int) -> bool:
        try:
            return bool(child(up, "worker.py").pid != old)
        except LookupError:
            return False

    def submit(tag: str) -> list[str]:
        answers = [httpx.post(f"{api}/v1/tts/submit", json={"text": f"{tag} {i}", "seed": i}) for i in range(3)]
        assert all(r.status_code == 202 for r in answers), "the API keeps accepting while the worker is down"
        return [str(r.json()["task_id"]) for r in answers]

    try:
        wait_for(loading, 300, "the worker to be loading its model while the API is ready")
        worker, api_process = child(up, "worker.py"), child(up, "api_server.py")
        os.kill(worker.pid, signal.SIGKILL)  # what the OOM killer does to a worker loading a model too big for it
        assert "ttsq is up" not in log.read_text(), "the worker was killed before it was ever ready"
        acknowledged = submit("killed while loading")
        wait_for(lambda: "ttsq is up" in log.read_text(), 300, "make up to be up with the restarted worker")

        worker = child(up, "worker.py")
        os.kill(worker.pid, signal.SIGKILL)  # and once it serves
        acknowledged += submit("killed while serving")
        wait_for(lambda: new_worker_started(worker.pid), 60, "the supervisor to start a new worker")
        wait_for(lambda: httpx.get(f"{worker_health}/readyz", timeout=2).status_code == 200, 180, "the new worker")

        def all_done() -> bool:
            return all(httpx.get(f"{api}/v1/tts/tasks/{task_id}").json()["status"] == "done" for task_id in acknowledged)

        wait_for(all_done, 180, "the jobs acknowledged while the worker was down")
        assert up.poll() is None, "make up is still running"
        assert child(up, "api_server.py").pid == api_process.pid, "the API was never restarted"
        text = log.read_text()
        assert text.count("restarting worker 0") == 2 and "exited with code -9" in text
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            assert up.wait(60) == 0, "Ctrl-C / SIGTERM stops everything cleanly"
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            raise


def test_make_up_stops_everything_on_a_worker_configuration_error_with_its_message(service: Service) -> None:
    up, api, _ = make_up(service, GPT_DTYPE="float16")  # half precision on a CPU: the worker cannot load the model
    try:
        code = up.wait(180)
    except subprocess.TimeoutExpired:
        os.killpg(up.pid, signal.SIGKILL)
        raise
    text = (service.tmp / "up.log").read_text()
    assert code != 0, text
    assert "configuration error: cannot load the model: float16 needs a CUDA device" in text, "the worker's message"
    assert f"worker 0 exited with code {CONFIG_ERROR_EXIT} (a configuration error)" in text and "everything stops" in text
    assert "restarting worker 0" not in text, "a configuration error is not restarted"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{api}/healthz", timeout=2)  # the API was stopped with it
