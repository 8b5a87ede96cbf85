"""The ASGI app: every router on one FastAPI instance (``uvicorn app:app``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

from fastapi import FastAPI, Security
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST

import admin_api
import cartesia_api
import cartesia_ws_api
import dialogue_api
import draw_api
import elevenlabs_api
import elevenlabs_ws_api
import google_api
import openai_api
import prosody_api
import query_api
import realtime_api
import submit_api
import voices_api
from deps import ApiKeyCaller, MetricsCaller, authenticate_before_body, document_security
from settings import Settings, get_settings, startup_warnings
from ttsq.api.auth import Authenticator, KeyPolicy
from ttsq.api.bodies import strict_json
from ttsq.api.errors import ERROR_RESPONSES, install_error_handlers
from ttsq.api.headers import BodyLimitMiddleware, SecurityHeadersMiddleware
from ttsq.api.metrics import ApiMetrics, ObservabilityMiddleware, check_single_process
from ttsq.api.schemas import deployment_openapi
from ttsq.api.service import TTSService, VoiceDraws, Webhooks
from ttsq.api.sessions.engine import Sessions
from ttsq.api.stream_slots import releasing
from ttsq.api.uploads import multipart_as_json
from ttsq.domain.ssrf import SsrfGuard
from ttsq.domain.webhooks import WebhookSigner
from ttsq.runtime.clock_skew import skew_host_clock
from ttsq.runtime.collector import collect_periodically
from ttsq.runtime.collector import install as install_collector
from ttsq.runtime.deliverer import Deliverer, system_resolver
from ttsq.runtime.health import api_probes
from ttsq.runtime.logs import configure_logging
from ttsq.store.api_keys import ApiKeyStore
from ttsq.store.cache import ResultCache
from ttsq.store.connection import create_redis, verify_redis
from ttsq.store.deliveries import DeliveryQueue
from ttsq.store.draws import DrawStore
from ttsq.store.listener import JobListener
from ttsq.store.pronunciation import PronunciationStore
from ttsq.store.queue import JobQueue
from ttsq.store.rate_limit import RateLimiter
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
        skew_host_clock(config.fault_clock_skew_s, log)  # a test's drifted host; nothing but tests sets it
        check_single_process()
        for warning in startup_warnings():
            log.warning(warning)
        redis = create_redis(config.redis_config())
        cache_redis_config = config.cache_redis_config()
        cache_redis = create_redis(cache_redis_config) if cache_redis_config else redis
        queue = JobQueue(redis, config.queue_config())
        cache = ResultCache(cache_redis, config.cache_config())
        metrics.bind(queue, cache, config.metrics_scrape_timeout_s)
        # One reader of job streams for the whole process: every event stream, audio stream and long-poll waits on it.
        listener = JobListener(
            redis,
            queue.shards,
            config.listener_config(),
            on_read=metrics.listener_reads.inc,
            on_outage=metrics.listener_outages.inc,
        )
        metrics.follow(listener.listening)
        secret = config.task_id_secret
        webhook_config = config.webhook_config()
        webhooks = deliverer = None
        if webhook_config is not None and config.webhook_secret is not None:
            deliveries = DeliveryQueue(redis, config.delivery_config())
            guard = SsrfGuard(
                config.webhook_allow_list(), resolver=system_resolver, resolve_timeout_s=config.webhook_resolve_timeout_s
            )
            webhooks = Webhooks(guard, deliveries)
            signer = WebhookSigner(config.webhook_secret.get_secret_value())
            deliverer = Deliverer(deliveries, queue, signer, guard, webhook_config)
        app.state.service = TTSService(
            queue,
            cache,
            VoiceRegistry(redis, queue.keys, config.expected_speaker_dim()),
            config.service_config(),
            TaskIdSigner(secret.get_secret_value().encode()) if secret else None,
            on_submit=metrics.submitted,
            webhooks=webhooks,
            rate_limiter=RateLimiter(redis, queue.keys, config.rate_limit_per_s, config.rate_limit_burst),
            pronunciation=PronunciationStore(
                redis,
                queue.keys,
                config.pronunciation_limits(),
                max_entries=config.pronunciation_max_entries,
                refresh_s=config.pronunciation_refresh_s,
            ),
            draws=VoiceDraws(DrawStore(redis, queue.keys, config.result_ttl_s), config.draw_config()),
            listener=listener,
        )
        service = app.state.service
        metrics.watch(service.listening.stream_slots, service.tasks.workers)
        app.state.stream_key_recheck_s = config.stream_key_recheck_s
        app.state.authenticator = Authenticator(ApiKeyStore(redis, queue.keys), KeyPolicy(config.auth))
        app.state.sessions = Sessions(service, app.state.authenticator, config.realtime_config())
        if config.auth == "off":
            log.warning(
                "AUTH=off: API keys are not checked. Anyone who can reach this API can submit, read any task whose id "
                "they hold, and create or delete voices. Use it only behind something that authenticates."
            )
        await verify_redis(redis, require_noeviction=config.require_noeviction, warn=log.warning)
        if config.model == "tiny":
            log.warning("MODEL=tiny: workers use random weights; every result is noise")
        stop = asyncio.Event()
        collecting = None
        if config.gc_full_collection_s > 0:  # last of start-up: what was built so far is frozen (ttsq/runtime/collector.py)
            restore_collector = install_collector()
            collecting = asyncio.create_task(
                collect_periodically(config.gc_full_collection_s, stop, on_collect=metrics.full_collections.observe),
                name="collector",
            )
        delivering = asyncio.create_task(deliverer.run(stop), name="webhooks") if deliverer is not None else None
        listening = asyncio.create_task(listener.run(stop), name="listener")
        try:
            yield
        finally:
            stop.set()  # deliveries in flight get a moment to finish; the rest keep their lease for another replica
            await listening
            if delivering is not None:
                await delivering
            if collecting is not None:
                await collecting
                restore_collector()
            await redis.aclose()
            if cache_redis is not redis:
                await cache_redis.aclose()

    metrics = ApiMetrics()
    app = FastAPI(
        title="ttsq",
        version="0.1.0",
        description="ChatTTS as a service: submit text, get a task id, fetch the audio.",
        lifespan=lifespan,
        openapi_url=None,  # served below, as API_DOCS says
        docs_url=None,
        redoc_url=None,
    )
    origins = [origin.strip() for origin in config.cors_origins.split(",") if origin.strip()]
    if origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_credentials="*" not in origins,  # never credentials with a wildcard
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=[
                "Authorization",
                "X-API-Key",
                "xi-api-key",
                "Cartesia-Version",
                "X-Goog-Api-Key",
                "Content-Type",
                "X-Request-ID",
            ],
            expose_headers=[
                "X-Request-ID",
                "Retry-After",
                "RateLimit-Limit",
                "RateLimit-Remaining",
                "RateLimit-Reset",
                "X-TTSQ-Task-Id",
                "X-TTSQ-Ignored-Fields",
            ],
        )
    # a stream's slot is given back once its response is over, whatever happened; a body broken off is broken quietly
    app.add_middleware(releasing)
    # inside the body limit: it reads only what the limit lets through, and only once the route's caller may send it
    app.add_middleware(strict_json, before_body=authenticate_before_body)
    app.add_middleware(multipart_as_json, paths=["/v1/voices"])  # a form on this route becomes its JSON, checked as JSON
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=config.max_body_bytes,
        larger={
            "/v1/voices": (config.max_voice_body_bytes, "MAX_VOICE_BODY_BYTES"),
            # A document of MAX_DOCUMENT_CHARS characters, each at most six bytes in JSON (a \uXXXX escape), and the rest.
            "/v1/tts/submit": (6 * config.max_document_chars + config.max_body_bytes, "MAX_DOCUMENT_CHARS"),
        },
        read_timeout_s=config.body_read_timeout_s,
    )
    app.add_middleware(SecurityHeadersMiddleware)
    app.add_middleware(ObservabilityMiddleware, metrics=metrics)
    install_error_handlers(app, config.retry_after_s, metrics.submitted)
    app.include_router(submit_api.router)
    app.include_router(query_api.router)
    app.include_router(draw_api.router)  # before voices_api's: /v1/voices/draw is not a voice's name
    app.include_router(voices_api.router)
    app.include_router(prosody_api.refine)
    app.include_router(prosody_api.router)
    app.include_router(openai_api.router)
    app.include_router(elevenlabs_api.router)
    app.include_router(cartesia_api.router)
    app.include_router(google_api.router)
    app.include_router(dialogue_api.router)
    app.include_router(dialogue_api.elevenlabs)
    app.include_router(realtime_api.router)
    app.include_router(elevenlabs_ws_api.router)
    app.include_router(cartesia_ws_api.router)
    app.include_router(admin_api.router)
    app.include_router(admin_api.pronunciation)

    async def readiness() -> dict[str, Any]:
        """The probes answer anyone (kubelet sends no key): where keys are required, they say ready or not and nothing
        more — the live workers and the queue's depth are in ``/metrics``, behind a key."""
        report: dict[str, Any] = await app.state.service.admin.readiness()
        if cast(Authenticator, app.state.authenticator).policy.keys_required():
            return {"redis": report["redis"]}
        return report

    app.include_router(api_probes(readiness, {503: ERROR_RESPONSES[503]}))

    @app.get("/metrics", include_in_schema=False)
    async def prometheus_metrics(caller: MetricsCaller) -> Response:
        """Prometheus text format; the queue's state is read from Redis now, within METRICS_SCRAPE_TIMEOUT_S. Where keys
        are required, only for a key with scope ``metrics`` (or ``admin``): it shows queue depth, workers and counters."""
        return Response(await metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    if config.api_docs != "off":
        # API_DOCS=auto: the documentation shows every route and limit of the deployment, so where keys are required
        # it needs one (any scope); public: anyone (a published API). The page itself needs no data of ours.
        guard = [] if config.api_docs == "public" else [Security(ApiKeyCaller(None))]

        @app.get("/openapi.json", include_in_schema=False, dependencies=guard)
        async def openapi_document() -> JSONResponse:
            return JSONResponse(app.openapi())

        @app.get("/docs", include_in_schema=False, dependencies=guard)
        async def swagger_ui() -> HTMLResponse:
            return get_swagger_ui_html(openapi_url="/openapi.json", title="ttsq — API docs")

        @app.get("/redoc", include_in_schema=False, dependencies=guard)
        async def redoc() -> HTMLResponse:
            return get_redoc_html(openapi_url="/openapi.json", title="ttsq — API docs")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    webhooks_on = config.webhook_secret is not None and config.webhook_config() is not None

    def openapi() -> dict[str, Any]:
        """The schema generated from the routes (once), with what this deployment's settings decide: the text
        limit, and whether a key is optional (known once the app is serving: ``AUTH=auto`` looks at the bind)."""
        authenticator = getattr(app.state, "authenticator", None)
        anonymous = authenticator is not None and not cast(Authenticator, authenticator).policy.keys_required()
        deployment = deployment_openapi(
            FastAPI.openapi(app),
            max_text_chars=config.max_text_chars,
            openai_max_input_chars=config.openai_max_input_chars,
            max_ssml_chars=config.max_ssml_chars,
            max_document_chars=config.max_document_chars,
            anonymous_allowed=anonymous,
            webhooks=webhooks_on,
        )
        return document_security(deployment)  # on deployment_openapi's copy: FastAPI's cached schema stays as generated

    app.openapi = openapi  # type: ignore[method-assign]

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        """The web page: static HTML, script and styles, no build step."""
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    return app


app = create_app()
