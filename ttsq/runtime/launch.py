"""Starting ttsq's processes the same way everywhere: ``make up``, the end-to-end tests, the benchmarks.

The API is ``python api_server.py`` (uvicorn with uvloop and httptools, and the server's limits from the settings); a
worker is ``python worker.py``. Both are started from the repository root (``cwd``), configured only through their
environment, and waited for through their HTTP readiness probes.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from ttsq.store.local_redis import free_port

__all__ = [
    "CONFIG_ERROR_EXIT",
    "KEEP_ALIVE_S",
    "ProcessExited",
    "api_command",
    "free_port",
    "spawn",
    "wait_until",
    "wait_until_ok",
    "worker_command",
]

CONFIG_ERROR_EXIT = 78
"""The exit code of a worker that cannot run as it is configured — settings that do not validate, a model that
cannot be loaded from what ``MODEL`` names, a Redis that may evict jobs under ``REQUIRE_NOEVICTION`` — after it
has logged why. Starting it again would fail the same way, so ``make up``'s supervisor stops the stack on it
instead of restarting (every other exit is restarted). 78 is ``EX_CONFIG`` of sysexits.h; systemd's
``RestartPreventExitStatus=`` takes it."""


KEEP_ALIVE_S = 75
"""How long uvicorn keeps an idle HTTP/1.1 connection open (its default is 5 s). A server must hold an idle
connection longer than its clients do: httpx (and the OpenAI SDK on it) drops one after 5 s, aiohttp after 15 s,
and a client that sends on a connection the server is closing at that instant gets "Server disconnected without
sending a response" — a request lost in transit, not refused. 75 s is nginx's default, above the 60 s idle
timeout of the common cloud load balancers, which must also find the backend's connection still open. The API is
started with it by ``api_server.py``."""


def api_command(port: int, *, host: str = "127.0.0.1", app: str = "app:app", access_log: bool = False) -> list[str]:
    """The API process's command line (``api_server.py``: uvicorn with the server limits from the settings), for
    ttsq's app or a benchmark's bare stand-in."""
    command = [sys.executable, "api_server.py", "--host", host, "--port", str(port)]
    if app != "app:app":
        command += ["--app", app]
    return [*command, "--access-log"] if access_log else command


def worker_command() -> list[str]:
    return [sys.executable, "worker.py"]


def spawn(args: Sequence[str], *, cwd: Path, env: dict[str, str], log: Path | None = None) -> subprocess.Popen[bytes]:
    """Start a process in its own session (so its whole group can be signalled), logging to ``log``."""
    output = log.open("ab") if log is not None else None
    return subprocess.Popen(
        list(args), cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT if output else None, start_new_session=True
    )


class ProcessExited(RuntimeError):
    """A process that was being waited for has exited."""


def wait_until(check: Callable[[], bool], timeout_s: float, what: str, processes: Sequence[subprocess.Popen[bytes]] = ()) -> None:
    """Poll ``check`` until it is true; :class:`TimeoutError` after ``timeout_s``, :class:`ProcessExited` if one of
    ``processes`` exits meanwhile. Connection errors count as "not yet"."""
    deadline = time.monotonic() + timeout_s
    while True:
        exited = [process for process in processes if process.poll() is not None]
        if exited:
            raise ProcessExited(f"a process exited (code {exited[0].returncode}) while waiting for {what}")
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.05)


def wait_until_ok(url: str, timeout_s: float, processes: Sequence[subprocess.Popen[bytes]] = ()) -> None:
    """Wait until ``GET url`` answers 200 (a readiness probe)."""
    wait_until(lambda: httpx.get(url, timeout=2.0).status_code == 200, timeout_s, url, processes)
