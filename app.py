"""The ASGI app: both routers on one FastAPI instance (``uvicorn app:app``)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

import openai_api
import query_api
import submit_api
import voices_api
from settings import Settings, get_settings
from ttsq.api_errors import install_error_handlers
from ttsq.cache import ResultCache
from ttsq.queue import JobQueue, check_eviction_policy
from ttsq.redis_conn import create_redis
from ttsq.task_ids import TaskIdSigner
from ttsq.voices import VoiceRegistry

log = logging.getLogger("ttsq.api")
STATIC_DIR = Path(__file__).resolve().parent / "static"


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app; tests pass their own settings, production reads the environment."""
    config = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        redis = create_redis(config.redis_config())
        cache_redis_config = config.cache_redis_config()
        cache_redis = create_redis(cache_redis_config) if cache_redis_config else redis
        app.state.settings = config
        app.state.queue = JobQueue(redis, config.queue_config())
        app.state.cache = ResultCache(cache_redis, config.cache_config())
        app.state.voices = VoiceRegistry(redis, app.state.queue.keys, config.expected_speaker_dim())
        secret = config.task_id_secret
        app.state.signer = TaskIdSigner(secret.get_secret_value().encode()) if secret else None
        try:
            warning = await check_eviction_policy(redis)
        except Exception as exc:  # noqa: BLE001 - Redis may be down at start; /readyz reports it
            warning = f"cannot reach Redis at start-up ({exc}); requests get 503 until it is back"
        if warning:
            log.warning(warning)
            if config.require_noeviction and "maxmemory-policy is" in warning:
                raise RuntimeError(warning)
        if config.model == "tiny":
            log.warning("MODEL=tiny: workers use random weights; every result is noise")
        try:
            yield
        finally:
            await redis.aclose()
            if cache_redis is not redis:
                await cache_redis.aclose()

    app = FastAPI(
        title="ttsq",
        version="0.1.0",
        description="ChatTTS as a service: submit text, get a task id, fetch the audio.",
        lifespan=lifespan,
    )
    install_error_handlers(app, config.retry_after_s)
    app.include_router(submit_api.router)
    app.include_router(query_api.router)
    app.include_router(voices_api.router)
    app.include_router(openai_api.router)
    app.add_exception_handler(RequestValidationError, openai_api.openai_validation_error)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        """The web page: one static HTML file, no build step."""
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    return app


app = create_app()
