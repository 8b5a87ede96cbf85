"""The API's Prometheus metrics, its request ids and its access log: one middleware, one registry.

Labels are bounded: the route *template* (``/v1/tts/tasks/{task_id}``, never a task id), the
method, the status code, and fixed outcome names — never texts, ids or voice names from users.

Each API process has its own registry, so run one uvicorn process per container (scale with
replicas): the API refuses to start under ``uvicorn --workers N`` (see :func:`check_single_process`),
because each scrape would then see one process at random.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ttsq.api.stream_admission import WorkerWatch
from ttsq.api.stream_slots import ELEVENLABS_TTS_ROUTES, StreamSlots
from ttsq.domain import context
from ttsq.store.cache import ResultCache
from ttsq.store.metrics import CacheCollector, QueueGauges
from ttsq.store.queue import JobQueue

access_log = logging.getLogger("ttsq.access")

SubmitOutcome = Literal[
    "queued", "joined", "cache_hit_l1", "cache_hit_l2", "cache_hit_l3", "invalid", "queue_full", "rate_limited", "unavailable"
]
SUBMIT_ROUTES = frozenset(
    {
        "/v1/tts/submit",
        "/v1/audio/speech",
        "/v1/tts/dialogue",
        "/v1/text-to-dialogue",
        "/v1/text-to-dialogue/stream",
        "/tts/bytes",
        "/v1/text:synthesize",
    }
    | ELEVENLABS_TTS_ROUTES
)
"""Routes whose rejections count as submit outcomes (422/400, 404, 429, 503)."""

API_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Request durations: milliseconds for submits and probes, up to minutes for a waiting OpenAI speech call or a stream."""


