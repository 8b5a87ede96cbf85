"""The supervisor of ``make up``: real child processes (a small HTTP server whose /healthz and /readyz
files control), real probes over HTTP, and the test's clock — so backoff and liveness deadlines are
exact, with no sleeps to race."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import FakeClock
from tests.support.service import wait_for
from ttsq.runtime.launch import CONFIG_ERROR_EXIT, free_port, spawn
from ttsq.runtime.supervise import Child, Policy, Supervisor, http_probe

SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
unhealthy, starting = Path(sys.argv[2]), Path(sys.argv[3])
class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        flag = starting if self.path == "/readyz" else unhealthy
        self.send_response(503 if flag.exists() else 200)
        self.end_headers()
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


class Fleet:
    """Children under one supervisor on a fake clock; every process is reaped at the end."""

    def __init__(self, tmp: Path, clock: FakeClock) -> None:
        self.tmp = tmp
        self.clock = clock
        self.children: list[Child] = []

    def child(self, name: str, *, gated_by_readyz: bool = False) -> Child:
        """A child whose liveness is /healthz; with ``gated_by_readyz``, its start ends at /readyz's first 200 (a worker)."""
        port = free_port()
        script = self.tmp / "health_server.py"
        script.write_text(SERVER)
        args = [sys.executable, str(script), str(port), str(self.tmp / f"{name}.unhealthy"), str(self.tmp / f"{name}.starting")]
        child = Child(
            name,
            lambda: spawn(args, cwd=self.tmp, env=dict(os.environ)),
            health_url=f"http://127.0.0.1:{port}/healthz",
            startup_url=f"http://127.0.0.1:{port}/readyz" if gated_by_readyz else None,
        )
        self.children.append(child)
        return child

    def live(self, child: Child) -> None:
        assert child.health_url is not None
        url = child.health_url
        wait_for(lambda: http_probe(url), 30, f"{child.name} to answer")

    def unhealthy(self, child: Child, on: bool = True) -> None:
        """/healthz answers 503 while on."""
        self._flag(child, "unhealthy", on)

    def starting(self, child: Child, on: bool = True) -> None:
        """/readyz answers 503 while on (a worker loading its model)."""
        self._flag(child, "starting", on)

    def _flag(self, child: Child, kind: str, on: bool) -> None:
        flag = self.tmp / f"{child.name}.{kind}"
        flag.touch() if on else flag.unlink(missing_ok=True)

    def close(self) -> None:
        for child in self.children:
            if child.process is not None and child.process.poll() is None:
                os.killpg(child.process.pid, signal.SIGKILL)
                child.process.wait()


@pytest.fixture
def fleet(tmp_path: Path, clock: FakeClock) -> Iterator[Fleet]:
    f = Fleet(tmp_path, clock)
    yield f
    f.close()


def kill9(child: Child) -> int:
    assert child.process is not None
    pid = child.process.pid
    os.kill(pid, signal.SIGKILL)
    child.process.wait()
    return pid


def test_a_killed_process_is_restarted_after_a_backoff_and_the_rest_keeps_running(fleet: Fleet, clock: FakeClock) -> None:
    worker, api = fleet.child("worker"), fleet.child("api")
    supervisor = Supervisor(fleet.children, Policy(backoff_initial_s=1, backoff_max_s=8, reset_after_s=60), clock=clock)
    supervisor.start_all()
    api_pid = api.process.pid  # type: ignore[union-attr]

    delays = []
    for _ in range(5):  # it keeps dying at once: 1, 2, 4, 8, 8 s
        old = kill9(worker)
        supervisor.tick()
        assert worker.process is None and worker.next_start_at is not None
        delays.append(worker.next_start_at - clock.now)
        clock.advance(delays[-1] - 0.1)
        supervisor.tick()
        assert worker.process is None, "not before its backoff is over"
        clock.advance(0.1)
        supervisor.tick()
        assert worker.process is not None and worker.process.pid != old, "started again"
    assert delays == [1, 2, 4, 8, 8]
    assert api.process is not None and api.process.pid == api_pid and api.process.poll() is None, "the API never stopped"

    clock.advance(60)  # it stays up a minute: the next crash starts the backoff over
    kill9(worker)
    supervisor.tick()
    assert worker.next_start_at == clock.now + 1
    assert worker.history[:2] == ["exited with code -9", "restart 1"]


