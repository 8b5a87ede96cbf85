"""``make up`` as a new user runs it: one ``kill -9`` of the worker must not stop the stack, and the
jobs acknowledged meanwhile are served once the supervisor has restarted it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import psutil
import pytest

from tests.service import ROOT, Service, wait_for
from ttsq.runtime.launch import free_port, spawn

pytestmark = pytest.mark.e2e


def test_make_up_restarts_a_killed_worker_and_the_rest_keeps_serving(service: Service) -> None:
    api_port, worker_port = free_port(), free_port()
    up = spawn(
        [sys.executable, "scripts/up.py", "--model", "tiny", "--port", str(api_port), "--worker-base-port", str(worker_port)],
        cwd=ROOT,
        env=service.env,  # REDIS_URL: the test's redis-server, so up.py embeds none
        log=service.tmp / "up.log",
    )
    service.processes.append(up)
    api, worker_health = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{worker_port}"
    try:
        wait_for(lambda: "ttsq is up" in (service.tmp / "up.log").read_text(), 300, "make up to be up")

        def child(marker: str) -> psutil.Process:
            """The live child of make up whose command line has ``marker`` (a killed one is a zombie until reaped)."""
            for process in psutil.Process(up.pid).children():
                try:
                    if process.status() != psutil.STATUS_ZOMBIE and marker in " ".join(process.cmdline()):
                        return process
                except psutil.Error:
                    continue
            raise LookupError(marker)

        def new_worker_started() -> bool:
            try:
                return bool(child("worker.py").pid != worker.pid)
            except LookupError:
                return False

        worker, api_process = child("worker.py"), child("uvicorn")
        os.kill(worker.pid, signal.SIGKILL)
        acknowledged = [httpx.post(f"{api}/v1/tts/submit", json={"text": f"after the kill {i}", "seed": i}) for i in range(3)]
        assert all(r.status_code == 202 for r in acknowledged), "the API keeps accepting while the worker is down"

        wait_for(new_worker_started, 60, "the supervisor to start a new worker")
        wait_for(lambda: httpx.get(f"{worker_health}/readyz", timeout=2).status_code == 200, 180, "the new worker")
        def all_done() -> bool:
            return all(httpx.get(f"{api}/v1/tts/tasks/{r.json()['task_id']}").json()["status"] == "done" for r in acknowledged)

        wait_for(all_done, 180, "the jobs acknowledged while the worker was down")
        assert up.poll() is None, "make up is still running"
        assert child("uvicorn").pid == api_process.pid, "the API was never restarted"
        assert "restarting worker 0" in (service.tmp / "up.log").read_text()
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            assert up.wait(60) == 0, "Ctrl-C / SIGTERM stops everything cleanly"
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            raise
