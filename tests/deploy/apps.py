"""The real applications behind the ports the manifests name: the API (app.py) and the worker's probe and
metrics server (ttsq.runtime.health). Probes and scrape configs are checked against their routes, so a
renamed route fails the deployment checks instead of a probe or a scrape in production."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.routing import Match

from settings import Settings
from ttsq.runtime.health import HeartbeatRecord, health_app

API_PORT = 8000
"""The API's port in the images and manifests: the images run ``api_command(API_PORT)`` (test_crosscheck checks it)."""


def serves(app: Starlette, path: str) -> bool:
    """Whether one of the app's routes fully matches ``GET path`` (the way Starlette dispatches a request)."""
    scope = {"type": "http", "method": "GET", "path": path, "root_path": "", "path_params": {}}
    return any(route.matches(scope)[0] == Match.FULL for route in app.router.routes)


def api_app() -> Starlette:
    from app import create_app

    return create_app(Settings())


def worker_app() -> Starlette:
    return health_app(HeartbeatRecord(worker_id="check"), 10.0)