class ApiMetrics:
    """The registry and metrics of one API process; :meth:`bind` adds the store's views once Redis is connected."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "ttsq_http_requests",
            "HTTP requests by route template, method and status.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "ttsq_http_request_duration_seconds",
            "HTTP request duration (to the end of the response body) by route template and method.",
            ["route", "method"],
            buckets=API_BUCKETS,
            registry=self.registry,
        )
        self.submits = Counter(
            "ttsq_submits",
            "Submits (native and OpenAI) by outcome: queued, joined an identical job in flight, answered by a cache level, "
            "or rejected (invalid 422/400, queue_full 429, rate_limited 429, unavailable 503). The seed's tts_requests_total.",
            ["outcome"],
            registry=self.registry,
        )
        self._submit_children = {outcome: self.submits.labels(outcome) for outcome in get_args(SubmitOutcome)}
        self.listener_reads = Counter(
            "ttsq_listener_reads",
            "Reads of the process's one stream listener (each follows every event stream, audio stream and long-poll of "
            "the process at once); idle, one per LISTEN_BLOCK_S per group, whatever the number of clients.",
            registry=self.registry,
        )
        self.listener_outages = Counter(
            "ttsq_listener_outages",
            "Reads of the stream listener that failed because Redis could not be reached (it reads again from where each "
            "job's stream was, after LISTEN_RETRY_S).",
            registry=self.registry,
        )
        self.subscriptions = Gauge(
            "ttsq_listener_subscriptions",
            "Clients of this process waiting on the stream listener now (event streams, audio streams, long-polls).",
            registry=self.registry,
        )
        self.full_collections = Histogram(
            "ttsq_api_gc_full_collection_seconds",
            "The API process's scheduled full garbage collections (every GC_FULL_COLLECTION_S), each of which holds the "
            "event loop: their duration grows with what the held streams keep alive.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=self.registry,
        )
        self.workers_live: Gauge | None = None
        """``ttsq_api_workers_live``, once :meth:`watch` is given a watch that is on."""
        self._workers: WorkerWatch | None = None
        self._slots: StreamSlotsCollector | None = None
        self._request_children: dict[tuple[str, str, int], Any] = {}
        self._duration_children: dict[tuple[str, str], Any] = {}
        self._queue: QueueGauges | None = None
        self._scrape_timeout_s = 1.0
        self._cache: CacheCollector | None = None

    def bind(self, queue: JobQueue, cache: ResultCache, scrape_timeout_s: float) -> None:
        """Export the queue's state (read from Redis at each scrape) and the cache's counters."""
        self._scrape_timeout_s = scrape_timeout_s
        if self._queue is None:
            self._queue = QueueGauges(self.registry, queue, scrape_timeout_s)
        else:
            self._queue.queue = queue
        if self._cache is not None:
            self.registry.unregister(self._cache)
        self._cache = CacheCollector(cache)
        self.registry.register(self._cache)

    def follow(self, listening: Callable[[], float]) -> None:
        """Export the listener's open subscriptions, counted at each scrape."""
        self.subscriptions.set_function(listening)

    def watch(self, slots: StreamSlots, workers: WorkerWatch) -> None:
        """Export the stream slots by state (read at each scrape) and the live workers as the process sees them (read
        again at each scrape, within its shared refresh)."""
        if self._slots is not None:
            self.registry.unregister(self._slots)
        self._slots = StreamSlotsCollector(slots)
        self.registry.register(self._slots)
        self._workers = workers if workers.on else None
        if self._workers is not None and self.workers_live is None:
            self.workers_live = Gauge(
                "ttsq_api_workers_live",
                "Workers with a heartbeat within NO_WORKER_S, as this API process last read them: at 0 its streams, "
                "long-polls and realtime sessions are answered no_worker. Absent with NO_WORKER_S=0 (off).",
                registry=self.registry,
            )

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count and time one request; the labelled children are kept (route templates are few)."""
        key = (route, method, status)
        counter = self._request_children.get(key)
        if counter is None:
            counter = self._request_children[key] = self.requests.labels(route, method, str(status))
        timer = self._duration_children.get((route, method))
        if timer is None:
            timer = self._duration_children[(route, method)] = self.duration.labels(route, method)
        counter.inc()
        timer.observe(seconds)

    def submitted(self, outcome: SubmitOutcome) -> None:
        self._submit_children[outcome].inc()

    async def exposition(self) -> bytes:
        """The scrape: the queue read from Redis now (bounded), then every metric in the text format."""
        if self._queue is not None:
            await self._queue.refresh()
        if self._workers is not None and self.workers_live is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._scrape_timeout_s):
                    await self._workers.live()
            if self._workers.last_count is not None:
                self.workers_live.set(self._workers.last_count)
        return generate_latest(self.registry)


TOP_STREAM_TENANTS = 10
"""Tenants named in ``ttsq_stream_slots_tenant``; the others are summed as ``other``."""


class StreamSlotsCollector(Collector):
    """``ttsq_stream_slots*``: this process's stream slots (:mod:`ttsq.api.stream_slots`) by state, by what holds them,
    and by tenant — the :data:`TOP_STREAM_TENANTS` holding most by name, the rest as ``other`` (bounded cardinality)."""

    def __init__(self, slots: StreamSlots) -> None:
        self.slots = slots

    def collect(self) -> Iterator[Metric]:
        counts = self.slots.counts()
        state = GaugeMetricFamily(
            "ttsq_stream_slots",
            "This API process's stream slots (MAX_STREAMS) by state: in_use or free.",
            labels=["state"],
        )
        state.add_metric(["in_use"], counts.in_use)
        state.add_metric(["free"], max(0, counts.limit - counts.in_use))
        held = GaugeMetricFamily(
            "ttsq_stream_slots_held",
            "Stream slots in use by what holds them: session (realtime), events, audio, speech (OpenAI), long_poll.",
            labels=["kind"],
        )
        for kind, count in counts.by_kind.items():
            held.add_metric([kind], count)
        tenants = GaugeMetricFamily(
            "ttsq_stream_slots_tenant",
            f"Stream slots in use per tenant (MAX_STREAMS_PER_TENANT): the {TOP_STREAM_TENANTS} tenants holding most by "
            "name, the rest summed as 'other'.",
            labels=["tenant"],
        )
        ranked = sorted(counts.by_tenant.items(), key=lambda item: (-item[1], item[0]))
        for tenant, count in ranked[:TOP_STREAM_TENANTS]:
            tenants.add_metric([tenant], count)
        if len(ranked) > TOP_STREAM_TENANTS:
            tenants.add_metric(["other"], sum(count for _, count in ranked[TOP_STREAM_TENANTS:]))
        yield from (state, held, tenants)


class ObservabilityMiddleware:
    """Per request: take or make its id (``X-Request-ID``, echoed back), time it, count it, log one access line.

    A plain ASGI middleware (not ``BaseHTTPMiddleware``): it adds no task or queue hop per request,
    and the duration covers the whole response body, streams included.
    """

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        offered = next((value.decode("latin-1") for name, value in scope["headers"] if name == b"x-request-id"), None)
        request_id = context.accept_request_id(offered)
        scope.setdefault("state", {})["request_id"] = request_id  # for the 500 handler, which runs outside this
        token = context.request_id.set(request_id)
        task_token = context.task_id.set(None)
        status = 500
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope["method"]
            self.metrics.observe_request(template, method, status, elapsed)
            access_log.info("%s %s %d %.1fms", method, template, status, elapsed * 1000)
            context.request_id.reset(token)
            context.task_id.reset(task_token)


def check_single_process() -> None:
    """Refuse to run as one of several uvicorn worker processes: each would keep its own metrics."""
    if multiprocessing.parent_process() is not None:
        raise RuntimeError(
            "the API runs as a child of uvicorn's process manager (--workers N): each process would keep its own "
            "metrics and /metrics would answer for one of them at random. Run one uvicorn process per container "
            "or unit and scale with replicas."
        )
