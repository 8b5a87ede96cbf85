"""A worker under systemd (``Type=notify``, ``WatchdogSec=``): it says READY=1 once warmed, pings the
watchdog while live, and stops pinging while an inference is hung — so systemd restarts a hung worker
on a bare GPU host as Kubernetes' liveness probe would. systemd's side is a real datagram socket here."""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.service import Service, wait_for

pytestmark = pytest.mark.e2e


class NotifySocket:
    """What systemd receives on ``NOTIFY_SOCKET``, read as it arrives (as systemd does: the kernel
    keeps only ``net.unix.max_dgram_qlen`` datagrams for a reader that falls behind). A question reads
    the queue too, under the same lock, so it sees every datagram sent before it was asked."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setblocking(False)
        self.messages: list[list[str]] = []
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while not self.closed.is_set():
            select.select([self.sock], [], [], 0.2)
            self.drain()

    def drain(self) -> list[list[str]]:
        with self.lock:
            while not self.closed.is_set():
                try:
                    self.messages.append(self.sock.recv(4096).decode().split("\n"))
                except BlockingIOError:
                    break
            return list(self.messages)

    def close(self) -> None:
        self.closed.set()
        self.reader.join()
        self.sock.close()

    def saw(self, state: str) -> bool:
        return any(state in message for message in self.drain())

    def saw_prefix(self, prefix: str) -> bool:
        return any(line.startswith(prefix) for message in self.drain() for line in message)


@pytest.fixture
def systemd(tmp_path: Path) -> Iterator[NotifySocket]:
    notify = NotifySocket(tmp_path / "notify.sock")
    yield notify
    notify.close()


def test_the_worker_pings_the_watchdog_only_while_live(service: Service, systemd: NotifySocket) -> None:
    worker = service.start_worker(
        "notify",
        NOTIFY_SOCKET=str(systemd.path),
        FAULT_MODE="hang",
        FAULT_MATCH="hang here",
        FAULT_HANG_S="8",
        JOB_TIMEOUT_S="2",
    )
    assert systemd.saw("READY=1"), "ready once the model is loaded and warmed (start_worker waited for /readyz)"
    wait_for(lambda: systemd.saw("WATCHDOG=1"), 30, "a watchdog ping")

    task_id = service.submit(text="hang here please", seed=2)
    wait_for(lambda: systemd.saw_prefix("STATUS=unhealthy"), 60, "the worker to report itself hung")
    hung_at = len(systemd.drain())
    assert worker.get("/healthz").status_code == 503
    ticks = worker.get("/healthz").json()["last_tick"]
    # Three more passes of the upkeep loop while still hung: none of them may ping the watchdog.
    wait_for(
        lambda: worker.get("/healthz").status_code == 503 and worker.get("/healthz").json()["last_tick"] > ticks + 1.0,
        30,
        "more upkeep passes during the hang",
    )
    during = systemd.drain()[hung_at:]
    assert worker.get("/healthz").status_code == 503, "still hung: what was collected is all from the hang"
    assert not any("WATCHDOG=1" in message for message in during), f"pinged while hung: {during}"

    service.wait_status(task_id, {"done"}, 90)  # the hang ends (FAULT_HANG_S): the job completes
    wait_for(lambda: any("WATCHDOG=1" in m for m in systemd.drain()[hung_at:]), 30, "pings to resume")
    assert any("STATUS=serving" in m for m in systemd.drain()[hung_at:]), "and says it serves again"
