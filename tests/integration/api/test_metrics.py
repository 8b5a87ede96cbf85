"""The API's /metrics, request ids and access log, through the real app on a real Redis."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import api_client
from tests.support.redis_server import free_port


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, keyed by (name, sorted labels); parsed by prometheus-client's own parser."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(scrape: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return scrape.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_submits_are_counted_by_outcome_and_requests_by_route_template(redis: Any, make_settings: Any) -> None:
    async with api_client(make_settings(max_queue_depth=2)) as (client, _):
        body = {"text": "Counted.", "voice": "zh_female"}
        queued = (await client.post("/v1/tts/submit", json=body)).json()
        assert (await client.post("/v1/tts/submit", json=body)).json()["joined"] is True
        assert (await client.post("/v1/tts/submit", json={"text": ""})).status_code == 422
        await client.post("/v1/tts/submit", json={"text": "fills the queue", "seed": 2})
        assert (await client.post("/v1/tts/submit", json={"text": "one too many", "seed": 3})).status_code == 429
        assert (await client.get(f"/v1/tts/tasks/{queued['task_id']}")).status_code == 200
        scrape = samples((await client.get("/metrics")).text)
    assert value(scrape, "ttsq_submits_total", outcome="queued") == 2
    assert value(scrape, "ttsq_submits_total", outcome="joined") == 1
    assert value(scrape, "ttsq_submits_total", outcome="invalid") == 1
    assert value(scrape, "ttsq_submits_total", outcome="queue_full") == 1
    assert value(scrape, "ttsq_http_requests_total", route="/v1/tts/submit", method="POST", status="202") == 3
    assert value(scrape, "ttsq_http_requests_total", route="/v1/tts/tasks/{task_id}", method="GET", status="200") == 1
    assert value(scrape, "ttsq_http_request_duration_seconds_count", route="/v1/tts/submit", method="POST") == 5
    assert value(scrape, "ttsq_queue_depth") == 2 and value(scrape, "ttsq_queue_depth_limit") == 2
    assert value(scrape, "ttsq_redis_up") == 1 and value(scrape, "ttsq_workers_live") == 0
    labels = {label for name, pairs in scrape for label in pairs}
    assert not any(re.search(r"[0-9a-f]{8}-[0-9a-f]{4}", v) for _, v in labels), "a task id leaked into a label"


async def test_cache_hits_are_counted_by_level(redis: Any, make_settings: Any) -> None:
    from ttsq.api.service import TaskService
    from ttsq.domain.voices import builtin
    from ttsq.store.cache import CachedAudio

    async with api_client(make_settings()) as (client, app):
        service: TaskService = app.state.service.tasks
        body = {"text": "Cached.", "voice": "zh_female"}
        from ttsq.api.schemas import SubmitRequest

        key = service.build_params(SubmitRequest(**body), builtin("zh_female")).cache_key
        assert key is not None
        await service.cache.put(key, CachedAudio(b"audio", "audio/wav", 1.0))
        assert (await client.post("/v1/tts/submit", json=body)).status_code == 200
        scrape = samples((await client.get("/metrics")).text)
    assert value(scrape, "ttsq_submits_total", outcome="cache_hit_l1") == 1
    assert value(scrape, "ttsq_cache_lookups_total", level="l1", result="hit") == 1
    assert value(scrape, "ttsq_cache_puts_total", level="l1") == 1


async def test_a_scrape_never_fails_while_redis_is_down(make_settings: Any) -> None:
    down = make_settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", redis_connect_timeout_s=0.2, metrics_scrape_timeout_s=0.3)
    async with api_client(down) as (client, _):
        assert (await client.post("/v1/tts/submit", json={"text": "hi", "seed": 1})).status_code == 503
        response = await client.get("/metrics")
    assert response.status_code == 200
    scrape = samples(response.text)
    assert value(scrape, "ttsq_redis_up") == 0
    assert value(scrape, "ttsq_submits_total", outcome="unavailable") == 1


async def test_request_ids_are_echoed_or_made_and_logged_with_the_task(
    redis: Any, make_settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with api_client(make_settings()) as (client, _):
        given = await client.post("/v1/tts/submit", json={"text": "Secret words.", "seed": 1}, headers={"X-Request-ID": "abc-123"})
        made = await client.get("/healthz", headers={"X-Request-ID": "bad id with spaces\n"})
    assert given.headers["x-request-id"] == "abc-123"
    assert re.fullmatch(r"[0-9a-f]{32}", made.headers["x-request-id"]), "a malformed id is replaced, never logged"
    task = given.json()["task_id"]
    about_the_submit = [r for r in caplog.records if getattr(r, "request_id", None) == "abc-123"]
    assert any(r.name == "ttsq.access" and getattr(r, "task_id", None) == task for r in about_the_submit), (
        "the access line names the task"
    )
    assert any(task in r.getMessage() for r in about_the_submit if r.name == "ttsq.api")
    assert not any("Secret words" in r.getMessage() for r in caplog.records), "users' text is never logged at info"


def test_the_api_refuses_to_run_as_one_of_several_uvicorn_processes() -> None:
    """uvicorn --workers N starts the app in child processes: each would keep its own metrics."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        message = pool.apply(_check_in_child)
    assert "one uvicorn process per container" in message


def _check_in_child() -> str:
    from ttsq.api.metrics import check_single_process

    try:
        check_single_process()
    except RuntimeError as exc:
        return str(exc)
    return "allowed"
