"""Which jobs somebody hears as they are made (``TTSParams.listened``): set at submit by every route that streams its
own answer as it is made, and by a submit that says ``listen``; a plain submit, and a route that answers with the
finished file, leave it unset, so the worker decodes each chunk whole (docs/decoder.md, "Which chunks are decoded in pieces").

The real app on a real Redis; the worker is played by the test (claim, publish, complete), as in test_cartesia_api.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.conftest import api_client, queue_config
from tests.integration.api.test_cartesia_api import GUARD_S, RAW_24K, generation, play_worker
from ttsq.store.queue import JobQueue

WAV_24K = {"container": "wav", "encoding": "pcm_s16le", "sample_rate": 24000}
SPEECH = {"model": "tts-1", "voice": "alloy", "input": "Heard as it is made, or not."}
SAID = {"text": "Heard as it is made, or not."}
DIALOGUE = {"inputs": [{"text": "Heard as it is made.", "voice_id": "zh_female"}, {"text": "Or not.", "voice_id": "zh_female"}]}

ROUTES: list[tuple[str, dict[str, Any], bool]] = [
    # OpenAI: every format streams but WAV (the finished file); SSE streams WAV too.
    ("/v1/audio/speech", {**SPEECH, "response_format": "pcm"}, True),
    ("/v1/audio/speech", {**SPEECH, "response_format": "mp3"}, True),
    ("/v1/audio/speech", {**SPEECH, "response_format": "wav"}, False),
    ("/v1/audio/speech", {**SPEECH, "response_format": "wav", "stream_format": "sse"}, True),
    # ElevenLabs: the plain route streams but WAV, /stream always; /with-timestamps answers one JSON object.
    ("/v1/text-to-speech/zh_female?output_format=pcm_24000", SAID, True),
    ("/v1/text-to-speech/zh_female?output_format=wav_24000", SAID, False),
    ("/v1/text-to-speech/zh_female/stream?output_format=pcm_24000", SAID, True),
    ("/v1/text-to-speech/zh_female/with-timestamps?output_format=pcm_24000", SAID, False),
    ("/v1/text-to-speech/zh_female/stream/with-timestamps?output_format=pcm_24000", SAID, True),
    ("/v1/text-to-dialogue?output_format=pcm_24000", DIALOGUE, True),
    ("/v1/text-to-dialogue?output_format=wav_24000", DIALOGUE, False),
    # Cartesia: raw PCM streams, WAV is the finished file.
    ("/tts/bytes", generation(output_format=RAW_24K), True),
    ("/tts/bytes", generation(output_format=WAV_24K), False),
    # Google answers one JSON object with the whole file.
    (
        "/v1/text:synthesize",
        {
            "input": {"text": "Or not."},
            "voice": {"languageCode": "en-US", "name": "alloy"},
            "audioConfig": {"audioEncoding": "LINEAR16"},
        },
        False,
    ),
]


@pytest.mark.parametrize(("path", "body", "listened"), ROUTES, ids=[f"{p.split('?')[0]}-{n}" for n, (p, _, _) in enumerate(ROUTES)])
async def test_a_route_that_streams_its_answer_as_it_is_made_queues_a_listened_job(
    redis: Redis, make_settings: Any, path: str, body: dict[str, Any], listened: bool
) -> None:
    async with api_client(make_settings(cache_enabled=False)) as (client, _app):
        asking = asyncio.create_task(client.post(path, json=body))
        job = await asyncio.wait_for(play_worker(redis), GUARD_S)
        answer = await asyncio.wait_for(asking, GUARD_S)
    assert answer.status_code == 200, answer.text
    assert job.params.listened is listened


@pytest.mark.parametrize(("asked", "listened"), [({}, False), ({"listen": False}, False), ({"listen": True}, True)])
async def test_a_submit_is_listened_only_when_it_says_listen(
    redis: Redis, make_settings: Any, asked: dict[str, Any], listened: bool
) -> None:
    """A submitted task is heard as it is made only where its submitter says so: a plain submit is decoded chunk by chunk
    (its stream, followed anyway, still carries every sample). ``listen`` is not part of the cache key."""
    async with api_client(make_settings()) as (client, _app):
        answer = await client.post("/v1/tts/submit", json={"text": "A task of its own.", "seed": 5, **asked})
        assert answer.status_code == 202, answer.text
        job = await JobQueue(redis, queue_config()).get(answer.json()["task_id"])
        other = await client.post("/v1/tts/submit", json={"text": "A task of its own.", "seed": 5, "listen": not listened})
    assert job is not None and job.params.listened is listened
    assert other.json()["joined"] is True, "the same audio either way: one key, one job in flight"


async def test_a_dialogue_is_listened_only_when_it_says_listen(redis: Redis, make_settings: Any) -> None:
    body = {"lines": [{"speaker": "A", "text": "Hello there."}], "voices": {"A": "zh_female"}}
    async with api_client(make_settings()) as (client, _app):
        plain = await client.post("/v1/tts/dialogue", json=body)
        heard = await client.post("/v1/tts/dialogue", json={**body, "seed": 3, "listen": True})
    assert plain.status_code == heard.status_code == 202, (plain.text, heard.text)
    queue = JobQueue(redis, queue_config())
    jobs = [await queue.get(answer.json()["task_id"]) for answer in (plain, heard)]
    assert [job.params.listened for job in jobs if job is not None] == [False, True]
