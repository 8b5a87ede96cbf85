"""A voice draw end to end: real uvicorn, a real worker on the tiny checkpoint, real redis-server.

The worker records the speaker embedding each preview was spoken with; the API ranks the candidates by the
Euclidean distance to the nearest existing voice; a kept candidate is saved with ``POST /v1/voices``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import numpy as np
from redis.asyncio import Redis

from tests.conftest import queue_config
from tests.support.service import Service
from ttsq.domain.draw import speaker_vector
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.store.queue import JobQueue


def finished_draw(service: Service, n: int) -> dict[str, Any]:
    started = httpx.post(f"{service.api_url}/v1/voices/draw", json={"n": n, "language": "en"})
    assert started.status_code == 202, started.text
    assert started.json()["status"] == "running"
    draw_id = started.json()["draw_id"]
    for _ in range(20):  # each long-poll answers once every preview has ended, or after 30 s
        body: dict[str, Any] = httpx.get(f"{service.api_url}/v1/voices/draw/{draw_id}", params={"wait": 30}, timeout=40).json()
        if body["status"] == "done":
            return body
    raise AssertionError(f"the draw never finished: {body}\n{service.logs()}")


async def recorded_speakers(service: Service, task_ids: list[str]) -> dict[str, str | None]:
    redis = Redis.from_url(service.redis.url, decode_responses=True)
    try:
        queue = JobQueue(redis, queue_config())
        jobs = {task_id: await queue.get(task_id) for task_id in task_ids}
        return {task_id: job.speaker if job is not None else None for task_id, job in jobs.items()}
    finally:
        await redis.aclose()


def test_a_draw_returns_the_most_different_voices_with_previews_and_one_is_saved(
    service: Service, tiny_decoder_engine: DecoderEngine
) -> None:
    service.start_worker("w1")
    body = finished_draw(service, 2)
    candidates = body["candidates"]
    assert len(candidates) == 2 and body["previews_done"] == body["previews_total"] == 2 * 2 + 2, "2 × 2 seeds, 2 built-ins"
    distances = [c["distance"] for c in candidates]
    assert distances == sorted(distances, reverse=True) and all(d > 0 for d in distances), "most different first"

    # The worker recorded the embedding its seed draws, and the distance is the L2 one to the nearest voice.
    speakers = asyncio.run(recorded_speakers(service, [c["task_id"] for c in candidates]))
    for candidate in candidates:
        recorded = speakers[candidate["task_id"]]
        assert recorded == tiny_decoder_engine.speaker_from_seed(candidate["seed"])
        builtins = {name: tiny_decoder_engine.speaker_from_seed(seed) for name, seed in (("zh_female", 2), ("zh_male", 1111))}
        expected = {name: float(np.linalg.norm(speaker_vector(recorded) - speaker_vector(e))) for name, e in builtins.items()}
        nearest = min(expected, key=lambda name: expected[name])
        assert candidate["nearest_voice"] == nearest and np.isclose(candidate["distance"], expected[nearest])

    preview = httpx.get(f"{service.api_url}{candidates[0]['preview_url']}")
    assert preview.status_code == 200 and preview.content[:4] == b"RIFF"

    saved = httpx.post(f"{service.api_url}/v1/voices", json={"name": "drawn", "seed": candidates[0]["seed"]})
    assert saved.status_code == 201, saved.text
    names = {v["name"] for v in httpx.get(f"{service.api_url}/v1/voices").json()["voices"]}
    assert "drawn" in names

    # Measured against the saved voice now: the next draw previews it too.
    assert finished_draw(service, 1)["previews_total"] == 1 * 2 + 3


def test_a_draw_past_its_limit_is_served_at_the_limit_and_an_unknown_draw_is_a_404(service: Service) -> None:
    capped = httpx.post(f"{service.api_url}/v1/voices/draw", json={"n": 11})
    assert capped.status_code == 202 and capped.json()["previews_total"] == 10 * 2 + 2, "DRAW_MAX_N × DRAW_OVERSAMPLE + built-ins"
    assert httpx.post(f"{service.api_url}/v1/voices/draw", json={"n": 0}).status_code == 422
    assert httpx.get(f"{service.api_url}/v1/voices/draw/abc123").status_code == 404
    reserved = httpx.post(f"{service.api_url}/v1/voices", json={"name": "draw", "seed": 1})
    assert reserved.status_code == 422 and "/v1/voices/draw draws voices" in reserved.text
    assert httpx.get(f"{service.api_url}/v1/voices/draw").status_code == 405, "not a voice's name: the draw's path"
