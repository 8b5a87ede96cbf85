"""What a request may cost is bounded by what it is charged or allowed before anything is queued.

A voice draw paid one rate-limit token and queued 24 jobs; it now pays one per job it queues. A text of 500 digits
(within ``MAX_TEXT_CHARS``) was 383 s of audio once its numbers were read aloud; the limit now holds for the text
as it will be read. Real app, real redis-server.
"""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from tests.conftest import api_client

DRAW = {"n": 2, "language": "en"}
"""2 voices × DRAW_OVERSAMPLE (2) seeds, and a preview of each built-in seed voice (2): 6 jobs."""


async def test_a_voice_draw_pays_a_token_per_job_it_queues(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(rate_limit_burst=10, rate_limit_per_s=0.001)) as (client, _):
        first = await client.post("/v1/voices/draw", json=DRAW)
        assert first.status_code == 202, first.text
        second = await client.post("/v1/voices/draw", json=DRAW)
        assert second.status_code == 429, "6 tokens of 10 were spent, 6 more are needed"
        assert int(second.headers["Retry-After"]) > 0
        submits = [await client.post("/v1/tts/submit", json={"text": f"hello {n}"}) for n in range(5)]
    assert [answer.status_code for answer in submits] == [202, 202, 202, 202, 429], "4 tokens were left"


async def test_a_draw_larger_than_the_bucket_costs_the_whole_bucket_not_forever(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(rate_limit_burst=4, rate_limit_per_s=0.001)) as (client, _):
        assert (await client.post("/v1/voices/draw", json=DRAW)).status_code == 202
        assert (await client.post("/v1/tts/submit", json={"text": "hello"})).status_code == 429


@pytest.mark.parametrize(
    ("text", "reads_as"),
    [("1" * 100, 600), ("call " + "9" * 90 + ".", 546), ("编号" + "7" * 250, 502)],
)
async def test_a_text_whose_digits_read_aloud_pass_the_limit_is_refused_naming_it(
    redis: Redis, make_settings: Any, text: str, reads_as: int
) -> None:
    async with api_client(make_settings(max_text_chars=500)) as (client, _):
        refused = await client.post("/v1/tts/submit", json={"text": text})
        speech = await client.post("/v1/audio/speech", json={"model": "tts-1", "input": text * 10, "voice": "alloy"})
    assert refused.status_code == 422, refused.text
    error = refused.json()["detail"][0]
    assert error["loc"] == ["body", "text"] and f"reads as about {reads_as} characters" in error["msg"]
    assert "the limit is 500" in error["msg"]
    assert speech.status_code == 400 and "read aloud" in speech.json()["error"]["message"]


async def test_numbers_in_ordinary_text_are_taken(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(max_text_chars=200)) as (client, _):
        answer = await client.post("/v1/tts/submit", json={"text": "On 2026-12-04 I paid $1,234.56 for 3 apples."})
    assert answer.status_code == 202, answer.text
