"""Call an ASGI app's JSON POST route N times in this process, with no HTTP server: what one request
costs the app itself (its middlewares, routing, dependencies, validation, handler and Redis client).

    python -m bench.service.asgi_driver MODULE PATH N BODY [--profile FILE]

``MODULE`` names the app (``app`` for ttsq, ``bench.service.lpush_app`` for the bare endpoint) and ``BODY`` the
JSON every request posts; the app's lifespan runs first (it connects to ``REDIS_URL``) and 20 requests
warm it up before the N that count. Every answer must be 200 or 202, else the run fails.
:mod:`bench.service.submit_cost` runs this under
callgrind with N = 0 and N > 0: the difference over N is the instructions one request takes,
a count that does not move with the machine's load. ``--profile`` writes a cProfile of the N
requests instead (for where the time goes; cProfile's own cost inflates small functions).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib
import os
from typing import Any

from starlette.types import ASGIApp, Message

WARM_UP = 20


async def _start(app: ASGIApp) -> dict[str, Any]:
    """Run the app's lifespan startup (its shutdown is never sent: the process exits); the lifespan's state,
    which a server hands a copy of to every request."""
    inbox: asyncio.Queue[Message] = asyncio.Queue()
    outbox: asyncio.Queue[Message] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    state: dict[str, Any] = {}
    scope: dict[str, Any] = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": state}
    asyncio.get_running_loop().create_task(app(scope, inbox.get, outbox.put))  # type: ignore[arg-type]
    started = await outbox.get()
    if started["type"] != "lifespan.startup.complete":
        raise SystemExit(f"the app did not start: {started}")
    return state


async def post(app: ASGIApp, path: str, body: bytes, state: dict[str, Any]) -> int:
    """One POST of ``body`` (JSON) to ``path``; its status."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": dict(state),
    }
    delivered = False
    status = 0

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never disconnects
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])

    await app(scope, receive, send)
    return status


async def drive(module: str, path: str, count: int, body: bytes, profile: str | None) -> None:
    app: ASGIApp = importlib.import_module(module).app
    state = await _start(app)
    for _ in range(WARM_UP):
        await post(app, path, body, state)
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    statuses = [await post(app, path, body, state) for _ in range(count)]
    if profiler is not None and profile is not None:
        profiler.disable()
        profiler.dump_stats(profile)
    refused = [status for status in statuses if status not in (200, 202)]
    if refused:
        raise SystemExit(f"{len(refused)} of {count} requests were refused (first: {refused[0]})")
    print(f"{count} requests to {module} {path}: all answered", flush=True)
    os._exit(0)  # no lifespan shutdown or interpreter teardown: what is counted is start-up and requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("module")
    parser.add_argument("path")
    parser.add_argument("count", type=int)
    parser.add_argument("body", help="the JSON every request posts")
    parser.add_argument("--profile", help="write a cProfile of the counted requests here")
    args = parser.parse_args()
    asyncio.run(drive(args.module, args.path, args.count, args.body.encode(), args.profile))


if __name__ == "__main__":
    main()
