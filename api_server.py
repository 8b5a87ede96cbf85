"""The API process: ``python api_server.py --host 0.0.0.0 --port 8000`` serves ``app:app`` under uvicorn.

Every way ttsq starts its API runs this (``make up``, the image's ``CMD``, the systemd unit, the tests and benchmarks:
:func:`ttsq.runtime.launch.api_command`), so the server's own limits are set in one place, from the settings, and
cannot drift between launches (``tests/deploy`` holds every shipped launch to it):

* **WebSocket messages** (a realtime session's) are at most ``REALTIME_MAX_MESSAGE_BYTES``, checked by the server as a
  frame arrives (its header states its length), before anything is buffered: uvicorn's default was 16 MiB, and the
  session's own check came after the whole message was read. **Compression is off**: with permessage-deflate, one
  socket read of small compressed frames was inflated whole before the server paused, so 128 keyless clients drove
  the API to its 4 GB memory cap; without it, what the server holds is what was sent.
* **Connections**: an idle HTTP/1.1 connection is kept ``KEEP_ALIVE_S`` between requests
  (:data:`ttsq.runtime.launch.KEEP_ALIVE_S`); a request's headers must arrive within ``HTTP_HEADER_TIMEOUT_S``; past
  ``MAX_CONNECTIONS`` a new connection closes the one idle longest (:mod:`ttsq.runtime.connections`).

The event loop is uvloop, the HTTP parser httptools (the protocol above is httptools'), the WebSocket implementation
websockets' sans-I/O one, whose ``max_size`` bounds each message as its frames arrive. One process per container or
unit: the app refuses to run as one of several uvicorn workers (its metrics are per process).
"""

from __future__ import annotations

import argparse
import resource
from typing import Any

import uvicorn

from settings import Settings, get_settings
from ttsq.runtime.connections import ConnectionLimits, connection_budget, guarded_http
from ttsq.runtime.launch import KEEP_ALIVE_S


def connection_limits(settings: Settings, open_files: int | None = None) -> ConnectionLimits:
    """``HTTP_HEADER_TIMEOUT_S`` and ``MAX_CONNECTIONS`` (``auto``: from this process's open-file limit)."""
    if open_files is None:
        open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    max_connections = settings.max_connections
    if max_connections == "auto":
        max_connections = connection_budget(open_files, settings.redis_max_connections)
    return ConnectionLimits(header_timeout_s=settings.http_header_timeout_s, max_connections=max_connections)


def server_options(settings: Settings, open_files: int | None = None) -> dict[str, Any]:
    """What uvicorn is run with, beside the address and the app: the same for every launch."""
    return {
        "loop": "uvloop",
        "http": guarded_http(connection_limits(settings, open_files)),
        "ws": "websockets-sansio",
        "ws_max_size": settings.realtime_max_message_bytes,
        "ws_per_message_deflate": False,
        "timeout_keep_alive": KEEP_ALIVE_S,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="api_server.py", description="Serve the ttsq API (app:app) under uvicorn.")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--app", default="app:app", help="the ASGI app (a benchmark's stand-in; default: ttsq's)")
    parser.add_argument("--access-log", action="store_true", help="uvicorn's access log (the app logs its own)")
    args = parser.parse_args(argv)
    uvicorn.run(args.app, host=args.host, port=args.port, access_log=args.access_log, **server_options(get_settings()))


if __name__ == "__main__":
    main()
