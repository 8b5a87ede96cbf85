"""docs/security.md's order of refusals: the key is looked at before a byte of the body, so a caller without a valid
key gets its 401 whatever its body (an oversized one included), and a caller with one gets 413 for an oversized body."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from tests.integration.api.test_security import bearer, keyed_api, new_key


async def test_an_oversized_body_gets_401_without_a_key_and_413_with_one(redis: Redis, make_settings: Any) -> None:
    async with keyed_api(make_settings) as (client, _app):
        key = await new_key(redis, "tts")
        for headers, status in [({}, 401), (bearer("ttsq_not_a_key"), 401), (bearer(key), 413)]:
            for declared in ({}, {"content-length": "200000000"}):
                answer = await client.post(
                    "/v1/tts/submit",
                    content=b"{" + b" " * 2_000_000 + b"}" if not declared else b"{}",
                    headers={"content-type": "application/json", **headers, **declared},
                )
                assert answer.status_code == status, (headers, declared, answer.text)
