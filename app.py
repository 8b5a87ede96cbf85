"""The ASGI app: every router on one FastAPI instance (``uvicorn app:app``)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST

import openai_api
import query_api
import submit_api
import voices_api
from settings import Settings, get_settings, startup_warnings
from ttsq.api.errors import ERROR_RESPONSES, install_error_handlers
from ttsq.api.metrics import ApiMetrics, ObservabilityMiddleware, check_single_process
from ttsq.api.service import TTSService
from ttsq.runtime.health import api_probes
from ttsq.runtime.logs import configure_logging
from ttsq.store.cache import ResultCache
from ttsq.store.connection import create_redis, verify_redis
from ttsq.store.queue import JobQueue
from ttsq.store.task_ids import TaskIdSigner
from ttsq.store.voices import VoiceRegistry

log = logging.getLogger("ttsq.api")
STATIC_DIR = Path(__file__).resolve().parent / "static"


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app; tests pass their own settings, production reads the environment."""
    config = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        configure_logging(config.log_level, config.log_format)
        check_single_process()
        for warning in startup_warnings():
            log.warning(warning)
        redis = create_redis(config.redis_config())
        cache_redis_config = config.cache_redis_config()
        cache_redis = create_redis(cache_redis_config) if cache_redis_config else redis
        queue = JobQueue(redis, config.queue_config())
        cache = ResultCache(cache_redis, config.cache_config())
        metrics.bind(queue, cache, config.metrics_scrape_timeout_s)
        secret = config.task_id_secret
        app.state.service = TTSService(
            queue,
            cache,
            VoiceRegistry(redis, queue.keys, config.expected_speaker_dim()),
            config.service_config(),
            TaskIdSigner(secret.get_secret_value().encode()) if secret else None,
            on_submit=metrics.submitted,
        )
        await verify_redis(redis, require_noeviction=config.require_noeviction, warn=log.warning)
        if config.model == "tiny":
            log.warning("MODEL=tiny: workers use random weights; every result is noise")
        try:
            yield
        finally:
            await redis.aclose()
            if cache_redis is not redis:
                await cache_redis.aclose()

    metrics = ApiMetrics()
    app = FastAPI(
        title="ttsq",
        version="0.1.0",
        description="ChatTTS as a service: submit text, get a task id, fetch the audio.",
        lifespan=lifespan,
    )
    app.add_middleware(ObservabilityMiddleware, metrics=metrics)
    install_error_handlers(app, config.retry_after_s, metrics.submitted)
    app.include_router(submit_api.router)
    app.include_router(query_api.router)
    app.include_router(voices_api.router)
    app.include_router(openai_api.router)
    app.include_router(api_probes(lambda: app.state.service.readiness(), {503: ERROR_RESPONSES[503]}))

    @app.get("/metrics", include_in_schema=False)
    async def prometheus_metrics() -> Response:
        """Prometheus text format; the queue's state is read from Redis now, within METRICS_SCRAPE_TIMEOUT_S."""
        return Response(await metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        """The web page: one static HTML file, no build step."""
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    return app


app = create_app()
