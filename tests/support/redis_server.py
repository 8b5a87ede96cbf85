"""The tests' redis-server: ``ttsq.store.local_redis`` with the bundled binary, so every machine, CI
included, tests against the same server; ``REDIS_SERVER_BIN`` points the tests at another one
(e.g. Debian's ``/usr/bin/redis-server``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ttsq.store.local_redis import RedisServer, free_port
from ttsq.store.local_redis import start_redis_server as _start

__all__ = ["RedisServer", "free_port", "server_binary", "start_redis_server"]


def server_binary() -> str | None:
    """``REDIS_SERVER_BIN`` resolved, or None for the bundled server."""
    override = os.environ.get("REDIS_SERVER_BIN")
    if not override:
        return None
    binary = shutil.which(override)
    if binary is None:
        raise RuntimeError(f"REDIS_SERVER_BIN={override!r} is not an executable")
    return binary


def start_redis_server(workdir: Path) -> RedisServer:
    return _start(workdir, binary=server_binary())