def test_a_process_that_stops_being_live_is_killed_and_restarted_but_not_one_still_starting(fleet: Fleet, clock: FakeClock) -> None:
    hung, starting = fleet.child("hung"), fleet.child("starting")
    fleet.unhealthy(starting)  # a worker loading its model: never live yet
    supervisor = Supervisor(fleet.children, Policy(unhealthy_after_s=15), clock=clock)
    supervisor.start_all()
    fleet.live(hung)
    supervisor.tick()
    assert hung.started

    fleet.unhealthy(hung)  # an inference hangs: /healthz answers 503 from now on
    first_pid = hung.process.pid  # type: ignore[union-attr]
    for _ in range(3):
        supervisor.tick()
        clock.advance(7)
    assert hung.process is not None and hung.process.pid == first_pid, "14 s of failures: not yet"
    supervisor.tick()  # 21 s since the first failure seen: past the deadline
    assert hung.process is None and hung.history == ["killed: not live for 21 s"]

    fleet.unhealthy(hung, on=False)
    clock.advance(1)
    supervisor.tick()
    assert hung.process is not None and hung.process.pid != first_pid
    fleet.live(hung)

    clock.advance(600)
    supervisor.tick()
    assert starting.process is not None and starting.process.poll() is None and starting.history == [], (
        "a process that never answered 200 is still starting, however long it takes"
    )


def test_a_worker_is_judged_only_once_its_readiness_answered_so_a_slow_model_load_is_not_killed(
    fleet: Fleet, clock: FakeClock
) -> None:
    """A worker importing torch from a cold disk cache answers /healthz once and then not for tens of
    seconds (the import holds the interpreter lock): that is a slow start, not a hang. As Kubernetes'
    startup probe on /readyz does, liveness counts only after the first ready answer."""
    worker = fleet.child("worker", gated_by_readyz=True)
    fleet.starting(worker)  # loading its model: /readyz 503
    supervisor = Supervisor(fleet.children, Policy(unhealthy_after_s=15), clock=clock)
    supervisor.start_all()
    fleet.live(worker)
    supervisor.tick()
    pid = worker.process.pid  # type: ignore[union-attr]

    fleet.unhealthy(worker)  # /healthz stops answering 200 while the load goes on
    for _ in range(10):
        clock.advance(10)
        supervisor.tick()
    assert worker.process is not None and worker.process.pid == pid and worker.history == [], "100 s of a slow start"
    assert not worker.started

    fleet.unhealthy(worker, on=False)
    fleet.starting(worker, on=False)  # loaded and warmed
    supervisor.tick()
    assert worker.started
    fleet.unhealthy(worker)  # from now on a failing /healthz is a hang
    supervisor.tick()
    clock.advance(15)
    supervisor.tick()
    assert worker.process is None and worker.history == ["killed: not live for 15 s"]


def test_stop_terminates_every_child_and_restarts_nothing(fleet: Fleet, clock: FakeClock) -> None:
    first, second = fleet.child("first"), fleet.child("second")
    supervisor = Supervisor(fleet.children, clock=clock)
    supervisor.start_all()
    supervisor.stop(order=[[first], [second]])
    assert first.process is not None and first.process.returncode == -signal.SIGTERM
    assert second.process is not None and second.process.returncode == -signal.SIGTERM
    supervisor.tick()
    assert first.history == [] and first.process.poll() is not None, "a stopping supervisor restarts nothing"


def test_a_configuration_error_is_given_up_on_while_a_crash_during_start_up_is_restarted(
    fleet: Fleet, clock: FakeClock, tmp_path: Path
) -> None:
    """Neither child ever answers its liveness URL: both die while starting, one with CONFIG_ERROR_EXIT."""

    def exits(name: str, code: int) -> Child:
        args = [sys.executable, "-c", f"import sys; sys.exit({code})"]
        child = Child(name, lambda: spawn(args, cwd=tmp_path, env=dict(os.environ)), f"http://127.0.0.1:{free_port()}/healthz")
        fleet.children.append(child)
        return child

    misconfigured, crashing = exits("misconfigured", CONFIG_ERROR_EXIT), exits("crashing", 1)
    supervisor = Supervisor(fleet.children, Policy(backoff_initial_s=1), clock=clock)
    supervisor.start_all()
    for child in fleet.children:
        assert child.process is not None
        child.process.wait()
    supervisor.tick()
    assert supervisor.given_up() == [misconfigured]
    assert misconfigured.gave_up == f"exited with code {CONFIG_ERROR_EXIT} (a configuration error)"
    assert crashing.gave_up is None and crashing.next_start_at == clock.now + 1, "a crash while starting: the usual backoff"

    clock.advance(600)
    supervisor.tick()
    assert misconfigured.process is None and misconfigured.history == [misconfigured.gave_up], "never started again"
    assert crashing.process is not None and crashing.history == ["exited with code 1", "restart 1"]
